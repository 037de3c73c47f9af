"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession.scala serves them.

A consumer of many partitions names them all in its first Fetch (session id 0, epoch 0: a full
fetch asking for a session); the server keeps them, with the fetch offset the client asked and
the high watermark and log start it was last answered, in a bounded cache and answers the
session's id. Each later Fetch (that id, the next epoch) names only what changed (partitions
added, fetch offsets moved, `forgotten_topics_data` removed) and is answered only the partitions
with something to say: records, a high watermark or log start the client has not been told, an
error (Kafka's CachedPartition.maybeUpdateResponseData). Epoch -1 is a sessionless full fetch.

Everything here runs on the event loop (a Fetch's context is made before its partitions are read
and its answer filtered after), so the cache needs no lock; the reading itself (klog.server.fetch)
sees a plain list of the session's partitions.

Bounds (docs/serve-limits.md): at most SLOTS sessions (Kafka's
max.incremental.fetch.session.cache.slots; a full cache evicts as Kafka's does: a session unused
for EVICTION_S, else the smallest one created more than EVICTION_S ago if the new one is
larger), at most PARTITIONS_MAX partitions held in all, and one client (its share key) at most
its share (--client-share) of each: past it the new session is not made (session id 0: the client
fetches in full, as from a Kafka broker whose cache is full) unless one of its own sessions is
stale, and a session grown past it by incremental fetches is dropped (FETCH_SESSION_ID_NOT_FOUND,
as after an eviction: the client starts again with a full fetch). A session keeps only names a
topic can have (names_kept).

A session is its client's (its share key): another client naming its id is answered as if there
were none, and cannot close it (Kafka does not check: anyone who learns or guesses a live id
could advance its epoch, close it, or learn its topics' names from the answers' errors).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from klog.errors import InvalidTopicError
from klog.protocol.kafka import E
from klog.server.limits import CLIENT_SHARE_DEFAULT, share_of
from klog.store.names import validate_topic_name

SLOTS = 1000  # max.incremental.fetch.session.cache.slots
EVICTION_S = 120.0  # min.incremental.fetch.session.eviction.ms
# Partitions held by every session together (300-470 bytes each, measured: under 50 MB), a quarter of them per client by
# default: a consumer of --max-request-entries (20,000) partitions fits in its share.
PARTITIONS_MAX = 100_000
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
TOPIC_IDS_VERSION = 13  # Fetch v13+ names topics by id: a session is of one kind or the other


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


class CachedPartition:
    """One partition of a session: what its client last asked (named as a request's partition, so
    that klog.server.fetch reads the session's partitions as a request's) and what it was last told.
    (A follower's fields, its log start and last fetched epoch, are not kept: klog serves consumers.)"""

    __slots__ = ("partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "high_watermark",
                 "local_log_start")

    def __init__(self, p: Any, high_watermark: int = -1, local_log_start: int = -1) -> None:
        self.partition = p.partition
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.current_leader_epoch = getattr(p, "current_leader_epoch", None)  # (v9+)
        self.high_watermark, self.local_log_start = high_watermark, local_log_start

    def update(self, p: Any) -> None:
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.current_leader_epoch = getattr(p, "current_leader_epoch", None)

    def must_respond(self, answer: Any, size: int) -> bool:
        """Kafka's maybeUpdateResponseData: whether the partition's `answer` (a
        fetch.PartitionAnswer, with `size` bytes of records) goes to the client, what it says now
        being what the client knows."""
        respond = size > 0  # records
        if self.high_watermark != answer.high_watermark:
            respond = True
            self.high_watermark = answer.high_watermark
        if self.local_log_start != answer.log_start_offset:
            respond = True
            self.local_log_start = answer.log_start_offset
        if answer.error:  # always answered; -1 so that the partition is answered again once it is well
            self.high_watermark = -1
            respond = True
        return respond  # (no preferred read replica nor diverging epoch: klog answers neither)


class ByName:
    """A topic of a session's request, by name (Fetch v7-v12): what klog.server.fetch reads."""

    __slots__ = ("topic", "partitions")

    def __init__(self, topic: str, partitions: list) -> None:
        self.topic, self.partitions = topic, partitions


class ById:
    """A topic of a session's request, by id (Fetch v13+)."""

    __slots__ = ("topic_id", "partitions")

    def __init__(self, topic_id: Any, partitions: list) -> None:
        self.topic_id, self.partitions = topic_id, partitions


class SessionRequest:
    """A Fetch request whose partitions are a session's: the request's own fields, the session's topics."""

    def __init__(self, request: Any, topics: list) -> None:
        self.max_bytes, self.isolation_level = request.max_bytes, request.isolation_level
        self.topics = topics


class FetchSession:
    __slots__ = ("id", "privileged", "owner", "by_ids", "created", "last_used", "epoch", "parts", "cached_size",
                 "evictable_all", "evictable_privileged")

    def __init__(self, session_id: int, privileged: bool, owner: str, by_ids: bool, now: float) -> None:
        self.id, self.privileged, self.owner, self.by_ids = session_id, privileged, owner, by_ids
        self.created = self.last_used = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.parts: dict[tuple[Any, int], CachedPartition] = {}  # (topic name or id, index), in answer order
        self.cached_size = -1  # the size the cache counts (-1: not in it)
        self.evictable_all = self.evictable_privileged = False

    def update(self, request: Any) -> tuple[int, int, int]:
        """Kafka's FetchSession.update: the request's partitions added or updated, then its forgotten
        ones removed. Returns (added, updated, removed)."""
        added = updated = removed = 0
        parts = self.parts
        by_ids = self.by_ids
        for t in request.topics:
            topic = t.topic_id if by_ids else str(t.topic)
            for p in t.partitions:
                key = (topic, p.partition)
                cached = parts.get(key)
                if cached is None:
                    parts[key] = CachedPartition(p)
                    added += 1
                else:
                    cached.update(p)
                    updated += 1
        for t in getattr(request, "forgotten_topics_data", ()):
            topic = t.topic_id if by_ids else str(t.topic)
            for index in t.partitions:
                if parts.pop((topic, int(index)), None) is not None:
                    removed += 1
        return added, updated, removed

    def request(self, request: Any) -> SessionRequest:
        """The session's partitions as a request's topics: each run of one topic's partitions, in the
        session's order (a partition answered with records moves to the end, as in Kafka, so the next
        answer's byte budget goes to the others first)."""
        topics: list = []
        kind = ById if self.by_ids else ByName
        last = object()
        run: list = []
        for (topic, _), cached in self.parts.items():
            if topic != last:
                run = []
                topics.append(kind(topic, run))
                last = topic
            run.append(cached)
        return SessionRequest(request, topics)


class FetchSessionCache:
    """The server's sessions (Kafka's FetchSessionCacheShard, one shard), bounded as the module says."""

    def __init__(self, slots: int = SLOTS, partitions_max: int = PARTITIONS_MAX,
                 client_share: float = CLIENT_SHARE_DEFAULT, eviction_s: float = EVICTION_S) -> None:
        self.slots, self.partitions_max, self.eviction_s = slots, partitions_max, eviction_s
        self.share_sessions = share_of(slots, client_share)
        self.share_partitions = share_of(partitions_max, client_share)
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.partitions = 0  # held by every session (their cached sizes)
        self.held: dict[str, list[int]] = {}  # owner (share key) -> [sessions, partitions]
        # what the server did, for tests and `-v` (Kafka's metrics: sessions, partitions cached, evictions)
        self.stats = {"full": 0, "incremental": 0, "created": 0, "refused": 0, "evictions": 0,
                      "named": 0, "answered": 0}

    def get(self, session_id: int, owner: str | None = None) -> FetchSession | None:
        """The session of that id; given `owner` (a share key), only if that client made it: another
        client's session is as unknown to it as one that does not exist (stricter than Kafka, which
        lets any client that names an id use or close the session: see Context)."""
        session = self.sessions.get(session_id)
        if session is None or (owner is not None and session.owner != owner):
            return None
        return session

    def _new_id(self) -> int:
        while True:  # (unguessable: a session id is all a client names)
            session_id = secrets.randbelow(MAX_EPOCH) + 1
            if session_id not in self.sessions:
                return session_id

    def remove(self, session: FetchSession) -> bool:
        if self.sessions.pop(session.id, None) is None:
            return False
        if session.cached_size > 0:
            self.partitions -= session.cached_size
        held = self.held[session.owner]
        held[0] -= 1
        held[1] -= max(0, session.cached_size)
        if held[0] == 0:
            del self.held[session.owner]
        session.cached_size = -1
        return True

    def touch(self, session: FetchSession, now: float) -> None:
        """Kafka's touch: the session is the most recently used; its size counted again; whether it
        may be evicted by a new session (privileged or not) decided as of now."""
        session.last_used = now
        self.sessions.move_to_end(session.id)
        size = len(session.parts)
        grown = size - max(0, session.cached_size)
        session.cached_size = size
        self.partitions += grown
        self.held[session.owner][1] += grown
        old = now - session.created > self.eviction_s
        session.evictable_privileged = not session.privileged or old
        session.evictable_all = old

    def over_bounds(self, session: FetchSession) -> bool:
        """Whether the session, grown by an incremental fetch, holds more than its client's share or the cache's."""
        grown = len(session.parts) - max(0, session.cached_size)
        return grown > 0 and (self.partitions + grown > self.partitions_max
                              or self.held[session.owner][1] + grown > self.share_partitions)

    def create(self, now: float, privileged: bool, owner: str, by_ids: bool, size: int,
               build: Callable[[], dict[tuple[Any, int], CachedPartition]]) -> int:
        """Kafka's maybeCreateSession, within the client's share and the cache's partitions: the new
        session's id, its partitions made by `build` (at most `size` of them) once there is room, or
        INVALID_SESSION_ID (0) when there is none."""
        if size > self.share_partitions or size > self.partitions_max or not self._room_for_owner(owner, size, now):
            self.stats["refused"] += 1
            return INVALID_SESSION_ID
        for _ in range(len(self.sessions) + 1):
            if len(self.sessions) < self.slots and self.partitions + size <= self.partitions_max:
                break
            if not self._try_evict(privileged, size, now):
                self.stats["refused"] += 1
                return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, owner, by_ids, now)
        session.parts = build()
        self.sessions[session.id] = session
        held = self.held.setdefault(owner, [0, 0])
        held[0] += 1
        session.cached_size = 0
        self.touch(session, now)
        self.stats["created"] += 1
        return session.id

    def _room_for_owner(self, owner: str, size: int, now: float) -> bool:
        """Whether `owner` may hold one more session of `size` partitions: within its share, after
        evicting its own stale sessions (unused for eviction_s) if need be, never anyone else's."""
        held = self.held.get(owner)
        while held is not None and (held[0] + 1 > self.share_sessions or held[1] + size > self.share_partitions):
            stale = next((s for s in self.sessions.values() if s.owner == owner), None)  # its least recently used
            if stale is None or now - stale.last_used <= self.eviction_s:
                return False
            self.remove(stale)
            self.stats["evictions"] += 1
            held = self.held.get(owner)
        return True

    def _try_evict(self, privileged: bool, size: int, now: float) -> bool:
        """Kafka's tryEvict: the least recently used session if stale; else the least valuable
        evictable one ((privileged, size, id) least) if the new session is worth more (its id counted as 0:
        a session of the same size is not evicted)."""
        lru = next(iter(self.sessions.values()), None)
        if lru is None:
            return False
        if now - lru.last_used > self.eviction_s:
            victim = lru
        else:
            candidates = [s for s in self.sessions.values()
                          if (s.evictable_privileged if privileged else s.evictable_all)]
            if not candidates:
                return False
            victim = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
            if (privileged, size, 0) < (victim.privileged, victim.cached_size, victim.id):
                return False
        self.remove(victim)
        self.stats["evictions"] += 1
        return True


def cache_of(server: Any) -> FetchSessionCache:
    """The server's session cache, made at its first use (one per server)."""
    cache = getattr(server, "fetch_sessions", None)
    if cache is None:
        limits = getattr(server, "limits", None)
        share = limits.client_share if limits is not None else CLIENT_SHARE_DEFAULT
        cache = server.fetch_sessions = FetchSessionCache(client_share=share)
    return cache


def named(request: Any) -> int:
    return sum(len(t.partitions) for t in request.topics)


def names_kept(request: Any) -> bool:
    """Whether a session may keep the topic names of `request` (v7-v12): only names a topic can have
    (at most 249 characters), so that what the cache holds is bounded by its partitions, not by
    what clients write (a name may be 32 KB). A Fetch naming another topic is answered without a
    session (its partitions: UNKNOWN_TOPIC_OR_PARTITION, as ever)."""
    for t in request.topics:
        try:
            validate_topic_name(str(t.topic))
        except InvalidTopicError:
            return False
    return True


class Context:
    """What one Fetch v7+ does with sessions (Kafka's FetchContext): `error` (a session error:
    answered at once, empty, session id 0), else `request` (what to read: the request itself, or
    the session's partitions) and `finish` (the answer's partitions and session id)."""

    __slots__ = ("cache", "error", "request", "session", "epoch", "create", "privileged", "owner", "by_ids")

    def __init__(self, cache: FetchSessionCache, request: Any) -> None:
        self.cache, self.request = cache, request
        self.error = E.none
        self.session: FetchSession | None = None
        self.create = False

    def finish(self, answers: list, now: float) -> tuple[list, int, E]:
        """(the answers to send, the session id, the top-level error) for `answers` (fetch.TopicAnswer,
        in the order of `request`'s partitions)."""
        cache = self.cache
        if self.create:
            def build() -> dict[tuple[Any, int], CachedPartition]:
                parts = {}
                for t, answer in zip(self.request.topics, answers, strict=True):
                    topic = t.topic_id if self.by_ids else str(t.topic)
                    for p, a in zip(t.partitions, answer.partitions, strict=True):
                        parts[(topic, p.partition)] = CachedPartition(p, a.high_watermark, a.log_start_offset)
                return parts

            cache.stats["answered"] += sum(len(t.partitions) for t in answers)
            if not self.by_ids and not names_kept(self.request):
                cache.stats["refused"] += 1
                return answers, INVALID_SESSION_ID, E.none
            return answers, cache.create(now, self.privileged, self.owner, self.by_ids, named(self.request),
                                         build), E.none
        session = self.session
        if session is None:
            return answers, INVALID_SESSION_ID, E.none
        if session.epoch != next_epoch(self.epoch):  # another request of the session came meanwhile
            return [], session.id, E.invalid_fetch_session_epoch
        parts = session.parts
        out = []
        answered = 0
        for t, answer in zip(self.request.topics, answers, strict=True):  # (the session's partitions, in order)
            topic = t.topic_id if session.by_ids else t.topic
            kept = []
            for cached, a in zip(t.partitions, answer.partitions, strict=True):
                if (a.data is None and a.range is None and a.converted is None and not a.error
                        and cached.high_watermark == a.high_watermark and cached.local_log_start == a.log_start_offset):
                    continue  # (the usual: nothing new; must_respond's answer without its call, ~2x faster)
                size = a.size
                if cached.must_respond(a, size):
                    kept.append(a)
                    if size:  # (to the end: the others' turn first next time)
                        key = (topic, cached.partition)
                        parts[key] = parts.pop(key)
                elif a.range is not None:
                    a.range.close()
            if not kept:
                continue
            answered += len(kept)
            if out and out[-1].name == answer.name and out[-1].topic_id == answer.topic_id:
                out[-1].partitions.extend(kept)  # (Kafka's answer groups consecutive partitions of a topic)
            else:
                answer.partitions = kept
                out.append(answer)
        cache.stats["answered"] += answered
        return out, session.id, E.none


def new_context(cache: FetchSessionCache, request: Any, version: int, owner: str, now: float, log: Any) -> Context:
    """Kafka's FetchManager.newContext for a Fetch v7+."""
    context = Context(cache, request)
    session_id, epoch = int(request.session_id), int(request.session_epoch)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: any session of its client it names is closed
        if session_id != INVALID_SESSION_ID:
            old = cache.get(session_id, owner)
            if old is not None:
                cache.remove(old)
        if epoch == INITIAL_EPOCH:
            cache.stats["full"] += 1
            cache.stats["named"] += named(request)
            context.create = True
            context.owner, context.by_ids = owner, version >= TOPIC_IDS_VERSION
            context.privileged = False  # (a follower's: klog serve has none, and trusts no client's replica id)
        return context
    session = cache.get(session_id, owner)
    if session is None:  # (or another client's: as if there were none)
        context.error = E.fetch_session_id_not_found
    elif session.epoch != epoch:
        context.error = E.invalid_fetch_session_epoch
    elif session.by_ids != (version >= TOPIC_IDS_VERSION):
        context.error = E.fetch_session_topic_id_error
    if context.error:
        log.debug("fetch session %d epoch %d: %s", session_id, epoch, context.error.name)
        return context
    assert session is not None
    cache.stats["incremental"] += 1
    cache.stats["named"] += named(request)
    if not session.by_ids and not names_kept(request):  # (as past its bounds: see names_kept)
        cache.remove(session)
        cache.stats["evictions"] += 1
        context.error = E.fetch_session_id_not_found
        return context
    added, updated, removed = session.update(request)
    if not session.parts:  # nothing left: closed, and this request answered without a session
        cache.remove(session)
        return context
    if cache.over_bounds(session):
        cache.remove(session)
        cache.stats["evictions"] += 1
        log.debug("fetch session %d: %d partitions, more than its share of the session cache: dropped",
                  session_id, len(session.parts))
        context.error = E.fetch_session_id_not_found
        return context
    cache.touch(session, now)
    session.epoch = next_epoch(session.epoch)
    context.session, context.epoch = session, epoch
    context.request = session.request(request)
    return context

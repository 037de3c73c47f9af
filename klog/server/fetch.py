"""Fetch: long polling, and zero-copy answers.

The response is laid out by hand (klog/server/fetch_response.py) because each partition's records
go from the segment file to the socket with os.sendfile: only their length must be known up front.
Everything else in the request is read with kio.

Waiting: a fetch that has less than min_bytes waits up to max_wait_ms on the server's one
high-watermark watcher (klog/server/watcher.py), woken at once by appends made through this server
to its partitions and, for appends by other processes (`klog produce`), by the watcher's poll.

On the event loop, or in a thread: a Fetch whose answer cannot wait for anything (every partition
open in this process, its state and bytes in the page cache, each range small: see
_collect_inline) is answered on the event loop, without the thread hop (~140 us of CPU on a small
VM, more than the rest of an empty Fetch). Everything else is collected in the server's thread
pool as before: a partition's first touch, metadata to read, a cold page, a large range (sent
by sendfile), transactions to walk (read_committed), down-conversion, any error.

Cold reads: a range not in the page cache is read in by the worker thread before the event loop
sendfiles it (klog/server/pagecache.py), so a slow disk holds that fetch, not every connection.

Fetch sessions (KIP-227, klog/server/fetch_sessions.py): a Fetch v7+ that asks for one (epoch 0)
is answered a session id; the session's later Fetches (epoch 1, 2, ...) name only what changed, and
are answered only the partitions with something to say. The partitions read, waited on and
authorized are the session's, every time.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

from klog.broker.offsets import stable_view
from klog.errors import (
    CorruptLogError,
    InvalidTopicError,
    KlogError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedCodecError,
)
from klog.protocol.apis import FETCH
from klog.protocol.framing import RawBody
from klog.protocol.kafka import ZERO_UUID, E, leader_epoch_error, topic_uuid
from klog.protocol.schemas import response_schema
from klog.security.acl import Operation, ResourceType
from klog.server import pagecache
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.server.fetch_response import encode, encode_one
from klog.server.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, cache_of, new_context
from klog.server.throttle import fetch_max_bytes
from klog.store import topic_read
from klog.store.names import validate_topic_name
from klog.store.topic_read import AT_RANGE, AT_STATE, RangeRead, WouldBlock, read_ranges

MAX_VERSION = 17  # v13+: topics by id; v15: replica state; v16: leader endpoints (a tagged field, absent)
READ_COMMITTED = 1  # the request's isolation_level
LAST_MESSAGE_SET_VERSION = 3  # Fetch v0-v3 read magic 0/1 message sets (Kafka 3.9 serves them, 4.0 does not)
DOWN_CONVERT_BYTES_MAX = 1 << 20  # stored bytes converted per partition and request for such a client
DOWN_CONVERSIONS = [0]  # partitions down-converted since start (Kafka's FetchMessageConversionsPerSec)
# Small ranges are read by the fetch's worker thread and go out with the answer's other bytes in one
# write: a sendfile costs the event loop ~100 us of CPU whatever its size (a suspension, a writer
# registration, a wake-up), a 16 KiB copy ~2 us. Larger ranges keep the zero-copy sendfile, and so
# does whatever passes INLINE_BYTES_MAX in one answer (memory held per answer stays bounded).
INLINE_RANGE_BYTES = 16 << 10
INLINE_BYTES_MAX = 1 << 20
# A Fetch answered on the event loop holds every other connection while it runs: at most this many
# partitions (~10-20 us each on a small VM: under ~0.6 ms, about four thread hops) and bytes read
# (256 KiB copied from the page cache: ~30 us). A wider or bigger Fetch goes to the thread pool.
LOOP_PARTITIONS_MAX = 32
LOOP_BYTES_MAX = 256 << 10


class PartitionAnswer(RangeRead):
    """One partition's answer: the store's read of it (RangeRead: its offsets, where its bytes are
    or the bytes of a small range, `upper` the last stable offset), and what the protocol adds."""

    error = E.none
    aborted: list[tuple[int, int]] | tuple[()] = ()  # (producer id, first offset)
    converted: bytes | None = None  # Fetch v0-v3: a message set down-converted from the stored batches
    part = None  # (what RangeRead asks: set for the partitions read)
    offset = max_bytes = 0

    def __init__(self, partition: int, error: E = E.none) -> None:
        self.partition = partition
        if error:
            self.error = error

    @property
    def last_stable_offset(self) -> int:
        return self.upper

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        if self.converted is not None:
            return len(self.converted)
        return self.range.length if self.range is not None else 0


@dataclass
class TopicAnswer:
    name: str
    partitions: list[PartitionAnswer] = field(default_factory=list)
    topic_id: Any = None  # uuid.UUID: v13+ name topics by id


ZSTD_FETCH_VERSION_MIN = 10  # KIP-110: older fetchers cannot be sent a zstd topic's batches


def _zstd_topic(ctx: RequestContext, topic: str) -> bool:
    try:
        return ctx.store.log_config(topic).compression_type == "zstd"
    except KlogError:
        return False  # an unknown topic: the partition's own lookup answers


def _valid_name(topic: str) -> bool:
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return False
    return True


def _topic_refused(ctx: RequestContext, topic: str) -> E:
    """What every partition of `topic` answers before its own state is looked at (decided once per
    topic and request): not authorized, or a zstd topic for a fetcher that cannot read zstd."""
    if not ctx.authorize(Operation.READ, ResourceType.TOPIC, topic):  # (the enums: no name look-up per request)
        return E.topic_authorization_failed
    if ctx.api_version < ZSTD_FETCH_VERSION_MIN and _zstd_topic(ctx, topic):  # Kafka 3.9's KafkaApis rule
        return E.unsupported_compression_type
    return E.none


def _stable_bound(part: Any, hw: int) -> int:
    """read_committed: the last stable offset, the bound of the partition's read."""
    stable, lock = stable_view(part)
    with lock:
        return stable.refresh(hw)


def _stable_bound_nowait(part: Any, hw: int) -> int:
    """_stable_bound on the event loop: the last stable offset as the partition's StableView knows
    it, when its last refresh walked every batch below `hw` (nothing appended since: the high
    watermark only grows) in the segment file it still reads (none replaced); else WouldBlock (a
    refresh lists the folder and reads headers: the pool's). The view's lock is not waited for."""
    stable, lock = stable_view(part)
    if not lock.acquire(blocking=False):
        raise WouldBlock  # (a thread refreshes it)
    try:
        lso = stable.known_lso(hw)
        if lso is None:
            raise WouldBlock
        return lso
    finally:
        lock.release()


def _aborted(part: Any, offset: int, upper: int, nowait: bool) -> list[tuple[int, int]]:
    """read_committed: (producer id, first offset) of the aborted transactions a read of
    [offset, upper) names. `nowait`: on the event loop, WouldBlock rather than wait for the lock."""
    stable, lock = stable_view(part)
    if not lock.acquire(blocking=not nowait):
        raise WouldBlock
    try:
        aborted = stable.aborted_between(offset, upper)
    finally:
        lock.release()
    return [(a.producer_id, a.first_offset) for a in aborted]


def _read_topic(ctx: RequestContext, topic: str, asked: Any, out: list[PartitionAnswer], budget: int,
                committed: bool, inline_left: int, nowait: bool = False,
                refresh: bool = True) -> tuple[int, int, bool]:
    """The answers of `asked` (a request topic's partitions) appended to `out`, in order: each
    partition's offsets and where its bytes are (lock-free, any process: klog.store.topic_read, one
    loop over the topic); a range of at most INLINE_RANGE_BYTES comes read (`data`), checked batch
    by batch as the store found it: the same bytes sendfile would send. Returns (the budget left,
    the inline bytes left, whether any partition failed). `nowait`: on the event loop (see
    _collect_inline), raising WouldBlock for anything not cached in this process. `refresh`: the
    topic's metadata may be re-read first (its first run of partitions in the request)."""
    appender = ctx.server.appender
    opened = ctx.store.opened_partitions()  # (a look that never opens one: the event loop's)
    old_fetcher = ctx.api_version <= LAST_MESSAGE_SET_VERSION
    errors = False
    reads: list[PartitionAnswer] = []
    for p in asked:
        index = p.partition
        answer = PartitionAnswer(index)
        out.append(answer)
        try:
            # (open already, the usual case: a dict look-up, no lock, no call; the first partition
            # refreshes the topic's metadata when due, off the loop)
            answer.part = None if refresh else opened.get((topic, index))
            if answer.part is None:
                if nowait:
                    answer.part = opened.get((topic, index))
                    if answer.part is None:
                        raise WouldBlock  # (its first touch opens files: the thread's)
                else:
                    answer.part = appender.partition(topic, index, refresh)
                refresh = False
            requested = getattr(p, "current_leader_epoch", None)  # v9+
            if requested is not None and requested >= 0:
                if nowait and ctx.store.cached_topic(topic) is None:
                    raise WouldBlock  # (the epoch is in the topic's metadata: not read on the loop)
                fenced = leader_epoch_error(ctx.store, topic, index, requested)
                if fenced != E.none:
                    answer.error = fenced
                    errors = True
                    continue
        except (KlogError, OSError) as e:
            if nowait:
                raise WouldBlock from e
            answer.error = _state_error(ctx, topic, index, e)
            errors = True
            continue
        answer.offset = p.fetch_offset
        # Fetch v0-v3: converted in memory, a bounded chunk per partition and request, never a segment
        answer.max_bytes = min(p.partition_max_bytes, DOWN_CONVERT_BYTES_MAX) if old_fetcher else p.partition_max_bytes
        reads.append(answer)
    bound = (_stable_bound_nowait if nowait else _stable_bound) if committed else None
    if not old_fetcher:  # (nowait: no failure, no range nor conversion come back; an offset out of range may)
        budget, inline_left = read_ranges(reads, budget, INLINE_RANGE_BYTES, inline_left, bound, nowait)
    for answer in reads:
        if old_fetcher:  # one at a time: what the conversion makes of a range is what the budget pays
            read_ranges((answer,), budget, bound=bound)
        elif answer.data is not None and not committed:
            continue  # (the usual: its bytes are read, nothing more to do)
        if answer.failure is not None:
            errors = True
            if answer.failed_at == AT_RANGE:
                answer.error = _read_error(ctx, topic, answer.partition, answer.offset, answer.failure)
            else:
                answer.error = _state_error(ctx, topic, answer.partition, answer.failure, answer.failed_at == AT_STATE)
            continue
        if answer.out_of_range:
            answer.error = E.offset_out_of_range
            errors = True
            continue
        found = answer.range
        if found is None and answer.data is None:
            continue
        try:
            if old_fetcher:
                answer.range = None
                answer.converted = _down_convert(found, ctx.api_version, answer.offset)
                budget -= len(answer.converted)
            elif found is not None:
                pagecache.ensure_cached(found)  # the loop's sendfile must not wait for the disk
            if committed:
                answer.aborted = _aborted(answer.part, answer.offset, answer.upper, nowait)
        except (OSError, KlogError) as e:
            answer.error = _read_error(ctx, topic, answer.partition, answer.offset, e)
            errors = True
    return budget, inline_left, errors


def _state_error(ctx: RequestContext, topic: str, index: int, e: BaseException, lookup: bool = True) -> E:
    """A partition whose state (or, `lookup` False, read_committed bound) could not be read."""
    if lookup and isinstance(e, (UnknownTopicError, UnknownPartitionError)):
        ctx.store.forget_topic_metadata(topic)
        return E.unknown_topic_or_partition
    ctx.log.warning("fetch %s-%d: %s", topic, index, e)
    return E.kafka_storage_error


def _read_error(ctx: RequestContext, topic: str, index: int, offset: int, e: BaseException) -> E:
    """A partition whose range could not be read: damage is CORRUPT_MESSAGE, a zstd batch for an
    old fetcher Kafka's answer too; unreadable, too many open files, lost state: an error, never
    "no data"."""
    ctx.log.warning("fetch %s-%d at %d: %s", topic, index, offset, e)
    if isinstance(e, UnsupportedCodecError):
        return E.unsupported_compression_type
    if isinstance(e, CorruptLogError):
        return E.corrupt_message
    return E.kafka_storage_error


def _down_convert(byte_range: Any, version: int, offset: int) -> bytes:
    """The range's batches as the message set a Fetch v0-v3 client reads (magic 0 for v0-v1, 1 for
    v2-v3), as Kafka 3.x down-converts; the range is closed."""
    from klog.store import legacy

    try:
        data = os.pread(byte_range.fd, byte_range.length, byte_range.position)
    finally:
        byte_range.close()
    DOWN_CONVERSIONS[0] += 1
    return legacy.from_v2_batches(data, legacy.MAGIC_V1 if version >= 2 else legacy.MAGIC_V0, offset)


def _check_topic(ctx: RequestContext, topic: str) -> None:
    """Once per topic and request: a topic another process deleted and created again is read afresh."""
    try:
        ctx.server.appender.check_topic(topic)
    except (KlogError, OSError):
        pass  # its partitions answer with the error


def _loop_topics(ctx: RequestContext, request: Any) -> dict | None:
    """The topics of `request` by id or name -> name, if the event loop may answer them: each one's
    metadata cached and unchanged since this process last looked (the metadata's last write id,
    one LMDB meta page read: no table read), the reading of it not due again, the caller's ACLs
    loaded; None otherwise (the thread pool answers)."""
    security = getattr(ctx.server, "security", None)
    if security is not None and security.authorizer.reload_due:
        return None  # (ACLs to read again)
    written = ctx.store.meta.last_write()
    now = time.monotonic()
    names: dict = {}
    for t in request.topics:
        name = _loop_topic(ctx, t, written, now)
        if name is None:
            return None
        topic_id = getattr(t, "topic_id", None)
        names[topic_id if topic_id is not None else name] = name
    return names


def _loop_topic(ctx: RequestContext, t: Any, written: int, now: float) -> str | None:
    """The name of the request's topic `t`, if the event loop may answer for it (see _loop_topics)."""
    appender = ctx.server.appender
    if not hasattr(t, "topic_id"):  # v0-v12: by name
        name = str(t.topic)
    else:  # (TopicIds.name reads the metadata: the id check_topic last saw stands, unchanged since)
        topic_id = t.topic_id  # (kio reads the zero id as None: no topic has it, the thread pool answers it)
        name = ctx.server.topic_ids.known_name(topic_id) if topic_id is not None else None
        known = appender.known_topic_id(name) if name is not None else None
        if known is None or topic_uuid(known) != topic_id:
            return None
    if not appender.topic_current(name, written, now):
        return None
    if ctx.api_version < ZSTD_FETCH_VERSION_MIN and ctx.store.cached_topic(name) is None:
        return None  # (a v4-v9 fetcher: the topic's compression.type is asked, from its cached metadata only)
    return name


def _collect_one(ctx: RequestContext, request: Any, t: Any) -> tuple[list[TopicAnswer], int, bool] | None:
    """_collect_inline's answer to a consumer's usual Fetch: one partition of one topic (`t`), read
    uncommitted, allowed, at the partition's current leader epoch (or none named), open in this
    process: what _loop_topics, _collect and _read_topic make of it, without their loops and
    bookkeeping over topics and partitions (about a third of the handler's time for one
    partition). None: anything else, which they decide. Raises WouldBlock as they do."""
    security = getattr(ctx.server, "security", None)
    if security is not None and security.authorizer.reload_due:
        return None
    store = ctx.store
    name = _loop_topic(ctx, t, store.meta.last_write(), time.monotonic())
    if name is None or _topic_refused(ctx, name) != E.none:
        return None
    (p,) = t.partitions
    index = p.partition
    part = store.opened_partitions().get((name, index))
    if part is None:
        return None
    requested = getattr(p, "current_leader_epoch", None)  # v9+
    if requested is not None and requested >= 0:
        try:
            if store.cached_topic(name) is None or leader_epoch_error(store, name, index, requested) != E.none:
                return None
        except (KlogError, OSError):
            return None
    answer = PartitionAnswer(index)
    answer.part, answer.offset, answer.max_bytes = part, p.fetch_offset, p.partition_max_bytes
    budget = fetch_max_bytes(ctx, int(request.max_bytes))
    left, _ = read_ranges((answer,), budget, INLINE_RANGE_BYTES, LOOP_BYTES_MAX, None, True)
    if answer.out_of_range:
        answer.error = E.offset_out_of_range
    return [TopicAnswer(name, [answer], topic_id=getattr(t, "topic_id", None))], budget - left, answer.out_of_range


def _collect_inline(ctx: RequestContext, request: Any) -> tuple[list[TopicAnswer], int, bool] | None:
    """_collect on the event loop, or None when the thread pool must answer: an old fetcher (v0-v3:
    down-conversion), more than LOOP_PARTITIONS_MAX partitions, a topic
    whose metadata this process must read, or a partition not open, not cached, not the usual read
    (read_ranges' WouldBlock)."""
    if not topic_read.NOWAIT or ctx.api_version <= LAST_MESSAGE_SET_VERSION:
        return None
    topics = request.topics
    try:
        if len(topics) == 1 and len(topics[0].partitions) == 1 and int(request.isolation_level) != READ_COMMITTED:
            found = _collect_one(ctx, request, topics[0])
            if found is not None:
                return found
        elif sum(len(t.partitions) for t in topics) > LOOP_PARTITIONS_MAX:
            return None
        names = _loop_topics(ctx, request)
        if names is None:
            return None
        return _collect(ctx, request, names)
    except WouldBlock:
        return None


def _collect(ctx: RequestContext, request: Any, loop_names: dict | None = None) -> tuple[list[TopicAnswer], int, bool]:
    """Every partition's answer: (the answers, the bytes they carry, whether any is an error).
    `loop_names`: on the event loop, the request's topics as _loop_topics found them."""
    budget = start_budget = fetch_max_bytes(ctx, int(request.max_bytes) if hasattr(request, "max_bytes") else 1 << 30)
    committed = int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    nowait = loop_names is not None
    inline_left = LOOP_BYTES_MAX if nowait else INLINE_BYTES_MAX
    errors = False
    out = []
    # What is decided once per topic and request, however many runs of its partitions the request
    # has (a fetch session's order, where partitions answered records move to the end, interleaves
    # its topics): a topic's name (by id), its refusal, its metadata check and refresh.
    names: dict = {}
    refusals: dict[str, E] = {}
    ids_listed = False  # an id not found made TopicIds read every topic: once per request
    for t in request.topics:
        if hasattr(t, "topic_id"):  # v13+: topics by id
            topic_id = t.topic_id or ZERO_UUID  # (kio reads the zero id as None)
            if nowait:
                name = loop_names[topic_id]
            elif topic_id in names:
                name = names[topic_id]
            else:
                name = (ctx.server.topic_ids.known_name(topic_id) if ids_listed  # (every topic read just now)
                        else ctx.server.topic_ids.name(topic_id))
                ids_listed = ids_listed or name is None
                names[topic_id] = name
            answer = TopicAnswer(name or "", topic_id=topic_id)
            if name is None:
                answer.partitions = [PartitionAnswer(int(p.partition), E.unknown_topic_id) for p in t.partitions]
                errors = errors or bool(answer.partitions)
                out.append(answer)
                continue
        else:
            answer = TopicAnswer(str(t.topic))
        out.append(answer)
        refused = refusals.get(answer.name)
        first = refused is None
        if first:
            refused = _topic_refused(ctx, answer.name)
            if refused == E.none and not nowait and not _valid_name(answer.name):
                refused = E.unknown_topic_or_partition  # no topic has that name: nothing to look up, nor to log
            if refused == E.none and not nowait:
                _check_topic(ctx, answer.name)  # (_loop_topics found it checked)
            refusals[answer.name] = refused
        if refused != E.none:
            answer.partitions = [PartitionAnswer(int(p.partition), refused) for p in t.partitions]
            errors = errors or bool(answer.partitions)
            continue
        budget, inline_left, failed = _read_topic(ctx, answer.name, t.partitions, answer.partitions, budget,
                                                  committed, inline_left, nowait, first)
        errors = errors or failed
    return out, start_budget - budget, errors


# Kafka's "erroneous" partitions (KafkaApis.handleFetchRequest): set aside before the read, they do
# not answer a Fetch at once while it has other partitions to wait for
REFUSALS = frozenset((E.topic_authorization_failed, E.unknown_topic_or_partition, E.unknown_topic_id))


def _at_once(answers: list[TopicAnswer]) -> bool:
    """Whether the errors among `answers` answer the Fetch now: an error of its read (Kafka's
    ReplicaManager answers at once: offset out of range, fenced epoch, storage), or nothing but
    refusals (no partition to wait for). A partition refused (not authorized, unknown topic, id or
    partition) beside others that may get records does not: else a consumer whose session (or
    request) holds one asks again at once, forever, where Kafka's Fetch waits max_wait_ms."""
    waits = False
    for t in answers:
        for p in t.partitions:
            if not p.error:
                waits = True
            elif p.error not in REFUSALS:
                return True
    return not waits


def _clear(answers: list[TopicAnswer]) -> None:
    """The answers without their byte ranges (closed): what stays true of a partition with no data."""
    for t in answers:
        for p in t.partitions:
            p.range = p.converted = p.data = None
            p.aborted = ()


def _close(answers: list[TopicAnswer]) -> None:
    for t in answers:
        for p in t.partitions:
            if p.range is not None:
                p.range.close()


def _distinct(request: Any) -> Any:
    """The request with each partition named once, as Kafka's FetchRequest.fetchData reads it (a
    LinkedHashMap of topic and partition): a partition named again takes the later entry's fields
    (fetch offset, max bytes, epochs) in the place where it was first named; consecutive
    partitions of one topic make one topic entry. `request` itself when it names none twice (the
    usual: one look per partition, nothing built)."""
    topics = request.topics
    if len(topics) == 1 and len(topics[0].partitions) <= 1:
        return request  # (a consumer's usual Fetch)
    by_id = bool(topics) and hasattr(topics[0], "topic_id")
    if (len({t.topic_id if by_id else t.topic for t in topics}) == len(topics)
            and all(len({p.partition for p in t.partitions}) == len(t.partitions) for t in topics)):
        return request  # (each topic named once, each of its partitions once: ~3 us for 100 partitions)
    first: dict[tuple[Any, int], int] = {}
    order: list[list[Any]] = []  # [topic entry, its key, partition entry], each partition once
    for t in topics:
        key = t.topic_id if by_id else t.topic
        for p in t.partitions:
            at = first.setdefault((key, p.partition), len(order))
            if at == len(order):
                order.append([t, key, p])
            else:
                order[at][2] = p  # (the last named wins, in the first one's place)
    runs: list[tuple[Any, Any, list[Any]]] = []
    for t, key, p in order:
        if runs and runs[-1][1] == key:
            runs[-1][2].append(p)
        else:
            runs.append((t, key, [p]))
    return dataclasses.replace(request, topics=tuple(dataclasses.replace(t, partitions=tuple(ps))
                                                     for t, _, ps in runs))


@register(FETCH, 0, MAX_VERSION)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    response_type = response_schema(FETCH, version)  # (cached per version)
    context = None
    if version < 7 or int(request.session_epoch) in (FINAL_EPOCH, INITIAL_EPOCH):
        request = _distinct(request)  # a full fetch (a session's incremental one: FetchSession.update's map)
    if version >= 7 and (int(request.session_epoch) != FINAL_EPOCH or int(request.session_id) != 0):
        context = new_context(cache_of(ctx.server), request, version, ctx.share_key, time.monotonic(), ctx.log)
        if context.error:  # (Kafka's SessionErrorContext: nothing read, no session named)
            return encode(response_type, version, [], context.error)
    wanted = request if context is None else context.request  # (an incremental fetch: the session's partitions)
    wait_s = max(0, request.max_wait.total_seconds())
    deadline = time.monotonic() + wait_s
    min_bytes = int(request.min_bytes)  # (0: "does not require any data", answered at once as in Kafka)
    while True:
        collected = _collect_inline(ctx, wanted)
        if collected is None:
            collected = await ctx.run_blocking(_collect, ctx, wanted)
        answers, total, errors = collected
        if (total >= min_bytes or (errors and _at_once(answers)) or deadline <= time.monotonic()
                or ctx.server.stopping or not any(t.partitions for t in answers)):  # (nothing to wait for)
            break
        _close(answers)
        # until one of these partitions' high watermark moves (the full answer is rebuilt only then;
        # a refused partition has none to watch)
        marks = {(t.name, p.partition): p.high_watermark for t in answers for p in t.partitions
                 if t.name and not p.error}
        moved = await ctx.server.watcher.wait(marks, deadline - time.monotonic())
        if not moved and total == 0 and not ctx.server.stopping:
            # max_wait passed and nothing moved (as of the watcher's last poll): the empty answer
            # stands, without reading every partition again (the common case of an idle consumer)
            _clear(answers)
            break
    if context is None:
        return _answer(response_type, version, answers)
    answers, session_id, error = context.finish(answers, time.monotonic())
    if error:
        _close(answers)
        return encode(response_type, version, [], error, session_id)
    return _answer(response_type, version, answers, session_id)


def _answer(response_type: type, version: int, answers: list[TopicAnswer], session_id: int = 0) -> RawBody:
    """The response: encode_one's for the usual answer to a consumer (one partition, its bytes
    read or none, no aborted transactions), else encode's."""
    if len(answers) == 1 and version >= 4 and len(answers[0].partitions) == 1:
        p = answers[0].partitions[0]
        if p.range is None and p.converted is None and not p.aborted:
            return encode_one(response_type, version, answers[0], p, session_id)
    return encode(response_type, version, answers, session_id=session_id)

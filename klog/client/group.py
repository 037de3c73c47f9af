"""GroupConsumer: a member of a consumer group, reading the partitions the group gives it.

    with store.group_consumer("billing", "orders", on_assign=print) as consumer:
        for record in consumer:          # follows, like a Kafka consumer; consumer.poll() also works
            handle(record)               # committed automatically every auto_commit_interval_ms

Life of a member: join (LMDB write: register, rebalance), then on every poll a cheap read of the
group's generation; when it moved, the member syncs: it revokes partitions it must give up
(all of them for the eager assignors range and roundrobin, only the moved ones for
cooperative-sticky), calling on_revoke and committing first, releases them, and acquires its new
partitions once their previous owner released them. A background thread heartbeats every
heartbeat_interval_ms while user code runs, expiring dead members (process gone, or silent past
session_timeout_ms) on the way. close() commits and leaves, so the others rebalance at once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from klog.client import assignors
from klog.client.records import Record
from klog.errors import GroupError, UsageError
from klog.meta.groups import (
    SESSION_TIMEOUT_MS_DEFAULT,
    TP,
    CommittedOffset,
    GroupFencedError,
    GroupsMeta,
    Member,
    UnknownMemberError,
    tp_key,
    validate_group_id,
)
from klog.store.limits import POLL_READ_BYTES
from klog.store.reader import Fetched, PartitionReader, reads_in_turn
from klog.store.txn import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED, StableView

POLL_INTERVAL_MS = 20  # idle wait between fetches; also how soon a member notices a rebalance
STABLE_RETRY_MS = 100  # Kafka's retry.backoff.ms: how often a partition waiting for stable offsets asks again
HEARTBEAT_INTERVAL_MS_DEFAULT = 1000  # Kafka's is 3000; a local heartbeat is one small LMDB write
AUTO_COMMIT_INTERVAL_MS_DEFAULT = 5000  # Kafka's auto.commit.interval.ms
MAX_POLL_INTERVAL_MS_DEFAULT = 300_000  # Kafka's: a member whose code has not polled for this long leaves
OFFSET_RESETS = ("earliest", "latest", "none")

Callback = Callable[[list[TP]], None]


@dataclass
class GroupConfig:
    """Kafka's consumer settings that matter here; `from_properties` reads them by their Kafka names."""

    assignor: str = "range"
    session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS_DEFAULT
    auto_offset_reset: str = "earliest"  # Kafka's default is latest; klog consume starts at the beginning
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = AUTO_COMMIT_INTERVAL_MS_DEFAULT
    max_poll_interval_ms: int = MAX_POLL_INTERVAL_MS_DEFAULT
    client_id: str = "klog"
    isolation_level: str = READ_UNCOMMITTED  # Kafka's clients' default

    PROPERTIES = {
        "partition.assignment.strategy": "assignor", "session.timeout.ms": "session_timeout_ms",
        "heartbeat.interval.ms": "heartbeat_interval_ms", "auto.offset.reset": "auto_offset_reset",
        "enable.auto.commit": "enable_auto_commit", "auto.commit.interval.ms": "auto_commit_interval_ms",
        "max.poll.interval.ms": "max_poll_interval_ms", "client.id": "client_id",
        "isolation.level": "isolation_level",
    }

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> GroupConfig:
        config = cls()
        for name, text in props.items():
            attr = cls.PROPERTIES.get(name)
            if attr is None:
                raise UsageError(f"unknown consumer property '{name}': use one of {', '.join(cls.PROPERTIES)}")
            kind = type(getattr(config, attr))
            if kind is bool:
                if text not in ("true", "false"):
                    raise UsageError(f"{name} must be true or false, not '{text}'")
                setattr(config, attr, text == "true")
            elif kind is int:
                try:
                    setattr(config, attr, int(text))
                except ValueError:
                    raise UsageError(f"{name} must be a whole number of milliseconds, not '{text}'") from None
            else:
                setattr(config, attr, text)
        return config.validated()

    def validated(self) -> GroupConfig:
        assignors.validate(self.assignor)
        if self.auto_offset_reset not in OFFSET_RESETS:
            raise UsageError(f"auto.offset.reset must be one of {', '.join(OFFSET_RESETS)}")
        if self.session_timeout_ms < 100:
            raise UsageError("session.timeout.ms must be at least 100")
        if not 10 <= self.heartbeat_interval_ms:
            raise UsageError("heartbeat.interval.ms must be at least 10")
        if self.max_poll_interval_ms < 1:
            raise UsageError("max.poll.interval.ms must be at least 1")
        if self.auto_commit_interval_ms < 0:
            raise UsageError("auto.commit.interval.ms must be 0 or more")
        if self.isolation_level not in ISOLATION_LEVELS:
            raise UsageError(f"isolation.level must be {' or '.join(ISOLATION_LEVELS)}")
        # Kafka's rule of thumb: at least three heartbeats per session, or one late one expires you
        self.heartbeat_interval_ms = min(self.heartbeat_interval_ms, self.session_timeout_ms // 3)
        return self


class GroupConsumer:
    def __init__(self, store, group: str, topics: list[str], config: GroupConfig | None = None, *,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None, follow: bool = True,
                 poll_interval_ms: int = POLL_INTERVAL_MS, clock: Callable[[], float] = time.monotonic,
                 groups_clock: Callable[[], int] | None = None, **settings: object) -> None:
        validate_group_id(group)
        if not topics:
            raise UsageError("a group consumer needs at least one topic")
        for t in topics:
            store.topic(t)  # unknown topic: fail before joining
        self.store = store
        self.group = group
        self.topics = sorted(set(topics))
        self.config = (config or GroupConfig(**settings)).validated()  # type: ignore[arg-type]
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.follow = follow
        self.poll_interval_ms = poll_interval_ms
        self._now = clock  # seconds; tests step it instead of sleeping past a timeout
        # the group's session bookkeeping (epoch ms, GroupsMeta's clock); tests step it instead of
        # waiting out session timeouts while the heartbeat thread runs
        self.meta = GroupsMeta(store.meta) if groups_clock is None else GroupsMeta(store.meta, clock=groups_clock)
        self.eager = self.config.assignor in assignors.EAGER
        self.generation = -1  # not synced yet
        self._cursors: dict[TP, PartitionReader] = {}
        self._poll_next = 0  # the held partition the next poll reads first
        self._consumed: dict[TP, int] = {}  # offset after the last record handed out and processed
        # where auto.offset.reset started a partition nothing has been read from yet (no committed offset,
        # or one out of range): auto-commit commits it, as Kafka's consumer commits every assigned
        # partition's position, so the group's next member starts there too (`-o end` then a restart)
        self._reset_to: dict[TP, int] = {}
        # held partitions whose offsets a transaction has staged and not yet completed (read_committed):
        # no cursor until it ends, as Kafka's consumer retries OffsetFetch (require_stable, KIP-447)
        # while the answer is UNSTABLE_OFFSET_COMMIT; starting at the offsets from before it re-reads
        # what the transaction's output already covers
        self._unstable: set[TP] = set()
        self._last_stable_check = 0.0
        self._in_hand: Record | None = None  # the record an iterator handed out last
        self._target: set[TP] = set()
        self._epoch = 0  # bumps when partitions are revoked: an iterator drops what it fetched before
        self._rebalancing = False
        self._closed = False
        self._last_check = 0.0
        self._last_commit = self._now()
        self._last_poll = self._now()
        self._lock = threading.Lock()
        self._expelled_id: str | None = None
        self._heartbeat_error: BaseException | None = None
        self._stop = threading.Event()
        self.member_id = ""
        try:
            self._join()
        except BaseException:
            if self.member_id:  # joined, then failed (auto.offset.reset=none, a callback): do not linger
                self.meta.leave(self.group, self.member_id, assignors.assign)
            raise
        self._thread = threading.Thread(target=self._heartbeat_loop, name=f"klog-heartbeat-{group}", daemon=True)
        self._thread.start()

    # -- membership ------------------------------------------------------------------------------
    def _join(self) -> None:
        member_id = f"{self.config.client_id}-{uuid.uuid4().hex[:12]}"
        member = Member.local(member_id, self.config.client_id, self.topics, self.config.assignor,
                              self.config.session_timeout_ms)
        self.meta.join(self.group, member, assignors.assign)
        with self._lock:  # only now: the heartbeat thread must not heartbeat a member not yet registered
            self.member_id = member_id
            self._expelled_id = None
        self.generation = -1
        self._sync()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.config.heartbeat_interval_ms / 1000):
            with self._lock:
                member_id = self.member_id
            try:
                self.meta.heartbeat(self.group, member_id, assignors.assign)
                if self._now() - self._last_poll > self.config.max_poll_interval_ms / 1000:
                    # user code is stuck: leave (as Kafka's heartbeat thread does) so the others can take
                    # the partitions; its commits are fenced from now on and its next poll rejoins
                    self.meta.leave(self.group, member_id, assignors.assign)
                    with self._lock:
                        if member_id == self.member_id:
                            self._expelled_id = member_id
            except UnknownMemberError:
                with self._lock:
                    if member_id == self.member_id:
                        self._expelled_id = member_id
            except Exception as e:  # noqa: BLE001 - handed to the main thread, raised by its next poll
                self._heartbeat_error = e
                return

    def _check_membership(self) -> None:
        if self._heartbeat_error is not None:
            raise GroupError(f"heartbeat of group '{self.group}' failed: {self._heartbeat_error}")
        if self._expelled_id is not None:
            self._lose_all()
            self._join()

    def _lose_all(self) -> None:
        """Expelled: our partitions already belong to others, so there is nothing to commit or release."""
        self._cursors.clear()
        self._consumed.clear()
        self._reset_to.clear()
        self._unstable.clear()
        self._target = set()
        self._epoch += 1

    def _maybe_sync(self) -> None:
        """Every poll_interval_ms, one LMDB read: sync if the generation moved or a partition we wait for
        was released (writes, which fsync, happen only then)."""
        self._check_membership()
        now = time.monotonic()  # a throttle of LMDB reads, not a group timeout: real time
        if now - self._last_check < self.poll_interval_ms / 1000:
            return
        self._last_check = now
        doc = self.meta.peek(self.group)
        if doc is None or doc.generation != self.generation:
            self._sync()
            return
        if self._unstable and now - self._last_stable_check >= STABLE_RETRY_MS / 1000:
            self._start_stable()
        waiting = self._target - set(self._cursors) - self._unstable
        if any(doc.owners.get(tp_key(tp)) in (None, self.member_id) for tp in waiting):
            self._sync()

    def _sync(self) -> None:
        """Adopt the current generation: revoke what we must give up (committing it), take what is free."""
        try:
            view = self.meta.heartbeat(self.group, self.member_id, assignors.assign)
        except UnknownMemberError:
            self._lose_all()
            self._join()
            return
        commits: dict[TP, tuple[int, str]] = {}
        revoked: list[TP] = []
        if view.generation != self.generation:
            target = set(view.target)
            # what the group says we hold counts too (a partition whose start offset failed has no cursor)
            held = set(self._cursors) | set(view.owned)
            revoked = sorted(held if self.eager else held - target)
            if revoked:
                commits = self._revoke([tp for tp in revoked if tp in self._cursors])
            self.generation = view.generation
            self._target = target
        wanted = sorted(self._target - (set(self._cursors) - set(revoked)))
        # the staged offsets first, then the committed ones (meta.sync reads them), as the server's
        # OffsetFetch does: the other way round, a transaction completing in between is neither
        pending = self._pending_offsets() if wanted else set()
        view = self.meta.sync(self.group, self.member_id, self.generation, assignors.assign, commits=commits,
                              release=revoked, acquire=wanted)
        for tp in revoked:
            self._cursors.pop(tp, None)
            self._consumed.pop(tp, None)
            self._reset_to.pop(tp, None)
            self._unstable.discard(tp)
        if view.generation != self.generation:
            return  # another rebalance started meanwhile: the next poll syncs again
        for tp in view.acquired:
            if tp in pending:
                self._unstable.add(tp)
            else:
                self._unstable.discard(tp)
                self._start(tp, view.committed.get(tp))
        self._last_stable_check = time.monotonic()
        if view.acquired and self.on_assign is not None:
            self.on_assign(sorted(view.acquired))

    def _pending_offsets(self) -> set[TP]:
        """At read_committed, the group's partitions whose offsets a transaction has staged and not
        completed (the broker's view, the one OffsetFetch's require_stable answers from)."""
        if self.config.isolation_level != READ_COMMITTED:
            return set()
        from klog.meta.transactions import TransactionsMeta

        return TransactionsMeta(self.store.meta).pending_offsets(self.group)

    def _start_stable(self) -> None:
        """Start the partitions that waited for a transaction's offsets, now that it has ended."""
        self._last_stable_check = time.monotonic()
        pending = self._pending_offsets()
        ready = self._unstable - pending
        if not ready:
            return
        committed = self.meta.committed(self.group)  # read after the pending ones, as in _sync
        for tp in sorted(ready):
            self._unstable.discard(tp)
            self._start(tp, committed.get(tp))

    def _start(self, tp: TP, committed: CommittedOffset | None) -> None:
        part = self.store.partition(*tp)
        stable = StableView(part.leader) if self.config.isolation_level == READ_COMMITTED else None
        start = self._start_offset(tp, committed)
        if committed is None or committed.offset != start:
            self._reset_to[tp] = start
        self._cursors[tp] = PartitionReader(part, start, stable=stable)

    def _revoke(self, revoked: list[TP]) -> dict[TP, tuple[int, str]]:
        """Call on_revoke (it may commit), then return the auto-commits for the revoked partitions."""
        self._epoch += 1
        self._in_hand = None
        if self.on_revoke is not None and revoked:
            self._rebalancing = True
            try:
                self.on_revoke(revoked)
            finally:
                self._rebalancing = False
        if not self.config.enable_auto_commit:
            return {}
        positions = self._positions()
        return {tp: (positions[tp], "") for tp in revoked if tp in positions}

    def reset_positions(self) -> dict[TP, int]:
        """Partitions held that nothing was read from yet, at the offset auto.offset.reset started them
        (no committed offset, or one out of range): what Kafka's consumer commits for them."""
        return {tp: o for tp, o in self._reset_to.items() if tp in self._cursors}

    def _positions(self) -> dict[TP, int]:
        """What a commit of everything processed commits: the offset after the last record processed,
        and where a partition nothing was read from yet was started by auto.offset.reset."""
        return {**self._reset_to, **self._consumed}

    def _start_offset(self, tp: TP, committed: CommittedOffset | None) -> int:
        """The committed offset if the log still has it, else where auto.offset.reset says.

        In range means within [log start, high watermark] at either isolation level, as Kafka's
        fetch bounds it: a read_committed reader at a committed offset past the last stable offset
        waits there until the transactions below it end (auto.offset.reset re-read everything)."""
        part = self.store.partition(*tp)
        low, high = part.log_start_offset(), part.high_watermark()
        if committed is not None and low <= committed.offset <= high:
            return committed.offset
        reset = self.config.auto_offset_reset
        if reset == "none":
            why = "no committed offset" if committed is None else f"committed offset {committed.offset} is out of " \
                                                                   f"range [{low}, {high}]"
            raise GroupError(f"{tp[0]}-{tp[1]}: {why} in group '{self.group}' and auto.offset.reset is none")
        if reset == "earliest":
            return low
        if self.config.isolation_level == READ_COMMITTED:
            return StableView(part.leader).refresh(high)  # a read_committed consumer's latest: the LSO
        return high

    # -- reading ---------------------------------------------------------------------------------
    def assignment(self) -> list[TP]:
        """The partitions this member holds right now (those waiting for a transaction's offsets
        too, as in Kafka's assignment: they are read once it ends)."""
        return sorted(set(self._cursors) | self._unstable)

    def position(self, topic: str, partition: int) -> int:
        return self._cursors[(topic, partition)].offset

    def _fetches(self) -> list[tuple[TP, Fetched]]:
        """One poll's reads of the partitions held, in turn up to POLL_READ_BYTES (reads_in_turn);
        cursors move past what was read."""
        polled, self._poll_next = reads_in_turn(list(self._cursors.items()), _fetch_of, self._poll_next,
                                                POLL_READ_BYTES)
        return [(tp, fetched) for (tp, _), fetched in polled]

    def _fetch(self) -> list[Record]:
        return [Record(topic, partition, o, ts, ts_type, k, v, h)
                for (topic, partition), fetched in self._fetches()
                for ts_type, records in fetched.record_runs() for o, ts, k, v, h in records]

    def _fetch_values(self) -> list[tuple[TP, list[bytes | None], int]]:
        return [(tp, fetched.values(), fetched.next_offset) for tp, fetched in self._fetches()]

    def _caught_up(self) -> bool:
        if self._target - set(self._cursors) or self.meta.peek_generation(self.group) != self.generation:
            return False
        return all(c.offset >= c.end() for c in self._cursors.values())

    def _poll_records(self, timeout_ms: int | None, fetch: Callable[[], list] | None = None) -> list | None:
        """Fetch once, waiting up to timeout_ms for data (None: until data, or caught up if not following)."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        fetch = fetch or self._fetch
        while not self._closed:
            self._last_poll = self._now()
            self._maybe_sync()
            self._maybe_auto_commit()
            records = fetch()
            if records:
                return records
            if not self.follow and self._caught_up():
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return []
            time.sleep(self.poll_interval_ms / 1000)
        return None

    def poll(self, timeout_ms: int = 0) -> list[Record]:
        """Records of the partitions held, in partition order; returned records count as processed
        by the next poll (Kafka's contract), so auto-commit then commits them."""
        records = self._poll_records(timeout_ms) or []
        for r in records:
            self._consumed[(r.topic, r.partition)] = r.offset + 1
        return records

    def batches(self, timeout_ms: int | None = None) -> Iterator[list[Record]]:
        """Lists of records as fetched (an empty list after timeout_ms without data, if given); ends when
        caught up unless following. A list counts as processed when the next one is asked for."""
        while not self._closed:
            records = self._poll_records(timeout_ms)
            if records is None:
                return
            epoch = self._epoch
            yield records
            if self._epoch == epoch:
                for r in records:
                    self._consumed[(r.topic, r.partition)] = r.offset + 1

    def value_batches(self, timeout_ms: int | None = None) -> Iterator[list[tuple[TP, list[bytes | None], int]]]:
        """Like batches(), values only (no Record objects: the fast path for `klog consume --group`):
        lists of (partition, values, offset after them)."""
        while not self._closed:
            chunks = self._poll_records(timeout_ms, self._fetch_values)
            if chunks is None:
                return
            epoch = self._epoch
            yield chunks
            if self._epoch == epoch:
                for tp, _, next_offset in chunks:
                    self._consumed[tp] = next_offset

    @property
    def rebalances(self) -> int:
        """Counts revocations: when it changes, records fetched before may belong to someone else now."""
        return self._epoch

    def __iter__(self) -> Iterator[Record]:
        """Records one by one (following, unless follow=False: then until caught up); a record counts as
        processed when the next one is asked for, or when commit() is called while it is in hand."""
        while not self._closed:
            records = self._poll_records(None)
            if records is None:
                return
            epoch = self._epoch
            for r in records:
                if self._epoch != epoch or self._closed:
                    break  # a rebalance (from a commit() inside the loop) took partitions: refetch
                self._in_hand = r
                yield r
                if self._in_hand is r:
                    self._consumed[(r.topic, r.partition)] = r.offset + 1
                self._in_hand = None

    # -- committing ------------------------------------------------------------------------------
    def _mark_in_hand(self) -> None:
        r = self._in_hand
        if r is not None and (r.topic, r.partition) in self._cursors:
            self._consumed[(r.topic, r.partition)] = r.offset + 1

    def commit(self, offsets: dict[TP, int] | None = None, metadata: str = "") -> dict[TP, int]:
        """Commit `offsets` (next offset to read, per partition) or everything processed so far.

        Raises GroupFencedError when this member was expelled (session expired) or a partition is not
        its own. A rebalance this member has not synced to yet does not fence it: until its next poll
        releases them, nobody else can hold its partitions. Returns what was committed.
        """
        if offsets is None:
            self._mark_in_hand()
            offsets = self._positions()
        if not offsets:
            return {}
        payload = {tp: (o, metadata) for tp, o in offsets.items()}
        if self._rebalancing:  # inside on_revoke: the partitions are still ours until released
            self.meta.sync(self.group, self.member_id, self.generation, assignors.assign, commits=payload)
            return dict(offsets)
        try:
            self.meta.commit(self.group, self.member_id, self.generation, payload)
        except GroupFencedError:
            if self._expelled_id is not None or self.meta.peek_generation(self.group) == self.generation:
                raise
            # the group moved on since our last poll, but nobody can take these partitions before we
            # release them (at our next poll), so they are still ours to commit: ownership is checked
            self.meta.sync(self.group, self.member_id, self.generation, assignors.assign, commits=payload)
        self._last_commit = self._now()
        for tp in offsets:
            self._reset_to.pop(tp, None)  # (committed, or a position of the caller's own committed instead)
        return dict(offsets)

    def _maybe_auto_commit(self) -> None:
        if not self.config.enable_auto_commit or not (self._consumed or self._reset_to):
            return
        if self._now() - self._last_commit >= self.config.auto_commit_interval_ms / 1000:
            self.commit({tp: o for tp, o in self._positions().items() if tp in self._cursors})

    def committed(self) -> dict[TP, int]:
        """The group's committed offsets for this member's topics."""
        return {tp: c.offset for tp, c in self.meta.committed(self.group).items() if tp[0] in self.topics}

    # -- leaving ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Revoke (on_revoke), commit if auto-commit is on, and leave so the others rebalance now."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join()
        commits: dict[TP, tuple[int, str]] = {}
        try:
            if self._cursors and self._expelled_id is None:
                commits = self._revoke(sorted(self._cursors))
        finally:  # leave even if on_revoke failed: the others should not wait for a session timeout
            try:
                self.meta.leave(self.group, self.member_id, assignors.assign, commits=commits)
            except GroupFencedError:
                self.meta.leave(self.group, self.member_id, assignors.assign)  # lost them meanwhile: just leave
            self._cursors.clear()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fetch_of(held: tuple[TP, PartitionReader]) -> Fetched | None:
    return held[1].fetch()

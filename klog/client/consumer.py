"""Consumer: reads partitions below their high watermark, merged in timestamp order.

Without `follow` it reads to the end each partition had when the consumer started and stops,
like `cat`; with `follow` it waits for new records like `tail -f`, polling the partitions'
state files (one pread each) every poll_interval_ms and sleeping in between.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Self

from klog.broker.resolve import resolve_partitions
from klog.client.records import Record
from klog.errors import CorruptLogError, OffsetOutOfRangeError, UnknownTopicError, UsageError
from klog.store.limits import MERGED_READ_BYTES, MERGED_READ_BYTES_MIN, POLL_READ_BYTES
from klog.store.partition import Partition
from klog.store.plain import FrozenPlain
from klog.store.reader import Fetched, PartitionReader, reads_in_turn
from klog.store.txn import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED, StableView

POLL_INTERVAL_MS = 20  # -f latency budget is 100 ms p99; 20 ms polls cost ~50 preads/s per partition
MERGED_CHUNK_VALUES = 4096  # value_chunks of several partitions: at least this many values a chunk
TOPIC_CHECK_INTERVAL_S = 0.5  # a follower notices a deleted topic within this (one LMDB read per topic)
FIRST_READ_BYTES = 64 << 10  # a partition's first read (then doubled up to the full read size): -n 1 reads little


class StartKind(StrEnum):
    """Where a read starts (StartSpec.kind); a StrEnum, so each also equals its name as a string."""

    BEGINNING = "beginning"  # the log start
    END = "end"  # the high watermark: only what comes next
    OFFSET = "offset"  # an absolute offset (value)
    RELATIVE = "relative"  # value records before the end (kcat's -o -N)
    TIMESTAMP = "timestamp"  # the first record at or after value (epoch ms)
    TAIL = "tail"  # the last value records (--tail, --last)
    COMMITTED = "committed"  # a group's committed offset


class StartSpec(FrozenPlain):
    """Where to start: kcat's -o (beginning, end, N, -N), a timestamp, or last N (--tail)."""

    _fields = ("kind", "value")
    kind: StartKind
    value: int

    def __init__(self, kind: StartKind | str = StartKind.BEGINNING, value: int = 0) -> None:
        object.__setattr__(self, "kind", StartKind(kind))  # a kind's name as a string works too
        object.__setattr__(self, "value", value)

    @classmethod
    def parse(cls, text: str) -> StartSpec:
        text = text.strip()
        if text in ("beginning", "earliest", "start"):
            return cls(StartKind.BEGINNING)
        if text in ("end", "latest"):
            return cls(StartKind.END)
        try:
            n = int(text)
        except ValueError:
            raise UsageError(f"invalid offset '{text}': use beginning, end, N or -N") from None
        return cls(StartKind.RELATIVE, n) if text.startswith("-") else cls(StartKind.OFFSET, n)

    def offset(self, low: int, high: int, found: int | None, where: str, what: str = "offset") -> int:
        """The first offset to read of a partition holding low..high (`where` names it in errors, `what`
        the option that asked); `found` is the partition's first offset at or after the timestamp (kind
        "timestamp")."""
        if self.kind is StartKind.BEGINNING:
            return low
        if self.kind is StartKind.END:
            return high
        if self.kind is StartKind.OFFSET:
            if self.value > high:
                raise OffsetOutOfRangeError(f"{what} {self.value} is past the end ({high}) of {where}")
            return max(self.value, low)
        if self.kind in (StartKind.RELATIVE, StartKind.TAIL):
            return max(low, high - abs(self.value))
        if self.kind is StartKind.TIMESTAMP:
            return high if found is None else max(found, low)
        raise AssertionError(self)


class PartitionCursor(PartitionReader):
    """A partition's read cursor, with what the consumer adds: --until's timestamp and done.

    `first_bytes`: the first read's size, doubled at each read up to the full size, so that
    `klog consume t -n 1` decodes one small read of a big topic, not a megabyte of records (a long
    read pays four more reads)."""

    def __init__(self, topic: str, partition: int, part: Partition, stop_ts: int | None,
                 stable: StableView | None, first_bytes: int | None = None) -> None:
        super().__init__(part, 0, stable=stable)
        self.topic = topic
        self.partition = partition
        self.stop_ts = stop_ts
        self.done = False
        self._full_bytes = self.max_bytes
        if first_bytes is not None:
            self.max_bytes = min(first_bytes, self._full_bytes)

    def share(self, full_bytes: int) -> None:
        """Read at most `full_bytes` at a time (one of many partitions merged by timestamp)."""
        self._full_bytes = min(self._full_bytes, full_bytes)
        self.max_bytes = min(self.max_bytes, self._full_bytes)

    def fetch(self) -> Fetched | None:
        fetched = super().fetch()
        if self.max_bytes < self._full_bytes:
            self.max_bytes = min(2 * self.max_bytes, self._full_bytes)
        return fetched


class ConsumerBase:
    """What the local Consumer and the RemoteConsumer share: their settings, and how the records
    they iterate are cut by --until, filtered and counted."""

    def __init__(self, store, topics: list[str], start: StartSpec | str, until_ms: int | None, follow: bool,
                 count: int | None, record_filter: Callable[[Record], bool] | None, merge: bool) -> None:
        self.store = store
        self.topics = topics
        self.start = StartSpec.parse(start) if isinstance(start, str) else start
        self.until_ms = until_ms
        self.follow = follow
        self.count = count
        self.record_filter = record_filter
        self.merge = merge
        self._past: set[tuple[str, int]] = set()  # partitions that reached --until

    # whether value_chunks serves several partitions (else only one: the CLI asks)
    merges_value_chunks = False
    gives_record_runs = False  # record_runs(): whole records of unmerged reads without Record objects

    @property
    def takes_everything(self) -> bool:
        """No --until, filter or count: every record read is output (what the chunked fast paths need)."""
        return self.record_filter is None and self.until_ms is None and self.count is None

    def _iterate(self) -> Iterator[Record]:
        raise NotImplementedError

    def _past_until(self, record: Record) -> bool:
        """--until, as kcat's -o e@T: a partition stops at its first record at or after T (records
        after it are not read, even older ones, and -f does not wait on it). Is `record` left out?"""
        where = (record.topic, record.partition)
        past = self._past
        if where in past:
            return True
        if record.timestamp < self.until_ms:  # type: ignore[operator]
            return False
        past.add(where)
        self._stop_partition(where, record.offset)
        return True

    def _stop_partition(self, where: tuple[str, int], offset: int) -> None:
        """Read no more of the partition `where`, whose record at `offset` reached --until."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Record]:
        until = self.until_ms
        if until is None and self.record_filter is None and self.count is None:
            yield from self._iterate()  # nothing to check per record
            return
        emitted = 0
        for record in self._iterate():
            if until is not None and self._past_until(record):
                continue
            if self.record_filter is not None and not self.record_filter(record):
                continue
            yield record
            emitted += 1
            if self.count is not None and emitted >= self.count:
                return

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer(ConsumerBase):
    def __init__(self, store, topics: list[str], *, partitions: list[int] | None = None,
                 start: StartSpec | str = "beginning", until_ms: int | None = None, follow: bool = False,
                 count: int | None = None, poll_interval_ms: int = POLL_INTERVAL_MS,
                 record_filter: Callable[[Record], bool] | None = None, merge: bool = True,
                 isolation_level: str = READ_UNCOMMITTED) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise UsageError(f"isolation.level must be {' or '.join(ISOLATION_LEVELS)}, not '{isolation_level}'")
        super().__init__(store, topics, start, until_ms, follow, count, record_filter, merge)
        self.isolation_level = isolation_level
        self.poll_interval_ms = poll_interval_ms
        self.cursors = [self._cursor(t, p) for t in topics for p in resolve_partitions(store, t, partitions)]
        self._poll_next = 0  # the cursor the next poll() reads first
        if merge and len(self.cursors) > 1:  # each holds a read while the merge waits on it
            self._share_reads(MERGED_READ_BYTES // len(self.cursors))
        # a follower out of records calls this before each poll with the seconds waited so far (0 first):
        # flush output, show a hint
        self.on_wait: Callable[[float], None] | None = None
        # set, a damaged batch is skipped instead of raised: called with (topic, partition, first offset
        # skipped, offset reading resumes at, the error) - `klog consume --skip-damaged`
        self.on_damage: Callable[[str, int, int, int, CorruptLogError], None] | None = None
        self._topic_ids = {t: store.topic(t).topic_id for t in topics} if follow else {}

    def _share_reads(self, share: int) -> None:
        """Partitions merged by timestamp: each reads at most `share` bytes at a time (not under
        MERGED_READ_BYTES_MIN; a larger batch still comes whole)."""
        for cursor in self.cursors:
            cursor.share(max(MERGED_READ_BYTES_MIN, share))

    def _cursor(self, topic: str, partition: int) -> PartitionCursor:
        part = self.store.partition(topic, partition)
        cursor = PartitionCursor(topic, partition, part, self.until_ms,
                                 StableView(part.leader) if self.isolation_level == READ_COMMITTED else None,
                                 first_bytes=FIRST_READ_BYTES)
        cursor.offset = self._start_offset(part, cursor.end())
        cursor.stop = None if self.follow else cursor.end()
        return cursor

    def _start_offset(self, part: Partition, high: int) -> int:
        found = part.offset_for_timestamp(self.start.value) if self.start.kind is StartKind.TIMESTAMP else None
        return self.start.offset(part.log_start_offset(), high, found, f"{part.topic}-{part.partition}")

    def seek(self, topic: str, partition: int, offset: int) -> None:
        for c in self.cursors:
            if c.topic == topic and c.partition == partition:
                c.offset = offset
                c.done = False

    def positions(self) -> dict[tuple[str, int], int]:
        return {(c.topic, c.partition): c.offset for c in self.cursors}

    def spans(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's log start and the end a bounded read stops at (the high watermark, or
        the last stable offset under read_committed, when it started: records appended since are past
        its stop); a following read's end now."""
        return {(c.topic, c.partition): (c.part.log_start_offset(), c.end() if c.stop is None else c.stop)
                for c in self.cursors}

    def read_ranges(self, ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Read next only offsets start..stop-1 of the partitions `ranges` names, none of the others
        (--last's windows back from the end)."""
        for c in self.cursors:
            c.offset, c.stop = ranges.get((c.topic, c.partition), (c.offset, c.offset))
            c.done = (c.topic, c.partition) not in ranges

    # -- fetching ------------------------------------------------------------------------------
    def _fetch(self, cursor: PartitionCursor) -> Fetched | None:
        if cursor.done:
            return None
        while True:
            try:
                fetched = cursor.fetch()
                break
            except CorruptLogError as e:
                if self.on_damage is None:
                    raise
                resume = _past_damage(cursor, e)
                self.on_damage(cursor.topic, cursor.partition, cursor.offset, resume, e)
                cursor.offset = resume
        if fetched is None and cursor.stop is not None:
            # a bounded read with nothing more below its stop: at it, or a compacted log's gap
            # reaches it (a remote read stops there, not at the broker's next batch past it)
            cursor.offset, cursor.done = max(cursor.offset, cursor.stop), True
        return fetched

    def _records(self, cursor: PartitionCursor, fetched: Fetched | None) -> list[Record]:
        if fetched is None:
            return []
        topic, partition = cursor.topic, cursor.partition
        return [Record(topic, partition, offset, ts, ts_type, key, value, headers)
                for ts_type, records in fetched.record_runs() for offset, ts, key, value, headers in records]

    merges_value_chunks = True  # merged as _iterate merges them
    gives_record_runs = True

    def value_chunks(self, null: bytes | None = None) -> Iterator[list[bytes | None]]:
        """Fast path for value-only output: lists of values (`null` for a null one), in the order
        iterating would give the records, without Record objects or per-record tuples."""
        assert self.takes_everything
        merged = self.merge and len(self.cursors) > 1
        while True:
            if merged:
                yield from self._merged_values(null)
            else:
                for c in self.cursors:
                    while (fetched := self._fetch(c)) is not None:
                        yield fetched.values(null)
            if not self.follow or all(c.done for c in self.cursors):
                return
            self._wait_for_data()

    def record_runs(self) -> Iterator[tuple[str, int, int, list]]:
        """Fast path for whole-record output of partitions read one after another (one partition,
        or merge=False): (topic, partition, timestamp type, (offset, timestamp, key, value, headers)
        tuples) per batch run, in the order iterating would give them, without Record objects."""
        assert self.takes_everything
        assert not (self.merge and len(self.cursors) > 1), "merged reads go record by record"
        while True:
            for c in self.cursors:
                while (fetched := self._fetch(c)) is not None:
                    for ts_type, records in fetched.record_runs():
                        yield c.topic, c.partition, ts_type, records
            if not self.follow or all(c.done for c in self.cursors):
                return
            self._wait_for_data()

    def batch_runs(self, control: bool = False) -> Iterator[tuple[str, int, object, list]]:
        """record_runs with each run's batch header (producer id and epoch, transactional, control)
        in place of its timestamp type; with `control`, the transaction markers' batches too.
        Partitions one after another (merge=False)."""
        assert self.takes_everything
        while True:
            for c in self.cursors:
                while (fetched := self._fetch(c)) is not None:
                    for header, records in fetched.batch_runs(control):
                        yield c.topic, c.partition, header, records
            if not self.follow or all(c.done for c in self.cursors):
                return
            self._wait_for_data()

    def _merged_values(self, null: bytes | None) -> Iterator[list[bytes | None]]:
        """One round of _iterate's heapq.merge by timestamp (ties: the earlier cursor first;
        each partition fetched when its previous fetch is used up), emitted as runs: the values
        of a partition that come before the head of every other partition go out in one slice."""
        cursors = self.cursors
        chunks: list[tuple[list[int], list[bytes | None], bool]] = [([], [], True)] * len(cursors)
        positions = [0] * len(cursors)

        def refill(k: int) -> bool:
            while (fetched := self._fetch(cursors[k])) is not None:
                ts, values = fetched.timestamps_values(null)
                if ts:
                    chunks[k] = ts, values, ts == sorted(ts)  # in time order: runs found by bisection
                    positions[k] = 0
                    return True
            return False

        heap = [(chunks[k][0][0], k) for k in range(len(cursors)) if refill(k)]
        heapq.heapify(heap)
        out: list[bytes | None] = []
        while heap:
            _, i = heapq.heappop(heap)
            ts, values, ordered = chunks[i]
            start = positions[i]
            if not heap:
                end = len(ts)
            else:
                bound = heap[0]  # (timestamp, cursor) of the next partition's head
                if ordered:  # a tie goes to the earlier cursor
                    end = (bisect.bisect_right if i < bound[1] else bisect.bisect_left)(ts, bound[0], start)
                else:
                    end = start + 1
                    while end < len(ts) and (ts[end], i) < bound:
                        end += 1
            out += values[start:end] if start or end < len(values) else values
            if end < len(ts):
                positions[i] = end
                heapq.heappush(heap, (ts[end], i))
            elif refill(i):
                heapq.heappush(heap, (chunks[i][0][0], i))
            if len(out) >= MERGED_CHUNK_VALUES:
                yield out
                out = []
        if out:
            yield out

    def poll(self) -> list[Record]:
        """What is there (no waiting): one read of each partition in turn, from where the last
        poll stopped, until POLL_READ_BYTES were read or every partition was read once; each
        partition's records in order. Empty: no partition had anything."""
        out: list[Record] = []
        for c, fetched in self._polled():
            out.extend(self._records(c, fetched))
        return out

    def poll_chunks(self) -> list[tuple[str, int, list]]:
        """poll() without Record objects, for copying loops (klog mirror): (topic, partition,
        (offset, timestamp, key, value, headers) tuples), one entry per batch."""
        out = []
        for c, fetched in self._polled():
            out += [(c.topic, c.partition, records) for _, records in fetched.record_runs()]
        return out

    def _polled(self) -> list[tuple[PartitionCursor, Fetched]]:
        """The reads of one poll (reads_in_turn, POLL_READ_BYTES)."""
        polled, self._poll_next = reads_in_turn(self.cursors, self._fetch, self._poll_next, POLL_READ_BYTES)
        return polled

    def _partition_stream(self, cursor: PartitionCursor) -> Iterator[Record]:
        topic, partition = cursor.topic, cursor.partition
        while (fetched := self._fetch(cursor)) is not None:
            # a Record per record as it is asked for (a list of a read's records first made
            # `klog consume t -n 1` build ~10,000 of them from one big batch)
            for ts_type, records in fetched.record_runs():
                for offset, ts, key, value, headers in records:
                    yield Record(topic, partition, offset, ts, ts_type, key, value, headers)

    def _stop_partition(self, where: tuple[str, int], offset: int) -> None:
        for c in self.cursors:
            if (c.topic, c.partition) == where:
                c.done = True

    def _iterate(self) -> Iterator[Record]:
        while True:
            if self.merge and len(self.cursors) > 1:
                yield from heapq.merge(*(self._partition_stream(c) for c in self.cursors),
                                       key=lambda r: r.timestamp)
            else:
                for c in self.cursors:
                    yield from self._partition_stream(c)
            if not self.follow or all(c.done for c in self.cursors):
                return
            self._wait_for_data()

    def _wait_for_data(self) -> None:
        """Sleep until some partition's high watermark passes its cursor (bounded polls, no spin).
        A topic deleted (or deleted and re-created) meanwhile ends the wait with UnknownTopicError."""
        started = time.monotonic()
        next_check = started + TOPIC_CHECK_INTERVAL_S
        while True:
            live = [c for c in self.cursors if not c.done]  # --until stops a partition for good
            if not live or any(c.end() > c.offset for c in live):
                return
            if self.on_wait is not None:
                self.on_wait(time.monotonic() - started)
            if time.monotonic() >= next_check:
                self._check_topics()
                next_check = time.monotonic() + TOPIC_CHECK_INTERVAL_S
            time.sleep(self.poll_interval_ms / 1000)

    def _check_topics(self) -> None:
        for name, topic_id in self._topic_ids.items():
            meta = self.store.topics.find(name)
            if meta is None or meta.topic_id != topic_id:
                raise UnknownTopicError(f"topic '{name}' was deleted while being followed"
                                        + (" (and created again: read it anew)" if meta is not None else ""))


def _past_damage(cursor: PartitionCursor, error: CorruptLogError) -> int:
    """Where reading can go on after the damage `error` names: the first provably valid batch
    after it in its segment (store/resume.py), else the next segment's first offset, else the end."""
    import os

    end = cursor.end() if cursor.stop is None else cursor.stop
    resumed = _resumed_in_segment(cursor, error, end)
    if resumed is not None and cursor.offset < resumed < end:
        return resumed
    folder, name = os.path.split(error.path or "")
    bases = sorted(int(n[:-4]) for n in os.listdir(folder) if n.endswith(".log") and n[:-4].isdigit()) \
        if folder else []
    damaged = int(name[:-4]) if name.endswith(".log") and name[:-4].isdigit() else cursor.offset
    resume = next((b for b in bases if b > max(damaged, cursor.offset)), None)
    resume = end if resume is None or resume > end else resume
    if resume <= cursor.offset:
        raise error
    return resume


def _resumed_in_segment(cursor: PartitionCursor, error: CorruptLogError, end: int) -> int | None:
    """The base offset of the first valid batch after the damage, in the damaged segment of the
    replica the read came from (None: none found)."""
    import os

    from klog.store.format import parse_segment_base

    if error.path is None or error.position is None:
        return None
    folder, name = os.path.split(error.path)
    base = parse_segment_base(name)
    for replica in getattr(cursor.part, "replicas", ()):
        if os.path.normpath(replica.directory) != os.path.normpath(folder):
            continue
        segment = replica.segments.get(base) if base is not None else None
        if segment is None:
            return None
        later = [b for b in replica.bases if b > segment.base_offset]
        # where the segment's offsets end: the next segment's base, or (the last) the high watermark
        end_offset = later[0] if later else cursor.part.high_watermark()
        resumed = segment.resume_after_damage(error.position, cursor.offset, end, end_offset=end_offset)
        return resumed.header.base_offset if resumed is not None else None
    return None

"""RemoteConsumer: the Consumer interface over librdkafka's consumer, for the reads the Fetch
reader (fetch_consumer.FetchConsumer) leaves to it: read_committed, and clusters whose -X security
settings klog's own socket cannot speak (RemoteStore.consumer decides).

Partitions are assigned directly (no group join), at start offsets computed as the local consumer
computes them. Without `follow` each partition is read to the high watermark it had at the start;
several partitions are merged in timestamp order, each buffered on its own so the merge can wait
for the partition it needs.
"""

from __future__ import annotations

import heapq
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter

from klog.broker.resolve import resolve_partitions
from klog.client.consumer import ConsumerBase, StartKind, StartSpec
from klog.client.records import Record
from klog.client.remote.errors import config_error, klog_error
from klog.errors import KlogError
from klog.store.limits import CLUSTER_PARTITION_FETCH_BYTES

FETCH_MESSAGES = 10_000  # records taken from librdkafka per call
VALUES_FETCH_MESSAGES = 100_000  # ... by the values-only path (fewer calls; no Record per message)
POLL_TIMEOUT_S = 0.1
# a bounded read (no --follow) stops at the end offsets it started with, so a broker holding back
# an answer for more data (librdkafka's default: up to 500 ms) only delays the records it has
FETCH_WAIT_BOUNDED_MS = 10
PARTITION_EOF = -191  # librdkafka's KafkaError._PARTITION_EOF (a constant: the module loads lazily)
TIMESTAMP_TYPES = {0: 0, 1: 0, 2: 1}  # librdkafka's NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME -> ours


@dataclass
class _RemoteCursor:
    topic: str
    partition: int
    offset: int
    stop: int | None  # exclusive end offset, None when following
    end_at_start: int = 0  # the high watermark when the consumer started (a follower merges up to it)
    low: int = 0  # the log start when the consumer started
    buffer: deque = field(default_factory=deque)

    @property
    def done(self) -> bool:
        return self.stop is not None and self.offset >= self.stop and not self.buffer


class RemoteConsumer(ConsumerBase):
    def __init__(self, store, topics: list[str], *, partitions: list[int] | None = None,
                 start: StartSpec | str = "beginning", until_ms: int | None = None, follow: bool = False,
                 count: int | None = None, poll_interval_ms: int = 0,
                 record_filter: Callable[[Record], bool] | None = None, merge: bool = True,
                 isolation_level: str = "read_uncommitted") -> None:
        from confluent_kafka import Consumer, KafkaException

        super().__init__(store, topics, start, until_ms, follow, count, record_filter, merge)
        self.isolation_level = isolation_level
        self.cursors: list[_RemoteCursor] = []
        for t in topics:
            self.cursors.extend(self._cursors(t, partitions))
        self._by_tp = {(c.topic, c.partition): c for c in self.cursors}
        conf = store.target.client_config(**{
            "group.id": f"klog-{os.getpid()}-{uuid.uuid4().hex[:8]}",  # never joined: partitions are assigned
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",  # an offset below the log start reads from the log start
            # klog's default as Kafka's Java clients' (librdkafka's own default is read_committed)
            "isolation.level": isolation_level,
            # keep fetching while records wait in librdkafka's queue (its default backs off for 1 s once
            # 100,000 are queued, which halves the throughput of a reader as fast as ours)
            "fetch.queue.backoff.ms": 0,
            "enable.partition.eof": True,  # tells a bounded read it has seen everything (see _at_end)
            "queued.min.messages": 1_000_000,
            # big fetches: librdkafka's default of 1 MiB a partition is ~10,000 records of 100 B per
            # round trip, and a partition read alone waits on each one
            "max.partition.fetch.bytes": CLUSTER_PARTITION_FETCH_BYTES,
            "error_cb": store._on_error,
            **({} if follow else {"fetch.wait.max.ms": FETCH_WAIT_BOUNDED_MS}),
        })
        try:
            self._consumer = Consumer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise config_error(e) from None
        self._assign()

    # -- start offsets -------------------------------------------------------------------------
    def _cursors(self, topic: str, wanted: list[int] | None) -> list[_RemoteCursor]:
        parts = resolve_partitions(self.store, topic, wanted)
        # read_committed ends at the last stable offset, as locally: a bounded read never waits on
        # an open transaction's records (librdkafka does not hand them out before it ends)
        low = self.store.offsets(topic, -2)
        high = self.store.offsets(topic, -1, committed=self.isolation_level == "read_committed")
        at = self.store.offsets(topic, self.start.value) if self.start.kind is StartKind.TIMESTAMP else {}
        out = []
        for p in parts:
            lo, hi = low[p] or 0, high[p] or 0
            out.append(_RemoteCursor(topic, p, self.start.offset(lo, hi, at.get(p), f"{topic}-{p}"),
                                     None if self.follow else hi, hi, lo))
        return out

    def _assign(self) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(c.topic, c.partition, c.offset) for c in self.cursors
                               if not c.done])

    def seek(self, topic: str, partition: int, offset: int) -> None:
        c = self._by_tp.get((topic, partition))
        if c is not None:
            c.offset = offset
            c.buffer.clear()
            self._assign()

    def positions(self) -> dict[tuple[str, int], int]:
        return {(c.topic, c.partition): c.buffer[0].offset if c.buffer else c.offset for c in self.cursors}

    def spans(self) -> dict[tuple[str, int], tuple[int, int]]:
        """As the local consumer's: each partition's log start and end (the last stable offset
        under read_committed) when the consumer started."""
        return {(c.topic, c.partition): (c.low, c.end_at_start) for c in self.cursors}

    def read_ranges(self, ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
        """As the local consumer's: read next only offsets start..stop-1 of the partitions named."""
        assert not self.follow, "a bounded read"
        for c in self.cursors:
            c.offset, c.stop = ranges.get((c.topic, c.partition), (c.offset, c.offset))
            c.buffer.clear()
        self._past.clear()
        self._assign()

    def _stop_partition(self, where: tuple[str, int], offset: int) -> None:
        c = self._by_tp[where]
        c.stop = c.offset = max(c.offset, offset + 1)  # done: what librdkafka still hands over is dropped
        c.buffer.clear()

    # -- fetching ------------------------------------------------------------------------------
    def _fetch(self, timeout: float = POLL_TIMEOUT_S) -> list:
        """Up to FETCH_MESSAGES messages, errors raised as klog's."""
        return self._fetched(self._consumer.consume(FETCH_MESSAGES, timeout))

    def _fetched(self, msgs: list) -> list:
        """`msgs`, once none is a real error (those are raised as klog's)."""
        from confluent_kafka import KafkaError

        for m in msgs:
            err = m.error()
            if err is None:
                continue
            # the end of a partition is handled in order by _records; librdkafka retries a transport
            # error itself (the no-progress bound ends a real outage)
            if err.code() not in (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                raise klog_error(err, f"cannot read {m.topic()}-{m.partition()}")
        return msgs

    def _at_end(self, topic: str, partition: int, offset: int) -> None:
        """librdkafka fetched up to `offset`, the partition's end: a bounded read is complete even when
        its last offsets hold no record for us (transaction markers, compacted away); a following
        read's position passes them too (a mirror's checkpoint then lands past them)."""
        c = self._by_tp.get((topic, partition))
        if c is None:
            return
        if c.stop is not None and offset >= c.stop:
            c.offset = max(c.offset, c.stop)
        elif c.stop is None and not c.buffer:
            c.offset = max(c.offset, offset)

    def _records(self, msgs: list) -> list[Record]:
        """Records of `msgs` below each partition's stop; cursors advance past them."""
        out = []
        by_tp = self._by_tp
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == PARTITION_EOF:
                    self._at_end(m.topic(), m.partition(), m.offset())
                continue
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            c = by_tp.get((topic, partition))
            if c is None or offset < c.offset:
                continue
            if c.stop is not None and offset >= c.stop:
                # past its stop: nothing is left below it (its last offsets hold no record for us)
                c.offset = max(c.offset, c.stop)
                continue
            c.offset = offset + 1
            ts_type, ts = m.timestamp()
            out.append(Record(topic, partition, offset, ts, TIMESTAMP_TYPES.get(ts_type, 0), m.key(), m.value(),
                              m.headers() or []))
        return out

    def _all_done(self) -> bool:
        return all(c.done for c in self.cursors)

    def _progress_guard(self) -> Callable[[bool], None]:
        """Raise when a bounded read makes no progress for the cluster timeout (the cluster went away)."""
        last = [time.monotonic()]

        def check(progressed: bool) -> None:
            now = time.monotonic()
            if progressed or self.follow:
                last[0] = now
            elif now - last[0] > self.store.timeout:
                raise KlogError(f"no records from {self.store.target.label} for {self.store.timeout:g} s "
                                "while records were left to read")
        return check

    def poll(self, timeout: float = POLL_TIMEOUT_S) -> list[Record]:
        """One fetch (waiting at most `timeout`); records in arrival order."""
        if self._all_done():
            return []
        out = []
        for c in self.cursors:
            out.extend(c.buffer)
            c.buffer.clear()
        out.extend(self._records(self._fetch(timeout)))
        return out

    def poll_chunks(self, timeout: float = POLL_TIMEOUT_S) -> list[tuple[str, int, list]]:
        """poll() without Record objects, for copying loops (klog mirror): (topic, partition,
        (offset, timestamp, key, value, headers) tuples), one entry per run of one partition's
        messages; the same interface as the local Consumer's. Each run is unpacked by C-level
        passes (map over Message's methods), not a Python loop per record."""
        from confluent_kafka import Message

        if self._all_done():
            return []
        out = [(c.topic, c.partition, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in c.buffer])
               for c in self.cursors if c.buffer]
        for c in self.cursors:
            c.buffer.clear()
        msgs = self._consumer.consume(FETCH_MESSAGES, timeout)
        ends = []
        if any(map(Message.error, msgs)):  # real errors raised; partition ends dropped, and noted
            # after the records before them (a partition's end moves its cursor to its stop)
            ends = [(m.topic(), m.partition(), m.offset()) for m in self._fetched(msgs)
                    if m.error() is not None and m.error().code() == PARTITION_EOF]
            msgs = [m for m in msgs if m.error() is None]
        if msgs:
            self._chunks(msgs, out)
        for end in ends:
            self._at_end(*end)
        return out

    def _chunks(self, msgs: list, out: list) -> None:
        """Append the chunks of `msgs` (no errors among them) to `out`: one per run of a partition's
        messages, in arrival order."""
        from confluent_kafka import Message

        partitions = list(map(Message.partition, msgs))
        topics = list(map(Message.topic, msgs))
        if partitions.count(partitions[0]) == len(msgs) and topics.count(topics[0]) == len(msgs):
            runs = [((topics[0], partitions[0]), msgs)]  # the usual case: one fetch of one partition
        else:
            runs = [(tp, list(run)) for tp, run in groupby(msgs, key=lambda m: (m.topic(), m.partition()))]
        for (topic, partition), run in runs:
            chunk = self._chunk(topic, partition, run)
            if chunk:
                out.append((topic, partition, chunk))

    def _chunk(self, topic: str, partition: int, msgs: list) -> list[tuple]:
        """(offset, timestamp, key, value, headers) of one partition's messages below its stop and
        from its position on; its cursor advances past them."""
        from confluent_kafka import Message

        c = self._by_tp.get((topic, partition))
        if c is None:
            return []
        offsets = list(map(Message.offset, msgs))
        if offsets[0] < c.offset or (c.stop is not None and offsets[-1] >= c.stop):
            keep = [i for i, o in enumerate(offsets) if o >= c.offset and (c.stop is None or o < c.stop)]
            msgs, offsets = [msgs[i] for i in keep], [offsets[i] for i in keep]
            if not msgs:
                return []
        c.offset = offsets[-1] + 1
        timestamps = list(map(itemgetter(1), map(Message.timestamp, msgs)))
        return list(zip(offsets, timestamps, map(Message.key, msgs), map(Message.value, msgs),
                        map(Message.headers, msgs), strict=True))

    def value_chunks(self, null: bytes | None = None) -> Iterator[list[bytes | None]]:
        """Value-only output of one partition: lists of values (`null` for a null one; no Record
        objects: the fast path). The same interface as the local Consumer's.

        Each fetch is checked and unpacked by C-level passes (map over Message's methods), not a
        Python loop per record; the read ends at the stop offset it started with, without waiting
        for a timeout."""
        from confluent_kafka import Message

        error_of, value_of = Message.error, Message.value
        cursor = self.cursors[0]
        stop = cursor.stop
        check = self._progress_guard()
        consume = self._consumer.consume
        while not cursor.done:
            msgs = consume(VALUES_FETCH_MESSAGES, POLL_TIMEOUT_S)
            if not msgs:
                check(False)
                continue
            # any(), not list.count(None): KafkaError == None leaves a TypeError set (confluent-kafka 2.16)
            if any(map(error_of, msgs)):
                values = [null if r.value is None else r.value
                          for r in self._records(self._fetched(msgs))]  # the slow path: in order
                check(bool(values) or cursor.done)  # a repeated transport error is no progress
                if values:
                    yield values
                continue
            check(True)
            last = msgs[-1].offset()
            if stop is not None and last >= stop:
                msgs = [m for m in msgs if m.offset() < stop]
                cursor.offset = stop
            else:
                cursor.offset = max(cursor.offset, last + 1)
            values = list(map(value_of, msgs))
            if null is not None and None in values:
                values = [null if v is None else v for v in values]
            yield values

    def _fill(self, check: Callable[[bool], None]) -> None:
        """One fetch distributed into the partitions' buffers."""
        records = self._records(self._fetch())
        check(bool(records))
        for r in records:
            self._by_tp[(r.topic, r.partition)].buffer.append(r)

    def _partition_stream(self, cursor: _RemoteCursor, check: Callable[[bool], None]) -> Iterator[Record]:
        while True:
            end = cursor.stop if cursor.stop is not None else cursor.end_at_start  # --until may stop it
            while cursor.buffer and cursor.buffer[0].offset < end:
                yield cursor.buffer.popleft()
            if cursor.buffer or cursor.offset >= end:
                return
            self._fill(check)

    def _iterate(self) -> Iterator[Record]:
        check = self._progress_guard()
        if self.merge and len(self.cursors) > 1:
            # what is there now merged in timestamp order (as the local consumer does), then as it arrives
            yield from heapq.merge(*(self._partition_stream(c, check) for c in self.cursors),
                                   key=lambda r: r.timestamp)
        if self.follow or len(self.cursors) == 1 or not self.merge:
            while not self._all_done():
                for c in self.cursors:
                    while c.buffer:
                        yield c.buffer.popleft()
                records = self._records(self._fetch())
                check(bool(records))
                yield from records

    def close(self) -> None:
        try:
            self._consumer.close()
        except RuntimeError:
            pass  # closed already

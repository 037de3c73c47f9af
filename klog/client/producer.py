"""Producer: buffers records per partition, encodes each batch once, appends it under the lock.

A batch is written when it reaches batch_size, when a send finds the oldest buffered record
older than linger_ms, or on flush()/close(). send() hands back a PendingRecord whose
partition and offset are known once its batch is acknowledged.
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import accumulate, compress, repeat
from operator import attrgetter, call, itemgetter, ne
from typing import Self

from klog.broker.writer import (
    RECORD_OBJECT_BYTES,
    RECORD_OVERHEAD_BYTES_MAX,
    EncodedPiece,
    PartitionWriter,
    encode_fitting,
    headers_bytes,
    record_bytes,
)
from klog.client.partitioner import StickyPartitioner, key_partitions, partition_for_key, partitions_of
from klog.client.producer_settings import BATCH_SIZE_DEFAULT, BUFFER_MEMORY_DEFAULT
from klog.client.records import TIMESTAMP_MAX, Headers, RecordMetadata, check_partition, check_timestamp
from klog.errors import RecordTooLargeError, UnknownTopicError, UsageError
from klog.store import compression, fastrecords
from klog.store.codec import RecordIn, RecordsBuilder, write_section
from klog.store.format import CREATE_TIME, LOG_APPEND_TIME, RECORD_BATCH_OVERHEAD
from klog.store.names import validate_topic_name
from klog.store.plain import Plain

# Once buffer.memory is passed, the fullest batches are written until this share of it is left
# buffered: one multi-partition write of many batches, not one batch per record added
BUFFER_DRAIN_TO = 0.5
# _send_routed checks a record's size estimate where it joins a batch only when shared headers
# make the estimate exceed its encoded size by this much more than a record without headers
HEADERS_SLACK_CHECKED = 40
# Partitions written per multi-partition append: what one failed append can leave unwritten
WRITE_GROUP_MAX = 1024
ACKS = ("0", "1", "all")

AckCallback = Callable[[str, int, int, int], None]  # topic, partition, base offset, record count


class PendingRecord(Plain):
    """A sent record; `metadata` is filled in once its batch is acknowledged."""

    __slots__ = _fields = ("producer", "topic", "partition", "index", "metadata")

    def __init__(self, producer: Producer, topic: str, partition: int, index: int,
                 metadata: RecordMetadata | None = None) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.index = index  # position in its batch
        self.metadata = metadata

    def get(self) -> RecordMetadata:
        """Flush if needed and return where the record landed."""
        if self.metadata is None:
            self.producer.flush()
        assert self.metadata is not None
        return self.metadata

    @property
    def offset(self) -> int:
        return self.get().offset


class _Batch(Plain):
    __slots__ = _fields = ("records", "pending", "estimated_bytes", "first_ms", "max_ts", "charged")

    def __init__(self, records: RecordsBuilder | None = None,
                 pending: dict[int, tuple[PendingRecord, int]] | None = None,
                 estimated_bytes: int = 0, first_ms: float = 0.0, max_ts: int | None = None,
                 charged: int = 0) -> None:
        self.records = RecordsBuilder() if records is None else records  # encoded as they arrive
        # position in the batch -> the send() record waiting for its metadata, and its timestamp; the
        # bulk paths add none (a list with a None per bulk record cost a pass per record when filling
        # and when acknowledging)
        self.pending = {} if pending is None else pending
        self.estimated_bytes = estimated_bytes
        self.first_ms = first_ms
        self.max_ts = max_ts  # the records' largest timestamp, kept as they are added (not a pass at encoding)
        self.charged = charged  # what it counts against buffer.memory (given back when it is written)

    def saw(self, ts: int) -> None:
        if self.max_ts is None or ts > self.max_ts:
            self.max_ts = ts


def check_producer_options(acks: str, compression_type: str, batch_size: int,
                           buffer_memory: int = BUFFER_MEMORY_DEFAULT) -> None:
    """The options every producer (local or remote) takes, checked the same way."""
    if str(acks) not in ACKS:
        raise UsageError(f"invalid acks '{acks}': use 0, 1 or all")
    if compression_type not in compression.CODEC_IDS:
        raise UsageError(f"invalid compression '{compression_type}': use {', '.join(compression.CODEC_IDS)}")
    if batch_size < 1:
        raise UsageError("batch size must be positive")
    if buffer_memory < 1:
        raise UsageError("buffer.memory must be positive")


class ProducerBase:
    """What the local and remote producers share: send_values over send_keyed, and close() and `with`
    (flush on a clean exit or Ctrl-C, so what was sent is written; not on another error)."""

    def send_keyed(self, topic: str, pairs: Sequence[tuple[bytes | None, bytes | None]],
                   headers: Headers | None = None, partition: int | None = None,
                   timestamp: int | None = None) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def send_values(self, topic: str, values: Sequence[bytes], headers: Headers | None = None,
                    partition: int | None = None, timestamp: int | None = None) -> None:
        """Bulk path for keyless records sharing headers (the CLI's line mode); no PendingRecords."""
        self.send_keyed(topic, [(None, v) for v in values], headers, partition, timestamp)

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None or exc_type is KeyboardInterrupt:
            self.flush()


class Producer(ProducerBase):
    def __init__(self, store, *, acks: str = "all", compression_type: str = "none", linger_ms: int = 0,
                 batch_size: int = BATCH_SIZE_DEFAULT, buffer_memory: int = BUFFER_MEMORY_DEFAULT,
                 auto_create: bool | None = None, on_ack: AckCallback | None = None,
                 on_create: Callable[[str], None] | None = None,
                 on_warning: Callable[[str], None] | None = None) -> None:
        check_producer_options(acks, compression_type, batch_size, buffer_memory)
        self.store = store
        self.acks = str(acks)
        self.codec = compression.CODEC_IDS[compression_type]
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory  # bytes of unwritten records held at most (see RECORD_OBJECT_BYTES)
        self._buffered = 0  # what the buffered records count against buffer_memory
        self.auto_create = store.auto_create_enabled() if auto_create is None else auto_create
        self.on_ack = on_ack
        self.on_create = on_create
        self.sticky = StickyPartitioner()
        self._batches: dict[tuple[str, int], _Batch] = {}
        self._partition_counts: dict[str, int] = {}
        self._topic_settings: dict[str, tuple[int, int, int]] = {}
        self._compacted_topics: dict[str, bool] = {}
        self.records_sent = 0
        self._routed_away = 0  # records of the current _send_routed call in batches it wrote already
        # topic -> the route (see _send_routed) its last routed call left, valid until any other path
        # adds records to a batch or writes one (_unrouted): the next call sets up only the partitions
        # new to them, not every partition it writes (~1.5 us each a call: 10,000 partitions, ~20 calls)
        self._routes: dict[str, _Route] = {}
        from klog.broker.replication import ReplicaManager

        self.replicas = ReplicaManager(store, warn=on_warning)
        self.writer = PartitionWriter(store, self.replicas)

    # -- topics --------------------------------------------------------------------------------
    def partitions_for(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            meta = self.store.topics.find(topic)
            if meta is None:
                if not self.auto_create:
                    validate_topic_name(topic)
                    raise UnknownTopicError(f"unknown topic '{topic}' (auto.create.topics.enable is false: "
                                            "create it first)")
                meta = self.store.create_topic(topic, exist_ok=True)
                if self.on_create is not None:
                    self.on_create(topic)
            count = len(meta.partitions)
            self._partition_counts[topic] = count
            config = self.store.log_config(topic)
            codec_name = config.compression_type
            topic_codec = self.codec if codec_name == "producer" else compression.CODEC_IDS[codec_name]
            ts_type = LOG_APPEND_TIME if config.log_append_time else CREATE_TIME
            self._topic_settings[topic] = (config.max_message_bytes, topic_codec, ts_type)
            self._compacted_topics[topic] = config.compacted
        return count

    def _compacted(self, topic: str) -> bool:
        """Read with the partition count (once per topic, not per record: it is an LMDB read and a parse)."""
        return self._compacted_topics[topic]

    # -- sending -------------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None,
             partition: int | None = None, timestamp: int | None = None) -> PendingRecord:
        count = self.partitions_for(topic)
        sticky = partition is None and key is None
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else self.sticky.partition(topic, count)
        else:
            partition = check_partition(partition, topic, count)
        if key is None and self._compacted(topic):
            raise UsageError(f"topic '{topic}' is compacted: every record needs a key")
        ts = int(time.time() * 1000) if timestamp is None else check_timestamp(timestamp)
        size = record_bytes(key, value, headers)
        max_bytes = self._topic_settings[topic][0]
        if size + RECORD_BATCH_OVERHEAD > max_bytes:
            raise RecordTooLargeError(f"record of {size} bytes is larger than max.message.bytes ({max_bytes}) "
                                      f"of topic '{topic}'")
        batch = self._batch_for(topic, partition, size, max_bytes, ts)
        pending = PendingRecord(self, topic, partition, batch.records.count)
        batch.pending[batch.records.count] = (pending, ts)
        batch.records.add(((key, value, headers or (), ts),))
        batch.saw(ts)
        batch.estimated_bytes += size
        batch.charged += size + RECORD_OBJECT_BYTES
        self._buffered += size + RECORD_OBJECT_BYTES
        if sticky:
            self.sticky.produced(topic, size, count)
        self._after_send()
        return pending

    def send_keyed(self, topic: str, pairs: Sequence[tuple[bytes | None, bytes | None]],
                   headers: Headers | None = None, partition: int | None = None,
                   timestamp: int | None = None) -> None:
        """Bulk path for (key, value) records sharing headers and a timestamp (the CLI's line
        modes); no PendingRecords, and no per-record batch or linger checks.

        Keys go where `send` puts them (Kafka's murmur2 partitioner, computed once per distinct
        key; skipped for a one-partition topic); keyless records follow the sticky partitioner.
        Each partition receives its records in input order. A record larger than
        max.message.bytes raises RecordTooLargeError with `.index` its position in `pairs`,
        after every record before it was buffered; so does a value that is not bytes-like, with
        TypeError, in a topic of several partitions.
        """
        count, partition, hdrs, overhead, ts = self._bulk_start(topic, partition, headers, timestamp)
        if pairs and self._compacted(topic) and any(k is None for k, _ in pairs):
            raise UsageError(f"topic '{topic}' is compacted: every record needs a key")
        with _gc_paused(len(pairs)):
            routed = 0
            if partition is None and count > 1:
                routed = self._send_routed(topic, pairs, count, hdrs, ts, overhead)
            if routed == len(pairs):
                self._after_send()
                return
            if routed:  # the compiled builder refused a record: it and those after it take the general path
                pairs = pairs[routed:]
            # (list comprehensions: faster here than map/zip passes, which build more lists)
            sizes = [(len(v) if v is not None else 0) + (len(k) if k is not None else 0) + overhead
                     for k, v in pairs]
            records = [(k, v, hdrs, ts) for k, v in pairs]
            keyless = partition is None and count > 1 and all(k is None for k, _ in pairs)
            try:
                self._send_records(topic, records, sizes, partition, count, keyless, ts)
            except RecordTooLargeError as e:
                if routed:
                    e.index += routed  # type: ignore[attr-defined]
                raise

    def send_values(self, topic: str, values: Sequence[bytes], headers: Headers | None = None,
                    partition: int | None = None, timestamp: int | None = None) -> None:
        """send_keyed with every key None, without building (None, value) pairs first (the CLI's
        line mode: one pass per record fewer)."""
        count, partition, hdrs, overhead, ts = self._bulk_start(topic, partition, headers, timestamp)
        if values and self._compacted(topic):
            raise UsageError(f"topic '{topic}' is compacted: every record needs a key")
        with _gc_paused(len(values)):
            records = [(None, v, hdrs, ts) for v in values]
            if partition is not None or count == 1:
                # one partition (the CLI's usual case): the batches are cut from the running total
                # of the values' lengths (C-level passes), with no list of per-record sizes
                try:
                    lengths = list(map(len, values))
                except TypeError:  # a None value (a tombstone)
                    lengths = [len(v) if v is not None else 0 for v in values]
                max_bytes = self._topic_settings[topic][0]
                if not lengths or max(lengths) + overhead <= max_bytes - RECORD_BATCH_OVERHEAD:
                    self._fill(topic, partition or 0, records, list(accumulate(lengths)), count, max_bytes, ts,
                               overhead)
                    self._after_send()
                    return
            sizes = [(len(v) if v is not None else 0) + overhead for v in values]
            self._send_records(topic, records, sizes, partition, count, True, ts)

    def _bulk_start(self, topic: str, partition: int | None, headers: Headers | None,
                    timestamp: int | None) -> tuple[int, int | None, tuple, int, int]:
        """What the bulk paths settle once per call: the partition count, the checked partition,
        the shared headers, the per-record overhead estimate and the timestamp."""
        count = self.partitions_for(topic)
        if partition is not None:
            partition = check_partition(partition, topic, count)
        hdrs = tuple(headers or ())
        overhead = RECORD_OVERHEAD_BYTES_MAX + headers_bytes(hdrs)
        ts = int(time.time() * 1000) if timestamp is None else check_timestamp(timestamp)
        return count, partition, hdrs, overhead, ts

    def _send_records(self, topic: str, records: list[RecordIn], sizes: list[int], partition: int | None,
                      count: int, keyless: bool, ts: int) -> None:
        """Buffer the bulk paths' records (sizes: their estimates; ts: the timestamp they all
        carry) into their partitions' batches; keyless: no record has a key (the sticky
        partitioner places them all)."""
        max_bytes = self._topic_settings[topic][0]
        limit = max_bytes - RECORD_BATCH_OVERHEAD
        if sizes and max(sizes) > limit:
            too_big = next(j for j, size in enumerate(sizes) if size > limit)
            self._send_records(topic, records[:too_big], sizes[:too_big], partition, count, keyless, ts)
            error = RecordTooLargeError(f"record of {sizes[too_big]} bytes is larger than max.message.bytes "
                                        f"({max_bytes}) of topic '{topic}'")
            error.index = too_big  # type: ignore[attr-defined]
            raise error
        if partition is not None or count == 1:
            self._fill(topic, 0 if partition is None else partition, records, list(accumulate(sizes)), count,
                       max_bytes, ts)
        elif keyless:
            self._fill(topic, None, records, list(accumulate(sizes)), count, max_bytes, ts)
        else:
            self._fill_groups(topic, self._by_partition(topic, records, sizes, count), count, max_bytes, ts)
        self._after_send()

    def _send_routed(self, topic: str, pairs: Sequence[tuple[bytes | None, bytes | None]], count: int,
                     hdrs: tuple, ts: int, overhead: int) -> int:
        """send_keyed into a topic of many partitions in one pass over the records: each is routed
        (murmur2, once per distinct key) and appended to its partition's compiled builder, no
        record tuples, no groups, no encoding at flush (scattered among a thousand partitions',
        those cost ~2x the encoding itself). Each builder refuses a record that would take its
        batch past the batch limit (new_builder's `limit`: no size check per record here); that
        batch is then written and a new one takes the record. Returns how many of the records it
        buffered, the first ones: none when they need the general path (a key that is None or not
        bytes, headers or a timestamp the compiled builder does not take, too few records to load
        it), those before the first record larger than max.message.bytes (the general path names
        it). A value that is not bytes-like raises TypeError (`.index`: its place in `pairs`), the
        records before it buffered."""
        if not fastrecords.wanted(len(pairs)) or not fastrecords.available() or ts < 0:
            return 0
        hd = _builder_headers(hdrs)
        if hd is None:
            return 0
        max_bytes = self._topic_settings[topic][0]
        # a record's size estimate (what send() checks against max.message.bytes) is checked where
        # it starts a batch; one joining a batch is smaller than that batch's limit by at least the
        # first record (>= 7 bytes encoded) and the header, more than its estimate exceeds its
        # encoded size by (<= 24 bytes) unless headers add more: then every record is checked first
        largest = max_bytes - RECORD_BATCH_OVERHEAD - overhead  # the largest key and value together
        try:  # (a key murmur2 cannot hash and a None key are refused here, before any record is buffered)
            parts = partitions_of(list(map(_KEY, pairs)), count)
            if hdrs and overhead - RECORD_OVERHEAD_BYTES_MAX > HEADERS_SLACK_CHECKED:
                biggest = max(map(len, map(_KEY, pairs)))
                try:
                    biggest += max(map(len, map(_VALUE, pairs)))
                except TypeError:  # a None value (a tombstone)
                    biggest += max(map(len, filter(None, map(_VALUE, pairs))), default=0)
                if biggest > largest:
                    return 0
        except TypeError:
            return 0
        limit = min(self.batch_size, max_bytes - RECORD_BATCH_OVERHEAD)  # a batch's bytes, header included
        route = self._routes.pop(topic, None) or _Route(count)
        slots, appends, counts = route.slots, route.appends, route.counts
        batches = self._batches
        self._routed_away = 0
        route.begin(ts)
        p = -1
        done = False
        refused: object = _NOTHING
        try:
            # (per record: two list reads, the append and a list write; a partition the route has
            # no batch for yet has _no_batch, which refuses every record as a full builder does)
            for (key, value), p in zip(pairs, parts, strict=True):
                n = counts[p]
                if appends[p](n, ts, key, value, hd) is not None:
                    counts[p] = n + 1
                    continue
                # no batch yet, or the record would take it past its limit: a new batch takes it
                if len(key) + (len(value) if value is not None else 0) > largest:
                    break  # (before the full batch is written: it stays buffered)
                n = self._slot(topic, route, p, ts, limit)
                if appends[p](n, ts, key, value, hd) is None:  # (a batch held since before this call, full)
                    n = self._slot(topic, route, p, ts, limit)
                    appends[p](n, ts, key, value, hd)
                counts[p] = n + 1
            else:
                done = True
        except TypeError:  # a value the builder refuses (it is left as it was, the record not buffered)
            refused = value
            slot = slots.get(p)
            if slot is not None and not counts[p] and batches.get((topic, p)) is slot[0]:
                del batches[(topic, p)]  # the batch it was to start
                route.drop(p)
        finally:
            if done:  # (the batches are brought up to date when another path needs them: _unrouted)
                self._buffered += route.grown(ts)
            else:
                # whatever stopped the loop (even Ctrl-C between an append and its count), each
                # batch counts the records its builder holds
                slot = slots.get(p)
                if slot is not None and batches.get((topic, p)) is slot[0]:
                    counts[p] = fastrecords.held_records(appends[p].__self__)
                taken = self._routed_away + route.taken()
                self._buffered += route.sync_all()
        if done:
            self._routes[topic] = route  # (this call wrote batches only through _slot, which replaced them)
        elif refused is not _NOTHING:  # (buffered as it is, it would fail its whole batch's write)
            error = TypeError(f"record {taken}: a value must be bytes-like or None, not {type(refused).__name__}")
            error.index = taken  # type: ignore[attr-defined]
            raise error
        return len(pairs) if done else taken

    def _slot(self, topic: str, route: _Route, partition: int, ts: int, limit: int) -> int:
        """A batch for `partition` whose builder _send_routed appends to: the partition's batch if
        the route has none yet and it can take these records, else a new one, after writing the
        full one; returns the records its builder holds. A new builder refuses records past `limit`
        bytes (see fastrecords.new_builder)."""
        key = (topic, partition)
        if partition in route.slots:
            self._routed_away += route.counts[partition] - route.start[partition]  # (written before the call ends)
            self._buffered += route.sync(partition)
            self._write_now(key)
        elif (batch := self._batches.get(key)) is not None:  # (buffered before the route was set up)
            records = batch.records
            if (records.count and -TIMESTAMP_MAX <= ts - records.first_ts <= TIMESTAMP_MAX
                    and (records.append is not None or records.go_fast(limit))):
                route.hold(partition, batch)  # (a builder that holds records was started here, with this limit)
                return records.count
            self._write_now(key)  # (rare) a new batch takes these records
        batch = self._batches[key] = _Batch(first_ms=time.monotonic() * 1000)
        records = batch.records
        records.first_ts = ts
        records.go_fast(limit)
        route.hold(partition, batch)
        return 0

    def _fill_groups(self, topic: str, groups: dict[int, tuple[list[RecordIn], list[int]]], count: int,
                     max_bytes: int, ts: int) -> None:
        """_fill for each partition's group of records; a group that fits its partition's batch
        whole (the usual case: an input chunk spread over many partitions is a few records each)
        joins it in one step, without _fill's running totals and searches."""
        self._unrouted()
        limit = min(self.batch_size, max_bytes - RECORD_BATCH_OVERHEAD)
        batches = self._batches
        now_ms = None
        added_all = 0
        for p, (group, group_sizes) in groups.items():
            key = (topic, p)
            batch = batches.get(key)
            added = sum(group_sizes)
            if batch is None:
                if added > limit:
                    self._fill(topic, p, group, list(accumulate(group_sizes)), count, max_bytes, ts)
                    continue
                if now_ms is None:
                    now_ms = time.monotonic() * 1000
                batch = batches[key] = _Batch(first_ms=now_ms)
            elif batch.estimated_bytes + added > limit or not _delta_fits(batch, ts):
                self._fill(topic, p, group, list(accumulate(group_sizes)), count, max_bytes, ts)
                continue
            batch.records.add(group)
            batch.saw(ts)
            batch.estimated_bytes += added
            batch.charged += added + len(group) * RECORD_OBJECT_BYTES
            added_all += added + len(group) * RECORD_OBJECT_BYTES
        self._buffered += added_all

    def _by_partition(self, topic: str, records: list[RecordIn], sizes: list[int],
                      count: int) -> dict[int, tuple[list[RecordIn], list[int]]]:
        """Records and sizes split by partition, each in input order.

        Partitions come from the per-key cache in one C-level pass (murmur2 only for new keys;
        keyless records take the sticky partitioner's in order); then one pass appends each
        record to its partition's group (half the CPU of a stable sort by partition and a slice
        per partition: this pass is most of what routing costs)."""
        cache = key_partitions(count)
        keys = [record[0] for record in records]
        parts = list(map(cache.get, keys, repeat(None)))
        if None in parts:
            sticky = self.sticky
            for j, p in enumerate(parts):
                if p is None:
                    key = keys[j]
                    if key is None:
                        parts[j] = sticky.partition(topic, count)
                        sticky.produced(topic, sizes[j], count)
                    else:
                        parts[j] = cache[key] = partition_for_key(key, count)
        groups: dict[int, tuple[list[RecordIn], list[int]]] = {}
        get = groups.get
        for p, record, size in zip(parts, records, sizes, strict=True):
            group = get(p)
            if group is None:
                groups[p] = ([record], [size])
            else:
                group[0].append(record)
                group[1].append(size)
        return groups

    def _fill(self, topic: str, partition: int | None, records: list[RecordIn], totals: list[int], count: int,
              max_bytes: int, ts: int, overhead: int = 0) -> None:
        """Add records to `partition`'s batch, or to the sticky partitioner's when None, writing
        each batch as it fills. Their size estimates are given as running totals: records[:j + 1]
        estimate totals[j] + (j + 1) * overhead bytes."""
        self._unrouted()
        limit = min(self.batch_size, max_bytes - RECORD_BATCH_OVERHEAD)

        def upto(j: int) -> int:  # the estimate of records[:j + 1]
            return totals[j] + (j + 1) * overhead if j >= 0 else 0

        i, n = 0, len(records)
        while i < n:
            p = partition if partition is not None else self.sticky.partition(topic, count)
            key = (topic, p)
            batch = self._batches.get(key)
            if batch is not None and not _delta_fits(batch, records[i][3]):
                self._write_now(key)
                batch = None
            if batch is None:
                batch = self._batches[key] = _Batch(first_ms=time.monotonic() * 1000)
            room = limit - batch.estimated_bytes
            quota = room if partition is not None else min(room, self.sticky.remaining(topic))
            before = upto(i - 1)
            if overhead:  # (bisect's key is called only at its ~log2(n) probes)
                j = bisect_right(range(n), before + quota, i, n, key=upto)
            else:
                j = bisect_right(totals, before + quota, i, n)
            if j == i and (not batch.records.count or upto(i) - before <= room):
                j = i + 1  # at least one record per round (an empty batch takes even an oversized one)
            added = (upto(j - 1) - before) if j > i else 0
            if j > i:
                batch.records.add(records[i:j])
                batch.saw(ts)
            batch.estimated_bytes += added
            batch.charged += added + (j - i) * RECORD_OBJECT_BYTES
            self._buffered += added + (j - i) * RECORD_OBJECT_BYTES
            i = j
            if partition is None:
                self.sticky.produced(topic, added, count)
            if i < n and batch.estimated_bytes + upto(i) - upto(i - 1) > limit:
                self._write_now(key)  # full: write it; otherwise it keeps filling

    def _batch_for(self, topic: str, partition: int, size: int, max_bytes: int, ts: int) -> _Batch:
        self._unrouted()
        key = (topic, partition)
        batch = self._batches.get(key)
        limit = min(self.batch_size, max_bytes - RECORD_BATCH_OVERHEAD)
        if batch is not None and batch.records.count and (batch.estimated_bytes + size > limit
                                                    or not _delta_fits(batch, ts)):
            self._write_now(key)
            batch = None
        if batch is None:
            batch = _Batch(first_ms=time.monotonic() * 1000)
            self._batches[key] = batch
        return batch

    def _unrouted(self) -> None:
        """Another path is about to add records to a batch or write one (or to read what they
        hold): the batches the routed calls left are brought up to date, and their routes set up
        again by the next call."""
        if self._routes:
            for route in self._routes.values():
                self._buffered += route.sync_all()
            self._routes.clear()

    def _after_send(self) -> None:
        """Write the batches linger.ms made due, then, past buffer.memory, the fullest ones."""
        if self.linger_ms > 0 and self._batches:
            now = time.monotonic() * 1000
            self._write_many([k for k, b in self._batches.items() if now - b.first_ms >= self.linger_ms])
        if self._buffered > self.buffer_memory:
            self._relieve()

    def _relieve(self) -> None:
        """Past buffer.memory: write the fullest batches (in one multi-partition write) until
        BUFFER_DRAIN_TO of it is left. A batch's size is how much it saves per write."""
        self._unrouted()
        target = self.buffer_memory * BUFFER_DRAIN_TO
        batches = self._batches
        keys = []
        left = self._buffered
        for key in sorted(batches, key=lambda k: batches[k].estimated_bytes, reverse=True):
            keys.append(key)
            left -= _charge(batches[key])
            if left <= target:
                break
        self._write_many(keys)

    def flush(self) -> None:
        """Write every buffered batch and wait for its acknowledgement."""
        self._write_many(list(self._batches))

    def _drop_buffered(self) -> None:
        """Forget every buffered record unwritten (an aborted transaction's), the routed calls'
        slots with them: a slot left would have the next call append into a dropped batch."""
        self._batches.clear()
        self._routes.clear()
        self._buffered = 0

    def _write_now(self, key: tuple[str, int]) -> None:
        """Write one partition's batch now (it is full, or the next record cannot join it)."""
        self._unrouted()
        batch = self._batches.pop(key)
        self._buffered -= _charge(batch)
        self._write(key, batch)

    def _write_many(self, keys: list[tuple[str, int]]) -> None:
        """Write these partitions' batches, each topic's in multi-partition appends of up to
        WRITE_GROUP_MAX partitions. A batch leaves the buffer when its group is written: a
        failure leaves the later groups buffered (a later flush writes them)."""
        if not keys:
            return
        self._unrouted()
        by_topic: dict[str, list[int]] = {}
        for topic, partition in keys:
            by_topic.setdefault(topic, []).append(partition)
        # encoding allocates per record; and each log directory is checked once for all the batches
        with _gc_paused(sum(self._batches[k].records.count for k in keys)), self.replicas.shared_dir_checks():
            for topic, partitions in by_topic.items():
                for at in range(0, len(partitions), WRITE_GROUP_MAX):
                    group = [(p, self._batches.pop((topic, p))) for p in partitions[at:at + WRITE_GROUP_MAX]]
                    self._buffered -= sum(_charge(b) for _, b in group)
                    self._write_group(topic, group)

    # -- writing -------------------------------------------------------------------------------
    def _write(self, key: tuple[str, int], batch: _Batch) -> None:
        self._write_group(key[0], [(key[1], batch)])

    def _write_group(self, topic: str, group: list[tuple[int, _Batch]]) -> None:
        """Encode the batches of `topic`'s partitions and append them in one multi-partition write."""
        if len(group) > 1:
            self.store.open_partitions(topic, [partition for partition, _ in group])  # (one metadata read)
        now_ms = int(time.time() * 1000)
        encoded = [self._encoded(topic, batch, now_ms) for _, batch in group]
        ts_type = self._topic_settings[topic][2]

        def acknowledged(i: int, bases: list[int]) -> None:
            partition, batch = group[i]
            for piece, base_offset in zip(encoded[i], bases, strict=True):
                self._acknowledged(topic, partition, batch, piece.start, piece.count, base_offset, now_ms, ts_type)

        # (map: a list comprehension per partition is a Python frame each)
        self.writer.append_batches(topic, [(partition, list(map(_DATA, pieces)))
                                          for (partition, _), pieces in zip(group, encoded, strict=True)],
                                   self.acks, acknowledged)

    def _encoded(self, topic: str, batch: _Batch, now_ms: int) -> list[EncodedPiece]:
        """The batch as one encoded batch, or pieces that each fit max.message.bytes (see encode_fitting)."""
        max_bytes, topic_codec, ts_type = self._topic_settings[topic]
        records = batch.records
        if topic_codec == compression.NONE and ts_type == CREATE_TIME:
            whole = records.whole_batch(batch.max_ts)  # (no copies, no second CRC: the usual case)
            if whole is not None:
                if len(whole) <= max_bytes or records.count == 1:
                    return [EncodedPiece(0, records.count, whole)]
                return encode_fitting(records.records(records.section()), codec_id=topic_codec, max_bytes=max_bytes,
                                      now_ms=now_ms, timestamp_type=ts_type)
        section = records.section()
        encoded = write_section(section, records.count, base_timestamp=records.first_ts, max_timestamp=batch.max_ts,
                                codec=topic_codec, timestamp_type=ts_type, log_append_time_ms=now_ms)
        if len(encoded) <= max_bytes or records.count == 1:
            return [EncodedPiece(0, records.count, encoded)]
        return encode_fitting(records.records(section), codec_id=topic_codec, max_bytes=max_bytes, now_ms=now_ms,
                              timestamp_type=ts_type)

    def _acknowledged(self, topic: str, partition: int, batch: _Batch, start: int, count: int, base_offset: int,
                      now_ms: int, ts_type: int) -> None:
        """batch.records[start:start + count] are at base_offset..: fill in their PendingRecords."""
        self.records_sent += count
        if batch.pending:
            end = start + count
            for i, (pending, sent_ts) in batch.pending.items():
                if start <= i < end:
                    ts = now_ms if ts_type == LOG_APPEND_TIME else sent_ts
                    pending.metadata = RecordMetadata(topic, partition, base_offset + i - start, ts)
        if self.on_ack is not None:
            self.on_ack(topic, partition, base_offset, count)


GC_PAUSE_MIN_RECORDS = 512


@contextmanager
def _gc_paused(records: int) -> Iterator[None]:
    """The bulk paths allocate a tracked tuple per record (and the batches hold them until
    written), so the cyclic GC would run every few hundred records and, as they are promoted, walk
    the whole heap (~0.1 s of CPU per million lines); none of them can form a cycle, so it is
    paused meanwhile, as codec.decode_records does. (It is process-wide: another thread's
    gc.disable() meanwhile is undone at the end; only a collection's timing depends on it.)"""
    if records < GC_PAUSE_MIN_RECORDS or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_KEY, _VALUE = itemgetter(0), itemgetter(1)
_DATA = attrgetter("data")
_NOTHING = object()


def _builder_headers(hdrs: tuple) -> list | None:
    """Shared headers as the compiled builder takes them, or None if it would refuse them."""
    for hkey, hvalue in hdrs:
        if hkey.__class__ is not str or (hvalue is not None and hvalue.__class__ is not bytes):
            return None
        try:
            hkey.encode()
        except UnicodeEncodeError:  # a key only surrogateescape encodes: the Python encoder's
            return None
    return list(hdrs)


def _no_batch(*record: object) -> None:
    """_Route.appends' entry for a partition without a batch: refuses every record (as a full builder does)."""
    return None


class _Route:
    """A topic's _send_routed state, kept between its calls until another path touches its batches
    (_unrouted, which brings them up to date then: sync_all). Per partition (lists by partition
    number: the per-record loop reads them without a dict lookup): the append of its batch's
    compiled builder and the records that builder holds; for a partition with a batch, its slot,
    [batch, size and records the batch counts], its builder's size, and what the producer's
    buffered bytes count for it (_charge_of its size at the end of the last call: a call adds what
    its partitions grew in C-level passes, ~1,000 partitions a call, not a sync each)."""

    __slots__ = ("appends", "counts", "sizes", "slots", "charged", "ts_of", "ts_high", "start", "ts")

    def __init__(self, partitions: int) -> None:
        self.appends: list[Callable[..., object]] = [_no_batch] * partitions
        self.counts = [0] * partitions
        self.sizes: list[Callable[[], int] | None] = [None] * partitions
        self.slots: dict[int, list] = {}
        self.charged: dict[int, int] = {}
        self.ts_of: dict[int, int] = {}  # the largest timestamp its builder took in calls that ended
        self.ts_high: int | None = None  # the largest timestamp of the calls so far
        self.start = self.counts  # the records each builder held as the current call began
        self.ts = 0  # the current call's timestamp

    def begin(self, ts: int) -> None:
        self.start = self.counts.copy()  # (~1 ns a partition)
        self.ts = ts

    def hold(self, partition: int, batch: _Batch) -> None:
        """Route `partition`'s records into `batch` (which counts what its compiled builder holds)."""
        records = batch.records
        size = records.size()
        self.appends[partition] = records.append
        self.counts[partition] = self.start[partition] = records.count
        self.sizes[partition] = records.size
        self.slots[partition] = [batch, size, records.count]
        self.charged[partition] = _charge_of(size)
        self.ts_of.pop(partition, None)

    def drop(self, partition: int) -> None:
        self.appends[partition] = _no_batch
        self.counts[partition] = self.start[partition] = 0
        self.sizes[partition] = None
        del self.slots[partition], self.charged[partition]
        self.ts_of.pop(partition, None)

    def touched(self) -> list[int]:
        """The partitions whose builders took records in the current call (a batch taken up or
        started in it counts from what it held then: the partition is among them)."""
        return list(compress(range(len(self.counts)), map(ne, self.start, self.counts)))

    def grown(self, ts: int) -> int:
        """At the end of a call: what the growth of the builders that took its records adds to
        the producer's buffered bytes."""
        touched = self.touched()
        sizes = list(map(call, map(self.sizes.__getitem__, touched)))
        charges = [size + (size >> ENCODED_SLACK_SHIFT) for size in sizes]  # (_charge_of, inline: ~40% of a map chain)
        charged = self.charged
        added = sum(charges) - sum(map(charged.__getitem__, touched))
        charged.update(zip(touched, charges, strict=True))
        if self.ts_high is None or ts >= self.ts_high:  # (the usual case: the clock's)
            self.ts_high = ts
            self.ts_of.update(zip(touched, repeat(ts)))
        else:
            ts_of = self.ts_of
            for p in touched:
                if ts > ts_of.get(p, ts - 1):
                    ts_of[p] = ts
        self.start = self.counts
        return added

    def sync(self, partition: int) -> int:
        """Bring `partition`'s batch up to date (its records appended, its size, largest timestamp
        and charge); returns what the producer's buffered bytes lack for it: its growth in the
        current call, if any (grown counted the calls before)."""
        slot = self.slots[partition]
        batch, n = slot[0], self.counts[partition]
        if n == slot[2]:
            return 0
        size = self.sizes[partition]()  # type: ignore[misc]
        batch.records.appended(n)
        batch.estimated_bytes += size - slot[1]
        if partition in self.ts_of:
            batch.saw(self.ts_of[partition])
        if self.start is not self.counts and n != self.start[partition]:
            batch.saw(self.ts)
        charge = _charge_of(size)
        batch.charged += charge - _charge_of(slot[1])
        slot[1], slot[2] = size, n
        lacking = charge - self.charged[partition]
        self.charged[partition] = charge
        return lacking

    def sync_all(self) -> int:
        """sync() for every partition (the route is then dropped)."""
        return sum(map(self.sync, list(self.slots)))

    def taken(self) -> int:
        """Records the current call took into the batches the route holds."""
        return sum(self.counts) - sum(self.start)

    def pending(self) -> int:
        """What the producer's buffered bytes count for records its batches do not count yet."""
        return sum(self.charged[p] - _charge_of(slot[1]) for p, slot in self.slots.items())


def _charge_of(size: int) -> int:
    """What a routed batch's compiled builder of `size` bytes counts against buffer.memory: its
    bytes and their growth room (ENCODED_SLACK_SHIFT), no Python objects (none is kept)."""
    return size + (size >> ENCODED_SLACK_SHIFT)


# A compiled builder's buffer grows ahead of what it holds: over 1,000 builders the RSS grew 1.17x
# the bytes they held; a quarter more is counted against buffer.memory
ENCODED_SLACK_SHIFT = 2


def _charge(batch: _Batch) -> int:
    """What a buffered batch counts against buffer.memory."""
    return batch.charged


def _delta_fits(batch: _Batch, ts: int) -> bool:
    """A record's timestamp is stored as an int64 delta from its batch's first one."""
    return not batch.records.count or abs(ts - batch.records.first_ts) <= TIMESTAMP_MAX

"""Executor side: read one offset range from the segment files and hand Spark Arrow record batches.

Work is per fetched chunk (~4 MiB of batches), not per record: each chunk's records are decoded by
the codec, transposed with zip(), and turned into Arrow columns in bulk. Runs in Spark's Python
workers, so it imports pyarrow but nothing of pyspark.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import accumulate
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from klog.errors import KlogError, OffsetOutOfRangeError
from klog.store.limits import SPARK_PARTITION_READ_BYTES
from klog.store.reader import PartitionReader

if TYPE_CHECKING:
    from klog.client.interface import AnyStore
    from klog.spark.options import ReadOptions, WriteOptions

# Spark's Kafka source schema, with headers unless includeHeaders=false (klog's default is true:
# Spark's is false)
SCHEMA_DDL_NO_HEADERS = ("key binary, value binary, topic string, partition int, offset bigint, "
                         "timestamp timestamp, timestampType int")
SCHEMA_DDL = SCHEMA_DDL_NO_HEADERS + ", headers array<struct<key: string, value: binary>>"
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def arrow_schema(include_headers: bool = True) -> pa.Schema:
    """What Spark expects for SCHEMA_DDL: microsecond UTC timestamps, nullable fields."""
    return pa.schema([
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
    ] + ([pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE)))] if include_headers else []))


def read_range(data_dir: str, topic: str, partition: int, start: int, end: int, fail_on_data_loss: bool,
               schema: pa.Schema, read_committed: bool = False) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [start, end), below the high watermark (read_committed: below the
    last stable offset, aborted transactions left out), as Arrow batches."""
    from klog.client.store import Store

    store = Store(data_dir, create=False)
    try:
        part = store.partition(topic, partition)
        offset = _checked_start(part, start, fail_on_data_loss)
        stable = None
        if read_committed:
            from klog.store.txn import StableView

            stable = StableView(part.leader)
            end = min(end, stable.refresh(part.high_watermark()))
        end = min(end, part.high_watermark())
        # retention moving the log start past us meanwhile: skipped, or an error with failOnDataLoss
        reader = PartitionReader(part, offset, end, stable=stable, max_bytes=SPARK_PARTITION_READ_BYTES,
                                 on_start_moved=lambda at, _low: _checked_start(part, at, fail_on_data_loss))
        for fetched in reader:
            batch = to_record_batch(fetched.kept(), topic, partition, fetched.low, end, schema)
            if batch is not None:
                yield batch
    finally:
        store.close()


def open_options_store(opts: ReadOptions | WriteOptions) -> AnyStore:
    """A cluster when the options carry kafka.bootstrap.servers (Spark's Kafka source option), else
    the dataDir store; executors call this too, with the options pickled to them."""
    props = dict(opts.kafka)
    bootstrap = props.pop("bootstrap.servers", None)
    if bootstrap:
        from klog.client.remote.store import RemoteStore
        from klog.client.remote.target import ClusterTarget, check_bootstrap

        return RemoteStore(ClusterTarget(check_bootstrap(bootstrap), props))
    from klog.client.store import Store

    return Store(opts.data_dir, create=False)


def read_range_remote(kafka: tuple, topic: str, partition: int, start: int, end: int,
                      schema: pa.Schema, fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [start, end) of a cluster's partition, fetched over the Kafka protocol
    by this executor, as Arrow batches (one per fetch). A start the cluster's log start has passed
    (retention or deleted records since the plan) is an error with failOnDataLoss, as in read_range:
    the consumer would otherwise skip to the log start without a word."""
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget, check_bootstrap

    props = dict(kafka)
    target = ClusterTarget(check_bootstrap(props.pop("bootstrap.servers")), props)
    with RemoteStore(target) as store:
        start = _checked_start(store.partition(topic, partition), start, fail_on_data_loss)
        if start >= end:
            return
        yield from _fetch_range(store, target, topic, partition, start, end, schema)


def _fetch_range(store, target, topic: str, partition: int, start: int, end: int,  # noqa: ANN001
                 schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    from klog.client.consumer import StartKind, StartSpec

    start_at = StartSpec(StartKind.OFFSET, start)
    with store.consumer(topic, partitions=[partition], start=start_at, merge=False) as consumer:
        cursor = consumer.cursors[0]
        cursor.stop = min(end, cursor.stop if cursor.stop is not None else end)
        quiet_since = time.monotonic()
        while not cursor.done:
            records = consumer.poll(1.0)
            if not records:
                if time.monotonic() - quiet_since > store.timeout:
                    raise KlogError(f"no records from {target.label} for {store.timeout:g} s while reading "
                                    f"{topic}-{partition} [{start}, {end})")
                continue
            quiet_since = time.monotonic()
            yield _columns(topic, partition, [r.offset for r in records], [r.timestamp for r in records],
                           [r.key for r in records], [r.value for r in records],
                           [tuple(r.headers) for r in records], [r.timestamp_type for r in records], schema)


def _checked_start(part, start: int, fail_on_data_loss: bool) -> int:
    low = part.log_start_offset()
    if start < low:
        if fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"offset {start} of {part.topic}-{part.partition} is below its log start offset {low} (those "
                "records are gone; set failOnDataLoss=false to skip them)")
        return low
    return start


def to_record_batch(batches: list, topic: str, partition: int, low: int, high: int,
                    schema: pa.Schema) -> pa.RecordBatch | None:
    """Fetched batches -> one Arrow batch of their records with offsets in [low, high), or None if empty."""
    offsets: list[int] = []
    stamps: list[int] = []
    keys: list = []
    values: list = []
    headers: list = []
    ts_types: list[int] = []
    for fb in batches:
        if fb.header.is_control:
            continue
        records = fb.records()
        if not records:
            continue
        o, t, k, v, h = zip(*records, strict=True)  # per batch: small tuples, cache-friendly
        offsets += o
        stamps += t
        keys += k
        values += v
        headers += h
        ts_types += [fb.header.timestamp_type] * len(o)
    first = 0
    while first < len(offsets) and offsets[first] < low:  # only the first batch can start below `low`
        first += 1
    last = len(offsets)
    while last > first and offsets[last - 1] >= high:
        last -= 1
    n = last - first
    if n <= 0:
        return None
    if first or last < len(offsets):
        offsets, stamps, keys, values, headers, ts_types = (
            c[first:last] for c in (offsets, stamps, keys, values, headers, ts_types))
    return _columns(topic, partition, offsets, stamps, keys, values, headers, ts_types, schema)


def _columns(topic: str, partition: int, offsets: list, stamps: list, keys: list, values: list, headers: list,
             ts_types: list, schema: pa.Schema) -> pa.RecordBatch:
    n = len(offsets)
    millis = pa.array(stamps, pa.int64())
    columns = [
        _binary(keys),
        _binary(values),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(ts_types, pa.int32()) if len(set(ts_types)) > 1 else pa.repeat(pa.scalar(ts_types[0], pa.int32()), n),
    ]
    if "headers" in schema.names:
        columns.append(_headers(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(items: list) -> pa.Array:
    """bytes-or-None items as an Arrow binary array: one join and one offsets array, no per-item
    conversion (~2.5x faster than pa.array for 100-byte values)."""
    nulls = items.count(None)
    if nulls:
        return pa.nulls(len(items), pa.binary()) if nulls == len(items) else pa.array(items, pa.binary())
    ends = list(accumulate(map(len, items), initial=0))
    if ends[-1] >= 1 << 31:  # int32 offsets: a > 2 GiB column goes the slow, checked way
        return pa.array(items, pa.binary())
    return pa.Array.from_buffers(pa.binary(), len(items), [None, pa.array(ends, pa.int32()).buffers()[1],
                                                           pa.py_buffer(b"".join(items))])


def _headers(headers: tuple, list_type: pa.DataType) -> pa.Array:
    """Kafka headers as list<struct<key, value>>, built from flat key/value columns and list offsets."""
    offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    total = 0
    if not any(headers):  # the common case: no record has headers
        return pa.ListArray.from_arrays(pa.array([0] * (len(headers) + 1), pa.int32()),
                                        pa.array([], list_type.value_type), type=list_type)
    for hs in headers:
        if hs:
            for k, v in hs:
                keys.append(k)
                values.append(v)
            total += len(hs)
        offsets.append(total)
    struct_type = list_type.value_type
    try:
        key_array = pa.array(keys, struct_type.field(0).type)
    except (UnicodeEncodeError, pa.ArrowException):  # a header key that is not UTF-8 (kept as surrogates)
        key_array = pa.array([k.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for k in keys],
                             struct_type.field(0).type)
    items = pa.StructArray.from_arrays(
        [key_array, pa.array(values, struct_type.field(1).type)],
        fields=list(struct_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=list_type)

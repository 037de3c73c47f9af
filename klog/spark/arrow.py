"""Executor side: read one offset range from the segment files and hand Spark Arrow record batches.

Work is per fetched chunk (~4 MiB of batches), not per record: each chunk's records are decoded by
the codec, transposed with zip(), and turned into Arrow columns in bulk. Runs in Spark's Python
workers, so it imports pyarrow but nothing of pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from klog.errors import OffsetOutOfRangeError

FETCH_BYTES_MAX = 4 << 20  # per read(): ~40 k records of 100 bytes, a good Arrow batch for Spark

# Spark's Kafka source schema (plus headers always: Spark adds them with includeHeaders=true)
SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
              "timestampType int, headers array<struct<key: string, value: binary>>")
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def arrow_schema() -> pa.Schema:
    """What Spark expects for SCHEMA_DDL: microsecond UTC timestamps, nullable fields."""
    return pa.schema([
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE))),
    ])


def read_range(data_dir: str, topic: str, partition: int, start: int, end: int, fail_on_data_loss: bool,
               schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [start, end), below the high watermark, as Arrow batches."""
    from klog.client.store import Store

    store = Store(data_dir, create=False)
    try:
        part = store.partition(topic, partition)
        offset = _checked_start(part, start, fail_on_data_loss)
        end = min(end, part.high_watermark())
        while offset < end:
            batches = part.read(offset, FETCH_BYTES_MAX, upper=end)
            if not batches:
                low = part.log_start_offset()
                if offset < low:  # retention moved the log start while we read
                    offset = _checked_start(part, offset, fail_on_data_loss)
                    continue
                break
            records = []
            ts_types = []
            for fb in batches:
                if fb.header.is_control:
                    continue
                got = fb.records()
                records.extend(got)
                ts_types.append((fb.header.timestamp_type, len(got)))
            if records:
                batch = to_record_batch(records, ts_types, topic, partition, offset, end, schema)
                if batch.num_rows:
                    yield batch
            offset = max(offset, batches[-1].header.next_offset)
    finally:
        store.close()


def _checked_start(part, start: int, fail_on_data_loss: bool) -> int:
    low = part.log_start_offset()
    if start < low:
        if fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"offset {start} of {part.topic}-{part.partition} is below its log start offset {low} (those "
                "records are gone; set failOnDataLoss=false to skip them)")
        return low
    return start


def to_record_batch(records: list, ts_types: list[tuple[int, int]], topic: str, partition: int, low: int,
                    high: int, schema: pa.Schema) -> pa.RecordBatch:
    """Codec tuples (offset, timestamp, key, value, headers) -> one batch, trimmed to [low, high)."""
    offsets, stamps, keys, values, headers = zip(*records, strict=True)
    first = 0
    while offsets[first] < low:  # only the first fetched batch can start below `low`
        first += 1
    last = len(offsets)
    while last > first and offsets[last - 1] >= high:
        last -= 1
    n = last - first
    sl = slice(first, last)
    ts_type = pa.array([t for t, count in ts_types for _ in range(count)][sl], pa.int32()) \
        if len({t for t, _ in ts_types}) > 1 else pa.repeat(pa.scalar(ts_types[0][0], pa.int32()), n)
    millis = pa.array(stamps[sl], pa.int64())
    columns = [
        pa.array(keys[sl], pa.binary()),
        pa.array(values[sl], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets[sl], pa.int64()),
        pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
        ts_type,
        _headers(headers[sl], schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers(headers: tuple, list_type: pa.DataType) -> pa.Array:
    """Kafka headers as list<struct<key, value>>, built from flat key/value columns and list offsets."""
    offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    total = 0
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

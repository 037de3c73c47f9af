"""Writing DataFrame rows to topics: the columns Spark's Kafka sink takes, through klog's Producer.

Columns: `value` (required; binary or string), `key`, `headers` (array of key/value structs),
`topic` (the `topic` option overrides it, as in Spark), `partition` (else the producer's
partitioner) and, klog's addition, `timestamp` (else the time of writing). Other columns are
ignored, as Spark's Kafka sink does (a DataFrame read from a topic can be written back as is).
Save modes: append appends and overwrite is refused, as in Spark's Kafka sink. Spark's Kafka sink
also appends in errorifexists mode (Spark's default), but PySpark refuses that mode (and ignore)
for every Python data source before klog sees the write: use mode("append").
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator

from klog.errors import UsageError
from klog.spark.options import WriteOptions

SINK_COLUMNS = ("value", "key", "headers", "topic", "partition", "timestamp")


def check_sink_schema(schema, opts: WriteOptions) -> None:  # noqa: ANN001 - pyspark StructType
    """Fail on the driver, before any task runs, for a DataFrame the sink cannot write."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, TimestampType

    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise UsageError(f"writing to klog needs a 'value' column (has: {', '.join(fields) or 'none'})")
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise UsageError(f"column '{name}' must be binary or string, not {fields[name].simpleString()}")
    if "topic" in fields and not opts.topic and not isinstance(fields["topic"], StringType):
        raise UsageError("column 'topic' must be a string")
    if "topic" not in fields and not opts.topic:
        raise UsageError("writing to klog needs a 'topic' option or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], (IntegerType, LongType)):
        raise UsageError("column 'partition' must be an integer")
    if "timestamp" in fields and not isinstance(fields["timestamp"], (TimestampType, LongType)):
        raise UsageError("column 'timestamp' must be a timestamp or epoch milliseconds (bigint)")
    if "headers" in fields and not (isinstance(fields["headers"], ArrayType)
                                    and [f.name for f in fields["headers"].elementType.fields] == ["key", "value"]):
        raise UsageError("column 'headers' must be an array of struct<key: string, value: binary>")


def _binary_list(batch, name: str) -> list | None:  # noqa: ANN001 - pyarrow RecordBatch
    import pyarrow as pa

    if name not in batch.schema.names:
        return None
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def _millis_list(batch) -> list | None:  # noqa: ANN001
    import pyarrow as pa

    if "timestamp" not in batch.schema.names:
        return None
    column = batch.column("timestamp")
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64()).to_pylist()
        return [None if m is None else m // 1000 for m in micros]
    return column.to_pylist()


def send_batches(store, opts: WriteOptions, batches: Iterable) -> int:
    """Produce every row of the Arrow batches with acks per the options; returns the row count."""
    sent = 0
    with store.producer(acks=opts.acks, compression_type=opts.compression) as producer:
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            values = _binary_list(batch, "value")
            keys = _binary_list(batch, "key") or [None] * n
            names = batch.schema.names
            topics = batch.column("topic").to_pylist() if "topic" in names and not opts.topic else [opts.topic] * n
            parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
            stamps = _millis_list(batch) or [None] * n
            headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
            for value, key, topic, part, ts, hs in zip(values, keys, topics, parts, stamps, headers, strict=True):
                if topic is None:
                    if not opts.topic:
                        raise UsageError("a row has a null topic and there is no 'topic' option")
                    topic = opts.topic
                producer.send(topic, value, key=key, partition=part, timestamp=ts,
                              headers=[(h["key"], h["value"]) for h in hs] if hs else None)
            sent += n
    return sent


def stage_batches(directory: str, batches: Iterator) -> tuple[str | None, int]:
    """Executor side of the stream sink: write the task's rows to one Arrow IPC file, atomically."""
    import pyarrow as pa

    first = next(batches, None)
    if first is None:
        return None, 0
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{uuid.uuid4().hex}.arrow")
    tmp = path + ".tmp"
    rows = 0
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, first.schema) as out:
        for batch in _chain(first, batches):
            out.write_batch(batch)
            rows += batch.num_rows
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path, rows


def _chain(first, rest: Iterator) -> Iterator:  # noqa: ANN001
    yield first
    yield from rest


def staged_batches(paths: list[str]) -> Iterator:
    """Driver side: the staged files' batches, in the order Spark listed the tasks."""
    import pyarrow as pa

    for path in paths:
        with pa.memory_map(path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

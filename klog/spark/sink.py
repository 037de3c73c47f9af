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
from contextlib import contextmanager

from klog.errors import UsageError
from klog.spark.options import WriteOptions

SINK_COLUMNS = ("value", "key", "headers", "topic", "partition", "timestamp")
STAGING_ENV = "KLOG_SPARK_STAGING"  # set by klog's session on a local master (session._prepare_environment)


def staging_root(data_dir: str) -> str:
    """Where a write without a checkpoint stages its rows until the driver commits them: on a local
    master, in the work dir of the klog process that runs Spark (removed with it, even after a
    kill -9, so a stopped write leaves no rows behind); else in the store, which the executors share."""
    return os.environ.get(STAGING_ENV) or os.path.join(data_dir, "spark", "staging")


def check_sink_schema(schema, opts: WriteOptions) -> None:  # noqa: ANN001 - pyspark StructType
    """Fail on the driver, before any task runs, for a DataFrame the sink cannot write."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, TimestampType

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
    if "headers" in fields and not _headers_type(fields["headers"]):
        raise UsageError("column 'headers' must be array<struct<key: string, value: binary>> (Spark's Kafka "
                         f"type), not {fields['headers'].simpleString()}")


def _headers_type(t) -> bool:  # noqa: ANN001 - pyspark DataType
    """Spark's Kafka sink's headers type: array<struct<key: string, value: binary>>."""
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType

    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = t.elementType.fields
    return ([f.name for f in fields] == ["key", "value"] and isinstance(fields[0].dataType, StringType)
            and isinstance(fields[1].dataType, BinaryType))


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


def send_task(store, opts: WriteOptions, batches: Iterable) -> int:
    """A batch-write task's rows, produced only once all of them are there and checked: they are
    spooled to an unnamed local file as Spark hands them over, each batch checked (check_rows) with
    the producer's own rules. So a task that fails on a row the producer would refuse has
    produced nothing, rather than the rows before it. Not covered, as in Spark's Kafka sink: a
    task killed while producing, and an error in the query that Spark reports after ending the
    writer's input as if it were complete (Python writers cannot tell): the rows handed over
    before it are produced."""
    with store.producer(acks=opts.acks, compression_type=opts.compression) as producer, _spool_file() as f:
        return send_rows(producer, opts, _spooled(f, batches, lambda b: check_rows(producer, opts, b)))[0]


def send_staged(store, opts: WriteOptions, paths: list[str]) -> int:
    """The staged files' rows, checked (check_rows) before the first is sent: a row the producer
    would refuse fails the commit with nothing of the batch produced, not after a part of it."""
    with store.producer(acks=opts.acks, compression_type=opts.compression) as producer:
        for batch in staged_batches(paths):
            check_rows(producer, opts, batch)
        return send_rows(producer, opts, staged_batches(paths))[0]


NULL_TOPIC = "a row has a null topic and there is no 'topic' option"


def check_rows(producer, opts: WriteOptions, batch) -> None:  # noqa: ANN001 - Producer, pyarrow RecordBatch
    """What the producer would refuse in this batch, raised before any of the task's rows is sent:
    a null topic, a partition the topic does not have, a timestamp outside 0..2^63-1."""
    from klog.client.records import check_partition, check_timestamp

    names = batch.schema.names
    if opts.topic or "topic" not in names:
        topics = [opts.topic] * batch.num_rows
    else:
        if batch.column("topic").null_count:
            raise UsageError(NULL_TOPIC)
        topics = batch.column("topic").to_pylist()
    if "partition" in names and batch.column("partition").null_count < batch.num_rows:
        for topic, part in {(t, p) for t, p in zip(topics, batch.column("partition").to_pylist(), strict=True)
                            if p is not None}:
            check_partition(part, topic, producer.partitions_for(topic))
    stamps = [t for t in _millis_list(batch) or () if t is not None]
    if stamps:
        check_timestamp(min(stamps))
        check_timestamp(max(stamps))


@contextmanager
def _spool_file() -> Iterator:
    """An unnamed temporary file (gone with the process, killed too), in Spark's local directory."""
    import tempfile

    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d and os.path.isdir(d)]
    with tempfile.TemporaryFile(dir=dirs[0] if dirs else None) as f:
        yield f


def _spooled(f, batches: Iterable, check) -> Iterator:  # noqa: ANN001 - binary file, batch -> None
    """Every batch checked and written to f, then (only then) read back in order."""
    import pyarrow as pa

    writer = None
    for batch in batches:
        check(batch)
        if writer is None:
            writer = pa.ipc.new_stream(f, batch.schema)
        writer.write_batch(batch)
    if writer is None:
        return
    writer.close()
    f.seek(0)
    yield from pa.ipc.open_stream(f)


def send_rows(producer, opts: WriteOptions, batches: Iterable) -> tuple[int, set[str]]:  # noqa: ANN001 - Producer
    """Send every row of the Arrow batches through `producer`; returns the row count and the topics written."""
    sent, written = 0, set()
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
                    raise UsageError(NULL_TOPIC)
                topic = opts.topic
            producer.send(topic, value, key=key, partition=part, timestamp=ts,
                          headers=[(h["key"], h["value"]) for h in hs] if hs else None)
            written.add(topic)
        sent += n
    return sent, written


# -- exactly once: a write as one transaction, the batch id committed with it ------------------------
def sink_group(transactional_id: str) -> str:
    """The consumer group whose committed offset records the sink's last committed Spark batch."""
    return f"{transactional_id}.spark-sink"


def last_committed_batch(store, transactional_id: str) -> int | None:  # noqa: ANN001 - Store
    """The last batch id committed with `transactional_id` (None before the first): the group's highest
    committed offset is that batch id + 1. Read after the producer's init, which ends (aborts) what an
    older incarnation left open, so it is the last *committed* one."""
    from klog.errors import GroupError

    try:
        rows = store.describe_group(sink_group(transactional_id)).partitions
    except GroupError:
        return None
    offsets = [r.committed for r in rows if r.committed is not None]
    return max(offsets) - 1 if offsets else None


def send_transaction(store, opts: WriteOptions, batches: Iterable, batch_id: int | None = None) -> int | None:  # noqa: ANN001
    """All rows in one transaction with opts.transactional_id; with a batch id, that id is committed
    in the same transaction and a batch id already committed writes nothing (a replay after a crash).
    Returns the rows written, None for a skipped replay."""
    extra = {} if opts.transaction_timeout_ms is None else {"transaction_timeout_ms": opts.transaction_timeout_ms}
    with store.producer(transactional_id=opts.transactional_id, compression_type=opts.compression,
                        **extra) as producer:
        if batch_id is not None:
            last = last_committed_batch(store, opts.transactional_id)
            if last is not None and batch_id <= last:
                return None
        with producer.transaction():
            sent, written = send_rows(producer, opts, batches)
            if batch_id is not None and written:
                producer.flush()
                _test_crash_point("flushed", batch_id)
                producer.send_offsets(sink_group(opts.transactional_id), {(min(written), 0): batch_id + 1},
                                      metadata=f"spark batch {batch_id}")
        return sent


def _test_crash_point(where: str, batch_id: int) -> None:
    """Fault injection for the kill tests: KLOG_SPARK_SINK_KILL=WHERE:BATCH SIGKILLs, there, the driver
    (the klog process, started as a session leader, as the test does), its JVM and this Python worker's
    own process group (Spark's worker daemon and its workers) at once. The JVM leads a session of its
    own when klog.spark.launch started it (the driver is then its parent), else it is in the driver's."""
    wanted = os.environ.get("KLOG_SPARK_SINK_KILL")
    if not wanted or wanted != f"{where}:{batch_id}":
        return
    import signal

    def cmdline(pid: int) -> bytes:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()

    leader = os.getsid(0)
    with open(f"/proc/{leader}/stat", "rb") as f:
        parent = int(f.read().rsplit(b")", 1)[1].split()[1])
    if b"\0-m\0klog\0" in cmdline(parent):  # the JVM's own session: the driver started it
        os.kill(parent, signal.SIGKILL)
        os.killpg(leader, signal.SIGKILL)
    elif b"\0-m\0klog\0" in cmdline(leader):  # the driver's session, JVM in it (never a shell's)
        os.killpg(leader, signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)


class StreamCommitter:
    """The driver's commit of a micro-batch whose tasks staged their rows (stage_batches).

    With a transactional id: the rows and the batch id in one transaction, a replayed batch skipped
    (exactly once, even when the driver dies inside the commit). Without one: the rows produced, then
    a marker file for the batch in the checkpoint, a replayed batch with a marker skipped (exactly
    once except when the driver dies between the first record and the marker). No checkpoint, no
    transactional id: every replay is written again.
    """

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        base = (os.path.join(opts.checkpoint, "klog-sink") if opts.checkpoint
                else os.path.join(staging_root(opts.data_dir), uuid.uuid4().hex))
        self.staging_dir = os.path.join(base, "staging")
        self.commits_dir = os.path.join(base, "commits") if opts.checkpoint else None

    def commit(self, store, paths: list[str], batch_id: int) -> None:  # noqa: ANN001 - Store
        if self.opts.transactional_id is not None:
            send_transaction(store, self.opts, staged_batches(paths), batch_id)
        else:
            marker = os.path.join(self.commits_dir, str(batch_id)) if self.commits_dir else None
            if marker is None or not os.path.exists(marker):
                send_staged(store, self.opts, paths)
                if marker is not None:
                    _write_marker(marker)
                    _test_crash_point("marked", batch_id)
        discard(paths)


def discard(paths: Iterable[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def sweep(directory: str) -> None:
    """Remove what is left in a staging directory once its batch is committed: the files of task
    attempts that failed, were killed or lost to a speculative copy, and of a run killed before
    its commit discarded them. No later batch needs them (a replayed batch stages its rows again)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    discard(os.path.join(directory, name) for name in names)


def _write_marker(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write("done\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


class ForeachBatchSink:
    """The klog sink as a `foreachBatch` function, for Update mode in a session without klog's jar:

        counts.writeStream.outputMode("update").foreachBatch(
            ForeachBatchSink(topic="counts", checkpointLocation=ckpt, **{"transactional.id": "counts"})
        ).option("checkpointLocation", ckpt).start()

    Spark asks a data source for Update mode through a JVM interface its Python data sources do not
    implement; klog-spark.jar (klog/spark/jar.py) adds it, and without that jar on the driver's
    classpath Spark refuses `writeStream.format("klog").outputMode("update")`. Spark's Kafka sink
    appends each updated row, and so does this. It takes the sink's options and writes each
    micro-batch as a batch write with the `batchId` option: tasks stage, the driver commits, with
    the stream writer's exactly-once rules.
    """

    def __init__(self, **options: str) -> None:
        from klog.spark.options import parse_write_options

        parse_write_options(options)  # a bad option fails now, not at the first batch
        self.options = {k: str(v) for k, v in options.items()}

    def __call__(self, df, batch_id: int) -> None:  # noqa: ANN001 - DataFrame
        df.write.format("klog").options(**self.options).option("batchId", str(batch_id)).mode("append").save()

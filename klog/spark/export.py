"""`klog spark export`: a topic (or a range of it) to Parquet, JSON, CSV or ORC files, through Spark.

Columns: with --value-format text (or binary) Kafka's own (topic, partition, offset, timestamp, key,
value, headers); with json the fields of the JSON values plus _key, _partition, _offset and
_timestamp (underscored so they do not collide with the record's own fields).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from klog.errors import UsageError
from klog.spark.options import location, open_store

FORMATS = ("parquet", "json", "csv", "orc")
VALUE_FORMATS = ("text", "json", "binary")
SCHEMA_SAMPLE_RECORDS = 1000  # JSON schema inference looks at the first records of each partition
DERIVED_PARTITION_COLUMNS = {"date": "to_date({ts})", "hour": "date_format({ts}, 'yyyy-MM-dd-HH')"}


@dataclass
class RangeRequest:
    """The consume range options: -o/--offset, --since, --until, -p."""

    topic: str
    offset: str | None = None
    since: str | None = None
    until: str | None = None
    partitions: list[int] | None = None


@dataclass
class ExportRequest:
    range: RangeRequest
    to: str
    out: str
    value_format: str = "text"
    schema: str | None = None
    partition_by: list[str] = field(default_factory=list)
    overwrite: bool = False


@dataclass
class ExportSummary:
    records: int
    files: int
    bytes: int
    out: str


def source_options(store, data_dir: str, req: RangeRequest) -> dict[str, str]:
    """The klog source options for a consume-style range (kcat's -o meanings, as `klog consume`)."""
    from klog.broker.resolve import resolve_partitions
    from klog.client.consumer import StartKind
    from klog.client.timespec import parse_range
    from klog.errors import OffsetOutOfRangeError

    start, until_ms = parse_range(req.offset, req.since, req.until, with_tail=False)  # as consume and replay
    store.topic(req.topic)  # unknown topic: one clear line before Spark starts planning
    parts = sorted(set(resolve_partitions(store, req.topic, req.partitions or None)))
    opts = {**location(data_dir), "assign": json.dumps({req.topic: parts})}
    if start.kind is StartKind.TIMESTAMP:
        opts["startingTimestamp"] = str(start.value)
        opts["startingOffsetsByTimestampStrategy"] = "latest"  # as klog consume --since: nothing later, nothing read
    elif start.kind in (StartKind.END, StartKind.OFFSET, StartKind.RELATIVE):
        starts = {}  # the ends now (a batch read refuses -1, latest, as Spark's)
        for p in parts:
            part = store.partition(req.topic, p)
            try:
                starts[str(p)] = start.offset(part.log_start_offset(), part.high_watermark(), None,
                                              f"{req.topic}-{p}")
            except OffsetOutOfRangeError as e:
                raise UsageError(str(e)) from None
        opts["startingOffsets"] = json.dumps({req.topic: starts})
    if until_ms is not None:
        opts["endingTimestamp"] = str(until_ms)
    return opts


def sample_values(store, topic: str, partitions: list[int] | None = None,
                  limit: int = SCHEMA_SAMPLE_RECORDS) -> list[str]:
    """The first values of each partition, as text, for schema inference (read on the driver)."""
    out: list[str] = []
    count = store.partition_count(topic)
    wanted = partitions or list(range(count))
    per_partition = max(1, limit // len(wanted))
    for p in wanted:
        for r in store.consumer(topic, partitions=[p], count=per_partition, merge=False):
            if r.value is not None:
                out.append(r.value.decode("utf-8", "replace"))
    return out


def infer_json_schema(spark, samples: list[str], topic: str):  # noqa: ANN001, ANN201 - StructType
    """Spark's own JSON inference over the sample; values that are not JSON objects are a usage error."""
    if not samples:
        raise UsageError(f"topic '{topic}' has no records to infer a JSON schema from: give --schema")
    import tempfile

    if spark.sparkContext.master.startswith("local"):
        # from a file, so inference is a JVM-only job (an RDD of Python strings starts a Python worker, ~2 s);
        # raw newlines can only sit between JSON tokens, so spaces replace them without changing a value
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", prefix="klog-schema-") as f:
            f.write("\n".join(s.replace("\n", " ") for s in samples) + "\n")
            f.flush()
            schema = spark.read.json(f"file://{f.name}").schema
    else:  # executors elsewhere cannot see a driver-local file
        schema = spark.read.json(spark.sparkContext.parallelize(samples, 1)).schema
    names = [f.name for f in schema.fields]
    if not names or "_corrupt_record" in names:
        raise UsageError(f"values of '{topic}' are not all JSON objects: use --value-format text, or --schema")
    return schema


def shaped(spark, raw, value_format: str, schema, for_csv: bool = False):  # noqa: ANN001, ANN201
    """The export/SQL view of a topic's raw source DataFrame."""
    from pyspark.sql import functions as F

    if value_format == "json":
        parsed = F.from_json(F.col("value").cast("string"), schema)
        return raw.select(parsed.alias("_v"), F.col("key").cast("string").alias("_key"),
                          F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
                          F.col("timestamp").alias("_timestamp")).select("_v.*", "_key", "_partition", "_offset",
                                                                        "_timestamp")
    if value_format == "text":
        # a cast alone keeps invalid UTF-8 bytes, which a Parquet STRING column must not hold:
        # invalid sequences become U+FFFD, as --value-format's help says
        def text(column):  # noqa: ANN001, ANN202
            return F.make_valid_utf8(column.cast("string"))

        columns = [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp"),
                   text(F.col("key")).alias("key"), text(F.col("value")).alias("value")]
        if not for_csv:
            columns.append(F.transform("headers", lambda h: F.struct(
                h["key"].alias("key"), text(h["value"]).alias("value"))).alias("headers"))
        return raw.select(*columns)
    columns = [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp"), F.col("key"),
               F.col("value")]
    if not for_csv:
        columns.append(F.col("headers"))
    return raw.select(*columns)


def _partition_columns(df, names: list[str], value_format: str):  # noqa: ANN001, ANN201
    from pyspark.sql import functions as F

    ts = "_timestamp" if value_format == "json" else "timestamp"
    for name in names:
        if name in df.columns:
            continue
        if name not in DERIVED_PARTITION_COLUMNS:
            raise UsageError(f"cannot partition by '{name}': use a column ({', '.join(df.columns)}) or "
                             f"{' or '.join(DERIVED_PARTITION_COLUMNS)} (of the record timestamp, UTC)")
        df = df.withColumn(name, F.expr(DERIVED_PARTITION_COLUMNS[name].format(ts=ts)))
    return df


def check_format(to: str) -> None:
    if to not in FORMATS:
        raise UsageError(f"invalid --to '{to}': use {', '.join(FORMATS)}")


def check_output(to: str, out: str, overwrite: bool) -> None:
    """--to is a format Spark writes; a local --out that exists needs --overwrite."""
    check_format(to)
    if "://" not in out and os.path.exists(out) and not overwrite:
        raise UsageError(f"{out} exists: choose another --out or add --overwrite")


def check_request(data_dir: str, req: ExportRequest) -> None:
    """What can be checked without Spark (options, the topic, its partitions): fails before a JVM starts."""
    check_format(req.to)
    if req.value_format not in VALUE_FORMATS:
        raise UsageError(f"invalid --value-format '{req.value_format}': use {', '.join(VALUE_FORMATS)}")
    if req.to == "csv" and req.value_format == "binary":
        raise UsageError("CSV cannot hold binary values: use --value-format text or json")
    if req.schema and req.value_format != "json":
        raise UsageError("--schema is for --value-format json")
    check_output(req.to, req.out, req.overwrite)
    with open_store(data_dir) as store:
        source_options(store, data_dir, req.range)


def export(spark, data_dir: str, req: ExportRequest) -> ExportSummary:  # noqa: ANN001 - SparkSession
    """Read the range through the klog source and write it with Spark's file writers."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    check_request(data_dir, req)
    local = "://" not in req.out
    with open_store(data_dir) as store:
        opts = source_options(store, data_dir, req.range)
        schema = None
        if req.value_format == "json":
            schema = req.schema or infer_json_schema(spark, sample_values(store, req.range.topic,
                                                                          req.range.partitions), req.range.topic)
    # split partitions into ranges so every core reads (one partition would otherwise be one task)
    opts["minPartitions"] = str(max(1, spark.sparkContext.defaultParallelism))
    raw = spark.read.format("klog").options(**opts).load()
    df = _partition_columns(shaped(spark, raw, req.value_format, schema, for_csv=req.to == "csv"),
                            req.partition_by, req.value_format)
    observation = Observation("klog_export")
    df = df.observe(observation, F.count(F.lit(1)).alias("records"))
    writer = df.write.mode("overwrite" if req.overwrite else "errorifexists")
    if req.partition_by:
        writer = writer.partitionBy(*req.partition_by)
    if req.to == "csv":
        writer = writer.option("header", "true").option("escape", '"')  # RFC 4180 "" quoting, not Spark's \\
    writer.format(req.to).save(req.out)
    files, size = output_files(req.out) if local else (0, 0)
    return ExportSummary(int(observation.get["records"]), files, size, req.out)


def output_files(out: str) -> tuple[int, int]:
    """Data files Spark wrote (not _SUCCESS or .crc files) and their bytes."""
    files = size = 0
    for folder, _, names in os.walk(out):
        for name in names:
            if not name.startswith(("_", ".")):
                files += 1
                size += os.path.getsize(os.path.join(folder, name))
    return files, size

"""`klog spark sql`: every topic a query names is a view; JSON values become columns.

A topic whose sampled values are all JSON objects gets its fields plus _key, _partition, _offset
and _timestamp; any other topic gets Kafka's columns with key and value as text. Results go to
rows for the CLI to print, to files (--out), or to a topic (--to-topic).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from klog.errors import UsageError
from klog.spark.export import check_output, infer_json_schema, output_files, sample_values, shaped
from klog.spark.options import location, open_store

VIEW_SAMPLE_RECORDS = 200


@dataclass
class SqlResult:
    records: int
    files: int = 0
    bytes: int = 0


def referenced_topics(query: str, topics: list[str]) -> list[str]:
    """The topics whose names appear in the query as a word (or `back-quoted`)."""
    found = []
    for name in topics:
        rx = re.compile(r"(?<![\w.`-])" + re.escape(name) + r"(?![\w`-])|`" + re.escape(name) + "`")
        if rx.search(query):
            found.append(name)
    return found


def value_format_of(samples: list[str]) -> str:
    """json when every sampled value is a JSON object, else text."""
    if not samples:
        return "text"
    for text in samples:
        try:
            if not isinstance(json.loads(text), dict):
                return "text"
        except ValueError:
            return "text"
    return "json"


def register_views(spark, data_dir: str, query: str, value_format: str = "auto") -> list[str]:  # noqa: ANN001
    """A temp view per topic the query names; returns their names."""
    views = []
    with open_store(data_dir) as store:
        names = referenced_topics(query, store.topic_names())
        for name in names:
            samples = sample_values(store, name, limit=VIEW_SAMPLE_RECORDS)
            fmt = value_format_of(samples) if value_format == "auto" else value_format
            schema = infer_json_schema(spark, samples, name) if fmt == "json" else None
            raw = (spark.read.format("klog").option("subscribe", name).options(**location(data_dir))
                   .option("minPartitions", str(max(1, spark.sparkContext.defaultParallelism))).load())
            shaped(spark, raw, fmt, schema).createOrReplaceTempView(f"`{name}`")
            views.append(name)
    return views


def check_value_format(value_format: str) -> None:
    if value_format not in ("auto", "json", "text", "binary"):
        raise UsageError(f"invalid --value-format '{value_format}': use auto, json, text or binary")


def query(spark, data_dir: str, text: str, value_format: str = "auto"):  # noqa: ANN001, ANN201 - DataFrame
    check_value_format(value_format)
    register_views(spark, data_dir, text, value_format)
    return spark.sql(text)


def rows(df) -> tuple[list[str], Iterator[dict]]:  # noqa: ANN001
    """Column names and the rows as JSON-ready dicts, streamed from the executors."""
    def iterate() -> Iterator[dict]:
        for row in df.toLocalIterator():
            yield {k: jsonable(v) for k, v in row.asDict(recursive=True).items()}

    return list(df.columns), iterate()


def jsonable(value):  # noqa: ANN001, ANN201
    """Spark values as JSON: timestamps in ISO 8601, bytes as text (or base64 when not UTF-8)."""
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            import base64

            return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def to_sink_frame(df):  # noqa: ANN001, ANN201
    """Rows for a topic: as they are when they have a `value` column, else each row as a JSON value."""
    from pyspark.sql import functions as F

    from klog.spark.sink import SINK_COLUMNS

    if "value" in df.columns:
        return df.select(*[c for c in df.columns if c in SINK_COLUMNS])
    # a column name is back-quoted with its own backticks doubled (a JSON key may hold one)
    return df.select(F.to_json(F.struct(*[F.col("`" + c.replace("`", "``") + "`") for c in df.columns]))
                     .alias("value"))


def write_topic(df, data_dir: str, topic: str) -> int:  # noqa: ANN001
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("klog_sql_topic")
    out = to_sink_frame(df).observe(observation, F.count(F.lit(1)).alias("records"))
    out.write.format("klog").option("topic", topic).options(**location(data_dir)).mode("append").save()
    return int(observation.get["records"])


def write_files(df, out: str, to: str, overwrite: bool) -> SqlResult:  # noqa: ANN001
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    check_output(to, out, overwrite)
    observation = Observation("klog_sql_files")
    writer = df.observe(observation, F.count(F.lit(1)).alias("records")).write
    writer = writer.mode("overwrite" if overwrite else "errorifexists")
    if to == "csv":
        writer = writer.option("header", "true").option("escape", '"')  # RFC 4180 "" quoting, not Spark's \\
    writer.format(to).save(out)
    files, size = output_files(out) if "://" not in out else (0, 0)
    return SqlResult(int(observation.get["records"]), files, size)

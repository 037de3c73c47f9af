"""`klog spark stream`: a Structured Streaming job from one topic to another, with a checkpoint.

The source topic is a streaming view named after it (and `source`), with Kafka's columns and key
and value as text; --sql selects from it, or a --script defines `transform(df) -> df`. Rows with a
`value` column are written as they are (key, headers, partition, timestamp too), other rows as
JSON values. The checkpoint holds the progress, so a restarted job goes on where it stopped.
"""

from __future__ import annotations

import math
import os
import re
import runpy
from collections.abc import Callable
from dataclasses import dataclass

from klog.errors import UsageError
from klog.spark.options import location, open_store

SOURCE_VIEW = "source"
OUTPUT_MODES = ("append", "update", "complete")
VIEW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass
class StreamRequest:
    source: str
    target: str
    sql: str | None = None
    script: str | None = None
    checkpoint: str | None = None
    available_now: bool = False
    trigger_seconds: float = 1.0
    starting_offsets: str = "earliest"
    max_records_per_batch: int | None = None
    output_mode: str = "append"
    watermark: str | None = None  # "COLUMN,DELAY", e.g. "timestamp,10 minutes"
    transactional_id: str | None = None


@dataclass
class StreamSummary:
    batches: int
    records: int  # input records the job processed in this run
    checkpoint: str


def default_checkpoint(data_dir: str, source: str, target: str) -> str:
    """A klog-managed checkpoint per source/target pair: <data dir>/spark/checkpoints/<source>--<target>."""
    return os.path.join(data_dir, "spark", "checkpoints", f"{source}--{target}")


def _transform(spark, view, req: StreamRequest):  # noqa: ANN001, ANN201
    if (req.sql is None) == (req.script is None):
        raise UsageError("give one of --sql and --script")
    if req.sql is not None:
        return spark.sql(req.sql)
    if not os.path.isfile(req.script):
        raise UsageError(f"no such script: {req.script}")
    try:
        namespace = runpy.run_path(req.script)
        transform = namespace.get("transform")
        if not callable(transform):
            raise UsageError(f"{req.script} defines no transform(df) function")
        return transform(view)
    except Exception as e:
        from klog.errors import KlogError
        from klog.spark.failures import is_spark_error
        from klog.spark.run import script_error

        if isinstance(e, KlogError) or is_spark_error(e):
            raise  # klog's line, or Spark's (spark_errors) for a query Spark cannot run
        raise script_error(e, req.script) from None


def check_request(data_dir: str, req: StreamRequest) -> None:
    """What can be checked without Spark (options, script, source topic): fails before a JVM starts."""
    if (req.sql is None) == (req.script is None):
        raise UsageError("give one of --sql and --script")
    if req.script is not None and not os.path.isfile(req.script):
        raise UsageError(f"no such script: {req.script}")
    if not math.isfinite(req.trigger_seconds) or req.trigger_seconds < 0:
        raise UsageError(f"invalid --trigger-seconds '{req.trigger_seconds:g}': use 0 or more seconds")
    if req.max_records_per_batch is not None and req.max_records_per_batch < 1:
        raise UsageError(f"invalid --max-records-per-batch '{req.max_records_per_batch}': use 1 or more")
    if req.starting_offsets not in ("earliest", "latest"):
        raise UsageError(f"invalid --starting-offsets '{req.starting_offsets}': use earliest or latest")
    if req.output_mode not in OUTPUT_MODES:
        raise UsageError(f"invalid --output-mode '{req.output_mode}': use {', '.join(OUTPUT_MODES)}")
    if req.watermark is not None:
        parse_watermark(req.watermark)
    if req.transactional_id is not None:
        from klog.meta.transactions import validate_transactional_id

        validate_transactional_id(req.transactional_id)
    with open_store(data_dir) as store:
        store.topic(req.source)  # an unknown source topic: one line before Spark plans anything
        check_target_topic(store, req.target)


def check_target_topic(store, topic: str) -> None:  # noqa: ANN001 - AnyStore
    """A topic the command will produce to: a legal name, and there or creatable (else the first
    batch would fail after Spark started)."""
    from klog.errors import UnknownTopicError
    from klog.store.names import validate_topic_name

    validate_topic_name(topic)
    if not store.has_topic(topic) and not store.auto_create_enabled():
        raise UnknownTopicError(f"unknown topic '{topic}' (auto.create.topics.enable is false: create it first)")


def parse_watermark(text: str) -> tuple[str, str]:
    """--watermark COLUMN,DELAY (Spark's withWatermark(column, delay)): ("timestamp", "10 minutes")."""
    column, _, delay = text.partition(",")
    column, delay = column.strip(), delay.strip()
    if not column or not delay:
        raise UsageError(f"invalid --watermark '{text}': use COLUMN,DELAY such as 'timestamp,10 minutes'")
    if column not in VIEW_COLUMNS:
        raise UsageError(f"invalid --watermark '{text}': the source view's time column is 'timestamp' "
                         f"(columns: {', '.join(VIEW_COLUMNS)})")
    return column, delay


def _refused(req: StreamRequest, exc: Exception) -> Exception:
    """Spark's refusal of the query (an analysis error: a mode it cannot run, a bad watermark) as one
    usage line naming the option; other errors as they are."""
    from pyspark.errors import AnalysisException, IllegalArgumentException, ParseException

    from klog.spark.failures import from_spark

    if not isinstance(exc, (AnalysisException, IllegalArgumentException, ParseException)):
        return exc
    message = str(from_spark(exc)).removeprefix("Spark: ")
    lowered = message.lower()
    hint = ""
    if req.output_mode == "append" and "output mode" in lowered and "aggregation" in lowered:
        hint = " (use --output-mode update or complete, or --watermark)"
    return UsageError(f"Spark refuses this query in --output-mode {req.output_mode}: {message.rstrip(';')}{hint}")


def start(spark, data_dir: str, req: StreamRequest):  # noqa: ANN001, ANN201 - StreamingQuery
    from klog.spark.sql import to_sink_frame

    check_request(data_dir, req)
    reader = (spark.readStream.format("klog").option("subscribe", req.source).options(**location(data_dir))
              .option("startingOffsets", req.starting_offsets))
    if req.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(req.max_records_per_batch))
    view = reader.load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic",
                                    "partition", "offset", "timestamp", "timestampType", "headers")
    if req.watermark is not None:
        try:
            view = view.withWatermark(*parse_watermark(req.watermark))
        except Exception as e:  # noqa: BLE001 - Spark's error for a delay it cannot parse
            from pyspark.errors import PySparkException

            if not isinstance(e, PySparkException):
                raise
            from klog.spark.failures import from_spark

            raise UsageError(f"invalid --watermark '{req.watermark}': "
                             f"{str(from_spark(e)).removeprefix('Spark: ')}") from None
    view.createOrReplaceTempView(SOURCE_VIEW)
    if re.fullmatch(r"[A-Za-z_]\w*", req.source):
        view.createOrReplaceTempView(req.source)
    else:
        view.createOrReplaceTempView(f"`{req.source}`")
    out = to_sink_frame(_transform(spark, view, req))
    checkpoint = req.checkpoint or default_checkpoint(data_dir, req.source, req.target)
    sink = {"topic": req.target, **location(data_dir), "checkpointLocation": checkpoint}
    if req.transactional_id is not None:
        sink["transactional.id"] = req.transactional_id
    from klog.spark.jar import update_mode_available

    if req.output_mode == "update" and not update_mode_available(spark):  # a session without klog's jar
        from klog.spark.sink import ForeachBatchSink

        writer = out.writeStream.foreachBatch(ForeachBatchSink(**sink))
    else:
        writer = out.writeStream.format("klog").options(**sink)
    writer = (writer.outputMode(req.output_mode).option("checkpointLocation", checkpoint)
              .queryName(f"klog_{req.source}_to_{req.target}".replace("-", "_").replace(".", "_")))
    writer = writer.trigger(availableNow=True) if req.available_now \
        else writer.trigger(processingTime=f"{req.trigger_seconds} seconds")
    try:
        return writer.start()
    except Exception as e:
        raise _refused(req, e) from None


def wait(query, poll_seconds: float = 0.5, ready: Callable[[], None] | None = None) -> int:  # noqa: ANN001
    """Block until the query (a StreamingQuery) ends; Ctrl-C or SIGTERM stops it cleanly. Returns the
    signal that stopped it, or 0. `ready` runs once the handlers are in place (the CLI's "streaming
    ..." line: a signal sent on seeing it is then always the clean stop, never klog's plain exit).

    PySpark's own SIGINT handler cancels jobs through Py4J from inside the blocked Py4J call and
    logs reentrancy tracebacks, and a SIGTERM raised there would interrupt that call; while waiting,
    handlers that only set a flag replace them.
    """
    import signal
    import threading

    stop = threading.Event()
    stopped_by = []
    previous = {}

    def flag(signum: int, frame: object) -> None:
        from klog.spark.failures import note_stop

        note_stop(signum)  # an error while the query stops does not replace the stop
        stopped_by.append(signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, flag) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if ready is not None:
            ready()
        while not query.awaitTermination(poll_seconds):  # bounded waits: the flag is seen within one
            if stop.is_set():
                from klog.spark.session import mute_jvm

                _between_batches(query)
                mute_jvm()
                query.stop()
                return stopped_by[0]
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _between_batches(query, timeout_s: float = 10.0) -> None:  # noqa: ANN001 - StreamingQuery
    """Wait (bounded) until no micro-batch runs: a batch stopped after its sink wrote but before
    Spark recorded its progress would be missing from the summary (streamed 10 records, 25 written)."""
    import time

    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.02)


def summarize(query, checkpoint: str) -> StreamSummary:  # noqa: ANN001 - StreamingQuery
    """Batches with records, and their records, from Spark's recent progress (its last 100 batches)."""
    busy = [p for p in query.recentProgress if p is not None and p.numInputRows]
    return StreamSummary(len(busy), sum(int(p.numInputRows) for p in busy), checkpoint)

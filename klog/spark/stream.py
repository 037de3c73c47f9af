"""`klog spark stream`: a Structured Streaming job from one topic to another, with a checkpoint.

The source topic is a streaming view named after it (and `source`), with Kafka's columns and key
and value as text; --sql selects from it, or a --script defines `transform(df) -> df`. Rows with a
`value` column are written as they are (key, headers, partition, timestamp too), other rows as
JSON values. The checkpoint holds the progress, so a restarted job goes on where it stopped.
"""

from __future__ import annotations

import os
import re
import runpy
from dataclasses import dataclass

from klog.errors import UsageError
from klog.spark.options import location, open_store

SOURCE_VIEW = "source"


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
    namespace = runpy.run_path(req.script)
    transform = namespace.get("transform")
    if not callable(transform):
        raise UsageError(f"{req.script} defines no transform(df) function")
    return transform(view)


def check_request(data_dir: str, req: StreamRequest) -> None:
    """What can be checked without Spark (options, script, source topic): fails before a JVM starts."""
    if (req.sql is None) == (req.script is None):
        raise UsageError("give one of --sql and --script")
    if req.script is not None and not os.path.isfile(req.script):
        raise UsageError(f"no such script: {req.script}")
    if req.starting_offsets not in ("earliest", "latest"):
        raise UsageError(f"invalid --starting-offsets '{req.starting_offsets}': use earliest or latest")
    with open_store(data_dir) as store:
        store.topic(req.source)  # an unknown source topic: one line before Spark plans anything


def start(spark, data_dir: str, req: StreamRequest):  # noqa: ANN001, ANN201 - StreamingQuery
    from klog.spark.sql import to_sink_frame

    check_request(data_dir, req)
    reader = (spark.readStream.format("klog").option("subscribe", req.source).options(**location(data_dir))
              .option("startingOffsets", req.starting_offsets))
    if req.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(req.max_records_per_batch))
    view = reader.load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic",
                                    "partition", "offset", "timestamp", "timestampType", "headers")
    view.createOrReplaceTempView(SOURCE_VIEW)
    if re.fullmatch(r"[A-Za-z_]\w*", req.source):
        view.createOrReplaceTempView(req.source)
    else:
        view.createOrReplaceTempView(f"`{req.source}`")
    out = to_sink_frame(_transform(spark, view, req))
    checkpoint = req.checkpoint or default_checkpoint(data_dir, req.source, req.target)
    writer = (out.writeStream.format("klog").option("topic", req.target).options(**location(data_dir))
              .option("checkpointLocation", checkpoint).queryName(f"klog_{req.source}_to_{req.target}"
                                                                  .replace("-", "_").replace(".", "_")))
    writer = writer.trigger(availableNow=True) if req.available_now \
        else writer.trigger(processingTime=f"{req.trigger_seconds} seconds")
    return writer.start()


def wait(query, poll_seconds: float = 0.5) -> bool:  # noqa: ANN001 - StreamingQuery
    """Block until the query ends; Ctrl-C stops it cleanly. Returns True if interrupted.

    PySpark's own SIGINT handler cancels jobs through Py4J from inside the blocked Py4J call and
    logs reentrancy tracebacks; while waiting, a handler that only sets a flag replaces it.
    """
    import signal
    import threading

    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        while not query.awaitTermination(poll_seconds):  # bounded waits: the flag is seen within one
            if stop.is_set():
                query.stop()
                return True
        return False
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def summarize(query, checkpoint: str) -> StreamSummary:  # noqa: ANN001 - StreamingQuery
    """Batches with records, and their records, from Spark's recent progress (its last 100 batches)."""
    busy = [p for p in query.recentProgress if p is not None and p.numInputRows]
    return StreamSummary(len(busy), sum(int(p.numInputRows) for p in busy), checkpoint)

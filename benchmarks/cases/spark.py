"""`klog spark export` to Parquet beside the same export without Spark, and Spark's fixed cost.

Workload: N records (default 1,000,000) with 100-byte JSON values, null keys, in P partitions
(default 1; Spark still uses both cores, since export splits ranges with minPartitions).
Reports:
  - direct: klog's Python consumer into pyarrow columns, pyarrow.parquet.write_table (one core);
  - Spark: the export library call in an already started session (throughput after start-up), twice:
    the first run pays for the JVM compiling its hot paths, the second shows a warm session;
  - Spark's fixed cost: starting the session plus a first tiny job (no class archive), and a one-shot
    `klog spark export` of a 10-record topic as a process (what a user waits for at least): the first
    ever, which records the JVM class archive (klog/spark/classcache.py), and two that use it.
Both paths write the same columns: topic, partition, offset, timestamp, key, value (text), headers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

from harness import REPO, Bench, rate

import klog


def make_topic(data_dir: str, topic: str, n: int, partitions: int) -> None:
    def value(i: int) -> bytes:
        head = json.dumps({"id": i, "user": f"u{i % 1000:04d}", "pad": ""})
        return (head[:-2] + "x" * (100 - len(head)) + '"}').encode()  # exactly 100 bytes of JSON

    values = [value(i) for i in range(n)]
    assert all(len(v) == 100 for v in values[:10]) and json.loads(values[0])["id"] == 0
    with klog.open(data_dir) as store:
        store.create_topic(topic, partitions=partitions)
        with store.producer() as producer:
            chunk = 10_000
            for p in range(partitions):
                share = values[p::partitions]
                for i in range(0, len(share), chunk):
                    producer.send_values(topic, share[i:i + chunk], partition=p)


def direct_export(data_dir: str, topic: str, out: str) -> int:
    """The same export without Spark: consumer -> Arrow columns per 100 k records -> one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("ms", tz="UTC")), ("key", pa.string()), ("value", pa.string()),
                        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))])
    rows = 0
    with klog.open(data_dir, create=False) as store, pq.ParquetWriter(out, schema) as writer:
        buf: list = []

        def flush() -> None:
            cols = list(zip(*buf, strict=True))
            writer.write_batch(pa.RecordBatch.from_arrays([
                pa.array(cols[0], pa.string()), pa.array(cols[1], pa.int32()), pa.array(cols[2], pa.int64()),
                pa.array(cols[3], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                pa.array(cols[4], pa.binary()).cast(pa.string()), pa.array(cols[5], pa.binary()).cast(pa.string()),
                pa.array([[] for _ in cols[0]], schema.field("headers").type)], schema=schema))
            buf.clear()

        for r in store.consumer(topic, merge=False):
            buf.append((r.topic, r.partition, r.offset, r.timestamp, r.key, r.value))
            if len(buf) == 100_000:
                rows += len(buf)
                flush()
        if buf:
            rows += len(buf)
            flush()
    return rows


def run(bench: Bench) -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        bench.row("skipped", "needs the spark extra (pyspark, pyarrow)")
        return
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        bench.row("skipped", "needs Java 17 or later")
        return
    args = SimpleNamespace(records=bench.size(1_000_000, 1_000), partitions=1)
    n = args.records
    if True:
        d = bench.tmp
        data_dir = os.path.join(d, "data")
        make_topic(data_dir, "bench", n, args.partitions)
        make_topic(data_dir, "tiny", 10, 1)

        start = time.perf_counter()
        rows = direct_export(data_dir, "bench", os.path.join(d, "direct.parquet"))
        direct_s = time.perf_counter() - start
        assert rows == n
        bench.line(f"direct (consumer -> pyarrow -> Parquet): {rate(n, direct_s)} ({direct_s:.1f} s)")

        # a fresh cache folder: the first command records the JVM class archive, the next ones map it
        env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, "XDG_CACHE_HOME": os.path.join(d, "c")}
        for attempt in ("first ever (records the class archive)", "with the class archive", "again")[:bench.size(3, 0)]:
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "klog", "spark", "export", "tiny", "--out",
                                   os.path.join(d, "tiny"), "--overwrite"], env=env, capture_output=True, text=True)
            one_shot_s = time.perf_counter() - start
            assert done.returncode == 0, done.stderr
            bench.line(f"one-shot `klog spark export` of 10 records, {attempt}: {one_shot_s:.1f} s")

        from klog.spark.export import ExportRequest, RangeRequest, export
        from klog.spark.session import SessionSettings, start_session

        start = time.perf_counter()
        spark = start_session(SessionSettings(data_dir=data_dir, class_cache=False))
        spark.range(1).count()
        startup_s = time.perf_counter() - start
        bench.line(f"Spark session start + first tiny job: {startup_s:.1f} s "
              f"({spark.sparkContext.defaultParallelism} cores)")
        export(spark, data_dir, ExportRequest(RangeRequest("tiny"), "parquet", os.path.join(d, "warm")))
        for attempt in ("first export in the session", "again (JIT-compiled JVM)")[:bench.size(2, 1)]:
            start = time.perf_counter()
            summary = export(spark, data_dir, ExportRequest(RangeRequest("bench"), "parquet",
                                                            os.path.join(d, "spark"), overwrite=True))
            spark_s = time.perf_counter() - start
            assert summary.records == n
            bench.line(f"Spark export after start-up, {attempt}: {rate(n, spark_s)} "
                       f"({spark_s:.1f} s), "
                  f"{direct_s / spark_s:.2f}x the direct path; {summary.files} files, {summary.bytes / 1e6:.0f} MB")
        spark.stop()


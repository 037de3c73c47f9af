"""The klog Spark sink as a Spark user writing DataFrames to topics sees it, and its workers' start.

Goal: a batch-write task that fails on a row the producer refuses leaves none of its rows in the
topic, not the ones before it (an error in the query itself is not covered: Spark may end the
writer's input as if complete and fail the task after the writer returned); a `headers` column of another type than
Spark's Kafka sink takes is one clear error before anything is written; Spark's Python workers
import pyspark with its bytecode cache, not from Spark's pyspark.zip (a start 3-4x slower, which
made the streaming source's worker miss Spark's fixed 10 s connect-back on a loaded machine).
Method: one shared SparkSession (the `spark` fixture); a DataFrame of 30,000 rows in one partition
(several Arrow batches, more than the producer buffers) fails near its end; topics are read back
with klog's consumer.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from klog.spark.failures import from_spark  # noqa: E402

pytestmark = pytest.mark.spark

ROWS = 30_000  # three of Spark's Arrow batches (10,000 rows), ~3 MB: past what the producer holds unwritten


def _count(store, topic: str) -> int:  # noqa: ANN001
    return sum(1 for _ in store.consumer(topic)) if store.has_topic(topic) else 0


def _write_error(df, data_dir: str, **options: str) -> str:  # noqa: ANN001
    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark wraps the task's error
        df.write.format("klog").option("dataDir", data_dir).options(**options).mode("append").save()
    return str(from_spark(info.value))


@pytest.mark.parametrize(("column", "message"), [
    # a partition the topic does not have, in the task's last rows
    (f"CASE WHEN id < {ROWS - 10} THEN 0 ELSE 7 END AS partition", "topic 'a' has no partition 7 (it has 1)"),
    # a null topic, no topic option
    (f"CASE WHEN id < {ROWS - 10} THEN 'a' END AS topic", "a row has a null topic and there is no 'topic' option"),
])
def test_a_failed_write_task_produces_none_of_its_rows(spark, store, data_dir, column, message) -> None:
    store.create_topic("a", partitions=1)
    df = spark.range(0, ROWS, 1, 1).selectExpr("repeat('x', 100) AS value", column)
    options = {} if "AS topic" in column else {"topic": "a"}
    assert message in _write_error(df, data_dir, **options)
    assert _count(store, "a") == 0  # was ~15,000-20,000: the rows produced before the failure


def test_a_write_task_that_succeeds_produces_every_row_in_order(spark, store, data_dir) -> None:
    store.create_topic("a", partitions=1)
    df = spark.range(0, ROWS, 1, 1).selectExpr("CAST(id AS STRING) AS value", "0 AS partition")
    df.write.format("klog").option("topic", "a").option("dataDir", data_dir).mode("append").save()
    assert [int(r.value) for r in store.consumer("a")] == list(range(ROWS))


@pytest.mark.parametrize(("headers", "shown"), [
    ("array('x')", "array<string>"),
    ("array(named_struct('key', 'k', 'value', 's'))", "array<struct<key:string,value:string>>"),
    ("array(named_struct('name', 'k', 'value', X'00'))", "array<struct<name:string,value:binary>>"),
    ("'k=v'", "string"),
])
def test_a_headers_column_of_another_type_is_refused_before_writing(spark, store, data_dir, headers, shown) -> None:
    df = spark.sql(f"SELECT 'v' AS value, {headers} AS headers")
    error = _write_error(df, data_dir, topic="h")
    assert f"column 'headers' must be array<struct<key: string, value: binary>> (Spark's Kafka type), not {shown}" \
        in error
    assert _count(store, "h") == 0


def test_python_workers_import_pyspark_with_its_bytecode(spark) -> None:
    """Spark puts its pyspark.zip first on the workers' PYTHONPATH; klog's worker interpreter drops it."""
    def where(_):  # noqa: ANN001, ANN202
        import os

        import pyspark

        return pyspark.__file__, os.environ.get("PYTHONPATH", "")

    path, pythonpath = spark.sparkContext.parallelize([0], 1).map(where).collect()[0]
    assert ".zip" not in path and "pyspark.zip" not in pythonpath


@pytest.mark.slow
def test_driver_killed_after_a_batch_is_produced_then_restarted_writes_each_record_once(cli, spark, store,
                                                                                        data_dir, tmp_path) -> None:
    """Without a transactional id: SIGKILL of a `klog spark stream` driver process after batch 1's
    records are produced and its marker is in the checkpoint, before Spark logs batch 1 as committed.
    The restarted query (in the test's own session) replays batch 1, which the marker skips."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    store.create_topic("in", partitions=2)
    with store.producer() as producer:
        for i in range(40):
            producer.send("in", f"rec-{i}".encode(), key=f"k{i % 3}".encode())
    args = ["spark", "stream", "--from", "in", "--to", "out", "--available-now", "--sql",
            "SELECT key, upper(value) AS value FROM source", "--max-records-per-batch", "15",
            "--checkpoint", str(tmp_path / "ckpt")]
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, "KLOG_SPARK_CDS": "0",
           "KLOG_SPARK_SINK_KILL": "marked:1"}
    proc = subprocess.Popen([sys.executable, "-m", "klog", *args, "--master", "local[1]"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of its session outlived it
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL, err
    assert _count(store, "out") == 30  # batches 0 and 1
    assert not os.path.exists(tmp_path / "ckpt" / "commits" / "1")  # Spark had not logged batch 1
    staging = tmp_path / "ckpt" / "klog-sink" / "staging"
    assert os.listdir(staging)  # batch 1's staged rows, which the killed commit did not discard

    restarted = cli(*args)
    assert restarted.exit_code == 0, restarted.stderr
    assert "streamed 25 records" in restarted.stderr  # batch 1 again (skipped by the sink), then batch 2
    assert sorted(r.value.decode() for r in store.consumer("out")) == sorted(f"REC-{i}" for i in range(40))
    assert os.listdir(staging) == []  # the dead run's files too, once a batch is committed

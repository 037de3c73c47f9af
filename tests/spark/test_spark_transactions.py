"""The klog Spark sink's transactions and output modes, and `klog spark stream`'s modes.

Goal: with `transactional.id` a write (a batch write, each micro-batch) is one transaction and a
micro-batch Spark replays after a crash is not written again, so a read_committed reader sees each
output record exactly once, also when the driver is SIGKILLed inside a commit; Update and Complete
output modes work (Spark's Kafka sink has them); a query Spark refuses in a mode is one line, exit 2.
Method: one shared SparkSession (the `spark` fixture) for the in-process cases; the kill case runs
`klog spark stream` as a real process that is SIGKILLed at the worst instant (the sink's test hook,
after the batch's records are in the log and before its commit) and restarted from its checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from klog.spark.failures import from_spark  # noqa: E402
from klog.spark.sink import last_committed_batch  # noqa: E402

pytestmark = pytest.mark.spark

from tests.conftest import REPO  # noqa: E402 - after the importorskip


def _produce(store, topic: str, start: int, stop: int, keys: int = 3, timestamp=None) -> None:  # noqa: ANN001
    with store.producer() as producer:
        for i in range(start, stop):
            producer.send(topic, f"rec-{i}".encode(), key=f"k{i % keys}".encode(),
                          timestamp=None if timestamp is None else timestamp(i))


def _values(store, topic: str, committed: bool = True) -> list[str]:
    level = "read_committed" if committed else "read_uncommitted"
    return sorted(r.value.decode() for r in store.consumer(topic, isolation_level=level))


def _stream(spark, data_dir: str, checkpoint: str, tid: str, **reader) -> int:  # noqa: ANN001
    """One availableNow run of in -> up (values upper-cased) in transactions; returns the input rows."""
    df = (spark.readStream.format("klog").option("subscribe", "in").option("dataDir", data_dir)
          .option("startingOffsets", "earliest").options(**reader).load()
          .selectExpr("key", "upper(CAST(value AS STRING)) AS value"))
    query = (df.writeStream.format("klog").option("topic", "up").option("dataDir", data_dir)
             .option("transactional.id", tid).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    return sum(p.numInputRows for p in query.recentProgress)


@pytest.mark.slow
def test_stream_batches_are_transactions_and_a_replay_is_skipped(spark, store, data_dir, tmp_path) -> None:
    store.create_topic("in", partitions=2)
    store.create_topic("up", partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    _produce(store, "in", 0, 30)
    assert _stream(spark, data_dir, checkpoint, "up-etl", maxOffsetsPerTrigger="15") == 30
    expected = sorted(f"REC-{i}" for i in range(30))
    assert _values(store, "up") == expected
    assert last_committed_batch(store, "up-etl") == 1  # batches 0 and 1 committed with their transactions
    assert store.describe_transaction("up-etl").state == "CompleteCommit"
    # Spark replays a batch whose commit it did not log (its driver died after the sink's commit)
    commits = os.path.join(checkpoint, "commits")
    for name in ("1", ".1.crc"):
        os.unlink(os.path.join(commits, name))
    assert _stream(spark, data_dir, checkpoint, "up-etl", maxOffsetsPerTrigger="15") == 15  # Spark re-ran it
    assert _values(store, "up") == expected  # the topic has it once
    assert _values(store, "up", committed=False) == expected


@pytest.mark.slow
def test_batch_write_is_all_or_nothing(spark, store, data_dir) -> None:
    rows = [(f"v{i}", "a") for i in range(50)]
    spark.createDataFrame(rows, "value string, topic string").write.format("klog") \
        .option("dataDir", data_dir).option("transactional.id", "load").mode("append").save()
    assert _values(store, "a") == sorted(v for v, _ in rows)
    # the last row has no topic: the write fails after 1.1 MB of rows were sent (a 1 MB batch written)
    big = [(f"big{i}" + "x" * 1000, "a") for i in range(1100)]
    bad = spark.createDataFrame([*big, ("lost", None)], "value string, topic string").coalesce(1)
    with pytest.raises(Exception) as info:
        bad.write.format("klog").option("dataDir", data_dir).option("transactional.id", "load") \
            .mode("append").save()
    assert "null topic" in str(from_spark(info.value))
    assert _values(store, "a") == sorted(v for v, _ in rows)  # read_committed: none of the failed write
    # staged files removed: they were in the local session's work dir, which its JVM's environment names
    # (what its Python workers inherit; this process's may have changed since)
    staging = spark.sparkContext._jvm.System.getenv("KLOG_SPARK_STAGING")
    assert staging and not os.listdir(staging)
    assert not os.path.exists(os.path.join(data_dir, "spark", "staging"))  # none in the store


@pytest.mark.slow
@pytest.mark.usefixtures("few_shuffle_partitions")
def test_update_and_complete_modes_and_refusals(cli, spark, store, data_dir) -> None:
    store.create_topic("clicks", partitions=2)
    store.create_topic("counts", partitions=1)  # one partition: records in the order the batches wrote them
    _produce(store, "clicks", 0, 9)  # k0, k1, k2 three times each
    count = "SELECT key, CAST(count(*) AS STRING) AS value FROM source GROUP BY key"
    refused = cli("spark", "stream", "--from", "clicks", "--to", "counts", "--available-now", "--sql", count)
    assert refused.exit_code == 2, refused.stderr
    assert "Spark refuses this query in --output-mode append" in refused.stderr
    assert "use --output-mode update or complete" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    update = ("spark", "stream", "--from", "clicks", "--to", "counts", "--available-now", "--sql", count,
              "--output-mode", "update", "--transactional-id", "counter")
    assert cli(*update).exit_code == 0
    _produce(store, "clicks", 9, 11)  # k0 and k1 once more; k2 unchanged
    result = cli(*update)
    assert result.exit_code == 0, result.stderr
    got = [(r.key.decode(), r.value.decode()) for r in store.consumer("counts", isolation_level="read_committed")]
    assert sorted(got[:3]) == [("k0", "3"), ("k1", "3"), ("k2", "3")]
    assert sorted(got[3:]) == [("k0", "4"), ("k1", "4")]  # update mode: only the keys that changed

    complete = cli("spark", "stream", "--from", "clicks", "--to", "totals", "--available-now", "--sql", count,
                   "--output-mode", "complete")  # format("klog") takes it, as Spark's Kafka sink does
    assert complete.exit_code == 0, complete.stderr
    assert sorted((r.key.decode(), r.value.decode()) for r in store.consumer("totals")) == \
        [("k0", "4"), ("k1", "4"), ("k2", "3")]
    no_aggregate = cli("spark", "stream", "--from", "clicks", "--to", "x", "--available-now", "--sql",
                       "SELECT value FROM source", "--output-mode", "complete")
    assert no_aggregate.exit_code == 2, no_aggregate.stderr
    assert "--output-mode complete" in no_aggregate.stderr
    assert len(no_aggregate.stderr.strip().splitlines()) == 1, no_aggregate.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("few_shuffle_partitions")
def test_watermark_lets_append_mode_emit_closed_windows(cli, spark, store) -> None:
    t0 = 1_700_000_040_000  # a minute boundary
    store.create_topic("hits", partitions=1)
    _produce(store, "hits", 0, 3, timestamp=lambda i: t0 + [0, 10_000, 300_000][i])
    window = ("SELECT CAST(window.start AS STRING) AS key, CAST(count(*) AS STRING) AS value FROM source "
              "GROUP BY window(timestamp, '1 minute')")
    result = cli("spark", "stream", "--from", "hits", "--to", "per-minute", "--available-now", "--sql", window,
                 "--watermark", "timestamp,1 minute")
    assert result.exit_code == 0, result.stderr
    # the first minute closed (the watermark passed it); the last one is still open
    assert [r.value for r in store.consumer("per-minute")] == [b"2"]
    bad = cli("spark", "stream", "--from", "hits", "--to", "x", "--available-now", "--sql", window,
              "--watermark", "timestamp,soon")
    assert bad.exit_code == 2, bad.stderr
    assert "invalid --watermark 'timestamp,soon'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--output-mode", "sometimes"), "invalid --output-mode 'sometimes': use append, update, complete"),
    (("--watermark", "timestamp"), "invalid --watermark 'timestamp': use COLUMN,DELAY"),
    (("--watermark", "ts,1 minute"), "the source view's time column is 'timestamp'"),
])
def test_mode_option_errors_come_before_java(store, data_dir, args, message) -> None:
    store.create_topic("in", partitions=1)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    run = subprocess.run([sys.executable, "-m", "klog", "spark", "stream", "--from", "in", "--to", "out", "--sql",
                          "SELECT value FROM source", *args], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.mark.slow
def test_driver_killed_inside_a_commit_then_restarted_writes_each_record_once(cli, spark, store, data_dir,
                                                                              tmp_path) -> None:
    """SIGKILL of a `klog spark stream` driver process after batch 1's records are in the log and before
    its transaction commits; the query restarted from the checkpoint (here in the test's own Spark
    session, which saves a JVM start) aborts that transaction and writes batch 1 again."""
    store.create_topic("in", partitions=2)
    _produce(store, "in", 0, 40)
    args = ["spark", "stream", "--from", "in", "--to", "out", "--available-now", "--sql",
            "SELECT key, upper(value) AS value FROM source", "--max-records-per-batch", "15",
            "--transactional-id", "exactly", "--checkpoint", str(tmp_path / "ckpt")]
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, "KLOG_SPARK_CDS": "0",
           "KLOG_SPARK_SINK_KILL": "flushed:1"}
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
    assert len(_values(store, "out", committed=False)) == 30  # batch 0, and batch 1 not committed
    assert len(_values(store, "out")) == 15

    restarted = cli(*args)
    assert restarted.exit_code == 0, restarted.stderr
    assert "streamed 25 records" in restarted.stderr  # batch 1 again, then batch 2
    assert _values(store, "out") == sorted(f"REC-{i}" for i in range(40))  # exactly once for read_committed
    assert len(_values(store, "out", committed=False)) == 55  # the aborted copy of batch 1 is in the log
    assert last_committed_batch(store, "exactly") == 2

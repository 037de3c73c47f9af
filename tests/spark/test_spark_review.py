"""Review findings on the `klog` data source, each a case that lost or refused rows before its fix.

Method: topics built with the Python client, read through the shared local SparkSession (the `spark`
fixture), over `klog serve` (kafka.bootstrap.servers) where the bug was the cluster path's, and
compared with what klog's own consumer returns.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import klog  # noqa: E402
from tests.spark.test_spark_source import consumed, fill  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_cluster_stream_read_committed_keeps_an_open_transactions_records(spark, kafka_server, data_dir,
                                                                           tmp_path) -> None:
    """A stream over the cluster with kafka.isolation.level=read_committed: a micro-batch must end at the
    last stable offset, not the high watermark, or the records of a transaction still open when the batch
    was planned are skipped for good once it commits (the next batch starts past them)."""
    with klog.open(data_dir) as store:
        store.create_topic("in", partitions=1)
        store.create_topic("out", partitions=1)
        with store.producer() as producer:
            for i in range(3):
                producer.send("in", f"plain-{i}".encode())
        txn = store.producer(transactional_id="review-open")
        txn.begin()
        for i in range(3):
            txn.send("in", f"txn-{i}".encode())
        txn.flush()
        where = {"kafka.bootstrap.servers": kafka_server.bootstrap, "dataDir": str(tmp_path / "nowhere"),
                 "kafka.isolation.level": "read_committed"}
        checkpoint = str(tmp_path / "ckpt")

        def run() -> None:
            df = (spark.readStream.format("klog").option("subscribe", "in").options(**where)
                  .option("startingOffsets", "earliest").load().select("value"))
            query = (df.writeStream.format("klog").option("topic", "out").option("dataDir", data_dir)
                     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
            query.awaitTermination()
            assert query.exception() is None

        try:
            run()  # the transaction is open: only the plain records
            txn.commit()
        finally:
            txn.close()
        with store.producer() as producer:
            producer.send("in", b"after")
        run()  # the committed transaction's records and the one after
        got = sorted(r.value.decode() for r in store.consumer("out"))
    assert got == sorted([f"plain-{i}" for i in range(3)] + [f"txn-{i}" for i in range(3)] + ["after"])


def test_cluster_read_without_headers(spark, kafka_server, data_dir, tmp_path) -> None:
    """includeHeaders=false over the cluster: the rows without the headers column (the executors built
    Arrow batches with it, which Spark refused)."""
    with klog.open(data_dir) as store:
        fill(store, "orders", partitions=2, per_partition=10)
        expected = sorted(r[:7] for r in consumed(store, "orders"))
    df = (spark.read.format("klog").option("subscribe", "orders").option("includeHeaders", "false")
          .option("kafka.bootstrap.servers", kafka_server.bootstrap).option("dataDir", str(tmp_path / "none"))
          .load())
    assert "headers" not in df.columns
    rows = df.selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ms", "timestampType", "key",
                         "value").collect()
    got = sorted((r.topic, r.partition, r.offset, r.ms, r.timestampType, None if r.key is None else bytes(r.key),
                  None if r.value is None else bytes(r.value)) for r in rows)
    assert got == expected


def test_cluster_planning_asks_each_topics_offsets_once(kafka_server, data_dir, monkeypatch) -> None:
    """Planning a read of a wide topic over the cluster: one ListOffsets per topic and bound, not one per
    partition and bound, each covering every partition (quadratic: 300 partitions took 44 s to plan)."""
    from klog.client.remote.store import RemoteStore
    from klog.spark import ranges
    from klog.spark.arrow import open_options_store
    from klog.spark.options import parse_read_options

    with klog.open(data_dir) as store:
        store.create_topic("wide", partitions=60)
        with store.producer() as producer:
            for p in range(60):
                producer.send("wide", f"v{p}".encode(), partition=p)
    asked = []
    real = RemoteStore.offsets
    monkeypatch.setattr(RemoteStore, "offsets", lambda self, *a, **k: asked.append(a) or real(self, *a, **k))
    where = {"kafka.bootstrap.servers": kafka_server.bootstrap, "dataDir": data_dir}
    for extra in ({}, {"kafka.isolation.level": "read_committed"}, {"startingTimestamp": "0"}):
        asked.clear()
        opts = parse_read_options({"subscribe": "wide", **where, **extra})
        with open_options_store(opts) as remote:
            got = ranges.plan(remote, opts)
        assert [(r.partition, r.start, r.end) for r in got] == [(p, 0, 1) for p in range(60)], extra
        assert len(asked) <= 4, (extra, len(asked))


def test_cluster_stream_fails_on_data_loss_when_retention_passed_it(spark, kafka_server, data_dir,
                                                                    tmp_path) -> None:
    """A stream over the cluster resumed after the log start passed its checkpointed offset: with
    failOnDataLoss (the default) the query fails naming the gone offsets, as the local path does; the
    executors used to skip to the log start without a word. failOnDataLoss=false skips them."""
    with klog.open(data_dir) as store:
        store.create_topic("in", partitions=1)
        with store.producer() as producer:
            for i in range(10):
                producer.send("in", f"r{i}".encode())
        where = {"kafka.bootstrap.servers": kafka_server.bootstrap, "dataDir": str(tmp_path / "nowhere")}
        from pyspark.errors import StreamingQueryException

        def run(checkpoint: str, **extra: str):  # noqa: ANN202 - the query's exception or None
            df = (spark.readStream.format("klog").option("subscribe", "in").options(**where, **extra)
                  .option("startingOffsets", "earliest").load().select("value"))
            query = (df.writeStream.format("klog").option("topic", f"out-{os.path.basename(checkpoint)}")
                     .option("dataDir", data_dir).option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            try:
                query.awaitTermination()
            except StreamingQueryException as e:
                return e
            return query.exception()

        store.create_topic("out-strict", partitions=1)
        store.create_topic("out-lenient", partitions=1)
        strict, lenient = str(tmp_path / "strict"), str(tmp_path / "lenient")
        assert run(strict) is None and run(lenient, failOnDataLoss="false") is None
        with store.producer() as producer:
            for i in range(10, 20):
                producer.send("in", f"r{i}".encode())
        store.delete_records("in", before_offset=15)
    error = run(strict)
    assert error is not None and "below its log start offset 15" in str(error)
    assert run(lenient, failOnDataLoss="false") is None
    with klog.open(data_dir) as store:
        got = sorted(r.value.decode() for r in store.consumer("out-lenient"))
        assert sorted(r.value.decode() for r in store.consumer("out-strict")) == [f"r{i}" for i in range(10)]
    assert got == sorted(f"r{i}" for i in list(range(10)) + list(range(15, 20)))


def test_single_timestamp_wins_over_per_partition_timestamps(spark, store, data_dir) -> None:
    """startingTimestamp with startingOffsetsByTimestamp (and the ending pair): Spark's Kafka source takes
    the single time ("startingTimestamp takes precedence over startingOffsetsByTimestamp"); klog refused
    the pair."""
    from tests.spark.test_spark_source import T0, read_rows

    fill(store, "orders", partitions=2, per_partition=20)
    def each(ms: int) -> str:
        return json.dumps({"orders": {"0": ms, "1": ms}})

    got = read_rows(spark, subscribe="orders", dataDir=data_dir, startingTimestamp=str(T0 + 5000),
                    startingOffsetsByTimestamp=each(T0), endingTimestamp=str(T0 + 15000),
                    endingOffsetsByTimestamp=each(T0 + 19000))
    assert got == [r for r in consumed(store, "orders") if T0 + 5000 <= r[3] < T0 + 15000]
    assert {r[2] for r in got} == set(range(5, 15))


def test_max_offsets_per_trigger_limits_a_partition_added_mid_stream(spark, store, data_dir) -> None:
    """maxOffsetsPerTrigger bounds every micro-batch, also the one after partitions were added: a new
    partition's backlog counts from its log start, as in Spark's Kafka source (klog read it whole in one
    batch, however big)."""
    store.create_topic("grow", partitions=1)
    with store.producer() as producer:
        for i in range(5):
            producer.send("grow", f"a{i}".encode(), partition=0)
    df = (spark.readStream.format("klog").option("subscribe", "grow").option("dataDir", data_dir)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load().select("value"))
    query = df.writeStream.format("memory").queryName("grow_rows").start()
    try:
        query.processAllAvailable()
        store.alter_topic("grow", partitions=2)
        with store.producer() as producer:
            for i in range(30):
                producer.send("grow", f"b{i}".encode(), partition=1)
        query.processAllAvailable()
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    got = sorted(bytes(r.value).decode() for r in spark.sql("SELECT value FROM grow_rows").collect())
    assert got == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(30)])
    assert max(sizes) <= 10, sizes

"""The `klog` Spark data source over the network: with kafka.bootstrap.servers the executors (local[2])
fetch partition ranges from `klog serve` and produce to it; rows equal the local dataDir path's."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import klog  # noqa: E402
from tests.spark.test_spark_source import consumed, fill, read_rows  # noqa: E402

pytestmark = pytest.mark.spark


def test_read_through_the_cluster_equals_the_local_path(spark, kafka_server, data_dir, tmp_path) -> None:
    with klog.open(data_dir) as store:
        fill(store, "orders")
        fill(store, "other", partitions=1)
        expected = consumed(store, "orders")
    # dataDir names no store: only the cluster can answer
    remote = {"kafka.bootstrap.servers": kafka_server.bootstrap, "dataDir": str(tmp_path / "nowhere")}
    assert read_rows(spark, subscribe="orders", **remote) == expected
    assert read_rows(spark, subscribe="orders", dataDir=data_dir) == expected
    # ranges and timestamps plan the same way over the cluster
    for extra in ({"startingOffsets": '{"orders": {"0": 5, "1": -2, "2": 30}}', "endingOffsets": '{"orders": '
                   '{"0": 20, "1": -1, "2": 35}}'},
                  {"startingTimestamp": str(1_700_000_000_000 + 10_000)},
                  {"minPartitions": "7"}):
        assert read_rows(spark, subscribe="orders", **remote, **extra) == \
            read_rows(spark, subscribe="orders", dataDir=data_dir, **extra), extra
    assert read_rows(spark, subscribePattern="o.*", **remote) == read_rows(spark, subscribePattern="o.*",
                                                                           dataDir=data_dir)


def test_write_through_the_cluster_lands_like_the_local_path(spark, kafka_server, data_dir, tmp_path) -> None:
    with klog.open(data_dir) as store:
        store.create_topic("out", partitions=3)
        store.create_topic("out_local", partitions=3)
    rows = [(f"user-{i % 9}", f"v{i}", [("src", b"spark")] if i % 2 else [], 1_700_000_000_000 + i)
            for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>, "
                                     "timestamp bigint")
    df.write.format("klog").option("topic", "out").option("kafka.bootstrap.servers", kafka_server.bootstrap) \
        .option("dataDir", str(tmp_path / "nowhere")).mode("append").save()
    df.write.format("klog").option("topic", "out_local").option("dataDir", data_dir).mode("append").save()
    with klog.open(data_dir) as store:
        remote = sorted(r[1:2] + r[3:] for r in consumed(store, "out"))
        local = sorted(r[1:2] + r[3:] for r in consumed(store, "out_local"))
    assert remote == local and len(remote) == 60  # same partitions, timestamps, keys, values, headers


def test_spark_commands_through_the_cluster(cli, spark, kafka_server, data_dir, tmp_path) -> None:
    """klog spark export|sql|run|stream with --bootstrap-server and a --data-dir holding no store: only the
    cluster can answer, and the results equal the same commands on the store."""
    import json
    import os

    from tests.spark.test_spark_cli import REPO, expected, read_back

    with klog.open(data_dir) as store:
        store.create_topic("orders", partitions=3)
        with store.producer() as producer:
            for p in range(3):
                for i in range(20):
                    producer.send("orders", json.dumps({"id": p * 100 + i, "name": f"n{i % 3}"}).encode(),
                                  key=f"c{i % 4}".encode(), partition=p, timestamp=1_700_000_000_000 + 1000 * i)
                    producer.send("hits", json.dumps({"path": f"/p{i % 3}", "status": 200, "bytes": 10}).encode())
        want = expected(store)
    remote = ("-b", kafka_server.bootstrap, "-d", str(tmp_path / "nowhere"))
    out = str(tmp_path / "export")
    r = cli("spark", "export", "orders", "--to", "json", "--out", out, "--master", "local[2]", *remote)
    assert r.exit_code == 0, r.stderr
    assert read_back(out, "json") == want
    query = "SELECT name, count(*) AS n FROM orders GROUP BY name ORDER BY name"
    r, local = cli("spark", "sql", query, *remote), cli("spark", "sql", query)
    assert r.exit_code == 0 and r.out == local.out and json.loads(r.out.splitlines()[0]) == {"name": "n0", "n": 21}
    r = cli("spark", "run", os.path.join(REPO, "samples", "spark_job.py"), "hits", "path-stats", *remote)
    assert r.exit_code == 0, r.stderr
    r = cli("spark", "stream", "--from", "orders", "--to", "upper", "--sql", "SELECT upper(value) AS value FROM source",
            "--available-now", *remote)
    assert r.exit_code == 0, r.stderr
    with klog.open(data_dir) as store:
        assert {json.loads(r.value)["path"] for r in store.consumer("path-stats")} == {"/p0", "/p1", "/p2"}
        assert sorted(r.value for r in store.consumer("upper")) == sorted(v[4].upper().encode() for v in want)


@pytest.mark.slow
def test_transactional_stream_through_the_cluster_skips_a_replayed_batch(spark, kafka_server, data_dir,
                                                                         tmp_path) -> None:
    """transactional.id with kafka.bootstrap.servers: each micro-batch one transaction of the cluster's
    (librdkafka's transactional producer), its batch id committed with it, a replay skipped."""
    import os

    from klog.spark.sink import last_committed_batch

    with klog.open(data_dir) as store:
        store.create_topic("in", partitions=2)
        store.create_topic("up", partitions=2)
        with store.producer() as producer:
            for i in range(20):
                producer.send("in", f"rec-{i}".encode(), key=f"k{i % 3}".encode())
    where = {"kafka.bootstrap.servers": kafka_server.bootstrap, "dataDir": str(tmp_path / "nowhere")}
    checkpoint = str(tmp_path / "ckpt")

    def run() -> int:
        df = (spark.readStream.format("klog").option("subscribe", "in").options(**where)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load()
              .selectExpr("key", "upper(CAST(value AS STRING)) AS value"))
        query = (df.writeStream.format("klog").option("topic", "up").options(**where)
                 .option("transactional.id", "up-remote").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return sum(p.numInputRows for p in query.recentProgress)

    assert run() == 20
    for name in ("1", ".1.crc"):  # as if the driver died after the sink's commit, before Spark logged it
        os.unlink(os.path.join(checkpoint, "commits", name))
    assert run() == 10  # Spark ran batch 1 again
    with klog.open(data_dir) as store:
        assert last_committed_batch(store, "up-remote") == 1
        got = sorted(r.value.decode() for r in store.consumer("up", isolation_level="read_committed"))
    assert got == sorted(f"REC-{i}" for i in range(20))

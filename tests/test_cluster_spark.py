"""The `klog` Spark data source over the network: with kafka.bootstrap.servers the executors (local[2])
fetch partition ranges from `klog serve` and produce to it; rows equal the local dataDir path's."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import klog  # noqa: E402
from tests.test_spark_source import consumed, fill, read_rows  # noqa: E402

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

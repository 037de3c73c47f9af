"""The `klog` PySpark data source against the Python client.

Goal: what Spark reads through the source is exactly what klog's own consumer returns (records,
offsets, timestamps, timestamp types, headers) for each way of choosing topics and ranges; writes
land where klog's producer would put them; a topic-to-topic stream survives a restart without
losing or repeating records, including a replayed batch.
Method: small topics built with the Producer (several batches per partition, keys, null keys and
values, headers, increasing explicit timestamps), read back through one shared local SparkSession
(the `spark` fixture in conftest.py) and compared with Consumer output filtered independently.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from klog.client.partitioner import partition_for_key  # noqa: E402
from klog.errors import OffsetOutOfRangeError, UnknownTopicError, UsageError  # noqa: E402
from klog.spark.failures import from_spark  # noqa: E402

pytestmark = pytest.mark.spark

from tests.conftest import REPO  # noqa: E402 - after the importorskip

T0 = 1_700_000_000_000  # record i of a partition has timestamp T0 + 1000 * i


def fill(store, topic: str, partitions: int = 3, per_partition: int = 40, batch: int = 7) -> None:
    """Records with every shape a row can take, in several small batches per partition."""
    store.create_topic(topic, partitions=partitions)
    with store.producer(batch_size=batch * 60) as producer:
        for p in range(partitions):
            for i in range(per_partition):
                key = None if i % 5 == 0 else f"k{i % 4}".encode()
                value = None if i % 11 == 3 else f"{topic}-{p}-{i}".encode()
                headers = [("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else None
                producer.send(topic, value, key=key, partition=p, timestamp=T0 + 1000 * i, headers=headers)


def consumed(store, *topics: str) -> list[tuple]:
    out = []
    for r in store.consumer(*topics, merge=False):
        out.append((r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
                    [(k, v) for k, v in r.headers]))
    return sorted(out)


def read_rows(spark, **options: str) -> list[tuple]:
    df = spark.read.format("klog").options(**options).load()
    rows = df.selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ms", "timestampType", "key",
                         "value", "headers").collect()
    return sorted((r.topic, r.partition, r.offset, r.ms, r.timestampType,
                   None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                   [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]) for r in rows)


@pytest.fixture
def orders(store):
    fill(store, "orders")
    return store


def test_read_everything_matches_the_consumer(spark, orders, data_dir) -> None:
    got = read_rows(spark, subscribe="orders", dataDir=data_dir)
    expected = consumed(orders, "orders")
    assert len(expected) == 120
    assert got == expected
    assert any(row[7] == [("n", b"0"), ("empty", None)] for row in got)  # headers, null header values too
    assert any(row[5] is None for row in got) and any(row[6] is None for row in got)


def test_compressed_batches_and_log_append_time(spark, store, data_dir) -> None:
    store.create_topic("zipped", partitions=2, configs={"message.timestamp.type": "LogAppendTime"})
    with store.producer(compression_type="zstd") as producer:
        for i in range(300):
            producer.send("zipped", f"z{i}".encode() * 3, key=None if i % 2 else b"k", partition=i % 2,
                          headers=[("h", None)] if i % 4 == 0 else None)
    got = read_rows(spark, subscribe="zipped", dataDir=data_dir)
    assert got == consumed(store, "zipped") and len(got) == 300
    assert {r[4] for r in got} == {1}  # LogAppendTime: the batch's time, as the consumer reports it


def test_schema_is_spark_kafka_sources(spark, orders, data_dir) -> None:
    df = spark.read.format("klog").option("subscribe", "orders").option("dataDir", data_dir).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"), ("headers", "array<struct<key:string,value:binary>>")]


def test_offsets_json_and_assign_choose_the_ranges(spark, orders, data_dir) -> None:
    starting = json.dumps({"orders": {"0": 5, "2": -2}})
    ending = json.dumps({"orders": {"0": 17, "2": -1}})
    got = read_rows(spark, assign=json.dumps({"orders": [0, 2]}), startingOffsets=starting, endingOffsets=ending,
                    dataDir=data_dir)
    expected = [r for r in consumed(orders, "orders")
                if (r[1] == 0 and 5 <= r[2] < 17) or r[1] == 2]
    assert got == expected and len(got) == 12 + 40


def test_timestamps_choose_the_ranges(spark, orders, data_dir) -> None:
    start, end = T0 + 10_000, T0 + 25_500
    got = read_rows(spark, subscribe="orders", startingTimestamp=str(start), endingTimestamp=str(end),
                    dataDir=data_dir)
    expected = [r for r in consumed(orders, "orders") if start <= r[3] < end]
    assert got == expected and len(got) == 3 * 16


def test_pattern_reads_every_matching_topic(spark, store, data_dir) -> None:
    fill(store, "web-a", partitions=1, per_partition=9)
    fill(store, "web-b", partitions=2, per_partition=5)
    fill(store, "other", partitions=1, per_partition=3)
    got = read_rows(spark, subscribePattern="web-.*", dataDir=data_dir)
    assert got == consumed(store, "web-a", "web-b") and len(got) == 19


def test_min_partitions_splits_ranges_and_reads_each_record_once(spark, orders, data_dir) -> None:
    df = (spark.read.format("klog").option("subscribe", "orders").option("minPartitions", "10")
          .option("dataDir", data_dir).load())
    assert df.rdd.getNumPartitions() >= 10  # 3 partitions of 40 cut in proportion
    got = read_rows(spark, subscribe="orders", minPartitions="10", dataDir=data_dir)
    assert got == consumed(orders, "orders")


def test_reads_stop_at_the_high_watermark_and_start_at_the_log_start(spark, orders, data_dir) -> None:
    orders.partition("orders", 1).set_log_start_offset(12)  # like kafka-delete-records
    got = read_rows(spark, subscribe="orders", dataDir=data_dir)
    assert [r for r in got if r[1] == 1][0][2] == 12
    assert got == [r for r in consumed(orders, "orders") if r[1] != 1 or r[2] >= 12]


def test_fail_on_data_loss(spark, orders, data_dir) -> None:
    orders.partition("orders", 0).set_log_start_offset(10)
    start = json.dumps({"orders": {"0": 4}})
    with pytest.raises(Exception) as info:
        read_rows(spark, assign=json.dumps({"orders": [0]}), startingOffsets=start, dataDir=data_dir)
    error = from_spark(info.value)
    assert isinstance(error, OffsetOutOfRangeError) and "below its log start offset 10" in str(error)
    got = read_rows(spark, assign=json.dumps({"orders": [0]}), startingOffsets=start, failOnDataLoss="false",
                    dataDir=data_dir)
    assert [r[2] for r in got] == list(range(10, 40))


@pytest.mark.parametrize(("options", "error_type", "message"), [
    ({"subscribe": "nope"}, UnknownTopicError, "topic 'nope' does not exist"),
    ({"subscribe": "orders", "startingOffsets": "soon"}, UsageError, "invalid startingOffsets 'soon'"),
    ({"subscribe": "orders", "minPartitions": "0"}, UsageError, "invalid minPartitions '0'"),
    ({"subscribe": "orders", "subscribePattern": "o.*"}, UsageError, "exactly one of the options"),
    ({"subscribe": "orders", "startingOfsets": "earliest"}, UsageError, "unknown option 'startingofsets'"),
    ({"assign": json.dumps({"orders": [7]})}, UsageError, "has no partition 7"),
    # offsets for a partition the query does not read are an error, as in Spark's Kafka source, not ignored
    ({"assign": json.dumps({"orders": [0]}), "startingOffsets": json.dumps({"orders": {"0": 1, "1": 3}})},
     UsageError, "startingOffsets names orders-1, which this query does not read (it reads orders-0)"),
    ({"subscribe": "orders", "endingOffsets": json.dumps({"ordres": {"0": 3}})}, UsageError,
     "endingOffsets names ordres-0, which this query does not read (it reads orders-0, orders-1, orders-2)"),
    ({"subscribe": "orders", "startingOffsetsByTimestamp": json.dumps({"orders": {"5": T0}})}, UsageError,
     "startingOffsetsByTimestamp names orders-5"),
])
def test_bad_options_are_one_clear_error(spark, orders, data_dir, options, error_type, message) -> None:
    with pytest.raises(Exception) as info:
        spark.read.format("klog").options(dataDir=data_dir, **options).load().count()
    error = from_spark(info.value)
    assert isinstance(error, error_type) and message in str(error)
    assert "\n" not in str(error)


def test_stream_offsets_for_a_partition_not_read_are_an_error(orders, data_dir) -> None:
    from klog.spark.options import parse_read_options
    from klog.spark.source import KlogStreamReader

    options = {"subscribe": "orders", "startingOffsets": json.dumps({"orders": {"3": 0}}), "dataDir": data_dir}
    with pytest.raises(UsageError, match="startingOffsets names orders-3, which this query does not read"):
        KlogStreamReader(parse_read_options(options, streaming=True))


def test_batch_write_partitions_keyed_records_like_the_producer(spark, store, data_dir) -> None:
    store.create_topic("out", partitions=4)
    rows = [(f"user-{i % 9}", f"v{i}", [("src", b"spark")] if i % 2 else []) for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>")
    df.write.format("klog").option("topic", "out").option("dataDir", data_dir).mode("append").save()
    got = consumed(store, "out")
    assert sorted(r[6] for r in got) == sorted(f"v{i}".encode() for i in range(60))
    for r in got:
        assert r[1] == partition_for_key(r[5], 4)  # Kafka's murmur2 partitioner
        i = int(r[6][1:])
        assert r[5] == f"user-{i % 9}".encode()
        assert r[7] == ([("src", b"spark")] if i % 2 else [])


def test_batch_write_takes_topic_partition_and_timestamp_columns(spark, store, data_dir) -> None:
    store.create_topic("a", partitions=2)
    store.create_topic("b", partitions=1)
    df = spark.createDataFrame([("a", 1, "x", T0), ("b", 0, "y", T0 + 5)],
                               "topic string, partition int, value string, timestamp bigint")
    df.write.format("klog").option("dataDir", data_dir).mode("append").save()
    assert [(r[0], r[1], r[3], r[6]) for r in consumed(store, "a", "b")] == [("a", 1, T0, b"x"), ("b", 0, T0 + 5, b"y")]


def test_batch_write_without_value_column_fails_before_writing(spark, store, data_dir) -> None:
    df = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception) as info:
        df.write.format("klog").option("topic", "x").option("dataDir", data_dir).mode("append").save()
    assert "needs a 'value' column" in str(from_spark(info.value))
    assert not store.has_topic("x")


def _stream(spark, data_dir: str, checkpoint: str, source: str, target: str, **reader_options: str) -> list:
    """One availableNow run of source -> target (values upper-cased); returns Spark's progress list."""
    reader = spark.readStream.format("klog").option("subscribe", source).option("dataDir", data_dir) \
        .option("startingOffsets", "earliest")
    for k, v in reader_options.items():
        reader = reader.option(k, v)
    out = reader.load().selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers")
    query = (out.writeStream.format("klog").option("topic", target).option("dataDir", data_dir)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    return [p for p in query.recentProgress if p.numInputRows]


def _produce(store, topic: str, start: int, stop: int) -> None:
    with store.producer() as producer:
        for i in range(start, stop):
            producer.send(topic, f"rec-{i}".encode(), key=f"k{i % 5}".encode(), headers=[("i", str(i).encode())])


def _values_by_key(store, topic: str) -> dict:
    got: dict = {}
    for r in store.consumer(topic, merge=False):
        got.setdefault(r.key, []).append((r.value, r.headers))
    return got


def _expected(start: int, stop: int) -> dict:
    out: dict = {}
    for i in range(start, stop):
        out.setdefault(f"k{i % 5}".encode(), []).append((f"REC-{i}".encode(), [("i", str(i).encode())]))
    return out


def test_stream_topic_to_topic_resumes_after_a_restart(spark, store, data_dir, tmp_path) -> None:
    store.create_topic("in", partitions=3)
    store.create_topic("up", partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    _produce(store, "in", 0, 50)
    assert sum(p.numInputRows for p in _stream(spark, data_dir, checkpoint, "in", "up")) == 50
    assert _values_by_key(store, "up") == _expected(0, 50)
    _produce(store, "in", 50, 80)  # arrive while the job is stopped
    assert sum(p.numInputRows for p in _stream(spark, data_dir, checkpoint, "in", "up")) == 30
    assert _values_by_key(store, "up") == _expected(0, 80)  # each key's records in order, none lost or repeated
    assert _stream(spark, data_dir, checkpoint, "in", "up") == []  # nothing new: nothing written


def test_stream_replayed_batch_is_not_written_twice(spark, store, data_dir, tmp_path) -> None:
    """Spark replays a batch whose commit it did not log (the driver died after the sink's commit):
    the sink's marker in the checkpoint makes the replay write nothing."""
    store.create_topic("in", partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    _produce(store, "in", 0, 20)
    _stream(spark, data_dir, checkpoint, "in", "up")
    commits = sorted(os.listdir(os.path.join(checkpoint, "commits")), key=lambda n: (len(n), n))
    last = [n for n in commits if not n.startswith(".")][-1]
    for name in (last, f".{last}.crc"):  # as if the driver died before logging it
        os.unlink(os.path.join(checkpoint, "commits", name))
    replayed = _stream(spark, data_dir, checkpoint, "in", "up")
    assert sum(p.numInputRows for p in replayed) == 20  # Spark did run the batch again
    assert _values_by_key(store, "up") == _expected(0, 20)  # but the topic has it once


def test_stream_max_offsets_per_trigger_makes_bounded_batches(spark, store, data_dir, tmp_path) -> None:
    store.create_topic("in", partitions=2)
    _produce(store, "in", 0, 45)
    progress = _stream(spark, data_dir, str(tmp_path / "ckpt"), "in", "up", maxOffsetsPerTrigger="20")
    assert [p.numInputRows for p in progress] == [20, 20, 5]
    assert _values_by_key(store, "up") == _expected(0, 45)


def test_store_reads_do_not_need_the_environment(spark, orders, data_dir, monkeypatch) -> None:
    """The source's data directory comes from the option or the registered default, never a stale env."""
    from klog.spark.session import register

    monkeypatch.setenv("KLOG_DATA_DIR", "/nonexistent")
    register(spark, data_dir)
    try:
        assert spark.read.format("klog").load("orders").count() == 120
    finally:
        register(spark)



def test_docs_spark_example_runs(spark, store, data_dir, capsys) -> None:
    """docs/spark.md's data source example works as written (on a store with an `orders` topic)."""
    import pathlib
    import re

    readme = (pathlib.Path(REPO) / "docs" / "spark.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
              if 'format("klog")' in b and "kafka.bootstrap.servers" not in b  # the cluster example needs one
              and "writeStream" not in b]  # the stream examples run on their own
    assert len(blocks) == 1
    store.create_topic("orders", partitions=2)
    _produce(store, "orders", 0, 300)
    before = {p: store.partition("orders", p).high_watermark() for p in (0, 1)}
    try:
        exec(compile(blocks[0].replace('"/data/klog"', repr(data_dir)), "docs/spark.md", "exec"), {})
    finally:
        from klog.spark.session import register

        register(spark)
    assert "offset" in capsys.readouterr().out
    expected = before[0] - 100 + before[1]
    assert sum(1 for _ in store.consumer("orders-upper")) == expected


def test_class_archive_protocol(tmp_path, monkeypatch) -> None:
    """The JVM class cache: recorded once to a temporary name, used only when a JVM accepts it, off with
    KLOG_SPARK_CDS=0; a damaged archive (which would crash the JVM) is deleted, not used."""
    import subprocess

    from klog.spark.classcache import class_archive, finish
    from klog.spark.java import find_java

    java = find_java()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = class_archive(java)
    assert first is not None and first.dump_to is not None and not os.path.exists(first.path)
    assert f"-XX:ArchiveClassesAtExit={first.dump_to}" in first.jvm_options()
    # a real (small) dump by a JVM that exits cleanly, published by finish()
    proc = subprocess.Popen([java, *first.jvm_options().split(), "-version"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    class Gateway:
        pass

    gateway = Gateway()
    gateway.proc = proc
    finish(first, gateway)
    assert os.path.getsize(first.path) > 0 and not os.path.exists(first.dump_to)
    again = class_archive(java)
    assert again is not None and again.dump_to is None
    assert again.jvm_options().startswith(f"-XX:SharedArchiveFile={first.path}")
    with open(first.path, "r+b") as f:  # damaged: cut short
        f.truncate(4096)
    assert class_archive(java) is None and not os.path.exists(first.path)
    monkeypatch.setenv("KLOG_SPARK_CDS", "0")
    assert class_archive(java) is None


def test_a_plain_pyspark_program_finds_the_source(orders, data_dir, tmp_path) -> None:
    """No klog.spark.register(): PySpark 4 registers pyspark_klog.DefaultSource by itself. The store is
    the dataDir option, else $KLOG_DATA_DIR. PYTHONPATH stands in for an installed klog; PYSPARK_PYTHON
    is what any PySpark program in a virtualenv sets for its workers."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "df = spark.read.format('klog').option('subscribe', 'orders').option('dataDir', sys.argv[1]).load()\n"
        "print(sorted((r.partition, r.offset) for r in df.collect()))\n"
        "print(spark.read.format('klog').option('subscribe', 'orders').load().count())\n"
        "spark.stop()\n")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), "PYTHONPATH": REPO,
           "PYSPARK_PYTHON": sys.executable, "KLOG_DATA_DIR": data_dir,
           **({"JAVA_HOME": os.environ["JAVA_HOME"]} if "JAVA_HOME" in os.environ else {})}
    result = subprocess.run([sys.executable, str(script), data_dir], capture_output=True, text=True, timeout=600,
                            env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == str(sorted((r[1], r[2]) for r in consumed(orders, "orders")))
    assert lines[1] == "120"


def test_pyspark_klog_is_packaged() -> None:
    """The auto-registration module ships in the distribution (pyproject's packages.find)."""
    import tomllib

    from setuptools import find_packages

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(REPO, include=include)
    assert "pyspark_klog" in packages and "klog.spark" in packages
    from pyspark.sql.datasource import DataSource

    import pyspark_klog

    assert issubclass(pyspark_klog.DefaultSource, DataSource) and pyspark_klog.DefaultSource.name() == "klog"


def test_starting_and_ending_offsets_by_timestamp_per_partition(spark, orders, data_dir) -> None:
    """Per-partition times: the first record at or after each; a time past the last record is the end."""
    starting = json.dumps({"orders": {"0": T0 + 10_000, "2": T0 + 35_500}})
    ending = json.dumps({"orders": {"0": T0 + 20_500, "2": T0 + 10**9}})
    got = read_rows(spark, assign=json.dumps({"orders": [0, 2]}), startingOffsetsByTimestamp=starting,
                    endingOffsetsByTimestamp=ending, dataDir=data_dir)
    assert [(r[1], r[2]) for r in got] == [(0, o) for o in range(10, 21)] + [(2, o) for o in range(36, 40)]
    assert got == [r for r in consumed(orders, "orders") if (r[1] == 0 and 10 <= r[2] <= 20) or
                   (r[1] == 2 and r[2] >= 36)]


def test_stream_fail_on_data_loss_after_delete_records(spark, store, data_dir, tmp_path) -> None:
    """Records deleted while a stream is stopped: by default the restart fails with one line; with
    failOnDataLoss=false it goes on from the new log start."""
    store.create_topic("in", partitions=1)
    checkpoint = str(tmp_path / "ckpt")
    _produce(store, "in", 0, 10)
    _stream(spark, data_dir, checkpoint, "in", "up")
    _produce(store, "in", 10, 20)
    store.delete_records("in", before_offset=15)  # 10..14 go before the stream saw them
    query = (spark.readStream.format("klog").option("subscribe", "in").option("dataDir", data_dir).load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers")
             .writeStream.format("klog").option("topic", "up").option("dataDir", data_dir)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    with pytest.raises(Exception) as info:
        query.awaitTermination()
    assert "offset 10 of in-0 is below its log start offset 15" in str(from_spark(info.value))
    assert _values_by_key(store, "up") == _expected(0, 10)  # the failed batch wrote nothing
    progress = _stream(spark, data_dir, checkpoint, "in", "up", failOnDataLoss="false")
    assert sum(p.numInputRows for p in progress) == 5
    assert _values_by_key(store, "up") == {k: _expected(0, 10).get(k, []) + _expected(15, 20).get(k, [])
                                           for k in _expected(0, 20)}


def test_sql_create_temporary_view_using_klog(spark, orders, data_dir) -> None:
    spark.sql(f"CREATE TEMPORARY VIEW klog_orders_view USING klog OPTIONS (subscribe 'orders', "
              f"dataDir '{data_dir}', startingOffsets '{json.dumps({'orders': {'0': 0, '1': 30, '2': 0}})}')")
    try:
        rows = spark.sql("SELECT partition, offset, CAST(value AS STRING) AS v FROM klog_orders_view "
                         "WHERE partition = 1 ORDER BY offset").collect()
        count = spark.sql("SELECT count(*) AS n FROM klog_orders_view").collect()[0].n
    finally:
        spark.sql("DROP VIEW IF EXISTS klog_orders_view")
    assert [(r.partition, r.offset, r.v) for r in rows] == [
        (1, r[2], None if r[6] is None else r[6].decode()) for r in consumed(orders, "orders") if r[1] == 1
        and r[2] >= 30]
    assert count == 40 + 10 + 40


def test_compacted_topic_reads_the_surviving_records_at_their_offsets(spark, store, data_dir) -> None:
    store.create_topic("c", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "400",
                                                   "retention.ms": "-1"})
    with store.producer() as producer:
        for i in range(60):  # six keys rewritten over and over, and a few keys written once
            key = f"once{i}" if i % 10 == 3 else f"k{i % 6}"
            producer.send("c", f"v{i}".encode(), key=key.encode(), partition=0, timestamp=T0 + i)
            producer.flush()  # one batch per record: many small segments to compact
    store.compact("c")
    expected = consumed(store, "c")
    offsets = [r[2] for r in expected]
    assert len(expected) < 60 and offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps
    assert [r[5] for r in expected if r[2] < 40] == [f"once{i}".encode() for i in (3, 13, 23, 33)]
    assert read_rows(spark, subscribe="c", dataDir=data_dir) == expected
    assert read_rows(spark, subscribe="c", minPartitions="5", dataDir=data_dir) == expected  # ranges split on gaps
    after_gap = next(i for i in range(1, len(offsets)) if offsets[i] - offsets[i - 1] > 1)
    inside = json.dumps({"c": {"0": offsets[after_gap] - 1}})  # a start on a removed offset
    assert read_rows(spark, subscribe="c", startingOffsets=inside, dataDir=data_dir) == expected[after_gap:]



def test_a_starting_time_after_the_last_record_fails_unless_the_strategy_is_latest(spark, orders, data_dir) -> None:
    """Spark's startingOffsetsByTimestampStrategy: 'error' (its default) fails, 'latest' starts at the end."""
    late = str(T0 + 10**9)
    with pytest.raises(Exception) as info:
        read_rows(spark, subscribe="orders", startingTimestamp=late, dataDir=data_dir)
    assert "orders-0 has no record at or after" in str(from_spark(info.value))
    assert read_rows(spark, subscribe="orders", startingTimestamp=late, dataDir=data_dir,
                     startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match="invalid startingOffsetsByTimestampStrategy 'sometimes'"):
        read_rows(spark, subscribe="orders", startingTimestamp=late, dataDir=data_dir,
                  startingOffsetsByTimestampStrategy="sometimes")

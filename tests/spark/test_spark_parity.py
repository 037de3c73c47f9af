"""The klog Spark source and sink where Spark's Kafka source documents a behaviour, and Kafka-written
files (old message formats, transactions) read through Spark in both isolation levels."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from klog.errors import UsageError  # noqa: E402
from klog.spark.failures import from_spark  # noqa: E402
from tests.broker.test_kafka_files import (  # noqa: E402
    ALL_TXN_VALUES,
    COMMITTED_VALUES,
    LEGACY_RECORDS,
    _legacy_folder,
    _txn_folder,
)

pytestmark = pytest.mark.spark


def _load(spark, data_dir, **options):
    return spark.read.format("klog").options(dataDir=data_dir, **options).load()


def _error(spark, data_dir, **options) -> Exception:
    with pytest.raises(Exception) as info:
        _load(spark, data_dir, **options).count()
    return from_spark(info.value)


def test_kafka_written_files_through_spark_in_both_isolation_levels(spark, store, data_dir, tmp_path):
    from klog.broker.importer import import_dirs

    _legacy_folder(tmp_path / "k")
    _txn_folder(tmp_path / "k", with_txn_index=False)
    import_dirs(store, [str(tmp_path / "k")])
    rows = _load(spark, data_dir, subscribe="old").selectExpr(
        "offset", "CAST(key AS STRING) k", "CAST(value AS STRING) v", "unix_millis(timestamp) ms").collect()
    assert sorted((r.offset, r.k, r.v, r.ms) for r in rows) == LEGACY_RECORDS

    def values(**options) -> list[str]:
        df = _load(spark, data_dir, subscribe="tx", **options).selectExpr("offset", "CAST(value AS STRING) v")
        return [r.v for r in sorted(df.collect())]

    assert values() == ALL_TXN_VALUES
    assert values(**{"kafka.isolation.level": "read_committed"}) == COMMITTED_VALUES
    assert isinstance(_error(spark, data_dir, subscribe="tx", **{"kafka.isolation.level": "x"}), UsageError)


def test_include_headers_false_drops_the_headers_column(spark, store, data_dir):
    store.create_topic("h", 1)
    with store.producer() as p:
        p.send("h", b"v", headers=[("a", b"1")])
    assert "headers" in _load(spark, data_dir, subscribe="h").columns
    df = _load(spark, data_dir, subscribe="h", includeHeaders="false")
    assert "headers" not in df.columns and [bytes(r.value) for r in df.collect()] == [b"v"]


def test_offsets_json_as_spark_checks_it(spark, store, data_dir):
    store.create_topic("j", 2)
    latest = _error(spark, data_dir, subscribe="j", startingOffsets=json.dumps({"j": {"0": -1, "1": -2}}))
    assert isinstance(latest, UsageError) and "j-0 can't be latest (-1) for batch reads" in str(latest)
    missing = _error(spark, data_dir, subscribe="j", startingOffsets=json.dumps({"j": {"0": -2}}))
    assert isinstance(missing, UsageError) and "must name every partition" in str(missing) and "j-1" in str(missing)
    assert _load(spark, data_dir, subscribe="j", startingOffsets=json.dumps({"j": {"0": -2, "1": -2}})).count() == 0


def test_options_spark_accepts_but_klog_does_not_use_warn_once(spark, store, data_dir, caplog):
    from klog.spark import options

    store.create_topic("w", 1)
    extra = {"minOffsetsPerTrigger": "5", "maxTriggerDelay": "1m", "groupIdPrefix": "g",
             "fetchOffset.numRetries": "3", "kafkaConsumer.pollTimeoutMs": "100",
             "kafka.fetch.max.bytes": "1048576"}
    assert _load(spark, data_dir, subscribe="w", **extra).count() == 0  # accepted by a real query
    options._warned.clear()
    with caplog.at_level(logging.WARNING, logger="klog"):
        for _ in range(3):
            options.parse_read_options({"subscribe": "w", "dataDir": data_dir, **extra})
    warned = [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]
    assert len(warned) == len(extra)  # one each, not one per query
    with pytest.raises(UsageError, match="unknown option 'startingofsets'"):
        options.parse_read_options({"subscribe": "w", "startingOfsets": "earliest"})


def test_max_offsets_per_trigger_is_split_by_backlog_as_spark_does():
    from klog.spark.source import _limit_rows

    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 99, ("t", 2): 101}
    # backlogs 900, 99, 1 of 1000; limit 100: floor(90), floor(9.9), ceil(0.1)
    assert _limit_rows(start, latest, 100) == {("t", 0): 90, ("t", 1): 9, ("t", 2): 101}
    assert _limit_rows(start, latest, 5000) == latest


def test_sink_topic_option_overrides_the_column_and_other_columns_are_ignored(spark, store, data_dir):
    store.create_topic("src", 1)
    store.create_topic("dst", 1)
    with store.producer() as p:
        p.send("src", b"one", key=b"k")
    df = _load(spark, data_dir, subscribe="src")  # topic, offset, timestampType, ... as read
    df.drop("timestamp").write.format("klog").option("dataDir", data_dir).option("topic", "dst") \
        .mode("append").save()
    got = [(r.key, r.value) for r in store.consumer("dst")]
    assert got == [(b"k", b"one")] and [r.value for r in store.consumer("src")] == [b"one"]
    with pytest.raises(Exception) as info:  # PySpark's limit: Spark's Kafka sink appends in errorifexists mode
        df.write.format("klog").option("dataDir", data_dir).option("topic", "dst").save()
    assert "Append" in str(info.value)
    assert len(list(store.consumer("dst"))) == 1
    with pytest.raises(Exception) as info:
        df.write.format("klog").option("dataDir", data_dir).option("topic", "dst").mode("overwrite").save()
    assert "save mode overwrite is not allowed" in str(from_spark(info.value))


def test_export_text_never_writes_invalid_utf8(spark, store, data_dir, tmp_path):
    import pyarrow.parquet as pq

    from klog.spark.export import shaped

    store.create_topic("bin", 1)
    with store.producer() as p:
        p.send("bin", b"ok\xff\xfe", key=b"\xc3(", headers=[("h", b"\x80")])
    out = str(tmp_path / "out")
    shaped(spark, _load(spark, data_dir, subscribe="bin"), "text", None).write.parquet(out)
    table = pq.read_table(out)
    assert table.column("value").to_pylist() == ["ok\ufffd\ufffd"]
    assert table.column("key").to_pylist() == ["\ufffd("]
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": "\ufffd"}]]


def test_stream_read_committed_stops_at_the_last_stable_offset(spark, store, data_dir, tmp_path):
    from klog.broker.importer import import_dirs
    from tests.spark.test_spark_source import _stream

    _txn_folder(tmp_path / "k", with_txn_index=True)
    import_dirs(store, [str(tmp_path / "k")])
    store.create_topic("up", 1)
    _stream(spark, data_dir, str(tmp_path / "ckpt"), "tx", "up", **{"kafka.isolation.level": "read_committed"})
    assert [r.value.decode() for r in store.consumer("up")] == [v.upper() for v in COMMITTED_VALUES]

"""`writeStream.format("klog")` in Update and Complete output modes, and the jar that allows Update.

Goal: a streaming GROUP BY written with `format("klog").outputMode("update")` appends each updated
row (as Spark's Kafka sink does), so a consumer of the output topic sees every key's latest count;
with `transactional.id` too; Complete mode appends every key's count each batch. Spark takes
Update mode only from the JVM class in klog/spark/jars/klog-spark.jar, which is committed: the jar
must hold what its source compiles to.
Method: the shared SparkSession (the `spark` fixture, started by klog's session helper, which adds
the jar); one availableNow run of two micro-batches (5 clicks, then 2 more); the output topic read
back with klog's consumer (read_committed). The jar check recompiles the source with javac when
this machine has one.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from klog.spark import ForeachBatchSink, jar  # noqa: E402

pytestmark = pytest.mark.spark


def _produce(store, topic: str, keys: list[str]) -> None:  # noqa: ANN001
    with store.producer() as producer:
        for i, key in enumerate(keys):
            producer.send(topic, f"click-{i}".encode(), key=key.encode())


def _run(spark, data_dir: str, checkpoint: str, mode: str, sink: dict[str, str], foreach_batch: bool) -> None:  # noqa: ANN001
    """One availableNow run of a count per key, clicks -> counts, 5 input records per micro-batch;
    through format("klog") or (foreach_batch) klog's sink for sessions without the jar."""
    counts = (spark.readStream.format("klog").option("subscribe", "clicks").option("dataDir", data_dir)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5").load()
              .groupBy("key").count().selectExpr("key", "CAST(count AS STRING) AS value"))
    options = {"topic": "counts", "dataDir": data_dir, **sink, "checkpointLocation": checkpoint}
    writer = counts.writeStream.outputMode(mode).option("checkpointLocation", checkpoint)
    writer = writer.foreachBatch(ForeachBatchSink(**options)) if foreach_batch \
        else writer.format("klog").options(**options)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    assert query.exception() is None
    assert [p.numInputRows for p in query.recentProgress if p.numInputRows] == [5, 2]


def _seen(store) -> list[tuple[str, str]]:  # noqa: ANN001
    return [(r.key.decode(), r.value.decode()) for r in store.consumer("counts", isolation_level="read_committed")]


@pytest.mark.slow
@pytest.mark.usefixtures("few_shuffle_partitions")
@pytest.mark.parametrize(("mode", "sink", "foreach_batch"), [
    ("update", {}, False),
    ("update", {"transactional.id": "click-counter"}, False),
    ("complete", {}, False),
    ("update", {"transactional.id": "click-counter"}, True),
], ids=["update", "update-transactional", "complete", "update-foreachBatch"])
def test_streaming_aggregation_reaches_the_topic(spark, store, data_dir, tmp_path, mode, sink,  # noqa: ANN001
                                                 foreach_batch) -> None:
    assert jar.update_mode_available(spark)  # the session helper put the jar on the driver's classpath
    store.create_topic("clicks", partitions=1)  # one partition: the first batch is the first 5 clicks
    store.create_topic("counts", partitions=1)  # one partition: the order the batches wrote
    _produce(store, "clicks", ["a", "b", "a", "c", "a"] + ["b", "d"])  # then b changes, d is new
    _run(spark, data_dir, str(tmp_path / "ckpt"), mode, sink, foreach_batch)
    seen = _seen(store)
    first, second = seen[:3], seen[3:]
    assert sorted(first) == [("a", "3"), ("b", "1"), ("c", "1")]
    if mode == "update":  # only the rows the second batch updated
        assert sorted(second) == [("b", "2"), ("d", "1")]
    else:  # complete: every key's count again
        assert sorted(second) == [("a", "3"), ("b", "2"), ("c", "1"), ("d", "1")]
    latest = dict(seen)  # what a consumer compacting by key ends with
    assert latest == {"a": "3", "b": "2", "c": "1", "d": "1"}
    if sink:
        assert store.describe_transaction("click-counter").state == "CompleteCommit"


def test_batch_overwrite_is_still_refused(spark, data_dir) -> None:  # noqa: ANN001
    from klog.spark.failures import from_spark

    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception) as refused:  # noqa: PT011 - PySpark's error type for a Python-side failure
        df.write.format("klog").option("topic", "t").option("dataDir", data_dir).mode("overwrite").save()
    assert "save mode overwrite is not allowed for klog" in str(from_spark(refused.value))


def _signatures(jar_path: str, classes: list[str]) -> str:
    """`javap -p` of the jar's classes: every class, field and method signature."""
    names = [c.removesuffix(".class").replace("/", ".") for c in classes]
    return subprocess.run(["javap", "-p", "-cp", jar_path, *names], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.slow
def test_committed_jar_is_what_the_source_compiles_to(tmp_path) -> None:  # noqa: ANN001
    if shutil.which("javac") is None:
        pytest.skip("no javac on this machine: the committed jar is used as is")
    stale = "klog-spark.jar is not what DefaultSource.java compiles to: run `python -m klog.spark.jar`"
    rebuilt_jar = str(tmp_path / "klog-spark.jar")
    rebuilt = jar.build(rebuilt_jar)
    committed = jar.jar_classes()
    assert sorted(committed) == sorted(rebuilt), stale
    if jar.jar_javac() == jar.javac_version():  # the same compiler gives the same bytes
        assert committed == rebuilt, stale
    else:  # another javac: the same classes, fields and methods
        assert _signatures(jar.JAR_PATH, sorted(committed)) == _signatures(rebuilt_jar, sorted(rebuilt)), stale

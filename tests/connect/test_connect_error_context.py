"""The context a failed record is reported with, as Kafka 3.9's ErrorReporters give it: the DLQ's
__connect.errors.stage / class.name headers (DeadLetterQueueReporter) and the errors.log.enable line
(LogReporter.message). For Stage.TRANSFORMATION the class is the failing transform's
(TransformationChain.apply executes each TransformationStage with its transformClass(); a failing
predicate's test runs inside that stage, so it names the transform too); klog named "transforms"."""

from __future__ import annotations

import klog
from klog.connect.api import SinkConnector, SinkTask
from klog.connect.errors import DataError
from klog.connect.transforms import Predicate, Transform
from tests.connect.helpers import records, running, wait_for

PUT: list = []


class CollectingSinkTask(SinkTask):
    def put(self, records: list) -> None:
        PUT.extend(r.value for r in records)


class CollectingSink(SinkConnector):
    task_class = CollectingSinkTask


class Boom(Transform):
    """Fails on the value b"boom"."""

    def apply(self, record):
        if record.value == b"boom":
            raise DataError("boom refused")
        return record


class Explodes(Predicate):
    """Its test fails on a record with the header "explode"."""

    def test(self, record) -> bool:
        if any(h[0] == "explode" for h in record.headers):
            raise DataError("the predicate failed")
        return False


def test_each_failure_names_its_transform_in_the_dlq_and_the_log(data_dir):
    PUT.clear()
    with klog.open(data_dir) as s:
        s.create_topic("in", partitions=1)
        with s.producer() as p:
            p.send("in", b"fine", timestamp=1_700_000_000_000)
            p.send("in", b"boom", timestamp=1_700_000_000_001)
            p.send("in", b"not a map", headers=[("extract", b"")], timestamp=1_700_000_000_002)
            p.send("in", b"x", headers=[("explode", b"")], timestamp=1_700_000_000_003)
    kafka = "org.apache.kafka.connect.transforms."
    config = {"name": "ctx", "connector.class": f"{__name__}.CollectingSink", "topics": "in",
              "key.converter": "bytes", "value.converter": "bytes",
              "transforms": "boom,extract,header", "transforms.boom.type": f"{__name__}:Boom",
              "transforms.extract.type": kafka + "ExtractField$Value", "transforms.extract.field": "x",
              "transforms.extract.predicate": "hasExtract",
              "transforms.header.type": kafka + "InsertHeader", "transforms.header.header": "h",
              "transforms.header.value.literal": "v", "transforms.header.predicate": "explodes",
              "transforms.header.negate": "true",
              "predicates": "hasExtract,explodes", "predicates.hasExtract.type": "HasHeaderKey",
              "predicates.hasExtract.name": "extract", "predicates.explodes.type": f"{__name__}:Explodes",
              "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
              "errors.deadletterqueue.context.headers.enable": "true",
              "errors.log.enable": "true", "errors.log.include.messages": "true"}
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: len(records(data_dir, "dlq")) == 3 and PUT, what="three DLQ records and one put")
    assert PUT == [b"fine"]
    reported = [(r.value, dict(r.headers)) for r in records(data_dir, "dlq")]
    assert [(value, h["__connect.errors.stage"], h["__connect.errors.class.name"]) for value, h in reported] == [
        (b"boom", b"TRANSFORMATION", f"{__name__}.Boom".encode()),
        (b"not a map", b"TRANSFORMATION", (kafka + "ExtractField$Value").encode()),
        (b"x", b"TRANSFORMATION", (kafka + "InsertHeader").encode())]  # its predicate failed
    logged = [w for w in warnings if w.startswith("Error encountered")]
    assert logged[1] == (
        "Error encountered in task ctx-0. Executing stage 'TRANSFORMATION' with class "
        "'org.apache.kafka.connect.transforms.ExtractField$Value', where consumed record is {topic='in', "
        "partition=0, offset=2, timestamp=1700000000002, timestampType=CreateTime}. "
        "org.apache.kafka.connect.errors.DataException: Unknown field: x")


def test_without_tolerance_the_failure_is_still_logged_and_in_the_dlq(data_dir):
    """errors.tolerance=none: Kafka's RetryWithToleranceOperator.execute reports the failed record (its
    finally) before the task fails "Tolerance exceeded"; klog failed the task without a log line or a DLQ
    record."""
    PUT.clear()
    with klog.open(data_dir) as s:
        s.create_topic("in", partitions=1)
        with s.producer() as p:
            p.send("in", b"boom")
    config = {"name": "strict", "connector.class": f"{__name__}.CollectingSink", "topics": "in",
              "key.converter": "bytes", "value.converter": "bytes",
              "transforms": "boom", "transforms.boom.type": f"{__name__}:Boom",
              "errors.deadletterqueue.topic.name": "dlq", "errors.deadletterqueue.context.headers.enable": "true",
              "errors.log.enable": "true"}
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings) as w:
        wait_for(lambda: [r.state for r in w.runners()] == ["FAILED"], what="the task's failure")
        [runner] = w.runners()
    assert "Tolerance exceeded in error handler" in str(runner.error)
    assert [r.value for r in records(data_dir, "dlq")] == [b"boom"]
    assert [m for m in warnings if m.startswith("Error encountered in task strict-0. Executing stage "
                                                f"'TRANSFORMATION' with class '{__name__}.Boom'.")]
    assert PUT == []

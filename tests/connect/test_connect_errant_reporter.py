"""A sink task's errant record reporter as Kafka's: given only with a DLQ or errors.log.enable, the task
FAILED ("Tolerance exceeded in error handler") under errors.tolerance=none, the record acknowledged in the
DLQ before report() returns (a sink storing its own offsets commits the record's next), logged and skipped
with errors.tolerance=all and no DLQ."""

from __future__ import annotations

import json
import sqlite3

import pytest

import klog
from klog.connect.api import SinkConnector, SinkTask
from klog.connect.data import ConnectRecord
from klog.connect.errors import DataError
from klog.meta.groups import GroupsMeta
from tests.connect.helpers import records, running, values, wait_for

REPORTERS: list = []  # what each ReportingSink task was given as its reporter
SEEN_IN_DLQ: list = []  # the DLQ's values, read by put() right after each report returned
ROW_SCHEMA = {"type": "struct", "optional": False, "name": "row", "fields": [
    {"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"}]}
STRICT_SCHEMA = {**ROW_SCHEMA, "fields": [ROW_SCHEMA["fields"][0], {"type": "string", "optional": False,
                                                                     "field": "name"}]}
KEY_SCHEMA = {"type": "struct", "optional": False, "fields": [{"type": "int32", "optional": False, "field": "id"}]}
REFUSED = json.dumps({"schema": ROW_SCHEMA, "payload": {"id": 2, "name": None}}).encode()


class ReportingSinkTask(SinkTask):
    """Reports each record whose value is b"bad" (or, with `own.records`, one it makes in its place), then
    reads the DLQ back (before any commit of the worker's); with `swallow`, catches what the reporter raises."""

    def start(self, props: dict[str, str]) -> None:
        self.data_dir = props["test.data.dir"]
        self.swallow = props.get("test.swallow") == "true"
        self.own_records = props.get("test.own.records") == "true"
        REPORTERS.append(self.context.errant_record_reporter)

    def put(self, records: list) -> None:
        reporter = self.context.errant_record_reporter
        for r in records:
            if r.value in (b"bad", "bad"):  # the bytes, or the JSON string "bad" through JsonConverter
                if self.own_records:  # a record the task made, no consumed record behind it
                    r = ConnectRecord(r.topic, r.kafka_partition, None, b"own key", None, b"own value",
                                      kafka_offset=r.kafka_offset)
                try:
                    reporter(r, DataError("the record is bad"))
                except Exception:  # noqa: BLE001 - the test's swallowing task
                    if not self.swallow:
                        raise
                SEEN_IN_DLQ.append(values(self.data_dir, "dlq"))


class ReportingSink(SinkConnector):
    task_class = ReportingSinkTask


def _stub_config(data_dir, **extra) -> dict:
    return {"name": "stub", "connector.class": f"{__name__}.ReportingSink", "topics": "in",
            "key.converter": "bytes", "value.converter": "bytes", "test.data.dir": data_dir, **extra}


def _produce(data_dir, topic, items, timestamp=None) -> None:
    with klog.open(data_dir) as s:
        s.create_topic(topic, partitions=1, exist_ok=True)
        with s.producer() as p:
            for key, value in items:
                p.send(topic, value, key=key, timestamp=timestamp)


@pytest.fixture(autouse=True)
def _clear():
    REPORTERS.clear()
    SEEN_IN_DLQ.clear()


def test_the_record_is_in_the_dlq_when_report_returns(data_dir):
    """errors.tolerance=all with a DLQ: report() returns once the record is written to the DLQ (it was
    buffered until the worker's next commit, which a sink committing its own offsets does not wait for)."""
    _produce(data_dir, "in", [(b"1", b"good"), (b"2", b"bad")], timestamp=1_600_000_000_000)
    config = _stub_config(data_dir, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"})
    with running(data_dir, config, worker={"offset.flush.interval.ms": "60000"}):
        wait_for(lambda: SEEN_IN_DLQ, what="the report")
    assert SEEN_IN_DLQ == [[b"bad"]]
    [dead] = records(data_dir, "dlq")
    assert dead.timestamp == 1_600_000_000_000  # the record's own, as Kafka's DLQ keeps it (it was the send's)


def test_a_record_the_task_made_is_converted_into_the_dlq(data_dir):
    """A record with no consumed record behind it goes to the DLQ through the connector's converters, as
    Kafka's reporter converts one (it failed the task: None has no attribute 'headers')."""
    _produce(data_dir, "in", [(b"1", b"bad")])
    config = _stub_config(data_dir, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
                                       "test.own.records": "true"})
    with running(data_dir, config):
        wait_for(lambda: SEEN_IN_DLQ, what="the report")
    [dead] = records(data_dir, "dlq")
    assert (dead.key, dead.value) == (b"own key", b"own value")


@pytest.mark.parametrize("extra, given", [
    ({}, False),
    ({"errors.tolerance": "all"}, False),
    ({"errors.tolerance": "all", "errors.log.enable": "true"}, True),
    ({"errors.deadletterqueue.topic.name": "dlq"}, True),
])
def test_a_reporter_only_with_a_dlq_or_the_error_log(data_dir, extra, given):
    """Kafka's enableErrantRecordReporter: without a DLQ topic and errors.log.enable=false the task's
    reporter is None (it was always given one)."""
    _produce(data_dir, "in", [(b"1", b"good")])
    with running(data_dir, _stub_config(data_dir, **extra)):
        wait_for(lambda: REPORTERS, what="the task to start")
    assert (REPORTERS[0] is not None) is given


@pytest.mark.parametrize("swallow", [False, True])
def test_tolerance_none_fails_the_task(data_dir, swallow):
    """errors.tolerance=none: a reported record fails the task with Kafka's message, also when the task
    catches what the reporter raised (Kafka's maybeThrowAsyncError); the record is in the DLQ first, as
    Kafka reports before it checks the tolerance. (The task went on.)"""
    _produce(data_dir, "in", [(b"1", b"bad"), (b"2", b"good")])
    config = _stub_config(data_dir, **{"errors.deadletterqueue.topic.name": "dlq",
                                       "test.swallow": "true" if swallow else "false"})
    with running(data_dir, config) as w:
        # (the state, not the error: the runner keeps its error a moment before its state says FAILED)
        wait_for(lambda: any(r.state == "FAILED" for r in w.runners()), what="the task to fail")
        [runner] = w.runners()
        assert runner.state == "FAILED"
        assert str(runner.error).startswith("Tolerance exceeded in error handler: TASK_PUT "
                                            "(org.apache.kafka.connect.sink.SinkTask) "
                                            "failed: DataError: the record is bad"), runner.error
    assert values(data_dir, "dlq") == [b"bad"]


def _jdbc_topic(data_dir) -> None:
    rows = [(1, STRICT_SCHEMA, {"id": 1, "name": "a"}), (2, ROW_SCHEMA, {"id": 2, "name": None}),
            (3, STRICT_SCHEMA, {"id": 3, "name": "c"})]
    _produce(data_dir, "rows", [(json.dumps({"schema": KEY_SCHEMA, "payload": {"id": i}}).encode(),
                                 json.dumps({"schema": schema, "payload": row}).encode()) for i, schema, row in rows])


def _jdbc_config(db: str, **extra) -> dict:
    return {"name": "jdbc", "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "topics": "rows",
            "connection.url": f"jdbc:sqlite:{db}", "insert.mode": "upsert", "pk.mode": "record_key", **extra}


def _strict_db(tmp_path) -> str:
    db = str(tmp_path / "out.db")
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "rows" (id INTEGER PRIMARY KEY, name TEXT NOT NULL)')
    return db


def _db(db: str, sql: str) -> list:
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the sink has not created its offsets table yet
            return []


def test_jdbc_sink_tolerance_none_with_a_dlq_fails_before_the_refused_rows_offset(tmp_path, data_dir):
    """errors.tolerance=none with a DLQ: the row the database refuses fails the task with Kafka's message,
    the rows before it written with their offset, not the refused row's (the sink wrote it to the DLQ
    and went on to offset 3)."""
    db = _strict_db(tmp_path)
    _jdbc_topic(data_dir)
    with running(data_dir, _jdbc_config(db, **{"errors.deadletterqueue.topic.name": "dlq"})) as w:
        # (the state, not the error: the runner keeps its error a moment before its state says FAILED)
        wait_for(lambda: any(r.state == "FAILED" for r in w.runners()), what="the task to fail")
        [runner] = w.runners()
        assert runner.state == "FAILED"
        assert "Tolerance exceeded in error handler" in runner.trace
        assert "rows-0@1 was refused by the database" in runner.trace
    assert _db(db, "SELECT id, name FROM rows") == [(1, "a")]
    assert _db(db, "SELECT next_offset FROM __klog_connect_offsets") == [(1,)]
    with klog.open(data_dir) as s:
        committed = GroupsMeta(s.meta).committed("connect-jdbc").get(("rows", 0))
    assert committed is None or committed.offset <= 1


def test_jdbc_sink_tolerance_all_without_a_dlq_logs_the_refused_row(tmp_path, data_dir):
    """errors.tolerance=all, no DLQ, errors.log.enable=true: the refused row is logged and skipped, the task
    goes on (it failed: 'no DLQ is configured')."""
    db = _strict_db(tmp_path)
    _jdbc_topic(data_dir)
    warnings: list[str] = []
    config = _jdbc_config(db, **{"errors.tolerance": "all", "errors.log.enable": "true"})
    with running(data_dir, config, warnings=warnings) as w:
        wait_for(lambda: _db(db, "SELECT next_offset FROM __klog_connect_offsets") == [(3,)], what="the 3 records")
        assert [r.state for r in w.runners()] == ["RUNNING"]
    assert _db(db, "SELECT id, name FROM rows") == [(1, "a"), (3, "c")]
    # Kafka's LogReporter line (the record's coordinates only with errors.log.include.messages)
    assert [m for m in warnings if m.startswith("Error encountered in task jdbc-0. Executing stage 'TASK_PUT' with "
                                                "class 'org.apache.kafka.connect.sink.SinkTask'.")
            and "refused by the database" in m], warnings


@pytest.mark.parametrize("worker, override", [
    ({"producer.compression.type": "gzip"}, {}),
    ({"producer.compression.type": "none"}, {"producer.override.compression.type": "gzip",
                                             "producer.override.linger.ms": "5", "producer.override.acks": "all"}),
])
def test_the_dlq_producer_takes_the_workers_producer_settings_and_the_connectors_overrides(data_dir, worker,
                                                                                             override):
    """Kafka's DLQ producer is made from the worker's producer.* and the connector's producer.override.*
    (it ignored both): with gzip the DLQ's batch is stored compressed (its error header not as plain text)."""
    import glob
    import os

    _produce(data_dir, "in", [(b"1", b"bad")])
    config = _stub_config(data_dir, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
                                       "errors.deadletterqueue.context.headers.enable": "true", **override})
    with running(data_dir, config, worker=worker):
        wait_for(lambda: SEEN_IN_DLQ, what="the report")
    [dead] = records(data_dir, "dlq")
    assert ("__connect.errors.exception.message", b"the record is bad") in [tuple(h) for h in dead.headers]
    logs = glob.glob(os.path.join(data_dir, "**", "dlq-0", "*.log"), recursive=True)
    assert logs and not any(b"the record is bad" in open(p, "rb").read() for p in logs)


def test_a_sinks_producer_overrides_are_checked_when_it_has_a_dlq(data_dir):
    """Kafka's connectorUsesProducer: a sink with a DLQ has its producer.override.* validated (a bad one is
    named at validation, not the task's failure); one without a DLQ uses no producer."""
    from klog.connect.errors import ConfigError
    from klog.connect.worker import validate

    bad = {"producer.override.compression.type": "lz5"}
    with pytest.raises(ConfigError, match="producer.override.compression.type"):
        validate(_stub_config(data_dir, **{"errors.deadletterqueue.topic.name": "dlq"}, **bad))
    validate(_stub_config(data_dir, **bad))


def test_the_dlqs_class_name_header_is_kafkas_executing_class(data_dir):
    """__connect.errors.class.name as Kafka writes it: org.apache.kafka.connect.sink.SinkTask for a record the
    task reported (Stage TASK_PUT; it was the connector's class), the converter's class for one a converter
    refused (it was its Python name)."""
    _produce(data_dir, "in", [(b"1", b"not json"), (b"2", b'"bad"')])  # JSON "bad": the task reports it
    config = _stub_config(data_dir, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
                                       "errors.deadletterqueue.context.headers.enable": "true",
                                       "value.converter": "json", "value.converter.schemas.enable": "false"})
    with running(data_dir, config):
        wait_for(lambda: len(values(data_dir, "dlq")) == 2, what="both DLQ records")
    stages = {dict(d.headers)["__connect.errors.stage"]: dict(d.headers)["__connect.errors.class.name"]
              for d in records(data_dir, "dlq")}
    assert stages == {b"VALUE_CONVERTER": b"org.apache.kafka.connect.json.JsonConverter",
                      b"TASK_PUT": b"org.apache.kafka.connect.sink.SinkTask"}


@pytest.mark.parametrize("policy, override, refused", [
    ("None", {"producer.override.acks": "1"}, "producer.override.acks"),
    ("None", {"consumer.override.max.poll.records": "5"}, "consumer.override.max.poll.records"),
    ("Principal", {"producer.override.compression.type": "gzip"}, "producer.override.compression.type"),
    ("Principal", {"producer.override.security.protocol": "SSL"}, None),
    ("org.apache.kafka.connect.connector.policy.NoneConnectorClientConfigOverridePolicy",
     {"admin.override.client.id": "x"}, "admin.override.client.id"),
    ("All", {"producer.override.acks": "1", "consumer.override.max.poll.records": "5"}, None),
])
def test_the_workers_override_policy_decides_a_sinks_overrides(data_dir, policy, override, refused):
    """connector.client.config.override.policy as Kafka's (All unless set): None and Principal refuse the
    overrides they deny, naming the key, for the clients the connector uses (a sink with a DLQ: consumer,
    producer, admin); klog applied every override whatever the worker said."""
    from klog.connect.errors import ConfigError
    from klog.connect.worker import WORKER, validate

    worker = WORKER.parse({"connector.client.config.override.policy": policy})
    config = _stub_config(data_dir, **{"errors.deadletterqueue.topic.name": "dlq"}, **override)
    if refused is None:
        validate(config, worker)
        return
    with pytest.raises(ConfigError, match=f"{refused}.*policy does not allow"):
        validate(config, worker)
    # without a DLQ the sink uses no producer or admin: only its consumer's overrides are judged
    if not refused.startswith("consumer."):
        validate(_stub_config(data_dir, **override), worker)

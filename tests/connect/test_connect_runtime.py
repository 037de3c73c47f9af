"""The Connect runtime as a user sees it: configs refused or warned about, offsets in Kafka Connect's
format resumed after a stop, converters' bytes, errors tolerated into a DLQ with Kafka's headers."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.connect.helpers import records, running, start_cli, stop_cli, values, wait_for, wait_started, write_config


def _source(tmp_path, **extra) -> dict:
    return {"name": "fs", "connector.class": "FileStreamSource", "file": str(tmp_path / "in.txt"),
            "topic": "lines", "value.converter": "org.apache.kafka.connect.storage.StringConverter", **extra}


@pytest.mark.slow
def test_sigterm_commits_offsets_and_a_restart_resumes(tmp_path, data_dir):
    (tmp_path / "in.txt").write_text("a\nb\n")
    cfg = write_config(str(tmp_path / "fs.json"), _source(tmp_path))
    proc = start_cli(data_dir, cfg)
    wait_started(proc)
    wait_for(lambda: values(data_dir, "lines") == [b"a", b"b"], what="the two lines")
    code, err = stop_cli(proc, signal.SIGTERM)
    assert code == 143 and "klog: terminated" in err and "Traceback" not in err
    offsets = [(json.loads(r.key), json.loads(r.value)) for r in records(data_dir, "connect-offsets")]
    assert offsets[-1][0] == ["fs", {"filename": str(tmp_path / "in.txt")}]
    assert offsets[-1][1]["position"] == 4
    with open(tmp_path / "in.txt", "a") as f:
        f.write("c\n")
    proc = start_cli(data_dir, cfg)
    wait_started(proc)
    wait_for(lambda: len(values(data_dir, "lines")) >= 3, what="the new line")
    code, _ = stop_cli(proc, signal.SIGINT)
    assert code == 130
    assert values(data_dir, "lines") == [b"a", b"b", b"c"]  # nothing read twice


@pytest.mark.parametrize("change, field", [
    ({"tasks.max": "0"}, "tasks.max"), ({"connector.class": "NoSuchConnector"}, "connector.class"),
    ({"topic": None}, "topic"), ({"errors.tolerance": "some"}, "errors.tolerance"),
    ({"value.converter": "x.Y"}, "value.converter"), ({"transforms": "t", "transforms.t.type": "Nope"},
                                                     "transforms.t.type"),
    ({"transforms": "t", "transforms.t.type": "org.apache.kafka.connect.transforms.RegexRouter",
      "transforms.t.regex": "("}, "transforms.t.regex"),
    ({"producer.override.compression.type": "lz5"}, "producer.override.compression.type"),
    ({"producer.override.linger.ms": "-1"}, "producer.override.linger.ms"),
])
def test_an_invalid_config_is_refused_naming_the_field(tmp_path, cli, change, field):
    config = {k: v for k, v in {**_source(tmp_path), **change}.items() if v is not None}
    r = cli("connect", "run", "--listen", "none", write_config(str(tmp_path / "c.json"), config))
    assert r.exit_code == 2, r.stderr
    assert r.stderr.count("\n") == 1 and field in r.stderr and "Traceback" not in r.stderr


def test_keys_klog_does_not_implement_are_named_in_one_warning(tmp_path, data_dir):
    from klog.connect.worker import ignored_warning, validate

    v = validate({**_source(tmp_path), "config.action.reload": "none", "batch.size": "10", "fancy.key": "1"})
    message = ignored_warning(v)
    assert message is not None and "config.action.reload" in message and "fancy.key" in message
    assert "batch.size" not in message  # a key the connector implements


def test_properties_file_and_kafka_class_names(tmp_path):
    from klog.connect.config import load_config_file
    from klog.connect.worker import validate

    path = tmp_path / "c.properties"
    path.write_text("# Kafka's own example\nname=local-file-source\n"
                    "connector.class=org.apache.kafka.connect.file.FileStreamSourceConnector\ntasks.max=1\n"
                    f"file={tmp_path}/test.txt\ntopic=connect-test\n")
    v = validate(load_config_file(str(path)))
    assert v.name == "local-file-source" and v.cls.__name__ == "FileStreamSourceConnector"
    assert validate({**_source(tmp_path), "connector.class": "FileStreamSourceConnector"}).cls is v.cls
    assert validate({**_source(tmp_path), "connector.class":
                     "klog.connect.connectors.file.FileStreamSourceConnector"}).cls is v.cls


def test_json_converter_writes_the_schema_envelope_by_default(tmp_path, data_dir):
    (tmp_path / "in.txt").write_text("hello\n")
    config = {k: v for k, v in _source(tmp_path).items() if k != "value.converter"}
    with running(data_dir, config):
        wait_for(lambda: values(data_dir, "lines"), what="the line")
    assert json.loads(values(data_dir, "lines")[0]) == {"schema": {"type": "string", "optional": False},
                                                        "payload": "hello"}


def test_file_source_follows_rotation_and_truncation(tmp_path, data_dir):
    path = tmp_path / "in.txt"
    path.write_text("1\n2\n")
    with running(data_dir, _source(tmp_path)):
        wait_for(lambda: len(values(data_dir, "lines")) == 2, what="two lines")
        with open(path, "a") as f:
            f.write("3\n")
        os.rename(path, tmp_path / "in.txt.1")  # rotated: the old file is finished first
        path.write_text("4444\n")
        wait_for(lambda: len(values(data_dir, "lines")) == 4, what="the rotated and the new file's lines")
        path.write_text("5\n")  # truncated (shorter than what was read: as tail -F, that is how it shows)
        wait_for(lambda: len(values(data_dir, "lines")) == 5, what="the line after truncation")
        with open(path, "a") as f:
            f.write("6")  # no newline yet: not a line
    assert values(data_dir, "lines") == [b"1", b"2", b"3", b"4444", b"5"]


def test_glob_offsets_per_file(tmp_path, data_dir):
    (tmp_path / "a.log").write_text("a1\n")
    (tmp_path / "b.log").write_text("b1\n")
    config = {**_source(tmp_path), "file": str(tmp_path / "*.log")}
    with running(data_dir, config):
        wait_for(lambda: len(values(data_dir, "lines")) == 2)
    keys = {tuple(json.loads(r.key))[1]["filename"] for r in records(data_dir, "connect-offsets")}
    assert keys == {str(tmp_path / "a.log"), str(tmp_path / "b.log")}
    with open(tmp_path / "b.log", "a") as f:
        f.write("b2\n")
    with running(data_dir, config):
        wait_for(lambda: len(values(data_dir, "lines")) == 3)
    assert sorted(values(data_dir, "lines")) == [b"a1", b"b1", b"b2"]


def _produce(data_dir, topic, pairs):
    import klog

    with klog.open(data_dir) as s:
        s.create_topic(topic, partitions=1, exist_ok=True)
        with s.producer() as p:
            for k, v in pairs:
                p.send(topic, v, key=k)


def test_a_poison_record_lands_in_the_dlq_with_kafkas_error_headers(tmp_path, data_dir):
    _produce(data_dir, "in", [(b"k1", b'{"a": 1}'), (b"k2", b"not json"), (b"k3", b'{"a": 3}')])
    out = tmp_path / "out.txt"
    sink = {"name": "sink", "connector.class": "FileStreamSink", "topics": "in", "file": str(out),
            "value.converter": "json", "value.converter.schemas.enable": "false", "key.converter": "string",
            "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
            "errors.deadletterqueue.topic.replication.factor": "1",
            "errors.deadletterqueue.context.headers.enable": "true"}
    with running(data_dir, sink):
        wait_for(lambda: values(data_dir, "dlq"), what="the DLQ record")
    assert out.read_text().splitlines() == ['{"a":1}', '{"a":3}']
    [dead] = records(data_dir, "dlq")
    assert (dead.key, dead.value) == (b"k2", b"not json")
    headers = dict(dead.headers)
    assert headers["__connect.errors.topic"] == b"in"
    assert headers["__connect.errors.partition"] == b"0" and headers["__connect.errors.offset"] == b"1"
    assert headers["__connect.errors.connector.name"] == b"sink" and headers["__connect.errors.task.id"] == b"0"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert headers["__connect.errors.exception.class.name"] == b"org.apache.kafka.connect.errors.DataException"
    assert b"serialization error" in headers["__connect.errors.exception.message"]
    assert b"Traceback" in headers["__connect.errors.exception.stacktrace"]


def test_without_tolerance_a_poison_record_fails_the_task_and_commits_nothing_past_it(tmp_path, data_dir, cli):
    _produce(data_dir, "in", [(b"k1", b'{"a": 1}'), (b"k2", b"not json")])
    out = tmp_path / "out.txt"
    config = write_config(str(tmp_path / "s.json"), {
        "name": "sink", "connector.class": "FileStreamSink", "topics": "in", "file": str(out),
        "value.converter": "json", "value.converter.schemas.enable": "false"})
    r = cli("connect", "run", "--listen", "127.0.0.1:0", config)
    assert r.exit_code == 1
    assert "connector 'sink' task 0 failed" in r.stderr and "Tolerance exceeded" in r.stderr
    status = {json.loads(r.key) if r.key.startswith(b"[") else r.key.decode(): json.loads(r.value)
              for r in records(data_dir, "connect-status")}
    assert status["status-task-sink-0"]["state"] == "FAILED"
    assert "DataError" in status["status-task-sink-0"]["trace"]
    import klog

    with klog.open(data_dir) as s:
        committed = {p.partition: p.committed for p in s.describe_group("connect-sink").partitions}
    assert committed.get(0) in (None, 1)  # the poison record (offset 1) is not committed past


@pytest.mark.slow
def test_the_same_connectors_against_a_cluster(tmp_path, kafka_server):
    """--bootstrap-server: the worker talks Kafka's protocol (here to klog serve); an independent client
    (confluent-kafka) reads what the source wrote, and Connect's internal topics live on the cluster."""
    from confluent_kafka import Consumer

    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget
    from klog.connect.worker import Worker

    (tmp_path / "in.txt").write_text("x\ny\n")
    out = tmp_path / "out.txt"
    store = RemoteStore(ClusterTarget(kafka_server.bootstrap, {}))
    worker = Worker(store, {"offset.flush.interval.ms": "200"})
    try:
        worker.start(worker.validate(_source(tmp_path)))
        worker.start(worker.validate({"name": "back", "connector.class": "FileStreamSink", "topics": "lines",
                                      "file": str(out), "value.converter": "string"}))
        wait_for(lambda: out.exists() and out.read_text() == "x\ny\n", what="the round trip through the cluster")
        assert {"connect-offsets", "connect-configs", "connect-status"} <= set(store.topic_names())
    finally:
        worker.stop()
        store.close()
    c = Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "check", "auto.offset.reset": "earliest"})
    c.subscribe(["lines"])
    got = []
    for _ in range(100):
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 2:
            break
    c.close()
    assert got == [b"x", b"y"]


@pytest.mark.slow
def test_retriable_failures_are_retried_until_errors_retry_timeout(data_dir):
    """A sink whose system went away (RetriableError) is retried with backoff; within
    errors.retry.timeout it recovers and nothing is lost, past it the task is FAILED with the reason."""
    from tests.connect import flaky_sink

    _produce(data_dir, "in", [(b"k", b'"v"')])
    base = {"connector.class": "tests.connect.flaky_sink.FlakySink", "topics": "in", "key.converter": "string",
            "value.converter": "json",
            "value.converter.schemas.enable": "false", "errors.retry.delay.max.ms": "100"}
    flaky_sink.STORED.clear()
    flaky_sink.ATTEMPTS.clear()
    with running(data_dir, {**base, "name": "recovers", "fail.times": "2", "errors.retry.timeout": "30000"}):
        wait_for(lambda: flaky_sink.STORED == ["v"], what="the record after two failed attempts")
    assert flaky_sink.ATTEMPTS == [1, 1, 1]
    warnings: list = []
    with running(data_dir, {**base, "name": "gives-up", "fail.times": "-1", "errors.retry.timeout": "500"},
                 warnings=warnings) as w:
        wait_for(lambda: w.failures, what="the task to fail")
        runner = w.runners()[0]
        wait_for(lambda: runner.state == "FAILED")
    assert "errors.retry.timeout" in str(w.failures[0][2]) and "the database went away" in str(w.failures[0][2])
    assert "the database went away" in runner.trace


def test_file_sink_rotates_by_size(tmp_path, data_dir):
    _produce(data_dir, "in", [(None, f"line-{i:02d}".encode()) for i in range(10)])
    out = tmp_path / "out.txt"
    sink = {"name": "sink", "connector.class": "FileStreamSink", "topics": "in", "file": str(out),
            "value.converter": "string", "file.rotate.bytes": "30"}
    with running(data_dir, sink):
        wait_for(lambda: sum(len(p.read_text().splitlines()) for p in tmp_path.glob("out.txt*")) == 10)
    rotated = sorted(p for p in tmp_path.glob("out.txt.*"))
    assert [p.stat().st_size for p in rotated] == [32, 32]  # 8 bytes a line: rotated once past 30
    lines = [line for p in [*rotated, out] for line in p.read_text().splitlines()]
    assert lines == [f"line-{i:02d}" for i in range(10)]


def test_producer_overrides_reach_the_source_producer(tmp_path, data_dir):
    """producer.override.compression.type (Kafka Connect's per-connector producer setting): the topic's
    batches are written compressed and read back as the lines."""
    import glob

    (tmp_path / "in.txt").write_text("".join(f"line {i}\n" for i in range(50)))
    # linger.ms as well (it raised a TypeError: klog's shared producer-option check does not take it)
    with running(data_dir, _source(tmp_path, **{"producer.override.compression.type": "gzip",
                                                "producer.override.linger.ms": "50"})):
        wait_for(lambda: len(values(data_dir, "lines")) == 50, what="the lines")
    assert values(data_dir, "lines") == [f"line {i}".encode() for i in range(50)]
    logs = glob.glob(os.path.join(data_dir, "**", "lines-0", "*.log"), recursive=True)
    assert logs and not any(b"line 49" in open(p, "rb").read() for p in logs)  # not stored as plain text

"""Exactly-once source (KIP-618) against a cluster (`klog serve`, reached over Kafka's protocol as with
--bootstrap-server): each poll's records and their offsets are one Kafka transaction; a read_committed
consumer of an independent client (confluent-kafka) sees every line once, and a restarted worker resumes
after the committed offsets, writing nothing twice."""

from __future__ import annotations

import json

import pytest

from tests.connect.helpers import wait_for


def _committed(store, topic: str) -> list[bytes]:  # noqa: ANN001 - a RemoteStore
    if not store.has_topic(topic):
        return []
    with store.consumer(topic, isolation_level="read_committed") as consumer:
        return [r.value for r in consumer]


def _read_committed(bootstrap: str, topic: str, want: int) -> list[bytes]:
    """What an independent client's read_committed consumer reads: `want` records, and none behind."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: read the one partition
    got: list[bytes] = []
    try:
        for _ in range(60):
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) >= want:
                for _ in range(3):  # nothing more behind them
                    m = c.poll(0.2)
                    if m is not None and not m.error():
                        got.append(m.value())
                break
    finally:
        c.close()
    return got


@pytest.mark.slow
def test_exactly_once_source_against_a_cluster(tmp_path, data_dir, kafka_server):
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget
    from klog.connect.worker import Worker

    source = tmp_path / "in.txt"
    source.write_text("a\nb\n")
    config = {"name": "fs", "connector.class": "FileStreamSource", "file": str(source), "topic": "lines",
              "value.converter": "string", "exactly.once.support": "required"}
    props = {"offset.flush.interval.ms": "200", "exactly.once.source.support": "enabled"}

    def run_until(lines: list[bytes]) -> None:
        store = RemoteStore(ClusterTarget(kafka_server.bootstrap, {}))
        worker = Worker(store, props)
        try:
            worker.start(worker.validate(config))
            wait_for(lambda: _committed(store, "lines") == lines or worker.failures, timeout=30,
                     what="the lines, committed")
            assert not worker.failures
        finally:
            worker.stop()
            store.close()

    run_until([b"a", b"b"])
    with source.open("a") as f:
        f.write("c\n")
    run_until([b"a", b"b", b"c"])  # the restart resumed after b's committed offset
    assert _read_committed(kafka_server.bootstrap, "lines", 3) == [b"a", b"b", b"c"]
    store = RemoteStore(ClusterTarget(kafka_server.bootstrap, {}))
    try:
        with store.consumer("connect-offsets", isolation_level="read_committed") as consumer:
            offsets = [(json.loads(r.key), json.loads(r.value)) for r in consumer]
    finally:
        store.close()
    assert offsets[-1][0] == ["fs", {"filename": str(source)}] and offsets[-1][1]["position"] == 6
    # the records and the offsets were written inside transactions, as the cluster's log shows them
    # (kafka-dump-log's isTransactional, isControl): an end marker after each worker's lines
    lines, offset_batches = _batches(data_dir, "lines"), _batches(data_dir, "connect-offsets")
    assert all(b["transactional"] for b in lines + offset_batches) and offset_batches
    assert lines[-1]["control"] and sum(b["control"] for b in lines) >= 2


def _batches(data_dir: str, topic: str) -> list[dict]:
    from tests.klog_processes import run_klog

    dump = run_klog(data_dir, "dump", topic, "--batches", "--json")
    assert dump.returncode == 0, dump.stderr
    return [b for b in map(json.loads, dump.stdout.splitlines()) if b["type"] == "batch"]

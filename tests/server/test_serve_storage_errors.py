"""A full disk under `klog serve`: producers get KAFKA_STORAGE_ERROR, which Kafka's clients retry
(before: UNKNOWN_SERVER_ERROR, which they do not: 7 million messages failed in 25 s), and the
server says the replica left the ISR once, not once per request."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from klog.broker.replication import HEALTHY_TRUSTED_S
from klog.store import health
from tests.serve_helpers import RawClient, batch, produce

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402


class _Switch(threading.Event):
    def set(self) -> None:
        super().set()
        time.sleep(HEALTHY_TRUSTED_S * 2)  # a directory found healthy is trusted this long


@pytest.fixture
def full_disk(monkeypatch):
    """A switch: while set, every log directory reads as full (under health's 1 MiB free), from
    the first append after the set."""
    full = _Switch()
    real = health.check_log_dir

    def check(path: str, expected_id: str | None, *rest: str | None) -> str:
        return health.FULL if full.is_set() else real(path, expected_id, *rest)

    monkeypatch.setattr(health, "check_log_dir", check)
    return full


def _warnings(caplog, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def test_a_full_disk_is_a_retriable_storage_error_said_once(kafka_server, full_disk, caplog):
    kafka_server.store.create_topic("t")
    caplog.set_level(logging.INFO)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"before"])) == (E.none, 0)
        full_disk.set()
        for _ in range(20):
            assert produce(client, "t", 0, batch([b"x"]))[0] == E.kafka_storage_error
        assert _warnings(caplog, "left the ISR (full)") == 1  # a state change, said once
        full_disk.clear()
        assert produce(client, "t", 0, batch([b"after"])) == (E.none, 1)
        full_disk.set()  # full again: a new state change, said again
        assert produce(client, "t", 0, batch([b"x"]))[0] == E.kafka_storage_error
        assert _warnings(caplog, "left the ISR (full)") == 2


@pytest.mark.slow
def test_confluent_kafka_retries_through_a_full_disk(kafka_server, full_disk, data_dir):
    ck = pytest.importorskip("confluent_kafka")
    import klog

    kafka_server.store.create_topic("t")
    full_disk.set()
    reports: list = []
    producer = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "message.timeout.ms": 20_000,
                            "retry.backoff.ms": 100})
    producer.produce("t", b"waited", partition=0, on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(1.5)
    assert reports == []  # still retrying (UNKNOWN_SERVER_ERROR failed the message at once)
    full_disk.clear()
    producer.flush(15)
    assert reports == [None]
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("t")] == [b"waited"]

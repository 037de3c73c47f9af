"""`klog serve` keeps its logs itself (docs/serve-log-cleaner.md): compaction of compacted topics in
the background, time retention every log.retention.check.interval.ms, neither stalling other clients.

Method: a real client (confluent-kafka) produces through serve and reads back; nothing but the server's
own timers runs in between (no `klog topics clean`); each wait is bounded.
"""

from __future__ import annotations

import threading
import time

import pytest

import klog
from klog.server import Server
from tests.serve_helpers import another_client_answered

ck = pytest.importorskip("confluent_kafka")
KEYS = 10
ROUNDS = 12


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    for i, (key, value) in enumerate(records, 1):
        p.produce(topic, value, key=key)
        if i % KEYS == 0:  # a batch per round: small segments roll between rounds
            assert p.flush(30) == 0
    assert p.flush(30) == 0


def read_back(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every record of partition 0 from its log start to its end, by confluent-kafka."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        out: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 20
        position = low
        while position < high and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.key(), m.value()))
            position = m.offset() + 1
        assert position >= high, f"read up to {position} of {high}"
        return out
    finally:
        c.close()


def low_watermark(bootstrap: str, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader"})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)[0]
    finally:
        c.close()


def test_a_compacted_topic_produced_through_serve_is_compacted_in_the_background(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("changelog", partitions=1, configs={
            "cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"})
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, log_cleaner={"backoff_ms": 100}) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        produce(bootstrap, "changelog", [(b"k%d" % k, b"v%d-%d" % (r, k)) for r in range(ROUNDS) for k in range(KEYS)])
        deadline = time.monotonic() + 30
        records = read_back(bootstrap, "changelog")
        while len(records) == ROUNDS * KEYS and time.monotonic() < deadline:
            time.sleep(0.3)
            records = read_back(bootstrap, "changelog")
    assert len(records) < ROUNDS * KEYS, "nothing was compacted"
    latest = {}
    for key, value in records:
        latest[key] = value
    assert latest == {b"k%d" % k: b"v%d-%d" % (ROUNDS - 1, k) for k in range(KEYS)}
    assert not [v for _, v in records if v.startswith(b"v0-")], "the oldest duplicates are still there"


@pytest.mark.slow
def test_time_retention_runs_through_serve_without_new_appends(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("events", partitions=1, configs={"segment.bytes": "300", "retention.ms": "1500"})
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000,
                log_cleaner={"retention_check_ms": 100}) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        produce(bootstrap, "events", [(b"k", b"value-%d" % i) for i in range(50)])
        assert low_watermark(bootstrap, "events") == 0  # nothing expired yet: the rolls deleted nothing
        deadline = time.monotonic() + 20
        low = 0
        while low == 0 and time.monotonic() < deadline:  # no append rolls a segment from here on
            time.sleep(0.3)
            low = low_watermark(bootstrap, "events")
    assert low > 0, "no segment was deleted by the retention timer"


def test_metadata_and_other_partitions_are_answered_while_the_cleaner_holds_a_partition(data_dir, monkeypatch):
    from klog.store import cleaner

    armed, inside, release = threading.Event(), threading.Event(), threading.Event()
    real = cleaner.compact_replicas

    def slow_compaction(*args, **kwargs):  # once armed, the cleaner stays inside a partition (its lock held)
        if armed.is_set():
            inside.set()
            release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(cleaner, "compact_replicas", slow_compaction)
    with klog.open(data_dir) as store:
        store.create_topic("changelog", partitions=1, configs={
            "cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"})
        store.create_topic("free", partitions=1)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, log_cleaner={"backoff_ms": 100}) as server:
        try:
            produce(f"127.0.0.1:{server.port}", "changelog",
                    [(b"k%d" % k, b"v%d-%d" % (r, k)) for r in range(ROUNDS) for k in range(KEYS)])
            armed.set()  # the next compaction holds the partition: make one due, a batch at a time
            for _ in range(10):
                if inside.wait(1):
                    break
                produce(f"127.0.0.1:{server.port}", "changelog", [(b"k0", b"dirty again")] * KEYS)
            assert inside.wait(20), "the cleaner never started compacting"
            meta, fetched, _ = another_client_answered(server.port)
            assert {t.name for t in meta.topics} >= {"changelog", "free"}
            assert fetched.error_code == 0
        finally:
            release.set()

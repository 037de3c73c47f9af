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
        # (until the oldest round is gone: a pass that ran while the records were still coming in
        # compacts only the segments there were then, and the next pass the rest)
        while (len(records) == ROUNDS * KEYS or any(v.startswith(b"v0-") for _, v in records)) \
                and time.monotonic() < deadline:
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
    real = cleaner.build_cleaning

    def slow_compaction(*args, **kwargs):  # once armed, the cleaner stays inside a partition
        if armed.is_set():
            inside.set()
            release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(cleaner, "build_cleaning", slow_compaction)
    with klog.open(data_dir) as store:
        store.create_topic("changelog", partitions=1, configs={
            "cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"})
        store.create_topic("free", partitions=1)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, log_cleaner={"backoff_ms": 100}) as server:
        try:
            produce(f"127.0.0.1:{server.port}", "changelog",
                    [(b"k%d" % k, b"v%d-%d" % (r, k)) for r in range(ROUNDS) for k in range(KEYS)])
            armed.set()  # the next compaction stays in the partition: make one due, a batch at a time
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


def test_a_throttled_compaction_paces_its_io_and_serve_keeps_answering(data_dir, monkeypatch):
    """log.cleaner.io.max.bytes.per.second: the cleaner sleeps between chunks (here held inside its
    first sleep); Metadata, Fetches of that very partition and of another, and a Produce to the
    partition being compacted are answered meanwhile (the cleaning does not hold the partition's
    lock); closing the server ends the sleep instead of waiting it out."""
    from klog.server import log_cleaner
    from klog.store.throttle import Throttler
    from tests.serve_helpers import RawClient, fetch_fields

    inside, release = threading.Event(), threading.Event()
    made: list[Throttler] = []

    def held_throttler(rate, sleep):  # the real Throttler, its first sleep held until released
        def first_sleep_held(seconds: float) -> None:
            inside.set()
            release.wait(20)
            sleep(seconds)

        made.append(Throttler(rate, sleep=first_sleep_held))
        return made[-1]

    monkeypatch.setattr(log_cleaner, "cleaner_throttler", held_throttler)
    with klog.open(data_dir) as store:
        store.create_topic("changelog", partitions=1, configs={
            "cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"})
        store.create_topic("free", partitions=1)
        with store.producer() as p:
            for r in range(ROUNDS):
                for k in range(KEYS):
                    p.send("changelog", b"v%d-%d" % (r, k), key=b"k%d" % k, partition=0)
                p.flush()
        store.data_dir.defaults["log.cleaner.io.max.bytes.per.second"] = "100"
        store.data_dir.save()
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, log_cleaner={"backoff_ms": 100}) as server:
        try:
            assert inside.wait(20), "the throttled cleaner never slept"
            assert made[0].bytes_per_second == 100  # read from klog.json
            meta, fetched, _ = another_client_answered(server.port)
            assert {t.name for t in meta.topics} >= {"changelog", "free"}
            assert fetched.error_code == 0
            with RawClient(server.port) as client:
                client.sock.settimeout(5)
                answer = client.send(1, 12, **fetch_fields("changelog", 0, 0))
            [part] = answer.responses[0].partitions
            assert part.error_code == 0 and part.records, "the partition being compacted could not be fetched"
            p = ck.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "linger.ms": 0})
            p.produce("changelog", b"during", key=b"k0", partition=0)
            assert p.flush(10) == 0, "the produce to the partition being compacted waited for the compaction"
            assert not release.is_set()  # the compaction is still held in its sleep: it is running
        finally:
            release.set()
    assert made[0].observed_bytes > 0
    with klog.open(data_dir) as store:  # the partition being cleaned was finished, not waited for
        assert store.dirty_ratio("changelog", 0) < 0.5


def test_the_io_rate_setting_is_read_and_a_bad_one_warns_and_means_no_throttle(store, caplog):
    from klog.server.log_cleaner import LogCleanerService, rate_setting
    from klog.store.throttle import KAFKA_UNLIMITED

    name = "log.cleaner.io.max.bytes.per.second"
    assert LogCleanerService(store).manager.throttler is None  # Kafka's default: unlimited
    store.data_dir.defaults[name] = "1048576"
    assert LogCleanerService(store).manager.throttler.bytes_per_second == 1048576
    for bad in ("fast", "0", "-5", "nan"):
        store.data_dir.defaults[name] = bad
        caplog.clear()
        assert rate_setting(store, name) == KAFKA_UNLIMITED
        assert f"'{name}' must be a number of bytes per second above 0, not {bad!r}" in caplog.text

"""Compaction of a topic transactional producers write (a stream processor's changelog), read
through `klog serve` by confluent-kafka's read_committed consumer: after the cleaner ran with an
aborted transaction in its range and another still open across it, the reader gets each key's
committed value, never an aborted one (Fetch's aborted transactions over the emptied batches)."""

from __future__ import annotations

import time

import pytest

from klog.broker import lifecycle
from tests.segment_files import poll_to_end

ck = pytest.importorskip("confluent_kafka")


def _latest(bootstrap: str, topic: str, isolation: str, expect_keys: int, limit_s: float = 20.0) -> dict:
    """key -> last value of partition 0 from its start, read by confluent-kafka at `isolation`."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{time.monotonic_ns()}",
                            "isolation.level": isolation, "enable.partition.eof": True,
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    got = poll_to_end(consumer, limit_s, enough=lambda got: len({key for _, key, _ in got}) >= expect_keys)
    return {key: value for _, key, value in got}


def _txn_producer(bootstrap: str, tid: str):  # noqa: ANN202
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


@pytest.mark.slow
def test_confluent_read_committed_after_compaction_through_serve(kafka_server):
    store = kafka_server.store
    store.create_topic("cl", 1, configs={"cleanup.policy": "compact", "segment.bytes": "300",
                                         "min.cleanable.dirty.ratio": "0.01"})
    first = _txn_producer(kafka_server.bootstrap, "cl-a")
    second = _txn_producer(kafka_server.bootstrap, "cl-b")
    first.begin_transaction()
    first.produce("cl", key=b"a", value=b"a1", partition=0)
    first.produce("cl", key=b"b", value=b"b1", partition=0)
    first.commit_transaction(30)
    first.begin_transaction()
    for i in range(3):  # batches of their own, across segments
        first.produce("cl", key=b"a", value=b"a-aborted%d" % i, partition=0)
        first.flush(30)
    first.abort_transaction(30)
    second.begin_transaction()
    second.produce("cl", key=b"b", value=b"b-open", partition=0)
    second.flush(30)
    with store.producer() as plain:
        for i in range(8):  # seal the transactions' segments
            plain.send("cl", b"x%d" % i, key=b"o%d" % (i % 2), partition=0)
            plain.flush()
    assert len(store.partition("cl", 0).leader.bases) > 3
    [done] = lifecycle.compact(store, "cl")
    assert done.compacted and done.cleanable_end <= store.partition("cl", 0).leader.bases[-1]
    expected = {b"a": b"a1", b"b": b"b1", b"o0": b"x6", b"o1": b"x7"}
    assert _latest(kafka_server.bootstrap, "cl", "read_committed", 2) == {b"a": b"a1", b"b": b"b1"}
    second.abort_transaction(30)
    lifecycle.compact(store, "cl")
    assert _latest(kafka_server.bootstrap, "cl", "read_committed", 4) == expected
    # the aborted values are gone from the log itself (emptied batches), as Kafka's cleaner removes them
    assert _latest(kafka_server.bootstrap, "cl", "read_uncommitted", 4) == expected
    assert {r.key: r.value for r in store.consumer("cl", isolation_level="read_committed")} == expected


def test_a_compacted_partition_not_due_is_not_walked_for_its_last_stable_offset(data_dir, monkeypatch):
    """The last stable offset bounds a cleaning, and finding it walks the batch headers (all of them
    the first time: 0.8 s of CPU for a 5,000-segment partition). `klog topics clean` and serve's
    log cleaner walked every compacted partition, due or not: a partition not due by the high
    watermark is not due by the last stable offset either, so it is no longer walked."""
    import klog
    from klog.store.txn import StableView

    walks = []
    refresh = StableView.refresh
    monkeypatch.setattr(StableView, "refresh", lambda view, bound: walks.append(bound) or refresh(view, bound))
    with klog.open(data_dir) as store:
        store.create_topic("nd", 1, configs={"cleanup.policy": "compact", "segment.bytes": "200",
                                             "min.cleanable.dirty.ratio": "0.99"})
        with store.producer() as plain:
            for i in range(8):
                plain.send("nd", b"x%d" % i, key=b"k%d" % (i % 4), partition=0)
                plain.flush()
                if i == 5:
                    [forced] = lifecycle.compact(store, "nd")  # forced: bounded by the last stable offset
                    assert forced.compacted and walks
                    walks.clear()
        assert not lifecycle.compaction_due(store, "nd", 0)
        [cleaned] = lifecycle.clean(store, "nd")
        assert not cleaned.compacted and 0 < cleaned.dirty_ratio < 0.99
        assert walks == []  # (before: one walk in compaction_due, two in clean)

"""The passes `klog serve`'s log cleaner thread runs (klog.broker.log_manager): compaction only where
due, retention where due, and a pass over a store where nothing changed reads no segment.

Method: tiny segments written through the public producer, the passes called directly; a pass's
cost is observed by counting the cleanable-range computations (each stats every segment).
"""

from __future__ import annotations

import time

from klog.broker import lifecycle
from klog.broker.log_manager import LogManager
from klog.store import cleaner

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"}


def write(store, topic, rounds, keys=5):
    with store.producer() as p:
        for r in range(rounds):
            for k in range(keys):
                p.send(topic, b"v%d" % r, key=b"k%d" % k, partition=0)
            p.flush()


def test_a_compaction_pass_compacts_what_is_due_and_leaves_the_rest(store):
    store.create_topic("changelog", partitions=1, configs=COMPACTED)
    store.create_topic("plain", partitions=1, configs={"segment.bytes": "300"})
    store.create_topic("young", partitions=1, configs={**COMPACTED, "min.compaction.lag.ms": "3600000"})
    for topic in ("changelog", "plain", "young"):
        write(store, topic, rounds=8)
    warnings: list[str] = []
    done = LogManager(store, warn=warnings.append).compaction_pass()
    assert [(r.topic, r.partition) for r in done] == [("changelog", 0)]
    assert done[0].records_removed > 0
    assert store.dirty_ratio("changelog", 0) == 0.0
    assert len(store.partition("young", 0).leader.bases) > 3  # nothing old enough: left alone
    assert not warnings


def test_a_pass_over_an_unchanged_store_computes_nothing_again(store, monkeypatch):
    store.create_topic("changelog", partitions=1, configs={**COMPACTED, "min.cleanable.dirty.ratio": "0.99"})
    write(store, "changelog", rounds=8)
    lifecycle.compact(store, "changelog")
    write(store, "changelog", rounds=2)  # dirty again, well below 0.99
    manager = LogManager(store, warn=print)
    calls = []
    real = cleaner.cleanable_range
    monkeypatch.setattr(cleaner, "cleanable_range", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert manager.compaction_pass() == []
    assert len(calls) == 1
    assert manager.compaction_pass() == []
    assert len(calls) == 1, "an unchanged partition was looked at again"
    write(store, "changelog", rounds=1)
    manager.compaction_pass()
    assert len(calls) == 2, "an appended partition was not looked at"
    store.alter_topic("changelog", set_configs={"min.cleanable.dirty.ratio": "0.01"})
    assert [r.topic for r in manager.compaction_pass()] == ["changelog"], "altered configs were not seen"


def test_a_retention_pass_deletes_expired_segments_without_an_append(store):
    store.create_topic("events", partitions=1, configs={"segment.bytes": "300"})
    with store.producer() as p:
        for i in range(40):
            p.send("events", b"value-%d" % i, partition=0)
            p.flush()
    store.alter_topic("events", set_configs={"retention.ms": "1"})  # all expired, with no roll to see it
    time.sleep(0.01)
    start = store.partition("events", 0).log_start_offset()
    stopped = LogManager(store, warn=print)
    stopped.stop.set()
    assert stopped.retention_pass() == 0  # stopped: nothing done
    assert LogManager(store, warn=print).retention_pass() >= 1
    assert store.partition("events", 0).log_start_offset() > start


def test_a_retention_pass_leaves_unchanged_partitions_with_one_segment_alone(store, monkeypatch):
    store.create_topic("small", partitions=3)
    write(store, "small", rounds=2)
    manager = LogManager(store, warn=print)
    retained = []
    real = lifecycle.retain
    monkeypatch.setattr(lifecycle, "retain", lambda s, t, p: retained.append((t, p)) or real(s, t, p))
    manager.retention_pass()
    assert sorted(retained) == [("small", 0), ("small", 1), ("small", 2)]
    manager.retention_pass()
    assert len(retained) == 3, "a partition with only its active segment was locked again"
    write(store, "small", rounds=1)
    manager.retention_pass()
    assert retained[3:] == [("small", 0)]

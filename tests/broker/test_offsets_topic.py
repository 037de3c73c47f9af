"""The __consumer_offsets mirror (klog/broker/offsets_topic.py) without a server: one record per
changed offset, nothing when LMDB is unchanged or after a restart that finds the topic in step,
a tombstone per deleted offset, in the partition Kafka's hash picks."""

from __future__ import annotations

from klog.broker.batches import RawAppender
from klog.broker.offsets_topic import OffsetsTopicMirror
from klog.meta.groups import GroupsMeta
from tests.server.test_serve_consumer_offsets import decode, kafka_partition


def topic_records(store, partitions: int) -> list[tuple[int, tuple]]:
    out = []
    for p in range(partitions):
        part = store.partition("__consumer_offsets", p)
        for batch in part.read(0, max_bytes=1 << 20):
            out += [(p, decode(k, v)) for _, _, k, v, _ in batch.records()]
    return out


def test_mirror_writes_changes_once_and_tombstones_deletions(store):
    store.create_topic("t", partitions=2)
    meta = GroupsMeta(store.meta)
    mirror = OffsetsTopicMirror(store, RawAppender(store).writer, partitions=3)
    assert mirror.sync() == 0 and not store.has_topic("__consumer_offsets")  # no group: no topic
    meta.store_offsets("g", {("t", 0): (5, "m"), ("t", 1): (-1, "")}, negative_ok=True)
    assert mirror.sync() == 2
    assert mirror.sync() == 0  # LMDB unchanged: not even read
    assert OffsetsTopicMirror(store, RawAppender(store).writer, partitions=3).sync(force=True) == 0  # in step
    meta.store_offsets("g", {("t", 0): (7, "m")})
    assert mirror.sync() == 1
    meta.delete_offsets("g", "t", [1])
    assert mirror.sync() == 1
    records = topic_records(store, 3)
    assert {p for p, _ in records} == {kafka_partition("g", 3)}
    assert [r[1][1:4] + (r[1][4] and r[1][4][:2],) for r in records] == [
        ("g", "t", 0, (5, "m")), ("g", "t", 1, (-1, "")), ("g", "t", 0, (7, "m")), ("g", "t", 1, None)]

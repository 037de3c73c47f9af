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


def topic_state(store, partitions: int) -> dict:
    """What a reader applying the topic in order ends with: offsets and groups by key."""
    state = {}
    for p, rec in topic_records(store, partitions):
        assert p == kafka_partition(rec[1], partitions), rec
        if rec[-1] is None:
            state.pop(rec[:-1], None)
        else:
            state[rec[:-1]] = rec[-1][:3] if rec[0] == "offset" else rec[-1]
    return state


def lmdb_state(store) -> dict:
    meta = GroupsMeta(store.meta)
    return {("offset", g, t, p): (c.offset, c.metadata, c.commit_ms)
            for g in meta.group_ids() for (t, p), c in meta.committed(g).items()}


def offsets_only(state: dict) -> dict:
    return {k: v for k, v in state.items() if k[0] == "offset"}


def test_passes_after_the_first_write_only_what_changed_and_the_topic_equals_lmdb(store):
    """Commits, an offset delete, a group delete, expiry, then a restart with a commit made while no
    mirror ran: after each pass the topic holds LMDB's offsets, written by that pass alone (one
    record per change), and only the first pass of each mirror compares everything."""
    store.create_topic("t", partitions=4)
    meta = GroupsMeta(store.meta)
    mirror = OffsetsTopicMirror(store, RawAppender(store).writer, partitions=3)
    for g in range(5):
        meta.store_offsets(f"g{g}", {("t", p): (10 * g + p, "") for p in range(4)})
    assert mirror.sync() == 20
    meta.store_offsets("g1", {("t", 0): (99, "moved")})
    assert mirror.sync() == 1
    meta.delete_offsets("g2", "t", [1])
    assert mirror.sync() == 1
    meta.delete_group("g3")
    assert mirror.sync() == 4
    assert offsets_only(topic_state(store, 3)) == lmdb_state(store)
    later = GroupsMeta(store.meta, clock=lambda: meta.clock() + 10**9)  # every offset long expired
    meta.store_offsets("g4", {("t", 0): (1, "")}, commit_ms=later.clock())  # ... but this one
    assert mirror.sync() == 1
    expired = later.expire_offsets(1000, groups=["g0", "g4"])
    assert [len(e.partitions) for e in expired] == [4, 3]
    assert mirror.sync() == 7
    assert offsets_only(topic_state(store, 3)) == lmdb_state(store)
    assert mirror.full_passes == 1
    meta.store_offsets("g0", {("t", 3): (7, "while no server ran")})
    restarted = OffsetsTopicMirror(store, RawAppender(store).writer, partitions=3)
    assert restarted.sync() == 1 and restarted.full_passes == 1
    meta.store_offsets("g1", {("t", 1): (8, "")})
    assert restarted.sync() == 1 and restarted.full_passes == 1
    assert offsets_only(topic_state(store, 3)) == lmdb_state(store)


def test_a_change_log_cut_short_while_no_mirror_read_it_makes_a_full_pass(store, monkeypatch):
    from klog.meta import change_log

    monkeypatch.setattr(change_log, "_PRUNE_CHECK_EVERY", 1)
    monkeypatch.setattr(change_log, "CHANGE_LOG_MAX", 4)
    monkeypatch.setattr(change_log, "CHANGE_LOG_KEEP", 2)
    store.create_topic("t", partitions=8)
    meta = GroupsMeta(store.meta)
    mirror = OffsetsTopicMirror(store, RawAppender(store).writer, partitions=3)
    meta.store_offsets("g", {("t", 0): (1, "")})
    assert mirror.sync() == 1
    for p in range(8):  # more entries than the log keeps: the oldest are dropped
        meta.store_offsets("g", {("t", p): (p + 5, "")})
    assert mirror.sync() == 8 and mirror.full_passes == 2
    assert offsets_only(topic_state(store, 3)) == lmdb_state(store)

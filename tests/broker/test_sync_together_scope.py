"""SyncTogether.finish syncs what each batch's acks wait for, and only that: acks=0 batches of a
group (one replica each) take no syncfs and keep their recovery point; acks=1 and acks=all
batches are made durable by one syncfs(2) of their log directory's filesystem, which moves every
synced replica's recovery point to its end, and are published either way, after that syncfs. A
syncfs that reports an error publishes nothing. PartitionWriter's multi-partition append
acknowledges each partition after its group's syncfs and publishing, and none when it fails."""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

import klog
from klog.broker.replication import ReplicaManager, SyncTogether
from klog.errors import StorageError
from klog.store import codec, syncfs
from klog.store.partition import Partition

pytestmark = pytest.mark.skipif(not syncfs.available(), reason="syncfs(2) is Linux 5.8+ only")


def _batch(value: bytes) -> bytes:
    return codec.encode_batch([(None, value, [], 1_700_000_000_000)], 0)


def _record_events(monkeypatch, fail: bool = False) -> list[tuple[str, object]]:
    """From now on, each syncfs(2) made (the libc call itself, by the filesystem of its descriptor)
    and each Partition.publish, in order; fail: every syncfs reports EIO instead of syncing."""
    events: list[tuple[str, object]] = []
    real_syncfs, real_publish = syncfs._syncfs, Partition.publish

    def counted_syncfs(fd: int) -> int:
        events.append(("syncfs", os.fstat(fd).st_dev))
        if fail:
            ctypes.set_errno(errno.EIO)
            return -1
        return real_syncfs(fd)

    def counted_publish(self: Partition) -> None:
        events.append(("publish", self.partition))
        real_publish(self)

    monkeypatch.setattr(syncfs, "_syncfs", counted_syncfs)
    monkeypatch.setattr(Partition, "publish", counted_publish)
    return events


def _append_group(store: klog.Store, acks: str) -> list:
    """Three partitions of topic `s` locked, a batch appended to each under one SyncTogether and
    finished; returns the partitions (their locks released)."""
    replicas = ReplicaManager(store)
    parts = [store.partition("s", p) for p in range(3)]
    for part in parts:
        part.lock.acquire()
    try:
        together = SyncTogether(store, "s")
        try:
            for p, part in enumerate(parts):
                replicas.append_batches("s", p, [_batch(b"v%d" % p)], acks, together=together, part=part)
            assert [part.leader.recovery_point for part in parts] == [0, 0, 0]
            together.finish()
        finally:
            together.close()
    finally:
        for part in reversed(parts):
            part.lock.release()
    return parts


@pytest.mark.parametrize(("acks", "synced"), [("0", False), ("1", True), ("all", True)])
def test_a_group_is_synced_as_its_acks_ask_then_published(tmp_path, monkeypatch, acks, synced):
    syncs: list[set[str]] = []
    real_sync = syncfs.SyncedTogether.sync

    def sync(self, paths):
        syncs.append(set(paths))
        return real_sync(self, paths)

    monkeypatch.setattr(syncfs.SyncedTogether, "sync", sync)
    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("s", partitions=3)
        for p in range(3):  # (each partition's first open and its state: not the group's events)
            store.partition("s", p)
        events = _record_events(monkeypatch)
        parts = _append_group(store, acks)
        log_dir = parts[0].leader.log_dir
        assert [part.leader.recovery_point for part in parts] == ([1, 1, 1] if synced else [0, 0, 0])
        assert [s for s in syncs if s] == ([{log_dir}] if synced else [])
        assert [part.high_watermark() for part in parts] == [1, 1, 1]  # published either way
        # the syncfs itself was made, once, on the log directory's filesystem, before anything was published
        publishes = [("publish", p) for p in range(3)]
        assert events == ([("syncfs", os.stat(log_dir).st_dev)] if synced else []) + publishes


def test_a_group_whose_syncfs_fails_is_not_published(tmp_path, monkeypatch):
    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("s", partitions=3)
        for p in range(3):
            store.partition("s", p)
        events = _record_events(monkeypatch, fail=True)
        with pytest.raises(StorageError, match="nothing of them was acknowledged"):
            _append_group(store, "1")
        assert [kind for kind, _ in events] == ["syncfs"]
        monkeypatch.undo()
        assert [store.partition("s", p).high_watermark() for p in range(3)] == [0, 0, 0]


@pytest.mark.parametrize("fail", [False, True])
def test_a_multi_partition_append_acknowledges_only_what_its_syncfs_made_durable(tmp_path, monkeypatch, fail):
    """PartitionWriter.append_batches of SYNC_TOGETHER_MIN partitions or more (the group path):
    each partition's acknowledgement comes after the group's one syncfs and its publishing; a
    syncfs that fails acknowledges none of them."""
    from klog.broker.writer import SYNC_TOGETHER_MIN, PartitionWriter

    partitions = SYNC_TOGETHER_MIN
    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("s", partitions=partitions)
        writer = PartitionWriter(store, ReplicaManager(store))
        items = [(p, [_batch(b"first%d" % p)]) for p in range(partitions)]
        writer.append_batches("s", items, "1")  # (the first opens and their states: not the events below)
        events = _record_events(monkeypatch, fail=fail)
        items = [(p, [_batch(b"v%d" % p)]) for p in range(partitions)]

        def acknowledged(i: int, bases: list[int]) -> None:
            events.append(("ack", (items[i][0], bases)))

        if fail:
            with pytest.raises(StorageError):
                writer.append_batches("s", items, "1", acknowledged)
        else:
            writer.append_batches("s", items, "1", acknowledged)
        log_dev = os.stat(store.partition("s", 0).leader.log_dir).st_dev
        if fail:
            assert events == [("syncfs", log_dev)]
        else:
            assert events == ([("syncfs", log_dev)] + [("publish", p) for p in range(partitions)]
                              + [("ack", (p, [1])) for p in range(partitions)])

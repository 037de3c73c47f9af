"""SyncTogether.finish syncs what each batch's acks wait for, and only that: acks=0 batches of a
group (one replica each) take no syncfs and keep their recovery point; acks=1 and acks=all
batches are made durable by one syncfs of their log directory, which moves every synced
replica's recovery point to its end, and are published either way."""

from __future__ import annotations

import pytest

import klog
from klog.broker.replication import ReplicaManager, SyncTogether
from klog.store import codec, syncfs

pytestmark = pytest.mark.skipif(not syncfs.available(), reason="syncfs(2) is Linux 5.8+ only")


def _batch(value: bytes) -> bytes:
    return codec.encode_batch([(None, value, [], 1_700_000_000_000)], 0)


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
            assert [part.leader.recovery_point for part in parts] == ([1, 1, 1] if synced else [0, 0, 0])
        finally:
            for part in reversed(parts):
                part.lock.release()
        log_dir = parts[0].leader.log_dir
        assert [s for s in syncs if s] == ([{log_dir}] if synced else [])
        assert [part.high_watermark() for part in parts] == [1, 1, 1]  # published either way

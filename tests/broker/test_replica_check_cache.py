"""The writer skips the full replica check between its own appends (issue 18); whatever another
holder of the partition lock changed meanwhile must still be seen by the next append."""

from __future__ import annotations

import klog


def test_a_replica_moved_by_another_store_mid_stream_gets_every_later_record(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    data = str(tmp_path / "data")
    with klog.Store(data, log_dirs=dirs) as writer, klog.Store(data, log_dirs=dirs) as admin:
        writer.create_topic("m", replication_factor=2)
        meta = writer.topics.get("m").partitions[0]
        spare = next(d for d in range(3) if d not in meta.replicas)
        follower = next(d for d in meta.replicas if d != meta.leader)
        with writer.producer(acks="all") as producer:  # one producer throughout
            for i in range(100):
                if i == 50:
                    admin.reassign("m", follower, spare)
                producer.send("m", b"v%d" % i, partition=0)
                producer.flush()
        after = writer.describe_topic("m").partitions[0]
        assert after.replica_log_end == {meta.leader: 100, spare: 100}
        assert [r.value for r in writer.consumer("m")] == [b"v%d" % i for i in range(100)]


def test_an_isr_another_store_shrank_with_every_folder_in_place_is_seen_by_the_next_append(tmp_path):
    """As above, but the other holder of the lock leaves every replica's folder where it was (it
    drops the follower from the ISR, as a writer that found it failing does): the writer's look
    before each append finds nothing amiss, so only the lock's change of hands says its replica
    check is stale. The next append must reconcile: the follower, healthy, caught up and back in
    the ISR (a writer on its old check kept the ISR the other store wrote while it appended to the
    follower, and said nothing)."""
    from dataclasses import replace

    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    data = str(tmp_path / "data")
    warnings: list[str] = []
    with (klog.Store(data, log_dirs=dirs, on_warning=warnings.append) as writer,
          klog.Store(data, log_dirs=dirs) as admin):
        writer.create_topic("m", replication_factor=2)
        meta = writer.topics.get("m").partitions[0]
        follower = next(d for d in meta.replicas if d != meta.leader)
        with writer.producer(acks="all") as producer:  # one producer throughout
            for i in range(20):
                if i == 10:
                    part = admin.partition("m", 0)
                    with part.lock:
                        now = admin.topics.get("m").partitions[0]
                        admin.topics.update_partition("m", 0, replace(now, isr=[now.leader]))
                    assert admin.describe_topic("m").partitions[0].isr == [meta.leader]
                producer.send("m", b"v%d" % i, partition=0)
                producer.flush()
                if i == 10:
                    assert sorted(writer.describe_topic("m").partitions[0].isr) == sorted(meta.replicas)
                    assert warnings == [f"replica of m-0 in log directory {follower} caught up and rejoined the ISR"]
        after = writer.describe_topic("m").partitions[0]
        assert after.replica_log_end == {meta.leader: 20, follower: 20}
        assert [r.value for r in writer.consumer("m")] == [b"v%d" % i for i in range(20)]


def test_the_state_file_is_served_from_memory_only_to_the_thread_holding_the_lock(tmp_path):
    """Within one lock hold the writer reads the partition state once; a server's reader threads
    meanwhile read the file itself (their stale read must never land in the writer's memory)."""
    import os
    import threading

    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("c")
        with store.producer() as producer:
            producer.send_values("c", [b"a", b"b"])
        part = store.partition("c", 0)
        with part.lock:
            part.open_for_write()
            assert part.state.held() == part.lock.generation
            seen = []
            reader = threading.Thread(target=lambda: seen.append((part.state.held(), part.snapshot().high_watermark)))
            reader.start()
            reader.join(10)
            assert seen == [(None, 2)]
            with open(part.state.path, "r+b") as f:  # what only a holder may do: the holder's view is memory
                f.write(bytes(os.path.getsize(part.state.path)))
            assert part.snapshot().high_watermark == 2
        assert part.state.held() is None
        assert part.state.read_valid() is None  # outside the hold: the file as it is (zeroed: damaged)


def test_several_batches_of_a_partition_in_one_hold_are_checked_synced_and_published_once(tmp_path, monkeypatch):
    """ReplicaManager.append_batches: the replica check (reconcile_if_due) runs once for all of
    them, one fsync after the last makes them all durable (flush.messages=1 counts each), the high
    watermark moves once; the offsets follow on and every batch reads back."""
    import os

    from klog.broker.replication import ReplicaManager
    from klog.broker.writer import PartitionWriter
    from klog.store import codec

    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("g")
        writer = PartitionWriter(store, ReplicaManager(store))
        batches = [codec.encode_batch([(None, b"v%d-%d" % (b, i), [], 1_700_000_000_000) for i in range(3)], 0)
                   for b in range(4)]
        writer.append_batches("g", [(0, [batches[0]])], "all")  # (the first open checks everything)
        calls = {"checks": 0, "fsyncs": 0, "publishes": 0}
        real_check, real_fsync = ReplicaManager.reconcile_if_due, os.fsync
        real_publish = type(store.partition("g", 0)).publish

        def check(self, *a, **k):
            calls["checks"] += 1
            return real_check(self, *a, **k)

        synced_sizes = []

        def fsync(fd):
            calls["fsyncs"] += 1
            synced_sizes.append(os.fstat(fd).st_size)  # (what the fsync covers: the log as it then was)
            real_fsync(fd)

        def publish(self):
            calls["publishes"] += 1
            real_publish(self)

        monkeypatch.setattr(ReplicaManager, "reconcile_if_due", check)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(type(store.partition("g", 0)), "publish", publish)
        acked = []
        writer.append_batches("g", [(0, batches[1:])], "all", lambda i, bases: acked.append(bases))
        assert calls == {"checks": 1, "fsyncs": 1, "publishes": 1}
        assert synced_sizes == [os.path.getsize(store.partition("g", 0).leader.active.log_path)]  # after the last
        assert acked == [[3, 6, 9]]
        assert [r.value for r in store.consumer("g")] == [b"v%d-%d" % (b, i) for b in range(4) for i in range(3)]


def test_a_directory_replaced_or_a_folder_deleted_mid_stream_is_noticed_by_the_very_next_append(tmp_path):
    """The look before each append works out its paths once per partition (ReplicaManager._replica_places)
    but still looks for the partition's folder every time: one long-lived writer, a follower's disk
    swapped for a new one (its id file differs) and later another follower's folder deleted, each
    between two appends; each is noticed by the append right after it, and every record reads back."""
    import os
    import shutil

    from klog.broker.replication import ReplicaManager
    from klog.broker.writer import PartitionWriter
    from klog.store import codec, health
    from klog.store.format import partition_dir_name

    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    warnings: list[str] = []
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs, on_warning=warnings.append) as store:
        store.create_topic("h", replication_factor=3)
        meta = store.topics.get("h").partitions[0]
        replaced, emptied = [d for d in meta.replicas if d != meta.leader]
        writer = PartitionWriter(store, ReplicaManager(store, warn=warnings.append))

        def append(i: int) -> None:
            writer.append_batch("h", 0, codec.encode_batch([(None, b"v%d" % i, [], 1_700_000_000_000)], 0), "all")

        for i in range(3):
            append(i)
        assert warnings == []
        shutil.rmtree(dirs[replaced])  # a new, empty disk in its place
        os.makedirs(dirs[replaced])
        health.write_identity(dirs[replaced])
        append(3)
        assert warnings == [f"log directory {replaced} was replaced by a new one; its replicas will be caught up",
                            f"replica of h-0 in log directory {replaced} caught up and rejoined the ISR"]
        shutil.rmtree(os.path.join(dirs[emptied], partition_dir_name("h", 0)))
        append(4)
        assert warnings[2:] == [f"replica of h-0 in log directory {emptied} caught up and rejoined the ISR"]
        for i in range(5, 8):
            append(i)
        after = store.describe_topic("h").partitions[0]
        assert after.replica_log_end == {d: 8 for d in meta.replicas}  # both caught up again
        assert [r.value for r in store.consumer("h")] == [b"v%d" % i for i in range(8)]


def test_a_healthy_directory_is_trusted_briefly_and_a_full_one_refused_once_that_passed(tmp_path, monkeypatch):
    """Between full replica checks, a directory found healthy is trusted for HEALTHY_TRUSTED_S
    (its health is read once for many appends in that time); a disk that fills is refused by the
    first append after it, with nothing appended, and a failed append looks at every directory
    again at once."""
    import types

    import pytest

    from klog.broker import replication
    from klog.broker.replication import ReplicaManager
    from klog.broker.writer import PartitionWriter
    from klog.errors import KlogError
    from klog.store import codec, health

    reads: list[str] = []
    full = False
    real = health.check_log_dir

    def check(path: str, expected_id: str | None, *rest: str | None) -> str:
        reads.append(path)
        return health.FULL if full else real(path, expected_id, *rest)

    monkeypatch.setattr(health, "check_log_dir", check)
    clock = [1000.0]
    # (replication's own clock only: the process's time.monotonic stays real for everything else)
    monkeypatch.setattr(replication, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("h")
        writer = PartitionWriter(store, ReplicaManager(store))

        def append(i: int) -> None:
            writer.append_batch("h", 0, codec.encode_batch([(None, b"v%d" % i, [], 1_700_000_000_000)], 0), "all")

        append(0)  # the full check (reconcile)
        reads.clear()
        for i in range(1, 6):
            append(i)
        assert len(reads) == 1  # read once, then trusted
        clock[0] += replication.HEALTHY_TRUSTED_S / 2
        append(6)
        assert len(reads) == 1
        clock[0] += replication.HEALTHY_TRUSTED_S
        full = True
        with pytest.raises(KlogError, match="full"):
            append(7)
        with pytest.raises(KlogError, match="full"):
            append(8)  # not trusted again: looked at on every append while it stays full
        full = False
        append(9)
        assert [r.value for r in store.consumer("h")] == [b"v%d" % i for i in (0, 1, 2, 3, 4, 5, 6, 9)]

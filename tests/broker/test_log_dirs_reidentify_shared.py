"""The store's list of log directories (klog.json) as another process changed it, seen by a long-lived
writer or reader (klog serve, a `produce` following stdin) opened before: a replaced disk is given a
new identity once, not by each writer in turn (each time warning and taking its replicas out of the
ISR); a topic placed in a directory added since, a directory added again under a removed one's id,
and a replica moved into a new directory are written where klog.json now says."""

from __future__ import annotations

import os
import shutil

import klog
from klog.broker.replication import ReplicaManager
from klog.broker.writer import PartitionWriter
from klog.store import codec, health


def test_a_replaced_disk_is_reidentified_once_by_two_long_lived_writers(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    data = str(tmp_path / "data")
    warnings: dict[str, list[str]] = {"a": [], "b": []}
    with klog.Store(data, log_dirs=dirs) as setup:
        setup.create_topic("h", partitions=2, replication_factor=2)
    with klog.Store(data, on_warning=warnings["a"].append) as a, klog.Store(data, on_warning=warnings["b"].append) as b:
        writers = {name: PartitionWriter(s, ReplicaManager(s, warn=warnings[name].append))
                   for name, s in (("a", a), ("b", b))}

        def append(name: str, partition: int, i: int) -> None:
            batch = codec.encode_batch([(None, b"v%d" % i, [], 1_700_000_000_000)], 0)
            writers[name].append_batch("h", partition, batch, "all")

        append("a", 0, 0)
        append("b", 1, 0)
        shutil.rmtree(dirs[1])  # a new, empty disk in directory 1's place
        os.makedirs(dirs[1])
        for i in range(1, 5):  # the two writers take turns
            append("a", 0, i)
            append("b", 1, i)
        replaced = [w for name in "ab" for w in warnings[name] if "was replaced" in w]
        assert replaced == ["log directory 1 was replaced by a new one; its replicas will be caught up"]
        with open(os.path.join(dirs[1], health.ID_FILE)) as f:
            assert f.read().strip() == next(d.identity for d in a.data_dir.log_dirs if d.id == 1)
    with klog.open(data) as store:
        for p in range(2):
            assert store.describe_topic("h").partitions[p].replica_log_end == {0: 5, 1: 5}
            assert [r.value for r in store.consumer("h") if r.partition == p] == [b"v%d" % i for i in range(5)]


def _append(store, topic: str, value: bytes) -> None:  # noqa: ANN001
    PartitionWriter(store, ReplicaManager(store)).append_batch(
        topic, 0, codec.encode_batch([(None, value, [], 1_700_000_000_000)], 0), "all")


def test_a_writer_opened_before_dirs_add_writes_a_topic_placed_in_the_new_directory(tmp_path):
    """klog serve (or a following producer) opened before `dirs add` + `topics create` in another
    shell: its writes to the new topic failed with "log directory 1 is not configured"."""
    data = str(tmp_path / "data")
    with klog.Store(data, log_dirs=[str(tmp_path / "disk0")]):
        pass
    with klog.Store(data) as stale:
        with klog.Store(data) as other:
            other.data_dir.add_log_dir(str(tmp_path / "disk1"))
            other.create_topic("n", replication_factor=2)
        _append(stale, "n", b"v")
    with klog.open(data) as store:
        assert store.describe_topic("n").partitions[0].replica_log_end == {0: 1, 1: 1}
        assert [r.value for r in store.consumer("n")] == [b"v"]


def test_a_writer_opened_before_a_remove_and_an_add_writes_into_the_directory_now_so_numbered(tmp_path):
    """`dirs remove 1` then `dirs add NEW` elsewhere: NEW takes id 1 again. A writer opened before
    wrote the new topic's replica into the removed directory (its old list's path for id 1)."""
    from klog.broker.dirs import remove_dir
    from klog.store.format import partition_dir_name

    data = str(tmp_path / "data")
    with klog.Store(data, log_dirs=[str(tmp_path / "disk0"), str(tmp_path / "disk1")]):
        pass
    with klog.Store(data) as stale:
        with klog.Store(data) as other:
            remove_dir(other, 1)
            assert other.data_dir.add_log_dir(str(tmp_path / "disk2")).id == 1
            other.create_topic("n", replication_factor=2)
        _append(stale, "n", b"v")
    folder = partition_dir_name("n", 0)
    assert os.listdir(tmp_path / "disk2" / folder) and not os.path.exists(tmp_path / "disk1" / folder)
    with klog.open(data) as store:
        assert store.describe_topic("n").partitions[0].replica_log_end == {0: 1, 1: 1}
        assert [r.value for r in store.consumer("n")] == [b"v"]


def test_a_writer_whose_replica_another_process_moved_into_a_new_directory_keeps_it_in_sync(tmp_path):
    """A writer with the partition open; elsewhere `dirs add disk2` and `dirs remove 1` move its
    follower into directory 2: its next append said "replica of t-0 in log directory 2 left the ISR
    (missing)" and left that replica behind."""
    from klog.broker.dirs import remove_dir

    data = str(tmp_path / "data")
    warnings: list[str] = []
    with klog.Store(data, log_dirs=[str(tmp_path / "disk0"), str(tmp_path / "disk1")]) as setup:
        setup.create_topic("t", replication_factor=2)
    with klog.Store(data, on_warning=warnings.append) as stale:
        writer = PartitionWriter(stale, ReplicaManager(stale, warn=warnings.append))
        batch = codec.encode_batch([(None, b"v", [], 1_700_000_000_000)], 0)
        writer.append_batch("t", 0, batch, "all")
        with klog.Store(data) as other:
            other.data_dir.add_log_dir(str(tmp_path / "disk2"))
            remove_dir(other, 1)
        writer.append_batch("t", 0, batch, "all")
    assert warnings == []
    with klog.open(data) as store:
        assert store.describe_topic("t").partitions[0].replica_log_end == {0: 2, 2: 2}

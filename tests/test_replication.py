"""Replicated log directories: committed records survive the loss of RF-1 directories.

Method: a store with three log directories and RF=3; directories are deleted, emptied,
corrupted or made to fail writes (fault injection at the replica's append), and every check
reads back through the public consumer and compares bytes across replicas.
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest

import klog
from klog.errors import NotEnoughReplicasError
from klog.store.format import partition_dir_name
from klog.store.log import PartitionLog


@pytest.fixture
def rstore(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    s = klog.Store(str(tmp_path / "data"), log_dirs=dirs)
    yield s, dirs
    s.close()


def produce(store, topic, n, start=0, acks="all", warnings=None):
    sink = warnings if warnings is not None else []
    with store.producer(acks=acks, batch_size=64 * 1024, on_warning=sink.append) as p:
        for i in range(start, start + n):
            p.send(topic, b"value-%08d" % i, partition=0)


def consumed(store, topic):
    return [r.value for r in store.consumer(topic)]


def expected(n):
    return [b"value-%08d" % i for i in range(n)]


def replica_bytes(directory):
    out = b""
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            with open(os.path.join(directory, name), "rb") as f:
                out += f.read()
    return out


def test_placement_spreads_replicas_and_rejects_too_large_rf(rstore):
    store, _ = rstore
    meta = store.create_topic("t", partitions=6, replication_factor=2)
    leaders = [p.leader for p in meta.partitions]
    assert all(len(set(p.replicas)) == 2 for p in meta.partitions)
    assert sorted(leaders.count(d) for d in range(3)) == [2, 2, 2]
    with pytest.raises(klog.KlogError, match="larger than the number of healthy log directories"):
        store.create_topic("u", replication_factor=4)


def test_losing_two_of_three_directories_loses_no_committed_record(rstore):
    store, dirs = rstore
    store.create_topic("r", replication_factor=3, configs={"segment.bytes": "200000"})
    produce(store, "r", 100_000)
    leader = store.topic("r").partitions[0].leader
    shutil.rmtree(dirs[leader])
    assert consumed(store, "r") == expected(100_000)
    warnings: list[str] = []
    produce(store, "r", 10, start=100_000, warnings=warnings)
    assert any("left the ISR" in w for w in warnings) and any("new leader" in w for w in warnings)
    meta = store.topics.get("r").partitions[0]
    assert meta.leader != leader and leader not in meta.isr and meta.leader_epoch == 1
    shutil.rmtree(dirs[meta.leader])
    with klog.open(store.path) as fresh:
        assert consumed(fresh, "r") == expected(100_010)


def test_acks_all_below_min_isr_fails_and_writes_nothing(rstore):
    store, dirs = rstore
    store.create_topic("m", replication_factor=3, configs={"min.insync.replicas": "2"})
    produce(store, "m", 5)
    shutil.rmtree(dirs[1])
    shutil.rmtree(dirs[2])
    with pytest.raises(NotEnoughReplicasError) as info:
        produce(store, "m", 1, start=5)
    message = str(info.value)
    assert "m-0" in message and "ISR is [0]" in message and "min.insync.replicas is 2" in message
    assert consumed(store, "m") == expected(5)
    produce(store, "m", 1, start=5, acks="1")  # acks=1 still writes to the leader
    assert consumed(store, "m") == expected(6)


def test_emptied_directory_is_caught_up_and_byte_identical(rstore):
    store, dirs = rstore
    store.create_topic("c", replication_factor=3, configs={"segment.bytes": "100000"})
    produce(store, "c", 20_000)
    follower = store.topic("c").partitions[0].isr[-1]
    shutil.rmtree(dirs[follower])
    produce(store, "c", 100, start=20_000)
    os.makedirs(dirs[follower])  # a new, empty disk in its place
    warnings: list[str] = []
    produce(store, "c", 100, start=20_100, warnings=warnings)
    assert any("rejoined the ISR" in w for w in warnings)
    meta = store.topics.get("c").partitions[0]
    assert sorted(meta.isr) == [0, 1, 2]
    folders = [os.path.join(d, partition_dir_name("c", 0)) for d in dirs]
    images = {replica_bytes(f) for f in folders}
    assert len(images) == 1
    assert consumed(store, "c") == expected(20_200)


def test_flipped_bytes_in_leader_are_served_from_a_replica_and_repaired(rstore, cli):
    store, dirs = rstore
    store.create_topic("f", replication_factor=2, configs={"segment.bytes": "50000"})
    produce(store, "f", 5_000)
    leader = store.topic("f").partitions[0].leader
    folder = os.path.join(dirs[leader], partition_dir_name("f", 0))
    first = sorted(n for n in os.listdir(folder) if n.endswith(".log"))[0]
    with open(os.path.join(folder, first), "r+b") as fh:
        fh.seek(3000)
        b = fh.read(1)
        fh.seek(3000)
        fh.write(bytes([b[0] ^ 0xFF]))
    with klog.open(store.path) as fresh:
        assert consumed(fresh, "f") == expected(5_000)
    r = cli("verify", "f", "--repair", "--data-dir", store.path)
    assert r.exit_code == 0, r.stderr
    assert "re-copied" in r.out
    assert cli("verify", "f", "--data-dir", store.path).exit_code == 0
    other = [d for d in store.topic("f").partitions[0].replicas if d != leader][0]
    assert replica_bytes(folder) == replica_bytes(os.path.join(dirs[other], partition_dir_name("f", 0)))


def test_follower_failing_writes_leaves_isr_and_production_continues(rstore, monkeypatch):
    store, dirs = rstore
    store.create_topic("w", replication_factor=3, configs={"min.insync.replicas": "2"})
    produce(store, "w", 100)
    broken = store.topic("w").partitions[0].isr[-1]
    real_append = PartitionLog.append

    def failing_append(self, batch, header):
        if self.directory.startswith(dirs[broken]):
            raise OSError(errno.ENOSPC, "No space left on device")  # a full disk, injected
        return real_append(self, batch, header)

    monkeypatch.setattr(PartitionLog, "append", failing_append)
    warnings: list[str] = []
    produce(store, "w", 100, start=100, warnings=warnings)
    assert any("left the ISR" in w and "No space left" in w for w in warnings)
    assert broken not in store.topics.get("w").partitions[0].isr
    assert consumed(store, "w") == expected(200)


def test_dirs_cli_add_list_remove_moves_replicas_without_loss(cli, tmp_path):
    data = str(tmp_path / "store")
    assert cli("topics", "create", "d", "-p", "3", "--data-dir", data).exit_code == 0
    cli("produce", "d", "--data-dir", data, input=b"".join(b"%d\n" % i for i in range(3000)))
    assert cli("dirs", "add", str(tmp_path / "disk2"), "--data-dir", data).exit_code == 0
    rows = [json.loads(x) for x in cli("dirs", "list", "--json", "--data-dir", data).stdout.splitlines()]
    assert [(r["id"], r["health"], r["replicas"]) for r in rows] == [(0, "ok", 3), (1, "ok", 0)]
    before = sorted(cli("consume", "d", "--data-dir", data).out.split())
    r = cli("dirs", "remove", "0", "--json", "--data-dir", data)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"removed": 0, "replicas_moved": 3}
    rows = [json.loads(x) for x in cli("dirs", "list", "--json", "--data-dir", data).stdout.splitlines()]
    assert [(r["id"], r["replicas"]) for r in rows] == [(1, 3)]
    assert sorted(cli("consume", "d", "--data-dir", data).out.split()) == before
    assert len(before) == 3000


def test_reassign_moves_a_leader_and_keeps_every_record(rstore, cli):
    store, dirs = rstore
    store.create_topic("ra", replication_factor=2)
    produce(store, "ra", 1000)
    meta = store.topics.get("ra").partitions[0]
    spare = next(d for d in range(3) if d not in meta.replicas)
    r = cli("topics", "reassign", "ra", "--from", str(meta.leader), "--to", str(spare), "--data-dir", store.path)
    assert r.exit_code == 0, r.stderr
    after = store.topics.get("ra").partitions[0]
    assert meta.leader not in after.replicas and spare in after.isr and after.leader_epoch == 1
    assert not os.path.exists(os.path.join(dirs[meta.leader], partition_dir_name("ra", 0)))
    with klog.open(store.path) as fresh:
        assert consumed(fresh, "ra") == expected(1000)

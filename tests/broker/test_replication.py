"""Replicated log directories: committed records survive the loss of RF-1 directories.

Method: a store with three log directories and RF=3; directories are deleted, emptied,
corrupted or made to fail writes (fault injection at the replica's append), and every check
reads back through the public consumer and compares bytes across replicas.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog.errors import NoLeaderError, NotEnoughReplicasError
from klog.store import codec
from klog.store.format import partition_dir_name
from klog.store.log import PartitionLog
from tests.conftest import REPO


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


@pytest.mark.slow
def test_100k_records_survive_deleting_the_two_followers_too(rstore):
    """The other order: both followers go (one at a time), the leader alone still has everything."""
    store, dirs = rstore
    store.create_topic("f2", replication_factor=3, configs={"segment.bytes": "300000"})
    produce(store, "f2", 100_000)
    meta = store.topic("f2").partitions[0]
    followers = [d for d in meta.isr if d != meta.leader]
    shutil.rmtree(dirs[followers[0]])
    produce(store, "f2", 5, start=100_000)
    shutil.rmtree(dirs[followers[1]])
    produce(store, "f2", 5, start=100_005, acks="1")
    after = store.topics.get("f2").partitions[0]
    assert after.isr == [meta.leader] and after.leader == meta.leader
    with klog.open(store.path) as fresh:
        assert consumed(fresh, "f2") == expected(100_010)


def _wait_for_high_watermark(store, topic, hw, proc):
    deadline = time.monotonic() + 60
    while store.partition(topic, 0).high_watermark() < hw:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the producer did not get there"
        time.sleep(0.02)


def _permissions_enforced(tmp_path) -> bool:
    """False for root with CAP_DAC_OVERRIDE (the usual root), which writes to read-only folders anyway."""
    if os.geteuid() != 0:
        return True
    probe = tmp_path / "probe"
    probe.mkdir(mode=0o555)
    try:
        (probe / "x").write_bytes(b"")
    except PermissionError:
        return True
    finally:
        probe.chmod(0o755)
    return False


def test_directory_turning_read_only_mid_stream_leaves_the_isr_with_a_warning(rstore, tmp_path):
    if not _permissions_enforced(tmp_path):
        pytest.skip("running as root: permissions are not enforced")
    store, dirs = rstore
    store.create_topic("ro", replication_factor=3, configs={"min.insync.replicas": "2"})
    meta = store.topic("ro").partitions[0]
    first, second = [d for d in meta.isr if d != meta.leader]
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "produce", "ro", "-p", "0", "--data-dir", store.path],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    try:
        def feed(start, n):
            proc.stdin.write(b"".join(b"value-%08d\n" % i for i in range(start, start + n)))
            proc.stdin.flush()
            _wait_for_high_watermark(store, "ro", start + n, proc)

        feed(0, 100)
        os.chmod(dirs[first], 0o555)  # mid-stream: the same klog produce keeps writing
        feed(100, 100)
        assert store.topics.get("ro").partitions[0].isr == [d for d in meta.isr if d != first]
        os.chmod(dirs[second], 0o555)  # now below min.insync.replicas: acks=all must stop
        proc.stdin.write(b"value-%08d\n" % 200)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 1
        err = proc.stderr.read().decode()
    finally:
        for d in (first, second):
            os.chmod(dirs[d], 0o755)
    assert f"klog: warning: replica of ro-0 in log directory {first} left the ISR (read-only)" in err
    assert "not enough in-sync replicas" in err and "Traceback" not in err
    assert consumed(store, "ro") == expected(200)


def test_directory_filling_up_mid_stream_leaves_the_isr_and_production_continues(rstore, tmp_path):
    """A full disk, simulated by a file-size limit that only one replica's active segment is past."""
    store, dirs = rstore
    store.create_topic("full", replication_factor=3, configs={"segment.bytes": "40000", "min.insync.replicas": "2"})
    produce(store, "full", 20_000)
    meta = store.topic("full").partitions[0]
    victim = meta.isr[-1]
    store.alter_topic("full", set_configs={"segment.bytes": "10000000"})
    shutil.rmtree(dirs[victim])
    os.makedirs(dirs[victim])  # a new disk: caught up into one big segment under the new segment.bytes
    with klog.open(store.path) as fresh:
        produce(fresh, "full", 10, start=20_000)
        assert sorted(fresh.topics.get("full").partitions[0].isr) == [0, 1, 2]

    def biggest_log(d):
        folder = os.path.join(dirs[d], partition_dir_name("full", 0))
        return max(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".log"))

    limit = 300_000
    assert biggest_log(victim) > limit and all(biggest_log(d) < limit // 2 for d in meta.isr if d != victim)
    lines = tmp_path / "more.txt"
    lines.write_bytes(b"".join(b"value-%08d\n" % i for i in range(20_010, 22_010)))

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([sys.executable, "-m", "klog", "produce", "full", str(lines), "-p", "0", "--batch-size",
                        "4000", "--data-dir", store.path], capture_output=True, preexec_fn=limit_file_size,
                       env={**os.environ, "PYTHONPATH": REPO}, timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert f"klog: warning: replica of full-0 in log directory {victim} left the ISR" in err and "File too large" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err  # once, not once per batch
    assert victim not in store.topics.get("full").partitions[0].isr
    with klog.open(store.path) as fresh:
        assert consumed(fresh, "full") == expected(22_010)
        produce(fresh, "full", 10, start=22_010)  # the limit is gone: caught up, back in the ISR
        assert sorted(fresh.topics.get("full").partitions[0].isr) == [0, 1, 2]
        assert consumed(fresh, "full") == expected(22_020)


@pytest.mark.parametrize("rolled", ["leader", "follower"])
def test_followers_start_a_segment_where_the_leader_does(rstore, rolled):
    """A writer killed in the middle of a roll left one replica an empty new segment the others
    lack; the next batch must go where the leader puts it on every replica, so their files stay alike."""
    store, dirs = rstore
    store.create_topic("roll", replication_factor=3)
    produce(store, "roll", 100)
    meta = store.topic("roll").partitions[0]
    victim = meta.leader if rolled == "leader" else meta.isr[-1]
    with store.partition("roll", 0).lock:  # that writer held the partition lock, as every writer does
        replica = PartitionLog(os.path.join(dirs[victim], partition_dir_name("roll", 0)))
        replica.open_for_write()
        replica.roll(replica.log_end_offset)  # then killed: no batch in the new segment
        replica.close()
    produce(store, "roll", 10, start=100)

    def layout(d):
        folder = os.path.join(dirs[d], partition_dir_name("roll", 0))
        return [(n, os.path.getsize(os.path.join(folder, n))) for n in sorted(os.listdir(folder)) if n.endswith(".log")]

    segments = ["00000000000000000000.log", "00000000000000000100.log"] if rolled == "leader" else \
        ["00000000000000000000.log"]
    assert [n for n, _ in layout(meta.leader)] == segments
    assert layout(0) == layout(1) == layout(2)
    assert consumed(store, "roll") == expected(110)


def _away(path):
    os.rename(path, path + ".away")  # the directory is gone (an unmounted disk)


def _back(path):
    os.rename(path + ".away", path)


def test_returning_old_leader_drops_the_suffix_it_wrote_alone_and_rejoins(rstore):
    store, dirs = rstore
    store.create_topic("e", replication_factor=2)
    produce(store, "e", 100)
    meta = store.topic("e").partitions[0]
    follower = next(d for d in meta.replicas if d != meta.leader)
    old = PartitionLog(os.path.join(dirs[meta.leader], partition_dir_name("e", 0)))
    old.open_for_write()  # the leader got a batch its follower never did (a writer killed in between)
    lone = codec.encode_batch([(None, b"never-acknowledged", (), 1)], old.log_end_offset)
    old.append(lone, codec.read_header(lone))
    old.close()
    _away(dirs[meta.leader])
    warnings: list[str] = []
    produce(store, "e", 10, start=100, warnings=warnings)
    after = store.topics.get("e").partitions[0]
    assert (after.leader, after.isr, after.leader_epoch) == (follower, [follower], 1)
    assert after.epochs == [[0, 0], [1, 100]]
    _back(dirs[meta.leader])
    produce(store, "e", 10, start=110, warnings=warnings)
    assert any(f"log directory {meta.leader} caught up and rejoined the ISR" in w for w in warnings)
    assert sorted(store.topics.get("e").partitions[0].isr) == sorted(meta.replicas)
    folders = [os.path.join(dirs[d], partition_dir_name("e", 0)) for d in meta.replicas]
    assert replica_bytes(folders[0]) == replica_bytes(folders[1])
    assert b"never-acknowledged" not in replica_bytes(folders[0])
    assert consumed(store, "e") == expected(120)


def test_unclean_leader_election_only_when_enabled(rstore):
    store, dirs = rstore
    store.create_topic("u", replication_factor=2)
    produce(store, "u", 100)
    meta = store.topic("u").partitions[0]
    follower = next(d for d in meta.replicas if d != meta.leader)
    _away(dirs[follower])
    produce(store, "u", 10, start=100, acks="1")  # the follower misses these: out of sync
    _away(dirs[meta.leader])
    _back(dirs[follower])
    with pytest.raises(NoLeaderError, match="no in-sync replica of u-0 is available"):
        produce(store, "u", 1, start=110)
    store.alter_topic("u", set_configs={"unclean.leader.election.enable": "true"})
    warnings: list[str] = []
    produce(store, "u", 5, start=1000, warnings=warnings)  # offsets 100.. again: 100-109 are lost
    after = store.topics.get("u").partitions[0]
    assert (after.leader, after.isr, after.leader_epoch) == (follower, [follower], 1)
    assert any("is the new leader (epoch 1)" in w for w in warnings)
    assert consumed(store, "u") == expected(100) + [b"value-%08d" % i for i in range(1000, 1005)]
    _back(dirs[meta.leader])  # the old leader comes back: its 100-109 are cut, it copies the rest
    produce(store, "u", 1, start=1005)
    assert sorted(store.topics.get("u").partitions[0].isr) == sorted(meta.replicas)
    folders = [os.path.join(dirs[d], partition_dir_name("u", 0)) for d in meta.replicas]
    assert replica_bytes(folders[0]) == replica_bytes(folders[1])


def _flip_in_active_segment(folder, nth_batch):
    """Flip one byte inside the nth batch of the replica's active segment; returns its position."""
    path = os.path.join(folder, sorted(n for n in os.listdir(folder) if n.endswith(".log"))[-1])
    with open(path, "r+b") as f:
        data = f.read()
        pos = 0
        for _ in range(nth_batch):
            pos += codec.read_header(data, pos).size
        f.seek(pos + 70)
        f.write(bytes([data[pos + 70] ^ 0x01]))
    return path, pos


def test_leader_cut_at_damage_after_a_power_cut_is_restored_from_its_followers(rstore, monkeypatch):
    """After a reboot the leader's recovery cuts its active segment at a damaged batch, far below
    the high watermark; the followers still hold those committed records, so they must not be cut
    to the leader's end: the leader copies them back, and a warning names what happened."""
    store, dirs = rstore
    store.create_topic("pc", replication_factor=3)
    with store.producer(batch_size=2000) as p:
        for i in range(3000):
            p.send("pc", b"value-%08d" % i, partition=0)
    meta = store.topic("pc").partitions[0]
    folder = os.path.join(dirs[meta.leader], partition_dir_name("pc", 0))
    path, position = _flip_in_active_segment(folder, 20)
    monkeypatch.setattr("klog.store.log.current_boot_id", lambda: b"\x42" * 16)  # the machine rebooted
    warnings: list[str] = []
    with klog.open(store.path) as fresh:
        produce(fresh, "pc", 10, start=3000, warnings=warnings)
        assert consumed(fresh, "pc") == expected(3010)
    lost = [w for w in warnings if "recovery cut committed records" in w]
    assert len(lost) == 1 and path in lost[0] and f"position {position}" in lost[0], warnings
    images = {replica_bytes(os.path.join(d, partition_dir_name("pc", 0))) for d in dirs}
    assert len(images) == 1

"""Replication under faults a reviewer found uncovered: a leader whose disk fails an append, a
reader kept open across an election, placement with a lost directory, lookups by time with the
leader's directory gone, what acks=1 and acks=0 wait for, and the high watermark as the bound
of every reader.

Method: real files in three log directories; faults are injected at PartitionLog.append (an
I/O error) or by moving a directory away (a lost disk).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from test_replication import REPO, expected, produce

import klog
from klog.client.consumer import StartSpec
from klog.store import codec
from klog.store.format import partition_dir_name
from klog.store.log import PartitionLog
from tests.klog_processes import require_mount_namespace


@pytest.fixture
def rstore(tmp_path):
    """A store over three log directories (disk0..disk2)."""
    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        yield store, dirs


def folder(dirs, d, topic):
    return os.path.join(dirs[d], partition_dir_name(topic, 0))


def produce_while_away(store, dirs, d, topic, n, start):
    """Produce n records while log directory d is gone (an unmounted disk); it comes back out of
    sync and stays so until something catches it up."""
    os.rename(dirs[d], dirs[d] + ".away")
    produce(store, topic, n, start=start)
    os.rename(dirs[d] + ".away", dirs[d])


def append_alone(directory, value: bytes, timestamp: int = 1) -> None:
    """A batch on one replica only, as a writer killed between the leader's write and the followers'."""
    log = PartitionLog(directory)
    log.open_for_write()
    batch = codec.encode_batch([(None, value, (), timestamp)], log.log_end_offset)
    log.append(batch, codec.read_header(batch))
    log.flush()
    log.close()


def test_leader_failing_an_append_hands_over_to_a_follower_and_the_write_goes_on(rstore, monkeypatch):
    store, dirs = rstore
    store.create_topic("f", replication_factor=3, configs={"min.insync.replicas": "2"})
    produce(store, "f", 100)
    before = store.topic("f").partitions[0]
    real_append = PartitionLog.append

    def failing_append(self, batch, header):
        if self.directory.startswith(dirs[before.leader]):
            raise OSError(errno.EIO, "Input/output error")  # the leader's disk, injected
        return real_append(self, batch, header)

    monkeypatch.setattr(PartitionLog, "append", failing_append)
    warnings: list[str] = []
    produce(store, "f", 100, start=100, warnings=warnings)  # no error: an in-sync follower takes over
    after = store.topics.get("f").partitions[0]
    assert after.leader != before.leader and after.leader in before.isr
    assert before.leader not in after.isr
    assert after.leader_epoch == before.leader_epoch + 1
    assert any(f"log directory {before.leader} left the ISR" in w and "Input/output error" in w for w in warnings)
    assert [r.value for r in store.consumer("f")] == expected(200)
    # the failed batch is nowhere twice: every remaining replica holds each record once
    for d in after.isr:
        log = PartitionLog(folder(dirs, d, "f"))
        values = [v for b in log.read(0, 10**9, 1 << 30) for (_, _, _, v, _) in b.records()]
        log.close()
        assert values == expected(200)


def test_a_disk_failing_in_the_middle_of_a_flush_of_many_partitions_fails_over_each_of_them(rstore, monkeypatch):
    """A producer's flush checks each log directory once for all its batches (not per append):
    a directory failing meanwhile still moves every partition it leads to a follower, and every
    record lands once."""
    store, dirs = rstore
    store.create_topic("w", partitions=6, replication_factor=2)
    values = {p: [b"p%d-%d" % (p, i) for i in range(20)] for p in range(6)}
    with store.producer() as producer:  # a first round: every partition's replica check is cached
        for p in range(6):
            producer.send_values("w", values[p][:10], partition=p)
    failing = 1
    real_append = PartitionLog.append

    def failing_append(self, batch, header):
        if self.directory.startswith(dirs[failing]):
            raise OSError(errno.EIO, "Input/output error")
        return real_append(self, batch, header)

    monkeypatch.setattr(PartitionLog, "append", failing_append)
    warnings: list[str] = []
    with store.producer(on_warning=warnings.append) as producer:
        for p in range(6):
            producer.send_values("w", values[p][10:], partition=p)
    meta = store.topics.get("w")
    assert any(failing in pm.replicas for pm in meta.partitions)
    for p, pm in enumerate(meta.partitions):
        assert failing not in pm.isr and pm.leader != failing, (p, pm)
        with store.consumer("w", partitions=[p]) as consumer:
            assert [r.value for r in consumer] == values[p], p
    assert sum(f"log directory {failing} left the ISR" in w for w in warnings) == \
        sum(failing in pm.replicas for pm in meta.partitions)


def test_a_reader_kept_open_across_an_election_never_reads_the_deposed_leaders_tail(rstore):
    store, dirs = rstore
    store.create_topic("s", replication_factor=2)
    produce(store, "s", 100)
    meta = store.topic("s").partitions[0]
    reader = klog.Store(store.path)
    try:
        assert len(list(reader.consumer("s"))) == 100  # its partition (leader + ISR) is now cached
        append_alone(folder(dirs, meta.leader, "s"), b"NEVER-ACKNOWLEDGED")
        produce_while_away(store, dirs, meta.leader, "s", 10, 100)  # the follower is elected (epoch 1)
        values = [r.value for r in reader.consumer("s")]
    finally:
        reader.close()
    assert b"NEVER-ACKNOWLEDGED" not in values
    assert values == expected(110)


def test_new_replicas_never_go_to_a_lost_directory(rstore):
    store, dirs = rstore
    os.rename(dirs[2], dirs[2] + ".away")
    meta = store.create_topic("x", partitions=4, replication_factor=2)
    assert all(2 not in p.replicas for p in meta.partitions)
    with pytest.raises(klog.KlogError, match=r"replication factor 3 is larger than the number of healthy log "
                                             r"directories \(2\)"):
        store.create_topic("y", replication_factor=3)
    meta = store.alter_topic("x", partitions=6)
    assert all(2 not in p.replicas for p in meta.partitions)


def test_lookups_by_time_are_answered_by_a_follower_when_the_leaders_directory_is_gone(rstore):
    store, dirs = rstore
    store.create_topic("t", replication_factor=2)
    with store.producer() as p:
        for i in range(50):
            p.send("t", b"%d" % i, partition=0, timestamp=1_000 + i)
    leader = store.topic("t").partitions[0].leader
    reader = klog.Store(store.path)
    try:
        os.rename(dirs[leader], dirs[leader] + ".away")  # no writer since: the ISR still names it
        assert reader.offsets("t", timestamp=1_020) == {0: 20}
        assert reader.offsets("t", timestamp=-2) == {0: 0}
        since = reader.consumer("t", start=StartSpec("timestamp", 1_045))
        assert [r.value for r in since] == [b"%d" % i for i in range(45, 50)]
    finally:
        reader.close()


def _fsyncs(monkeypatch) -> list[str]:
    """Which replica folders had their .log fsynced, in order."""
    seen: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = "?"
        if path.endswith(".log"):
            seen.append(os.path.dirname(path))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return seen


@pytest.mark.parametrize(("acks", "synced"), [("all", {0, 1, 2}), ("1", {0}), ("0", set())])
def test_acks_decide_which_replicas_are_fsynced_before_a_write_returns(rstore, monkeypatch, acks, synced):
    store, dirs = rstore
    store.create_topic("a", replication_factor=3)
    produce(store, "a", 10)  # placement, first segment, catch-up: out of the way
    meta = store.topic("a").partitions[0]
    order = [meta.leader] + [d for d in meta.replicas if d != meta.leader]
    seen = _fsyncs(monkeypatch)
    produce(store, "a", 10, start=10, acks=acks)
    assert {order.index(d) for d in range(3) if folder(dirs, d, "a") in seen} == synced
    # visibility does not depend on acks: every in-sync replica has the bytes, the high watermark moved
    assert [r.value for r in store.consumer("a")] == expected(20)
    assert store.describe_topic("a").partitions[0].replica_log_end == {0: 20, 1: 20, 2: 20}


def test_readers_never_see_past_the_high_watermark(rstore, cli):
    store, dirs = rstore
    store.create_topic("h", replication_factor=2)
    produce(store, "h", 100)
    leader = store.topic("h").partitions[0].leader
    append_alone(folder(dirs, leader, "h"), b"ABOVE-THE-HIGH-WATERMARK", timestamp=10**13)
    data = ["--data-dir", store.path]
    out = cli("consume", "h", "--json", *data).out
    assert len(out.splitlines()) == 100 and "ABOVE" not in out
    assert json.loads(cli("offsets", "h", "--json", *data).out)["latest"] == 100
    assert json.loads(cli("offsets", "h", "--time", str(10**13), "--json", *data).out)["offset"] is None
    with store.group_consumer("g", "h", follow=False) as consumer:
        assert [r.value for r in consumer] == expected(100)
    described = store.describe_topic("h").partitions[0]
    assert described.high_watermark == 100
    assert described.replica_log_end[leader] == 101  # the leader holds it; nobody reads it


def test_describe_shows_every_replicas_log_end_the_out_of_sync_one_too(rstore, cli):
    store, dirs = rstore
    store.create_topic("d", replication_factor=3)
    produce(store, "d", 100)
    lagging = store.topic("d").partitions[0].isr[-1]
    produce_while_away(store, dirs, lagging, "d", 20, 100)  # back, not yet caught up (nobody wrote since)
    info = store.describe_topic("d").partitions[0]
    assert lagging not in info.isr
    assert info.replica_log_end[lagging] == 100
    assert sorted(info.replica_log_end.values()) == [100, 120, 120]
    table = cli("topics", "describe", "d", "--data-dir", store.path).out
    assert f"{lagging}:100" in table and "REPLICA-LOG-ENDS" in table


def test_retention_run_by_the_cli_prints_the_isr_shrink_it_causes(rstore, cli):
    store, dirs = rstore
    store.create_topic("r", replication_factor=2)
    produce(store, "r", 10)
    follower = store.topic("r").partitions[0].isr[-1]
    os.rename(dirs[follower], dirs[follower] + ".away")
    result = cli("topics", "clean", "r", "--data-dir", store.path)
    assert f"replica of r-0 in log directory {follower} left the ISR (missing)" in result.stderr


# -- real read-only and full filesystems, in a private mount namespace ----------------------------
# chmod does not stop root, so as root these use what does: a read-only bind mount and a small
# tmpfs, made in a mount namespace of the test's own (unshare -m) so nothing outside sees them.
NAMESPACE_SCENARIO = r"""
import json, os, subprocess, sys
import klog
from klog.broker.dirs import list_dirs

base, mode = sys.argv[1], sys.argv[2]
dirs = [os.path.join(base, f"disk{i}") for i in range(3)]
for d in dirs:
    os.makedirs(d)
if mode == "full":  # disk2 is a 3 MiB disk
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", dirs[2]], check=True)
warnings = []
out = {}
with klog.Store(os.path.join(base, "data"), log_dirs=dirs, on_warning=warnings.append) as store:
    store.create_topic("t", replication_factor=3, configs={"min.insync.replicas": "2"})
    victim = 2
    with store.producer(batch_size=64 * 1024) as producer:  # one producer, mid-stream
        values = [b"value-%08d-" % i + b"x" * 100 for i in range(40_000)]  # 5 MiB
        for i, value in enumerate(values):
            if mode == "read-only" and i == 1_000:
                subprocess.run(["mount", "--bind", dirs[victim], dirs[victim]], check=True)
                subprocess.run(["mount", "-o", "remount,bind,ro", dirs[victim]], check=True)
            producer.send("t", value, partition=0)
    out["isr"] = store.topics.get("t").partitions[0].isr
    out["health"] = {d.id: d.health for d in list_dirs(store)}
    out["complete"] = [r.value for r in store.consumer("t")] == values
out["warnings"] = warnings
print(json.dumps(out))
"""


def _run_in_mount_namespace(tmp_path, mode: str) -> dict:
    require_mount_namespace()
    script = tmp_path / "scenario.py"
    script.write_text(NAMESPACE_SCENARIO)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, str(script),
                        str(tmp_path / "ns"), mode], capture_output=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


@pytest.mark.parametrize(("mode", "why"), [("read-only", "read-only"), ("full", "full")])
def test_a_directory_going_read_only_or_full_mid_stream_leaves_the_isr_once_and_writing_goes_on(
        tmp_path, mode, why):
    out = _run_in_mount_namespace(tmp_path, mode)
    assert out["complete"]  # every record, once, in order, while two of three replicas held
    assert 2 not in out["isr"] and len(out["isr"]) == 2
    assert out["health"]["2"] == why
    left = [w for w in out["warnings"] if "left the ISR" in w]
    assert left == [f"replica of t-0 in log directory 2 left the ISR ({why})"]


def test_verify_repair_catches_up_a_returned_replica_without_waiting_for_a_write(rstore, cli):
    store, dirs = rstore
    store.create_topic("v", replication_factor=2)
    produce(store, "v", 100)
    follower = store.topic("v").partitions[0].isr[-1]
    produce_while_away(store, dirs, follower, "v", 20, 100)
    assert follower not in store.topics.get("v").partitions[0].isr
    result = cli("verify", "v", "--repair", "--data-dir", store.path)
    assert result.exit_code == 0, result.stderr
    assert f"v-0 replica {follower}: repaired — repaired: caught up from the leader and rejoined the ISR" in result.out
    assert follower in store.topics.get("v").partitions[0].isr
    ends = store.describe_topic("v").partitions[0].replica_log_end
    assert set(ends.values()) == {120}


def test_a_diverged_follower_is_cut_where_its_epoch_ended_on_the_leader(tmp_path, monkeypatch):
    """Kafka's OffsetsForLeaderEpoch: one step to the epoch's end, not a walk back batch by batch."""
    from klog.broker import replication

    leader, follower = PartitionLog(str(tmp_path / "a" / "t-0")), PartitionLog(str(tmp_path / "b" / "t-0"))
    for log in (leader, follower):
        log.open_for_write()

    def write(log, value, epoch):
        batch = codec.with_base_offset(codec.encode_batch([(None, value, (), 1)], 0), log.log_end_offset, epoch)
        log.append(batch, codec.read_header(batch))

    for i in range(5):  # common history under epoch 0
        for log in (leader, follower):
            write(log, b"common-%d" % i, 0)
    for i in range(3):  # the follower (an old leader) went on alone under epoch 0
        write(follower, b"alone-%d" % i, 0)
    for i in range(4):  # the new leader's epoch 1 starts at offset 5
        write(leader, b"epoch1-%d" % i, 1)
    monkeypatch.setattr(replication, "DIVERGENCE_STEPS_MAX", 1)  # no room for a walk back over 3 batches
    assert replication.epoch_end_offset([[0, 0], [1, 5]], 0, 9) == 5
    assert replication.catch_up(leader, follower, 9, epochs=[[0, 0], [1, 5]]) == 9
    values = [v for b in follower.read(0, 9, 1 << 20) for (_, _, _, v, _) in b.records()]
    assert values == [b"common-%d" % i for i in range(5)] + [b"epoch1-%d" % i for i in range(4)]
    for log in (leader, follower):
        log.close()


def _fail_once(monkeypatch, method: str, directory_prefix: str, err: int):
    """PartitionLog.<method> raises OSError(err) once for a replica under directory_prefix."""
    real = getattr(PartitionLog, method)
    left = [1]

    def failing(self, *args, **kwargs):
        if left[0] and self.directory.startswith(directory_prefix):
            left[0] -= 1
            raise OSError(err, os.strerror(err))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, method, failing)


def test_a_lone_replica_that_fails_one_append_keeps_its_place_and_the_next_write_succeeds(rstore, monkeypatch):
    store, dirs = rstore
    store.create_topic("one", replication_factor=1)
    produce(store, "one", 10)
    only = store.topic("one").partitions[0].leader
    _fail_once(monkeypatch, "append", dirs[only], errno.ENOSPC)
    with pytest.raises(klog.KlogError, match="No space left on device"):
        produce(store, "one", 1, start=10)
    assert store.topics.get("one").partitions[0].isr == [only]  # never an empty ISR
    produce(store, "one", 5, start=10)  # the disk has room again: writing goes on
    assert [r.value for r in store.consumer("one")] == expected(15)


def test_a_follower_that_cannot_be_cut_back_leaves_with_the_failed_leader_and_nothing_is_doubled(
        rstore, monkeypatch):
    store, dirs = rstore
    store.create_topic("dup", replication_factor=3)
    produce(store, "dup", 2)
    meta = store.topic("dup").partitions[0]
    stuck = next(d for d in meta.isr if d != meta.leader)
    _fail_once(monkeypatch, "append", dirs[meta.leader], errno.EIO)
    _fail_once(monkeypatch, "truncate_to", dirs[stuck], errno.EIO)
    warnings: list[str] = []
    produce(store, "dup", 1, start=2, warnings=warnings)
    after = store.topics.get("dup").partitions[0]
    assert meta.leader not in after.isr and stuck not in after.isr and after.isr
    assert any(f"log directory {stuck} left the ISR" in w and "could not be cut back" in w for w in warnings)
    assert [r.value for r in store.consumer("dup")] == expected(3)  # the failed batch is not committed twice


def test_verify_repair_reports_an_offline_partition_and_still_checks_the_others(rstore, cli):
    store, dirs = rstore
    store.create_topic("off", partitions=2, replication_factor=1)
    with store.producer() as p:
        for i in range(4):
            p.send("off", b"%d" % i, partition=i % 2)
    lost = store.topic("off").partitions[1].leader
    kept = store.topic("off").partitions[0].leader
    assert lost != kept
    os.rename(dirs[lost], dirs[lost] + ".away")
    result = cli("verify", "off", "--repair", "--data-dir", store.path)
    assert result.exit_code == 1
    assert f"off-0 replica {kept}: ok" in result.out
    assert "no in-sync replica of off-1 is available" in result.out and "Traceback" not in result.stderr


def test_a_reader_reloads_once_when_the_state_files_epoch_lags_the_metadata(rstore):
    """A writer killed between recording a new epoch in LMDB and in the state file."""
    store, dirs = rstore
    store.create_topic("lag", replication_factor=2)
    produce(store, "lag", 10)
    meta = store.topic("lag").partitions[0]
    os.rename(dirs[meta.leader], dirs[meta.leader] + ".away")
    produce(store, "lag", 10, start=10)  # epoch 1, in LMDB and in the state file
    part = store.partition("lag", 0)
    snap = part.snapshot()
    snap.leader_epoch = 0  # the state file as the killed writer left it
    part.state.write(snap, sync=True)
    with klog.Store(store.path) as reader:
        reader_part = reader.partition("lag", 0)
        reader_part.leader_epoch_loaded = -1  # opened before the election
        reloads = []
        real = reader_part.reload_replicas
        reader_part.reload_replicas = lambda: (reloads.append(1), real())
        for _ in range(5):
            assert [r.value for r in reader.consumer("lag")] == expected(20)
    assert len(reloads) == 1


def test_flush_ms_bounds_unsynced_bytes_whatever_acks_says(rstore, monkeypatch):
    store, dirs = rstore
    store.create_topic("fm", replication_factor=3, configs={"flush.ms": "0"})
    produce(store, "fm", 10)
    seen = _fsyncs(monkeypatch)
    produce(store, "fm", 10, start=10, acks="0")
    assert {d for d in range(3) if folder(dirs, d, "fm") in seen} == {0, 1, 2}

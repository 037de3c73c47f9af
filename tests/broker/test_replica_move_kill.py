"""A replica move (`klog topics reassign`) cut short, by a kill -9 at each of its steps or by a
failed catch-up, leaves no partition with more replicas than its replication factor: the move is
recorded in the partition's metadata, `topics describe` says it is pending, and the partition's next
write finishes it (the new replica caught up) or rolls it back (the new replica's directory gone, or
its catch-up failed). Every record is there once, and no folder is left behind."""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil

import pytest

import klog
from klog.broker import replication
from tests.broker.replica_moves import every_record_once, partition_t0, store_with_t

# each step a kill can cut a move at: mid catch-up (50 batches copied), the
# move recorded, the new replica caught up, the metadata swapped, the old folder renamed for deletion
STEPS = ["catch-up-copied:50", "move-recorded", "move-caught-up", "move-settled", "move-renamed"]
RECORDS = 2000


def _lines(lo: int, hi: int) -> bytes:
    return b"".join(b"%d\n" % i for i in range(lo, hi))


def _store_with_moves(cli, data_dir: str, rf: int) -> dict[int, str]:  # noqa: ANN001
    """Log directories 0..2 (their paths by id), topic t (RF `rf`, small segments) with RECORDS records."""
    return store_with_t(cli, data_dir, rf, RECORDS, ["disk2", "disk3"])


def _killed_reassign(klog_proc, monkeypatch, step: str, source: int, target: int) -> None:
    """`klog topics reassign t --from source --to target` in a process SIGKILLed at crash point `step`."""
    monkeypatch.setenv("KLOG_CRASH_AT", step)
    r = klog_proc("topics", "reassign", "t", "--from", str(source), "--to", str(target))
    monkeypatch.delenv("KLOG_CRASH_AT")
    assert r.returncode == -9, r


def _leftovers(dirs: dict[int, str], keep: list[int]) -> list[str]:
    """t-0 folders outside the replicas `keep`, and folders of a deletion cut short, anywhere."""
    return ([p for d, path in dirs.items() if d not in keep for p in glob.glob(os.path.join(path, "t-0"))]
            + [p for path in dirs.values() for p in glob.glob(os.path.join(path, "klog-moved-*"))])


@pytest.mark.slow
@pytest.mark.parametrize("rf", [1, 2])
@pytest.mark.parametrize("step", STEPS)
def test_a_reassign_killed_at_each_step_is_finished_by_the_next_write(cli, klog_proc, data_dir, monkeypatch,
                                                                      step, rf):
    dirs = _store_with_moves(cli, data_dir, rf)
    before = partition_t0(data_dir)
    source = before.leader  # (the leader moves: the hand-over is part of the move)
    target = next(d for d in dirs if d not in before.replicas)
    _killed_reassign(klog_proc, monkeypatch, step, source, target)
    r = cli("topics", "describe", "t")
    assert r.exit_code == 0 and f"replication factor {rf}" in r.out, r
    assert f"a move of its replica from log directory {source} to {target} is pending" in r.out, r.out
    doc = json.loads(cli("topics", "describe", "t", "--json").out)
    assert doc["replication_factor"] == rf and doc["partitions"][0]["move"] == [source, target]

    r = cli("produce", "t", input=b"after\n")  # the partition's next write settles the move
    assert r.exit_code == 0, r
    after = partition_t0(data_dir)
    assert after.move is None and len(after.replicas) == rf == len(after.isr), after
    assert sorted(after.replicas) == sorted([target if d == source else d for d in before.replicas])
    assert after.leader != source and after.leader_epoch == before.leader_epoch + 1
    assert _leftovers(dirs, after.replicas) == []
    assert "pending" not in cli("topics", "describe", "t").out
    every_record_once(data_dir, RECORDS, [b"after"])


@pytest.mark.slow
def test_the_interrupted_reassign_run_again_finishes_it(cli, klog_proc, data_dir, monkeypatch):
    """The same command again, before any write: the pending move is finished, and nothing more moves."""
    dirs = _store_with_moves(cli, data_dir, 1)
    _killed_reassign(klog_proc, monkeypatch, "move-recorded", 0, 1)
    r = cli("topics", "reassign", "t", "--from", "0", "--to", "1", "-p", "0")
    assert r.exit_code == 0 and "Moved 1 replicas of t from log directory 0 to 1" in r.stderr, r
    after = partition_t0(data_dir)
    assert (after.replicas, after.isr, after.move) == ([1], [1], None)
    assert _leftovers(dirs, [1]) == []
    # another move asked for while one is pending: the pending one is finished first, then this one made
    _killed_reassign(klog_proc, monkeypatch, "move-caught-up", 1, 2)
    r = cli("topics", "reassign", "t", "--from", "2", "--to", "0", "-p", "0")
    assert r.exit_code == 0, r
    after = partition_t0(data_dir)
    assert (after.replicas, after.isr, after.move) == ([0], [0], None)
    assert _leftovers(dirs, [0]) == []
    # killed once swapped (the old folder not yet deleted): run again, without -p, it is finished too
    _killed_reassign(klog_proc, monkeypatch, "move-settled", 0, 1)
    r = cli("topics", "reassign", "t", "--from", "0", "--to", "1")
    assert r.exit_code == 0 and "Moved 1 replicas of t from log directory 0 to 1" in r.stderr, r
    after = partition_t0(data_dir)
    assert (after.replicas, after.isr, after.move) == ([1], [1], None)
    assert _leftovers(dirs, [1]) == []
    every_record_once(data_dir, RECORDS, [])


@pytest.mark.slow
def test_a_move_cut_short_whose_new_directory_is_gone_is_rolled_back(cli, klog_proc, data_dir, monkeypatch):
    dirs = _store_with_moves(cli, data_dir, 1)
    _killed_reassign(klog_proc, monkeypatch, "catch-up-copied:50", 0, 1)  # mid catch-up
    shutil.rmtree(dirs[1])  # the new replica's disk is lost
    r = cli("produce", "t", input=b"after\n")
    assert r.exit_code == 0, r
    assert "rolled back the move of its replica from log directory 0 to 1" in r.stderr, r.stderr
    after = partition_t0(data_dir)
    assert (after.replicas, after.isr, after.leader, after.move) == ([0], [0], 0, None)
    assert "replication factor 1" in cli("topics", "describe", "t").out
    every_record_once(data_dir, RECORDS, [b"after"])


def test_a_failed_catch_up_rolls_the_move_back(cli, data_dir, monkeypatch):
    """The new replica cannot be written (a full disk): one line says nothing was moved, and the
    partition keeps its one replica; the new replica's folder is gone."""
    dirs = {}
    assert cli("dirs", "add", os.path.join(data_dir, "disk2")).exit_code == 0
    assert cli("topics", "create", "t").exit_code == 0
    assert cli("produce", "t", input=_lines(0, 100)).exit_code == 0
    with klog.open(data_dir) as store:
        dirs = {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}
    real = replication.catch_up

    def full_disk(leader, follower, *args, **kwargs):
        if follower.directory.startswith(dirs[1]):
            real(leader, follower, leader.log_end_offset // 2)  # part of it copied, then the disk fills
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(leader, follower, *args, **kwargs)

    monkeypatch.setattr(replication, "catch_up", full_disk)
    r = cli("topics", "reassign", "t", "--from", "0", "--to", "1")
    assert r.exit_code == 1, r
    assert r.stderr.strip().splitlines() == ["klog: error: the new replica of t-0 in log directory 1 could not "
                                             "catch up (No space left on device); nothing was moved"], r.stderr
    monkeypatch.setattr(replication, "catch_up", real)
    after = partition_t0(data_dir)
    assert (after.replicas, after.isr) == ([0], [0]) and after.move is None  # (was [0, 1]: both, for good)
    assert _leftovers(dirs, [0]) == []
    r = cli("topics", "describe", "t")
    assert "replication factor 1" in r.out and "pending" not in r.out
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("t")] == [b"%d" % i for i in range(100)] + [b"after"]


@pytest.mark.slow
def test_a_topic_deleted_with_a_move_pending_leaves_no_folder(cli, klog_proc, data_dir, monkeypatch):
    """Killed once the replicas were swapped, before the old folder went: a delete of the topic then
    removes that folder too (a topic created again under the name would otherwise be refused)."""
    dirs = _store_with_moves(cli, data_dir, 1)
    _killed_reassign(klog_proc, monkeypatch, "move-settled", 0, 1)
    assert os.path.isdir(os.path.join(dirs[0], "t-0"))
    assert cli("topics", "delete", "t").exit_code == 0
    assert _leftovers(dirs, []) == []
    assert cli("topics", "create", "t").exit_code == 0
    assert cli("produce", "t", input=b"new\n").exit_code == 0
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("t")] == [b"new"]

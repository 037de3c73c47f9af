"""Replica moves at their edges: the new log directory fills up during the move (ENOSPC while the
catch-up copies, or while the next write settles a move cut short), and `klog dirs remove` of a
directory a pending move starts or ends in. Each time the move is rolled back (or settled) with one
line saying why, the old replica keeps every acknowledged record, and writing goes on."""

from __future__ import annotations

import errno
import glob
import os

import pytest

import klog
from klog.store.log import PartitionLog
from tests.broker.replica_moves import every_record_once, partition_t0, store_with_t

RECORDS = 1000


def _store(cli, data_dir: str, rf: int, disks: int = 2) -> dict[int, str]:  # noqa: ANN001
    """Log directories 0..disks (paths by id), topic t (RF `rf`, small segments) holding RECORDS records."""
    return store_with_t(cli, data_dir, rf, RECORDS, [f"disk{i + 1}" for i in range(disks)])


def _full_after(monkeypatch, directory: str, batches: int) -> None:
    """The disk of `directory` fills up: PartitionLog.append of a replica there fails with ENOSPC
    once `batches` batches were written to it (as a full disk fails a write partway through a copy)."""
    real = PartitionLog.append
    written = [0]

    def append(self, batch, header, *args, **kwargs):
        if self.directory.startswith(directory + os.sep):
            if written[0] >= batches:
                raise OSError(errno.ENOSPC, "No space left on device")
            written[0] += 1
        return real(self, batch, header, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "append", append)


def _folders(dirs: dict[int, str]) -> list[int]:
    """The log directories holding a t-0 folder, and none holding a deletion left half done."""
    assert not [p for path in dirs.values() for p in glob.glob(os.path.join(path, "klog-moved-*"))]
    return sorted(d for d, path in dirs.items() if os.path.isdir(os.path.join(path, "t-0")))


@pytest.mark.slow
@pytest.mark.parametrize("rf", [1, 2])
def test_a_target_that_fills_up_while_copying_rolls_the_move_back(cli, data_dir, monkeypatch, rf):
    """The real copy (PartitionLog.append) fails with ENOSPC 10 batches in: one line, exit 1; the
    leader (the replica moved) keeps its place and epoch, the new folder is gone, writes go on."""
    dirs = _store(cli, data_dir, rf)
    before = partition_t0(data_dir)
    source = before.leader
    target = next(d for d in dirs if d not in before.replicas)
    with pytest.MonkeyPatch.context() as full:
        _full_after(full, dirs[target], 10)
        r = cli("topics", "reassign", "t", "--from", str(source), "--to", str(target))
        assert r.exit_code == 1, r
        assert r.stderr.strip().splitlines() == [f"klog: error: the new replica of t-0 in log directory {target} "
                                                 "could not catch up (No space left on device); nothing was moved"]
        after = partition_t0(data_dir)
        assert after == before  # replicas, ISR, leader, epoch, no move pending
        assert _folders(dirs) == sorted(before.replicas)
        r = cli("produce", "t", input=b"after\n")  # (the disk is still full: the move's replica is no more)
        assert r.exit_code == 0 and r.stderr == "", r
    every_record_once(data_dir, RECORDS, [b"after"])
    r = cli("topics", "reassign", "t", "--from", str(source), "--to", str(target))  # room again: it moves
    assert r.exit_code == 0, r
    # (its new replica catching up is the move, said once: no warning of a replica "rejoining" the ISR)
    assert r.stderr.splitlines() == [f"Moved 1 replicas of t from log directory {source} to {target}"], r.stderr
    assert target in partition_t0(data_dir).replicas and source not in partition_t0(data_dir).replicas
    every_record_once(data_dir, RECORDS, [b"after"])


@pytest.mark.slow
def test_a_move_cut_short_whose_target_is_full_is_rolled_back_by_the_next_write(cli, klog_proc, data_dir,
                                                                                 monkeypatch):
    """`reassign` killed mid-copy (30 batches in); the target's disk then fills up: the next produce
    settles the move by rolling it back, says so in one warning naming the cause, and is written."""
    dirs = _store(cli, data_dir, 1)
    monkeypatch.setenv("KLOG_CRASH_AT", "catch-up-copied:30")
    assert klog_proc("topics", "reassign", "t", "--from", "0", "--to", "1").returncode == -9
    monkeypatch.delenv("KLOG_CRASH_AT")
    assert partition_t0(data_dir).move == [0, 1]
    with pytest.MonkeyPatch.context() as full:
        _full_after(full, dirs[1], 0)
        r = cli("produce", "t", input=b"after\n")
        assert r.exit_code == 0, r
        assert r.stderr.strip().splitlines() == [
            "klog: warning: t-0: rolled back the move of its replica from log directory 0 to 1 (cut short before): "
            "the new replica could not catch up (No space left on device)"], r.stderr
        after = partition_t0(data_dir)
        assert (after.replicas, after.isr, after.leader, after.move) == ([0], [0], 0, None)
        assert _folders(dirs) == [0]
    every_record_once(data_dir, RECORDS, [b"after"])


def _pending(klog_proc, monkeypatch, data_dir: str, step: str) -> None:
    """`klog topics reassign t --from 0 --to 1` killed with -9 at crash point `step`: move-recorded
    (nothing copied yet), move-caught-up (the new replica in the ISR), move-settled (swapped, the
    old folder not yet deleted)."""
    monkeypatch.setenv("KLOG_CRASH_AT", step)
    assert klog_proc("topics", "reassign", "t", "--from", "0", "--to", "1").returncode == -9
    monkeypatch.delenv("KLOG_CRASH_AT")
    assert partition_t0(data_dir).move == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("caught_up", [False, True])
@pytest.mark.parametrize("removed", ["source", "target"])
def test_dirs_remove_settles_a_pending_move_of_the_directory_first(cli, klog_proc, monkeypatch, data_dir,
                                                                    removed, caught_up):
    """A move of t-0 from 0 to 1 is pending (nothing copied yet, or caught up); `dirs remove` of either
    end settles it first, then moves what is left on the directory removed to another one: the
    partition ends with its one replica, elsewhere, every record once, no move left pending."""
    dirs = _store(cli, data_dir, 1)
    _pending(klog_proc, monkeypatch, data_dir, "move-caught-up" if caught_up else "move-recorded")
    gone = 0 if removed == "source" else 1
    r = cli("dirs", "remove", str(gone))
    assert r.exit_code == 0, r
    after = partition_t0(data_dir)
    assert after.move is None and len(after.replicas) == 1 == len(after.isr), after
    assert gone not in after.replicas
    # settled first: finished (the new replica catches up, whether it had copied anything or not);
    # then what is left on the directory removed is moved: nothing (0), or t-0 from 1 to another
    # healthy directory (0 again, its folder there deleted when the move finished, or 2)
    assert after.replicas in ([[1]] if removed == "source" else [[0], [2]])
    assert f"({0 if removed == 'source' else 1} replicas moved)" in r.out
    assert f"Removed log directory {gone}" in r.out
    with klog.open(data_dir) as store:
        assert gone not in store.log_dir_ids()
    del dirs[gone]
    assert _folders(dirs) == after.replicas
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    every_record_once(data_dir, RECORDS, [b"after"])


@pytest.mark.slow
def test_dirs_remove_of_a_pending_moves_source_once_swapped(cli, klog_proc, monkeypatch, data_dir):
    """Cut short after the swap (t-0 already in 1, the old folder in 0 not yet deleted, the move still
    recorded): `dirs remove 0` settles it (the folder deleted), and has nothing left to move."""
    dirs = _store(cli, data_dir, 1)
    _pending(klog_proc, monkeypatch, data_dir, "move-settled")
    assert _folders(dirs) == [0, 1]
    r = cli("dirs", "remove", "0")
    assert r.exit_code == 0 and "Removed log directory 0 (0 replicas moved)" in r.out, r
    after = partition_t0(data_dir)
    assert (after.replicas, after.move) == ([1], None)
    assert _folders(dirs) == [1]
    every_record_once(data_dir, RECORDS, [])


@pytest.mark.slow
def test_dirs_remove_of_a_lost_target_rolls_its_pending_move_back(cli, klog_proc, monkeypatch, data_dir):
    """The disk a pending move was copying to is lost, and removed: the move is rolled back (its new
    replica cannot catch up), so nothing is left to move off it, and t-0 keeps its replica in 0."""
    import shutil

    dirs = _store(cli, data_dir, 1)
    _pending(klog_proc, monkeypatch, data_dir, "catch-up-copied:20")
    shutil.rmtree(dirs[1])
    r = cli("dirs", "remove", "1")
    assert r.exit_code == 0 and "Removed log directory 1 (0 replicas moved)" in r.out, r
    assert "rolled back the move of its replica from log directory 0 to 1" in r.stderr, r.stderr
    after = partition_t0(data_dir)
    assert (after.replicas, after.isr, after.move) == ([0], [0], None)
    del dirs[1]
    assert _folders(dirs) == [0]
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    every_record_once(data_dir, RECORDS, [b"after"])


@pytest.mark.slow
def test_dirs_remove_moves_off_a_replica_moved_into_the_directory_meanwhile(cli, data_dir):
    """`dirs remove 2` (a process of its own) waits for u-0's lock, past t-0; meanwhile `topics
    reassign` moves t-0 into 2. The removal moves t-0 off again before it forgets 2 (it forgot 2
    with t-0 in it: a replica in a directory the store no longer knows)."""
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.lock_waits import lockers, until

    for i in (1, 2):
        assert cli("dirs", "add", os.path.join(data_dir, f"disk{i}")).exit_code == 0
    with klog.open(data_dir) as store:
        for name in ("t", "u"):
            store.create_topic(name, 1, replication_factor=1)
            with store.producer() as producer:
                for i in range(100):
                    producer.send(name, b"%d" % i, partition=0)
        for name, home in (("t", 0), ("u", 2)):
            now = store.topic(name).partitions[0].replicas[0]
            if now != home:
                store.reassign(name, now, home)
        lock = store.partition("u", 0).lock
        lock.acquire()
        inode = os.stat(lock.path).st_ino
        remove = subprocess.Popen([sys.executable, "-m", "klog", "dirs", "remove", "2"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO})
        try:
            until(lambda: remove.pid in lockers(inode)[1], "dirs remove waits for u-0's lock")
            r = cli("topics", "reassign", "t", "--from", "0", "--to", "2")
            assert r.exit_code == 0, r
        finally:
            lock.release()
        try:
            out, err = remove.communicate(timeout=60)
        finally:
            if remove.poll() is None:
                remove.kill()
                remove.wait(10)
    assert (remove.returncode, out) == (0, "Removed log directory 2 (2 replicas moved)\n"), err
    with klog.open(data_dir) as store:
        assert 2 not in store.log_dir_ids()
        for name in ("t", "u"):
            meta = store.topics.get(name).partitions[0]
            assert 2 not in meta.replicas and meta.move is None and len(meta.replicas) == 1, meta
            assert [r.value for r in store.consumer(name)] == [b"%d" % i for i in range(100)]



@pytest.mark.slow
@pytest.mark.parametrize("step", ["catch-up-copied:20", "move-caught-up", "move-settled"])
def test_dirs_remove_killed_mid_move_is_finished_by_running_it_again(cli, klog_proc, monkeypatch, data_dir, step):
    dirs = _store(cli, data_dir, 1)
    monkeypatch.setenv("KLOG_CRASH_AT", step)
    assert klog_proc("dirs", "remove", "0").returncode == -9
    monkeypatch.delenv("KLOG_CRASH_AT")
    assert partition_t0(data_dir).move is not None
    r = cli("dirs", "remove", "0")
    assert r.exit_code == 0 and r.out.startswith("Removed log directory 0 ("), r
    after = partition_t0(data_dir)
    assert after.move is None and len(after.replicas) == 1 and 0 not in after.replicas, after
    assert _folders(dirs) == after.replicas  # (none left in 0 either)
    every_record_once(data_dir, RECORDS, [])

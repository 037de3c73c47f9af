"""A producer's first write into many partitions: each folder listed once, each lock taken once,
and every check that matters still made (the data-loss marker, another writer since)."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

import klog
from klog.broker import data_loss
from klog.store import log
from klog.store.locks import FileLock
from klog.store.state import ReplicaState
from tests.kafka_files import read_checkpoint

PARTITIONS = 4


def _fill(data_dir: str) -> None:
    with klog.open(data_dir) as store:
        store.create_topic("w", PARTITIONS)
        with store.producer() as p:
            for i in range(PARTITIONS * 3):
                p.send("w", b"v%d" % i, partition=i % PARTITIONS)


def _count_listings_and_locks(monkeypatch) -> tuple[Counter[str], Counter[str]]:
    listed: Counter[str] = Counter()
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.update([str(path)]) or real_listdir(path))
    locked: Counter[str] = Counter()
    real_acquire = FileLock.acquire
    monkeypatch.setattr(FileLock, "acquire",
                        lambda self, blocking=True: locked.update([self.path]) or real_acquire(self, blocking))
    return listed, locked


def _states_describe_the_logs(folders: set[str], log_end: int) -> None:
    for folder in folders:
        state = ReplicaState(os.path.join(folder, ReplicaState.FILE_NAME))
        try:
            snap = state.read()
        finally:
            state.close()
        assert snap is not None and snap.log_end_offset == log_end
        assert snap.valid_size == os.path.getsize(os.path.join(folder, f"{snap.active_base:020d}.log"))


@pytest.mark.parametrize("folders_settled", [False, True])
def test_a_first_write_lists_each_folder_once_and_takes_each_lock_once(data_dir, monkeypatch, folders_settled):
    """Whether the close also records the Kafka checkpoint files' digest (under a second hold of
    each lock, once per folder: see test_checkpoint_digest) depends on the age of the folder's last
    change at the open (log.FOLDER_SETTLED_NS): the previous Store's close rewrote the folders'
    checkpoint files just before. Left to the clock, this test took two locks twice when the
    machine was slow; each case is pinned here, and the write's own holds are counted apart."""
    _fill(data_dir)
    if folders_settled:  # as a later command finds them: the open records the folder in the trust record
        time.sleep(log.FOLDER_SETTLED_NS / 1e9 + 0.02)
    else:  # changed just before the open: it cannot vouch for the folder (nor for its checkpoint files)
        monkeypatch.setattr(log, "FOLDER_SETTLED_NS", 3600 * 10**9)
        monkeypatch.setattr(log, "FOLDER_SETTLED_WHOLE_SECONDS_NS", 3600 * 10**9)
    folders = {os.path.join(data_dir, "logs", f"w-{p}") for p in range(PARTITIONS)}
    listed, locked = _count_listings_and_locks(monkeypatch)
    with klog.open(data_dir) as store:
        with store.producer() as p:
            for i in range(PARTITIONS):
                p.send("w", b"more%d" % i, partition=i)
        assert sorted(locked.values()) == [1] * PARTITIONS  # the write: one hold of each lock
        _states_describe_the_logs(folders, 4)  # its append left each replica state file describing its log ...
    monkeypatch.undo()
    assert {f: listed[f] for f in folders} == {f: 1 for f in folders}  # not also when the Store opened them
    # ... so the close settles nothing of the appends under a second hold; with the folders
    # settled, it takes each lock once more only to record that their checkpoint files are current
    assert sorted(locked.values()) == [2 if folders_settled else 1] * PARTITIONS
    _states_describe_the_logs(folders, 4)
    if folders_settled:  # recorded: the next write lists no folder and takes each lock once in all
        listed, locked = _count_listings_and_locks(monkeypatch)
        with klog.open(data_dir) as store, store.producer() as p:
            for i in range(PARTITIONS):
                p.send("w", b"again%d" % i, partition=i)
        monkeypatch.undo()
        assert not [f for f in folders if listed[f]]
        assert sorted(locked.values()) == [1] * PARTITIONS
        _states_describe_the_logs(folders, 5)
    with klog.open(data_dir) as store:
        for i in range(PARTITIONS):
            last = [r.value for r in store.consumer("w", partitions=[i])][-1]
            assert last == (b"again%d" if folders_settled else b"more%d") % i


def test_a_loss_marker_stops_a_store_that_lists_the_folder_once(data_dir):
    """The marker is looked for in the listing the open for write made: there, it still stops writes."""
    _fill(data_dir)
    data_loss.record(os.path.join(data_dir, "logs", "w-1"), "committed records 2..2 of w-1 are gone")
    with klog.open(data_dir) as store:
        with pytest.raises(klog.KlogError, match="w-1 takes no writes: committed records 2..2"):
            with store.producer() as p:
                p.send("w", b"after", partition=1)
        store.verify("w", repair=True)
        with store.producer() as p:
            p.send("w", b"after", partition=1)
        assert [r.value for r in store.consumer("w", partitions=[1])][-1] == b"after"


def test_the_close_reads_the_state_files_when_another_writer_came_after(data_dir):
    """Kafka's checkpoint lines come from what the closing Store's append left only while nobody
    took the partition's lock since; after another writer, from the files (never stale lines)."""
    _fill(data_dir)
    checkpoint = os.path.join(data_dir, "logs", "replication-offset-checkpoint")
    first = klog.open(data_dir)
    try:
        with first.producer() as p:
            p.send("w", b"first", partition=0)
        with klog.open(data_dir) as second, second.producer() as p:
            for i in range(5):
                p.send("w", b"second%d" % i, partition=0)
        assert ["w", "0", "9"] in read_checkpoint(checkpoint, 3)
    finally:
        first.close()
    assert ["w", "0", "9"] in read_checkpoint(checkpoint, 3)  # not the 4 the first Store appended up to


def test_a_store_writes_into_a_topic_another_store_deleted_and_created_again(data_dir):
    """Its partition's state files, kept open since its last write, were unlinked with the old
    topic: under the lock it reads the ones now at the path (the old high watermark read through a
    stale descriptor made the new topic's missing folder look deleted: "no in-sync replica")."""
    _fill(data_dir)
    first = klog.open(data_dir)
    try:
        with first.producer() as p:
            p.send("w", b"old", partition=0)
        with klog.open(data_dir) as other:
            other.delete_topic("w")
            other.create_topic("w", PARTITIONS)
        with first.producer() as p:
            p.send("w", b"new", partition=0)
    finally:
        first.close()
    folder = os.path.join(data_dir, "logs", "w-0")
    snap = ReplicaState(os.path.join(folder, ReplicaState.FILE_NAME)).read()
    assert snap is not None and snap.log_end_offset == 1  # the new folder's, not the unlinked one's
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("w")] == [b"new"]

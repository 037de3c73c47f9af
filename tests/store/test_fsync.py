"""What reaches the disk when: fsync calls counted by the file they were made on (Linux /proc).

A new segment (or partition folder) is only durable once the directory holding its entry is
fsynced; the flush policy (flush.messages, flush.ms) decides how often the `.log` is fsynced.
"""

from __future__ import annotations

import os
import stat
import time

import pytest

import klog

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


@pytest.fixture
def fsyncs(monkeypatch) -> list[tuple[str, bool]]:
    """Every os.fsync from now on, as (path, is a directory)."""
    calls: list[tuple[str, bool]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), stat.S_ISDIR(os.fstat(fd).st_mode)))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return calls


def test_a_new_partition_folder_and_every_new_segment_have_their_directory_fsynced(store, fsyncs):
    store.create_topic("roll", configs={"segment.bytes": "400"})
    folder = os.path.realpath(os.path.join(store.data_dir.log_dir_path(0), "roll-0"))
    with store.producer() as producer:
        producer.send("roll", b"first")
        producer.flush()
        dirs = [path for path, is_dir in fsyncs if is_dir]
        assert os.path.dirname(folder) in dirs  # the log dir: the new partition folder's entry
        assert folder in dirs  # the partition folder: the first segment's entries
        leader = store.partition("roll", 0).leader
        rolls = 0
        for i in range(40):
            segments = list(leader.bases)
            fsyncs.clear()
            producer.send("roll", b"record %d " % i + b"x" * 60)
            producer.flush()  # acks=all, flush.messages=1: durable when it returns
            if leader.bases != segments:
                rolls += 1
                assert (folder, True) in fsyncs, f"segment {leader.bases[-1]} rolled without a directory fsync"
                sealed = os.path.join(folder, f"{segments[-1]:020d}.log")
                assert (sealed, False) in fsyncs  # the old segment is complete on disk
        assert rolls >= 5



def test_a_write_into_many_new_partitions_makes_their_folders_durable_with_one_syncfs(store, fsyncs):
    from klog.store import syncfs

    if not syncfs.available():
        pytest.skip("needs syncfs (Linux 5.8+)")
    store.create_topic("wide", partitions=16)
    log_dir = os.path.realpath(store.data_dir.log_dir_path(0))
    with store.producer() as producer:
        producer.send_keyed("wide", [(b"k%d" % i, b"v%d" % i) for i in range(200)])
        producer.flush()  # acks=all: durable when it returns
    assert all(os.path.isdir(os.path.join(log_dir, f"wide-{p}")) for p in range(16))
    # the 16 new folders' entries: covered by the group's syncfs, not an fsync of the log dir each
    assert [path for path, is_dir in fsyncs if is_dir and path == log_dir] == []
    with store.consumer("wide") as consumer:
        assert sorted(r.value for r in consumer) == sorted(b"v%d" % i for i in range(200))

def log_fsyncs(calls: list[tuple[str, bool]]) -> int:
    return sum(1 for path, is_dir in calls if not is_dir and path.endswith(".log"))


@pytest.mark.parametrize(("configs", "want"), [
    ({}, 10),  # flush.messages=1 (the default): every batch
    ({"flush.messages": "3"}, 3),  # after batches 3, 6 and 9
    ({"flush.messages": "4"}, 2),
    ({"flush.messages": "1000000", "flush.ms": "0"}, 10),  # flush.ms elapsed at every batch
    ({"flush.messages": "1000000"}, 0),  # neither due: the OS writes back when it likes
])
def test_flush_messages_and_flush_ms_decide_the_log_fsyncs(data_dir, fsyncs, configs, want):
    with klog.open(data_dir) as s:
        s.create_topic("flush", configs=configs)
        with s.producer() as producer:
            producer.send("flush", b"warm-up")  # creates the folder and the first segment
            producer.flush()
            fsyncs.clear()
            for i in range(10):
                producer.send("flush", b"batch %d" % i)
                producer.flush()  # one batch each
            assert log_fsyncs(fsyncs) == want, fsyncs
    with klog.open(data_dir) as s:
        assert len(list(s.consumer("flush"))) == 11


@pytest.mark.parametrize("acks", ["1", "0"])
def test_acks_below_all_still_fsync_the_leader_or_nothing(data_dir, fsyncs, acks):
    with klog.open(data_dir) as s:
        s.create_topic("a")
        with s.producer(acks=acks) as producer:
            producer.send("a", b"warm-up")
            producer.flush()
            fsyncs.clear()
            for i in range(5):
                producer.send("a", b"%d" % i)
                producer.flush()
            assert log_fsyncs(fsyncs) == (5 if acks == "1" else 0)


def test_flush_ms_fsyncs_a_partition_that_went_quiet(data_dir, fsyncs):
    """acks=1 writes under a large flush.messages: no append comes to check flush.ms, so a timer does."""
    with klog.open(data_dir) as s:
        s.create_topic("quiet", configs={"flush.messages": "1000000", "flush.ms": "200"})
        with s.producer(acks="1") as producer:
            producer.send("quiet", b"warm-up")
            producer.flush()
            time.sleep(0.25)
            fsyncs.clear()
            producer.send("quiet", b"then nothing")  # flush.ms passed since the last fsync: this one is synced
            producer.flush()
            producer.send("quiet", b"left unsynced")
            producer.flush()
            synced_by_appends = log_fsyncs(fsyncs)
            deadline = time.monotonic() + 5
            while log_fsyncs(fsyncs) == synced_by_appends and time.monotonic() < deadline:
                time.sleep(0.02)
            assert log_fsyncs(fsyncs) > synced_by_appends, "the quiet partition's bytes were never fsynced"

"""A writer that has a partition to itself writes the replica state file (klog-replica.state) only
every few batches, not at every append: the partition state (the high watermark readers need) is
the one state write per append. What the replica state does not describe yet is checked by the
next writer (whole batches, CRCs, offsets), so every acknowledged batch survives a kill -9 at any
append, a batch cut by the kill is recovered as before, and a clean close leaves the file current."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import klog
from klog.store.log import STATE_LAG_BATCHES_MAX
from klog.store.partition import SETTLED_HOLDS
from klog.store.state import PartitionState, ReplicaState
from tests.conftest import REPO

WARM = SETTLED_HOLDS  # a writer's first appends (its first open checks the files, its first holds settle them)


def _append(store, values: list[bytes]) -> None:
    with store.producer() as producer:
        for v in values:
            producer.send_values("t", [v], partition=0)
            producer.flush()  # one batch, one append


def _records(store) -> list[tuple[int, bytes]]:
    with store.consumer("t", start="earliest") as consumer:
        return [(r.offset, r.value) for r in consumer]


def _replica(data_dir: str) -> tuple[ReplicaState, str]:
    folder = os.path.join(data_dir, "logs", "t-0")
    return ReplicaState(os.path.join(folder, ReplicaState.FILE_NAME)), os.path.join(folder, "0" * 20 + ".log")


def test_an_append_writes_one_state_file_and_the_replica_state_every_few_batches(store, monkeypatch):
    store.create_topic("t")
    _append(store, [b"w%d" % i for i in range(WARM)])
    writes: list[str] = []
    # (every write of the partition state goes through write_values, of a snapshot or of its fields)
    for cls, method in ((ReplicaState, "write"), (PartitionState, "write_values")):
        real = getattr(cls, method)

        def counted(self, snap, sync=False, real=real, name=cls.__name__):
            writes.append(name)
            real(self, snap, sync)

        monkeypatch.setattr(cls, method, counted)
    n = 4 * STATE_LAG_BATCHES_MAX
    _append(store, [b"v%d" % i for i in range(n)])
    assert writes.count("PartitionState") == n
    assert 0 < writes.count("ReplicaState") <= n // STATE_LAG_BATCHES_MAX + 1


def test_a_clean_close_leaves_the_replica_state_current(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("t")
        _append(store, [b"r%d" % i for i in range(WARM + 5)])
        state, log = _replica(data_dir)
        assert state.read().valid_size < os.path.getsize(log)  # lagging while the writer is open
    snap = state.read()
    assert snap.valid_size == os.path.getsize(log) and snap.log_end_offset == WARM + 5
    assert snap.recovery_point == WARM + 5  # (acks=all: fsynced; the checkpoints take it from here)
    state.close()


_KILLED_WRITER = """
import os, signal, sys
import klog
data_dir, n = sys.argv[1], int(sys.argv[2])
store = klog.open(data_dir)
with store.producer() as producer:
    for i in range(n):
        producer.send_values("t", [b"r%d" % i], partition=0)
        producer.flush()
        print(i, flush=True)  # acknowledged
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("cut", [False, True])
def test_a_kill_9_with_the_replica_state_behind_loses_no_acknowledged_batch(data_dir, cut):
    with klog.open(data_dir) as store:
        store.create_topic("t")
    n = WARM + STATE_LAG_BATCHES_MAX // 2
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, data_dir, str(n)], capture_output=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert len(r.stdout.splitlines()) == n  # every batch acknowledged
    state, log = _replica(data_dir)
    behind = state.read()
    state.close()
    assert behind.valid_size < os.path.getsize(log)  # the kill left the replica state lagging
    if cut:  # what a kill in the middle of the next append's write leaves: part of a batch
        with open(log, "ab") as f:
            f.write(b"\0\0\0\0\0\0\0\x99\0\0\0\x50\0\0\0\0\x02")
    with klog.open(data_dir) as store:
        assert _records(store) == [(i, b"r%d" % i) for i in range(n)]
        _append(store, [b"after"])
        part = store.partition("t", 0)
        report = part.last_recovery[0]
        # the tail the state did not describe was checked, not the segment recovered ...
        assert bool(report.segments_recovered) == cut
        assert report.bytes_truncated == (17 if cut else 0)
        assert _records(store) == [(i, b"r%d" % i) for i in range(n)] + [(n, b"after")]


def test_writers_taking_turns_write_the_replica_state_at_every_append(data_dir):
    """Two writers of one partition (two stores: two lock holders, as two processes are) that take
    turns each find the state current: no tail to check at each turn."""
    first, second = klog.open(data_dir), klog.open(data_dir)
    try:
        first.create_topic("t")
        state, log = _replica(data_dir)
        for i in range(6):
            _append(first if i % 2 else second, [b"r%d" % i])
        for i in range(6, 12):
            _append(first if i % 2 else second, [b"r%d" % i])
            snap = state.read()
            assert snap.valid_size == os.path.getsize(log) and snap.log_end_offset == i + 1
            part = (first if i % 2 else second).partition("t", 0)
            assert not part.last_recovery[0].segments_recovered
        assert _records(first) == [(i, b"r%d" % i) for i in range(12)]
    finally:
        first.close()
        second.close()
        state.close()

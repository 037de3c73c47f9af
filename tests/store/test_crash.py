"""kill -9 at random moments: every acknowledged record survives, at the offset it was acknowledged at.

Method: a child process (`sys.executable -c PRODUCER`) produces numbered records with acks and
prints each acknowledged batch (base offset, run, first record number, count) to stdout, flushed,
before it sends more; the parent SIGKILLs it at a random moment (while it starts up, recovers the
previous crash, appends, rolls a segment or replicates), many times in a row on the same store.
Afterwards the log must hold every acknowledged record at exactly its acknowledged offset, offsets
contiguous from 0, every record well-formed and sent exactly once (no duplicate, no garbage).
With RF=3 acks=all over three log directories, every in-sync replica must hold every acknowledged
record, and after the next writer reconciles, the replicas are byte-identical.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog.store.format import partition_dir_name
from klog.store.log import PartitionLog
from tests.conftest import REPO

PRODUCER = r"""
import random, sys
import klog

data, topic, acks, run = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rng = random.Random(run)
acked = 0

def on_ack(topic, partition, base, count):
    global acked
    sys.stdout.write(f"{base} {run} {acked} {count}\n")
    sys.stdout.flush()  # printed only after the store acknowledged the batch
    acked += count

store = klog.open(data)
print("ready", flush=True)
with store.producer(acks=acks, batch_size=rng.choice([300, 3000, 30000]), on_ack=on_ack) as p:
    every = rng.randint(1, 60)
    for i in range(10**7):
        p.send(topic, b"r%03d-%06d-" % (run, i) + b"x" * (i % 50), partition=0)
        if i % every == every - 1:
            p.flush()
"""

VALUE = re.compile(rb"r(\d{3})-(\d{6})-(x*)\Z")


def value_of(run: int, i: int) -> bytes:
    return b"r%03d-%06d-" % (run, i) + b"x" * (i % 50)


def crash_many_times(data: str, topic: str, acks: str, runs: int, seed: int) -> dict[int, bytes]:
    """Start and SIGKILL the producer `runs` times; returns offset -> value of every acknowledged record."""
    rng = random.Random(seed)
    env = {**os.environ, "PYTHONPATH": REPO}
    acked: dict[int, bytes] = {}
    for run in range(runs):
        child = subprocess.Popen([sys.executable, "-c", PRODUCER, data, topic, acks, str(run)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        if rng.random() < 0.85:  # mostly mid-append; sometimes during start-up and recovery
            assert child.stdout.readline() == b"ready\n", child.stderr.read()
            time.sleep(rng.uniform(0.0, 0.25))
        else:
            time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, err.decode()
        for line in out.decode().splitlines():
            if line == "ready":
                continue
            base, r, first, count = map(int, line.split())
            for j in range(count):
                assert base + j not in acked, f"offset {base + j} acknowledged twice"
                acked[base + j] = value_of(r, first + j)
    assert len(acked) > 500, "the kills came too early to test anything"
    return acked


def check_log(values: list[tuple[int, bytes]], acked: dict[int, bytes]) -> None:
    offsets = [o for o, _ in values]
    assert offsets == list(range(len(values))), "offsets are not contiguous from 0"
    seen: dict[int, int] = {}
    for offset, value in values:
        m = VALUE.match(value)
        assert m is not None and value == value_of(int(m[1]), int(m[2])), f"garbage at offset {offset}: {value!r}"
        run, i = int(m[1]), int(m[2])
        assert seen.get(run, -1) < i, f"record {run}/{i} duplicated or out of order at offset {offset}"
        seen[run] = i
    by_offset = dict(values)
    missing = [o for o, v in acked.items() if by_offset.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or moved, first at offset {min(missing)}"


@pytest.mark.slow
def test_sigkilled_producer_rf1_loses_no_acknowledged_record(tmp_path, replay_seed):
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("c", configs={"segment.bytes": "40000", "index.interval.bytes": "1000"})
    acked = crash_many_times(data, "c", "1", runs=40, seed=replay_seed(1))
    with klog.open(data) as store:
        with store.producer() as p:  # the next writer recovers the tail and goes on
            p.send("c", value_of(999, 0), partition=0)
        values = [(r.offset, r.value) for r in store.consumer("c")]
    check_log(values, acked)
    assert values[-1][1] == value_of(999, 0)


def replica_image(directory: str) -> list[tuple[str, bytes]]:
    """Each segment file's name and bytes (followers roll exactly where their leader does)."""
    out = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        with open(os.path.join(directory, name), "rb") as f:
            out.append((name, f.read()))
    return out


@pytest.mark.slow
def test_sigkilled_producer_rf3_acks_all_every_isr_replica_has_every_acknowledged_record(tmp_path, replay_seed):
    data = str(tmp_path / "data")
    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    with klog.Store(data, log_dirs=dirs) as store:
        store.create_topic("c3", replication_factor=3,
                           configs={"segment.bytes": "40000", "min.insync.replicas": "2"})
    acked = crash_many_times(data, "c3", "all", runs=30, seed=replay_seed(3))
    with klog.open(data) as store:
        meta = store.topics.get("c3").partitions[0]
        assert sorted(meta.isr) == [0, 1, 2], "no directory failed, so no replica may leave the ISR"
        hw = store.partition("c3", 0).high_watermark()
        folders = [os.path.join(dirs[d], partition_dir_name("c3", 0)) for d in meta.isr]
        for folder in folders:  # recovery of each in-sync replica alone keeps every acked record
            log = PartitionLog(folder)
            log.open_for_write()
            values = [(r[0], r[3]) for fb in log.read(0, hw, 1 << 30) for r in fb.records()]
            log.close()
            check_log(values, acked)
        with store.producer(acks="all") as p:  # the next writer reconciles the replicas
            p.send("c3", value_of(999, 0), partition=0)
        values = [(r.offset, r.value) for r in store.consumer("c3")]
        check_log(values, acked)
        assert values[-1][1] == value_of(999, 0)
        images = [replica_image(f) for f in folders]
        assert images[0] == images[1] == images[2], "replicas differ after reconciliation"

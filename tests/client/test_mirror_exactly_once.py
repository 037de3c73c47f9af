"""`klog mirror --exactly-once`: copied records and checkpoints commit together.

Goal: however often the mirror is killed (SIGKILL at random instants) and restarted, DEST's
read_committed readers end up with each source record exactly once, in source order per partition.
Method: a local source store, `klog mirror SRC DEST --exactly-once` as a real process killed and
rerun until it finishes, then DEST read with klog's read_committed consumer.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

import klog
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _mirror(src: str, dest: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "klog", "mirror", src, dest, "events", "--exactly-once"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _dest_end(dest: str) -> int:
    from klog.errors import KlogError

    if not os.path.exists(os.path.join(dest, "klog.json")):
        return 0
    try:
        with klog.open(dest) as d:
            if not d.has_topic("events"):
                return 0
            return sum(d.partition("events", p).high_watermark() for p in range(3))
    except KlogError:  # the mirror is creating the store right now
        return 0


def test_kills_leave_each_record_exactly_once(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    total = 150_000
    with klog.open(src) as store:
        store.create_topic("events", 3)
        with store.producer() as producer:
            producer.send_keyed("events", [(b"k%d" % (i % 50), b"v%d" % i) for i in range(total)])
    env = {**os.environ, "PYTHONPATH": REPO}
    rng = random.Random(7)
    kills = 0
    for _ in range(40):  # bounded: each run copies some, then is killed mid-copy; the last one finishes
        before = _dest_end(dest)
        proc = _mirror(src, dest, env)
        if kills < 5:
            grow = rng.randrange(5_000, 60_000)
            limit = time.monotonic() + 60
            while proc.poll() is None and _dest_end(dest) < before + grow and time.monotonic() < limit:
                time.sleep(0.01)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                kills += 1
                continue
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        if kills >= 5:
            break
    assert kills >= 3
    with klog.open(src) as s, klog.open(dest) as d:
        for p in range(3):
            want = [(r.key, r.value) for r in s.consumer("events", partitions=[p])]
            got = [(r.key, r.value) for r in d.consumer("events", partitions=[p], isolation_level="read_committed")]
            assert len(got) == len(want) and got == want, f"partition {p}: {len(got)} copies of {len(want)} records"

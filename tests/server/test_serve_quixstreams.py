"""quixstreams' exactly-once processing against `klog serve`, killed and restarted.

Goal: a stream framework's exactly-once mode works end to end on klog serve: quixstreams with
processing_guarantee="exactly-once" counts records per key (state in RocksDB, its changelog topic
and the output written in the app's transactions with the input offsets). SIGKILLed at random
points and restarted (each run with a fresh local state directory, so the state comes back from
the changelog), the read_committed output equals a run without kills: every (key, count) exactly
once, counts 1..n per key in input order. Method: the app (tests/server/quix_counter.py) as a real
process; the output read by confluent-kafka's read_committed consumer.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import klog
from tests.conftest import REPO
from tests.server.test_serve_offset_expiry import set_defaults
from tests.server.test_serve_transactions import _read_all

pytest.importorskip("quixstreams")
pytestmark = pytest.mark.slow

RECORDS, KEYS, KILLS = 300, 7, 2
APP = os.path.join(os.path.dirname(__file__), "quix_counter.py")


def _output_end(data_dir: str) -> int:
    """Records (and markers) written to `counts` so far, committed or not."""
    with klog.open(data_dir) as s:
        if not s.has_topic("counts"):
            return 0
        return sum(s.partition("counts", p).high_watermark() for p in range(s.partition_count("counts")))


def test_exactly_once_counts_survive_kills(data_dir, tmp_path):
    from klog.server import Server

    words = [(b"k%d" % (i % KEYS), b"w%d" % i) for i in range(RECORDS)]
    with klog.open(data_dir) as s:
        s.create_topic("words", 2)
    # short sessions and a frequent timeout pass, so a killed run is out of the way in seconds
    set_defaults(data_dir, group_initial_rebalance_delay_ms="0", group_min_session_timeout_ms="1000",
                 transaction_abort_timed_out_transaction_cleanup_interval_ms="200")
    env = {**os.environ, "PYTHONPATH": REPO}
    rng = random.Random(27)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        with klog.open(data_dir) as s, s.producer() as p:
            p.send_keyed("words", words[:RECORDS // 2])
        for run in range(KILLS):
            proc = subprocess.Popen([sys.executable, APP, bootstrap, str(tmp_path / f"state-{run}"), "30"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                before, deadline = _output_end(data_dir), time.monotonic() + 60
                grow = rng.randrange(10, 60)
                while _output_end(data_dir) < before + grow and time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.05)
                time.sleep(rng.uniform(0, 0.3))
            finally:
                proc.send_signal(signal.SIGKILL)
                stderr = proc.communicate(timeout=10)[1]
            assert proc.returncode == -signal.SIGKILL, stderr.decode()[-2000:]  # killed mid-way, not failed
            print(f"run {run}: killed after the output grew {before} -> {_output_end(data_dir)}")  # shown with -s
            if run == 0:
                with klog.open(data_dir) as s, s.producer() as p:
                    p.send_keyed("words", words[RECORDS // 2:])  # the rest arrives while it runs and dies
        # the last run, from a fresh state directory too, until 2 s pass without input
        r = subprocess.run([sys.executable, APP, bootstrap, str(tmp_path / "state-last"), "2"], env=env,
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        partitions = klog.open(data_dir).partition_count("counts")
        got = [json.loads(v) for v in _read_all(bootstrap, "counts", partitions, "read_committed",
                                                 expect=RECORDS, limit_s=30)]
    # a run without kills counts each key's records 1, 2, ... in input order (one partition per key)
    expected = []
    for k in range(KEYS):
        mine = [w.decode() for key, w in words if key == b"k%d" % k]
        expected += [{"word": w, "count": n} for n, w in enumerate(mine, 1)]
    key_of = {w.decode(): key for key, w in words}
    assert len(got) == RECORDS, f"{len(got)} outputs for {RECORDS} records"
    assert sorted(got, key=lambda d: (key_of[d["word"]], d["count"])) == \
        sorted(expected, key=lambda d: (key_of[d["word"]], d["count"]))

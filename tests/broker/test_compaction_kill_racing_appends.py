"""A compaction SIGKILLed while another process appends to the partition (klog/store/cleaner.py off
the lock): the cleaning is slowed (log.cleaner.io.max.bytes.per.second) so that a producer process
appends and rolls segments during its unlocked part, then it is killed at a step of its own (the
unlocked rewrite, or the swap under the lock the producer waits for). Every record the producer
had acknowledged is read back, the compacted part holds only original records and every key's
latest, and the next compaction reaches the model and leaves no temporary file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import klog
from klog.broker import lifecycle
from klog.broker.verify import verify_store
from klog.store.faults import CRASH_ENV
from tests.broker.test_compaction import COMPACTED, T0, clock_at, read, strip_headers, write
from tests.conftest import REPO

NOW = T0 + 10**6

PRODUCER = """
import os, sys, time, klog
stop = sys.argv[2]
with klog.open(sys.argv[1]) as store, store.producer() as p:
    for i in range(3000):
        if os.path.exists(stop):
            break
        sent = p.send("c", b"w%d" % i, key=b"p%d" % i, partition=0, timestamp=T0 + 10**5 + i)
        p.flush()
        print(sent.offset, i, time.monotonic(), flush=True)  # acknowledged
        time.sleep(0.002)
"""

CLEANER = """
import sys, time, klog
from klog.broker import lifecycle
from klog.store.throttle import Throttler
with klog.open(sys.argv[1]) as store:
    print(time.monotonic(), flush=True)  # the cleaning begins
    lifecycle.compact(store, "c", clock=lambda: NOW / 1000, throttler=Throttler(40000, check_interval_ms=0))
print("finished")
"""


def _lines(proc: subprocess.Popen, n: int, timeout: float = 20) -> list[bytes]:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out.append(line)
    assert len(out) == n, (out, proc.poll())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("step", ["cleaned-partial", "cleaned-written", "swap-renamed", "index-replaced"])
def test_a_compaction_killed_while_another_process_appends_loses_no_acknowledged_record(tmp_path, step):
    data = str(tmp_path / "data")
    stop = str(tmp_path / "stop")
    with klog.open(data) as store:
        store.create_topic("c", partitions=1, configs=COMPACTED)
        written = write(store, "c", [(b"k%d" % (i % 6), b"v%03d" % i) for i in range(150)], per_batch=2)
    env = {**os.environ, "PYTHONPATH": REPO}
    errors = open(tmp_path / "producer.err", "w+b")  # noqa: SIM115 - closed below
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER.replace("T0", str(T0)), data, stop], env=env,
                                stdout=subprocess.PIPE, stderr=errors)
    try:
        acked = _lines(producer, 5)
        cleaner = subprocess.run([sys.executable, "-c", CLEANER.replace("NOW", str(NOW)), data],
                                 env={**env, CRASH_ENV: step}, capture_output=True, timeout=60)
        assert cleaner.returncode == -9, (cleaner.returncode, cleaner.stderr.decode()[-500:])
        killed = time.monotonic()
        began = float(cleaner.stdout.split()[0])
        acked += _lines(producer, 20)  # the producer goes on past the killed cleaner (and its lock)
        open(stop, "w").close()
        acked += producer.stdout.read().splitlines()  # (through its buffer, which readline filled)
        assert producer.wait(30) == 0, (tmp_path / "producer.err").read_text()[-500:]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        producer.stdout.close()
        errors.close()
    acks = [line.split() for line in acked]
    acked_records = {int(o): (b"p%d" % int(i), b"w%d" % int(i)) for o, i, _ in acks}
    assert len(acked_records) >= 25
    assert any(began < float(t) < killed for _, _, t in acks), "no append raced the cleaning"
    original = {w[0]: (w[1], w[2]) for w in written}
    latest = {w[1]: w[0] for w in written}
    with klog.open(data) as store:
        for attempt in range(2):  # as the kill left it, then compacted again to the end
            seen = {r[0]: (r[1], r[2]) for r in strip_headers(read(store, "c"))}
            assert all(seen[o] == kv for o, kv in acked_records.items()), "an acknowledged record is lost"
            assert all(original[o] == kv for o, kv in seen.items() if o in original), "a record changed"
            assert set(latest.values()) <= set(seen)  # every original key's latest value
            assert set(seen) <= set(original) | set(acked_records)
            if attempt == 0:
                [result] = lifecycle.compact(store, "c", clock=clock_at(NOW))
                assert result.compacted
        assert all(r["ok"] for r in verify_store(store))
        folder = store.partition("c", 0).leader.directory
        assert [n for n in os.listdir(folder) if n.endswith((".cleaning", ".cleaned", ".swap"))] == []

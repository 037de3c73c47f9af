"""Many processes on one partition at once: every record exactly once, readers never see a torn batch.

Method: two `klog produce` processes (small batches, one compressing) and two Python producers
(`sys.executable -c`, flushing at odd intervals) append distinct numbered records to partition 0
at the same time, while `klog consume -f` in another process and a Consumer in this one read
along. Afterwards the log must hold each record exactly once, offsets contiguous, each writer's
records in its own order; everything a reader printed while the writers ran must be exactly
what the log holds at those offsets (no partial batch, no garbage, no gap).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest

import klog
from tests.conftest import REPO

PER_WRITER = 15_000
RECORD = re.compile(r"(cli|py)(\d)-(\d{6})\Z")

PY_WRITER = r"""
import os
import sys
import time
import klog

data, name, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:  # start with the others
    time.sleep(0.005)
with klog.open(data) as store, store.producer(batch_size=1500 + 700 * int(name[-1])) as p:
    for i in range(n):
        p.send("c", b"%s-%06d" % (name.encode(), i), partition=0)
        if i % 37 == 36:
            p.flush()
"""


@pytest.mark.slow
def test_four_writers_and_two_readers_on_one_partition(tmp_path):
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("c", configs={"segment.bytes": "100000", "index.interval.bytes": "512"})
    env = {**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": data}
    total = 4 * PER_WRITER

    reader = subprocess.Popen([sys.executable, "-m", "klog", "consume", "c", "-f", "--format", r"%o %s\n"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    followed: list[str] = []

    def follow() -> None:
        assert reader.stdout is not None
        for line in reader.stdout:
            followed.append(line.decode().rstrip("\n"))
            if len(followed) >= total:
                return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()

    polled: list[tuple[int, bytes]] = []
    writers_done = threading.Event()

    def poll() -> None:  # the Python API reading along in this process
        with klog.open(data) as store:
            consumer = store.consumer("c", follow=True)
            while len(polled) < total:
                got = consumer.poll()
                polled.extend((r.offset, r.value) for r in got)
                if not got:
                    if writers_done.is_set():
                        break
                    time.sleep(0.005)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()

    # every writer starts, then all are let go at once (on a loaded machine, writers started one
    # after another could each finish before the next began, and nothing would be tested)
    go = tmp_path / "go"
    writers, feeds = [], []
    for w in range(2):
        args = [sys.executable, "-m", "klog", "produce", "c", "-p", "0", "--batch-size", str(900 + 1300 * w)]
        if w:
            args += ["-z", "zstd"]
        cli = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        writers.append(cli)
        feeds.append((cli, b"".join(b"cli%d-%06d\n" % (w, i) for i in range(PER_WRITER))))
        writers.append(subprocess.Popen([sys.executable, "-c", PY_WRITER, data, f"py{w}", str(PER_WRITER), str(go)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
    go.touch()
    outcomes: dict[int, tuple[int, bytes]] = {}

    def run(i: int, proc: subprocess.Popen, data_in: bytes | None) -> None:
        _, err = proc.communicate(input=data_in, timeout=120)
        outcomes[i] = (proc.returncode, err)

    inputs = dict(feeds)
    runners = [threading.Thread(target=run, args=(i, proc, inputs.get(proc)), daemon=True)
               for i, proc in enumerate(writers)]
    for t in runners:
        t.start()
    for t in runners:
        t.join(timeout=150)
    assert len(outcomes) == len(writers), "a writer did not finish"
    for code, err in outcomes.values():
        assert code == 0, err.decode()
    polled_while_writing = len(polled)
    writers_done.set()
    follower.join(timeout=60)
    poller.join(timeout=60)
    reader.kill()
    reader.communicate()

    with klog.open(data) as store:
        final = [(r.offset, r.value.decode()) for r in store.consumer("c")]
    assert [o for o, _ in final] == list(range(total)), "offsets are not contiguous"
    last: dict[str, int] = {}
    for offset, value in final:
        m = RECORD.match(value)
        assert m, f"garbage at offset {offset}: {value!r}"
        writer, i = m[1] + m[2], int(m[3])
        assert last.get(writer, -1) + 1 == i, f"{writer} record {i} missing, duplicated or reordered at {offset}"
        last[writer] = i
    assert sorted(last.values()) == [PER_WRITER - 1] * 4
    by_offset = dict(final)
    interleaved = sum(1 for a, b in zip(final, final[1:], strict=False) if a[1][:4] != b[1][:4])
    assert interleaved > 8, "the writers did not actually run at the same time"

    assert len(followed) == total, f"klog consume -f printed {len(followed)} of {total} records"
    for line in followed:
        offset, value = line.split(" ", 1)
        assert by_offset[int(offset)] == value, f"consume -f printed {line!r}"
    assert [int(x.split(" ", 1)[0]) for x in followed] == list(range(total))
    assert 0 < polled_while_writing, "the Consumer did not read while the writers ran"
    assert [o for o, _ in polled] == list(range(total))
    assert all(by_offset[o] == v.decode() for o, v in polled)

"""Consumer groups: throughput of `klog consume --group` against plain `klog consume`, and how long a
rebalance takes after a clean join and a clean leave (a benchmark, not a test: prints README figures).

    python benchmarks/bench_groups.py [--records N] [--partitions P]

Workload: N 100-byte values spread over P partitions (appended in 10,000-record batches). Both runs
read everything to the end and exit; the group run commits (after flushing stdout) at least once a
second and at the end, and its committed offsets are checked to cover every record.
Rebalance: one `klog consume -G g -f` process holds 6 partitions; a second joins (measured from its
join, as LMDB records it, to both holding three), then the first leaves on SIGTERM (measured from the
signal to the second holding all six).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import klog  # noqa: E402
from klog.meta.groups import GroupsMeta  # noqa: E402
from klog.store import codec  # noqa: E402

PER_BATCH = 10_000
ROUNDS = 5


def fill(data_dir: str, n: int, partitions: int) -> None:
    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=partitions)
        now = int(time.time() * 1000)
        per_partition = n // partitions
        for p in range(partitions):
            part = store.partition("t", p)
            with part.lock:
                part.open_for_write()
                for start in range(0, per_partition, PER_BATCH):
                    count = min(PER_BATCH, per_partition - start)
                    part.append_batch(codec.encode_batch([(None, b"%099d" % (start + i), (), now)
                                                          for i in range(count)]))
                part.publish()


def timed(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "klog", *args], stdout=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - start


def bench_throughput(n: int, partitions: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        fill(d, n, partitions)
        env = {**os.environ, "KLOG_DATA_DIR": d, "PYTHONPATH": REPO}
        # alternate the two so both see the same load on a shared machine; best of ROUNDS each
        plain_s, group_s = [], []
        for i in range(ROUNDS):
            plain_s.append(timed(["consume", "t"], env))
            group_s.append(timed(["consume", "t", "-G", f"bench-{i}"], env))
        plain, group = min(plain_s), min(group_s)
        with klog.open(d) as store:
            committed = GroupsMeta(store.meta).committed("bench-0")
            assert sum(c.offset for c in committed.values()) == n, committed
        print(f"{partitions} partition(s), {n:,} records: plain consume {n / plain / 1e6:.2f} M records/s, "
              f"consume --group {n / group / 1e6:.2f} M records/s ({plain / group:.0%} of plain)")


def _holdings(store) -> dict[int, int]:
    snap = GroupsMeta(store.meta).snapshot("g")
    if snap.doc is None or snap.state != "Stable":
        return {}
    return {m.pid: len(snap.doc.owned_by(m.member_id)) for m in snap.live}


def _wait(store, condition, limit_s: float = 30) -> float:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition(_holdings(store)):
            return time.time()
        time.sleep(0.005)
    raise SystemExit("rebalance did not finish in 30 s")


def bench_rebalance() -> None:
    with tempfile.TemporaryDirectory() as d:
        fill(d, 6_000, 6)
        env = {**os.environ, "KLOG_DATA_DIR": d, "PYTHONPATH": REPO}
        cmd = [sys.executable, "-m", "klog", "consume", "t", "-G", "g", "-f"]
        first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
        with klog.open(d) as store:
            _wait(store, lambda h: h == {first.pid: 6})
            second = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
            done = _wait(store, lambda h: h == {first.pid: 3, second.pid: 3})
            joined_ms = [m.joined_ms for m in GroupsMeta(store.meta).snapshot("g").live if m.pid == second.pid][0]
            join_s = done - joined_ms / 1000
            left = time.time()
            first.send_signal(signal.SIGTERM)
            done = _wait(store, lambda h: h == {second.pid: 6})
            leave_s = done - left
        first.wait()
        second.send_signal(signal.SIGTERM)
        second.wait()
    print(f"rebalance after a clean join: {join_s * 1000:.0f} ms; after a clean leave: {leave_s * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    bench_throughput(args.records, args.partitions)
    bench_rebalance()


if __name__ == "__main__":
    main()

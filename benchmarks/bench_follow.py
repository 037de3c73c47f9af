"""`klog consume -f` latency and idle cost (a benchmark, not a test: prints figures for the README).

    python benchmarks/bench_follow.py [--records N]

Latency: a `klog consume -f` process reads a topic on a pipe while this process appends one record at a
time at random intervals (0-50 ms) through the Python producer (acks=all, fsync per batch). Each value
carries the wall-clock time just before the send; the reader's line is timestamped when it arrives here,
so the figure is append + fsync + poll + decode + print + pipe, end to end. Target: p99 <= 100 ms.
Idle: CPU time the same follower burns over 5 s with nothing to read (it must not spin a core).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import klog  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def start_follower(data_dir: str, topic: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO, KLOG_DATA_DIR=data_dir)
    return subprocess.Popen([sys.executable, "-m", "klog", "consume", topic, "-f", "-o", "end"],
                            stdout=subprocess.PIPE, env=env)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def bench_latency(n: int) -> None:
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("follow")
        reader = start_follower(d, "follow")
        arrivals: list[tuple[float, float]] = []

        def collect() -> None:
            for line in reader.stdout:
                arrivals.append((float(line), time.time()))

        thread = threading.Thread(target=collect, daemon=True)
        thread.start()
        time.sleep(1.5)  # let the follower start and reach the end
        with store.producer(acks="all") as producer:
            for _ in range(n):
                time.sleep(random.uniform(0, 0.05))
                producer.send("follow", repr(time.time()).encode()).get()
        deadline = time.time() + 5
        while len(arrivals) < n and time.time() < deadline:
            time.sleep(0.05)
        idle_before = cpu_seconds(reader.pid)
        time.sleep(5)
        idle_cpu = cpu_seconds(reader.pid) - idle_before
        reader.terminate()
        reader.wait()
        latencies = [(got - sent) * 1000 for sent, got in arrivals]
        print(f"follow latency over {len(latencies)}/{n} records: p50 {percentile(latencies, 50):.1f} ms, "
              f"p99 {percentile(latencies, 99):.1f} ms, max {max(latencies):.1f} ms")
        print(f"idle follower: {idle_cpu / 5 * 100:.1f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500)
    args = parser.parse_args()
    bench_latency(args.records)


if __name__ == "__main__":
    main()

"""`klog consume -f` latency end to end, and what an idle follower costs.

A `klog consume -f` process reads a topic on a pipe while this process appends one record at a time
at random intervals (0-50 ms) through the Python producer (acks=all, fsync per batch). Each value
carries the wall-clock time just before the send; the reader's line is timestamped when it arrives
here: append + fsync + poll + decode + print + pipe. Idle: the CPU the same follower burns over 5 s
with nothing to read (it must not spin a core).
"""

from __future__ import annotations

import random
import subprocess
import threading
import time

from harness import Bench, percentile, proc_cpu_s

import klog


def run(bench: Bench) -> None:
    n = bench.size(500, 20)
    idle_s = 5 if not bench.smoke else 0.5
    with klog.open(bench.tmp) as store:
        store.create_topic("follow")
        reader = subprocess.Popen(bench.klog("consume", "follow", "-f", "-o", "end"), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL,
                                  env={**bench.env, "KLOG_DATA_DIR": bench.tmp}, cwd=bench.tmp)
        arrivals: list[tuple[float, float]] = []

        def collect() -> None:
            for line in reader.stdout:
                arrivals.append((float(line), time.time()))

        threading.Thread(target=collect, daemon=True).start()
        time.sleep(1.5)  # let the follower start and reach the end
        try:
            with store.producer(acks="all") as producer:
                for _ in range(n):
                    time.sleep(random.uniform(0, 0.05))
                    producer.send("follow", repr(time.time()).encode()).get()
            deadline = time.time() + 10
            while len(arrivals) < n and time.time() < deadline:
                time.sleep(0.05)
            idle_before = proc_cpu_s(reader.pid)
            time.sleep(idle_s)
            idle_cpu = proc_cpu_s(reader.pid) - idle_before
        finally:
            reader.terminate()
            reader.wait()
    latencies = [(got - sent) * 1000 for sent, got in arrivals] or [float("nan")]
    bench.row(f"consume -f latency, {len(arrivals)}/{n} records",
              f"p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms")
    bench.row("idle consume -f", f"{idle_cpu / idle_s * 100:.1f}% of one core")

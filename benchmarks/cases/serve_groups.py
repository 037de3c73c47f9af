"""Consumer groups over the Kafka protocol (`klog serve` as group coordinator) beside klog's own
group consumers, measured in the same run (a benchmark, not a test: prints README figures).

    python benchmarks/bench_serve_groups.py [--rounds N]

- Rebalance after a clean leave: two members share 6 partitions; one closes; measured from its
  close() to the other holding all six. Kafka side: confluent-kafka consumers (eager `range`,
  heartbeat.interval.ms=100, so the survivor hears of the rebalance within 0.1 s) against a `klog
  serve` subprocess. Peer: two klog GroupConsumers in this process (LMDB-coordinated).
- Synchronous commit latency: one member commits one partition's offset N times, waiting each time.
  Kafka side: confluent Consumer.commit(asynchronous=False) (an OffsetCommit round trip and an LMDB
  write in the server). Peer: GroupConsumer.commit() (an LMDB write in this process).
Medians of alternated rounds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

from harness import REPO, Bench

import klog  # noqa: E402

PARTITIONS = 6
COMMITS = 300


def start_server(data_dir: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
    return proc, f"127.0.0.1:{port}"


def kafka_consumer(bootstrap: str, group: str, owned: set):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 100, "enable.auto.commit": False, "auto.offset.reset": "earliest"})

    def on_assign(consumer, parts) -> None:
        owned.clear()
        owned.update(p.partition for p in parts)

    def on_revoke(consumer, parts) -> None:
        owned.clear()

    c.subscribe(["t"], on_assign=on_assign, on_revoke=on_revoke)
    return c


def until(cond, poll, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        poll()


def kafka_rebalance(bootstrap: str, group: str) -> float:
    a_owned: set = set()
    b_owned: set = set()
    a = kafka_consumer(bootstrap, group, a_owned)
    b = kafka_consumer(bootstrap, group, b_owned)
    try:
        until(lambda: a_owned and b_owned and len(a_owned | b_owned) == PARTITIONS,
              lambda: (a.poll(0.01), b.poll(0.01)))
        start = time.perf_counter()
        b.close()
        until(lambda: len(a_owned) == PARTITIONS, lambda: a.poll(0.005))
        return time.perf_counter() - start
    finally:
        a.close()


def klog_rebalance(store, group: str) -> float:
    a = store.group_consumer(group, "t", follow=True, session_timeout_ms=6000)
    b = store.group_consumer(group, "t", follow=True, session_timeout_ms=6000)
    try:
        until(lambda: a.assignment() and b.assignment() and len(set(a.assignment()) | set(b.assignment()))
              == PARTITIONS, lambda: (a.poll(5), b.poll(5)))
        start = time.perf_counter()
        b.close()
        until(lambda: len(a.assignment()) == PARTITIONS, lambda: a.poll(5))
        return time.perf_counter() - start
    finally:
        a.close()


def kafka_commits(bootstrap: str, group: str) -> list[float]:
    from confluent_kafka import TopicPartition

    owned: set = set()
    c = kafka_consumer(bootstrap, group, owned)
    try:
        until(lambda: len(owned) == PARTITIONS, lambda: c.poll(0.01))
        out = []
        for i in range(COMMITS):
            start = time.perf_counter()
            c.commit(offsets=[TopicPartition("t", 0, i + 1)], asynchronous=False)
            out.append(time.perf_counter() - start)
        return out
    finally:
        c.close()


def klog_commits(store, group: str) -> list[float]:
    c = store.group_consumer(group, "t", follow=True)
    try:
        until(lambda: len(c.assignment()) == PARTITIONS, lambda: c.poll(5))
        out = []
        for i in range(COMMITS):
            start = time.perf_counter()
            c.commit({("t", 0): i + 1})
            out.append(time.perf_counter() - start)
        return out
    finally:
        c.close()


def run(bench: Bench) -> None:
    global COMMITS
    COMMITS = bench.size(300, 20)
    args = SimpleNamespace(rounds=bench.rounds(5))
    with tempfile.TemporaryDirectory() as d:
        with klog.open(d) as store:
            store.create_topic("t", partitions=PARTITIONS)
        proc, bootstrap = start_server(d)
        try:
            with klog.open(d) as store:
                kafka_times, klog_times, kafka_lat, klog_lat = [], [], [], []
                for r in range(args.rounds):  # alternated: each round runs both sides
                    kafka_times.append(kafka_rebalance(bootstrap, f"kafka-rebalance-{r}"))
                    klog_times.append(klog_rebalance(store, f"klog-rebalance-{r}"))
                    kafka_lat.extend(kafka_commits(bootstrap, f"kafka-commit-{r}"))
                    klog_lat.extend(klog_commits(store, f"klog-commit-{r}"))
        finally:
            proc.terminate()
            proc.wait(30)
            proc.stderr.close()
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    p99 = lambda xs: sorted(xs)[int(len(xs) * 0.99)] * 1000  # noqa: E731
    bench.line(f"rebalance after a clean leave, median of {args.rounds}: confluent-kafka via klog serve "
          f"{ms(kafka_times):.0f} ms, klog GroupConsumer {ms(klog_times):.0f} ms")
    bench.line(f"synchronous commit, {len(kafka_lat)} each: confluent-kafka via klog serve p50 {ms(kafka_lat):.2f} ms "
          f"p99 {p99(kafka_lat):.2f} ms; klog GroupConsumer p50 {ms(klog_lat):.2f} ms p99 {p99(klog_lat):.2f} ms")


"""Replication cost: RF=3 acks=all on three log directories vs RF=1 (a benchmark, not a test).

Workload: 100-byte values, ~1 MiB batches, one partition, default flush policy (fsync of every
replica per batch). Two layers, each RF=1 vs RF=3 (target: RF=3 >= 60% of RF=1):
- store path: ReplicaManager.append of already-encoded batches (reconcile, leader append, copy
  of the same bytes to each follower, publish): replication's cost with nothing to hide it;
- the store path without fsync: the CPU cost of replication alone (reconcile, copies);
- producer: Producer.send_values + flush (what `klog produce` does), encoding included.
The three directories share one disk here, so RF=3 writes and fsyncs three times the bytes on
one device; with fsync per batch the store path is bound by that device, not by klog.
"""

from __future__ import annotations

import os
import time

from harness import Bench, Measure, rate, ratio

import klog
from klog.broker.replication import ReplicaManager
from klog.store import codec

PER_BATCH = 9_000  # ~1 MiB of 100-byte values


def open_store(root: str, rf: int, fsync: bool = True):
    dirs = [os.path.join(root, f"disk{i}") for i in range(3)]
    store = klog.Store(os.path.join(root, "data"), log_dirs=dirs)
    store.create_topic("bench", replication_factor=rf, configs={} if fsync else {"flush.messages": str(2**62)})
    return store


def store_path(root: str, n: int, rf: int, fsync: bool = True) -> float:
    if True:
        store = open_store(root, rf, fsync)
        now = int(time.time() * 1000)
        batch = codec.encode_batch([(None, b"x" * 100, (), now)] * PER_BATCH)
        manager = ReplicaManager(store)
        start = time.perf_counter()
        for _ in range(n // PER_BATCH):
            manager.append("bench", 0, batch, "all")
        seconds = time.perf_counter() - start
        assert store.partition("bench", 0).high_watermark() == n // PER_BATCH * PER_BATCH
        store.close()
        return n // PER_BATCH * PER_BATCH / seconds


def producer_path(root: str, n: int, rf: int, acks: str = "all") -> float:
    if True:
        store = open_store(root, rf)
        values = [b"%099d" % i for i in range(n)]
        start = time.perf_counter()
        with store.producer(acks=acks) as producer:
            for i in range(0, n, 100_000):
                producer.send_values("bench", values[i:i + 100_000], partition=0)
        seconds = time.perf_counter() - start
        assert store.partition("bench", 0).high_watermark() == n
        store.close()
        return n / seconds


def run(bench: Bench) -> None:
    n = bench.size(1_000_000, 18_000)
    rounds = 3

    def no_fsync(root: str, n: int, rf: int) -> float:
        return store_path(root, n, rf, fsync=False)

    def per_second(fn, root: str, *args) -> Measure:  # noqa: ANN001 - a rate as a 'time' for the medians
        return Measure(1 / fn(root, n, *args), 0)

    for i, (name, fn) in enumerate((("store path (ReplicaManager.append)", store_path),
                                    ("store path, no fsync (flush.messages=2^62)", no_fsync),
                                    ("producer (send_values)", producer_path))):
        runs = bench.alternate({f"rf{rf}": (lambda r, rf=rf, fn=fn, i=i: per_second(fn, f"{bench.tmp}/{i}-{rf}-{r}",
                                                                                      rf))
                                for rf in (1, 3)}, rounds=rounds)
        rf1, rf3 = 1 / runs["rf1"].wall, 1 / runs["rf3"].wall
        bench.row(f"RF=3 acks=all, {name}, {n:,} records of 100 B", rate(rf3, 1),
                  ratio(rf3, rf1, "RF=1") + f" ({rate(rf1, 1)})")
    by_acks = bench.alternate({acks: (lambda r, acks=acks: per_second(producer_path, f"{bench.tmp}/a{acks}-{r}", 3,
                                                                      acks))
                               for acks in ("all", "1", "0")}, rounds=rounds)
    bench.row("RF=3 producer by acks", ", ".join(f"acks={a} {rate(1 / s.wall, 1)}" for a, s in by_acks.items()))

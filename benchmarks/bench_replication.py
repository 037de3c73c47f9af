"""Replication cost: RF=3 acks=all on three log directories vs RF=1 (a benchmark, not a test).

    python benchmarks/bench_replication.py [--records N] [--repeat K]

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

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import klog  # noqa: E402
from klog.broker.replication import ReplicaManager  # noqa: E402
from klog.store import codec  # noqa: E402

PER_BATCH = 9_000  # ~1 MiB of 100-byte values


def open_store(root: str, rf: int, fsync: bool = True):
    dirs = [os.path.join(root, f"disk{i}") for i in range(3)]
    store = klog.Store(os.path.join(root, "data"), log_dirs=dirs)
    store.create_topic("bench", replication_factor=rf, configs={} if fsync else {"flush.messages": str(2**62)})
    return store


def store_path(n: int, rf: int, fsync: bool = True) -> float:
    with tempfile.TemporaryDirectory() as root:
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


def producer_path(n: int, rf: int, acks: str = "all") -> float:
    with tempfile.TemporaryDirectory() as root:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of K runs")
    args = parser.parse_args()
    def no_fsync(n: int, rf: int) -> float:
        return store_path(n, rf, fsync=False)

    for name, fn in (("store path (ReplicaManager.append)", store_path),
                     ("store path, no fsync (flush.messages=2^62)", no_fsync),
                     ("producer (send_values)", producer_path)):
        rf1 = max(fn(args.records, 1) for _ in range(args.repeat))
        rf3 = max(fn(args.records, 3) for _ in range(args.repeat))
        print(f"{name}: RF=1 {rf1 / 1e6:.2f} M records/s, RF=3 acks=all {rf3 / 1e6:.2f} M records/s "
              f"({rf3 / rf1:.0%} of RF=1)")
    # what acks=1 (the leader's fsync only) and acks=0 (none) save at RF=3
    by_acks = {acks: max(producer_path(args.records, 3, acks) for _ in range(args.repeat))
               for acks in ("all", "1", "0")}
    print("producer RF=3 by acks: " + ", ".join(f"acks={a} {v / 1e6:.2f} M records/s" for a, v in by_acks.items()))


if __name__ == "__main__":
    main()

"""Throughput of compaction and replay (a benchmark, not a test: prints figures for the README).

    python benchmarks/bench_lifecycle.py [--records N] [--keys K] [--replay-records N]

Compaction: N keyed records (100-byte values, K keys round-robin) over 8 MiB segments, then one
`klog topics compact` (offset map over the dirty part + rewrite of every sealed segment); the rate
is records read by the cleaner per second. Targets: 1,000,000 records over 10,000 keys at
>= 200,000 records/s.

Replay: SRC of N keyed records (1,000 keys, a header, 3 partitions); plain consume-then-produce
(Consumer -> Producer.send per record, original timestamps) against Replayer at --speed max with
--keep-timestamps, each into a fresh topic. Target: replay >= 70% of the plain copy.
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
from klog.broker import lifecycle  # noqa: E402
from klog.store import codec  # noqa: E402

BATCH_RECORDS = 10_000


def fill(store, topic: str, n: int, keys: int, partitions: int = 1, headers: tuple = ()) -> None:
    """n keyed records appended in 10,000-record batches (round-robin keys)."""
    now = int(time.time() * 1000)
    value = b"v" * 100
    key_bytes = [b"key-%06d" % k for k in range(keys)]
    for p in range(partitions):
        part = store.partition(topic, p)
        with part.lock:
            part.open_for_write()
            for start in range(p, n, BATCH_RECORDS * partitions):
                idx = range(start, min(n, start + BATCH_RECORDS * partitions), partitions)
                part.append_batch(codec.encode_batch([(key_bytes[i % keys], value, headers, now) for i in idx]))
            part.publish()


def bench_compaction(n: int, keys: int) -> None:
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("c", configs={"cleanup.policy": "compact", "segment.bytes": str(8 << 20),
                                         "retention.ms": "-1"})
        fill(store, "c", n, keys)
        size = store.partition("c", 0).size_bytes()
        start = time.perf_counter()
        result = lifecycle.compact(store, "c")[0]
        seconds = time.perf_counter() - start
        read = result.records_read
        print(f"compaction: {n:,} records over {keys:,} keys ({size / 1e6:.0f} MB), "
              f"{result.segments_rewritten} segments rewritten, {result.records_removed:,} removed, "
              f"{seconds:.2f} s: {read / seconds:,.0f} records/s cleaned")


def bench_replay(n: int) -> None:
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("src", partitions=3, configs={"retention.ms": "-1"})
        fill(store, "src", n, 1000, partitions=3, headers=(("origin", b"bench"),))
        for name in ("plain", "replayed"):
            store.create_topic(name, partitions=3, configs={"retention.ms": "-1"})
        start = time.perf_counter()
        with store.producer() as producer:
            for r in store.consumer("src"):
                producer.send("plain", r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
        plain = n / (time.perf_counter() - start)
        start = time.perf_counter()
        stats = store.replayer("src", "replayed", keep_timestamps=True).run()
        replay = stats.records / (time.perf_counter() - start)
        print(f"consume-then-produce: {plain:,.0f} records/s; replay --speed max: {replay:,.0f} records/s "
              f"({replay / plain:.0%} of it)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--replay-records", type=int, default=300_000)
    args = parser.parse_args()
    bench_compaction(args.records, args.keys)
    bench_replay(args.replay_records)


if __name__ == "__main__":
    main()

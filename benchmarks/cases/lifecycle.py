"""Compaction and replay throughput.

Compaction: N keyed records (100-byte values, K keys round-robin) over 8 MiB segments, then one
compaction (offset map over the dirty part + rewrite of every sealed segment); the rate is records
read by the cleaner per second. Replay: SRC of N keyed records (1,000 keys, a header, 3
partitions); plain consume-then-produce (Consumer -> Producer.send per record, original timestamps)
beside Replayer at --speed max with --keep-timestamps, each into a fresh topic, alternated.
A produce during a compaction: the time of one single-record produce to the partition being compacted.
"""

from __future__ import annotations

import threading
import time

from harness import Bench, rate, ratio

import klog
from klog.broker import lifecycle
from klog.store import codec
from klog.store.throttle import Throttler

BATCH_RECORDS = 10_000


def fill(store, topic: str, n: int, keys: int, partitions: int = 1, headers: tuple = ()) -> None:  # noqa: ANN001
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


def compaction(bench: Bench, n: int, keys: int) -> None:
    with klog.open(f"{bench.tmp}/compaction") as store:
        store.create_topic("c", configs={"cleanup.policy": "compact", "segment.bytes": str(8 << 20),
                                         "retention.ms": "-1"})
        fill(store, "c", n, keys)
        result = []
        took = bench.call(lambda: result.append(lifecycle.compact(store, "c")[0]))
        cleaned = result[0]
        bench.row(f"compaction, {n:,} keyed records over {keys:,} keys",
                  f"{rate(cleaned.records_read, took.wall)} cleaned ({took.wall:.2f} s, "
                  f"{cleaned.segments_rewritten} segments rewritten)")


def produce_during_compaction(bench: Bench, n: int, keys: int) -> None:
    """One single-record produce to a partition while it is being compacted at 2 MB/s
    (log.cleaner.io.max.bytes.per.second): the cleaning runs without the partition's lock."""
    with klog.open(f"{bench.tmp}/during") as store:
        segment_bytes = str(bench.size(1 << 20, 64 << 10))
        store.create_topic("c", configs={"cleanup.policy": "compact", "segment.bytes": segment_bytes,
                                         "retention.ms": "-1"})
        fill(store, "c", n, keys)
        started = threading.Event()

        class Started(Throttler):
            def maybe_throttle(self, observed: int) -> None:
                started.set()
                super().maybe_throttle(observed)

        cleaner = threading.Thread(target=lambda: lifecycle.compact(store, "c", throttler=Started(2 << 20)))
        cleaner.start()
        while cleaner.is_alive() and not started.wait(0.05):
            pass
        with store.producer() as p:
            took = bench.call(lambda: (p.send("c", b"x", key=b"key-000001", partition=0), p.flush()))
        still = cleaner.is_alive()
        cleaner.join()
    bench.row(f"a produce while its partition ({n:,} records) is compacted at 2 MB/s",
              f"{took.wall * 1000:.1f} ms" + ("" if still else " (the compaction ended first)"))


def replay(bench: Bench, n: int) -> None:
    with klog.open(f"{bench.tmp}/replay") as store:
        store.create_topic("src", partitions=3, configs={"retention.ms": "-1"})
        fill(store, "src", n, 1000, partitions=3, headers=(("origin", b"bench"),))

        def plain(r: int):  # noqa: ANN202
            store.create_topic(f"plain{r}", partitions=3, configs={"retention.ms": "-1"})

            def copy() -> None:
                with store.producer() as producer:
                    for rec in store.consumer("src"):
                        producer.send(f"plain{r}", rec.value, key=rec.key, headers=rec.headers,
                                      timestamp=rec.timestamp)
            return bench.call(copy)

        def replayed(r: int):  # noqa: ANN202
            store.create_topic(f"replayed{r}", partitions=3, configs={"retention.ms": "-1"})
            return bench.call(lambda: store.replayer("src", f"replayed{r}", keep_timestamps=True).run())

        runs = bench.alternate({"plain": plain, "replay": replayed}, rounds=3)
    bench.row(f"replay --speed max --keep-timestamps, {n:,} records, 3 partitions", rate(n, runs["replay"].wall),
              ratio(runs["plain"].wall, runs["replay"].wall, "consume-then-produce") +
              f" ({rate(n, runs['plain'].wall)})")


def run(bench: Bench) -> None:
    compaction(bench, bench.size(1_000_000, 5_000), bench.size(10_000, 100))
    produce_during_compaction(bench, bench.size(100_000, 5_000), bench.size(100, 10))
    replay(bench, bench.size(300_000, 3_000))

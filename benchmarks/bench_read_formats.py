"""Reading Kafka's old message formats next to v2, and what the format dispatch costs v2 reads.

    python benchmarks/bench_read_formats.py [--records N] [--runs R]

1. Consumer throughput over the same records stored as v2 batches (klog's own, the peer), as
   v1 plain messages and as v1 gzip message sets (built with kafka-python's builder, as a broker
   writes them), each imported with `klog dirs import`; runs alternate, medians reported.
2. codec.read_header (magic dispatch) against what it did before the dispatch (the struct
   unpack into a BatchHeader), per v2 header.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import klog  # noqa: E402
from klog.store import codec  # noqa: E402
from klog.store.format import BATCH_HEADER  # noqa: E402
from tests.kafka_files import legacy_plain, legacy_wrapper, v2_batch, write_segment  # noqa: E402

VALUE = b"x" * 100


def build(root: str, records: int) -> None:
    now = int(time.time() * 1000)
    per = 100
    v2, plain, gz = [], [], []
    for base in range(0, records, per):
        recs = [(b"k%d" % (o % 50), VALUE, now) for o in range(base, base + per)]
        v2.append(v2_batch(base, recs))
        gz.append(legacy_wrapper(1, base, recs, codec=1))
        plain.extend(legacy_plain(1, o, k, v, t) for o, (k, v, t) in zip(range(base, base + per), recs, strict=True))
    for name, batches in (("v2", v2), ("v1plain", plain), ("v1gzip", gz)):
        write_segment(os.path.join(root, "kafka", f"{name}-0"), 0, batches)


def consume_seconds(store, topic: str, records: int) -> float:
    start = time.perf_counter()
    n = sum(1 for _ in store.consumer(topic))
    assert n == records, (topic, n)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        build(root, args.records)
        store = klog.open(os.path.join(root, "data"))
        from klog.broker.importer import import_dirs

        import_dirs(store, [os.path.join(root, "kafka")])
        times: dict[str, list[float]] = {"v2": [], "v1plain": [], "v1gzip": []}
        for _ in range(args.runs):
            for topic in times:
                times[topic].append(consume_seconds(store, topic, args.records))
        store.close()
    for topic, ts in times.items():
        med = statistics.median(ts)
        print(f"consume {topic:8s} {args.records / med / 1e6:6.2f} M records/s (median of {args.runs})")
    head = v2_batch(0, [(b"k", VALUE, 0)])
    loops = 300_000
    bare, wrapped = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        for _ in range(loops):
            codec.BatchHeader._make(BATCH_HEADER.unpack_from(head, 0))
        bare.append(time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(loops):
            codec.read_header(head, 0)
        wrapped.append(time.perf_counter() - t)
    print(f"v2 header: unpack into BatchHeader {statistics.median(bare) / loops * 1e9:.0f} ns, "
          f"codec.read_header {statistics.median(wrapped) / loops * 1e9:.0f} ns (median of {args.runs})")


if __name__ == "__main__":
    main()

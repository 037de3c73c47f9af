"""Reading Kafka's old message formats next to v2, and what the format dispatch costs v2 reads.

1. Consumer throughput over the same records stored as v2 batches (klog's own, the peer), as
   v1 plain messages and as v1 gzip message sets (built with kafka-python's builder, as a broker
   writes them), each imported with `klog dirs import`; runs alternate, medians reported.
2. codec.read_header (magic dispatch) against what it did before the dispatch (the struct
   unpack into a BatchHeader), per v2 header.
"""

from __future__ import annotations

import os
import time

from harness import Bench, rate, ratio

import klog
from klog.store import codec
from klog.store.format import BATCH_HEADER
from tests.kafka_files import legacy_plain, legacy_wrapper, v2_batch, write_segment

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


def consume(store, topic: str, records: int) -> None:  # noqa: ANN001
    n = sum(1 for _ in store.consumer(topic))
    assert n == records, (topic, n)


def run(bench: Bench) -> None:
    records = bench.size(200_000, 2_000)
    rounds = bench.rounds(5)
    root = bench.tmp
    build(root, records)
    store = klog.open(os.path.join(root, "data"))
    try:
        from klog.broker.importer import import_dirs

        import_dirs(store, [os.path.join(root, "kafka")])
        runs = bench.alternate({topic: (lambda r, topic=topic: bench.call(lambda: consume(store, topic, records)))
                                for topic in ("v2", "v1plain", "v1gzip")}, rounds=rounds)
    finally:
        store.close()
    for topic in ("v1plain", "v1gzip"):
        bench.row(f"consume {topic} (imported Kafka segments), {records:,} records", rate(records, runs[topic].wall),
                  ratio(runs["v2"].wall, runs[topic].wall, "v2") + f" ({rate(records, runs['v2'].wall)})")
    head = v2_batch(0, [(b"k", VALUE, 0)])
    loops = bench.size(300_000, 3_000)
    headers = bench.alternate({
        "unpack": lambda r: bench.call(lambda: [codec.BatchHeader._make(BATCH_HEADER.unpack_from(head, 0))
                                                for _ in range(loops)]),
        "read_header": lambda r: bench.call(lambda: [codec.read_header(head, 0) for _ in range(loops)]),
    }, rounds=rounds)
    bench.row("codec.read_header of a v2 header (magic dispatch)",
              f"{headers['read_header'].wall / loops * 1e9:.0f} ns",
              f"a bare unpack into BatchHeader: {headers['unpack'].wall / loops * 1e9:.0f} ns")

"""The one-pass record check of uniform batches beside the record walk, per record.

The record check of klog serve's Produce path: the one-pass check of batches whose records share one
shape (validate.uniform_records_ok) beside the record walk alone, on batches like librdkafka's
(100-B values, null keys, 1 MB) and on batches of values of varying size (80-120 B: the one pass
must give up at once, not cost a pass on top of the walk). """

from __future__ import annotations

import random
import time

from harness import Bench, Measure

from klog.store import codec, validate


def per_record_ns(data: bytes, walk_only: bool, reps: int = 5) -> float:
    header = codec.read_header(data)
    saved = validate.UNIFORM_MIN_RECORDS
    validate.UNIFORM_MIN_RECORDS = 1 << 62 if walk_only else saved
    try:
        start = time.perf_counter()
        for _ in range(reps):
            if not validate.record_structure_ok(data, 0, header, consecutive=True):
                raise SystemExit("the benchmark's batch did not pass the check")
        return (time.perf_counter() - start) / reps / header.records_count * 1e9
    finally:
        validate.UNIFORM_MIN_RECORDS = saved


def run(bench: Bench) -> None:
    records = bench.size(7500, 300)
    rng = random.Random(1)
    ts = 1_700_000_000_000
    batches = {
        "uniform (100-B values)": codec.encode_batch([(None, b"v" * 100, [], ts + i // 1500)
                                                      for i in range(records)], 0),
        "varying (80-120-B values)": codec.encode_batch([(None, b"v" * rng.randint(80, 120), [], ts + i // 1500)
                                                         for i in range(records)], 0),
    }
    for name, data in batches.items():
        runs = bench.alternate({"one pass": lambda r, data=data: Measure(per_record_ns(data, False), 0),
                                "walk": lambda r, data=data: Measure(per_record_ns(data, True), 0)}, rounds=7)
        bench.row(f"record check per record, {name}, {records:,}-record batches: one pass, else the walk",
                  f"{runs['one pass'].wall:.0f} ns", f"the walk alone: {runs['walk'].wall:.0f} ns")

"""The record check of klog serve's Produce path per record: the one-pass check of batches whose
records share one shape (validate.uniform_records_ok) beside the record walk alone, on batches
like librdkafka's (100-B values, null keys, 1 MB) and on batches of values of varying size
(80-120 B: the one pass must give up at once, not cost a pass on top of the walk).

    .venv/bin/python benchmarks/bench_validate_uniform.py [--records 7500] [--rounds 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from klog.store import codec, validate  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=7500)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(1)
    ts = 1_700_000_000_000
    batches = {
        "uniform (100-B values)": codec.encode_batch([(None, b"v" * 100, [], ts + i // 1500)
                                                      for i in range(args.records)], 0),
        "varying (80-120-B values)": codec.encode_batch([(None, b"v" * rng.randint(80, 120), [], ts + i // 1500)
                                                         for i in range(args.records)], 0),
    }
    results: dict[tuple[str, bool], list[float]] = {(name, walk): [] for name in batches for walk in (False, True)}
    for r in range(args.rounds):
        for name, data in batches.items():
            for walk in (r % 2 == 0, r % 2 != 0):  # alternated order
                results[(name, walk)].append(per_record_ns(data, walk))
    print(f"{args.records:,} records a batch, medians of {args.rounds} alternated rounds (ns per record)")
    for name in batches:
        one_pass = statistics.median(results[(name, False)])
        walk = statistics.median(results[(name, True)])
        print(f"{name:28} one pass, else walk {one_pass:7.0f}   walk only {walk:7.0f}")


if __name__ == "__main__":
    main()

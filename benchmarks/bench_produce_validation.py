"""What parsing every record of an incoming batch (klog serve's Produce, klog.broker.batches.check_records)
costs on the produce path, beside the same path with only the CRC and header checks, and beside
decoding every record into tuples (the check before klog.store.validate's validate-only walk).

Batches shaped like librdkafka's defaults (100 B values, up to 1 MB: 9,000 records), uncompressed
and lz4; for each: check_batch with and without the record parse, and RawAppender.append (the whole
server-side append, acks=1, into a temporary store) with and without it. Runs alternate; medians.

    .venv/bin/python benchmarks/bench_produce_validation.py [--records 9000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import klog  # noqa: E402
from klog.broker import batches  # noqa: E402
from klog.store import codec, compression  # noqa: E402


def make_batch(n: int, codec_name: str) -> bytes:
    ts = int(time.time() * 1000)
    data = codec.encode_batch([(None, b"v" * 100, [], ts) for _ in range(n)], 0)
    if codec_name == "none":
        return data
    header = codec.read_header(data)
    return batches.with_codec(data, header, compression.CODEC_IDS[codec_name])


def timed(fn, reps: int) -> float:  # noqa: ANN001 - a callable
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=9_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    real_check = batches.check_records
    skip = lambda data, header: None  # noqa: E731 - the CRC-only peer

    def decode(data: bytes, header: codec.BatchHeader) -> None:  # the decoding peer
        offsets = [record[0] for record in codec.decode_batch_records(data, 0, header)]
        if offsets != list(range(header.base_offset, header.base_offset + len(offsets))):
            raise batches.InvalidBatchError("offsets inside a batch must be consecutive")

    with tempfile.TemporaryDirectory() as tmp, klog.open(tmp) as store:
        store.create_topic("bench")
        appender = batches.RawAppender(store)
        for codec_name in ("none", "lz4"):
            data = make_batch(args.records, codec_name)
            runs: dict[str, list[float]] = {k: [] for k in ("check", "check_crc_only", "check_decode", "append",
                                                            "append_crc_only", "append_decode")}
            for _ in range(args.rounds):
                for label, check in (("", real_check), ("_crc_only", skip), ("_decode", decode)):
                    batches.check_records = check
                    try:
                        runs["check" + label].append(timed(lambda data=data: batches.check_batch(data), 5))
                        append = lambda data=data: appender.append("bench", 0, data, "1")  # noqa: E731
                        runs["append" + label].append(timed(append, 3))
                    finally:
                        batches.check_records = real_check
            med = {k: statistics.median(v) * 1000 for k, v in runs.items()}
            per_record_us = (med["check"] - med["check_crc_only"]) * 1000 / args.records
            decode_us = (med["check_decode"] - med["check_crc_only"]) * 1000 / args.records
            print(f"{codec_name:>5} batch of {args.records} x 100 B ({len(data):,} bytes), medians of {args.rounds}:")
            print(f"      check_batch   {med['check']:8.2f} ms  (CRC/header only {med['check_crc_only']:8.2f} ms)"
                  f"  record parse {per_record_us:.3f} us/record (decoding them: {decode_us:.3f})")
            print(f"      append        {med['append']:8.2f} ms  (CRC/header only {med['append_crc_only']:8.2f} ms)"
                  f"  -> {args.records / med['append'] * 1000:,.0f} vs "
                  f"{args.records / med['append_crc_only'] * 1000:,.0f} records/s on one core "
                  f"(decoding: {args.records / med['append_decode'] * 1000:,.0f})")


if __name__ == "__main__":
    main()

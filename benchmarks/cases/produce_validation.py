"""The record check on the produce path (klog serve's Produce), beside CRC-only and full decoding.

What parsing every record of an incoming batch (klog.broker.batches.check_records) costs on the
produce path, beside the same path with only the CRC and header checks, and beside decoding every
record into tuples (the check before klog.store.validate's validate-only walk).

Batches shaped like librdkafka's defaults (100 B values, up to 1 MB: 9,000 records), uncompressed
and lz4; for each: check_batch with and without the record parse, and RawAppender.append (the whole
server-side append, acks=1, into a temporary store) with and without it. Runs alternate; medians.

"""

from __future__ import annotations

import statistics
import time

from harness import Bench, rate

import klog
from klog.broker import batches
from klog.store import codec, compression


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


def run(bench: Bench) -> None:
    n = bench.size(9_000, 500)
    rounds = bench.rounds(7)
    real_check = batches.check_records
    skip = lambda data, header: None  # noqa: E731 - the CRC-only peer

    def decode(data: bytes, header: codec.BatchHeader) -> None:  # the decoding peer
        offsets = [record[0] for record in codec.decode_batch_records(data, 0, header)]
        if offsets != list(range(header.base_offset, header.base_offset + len(offsets))):
            raise batches.InvalidBatchError("offsets inside a batch must be consecutive")

    with klog.open(bench.tmp) as store:
        store.create_topic("bench")
        appender = batches.RawAppender(store)
        for codec_name in ("none", "lz4"):
            data = make_batch(n, codec_name)
            runs: dict[str, list[float]] = {k: [] for k in ("check", "check_crc_only", "check_decode", "append",
                                                            "append_crc_only", "append_decode")}
            for _ in range(rounds):
                for label, check in (("", real_check), ("_crc_only", skip), ("_decode", decode)):
                    batches.check_records = check
                    try:
                        runs["check" + label].append(timed(lambda data=data: batches.check_batch(data), 5))
                        append = lambda data=data: appender.append("bench", 0, data, "1")  # noqa: E731
                        runs["append" + label].append(timed(append, 3))
                    finally:
                        batches.check_records = real_check
            med = {k: statistics.median(v) * 1000 for k, v in runs.items()}
            per_record_us = (med["check"] - med["check_crc_only"]) * 1000 / n
            decode_us = (med["check_decode"] - med["check_crc_only"]) * 1000 / n
            bench.row(f"record check on produce, {codec_name} batch of {n:,} x 100 B",
                      f"{per_record_us:.3f} µs a record",
                      f"decoding them into tuples: {decode_us:.3f} µs a record")
            bench.row(f"RawAppender.append, {codec_name} batch of {n:,} x 100 B, acks=1",
                      rate(n, med["append"] / 1000),
                      f"CRC and header only: {rate(n, med['append_crc_only'] / 1000)}")

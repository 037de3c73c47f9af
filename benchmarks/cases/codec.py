"""Codec throughput: klog's encode, decode (with CRC) and read path, beside kafka-python's codec.

Workload (the targets in the codec's brief): 10,000 records per batch with null keys, 100-byte
values and no headers, so a batch is ~1.1 MiB.
  * encode:  codec.encode_batch                                   (target >= 1.2 M records/s)
  * decode:  read_header + crc_ok + decode_batch_records          (target >= 0.8 M records/s)
  * read:    PartitionLog.read over a log of such batches, then FetchedBatch.records()
  * kafka-python: DefaultRecordBatchBuilder / DefaultRecordBatch on the same records
  * compiled vs pure Python: klog's encode/decode through aiokafka's Cython builder and reader
    (klog/store/fastrecords.py) against its own Python loops, alternated, medians
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import tempfile
import time

from harness import Bench, rate, ratio

from klog.store import codec, fastrecords
from klog.store.config import LogConfig
from klog.store.log import PartitionLog

RECORDS = 10_000
VALUE = bytes(range(100))
TIMESTAMP = 1_700_000_000_000


def best_rate(fn, records_per_call: int, repeat: int) -> float:
    """Best-of-`repeat` records/s of fn() (garbage collection off while timing, as timeit does)."""
    best = float("inf")
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return records_per_call / best


def make_records() -> list[codec.RecordIn]:
    return [(None, VALUE, [], TIMESTAMP + i % 7) for i in range(RECORDS)]


def bench_klog(repeat: int) -> dict[str, float]:
    records = make_records()
    batch = codec.encode_batch(records)

    def encode() -> None:
        codec.encode_batch(records)

    def decode() -> None:
        header = codec.read_header(batch)
        if not codec.crc_ok(batch, 0, header):
            raise AssertionError("CRC")
        out = codec.decode_batch_records(batch, 0, header)
        assert len(out) == RECORDS

    def decode_only() -> None:
        codec.decode_batch_records(batch, 0, codec.read_header(batch))

    return {
        "klog encode_batch": best_rate(encode, RECORDS, repeat),
        "klog decode (header + CRC + records)": best_rate(decode, RECORDS, repeat),
        "klog decode_batch_records only": best_rate(decode_only, RECORDS, repeat),
    }


def bench_compiled_vs_python(repeat: int) -> list[tuple[str, float, float]]:
    """(what, compiled ns/record, Python ns/record): medians of alternated runs, GC paused."""
    assert fastrecords.available()
    plain = make_records()
    keyed = [(b"key-%d" % i, VALUE, [("h", b"1")], TIMESTAMP + i % 7) for i in range(RECORDS)]
    rows = []
    for label, records in (("", plain), (", keys + 1 header", keyed)):
        batch = codec.encode_batch(records)
        header = codec.read_header(batch)
        cases = {
            f"encode_batch{label}": lambda records=records: codec.encode_batch(records),
            f"decode_batch_values{label}": lambda b=batch, h=header: codec.decode_batch_values(b, 0, h, fast=True),
            f"decode_batch_records{label}": lambda b=batch, h=header: codec.decode_batch_records(b, 0, h, fast=True),
        }
        for name, fn in cases.items():
            fast_times, python_times = [], []
            gc.disable()
            try:
                # Python, compiled, Python: whole blocks (a Python call right after a compiled one
                # ran ~1.7x slower than in a row, allocator and cache state, flattering the C)
                for block in range(3):
                    for _ in range(repeat):
                        if block == 1:
                            t0 = time.perf_counter()
                            fn()
                            fast_times.append(time.perf_counter() - t0)
                        else:
                            with fastrecords.python_only():
                                t0 = time.perf_counter()
                                fn()
                                python_times.append(time.perf_counter() - t0)
            finally:
                gc.enable()
            rows.append((name, statistics.median(fast_times) / RECORDS * 1e9,
                         statistics.median(python_times) / RECORDS * 1e9))
    return rows


def bench_read_path(batches: int, repeat: int) -> float:
    """PartitionLog.read from offset 0 to the end, decoding every fetched batch."""
    records = make_records()
    batch = codec.encode_batch(records)
    directory = tempfile.mkdtemp(prefix="klog-bench-")
    try:
        log = PartitionLog(os.path.join(directory, "t-0"), LogConfig(segment_bytes=8 * len(batch),
                                                                      flush_messages=1 << 30))
        log.open_for_write()
        for _ in range(batches):
            stamped = codec.with_base_offset(batch, log.log_end_offset, 0)
            log.append(stamped, codec.read_header(stamped))
        log.flush()
        upper = log.log_end_offset

        def read_all() -> None:
            offset = 0
            n = 0
            while offset < upper:
                got = log.read(offset, upper)
                if not got:
                    break
                for fetched in got:
                    n += len(fetched.records())
                offset = got[-1].header.next_offset
            assert n == upper, (n, upper)

        rate = best_rate(read_all, upper, repeat)
        log.close()
        return rate
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def bench_kafka_python(repeat: int) -> dict[str, float]:
    try:
        from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError:
        return {}
    records = make_records()

    def build() -> bytes:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for i, (key, value, headers, ts) in enumerate(records):
            builder.append(i, ts, key, value, headers)
        return bytes(builder.build())

    batch = build()

    def decode() -> None:
        b = DefaultRecordBatch(batch)
        assert b.validate_crc()
        out = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b]
        assert len(out) == RECORDS

    return {
        "kafka-python DefaultRecordBatchBuilder": best_rate(build, RECORDS, max(1, repeat // 3)),
        "kafka-python DefaultRecordBatch (CRC + records)": best_rate(decode, RECORDS, max(1, repeat // 3)),
    }


def run(bench: Bench) -> None:
    repeat = bench.size(20, 2)
    results = bench_klog(repeat)
    results["klog PartitionLog.read + records()"] = bench_read_path(bench.size(50, 2), max(2, repeat // 4))
    results.update(bench_kafka_python(repeat))
    peer = results.get("kafka-python DefaultRecordBatchBuilder")
    for name, per_s in results.items():
        beside = ratio(per_s, peer, "kafka-python's builder") if peer and name == "klog encode_batch" else ""
        bench.row(f"{name}, {RECORDS:,}-record batches of 100 B values (best of {repeat})", rate(per_s, 1), beside)
    for name, fast, python in bench_compiled_vs_python(repeat):
        bench.row(f"{name}, ns per record: compiled (aiokafka's Cython records)", f"{fast:.0f} ns",
                  f"{python / fast:.1f}x faster than klog's pure Python ({python:.0f} ns), alternated blocks")

"""Cost that stays flat as the store grows: segments, partitions, topics, appends.

Each row sets a figure beside its peer measured in the same run:
  - many segments: producing 100-byte lines into a topic with segment.bytes small enough for
    --segments segments: the last 25 k records' per-record cost against the first 25 k's, with
    one segment's in the same (alternated) chunks, and what a roll costs; with the sealed
    segments' fsyncs in the background (klog's roll) and waited for by each roll (before it);
  - 1,000 partitions: 100 k keyed records into a 1,000-partition topic against a 1-partition one;
  - creating --topics topics through the API (1,000 and 5,000): the last tenth's cost per create
    against the first tenth's, wall and CPU;
  - --appends single-record batches into one partition (acks=1, no fsync per batch): the last
    tenth of the appends against the first tenth.
"""

from __future__ import annotations

import statistics
import tempfile
import time

from harness import Bench

import klog

LINE = b"x" * 100
NO_FSYNC = {"flush.messages": str(2**62)}


def produce_lines(store, topic: str, n: int) -> float:
    start = time.perf_counter()
    with store.producer(batch_size=16_384) as producer:
        for i in range(0, n, 1000):
            producer.send_values(topic, [LINE] * min(1000, n - i))
    return time.perf_counter() - start


CHUNK = 25_000  # records per timed chunk of the segments row


def bench_segments(bench: Bench, segments: int) -> None:
    """Flatness in one run: the per-record cost of the LAST 25 k records of a partition that
    already has ~`segments` segments against its FIRST 25 k (same segment.bytes); beside it, one
    segment (no roll) for the same chunks, whose difference per roll is what a roll costs; and
    the same many-segment partition with every roll waiting for its sealed segment's fsync
    (ROLL_FLUSHES_PENDING_MAX 0: klog before the background flusher), chunks alternated."""
    from klog.store import flush_pipeline as log_module

    background = log_module.ROLL_FLUSHES_PENDING_MAX
    # ~150 records of 100 B per 16 kB batch, one batch per segment; whole chunks, at least two
    n = max(2, -(-segments * 150 // CHUNK)) * CHUNK
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("one", configs=NO_FSYNC)
        store.create_topic("many", configs={**NO_FSYNC, "segment.bytes": "16384"})
        store.create_topic("sync", configs={**NO_FSYNC, "segment.bytes": "16384"})
        chunks: dict[str, list[float]] = {"one": [], "many": [], "sync": []}
        rolls: list[int] = []
        try:
            for _ in range(n // CHUNK):
                for topic in ("one", "many", "sync"):  # alternated, chunk by chunk: the same machine load
                    log_module.ROLL_FLUSHES_PENDING_MAX = 0 if topic == "sync" else background
                    chunks[topic].append(produce_lines(store, topic, CHUNK))
                rolls.append(len(store.partition("many", 0).leader.bases))
        finally:
            log_module.ROLL_FLUSHES_PENDING_MAX = background
    us = {topic: [t / CHUNK * 1e6 for t in times] for topic, times in chunks.items()}
    new_rolls = rolls[-1] - rolls[-2]
    for topic, how in (("many", "rolls flushed in the background"), ("sync", "each roll waiting for its fsync")):
        first, last = us[topic][0], us[topic][-1]
        per_roll = (chunks[topic][-1] - chunks["one"][-1]) / new_rolls * 1e6
        bench.line(f"{n:,} records into {rolls[-1]:,} segments of 16 kB, {how}: first {CHUNK:,} {first:.2f} us/record, "
              f"last {CHUNK:,} (from {rolls[-2]:,} segments on) {last:.2f} us/record ({last / first:.2f}x; "
              f"{last / us['one'][-1]:.2f}x one segment); a roll costs ~{per_roll:.0f} us")
    bench.line(f"one segment, same chunks: first {us['one'][0]:.2f}, last {us['one'][-1]:.2f} us/record; medians over "
          f"all chunks: one {statistics.median(us['one']):.2f}, background {statistics.median(us['many']):.2f}, "
          f"waiting {statistics.median(us['sync']):.2f} us/record")


def bench_partitions(bench: Bench, n: int, rounds: int, many: int = 1000) -> None:
    """The first round also creates every partition's folder and files; then `rounds` more,
    alternated 1 / {many:,} partitions, each by a new producer of the same store: medians of the
    wall time, and of the CPU time (the steadier figure on a shared machine), with the CPU time
    split into sending (partitioning, batching) and the close's flush (encoding, appending)."""
    pairs = [(b"key-%d" % (i % 10_000), LINE) for i in range(n)]
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        times: dict[int, list[tuple[float, float, float]]] = {1: [], many: []}
        for parts in (1, many):
            store.create_topic(f"p{parts}", partitions=parts, configs=NO_FSYNC)
        for _ in range(rounds + 1):
            for parts in (1, many):
                start, cpu = time.perf_counter(), time.process_time()
                with store.producer() as producer:
                    for i in range(0, n, 10_000):
                        producer.send_keyed(f"p{parts}", pairs[i:i + 10_000])
                    sent = time.process_time()
                times[parts].append((time.perf_counter() - start, time.process_time() - cpu, sent - cpu))
    one_s, many_s = times[1][0][0], times[many][0][0]
    bench.line(f"{n:,} keyed records into new partitions: 1 partition {one_s:.2f} s, {many:,} partitions "
               f"{many_s:.2f} s ({many_s / one_s:.2f}x)")
    wall = {p: statistics.median(t[0] for t in ts[1:]) for p, ts in times.items()}
    cpu = {p: statistics.median(t[1] for t in ts[1:]) for p, ts in times.items()}
    send = {p: statistics.median(t[2] for t in ts[1:]) for p, ts in times.items()}
    bench.line(f"{n:,} keyed records again (median of {rounds}, alternated): 1 partition {wall[1]:.3f} s, "
          f"{many:,} partitions {wall[many]:.3f} s ({wall[many] / wall[1]:.2f}x); CPU {cpu[1]:.3f} vs "
          f"{cpu[many]:.3f} s ({cpu[many] / cpu[1]:.2f}x), of which sending {send[1]:.3f} vs {send[many]:.3f} s")


def _tenths(n: int, step) -> list[tuple[float, float]]:
    """Call step(i) for i in range(n); the wall and CPU time of each tenth, in us per call."""
    tenth = max(1, n // 10)
    out = []
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        step(i)
        if (i + 1) % tenth == 0:
            wall2, cpu2 = time.perf_counter(), time.process_time()
            out.append(((wall2 - wall) / tenth * 1e6, (cpu2 - cpu) / tenth * 1e6))
            wall, cpu = wall2, cpu2
    return out


def _first_last(what: str, tenths: list[tuple[float, float]]) -> str:
    (w0, c0), (w9, c9) = tenths[0], tenths[-1]
    return (f"{what}: first tenth {w0:.0f} us wall / {c0:.0f} us CPU, last tenth {w9:.0f} / {c9:.0f} us "
            f"({w9 / w0:.2f}x wall, {c9 / c0:.2f}x CPU); every tenth's CPU: "
            + " ".join(f"{c:.0f}" for _, c in tenths))


def bench_topics(bench: Bench, counts: list[int]) -> None:
    """Each create's cost at the start and the end of creating n topics in a new store (one
    partition each). Wall time is mostly LMDB's commit (an fsync: noisy on a shared disk); the
    CPU time shows whether the work per create grows with the topics already there."""
    for n in counts:
        with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
            start = time.perf_counter()
            tenths = _tenths(n, lambda i: store.create_topic(f"t{i}"))
            total = time.perf_counter() - start
        bench.line(_first_last(f"creating {n:,} topics ({total:.1f} s), per create", tenths))


def bench_appends(bench: Bench, n: int) -> None:
    """Single-record batches into one partition (acks=1, no fsync per batch), each flushed."""
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("t", configs=NO_FSYNC)
        with store.producer(acks="1") as producer:
            def append(_i: int) -> None:
                producer.send_values("t", [LINE])
                producer.flush()

            start = time.perf_counter()
            tenths = _tenths(n, append)
            total = time.perf_counter() - start
    bench.line(_first_last(f"{n:,} single-record appends ({total:.0f} s), per append", tenths))


def run(bench: Bench) -> None:
    global CHUNK
    CHUNK = bench.size(25_000, 300)
    bench_segments(bench, bench.size(5000, 4))
    bench_partitions(bench, bench.size(100_000, 2_000), bench.rounds(5), many=bench.size(1000, 20))
    bench_topics(bench, [bench.size(1000, 30), bench.size(5000, 60)])
    bench_appends(bench, bench.size(1_000_000, 200))

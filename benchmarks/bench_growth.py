"""Cost that stays flat as the store grows (a benchmark, not a test: README figures).

    python benchmarks/bench_growth.py [--segments N] [--appends N] [--topics N] [--rows ROW,...]

Each row sets a figure beside its peer measured in the same run:
  - many segments: producing 100-byte lines into a topic with segment.bytes small enough for
    --segments segments: the last 25 k records' per-record cost against the first 25 k's, with
    one segment's in the same (alternated) chunks, and what a roll costs; with the sealed
    segments' fsyncs in the background (klog's roll) and waited for by each roll (before it);
  - 1,000 partitions: 100 k keyed records into a 1,000-partition topic against a 1-partition one;
  - creating --topics topics through the API: the last tenth against the first tenth;
  - --appends single-record batches into one partition (acks=1, no fsync per batch): the last
    tenth of the appends against the first tenth.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import klog  # noqa: E402

LINE = b"x" * 100
NO_FSYNC = {"flush.messages": str(2**62)}


def produce_lines(store, topic: str, n: int) -> float:
    start = time.perf_counter()
    with store.producer(batch_size=16_384) as producer:
        for i in range(0, n, 1000):
            producer.send_values(topic, [LINE] * min(1000, n - i))
    return time.perf_counter() - start


CHUNK = 25_000  # records per timed chunk of the segments row


def bench_segments(segments: int) -> None:
    """Flatness in one run: the per-record cost of the LAST 25 k records of a partition that
    already has ~`segments` segments against its FIRST 25 k (same segment.bytes); beside it, one
    segment (no roll) for the same chunks, whose difference per roll is what a roll costs; and
    the same many-segment partition with every roll waiting for its sealed segment's fsync
    (ROLL_FLUSHES_PENDING_MAX 0: klog before the background flusher), chunks alternated."""
    from klog.store import log as log_module

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
        print(f"{n:,} records into {rolls[-1]:,} segments of 16 kB, {how}: first {CHUNK:,} {first:.2f} us/record, "
              f"last {CHUNK:,} (from {rolls[-2]:,} segments on) {last:.2f} us/record ({last / first:.2f}x; "
              f"{last / us['one'][-1]:.2f}x one segment); a roll costs ~{per_roll:.0f} us")
    print(f"one segment, same chunks: first {us['one'][0]:.2f}, last {us['one'][-1]:.2f} us/record; medians over "
          f"all chunks: one {statistics.median(us['one']):.2f}, background {statistics.median(us['many']):.2f}, "
          f"waiting {statistics.median(us['sync']):.2f} us/record")


def bench_partitions(n: int = 100_000, rounds: int = 5) -> None:
    """The first round also creates every partition's folder and files; then `rounds` more,
    alternated 1 / 1,000 partitions, each by a new producer of the same store: medians of the
    wall time, and of the CPU time (the steadier figure on a shared machine), with the CPU time
    split into sending (partitioning, batching) and the close's flush (encoding, appending)."""
    pairs = [(b"key-%d" % (i % 10_000), LINE) for i in range(n)]
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        times: dict[int, list[tuple[float, float, float]]] = {1: [], 1000: []}
        for parts in (1, 1000):
            store.create_topic(f"p{parts}", partitions=parts, configs=NO_FSYNC)
        for _ in range(rounds + 1):
            for parts in (1, 1000):
                start, cpu = time.perf_counter(), time.process_time()
                with store.producer() as producer:
                    for i in range(0, n, 10_000):
                        producer.send_keyed(f"p{parts}", pairs[i:i + 10_000])
                    sent = time.process_time()
                times[parts].append((time.perf_counter() - start, time.process_time() - cpu, sent - cpu))
    one, many = times[1][0][0], times[1000][0][0]
    print(f"{n:,} keyed records into new partitions: 1 partition {one:.2f} s, 1,000 partitions {many:.2f} s "
          f"({many / one:.2f}x)")
    wall = {p: statistics.median(t[0] for t in ts[1:]) for p, ts in times.items()}
    cpu = {p: statistics.median(t[1] for t in ts[1:]) for p, ts in times.items()}
    send = {p: statistics.median(t[2] for t in ts[1:]) for p, ts in times.items()}
    print(f"{n:,} keyed records again (median of {rounds}, alternated): 1 partition {wall[1]:.3f} s, "
          f"1,000 partitions {wall[1000]:.3f} s ({wall[1000] / wall[1]:.2f}x); CPU {cpu[1]:.3f} vs "
          f"{cpu[1000]:.3f} s ({cpu[1000] / cpu[1]:.2f}x), of which sending {send[1]:.3f} vs {send[1000]:.3f} s")


def bench_topics(n: int) -> None:
    tenth = max(1, n // 10)
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        marks = []
        start = time.perf_counter()
        for i in range(n):
            store.create_topic(f"t{i}")
            if (i + 1) % tenth == 0:
                marks.append(time.perf_counter())
    first, last = marks[0] - start, marks[-1] - marks[-2]
    print(f"creating {n:,} topics: {marks[-1] - start:.1f} s; last tenth {last:.2f} s vs first {first:.2f} s "
          f"({last / first:.2f}x)")


def bench_appends(n: int) -> None:
    tenth = max(1, n // 10)
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("t", configs=NO_FSYNC)
        marks = []
        with store.producer(acks="1") as producer:
            start = time.perf_counter()
            for i in range(n):
                producer.send_values("t", [LINE])
                producer.flush()
                if (i + 1) % tenth == 0:
                    marks.append(time.perf_counter())
    first, last = marks[0] - start, marks[-1] - marks[-2]
    print(f"{n:,} single-record appends: first tenth {first / tenth * 1e6:.0f} us/append, last tenth "
          f"{last / tenth * 1e6:.0f} us/append ({last / first:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--segments", type=int, default=5000)
    parser.add_argument("--appends", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--rows", default="segments,partitions,topics,appends",
                        help="which rows to run, comma-separated")
    parser.add_argument("--only-segments", action="store_true", help="only the many-segments rows")
    args = parser.parse_args()
    rows = {"segments"} if args.only_segments else set(args.rows.split(","))
    if "segments" in rows:
        bench_segments(args.segments)
    if "partitions" in rows:
        bench_partitions()
    if "topics" in rows:
        bench_topics(args.topics)
    if "appends" in rows:
        bench_appends(args.appends)


if __name__ == "__main__":
    main()

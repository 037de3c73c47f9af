"""How `klog serve`'s Fetch costs grow with waiting consumers and with a topic's partition count
(a benchmark, not a test: prints README figures).

    python benchmarks/bench_serve_scaling.py [--seconds S] [--fetches N] [--rounds R]

- long polling: N connections (0, 50, 200) each repeating a Fetch at the end of a partition that
  nothing writes to (max_wait 500 ms, min_bytes 1), for S seconds; the server's CPU (from /proc)
  should stay small and flat in N: one shared watcher reads each watched partition's high
  watermark every 20 ms, whatever the number of fetches waiting on it. Run with the consumers all
  on one partition and spread over 200 partitions (one each).
- partition count: the wall time of N sequential Fetch requests for partition 0 of a topic with 1
  partition beside the same for a topic with 1,000 partitions (each holds one small batch): a
  Fetch of one partition must not do work per partition of the topic; and a Fetch v13 (topics by
  id) in a store of 3 topics beside one of 1,001 (no work per topic of the store).
"""

from __future__ import annotations

import asyncio
import datetime
import io
import os
import struct
import subprocess
import tempfile
import time
import uuid
from types import SimpleNamespace

from harness import REPO, Bench
from serve_process import Serve, klog_cmd  # noqa: E402 - benchmarks/ is on sys.path when run as a script


def fetch_frame(topic: str, partition: int, offset: int, max_wait_ms: int, topic_id: uuid.UUID | None = None) -> bytes:
    """A whole Fetch request frame (size prefix included), written with kio: v12 naming the topic,
    or v13 naming it by `topic_id`."""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i32Timedelta

    if topic_id is None:
        from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
        named = {"topic": topic}
    else:
        from kio.schema.fetch.v13.request import FetchPartition, FetchRequest, FetchTopic
        named = {"topic_id": topic_id}
    part = FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    req = FetchRequest(replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
                       min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(**named, partitions=(part,)),), forgotten_topics_data=(), rack_id="")
    buf = io.BytesIO()
    version = 12 if topic_id is None else 13
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=1, request_api_version=version, correlation_id=1,
                                                    client_id="bench"))
    entity_writer(FetchRequest)(buf, req)
    frame = buf.getvalue()
    return struct.pack(">i", len(frame)) + frame


async def _long_poller(port: int, frame: bytes, stop_at: float, answers: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop_at:
            writer.write(frame)
            await writer.drain()
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            answers[0] += 1
    finally:
        writer.close()


async def _long_poll_run(port: int, frames: list[bytes], seconds: float) -> int:
    answers = [0]
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(_long_poller(port, f, stop_at, answers) for f in frames))
    return answers[0]


def long_poll(serve: Serve, frames: list[bytes], seconds: float) -> tuple[float, int]:
    """(server CPU % of one core, fetch answers) while `frames` long-poll for `seconds`."""
    cpu0, t0 = serve.cpu_s(), time.monotonic()
    answers = asyncio.run(_long_poll_run(serve.port, frames, seconds)) if frames else time.sleep(seconds) or 0
    return (serve.cpu_s() - cpu0) / (time.monotonic() - t0) * 100, answers


def sequential_fetches(port: int, topic: str, n: int, topic_id: uuid.UUID | None = None) -> float:
    """Seconds for n Fetch requests of partition 0 from offset 0, one at a time on one connection."""
    import socket

    from tests.serve_helpers import read_answer

    frame = fetch_frame(topic, 0, 0, 500, topic_id)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        start = time.perf_counter()
        for _ in range(n):
            sock.sendall(frame)
            read_answer(sock)
        return time.perf_counter() - start


def run(bench: Bench) -> None:
    args = SimpleNamespace(seconds=10 if not bench.smoke else 0.3, fetches=bench.size(2000, 20), rounds=bench.rounds(3))
    env = {**os.environ, "PYTHONPATH": REPO}
    with tempfile.TemporaryDirectory(prefix="bench-serve-scaling-") as tmp:
        data = os.path.join(tmp, "data")
        for topic, parts in (("one", 1), ("wide", bench.size(1000, 10)), ("idle", bench.size(200, 10))):
            subprocess.run(klog_cmd("topics", "create", topic, "-p", str(parts), "-d", data), env=env, check=True,
                           stdout=subprocess.DEVNULL)
        for topic in ("one", "wide"):
            subprocess.run(klog_cmd("produce", topic, "-d", data, "--partition", "0"), input=b"x" * 100 + b"\n",
                           env=env, check=True, stdout=subprocess.DEVNULL)
        import klog

        with klog.open(data) as store:
            one_id = uuid.UUID(store.topics.get("one").topic_id)
        many = os.path.join(tmp, "many")  # "one" again, among 1,000 other topics
        with klog.open(many) as store:
            store.create_topic("one")
            for i in range(bench.size(1000, 10)):
                store.create_topic(f"other-{i}")
            many_id = uuid.UUID(store.topics.get("one").topic_id)
        subprocess.run(klog_cmd("produce", "one", "-d", many), input=b"x" * 100 + b"\n", env=env, check=True,
                       stdout=subprocess.DEVNULL)
        print(f"load average {os.getloadavg()[0]:.1f}")
        serve = Serve(data, env)
        try:
            for n in (0, bench.size(50, 5), bench.size(200, 10)):
                for spread in ((False, True) if n else (False,)):
                    frames = [fetch_frame("idle", i if spread else 0, 0, 500) for i in range(n)]
                    runs = [long_poll(serve, frames, args.seconds) for _ in range(args.rounds)]
                    cpu = sorted(r[0] for r in runs)[len(runs) // 2]
                    where = "one partition each" if spread else "all on one partition"
                    bench.line(f"long poll {n} consumers ({where if n else 'none'}): server CPU {cpu:5.1f}% of a core, "
                          f"{runs[0][1] / args.seconds:.0f} answers/s")
            sequential_fetches(serve.port, "one", 50)  # warm both
            sequential_fetches(serve.port, "wide", 50)
            one, wide = [], []
            for _ in range(args.rounds):  # alternated
                one.append(sequential_fetches(serve.port, "one", args.fetches) / args.fetches)
                wide.append(sequential_fetches(serve.port, "wide", args.fetches) / args.fetches)
            one.sort()
            wide.sort()
            bench.line(f"fetch of partition 0: topic of 1 partition {one[len(one) // 2] * 1e6:.0f} us, "
                  f"of {bench.size(1000, 10):,} partitions {wide[len(wide) // 2] * 1e6:.0f} us per request "
                       f"(median of {args.rounds})")
            serve_many = Serve(many, env)
            try:  # Fetch v13+ names topics by id: the store's 1,001 topics must not be listed per request
                few, lots = [], []
                for _ in range(args.rounds):
                    few.append(sequential_fetches(serve.port, "one", args.fetches, one_id) / args.fetches)
                    lots.append(sequential_fetches(serve_many.port, "one", args.fetches, many_id) / args.fetches)
                few.sort()
                lots.sort()
                bench.line(f"fetch v13 (topic by id): store of 3 topics {few[len(few) // 2] * 1e6:.0f} us, "
                      f"of {bench.size(1000, 10) + 1:,} topics {lots[len(lots) // 2] * 1e6:.0f} us per request "
                           f"(median of {args.rounds})")
            finally:
                serve_many.close()
        finally:
            serve.close()
        print(f"load average {os.getloadavg()[0]:.1f}")


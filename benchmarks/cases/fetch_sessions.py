"""An idle consumer of many partitions: a sessionless Fetch of them all against the incremental Fetch
of a session holding them (KIP-227).

A topic `wide` of 500 partitions holding one 100-byte record each, every partition fetched from its
end (nothing new: the idle consumer's Fetch, max_wait 0), on one raw connection to a `klog serve`
process: Fetch v12 naming all 500 (session epoch -1, what librdkafka sends) alternated, round by
round with the order flipped, with the incremental Fetch of a session made of the same 500 (what
the Java client and kafka-python send: no partition named, none answered). Prints the server's CPU
per request (every thread, from /proc, less the idle server's) and the answer's size.
"""

from __future__ import annotations

import datetime
import io
import os
import socket
import statistics
import struct
import time

from harness import REPO, Bench
from serve_process import Serve


def _frame(epoch: int, session_id: int, partitions: range) -> bytes:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i32Timedelta

    from klog.protocol.kafka import make

    parts = tuple(FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=1, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=1 << 20) for p in partitions)
    topics = (FetchTopic(topic="wide", partitions=parts),) if parts else ()
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=1, request_api_version=12, correlation_id=1,
                                                    client_id="bench"))
    entity_writer(FetchRequest)(buf, make(FetchRequest, replica_id=-1, max_wait=i32Timedelta.parse(
        datetime.timedelta(0)), min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=session_id,
        session_epoch=epoch, topics=topics, forgotten_topics_data=(), rack_id=""))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def run(bench: Bench) -> None:
    from cases.serve_request_cost import _cpu_s

    import klog
    from tests.serve_helpers import read_answer

    partitions = bench.size(500, 20)
    n = bench.size(200, 5)
    data = os.path.join(bench.tmp, "data")
    with klog.open(data) as store:
        store.create_topic("wide", partitions=partitions)
        with store.producer() as producer:
            for p in range(partitions):
                producer.send_values("wide", [b"%099d" % p], partition=p)
    server = Serve(data, {**os.environ, "PYTHONPATH": REPO}, cwd=bench.tmp)
    rounds = bench.rounds(6)
    sessionless = _frame(-1, 0, range(partitions))
    per: dict[str, list[float]] = {"sessionless": [], "incremental": []}
    size: dict[str, int] = {}
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            def ask(frame: bytes) -> bytes:
                sock.sendall(frame)
                return read_answer(sock)

            for _ in range(3):
                ask(sessionless)  # (warm: first opens)
            full = ask(_frame(0, 0, range(partitions)))
            session_id = struct.unpack_from(">i", full, 4 + 1 + 4 + 2)[0]  # correlation, tags, throttle, error
            assert session_id, "no fetch session"
            epochs = iter(range(1, 2**31))
            incremental = [_frame(next(epochs), session_id, range(0)) for _ in range(n * rounds + 1)]
            frames = iter(incremental)
            size["incremental"] = len(ask(next(frames)))
            size["sessionless"] = len(ask(sessionless))
            kinds = {"sessionless": lambda: ask(sessionless), "incremental": lambda: ask(next(frames))}
            idle_s = bench.size(5, 1)
            cpu, started = _cpu_s(server.proc.pid), time.monotonic()
            time.sleep(idle_s)
            idle_rate = (_cpu_s(server.proc.pid) - cpu) / (time.monotonic() - started)
            for turn in range(rounds):
                for name in (list(kinds) if turn % 2 == 0 else list(kinds)[::-1]):
                    cpu, started = _cpu_s(server.proc.pid), time.monotonic()
                    for _ in range(n):
                        kinds[name]()
                    background = idle_rate * (time.monotonic() - started)
                    per[name].append((_cpu_s(server.proc.pid) - cpu - background) / n)
    finally:
        server.close()
    without, within = statistics.median(per["sessionless"]), statistics.median(per["incremental"])
    bench.line(f"server CPU per idle Fetch of {partitions} partitions without a session: {without * 1e6:.0f} us",
               f"answer {size['sessionless']:,} bytes")
    bench.line(f"server CPU per idle incremental Fetch of a {partitions}-partition session: {within * 1e6:.0f} us",
               f"{within / without:.2f}x sessionless; answer {size['incremental']:,} bytes")

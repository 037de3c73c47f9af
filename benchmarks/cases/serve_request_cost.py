"""`klog serve`'s CPU per request: a single-record produce + fetch round, an empty Fetch, a wide Fetch.

One raw connection (frames written once with kio, so the client costs little) against a `klog
serve` process; the server's CPU is read from /proc before and after N requests of a kind, less
what the idle server spent in that time (its background ticks: checkpoints, the log cleaner, measured
first), and the kinds alternate round by round. Beside them, in the same run, ApiVersions: the cost of the
request loop itself (read, parse, answer) with no work in the handler, the floor of every figure.

- round: Produce v9 of one 100-byte record (acks=1) to `one`, then Fetch v12 of that offset.
- empty fetch: Fetch v12 at the end of `one` with max_wait 0.
- wide fetch: Fetch v12 of every partition of `wide` (--partitions, one 100-byte record each, from
  offset 0): the per-partition figure is (wide - 1-partition fetch) / (partitions - 1).
Targets (issue 26): <= 0.5 ms per round, <= 20 us per partition.

Before/after in one run: KLOG_BENCH_BASELINE=<another checkout> (e.g. main's) starts a second server
from that checkout's code over a copy of the same store, and its 1- and many-partition Fetches join
the alternation; its per-partition figure is printed beside this checkout's.
"""

from __future__ import annotations

import datetime
import io
import os
import shutil
import socket
import statistics
import struct
import time

from harness import REPO, Bench
from serve_process import Serve


def _frame(api_key: int, version: int, **fields: object) -> bytes:
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    from klog.protocol.kafka import make
    from tests.serve_helpers import request_class

    cls = request_class(api_key, version)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=api_key, request_api_version=version,
                                                    correlation_id=1, client_id="bench"))
    entity_writer(cls)(buf, make(cls, **fields))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def _fetch(topic: str, partitions: range, offset: int) -> bytes:
    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    parts = tuple(FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=1 << 20) for p in partitions)
    return _frame(1, 12, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                  max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                  topics=(FetchTopic(topic=topic, partitions=parts),), forgotten_topics_data=(), rack_id="")


def _answer(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return bytes(out)

    return exactly(struct.unpack(">i", exactly(4))[0])


def run(bench: Bench) -> None:
    import klog
    from tests.serve_helpers import batch, produce_request_fields

    partitions = bench.size(500, 20)
    n = bench.size(1000, 20)
    data = os.path.join(bench.tmp, "data")
    with klog.open(data) as store:
        store.create_topic("one")
        store.create_topic("wide", partitions=partitions)
        with store.producer() as producer:
            for p in range(partitions):
                producer.send_values("wide", [b"%099d" % p], partition=p)
    baseline_repo = os.environ.get("KLOG_BENCH_BASELINE")
    if baseline_repo:
        shutil.copytree(data, os.path.join(bench.tmp, "baseline"))
    # (the working directory comes first on a `python -m` path: a neutral one, so each server runs its own code)
    server = Serve(data, {**os.environ, "PYTHONPATH": REPO}, cwd=bench.tmp)
    baseline = Serve(os.path.join(bench.tmp, "baseline"), {**os.environ, "PYTHONPATH": baseline_repo},
                     cwd=bench.tmp) if baseline_repo else None
    record = batch([b"x" * 100])
    produce = _frame(0, 9, **produce_request_fields(9, "one", 0, record, acks=1))
    api_versions = _frame(18, 3, client_software_name="bench", client_software_version="1")
    wide = _fetch("wide", range(partitions), 0)
    narrow = _fetch("wide", range(1), 0)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock, \
                (socket.create_connection(("127.0.0.1", baseline.port)) if baseline else socket.socket()) as other:
            offset = [0]

            def ask(frame: bytes, to: socket.socket = sock) -> bytes:
                to.sendall(frame)
                return _answer(to)

            def produce_fetch() -> None:
                ask(produce)
                ask(_fetch("one", range(1), offset[0]))
                offset[0] += 1

            kinds = {
                "ApiVersions": (lambda: ask(api_versions), n),
                "produce+fetch round": (produce_fetch, n),
                "empty Fetch": (lambda: ask(_fetch("one", range(1), offset[0])), n),
                "Fetch of 1 partition": (lambda: ask(narrow), n),
                f"Fetch of {partitions} partitions": (lambda: ask(wide), max(4, n // 20)),
            }
            servers = {k: server for k in kinds}
            if baseline:
                kinds["baseline: Fetch of 1 partition"] = (lambda: ask(narrow, other), n)
                kinds["baseline: wide Fetch"] = (lambda: ask(wide, other), max(4, n // 20))
                servers.update({k: baseline for k in kinds if k.startswith("baseline")})
            for fn, _ in kinds.values():  # warm: imports, first opens
                fn()
            idle_s = bench.size(10, 1)
            cpu, started = server.cpu_s(), time.monotonic()
            time.sleep(idle_s)
            idle_rate = (server.cpu_s() - cpu) / (time.monotonic() - started)  # CPU s per s
            per: dict[str, list[float]] = {k: [] for k in kinds}
            for _ in range(bench.rounds(5)):
                for name, (fn, count) in kinds.items():
                    measured = servers[name]
                    cpu, started = measured.cpu_s(), time.monotonic()
                    for _ in range(count):
                        fn()
                    background = idle_rate * (time.monotonic() - started)
                    per[name].append((measured.cpu_s() - cpu - background) / count)
    finally:
        server.close()
        if baseline:
            baseline.close()
    med = {k: statistics.median(v) for k, v in per.items()}
    floor = med["ApiVersions"]
    bench.line(f"idle server's CPU (subtracted): {idle_rate * 100:.1f}% of a core")
    bench.line(f"server CPU per ApiVersions (the request loop's floor): {floor * 1e6:.0f} us")
    bench.line(f"server CPU per single-record produce+fetch round: {med['produce+fetch round'] * 1e3:.2f} ms",
               f"{floor * 2e6:.0f} us for two ApiVersions")
    bench.line(f"server CPU per empty Fetch: {med['empty Fetch'] * 1e6:.0f} us", f"{floor * 1e6:.0f} us ApiVersions")
    one, many = med["Fetch of 1 partition"], med[f"Fetch of {partitions} partitions"]
    beside = f"{one * 1e6:.0f} us for the whole 1-partition Fetch"
    if baseline:
        was = (med["baseline: wide Fetch"] - med["baseline: Fetch of 1 partition"]) / (partitions - 1)
        beside += f"; {was * 1e6:.1f} us in {baseline_repo}"
    bench.line(f"server CPU per partition in a Fetch of {partitions} partitions (1 record each): "
               f"{(many - one) / (partitions - 1) * 1e6:.1f} us", beside)

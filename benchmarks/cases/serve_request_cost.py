"""`klog serve`'s CPU per request: a single-record produce + fetch round, an empty Fetch, a wide Fetch.

One raw connection (frames written once with kio, so the client costs little) against a `klog
serve` process; the server's CPU is read from /proc before and after N requests of a kind, less
what the idle server spent in that time (its background ticks: checkpoints, the log cleaner, measured
first), and the kinds alternate round by round, each beside its baseline's (below) with the order
flipped every round. Beside them, in the same run, ApiVersions: the cost of the
request loop itself (read, parse, answer) with no work in the handler, the floor of every figure.

- round: Produce v9 of one 100-byte record (acks=all) to `one`, then Fetch v12 of that offset; beside
  it the same round on `nofsync`, a topic with flush.messages at its maximum (Kafka's default: no
  fsync per append; klog's default fsyncs every appended batch), which says what the fsync costs.
- empty fetch: Fetch v12 at the end of `one` with max_wait 0.
- wide fetch: Fetch v12 of every partition of `wide` (--partitions, one 100-byte record each, from
  offset 0): the per-partition figure is (wide - 1-partition fetch) / (partitions - 1).
- acks=0 burst: BURST pipelined Produce v9 requests with acks=0, one partition and one 100-byte record
  each (what librdkafka sends for a wide topic: one partition per request), to the partitions of
  `burst` in turn from a start that moves every burst (librdkafka's rotation over its partitions),
  written at once and followed by an ApiVersions whose answer says they were handled; the figure
  is per Produce request.
- the platform's floor, beside them: a bare asyncio Protocol answering each frame with a fixed
  400-byte frame at once, and after one hop to a thread pool (a no-op call): what any asyncio
  server pays on this machine per request and per thread hop, before doing any work.
Targets (issue 26): <= 0.5 ms per round, <= 20 us per partition.

Before/after in one run: KLOG_BENCH_BASELINE=<another checkout> (e.g. main's) starts a second server
from that checkout's code over a copy of the same store, and its rounds, empty Fetch and 1- and
many-partition Fetches join the alternation; its figures are printed beside this checkout's.
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

BURST = 64  # pipelined acks=0 Produce requests written at once (the server reads up to 64 ahead)


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


# the floor: a size-prefixed frame in, a fixed frame out, after `hops` no-op calls in a thread pool
_FLOOR_SERVER = """
import asyncio, struct, sys
from concurrent.futures import ThreadPoolExecutor
HOPS, POOL, ANSWER = int(sys.argv[1]), ThreadPoolExecutor(2), struct.pack(">i", 400) + bytes(400)
class Floor(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buf = transport, bytearray()
    def data_received(self, data):
        self.buf += data
        while len(self.buf) >= 4 and len(self.buf) >= 4 + struct.unpack_from(">i", self.buf)[0]:
            del self.buf[:4 + struct.unpack_from(">i", self.buf)[0]]
            asyncio.ensure_future(self.answer()) if HOPS else self.transport.write(ANSWER)
    async def answer(self):
        for _ in range(HOPS):
            await asyncio.get_running_loop().run_in_executor(POOL, int)
        self.transport.write(ANSWER)
async def main():
    server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _cpu_s(pid: int) -> float:
    """The CPU seconds of every thread of process `pid` so far, to the nanosecond (the schedulers'
    own count, /proc/PID/task/*/schedstat): /proc/PID/stat counts in clock ticks (10 ms), 10 us per
    request over 1,000 requests, as much as the differences measured here. (A thread that ends
    between two readings takes its time with it: a server's pools keep theirs.) Clock ticks where
    the kernel has no schedstat."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:  # (ended meanwhile)
                pass
    except FileNotFoundError:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total / 1e9


class _Floor:
    """The floor server as its own process (see _FLOOR_SERVER)."""

    def __init__(self, hops: int) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", _FLOOR_SERVER, str(hops)], stdout=subprocess.PIPE,
                                     text=True)
        self.port = int(self.proc.stdout.readline())

    def cpu_s(self) -> float:
        return _cpu_s(self.proc.pid)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _answer(sock: socket.socket) -> bytes:
    from tests.serve_helpers import read_answer

    return read_answer(sock)


def run(bench: Bench) -> None:
    import klog
    from tests.serve_helpers import batch, produce_request_fields

    partitions = bench.size(500, 20)
    burst = bench.size(BURST, 8)
    n = bench.size(1000, 20)
    data = os.path.join(bench.tmp, "data")
    with klog.open(data) as store:
        store.create_topic("one")
        store.create_topic("nofsync", configs={"flush.messages": str(2**63 - 1)})
        store.create_topic("wide", partitions=partitions)
        store.create_topic("burst", partitions=BURST)
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
    floors = [_Floor(0), _Floor(1)]
    record = batch([b"x" * 100])
    produce = {t: _frame(0, 9, **produce_request_fields(9, t, 0, record, acks=-1)) for t in ("one", "nofsync")}
    api_versions = _frame(18, 3, client_software_name="bench", client_software_version="1")
    wide = _fetch("wide", range(partitions), 0)
    burst_frames = [_frame(0, 9, **produce_request_fields(9, "burst", p, record, acks=0)) for p in range(BURST)]
    bursts = [b"".join(burst_frames[(start + i) % BURST] for i in range(burst)) for start in range(0, BURST, 7)]
    narrow = _fetch("wide", range(1), 0)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock, \
                socket.create_connection(("127.0.0.1", floors[0].port)) as floor0, \
                socket.create_connection(("127.0.0.1", floors[1].port)) as floor1, \
                (socket.create_connection(("127.0.0.1", baseline.port)) if baseline else socket.socket()) as other:
            offset = {"one": 0, "nofsync": 0}

            def ask(frame: bytes, to: socket.socket = sock) -> bytes:
                to.sendall(frame)
                return _answer(to)

            def produce_fetch(topic: str, to: socket.socket = sock) -> None:
                key = topic if to is sock else f"baseline {topic}"  # (each server has its own store)
                ask(produce[topic], to)
                ask(_fetch(topic, range(1), offset.setdefault(key, 0)), to)
                offset[key] += 1

            sent = [0]

            def acks0_burst(to: socket.socket = sock) -> None:
                sent[0] += 1
                ask(bursts[sent[0] % len(bursts)] + api_versions, to)  # (its answer: the burst was handled)

            kinds = {
                "ApiVersions": (lambda: ask(api_versions), n),
                "acks=0 burst": (acks0_burst, max(4, n // burst)),
                "produce+fetch round": (lambda: produce_fetch("one"), n),
                "round, no fsync": (lambda: produce_fetch("nofsync"), n),
                "empty Fetch": (lambda: ask(_fetch("one", range(1), offset["one"])), n),
                "Fetch of 1 partition": (lambda: ask(narrow), n),
                f"Fetch of {partitions} partitions": (lambda: ask(wide), max(4, n // 20)),
            }
            servers = {k: server for k in kinds}
            if baseline:
                kinds["baseline: empty Fetch"] = (lambda: ask(_fetch("one", range(1), offset.get("baseline one", 0)),
                                                              other), n)
                kinds["baseline: Fetch of 1 partition"] = (lambda: ask(narrow, other), n)
                kinds["baseline: wide Fetch"] = (lambda: ask(wide, other), max(4, n // 20))
                kinds["baseline: produce+fetch round"] = (lambda: produce_fetch("one", other), n)
                kinds["baseline: round, no fsync"] = (lambda: produce_fetch("nofsync", other), n)
                kinds["baseline: acks=0 burst"] = (lambda: acks0_burst(other), max(4, n // burst))
                servers.update({k: baseline for k in kinds if k.startswith("baseline")})
            floor_kinds = {"floor": (floor0, floors[0]), "floor, one hop": (floor1, floors[1])}

            def ask_floor(conn: socket.socket) -> None:
                conn.sendall(api_versions)
                _answer(conn)
            for fn, _ in kinds.values():  # warm: imports, first opens
                fn()
            idle_s = bench.size(10, 1)
            cpu, started = _cpu_s(server.proc.pid), time.monotonic()
            time.sleep(idle_s)
            idle_rate = (_cpu_s(server.proc.pid) - cpu) / (time.monotonic() - started)  # CPU s per s
            per: dict[str, list[float]] = {k: [] for k in [*kinds, *floor_kinds]}
            # each kind beside its baseline's, in turn, the order flipped every round: what runs just
            # before a measurement (the other server's, a wide Fetch) moves its figure, so neither
            # side always comes first
            twins = {"empty Fetch": "baseline: empty Fetch", "Fetch of 1 partition": "baseline: Fetch of 1 partition",
                     f"Fetch of {partitions} partitions": "baseline: wide Fetch",
                     "produce+fetch round": "baseline: produce+fetch round",
                     "round, no fsync": "baseline: round, no fsync", "acks=0 burst": "baseline: acks=0 burst"}
            groups = [[name, twins[name]] if name in twins and twins[name] in kinds else [name]
                      for name in kinds if not name.startswith("baseline")]
            for turn in range(bench.rounds(6)):
                for group in groups:
                    for name in (group if turn % 2 == 0 else group[::-1]):
                        fn, count = kinds[name]
                        measured = servers[name]
                        cpu, started = _cpu_s(measured.proc.pid), time.monotonic()
                        for _ in range(count):
                            fn()
                        background = idle_rate * (time.monotonic() - started)
                        per[name].append((_cpu_s(measured.proc.pid) - cpu - background) / count)
                for name, (conn, proc) in floor_kinds.items():
                    cpu = proc.cpu_s()
                    for _ in range(n):
                        ask_floor(conn)
                    per[name].append((proc.cpu_s() - cpu) / n)
    finally:
        server.close()
        if baseline:
            baseline.close()
        for floor in floors:
            floor.close()
    med = {k: statistics.median(v) for k, v in per.items()}
    floor = med["ApiVersions"]
    bench.line(f"idle server's CPU (subtracted): {idle_rate * 100:.1f}% of a core")
    bench.line(f"server CPU per ApiVersions (the request loop's floor): {floor * 1e6:.0f} us")
    bench.line(f"server CPU per single-record produce+fetch round: {med['produce+fetch round'] * 1e3:.2f} ms",
               f"{floor * 2e6:.0f} us for two ApiVersions")
    bench.line(f"server CPU per round without fsync (flush.messages max): {med['round, no fsync'] * 1e3:.2f} ms",
               f"{(med['produce+fetch round'] - med['round, no fsync']) * 1e6:.0f} us: the fsync's part of the round")
    if baseline:
        for kind in ("produce+fetch round", "round, no fsync"):
            bench.line(f"server CPU per {kind} in {baseline_repo}: {med['baseline: ' + kind] * 1e3:.2f} ms",
                       f"{med[kind] * 1e3:.2f} ms here ({med[kind] / med['baseline: ' + kind]:.2f}x)")
    per_produce = (med["acks=0 burst"] - floor) / burst
    beside = f"{floor * 1e6:.0f} us for the ApiVersions after each burst, subtracted"
    if baseline:
        was = (med["baseline: acks=0 burst"] - floor) / burst
        beside += f"; {was * 1e6:.0f} us in {baseline_repo} ({per_produce / was:.2f}x)"
    bench.line(f"server CPU per pipelined one-partition Produce with acks=0 (bursts of {burst}): "
               f"{per_produce * 1e6:.0f} us", beside)
    beside = f"{floor * 1e6:.0f} us ApiVersions"
    if baseline:
        beside += f"; {med['baseline: empty Fetch'] * 1e6:.0f} us in {baseline_repo}"
    bench.line(f"server CPU per empty Fetch: {med['empty Fetch'] * 1e6:.0f} us", beside)
    bench.line(f"CPU per request of a bare asyncio Protocol answering at once (this machine's floor): "
               f"{med['floor'] * 1e6:.0f} us", f"{floor * 1e6:.0f} us klog's ApiVersions")
    bench.line(f"CPU per thread hop of a bare asyncio server (a no-op run_in_executor): "
               f"{(med['floor, one hop'] - med['floor']) * 1e6:.0f} us",
               "a produce+fetch round makes none where io_uring takes the fsync, one where an append thread does")
    one, many = med["Fetch of 1 partition"], med[f"Fetch of {partitions} partitions"]
    beside = f"{one * 1e6:.0f} us for the whole 1-partition Fetch"
    if baseline:
        was = (med["baseline: wide Fetch"] - med["baseline: Fetch of 1 partition"]) / (partitions - 1)
        beside += f"; {was * 1e6:.1f} us in {baseline_repo}"
    bench.line(f"server CPU per partition in a Fetch of {partitions} partitions (1 record each): "
               f"{(many - one) / (partitions - 1) * 1e6:.1f} us", beside)

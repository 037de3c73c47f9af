"""A Fetch of one partition must not cost more as its topic gains partitions; a Fetch of all of them, per partition.

Two topics in one store, `one` (1 partition) and `many` (1,000 partitions), each with the same
1,000 records of 100 B in partition 0; a `klog serve` answers Fetch requests for partition 0 of
each, alternated on one connection (the peer of each `many` fetch is the `one` fetch beside it).
Prints median latencies and their ratio.

Then the wide Fetch: a topic `wide` of 500 partitions holding one 100-byte record each, fetched
whole (Fetch v12, from offset 0) and by its first partition alone, alternated; the server's CPU
(from /proc) per partition is (wide - one) / 499, the median of the rounds (issue 26's target:
<= 20 us). With KLOG_BENCH_BASELINE=<another checkout> (e.g. main's) a second server runs that
checkout's code over a copy of the store, its requests alternated with this tree's, and its
per-partition figure is printed beside.
"""

from __future__ import annotations

import datetime
import io
import os
import shutil
import socket
import statistics
import struct
import tempfile
import time
import uuid
from types import SimpleNamespace

from harness import REPO, Bench
from serve_process import Serve  # noqa: E402 - benchmarks/ is on sys.path when run as a script


def run(bench: Bench) -> None:
    _one_among_many(bench)
    _wide(bench)


def _one_among_many(bench: Bench) -> None:
    args = SimpleNamespace(partitions=bench.size(1000, 10), fetches=bench.size(300, 10), version=12, other_topics=0)

    from kio.index import load_payload_module
    from kio.static.constants import EntityType
    from kio.static.primitive import i32Timedelta

    import klog
    from klog.protocol.kafka import make
    from tests.serve_helpers import RawClient

    mod = load_payload_module(1, args.version, EntityType.request)
    with tempfile.TemporaryDirectory() as d:
        data_dir = os.path.join(d, "data")
        store = klog.open(data_dir)
        values = [b"%099d" % i for i in range(1000)]
        ids = {}
        for name, count in (("one", 1), ("many", args.partitions)):
            store.create_topic(name, partitions=count)
            with store.producer() as producer:
                producer.send_values(name, values, partition=0)
            ids[name] = uuid.UUID(store.topic(name).topic_id)
        for i in range(args.other_topics):
            store.create_topic(f"other-{i}", partitions=1)
        store.close()
        env = {**os.environ, "PYTHONPATH": REPO}
        server = Serve(data_dir, env)
        try:
            with RawClient(server.port) as client:
                def fetch(name: str) -> float:
                    part = make(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                    topic = make(mod.FetchTopic, topic=name, topic_id=ids[name], partitions=(part,))
                    start = time.perf_counter()
                    resp = client.send(1, args.version, replica_id=-1,
                                       max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                                       topics=(topic,), forgotten_topics_data=(), rack_id="")
                    took = time.perf_counter() - start
                    assert resp.responses[0].partitions[0].error_code == 0, resp
                    return took

                times: dict[str, list[float]] = {"one": [], "many": []}
                for _ in range(args.fetches):
                    for name in ("one", "many"):
                        times[name].append(fetch(name))
        finally:
            server.close()
    one, many = (statistics.median(times[n]) * 1000 for n in ("one", "many"))
    others = f" ({args.other_topics} other topics)" if args.other_topics else ""
    bench.line(f"Fetch v{args.version} of partition 0, 1,000 records{others}, median of {args.fetches} alternated: "
          f"1 partition {one:.2f} ms, {args.partitions} partitions {many:.2f} ms ({many / one:.2f}x)")


def _fetch_frame(topic: str, partitions: range) -> bytes:
    """A Fetch v12 request frame (size included) of `partitions` of `topic` from offset 0, max_wait 0."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i32Timedelta

    parts = tuple(FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=1 << 20) for p in partitions)
    request = FetchRequest(replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                           max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                           topics=(FetchTopic(topic=topic, partitions=parts),), forgotten_topics_data=(), rack_id="")
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=1, request_api_version=12, correlation_id=1,
                                                    client_id="bench"))
    entity_writer(FetchRequest)(buf, request)
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


def _ask(sock: socket.socket, frame: bytes) -> int:
    """Send `frame`, read the whole answer; its size."""
    from tests.serve_helpers import read_answer

    sock.sendall(frame)
    return len(read_answer(sock))


def _wide(bench: Bench) -> None:
    import klog

    partitions = bench.size(500, 20)
    per_round = bench.size(40, 2)  # wide fetches per round and server (and 10x as many 1-partition ones)
    data = os.path.join(bench.tmp, "wide")
    with klog.open(data) as store:
        store.create_topic("wide", partitions=partitions)
        with store.producer() as producer:
            for p in range(partitions):
                producer.send_values("wide", [b"%099d" % p], partition=p)
    servers = {"this tree": Serve(data, {**os.environ, "PYTHONPATH": REPO}, cwd=bench.tmp)}
    baseline_repo = os.environ.get("KLOG_BENCH_BASELINE")
    if baseline_repo:
        shutil.copytree(data, os.path.join(bench.tmp, "wide-baseline"))
        # (a neutral working directory: each server runs its own checkout's code)
        servers[baseline_repo] = Serve(os.path.join(bench.tmp, "wide-baseline"),
                                       {**os.environ, "PYTHONPATH": baseline_repo}, cwd=bench.tmp)
    wide, one = _fetch_frame("wide", range(partitions)), _fetch_frame("wide", range(1))
    per: dict[str, list[float]] = {name: [] for name in servers}
    try:
        socks = {name: socket.create_connection(("127.0.0.1", s.port)) for name, s in servers.items()}
        try:
            sizes = {name: _ask(sock, wide) for name, sock in socks.items()}  # warm: imports, first opens
            assert len(set(sizes.values())) == 1, sizes  # the same answer from each (one record each)
            for _ in range(bench.rounds(9)):
                for name, server in servers.items():
                    sock = socks[name]
                    cpu = server.cpu_s()
                    for _ in range(per_round):
                        _ask(sock, wide)
                    wide_s = (server.cpu_s() - cpu) / per_round
                    cpu = server.cpu_s()
                    for _ in range(per_round * 10):
                        _ask(sock, one)
                    one_s = (server.cpu_s() - cpu) / (per_round * 10)
                    per[name].append((wide_s - one_s) / (partitions - 1))
        finally:
            for sock in socks.values():
                sock.close()
    finally:
        for server in servers.values():
            server.close()
    figure = statistics.median(per["this tree"]) * 1e6
    beside = ""
    if baseline_repo:
        was = statistics.median(per[baseline_repo]) * 1e6
        beside = f"{was:.1f} us in {baseline_repo} ({figure / was:.2f}x), alternated"
    bench.line(f"server CPU per partition in a Fetch of {partitions} partitions (1 record each), median of "
               f"{len(per['this tree'])} rounds: {figure:.1f} us", beside)

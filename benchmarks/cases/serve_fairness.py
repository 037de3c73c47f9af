"""One hostile client at full speed against `klog serve`, beside another client's Metadata latency.

The hostile connection sends, as fast as it is answered, Produce requests of 1,000,000 partition
entries (refused unread: over --max-request-entries), Metadata naming one topic 500,000 times
(refused unread) and Produce requests of 19,000 entries (under the limit: parsed and answered in the
thread pool, handled in slices). Meanwhile a second connection sends Metadata for one topic, one
request at a time, for S seconds; the same is measured with no hostile client for comparison.
Target (issue 23): the second client's p99 under 100 ms.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from types import SimpleNamespace

from harness import REPO, Bench
from serve_process import Serve

import klog
from tests.serve_helpers import RawClient, huge_produce, read_answer, repeated_metadata


def metadata_latencies(port: int, seconds: float) -> list[float]:
    from kio.schema.metadata.v9.request import MetadataRequestTopic

    out = []
    with RawClient(port) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            client.send(3, 9, topics=(MetadataRequestTopic(name="free"),), allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
            out.append(time.monotonic() - started)
    return out


def summary(label: str, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)]
    return (f"{label}: {len(ordered)} Metadata answers, median {statistics.median(ordered) * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms")


def run(bench: Bench) -> None:
    args = SimpleNamespace(seconds=bench.size(10, 1))
    tmp = bench.tmp
    if True:
        data = os.path.join(tmp, "data")
        with klog.open(data) as store:
            store.create_topic("free")
        server = Serve(data, {**os.environ, "PYTHONPATH": REPO})
        try:
            bench.line(summary("quiet", metadata_latencies(server.port, args.seconds)))
            frames = [huge_produce(1_000_000), repeated_metadata(500_000), huge_produce(19_000)]
            stop = threading.Event()
            answered = [0]

            def hostile() -> None:
                with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
                    while not stop.is_set():
                        sock.sendall(frames[answered[0] % len(frames)])
                        read_answer(sock)
                        answered[0] += 1

            attacker = threading.Thread(target=hostile, daemon=True)
            attacker.start()
            time.sleep(0.5)
            cpu = server.cpu_s()
            latencies = metadata_latencies(server.port, args.seconds)
            bench.line(summary("one hostile client", latencies) + f"; hostile requests answered: {answered[0]}, "
                       f"server CPU {(server.cpu_s() - cpu) / args.seconds * 100:.0f}%")
            stop.set()
            attacker.join(60)
        finally:
            server.close()


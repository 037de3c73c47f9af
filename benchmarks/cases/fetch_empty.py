"""An idle consumer of many EMPTY partitions (nothing ever produced to them: no state file, no folder)
against `klog serve`: the server's CPU for one sessionless Fetch (v12, max_wait 0) naming 1, 1,000 and
10,000 of them, and another client's Metadata latency while one connection sends such Fetches of the
widest topic back to back. Each empty partition used to cost a folder listing per Fetch (~75 us:
1.6 s for 20,000) and held the GIL from the other client meanwhile.

Before/after in one run: KLOG_BENCH_BASELINE=<another checkout> (e.g. main's) starts a second server
from that checkout's code over a copy of the same store; its figures are printed beside this one's.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import threading
import time

from harness import REPO, Bench, percentile
from serve_process import Serve


def run(bench: Bench) -> None:
    from cases.serve_fairness import metadata_latencies
    from cases.serve_request_cost import _cpu_s, _fetch

    import klog
    from tests.serve_helpers import read_answer

    widths = [1, bench.size(1000, 20), bench.size(10000, 50)]
    seconds = bench.size(6, 1)
    data = os.path.join(bench.tmp, "data")
    with klog.open(data) as store:
        store.create_topic("free")
        for n in widths:
            store.create_topic(f"e{n}", partitions=n)
    time.sleep(0.6)  # (a state folder just changed is looked at again each time: see Partition.known_empty)
    servers = {"this": Serve(data, {**os.environ, "PYTHONPATH": REPO}, cwd=bench.tmp)}
    baseline_repo = os.environ.get("KLOG_BENCH_BASELINE")
    if baseline_repo:
        shutil.copytree(data, os.path.join(bench.tmp, "baseline"))
        servers["baseline"] = Serve(os.path.join(bench.tmp, "baseline"),
                                    {**os.environ, "PYTHONPATH": baseline_repo}, cwd=bench.tmp)
    frames = {n: _fetch(f"e{n}", range(n), 0) for n in widths}
    try:
        for name, server in servers.items():
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                def ask(frame: bytes) -> bytes:
                    sock.sendall(frame)
                    return read_answer(sock)

                for n in widths:
                    for _ in range(2):
                        ask(frames[n])  # (warm: the partitions opened, their emptiness seen once)
                    count = max(3, min(200, 20_000 // n))
                    per = []
                    for _ in range(bench.rounds(3)):
                        cpu = _cpu_s(server.proc.pid)
                        for _ in range(count):
                            ask(frames[n])
                        per.append((_cpu_s(server.proc.pid) - cpu) / count)
                    bench.line(f"[{name}] server CPU per Fetch of {n:,} empty partitions: "
                               f"{statistics.median(per) * 1e6:,.0f} us")
                stop = threading.Event()
                fetches = [0]

                def hammer(n: int = widths[-1], stop: threading.Event = stop, fetches: list = fetches) -> None:
                    while not stop.is_set():
                        ask(frames[n])
                        fetches[0] += 1

                thread = threading.Thread(target=hammer)
                thread.start()
                try:
                    lat = metadata_latencies(server.port, seconds)
                finally:
                    stop.set()
                    thread.join(timeout=60)
                bench.line(f"[{name}] another client's Metadata during Fetches of {widths[-1]:,} empty partitions "
                           f"({fetches[0]} in {seconds} s): p50 {statistics.median(lat) * 1e3:.1f} ms, "
                           f"p90 {percentile(lat, 90) * 1e3:.1f} ms, max {max(lat) * 1e3:.1f} ms")
    finally:
        for server in servers.values():
            server.close()

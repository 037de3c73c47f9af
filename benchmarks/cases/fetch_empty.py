"""An idle consumer of many EMPTY partitions (nothing ever produced to them: no state file, no folder)
against `klog serve`: the server's CPU for one sessionless Fetch (v12, max_wait 0) naming 1, 1,000 and
10,000 of them, and another client's Metadata latency while one connection sends such Fetches of the
widest topic back to back. Then the long-poll watcher: consumers long-polling (max_wait 2 s) 5,000
partitions holding a record each, from their end, and the other client's Metadata latency meanwhile.
Each empty partition used to cost a folder listing per Fetch (~75 us: 1.6 s for 20,000).

Before/after in one run: KLOG_BENCH_BASELINE=<another checkout> (e.g. main's) starts a second server
from that checkout's code over a copy of the same store; its figures are printed beside this one's.
"""

from __future__ import annotations

import datetime
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
    from cases.serve_request_cost import _cpu_s, _fetch, _frame
    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    import klog
    from tests.serve_helpers import read_answer

    widths = [1, bench.size(1000, 20), bench.size(10000, 50)]
    seconds = bench.size(6, 1)
    data = os.path.join(bench.tmp, "data")
    with klog.open(data) as store:
        store.create_topic("free")
        for n in widths:
            store.create_topic(f"e{n}", partitions=n)
        watched = bench.size(5000, 50)
        store.create_topic("full", partitions=watched)
        with store.producer() as producer:
            for p in range(watched):
                producer.send_values("full", [b"%099d" % p], partition=p)
    time.sleep(0.6)  # (a state folder just changed is looked at again each time: see Partition.known_empty)
    servers = {"this": Serve(data, {**os.environ, "PYTHONPATH": REPO}, cwd=bench.tmp)}
    baseline_repo = os.environ.get("KLOG_BENCH_BASELINE")
    if baseline_repo:
        shutil.copytree(data, os.path.join(bench.tmp, "baseline"))
        servers["baseline"] = Serve(os.path.join(bench.tmp, "baseline"),
                                    {**os.environ, "PYTHONPATH": baseline_repo}, cwd=bench.tmp)
    frames = {n: _fetch(f"e{n}", range(n), 0) for n in widths}
    long_poll = _frame(1, 12, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(seconds=2)), min_bytes=1,
                       max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic="full", partitions=tuple(
                           FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=1, last_fetched_epoch=-1,
                                          log_start_offset=-1, partition_max_bytes=1 << 20)
                           for p in range(watched))),), forgotten_topics_data=(), rack_id="")
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
            stop = threading.Event()
            answers = [0]

            def poll(stop: threading.Event = stop, answers: list = answers, port: int = server.port) -> None:
                with socket.create_connection(("127.0.0.1", port)) as poller:
                    while not stop.is_set():  # (each waits up to 2 s: the watcher reads every partition per tick)
                        poller.sendall(long_poll)
                        read_answer(poller)
                        answers[0] += 1

            threads = [threading.Thread(target=poll) for _ in range(2)]
            for thread in threads:
                thread.start()
            try:
                time.sleep(0.5)  # (their first Fetch read and found nothing new: now they wait, the watcher ticks)
                cpu, started = _cpu_s(server.proc.pid), time.monotonic()
                time.sleep(1.2)
                waiting = (_cpu_s(server.proc.pid) - cpu) / (time.monotonic() - started)
                cpu, started = _cpu_s(server.proc.pid), time.monotonic()
                lat = metadata_latencies(server.port, seconds)
                rate = (_cpu_s(server.proc.pid) - cpu) / (time.monotonic() - started)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(timeout=60)
            bench.line(f"[{name}] another client's Metadata while 2 consumers long-poll {watched:,} partitions "
                       f"({answers[0]} answers): "
                       f"p50 {statistics.median(lat) * 1e3:.1f} ms, p90 {percentile(lat, 90) * 1e3:.1f} ms, "
                       f"max {max(lat) * 1e3:.1f} ms; server CPU {rate * 100:.0f}% ({waiting * 100:.0f}% while only "
                       f"they wait)")
    finally:
        for server in servers.values():
            server.close()

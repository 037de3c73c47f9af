"""A Fetch of one partition must not cost more as its topic gains partitions (a benchmark, not a test).

    python benchmarks/bench_fetch_partitions.py [--partitions 1000] [--fetches 300] [--version 12]

Two topics in one store, `one` (1 partition) and `many` (--partitions), each with the same 1,000
records of 100 B in partition 0; a `klog serve` answers Fetch requests for partition 0 of each,
alternated on one connection (the peer of each `many` fetch is the `one` fetch beside it). Prints
median latencies and their ratio. Also run with --version 13 (topics by id), and --other-topics 1000.
"""

from __future__ import annotations

import datetime
import os
import statistics
import tempfile
import time
import uuid
from types import SimpleNamespace

from harness import REPO, Bench
from serve_process import Serve  # noqa: E402 - benchmarks/ is on sys.path when run as a script


def run(bench: Bench) -> None:
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


"""`klog serve` with Kafka clients beside the local CLI on the same machine, in the same run
(a benchmark, not a test: prints README figures).

    python benchmarks/bench_serve.py [--records N] [--rounds R] [--latency-samples S]

- produce: confluent-kafka (librdkafka) Producer, N records of 100 B, acks=all, default batching (and
  kcat -P of the same lines: librdkafka without a Python call per record),
  into `klog serve`; beside `klog produce` of the same N lines into the local store.
- fetch: `kcat -C -e -o beginning > /dev/null` of those N records through the server, the issue's
  command exactly, 3 runs per round (its end offset checked from kcat's "Reached end" line; the
  kcat process's own CPU and the server's CPU seconds per fetched MiB, from /proc); the same kcat
  printing each value into a pipe the benchmark reads (the lines counted), without kcat's waits, a
  confluent-kafka consumer; beside `klog consume` of the same topic.
- latency: single records at low load (one every 5 ms), produce call -> consumer delivery, p50/p99;
  the Kafka pair (confluent producer acks=all, linger 0; confluent consumer long-polling) beside
  klog's library producer (acks=all, flush per record) and a following consumer in another process.
- memory: the server's RSS idle, with 500 idle connections, and with 10 busy producers.

Each round alternates the server and local runs; figures are medians of R rounds.

`--produce-only`: the produce rows alone, each round alternating the server as it is with the same
server checking every batch with the record walk only (validate.uniform_records_ok off: the
previous validator), with the server's and the client's CPU seconds per run (confluent-kafka and
kcat -P against both).
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from types import SimpleNamespace

from harness import REPO, Bench
from serve_process import Serve, klog_cmd  # benchmarks/ is on sys.path when run as a script

KCAT = shutil.which("kcat")


def confluent_produce(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    value = b"x" * 100
    failures = []
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda e, m: failures.append(e) if e else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0 or failures:
        raise SystemExit(f"confluent produce failed: {failures[:3]}")
    return time.perf_counter() - start


def local_produce(data_dir: str, topic: str, lines_path: str, env: dict) -> float:
    start = time.perf_counter()
    with open(lines_path, "rb") as stdin:
        r = subprocess.run(klog_cmd("produce", topic, "-d", data_dir, "--acks", "all"), stdin=stdin,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if r.returncode:
        raise SystemExit(f"klog produce failed: {r.stderr.decode()}")
    return time.perf_counter() - start


def kcat_produce(bootstrap: str, topic: str, lines_path: str, n: int, data_dir: str, env: dict) -> float:
    """kcat -P (librdkafka in C, no Python per record): what the server takes when the client is not
    the bound. The record count is checked in the store afterwards."""
    subprocess.run(klog_cmd("topics", "create", topic, "-d", data_dir), env=env, check=True,
                   stdout=subprocess.DEVNULL)
    start = time.perf_counter()
    r = subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-X", "acks=all", "-l", lines_path],
                       capture_output=True)
    took = time.perf_counter() - start
    out = subprocess.run(klog_cmd("offsets", topic, "-d", data_dir), env=env, capture_output=True, text=True)
    if r.returncode or f" {n}" not in out.stdout:
        raise SystemExit(f"kcat -P failed: {r.stderr[-300:]!r} {out.stdout}")
    return took


def count_lines(args: list[str], env: dict, expected: int) -> float:
    return count_lines_cpu(args, env, expected)[0]


def count_lines_cpu(args: list[str], env: dict, expected: int) -> tuple[float, float]:
    """(wall seconds, the child's user+sys CPU seconds) of a command printing `expected` lines."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(args, capture_output=True, env=env)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = r.stdout.count(b"\n")
    if r.returncode or got != expected:
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}, {got} lines of {expected}: {r.stderr[-300:]!r}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def kcat_to_devnull(args: list[str], env: dict, expected_end: int) -> tuple[float, float]:
    """(wall seconds, kcat's CPU seconds) of `kcat ... -e > /dev/null`; kcat's stderr must say it
    reached the end at `expected_end` (nothing is counted on stdout: it goes to /dev/null)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode or f"at offset {expected_end}: exiting".encode() not in r.stderr:
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr[-300:]!r}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def confluent_consume(bootstrap: str, topic: str, n: int, **config: object) -> float:
    """librdkafka's consumer in Python: consume(num_messages=10,000) batches from the beginning
    until n records arrived (no group: assigned partition 0)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-consume", "enable.auto.commit": False,
                         **config})
    got = 0
    start = time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = start + 120
        while got < n and time.perf_counter() < deadline:
            got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    finally:
        consumer.close()
    if got != n:
        raise SystemExit(f"confluent consume: {got} of {n} records")
    return time.perf_counter() - start


def raw_fetch(port: int, topic: str, n: int) -> float:
    """Fetch v12 requests of 1 MiB each from one connection, batches counted, nothing decoded:
    what the server itself sustains, without a client library's parsing."""
    import datetime
    import struct

    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    sys.path.insert(0, REPO)
    from tests.serve_helpers import RawClient

    offset = 0
    start = time.perf_counter()
    with RawClient(port) as client:
        while offset < n:
            part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                  log_start_offset=-1, partition_max_bytes=1 << 20)
            resp = client.send(1, 12, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
                               min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                               topics=(FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=(),
                               rack_id="")
            records = resp.responses[0].partitions[0].records
            pos = 0
            while pos + 61 <= len(records):
                base, length = struct.unpack_from(">qi", records, pos)
                if pos + 12 + length > len(records):
                    break  # a batch cut at the byte limit
                offset = base + struct.unpack_from(">i", records, pos + 23)[0] + 1
                pos += 12 + length
    return time.perf_counter() - start


def kafka_latency(bootstrap: str, topic: str, samples: int) -> list[float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lat", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    out: list[float] = []
    try:
        consumer.consume(1, 1.0)
        for _ in range(samples):
            sent = time.perf_counter()
            producer.produce(topic, b"%.9f" % sent)
            producer.poll(0)
            deadline = sent + 5
            while time.perf_counter() < deadline:
                msgs = consumer.consume(1, 0.5)
                if msgs and msgs[0].error() is None:
                    out.append(time.perf_counter() - float(msgs[0].value()))
                    break
            time.sleep(0.005)
        producer.flush(10)
    finally:
        consumer.close()
    return out


def local_latency(data_dir: str, topic: str, samples: int, env: dict) -> list[float]:
    """klog's producer here, `klog consume -f` in another process printing each value at once."""
    import klog

    follower = subprocess.Popen(klog_cmd("consume", topic, "-f", "-d", data_dir, "--offset", "end"),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)
    out: list[float] = []
    try:
        time.sleep(1.5)  # the follower is at the end before the first send
        with klog.open(data_dir) as store, store.producer(acks="all") as producer:
            for _ in range(samples):
                sent = time.perf_counter()
                producer.send(topic, b"%.9f" % sent)
                producer.flush()
                line = follower.stdout.readline()
                out.append(time.perf_counter() - float(line))
                time.sleep(0.005)
    finally:
        follower.terminate()
        follower.wait(10)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def memory(serve: Serve, bootstrap: str) -> tuple[float, float, float]:
    from confluent_kafka import Producer

    idle = serve.rss_mib()
    socks = [socket.create_connection(("127.0.0.1", serve.port)) for _ in range(500)]
    time.sleep(1)
    with_idle = serve.rss_mib()
    for s in socks:
        s.close()
    stop = threading.Event()
    peak = [0.0]

    def busy(i: int) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        while not stop.is_set():
            try:
                p.produce(f"mem-{i}", b"y" * 100)
            except BufferError:
                p.poll(0.01)
        p.flush(30)

    threads = [threading.Thread(target=busy, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for _ in range(20):
        time.sleep(0.25)
        peak[0] = max(peak[0], serve.rss_mib())
    stop.set()
    for t in threads:
        t.join(60)
    return idle, with_idle, peak[0]


# the server with the one-pass check of uniform batches off: every batch takes the record walk
WALK_ONLY_SERVER = ("import sys; import klog.store.validate as v; v.UNIFORM_MIN_RECORDS = 1 << 62; "
                    "sys.argv[0] = 'klog'; from klog.cli.entry import main; main()")


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread: librdkafka's included
    return usage.ru_utime + usage.ru_stime


def produce_only(n: int, rounds: int, env: dict) -> None:
    """confluent-kafka and kcat -P -> `klog serve` as it is and with the walk only, alternated; klog produce."""
    load_before = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="bench-serve-produce-")
    lines_path = os.path.join(tmp, "lines")
    with open(lines_path, "wb") as f:
        f.write((b"x" * 100 + b"\n") * n)
    names = ("one pass", "walk only")
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in names}  # rate, server, client CPU s
    kcat_rows: dict[str, list[tuple[float, float]]] = {k: [] for k in names}  # rate, server CPU s
    local_rates: list[float] = []
    servers: dict[str, Serve] = {}
    dirs = {name: os.path.join(tmp, name.replace(" ", "-")) for name in names}
    try:
        for name, code in zip(names, (None, WALK_ONLY_SERVER), strict=True):
            servers[name] = Serve(dirs[name], env, python_code=code)
        for r in range(rounds):
            for name in names if r % 2 == 0 else reversed(names):
                serve = servers[name]
                topic = f"bench-{r}"
                subprocess.run(klog_cmd("topics", "create", topic, "-d", dirs[name]), env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                server0, client0 = serve.cpu_s(), self_cpu_s()
                took = confluent_produce(serve.bootstrap, topic, n)
                rows[name].append((n / took, serve.cpu_s() - server0, self_cpu_s() - client0))
                if KCAT:
                    server0 = serve.cpu_s()
                    took = kcat_produce(serve.bootstrap, f"kcat-{r}", lines_path, n, dirs[name], env)
                    kcat_rows[name].append((n / took, serve.cpu_s() - server0))
            local_rates.append(n / local_produce(os.path.join(tmp, "local"), f"bench-{r}", lines_path, env))
            print(f"round {r + 1}: " + ", ".join(f"{k}: confluent {v[-1][0]:,.0f}/s (server {v[-1][1]:.2f} s, client "
                                                  f"{v[-1][2]:.2f} s CPU)" for k, v in rows.items()) +
                  "".join(f", {k}: kcat -P {v[-1][0]:,.0f}/s (server {v[-1][1]:.2f} s)"
                          for k, v in kcat_rows.items() if v) +
                  f", klog produce {local_rates[-1]:,.0f}/s", flush=True)
    finally:
        for serve in servers.values():
            serve.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{n:,} records of 100 B, medians of {rounds} alternated rounds; load average before/after "
          f"{load_before:.1f}/{os.getloadavg()[0]:.1f}")
    for name, values in rows.items():
        rate, server, client = (statistics.median(v[i] for v in values) for i in range(3))
        print(f"produce  confluent-kafka acks=all -> klog serve ({name:9}) {rate:>12,.0f} records/s  "
              f"server CPU {server / n * 1e6:.2f} us/record, client CPU {client / n * 1e6:.2f} us/record "
              f"({min(v[0] for v in values):,.0f}-{max(v[0] for v in values):,.0f})")
    for name, kvalues in kcat_rows.items():
        if kvalues:
            rate, server = (statistics.median(v[i] for v in kvalues) for i in range(2))
            print(f"produce  kcat -P -X acks=all -> klog serve ({name:9})       {rate:>12,.0f} records/s  "
                  f"server CPU {server / n * 1e6:.2f} us/record")
    print(f"produce  klog produce (local CLI) acks=all               {statistics.median(local_rates):>12,.0f} "
          "records/s")


def run(bench: Bench) -> None:
    args = SimpleNamespace(records=bench.size(1_000_000, 3_000), rounds=bench.rounds(3),
                           latency_samples=bench.size(300, 10), produce_only=False)
    env = {**os.environ, "PYTHONPATH": REPO}
    if args.produce_only:
        produce_only(args.records, args.rounds, env)
        return
    load_before = os.getloadavg()[0]
    n = args.records
    tmp = tempfile.mkdtemp(prefix="bench-serve-")
    lines_path = os.path.join(tmp, "lines")
    with open(lines_path, "wb") as f:
        f.write((b"x" * 100 + b"\n") * n)
    results: dict[str, list[float]] = {k: [] for k in ("serve_produce", "kcat_produce", "local_produce", "serve_fetch",
                                                        "kcat_devnull", "devnull_cpu_per_mib", "devnull_kcat_cpu_us",
                                                        "local_fetch", "cpu_per_mib", "raw_fetch", "kcat_cpu_us",
                                                        "kcat_fetch_short_wait", "confluent_fetch",
                                                        "confluent_fetch_short_backoff")}
    serve_dir, local_dir = os.path.join(tmp, "serve"), os.path.join(tmp, "local")
    serve = Serve(serve_dir, env)
    try:
        for r in range(args.rounds):
            topic = f"bench-{r}"
            subprocess.run(klog_cmd("topics", "create", topic, "-d", serve_dir), env=env, check=True,
                           stdout=subprocess.DEVNULL)
            results["serve_produce"].append(n / confluent_produce(serve.bootstrap, topic, n))
            results["local_produce"].append(n / local_produce(local_dir, topic, lines_path, env))
            if KCAT:
                results["kcat_produce"].append(n / kcat_produce(serve.bootstrap, f"kcat-{r}", lines_path, n,
                                                                serve_dir, env))
            if KCAT:
                for _ in range(3):  # the command; its waits make single runs vary (see the README)
                    cpu0 = serve.cpu_s()
                    took, kcat_cpu = kcat_to_devnull([KCAT, "-b", serve.bootstrap, "-C", "-t", topic, "-e", "-o",
                                                      "beginning"], env, n)
                    results["kcat_devnull"].append(n / took)
                    results["devnull_cpu_per_mib"].append((serve.cpu_s() - cpu0) / (n * 170 / 2**20))
                    results["devnull_kcat_cpu_us"].append(kcat_cpu / n * 1e6)
                kcat_c = [KCAT, "-b", serve.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-q", "-f", "%s\n"]
                cpu0 = serve.cpu_s()
                took, kcat_cpu = count_lines_cpu(kcat_c, env, n)
                cpu = serve.cpu_s() - cpu0
                results["serve_fetch"].append(n / took)
                results["kcat_cpu_us"].append(kcat_cpu / n * 1e6)
                results["cpu_per_mib"].append(cpu / (n * 170 / 2**20))  # ~170 B per 100-B record on disk
                # the same without kcat's own waits: -e needs one empty fetch at the end, which waits
                # fetch.wait.max.ms (500 ms by default, on Kafka as here), and when kcat prints slower
                # than it fetches, librdkafka stops fetching at queued.min.messages (100,000) and
                # looks again only about a second later
                results["kcat_fetch_short_wait"].append(
                    n / count_lines([*kcat_c, "-X", "fetch.wait.max.ms=10", "-X", "queued.min.messages=10000000"],
                                    env, n))
            results["confluent_fetch"].append(n / confluent_consume(serve.bootstrap, topic, n))
            # librdkafka prefetches up to queued.min.messages (100,000) and, once there, pauses
            # fetching for fetch.queue.backoff.ms (1 s by default) however fast the queue drains
            results["confluent_fetch_short_backoff"].append(
                n / confluent_consume(serve.bootstrap, topic, n, **{"fetch.queue.backoff.ms": 10}))
            results["raw_fetch"].append(n / raw_fetch(serve.port, topic, n))
            results["local_fetch"].append(n / count_lines(klog_cmd("consume", topic, "-d", local_dir), env, n))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" if "cpu" not in k
                                                  else f"{k} {v[-1]:.4f}"
                                                  for k, v in results.items() if v))
        lat_topic = "latency"
        subprocess.run(klog_cmd("topics", "create", lat_topic, "-d", serve_dir), env=env, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(klog_cmd("topics", "create", lat_topic, "-d", local_dir), env=env, check=True,
                       stdout=subprocess.DEVNULL)
        kafka_lat = kafka_latency(serve.bootstrap, lat_topic, args.latency_samples)
        local_lat = local_latency(local_dir, lat_topic, args.latency_samples, env)
        idle, with_idle, busy = memory(serve, serve.bootstrap)
    finally:
        serve.close()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"\n{n:,} records of 100 B, medians of {args.rounds} rounds; load average before/after "
          f"{load_before:.1f}/{os.getloadavg()[0]:.1f}")
    bench.line(f"produce  klog serve + confluent-kafka acks=all   {med['serve_produce']:>12,.0f} records/s")
    if "kcat_produce" in med:
        bench.line(f"produce  klog serve + kcat -P -X acks=all        {med['kcat_produce']:>12,.0f} records/s")
    bench.line(f"produce  klog produce (local CLI) acks=all       {med['local_produce']:>12,.0f} records/s")
    if "kcat_devnull" in med:
        runs = results["kcat_devnull"]
        bench.line(f"fetch  klog serve + kcat -C -e -o beginning > /dev/null {med['kcat_devnull']:>12,.0f} records/s "
              f"(median of {len(runs)} runs, {min(runs):,.0f}-{max(runs):,.0f}; server CPU "
              f"{med['devnull_cpu_per_mib'] * 1000:.1f} ms per MiB; kcat CPU {med['devnull_kcat_cpu_us']:.2f} us "
              "per record)")
    if "serve_fetch" in med:
        bench.line(f"fetch  klog serve + kcat -C -e -f '%s\\n' | pipe {med['serve_fetch']:>12,.0f} records/s "
              f"(server CPU {med['cpu_per_mib'] * 1000:.1f} ms per MiB; "
              f"kcat CPU {med['kcat_cpu_us']:.2f} us per record)")
        bench.line(f"fetch  the same, -X fetch.wait.max.ms=10 -X queued.min.messages=10000000 "
              f"{med['kcat_fetch_short_wait']:>12,.0f} records/s")
    bench.line(f"fetch  klog serve + confluent consume(10,000)  {med['confluent_fetch']:>12,.0f} records/s")
    bench.line(f"fetch  the same, fetch.queue.backoff.ms=10     "
               f"{med['confluent_fetch_short_backoff']:>12,.0f} records/s")
    bench.line(f"fetch  klog serve, raw Fetch v12 of 1 MiB      {med['raw_fetch']:>12,.0f} records/s "
               "(no client parsing)")
    bench.line(f"fetch  klog consume (local CLI)                {med['local_fetch']:>12,.0f} records/s")
    bench.line(f"latency  serve, confluent producer -> consumer   p50 {pct(kafka_lat, 0.5):.1f} ms  "
          f"p99 {pct(kafka_lat, 0.99):.1f} ms ({len(kafka_lat)} samples)")
    bench.line(f"latency  local, klog producer -> consume -f      p50 {pct(local_lat, 0.5):.1f} ms  "
          f"p99 {pct(local_lat, 0.99):.1f} ms ({len(local_lat)} samples)")
    bench.line(f"memory, klog serve RSS: idle {idle:.0f} MiB, 500 idle connections {with_idle:.0f} MiB, "
          f"10 busy producers {busy:.0f} MiB")


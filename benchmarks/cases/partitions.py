"""Many partitions at the cost of one: CPU and RSS of produce, -K, serve and mirror, 1 vs 1,000 vs 10,000.

The same input into topics of 1, 1,000 and 10,000 partitions (each run its own process, measured
by a small parent process: user + system CPU seconds and peak RSS):
- produce: `klog produce t` of N lines (keyless: the sticky partitioner fills one partition's batch
  at a time);
- keyed: `klog produce t -K:` of N `key:value` lines over 5,000 keys (every partition gets some);
- serve: the same keyed records through `klog serve` from confluent-kafka (linger 50 ms; librdkafka
  sends one partition per Produce request, so a wide topic is a burst of small pipelined requests);
  the server's CPU and RSS (/proc);
- serve_many: the same keyed records through `klog serve` in Produce v9 requests of many partitions
  each, as Kafka's Java client, kafka-python and sarama send them (librdkafka does not): each
  partition's records in batches of up to 1 MB, requests of up to 1 MB (max.request.size's default),
  so that 1 and 1,000 partitions take the same number of requests (~24) and only the partitions
  per request differ; the batches are encoded before the clock starts; the server's CPU and RSS,
  `again` the median of alternated rounds (a server per partition count);
- mirror: `klog mirror SRC DEST t` of the keyed topic between two local stores.
Each writes into the topic twice: `first` into the new topic (it creates every partition's files),
then `again` (the steady state). The peer of each partition count is one partition, same run. For
produce and -K, `again` is the median of alternated rounds over every partition count (the load of
a shared machine moves CPU time by ±20% from one run to the next).

Before/after in one run: KLOG_BENCH_BASELINE=<another checkout> (e.g. main's) runs produce and -K
from that checkout's code too, its `again` rounds alternated with this tree's, each count in its own
store; its figures are printed beside this tree's. KLOG_BENCH_PARTITION_COUNTS (e.g. `1,1000`) and
KLOG_BENCH_PARTITION_CASES (e.g. `keyed,serve`) narrow a run (its rows replace only those it measured).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import time

from harness import Bench
from serve_process import Serve, klog_cmd

from tests.peak_rss import run_measured
from tests.serve_helpers import read_answer

KEYS = 5000
VALUE = b"x" * 100


def make_inputs(folder: str, lines: int) -> tuple[str, str]:
    rng = random.Random(1)
    plain, keyed = os.path.join(folder, "plain"), os.path.join(folder, "keyed")
    with open(plain, "wb") as p, open(keyed, "wb") as k:
        for start in range(0, lines, 10_000):
            idx = range(start, min(lines, start + 10_000))
            p.write(b"".join(b"%s %d\n" % (VALUE, i) for i in idx))
            k.write(b"".join(b"k%d:%s %d\n" % (rng.randrange(KEYS), VALUE, i) for i in idx))
    return plain, keyed


def measured(args: list[str], env: dict, stdin_path: str | None = None, cwd: str | None = None
             ) -> tuple[float, float, float]:
    """(CPU seconds, peak RSS MiB, wall seconds) of one klog process, read by a small parent
    (tests/peak_rss.py: started from this process, which holds the inputs, a klog would report this
    process's size as its peak whenever it stayed smaller). `cwd`: a neutral working directory, so
    that the PYTHONPATH of `env` decides which checkout runs."""
    got = run_measured(klog_cmd(*args), env=env, stdin_path=stdin_path, cwd=cwd)
    if got.returncode != 0:
        raise SystemExit(f"klog {' '.join(args)} failed: {got.said}")
    return got.cpu_s, got.peak_rss_mib, got.wall_s


def create(env: dict, data_dir: str, topic: str, partitions: int) -> None:
    subprocess.run(klog_cmd("topics", "create", topic, "-p", str(partitions), "-d", data_dir), env=env, check=True,
                   capture_output=True)


def case_produce(env: dict, work: str, counts: list[int], path: str, keyed: bool,
                 rounds: int, envs: dict[str, dict] | None = None) -> dict[str, dict[int, dict[str, tuple]]]:
    """Per checkout (`envs`: name -> its environment; this tree's alone by default) and partition
    count: `first` into a new topic, then `again`: the median of `rounds` alternated runs (each
    checkout and count in turn, the order rotating)."""
    envs = envs or {"": env}
    keys = [(name, p) for p in counts for name in envs]

    def folder(name: str, p: int) -> str:
        return os.path.join(work, f"store-{name or 'this'}-{p}")

    args = {(n, p): ["produce", "t", "-d", folder(n, p), *(["-K:"] if keyed else [])] for n, p in keys}
    out: dict[str, dict[int, dict[str, tuple]]] = {n: {} for n in envs}
    for n, p in keys:
        create(envs[n], folder(n, p), "t", p)
        out[n][p] = {"first": measured(args[(n, p)], envs[n], path, cwd=work)}
    again: dict[tuple[str, int], list[tuple[float, float, float]]] = {k: [] for k in keys}
    for r in range(rounds):
        shift = r % len(keys)
        for k in keys[shift:] + keys[:shift]:
            again[k].append(measured(args[k], envs[k[0]], path, cwd=work))
    for n, p in keys:
        out[n][p]["again"] = tuple(statistics.median(m[i] for m in again[(n, p)]) for i in range(3))
        shutil.rmtree(folder(n, p))
    return out


def case_serve(env: dict, work: str, partitions: int, path: str) -> dict[str, tuple]:
    from confluent_kafka import Producer

    data_dir = os.path.join(work, "store")
    create(env, data_dir, "t", partitions)
    with open(path, "rb") as f:
        records = [line.rstrip(b"\n").split(b":", 1) for line in f]
    serve = Serve(data_dir, env, cwd=work)  # (a neutral directory: the PYTHONPATH of env decides the code)
    out = {}
    try:
        for label in ("first", "again"):
            failed: list[str] = []

            def delivered(err, _msg, failed=failed) -> None:  # noqa: ANN001 - librdkafka's error, message
                if err is not None and len(failed) < 3:
                    failed.append(str(err))

            producer = Producer({"bootstrap.servers": serve.bootstrap, "linger.ms": 50, "acks": "all",
                                 "partitioner": "murmur2_random", "queue.buffering.max.messages": 2_000_000,
                                 "batch.size": 1_000_000, "log_level": 0, "on_delivery": delivered,
                                 "message.timeout.ms": 120_000})
            cpu, start = serve.cpu_s(), time.monotonic()
            for key, value in records:
                while True:
                    try:
                        producer.produce("t", value, key)
                        break
                    except BufferError:
                        producer.poll(0.05)
            if producer.flush(300) != 0 or failed:
                raise SystemExit(f"klog serve did not acknowledge every record: {failed}")
            out[label] = (serve.cpu_s() - cpu, serve.rss_mib(), time.monotonic() - start)
    finally:
        serve.close()
    shutil.rmtree(data_dir)
    return out


REQUEST_BYTES_MAX = 1 << 20  # the Java client's max.request.size default


def _produce_requests(path: str, partitions: int) -> list[bytes]:
    """Produce v9 frames (acks all) of the keyed input: each partition's records (murmur2 of the
    key, as every client partitions) in batches of up to 1 MB, packed into requests of up to 1 MB."""
    import struct

    from klog.client.partitioner import partition_for_key
    from klog.store.codec import encode_batch, encode_uvarint

    now = int(time.time() * 1000)
    by_partition: dict[int, list] = {}
    with open(path, "rb") as f:
        for line in f:
            key, _, value = line.rstrip(b"\n").partition(b":")
            by_partition.setdefault(partition_for_key(key, partitions), []).append((key, value, (), now))
    batches: list[tuple[int, bytes]] = []
    for p in sorted(by_partition):
        records, start, size = by_partition[p], 0, 0
        for i, (key, value, _, _) in enumerate(records):
            size += len(key) + len(value) + 16
            if size > REQUEST_BYTES_MAX - 1024 or i == len(records) - 1:
                batches.append((p, encode_batch(records[start:i + 1])))
                start, size = i + 1, 0
    frames, pending, pending_bytes = [], [], 0

    def flush() -> None:
        entries = b"".join(struct.pack(">i", p) + encode_uvarint(len(b) + 1) + b + b"\0" for p, b in pending)
        topic = encode_uvarint(2) + b"t" + encode_uvarint(len(pending) + 1) + entries + b"\0"
        body = b"\0" + struct.pack(">hi", -1, 30_000) + encode_uvarint(2) + topic + b"\0"
        header = struct.pack(">hhih", 0, 9, len(frames) + 1, 5) + b"bench" + b"\0"  # request header v2
        frames.append(struct.pack(">i", len(header) + len(body)) + header + body)

    for p, batch in batches:
        if pending and pending_bytes + len(batch) > REQUEST_BYTES_MAX:
            flush()
            pending, pending_bytes = [], 0
        pending.append((p, batch))
        pending_bytes += len(batch) + 16
    if pending:
        flush()
    return frames


def case_serve_many(env: dict, work: str, counts: list[int], path: str, rounds: int) -> dict[int, dict[str, tuple]]:
    """Per partition count, a server of its own: `first` into the new topic, then `again`: the
    median of `rounds` rounds alternated over the counts (each server idle while another runs)."""
    import socket

    servers: dict[int, tuple[Serve, socket.socket, list[bytes]]] = {}
    out: dict[int, dict[str, tuple]] = {}
    again: dict[int, list[tuple[float, float, float]]] = {p: [] for p in counts}

    def send_all(p: int) -> tuple[float, float, float]:
        serve, sock, frames = servers[p]
        cpu, start = serve.cpu_s(), time.monotonic()
        for frame in frames:  # one at a time: the server's CPU per request is the measure
            sock.sendall(frame)
            answer = read_answer(sock)
            if not _all_acknowledged(answer):
                raise SystemExit(f"klog serve refused a Produce: {answer[:200]!r}")
        return serve.cpu_s() - cpu, serve.rss_mib(), time.monotonic() - start

    try:
        for p in counts:
            data_dir = os.path.join(work, f"store-many-{p}")
            create(env, data_dir, "t", p)
            serve = Serve(data_dir, env, cwd=work)
            servers[p] = (serve, socket.create_connection(("127.0.0.1", serve.port), timeout=120),
                          _produce_requests(path, p))
            out[p] = {"first": send_all(p)}
        for r in range(rounds):
            shift = r % len(counts)
            for p in counts[shift:] + counts[:shift]:
                again[p].append(send_all(p))
    finally:
        for serve, sock, _ in servers.values():
            sock.close()
            serve.close()
    for p in counts:
        out[p]["again"] = tuple(statistics.median(m[i] for m in again[p]) for i in range(3))
        shutil.rmtree(os.path.join(work, f"store-many-{p}"))
    return out


def _all_acknowledged(answer: bytes) -> bool:
    """Whether every partition entry of a Produce v9 answer (header v1: correlation id, tags) has error 0."""
    def decode_uvarint(data: bytes, at: int) -> tuple[int, int]:
        n = shift = 0
        while data[at] & 0x80:
            n |= (data[at] & 0x7F) << shift
            shift += 7
            at += 1
        return n | data[at] << shift, at + 1

    at = 5  # correlation id, header tags
    topics, at = decode_uvarint(answer, at)
    for _ in range(topics - 1):
        name_len, at = decode_uvarint(answer, at)
        at += name_len - 1
        entries, at = decode_uvarint(answer, at)
        for _ in range(entries - 1):  # index, error, base, append time, start, record errors, message, tags
            if answer[at + 4:at + 6] != b"\0\0":
                return False
            at += 4 + 2 + 8 + 8 + 8 + 1 + 1 + 1
        at += 1  # the topic's tags
    return True


def case_mirror(env: dict, work: str, partitions: int, path: str) -> dict[str, tuple]:
    src, dest = os.path.join(work, "src"), os.path.join(work, "dest")
    create(env, src, "t", partitions)
    measured(["produce", "t", "-d", src, "-K:"], env, path)
    out = {}
    for label in ("first", "again"):  # again: a second mirror name copies everything once more
        out[label] = measured(["mirror", src, dest, "t", "--name", label], env)
    shutil.rmtree(src)
    shutil.rmtree(dest)
    return out


def run(bench: Bench) -> None:
    lines = bench.size(200_000, 2_000)
    counts = [1, 1000, 10_000] if not bench.smoke else [1, 10]
    if os.environ.get("KLOG_BENCH_PARTITION_COUNTS"):
        counts = [int(c) for c in os.environ["KLOG_BENCH_PARTITION_COUNTS"].split(",")]
        bench.narrowed = True
    env = bench.env
    envs = {"": env}
    baseline_repo = os.environ.get("KLOG_BENCH_BASELINE")
    if baseline_repo:
        envs["baseline"] = {**env, "PYTHONPATH": baseline_repo}
    plain, keyed = make_inputs(bench.tmp, lines)
    rounds = bench.rounds(5)
    produced: dict[str, dict[str, dict[int, dict[str, tuple]]]] = {}

    def produce_case(name: str, path: str, keyed_input: bool) -> dict[int, dict[str, tuple]]:
        produced[name] = case_produce(env, bench.tmp, counts, path, keyed_input, rounds, envs)
        return produced[name][""]

    def serve_case() -> dict[int, dict[str, tuple]]:
        # with a baseline: its server over the same input right after this tree's, each count in turn
        for name in ("", *(["baseline"] if baseline_repo else [])):
            got = {p: case_serve(envs[name], bench.tmp, p, keyed) for p in counts}
            produced.setdefault("serve", {})[name] = got
        return produced["serve"][""]

    cases = {"produce": lambda: produce_case("produce", plain, False),
             "keyed": lambda: produce_case("keyed", keyed, True),
             "serve": lambda: serve_case(),
             "serve_many": lambda: case_serve_many(env, bench.tmp, counts, keyed, rounds),
             "mirror": lambda: {p: case_mirror(env, bench.tmp, p, keyed) for p in counts}}
    if bench.smoke:  # (each case works; a smoke run must stay short)
        cases = {"keyed": cases["keyed"], "serve": cases["serve"], "serve_many": cases["serve_many"]}
    if os.environ.get("KLOG_BENCH_PARTITION_CASES"):
        cases = {c: cases[c] for c in os.environ["KLOG_BENCH_PARTITION_CASES"].split(",")}
        bench.narrowed = True
    for case, measure in cases.items():
        got = measure()
        if baseline_repo and case in produced:
            base = produced[case]["baseline"]
            for p in counts:
                mine, was = got[p]["again"], base[p]["again"]
                bench.line(f"{case} into {p:,} partitions, again: {mine[0]:.2f} s CPU / {mine[1]:.0f} MiB here, "
                           f"{was[0]:.2f} s CPU / {was[1]:.0f} MiB in {baseline_repo} "
                           + (f"({mine[0] / was[0]:.2f}x CPU)" if was[0] else "(too little CPU to compare)"))
        one = got[1]["again"][0]
        for p in counts[1:]:
            cells = ", ".join(f"{label} {cpu:.2f} s CPU / {rss:.0f} MiB / {wall:.1f} s"
                              for label, (cpu, rss, wall) in got[p].items())
            again = (f"again (median of {rounds})" if case in ("produce", "keyed", "serve_many") and rounds > 1
                     else "again")
            bench.row(f"{case} of {lines:,} lines into {p:,} partitions (new topic, then {again})", cells,
                      f"1 partition again {one:.2f} s CPU / {got[1]['again'][1]:.0f} MiB: "
                      + (f"{got[p]['again'][0] / one:.2f}x CPU" if one else "too little CPU to compare"))

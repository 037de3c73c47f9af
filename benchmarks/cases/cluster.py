"""klog against a Kafka cluster: `klog produce`/`klog consume` through --bootstrap-server (to a
`klog serve` on 127.0.0.1) beside the same commands on the local store, and `klog mirror` local ->
serve (a benchmark, not a test: prints README figures).

    python benchmarks/bench_cluster.py [--records N] [--rounds R]

Workload: N 100-byte lines into a 1-partition topic. Each round alternates local and remote runs so
both see the same load on a shared machine; the figures are medians of R rounds. Each remote
produce goes to a fresh topic; each consume reads the whole topic to the end and exits (its line
count is checked). The mirrors copy the local topic into serve and the served one into the local store (a new
topic each round); `klog
replay` copies it within the local store, into serve (--to-store) and back from serve (-b).
`--only replay` runs the replays alone (after the produces they read); `--only consume --partitions P`
runs `consume` and `consume --json` of one P-partition topic (keyed lines) alone.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from types import SimpleNamespace

from harness import REPO, Bench
from harness import rate as rate_text
from serve_process import Serve, klog_cmd  # benchmarks/ is on sys.path when run as a script


def timed(args: list[str], env: dict, stdin_path: str | None = None, lines: int | None = None) -> float:
    start = time.perf_counter()
    with open(stdin_path or os.devnull, "rb") as stdin:
        r = subprocess.run(args, stdin=stdin, stdout=subprocess.PIPE if lines is not None else subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env=env, check=False)
    took = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args[3:])} failed: {r.stderr.decode()}")
    got = r.stdout.count(b"\n") if lines is not None else None
    if got != lines:
        raise SystemExit(f"{' '.join(args[3:])}: {got} lines, expected {lines}")
    return took


def run(bench: Bench) -> None:
    args = SimpleNamespace(records=bench.size(1_000_000, 2_000), rounds=bench.rounds(3), only="all", partitions=1)
    n = args.records
    load_before = os.getloadavg()[0]  # the figures move with the machine's load: printed with them
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "PYTHONPATH": REPO}
        env.pop("KLOG_BOOTSTRAP_SERVERS", None)
        local, remote_dir = os.path.join(d, "local"), os.path.join(d, "served")
        lines = os.path.join(d, "lines")
        with open(lines, "wb") as f:
            f.write(b"".join(b"%099d\n" % i for i in range(n)))
        server = Serve(remote_dir, env)
        try:
            results: dict[str, list[float]] = {k: [] for k in (
                "produce local", "produce remote", "consume local", "consume remote", "mirror local->serve",
                "mirror serve->local", "replay local->local", "replay local->serve", "replay serve->local")}
            if args.only == "consume":
                results = consume_rounds(server, local, d, env, n, args.rounds, args.partitions)
            if args.only == "replay":
                timed(klog_cmd("produce", "t0", "-d", local), env, lines)
                timed(klog_cmd("produce", "t0", "-b", server.bootstrap), env, lines)
            for i in range(args.rounds):
                if args.only == "all":
                    results["produce local"].append(timed(klog_cmd("produce", f"t{i}", "-d", local), env, lines))
                    results["produce remote"].append(
                        timed(klog_cmd("produce", f"t{i}", "-b", server.bootstrap), env, lines))
                    results["consume local"].append(timed(klog_cmd("consume", "t0", "-d", local), env, lines=n))
                    results["consume remote"].append(timed(klog_cmd("consume", "t0", "-b", server.bootstrap), env,
                                                           lines=n))
                    results["mirror local->serve"].append(
                        timed(klog_cmd("mirror", local, server.bootstrap, "t0", "--rename", f"m{i}.{{topic}}"), env))
                    results["mirror serve->local"].append(
                        timed(klog_cmd("mirror", server.bootstrap, local, "t0", "--rename", f"b{i}.{{topic}}"), env))
                for name, cmd in () if args.only == "consume" else (
                        ("replay local->local", ("replay", "t0", "--to", f"r{i}", "-d", local)),
                        ("replay local->serve", ("replay", "t0", "--to", f"r{i}", "-d", local,
                                                 "--to-store", server.bootstrap)),
                        ("replay serve->local", ("replay", "t0", "--to", f"s{i}", "-b", server.bootstrap,
                                                 "--to-store", local))):
                    results[name].append(timed(klog_cmd(*cmd), env))
        finally:
            server.close()
            shutil.rmtree(remote_dir, ignore_errors=True)
    rate = {k: n / statistics.median(v) / 1e6 for k, v in results.items() if v}
    print(f"{n:,} records of 100 B, {args.partitions} partition(s), median of {args.rounds} alternated rounds "
          f"(M records/s), load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after:")
    for k, v in rate.items():
        bench.row(f"{k}, {n:,} records of 100 B, {args.partitions} partition(s)", rate_text(v * 1e6, 1))
    if args.only == "consume":
        plain, json_lines = (rate[f"{c} remote"] / rate[f"{c} local"] for c in ("consume", "consume --json"))
        bench.row("through the cluster / local", f"consume {plain:.2f}, --json {json_lines:.2f}")
    if "produce local" in rate:
        bench.row("through the cluster / local", f"produce {rate['produce remote'] / rate['produce local']:.2f}, "
                  f"consume {rate['consume remote'] / rate['consume local']:.2f}")


def consume_rounds(server: Serve, local: str, d: str, env: dict, n: int, rounds: int,
                   partitions: int) -> dict[str, list[float]]:
    """`--only consume`: one topic of `partitions` partitions on each side, then `consume` and
    `consume --json`, local and through the cluster, alternated in each round."""
    keyed = os.path.join(d, "keyed")
    with open(keyed, "wb") as f:  # ~100 B a record: a short key, ':', a 97-byte value
        f.write(b"".join(b"%d:%097d\n" % (i % (2 * partitions), i) for i in range(n)))
    for where in (("-d", local), ("-b", server.bootstrap)):
        timed(klog_cmd("topics", "create", "t0", "-p", str(partitions), *where), env)
        timed(klog_cmd("produce", "t0", "-K", ":", *where), env, keyed)
    results: dict[str, list[float]] = {}
    for _ in range(rounds):
        for extra in ([], ["--json"]):
            name = "consume --json" if extra else "consume"
            for side, where in (("local", ("-d", local)), ("remote", ("-b", server.bootstrap))):
                results.setdefault(f"{name} {side}", []).append(
                    timed(klog_cmd("consume", "t0", *extra, *where), env, lines=n))
    return results


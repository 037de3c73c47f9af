"""The CLI against SQLite, measured in the same run (a benchmark, not a test: README figures).

    python benchmarks/bench_cli.py [--records N] [--runs R]

Workload: N lines of 100 bytes (99 digits + newline). Each round runs, alternated so that every
command sees the same machine load:
  - `klog produce t < file` and its peer, SQLite's insert of the same lines (Python's sqlite3:
    executemany in one transaction, a new process, as klog produce is);
  - `klog consume t > /dev/null` and its peer, SQLite's `select v from t` written to stdout
    (one write per 4,096 rows, as klog does);
  - `klog consume t --json` and its peer, the same select with one json.dumps per row;
  - `klog produce t -K ,` (keyed lines) and `klog consume t --group g`, against the plain figures.
Figures are medians over the rounds, each as M records/s and as a ratio to its peer.

klog runs with its bytecode cached, as an installed package has it (pip compiles on install): the
children run without PYTHONDONTWRITEBYTECODE and the checkout is byte-compiled first. Without that,
every klog process compiled ~40 modules from source (~0.1 s of CPU) while Python's sqlite3 and
json come precompiled with the interpreter.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SQLITE_INSERT = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("create table t (v blob)")
with con:
    con.executemany("insert into t values (?)", ((line.rstrip(b"\\n"),) for line in sys.stdin.buffer))
"""
SQLITE_SELECT = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
out = sys.stdout.buffer
cur = con.execute("select v from t")
while rows := cur.fetchmany(4096):
    out.write(b"".join(v + b"\\n" for (v,) in rows))
"""
SQLITE_SELECT_JSON = """
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.text_factory = str
out = sys.stdout
cur = con.execute("select rowid - 1, v from t")
dumps = json.dumps
while rows := cur.fetchmany(4096):
    out.write("".join(dumps({"topic": "t", "partition": 0, "offset": o, "value": v.decode()}) + "\\n"
                      for o, v in rows))
"""


def timed(cmd: list[str], env: dict, stdin_path: str | None = None, cwd: str | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child). On a machine shared with other
    work the CPU time is the steadier figure; both are reported."""
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True,
                       cwd=cwd)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    finally:
        if stdin_path:
            stdin.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repo", default=REPO, help="the klog checkout to measure (an older one: before/after)")
    args = parser.parse_args()
    n = args.records
    py = sys.executable
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        lines = os.path.join(d, "lines.txt")
        keyed = os.path.join(d, "keyed.txt")
        with open(lines, "wb") as f:
            f.write(b"".join(b"%099d\n" % i for i in range(n)))
        with open(keyed, "wb") as f:
            f.write(b"".join(b"k%d,%097d\n" % (i % 1000, i) for i in range(n)))
        compileall.compile_dir(os.path.join(args.repo, "klog"), quiet=1)
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for r in range(args.runs):
            env = {**base_env, "KLOG_DATA_DIR": os.path.join(d, f"data{r}"), "PYTHONPATH": args.repo}
            db = os.path.join(d, f"db{r}.sqlite")
            klog = [py, "-m", "klog"]
            steps = {
                "klog produce": ([*klog, "produce", "t"], lines),
                "sqlite insert": ([py, "-c", SQLITE_INSERT, db], lines),
                "klog produce -K": ([*klog, "produce", "k", "-K", ","], keyed),
                "klog consume": ([*klog, "consume", "t"], None),
                "sqlite select": ([py, "-c", SQLITE_SELECT, db], None),
                "klog consume --group": ([*klog, "consume", "t", "-G", f"g{r}"], None),
                "klog consume --json": ([*klog, "consume", "t", "--json"], None),
                "sqlite select json": ([py, "-c", SQLITE_SELECT_JSON, db], None),
            }
            for name, (cmd, stdin) in steps.items():
                # cwd: a folder without klog in it (`python -m` puts the working directory first on
                # sys.path, which would shadow --repo)
                wall, used = timed(cmd, env, stdin, cwd=d)
                times.setdefault(name, []).append(wall)
                cpu.setdefault(name, []).append(used)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    med_cpu = {name: statistics.median(ts) for name, ts in cpu.items()}

    def row(name: str, peer: str | None = None) -> None:
        ratio = f"  {med[peer] / med[name]:.2f}x {peer}" if peer else ""
        cpu_ratio = f"  (CPU {med_cpu[peer] / med_cpu[name]:.2f}x)" if peer else ""
        print(f"{name:22s} {n / med[name] / 1e6:5.2f} M records/s, CPU {med_cpu[name]:5.2f} s{ratio}{cpu_ratio}")

    print(f"{n:,} records of 100 B, median of {args.runs} alternated runs; load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    row("sqlite insert")
    row("klog produce", "sqlite insert")
    row("klog produce -K", "klog produce")
    row("sqlite select")
    row("klog consume", "sqlite select")
    row("klog consume --group", "klog consume")
    row("sqlite select json")
    row("klog consume --json", "sqlite select json")


if __name__ == "__main__":
    main()

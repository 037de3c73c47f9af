"""The CLI beside SQLite: klog produce / consume / --json / -K / --group / 4 partitions, 100-byte lines.

Each round runs, alternated so that every command sees the same machine load:
  - `klog produce t < file` and its peer, SQLite's insert of the same lines (Python's sqlite3:
    executemany in one transaction, a new process, as klog produce is);
  - `klog consume t > /dev/null` and its peer, SQLite's `select v from t` written to stdout
    (one write per 4,096 rows, as klog does);
  - `klog consume t --json` and its peer, the same select with one json.dumps per row;
  - `klog produce t -K ,` (keyed lines) and `klog consume t --group g`, against the plain figures;
  - `klog consume t4 > /dev/null`: the same lines in a 4-partition topic (merged by timestamp),
    against the one-partition consume.
Every command is a new process, start-up included, klog's bytecode cached (compileall first).
"""

from __future__ import annotations

import compileall
import os
import sys

from harness import REPO, Bench, Samples, rate, ratio, write_lines

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


def run(bench: Bench) -> None:
    n = bench.size(1_000_000, 2_000)
    d = bench.tmp
    lines = write_lines(os.path.join(d, "lines.txt"), n)
    keyed = write_lines(os.path.join(d, "keyed.txt"), n, lambda i: b"k%d,%097d\n" % (i % 1000, i))
    compileall.compile_dir(os.path.join(REPO, "klog"), quiet=1)
    py, klog = sys.executable, bench.klog

    def env(r: int) -> dict:
        return {**bench.env, "KLOG_DATA_DIR": os.path.join(d, f"data{r}")}

    def db(r: int) -> str:
        return os.path.join(d, f"db{r}.sqlite")

    # one round = the whole sequence, in order: a consume needs its produce before it
    steps = {
        "klog produce": lambda r: bench.command(klog("produce", "t"), stdin_path=lines, env=env(r)),
        "sqlite insert": lambda r: bench.command([py, "-c", SQLITE_INSERT, db(r)], stdin_path=lines),
        "klog produce -K": lambda r: bench.command(klog("produce", "k", "-K", ","), stdin_path=keyed, env=env(r)),
        "klog consume": lambda r: bench.command(klog("consume", "t"), env=env(r)),
        "klog produce (4 partitions)": lambda r: (
            bench.command(klog("topics", "create", "t4", "-p", "4"), env=env(r)),
            bench.command(klog("produce", "t4"), stdin_path=lines, env=env(r)))[1],
        "klog consume (4 partitions)": lambda r: bench.command(klog("consume", "t4"), env=env(r)),
        "sqlite select": lambda r: bench.command([py, "-c", SQLITE_SELECT, db(r)]),
        "klog consume --group": lambda r: bench.command(klog("consume", "t", "-G", f"g{r}"), env=env(r)),
        "klog consume --json": lambda r: bench.command(klog("consume", "t", "--json"), env=env(r)),
        "sqlite select json": lambda r: bench.command([py, "-c", SQLITE_SELECT_JSON, db(r)]),
    }
    samples = {name: [] for name in steps}
    for r in range(bench.rounds(3)):
        for name, step in steps.items():
            samples[name].append(step(r))
    med = {name: Samples(s) for name, s in samples.items()}

    def row(name: str, peer: str | None = None) -> None:
        m = med[name]
        figure = f"{rate(n, m.wall)}, CPU {m.cpu:.2f} s"
        beside = ""
        if peer:
            beside = (f"{ratio(med[peer].wall, m.wall, peer)} wall, "
                      f"{ratio(med[peer].cpu, m.cpu, peer)} CPU")
        bench.row(f"{name}, {n:,} lines of 100 B", figure, beside)

    row("sqlite insert")
    row("klog produce", "sqlite insert")
    row("klog produce -K", "klog produce")
    row("sqlite select")
    row("klog consume", "sqlite select")
    row("klog consume (4 partitions)", "klog consume")
    row("klog consume --group", "klog consume")
    row("sqlite select json")
    row("klog consume --json", "sqlite select json")

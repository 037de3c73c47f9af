"""What every benchmark case shares: timing, alternation, medians, sizes, and the rows it reports.

A case is a module in benchmarks/cases/ with a docstring (its first line is the case's title) and
`run(bench: Bench) -> None`. It sizes its workload with `bench.size(full, smoke)`, measures with
`bench.command` (a process: wall and CPU of the child) or `bench.call` (in this process), runs a
command and its peers in turns with `bench.alternate`, and reports each figure with `bench.row`.
benchmarks/run.py finds the cases, runs them, records the load average around each, and writes the
rows into benchmarks/README.md.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Measure:
    """Wall seconds and CPU seconds (user + system). On a shared machine CPU is the steadier figure."""

    wall: float
    cpu: float


class Samples(list):
    """The measures of one contender over the rounds of an alternation."""

    @property
    def wall(self) -> float:
        return statistics.median(m.wall for m in self)

    @property
    def cpu(self) -> float:
        return statistics.median(m.cpu for m in self)

    @property
    def best_wall(self) -> float:
        return min(m.wall for m in self)


@dataclass
class Row:
    case: str
    what: str
    figure: str
    peer: str = ""  # the peer measured in the same run, and the ratio to it


@dataclass
class Bench:
    """The context a case runs in."""

    case: str
    smoke: bool
    tmp: str  # a temporary folder of the case's own, removed afterwards
    rounds_override: int | None = None
    rows: list[Row] = field(default_factory=list)
    # a run narrowed to some of a case's sub-cases: its rows replace only the old rows of the same
    # sub-case (their `what` up to a parenthesis), not every row of the case
    narrowed: bool = False

    def size(self, full: int, smoke: int) -> int:
        return smoke if self.smoke else full

    def rounds(self, full: int) -> int:
        """How many alternated rounds: the case's choice, --rounds, or 1 in smoke mode."""
        if self.smoke:
            return 1
        return self.rounds_override or full

    @property
    def env(self) -> dict[str, str]:
        """The environment for klog processes: this checkout first on the path, bytecode cached as an
        installed package has it (without it every klog process compiles ~40 modules, ~0.1 s)."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("KLOG_")}
        env["PYTHONPATH"] = REPO
        return env

    @staticmethod
    def klog(*args: str) -> list[str]:
        return [sys.executable, "-m", "klog", *args]

    def command(self, argv: list[str], *, stdin_path: str | None = None, env: dict | None = None,
                cwd: str | None = None, stdout: int | object = subprocess.DEVNULL) -> Measure:
        """Run a process to its end (it must exit 0): its wall time and its CPU (children's rusage).
        `cwd` defaults to the case's folder: `python -m` puts the working directory first on sys.path."""
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                                  env=self.env if env is None else env, cwd=cwd or self.tmp)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            if stdin_path:
                stdin.close()
        if done.returncode != 0:
            raise RuntimeError(f"{argv[:6]} exited {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}")
        return Measure(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))

    @staticmethod
    def call(fn: Callable[[], object]) -> Measure:
        """Time a call in this process (wall, and this process's CPU)."""
        cpu0, start = time.process_time(), time.perf_counter()
        fn()
        return Measure(time.perf_counter() - start, time.process_time() - cpu0)

    def alternate(self, contenders: dict[str, Callable[[int], Measure]], rounds: int) -> dict[str, Samples]:
        """Run each contender once per round, in turns, so all see the same load; the order rotates
        each round so none always runs first. A contender gets the round number (for fresh names)."""
        samples = {name: Samples() for name in contenders}
        names = list(contenders)
        for r in range(self.rounds(rounds)):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(contenders[name](r))
        return samples

    def line(self, text: str, peer: str = "") -> None:
        """A row from one sentence 'what: figure' (split at the first ': ')."""
        text = " ".join(text.split("\n")).strip()
        aligned = re.match(r"(\w+)\s+(.*?\S)\s{3,}(\S.*)$", text)  # 'fetch    what      figure'
        if ": " not in text and aligned:
            self.row(" ".join(f"{aligned.group(1)} {aligned.group(2)}".split()), aligned.group(3), peer)
            return
        what, _, figure = text.partition(": ")
        self.row(" ".join(what.split()), figure or what, peer)

    def row(self, what: str, figure: str, peer: str = "") -> None:
        self.rows.append(Row(self.case, what, figure, peer))
        print(f"  {what}: {figure}" + (f"  [{peer}]" if peer else ""), flush=True)


def rate(records: float, seconds: float) -> str:
    """A throughput as people read it: '1.23 M records/s' (or k)."""
    per_s = records / seconds if seconds > 0 else float("inf")
    return f"{per_s / 1e6:.2f} M records/s" if per_s >= 1e5 else f"{per_s / 1e3:.1f} k records/s"


def ratio(mine: float, peer: float, peer_name: str, what: str = "") -> str:
    """'0.61x kcat (CPU)': how `mine` compares with the peer's figure of the same kind (higher: better
    for rates; for times pass peer/mine yourself)."""
    value = mine / peer if peer else float("inf")
    return f"{value:.2f}x {peer_name}" + (f" ({what})" if what else "")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def write_lines(path: str, n: int, line: Callable[[int], bytes] = lambda i: b"%099d\n" % i) -> str:
    """A file of n lines (default: 100 bytes each, 99 digits and a newline)."""
    with open(path, "wb") as f:
        f.write(b"".join(line(i) for i in range(n)))
    return path


def proc_cpu_s(pid: int) -> float:
    """A running process's user + system CPU seconds (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

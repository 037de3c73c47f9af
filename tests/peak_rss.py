"""A child process's own peak RSS and CPU, read by a small parent that runs it.

Linux keeps, at exec, the high-water RSS of the memory the new program replaces (exec_mmap):
a process started by a large one (a pytest worker, a benchmark holding its input) reports that
process's size as its own ru_maxrss whenever it stays smaller. Started from a fresh Python of
~10 MB instead, a child reports its own peak (over ~10 MB), so a bound on it can fail.
Used by tests (bounded memory) and by benchmarks/cases/partitions.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

# argv: STDIN (a path, or - for none) COMMAND...; prints [exit code, CPU s, peak RSS KiB, wall s] on
# stdout, and the command's stderr then the tail of its stdout on stderr
_PROBE = """\
import json, resource, subprocess, sys, time
stdin = open(sys.argv[1], "rb") if sys.argv[1] != "-" else subprocess.DEVNULL
start = time.monotonic()
done = subprocess.run(sys.argv[2:], stdin=stdin, capture_output=True)
wall = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.buffer.write(done.stderr + done.stdout[-2000:])
print(json.dumps([done.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, wall]))
"""


@dataclass
class ChildUsage:
    returncode: int
    cpu_s: float  # user + system
    peak_rss_kib: int
    wall_s: float
    said: str  # its stderr, then the tail of its stdout

    @property
    def peak_rss_mib(self) -> float:
        return self.peak_rss_kib / 1024


def run_measured(argv: list[str], env: dict[str, str] | None = None, stdin_path: str | None = None,
                 cwd: str | None = None, timeout: float = 600) -> ChildUsage:
    """Run `argv` to its end through the probe: its exit code, CPU, peak RSS, wall time and output."""
    probe = subprocess.run([sys.executable, "-c", _PROBE, stdin_path or "-", *argv], capture_output=True,
                           env=env, cwd=cwd, timeout=timeout)
    if probe.returncode != 0:
        raise RuntimeError(f"the RSS probe failed: {probe.stderr.decode(errors='replace')[-500:]}")
    code, cpu, rss, wall = json.loads(probe.stdout.decode().strip().splitlines()[-1])
    return ChildUsage(code, cpu, rss, wall, probe.stderr.decode(errors="replace"))

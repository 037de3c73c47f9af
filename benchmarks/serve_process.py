"""`klog serve` as its own process on 127.0.0.1 and a free port, for the benchmarks that measure
through it (bench_serve.py, bench_cluster.py): one start/stop helper, not a copy per script."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def klog_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "klog", *args]


class Serve:
    """`klog serve -d data_dir` listening on 127.0.0.1:0; `bootstrap` is its address. close() stops it."""

    def __init__(self, data_dir: str, env: dict, python_code: str | None = None, cwd: str | None = None) -> None:
        """`python_code`: run that (`python -c`, argv as klog's) instead of `python -m klog`, e.g.
        to change a module setting of the server for a comparison. `cwd`: the server's working
        directory (it comes first on its import path: a checkout there is the code that runs)."""
        args = klog_cmd("serve", "--listen", "127.0.0.1:0", "-d", data_dir)
        if python_code is not None:
            args[1:3] = ["-c", python_code]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, env=env, text=True, cwd=cwd)
        line = self.proc.stderr.readline()
        found = re.search(r"listening on (\S+:\d+)", line)
        if not found:
            self.close()
            raise SystemExit(f"klog serve did not start: {line}")
        self.bootstrap = found.group(1)
        self.port = int(self.bootstrap.rsplit(":", 1)[1])

    def cpu_s(self) -> float:
        """The server's user + system CPU seconds so far (from /proc)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

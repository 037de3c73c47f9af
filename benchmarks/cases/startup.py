"""Start-up of the hot commands beside `python -c "import typer, rich"`, in the same run.

`klog consume T -n 1` and `klog produce T` of one line are what shell loops run over and over, so
their whole process time matters. Each runs alternated with the peer (a Python that imports only
Typer and rich) and with `klog --version`; the figures are the median and the best of the rounds,
as wall time and as the process's CPU (the steadier figure on a shared machine). The commands run as
a user runs them: the `klog` console script beside this Python (`python -m klog` when there is none),
importing this checkout. `klog consume big -n 1` shows that a big topic costs no more than a small
one (the first read of a partition is small).
"""

from __future__ import annotations

import os
import sys

from harness import Bench, write_lines


def klog(bench: Bench, *args: str) -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "klog")
    return [script, *args] if os.access(script, os.X_OK) else bench.klog(*args)


def run(bench: Bench) -> None:
    env = {**bench.env, "KLOG_DATA_DIR": os.path.join(bench.tmp, "store")}
    one_line = os.path.join(bench.tmp, "one-line")
    with open(one_line, "wb") as f:
        f.write(b"hello\n")
    bench.command(klog(bench, "produce", "t"), stdin_path=one_line, env=env)  # the store and topic exist first
    lines = write_lines(os.path.join(bench.tmp, "lines"), bench.size(20_000, 200))  # 2 MB of 100-byte lines
    bench.command(klog(bench, "produce", "big"), stdin_path=lines, env=env)
    runs = bench.alternate({
        "import typer, rich": lambda r: bench.command([sys.executable, "-c", "import typer, rich"], env=env),
        "klog --version": lambda r: bench.command(klog(bench, "--version"), env=env),
        "klog consume t -n 1": lambda r: bench.command(klog(bench, "consume", "t", "-n", "1"), env=env),
        "klog consume big -n 1 (a 2 MB topic)": lambda r: bench.command(klog(bench, "consume", "big", "-n", "1"),
                                                                        env=env),
        "klog produce t (one line)": lambda r: bench.command(klog(bench, "produce", "t"), stdin_path=one_line,
                                                             env=env),
    }, rounds=21)
    peer = runs["import typer, rich"]
    for name, samples in runs.items():
        figure = f"{samples.wall * 1000:.0f} ms (best {samples.best_wall * 1000:.0f}), CPU {samples.cpu * 1000:.0f} ms"
        beside = "" if samples is peer else (f"CPU {samples.cpu / peer.cpu:.2f}x, wall {samples.wall / peer.wall:.2f}x "
                                             f"python -c 'import typer, rich' ({peer.cpu * 1000:.0f} ms CPU, "
                                             f"{peer.wall * 1000:.0f} ms)")
        bench.row(f"start-up: {name}", figure, beside)

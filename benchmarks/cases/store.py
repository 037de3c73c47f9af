"""The store's append and read paths in process, the CLI beside a plain Python copy, and start-up.

Workload: 100-byte values, ~1 MiB (10,000-record) batches, one partition, the default flush policy
(fsync per batch). Start-up: `klog --version` beside `python -c "import typer, rich"`, alternated.
"""

from __future__ import annotations

import os
import sys
import time

from harness import Bench, rate, ratio, write_lines

import klog
from klog.store import codec


def run(bench: Bench) -> None:
    n = bench.size(1_000_000, 20_000)
    per_batch = 10_000
    with klog.open(os.path.join(bench.tmp, "store")) as store:
        store.create_topic("bench")
        part = store.partition("bench", 0)
        records = [(None, b"x" * 100, (), int(time.time() * 1000))] * per_batch

        def append() -> None:
            with part.lock:
                part.open_for_write()
                for _ in range(n // per_batch):
                    part.append_batch(codec.encode_batch(records))
                part.publish()

        got = [0]

        def read() -> None:
            offset = 0
            while batches := part.read(offset):
                for fb in batches:
                    got[0] += len(fb.records())
                offset = batches[-1].header.next_offset

        bench.row("append: encode + write + fsync per batch", rate(n, bench.call(append).wall))
        bench.row("read: CRC + decode to tuples", rate(got[0] or n, bench.call(read).wall))

    src = write_lines(os.path.join(bench.tmp, "lines.txt"), n)
    env = {**bench.env, "KLOG_DATA_DIR": os.path.join(bench.tmp, "cli")}
    copy = "import sys\nfor line in sys.stdin.buffer: sys.stdout.buffer.write(line)"
    produce = bench.command(bench.klog("produce", "t"), stdin_path=src, env=env)
    consume = bench.command(bench.klog("consume", "t"), env=env)
    plain = bench.command([sys.executable, "-c", copy], stdin_path=src)
    bench.row("klog produce t < file", rate(n, produce.wall), ratio(plain.wall, produce.wall, "a Python stdin copy"))
    bench.row("klog consume t > /dev/null", rate(n, consume.wall),
              ratio(plain.wall, consume.wall, "a Python stdin copy"))

    runs = bench.alternate({
        "klog --version": lambda r: bench.command(bench.klog("--version")),
        "import typer, rich": lambda r: bench.command([sys.executable, "-c", "import typer, rich"]),
    }, rounds=5)
    version, bare = runs["klog --version"].best_wall, runs["import typer, rich"].best_wall
    bench.row("klog --version start-up (best of the rounds)", f"{version * 1000:.0f} ms",
              f"{version / bare:.2f}x python -c 'import typer, rich' ({bare * 1000:.0f} ms)")

"""Throughput of klog's store and CLI (a benchmark, not a test: prints figures for the README).

    python benchmarks/bench_store.py [--records N]

Workload: 100-byte values, ~1 MiB batches, one partition, default flush policy (fsync per batch).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import klog  # noqa: E402
from klog.store import codec  # noqa: E402


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:.2f} M records/s"


def bench_append_read(n: int) -> None:
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("bench")
        part = store.partition("bench", 0)
        now = int(time.time() * 1000)
        per_batch = 10_000
        records = [(None, b"x" * 100, (), now)] * per_batch
        start = time.perf_counter()
        with part.lock:
            part.open_for_write()
            for _ in range(n // per_batch):
                part.append_batch(codec.encode_batch(records))
            part.publish()
        print(f"append (encode + write + fsync per batch): {rate(n, time.perf_counter() - start)}")
        start = time.perf_counter()
        got = 0
        offset = 0
        while batches := part.read(offset):
            for fb in batches:
                got += len(fb.records())
            offset = batches[-1].header.next_offset
        print(f"read (CRC + decode to tuples):             {rate(got, time.perf_counter() - start)}")


def bench_cli(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "lines.txt")
        with open(src, "wb") as f:
            f.write(b"".join(b"%099d\n" % i for i in range(n)))
        env = {**os.environ, "KLOG_DATA_DIR": os.path.join(d, "data"), "PYTHONPATH": REPO}
        klog_cmd = [sys.executable, "-m", "klog"]
        start = time.perf_counter()
        with open(src, "rb") as stdin:
            subprocess.run([*klog_cmd, "produce", "t"], stdin=stdin, env=env, check=True, stderr=subprocess.DEVNULL)
        produce_s = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run([*klog_cmd, "consume", "t"], stdout=subprocess.DEVNULL, env=env, check=True)
        consume_s = time.perf_counter() - start
        start = time.perf_counter()
        with open(src, "rb") as stdin, open(os.path.join(d, "copy"), "wb") as out:
            copy = "import sys\nfor line in sys.stdin.buffer: sys.stdout.buffer.write(line)"
            subprocess.run([sys.executable, "-c", copy], stdin=stdin, stdout=out, check=True)
        copy_s = time.perf_counter() - start
        print(f"klog produce t < file:     {rate(n, produce_s)}  ({copy_s / produce_s:.0%} of plain Python copy)")
        print(f"klog consume t > /dev/null: {rate(n, consume_s)}  ({copy_s / consume_s:.0%} of plain Python copy)")
        print(f"plain Python stdin->file:   {rate(n, copy_s)}")


def bench_startup() -> None:
    def best(cmd: list[str]) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": REPO})
            times.append(time.perf_counter() - start)
        return min(times)

    bare = best([sys.executable, "-c", "import typer, rich"])
    version = best([sys.executable, "-m", "klog", "--version"])
    print(f"start-up: klog --version {version * 1000:.0f} ms; python -c 'import typer, rich' {bare * 1000:.0f} ms "
          f"({version / bare:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"crc32c hardware: {__import__('crc32c').hardware_based}")
    bench_append_read(args.records)
    bench_cli(args.records)
    bench_startup()


if __name__ == "__main__":
    main()

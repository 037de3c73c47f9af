"""The terminal view of `klog consume`: records drawn per second on a pseudo-terminal.

A topic of N records (3 partitions; keys; half JSON values, half text) is read by `klog consume`
with its stdout on a pty whose other end this process drains as fast as it can (a terminal that
keeps up). Peers measured in the same run, alternated with it:
  rich     the previous renderer: one rich Text per record through Console.print (same colours);
  cat      `cat` of the very bytes klog drew: the pty's own ceiling.
Also the startup of `klog consume` on an empty topic, so the drawing rate can be told apart from
Python's start. Figures are medians of R alternated runs. Target: >= 50 k records/s drawn.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
import time

from harness import Bench, Measure, rate

import klog

RICH_PEER = r"""
import sys, json
import klog
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.text import Text
from klog.cli.output import iso, terminal_safe

def is_json(data):
    try:
        json.loads(data)
        return True
    except ValueError:
        return False

def pretty_line(r):
    line = Text()
    line.append(iso(r.timestamp), style="dim")
    line.append("  ")
    line.append(f"{r.partition}@{r.offset}", style="cyan")
    if r.key is not None:
        line.append("  ")
        line.append(terminal_safe(r.key), style="bold yellow")
    line.append("  ")
    text = terminal_safe(r.value)
    if text[:1] in "{[" and is_json(r.value):
        line.append_text(JSONHighlighter()(Text(text)))
    else:
        line.append(text)
    return line

console = Console(highlight=False, soft_wrap=True)
with klog.open(sys.argv[1]) as s:
    for r in s.consumer(sys.argv[2]):
        console.print(pretty_line(r))
"""


def make_topic(data_dir: str, topic: str, n: int) -> None:
    with klog.open(data_dir) as store:
        store.create_topic(topic, partitions=3)
        with store.producer() as p:
            for i in range(n):
                if i % 2:
                    value = b'{"user":"u%d","path":"/shop/item/%d","status":200,"ms":%d.5,"ok":true}' % (i, i, i % 97)
                else:
                    value = b"GET /shop/item/%d HTTP/1.1 200 %d bytes" % (i, i * 7 % 5000)
                p.send(topic, value, key=b"user-%d" % (i % 1000))


def on_pty(argv: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    """Run argv with stdout on a pty drained by a thread; (seconds until it exited, bytes shown)."""
    leader, follower = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 1 << 16)
            except OSError:  # EIO: every writer closed its end
                return
            if not data:
                return
            chunks.append(data)

    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    err = proc.stderr.read()
    code = proc.wait(timeout=600)
    elapsed = time.perf_counter() - start
    reader.join(timeout=60)
    proc.stderr.close()
    os.close(leader)
    if code != 0:
        raise RuntimeError(f"{argv[:4]} exited {code}: {err.decode(errors='replace')}")
    return elapsed, b"".join(chunks)


def run(bench: Bench) -> None:
    n = bench.size(50_000, 300)
    data_dir = os.path.join(bench.tmp, "store")
    make_topic(data_dir, "view", n)
    with klog.open(data_dir) as store:
        store.create_topic("empty")
    env = {**bench.env, "KLOG_DATA_DIR": data_dir}
    env.pop("NO_COLOR", None)
    shown_path = os.path.join(bench.tmp, "shown.txt")
    drawn: list[int] = []

    def klog_view(r: int) -> Measure:
        took, shown = on_pty(bench.klog("consume", "view"), env)
        drawn.append(shown.count(b"\n"))
        with open(shown_path, "wb") as f:
            f.write(shown)
        return Measure(took, 0)

    runs = bench.alternate({
        "klog": klog_view,
        "rich": lambda r: Measure(on_pty([sys.executable, "-c", RICH_PEER, data_dir, "view"], env)[0], 0),
        "startup": lambda r: Measure(on_pty(bench.klog("consume", "empty"), env)[0], 0),
    }, rounds=5)
    cat = Measure(on_pty(["cat", shown_path], env)[0], 0)
    if set(drawn) != {n}:
        raise RuntimeError(f"klog drew {drawn} lines for {n} records")
    startup = runs["startup"].wall
    drawing = max(runs["klog"].wall - startup, 1e-9)
    bench.row(f"klog consume on a pty, {n:,} records, 3 partitions, half JSON: drawn (start-up {startup:.2f} s apart)",
              rate(n, drawing), f"rich, one Text per record: {rate(n, runs['rich'].wall)} end to end; "
              f"klog end to end {rate(n, runs['klog'].wall)}; cat of the same bytes {rate(n, cat.wall)}")

"""Consumer groups: `klog consume --group` beside plain `klog consume`, and how long a rebalance takes.

Workload: N 100-byte values over P partitions (10,000-record batches); both reads run to the end and
exit; the group run commits (after flushing stdout) at least once a second and at the end, and its
committed offsets are checked to cover every record. Rebalance: one `klog consume -G g -f` process
holds 6 partitions; a second joins (from its join, as LMDB records it, to both holding three), then
the first leaves on SIGTERM (from the signal to the second holding all six). The __consumer_offsets
pass: the CPU of klog serve's pass that brings the topic in step after one commit.
"""

from __future__ import annotations

import signal
import subprocess
import time

from harness import Bench, Samples, rate, ratio

import klog
from klog.meta.groups import GroupsMeta
from klog.store import codec

PER_BATCH = 10_000


def fill(data_dir: str, n: int, partitions: int) -> None:
    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=partitions)
        now = int(time.time() * 1000)
        per_partition = n // partitions
        for p in range(partitions):
            part = store.partition("t", p)
            with part.lock:
                part.open_for_write()
                for start in range(0, per_partition, PER_BATCH):
                    count = min(PER_BATCH, per_partition - start)
                    part.append_batch(codec.encode_batch([(None, b"%099d" % (start + i), (), now)
                                                          for i in range(count)]))
                part.publish()


def throughput(bench: Bench, n: int, partitions: int) -> None:
    d = f"{bench.tmp}/throughput-{partitions}"
    fill(d, n, partitions)
    env = {**bench.env, "KLOG_DATA_DIR": d}
    runs = bench.alternate({
        "plain": lambda r: bench.command(bench.klog("consume", "t"), env=env),
        "group": lambda r: bench.command(bench.klog("consume", "t", "-G", f"bench-{r}"), env=env),
    }, rounds=5)
    with klog.open(d) as store:
        committed = GroupsMeta(store.meta).committed("bench-0")
        assert sum(c.offset for c in committed.values()) == n, committed
    plain, group = runs["plain"].wall, runs["group"].wall
    bench.row(f"consume --group > /dev/null, {n:,} records, {partitions} partition(s)", rate(n, group),
              ratio(plain, group, "plain consume") + f" ({rate(n, plain)})")


def _holdings(store) -> dict[int, int]:  # noqa: ANN001
    snap = GroupsMeta(store.meta).snapshot("g")
    if snap.doc is None or snap.state != "Stable":
        return {}
    return {m.pid: len(snap.doc.owned_by(m.member_id)) for m in snap.live}


def _wait(store, condition, limit_s: float = 30) -> float:  # noqa: ANN001
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition(_holdings(store)):
            return time.time()
        time.sleep(0.005)
    raise RuntimeError("rebalance did not finish in 30 s")


def rebalance(bench: Bench) -> None:
    d = f"{bench.tmp}/rebalance"
    fill(d, 6_000, 6)
    env = {**bench.env, "KLOG_DATA_DIR": d}
    cmd = bench.klog("consume", "t", "-G", "g", "-f")
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=bench.tmp)
    second = None
    try:
        with klog.open(d) as store:
            _wait(store, lambda h: h == {first.pid: 6})
            second = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                      cwd=bench.tmp)
            done = _wait(store, lambda h: h == {first.pid: 3, second.pid: 3})
            joined_ms = [m.joined_ms for m in GroupsMeta(store.meta).snapshot("g").live if m.pid == second.pid][0]
            join_s = done - joined_ms / 1000
            left = time.time()
            first.send_signal(signal.SIGTERM)
            leave_s = _wait(store, lambda h: h == {second.pid: 6}) - left
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
    bench.row("rebalance, 2 consume -G -f processes, 6 partitions: after a clean join / a clean leave",
              f"{join_s * 1000:.0f} ms / {leave_s * 1000:.0f} ms")


def offsets_topic_pass(bench: Bench, offsets: int) -> None:
    """klog serve's __consumer_offsets pass after one commit, with `offsets` committed offsets stored."""
    from klog.broker.batches import RawAppender
    from klog.broker.offsets_topic import OffsetsTopicMirror

    with klog.open(f"{bench.tmp}/offsets-topic") as store:
        store.create_topic("t", partitions=100)
        meta = GroupsMeta(store.meta)
        for g in range(max(1, offsets // 100)):
            meta.store_offsets(f"g{g}", {("t", p): (p, "") for p in range(100)})
        mirror = OffsetsTopicMirror(store, RawAppender(store).writer)
        first = bench.call(mirror.sync)
        passes = Samples()
        for i in range(bench.rounds(20)):
            meta.store_offsets("g0", {("t", 3): (1000 + i, "")})
            passes.append(bench.call(mirror.sync))
    bench.row(f"__consumer_offsets pass after one commit, {offsets:,} offsets stored",
              f"{passes.cpu * 1000:.2f} ms CPU ({passes.wall * 1000:.2f} ms)",
              f"the first pass, comparing everything: {first.wall:.2f} s")


def run(bench: Bench) -> None:
    n = bench.size(1_000_000, 4_000)
    throughput(bench, n, 1)
    throughput(bench, n, 4)
    rebalance(bench)
    offsets_topic_pass(bench, bench.size(10_000, 200))

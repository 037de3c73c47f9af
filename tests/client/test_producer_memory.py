"""The producer's memory is bounded by buffer.memory, whatever the input size and partition count.

Method: `klog produce -K:` into a topic of 2,000 partitions, once with an input and once with ten
times it (keys spread over every partition), each run a child process whose peak RSS is compared.
A small parent reads it (tests/peak_rss.py): waited for from the test process itself, a child
reports the test process's size whenever it stays smaller, and the comparison could not fail.
Before the bound, each partition's batch filled up to --batch-size (1 MB) before anything was
written, so the tenfold input was held whole.
"""

from __future__ import annotations

import os
import sys

import pytest

import klog
from klog.client.producer import Producer
from tests.conftest import REPO
from tests.peak_rss import run_measured

PARTITIONS = 2000
BUFFER = 8 << 20
LINE_VALUE = b"v" * 400


def _input(path: str, lines: int) -> None:
    with open(path, "wb") as f:
        for start in range(0, lines, 10_000):
            stop = min(lines, start + 10_000)
            f.write(b"".join(b"key%d:%s %d\n" % (i % 20_000, LINE_VALUE, i) for i in range(start, stop)))


def _produce_peak_rss_mb(data_dir: str, path: str) -> float:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    # acks 0: the bound is the same whatever acks waits for; fsyncs would only make the test slower
    got = run_measured([sys.executable, "-m", "klog", "produce", "wide", "-K:", "--acks", "0",
                        "-X", f"buffer.memory={BUFFER}"], env=env, stdin_path=path)
    assert got.returncode == 0, got.said
    return got.peak_rss_mib


@pytest.mark.slow
def test_produce_rss_stays_flat_for_ten_times_the_input(tmp_path, klog_proc):
    data_dir = os.environ["KLOG_DATA_DIR"]
    assert klog_proc("topics", "create", "wide", "-p", str(PARTITIONS)).returncode == 0
    small, large = str(tmp_path / "small"), str(tmp_path / "large")
    _input(small, 10_000)  # ~4.2 MB
    _input(large, 100_000)  # ~42 MB
    small_rss = _produce_peak_rss_mb(data_dir, small)  # (it also creates every partition's files)
    large_rss = _produce_peak_rss_mb(data_dir, large)
    # the tenfold input is ~38 MB more records (~52 MB more RSS when held whole, as before the bound)
    assert large_rss - small_rss < 16, (small_rss, large_rss)
    with klog.open(data_dir) as store:
        assert sum(store.partition("wide", p).high_watermark() for p in range(PARTITIONS)) == 110_000


def test_buffer_memory_bounds_what_a_producer_holds(store):
    """Library: past buffer_memory the fullest batches are written; what stays buffered is under it."""
    store.create_topic("t", partitions=50)
    written = []
    producer = Producer(store, acks="0", buffer_memory=60_000, on_ack=lambda t, p, base, n: written.append((p, n)))
    for i in range(5_000):
        producer.send("t", b"x" * 100, key=b"k%d" % i)
        assert producer._buffered <= 60_000 + 300, i
    assert written, "nothing was written before flush"
    sizes = [n for _, n in written]
    assert max(sizes) > 1, "whole batches, not a record at a time"
    producer.flush()
    assert sum(n for _, n in written) == 5_000
    assert sum(store.partition("t", p).high_watermark() for p in range(50)) == 5_000


def test_buffer_memory_must_be_positive(store):
    from klog.errors import UsageError

    with pytest.raises(UsageError, match="buffer.memory"):
        Producer(store, buffer_memory=0)


def test_replay_into_a_wide_topic_holds_at_most_buffer_memory(store):
    from klog.client.replay import Replayer

    store.create_topic("src", partitions=1)
    store.create_topic("dst", partitions=50)
    with store.producer() as p:
        p.send_keyed("src", [(b"k%d" % i, b"x" * 100) for i in range(2_000)])
    replayer = Replayer(store, "src", "dst", acks="0", buffer_memory=20_000)
    seen = []
    real_take = replayer._take

    def take(record):
        real_take(record)
        seen.append(replayer._buffered)

    replayer._take = take
    stats = replayer.run()
    assert stats.records == 2_000
    assert stats.batches > 50  # written before the end, not one batch per partition at the end
    assert max(seen) <= 20_000 + 300
    assert sum(store.partition("dst", q).high_watermark() for q in range(50)) == 2_000


def test_a_writer_keeps_the_files_of_a_bounded_number_of_partitions_open(store):
    """Past open_max written partitions, the least recently written ones' files are closed (10,000
    partitions ran out of descriptors); they reopen, from their files, when written again."""
    store.create_topic("t", partitions=40)
    producer = Producer(store, acks="1")
    producer.writer.open_max = 8
    before = len(os.listdir("/proc/self/fd"))
    for round_ in range(3):
        producer.send_keyed("t", [(b"k%d" % i, b"r%d-%d" % (round_, i)) for i in range(400)])
        producer.flush()
        assert len(os.listdir("/proc/self/fd")) - before < 8 * 8 + 20
    assert sum(store.partition("t", p).high_watermark() for p in range(40)) == 1200
    values = sorted(r.value for r in store.consumer("t", start="beginning", follow=False))
    assert values == sorted(b"r%d-%d" % (r, i) for r in range(3) for i in range(400))

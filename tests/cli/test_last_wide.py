"""`klog consume --last N -b` of a wide topic against `klog serve` (127.0.0.1, ephemeral port): the
store's answer, read in a few Fetch requests (one a pass and leader broker, as librdkafka fetches
every partition of a broker together), not one a partition: --last 10 of 1,000 partitions took ~20 s.
And --until through librdkafka's reader (read_committed) stops each partition at its first record at
or after T, as on the store, rather than leaving that record out and reading on."""

from __future__ import annotations

import time

import pytest

import klog
from klog.protocol.apis import FETCH
from tests.cli.test_last_counts_records import last

T0 = int(time.time() * 1000) - 60_000  # recent: klog serve's retention (7 days) leaves the records be
PARTITIONS = 240


@pytest.fixture
def fetches(kafka_server):
    """The Fetch requests `klog serve` answers from now on, counted (its handler wrapped)."""
    from klog.server.dispatch import Handler

    handlers = kafka_server.handlers
    original = handlers[FETCH]
    count = [0]

    async def counted(ctx, request):  # noqa: ANN001, ANN202 - the server's handler signature
        count[0] += 1
        return await original.fn(ctx, request)

    handlers[FETCH] = Handler(counted, original.min_version, original.max_version)
    try:
        yield count
    finally:
        handlers[FETCH] = original


@pytest.fixture
def wide(data_dir) -> str:
    """A topic of PARTITIONS partitions: partition p holds p % 4 records (a quarter are empty), their
    timestamps interleaved across partitions."""
    with klog.open(data_dir) as s:
        s.create_topic("wide", PARTITIONS)
        with s.producer() as p:
            for i in range(3):
                for part in range(PARTITIONS):
                    if i < part % 4:
                        p.send("wide", b"p%d-%d" % (part, i), partition=part, timestamp=T0 + i * PARTITIONS + part)
    return "wide"


@pytest.mark.slow
@pytest.mark.parametrize("n", ["1", "25", "400"])
def test_last_of_a_wide_topic_is_the_stores_in_a_few_fetches(kafka_server, klog_proc, fetches, wide, n):
    local = last(klog_proc, None, wide, n)
    assert len(local) == min(int(n), 360)
    fetches[0] = 0
    assert last(klog_proc, kafka_server.bootstrap, wide, n) == local
    # one Fetch a pass (windows of n offsets back from each end until n records or the log start: at
    # most 2 passes here), and a few spare; it was one a partition and pass (240 or more)
    assert 1 <= fetches[0] <= 4, fetches[0]


def test_a_merged_read_of_a_wide_topic_fetches_its_partitions_together(kafka_server, klog_proc, fetches, wide):
    """consume -b of every partition merged by timestamp: the first read of each is one Fetch."""
    local = klog_proc("consume", wide)
    assert local.returncode == 0, local.stderr
    fetches[0] = 0
    remote = klog_proc("consume", wide, "-b", kafka_server.bootstrap)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout and len(local.stdout.splitlines()) == 360
    assert fetches[0] <= 4, fetches[0]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_until_stops_each_partition_at_its_first_record_at_or_after_it(kafka_server, klog_proc, data_dir, isolation):
    """Timestamps out of order: partition 0 holds T0, +1, +10, +2, +3; partition 1 +4, +20, +5. With
    --until T0+5 partition 0 stops at its third record (the two older after it are not read) and
    partition 1 at its second, on the store and through both cluster readers. librdkafka's
    (read_committed) left only the records at or after T out: `consume --until` printed a3 and a4 too,
    and `--last 2 --until` read from the time index's offset to each end and gave a4, b0."""
    with klog.open(data_dir) as s:
        s.create_topic("ooo", 2)
        with s.producer() as p:
            for partition, name, deltas in ((0, "a", (0, 1, 10, 2, 3)), (1, "b", (4, 20, 5))):
                for i, delta in enumerate(deltas):
                    p.send("ooo", b"%s%d" % (name.encode(), i), partition=partition, timestamp=T0 + delta)
    until = ("--until", str(T0 + 5), "-X", f"isolation.level={isolation}")

    def both(*args: str) -> list[str]:
        out = []
        for bootstrap in (None, kafka_server.bootstrap):
            r = klog_proc("consume", "ooo", *args, *until, *(("-b", bootstrap) if bootstrap else ()), timeout=30)
            assert r.returncode == 0, r.stderr
            out.append(r.stdout.decode().splitlines())
        assert out[1] == out[0], (args, out)
        return out[0]

    assert both("--last", "2") == ["a1", "b0"]
    assert both() == ["a0", "a1", "b0"]
    assert both("--last", "10") == ["a0", "a1", "b0"]
    assert both("--last", "1", "-p", "0") == ["a1"]
    assert both("-f") == ["a0", "a1", "b0"]  # every partition reached T: a follower is done too

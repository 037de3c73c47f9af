"""A cluster read (FetchConsumer) holds a bounded amount of Fetch answers, whatever the partitions
hold: the answers kept for reads to come share -X fetch.max.bytes over every broker, each
partition's answer is at most -X max.partition.fetch.bytes, and a batch larger than both still
comes. Measured by the consumer's own counter (HeldAnswers.peak), against `klog serve`."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import klog
from klog.client.remote import fetch
from klog.client.remote.fetch_consumer import FetchConsumer, fetch_settings
from klog.client.remote.store import RemoteStore
from klog.client.remote.target import ClusterTarget
from klog.errors import UsageError
from tests.klog_processes import klog_env

LIMIT, SHARE = 64 << 10, 16 << 10  # fetch.max.bytes, max.partition.fetch.bytes
PROPS = {"fetch.max.bytes": str(LIMIT), "max.partition.fetch.bytes": str(SHARE)}
PARTITIONS, RECORDS = 12, 1_200  # ~130 KB a partition (batches of ~4 KB): each more than LIMIT
T0 = 1_700_000_000_000


def fill(store, topic: str = "w", big_batch_in: int | None = None, create: bool = True) -> None:  # noqa: ANN001
    """PARTITIONS partitions of RECORDS records of ~110 B, timestamps interleaved across them, in
    batches of ~4 KB; `big_batch_in`: that partition's records in one batch (~130 KB: past LIMIT)."""
    if create:
        store.create_topic(topic, PARTITIONS)
    with store.producer(batch_size=4096) as small:
        for i in range(RECORDS):
            for p in range(PARTITIONS):
                if p != big_batch_in:
                    small.send(topic, value(p, i), partition=p, timestamp=T0 + i * PARTITIONS + p)
    if big_batch_in is not None:
        with store.producer(batch_size=1 << 20) as big:
            big.send_values(topic, [value(big_batch_in, i) for i in range(RECORDS)], partition=big_batch_in,
                            timestamp=T0 + RECORDS * PARTITIONS // 2)


def value(partition: int, i: int) -> bytes:
    return b"%02d-%06d-" % (partition, i) + b"x" * 100


def local_records(data_dir: str, topic: str = "w", **kwargs) -> list[tuple]:
    with klog.open(data_dir, create=False) as s, s.consumer(topic, **kwargs) as c:
        return [(r.partition, r.offset, r.timestamp, r.value) for r in c]


def remote_read(bootstrap: str, topic: str = "w", how: str = "records", props: dict | None = None,
                **kwargs) -> tuple[list, FetchConsumer]:
    """The records (or values, by the value_chunks fast path) of a read through the cluster, and
    its consumer (closed)."""
    with RemoteStore(ClusterTarget(bootstrap, PROPS if props is None else props)) as remote, \
            remote.consumer(topic, **kwargs) as c:
        assert isinstance(c, FetchConsumer)
        if how == "values":
            got = [v for chunk in c.value_chunks() for v in chunk]
        elif how == "chunks":
            got = []
            for _ in range(10_000):  # (bounded: far more polls than the topic needs)
                if all(cursor.done for cursor in c.cursors):
                    break
                got += [(t, p, o, ts, v) for t, p, chunk in c.poll_chunks() for o, ts, _, v, _ in chunk]
            else:
                raise AssertionError("poll_chunks did not reach the end")
        else:
            got = [(r.partition, r.offset, r.timestamp, r.value) for r in c]
    return got, c


def assert_bounded(c: FetchConsumer) -> None:
    """Kept answers within LIMIT, and beside them at most one answer in flight (a partition's
    SHARE, or what the room left plus one ~4 KB batch)."""
    assert c.held.limit == LIMIT
    assert LIMIT // 2 < c.held.peak <= LIMIT + SHARE, c.held.peak  # (fetched together: well past one SHARE)
    assert c.held.held == 0  # every kept answer was read or given up


def spread_leaders(monkeypatch: pytest.MonkeyPatch, brokers: int) -> list:
    """The partitions led by `brokers` brokers (node ids 0..brokers-1, all at the one `klog serve`):
    the reader connects to each and asks each its own partitions, as it would a real cluster's.
    Returns the list of its connections, as they are made."""
    leaders, connect, connections = RemoteStore.leaders, fetch.Fetcher._connect, []

    def spread(self, topic):  # noqa: ANN001, ANN202
        return {p: None if found is None else (p % brokers, found[1], found[2])
                for p, found in leaders(self, topic).items()}

    def counted(self, host, port):  # noqa: ANN001, ANN202
        connections.append((host, port))
        return connect(self, host, port)

    monkeypatch.setattr(RemoteStore, "leaders", spread)
    monkeypatch.setattr(fetch.Fetcher, "_connect", counted)
    return connections


@pytest.mark.parametrize("brokers", [1, 3])
@pytest.mark.parametrize("merge", [False, True], ids=["one-after-another", "merged"])
def test_a_wide_read_keeps_held_answers_under_fetch_max_bytes_and_gives_every_record(kafka_server, store, data_dir,
                                                                                      monkeypatch, merge, brokers):
    """One bound over every broker. Before: every partition's next answer was fetched and kept at
    once (here 12 x 16 KB; for a real topic, answers of up to 64 MiB from each broker)."""
    fill(store)
    local = local_records(data_dir, merge=merge)
    connections = spread_leaders(monkeypatch, brokers)
    got, c = remote_read(kafka_server.bootstrap, merge=merge)
    assert got == local and len(got) == PARTITIONS * RECORDS
    assert_bounded(c)
    assert len(connections) == brokers


def test_the_fast_paths_are_bounded_too(kafka_server, store, data_dir):
    """The values of a merged read (consume without --json) and klog mirror's poll_chunks."""
    fill(store)
    local = local_records(data_dir)
    values, c = remote_read(kafka_server.bootstrap, how="values")
    assert values == [v for _, _, _, v in local]
    assert_bounded(c)
    chunks, c = remote_read(kafka_server.bootstrap, how="chunks", merge=False)
    for p in range(PARTITIONS):  # each partition's records in order (poll takes partitions in turn)
        assert [(o, v) for _, q, o, _, v in chunks if q == p] == [(o, v) for q, o, _, v in local if q == p]
    assert_bounded(c)


def test_a_follower_long_poll_keeps_its_answers_under_the_bound(kafka_server, store, data_dir, monkeypatch):
    """-f from the end: the records written meanwhile come by the long poll of every partition
    together (fetch_many bounded by the room left, over three brokers), then by the reads."""
    store.create_topic("w", PARTITIONS)
    connections = spread_leaders(monkeypatch, 3)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap, PROPS)) as remote, \
            remote.consumer("w", start="end", follow=True, count=PARTITIONS * RECORDS) as c:
        assert isinstance(c, FetchConsumer)
        c.on_wait = give_up_after(30)
        fill(store, create=False)
        got = [(r.partition, r.offset, r.value) for r in c]
    local = local_records(data_dir)
    for p in range(PARTITIONS):
        assert [(o, v) for q, o, v in got if q == p] == [(o, v) for q, o, _, v in local if q == p]
    assert LIMIT // 2 < c.held.peak <= LIMIT + SHARE, c.held.peak
    assert len(connections) == 3


def give_up_after(seconds: float):  # noqa: ANN201
    """An on_wait that ends a follower waiting longer than `seconds` for records already written."""
    def check(waited: float) -> None:
        if waited > seconds:
            raise AssertionError(f"the follower waited {waited:.0f} s for records already written")
    return check


@pytest.mark.parametrize("merge", [False, True], ids=["one-after-another", "merged"])
def test_a_batch_larger_than_fetch_max_bytes_still_comes(kafka_server, store, data_dir, merge):
    """Partition 3 is one batch of ~130 KB, twice LIMIT: it comes whole (the broker sends a
    first batch whole, KIP-74), and the read goes on past it."""
    fill(store, big_batch_in=3)
    local = local_records(data_dir, merge=merge)
    got, c = remote_read(kafka_server.bootstrap, merge=merge)
    assert got == local and len(got) == PARTITIONS * RECORDS
    assert c.held.peak <= LIMIT + big_batch_bytes(data_dir, 3)  # that batch is the one answer in flight


def big_batch_bytes(data_dir: str, partition: int) -> int:
    """The size of the partition's one batch (past twice LIMIT)."""
    with klog.open(data_dir, create=False) as s:
        batches = s.partition("w", partition).read(0, 1 << 30)
    assert len(batches) == 1 and len(batches[0].data) > 2 * LIMIT
    return len(batches[0].data)


def test_a_broker_that_cuts_every_answer_at_its_share_still_gives_a_larger_batch(kafka_server, store, data_dir,
                                                                                 monkeypatch):
    """A broker sending no more than max.partition.fetch.bytes of any partition (Kafka cuts every
    partition but the first of an answer so): a batch larger is asked for alone by the size it
    declares, and comes whole; answers holding only a cut batch are not kept."""
    fill(store, big_batch_in=3)
    ask = fetch.Fetcher._ask
    asked_alone = []

    def cutting_ask(self, broker, asked, wait_ms, max_bytes):  # noqa: ANN001, ANN202
        answers = ask(self, broker, asked, wait_ms, max_bytes)
        if len(asked) == 1:
            asked_alone.append(next(iter(asked.values()))[1])
        return {w: dataclasses.replace(a, records=a.records[:asked[w][1]]) for w, a in answers.items()}

    monkeypatch.setattr(fetch.Fetcher, "_ask", cutting_ask)
    got, c = remote_read(kafka_server.bootstrap, merge=False)
    assert got == local_records(data_dir, merge=False)
    assert max(asked_alone) == big_batch_bytes(data_dir, 3)  # the big batch, by its declared size
    assert LIMIT // 2 < c.held.peak <= LIMIT + max(asked_alone)


@pytest.mark.slow
def test_dash_x_sets_the_bounds_and_a_bad_value_is_one_line(kafka_server, store, data_dir):
    fill(store)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap, {"fetch.max.bytes": "8192"})) as remote, \
            remote.consumer("w", merge=False) as c:
        assert isinstance(c, FetchConsumer)
        # one partition's answer is never asked for more than all of them may hold
        assert c.held.limit == 8192 and {cursor.part._max_bytes for cursor in c.cursors} == {8192}
    for bad in ("0", "-1", "lots", str(1 << 31)):  # (librdkafka's admin client refuses most of them first)
        with pytest.raises(UsageError, match=f"max.partition.fetch.bytes must be a number of bytes .*'{bad}'"):
            fetch_settings({"max.partition.fetch.bytes": bad})
    env = klog_env(data_dir, KLOG_CLUSTER_TIMEOUT="5")
    args = ["consume", "w", "--json", "-X", f"fetch.max.bytes={LIMIT}", "-X", f"max.partition.fetch.bytes={SHARE}"]
    remote = subprocess.run([sys.executable, "-m", "klog", *args, "-b", kafka_server.bootstrap], env=env,
                            capture_output=True, timeout=120)
    local = subprocess.run([sys.executable, "-m", "klog", "consume", "w", "--json"], env=env, capture_output=True,
                           timeout=120)
    assert (remote.returncode, remote.stderr) == (0, b"") and remote.stdout == local.stdout
    bad = subprocess.run([sys.executable, "-m", "klog", "consume", "w", "-b", kafka_server.bootstrap, "-X",
                          "fetch.max.bytes=0"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "fetch.max.bytes" in bad.stderr, bad.stderr

"""A consumer of many partitions holds a bounded amount, whatever the partition count and the data.

- poll() / poll_chunks() (the library's poll, `klog mirror`'s read loop) read partitions in turn
  until POLL_READ_BYTES, from where the last poll stopped: one read of every partition per poll
  held a topic of 1,000 partitions' reads at once, with their decoded records (`klog mirror` of
  100 partitions of 2.3 MB each peaked at 455 MB, of one such partition at 52 MB).
- A group consumer's poll reads the partitions it holds the same way.
- A consumer merging partitions by timestamp (`klog consume` of several partitions) holds a read of
  each while the merge waits on it: the partitions share MERGED_READ_BYTES, through a cluster too.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

import klog
import klog.client.consumer as consumer_module
from klog.store.limits import MERGED_READ_BYTES, MERGED_READ_BYTES_MIN, PARTITION_READ_BYTES_DEFAULT
from tests.conftest import REPO
from tests.peak_rss import run_measured

PARTITIONS = 20
PER_PARTITION = 300  # records of ~1 KB: ~300 KB a partition
VALUE = b"v" * 1000


def _fill(store, topic: str = "t", partitions: int = PARTITIONS, per_partition: int = PER_PARTITION) -> None:
    store.create_topic(topic, partitions=partitions)
    with store.producer(batch_size=16_384) as producer:  # ~16 batches a partition
        for i in range(per_partition):
            for p in range(partitions):
                producer.send(topic, VALUE, key=b"%d-%d" % (p, i), partition=p)


def test_a_poll_reads_up_to_its_budget_and_every_partition_gets_its_turn(store, monkeypatch) -> None:
    _fill(store)
    budget = 100_000  # a third of one partition's data: a poll reads one partition's 64 KB first read, then another
    monkeypatch.setattr(consumer_module, "POLL_READ_BYTES", budget)
    seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    first_seen: dict[int, int] = {}
    with store.consumer("t") as consumer:
        for n in range(1_000):  # (bounded: ~6 MB of records at >= 64 KB a poll take < 100 polls)
            records = consumer.poll()
            if not records:
                break
            # whole reads of <= 1 MiB each, stopped once the budget is passed
            assert sum(len(r.value) for r in records) < budget + PARTITION_READ_BYTES_DEFAULT
            assert len({r.partition for r in records}) <= 2, "past its budget a poll reads no more partitions"
            for r in records:
                seen[r.partition].append(r.key)
                first_seen.setdefault(r.partition, n)
        else:
            pytest.fail("the polls never ran out of records")
    for p, keys in seen.items():  # every record once, in order
        assert keys == [b"%d-%d" % (p, i) for i in range(PER_PARTITION)], p
    # in turn: every partition is read within the first ~PARTITIONS polls, not after the first ones' whole data
    assert max(first_seen.values()) < PARTITIONS + 2, first_seen


def test_poll_chunks_keeps_the_budget_too(store, monkeypatch) -> None:
    _fill(store)
    monkeypatch.setattr(consumer_module, "POLL_READ_BYTES", 100_000)
    counts: Counter[int] = Counter()
    with store.consumer("t", merge=False) as consumer:
        for _ in range(1_000):
            chunks = consumer.poll_chunks()
            if not chunks:
                break
            assert len({p for _, p, _ in chunks}) <= 2
            for _, p, records in chunks:
                counts[p] += len(records)
    assert counts == {p: PER_PARTITION for p in range(PARTITIONS)}


def test_a_group_consumers_poll_keeps_the_budget_too(store, monkeypatch) -> None:
    import klog.client.group as group_module

    _fill(store)
    monkeypatch.setattr(group_module, "POLL_READ_BYTES", 100_000)
    seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    consumer = store.group_consumer("g", "t", follow=False)
    try:
        for _ in range(1_000):
            records = consumer.poll(timeout_ms=2_000)
            if not records:
                break
            assert len({r.partition for r in records}) <= 2, "past its budget a poll reads no more partitions"
            for r in records:
                seen[r.partition].append(r.key)
        else:
            pytest.fail("the polls never ran out of records")
    finally:
        consumer.close()
    for p, keys in seen.items():
        assert keys == [b"%d-%d" % (p, i) for i in range(PER_PARTITION)], p


def test_one_poll_of_a_few_small_partitions_still_reads_them_all(store) -> None:
    """Under the budget, a poll reads every partition (what a caller polling a small topic sees)."""
    store.create_topic("small", partitions=3)
    with store.producer() as producer:
        for p in range(3):
            producer.send("small", b"x", partition=p)
    with store.consumer("small") as consumer:
        assert sorted(r.partition for r in consumer.poll()) == [0, 1, 2]
        assert consumer.poll() == []


def test_merged_partitions_share_the_read_budget(store) -> None:
    store.create_topic("wide", partitions=1000)
    store.create_topic("narrow", partitions=4)
    with store.consumer("wide") as merged:
        assert {c.max_bytes for c in merged.cursors} == {max(MERGED_READ_BYTES_MIN, MERGED_READ_BYTES // 1000)}
    with store.consumer("wide", merge=False) as unmerged:  # one partition at a time: full reads
        assert {c._full_bytes for c in unmerged.cursors} == {PARTITION_READ_BYTES_DEFAULT}
    with store.consumer("narrow") as few:  # 4 x 1 MiB is under the budget: full reads
        assert {c._full_bytes for c in few.cursors} == {PARTITION_READ_BYTES_DEFAULT}


def test_merged_reads_of_small_shares_give_every_record_in_time_order(store) -> None:
    store.create_topic("m", partitions=50)
    with store.producer(batch_size=4096) as producer:
        for i in range(2_000):
            producer.send("m", b"%d" % i, partition=i % 50, timestamp=1_000_000 + i)
    with store.consumer("m") as consumer:
        for c in consumer.cursors:
            c.share(1)  # (each read: one whole batch)
        values = [r.value for r in consumer]
    assert values == [b"%d" % i for i in range(2_000)]


def test_a_cluster_consumer_merging_partitions_asks_for_a_share_per_answer(kafka_server, store) -> None:
    """klog consume -b of a wide topic (FetchConsumer): each partition's Fetch answer is capped by
    its share too (PARTITION_BYTES, 16 MiB, otherwise: 1,000 partitions merged could hold 16 GB)."""
    from klog.client.remote import fetch_consumer
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget

    store.create_topic("wide", partitions=64)
    with store.producer(batch_size=2048) as producer:
        for i in range(3_000):
            producer.send("wide", b"%d" % i, partition=i % 64, timestamp=1_000_000 + i)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap, {})) as remote:
        with remote.consumer("wide") as merged:
            assert isinstance(merged, fetch_consumer.FetchConsumer)
            assert {c.part._max_bytes for c in merged.cursors} == {MERGED_READ_BYTES // 64}
            values = [r.value for r in merged]
        with remote.consumer("wide", merge=False) as unmerged:
            assert {c.part._max_bytes for c in unmerged.cursors} == {fetch_consumer.PARTITION_BYTES}
    assert values == [b"%d" % i for i in range(3_000)]


@pytest.mark.slow  # ~10 s: 60 MB written into 1 and into 60 partitions, each mirrored by a klog process
def test_mirror_of_a_wide_topic_holds_what_a_narrow_one_does_plus_the_buffers(tmp_path) -> None:
    records = 600_000  # ~110 B each: 1.1 MB a partition of 60, past one read of 1 MiB
    sizes = {}
    for partitions in (1, 60):
        src, dest = str(tmp_path / f"src{partitions}"), str(tmp_path / f"dest{partitions}")
        with klog.open(src) as store:
            store.create_topic("t", partitions=partitions)
            with store.producer(acks="0") as producer:
                value = b"x" * 100
                for start in range(0, records, 10_000):
                    producer.send_keyed("t", [(b"k%d" % i, value) for i in range(start, start + 10_000)])
        got = run_measured([sys.executable, "-m", "klog", "mirror", src, dest, "t"],
                           env={**os.environ, "PYTHONPATH": REPO})
        assert got.returncode == 0 and f"mirrored {records} records" in got.said, got.said
        sizes[partitions] = got.peak_rss_mib
    # the wide mirror's producer may hold buffer.memory (32 MiB, charged at 1.25x) and a poll
    # POLL_READ_BYTES (8 MiB) with its decoded records; one read of every partition held ~60 MiB
    # more, decoded (~260 MB in all; now ~130 MB against ~52 MB for one partition)
    assert sizes[60] - sizes[1] < 120, sizes

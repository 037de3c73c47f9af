"""`klog topics compact` run by another process while `klog serve` answers read_committed
fetches of the partition. serve keeps a partition's read_committed view (klog.store.txn.StableView:
the last stable offset and the aborted transactions a Fetch names) between fetches; its own
cleaner resets it after a swap, but a swap by another process went unnoticed. serve then went on
naming an aborted transaction whose batches and ABORT marker the other process's cleaning had
removed, and a Kafka client (librdkafka, Java's Fetcher) skipped that producer's transactional
batches from the named first offset until an ABORT marker that no longer comes: a committed
record the consumer never saw, with no error."""

from __future__ import annotations

import time

import pytest

import klog
from klog.broker import lifecycle
from klog.store.txn import INLINE_FOLDER_LOOK_S, StableView
from tests.broker.test_compaction import clock_at
from tests.broker.test_compaction_gaps_review import COMPACTED
from tests.klog_processes import run_klog
from tests.segment_files import leader_headers, poll_to_end, write_keys
from tests.serve_helpers import RawClient
from tests.server.test_serve_loop_fetch import _fetch

ck = pytest.importorskip("confluent_kafka")


def _aborted_then_committed(store) -> int:  # noqa: ANN001
    """Topic `t`: a transaction aborted at offset 0 (its marker at 1), a plain record, a committed
    transaction of the same producer in the same first segment (a Fetch from 0 gets both), more
    sealed segments after it; the producer id."""
    store.create_topic("t", 1, configs={**COMPACTED, "cleanup.policy": "compact", "delete.retention.ms": "0"})
    now = int(time.time() * 1000)
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"a-aborted", key=b"a", partition=0)
        producer.flush()
        producer.abort()
        write_keys(store, "t", [b"f"], now, step=0)
        with producer.transaction():
            producer.send("t", b"b-committed", key=b"b", partition=0)
        write_keys(store, "t", [b"g%d" % i for i in range(14)], now, step=0)
        return producer.producer_id


def _named(client: RawClient) -> list[tuple[int, int]]:
    [p] = _fetch(client, "t", {0: 0}, isolation_level=1).responses[0].partitions
    return [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]


def _read_committed(bootstrap: str) -> dict[bytes, bytes]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                            "isolation.level": "read_committed", "enable.partition.eof": True,
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("t", 0, 0)])
    return {key: value for _, key, value in poll_to_end(consumer)}


@pytest.mark.slow
def test_serve_notices_another_processs_compaction_in_its_read_committed_answers(kafka_server, data_dir):
    pid = _aborted_then_committed(kafka_server.store)
    with RawClient(kafka_server.port) as client:
        assert _named(client) == [(pid, 0)]  # serve's view has walked the log
        assert b"b" in _read_committed(kafka_server.bootstrap)
        for _ in range(3):  # the aborted batch goes, then its ABORT marker (delete.retention.ms 0)
            done = run_klog(data_dir, "topics", "compact", "t")
            assert done.returncode == 0, done.stderr
        assert 1 not in {h.base_offset for h in leader_headers(kafka_server.store, "t")}, "the marker is gone"
        got = _read_committed(kafka_server.bootstrap)
        assert got.get(b"b") == b"b-committed" and b"a" not in got
        assert _named(client) == []


def _compact_elsewhere(data_dir: str, now_ms: int) -> None:
    """What `klog topics compact` does, by a store of its own (another process's view of every
    partition: its own StableView, its own locks): the aborted batch goes, then its marker."""
    with klog.open(data_dir) as other:
        for t in (0, 10, 20):
            lifecycle.compact(other, "t", clock=clock_at(now_ms + t))


def test_a_read_committed_view_notices_a_cleaning_swapped_in_by_another_store(store, data_dir):
    pid = _aborted_then_committed(store)
    part = store.partition("t", 0)
    hw = part.high_watermark()
    view = StableView(part.leader)
    assert view.refresh(hw) == hw and [(a.producer_id, a.first_offset) for a in view.aborted_between(0, hw)] == [
        (pid, 0)]
    time.sleep(INLINE_FOLDER_LOOK_S)
    assert view.known_lso(hw) == hw  # (the event loop's look: nothing changed)
    _compact_elsewhere(data_dir, int(time.time() * 1000) + 1000)
    assert 1 not in {h.base_offset for h in leader_headers(store, "t")}, "the marker is gone"
    time.sleep(INLINE_FOLDER_LOOK_S)
    assert view.known_lso(hw) is None, "the event loop's look must not trust the old walk"
    assert view.refresh(hw) == hw and view.aborted_between(0, hw) == []


def test_serve_names_no_aborted_transaction_another_stores_cleaning_removed(kafka_server, data_dir):
    """The raw Fetch of the slow test above, the cleaning done by a store of its own in this process."""
    pid = _aborted_then_committed(kafka_server.store)
    with RawClient(kafka_server.port) as client:
        assert _named(client) == [(pid, 0)]
        _compact_elsewhere(data_dir, int(time.time() * 1000) + 1000)
        assert _named(client) == []

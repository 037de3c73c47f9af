"""The library's read_committed group consumer and offsets of transactions (KIP-447).

Goal: a member never starts a partition below offsets a decided transaction is committing (it
waits, as Kafka's consumer does on UNSTABLE_OFFSET_COMMIT), and a committed offset past the last
stable offset but within the high watermark is where it starts (not out of range).
Method: one store in-process; a commit decided and left half-done as a producer killed between
PrepareCommit and CompleteCommit leaves it.
"""

from __future__ import annotations

import klog
from klog.meta import transactions as tx
from klog.meta.groups import GroupsMeta

POLL_ROUNDS_MAX = 100


def _first_offsets(consumer, rounds: int, timeout_ms: int = 20) -> list[int]:
    for _ in range(rounds):
        records = consumer.poll(timeout_ms)
        if records:
            return [r.offset for r in records]
    return []


def _input(store, records: int, partitions: int = 1) -> None:
    """Topic 'in' with `records` records in each partition."""
    store.create_topic("in", partitions)
    with store.producer() as p:
        for i in range(records):
            for part in range(partitions):
                p.send("in", b"%d" % i, partition=part)


def test_waits_for_offsets_a_decided_commit_is_completing(data_dir):
    with klog.open(data_dir) as store:
        _input(store, 10)
        prod = store.producer(transactional_id="etl")
        prod.begin()
        prod.send("out", b"processed 0..4")
        prod.send_offsets("g", {("in", 0): 5})
        prod.flush()
        coord = prod.coordinator  # decided (PrepareCommit, durable), then the process "dies"
        coord._change("etl", lambda meta: tx.end_transaction(meta, prod.producer_id, prod.epoch, True, coord.clock()))
        assert coord.meta.get("etl").state in tx.PREPARING
        c = store.group_consumer("g", "in", isolation_level="read_committed", auto_offset_reset="earliest")
        try:
            assert _first_offsets(c, 10) == []  # not offsets 0..4 again: it waits for the commit
            assert c.assignment() == [("in", 0)]  # held, not read yet
            coord._finish(coord.meta.get("etl"))  # the coordinator completes it (its timer, a restart)
            assert _first_offsets(c, POLL_ROUNDS_MAX)[0] == 5
            assert c.assignment() == [("in", 0)]
        finally:
            c.close()
        assert GroupsMeta(store.meta).committed("g")[("in", 0)].offset == 10


def test_read_uncommitted_does_not_wait(data_dir):
    with klog.open(data_dir) as store:
        _input(store, 3)
        prod = store.producer(transactional_id="etl")
        prod.begin()
        prod.send_offsets("g", {("in", 0): 2})
        prod.flush()
        with store.group_consumer("g", "in", auto_offset_reset="earliest") as c:
            assert _first_offsets(c, POLL_ROUNDS_MAX)[0] == 0
        prod.abort()
        prod.close()


def test_a_committed_offset_past_the_last_stable_offset_is_kept(data_dir):
    with klog.open(data_dir) as store:
        _input(store, 5)
        upstream = store.producer(transactional_id="upstream")
        upstream.begin()
        upstream.send("in", b"open")  # offset 5: the last stable offset stays 5
        upstream.flush()
        with store.producer() as p:
            for i in range(5, 8):
                p.send("in", b"%d" % i)  # offsets 6..8, high watermark 9
        GroupsMeta(store.meta).set_offsets("g", {("in", 0): 8})  # as a read_uncommitted member would
        c = store.group_consumer("g", "in", isolation_level="read_committed", auto_offset_reset="earliest")
        try:
            assert _first_offsets(c, 10) == []  # not 0..4 (a reset to earliest): it waits at 8
            assert c.position("in", 0) == 8
            upstream.commit()  # the marker at 9: the last stable offset passes 8
            assert _first_offsets(c, POLL_ROUNDS_MAX) == [8]
        finally:
            c.close()
        upstream.close()


def test_a_partition_waiting_for_offsets_moves_in_a_rebalance_and_still_waits(data_dir):
    with klog.open(data_dir) as store:
        _input(store, 4, partitions=2)
        prod = store.producer(transactional_id="etl")
        prod.begin()
        prod.send_offsets("g", {("in", 0): 2, ("in", 1): 3})
        prod.flush()
        first = store.group_consumer("g", "in", isolation_level="read_committed")
        second = None
        try:
            assert _first_offsets(first, 5) == []
            assert first.assignment() == [("in", 0), ("in", 1)]
            second = store.group_consumer("g", "in", isolation_level="read_committed")
            read: list[tuple[int, int]] = []
            for _ in range(POLL_ROUNDS_MAX):  # the rebalance: one partition each, both still waiting
                for c in (first, second):
                    read += [(r.partition, r.offset) for r in c.poll(10)]
                if len(first.assignment()) == len(second.assignment()) == 1:
                    break
            assert len(first.assignment()) == len(second.assignment()) == 1
            assert read == []
            prod.commit()
            for _ in range(POLL_ROUNDS_MAX):
                for c in (first, second):
                    read += [(r.partition, r.offset) for r in c.poll(10)]
                if len(read) == 3:
                    break
            assert sorted(read) == [(0, 2), (0, 3), (1, 3)]
        finally:
            first.close()
            if second is not None:
                second.close()
        prod.close()

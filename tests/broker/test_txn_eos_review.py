"""Exactly-once as a hostile user tries to break it (the transaction coordinator's review).

Goal: no interleaving of processes, clocks or timer passes makes a read_committed reader see an
aborted record or fences a producer that did nothing wrong. Method: the store's coordinator driven
directly (an injected clock, a frozen wall clock where producer ids are drawn), and what a
read_committed consumer of the store then reads.
"""

from __future__ import annotations

import itertools

import klog
from klog.broker import producer_ids


def test_two_processes_in_one_millisecond_give_two_transactional_ids_different_producer_ids(store, monkeypatch):
    """Producer ids come from the clock and a per-process counter: a second process drawing one in
    the same millisecond drew the first's. Two transactional ids of one producer id then ended
    each other's transactions: the ABORT of one was never written and read_committed readers saw
    its aborted records. Each transactional id now gets its own id, whatever the clock says."""
    store.create_topic("t", 1)
    with monkeypatch.context() as m:
        m.setattr("time.time", lambda: 1_800_000_000.123)
        a = store.producer(transactional_id="proc-a")
        # a second process: its own counter, starting at 0, in the same millisecond
        m.setattr(producer_ids, "_counter", itertools.count())
        m.setattr(producer_ids, "_last_ms", 0)
        b = store.producer(transactional_id="proc-b")
        b.close()
        b = store.producer(transactional_id="proc-b")  # its next incarnation (epoch 1)
    assert a.producer_id != b.producer_id
    a.begin()
    b.begin()
    a.send("t", b"a-committed")
    a.flush()
    b.send("t", b"b-aborted")
    b.flush()
    a.commit()
    b.abort()
    seen = [r.value for r in store.consumer("t", isolation_level="read_committed")]
    assert seen == [b"a-committed"]
    a.close()
    b.close()


def test_producer_ids_of_new_transactional_ids_only_grow_when_the_clock_is_set_back(data_dir, monkeypatch):
    """A clock set back (NTP, a VM restored) after a restart drew ids already given out."""
    with klog.open(data_dir) as store:
        first = store.producer(transactional_id="before")
        first.close()
        monkeypatch.setattr("time.time", lambda: 1_000_000_000.0)  # years earlier
        monkeypatch.setattr(producer_ids, "_last_ms", 0)
        second = store.producer(transactional_id="after")
        second.close()
    assert second.producer_id > first.producer_id


def test_a_timer_pass_never_aborts_the_transaction_begun_after_the_expired_one(data_dir, monkeypatch):
    """A timer pass reads every id, then aborts the expired ones one after another: its look at an
    id may be seconds old. A producer that committed its expired transaction meanwhile and began
    the next was aborted and fenced within that one's timeout; now only the expired transaction is."""
    from klog.broker.batches import RawAppender
    from klog.broker.txn_coordinator import TxnCoordinator

    with klog.open(data_dir) as store:
        store.create_topic("t", 1)
        now = [1_800_000_000_000]
        coord = TxnCoordinator(store, RawAppender(store), clock=lambda: now[0])
        ids = coord.init_producer_id("slow", 1000)
        pid, epoch = ids.producer_id, ids.epoch
        coord.add_partitions("slow", pid, epoch, [("t", 0)])
        now[0] += 2000  # past its timeout
        snapshot = list(coord.meta.all())  # what the pass read before it came to this id
        coord.end_txn("slow", pid, epoch, True)  # the producer's commit got in first
        coord.add_partitions("slow", pid, epoch, [("t", 0)])  # and its next transaction began
        with monkeypatch.context() as m:
            m.setattr(coord.meta, "all", lambda: iter(snapshot))
            assert coord.tick() == []
        coord.end_txn("slow", pid, epoch, True)  # not fenced: its transaction commits
        assert coord.meta.get("slow").state == "CompleteCommit"
        # the one past its timeout still is aborted
        coord.add_partitions("slow", pid, epoch, [("t", 0)])
        now[0] += 2000
        assert len(coord.tick()) == 1
        assert coord.meta.get("slow").producer_epoch == epoch + 1


def test_send_offsets_refuses_a_group_id_that_would_break_another_groups_offsets(store):
    """The library's send_offsets took any group name: one holding '\\0' ("bad\\0x") committed an
    LMDB key read as group "bad"'s, and every read of "bad"'s offsets (klog groups, OffsetFetch)
    then failed with a traceback. It is refused now (UsageError, nothing staged), as the server
    refuses it (INVALID_GROUP_ID), and the transaction still commits; a long one still works (the
    Spark sink names its group after the transactional id)."""
    import pytest

    from klog.errors import UsageError
    from klog.meta.groups import GroupsMeta

    store.create_topic("in", 1)
    with store.producer(transactional_id="x") as producer, producer.transaction():
        producer.send("out", b"v")
        for bad in ("bad\0x", ""):
            with pytest.raises(UsageError, match="invalid group id"):
                producer.send_offsets(bad, {("in", 0): 3})
        producer.send_offsets("bad", {("in", 0): 2})
        producer.send_offsets("g" * 300, {("in", 0): 5})
    assert {tp: c.offset for tp, c in GroupsMeta(store.meta).committed("bad").items()} == {("in", 0): 2}
    assert {tp: c.offset for tp, c in GroupsMeta(store.meta).committed("g" * 300).items()} == {("in", 0): 5}


def test_a_timer_pass_completing_a_stale_commit_never_completes_the_next_transaction(data_dir, monkeypatch):
    """A commit stuck in PrepareCommit for PREPARE_STALE_MS is completed by the timer from its look
    at every id, which may be seconds old. When another had completed that commit meanwhile and the
    producer's next transaction (same id, epoch and state, other partitions) was being committed,
    the timer took it for the stale one: it completed its document, and the next transaction's own
    completion, no longer wanted, left the partitions the stale one had not touched without their
    marker: open for good, its committed records never seen by read_committed readers."""
    from klog.broker.batches import RawAppender
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.meta import transactions as tx

    with klog.open(data_dir) as store:
        store.create_topic("a", 1)
        store.create_topic("b", 1)
        clock = [1_800_000_000_000]
        producer = store.producer(transactional_id="big")
        coord = producer.coordinator
        monkeypatch.setattr(coord, "clock", lambda: clock[0])
        pid, epoch = producer.producer_id, producer.epoch

        def prepare_commit() -> tx.TxnMetadata:  # EndTxn's first step: the outcome decided, durable
            return coord._change("big", lambda m: tx.end_transaction(m, pid, epoch, True, clock[0]))

        producer.begin()
        producer.send("a", b"first")
        producer.flush()
        stuck = prepare_commit()  # and its committer stalls before the markers
        clock[0] += 10_000  # stale
        timer = TxnCoordinator(store, RawAppender(store), clock=lambda: clock[0])
        look = list(timer.meta.all())  # the timer pass reads every id ...
        coord._finish(stuck)  # ... the stalled committer completes it meanwhile ...
        producer._in_transaction = False
        producer.begin()  # ... and the producer commits its next transaction, in another partition
        producer.send("b", b"second")
        producer.flush()
        clock[0] += 1
        deciding = prepare_commit()
        with monkeypatch.context() as m:
            m.setattr(timer.meta, "all", lambda: iter(look))
            timer.tick()  # ... when the pass comes to the id
        coord._finish(deciding)  # the next transaction's own markers and completion
        producer._in_transaction = False
        producer.close()
        assert coord.meta.get("big").state == "CompleteCommit"
        assert [r.value for r in store.consumer("b", isolation_level="read_committed")] == [b"second"]
        assert [r.value for r in store.consumer("a", isolation_level="read_committed")] == [b"first"]

"""`verify --repair --discard-damaged` writes a discarded transaction marker again only with an outcome
proven to be that transaction's.

Goal: the transaction coordinator's last outcome for a producer id and epoch can be a LATER
transaction's of the same producer (the epoch stays across transactions): when the discarded marker's
`.txnindex` entry is gone too, writing that outcome would show aborted records (or hide committed
ones). The rewrite uses the coordinator's record of the markers it wrote (the transaction's first
offset and its marker's offset per partition); without a proof the transaction stays open and the
discard names it as hanging, and `klog transactions abort --start-offset` ends it. Method: a
transactional producer on the store, bits flipped in the marker's batch, the `.txnindex` emptied.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from klog.broker.verify import discard_damaged
from klog.meta.transactions import TransactionsMeta
from tests.segment_files import batch_positions


def _flip(store, topic: str, partition: int, *offsets_at: int) -> None:
    """A flipped bit in the record of the batches at these positions of the partition's one segment."""
    folder = store.partition(topic, partition).leader.directory
    [path] = glob.glob(os.path.join(folder, "*.log"))
    starts = batch_positions(path)
    with open(path, "r+b") as f:
        for i in offsets_at:
            f.seek(starts[i] + 62)
            byte = f.read(1)[0]
            f.seek(starts[i] + 62)
            f.write(bytes([byte ^ 0x01]))


def _unindex(store, topic: str, partition: int) -> None:
    for index in glob.glob(os.path.join(store.partition(topic, partition).leader.directory, "*.txnindex")):
        os.truncate(index, 0)  # (not fsynced: a crash may lose the entry)


def _committed(store, topic: str, partition: int) -> list[bytes]:
    return [r.value for r in store.consumer(topic, partitions=[partition], isolation_level="read_committed")]


@pytest.mark.slow
@pytest.mark.parametrize("later", ["elsewhere", "discarded-too"])
def test_a_later_transactions_commit_is_not_written_for_an_aborted_one(store, cli, later):
    store.create_topic("t", partitions=2)
    with store.producer() as p:
        p.send("t", b"before", partition=0)  # offset 0
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"ABORTED", partition=0)  # offset 1
        producer.flush()
        producer.abort()  # its marker: offset 2
        producer.begin()  # the same producer id and epoch
        if later == "discarded-too":
            producer.send("t", b"T2", partition=0)  # offset 3, its marker 4: lost with offset 2
        producer.send("t", b"T2-elsewhere", partition=1)
        producer.flush()
        producer.commit()
    pid = TransactionsMeta(store.meta).get("tx").producer_id
    assert TransactionsMeta(store.meta).get("tx").state == "CompleteCommit"
    with store.producer() as p:
        p.send("t", b"after", partition=0)
        p.flush()
    _unindex(store, "t", 0)
    _flip(store, "t", 0, *([2] if later == "elsewhere" else [2, 3, 4]))
    [done] = discard_damaged(store, "t")
    assert done.lost == ("2..2" if later == "elsewhere" else "2..4")
    # left open: read_committed readers wait at it, and never see its aborted record
    assert _committed(store, "t", 0) == [b"before"]
    assert done.hanging == [(pid, 0, 1)]
    r = cli("transactions", "find-hanging", "--topic", "t", "--max-transaction-timeout", "0", "--json")
    assert [(d["partition"], d["producer_id"], d["start_offset"]) for d in map(json.loads, r.stdout.splitlines())] \
        == [(0, pid, 1)], r
    r = cli("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "1")
    assert r.exit_code == 0, r
    assert _committed(store, "t", 0) == [b"before", b"after"]
    assert _committed(store, "t", 1) == [b"T2-elsewhere"]


@pytest.mark.slow
def test_the_discard_says_which_transaction_it_left_open(store, cli):
    store.create_topic("t")
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"ABORTED", partition=0)
        producer.flush()
        producer.abort()  # marker at 1
        producer.begin()
        producer.send("t", b"other", partition=0)  # 2, marker at 3
        producer.flush()
        producer.commit()
    with store.producer() as p:
        p.send("t", b"after", partition=0)
    _unindex(store, "t", 0)
    _flip(store, "t", 0, 1, 2, 3)
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0, r
    [line] = [x for x in r.out.splitlines() if x.startswith("t-0: discarded")]
    pid = TransactionsMeta(store.meta).get("tx").producer_id
    assert line.endswith(f"; left open, its outcome lost with its marker: the transaction of producer id {pid} "
                         "(epoch 0) from offset 0 (end it with `klog transactions abort --topic t --partition 0 "
                         "--start-offset 0`)"), line


@pytest.mark.slow
def test_a_timed_out_transactions_abort_is_written_again_from_the_coordinators_record(store):
    """The coordinator's abort after a timeout fences the producer (epoch + 1) and writes ABORT with the
    new epoch; its record proves the outcome though the data batches carry the older epoch."""
    store.create_topic("t")
    with store.producer() as p:
        p.send("t", b"before", partition=0)
    producer = store.producer(transactional_id="tx")
    producer.begin()
    producer.send("t", b"ABORTED", partition=0)  # offset 1
    producer.flush()
    assert store.abort_transaction("tx")  # as the timeout does: ABORT at 2, the epoch fenced
    with store.producer() as p:
        p.send("t", b"after", partition=0)
        p.flush()
    _unindex(store, "t", 0)
    _flip(store, "t", 0, 2)
    [done] = discard_damaged(store, "t")
    assert _committed(store, "t", 0) == [b"before", b"after"]
    assert (done.lost, done.hanging) == ("2..2", [])
    marker = [b for b in store.partition("t", 0).read(0) if b.header.is_control]
    assert [(b.header.base_offset, b.header.producer_epoch) for b in marker] == [(2, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "unindexed"])
def test_an_abort_lost_before_the_producers_next_transaction_here(store, cli, indexed):
    """The aborted transaction's marker is discarded, its producer's next transaction (committed) follows
    the damage in the same partition: without a marker in the gap that commit ends both. With the
    `.txnindex` entry the ABORT is proven and written again; without it the discard says the aborted
    transaction's outcome is not known."""
    store.create_topic("t")
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"ABORTED", partition=0)  # offset 0
        producer.flush()
        producer.abort()  # marker at 1: discarded
        producer.begin()
        producer.send("t", b"T2", partition=0)  # 2
        producer.flush()
        producer.commit()  # 3
    pid = TransactionsMeta(store.meta).get("tx").producer_id
    if not indexed:
        _unindex(store, "t", 0)
    _flip(store, "t", 0, 1)
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0, r
    if indexed:
        assert _committed(store, "t", 0) == [b"T2"]
        assert "outcome not known" not in r.out
    else:
        [line] = [x for x in r.out.splitlines() if x.startswith("t-0: discarded")]
        assert line.endswith(f"; its marker lost and its outcome not known: the transaction of producer id {pid} "
                             "(epoch 0) from offset 0 now ends with its producer's next transaction here"), line

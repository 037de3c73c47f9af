"""`verify --repair --discard-damaged` dropping a transaction's marker writes it again in the gap
(ABORT where the segment's `.txnindex` says so, else as the transaction coordinator completed the
transaction): without it the transaction stays open for ever, a read_committed reader stops at its
first record (every acknowledged record after it unseen, `verify` saying ok), and `transactions
abort` cannot end it (the coordinator has it complete)."""

from __future__ import annotations

import glob
import os

import pytest

from klog.broker.verify import discard_damaged
from tests.segment_files import batch_positions

_batch_starts = batch_positions


@pytest.mark.slow
@pytest.mark.parametrize("outcome", ["abort", "abort-unindexed", "commit"])
@pytest.mark.parametrize("after", [2, 0], ids=["middle", "last"])
def test_a_discarded_transaction_marker_still_ends_its_transaction(store, cli, after, outcome):
    store.create_topic("t")
    with store.producer() as p:
        p.send("t", b"before", partition=0)
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"TXN", partition=0)
        producer.flush()
        producer.commit() if outcome == "commit" else producer.abort()  # its marker: offset 2
    with store.producer() as p:
        for i in range(after):
            p.send("t", b"after%d" % i, partition=0)
            p.flush()
    folder = store.partition("t", 0).leader.directory
    if outcome == "abort-unindexed":  # (not fsynced: a crash may lose the entry)
        [index] = glob.glob(os.path.join(folder, "*.txnindex"))
        os.truncate(index, 0)
    [path] = glob.glob(os.path.join(folder, "*.log"))
    marker_at = _batch_starts(path)[2]
    with open(path, "r+b") as f:  # a flipped bit in the marker's record
        f.seek(marker_at + 62)
        byte = f.read(1)[0]
        f.seek(marker_at + 62)
        f.write(bytes([byte ^ 0x01]))
    [done] = discard_damaged(store, "t")
    assert done.lost == "2..2"
    with store.producer() as p:  # written after the discard: read_committed readers see it
        p.send("t", b"later", partition=0)
    unaborted = [b"before", b"TXN"] + [b"after%d" % i for i in range(after)] + [b"later"]
    want = unaborted if outcome == "commit" else unaborted[:1] + unaborted[2:]
    assert [r.value for r in store.consumer("t", isolation_level="read_committed")] == want
    assert [r.value for r in store.consumer("t", isolation_level="read_uncommitted")] == unaborted
    r = cli("consume", "t", "--property", "isolation.level=read_committed")
    assert (r.exit_code, r.stdout) == (0, b"".join(v + b"\n" for v in want)), r
    r = cli("verify", "t")
    assert (r.exit_code, r.out.strip()) == (0, "t-0 replica 0: ok"), r


@pytest.mark.slow
def test_a_discarded_batch_of_an_ongoing_transaction_gets_no_marker(store):
    store.create_topic("t")
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        for value in (b"x", b"y", b"z"):
            producer.send("t", value, partition=0)
            producer.flush()
        [path] = glob.glob(os.path.join(store.partition("t", 0).leader.directory, "*.log"))
        at = _batch_starts(path)[2] + 62  # z's batch, the last, the transaction still open
        with open(path, "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0x01]))
        [done] = discard_damaged(store, "t")
        assert done.lost == "2..2"
        assert list(store.consumer("t", isolation_level="read_committed")) == []  # still open
        producer.commit()
    assert [(r.offset, r.value) for r in store.consumer("t", isolation_level="read_committed")] == \
        [(0, b"x"), (1, b"y")]

"""`verify --repair --discard-damaged` re-read: a transaction whose marker was discarded and whose
producer's next marker in the partition (a later transaction's, kept after the damage) now ends it.

What a user sees: the discard names such a transaction as one whose outcome is not known (its records
take the later transaction's outcome), whether that later transaction's first batch here survived the
damage or only its marker did.
"""

from __future__ import annotations

import pytest

from klog.meta.transactions import TransactionsMeta
from tests.broker.test_discard_damaged_txn_outcome import _committed, _flip


@pytest.mark.slow
def test_a_commit_lost_before_a_later_abort_whose_data_was_discarded_too_is_named(store, cli):
    """T1 commits (offset 0, COMMIT at 1), T2 of the same producer id and epoch aborts (2, ABORT at 3);
    offsets 1-2 are discarded: T2's ABORT now ends T1 too, and T1's committed record is hidden from
    read_committed readers. The discard said nothing of it (it looked only at a producer whose first
    batch after the damage is data, not a marker)."""
    store.create_topic("t")
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"T1", partition=0)  # offset 0
        producer.flush()
        producer.commit()  # COMMIT at 1: discarded
        producer.begin()
        producer.send("t", b"T2", partition=0)  # 2: discarded
        producer.flush()
        producer.abort()  # ABORT at 3: kept
    with store.producer() as p:
        p.send("t", b"after", partition=0)  # 4
    pid = TransactionsMeta(store.meta).get("tx").producer_id
    _flip(store, "t", 0, 1, 2)
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0, r
    [line] = [x for x in r.out.splitlines() if x.startswith("t-0: discarded")]
    assert line.endswith(f"; its marker lost and its outcome not known: the transaction of producer id {pid} "
                         "(epoch 0) from offset 0 now ends with its producer's next transaction here"), line
    assert _committed(store, "t", 0) == [b"after"]  # (T1 takes T2's abort: what the line warns of)

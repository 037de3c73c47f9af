"""A `.txnindex` names aborted ranges, but the ABORT markers in the log are the truth. An index entry
the log contradicts (a flipped byte in its first offset, an entry naming offsets that hold no
marker) used to be taken as it was: read_committed readers skipped committed records of that
producer and exited 0. Entries are now taken only where the log agrees."""

from __future__ import annotations

import glob
import os
import struct

import klog
from klog.store.txn import ABORTED_TXN

COMMITTED = [b"a", b"b", b"c", b"d"]


def _txn_log(data_dir: str) -> tuple[str, int]:
    """Topic t: one transactional id commits a, b, c; aborts x, y; commits d. Returns the
    .txnindex path and the producer id."""
    with klog.open(data_dir) as store:
        store.create_topic("t")
        with store.producer(transactional_id="etl") as producer:
            for values, commit in (([b"a", b"b", b"c"], True), ([b"x", b"y"], False), ([b"d"], True)):
                producer.begin()
                for v in values:
                    producer.send("t", v, partition=0)
                producer.flush()  # (the aborted records reach the log before the marker)
                producer.commit() if commit else producer.abort()
    [index] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.txnindex"))
    with open(index, "rb") as f:
        [(_, pid, _, _, _)] = [ABORTED_TXN.unpack_from(f.read())]
    return index, pid


def _read_committed(cli) -> list[bytes]:  # noqa: ANN001 - the cli fixture
    r = cli("consume", "t", "-X", "isolation.level=read_committed")
    assert r.exit_code == 0, r
    return r.stdout.splitlines()


def test_a_flipped_first_offset_in_the_txnindex_skips_no_committed_record(cli, data_dir):
    index, _ = _txn_log(data_dir)
    assert _read_committed(cli) == COMMITTED
    with open(index, "r+b") as f:
        raw = bytearray(f.read())
        first = struct.unpack_from(">q", raw, 10)[0]
        assert first > 0
        struct.pack_into(">q", raw, 10, 0)  # the aborted range now starts at the committed a, b, c
        f.seek(0)
        f.write(raw)
    assert _read_committed(cli) == COMMITTED


def test_a_txnindex_entry_with_no_abort_marker_at_its_end_is_not_taken(cli, data_dir):
    index, pid = _txn_log(data_dir)
    with open(index, "ab") as f:  # a range over the committed a, b, c, ending at a data batch
        f.write(ABORTED_TXN.pack(0, pid, 0, 1, 0))
    assert _read_committed(cli) == COMMITTED

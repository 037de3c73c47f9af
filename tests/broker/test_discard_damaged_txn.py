"""`verify --repair --discard-damaged` dropping a transaction's ABORT marker (its `.txnindex`
entry says it was one) writes the marker again in the gap: without it the aborted records' transaction
stays open for ever, and a read_committed reader stops at its first record (every acknowledged record
after it unseen), or, once anything ends it, reads the aborted records as committed."""

from __future__ import annotations

import glob
import os

import pytest

from klog.broker.verify import discard_damaged


def _batch_starts(path: str) -> list[int]:
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], 0
    while at < len(data):
        out.append(at)
        at += 12 + int.from_bytes(data[at + 8:at + 12], "big")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("after", [2, 0], ids=["middle", "last"])
def test_a_discarded_abort_marker_still_aborts_its_transaction(store, cli, after):
    store.create_topic("t")
    with store.producer() as p:
        p.send("t", b"before", partition=0)
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"ABORTED", partition=0)
        producer.flush()
        producer.abort()  # its marker: offset 2
    with store.producer() as p:
        for i in range(after):
            p.send("t", b"after%d" % i, partition=0)
            p.flush()
    [path] = glob.glob(os.path.join(store.partition("t", 0).leader.directory, "*.log"))
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
    want = [b"before"] + [b"after%d" % i for i in range(after)] + [b"later"]
    assert [r.value for r in store.consumer("t", isolation_level="read_committed")] == want
    assert [r.value for r in store.consumer("t", isolation_level="read_uncommitted")] == \
        [b"before", b"ABORTED"] + want[1:]
    r = cli("consume", "t", "--property", "isolation.level=read_committed")
    assert (r.exit_code, r.stdout) == (0, b"".join(v + b"\n" for v in want)), r
    r = cli("verify", "t")
    assert (r.exit_code, r.out.strip()) == (0, "t-0 replica 0: ok"), r

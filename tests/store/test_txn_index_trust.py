"""A `.txnindex` names aborted ranges, but the ABORT markers in the log are the truth. An index entry
the log contradicts (a flipped byte in its first offset, an entry naming offsets that hold no
marker) used to be taken as it was: read_committed readers skipped committed records of that
producer and exited 0. Entries are now taken only where the log agrees."""

from __future__ import annotations

import glob
import os
import struct

import pytest

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


def _marker_positions(segment: str) -> list[int]:
    """Positions of the control batches (attributes bit 5) in a segment file."""
    with open(segment, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 61 <= len(data):
        if struct.unpack_from(">h", data, pos + 21)[0] & 0x20:
            out.append(pos)
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    return out


def test_a_damaged_commit_marker_is_an_error_for_read_committed_not_the_end(cli, data_dir):
    _txn_log(data_dir)
    [segment] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log"))
    first_commit = _marker_positions(segment)[0]
    with open(segment, "r+b") as f:  # its record's last byte (the coordinator epoch): only the CRC covers it
        f.seek(first_commit + 8)
        end = first_commit + 12 + struct.unpack(">i", f.read(4))[0] - 1
        f.seek(end)
        byte = f.read(1)
        f.seek(end)
        f.write(bytes([byte[0] ^ 0x02]))
    r = cli("consume", "t", "-X", "isolation.level=read_committed")
    assert r.exit_code == 1 and "CRC mismatch" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r


def test_a_cut_log_is_an_error_for_read_committed_not_the_end(cli, data_dir):
    _txn_log(data_dir)
    [segment] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log"))
    os.truncate(segment, _marker_positions(segment)[0] + 10)  # the first COMMIT marker cut: a, b, c look open
    r = cli("consume", "t", "-X", "isolation.level=read_committed")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r
    assert "read_committed cannot walk" in r.stderr, r


def test_a_base_offset_raised_past_the_high_watermark_is_an_error_for_read_committed(cli, data_dir):
    _txn_log(data_dir)
    [segment] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log"))
    aborted_batch = _marker_positions(segment)[0] + 78  # after the first COMMIT marker (78 bytes): x, y
    with open(segment, "r+b") as f:  # its baseOffset raised by 512, past the high watermark
        f.seek(aborted_batch + 6)
        f.write(bytes([f.read(1)[0] ^ 0x02]))
    r = cli("consume", "t", "-X", "isolation.level=read_committed")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r  # (a guard: the data read finds it too)


def test_a_txnindex_entry_ending_at_a_commit_marker_is_not_taken(cli, data_dir):
    index, pid = _txn_log(data_dir)
    [segment] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log"))
    with open(segment, "rb") as f:  # the first COMMIT marker's offset (a, b, c come before it)
        f.seek(_marker_positions(segment)[0])
        commit_offset = struct.unpack(">q", f.read(8))[0]
    with open(index, "ab") as f:  # Kafka indexes aborted ranges only: this one ends at a commit
        f.write(ABORTED_TXN.pack(0, pid, 0, commit_offset, commit_offset + 1))
    assert _read_committed(cli) == COMMITTED


def test_a_txnindex_planted_as_a_link_to_a_fifo_is_refused_not_waited_on(klog_proc, data_dir, tmp_path):
    index, _ = _txn_log(data_dir)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # (a link to it or to /dev/zero stalled read_committed readers, or read without end)
    os.remove(index)
    os.symlink(fifo, index)
    r = klog_proc("consume", "t", "-X", "isolation.level=read_committed", timeout=30)
    assert r.returncode == 1 and b"is a symbolic link" in r.stderr and r.stderr.count(b"\n") == 1, r.stderr


@pytest.mark.slow
def test_verify_repair_puts_a_file_in_place_of_a_linked_txnindex(cli, klog_proc, data_dir, tmp_path):
    index, _ = _txn_log(data_dir)
    elsewhere = tmp_path / "elsewhere.txnindex"
    os.rename(index, elsewhere)
    os.symlink(elsewhere, index)
    kept = elsewhere.read_bytes()
    r = klog_proc("verify")
    assert r.returncode == 1 and b"txn index is a symbolic link" in r.stdout, r.stdout
    assert klog_proc("verify", "--repair").returncode == 0
    assert not os.path.islink(index) and open(index, "rb").read() == kept  # rebuilt from the markers
    assert elsewhere.read_bytes() == kept  # what the link pointed to: untouched
    assert klog_proc("verify").returncode == 0
    assert _read_committed(cli) == COMMITTED

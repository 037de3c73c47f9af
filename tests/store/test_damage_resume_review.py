"""Review of damaged-data recovery (store/resume.py): the resume after a damaged batch must never
land inside the damaged batch's own bytes. A record value that is itself a whole CRC-valid v2
batch (a raw batch archived as a record, a mirror of segment bytes) is a valid-looking batch there;
resuming at it hands its records out under offsets that belong to the damaged batch."""

from __future__ import annotations

import time

import pytest

import klog
from klog.store import codec
from tests.cli.test_cli import assert_one_line_error
from tests.segment_files import batch_positions as _positions
from tests.segment_files import flip_bit as _flip
from tests.segment_files import numbered_lines as _lines
from tests.segment_files import segment_path as _segment
from tests.segment_files import write_at as _write


def _forged(base_offset: int, value: bytes = b"forged") -> bytes:
    return codec.encode_batch([(None, value, [], int(time.time() * 1000))], base_offset=base_offset)


def _write_with_embedded(cli, data_dir: str, embedded: bytes) -> str:  # noqa: ANN001 - the cli fixture
    """t-0: offsets 0..9 (lines), then one batch of offsets 10..19 whose last record's value is
    `embedded`; the segment's path."""
    assert cli("topics", "create", "t").exit_code == 0
    assert cli("produce", "t", input=_lines(0, 10)).exit_code == 0
    with klog.open(data_dir) as store, store.producer() as producer:
        producer.send_values("t", [b"v%d" % i for i in range(10, 19)] + [embedded])
    return _segment(data_dir)


@pytest.mark.slow
def test_a_batch_inside_the_damaged_last_batch_is_never_resumed_at(cli, data_dir):
    """A flipped bit in the segment's last batch, whose last record's value is a valid batch of
    offset 15: --skip-damaged skips 10..19 and `-o 15` is an error; neither hands "forged" out."""
    path = _write_with_embedded(cli, data_dir, _forged(15))
    positions = _positions(path)
    assert len(positions) == 2
    _flip(path, positions[1] + 70)
    r = cli("consume", "t", "--skip-damaged")
    assert b"forged" not in r.stdout, r
    assert (r.exit_code, r.stdout) == (1, _lines(0, 10)), r
    assert "skipped t-0 offsets 10..19" in r.stderr, r.stderr
    for start in ("10", "12", "15", "16"):
        r = cli("consume", "t", "-o", start)
        assert b"forged" not in r.stdout, (start, r)
        assert_one_line_error(r, 1, "CRC mismatch")
    # before, the discard kept the embedded batch: "the log now starts at 15", "forged" at 15 for good
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0 and "discarded offsets 10..19 (the damaged batch)" in r.out, r
    assert cli("verify", "t").out.strip() == "t-0 replica 0: ok"
    assert cli("consume", "t").stdout == b"".join(b"%d\n" % i for i in range(10))


@pytest.mark.slow
def test_a_batch_inside_a_damaged_header_s_batch_is_never_read_as_its_offsets(cli, data_dir):
    """The damaged batch's length field broken (the walk cannot step over it): the scan for the
    next batch must not stop at the batch held in its last record's value; before the fix
    `consume -o 15` printed "forged" as offset 15 and --skip-damaged printed it between two
    skipped ranges."""
    path = _write_with_embedded(cli, data_dir, _forged(15))
    positions = _positions(path)
    _write(path, positions[1] + 8, b"\x40")  # batchLength + 1 GiB
    for start in ("12", "15", "16"):
        r = cli("consume", "t", "-o", start)
        assert b"forged" not in r.stdout, (start, r)
        assert_one_line_error(r, 1, "invalid batch header")
    r = cli("consume", "t", "--skip-damaged")
    assert b"forged" not in r.stdout, r
    assert (r.exit_code, r.stdout) == (1, _lines(0, 10)), r
    assert "skipped t-0 offsets 10..19" in r.stderr, r.stderr
    r = cli("consume", "t", "-o", "12", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, b""), r
    assert "skipped t-0 offsets 12..19" in r.stderr, r.stderr
    assert cli("verify", "t", "--repair", "--discard-damaged", "--yes").exit_code == 0
    assert cli("consume", "t").stdout == b"".join(b"%d\n" % i for i in range(10))
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    with klog.open(data_dir) as store:
        assert [(x.offset, x.value) for x in store.consumer("t")] == [(i, b"%d" % i) for i in range(10)] + [
            (20, b"after")]


def test_a_chain_of_batches_inside_a_damaged_middle_batch_is_passed_over(cli, data_dir):
    """Mid-segment: the damaged batch (length field broken) holds two chained batches (15, 16) in
    its last record's value, and a real batch (20..29) follows it: reading resumes at 20."""
    path = _write_with_embedded(cli, data_dir, _forged(15) + _forged(16, b"forged too"))
    assert cli("produce", "t", input=_lines(20, 30)).exit_code == 0
    positions = _positions(path)
    assert len(positions) == 3
    _write(path, positions[1] + 8, b"\x40")
    r = cli("consume", "t", "--skip-damaged")
    assert b"forged" not in r.stdout, r
    assert r.stdout == _lines(0, 10) + _lines(20, 30), r
    assert "skipped t-0 offsets 10..19" in r.stderr, r.stderr
    for start in ("15", "16"):
        r = cli("consume", "t", "-o", start)
        assert b"forged" not in r.stdout, (start, r)
        assert_one_line_error(r, 1, "invalid batch header")
    assert cli("consume", "t", "-o", "22").stdout == _lines(22, 30)


def test_good_batches_between_two_damaged_ones_are_read_not_reported_damaged(cli, data_dir):
    """Batches of 20, no index entry; the length fields of batches 1 and 4 broken. Before, a read
    from 100 (batch 5) walked from the segment's start, resumed past the first damage, failed at
    the second, and --skip-damaged reported the intact 100..139 as damaged; `-o 100` failed."""
    assert cli("topics", "create", "t", "-c", "index.interval.bytes=100000000").exit_code == 0
    for b in range(8):
        assert cli("produce", "t", input=_lines(b * 20, b * 20 + 20)).exit_code == 0
    path = _segment(data_dir)
    positions = _positions(path)
    for k in (1, 4):
        _write(path, positions[k] + 8, b"\x40")
    kept = [i for i in range(160) if not 20 <= i < 40 and not 80 <= i < 100]
    r = cli("consume", "t", "--skip-damaged")
    assert r.stdout == b"".join(b"%d\n" % i for i in kept), r
    skipped = [line.split(":")[1].strip() for line in r.stderr.strip().splitlines()]
    assert skipped == ["skipped t-0 offsets 20..39", "skipped t-0 offsets 80..99"], r.stderr
    r = cli("consume", "t", "-o", "100")
    assert (r.exit_code, r.stdout) == (0, _lines(100, 160)), r
    assert_one_line_error(cli("consume", "t", "-o", "85"), 1, "invalid batch header")


@pytest.mark.slow
def test_a_fetch_from_inside_the_damaged_range_is_corrupt_message_not_the_embedded_batch(cli, data_dir):
    """klog serve: Fetch at 15 (inside the damaged 10..19, whose last record holds batches 15
    and 16) answers CORRUPT_MESSAGE with no records; Fetch at 22 answers from the real batch 20."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic

    from klog.server import Server
    from tests.serve_helpers import RawClient, fetch_fields

    path = _write_with_embedded(cli, data_dir, _forged(15) + _forged(16, b"forged too"))
    assert cli("produce", "t", input=_lines(20, 30)).exit_code == 0
    positions = _positions(path)
    _write(path, positions[1] + 8, b"\x40")
    with open(path, "rb") as f:
        real = f.read()[positions[2]:]
    got = {}
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as client:
        for offset in (15, 22):
            fields = fetch_fields("t", 0, 0)
            fields["topics"] = (FetchTopic(topic="t", partitions=(FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),)
            [part] = client.send(1, 12, **fields).responses[0].partitions
            got[offset] = (int(part.error_code), bytes(part.records or b""))
    assert got[15] == (2, b""), got[15]  # CORRUPT_MESSAGE
    assert got[22] == (0, real), got[22]

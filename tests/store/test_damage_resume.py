"""One damaged batch costs its own offsets, not the rest of its segment (store/resume.py): `klog
consume --skip-damaged` goes on at the first provably valid batch after the damage (its length
field, else an offset-index entry past it, else a bounded scan), `klog verify --repair
--discard-damaged` keeps the batches from there on, and a read at an offset past the damage
starts there. A review found one flipped bit lose a whole segment's good records."""

from __future__ import annotations

import os
import time

import pytest

import klog
from tests.cli.test_cli import assert_one_line_error
from tests.segment_files import batch_positions as _positions
from tests.segment_files import flip_bit as _flip
from tests.segment_files import numbered_lines as _lines
from tests.segment_files import segment_path, segment_paths
from tests.segment_files import write_at as _write


def _written(cli, batches: int, records: int = 100, *config: str) -> str:  # noqa: ANN001 - the cli fixture
    """Topic t: `batches` produces of `records` lines each (one batch each, lines numbered from
    0 across them) in one segment; its `.log` path."""
    args = [a for c in config for a in ("-c", c)]
    assert cli("topics", "create", "t", *args).exit_code == 0
    for b in range(batches):
        lines = b"".join(b"%d\n" % (b * records + i) for i in range(records))
        assert cli("produce", "t", input=lines).exit_code == 0
    return segment_path(os.environ["KLOG_DATA_DIR"])


def _resumed_how(data_dir: str, position: int, first_missing: int) -> tuple[int, str] | None:
    with klog.open(data_dir) as store:
        log = store.partition("t", 0).leader
        found = log.segments[log.bases[0]].resume_after_damage(position, first_missing)
        return None if found is None else (found.header.base_offset, found.how)


def test_one_flipped_bit_costs_its_batch_not_the_segment(cli, data_dir):
    """The review's case: two batches of 100 in one segment, a bit flipped at position 100."""
    path = _written(cli, 2)
    _flip(path, 100)
    r = cli("consume", "t", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, _lines(100, 200)), r
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("klog: skipped t-0 offsets 0..99: damaged (CRC mismatch"), line
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0 and "discarded offsets 0..99 (the damaged batch)" in r.out, r
    assert cli("verify", "t").out.strip() == "t-0 replica 0: ok"
    assert cli("consume", "t").stdout == _lines(100, 200)
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    with klog.open(data_dir) as store:
        got = [(x.offset, x.value) for x in store.consumer("t")]
    assert got == [(i, b"%d" % i) for i in range(100, 200)] + [(200, b"after")]


def test_a_read_inside_the_damaged_range_is_still_an_error_and_one_past_it_is_not(cli, data_dir):
    path = _written(cli, 3)
    _flip(path, _positions(path)[1] + 100)  # the middle batch: offsets 100..199
    assert_one_line_error(cli("consume", "t", "-o", "150"), 1, "CRC mismatch")
    r = cli("consume", "t", "-o", "250")
    assert (r.exit_code, r.stdout) == (0, _lines(250, 300)), r
    r = cli("consume", "t")
    assert r.exit_code == 1 and r.stdout == _lines(0, 100)  # never read past silently


def test_a_damaged_length_field_resumes_at_the_next_index_entry(cli, data_dir):
    path = _written(cli, 4, 100, "index.interval.bytes=1")  # an index entry for every batch but the first
    positions = _positions(path)
    _write(path, positions[1] + 8, b"\x7f\x00\x00\x00")  # batch 2's batchLength: 2 GiB
    assert _resumed_how(data_dir, positions[1], 100) == (200, "index")
    r = cli("consume", "t", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, _lines(0, 100) + _lines(200, 400)), r
    assert "skipped t-0 offsets 100..199" in r.stderr
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0 and "discarded offsets 100..199" in r.out, r
    assert cli("consume", "t").stdout == _lines(0, 100) + _lines(200, 400)


def test_a_damaged_length_field_without_index_entries_is_found_by_the_scan(cli, data_dir):
    path = _written(cli, 4, 100, "index.interval.bytes=100000000")  # no index entry at all
    positions = _positions(path)
    _write(path, positions[1] + 8, b"\x00\x00\x01\x00")  # batch 2 "ends" 256 bytes on: inside its records
    assert os.path.getsize(path.replace(".log", ".index")) == 0
    assert _resumed_how(data_dir, positions[1], 100) == (200, "scan")
    r = cli("consume", "t", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, _lines(0, 100) + _lines(200, 400)), r
    assert "skipped t-0 offsets 100..199" in r.stderr


def test_a_raised_base_offset_is_skipped_never_read_under_offsets_not_its_own(cli, data_dir):
    """The CRC does not cover the base offset: the batch after one whose base offset was raised
    says where reading goes on; the raised batch's records are not handed out as 356.."""
    path = _written(cli, 3)
    _flip(path, _positions(path)[1] + 6)  # batch 2's baseOffset 100 -> 356
    r = cli("consume", "t", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, _lines(0, 100) + _lines(200, 300)), r
    assert "skipped t-0 offsets 100..199" in r.stderr
    assert_one_line_error(cli("consume", "t", "-o", "150"), 1, "offsets 100..355 are missing")
    assert cli("consume", "t", "-o", "250").stdout == _lines(250, 300)


def test_a_lowered_base_offset_is_not_vouched_for_by_the_batch_after_it(cli, data_dir):
    """Batch 3's base offset lowered 200 -> 196: it overlaps batch 2 and the batch after it (300)
    does not start where it would end (296), so no read hands its records out as 196..295."""
    path = _written(cli, 5)
    _write(path, _positions(path)[2], (196).to_bytes(8, "big"))
    assert_one_line_error(cli("consume", "t", "-o", "250"), 1, "offsets 196..199 are in two batches")
    assert cli("consume", "t", "-o", "300").stdout == _lines(300, 500)  # (300 is vouched for by 400)
    r = cli("consume", "t", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, _lines(0, 200) + _lines(300, 500)), r
    assert "skipped t-0 offsets 200..299" in r.stderr


def test_two_damaged_batches_cost_their_own_offsets_only(cli, data_dir):
    path = _written(cli, 6, 20)
    positions = _positions(path)
    _flip(path, positions[1] + 70)
    _flip(path, positions[3] + 70)
    r = cli("consume", "t", "--skip-damaged")
    assert (r.exit_code, r.stdout) == (1, _lines(0, 20) + _lines(40, 60) + _lines(80, 120)), r
    skipped = [line.split(":")[1].strip() for line in r.stderr.strip().splitlines()]
    assert skipped == ["skipped t-0 offsets 20..39", "skipped t-0 offsets 60..79"], r.stderr


def test_damage_at_the_tail_of_a_sealed_segment_goes_on_at_the_next(cli, data_dir):
    """Nothing valid after the damage in its segment: the next segment, as before."""
    assert cli("topics", "create", "t", "-c", "segment.bytes=1500").exit_code == 0
    for b in range(4):
        assert cli("produce", "t", input=_lines(b * 100, b * 100 + 100)).exit_code == 0
    first = segment_paths(data_dir)[0]
    _flip(first, _positions(first)[-1] + 100)
    r = cli("consume", "t", "--skip-damaged")
    assert r.exit_code == 1 and r.stdout.endswith(_lines(300, 400)), r
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("garbage", ["zeros", "twos", "random", "headers"])
def test_a_gibibyte_of_garbage_is_given_up_on_in_bounded_time(garbage):
    """The scan reads at most RESUME_SCAN_BYTES_MAX and checks a bounded number of candidates,
    whatever the segment's size (a 1 GiB segment of garbage, read from a function here)."""
    from klog.store.resume import RESUME_SCAN_BYTES_MAX, resume_after

    size = 1 << 30
    block = {"zeros": bytes(1 << 16), "twos": b"\x02" * (1 << 16), "random": os.urandom(1 << 16),
             # a magic 2 after 16 zero bytes, again and again: every position a candidate
             "headers": (bytes(16) + b"\x02") * (1 << 12)}[garbage]
    reads = []

    def read(position: int, length: int) -> bytes:
        reads.append(length)
        start = position % len(block)
        return (block * (length // len(block) + 2))[start:start + min(length, size - position)]

    started = time.monotonic()
    assert resume_after(read, size, 0, 0, 0, 1000) is None
    assert time.monotonic() - started < 5
    assert sum(reads) <= RESUME_SCAN_BYTES_MAX * 1.01


def test_discarding_two_damaged_batches_takes_two_runs_and_keeps_what_follows_each(cli, data_dir):
    path = _written(cli, 6, 20)
    positions = _positions(path)
    _flip(path, positions[1] + 70)
    _flip(path, positions[3] + 70)
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 1 and "discarded offsets 20..39 (the damaged batch)" in r.out, r
    assert "CRC mismatch" in r.out  # the second damage, now in the rewritten segment: reported
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0 and "discarded offsets 60..79 (the damaged batch)" in r.out, r
    assert cli("verify", "t").out.strip() == "t-0 replica 0: ok"
    assert cli("consume", "t").stdout == _lines(0, 20) + _lines(40, 60) + _lines(80, 120)

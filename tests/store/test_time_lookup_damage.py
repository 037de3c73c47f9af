"""A lookup by time (`klog consume --since`, ListOffsets by timestamp, the Spark source's start)
answers "no record at or after that time" only for a log it has seen whole: a segment cut short
used to give that answer (consume --since printed nothing, exit 0, where consume from the start
failed), and a garbage `.timeindex` entry skipped a sealed segment's records. Either is an error
or the right offset now, never a later start."""

from __future__ import annotations

import os
import struct

import klog
from tests.cli.test_cli import assert_one_line_error
from tests.segment_files import segment_paths


def _written(cli, segment_bytes: int) -> list[str]:  # noqa: ANN001 - the cli fixture
    """Topic t: 6 produces of 15 records each (one batch each); the segment files, oldest first."""
    assert cli("topics", "create", "t", "-c", f"segment.bytes={segment_bytes}").exit_code == 0
    for i in range(6):
        assert cli("produce", "t", input=b"".join(b"v-%d-%d\n" % (i, j) for j in range(15))).exit_code == 0
    return segment_paths(os.environ["KLOG_DATA_DIR"])


def test_a_cut_segment_is_an_error_for_consume_since_not_an_empty_topic(cli, data_dir):
    [segment] = _written(cli, 1_000_000)
    os.truncate(segment, 100)  # inside the first batch: the log holds nothing whole
    assert_one_line_error(cli("consume", "t"), 1, "ends before its high watermark 90")
    r = cli("consume", "t", "--since", "0")
    assert_one_line_error(r, 1, "ends before its high watermark 90")
    assert r.stdout == b""


def test_a_garbage_timeindex_entry_skips_no_sealed_segment(cli, data_dir):
    segments = _written(cli, 400)
    assert len(segments) >= 3, segments
    with open(segments[0][:-4] + ".timeindex", "wb") as f:
        f.write(struct.pack(">qi", 5, 0))  # "the largest timestamp in this segment is 5 ms"
    r = cli("consume", "t", "--since", "100")
    assert r.exit_code == 0, r
    assert r.stdout == cli("consume", "t").stdout and len(r.stdout.splitlines()) == 90
    with klog.open(data_dir) as store:
        assert store.partition("t", 0).offset_for_timestamp(100) == 0


def test_a_timeindex_entry_past_a_segments_batches_still_finds_them(cli, data_dir):
    segments = _written(cli, 1_000_000)
    with open(segments[0][:-4] + ".timeindex", "ab") as f:
        f.write(struct.pack(">qi", 1, 10_000))  # an entry naming an offset the segment does not hold
    with klog.open(data_dir) as store:
        assert store.partition("t", 0).offset_for_timestamp(2) == 0


def test_a_base_offset_raised_past_the_high_watermark_is_an_error_for_consume_since(cli, data_dir):
    [segment] = _written(cli, 1_000_000)
    with open(segment, "r+b") as f:
        f.seek(6)
        f.write(b"\x01")  # the first batch's baseOffset: 0 -> 256, past the high watermark 90
    r = cli("consume", "t", "--since", "0")
    assert_one_line_error(r, 1, "past the high watermark 90")
    assert r.stdout == b""


def test_a_cut_older_segment_is_an_error_for_consume_since_not_a_later_start(cli, data_dir):
    segments = _written(cli, 400)
    assert len(segments) >= 3, segments
    os.truncate(segments[0], 100)  # inside its first batch; the later segments are whole
    r = cli("consume", "t", "--since", "0")
    assert_one_line_error(r, 1, "no batch can be read here", os.path.basename(segments[0]))
    assert r.stdout == b""

"""read_committed's scan (klog.store.txn.StableView: the last stable offset and the aborted
transactions a Fetch answers with) keeps where it stopped in a segment between fetches. A
compaction swapping that segment between the scan's look at the file and its reads put the
rewritten file under a position found in the old one: a shifted header, so an undamaged log
answered read_committed fetches with CorruptLogError. The scan pins the file it walks, as do
the other walks of a segment's headers off the partition's lock (ListOffsets' MAX_TIMESTAMP,
`klog verify`'s walk of every record)."""

from __future__ import annotations

import os

from klog.broker import lifecycle
from klog.broker.offsets import max_timestamp_offset
from klog.store import walk as walk_module
from klog.store.segment import LogSegment
from klog.store.txn import StableView
from tests.broker.test_compaction import clock_at
from tests.store.test_reads_across_swap import NOW, _compacted_log, _deleted_files_open


def test_a_read_committed_scan_resuming_in_a_segment_swapped_under_it_reads_one_file(store, monkeypatch):
    _, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]
    hw = store.partition("c", 0).high_watermark()
    view = StableView(log)
    middle = (base + after) // 2
    assert view.refresh(middle) == middle  # the scan stops in the middle of segment `base`
    assert view._scan_base == base and view._scan_pos > 0

    walk = LogSegment.iter_headers
    swapped = []

    def swap_then_walk(segment: LogSegment, *args, **kwargs):  # noqa: ANN202
        if not swapped and segment is log.segments.get(base):  # the cleaner's swap lands before the walk reads
            swapped.append(None)  # (first: the compaction walks the headers too, for the last stable offset)
            swapped[0] = lifecycle.compact(store, "c", clock=clock_at(NOW))
        return walk(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "iter_headers", swap_then_walk)
    assert view.refresh(hw) == hw
    assert swapped and swapped[0][0].segments_rewritten
    assert not _deleted_files_open(), "the old file is closed with the scan's release"
    monkeypatch.undo()
    assert view.refresh(hw) == hw  # the next fetch notices the rewritten file and walks it from the start
    assert view._scan_base == log.bases[-1]


def test_scans_stopped_in_a_segment_compaction_then_rewrites_walk_the_new_file_from_its_start(store):
    """The swap lands between two fetches (not during a walk): each view resumes where it stopped
    in the old file, a position the rewritten one does not share; it must notice the new file and
    walk it from the start, never read a header at the old position (CorruptLogError)."""
    _, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]
    hw = store.partition("c", 0).high_watermark()
    views = [StableView(log) for _ in range(min(6, after - base - 1))]
    for k, view in enumerate(views, start=1):  # stopped after 1, 2, ... batches of segment `base`
        assert view.refresh(base + k) == base + k
        assert view._scan_base == base and view._scan_pos > 0
    (report,) = lifecycle.compact(store, "c", clock=clock_at(NOW))
    assert report.segments_rewritten and base in log.segments
    assert [view.refresh(hw) for view in views] == [hw] * len(views)
    assert not _deleted_files_open()


def _swap_mid_walk(monkeypatch, store, log, base: int) -> list:  # noqa: ANN001
    """Compact `c` once, after a walk of segment `base`'s headers has read its first 64-byte chunk
    (headers are parsed from small reads here, so the walk reads on after the swap)."""
    monkeypatch.setitem(walk_module.walk_batches.__kwdefaults__, "chunk_bytes", 64)
    walk = LogSegment.iter_headers
    swapped = []

    def walk_swapping(segment: LogSegment, *args, **kwargs):  # noqa: ANN202
        for i, found in enumerate(walk(segment, *args, **kwargs)):
            if i == 1 and not swapped and segment is log.segments.get(base):
                swapped.append(None)  # (first: the compaction walks the headers too, for the last stable offset)
                swapped[0] = lifecycle.compact(store, "c", clock=clock_at(NOW))
            yield found

    monkeypatch.setattr(LogSegment, "iter_headers", walk_swapping)
    return swapped


def test_the_offset_of_the_largest_timestamp_is_found_across_a_swap_of_the_segment_walked(store, monkeypatch):
    """ListOffsets' -3 (MAX_TIMESTAMP) walks a sealed segment's headers off the partition's lock."""
    written, log = _compacted_log(store)
    newest = max(written, key=lambda w: w[3])
    scanned = log.bases[-2]  # the sealed segment whose time index ends highest
    inode = os.stat(log.segments[scanned].log_path).st_ino
    swapped = _swap_mid_walk(monkeypatch, store, log, scanned)
    assert max_timestamp_offset(store.partition("c", 0)) == (newest[3], newest[0])
    assert swapped and os.stat(log.segments[scanned].log_path).st_ino != inode, "the walked segment was swapped"
    assert not _deleted_files_open()


def test_verifys_walk_of_every_record_across_a_swap_reports_no_damage(store, monkeypatch):
    """`klog verify` walks every batch (records whose attributes byte is >= 0x80) off the lock."""
    _, log = _compacted_log(store)
    base = log.bases[2]
    inode = os.stat(log.segments[base].log_path).st_ino
    swapped = _swap_mid_walk(monkeypatch, store, log, base)
    assert log.first_high_attributes_offset() is None
    assert swapped and os.stat(log.segments[base].log_path).st_ino != inode
    assert not _deleted_files_open()


def test_producer_state_rebuilt_from_batch_headers_across_a_swap_reads_one_file(store, monkeypatch):
    """An idempotent producer's first append (and DescribeProducers) rebuild producer state from
    every batch header (klog.broker.batches.batch_headers), holding no partition lock."""
    from klog.broker.batches import batch_headers

    _, log = _compacted_log(store)
    part = store.partition("c", 0)
    expected = [(h.base_offset, h.last_offset) for h in batch_headers(part)]
    base = log.bases[2]
    swapped = _swap_mid_walk(monkeypatch, store, log, base)
    walked = [(h.base_offset, h.last_offset) for h in batch_headers(part)]
    assert swapped and swapped[0][0].segments_rewritten
    # the walk read the old file whole: the batches it found there are the ones before the swap
    # (and those of the segments after it, walked after the swap, the ones left after it)
    nxt = log.bases[3]
    after = [(h.base_offset, h.last_offset) for h in batch_headers(part)]
    assert after != expected
    assert walked == [e for e in expected if e[0] < nxt] + [e for e in after if e[0] >= nxt]
    assert not _deleted_files_open()

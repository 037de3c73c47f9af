"""read_committed's scan (klog.store.txn.StableView: the last stable offset and the aborted
transactions a Fetch answers with) keeps where it stopped in a segment between fetches. A
compaction swapping that segment between the scan's look at the file and its reads put the
rewritten file under a position found in the old one: a shifted header, so an undamaged log
answered read_committed fetches with CorruptLogError. The scan pins the file it walks."""

from __future__ import annotations

from klog.broker import lifecycle
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
            swapped.append(lifecycle.compact(store, "c", clock=clock_at(NOW)))
        return walk(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "iter_headers", swap_then_walk)
    assert view.refresh(hw) == hw
    assert swapped and swapped[0][0].segments_rewritten
    assert not _deleted_files_open(), "the old file is closed with the scan's release"
    monkeypatch.undo()
    assert view.refresh(hw) == hw  # the next fetch notices the rewritten file and walks it from the start
    assert view._scan_base == log.bases[-1]

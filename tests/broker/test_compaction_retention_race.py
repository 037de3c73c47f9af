"""Retention or delete-records removing the oldest segments while a compaction rewrites them off
the lock (klog/store/cleaner.py): the removed segments are skipped, the rest is swapped in at the
first attempt. Before, the rewrite met a vanished file and the whole cleaning was abandoned and
redone, so on a `compact,delete` topic whose producer's rolls keep deleting segments, a cleaning
slower than a roll was abandoned at every attempt and compaction never happened."""

from __future__ import annotations

import pytest

from klog.broker import lifecycle
from klog.broker.verify import verify_store
from tests.broker.test_compaction import expected_after, read, strip_headers
from tests.broker.test_compaction_off_lock import HeldCompaction, compacted_topic


@pytest.mark.parametrize("how", ["delete-records", "retention"])
def test_segments_removed_below_the_log_start_during_a_compaction_are_skipped_not_redone(store, how):
    written, boundary = compacted_topic(store)
    leader = store.partition("c", 0).leader
    cut = leader.bases[3]
    kept_bytes = sum(leader.segments[b].file_size() for b in leader.bases[3:])
    held = HeldCompaction(store, "c")
    try:
        if how == "delete-records":
            lifecycle.delete_records(store, "c", before_offset=cut)
        else:
            store.alter_topic("c", set_configs={"cleanup.policy": "compact,delete", "retention.bytes": str(kept_bytes)})
            lifecycle.retain(store, "c", 0)
    finally:
        result = held.release()
    assert result.compacted and result.cleanings_abandoned == 0 and result.segments_rewritten > 0
    model = [r for r in strip_headers(expected_after(written, boundary)) if r[0] >= cut]
    assert strip_headers(read(store, "c")) == model
    assert all(r["ok"] for r in verify_store(store))

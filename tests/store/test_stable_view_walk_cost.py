"""StableView's first walk (read_committed's first fetch of a partition, and now every compaction
of a freshly opened store, which bounds its cleaning by the last stable offset) goes from segment to
segment. It found the next one by scanning the whole segment list at each segment: O(segments^2),
about half of the first walk of a 5,000-segment partition."""

from __future__ import annotations

import time

import klog
from klog.store import codec
from klog.store.log import PartitionLog
from klog.store.txn import StableView

SEGMENTS = 60


class _CountedBases(list):
    """A segment list that counts the walks over it."""

    walks = 0

    def __iter__(self):  # noqa: ANN204
        type(self).walks += 1
        return super().__iter__()


def test_the_first_walk_does_not_scan_the_segment_list_per_segment(data_dir, monkeypatch):
    with klog.open(data_dir) as store:
        store.create_topic("w", 1, configs={"segment.bytes": "200"})
        part = store.partition("w", 0)
        now = int(time.time() * 1000)
        with part.lock:
            part.open_for_write()
            while len(part.leader.bases) < SEGMENTS:
                part.append_batch(codec.encode_batch([(b"k", b"v" * 100, (), now)]))
            part.publish()
        hw = part.high_watermark()
        listed = PartitionLog.bases
        monkeypatch.setattr(PartitionLog, "bases", property(lambda log: _CountedBases(listed.fget(log))))
        view = StableView(part.leader)
        assert view.refresh(hw) == hw
        assert _CountedBases.walks < SEGMENTS // 4  # (was one per segment)

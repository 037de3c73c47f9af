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


def test_the_first_walk_opens_only_the_txnindex_files_there_are(data_dir, monkeypatch):
    """It opened each segment's `.txnindex`, which most have none of: a failed open per segment
    (5,000 for a 5,000-segment partition), now one listing of the folder. A sealed segment's index
    and the active segment's are still read."""
    import klog.store.txn as txn

    with klog.open(data_dir) as store:
        store.create_topic("x", 1, configs={"segment.bytes": "200"})
        with store.producer(transactional_id="x-t") as producer:
            producer.begin()
            producer.send("x", b"aborted", partition=0)
            producer.flush()
            producer.abort()
        part = store.partition("x", 0)
        [indexed] = [b for b in part.leader.bases if txn.read_txn_index(part.leader.directory, b)]
        now = int(time.time() * 1000)
        with part.lock:
            part.open_for_write()
            while len(part.leader.bases) < SEGMENTS:
                part.append_batch(codec.encode_batch([(b"k", b"v" * 100, (), now)]))
            part.publish()
        opened = []
        read_index = txn.read_txn_index
        monkeypatch.setattr(txn, "read_txn_index", lambda folder, base: opened.append(base) or read_index(folder, base))
        view = StableView(part.leader)
        view.refresh(part.high_watermark())
        assert [a.producer_id for a in view.aborted_txns] == [producer.producer_id]
        assert opened == [indexed, part.leader.bases[-1]]  # (was one per segment)

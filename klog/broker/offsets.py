"""Offsets a broker answers about a partition beyond its log start and high watermark: the offset
of the record with the largest timestamp (ListOffsets' -3), and the last stable offset, the end of
what a read_committed consumer may read (one StableView per partition object, its per-segment scans
cached, each behind a lock since requests are answered from several threads)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from klog.store.partition import Partition

_stable_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_stable_lock = threading.Lock()


def max_timestamp_offset(part: Partition) -> tuple[int, int]:
    """(timestamp, offset) of the record with the largest timestamp below the high watermark: the
    headers of the active segment and of the sealed segment whose time index ends highest (a
    sealed segment's last time-index entry is its largest timestamp, as in Kafka)."""
    hw = part.high_watermark()
    leader = part.leader
    leader.refresh_segments()
    if not leader.bases:
        return -1, -1
    sealed = []
    for base in leader.bases[:-1]:
        segment = leader.segments[base]
        segment.time_index.refresh()
        last = segment.time_index.last_entry()
        if last is not None:
            sealed.append((last[0], base))
    scan = [max(sealed)[1]] if sealed else []
    scan.append(leader.bases[-1])
    best = None
    for base in scan:
        for _, header in leader.segments[base].pinned_headers():  # (off the lock: a swap may come)
            if header.base_offset >= hw:
                break
            if best is None or header.max_timestamp > best.max_timestamp:
                best = header
    if best is None:
        return -1, -1
    for batch in part.read(best.base_offset, max_bytes=1, upper=best.next_offset):
        for offset, timestamp, *_ in batch.records():
            if timestamp == best.max_timestamp:
                return timestamp, offset
    return best.max_timestamp, best.last_offset


def timestamp_at(part: Partition, offset: int) -> int:
    """The timestamp of the record at `offset` (LogAppendTime applied): of the first record at or
    after it where compaction removed it, -1 where the log holds none."""
    for batch in part.read(offset, max_bytes=1):
        for found, timestamp, *_ in batch.records():
            if found >= offset:
                return timestamp
    return -1


def stable_view(part: Any) -> tuple[Any, threading.Lock]:
    """The partition's StableView (klog.store.txn) and the lock to hold while using it."""
    from klog.store.txn import StableView

    with _stable_lock:
        found = _stable_views.get(part)
        if found is None or found[0].replica is not part.leader:
            found = (StableView(part.leader), threading.Lock())
            _stable_views[part] = found
        return found


def last_stable_offset(part: Any) -> int:
    """The end of what a read_committed consumer may read: the first offset of a transaction still
    open below the high watermark, or the high watermark; never below the log start (Kafka's
    max(first unstable offset, log start): records deleted past an open transaction's start)."""
    stable, lock = stable_view(part)
    with lock:
        lso = stable.refresh(part.high_watermark())
    return max(lso, part.log_start_offset())

"""The background flush of sealed segments (Kafka's roll: UnifiedLog.roll schedules "flush-log",
which fsyncs the old segment while the producer goes on; the recovery point moves past that
segment only once the fsync is done).

One thread per process, so a log's sealed segments are fsynced in the order they were sealed:
the completion of one implies every earlier one of the same log is done. fsync releases the GIL,
so the thread overlaps the appends that follow the roll. PartitionLog.roll submits, and decides
when to wait (flush, truncation, retention, compaction, close, too many pending).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from klog.store import faults
from klog.store.names import fsync_dir
from klog.store.segment import SegmentFds

if TYPE_CHECKING:  # the pool is made on the first roll: concurrent.futures imports logging
    from concurrent import futures

_pool: futures.ThreadPoolExecutor | None = None


def _executor() -> futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        from concurrent import futures

        _pool = futures.ThreadPoolExecutor(1, thread_name_prefix="klog-flusher")
    return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None  # a forked child has none of its parent's threads: an inherited pool would never run


os.register_at_fork(after_in_child=_forget_pool)


def _sync_sealed(fds: SegmentFds, directory: str) -> None:
    """fsync a sealed segment's log and indexes, then its folder (its entry, and the entries of
    the segment the roll created), and close the descriptors the writer handed over."""
    try:
        faults.point("sealed-fsync")
        fds.fsync()
        fsync_dir(directory)
    finally:
        fds.close()


def submit_sealed(fds: SegmentFds, directory: str) -> futures.Future:
    """Flush a sealed segment in the background; `fds` now belong to the flusher."""
    return _executor().submit(_sync_sealed, fds, directory)


def sync_segment_files(segments: list[tuple[str, ...]], directory: str | None = None) -> None:
    """fsync each segment's files (log and indexes) by path, oldest first, then the folder if
    given. Opened read-only, never created: a log deleted meanwhile (retention) raises; a missing
    index (a foreign log's) is skipped, recovery rebuilds it."""
    for log_path, *index_paths in segments:
        faults.point("sealed-fsync")
        for path in [log_path, *(p for p in index_paths if os.path.exists(p))]:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    if directory is not None:
        fsync_dir(directory)


def submit_catch_up(segments: list[tuple[str, ...]], directory: str) -> futures.Future:
    """fsync, in the background, sealed segments a new writer found past the recovery point (a
    previous writer's flushes dropped or killed): one job, holding no descriptor while queued."""
    return _executor().submit(sync_segment_files, segments, directory)

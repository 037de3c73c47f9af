"""A PartitionLog's flush pipeline: when its appends are due for an fsync (flush.messages,
flush.ms), and which sealed segments the background flusher (flusher.py) is fsyncing, so the
recovery point passes a sealed segment only once it is on disk (Kafka's roll and
flushUptoOffsetExclusive). The log owns the recovery point and its files; this module only keeps
the bookkeeping, and never touches a descriptor the log still writes to.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from klog.store import flusher
from klog.store.config import LogConfig
from klog.store.plain import Plain
from klog.store.segment import SegmentFds

if TYPE_CHECKING:  # a reader never needs the flusher's futures (concurrent.futures imports logging)
    from concurrent.futures import Future

# Sealed segments whose background fsync may be under way at once, per log (each holds its three
# descriptors until done); a roll past this waits for the oldest. 0: every roll waits for its
# own flush, as before the flush moved to the background (benchmarks compare the two).
ROLL_FLUSHES_PENDING_MAX = 4
# A flush.ms at or under this is kept by a timer (partition.py's idle flush), beyond it never
FLUSH_MS_TIMED_MAX = 7 * 24 * 3600 * 1000


class PendingFlush(Plain):
    """A sealed segment (or, after an untrusted open, a run of them) being fsynced by the flusher:
    once done, a recovery point that had reached the first one (`start`) may pass them (`end`)."""

    _fields = ("start", "end", "future")

    def __init__(self, start: int, end: int, future: Future) -> None:
        self.start = start  # the (first) sealed segment's base offset
        self.end = end  # the end offset: the base of the segment after (the last) one
        self.future = future


class SealedFlushes:
    """One log's background fsyncs of sealed segments, oldest first (the flusher's one thread
    finishes them in that order)."""

    def __init__(self) -> None:
        self.pending: list[PendingFlush] = []

    def submit_sealed(self, fds: SegmentFds, directory: str, start: int, end: int) -> None:
        """A roll sealed the segment [start, end): `fds` now belong to the flusher."""
        self.pending.append(PendingFlush(start, end, flusher.submit_sealed(fds, directory)))

    def submit_catch_up(self, files: list[tuple[str, ...]], directory: str, start: int, end: int) -> None:
        """Sealed segments [start, end) a new writer found past the recovery point, fsynced by path."""
        self.pending.append(PendingFlush(start, end, flusher.submit_catch_up(files, directory)))

    def over_limit(self) -> int:
        """How many of the oldest to wait for before another roll (ROLL_FLUSHES_PENDING_MAX)."""
        return max(0, len(self.pending) - ROLL_FLUSHES_PENDING_MAX)

    def below(self, upto: int | None) -> int:
        """How many pending flushes hold offsets below `upto` (all of them when None)."""
        return len(self.pending) if upto is None else sum(1 for p in self.pending if p.start < upto)

    def collect(self, recovery_point: int, wait: int = 0) -> int:
        """The recovery point moved past the sealed segments fsynced so far, oldest first, waiting
        for the first `wait` of them; only from a recovery point inside or at the start of the
        segment (one below it: a segment before, sealed by a writer killed with its flush pending,
        is not known to be on disk). A failed fsync stops the recovery point before that segment
        for good (every pending flush is dropped)."""
        pending = self.pending
        while pending and (wait > 0 or pending[0].future.done()):
            item = pending.pop(0)
            wait -= 1
            if item.future.exception() is not None:
                self.drop()
                return recovery_point
            if recovery_point >= item.start:
                recovery_point = max(recovery_point, item.end)
        return recovery_point

    def drop(self) -> None:
        """Wait for every pending flush and forget them, the recovery point unmoved (a truncation
        or a failed fsync: their ends may no longer be, or not yet be, durable offsets)."""
        for item in self.pending:
            item.future.exception()  # waits; the outcome no longer matters
        self.pending.clear()


class FlushSchedule:
    """When a log's appended batches are due for an fsync: flush.messages of them, or flush.ms
    since the last fsync (monotonic clock)."""

    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self.unflushed_batches = 0
        self.last_flush_ms = time.monotonic() * 1000

    def appended(self) -> None:
        self.unflushed_batches += 1

    def synced(self) -> None:
        self.unflushed_batches = 0
        self.last_flush_ms = time.monotonic() * 1000

    def due(self, by_count: bool = True) -> bool:
        """flush.messages reached (if `by_count`), or flush.ms passed."""
        return ((by_count and self.unflushed_batches >= self.config.flush_messages)
                or time.monotonic() * 1000 - self.last_flush_ms >= self.config.flush_ms)

    def due_in_ms(self) -> float | None:
        """None when nothing waits for an fsync; else how long until flush.ms makes it due (0 or
        less: due now)."""
        if self.unflushed_batches == 0:
            return None
        return self.config.flush_ms - (time.monotonic() * 1000 - self.last_flush_ms)

    def timed_wait(self) -> bool:
        """Unsynced batches a flush.ms timer will fsync: closing the files would skip it."""
        return bool(self.unflushed_batches) and self.config.flush_ms <= FLUSH_MS_TIMED_MAX

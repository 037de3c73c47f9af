"""PartitionReader: one read cursor over a partition (Kafka's fetch path).

Every reader of the store (the consumer, the group consumer, Spark's executors, the cleaner's
offset map, replica catch-up) reads the same way: batches from its position, below the high
watermark (or the last stable offset, or its own stop), whole and without gaps, then moves past
them. The whole-or-fail rules (CRC, continuity, a log that ends below the high watermark, an I/O
error) live in Partition.read / PartitionLog.read; this class is the loop around them, and the
one place that decides which records of a fetch are in range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from klog.errors import CorruptLogError
from klog.store import codec
from klog.store.limits import PARTITION_READ_BYTES_DEFAULT
from klog.store.log import FetchedBatch, PartitionLog
from klog.store.partition import Partition
from klog.store.plain import Plain
from klog.store.txn import StableView

C = TypeVar("C")  # a cursor of reads_in_turn


class Fetched(Plain):
    """One fetch: the batches read, and the offsets [low, stop) the reader wanted of them."""

    _fields = ("batches", "low", "stop", "skip")

    def __init__(self, batches: list[FetchedBatch], low: int, stop: int | None,
                 skip: Callable[[FetchedBatch], bool]) -> None:
        self.batches = batches  # never empty; control and aborted batches included (see kept)
        self.low = low
        self.stop = stop
        self.skip = skip

    @property
    def next_offset(self) -> int:
        return self.batches[-1].header.next_offset

    @property
    def nbytes(self) -> int:
        """The bytes of the batches read (headers included)."""
        return sum(len(fb.data) for fb in self.batches)

    def kept(self) -> list[FetchedBatch]:
        """The batches that hold records for the application (no control, no aborted batches)."""
        skip = self.skip
        return [fb for fb in self.batches if not skip(fb)]

    def _whole(self, fb: FetchedBatch) -> bool:
        """Is every record of `fb` in range? (Only the first and last batch of a fetch may not be;
        a legacy magic 0/1 wrapper's inner offsets are checked one by one.)"""
        h = fb.header
        return h.magic >= 2 and h.base_offset >= self.low and (self.stop is None or h.last_offset < self.stop)

    def _in_range(self, offset: int) -> bool:
        return offset >= self.low and (self.stop is None or offset < self.stop)

    def record_runs(self) -> Iterator[tuple[int, list[codec.RecordOut]]]:
        """(timestamp type, records in range) for each kept batch."""
        for fb in self.kept():
            records = fb.records()
            if not self._whole(fb):
                records = [r for r in records if self._in_range(r[0])]
            yield fb.header.timestamp_type, records

    def batch_runs(self, control: bool = False) -> Iterator[tuple[codec.BatchHeader, list[codec.RecordOut]]]:
        """(batch header, records in range) for each kept batch; with `control`, the transaction
        markers' batches too (`klog consume --json --txn-fields`)."""
        skip = self.skip
        for fb in self.batches:
            if skip(fb) and not (control and fb.header.is_control):
                continue
            records = fb.records()
            if not self._whole(fb):
                records = [r for r in records if self._in_range(r[0])]
            yield fb.header, records

    def values(self, null: bytes | None = None) -> list[bytes | None]:
        """Only the values in range (`null` for a null one): no per-record tuples for whole batches."""
        out: list[bytes | None] = []
        for fb in self.kept():
            if self._whole(fb):
                out.extend(fb.values(null))
            else:
                out.extend(null if v is None else v for off, _, _, v, _ in fb.records() if self._in_range(off))
        return out

    def timestamps_values(self, null: bytes | None = None) -> tuple[list[int], list[bytes | None]]:
        """values(), with each value's timestamp in a second list (merging partitions by time)."""
        timestamps: list[int] = []
        values: list[bytes | None] = []
        for fb in self.kept():
            if self._whole(fb):
                ts, vs = fb.timestamps_values(null)
            else:
                records = [r for r in fb.records() if self._in_range(r[0])]
                ts = [r[1] for r in records]
                vs = [null if r[3] is None else r[3] for r in records]
            timestamps += ts
            values += vs
        return timestamps, values


def _start_moved_to(position: int, log_start: int) -> int:
    return log_start


class PartitionReader:
    """A position in one partition, read forward.

    `stop` (exclusive) bounds the read; None reads up to the high watermark as it grows (a
    follower). `stable` (read_committed) bounds it by the last stable offset and leaves aborted
    batches out. When retention or delete-records moves the log start past the position,
    `on_start_moved(position, log_start)` says where to go on (default: the log start; Spark's
    failOnDataLoss raises instead): records below the log start are never handed out, even while
    their segment still exists.
    """

    def __init__(self, part: Partition | PartitionLog, offset: int, stop: int | None = None, *,
                 stable: StableView | None = None, max_bytes: int = PARTITION_READ_BYTES_DEFAULT,
                 on_start_moved: Callable[[int, int], int] = _start_moved_to) -> None:
        self.part = part
        self.offset = offset
        self.stop = stop
        self.stable = stable
        self.max_bytes = max_bytes
        self.on_start_moved = on_start_moved
        self._handed_end: int | None = None  # the offset after the last batch handed out
        if isinstance(part, PartitionLog):  # one replica (the cleaner, catch-up): the caller bounds it
            assert stop is not None and stable is None, "a replica has no high watermark of its own"
            self._read: Callable[[int, int | None], list[FetchedBatch]] = \
                lambda offset, _upper: part.read(offset, stop, max_bytes)
            self._log_start: Callable[[], int] | None = None
        else:
            self._read = lambda offset, upper: part.read(offset, self.max_bytes, upper)  # a cursor may grow it
            self._log_start = part.log_start_offset

    def end(self) -> int:
        """Where reading stops for now: the high watermark, or the last stable offset (read_committed)."""
        if isinstance(self.part, PartitionLog):
            return self.stop  # type: ignore[return-value]
        hw = self.part.high_watermark()
        return hw if self.stable is None else self.stable.refresh(hw)

    def skip(self, fb: FetchedBatch) -> bool:
        """A batch no application sees: a transaction marker, or (read_committed) an aborted batch."""
        return fb.header.is_control or (self.stable is not None and self.stable.aborted(fb.header))

    def fetch(self) -> Fetched | None:
        """The next batches from the position (None when there is nothing more for now), and the
        position moved past them (never past `stop`)."""
        if self.stop is not None and self.offset >= self.stop:
            return None
        upper = self.stop if self.stable is None or self.stop is not None else self.end()
        while True:
            if self._log_start is not None:
                low = self._log_start()
                if self.offset < low:
                    self.offset = max(self.offset, self.on_start_moved(self.offset, low))
            batches = self._read(self.offset, upper)
            if batches:
                break
            # nothing: caught up, or the log start moved past us between the two reads (go again)
            if self._log_start is None or self.offset >= self._log_start():
                return None
        fetched = Fetched(self._following(batches), self.offset, self.stop, self.skip)
        self._handed_end = fetched.next_offset
        self.offset = max(self.offset, fetched.next_offset)
        if self.stop is not None:
            self.offset = min(self.offset, self.stop)
        return fetched

    def _following(self, batches: list[FetchedBatch]) -> list[FetchedBatch]:
        """`batches` up to the first that overlaps the one before it (or, at the start, the last
        batch handed out): two batches claiming one offset mean a damaged base offset, whichever
        store answered (a broker's fetch may start a batch early only at the position asked for,
        not after a batch the reader already has). The overlapping batch is the next read's first,
        and that read's error."""
        end = self._handed_end if self.offset == self._handed_end else None
        for i, fb in enumerate(batches):
            h = fb.header
            if end is not None and h.magic >= 2 and h.base_offset < end:
                if i:
                    return batches[:i]
                raise CorruptLogError(f"offsets {h.base_offset}..{min(end, h.next_offset) - 1} are in two batches",
                                      fb.path, fb.position, h.base_offset)
            end = h.next_offset if h.magic >= 2 else None
        return batches

    def __iter__(self) -> Iterator[Fetched]:
        """Fetch until there is nothing more (up to `stop`, or the end as it is now)."""
        while (fetched := self.fetch()) is not None:
            yield fetched


def reads_in_turn(cursors: Sequence[C], fetch: Callable[[C], Fetched | None], start: int,
                  budget: int) -> tuple[list[tuple[C, Fetched]], int]:
    """One poll of several partitions: `fetch` of each cursor in turn from index `start`, until
    `budget` bytes were read or every cursor was asked once (whole batches: the last read may pass
    the budget). Returns the reads and the index the next poll starts at, so that every partition
    gets its turn however much the first ones hold, and a poll of 1,000 partitions holds a budget
    of reads, not 1,000 of them."""
    n = len(cursors)
    start = start % n if n else 0
    out: list[tuple[C, Fetched]] = []
    read = 0
    for k in range(n):
        cursor = cursors[(start + k) % n]
        fetched = fetch(cursor)
        if fetched is None:
            continue
        out.append((cursor, fetched))
        read += fetched.nbytes
        if read >= budget:
            return out, (start + k + 1) % n
    return out, start

"""Where a topic's partitions' bytes are, for many partitions in one loop (a served Fetch).

A consumer's Fetch names hundreds of partitions, most with a batch or two to send. Each one's
answer is its state (high watermark, log start), then the byte range from its fetch offset:
Partition.byte_range's rules. Asked partition by partition, that is ~10 calls deep per
partition (Partition, its replica, the segment); read_ranges takes the usual case of each
partition inline, in one loop over the topic:

- the state file read once (one pread: the answer's offsets and the read's bound agree);
- the leader's segment holding the offset (one bisect), and the range in it from the batch
  holding the offset (LogSegment.pinned_range: the file pinned, so the one the range is found in
  is the one sent whatever a compaction swaps meanwhile; every batch boundary in the range
  checked by a header walk, the first batch against the one before it).

Whatever is not that usual case goes to Partition.byte_range, which decides it with its full rules:
a state file missing or damaged (lost state), a leader epoch that moved (the replicas reloaded),
an offset below the leader's first segment or past the segment found, any error reading the
leader (an in-sync follower may have the range intact), a range that starts above the offset (a
compacted log's gap, the log start moved). So there is one set of read rules, and a Fetch of one
partition is this loop over one partition.

`nowait`: the same loop for a caller that must not wait for the disk (a server's event loop).
Every read is a preadv with RWF_NOWAIT (page cache only), through descriptors already open, and
only the usual case is taken: a range of at most `read_max` bytes, read, in a segment whose read
needs no index lookup (the consumer's next fetch, where the last range ended, or a segment's
start). Anything else (a page not cached, a file or index to open, a state not known, a range to
sendfile, a compacted log, any error) raises WouldBlock, and the caller asks again without
`nowait` from a thread, where the rules above decide it.
"""

from __future__ import annotations

import bisect
import errno
import os
from collections.abc import Callable, Sequence
from typing import Any

from klog.errors import KlogError, StorageError
from klog.store.log import ByteRange
from klog.store.partition import Partition
from klog.store.segment import LogSegment, OpenLog
from klog.store.state import PartitionSnapshot

# where a RangeRead failed: reading the state, bounding the read (read_committed), reading the range
AT_STATE, AT_BOUND, AT_RANGE = 1, 2, 3
# Linux >= 4.14 (else nothing reads `nowait`); False too once a filesystem refused the flag
NOWAIT = hasattr(os, "preadv") and hasattr(os, "RWF_NOWAIT")


class WouldBlock(Exception):
    """A `nowait` read_ranges met something it does not do without waiting: ask from a thread."""


def _refused(e: OSError) -> WouldBlock:
    """WouldBlock for a failed RWF_NOWAIT read; a filesystem that does not take the flag (EOPNOTSUPP)
    turns NOWAIT off, so callers stop asking (every read there would fail the same way)."""
    global NOWAIT
    if e.errno == errno.EOPNOTSUPP:
        NOWAIT = False
    return WouldBlock()


class _NoWaitLog:
    """A pinned OpenLog read with RWF_NOWAIT: what LogSegment.byte_range reads through (its
    `opened`), raising WouldBlock for a page not in the cache (the kernel reads none of it) and
    for a short read below `end` (part of the range cached: a short read is not the file's end)."""

    __slots__ = ("fd", "end")

    def __init__(self, opened: OpenLog, end: int) -> None:
        self.fd = opened.fd
        self.end = end

    def read(self, position: int, length: int) -> bytes:
        if length <= 0:
            return b""
        buf = bytearray(length)
        try:
            n = os.preadv(self.fd, (buf,), position, os.RWF_NOWAIT)
        except OSError as e:  # EAGAIN (not cached), EOPNOTSUPP (a filesystem without it), anything
            raise _refused(e) from e
        if n < length and position + n < self.end:
            raise WouldBlock
        return bytes(buf) if n == length else bytes(memoryview(buf)[:n])


def _state_nowait(state: Any) -> tuple:
    """PartitionState.read_fields through its open descriptor with RWF_NOWAIT; WouldBlock where
    that is not the usual case (not open in this process, not cached, missing or damaged, closed
    under the read)."""
    try:
        fields = state.read_fields_nowait()
    except OSError as e:
        raise _refused(e) from e
    if fields is None:
        raise WouldBlock
    return fields


def _small_range_nowait(segment: LogSegment, offset: int, upper: int, max_bytes: int, read_max: int) -> bytes:
    """The bytes of LogSegment.pinned_range(offset, upper, max_bytes, read_max=read_max) when they
    are at most `read_max` and cached, read without waiting: see the module's `nowait`. The walk
    stops past `read_max` (a range longer than that is the thread's, sent by sendfile): the range
    it finds within that bound is the one the whole walk finds."""
    if segment._read is None:  # (pin would open the file)
        raise WouldBlock
    try:
        opened, end = segment.pin()
    except OSError as e:
        raise WouldBlock from e
    view = _NoWaitLog(opened, end)
    try:
        # where the last range ended, in this file: what the walk starts from without the index
        # (LogSegment._first_walked); the view stands for `opened` in it for this read
        known = segment._read_end
        if known is not None and known[0] == offset and known[2] is opened and 0 < known[1] < end:
            segment._read_end = (known[0], known[1], view)  # type: ignore[assignment]
        elif offset > segment.base_offset:
            raise WouldBlock  # (the index is looked up: maybe an open, a read of it)
        found = segment.byte_range(view, offset, upper, read_max + 1 if read_max < max_bytes else max_bytes,  # type: ignore[arg-type]
                                   end, None, read_max)
    except (KlogError, OSError) as e:
        raise WouldBlock from e
    finally:
        known = segment._read_end
        if known is not None and known[2] is view:
            segment._read_end = (known[0], known[1], opened)
        opened.release()
    if found is None:
        raise WouldBlock
    _, length, header, data = found
    if data is None or header.base_offset > offset or len(data) != length:
        raise WouldBlock
    return data


class RangeRead:
    """One partition's part of a read_ranges call: what is asked, then what was found. (A served
    Fetch's answer extends it: klog.server.fetch.PartitionAnswer.) What is not found keeps the
    class's value: an answer is made per partition and request, so only what differs is set."""

    high_watermark = -1  # (set once the state is read)
    log_start_offset = -1
    upper = -1  # the read's bound: the high watermark, or what `bound` made of it
    range: ByteRange | None = None  # where the bytes are (pinned until closed)
    data: bytes | None = None  # ... or the bytes, read (a small range: see read_ranges' read_max)
    out_of_range = False  # the offset is below the log start or past the high watermark
    failure: BaseException | None = None  # a KlogError or OSError, raised where failed_at says
    failed_at = 0

    def __init__(self, part: Partition | None = None, offset: int = 0, max_bytes: int = 0) -> None:
        self.part = part
        self.offset = offset
        self.max_bytes = max_bytes  # the partition's own bound; the call's budget may lower it


def _known_empty(part: Partition, looked: tuple[str, tuple[int, int] | None] | None
                 ) -> tuple[bool, tuple[str, tuple[int, int] | None] | None]:
    """(Partition.known_empty, the state folder's key): the folder is looked at once per read_ranges
    call, and only for a partition last seen empty."""
    if part._empty_at is None:
        return False, looked
    if looked is None:
        looked = (part._state_dir, part._state_dir_key())
    return part.known_empty(looked), looked


def read_ranges(reads: Sequence[RangeRead], budget: int, read_max: int = 0, read_total: int = 0,
                bound: Callable[[Partition, int], int] | None = None, nowait: bool = False) -> tuple[int, int]:
    """Fill in each of `reads` in order: the partition's state, then (its offset within
    [log start, high watermark], and below `bound(part, high watermark)` when given: a
    read_committed fetch's last stable offset) where its bytes from the offset are, as
    Partition.byte_range finds them. `budget`: the bytes all the ranges may take (each range at
    least its first batch while any budget is left, as Kafka's fetch does); a range of at most
    `read_max` bytes comes read (RangeRead.data), while the bytes read stay within `read_total`.
    Failures are the partition's own (RangeRead.failure), never the call's. Returns what is left
    of `budget` and of `read_total`. `nowait`: see the module's docstring (raises WouldBlock, as
    `bound` may; no failure recorded, no range left pinned)."""
    bisect_right = bisect.bisect_right
    looked = None  # the state folder's key, looked at once per call (Partition.known_empty)
    for r in reads:
        part = r.part
        offset = r.offset
        empty, looked = _known_empty(part, looked)
        if nowait:
            if empty:
                hw = start = epoch = 0
            else:
                hw, start, epoch = _state_nowait(part.state)
            r.high_watermark = r.upper = hw
            r.log_start_offset = start
            if offset < start or offset > hw:
                r.out_of_range = True
                continue
            # (a new leader epoch: the replicas reload, and a truncation may have come with it)
            moved = epoch != part.leader_epoch_loaded and part.reload_replicas is not None
            upper = hw
            if bound is not None:  # (it raises WouldBlock itself for what it cannot say without waiting)
                if moved:
                    raise WouldBlock
                try:
                    r.upper = upper = max(bound(part, hw), start)  # (as Kafka's LSO: never below the log start)
                except (KlogError, OSError) as e:
                    raise WouldBlock from e
            if offset < upper and budget > 0:
                leader = part.replicas[0]
                if moved or leader.cleaner_gaps:  # (a compacted log's gaps are checked against the cleaner's records)
                    raise WouldBlock
                bases = leader.bases
                i = bisect_right(bases, offset) - 1
                segment = leader.segments.get(bases[i]) if i >= 0 else None
                small = read_max if read_max <= read_total else read_total
                if segment is None or small <= 0:
                    raise WouldBlock
                data = _small_range_nowait(segment, offset, upper, r.max_bytes if r.max_bytes < budget else budget,
                                           small)
                r.data = data
                budget -= len(data)
                read_total -= len(data)
            continue
        try:
            if empty:  # (no state file read, no listing)
                fields, snap = None, PartitionSnapshot(0, 0, 0)
                hw = start = epoch = 0
            # (a reader's state: the file; read_valid's cache is the writer's)
            elif (fields := part.state.read_fields()) is not None:
                hw, start, epoch = fields
                snap = None
            else:  # missing or damaged: reader_snapshot says whether that is a lost state or a new partition
                snap = part.reader_snapshot()
                hw, start, epoch = snap.high_watermark, snap.log_start_offset, snap.leader_epoch
        except (KlogError, OSError) as e:
            r.failure, r.failed_at = e, AT_STATE
            continue
        r.high_watermark = r.upper = upper = hw
        r.log_start_offset = start
        if offset < start or offset > hw:
            r.out_of_range = True
            continue
        if bound is not None:
            try:
                r.upper = upper = max(bound(part, hw), start)  # (as Kafka's LSO: never below the log start)
            except (KlogError, OSError) as e:
                r.failure, r.failed_at = e, AT_BOUND
                continue
        if offset >= upper or budget <= 0:
            continue
        max_bytes = r.max_bytes if r.max_bytes < budget else budget
        small = (read_max if read_max <= read_total else read_total) if read_max > 0 else 0
        # the usual case, inline: the range in the leader's segment holding `offset`, from the batch
        # holding it (LogSegment.pinned_range: the pin, the header walk and its continuity checks);
        # found stays None for anything else, which Partition.byte_range decides
        found = None
        if epoch == part.leader_epoch_loaded or part.reload_replicas is None:  # (else: the replicas reload)
            leader = part.replicas[0]
            bases = leader.bases
            i = bisect_right(bases, offset) - 1
            # (below the first segment known: the list may be stale, or the log start moved; none:
            # another thread's listing dropped it meanwhile)
            segment = leader.segments.get(bases[i]) if i >= 0 else None
            if segment is not None:
                try:
                    got = segment.pinned_range(offset, upper, max_bytes,
                                               leader._gap_ok(segment), small)
                except (KlogError, OSError):  # damage, an I/O error: an in-sync follower may have it intact
                    got = None
                if got is not None:
                    opened, position, length, header, data = got
                    if header.base_offset > offset:  # a gap before it: not the usual case
                        if opened is not None:
                            opened.release()
                    elif data is None:  # (the range holds the pin until it is sent)
                        found = ByteRange(opened, position, length, header, segment.log_path)
                    elif len(data) == length:  # (shorter: the file shrank under the read; asked again)
                        found = data
        try:
            if found is None:  # anything but the usual case: the partition's own rules decide
                if snap is None:
                    snap = PartitionSnapshot(hw, start, epoch)
                found = part.byte_range(offset, max_bytes, upper, snap, small)
                if found is None:
                    continue
                if found.data is not None:
                    if len(found.data) != found.length:  # the file shrank under the read (retention)
                        raise StorageError(f"read {len(found.data)} of {found.length} bytes at {found.position} "
                                           f"of {found.path}")
                    found = found.data
        except (KlogError, OSError) as e:
            r.failure, r.failed_at = e, AT_RANGE
            continue
        if found.__class__ is bytes:
            r.data = found
            budget -= len(found)
            read_total -= len(found)
        else:
            r.range = found
            budget -= found.length
    return budget, read_total

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
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from klog.errors import KlogError, StorageError
from klog.store.log import ByteRange
from klog.store.partition import Partition
from klog.store.state import PartitionSnapshot

# where a RangeRead failed: reading the state, bounding the read (read_committed), reading the range
AT_STATE, AT_BOUND, AT_RANGE = 1, 2, 3


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


def read_ranges(reads: Sequence[RangeRead], budget: int, read_max: int = 0, read_total: int = 0,
                bound: Callable[[Partition, int], int] | None = None) -> tuple[int, int]:
    """Fill in each of `reads` in order: the partition's state, then (its offset within
    [log start, high watermark], and below `bound(part, high watermark)` when given: a
    read_committed fetch's last stable offset) where its bytes from the offset are, as
    Partition.byte_range finds them. `budget`: the bytes all the ranges may take (each range at
    least its first batch while any budget is left, as Kafka's fetch does); a range of at most
    `read_max` bytes comes read (RangeRead.data), while the bytes read stay within `read_total`.
    Failures are the partition's own (RangeRead.failure), never the call's. Returns what is left
    of `budget` and of `read_total`."""
    bisect_right = bisect.bisect_right
    for r in reads:
        part = r.part
        offset = r.offset
        try:
            fields = part.state.read_fields()  # (a reader's state: the file; read_valid's cache is the writer's)
            if fields is not None:
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
                r.upper = upper = bound(part, hw)
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
                                               leader._gap_ok(segment) if leader.compacted else None, small)
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

"""Opening a replica folder for writing, as named passes (Kafka's LogLoader):

1. `finish_interrupted_swaps`: a compaction or retention killed mid-way is rolled back or
   finished, leftover `.cleaned` files are removed and `.deleted` ones once their
   file.delete.delay.ms is over;
2. `recover_tail`: Kafka's unclean-shutdown pass, each segment from the recovery point on is
   validated and cut at the first bad batch (a torn tail), except a bad batch holding
   acknowledged offsets that a provably valid batch follows (LogSegment.recover: it stays, as
   damage readers report and step over with --skip-damaged);
3. `delete_from`: segments past a cut (or overlapping the one before) are removed, and
4. `rebuild_lost_indexes`: a segment whose `.index` or `.timeindex` is missing gets both written
   again as the append path wrote them.

PartitionLog.open_for_write runs them; the cleaner and retention only write the files these
passes read, so none of them imports another (the log <-> cleaner <-> retention cycle is gone).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from klog.errors import CorruptLogError
from klog.store.format import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    NO_TIMESTAMP,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_base,
    segment_file_name,
)
from klog.store.names import fsync_dir
from klog.store.plain import Plain
from klog.store.segment import keep_corrupt_bytes
from klog.store.state import ReplicaSnapshot, current_boot_id
from klog.store.validate import crc_problem
from klog.store.walk import Tail, walk_batches

if TYPE_CHECKING:
    from klog.store.log import PartitionLog
    from klog.store.segment import LogSegment


class RecoveryReport(Plain):
    """What opening a replica for writing repaired, for `klog verify` and tests."""

    _fields = ("segments_recovered", "bytes_truncated", "segments_deleted", "reasons", "damaged", "damage_at")

    def __init__(self, segments_recovered: list[int] | None = None, bytes_truncated: int = 0,
                 segments_deleted: list[int] | None = None, reasons: list[str] | None = None,
                 damaged: list[str] | None = None, damage_at: list[tuple[int, int, int]] | None = None) -> None:
        self.segments_recovered = [] if segments_recovered is None else segments_recovered
        self.bytes_truncated = bytes_truncated
        self.segments_deleted = [] if segments_deleted is None else segments_deleted
        self.reasons = [] if reasons is None else reasons
        # damaged batches below the acknowledged end recovery left in place (valid batches follow them)
        self.damaged = [] if damaged is None else damaged
        # where each of them is: (segment base, position, first offset it holds)
        self.damage_at = [] if damage_at is None else damage_at

    @property
    def repaired(self) -> bool:
        return bool(self.bytes_truncated or self.segments_deleted)


def unlink_if_there(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- pass 1 --------------------------------------------------------------------------------------
def finish_interrupted_swaps(directory: str, delete_delay_ms: int = 0, names: set[str] | None = None) -> list[str]:
    """Finish or roll back the cleaner's swaps, drop `.cleaned` files and the `.deleted` ones
    whose file.delete.delay.ms is over (remove_deleted_files). `names`: the folder's listing,
    when the caller has just made it (one listing per open of a partition).

    Returns what it did, one line per action (empty when the folder was clean).
    """
    if names is None:
        try:
            names = set(os.listdir(directory))
        except FileNotFoundError:
            return []
    if nothing_unfinished(names):
        return []  # (the usual folder: this check alone, at every first open of every partition)
    done: list[str] = []
    swapped_bases = sorted({b for n in names if n.endswith(SWAP_SUFFIX) and (b := parse_segment_base(n)) is not None})
    for base in swapped_bases:
        log_name = segment_file_name(base, LOG_SUFFIX)
        if log_name + CLEANED_SUFFIX in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # not committed: back to the old segment
                unlink_if_there(os.path.join(directory, segment_file_name(base, suffix) + SWAP_SUFFIX))
            done.append(f"rolled back the unfinished compaction of segment {base}")
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):  # committed: finish it, the log last
            path = os.path.join(directory, segment_file_name(base, suffix))
            if os.path.exists(path + SWAP_SUFFIX):
                os.replace(path + SWAP_SUFFIX, path)
        done.append(f"finished the interrupted compaction of segment {base}")
    for name in sorted(names):
        if name.endswith(CLEANED_SUFFIX):
            unlink_if_there(os.path.join(directory, name))
    # as Kafka's LogLoader: an index whose log is gone (a kill between retention's renames)
    for name in _orphaned_indexes(directory, names, swapped_bases):
        unlink_if_there(os.path.join(directory, name))
        done.append(f"removed orphaned index {name}")
    if done or any(n.endswith(CLEANED_SUFFIX) for n in names):
        fsync_dir(directory)
    done += [f"removed {name}" for name in remove_deleted_files(directory, delete_delay_ms, names)
             if name.endswith(LOG_SUFFIX + DELETED_SUFFIX)]
    return done


_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def nothing_unfinished(names: set[str]) -> bool:
    """No swap, `.cleaned` or `.deleted` file, and every index file has its `.log` beside it:
    finish_interrupted_swaps would do nothing."""
    for name in names:
        if name.endswith((SWAP_SUFFIX, CLEANED_SUFFIX, DELETED_SUFFIX)):
            return False
        if name.endswith(_INDEX_SUFFIXES) and name[:name.rindex(".")] + LOG_SUFFIX not in names:
            return False
    return True


def _orphaned_indexes(directory: str, names: set[str], swapped_bases: list[int]) -> list[str]:
    """Index files (.index, .timeindex, .txnindex) of a base with no .log beside them, from the
    folder's listing (a finished or rolled-back swap leaves its base a .log)."""
    logs = {b for n in names if n.endswith(LOG_SUFFIX) and (b := parse_segment_base(n)) is not None}
    logs.update(swapped_bases)
    return sorted(n for n in names if n.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
                  and (b := parse_segment_base(n)) is not None and b not in logs
                  and not os.path.islink(os.path.join(directory, n)))  # a planted link: refused by the open


def retire(paths: list[str]) -> None:
    """Stamp files just renamed to `.deleted` with the time they were retired (their mtime), from
    which their file.delete.delay.ms counts."""
    for path in paths:
        try:
            os.utime(path)
        except FileNotFoundError:
            pass


def remove_deleted_files(directory: str, delay_ms: int, names: set[str] | None = None) -> list[str]:
    """Unlink the folder's `.deleted` files retired at least `delay_ms` ago (Kafka's
    file.delete.delay.ms: a segment retention removed lingers that long, so a reader that found
    it just before keeps its files; one left by a crash goes the same way). Returns their names."""
    if names is None:
        try:
            names = set(os.listdir(directory))
        except FileNotFoundError:
            return []
    removed = []
    now = time.time()
    for name in sorted(n for n in names if n.endswith(DELETED_SUFFIX)):
        path = os.path.join(directory, name)
        try:
            if delay_ms and (now - os.stat(path).st_mtime) * 1000 < delay_ms:
                continue
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(name)
    return removed


# -- pass 2 --------------------------------------------------------------------------------------
def recover_tail(log: PartitionLog, snap: ReplicaSnapshot | None, report: RecoveryReport,
                 committed_end: int | None = None, keep_damage: bool = True) -> None:
    """Kafka's unclean-shutdown pass: recover every segment from the recovery point on (a
    damaged batch below `committed_end` that valid batches follow is left in place, if
    `keep_damage`: see LogSegment.recover)."""
    recovery_point = snap.recovery_point if snap is not None and snap.boot_id == current_boot_id() else 0
    if snap is not None and snap.boot_id != current_boot_id():
        recovery_point = snap.recovery_point
    start = log.segment_for(recovery_point) or log.segments[log.bases[0]]
    previous_next: int | None = None
    for base in [b for b in log.bases if b >= start.base_offset]:
        segment = log.segments[base]
        if previous_next is not None and base < previous_next:
            delete_from(log, base, report, f"segment {base} overlaps the one before")
            break
        if previous_next is not None and base > previous_next and segment.file_size() == 0:
            # a stray empty file past the log end (no roll makes one: a roll starts at the log
            # end): adopting it would jump the log end over offsets that never existed
            segment.delete_files()
            report.segments_deleted.append(base)
            report.reasons.append(f"{segment.log_path}: an empty segment past the log end ({previous_next}); "
                                  f"removed")
            fsync_dir(log.directory)
            continue
        result = segment.recover(committed_end, sealed=base != log.bases[-1], keep_damage=keep_damage)
        report.segments_recovered.append(base)
        for damage in result.kept:  # acknowledged records after it: left in place, read past as damage
            report.damage_at.append((base, damage.position, damage.first_missing))
            report.damaged.append(f"{segment.log_path}: {damage.problem}: offsets {damage.first_missing}.."
                                  f"{damage.resumed_offset - 1} are damaged (kept in place: the valid batches "
                                  f"after it, from offset {damage.resumed_offset}, stay)")
        if result.truncated_bytes:
            report.bytes_truncated += result.truncated_bytes
            report.reasons.append(f"{segment.log_path}: {result.reason}; cut {result.truncated_bytes} bytes")
            later = [b for b in log.bases if b > base]
            if later:
                delete_from(log, later[0], report, "after a truncated segment", committed_end)
            break
        if result.next_offset is not None:
            previous_next = result.next_offset
    log.refresh_segments()
    active = log.active
    if active.next_offset is None:
        active.next_offset = active.base_offset  # an empty last segment: the log ends at its base
    log.recovery_point = min(recovery_point, active.next_offset)


def appended_tail(fd: int, active: LogSegment, snap: ReplicaSnapshot, size: int) -> tuple[int, int, int, int] | None:
    """The batches from snap.valid_size to `size` of the active segment (read through `fd`, the
    writer's descriptor), appended after the replica state was last written (same boot, same
    active segment): (next offset, max timestamp, its offset, batches) once each is whole, passes
    its CRC and starts where the one before ended; None otherwise (the caller recovers the
    segment: a kill -9 in the middle of an append cuts its batch). The index entries their
    appends wrote are in the index files already; a kill between a batch and its entry leaves
    the index sparser, never wrong (entries are written after their batch)."""
    expected, max_timestamp, offset_of_max = snap.log_end_offset, snap.max_timestamp, snap.offset_of_max_timestamp
    batches = 0
    try:
        for batch in walk_batches(lambda pos, n: os.pread(fd, n, pos), snap.valid_size, size, tail=Tail.RAISE,
                                  whole=True):
            header = batch.header
            if (header.base_offset != expected or not active.can_hold(header.last_offset)
                    or crc_problem(batch.chunk, batch.at, header) is not None):
                return None
            if header.max_timestamp > max_timestamp:  # (IndexBuilder.add's rule)
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            expected = header.next_offset
            batches += 1
    except CorruptLogError:
        return None
    return expected, max_timestamp, offset_of_max, batches


# -- pass 3 --------------------------------------------------------------------------------------
def delete_from(log: PartitionLog, base: int, report: RecoveryReport, why: str,
                committed_end: int | None = None) -> None:
    """Remove the segments from `base` on (keeping acknowledged bytes below `committed_end` in
    `.corrupt` files); an emptied log starts a new segment at `base`."""
    for b in [b for b in log.bases if b >= base]:
        segment = log.segments[b]
        if committed_end is not None and b < committed_end and segment.file_size() > 0:
            keep_corrupt_bytes(segment.log_path, 0, segment.file_size())  # acknowledged records
        segment.delete_files()
        report.segments_deleted.append(b)
    report.reasons.append(f"deleted segments from {base}: {why}")
    fsync_dir(log.directory)
    log.refresh_segments()
    if not log.bases:
        log.new_segment(base)


def cut_kept_damage(log: PartitionLog, report: RecoveryReport, committed_end: int | None) -> None:
    """Cut the log at the first damaged batch recovery kept in place (`report.damage_at`), as a
    recovery without keep_damage would have (the bytes from it on kept in `.corrupt` files, the
    segments after it removed): for a replica whose records an intact one holds (Partition.
    open_for_write: the copy comes back from it)."""
    base, position, first_missing = report.damage_at[0]
    segment = log.segments[base]
    size = segment.file_size()
    keep_corrupt_bytes(segment.log_path, position, size)
    report.bytes_truncated += size - position
    report.reasons.append(f"{segment.log_path}: a damaged batch at position {position} (offset {first_missing}); "
                          f"cut {size - position} bytes (an intact replica holds them)")
    later = [b for b in log.bases if b > base]
    if later:
        delete_from(log, later[0], report, "after a truncated segment", committed_end)
    report.damaged, report.damage_at = [], []
    log.truncate_to_damage(segment, position, first_missing)


# -- pass 4 --------------------------------------------------------------------------------------
def rebuild_lost_indexes(log: PartitionLog, names: set[str] | None, report: RecoveryReport) -> list[int]:
    """Rebuild the indexes of every segment that lost one (a backup restored without them, a copy
    of a Kafka folder missing some), exactly as the append path and seal() wrote them: Kafka's
    LogLoader recovers a segment whose `.index` is missing (and leaves a missing `.timeindex`
    empty, which drops a sealed segment's final entry: klog rebuilds both). The `.log` is never
    changed here (recover_tail cuts damage). Run after the open adopted or recovered the log:
    the segments recovery rebuilt (report.segments_recovered) are left as they are; the active
    segment's writer state is the rebuild's (the same as a scan gives). `names`: the folder's
    listing before the open (None: list it). The active segment's index files the writer's open
    created empty, where its batches call for entries, count as lost. Returns the bases rebuilt."""
    if names is None:
        names = set(os.listdir(log.directory))
    bases = log.bases
    recovered = set(report.segments_recovered)
    rebuilt = []
    for base in bases:
        if base in recovered:
            continue
        segment = log.segments[base]
        sealed = base != bases[-1]
        lost = [kind for suffix, kind in ((INDEX_SUFFIX, "offset index"), (TIME_INDEX_SUFFIX, "time index"))
                if segment_file_name(base, suffix) not in names]
        if not lost and not sealed:
            lost = _emptied_indexes(segment)
        if not lost:
            continue
        problem = segment.rebuild_indexes(sealed)
        rebuilt.append(base)
        report.reasons.append(f"{segment.log_path}: rebuilt the offset and time index ({' and '.join(lost)} "
                              f"{'was' if len(lost) == 1 else 'were'} missing)"
                              + (f"; {problem}" if problem is not None else ""))
    if rebuilt:
        fsync_dir(log.directory)
    return rebuilt


def _emptied_indexes(segment: LogSegment) -> list[str]:
    """The active segment's indexes that are empty though its batches call for an entry (a file
    the writer's open created again after it was deleted). The append path writes the first
    entries for the first batch starting past index.interval.bytes: only the batches up to it
    are read."""
    sizes = [os.path.getsize(segment.offset_index.path), os.path.getsize(segment.time_index.path)]
    if all(sizes) or segment.file_size() <= segment.index_interval_bytes:
        return []
    max_timestamp = NO_TIMESTAMP
    try:
        for position, header in segment.iter_headers(0, segment.file_size()):
            max_timestamp = max(max_timestamp, header.max_timestamp)
            if position > segment.index_interval_bytes:  # (IndexBuilder.add: its first entries)
                due = (True, max_timestamp > NO_TIMESTAMP)
                return [kind for kind, size, wanted in zip(("offset index", "time index"), sizes, due, strict=True)
                        if wanted and not size]
    except CorruptLogError:
        pass  # damage before any entry is due: recovery deals with it
    return []

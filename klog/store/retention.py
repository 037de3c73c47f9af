"""Retention: which segments `retention.ms`, `retention.bytes` and the log start offset may delete
(Kafka's UnifiedLog.deleteOldSegments), and deleting them Kafka-style (rename to `.deleted`,
then unlink).

The rules (kafka-log-format.md §5): whole segments only, oldest first, only a prefix (deletion
stops at the first segment that does not qualify), never the active segment, and only segments
whose every offset is below the high watermark. The caller persists the new log start offset
*before* deleting, so readers never look for records that are going away.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.store import faults, loader
from klog.store.format import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from klog.store.names import fsync_dir

if TYPE_CHECKING:
    from klog.store.log import PartitionLog

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)  # .log first: it names the segment


@dataclass(frozen=True)
class SegmentFacts:
    """What retention needs to know about one segment."""

    base_offset: int
    size_bytes: int
    largest_timestamp_ms: int  # the largest record timestamp, or the file's mtime if it has none


def segment_facts(log: PartitionLog, lazy: bool = False) -> list[SegmentFacts]:
    """Facts for every segment of `log`, oldest first; the last one is the active segment.

    lazy: each segment's size and largest timestamp are read when first asked for. retention_cut
    asks only for the oldest segments' timestamps (it stops at the first one to keep) and for
    sizes only under retention.bytes, so a roll into a log of thousands of segments does not
    stat and read every one of them (that made each roll O(segments)).
    """
    log.refresh_segments()
    bases = log.bases
    last = bases[-1] if bases else None
    # (off the partition's lock, another thread's retention may take segments out meanwhile: those
    # are left out here, and their files, gone, are the caller's FileNotFoundError)
    facts = [_LazyFacts(segment, base != last) for base in bases if (segment := log.segments.get(base)) is not None]
    if lazy:
        return facts  # type: ignore[return-value]  # the same attributes, read on demand
    return [SegmentFacts(f.base_offset, f.size_bytes, f.largest_timestamp_ms) for f in facts]


class _LazyFacts:
    """SegmentFacts of one segment, each read from the files on first use."""

    def __init__(self, segment, sealed: bool) -> None:  # noqa: ANN001 - a LogSegment
        self.segment = segment
        self.sealed = sealed
        self.base_offset = segment.base_offset

    @functools.cached_property
    def size_bytes(self) -> int:
        return self.segment.file_size()

    @functools.cached_property
    def largest_timestamp_ms(self) -> int:
        largest = largest_timestamp(self.segment, self.size_bytes, sealed=self.sealed)
        return largest if largest >= 0 else int(os.path.getmtime(self.segment.log_path) * 1000)


def largest_timestamp(segment, size: int, sealed: bool = True) -> int:  # noqa: ANN001 - a LogSegment
    """The segment's largest batch timestamp (-1 if none). A sealed segment's time index ends with
    it (seal(), recovery and the cleaner write that entry), so only an index without entries, or
    the active segment's, costs a scan of the batch headers."""
    segment.time_index.refresh()
    last = segment.time_index.last_entry()
    if sealed and last is not None:
        return last[0]
    largest = last[0] if last is not None else -1
    for _, header in segment.pinned_headers(size):  # (off the lock from _remember_oldest, compaction_due)
        largest = max(largest, header.max_timestamp)
    return largest


def retention_cut(facts: list[SegmentFacts], *, now_ms: int, retention_ms: int, retention_bytes: int,
                  high_watermark: int, log_start_offset: int, delete_policy: bool = True) -> int:
    """The log start offset after retention: the base of the first segment kept (or the current
    log start if that is higher). Segments below the result may be deleted.

    Kafka runs three passes, each deleting a prefix (time, size, log start); since every pass
    cuts a prefix of what the one before left, the result is the longest of the three prefixes.
    """
    if not facts:
        return log_start_offset
    sealed = facts[:-1]  # never the active segment
    # eligible: every offset of the segment (up to the next segment's base) is below the high watermark
    eligible = 0
    while eligible < len(sealed) and facts[eligible + 1].base_offset <= high_watermark:
        eligible += 1
    by_start = _prefix(sealed[:eligible], lambda i, s: facts[i + 1].base_offset <= log_start_offset)
    by_time = by_size = 0
    if delete_policy and retention_ms >= 0:
        by_time = _prefix(sealed[:eligible], lambda i, s: now_ms - s.largest_timestamp_ms > retention_ms)
    if delete_policy and retention_bytes >= 0:
        diff = sum(f.size_bytes for f in facts) - retention_bytes
        for s in sealed[:eligible]:
            if diff - s.size_bytes < 0:
                break
            diff -= s.size_bytes
            by_size += 1
    cut = max(by_start, by_time, by_size)
    assert cut < len(facts), "the active segment is never deleted"
    return max(log_start_offset, facts[cut].base_offset)


def _prefix(segments: list[SegmentFacts], qualifies) -> int:  # noqa: ANN001 - (index, facts) -> bool
    n = 0
    while n < len(segments) and qualifies(n, segments[n]):
        n += 1
    return n


@dataclass
class DeletedSegments:
    bases: list[int]
    size_bytes: int


def delete_segments_below(log: PartitionLog, offset: int) -> DeletedSegments:
    """Delete the segments of `log` whose every offset is below `offset` (never the active one).

    Kafka-style: each segment's files are renamed to `.deleted` (oldest segment first, `.log`
    first, so what remains is always a suffix), the directory is fsynced, and the files are
    unlinked once file.delete.delay.ms has passed, by this or a later retention pass or writer
    open (loader.remove_deleted_files; a crash's leftovers too). Readers that hold a segment
    open keep reading it meanwhile (and after: POSIX).
    """
    if log.deleted_files_due is not None and time.time() >= log.deleted_files_due:
        log.deleted_files_due = None  # a long-lived writer's own .deleted files, now due
        loader.remove_deleted_files(log.directory, log.config.file_delete_delay_ms)
    log.refresh_segments()
    doomed = []
    for i, base in enumerate(log.bases[:-1]):
        if log.bases[i + 1] > offset:
            break
        doomed.append(base)
    if not doomed:
        return DeletedSegments([], 0)
    assert log.bases[-1] not in doomed
    log.finish_flushes(upto=log.bases[len(doomed)])  # no fsync of theirs still under way
    size = 0
    renamed = []
    for base in doomed:
        segment = log.segments[base]
        size += segment.file_size()
        segment.close()
        for path in _segment_paths(segment):
            try:
                os.replace(path, path + DELETED_SUFFIX)
                renamed.append(path + DELETED_SUFFIX)
            except FileNotFoundError:
                pass
    loader.retire(renamed)
    fsync_dir(log.directory)
    faults.point("retention-renamed")
    loader.remove_deleted_files(log.directory, log.config.file_delete_delay_ms)  # these, if the delay is 0
    if log.config.file_delete_delay_ms and log.deleted_files_due is None:
        log.deleted_files_due = time.time() + log.config.file_delete_delay_ms / 1000
    log.refresh_segments()
    return DeletedSegments(doomed, size)


def _segment_paths(segment) -> list[str]:  # noqa: ANN001 - a LogSegment
    stem = segment.log_path[: -len(LOG_SUFFIX)]
    return [stem + suffix for suffix in SEGMENT_SUFFIXES]

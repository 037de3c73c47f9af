"""PartitionLog: one replica of one partition, a folder of segments (Kafka's LocalLog).

Writing (open_for_write, append, flush, truncate_to) happens under the partition's file lock,
held by the caller (partition.py). Reading works from any process at any time, up to an
offset bound the caller takes from the partition state.
"""

from __future__ import annotations

import bisect
import operator
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from klog.errors import CorruptLogError, UnsupportedCodecError
from klog.store import codec, compression, faults, flusher, loader, validate
from klog.store.codec import BatchHeader, read_header
from klog.store.config import LogConfig
from klog.store.flush_pipeline import FlushSchedule, PendingFlush, SealedFlushes
from klog.store.format import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    OFFSET_INDEX_ENTRY,
    RECORD_BATCH_OVERHEAD,
    TIME_INDEX_ENTRY,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_base,
)
from klog.store.limits import MAX_MESSAGE_BYTES_DEFAULT, PARTITION_READ_BYTES_DEFAULT, read_expansion_bytes_max
from klog.store.loader import RecoveryReport
from klog.store.names import check_not_symlink, fsync_dir, join_name
from klog.store.plain import Plain
from klog.store.segment import CORRUPT_SUFFIX, LogSegment, OpenLog, SegmentFds
from klog.store.state import ReplicaSnapshot, ReplicaState, ReplicaTrust, current_boot_id
from klog.store.walk import Tail, walk_batches

T = TypeVar("T")

# The replica state file (klog-replica.state) lets the next writer adopt the log without a scan.
# An appender that settles it itself (Partition: append(settle=False), then settle_state) lets it
# describe a tail up to this many batches (or bytes) old: the next writer that finds it behind
# validates only the batches after it (loader.adopt_appended_tail), where a state written at every
# append cost a pwrite and ~10 us of Python each time. A roll, a truncation and a recovery write it
# at once (the next writer would otherwise recover whole segments).
STATE_LAG_BATCHES_MAX = 32
STATE_LAG_BYTES_MAX = 1 << 20

# In a replica's folder: the log holds a record whose attributes byte is >= 0x80 (a foreign log:
# `dirs import` found one), so its batches are decoded by the strict decoder only (see fastrecords)
STRICT_RECORDS_MARKER = "klog-strict-records"
# In a replica's folder: a cleaning swapped segments in, so the log may have the offset gaps the
# cleaner leaves between batches, whatever the topic's cleanup.policy now is (cleaner_gaps)
CLEANED_MARKER = "klog-cleaned"

# A folder whose change time is this recent may still change within the same timestamp (a file system
# stamps changes with a clock that ticks every few ms, or in whole seconds): its change time proves
# nothing yet, and a writer does not record it for the next one to trust (see ReplicaTrust)
FOLDER_SETTLED_NS = 50_000_000
FOLDER_SETTLED_WHOLE_SECONDS_NS = 3_000_000_000  # (a time in whole seconds: FAT, ext3's small inodes)
# what may be in a replica's folder that a writer's open would not act on (else it is listed at
# every open: swaps, `.deleted` files, the data-loss marker, whatever else someone put there)
_QUIET_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, CORRUPT_SUFFIX)
_QUIET_NAMES = frozenset({ReplicaState.FILE_NAME, LEADER_EPOCH_CHECKPOINT, "partition.metadata",
                          STRICT_RECORDS_MARKER, CLEANED_MARKER})


def _quiet_folder(names: set[str]) -> bool:
    """Nothing in the folder's listing that an open for write would finish, remove or stop at."""
    return (all(n in _QUIET_NAMES or n.endswith(_QUIET_SUFFIXES) for n in names)
            and loader.nothing_unfinished(names))


# When a file or folder last changed, as the trust record proves it: the inode's change time
# (ctime) of an os.stat_result. Any write, truncation, rename, link or attribute change moves it,
# and no tool can set it: cp -a, rsync -a and touch -r put mtimes back, so a backup copied back in
# place would pass an mtime check. (An attrgetter: no Python call, three times per open for write.)
_change_ns: Callable[[os.stat_result], int] = operator.attrgetter("st_ctime_ns")


def _settled(changed_ns: int, before_ns: int) -> bool:
    """Is a folder's change time, seen by an lstat made after `before_ns` (time.time_ns()), old enough
    that any change in the folder after that lstat gets another (see FOLDER_SETTLED_NS)?"""
    margin = FOLDER_SETTLED_WHOLE_SECONDS_NS if changed_ns % 1_000_000_000 == 0 else FOLDER_SETTLED_NS
    return changed_ns <= before_ns - margin


# What an open for write that adopted the log as it was returns: nothing repaired. One shared
# report (kept by every written partition until its close); its lists are tuples, so that nothing
# can append to it (recovery fills a report of its own)
_CLEAN_OPEN = RecoveryReport(segments_recovered=(), segments_deleted=(), reasons=(), damaged=(), damage_at=())  # type: ignore[arg-type]
_NOTHING_LISTED: frozenset[str] = frozenset()
_new_tuple = tuple.__new__


class FetchedBatch(Plain):
    """One CRC-checked batch read from a replica."""

    _fields = ("header", "data", "segment_base", "position", "path", "strict", "trusted", "max_message_bytes")

    def __init__(self, header: BatchHeader, data: bytes, segment_base: int, position: int, path: str | None = None,
                 strict: bool = False, trusted: bool = True,
                 max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT) -> None:
        self.header = header
        self.data = data  # the whole batch, header included
        self.segment_base = segment_base
        self.position = position
        self.path = path  # the segment file, for error messages
        self.strict = strict  # the log is marked STRICT_RECORDS_MARKER: never the compiled reader
        # False for a batch from a cluster (a log klog cannot mark): the compiled reader only after a
        # check of the records' attributes bytes (fastrecords.plain_attributes)
        self.trusted = trusted
        self.max_message_bytes = max_message_bytes  # the topic's: how far a compressed batch may expand

    def records(self) -> list[codec.RecordOut]:
        fast, trust = not self.strict, self.trusted
        return self._decode(lambda data, pos, header: codec.decode_batch_records(
            data, pos, header, fast=fast, trust_attributes=trust))

    def values(self, null: bytes | None = None) -> list[bytes | None]:
        """Only the values (`null` for a null one): what value-only output needs."""
        fast, trust = not self.strict, self.trusted
        return self._decode(lambda data, pos, header: codec.decode_batch_values(
            data, pos, header, null, fast=fast, trust_attributes=trust))

    def timestamps_values(self, null: bytes | None = None) -> tuple[list[int], list[bytes | None]]:
        """Timestamps and values, two lists: what merging partitions' values in time order needs."""
        fast, trust = not self.strict, self.trusted
        return self._decode(lambda data, pos, header: codec.decode_batch_timestamps_values(
            data, pos, header, null, fast=fast, trust_attributes=trust))

    def _decode(self, decoder: Callable[[bytes, int, BatchHeader], T]) -> T:
        try:
            if not self.header.codec:
                return decoder(self.data, 0, self.header)
            # a decompression bomb already in a log (written before serve bounded Produce, or copied in)
            # is refused at the bound, never expanded: the same rule as `dirs import`
            with compression.expansion_limit(read_expansion_bytes_max(self.header.size, self.max_message_bytes)):
                return decoder(self.data, 0, self.header)
        except (CorruptLogError, UnsupportedCodecError) as e:
            # the codec knows the offset only; say where the batch is (a CRC-valid batch whose
            # records or compressed payload are garbage is damage, like a CRC mismatch)
            message = str(e).removesuffix(f" (offset {self.header.base_offset})")
            raise CorruptLogError(message, self.path, self.position, self.header.base_offset) from None


class ByteRange(Plain):
    """Bytes of whole batches (maybe a cut last one) in a segment file, sent as they are."""

    _fields = ("fd", "position", "length", "first", "path", "data")

    def __init__(self, opened: OpenLog | None, position: int, length: int, first: BatchHeader, path: str,
                 data: bytes | None = None) -> None:
        # the segment's read descriptor, pinned until close(): the file the positions were found in,
        # even if the cleaner swaps the segment (or the cache closes it) before the range is sent
        self.opened = opened
        self.fd = opened.fd if opened is not None else -1
        self.position = position
        self.length = length
        self.first = first
        self.path = path
        # the bytes, already read (a small range: see PartitionLog.byte_range's read_max); fd is then -1
        # (a file cut meanwhile reads short: the caller compares len(data) with length)
        self.data = data

    def close(self) -> None:
        opened = self.opened
        if opened is not None:
            self.opened = None
            self.fd = -1
            opened.release()


def _contiguous(batches: list[FetchedBatch], offset: int, first_base: int,
                gap_ok: Callable[[FetchedBatch], bool] | None = None) -> list[FetchedBatch]:
    """The batches up to the first break in offset continuity (a read never skips offsets).

    The first batch must hold `offset` (or start the log, when `offset` is below it: the caller
    checks that against the log start offset); each next batch starts where the one before
    ends, but in a compacted topic's cleaned segments: the cleaner (klog's as Kafka's) drops the
    batches it emptied, so there a batch may start above where the one before ended:
    `gap_ok(batch)` says where such an upward gap is legal. A break after
    the first batch returns what comes before it (the next read reports it); a break at the
    first batch is a CorruptLogError naming the missing offsets.
    """
    expected = offset if offset >= first_base else first_base
    for i, fb in enumerate(batches):
        h = fb.header
        ok = h.base_offset <= expected <= h.last_offset if i == 0 and expected == offset else h.base_offset == expected
        if not ok and h.base_offset > expected and gap_ok is not None and gap_ok(fb):
            ok = True  # compacted: the offsets between were removed by Kafka's cleaner
        if not ok:
            if i:
                return batches[:i]
            if h.base_offset > expected:
                raise CorruptLogError(f"offsets {expected}..{h.base_offset - 1} are missing", fb.path, fb.position,
                                      h.base_offset)
            raise CorruptLogError(f"batch does not follow offset {expected}", fb.path, fb.position, h.base_offset)
        expected = h.next_offset
    return batches


def folder_log_bytes(directory: str) -> int:
    """The bytes of a replica folder's segments, as Kafka's UnifiedLog.size counts them (the size
    DescribeLogDirs reports): each `<base>.log` file; not the indexes, nor the `.deleted`,
    `.cleaned` or `.swap` files retention and compaction leave for a while."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.endswith(LOG_SUFFIX) and parse_segment_base(entry.name) is not None:
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                pass  # deleted meanwhile
    return total


def _stopped_early(segment: LogSegment, last: FetchedBatch) -> bool:
    """Did a read of `segment` end before the segment's end (at damage, or as the file grew)?"""
    try:
        return last.position + len(last.data) < segment.file_size()
    except FileNotFoundError:
        return False


class _Segments(dict):
    """base offset -> LogSegment. Readers in other threads take a base from `bases` and look it up
    here with no lock; retention, a compaction's swap or another reader's re-listing may have
    removed it meanwhile. Such a base reads as a segment whose files are gone (FileNotFoundError
    at its first look, which every reader handles as a segment deleted by another process),
    never as KeyError. (get() and `in` still say what the list holds.)"""

    def __init__(self, directory: str, index_interval_bytes: int) -> None:
        # (no super().__init__(): dict.__new__ made it empty already, and a writer makes one per partition)
        self.directory = directory
        self.index_interval_bytes = index_interval_bytes

    def __missing__(self, base: int) -> LogSegment:
        return LogSegment(self.directory, base, self.index_interval_bytes)


class PartitionLog:
    def __init__(self, directory: str, config: LogConfig | None = None, listed: bool = True,
                 log_dir: str | None = None, defer_state: bool = False) -> None:
        """listed=False: the folder is listed at the first use of the segment list, not now (a
        writer's open for write lists it under the lock anyway: a producer's first write into
        1,000 partitions listed each folder twice). log_dir: os.path.dirname(directory), when the
        caller joined `directory` from it. defer_state: see self.defer_state."""
        self.directory = directory
        # the log directory (disk) the replica is on
        self.log_dir = os.path.dirname(directory) if log_dir is None else log_dir
        self.config = config or LogConfig()
        self.state = ReplicaState(join_name(directory, ReplicaState.FILE_NAME))
        self._fds: SegmentFds | None = None
        self._fds_base = -1
        self.flush_schedule = FlushSchedule(self.config)  # when appends are due for an fsync
        self.sealed_flushes = SealedFlushes()  # sealed segments the flusher is fsyncing
        self._dir_dirty = False
        # the folder was created by this object and its entry in the log directory is not yet
        # durable: the next flush fsyncs the log directory, or a syncfs covers it (mark_synced)
        self._parent_dirty = False
        self.recovery_point = 0
        # batches and bytes appended since the replica state file last described this log, and
        # whether it names an older active segment (see STATE_LAG_BATCHES_MAX)
        self._state_lag = 0
        self._state_lag_bytes = 0
        self._state_old_segment = False
        # set by a Partition for its replicas: appends leave the replica state file to its
        # settle_state() (or the next flush()); and, for one append, the header whose roll the
        # caller has just decided (should_roll is not asked twice)
        self.defer_state = defer_state
        self.roll_decided: BatchHeader | None = None
        self.deleted_files_due: float | None = None  # when retention's .deleted files may go (time.time())
        # Readers in other threads of the process (klog serve, a program that consumes while it
        # produces) re-list the folder on this same object while its writer adds a segment: the
        # listing and the writer's change are taken one at a time, or a listing made before the
        # writer's new segment would drop it (and close its files) after it was added.
        self._listing = threading.Lock()
        # the folder's names as the last open for write listed them (None: that open listed
        # nothing, the log being as this object left it): what else is in the folder is known
        # without a look (the data-loss marker, broker/data_loss.py)
        self.listed_names: set[str] | None = None
        # what this object last wrote to the replica state file (Partition.written_states)
        self.state_written: ReplicaSnapshot | None = None
        # (token, lstat of the folder or None, the time just before it) from probe_folder(): the next
        # open_for_write with the same token (the same hold of the partition's lock) uses it
        # instead of a look of its own
        self._probed: tuple[object, os.stat_result | None, int] | None = None
        self.rolls = 0  # segments this object rolled (a writer runs retention after an append that rolled)
        # the segment list (refresh_segments); None until the first listing of a listed=False log
        self._segments: _Segments | None = None
        self._bases: list[int] | None = None
        self._strict_records = False
        self._cleaned = False  # CLEANED_MARKER is in the folder (as last listed)
        # the list holds the active segment only: an open for write adopted it from the replica
        # state file without listing the folder (the first use of the whole list lists it)
        self._partial = False
        # (inode, change time) of the folder as this object's last open for write found it, when its names
        # were known then and held nothing an open acts on: the replica state file records them
        # for the next writer while the folder still has them (see ReplicaTrust)
        self._folder_seen: tuple[int, int] | None = None
        # what the folder's Kafka checkpoint files hold (broker.kafka_checkpoints' digest), as a
        # trusted record said (None: unknown)
        self.checkpoints_digest: int | None = None
        if listed:
            self.refresh_segments()

    # (properties, not __getattr__: a class with __getattr__ makes every attribute read slower)
    @property
    def segments(self) -> dict[int, LogSegment]:
        """Base offset -> segment, as the folder was last listed (listed now if it never was)."""
        if self._bases is None or self._partial:
            self.refresh_segments()
        return self._segments  # type: ignore[return-value]

    @property
    def bases(self) -> list[int]:
        """The segments' base offsets in order, as the folder was last listed (listed now if it never was)."""
        bases = self._bases
        if bases is None or self._partial:
            self.refresh_segments()
            bases = self._bases
        return bases  # type: ignore[return-value]

    @property
    def strict_records(self) -> bool:
        """STRICT_RECORDS_MARKER is in the folder (as last listed)."""
        if self._bases is None:
            self.refresh_segments()
        return self._strict_records

    def _listed_segments(self) -> list[LogSegment]:
        """The segments known, without listing the folder for them (to close them)."""
        segments = self._segments
        return list(segments.values()) if segments is not None else []

    @property
    def pending_flushes(self) -> list[PendingFlush]:
        """The sealed segments' fsyncs under way, oldest first (flush_pipeline.py)."""
        return self.sealed_flushes.pending

    # -- segment list --------------------------------------------------------------------------
    def refresh_segments(self, names: list[str] | set[str] | None = None) -> None:
        """Re-list the folder: other processes roll, delete and truncate segments. `names`: a
        listing the caller has just made (after check_not_symlink)."""
        with self._listing:
            if names is None:
                names = self._list()
            bases = sorted(b for n in names if n.endswith(LOG_SUFFIX) and (b := parse_segment_base(n)) is not None)
            listed = set(bases)  # `base not in bases` on the list was O(n^2) with thousands of segments
            segments = self._segments
            if segments is None:  # (the first listing of a listed=False log)
                segments = _Segments(self.directory, self.config.index_interval_bytes)
            for base in [b for b in segments if b not in listed]:
                segments.pop(base).close()
            for base in bases:
                if base not in segments:
                    segments[base] = LogSegment(self.directory, base, self.config.index_interval_bytes)
            self._segments = segments
            self._bases = bases
            self._partial = False
            self._strict_records = STRICT_RECORDS_MARKER in names
            self._cleaned = CLEANED_MARKER in names

    def _list(self) -> list[str]:
        check_not_symlink(self.directory)
        try:
            return os.listdir(self.directory)
        except FileNotFoundError:
            return []

    def mark_strict_records(self) -> None:
        """Make every later read of this log (in any process) use the strict decoder only: the log
        holds a record attributes byte the compiled reader would read differently from Kafka."""
        path = os.path.join(self.directory, STRICT_RECORDS_MARKER)
        with open(path, "w", encoding="utf-8") as f:
            f.write("a record's attributes byte is >= 0x80: klog reads this log with its strict decoder only\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.directory)
        self._strict_records = True
        self._folder_seen = None

    def mark_cleaned(self) -> None:
        """Say in the folder that the cleaner may have left gaps in this log (see cleaner_gaps): a
        topic compacted, then set to cleanup.policy=delete, keeps them, and readers must too."""
        path = os.path.join(self.directory, CLEANED_MARKER)
        if os.path.exists(path):
            self._cleaned = True
            return
        with open(path, "w", encoding="utf-8") as f:
            f.write("the log cleaner rewrote segments of this log: offset gaps between its batches are its work\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.directory)
        self._cleaned = True
        self._folder_seen = None

    def first_high_attributes_offset(self) -> int | None:
        """The offset of the first record whose attributes byte is >= 0x80, or None: a walk over
        every record of every segment (for `dirs import` and `verify`; offset gaps a compacted
        Kafka log has are no concern here, nor damage: every reader reports that)."""
        self.refresh_segments()
        for base in self.bases:
            found = self._first_high_attributes_in(self.segments[base])
            if found is not None:
                return found
        return None

    @staticmethod
    def _first_high_attributes_in(segment: LogSegment) -> int | None:
        # one pinned file for the walk and its reads: `verify` runs it off the partition's lock,
        # and a swap meanwhile would put the rewritten file under the positions found in the old
        opened, size = segment.pin()
        try:
            for pos, header in segment.iter_headers(0, size, opened.read):
                data = opened.read(pos, header.size)
                if validate.crc_problem(data, 0, header) is not None:
                    continue
                try:
                    index = validate.high_attributes_record(data, 0, header)
                    if index is not None:
                        return codec.decode_batch_records(data, 0, header)[index][0]  # strict: Kafka's offset
                except (CorruptLogError, UnsupportedCodecError):
                    continue
        finally:
            opened.release()
        return None

    def segment_for(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self.bases, offset) - 1
        return self.segments[self.bases[i]] if i >= 0 else None

    @property
    def active(self) -> LogSegment:
        bases = self._bases
        if bases is None:
            bases = self.bases  # (lists the folder)
        return self._segments[bases[-1]]  # type: ignore[index]

    def size_bytes(self) -> int:
        total = 0
        for segment in list(self.segments.values()):  # (a copy: a roll in another thread adds one)
            try:
                total += segment.file_size()
            except FileNotFoundError:
                pass  # deleted meanwhile (retention in another thread, before it re-lists): not in the log
        return total

    # -- writing (lock held) -------------------------------------------------------------------
    def probe_folder(self, token: object) -> bool:
        """Lock held: is the replica's folder there (as os.path.isdir says)? The look serves the
        next open_for_write(token=`token`) too: one lstat for both."""
        before = time.time_ns()
        try:
            found = os.lstat(self.directory)
        except FileNotFoundError:
            found = None
        self._probed = (token, found, before)
        if found is None:
            return False
        return stat.S_ISDIR(found.st_mode) or (stat.S_ISLNK(found.st_mode) and os.path.isdir(self.directory))

    def open_for_write(self, committed_end: int | None = None, trusted: bool = False,
                       token: object = None, keep_damage: bool = True) -> RecoveryReport:
        """Adopt the state the last writer left, recovering the tail if it did not finish.
        Recovery keeps what it cuts from below `committed_end` in `.corrupt` files, and leaves a
        damaged batch below it that valid batches follow in place (LogSegment.recover), unless
        `keep_damage` is False (an in-sync replica holds the records: the cut ones are copied back).

        trusted: the caller knows this object was the last writer and nothing changed the folder
        since (Partition's lock generation); an opened log then stays as it is. token: names
        this hold of the lock (see probe_folder)."""
        probed, self._probed = self._probed, None
        if trusted and self._fds is not None and self._bases and self.active.next_offset is not None:
            self.listed_names = None
            return _CLEAN_OPEN
        self.listed_names = None
        if self.sealed_flushes.pending:
            self.drop_flushes()  # another writer may have truncated or replaced what they sealed
        self.state.relink()  # (its folder deleted with its topic since: the file now at the path)
        # one lstat says whether the folder is there and is no link (the caller's own look at it,
        # probe_folder, when made in this hold of the lock)
        if probed is not None and probed[0] == token:
            found, before = probed[1], probed[2]
        else:
            before = time.time_ns()
            try:
                found = os.lstat(self.directory)
            except FileNotFoundError:
                found = None
        if found is not None and stat.S_ISLNK(found.st_mode):
            check_not_symlink(self.directory)  # (raises)
        self._folder_seen = None
        self.checkpoints_digest = None
        if found is None or not stat.S_ISDIR(found.st_mode):
            os.makedirs(self.directory, exist_ok=True)
            # the new folder's entry in the log dir: made durable with the first flush (an fsync
            # here was 1,000 fsyncs of one directory at a producer's first write into 1,000
            # partitions; a group synced by syncfs needs none)
            self._parent_dirty = True
            found = None
        snap = self.state.read(write_next=True)  # (every open for write writes it after the append)
        if found is not None and snap is not None and self._adopt_trusted(snap, found):
            return _CLEAN_OPEN
        # a compaction or retention killed mid-way; expired .deleted files. One listing serves
        # both passes unless the first changed the segments (a finished swap)
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            names = []
        listed = set(names)
        swaps = loader.finish_interrupted_swaps(self.directory, self.config.file_delete_delay_ms, listed)
        self.refresh_segments(None if swaps else names)
        self.listed_names = None if swaps else listed
        if found is not None and not swaps and _settled(_change_ns(found), before) and _quiet_folder(listed):
            self._folder_seen = (found.st_ino, _change_ns(found))
        report = RecoveryReport(reasons=swaps)
        if not self.bases:
            self.new_segment(0, writing=True)
            self._save_state()
            return report
        active = self.active
        same = snap is not None and snap.boot_id == current_boot_id() and snap.active_base == active.base_offset
        size = active.file_size() if same else -1
        if same and snap.valid_size == size:
            self._open_fds()  # first: the index tails are read through its descriptors
            active.load_tail_state(snap.valid_size, snap.max_timestamp, snap.offset_of_max_timestamp,
                                   snap.log_end_offset, self._fds)
            self.recovery_point = snap.recovery_point
            self._state_lag = self._state_lag_bytes = 0  # (the file describes the log as it is)
        elif same and snap.valid_size < size and self._adopt_appended_tail(snap, size):
            self.recovery_point = snap.recovery_point
        else:
            self._folder_seen = None  # (recovery may remove segments or keep cut bytes beside them)
            loader.recover_tail(self, snap, report, committed_end, keep_damage)
            self._save_state(sync=True)
            self._open_fds()
        if loader.rebuild_lost_indexes(self, None if swaps or report.segments_deleted else listed, report):
            self._folder_seen = None  # (index files were created)
        self._catch_up_sealed()
        return report

    def _adopt_trusted(self, snap: ReplicaSnapshot, folder: os.stat_result) -> bool:
        """Adopt the log as the replica state file's ReplicaTrust describes it, when the files are
        provably as its writer left them: the same boot, the folder's inode and change time unchanged
        (no file created, renamed or removed since), and the active segment's `.log` (inode, size,
        change time) and indexes (sizes) as recorded, by an fstat of the `.log` descriptor and an lseek
        to the end of each index's, descriptors the append needs anyway. Then the open is the state
        read and the three opens: no listing, no index read.
        False (nothing adopted; the descriptors opened are the writer's, which the full check
        keeps when its listing finds that same file active): the caller checks the log as before."""
        trust = snap.trust
        if trust is None:
            return False
        # (its fields at once: a ReplicaTrust is a tuple, read at every first open of a partition)
        (folder_ino, folder_changed_ns, log_ino, log_changed_ns, index_bytes, time_index_bytes, since_last,
         last_time_ts, first_batch_max_timestamp, checkpoints_digest, flags) = trust
        if (folder_changed_ns != _change_ns(folder) or folder_ino != folder.st_ino
                or snap.boot_id != current_boot_id() or snap.recovery_point < snap.active_base):
            return False  # (a recovery point behind the active segment: sealed ones await their fsync)
        base = snap.active_base
        segments = self._segments
        segment = segments.get(base) if segments is not None else None
        if segment is None:
            segment = LogSegment(self.directory, base, self.config.index_interval_bytes)
        else:  # (kept from before another writer's turn: what its readers cached may be of files since rewritten)
            segment.offset_index.forget()
            segment.time_index.forget()
        fds = segment.open_fds()
        try:
            log = os.fstat(fds.log)
            same = (log.st_ino == log_ino and log.st_size == snap.valid_size
                    and _change_ns(log) == log_changed_ns
                    # (the indexes' sizes: an lseek to the end of each, cheaper than an fstat; their
                    # descriptors append (O_APPEND) and read with pread, so the offset is no one's)
                    and os.lseek(fds.index, 0, os.SEEK_END) == index_bytes
                    and os.lseek(fds.time_index, 0, os.SEEK_END) == time_index_bytes)
        except BaseException:
            fds.close()
            raise
        if self._fds is not None:
            self._fds.close()
        self._fds, self._fds_base = fds, base
        if not same:
            return False  # (the full check keeps these descriptors if the listing finds the same file active)
        with self._listing:  # (readers in other threads see the list and the segment change together)
            if segments is None:
                segments = _Segments(self.directory, self.config.index_interval_bytes)
            segments[base] = segment
            self._segments = segments
            self._bases = [base]
            self._partial = True
            self._strict_records = bool(flags & ReplicaTrust.STRICT_RECORDS)
            self._cleaned = bool(flags & ReplicaTrust.CLEANED)
        first = first_batch_max_timestamp if flags & ReplicaTrust.FIRST_BATCH_KNOWN else None
        segment.adopt_trusted(snap.valid_size, snap.log_end_offset, snap.max_timestamp, snap.offset_of_max_timestamp,
                              index_bytes, time_index_bytes, since_last, last_time_ts, first)
        self.recovery_point = snap.recovery_point
        self._state_lag = self._state_lag_bytes = 0
        self._state_old_segment = False
        # its names are as the record's writer knew them, among which no data-loss marker (a folder
        # holding anything but the log's own files is never recorded): nothing to look for
        self.listed_names = _NOTHING_LISTED
        self._folder_seen = (folder.st_ino, _change_ns(folder))
        self.checkpoints_digest = checkpoints_digest if flags & ReplicaTrust.CHECKPOINTS_KNOWN else None
        return True

    def _adopt_appended_tail(self, snap: ReplicaSnapshot, size: int) -> bool:
        """The state describes the active segment up to snap.valid_size, and the file is longer:
        batches a writer appended after it last wrote the state (see STATE_LAG_BATCHES_MAX). In
        this boot they are in the page cache as written, so the tail they form is checked (whole
        batches, CRCs, offsets following on) and adopted; False (a batch cut by a kill -9, or
        anything else): the caller recovers the segment."""
        self._open_fds()
        assert self._fds is not None
        found = loader.appended_tail(self._fds.log, self.active, snap, size)
        if found is None:
            return False
        next_offset, max_timestamp, offset_of_max_timestamp, batches = found
        self.active.load_tail_state(size, max_timestamp, offset_of_max_timestamp, next_offset, self._fds)
        self._state_lag, self._state_lag_bytes = batches, size - snap.valid_size
        return True

    def _catch_up_sealed(self) -> None:
        """After an untrusted open: the sealed segments from the recovery point up to the active
        one (their flushes dropped above, or a killed writer's) are fsynced in the background, and
        the recovery point passes them once that is done (collect_flushes), as after a roll."""
        first = max(bisect.bisect_right(self.bases, self.recovery_point) - 1, 0)
        sealed = self.bases[first:-1]
        if sealed:
            self.sealed_flushes.submit_catch_up(self._segment_files(sealed), self.directory, sealed[0],
                                                self.active.base_offset)

    def _segment_files(self, bases: list[int]) -> list[tuple[str, ...]]:
        return [(s.log_path, s.offset_index.path, s.time_index.path) for s in (self.segments[b] for b in bases)]

    def _open_fds(self) -> None:
        if (self._fds is not None and self._fds_base == self.active.base_offset
                and os.fstat(self._fds.log).st_ino == os.stat(self.active.log_path).st_ino):
            return  # same file as last time (not replaced by a truncation or compaction)
        if self._fds is not None:
            self._fds.close()
        self._fds = self.active.open_fds()
        self._fds_base = self.active.base_offset

    def new_segment(self, base: int, writing: bool = False) -> LogSegment:
        """Create the segment's three files; writing=True: through the writer's descriptors,
        kept open as the active segment's (an open to create each file, then another to append,
        cost six opens per new segment: 6,000 at a producer's first write into 1,000 partitions)."""
        segment = LogSegment(self.directory, base, self.config.index_interval_bytes)
        if self._bases is None or self._partial:
            self.refresh_segments()  # (a first listing, not under _listing below: it takes it)
        with self._listing:  # (the file and its place in the list appear together to readers)
            if writing:
                if self._fds is not None:
                    self._fds.close()
                self._fds = None
                self._fds = segment.open_fds()
                self._fds_base = base
                # (an fstat each: a file left by a writer killed in a roll may hold entries already)
                segment.index_bytes = os.fstat(self._fds.index).st_size
                segment.time_index_bytes = os.fstat(self._fds.time_index).st_size
            else:
                segment.create_files()
            segment.next_offset = base
            self.segments[base] = segment
            self._bases = sorted(self.segments)
        self._dir_dirty = True
        self._state_old_segment = True
        self._folder_seen = None  # (its names changed: the next open lists them)
        return segment

    @property
    def log_end_offset(self) -> int:
        """Next offset to assign (writer view, lock held)."""
        bases = self._bases
        if bases is None:
            bases = self.bases  # (lists the folder)
        end = self._segments[bases[-1]].next_offset  # type: ignore[index]  # (self.active, inline: asked ~10 times per append)
        assert end is not None
        return end

    def should_roll(self, header: BatchHeader, active: LogSegment | None = None) -> bool:
        """active: self.active, when the caller has it (an append looks it up once)."""
        if active is None:
            active = self.active
        size = active.size
        if size == 0:
            return False
        config = self.config
        if size > config.segment_bytes - header.size:
            return True
        if not active.can_hold(header.base_offset + header.last_offset_delta):  # (its last offset)
            return True
        if self._index_full(active, config.segment_index_bytes):
            return True
        first_ts = active.first_batch_max_timestamp
        if first_ts is None:
            first_ts = self._first_batch_max_timestamp(active)
        return first_ts >= 0 and header.max_timestamp - first_ts > config.segment_ms

    @staticmethod
    def _index_full(segment: LogSegment, limit: int) -> bool:
        """Kafka's offsetIndex.isFull / timeIndex.isFull: segment.index.bytes (`limit`) holds no more entries."""
        index_entries, time_entries = segment.index_entries()
        return index_entries >= limit // OFFSET_INDEX_ENTRY.size or time_entries >= limit // TIME_INDEX_ENTRY.size

    def _first_batch_max_timestamp(self, segment: LogSegment) -> int:
        if segment.first_batch_max_timestamp is None:
            segment.first_batch_max_timestamp = self._read_first_batch_max_timestamp(segment)
        return segment.first_batch_max_timestamp

    def _read_first_batch_max_timestamp(self, segment: LogSegment) -> int:
        # the active segment through the writer's own descriptor (a read descriptor opened for
        # this alone cost an open per partition at its first append, and kept one more file open)
        fds = self._fds
        if fds is not None and segment is self.active and self._fds_base == segment.base_offset:
            def read(position: int, length: int) -> bytes:
                return os.pread(fds.log, length, position)
        else:
            read = segment.read_bytes
        head = read(0, RECORD_BATCH_OVERHEAD)
        if len(head) < codec.header_bytes(head):
            head = read(0, codec.header_bytes(head))  # a magic 0/1 entry, read whole
        return read_header(head).max_timestamp if len(head) >= codec.header_bytes(head) else -1

    def roll(self, base: int) -> LogSegment:
        """Start a new segment at `base`. The sealed one is fsynced (with the folder) by the
        background flusher, as Kafka's roll does; the recovery point passes it only once that is
        done (collect_flushes), and flush() waits for it, so an fsynced append (acks=all,
        flush.messages reached) is durable with everything before it when it returns."""
        old = self.active
        old.seal()
        sealed, self._fds = self._fds, None
        segment = self.new_segment(base, writing=True)
        self.rolls += 1
        if sealed is not None:
            self.sealed_flushes.submit_sealed(sealed, self.directory, old.base_offset, base)
            faults.point("roll-flush-pending")
            if self.sealed_flushes.over_limit():
                self.collect_flushes(wait=self.sealed_flushes.over_limit())
        return segment

    def collect_flushes(self, wait: int = 0) -> None:
        """Move the recovery point past the sealed segments the flusher has fsynced, waiting for
        the first `wait` of them (SealedFlushes.collect). flush() fsyncs what a failed one left."""
        self.recovery_point = self.sealed_flushes.collect(self.recovery_point, wait)

    def drop_flushes(self) -> None:
        """Wait for every pending flush and forget them, the recovery point unmoved."""
        self.sealed_flushes.drop()

    def finish_flushes(self, upto: int | None = None) -> None:
        """Wait until the flusher is done with this log's sealed segments (those holding offsets
        below `upto`, if given): before retention deletes or compaction rewrites them."""
        self.collect_flushes(wait=self.sealed_flushes.below(upto))

    def _sync_sealed_since_recovery_point(self) -> None:
        """fsync the sealed segments holding offsets at or past the recovery point (Kafka's
        flushUptoOffsetExclusive): those whose background flush failed, or that a writer before
        this one sealed without its flush finishing. Usually none."""
        if self.recovery_point >= self.active.base_offset:
            return  # (the usual case: the recovery point is in the active segment, no listing needed)
        bases = self.bases
        first = max(bisect.bisect_right(bases, self.recovery_point) - 1, 0)
        if first < len(bases) - 1:
            flusher.sync_segment_files(self._segment_files(bases[first:-1]))

    def drop_empty_active(self, next_offset: int) -> bool:
        """A follower that started a segment its leader did not (a writer killed mid-roll, or a
        truncation to a segment's base): make the segment before it active again if that one ends
        at next_offset, so the replicas' files stay alike. Lock held; returns whether it did."""
        empty = self.active
        if empty.size != 0 or len(self.bases) < 2 or empty.base_offset != next_offset:
            return False
        previous = self.segments[self.bases[-2]]
        if previous.recover(sealed=False).next_offset != next_offset:  # (indexed as the active one again)
            previous.seal()  # it stays sealed: its final time entry back
            return False  # a gap (compaction) before the empty segment: keep it
        self.drop_flushes()
        self._folder_seen = None
        if self._fds is not None:
            self._fds.close()
            self._fds = None
        empty.delete_files()
        fsync_dir(self.directory)
        self.refresh_segments()
        self._open_fds()
        self._save_state(sync=True)
        return True

    def append(self, batch: bytes, header: BatchHeader, gap_ok: bool = False) -> int:
        """Append an already-stamped batch at the log end; returns its position. With
        defer_state, the replica state file is left to settle_state() or the next flush().
        `gap_ok`: a follower's copy of a compacted leader's batch (replication.catch_up), which
        may start above the log end (offsets its cleaner removed); else a batch starting above
        the log end is one of a leader whose log starts there (start_at)."""
        assert self._fds is not None, "open_for_write first"
        active = self.active
        if header.base_offset > active.next_offset and not gap_ok:  # type: ignore[operator]
            self.start_at(header.base_offset)
            active = self.active
        assert header.base_offset == active.next_offset or (gap_ok and header.base_offset > active.next_offset), (
            header.base_offset, active.next_offset)
        decided, self.roll_decided = self.roll_decided, None
        if decided is not header and self.should_roll(header):
            self.roll(header.base_offset)
            active = self.active
        position = active.append(self._fds, batch, header)
        self.flush_schedule.appended()
        if not self.defer_state:
            self._save_state()
        else:
            self._state_lag += 1
            self._state_lag_bytes += len(batch)
        return position

    def settle_state(self, now: bool = False) -> None:
        """Write the replica state file if appends left it behind by more than it may lag (see
        STATE_LAG_BATCHES_MAX), or named an older active segment, or at all when `now`."""
        if self._state_lag and (now or self._state_old_segment or self._state_lag >= STATE_LAG_BATCHES_MAX
                                or self._state_lag_bytes >= STATE_LAG_BYTES_MAX):
            self._save_state()

    @property
    def state_lags(self) -> bool:
        """Appends the replica state file does not describe yet (settle_state(now=True) writes it)."""
        return self._state_lag > 0

    def start_at(self, base: int) -> None:
        """A follower copying a leader whose log starts past the follower's end (retention or
        delete-records moved it): drop everything and begin at that offset (Kafka's
        truncateFullyAndStartAt; the gaps a compacted leader's cleaner leaves are appended over,
        append's gap_ok)."""
        assert self._fds is not None
        self.drop_flushes()
        self._fds.close()
        self._fds = None
        bases, segments = self.bases, self.segments  # (listed before _listing is taken)
        with self._listing:
            for b in bases:
                segments.pop(b).delete_files()
            self._bases = []
        self.new_segment(base, writing=True)
        self._save_state()

    def maybe_flush(self, by_count: bool = True, settle: bool = True) -> bool:
        """fsync per flush.messages / flush.ms; returns True if it did. `by_count=False` (a write
        whose acks do not wait for this replica) leaves only flush.ms, the time bound. settle:
        see flush()."""
        if self.flush_schedule.due(by_count):
            self.flush(settle)
            return True
        return False

    def flush_due_in_ms(self) -> float | None:
        """None when every appended byte is fsynced; else how long until flush.ms makes the
        unsynced ones due (0 or less: due now)."""
        return None if self._fds is None else self.flush_schedule.due_in_ms()

    def flush(self, settle: bool = True) -> None:
        """fsync what was appended. settle=False: the new recovery point goes to the replica state
        file with its next write (settle_state); until then a power cut recovers from an older
        one, which only scans more."""
        if self._fds is None:
            return
        if self.sealed_flushes.pending:
            self.finish_flushes()
        self._sync_sealed_since_recovery_point()
        # the log only: the active segment's indexes are rebuilt by recovery after a power cut
        # (a new boot always recovers from the recovery point, which is in the active segment or
        # before it); a sealed segment's indexes are fsynced with it (above, or by the flusher)
        os.fsync(self._fds.log)
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        if self._parent_dirty:
            fsync_dir(os.path.dirname(self.directory))
            self._parent_dirty = False
        self._mark_flushed(settle)

    @property
    def files_open(self) -> bool:
        """Are the active segment's write descriptors open (the next append re-opens nothing)?
        Closed: a writer's least recently written partition (release_files); its next open for
        write lists the folder and reads the state and index tails again."""
        return self._fds is not None

    def active_log_fd_to_sync(self) -> int | None:
        """The descriptor whose fsync is all flush() would do now (the active segment's log), or
        None when it has more to do (sealed segments to fsync, a folder whose names changed):
        a caller that fsyncs it elsewhere (klog serve's io_uring) then calls mark_synced()."""
        if (self._fds is None or self.sealed_flushes.pending or self._dir_dirty or self._parent_dirty
                or self.recovery_point < self.active.base_offset):
            return None
        return self._fds.log

    def flush_due(self) -> bool:
        """Would maybe_flush() fsync now (flush.messages reached, or flush.ms passed)?"""
        return self._fds is not None and self.flush_schedule.due()

    def mark_synced(self, settle: bool = True) -> None:
        """Everything appended is durable (a syncfs of this log's filesystem just returned, see
        klog.store.syncfs): flush()'s bookkeeping without its fsyncs. settle: see flush()."""
        if self._fds is None:
            return
        if self.sealed_flushes.pending:
            self.finish_flushes()  # the background flushes of sealed segments: covered, but collected
        self._dir_dirty = self._parent_dirty = False
        self._mark_flushed(settle)

    def _mark_flushed(self, settle: bool = True) -> None:
        self.flush_schedule.synced()
        self.recovery_point = self.log_end_offset
        if settle:
            self._save_state()

    def _save_state(self, sync: bool = False) -> None:
        if self.sealed_flushes.pending:
            self.collect_flushes()
        active = self.active
        indexer = active.indexer  # (the segment's max_timestamp and offset_of_max_timestamp)
        snap = ReplicaSnapshot(current_boot_id(), active.base_offset, active.size,
                               active.next_offset or active.base_offset, self.recovery_point, indexer.max_timestamp,
                               indexer.offset_of_max_timestamp, self._trust(active))
        self.state_written = None  # (a failed write leaves the file unknown)
        self.state.write(snap, sync=sync)
        self.state_written = snap
        self._state_lag = self._state_lag_bytes = 0
        self._state_old_segment = False

    def _trust(self, active: LogSegment) -> ReplicaTrust | None:
        """What the replica state file records for the next writer to adopt the log by (see
        ReplicaTrust), or None when this object cannot vouch for it: the folder's names unknown
        or changed by this object since its open, the index sizes unknown, or the active segment
        not open. One fstat (the `.log`'s change time). The folder is recorded as the open found it:
        a change since (by anyone: another thread's retention, a checkpoint file renamed by
        another process) gave it another change time (_settled), so the next writer finds the record
        stale and checks everything."""
        seen = self._folder_seen
        fds = self._fds
        if (seen is None or fds is None or self._fds_base != active.base_offset or active.index_bytes is None
                or active.time_index_bytes is None):
            return None
        try:
            log = os.fstat(fds.log)
        except OSError:
            return None
        if log.st_size != active.size:
            return None
        first = active.first_batch_max_timestamp
        digest = self.checkpoints_digest
        flags = ((ReplicaTrust.FIRST_BATCH_KNOWN if first is not None else 0)
                 | (ReplicaTrust.STRICT_RECORDS if self._strict_records else 0)
                 | (ReplicaTrust.CLEANED if self._cleaned else 0)
                 | (ReplicaTrust.CHECKPOINTS_KNOWN if digest is not None else 0))
        indexer = active.indexer
        # (ReplicaTrust(...) without its __new__'s Python frame, as ReplicaState reads one: at every state write)
        return _new_tuple(ReplicaTrust, (seen[0], seen[1], log.st_ino, _change_ns(log), active.index_bytes,
                                         active.time_index_bytes, indexer.since_last, indexer.last_time_ts,
                                         first if first is not None else -1, digest or 0, flags))

    def folder_as_seen(self) -> bool:
        """Is the folder still as this object's last open for write found it (its inode and
        change time: nothing created, renamed or removed in it since, by anyone)? One lstat."""
        seen = self._folder_seen
        if seen is None:
            return False
        try:
            found = os.lstat(self.directory)
        except OSError:
            return False
        return (found.st_ino, _change_ns(found)) == seen

    def note_checkpoints(self, digest: int) -> None:
        """The folder's Kafka checkpoint files were just read and hold what `digest` names (lock
        not held): the next write of the replica state file records it, with the folder's change time
        it is valid for (a file rewritten since, by anyone, changes the folder's change time: then it is
        not recorded). The log's lock holder (settle_states, at close) writes it then."""
        if self.checkpoints_digest != digest:
            self.checkpoints_digest = digest
            if self._folder_seen is not None and self._fds is not None:
                self._state_lag = max(self._state_lag, 1)

    def release_files(self, readers_too: bool = True) -> bool:
        """Close the descriptors kept between appends (the active segment's three, the state file,
        the segments' read descriptors): they reopen on the next use, the next writer's open
        re-reading the folder. Lock not held. False (nothing closed) while appended bytes wait
        for a flush.ms fsync: closing would skip it. readers_too=False: the segments' read
        descriptors stay (other threads may be reading through them: klog serve)."""
        if self.flush_schedule.timed_wait():
            return False
        self.drop_flushes()
        if self._fds is not None:
            self._fds.close()
            self._fds = None
        if readers_too:
            for segment in self._listed_segments():
                segment.close()
        self.state.close()
        return True

    def close(self) -> None:
        if self.sealed_flushes.pending:
            self.drop_flushes()
        if self._fds is not None:
            self._fds.close()
            self._fds = None
        for segment in self._listed_segments():
            segment.close()
        self.state.close()

    def truncate_to_damage(self, segment: LogSegment, position: int, offset: int) -> None:
        """Cut the log at a damaged batch's `position` in `segment` (the last segment now: loader.
        cut_kept_damage removed the ones after it), which holds `offset` on."""
        self.drop_flushes()
        self._folder_seen = None
        segment.truncate_to_position(position, None)
        fsync_dir(self.directory)
        self._fds_base = -1
        self.refresh_segments()
        if self.active.next_offset is None:
            self.active.next_offset = self.active.base_offset
        assert self.active.next_offset <= offset, (self.active.next_offset, offset)
        self._open_fds()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._save_state(sync=True)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch whose last offset ≥ offset (Kafka truncates whole batches)."""
        self.drop_flushes()
        self._folder_seen = None
        for base in [b for b in self.bases if b > offset and b != self.bases[0]]:
            self.segments[base].delete_files()
        self.refresh_segments()
        segment = self.segment_for(offset) or self.segments[self.bases[0]]
        found = segment.position_for_offset(offset, segment.file_size())
        if found is not None:
            segment.truncate_to_position(found[0], None)
        fsync_dir(self.directory)
        self._fds_base = -1
        self.refresh_segments()
        self.active.recover(sealed=False)
        if self.active.next_offset is None:
            self.active.next_offset = self.active.base_offset
        self._open_fds()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._save_state(sync=True)

    # -- reading (any process) -----------------------------------------------------------------
    def _first_segment(self, offset: int) -> LogSegment | None:
        """The segment a read from `offset` starts in (the first one when `offset` is below the
        log); the segment list is refreshed when no segment known starts at or below `offset` (a
        segment past the last known is found by _next_segment, which refreshes the list)."""
        bases = self.bases
        i = bisect.bisect_right(bases, offset) - 1
        if i >= 0:  # (segment_for, inline: a wide fetch asks once per partition)
            return self.segments[bases[i]]
        self.refresh_segments()
        segment = self.segment_for(offset)
        if segment is None and self.bases:
            segment = self.segments[self.bases[0]]
        return segment

    def _next_segment(self, segment: LogSegment) -> LogSegment | None:
        """The segment after `segment` (refreshing the list once when it was the last known)."""
        nxt = bisect.bisect_right(self.bases, segment.base_offset)
        if nxt >= len(self.bases):
            self.refresh_segments()
            nxt = bisect.bisect_right(self.bases, segment.base_offset)
            if nxt >= len(self.bases):
                return None
        return self.segments[self.bases[nxt]]

    def read(self, offset: int, upper: int, max_bytes: int = PARTITION_READ_BYTES_DEFAULT) -> list[FetchedBatch]:
        """CRC-checked batches holding offsets in [offset, upper), at least one if any exist."""
        if offset >= upper:
            return []
        offset_asked = offset
        segment = self._first_segment(offset)
        if segment is None:
            return []
        first_base = self.bases[0] if self.bases else 0
        out: list[FetchedBatch] = []
        budget = max_bytes
        while segment is not None and budget > 0:
            try:
                got = self._read_segment(segment, offset, upper, budget)
            except CorruptLogError:
                if out:
                    return out  # serve the batches before the damage first; the next read reports it
                raise
            out.extend(got)
            if got:
                offset = got[-1].header.next_offset
                budget -= sum(len(b.data) for b in got)
                if budget > 0 and offset < upper and _stopped_early(segment, got[-1]):
                    break  # damage ahead in this segment: never skip to the next one
            if offset >= upper:
                break
            if got and budget <= 0:
                break
            segment = self._next_segment(segment)
        # a read from below the log starts at its first segment: the one first when the read began,
        # or (retention in another thread deleting it meanwhile, before it was read) when it ended
        if out and out[0].segment_base != first_base and out[0].segment_base == (self.bases[0] if self.bases else 0):
            first_base = out[0].segment_base
        return _contiguous(out, offset_asked, first_base,
                           (lambda fb: self.cleaner_gap_ok(fb.path, fb.position)) if self.cleaner_gaps else None)

    @property
    def compacted(self) -> bool:
        """A compacted topic's log (cleanup.policy compact or compact,delete): Kafka's cleaner
        leaves offset gaps between the batches of the segments it cleaned."""
        return "compact" in self.config.cleanup_policy

    @property
    def cleaned(self) -> bool:
        """CLEANED_MARKER is in the folder (as last listed): a cleaning swapped segments in."""
        if self._bases is None:
            self.refresh_segments()
        return self._cleaned

    @property
    def cleaner_gaps(self) -> bool:
        """May the log have the offset gaps a cleaner leaves between batches (in its sealed
        segments, and before a segment's first batch)? A compacted topic's, or one a cleaning
        rewrote before its cleanup.policy changed (CLEANED_MARKER)."""
        if self._bases is None:
            self.refresh_segments()
        return self.compacted or self._cleaned

    def cleaner_gap_ok(self, path: str | None, position: int) -> bool:
        """May the offsets just below the batch at (`path`, `position`) be missing? Only in a
        log the cleaner may have cleaned (cleaner_gaps), as its work: the batch is in a segment
        the cleaner may have cleaned (any but the active one, which is never cleaned), or starts
        the active one (the segment before it may end with removed offsets)."""
        if not self.cleaner_gaps:
            return False
        active = self.segments.get(self.bases[-1]) if self.bases else None
        return position == 0 or active is None or path != active.log_path

    def _gap_ok(self, segment: LogSegment) -> Callable[[int], bool] | None:
        """Where in `segment` a batch may start above where the one before ended (compacted logs)."""
        if not self.cleaner_gaps:
            return None
        return lambda position: self.cleaner_gap_ok(segment.log_path, position)

    def byte_range(self, offset: int, upper: int, max_bytes: int, read_max: int = 0) -> ByteRange | None:
        """Where the batches holding offsets in [offset, upper) lie, in one segment (a fetch
        answers from one segment, as Kafka's does), for sending without reading: see
        LogSegment.byte_range. The descriptor is the segment's, pinned (the walk and the send use
        one file whatever a cleaner swaps meanwhile) until the caller closes the range. A range of
        at most `read_max` bytes comes read instead (ByteRange.data, nothing pinned): a caller that
        copies small ranges saves a read per range."""
        if offset >= upper:
            return None
        segment = self._first_segment(offset)
        if segment is None:
            return None
        while segment is not None:
            found = segment.pinned_range(offset, upper, max_bytes, self._gap_ok(segment), read_max)
            if found is not None:
                opened, position, length, header, data = found
                return ByteRange(opened, position, length, header, segment.log_path, data)
            segment = self._next_segment(segment)
        return None

    def _read_segment(self, segment: LogSegment, offset: int, upper: int, budget: int) -> list[FetchedBatch]:
        """Batches from `offset`; stops before a damaged batch if it has some to return (else raises).
        The whole walk reads one open file (pinned: a cleaner's swap meanwhile is the next read's)."""
        try:
            opened, end = segment.pin()
        except FileNotFoundError:
            return []
        try:
            return self._read_pinned(segment, opened, offset, upper, budget, end)
        finally:
            opened.release()

    def _read_pinned(self, segment: LogSegment, opened: OpenLog, offset: int, upper: int, budget: int,
                     end: int) -> list[FetchedBatch]:
        found = segment.first_batch(opened, offset, end, self._gap_ok(segment))
        if found is None:
            return []
        out: list[FetchedBatch] = []
        walk = walk_batches(opened.read, found[0], end, tail=Tail.RAISE, whole=True,
                            chunk_bytes=max(budget, RECORD_BATCH_OVERHEAD), path=segment.log_path,
                            stop_before=lambda header: header.base_offset >= upper)
        try:
            for batch in walk:  # (one larger than the budget is read whole: a read returns at least one)
                header = batch.header
                problem = validate.crc_problem(batch.chunk, batch.at, header)
                if problem is not None:
                    raise CorruptLogError(problem, segment.log_path, batch.position, header.base_offset)
                out.append(FetchedBatch(header, batch.data(), segment.base_offset, batch.position, segment.log_path,
                                        self.strict_records, max_message_bytes=self.config.max_message_bytes))
                budget -= header.size
                if budget <= 0:
                    break
        except CorruptLogError:
            if out:
                return out  # serve the batches before the damage; the next read reports it
            raise
        return out

    def offset_for_timestamp(self, timestamp: int, upper: int) -> int | None:
        """First offset < upper whose timestamp ≥ timestamp (Kafka's ListOffsets by time)."""
        self.refresh_segments()
        for base in self.bases:
            segment = self.segments[base]
            segment.file_size()  # (a swapped segment's indexes reload)
            segment.time_index.refresh()
            last = segment.time_index.last_entry()
            if last is not None and last[0] < timestamp and base != self.bases[-1] \
                    and self._time_entry_holds(segment, last):
                continue  # the sealed segment's final entry holds its max timestamp
            opened, end = segment.pin()  # one file for the walk (a cleaner's swap meanwhile is the next one's)
            try:
                found = segment.offset_for_timestamp(timestamp, end, opened, whole=base != self.bases[-1])
            finally:
                opened.release()
            if found is not None:
                if found[0] < upper:
                    return found[0]
                self._check_reaches(upper, (base, found[1]))
                return None
        self._check_reaches(upper)
        return None

    @staticmethod
    def _time_entry_holds(segment: LogSegment, entry: tuple[int, int]) -> bool:
        """Is `entry` (a sealed segment's final time entry) the largest timestamp of the batch at
        its offset? Only then may it skip the segment: a garbage `.timeindex` (an entry of 5 ms)
        skipped the segment's records, and `consume --since` started past them with exit 0."""
        offset = segment.base_offset + entry[1]
        opened, end = segment.pin()
        try:
            found = segment.position_for_offset(offset, end, opened.read)
        finally:
            opened.release()
        return found is not None and found[1].base_offset <= offset and found[1].max_timestamp == entry[0]

    def _check_reaches(self, upper: int, later: tuple[int, int] | None = None) -> None:
        """"No record at or after that time below `upper`" is a claim about the whole log: it must
        hold a batch at `upper` - 1, before the batch found past `upper` (`later`: its segment's
        base and its position) if one was. A segment cut short (truncated, zero-filled), or a base
        offset raised past the high watermark by damage, otherwise answered it, and `klog consume
        --since` started at the high watermark, printed nothing and exited 0."""
        segment = self.segment_for(upper - 1) if upper > 0 else None
        if segment is None:
            return  # nothing below `upper` is left in the log (retention, delete-records)
        opened, end = segment.pin()
        try:
            found = segment.position_for_offset(upper - 1, end, opened.read)
        finally:
            opened.release()
        if found is None:
            raise CorruptLogError(f"the log ends before its high watermark {upper}", segment.log_path)
        if found[1].base_offset >= upper:
            raise CorruptLogError(f"offset {upper - 1} is missing: a batch holds offsets from {found[1].base_offset} "
                                  f"on, past the high watermark {upper}", segment.log_path, found[0])
        if later is not None and (segment.base_offset, found[0]) > later:
            base, position = later
            raise CorruptLogError(f"a batch before offset {upper - 1} holds offsets from {upper} on",
                                  self.segments[base].log_path, position)

    def last_batch(self) -> FetchedBatch | None:
        """The last complete batch (writer view, lock held), CRC-checked."""
        self.refresh_segments()
        for base in reversed(self.bases):
            segment = self.segments[base]
            end = segment.size if segment is self.active and self._fds is not None else segment.file_size()
            last = None
            for pos, header in segment.iter_headers(0, end):
                last = (pos, header)
            if last is not None:
                data = segment.read_bytes(last[0], last[1].size)
                problem = validate.crc_problem(data, 0, last[1])
                if problem is not None:
                    raise CorruptLogError(problem, segment.log_path, last[0], last[1].base_offset)
                return FetchedBatch(last[1], data, base, last[0], segment.log_path, self.strict_records,
                                    max_message_bytes=self.config.max_message_bytes)
        return None

    def first_offset(self) -> int:
        """Base offset of the first segment (the log start unless delete-records moved it)."""
        self.refresh_segments()
        return self.bases[0] if self.bases else 0

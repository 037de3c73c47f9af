"""Compaction: Kafka's LogCleaner semantics on one partition's replicas (kafka-log-format.md §5).

The log has a clean part `[log start, first dirty)` and a dirty part `[first dirty, first
uncleanable)`; the active segment, segments reaching the high watermark and segments younger
than `min.compaction.lag.ms` are uncleanable. The cleaner builds a map key -> last offset over
the dirty part, then rewrites every cleanable segment keeping a record only if its offset is at
least map[key] (or its key is not in the map). Offsets never change: a rewritten batch keeps
its base offset and lastOffsetDelta, so records keep their offsets and gaps appear between them.
A batch left with no records is removed (gaps appear between batches too, and a segment may be
left empty), as Kafka's Cleaner.cleanInto removes it (MemoryRecords.filterTo, BatchRetention),
except two kept as empty batches (RETAIN_EMPTY): the last batch of each active producer (its last
sequence and epoch survive for the producer state rebuilt from the log: active_producers) and the
round's last batch (the one ending at the first uncleanable offset). Readers, verify and a
follower's catch-up take a compacted log's gaps (PartitionLog.cleaner_gap_ok).

Transactions (Kafka's CleanedTransactionMetadata, TxnCleaning here): an aborted transaction's
batches are removed (none of their records is in the offset map either). A COMMIT or ABORT marker
whose transaction has no batch left in the log is removed like a tombstone: the first cleaning that
finds it so sets its delete horizon (now + delete.retention.ms), a cleaning after that removes it.
A rewritten segment's `.txnindex` keeps the aborted transactions whose marker stays with batches of
theirs still seen.

Tombstones (null values) survive `delete.retention.ms` (KIP-534): the first cleaning that rewrites a
batch holding a tombstone sets the batch's delete horizon (attribute bit 6; baseTimestamp = now +
delete.retention.ms); a cleaning after that horizon drops the tombstone. Keyless records are dropped.

Off the lock (Kafka's Cleaner and UnifiedLog.replaceSegments): the offset map and the rewritten
segments are built without the partition's lock, from segments the writer no longer appends to (the
active segment is never cleaned), each rewrite (log, offset index, time index) into
`<base>.{log,index,timeindex}.<pid>-<n>-<token>.cleaning` files of its own, fsynced; the lock is taken only
to check that every segment read is still the one read (segments retention or delete-records
removed below the log start meanwhile are skipped; any other change, a truncation or another
cleaner's swap, abandons the cleaning, which is done again) and to swap the rewrites in. A
produce to the partition waits for the swap at most (renames and three directory fsyncs per
replica), never for the cleaning.

Crash safety (Kafka's `.cleaned` -> `.swap` -> rename), under the lock, each step for every segment
before the next: the rewrites are renamed to `<base>.{log,index,timeindex}.cleaned` (the directory
fsynced); the index files then the log are renamed to `.swap` (a segment's `.log.cleaned` ->
`.log.swap` rename is its commit point; the directory fsynced); then the indexes and last the log
replace the originals with atomic renames. `loader.finish_interrupted_swaps`, run when a writer opens
a replica, rolls back a segment's uncommitted swap (a `.log.cleaned` still exists) and finishes a
committed one, so a kill at any point leaves each segment either old or new. A killed cleaning's
`.cleaning` files are removed by the next cleaning of the partition (remove_stale_temps).

Each segment is rewritten on its own (Kafka also merges small neighbours; klog does not), and
only if something in it changes. A segment whose batches all went stays as an empty file: its
offsets are a gap like any other, and it keeps the log start offset where it was.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.errors import CorruptLogError, KlogError
from klog.store import codec, faults
from klog.store.codec import BatchHeader
from klog.store.config import LogConfig
from klog.store.format import (
    CLEANED_SUFFIX,
    COMPRESSION_CODEC_MASK,
    DELETE_HORIZON_FLAG_MASK,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TIMESTAMP_TYPE_MASK,
    segment_file_name,
)
from klog.store.index import IndexBuilder
from klog.store.loader import unlink_if_there
from klog.store.log import PartitionLog
from klog.store.names import fsync_dir, nofollow_opener
from klog.store.producer_scan import PRODUCER_ID_EXPIRATION_MS, recent_headers
from klog.store.reader import PartitionReader
from klog.store.retention import largest_timestamp
from klog.store.throttle import Throttler
from klog.store.txn import (
    AbortedTxn,
    aborted_filter,
    control_marker,
    is_transactional,
    read_txn_index,
    write_txn_index,
)

if TYPE_CHECKING:
    from klog.store.segment import LogSegment

READ_BYTES = 4 << 20  # batches are read 4 MiB at a time
CLEANING_SUFFIX = ".cleaning"  # a segment being rewritten, before the swap (see _new_temps)
# -- recovery ------------------------------------------------------------------------------------
# -- what is cleanable ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CleanableRange:
    """Offsets [first_dirty, first_uncleanable) form the dirty part; clean_bytes/dirty_bytes by segment."""

    log_start: int
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


RANGE_ATTEMPTS = 3  # looks at a log whose segments retention keeps deleting under the look, then an error


def cleanable_range(log: PartitionLog, first_dirty: int, high_watermark: int, now_ms: int,
                    min_compaction_lag_ms: int = 0) -> CleanableRange:
    """Kafka's LogCleanerManager.cleanableOffsets + dirty ratio, on whole segments of `log`. Read
    without the partition's lock (klog serve's log cleaner, compaction_due): a segment that
    retention or delete-records in another thread deletes meanwhile makes it look again."""
    for attempt in range(RANGE_ATTEMPTS):
        try:
            return _cleanable_range(log, first_dirty, high_watermark, now_ms, min_compaction_lag_ms)
        except FileNotFoundError:
            if attempt + 1 == RANGE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _cleanable_range(log: PartitionLog, first_dirty: int, high_watermark: int, now_ms: int,
                     min_compaction_lag_ms: int) -> CleanableRange:
    log.refresh_segments()
    bases = log.bases
    if not bases:  # never written
        return CleanableRange(0, 0, 0, 0, 0)
    segments = [log.segments.get(b) for b in bases]
    if None in segments:  # taken out of the list since `bases` was read
        raise FileNotFoundError(errno.ENOENT, "a segment was deleted meanwhile", log.directory)
    by_base = dict(zip(bases, segments, strict=True))
    sizes = {b: s.file_size() for b, s in by_base.items()}
    uncleanable = bases[-1]  # the active segment
    for i, base in enumerate(bases[:-1]):
        segment = by_base[base]
        too_young = (min_compaction_lag_ms > 0
                     and largest_timestamp(segment, sizes[base]) > now_ms - min_compaction_lag_ms)
        if bases[i + 1] > high_watermark or too_young:
            uncleanable = base
            break
    start = bases[0]
    first_dirty = min(max(first_dirty, start), uncleanable)
    clean = sum(sizes[b] for b in bases if b < first_dirty)
    dirty = sum(sizes[b] for b in bases if first_dirty <= b < uncleanable)
    return CleanableRange(start, first_dirty, uncleanable, clean, dirty)


def first_dirty_timestamp(log: PartitionLog, first_dirty: int) -> int:
    """The first dirty batch's max timestamp (-1 if none): max.compaction.lag.ms is measured from it."""
    segment = log.segment_for(first_dirty)
    if segment is None:
        return -1
    for _, header in segment.iter_headers(0, segment.file_size()):
        if header.last_offset >= first_dirty:
            return header.max_timestamp
    return -1


# -- the offset map ------------------------------------------------------------------------------
def build_offset_map(log: PartitionLog, start: int, end: int, throttler: Throttler | None = None,
                     aborted: Callable[[BatchHeader], bool] | None = None) -> dict[bytes, int]:
    """key -> the last offset holding it, over [start, end) of `log` (Kafka's SkimpyOffsetMap, unbounded).
    `aborted`: the batches of aborted transactions, left out as Kafka's cleaner leaves them out: a
    key an aborted transaction wrote would otherwise remove its committed value, which read_committed
    readers then never saw again (the aborted one they skip; the dirty part's batches holding no
    offset of the map are emptied, so the aborted ones go, as in Kafka)."""
    offsets: dict[bytes | None, int] = {}
    for fetched in PartitionReader(log, start, end, max_bytes=READ_BYTES):
        if throttler is not None:
            throttler.maybe_throttle(sum(len(fb.data) for fb in fetched.batches))
        for header, records in fetched.batch_runs():
            if aborted is None or not aborted(header):
                offsets.update((r[2], r[0]) for r in records)
    offsets.pop(None, None)
    return offsets  # type: ignore[return-value]


# -- producers and transactions ------------------------------------------------------------------
@dataclass
class _Producer:
    last_data_offset: int | None  # the last offset of its last data batch (None: none since its epoch changed)
    epoch: int


def active_producers(log: PartitionLog, now_ms: int,
                     expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> dict[int, tuple[int | None, int]]:
    """Kafka's UnifiedLog.lastRecordsOfActiveProducers from the log's batch headers: producer id ->
    (last data offset or None, epoch) of each producer with a batch in the segments klog's producer
    state rebuild reads (producer_scan.recent_headers, the one walk both take), as Kafka's
    ProducerStateManager holds them: a data batch sets the last data offset; a marker of another
    epoch clears it (its epoch is then what must survive); an emptied marker counts for nothing.
    Segments whose newest timestamp is older than the expiration are skipped (a producer whose last
    batch lies there is expired)."""
    states: dict[int, _Producer] = {}
    for header in recent_headers(log, now_ms - expiration_ms):
        pid = header.producer_id
        if pid < 0 or (header.is_control and not header.records_count):
            continue
        entry = states.get(pid)
        if entry is None:
            entry = states[pid] = _Producer(None, header.producer_epoch)
        if entry.epoch != header.producer_epoch:
            entry.epoch, entry.last_data_offset = header.producer_epoch, None
        if not header.is_control:
            entry.last_data_offset = header.last_offset
    # every producer of those segments, not only those whose own last batch is recent (Kafka's
    # isProducerExpired): klog's rebuild (broker.batches.ProducerStates._load) takes every producer
    # of the same segments, so one writing old timestamps (a mirror, a replay) whose last batch went
    # came back after a restart at an older sequence, and its next batch was refused as out of order
    return {pid: (e.last_data_offset, e.epoch) for pid, e in states.items()}


class TxnCleaning:
    """Kafka's CleanedTransactionMetadata: the transactions of one replica's cleaning, fed its
    batches in offset order. `aborted`: the log's aborted transactions (from its markers and
    `.txnindex`) up to the cleaning's end."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self.pending = sorted(aborted, key=lambda a: a.first_offset)
        self.next = 0
        self.committed: set[int] = set()  # producers with a batch of a committed transaction seen
        self.aborting: dict[int, list] = {}  # producer id -> [its aborted transaction, a batch of it seen]
        self.index: list[AbortedTxn] = []  # what the segment being cleaned keeps in its .txnindex

    def _reach(self, offset: int) -> None:
        while self.next < len(self.pending) and self.pending[self.next].first_offset <= offset:
            txn = self.pending[self.next]
            ongoing = self.aborting.get(txn.producer_id)
            if ongoing is None or ongoing[0].last_offset < txn.first_offset:
                self.aborting[txn.producer_id] = [txn, False]
            self.next += 1

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True if it is an aborted transaction's (its records all go)."""
        self._reach(header.last_offset)
        if not is_transactional(header.attributes):
            return False
        ongoing = self.aborting.get(header.producer_id)
        if ongoing is not None and header.base_offset > ongoing[0].last_offset:
            # past its ABORT marker's offset: a transaction whose marker an earlier cleaning removed
            # (a long-lived StableView still lists it): the producer's later transactions are not it
            del self.aborting[header.producer_id]
            ongoing = None
        if ongoing is not None:
            ongoing[1] = True
            return True
        self.committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, records: list) -> bool:
        """A control batch: True if no batch of its transaction is left (it may go, after its horizon)."""
        self._reach(header.last_offset)
        if not records:
            return True  # emptied by an earlier cleaning
        kind, _ = control_marker(records[0][2], records[0][3])
        pid = header.producer_id
        if kind == "ABORT":
            ongoing = self.aborting.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                self.index.append(ongoing[0])
                return False
            return True
        if kind == "COMMIT":
            if pid in self.committed:
                self.committed.discard(pid)
                return False
            return True
        return False


@dataclass(frozen=True)
class CleaningRules:
    """What Kafka's cleanInto decides a batch's fate by, besides the offset map: the round's end
    (the first uncleanable offset: the batch ending there stays, even empty), the active producers
    (active_producers: each one's last batch stays, even empty) and the aborted transactions."""

    upper: int
    producers: dict[int, tuple[int | None, int]] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)

    def retain_empty(self, header: BatchHeader) -> bool:
        """BatchRetention.RETAIN_EMPTY: the batch stays even with no record left."""
        if header.producer_id >= 0:
            last = self.producers.get(header.producer_id)
            if last is not None:
                data_offset, epoch = last
                if (header.last_offset == data_offset if data_offset is not None
                        else header.is_control and header.producer_epoch == epoch):
                    return True
        return header.next_offset == self.upper


# -- rewriting -----------------------------------------------------------------------------------
@dataclass
class CleanStats:
    segments_rewritten: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rewritten_bases: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DirtySurvivors:
    """In the dirty part every keyed record is in the map, so exactly the map's offsets survive there:
    a dirty batch holding none of them is emptied without decoding its records."""

    first_dirty: int
    offsets: list[int]  # sorted

    def any_in(self, first: int, last: int) -> bool:
        i = bisect.bisect_left(self.offsets, first)
        return i < len(self.offsets) and self.offsets[i] <= last


def clean_log(log: PartitionLog, offset_map: dict[bytes, int], end: int, now_ms: int, delete_retention_ms: int,
              stats: CleanStats | None = None, first_dirty: int | None = None,
              throttler: Throttler | None = None, bases: list[int] | None = None,
              rules: CleaningRules | None = None) -> list[CleanedSegment]:
    """Rewrite, into temporary files beside them, every sealed segment of `log` that lies wholly below
    `end` (the first uncleanable offset), or those of `bases`; offset_map covers [first_dirty, end)
    (first_dirty None: no shortcut for dirty batches). `rules`: which emptied batches stay (None:
    only the one ending at `end`; no producer's, no aborted transaction known). Nothing is swapped
    in (swap_cleaned does that)."""
    stats = stats or CleanStats()
    survivors = None if first_dirty is None else DirtySurvivors(first_dirty, sorted(offset_map.values()))
    rules = rules or CleaningRules(end)
    txns = TxnCleaning(rules.aborted)  # (one walk of this replica's batches, segment after segment)
    out: list[CleanedSegment] = []
    try:
        for base in sealed_bases(log, end) if bases is None else bases:
            segment = log.segments.get(base)
            if segment is None:  # the view saw it removed (re-listed): as below
                continue
            try:
                cleaned = clean_segment(log, segment, offset_map, now_ms, delete_retention_ms, stats,
                                        survivors, throttler, rules, txns)
            except (OSError, CorruptLogError):
                if os.path.exists(segment.log_path):
                    raise
                # removed meanwhile (retention or delete-records took the oldest segments, the lock not
                # held): skipped; swap_cleaned's check then tells a removal below the log start (the
                # rest is swapped in) from any other (the cleaning is abandoned)
                continue
            if cleaned is not None:
                out.append(cleaned)
    except BaseException:
        discard(out)
        raise
    return out


def sealed_bases(log: PartitionLog, end: int) -> list[int]:
    """The bases of the segments lying wholly below `end` (never the active one)."""
    bases = log.bases
    out = []
    for i, base in enumerate(bases[:-1]):
        if bases[i + 1] > end:
            break
        out.append(base)
    return out


SWAPPED_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


@dataclass(frozen=True)
class CleanedSegment:
    """A segment rewritten, with its indexes, into temporary files (fsynced) waiting to be swapped in."""

    base_offset: int
    directory: str
    temps: tuple[str, ...]  # the log's, the offset index's, the time index's (SWAPPED_SUFFIXES)
    txn_index: tuple[AbortedTxn, ...] = ()  # what its .txnindex holds once swapped in (TxnCleaning.index)

    def final(self, suffix: str) -> str:
        return os.path.join(self.directory, segment_file_name(self.base_offset, suffix))


_temp_counter = itertools.count()
_temps_in_progress: set[str] = set()  # this process's cleanings under way (other threads may run one)
_temps_lock = threading.Lock()


def _new_temps(segment: LogSegment) -> tuple[str, ...]:
    """`<base>.{log,index,timeindex}.<pid>-<n>-<token>.cleaning`: unique per cleaning, so that two
    cleaners (serve's, a `klog topics compact`) never write one file, and not `.cleaned`, which a
    writer's recovery deletes (a writer may open the log while it is being cleaned: the cleaner does
    not hold the partition's lock). The random token: two processes of two pid namespaces sharing
    the data directory may have the same pid and counter (the files are created exclusively too)."""
    tag = f".{os.getpid()}-{next(_temp_counter)}-{os.urandom(4).hex()}{CLEANING_SUFFIX}"
    paths = tuple(os.path.join(segment.directory, segment_file_name(segment.base_offset, s)) + tag
                  for s in SWAPPED_SUFFIXES)
    with _temps_lock:
        _temps_in_progress.update(paths)
    return paths


def discard(cleaned: list[CleanedSegment]) -> None:
    """Remove the temporary files of cleanings not swapped in (a no-op for those that were)."""
    for c in cleaned:
        for path in c.temps:
            unlink_if_there(path)
        with _temps_lock:
            _temps_in_progress.difference_update(c.temps)


def remove_stale_temps(directory: str) -> list[str]:
    """Delete the `.cleaning` files a killed cleaner left: those of a process that is gone, and this
    process's own that no cleaning under way owns."""
    removed = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        if not name.endswith(CLEANING_SUFFIX):
            continue
        path = os.path.join(directory, name)
        owner = name[:-len(CLEANING_SUFFIX)].rsplit(".", 1)[-1].partition("-")[0]
        with _temps_lock:
            ours = path in _temps_in_progress
        if ours or (owner.isdigit() and int(owner) != os.getpid() and _process_alive(int(owner))):
            continue
        unlink_if_there(path)
        removed.append(name)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: alive
    return True


def clean_segment(log: PartitionLog, segment: LogSegment, offset_map: dict[bytes, int], now_ms: int,
                  delete_retention_ms: int, stats: CleanStats, survivors: DirtySurvivors | None = None,
                  throttler: Throttler | None = None, rules: CleaningRules | None = None,
                  txns: TxnCleaning | None = None) -> CleanedSegment | None:
    """Rewrite one segment into a temporary file if anything in it goes (or needs a delete horizon);
    what to swap in, or None if it stays as it is.

    Streams: batches are read 4 MiB at a time, and the temporary file is opened at the first
    change (the unchanged batches before it are copied over), so memory stays bounded by the read
    size plus one (position, header) pair per batch, whatever segment.bytes is."""
    size = segment.file_size()
    rules = rules or CleaningRules(_segment_end_offset(log, segment))
    txns = txns or TxnCleaning(rules.aborted)
    txns.index = []
    layout: list[tuple[int, BatchHeader]] = []  # (position in the output, header) of each batch
    cleaned = None  # the temporary log file, once something changed
    temps: tuple[str, ...] = ()
    written = 0
    offset = segment.base_offset
    end_offset = _segment_end_offset(log, segment)
    position = 0
    try:
        while position < size:
            batches = [b for b in log.read(offset, end_offset, READ_BYTES) if b.segment_base == segment.base_offset]
            if not batches:
                break
            chunk_out = 0  # bytes of this chunk written to the temporary file
            for fb in batches:
                kept = _cleaned_batch(fb, offset_map, now_ms, delete_retention_ms, stats, survivors, rules, txns)
                if kept is not None and cleaned is None:
                    temps = _new_temps(segment)
                    cleaned = open(temps[0], "xb", opener=nofollow_opener)  # noqa: SIM115
                    _copy_range(segment, cleaned, fb.position, throttler)  # the unchanged batches before this one
                    faults.point("cleaned-partial")
                data = fb.data if kept is None else kept
                position = fb.position + len(fb.data)
                if not data:
                    continue  # removed: the batch after it starts above where the one before ended
                if cleaned is not None:
                    cleaned.write(data)
                    chunk_out += len(data)
                layout.append((written, fb.header if kept is None else codec.read_header(kept)))
                written += len(data)
            offset = batches[-1].header.next_offset
            if throttler is not None:  # the chunk read, and what of it went to the temporary file
                throttler.maybe_throttle(sum(len(fb.data) for fb in batches) + chunk_out)
        if position != size:  # damage the reads stopped at: never rewrite (and so cut) a segment we could not read
            raise CorruptLogError("cannot compact a damaged segment (klog verify --repair)", segment.log_path,
                                  position)
        if cleaned is None:
            return None
        cleaned.flush()
        os.fsync(cleaned.fileno())
        cleaned.close()
        if written == 0:
            _keep_age(segment, size, temps[0])
        index_data, time_data = _index_entries(layout, segment.base_offset, log.config.index_interval_bytes)
        _write_synced(temps[1], index_data)
        _write_synced(temps[2], time_data)
    except BaseException:
        if cleaned is not None:
            cleaned.close()
            discard([CleanedSegment(segment.base_offset, segment.directory, temps)])
        raise
    stats.segments_rewritten += 1
    stats.bytes_before += size
    stats.bytes_after += written
    stats.rewritten_bases.append(segment.base_offset)
    return CleanedSegment(segment.base_offset, segment.directory, temps, tuple(txns.index))


def _keep_age(segment: LogSegment, size: int, emptied: str) -> None:
    """An emptied segment's rewrite keeps the age time retention gives the segment: with no record
    left, retention takes a segment's file modification time (retention.largest_timestamp, as Kafka's
    LogSegment.largestTimestamp), which the rewrite would set to the cleaning's time, holding back
    time retention of everything after it by retention.ms. It gets the source's largest record
    timestamp (else its modification time, as Kafka's cleaner gives a cleaned segment its source's)."""
    largest = largest_timestamp(segment, size)
    if largest < 0:
        os.utime(emptied, ns=(time.time_ns(), os.stat(segment.log_path).st_mtime_ns))
    else:
        os.utime(emptied, ns=(time.time_ns(), largest * 1_000_000))


def _cleaned_batch(fb, offset_map: dict[bytes, int], now_ms: int, delete_retention_ms: int,  # noqa: ANN001
                   stats: CleanStats, survivors: DirtySurvivors | None, rules: CleaningRules,
                   txns: TxnCleaning) -> bytes | None:
    """The batch as it is to be written: None if it stays byte for byte, b"" if it goes (Kafka's
    cleanInto filter: checkBatchRetention, then shouldRetainRecord for each record)."""
    header = fb.header
    if header.is_control:
        records = fb.records()
        discardable = txns.on_marker(header, records)
        # (a marker waits for its delete horizon, as a tombstone does)
        discard = discardable and header.has_delete_horizon and header.base_timestamp <= now_ms
    else:
        records = None
        discardable = discard = txns.on_batch(header)  # an aborted transaction's
    retain_empty = rules.retain_empty(header)
    if discard and not retain_empty:
        stats.records_read += header.records_count
        stats.records_removed += header.records_count
        return b""  # BatchRetention.DELETE
    if discard:
        stats.records_read += header.records_count
        stats.records_removed += header.records_count
        return None if not header.records_count and not header.has_delete_horizon else encode_cleaned_batch(
            header, [], None)
    if header.is_control:
        if not records:
            return None if retain_empty else b""
        if discardable and not header.has_delete_horizon:  # the marker of a transaction gone: its horizon
            return encode_cleaned_batch(header, records, now_ms + delete_retention_ms)
        return None
    if (survivors is not None and header.base_offset >= survivors.first_dirty and header.records_count
            and not survivors.any_in(header.base_offset, header.last_offset)):
        stats.records_read += header.records_count
        stats.records_removed += header.records_count
        return encode_cleaned_batch(header, [], None) if retain_empty else b""
    return _clean_batch(header, fb.records(), offset_map, now_ms, delete_retention_ms, stats, retain_empty)


def _copy_range(segment: LogSegment, out, length: int,  # noqa: ANN001 - a binary file
                throttler: Throttler | None = None) -> None:
    position = 0
    while position < length:
        chunk = segment.read_bytes(position, min(READ_BYTES, length - position))
        if not chunk:
            raise CorruptLogError("segment shrank while being compacted", segment.log_path, position)
        out.write(chunk)
        position += len(chunk)
        if throttler is not None:
            throttler.maybe_throttle(2 * len(chunk))  # read, then written


def _segment_end_offset(log: PartitionLog, segment: LogSegment) -> int:
    i = log.bases.index(segment.base_offset)
    return log.bases[i + 1]


def _clean_batch(header: BatchHeader, records: list, offset_map: dict[bytes, int], now_ms: int,
                 delete_retention_ms: int, stats: CleanStats, retain_empty: bool = True) -> bytes | None:
    """The data batch rewritten with only the records that stay; None if it stays as it is; b""
    if none stays and it is not to stay empty (`retain_empty`)."""
    stats.records_read += len(records)
    horizon = header.base_timestamp if header.has_delete_horizon else None
    expired = horizon is not None and now_ms >= horizon
    kept = []
    tombstones = 0
    get = offset_map.get
    for r in records:
        key = r[2]
        if key is None or r[0] < get(key, -1):
            continue
        if r[3] is None:
            if expired:
                stats.tombstones_removed += 1
                continue
            tombstones += 1
        kept.append(r)
    stats.records_removed += len(records) - len(kept)
    if not kept:
        if not retain_empty:
            return b""  # BatchRetention.DELETE_EMPTY
        if not records and not header.has_delete_horizon:
            return None  # (already Kafka's empty batch)
        return encode_cleaned_batch(header, [], None)
    if len(kept) == len(records) and (tombstones == 0 or horizon is not None):
        return None
    if tombstones and horizon is None:
        horizon = now_ms + delete_retention_ms
    return encode_cleaned_batch(header, kept, horizon)


def encode_cleaned_batch(header: BatchHeader, records: list, horizon: int | None) -> bytes:
    """A batch with `header`'s base offset, lastOffsetDelta, codec, timestamp type and producer fields,
    holding `records` (decoded tuples) at their own offsets (offset deltas with gaps)."""
    attributes = header.attributes & ~DELETE_HORIZON_FLAG_MASK
    log_append_time = bool(attributes & TIMESTAMP_TYPE_MASK)
    if horizon is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
        base_timestamp = horizon
    else:
        base_timestamp = records[0][1] if records else -1
    if log_append_time or not records:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(r[1] for r in records)
    if not records:
        attributes &= ~COMPRESSION_CODEC_MASK  # Kafka's empty batch: no records section, no codec
    return codec.write_batch(
        [(key, value, headers, ts) for _, ts, key, value, headers in records],
        offset_deltas=[r[0] - header.base_offset for r in records],
        base_offset=header.base_offset, attributes=attributes, last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp, max_timestamp=max_timestamp, leader_epoch=header.leader_epoch,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch, base_sequence=header.base_sequence)


# -- the swap ------------------------------------------------------------------------------------
def swap_in(log: PartitionLog, cleaned: list[CleanedSegment]) -> None:
    """Replace the segments of `log` by their fsynced rewrites, crash-safely (see the module doc), each
    step for every segment before the next, so that the partition's lock (held) costs three directory
    fsyncs, not three per segment."""
    if not cleaned:
        return
    log.mark_cleaned()  # (first: whatever is swapped in, readers take its gaps from now on)
    for c in cleaned:  # the state recovery rolls back: a .log.cleaned
        for suffix, temp in zip(SWAPPED_SUFFIXES, c.temps, strict=True):
            os.replace(temp, c.final(suffix) + CLEANED_SUFFIX)
        with _temps_lock:
            _temps_in_progress.difference_update(c.temps)
        faults.point("cleaned-written")
    fsync_dir(log.directory)
    for c in cleaned:
        os.replace(c.final(INDEX_SUFFIX) + CLEANED_SUFFIX, c.final(INDEX_SUFFIX) + SWAP_SUFFIX)
        faults.point("swap-partial")
        os.replace(c.final(TIME_INDEX_SUFFIX) + CLEANED_SUFFIX, c.final(TIME_INDEX_SUFFIX) + SWAP_SUFFIX)
        os.replace(c.final(LOG_SUFFIX) + CLEANED_SUFFIX, c.final(LOG_SUFFIX) + SWAP_SUFFIX)  # its commit point
        faults.point("swap-renamed")
    fsync_dir(log.directory)
    for c in cleaned:
        # indexes before the log: a reader notices the new log by its inode and then reloads the indexes
        os.replace(c.final(INDEX_SUFFIX) + SWAP_SUFFIX, c.final(INDEX_SUFFIX))
        os.replace(c.final(TIME_INDEX_SUFFIX) + SWAP_SUFFIX, c.final(TIME_INDEX_SUFFIX))
        faults.point("index-replaced")
        os.replace(c.final(LOG_SUFFIX) + SWAP_SUFFIX, c.final(LOG_SUFFIX))
        faults.point("log-replaced")
        log.segments[c.base_offset].close()
        _write_txn_index(log.directory, c.base_offset, list(c.txn_index))
    fsync_dir(log.directory)


def _write_txn_index(directory: str, base: int, entries: list[AbortedTxn]) -> None:
    """The rewritten segment's `.txnindex` (Kafka writes the cleaned segment's with it), only where it
    changes. After the log's swap and not fsynced, as every `.txnindex` write: the markers are the
    truth (a crash before it leaves an entry whose marker stays, or whose marker went, which
    read_committed readers take as a range of removed batches, and `klog verify --repair` drops)."""
    try:
        same = read_txn_index(directory, base) == (entries or None)
    except KlogError:  # a symbolic link in its place: write_txn_index replaces the link
        same = False
    if not same:
        write_txn_index(directory, base, entries)


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "xb", opener=nofollow_opener) as f:  # a .cleaning file: never another cleaner's
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _index_entries(layout: list[tuple[int, BatchHeader]], base_offset: int,
                   interval_bytes: int) -> tuple[bytes, bytes]:
    """Offset and time index for a sealed segment of these batches (index.IndexBuilder's rule)."""
    return IndexBuilder(base_offset, interval_bytes).add_all(layout)


# -- one partition -------------------------------------------------------------------------------
Identity = tuple[int, int, int, int]  # a log file's (device, inode, size, mtime ns)


def _identity(path: str) -> Identity | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class ReplicaCleaning:
    """One replica's part of a cleaning: the segments it read (by identity) and what it rewrote."""

    directory: str
    identities: dict[int, Identity]  # base -> its log file when the cleaning began, every segment below the end
    ends: dict[int, int]  # base -> the next segment's base
    cleaned: list[CleanedSegment] = field(default_factory=list)
    stats: CleanStats = field(default_factory=CleanStats)

    def changed(self, log_start: int) -> bool:
        """Anything read was rewritten, truncated or deleted since, other than segments retention or
        delete-records removed below `log_start` (a prefix: what the cleaning took from them is gone too)."""
        for base, identity in self.identities.items():
            now = _identity(os.path.join(self.directory, segment_file_name(base, LOG_SUFFIX)))
            if now != identity and not (now is None and self.ends[base] <= log_start):
                return True
        return False


@dataclass
class Cleaning:
    """The cleaned segments of every replica, built without the partition's lock, to be swapped in under it."""

    replicas: list[ReplicaCleaning]
    abandoned: bool = False  # the segments changed while they were read: nothing to swap in

    @property
    def stats(self) -> CleanStats:
        return self.replicas[0].stats if self.replicas else CleanStats()

    def discard(self) -> None:
        for r in self.replicas:
            discard(r.cleaned)


def damage_blocks_compaction(topic: str, partition: int, error: CorruptLogError) -> CorruptLogError:
    """The one-line error of a compaction stopped by damage kept in the log (recovery keeps a bad
    batch below the high watermark in place; the cleaner never rewrites, and so never cuts, what it
    cannot read): the partition, the offset, and the way past it."""
    where = ", ".join(x for x in (error.path, None if error.position is None else f"position {error.position}") if x)
    at = f" at offset {error.offset}" if error.offset is not None else ""
    out = CorruptLogError(
        f"cannot compact {topic}-{partition}: a damaged batch{at} ({error.reason}" + (f"; {where}" if where else "")
        + f"): `klog verify --repair --discard-damaged {topic}` discards its offsets (their bytes kept in a "
        ".corrupt file; copy the partition's folder first to keep it as it is), then compaction goes on")
    out.path, out.position, out.offset = error.path, error.position, error.offset
    return out


def build_cleaning(replicas: list[tuple[str, LogConfig]], rng: CleanableRange, now_ms: int, delete_retention_ms: int,
                   throttler: Throttler | None = None, aborted: list[AbortedTxn] | None = None,
                   producer_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> Cleaning:
    """Kafka's Cleaner.clean, off the log's lock: one offset map built from the first replica (the
    leader), then every replica's sealed segments below rng.first_uncleanable rewritten into temporary
    files with it (the same records stay in each). Reads go through logs of its own: the writer only
    appends to the active segment, which is never cleaned. `replicas`: (directory, config) of each;
    the caller fsynced their sealed segments (finish_flushes) under the lock first. `aborted`: the
    log's aborted transactions below rng.first_uncleanable (the range must end at or before the
    last stable offset: no transaction in it still open); their batches go, and stay out of the
    offset map (build_offset_map). The active producers (active_producers, read from the leader
    off the lock: a batch appended meanwhile only keeps more) keep their last batches."""
    views = [PartitionLog(directory, config) for directory, config in replicas]
    cleaning = Cleaning([])
    try:
        for view in views:
            remove_stale_temps(view.directory)
            bases = sealed_bases(view, rng.first_uncleanable)
            identities = {b: i for b in bases if (i := _identity(view.segments[b].log_path)) is not None}
            ends = {b: view.bases[view.bases.index(b) + 1] for b in identities}
            cleaning.replicas.append(ReplicaCleaning(view.directory, identities, ends))
        try:
            aborted = aborted or []
            offset_map = build_offset_map(views[0], rng.first_dirty, rng.first_uncleanable, throttler,
                                          aborted_filter(aborted) if aborted else None)
            rules = CleaningRules(rng.first_uncleanable, active_producers(views[0], now_ms, producer_expiration_ms),
                                  aborted)
            for view, replica in zip(views, cleaning.replicas, strict=True):
                replica.cleaned = clean_log(view, offset_map, rng.first_uncleanable, now_ms, delete_retention_ms,
                                            replica.stats, first_dirty=rng.first_dirty, throttler=throttler,
                                            bases=list(replica.identities), rules=rules)
        except (OSError, CorruptLogError):
            if not any(r.changed(-1) for r in cleaning.replicas):
                raise  # damage, not a race
            cleaning.discard()  # retention or another cleaner moved the segments while they were read
            cleaning.abandoned = True
    except BaseException:
        cleaning.discard()
        raise
    finally:
        for view in views:
            view.close()
    return cleaning


def swap_cleaned(replicas: list[PartitionLog], cleaning: Cleaning, log_start: int) -> bool:
    """Kafka's replaceSegments, under the partition's lock: if every segment the cleaning read is
    still the one it read (or went below `log_start`), swap each cleaned segment in (crash-safely,
    see the module doc) and True; else nothing, and False (the next pass cleans again)."""
    if ([r.directory for r in replicas] != [c.directory for c in cleaning.replicas]
            or any(c.changed(log_start) for c in cleaning.replicas)):
        cleaning.abandoned = True
        return False
    for replica, part in zip(replicas, cleaning.replicas, strict=True):
        replica.refresh_segments()
        # a segment gone is one deleted below the log start meanwhile (its rewrite is discarded)
        swap_in(replica, [c for c in part.cleaned if c.base_offset in replica.segments])
        replica.refresh_segments()
    return True


# -- the cleaner checkpoint ----------------------------------------------------------------------
class CleanerCheckpoint:
    """The first dirty offset of one partition, in a small text file beside its state file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> int:
        try:
            with open(self.path) as f:
                return max(0, int(f.read().strip() or 0))
        except (FileNotFoundError, ValueError):
            return 0  # unknown: everything is dirty, which only costs a longer cleaning

    def write(self, offset: int) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

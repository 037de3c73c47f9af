"""Transactions as Kafka stores them: end-transaction markers, aborted ranges, the LSO.

A transactional producer's batches carry attribute bit 4 (isTransactional) and its producer id.
The transaction ends with a control batch (bit 5) holding one control record:
key = version int16, type int16 (0 ABORT, 1 COMMIT); value = version int16, coordinatorEpoch int32.

A read_committed reader (Kafka's isolation.level=read_committed) skips the records of aborted
transactions: those of producer P from P's first transactional offset up to P's ABORT marker.
Kafka keeps these ranges in each segment's `.txnindex` (AbortedTxn entries, 34 bytes:
version int16, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64);
klog rebuilds them from the batches when a segment has none, which gives the same ranges.
The last stable offset (LSO) is the first offset of the oldest transaction still open (or the
high watermark): read_committed readers never read past it.
"""

from __future__ import annotations

import bisect
import os
import stat
import struct
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from klog.errors import CorruptLogError
from klog.store.format import TRANSACTIONAL_FLAG_MASK, TXN_INDEX_SUFFIX, parse_segment_base, segment_file_name
from klog.store.names import open_nofollow
from klog.store.plain import FrozenPlain

if TYPE_CHECKING:
    from klog.store.codec import BatchHeader

ABORT = 0
COMMIT = 1
MARKER_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT"}
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
ABORTED_TXN = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def control_marker(key: bytes | None, value: bytes | None) -> tuple[str, int]:
    """(COMMIT|ABORT or UNKNOWN(type), coordinatorEpoch) of a control record."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return "UNKNOWN", -1
    _, kind = _CONTROL_KEY.unpack_from(key)
    epoch = _CONTROL_VALUE.unpack_from(value)[1] if value is not None and len(value) >= _CONTROL_VALUE.size else -1
    return MARKER_NAMES.get(kind, f"UNKNOWN({kind})"), epoch


def is_transactional(attributes: int) -> bool:
    return bool(attributes & TRANSACTIONAL_FLAG_MASK)


class AbortedTxn(FrozenPlain):
    _fields = ("producer_id", "first_offset", "last_offset", "last_stable_offset")
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int

    def __init__(self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int = -1) -> None:
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "first_offset", first_offset)
        object.__setattr__(self, "last_offset", last_offset)
        object.__setattr__(self, "last_stable_offset", last_stable_offset)

    def pack(self) -> bytes:
        return ABORTED_TXN.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def read_txn_index(folder: str, base_offset: int) -> list[AbortedTxn] | None:
    """The segment's `.txnindex` entries, or None when it has none (or an unreadable one).
    Raises SymlinkError for a symbolic link (as for every file of a store: a link to a FIFO or
    /dev/zero stalled the reader or read without end); a file that is not a regular one is
    unreadable."""
    path = os.path.join(folder, segment_file_name(base_offset, TXN_INDEX_SUFFIX))
    try:
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) % ABORTED_TXN.size:
        return None
    out = []
    for at in range(0, len(data), ABORTED_TXN.size):
        version, pid, first, last, lso = ABORTED_TXN.unpack_from(data, at)
        if version != 0:
            return None
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnTracker:
    """Open transactions, fed transactional batches in offset order (the rebuild of Kafka's
    producer state that recovery does for the .txnindex): read_committed's walk (StableView) and
    `verify`'s (inspect.check_segment) both."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction

    def data(self, producer_id: int, offset: int) -> None:
        self.open.setdefault(producer_id, offset)

    def marker(self, producer_id: int, offset: int, kind: int) -> AbortedTxn | None:
        """The marker at `offset` ends the producer's transaction: the aborted range it closes, as
        Kafka's .txnindex entry holds it (its last stable offset: the first offset of the oldest
        transaction still open, else the marker's offset + 1), or None (a commit, or no data of
        the transaction seen: Kafka indexes no empty transaction)."""
        first = self.open.pop(producer_id, None)
        if kind != ABORT or first is None:
            return None
        return AbortedTxn(producer_id, first, offset, min([offset + 1, *self.open.values()]))

    def first_unstable_offset(self) -> int | None:
        return min(self.open.values()) if self.open else None


def aborted_filter(aborted: Iterable[AbortedTxn]) -> Callable[[BatchHeader], bool]:
    """A predicate: is this batch data of one of the `aborted` transactions? (StableView.aborted
    over a copy of its ranges: for the cleaner, which reads without the view's lock.)"""
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for a in aborted:
        bisect.insort(by_pid.setdefault(a.producer_id, []), (a.first_offset, a.last_offset))
    return lambda header: _in_aborted_range(by_pid, header)


def _in_aborted_range(by_pid: dict[int, list[tuple[int, int]]], header: BatchHeader) -> bool:
    """Is the batch a transaction's data within one of its producer's aborted (first, last) ranges
    (sorted)?"""
    if not is_transactional(header.attributes) or header.is_control:
        return False
    ranges = by_pid.get(header.producer_id)
    if not ranges:
        return False
    offset = header.base_offset
    at = bisect.bisect_right(ranges, (offset, 2**63)) - 1
    return any(first <= offset <= last for first, last in ranges[max(0, at - 1):at + 1])


def control_batch(producer_id: int, producer_epoch: int, kind: int, coordinator_epoch: int, timestamp_ms: int,
                  leader_epoch: int = 0) -> bytes:
    """An end-transaction marker as Kafka writes it: a control batch (attributes transactional |
    control) of the producer's id and epoch, base sequence -1, holding one control record whose
    key is (version 0, type) and value (version 0, coordinatorEpoch)."""
    from klog.store import codec
    from klog.store.format import CONTROL_FLAG_MASK

    record = (_CONTROL_KEY.pack(0, kind), _CONTROL_VALUE.pack(0, coordinator_epoch), (), timestamp_ms)
    return codec.write_batch([record], base_offset=0, attributes=TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK,
                             last_offset_delta=0, base_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
                             leader_epoch=leader_epoch, producer_id=producer_id, producer_epoch=producer_epoch)


def append_txn_index(folder: str, base_offset: int, entry: AbortedTxn) -> None:
    """Append one AbortedTxn to the segment's `.txnindex` (Kafka's TransactionIndex.append). Not
    fsynced: the markers are the truth, and readers add any entry a crash lost (StableView)."""
    path = os.path.join(folder, segment_file_name(base_offset, TXN_INDEX_SUFFIX))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size % ABORTED_TXN.size:  # a torn entry from a crash: cut it off, Kafka's sanity check
            os.ftruncate(fd, size - size % ABORTED_TXN.size)
        os.write(fd, entry.pack())
    finally:
        os.close(fd)


def write_txn_index(folder: str, base_offset: int, entries: list[AbortedTxn]) -> None:
    """Replace the segment's `.txnindex` with `entries` (`verify --repair`'s rebuild from the
    markers); none: an empty file where one was, no new file. Not fsynced, as append_txn_index."""
    path = os.path.join(folder, segment_file_name(base_offset, TXN_INDEX_SUFFIX))
    if os.path.islink(path):  # a link planted in its place: the link goes, never what it points to
        os.unlink(path)
    elif not entries and not os.path.exists(path):
        return
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        packed = b"".join(entry.pack() for entry in entries)
        written = os.write(fd, packed)
        if written != len(packed):
            raise OSError(f"short write to {path}: {written} of {len(packed)} bytes")
    finally:
        os.close(fd)


# the transactional batches of a scan, kind DATA or a marker
DATA = -1


def batch_event(read, pos: int, header, path: str | None = None) -> int | None:  # noqa: ANN001 - Read, BatchHeader
    """DATA, COMMIT or ABORT for a transactional batch (a control batch's record decoded, read with
    `read(position, length)`: the pinned file its header was found in), else None. A control
    batch that fails its CRC is damage (CorruptLogError): taken as no marker, it left its
    transaction open, and read_committed readers stopped at the transaction's first offset with
    exit 0."""
    if not is_transactional(header.attributes):
        return None
    if not header.is_control:
        return DATA
    from klog.store import codec, validate  # (codec is heavy on import; txn is imported by readers only)

    data = read(pos, header.size)
    problem = validate.crc_problem(data, 0, header)
    if problem is not None:
        raise CorruptLogError(problem, path, pos, header.base_offset)
    records = codec.decode_batch_records(data, 0, header)
    if records:
        name, _ = control_marker(records[0][2], records[0][3])
        return COMMIT if name == "COMMIT" else ABORT if name == "ABORT" else None
    return None


# a view saves its walk (txn_cache) once it walked this many offsets past the saved one: a first walk
# of a long log saves, a walk of a few batches does not (a file write per refresh)
SAVE_AFTER_OFFSETS = 10_000
INDEX_LISTING_AHEAD = 16  # segments ahead of a walk from which one listing beats a failed open each
# the `.log` files the event loop looks at (an lstat each) to trust a read_committed view whose
# folder changed just before its last refresh (a roll, a new topic); more: the thread pool refreshes
INLINE_FILE_LOOKS_MAX = 8
# the event loop looks at a view's folder (known_lso: an lstat, ~3-6 us here) at most once in this
# many seconds: another process's cleaning is noticed within it, as its appends are (the watcher)
INLINE_FOLDER_LOOK_S = 0.02


class StableView:
    """read_committed over one replica (a PartitionLog): the last stable offset below a bound (the
    high watermark) and which transactional batches were aborted.

    Maintained incrementally, as Kafka's ProducerStateManager does: the first refresh walks the
    batch headers of every segment once; each later one reads only the headers appended since
    (usually none or a few), so a fetch costs the same at 100,000 batches as at 10. Aborted ranges
    come from the ABORT markers, joined with each segment's `.txnindex` (a Kafka log compacted
    after its transactions may keep the range there only). A segment that shrank or was replaced
    (truncation, a swap) starts the walk over; segments deleted from the front (retention) only
    drop the ranges that ended before the new log start.

    A cleaning swaps rewritten files in for sealed segments the walk is long past. This process's
    cleaner says so (segments_rewritten); another process's (`klog topics compact` beside `klog
    serve`) is noticed by the folder's change time, as a writer notices another's changes (the
    replica state file's trust record, klog.store.log): while the folder is as the last refresh
    found it, no file in it was replaced; once it changed (a roll, retention, a swap), the `.log`
    files walked are looked at again (one lstat each), and one that is another file now starts
    the walk over."""

    def __init__(self, replica) -> None:  # noqa: ANN001 - PartitionLog
        self.replica = replica
        self._reset()

    def segments_rewritten(self) -> None:
        """A cleaning swapped rewritten segments in (the walk notices a replaced segment only where
        it is): walk everything again, so that an aborted transaction whose batches and ABORT
        marker the cleaner removed is no longer named (Kafka's reads name those of the rewritten
        .txnindex files)."""
        self._reset()

    def _reset(self) -> None:
        self.tracker = TxnTracker()
        self._seen: set[tuple[int, int]] = set()  # (producer id, marker offset) of the aborted ranges kept
        self.aborted_txns: list[AbortedTxn] = []  # by marker offset
        self._by_pid: dict[int, list[tuple[int, int]]] = {}
        self._scan_base: int | None = None  # segment the walk is in
        self._scan_pos = 0  # and where in it
        self._scan_ino: int | None = None
        self._next_offset = 0  # offsets below this are walked
        self._indexed: set[int] = set()  # segments whose .txnindex was read
        # .txnindex entries the walk has not reached the marker offset of yet, by that offset:
        # taken only once the log agrees (see _settle_indexed)
        self._unconfirmed: dict[int, list[AbortedTxn]] = {}
        self._lso = 0
        self._front = 0  # the first segment as of the last refresh
        self._walked: dict[int, int] = {}  # base offset -> inode of the `.log` the walk read
        # (inode, change time, settled) of the folder as the last refresh found it before its
        # listing (settled: a change after that look got another change time); None: unknown
        self._folder: tuple[int, int, bool] | None = None
        self._looked_until = 0.0  # (time.monotonic) known_lso trusts the folder unchanged until then
        # the saved walk (txn_cache): per segment walked whole, (inode, size, when the refresh that
        # finished it began, when the refresh that read its .txnindex began); the state at the end
        # of the last sealed one, to save when the refresh ends; the last segment the file covers
        self._sealed: dict[int, tuple[int, int, int, int]] = {}
        self._entered: dict[int, int] = {}
        self._last: tuple[int, int, BatchHeader] | None = None  # (segment, position, header) of the last batch walked
        self._saved_offset = 0  # where the saved walk this view loaded or wrote ended

    def _add_aborted(self, entry: AbortedTxn) -> None:
        key = (entry.producer_id, entry.last_offset)
        if key in self._seen:
            return
        self._seen.add(key)
        if self.aborted_txns and entry.last_offset < self.aborted_txns[-1].last_offset:
            bisect.insort(self.aborted_txns, entry, key=lambda a: a.last_offset)
        else:
            self.aborted_txns.append(entry)
        bisect.insort(self._by_pid.setdefault(entry.producer_id, []), (entry.first_offset, entry.last_offset))

    def _prune(self, log_start_base: int) -> None:
        """Retention removed the segments below `log_start_base`: their aborted ranges go too."""
        cut = bisect.bisect_left([a.last_offset for a in self.aborted_txns], log_start_base)
        if cut:
            for entry in self.aborted_txns[:cut]:
                self._seen.discard((entry.producer_id, entry.last_offset))
                ranges = self._by_pid.get(entry.producer_id, [])
                ranges.remove((entry.first_offset, entry.last_offset))
            del self.aborted_txns[:cut]
        self._indexed = {b for b in self._indexed if b >= log_start_base}
        for kept in (self._sealed, self._entered):
            for base in [b for b in kept if b < log_start_base]:
                del kept[base]

    def _folder_look(self) -> tuple[int, int, bool] | None:
        """The folder's (inode, change time) now, and whether that change time is settled (a
        change after this look gets another: klog.store.log._settled); None: no folder."""
        from klog.store.log import _change_ns, _settled

        before = time.time_ns()
        try:
            found = os.lstat(self.replica.directory)
        except OSError:
            return None
        changed = _change_ns(found)
        return found.st_ino, changed, _settled(changed, before)

    def _unchanged_since_refresh(self) -> bool:
        """Is every `.log` the last refresh walked still the file it read? One lstat of the
        folder: as that refresh found it, and settled then, nothing was renamed into it since. A
        change time not settled then proves nothing: the files themselves are looked at, when
        few (INLINE_FILE_LOOKS_MAX), else the answer is no."""
        now = time.monotonic()
        if now < self._looked_until:
            return True  # (looked at less than INLINE_FOLDER_LOOK_S ago)
        seen = self._folder
        if seen is None:
            return False
        try:
            found = os.lstat(self.replica.directory)
        except OSError:
            return False
        if found.st_ino != seen[0] or found.st_ctime_ns != seen[1]:
            return False
        if not seen[2] and (len(self._walked) > INLINE_FILE_LOOKS_MAX or self._rewritten_since_walked()):
            return False
        self._looked_until = now + INLINE_FOLDER_LOOK_S
        return True

    def _rewritten_since_walked(self) -> bool:
        """Is a `.log` the walk read another file now (another process's cleaning swapped it)?
        A segment no longer listed is forgotten (retention deleted it, a cleaning merged it into
        the segment before it, whose file is then another)."""
        walked = self._walked
        segments = self.replica.segments
        for base in [b for b in walked if b not in segments]:
            del walked[base]
        for base, inode in walked.items():
            try:
                found = os.lstat(segments[base].log_path).st_ino
            except FileNotFoundError:
                continue  # deleted since the listing: the next one drops it
            if found != inode:
                return True
        return False

    def refresh(self, bound: int) -> int:
        """Walk the batches below `bound` not walked yet; returns the last stable offset."""
        replica = self.replica
        began = time.time_ns()
        folder = self._folder_look()  # (before the listing: a change after it gets another change time)
        replica.refresh_segments()
        seen = self._folder
        if (folder is None or seen is None or not seen[2] or folder[:2] != seen[:2]) and self._rewritten_since_walked():
            self._reset()
        bases = replica.bases
        if not bases:
            self._reset()
            self._lso = bound
            return bound
        if self._scan_base is not None and self._scan_base not in replica.segments:
            if self._scan_base < bases[0]:  # everything walked so far was deleted: start at the new front
                self._scan_base, self._scan_pos, self._scan_ino = None, 0, None
                self._prune(bases[0])
            else:
                self._reset()
        elif bases[0] > self._front:
            self._prune(bases[0])
        self._front = bases[0]
        if self._scan_base is None:
            self._scan_base = bases[0]
            if not self._walked and not self.tracker.open and not self.aborted_txns:
                self._load_saved(bases, bound, began)
        self._skip_absent_indexes(bases)
        while True:
            base = self._scan_base
            self._entered.setdefault(base, began)
            segment = replica.segments[base]
            try:
                # One file for the walk: a cleaner's swap meanwhile would put the rewritten file
                # under _scan_pos, a position in the old one (a shifted header: "damage")
                opened, size = segment.pin()
            except FileNotFoundError:  # deleted since the listing: look again next time
                break
            try:
                inode = segment._log_inode  # (pin made it the pinned file's: no fstat more per refresh)
                replaced = self._scan_ino is not None and (inode != self._scan_ino or size < self._scan_pos)
                if not replaced:
                    self._scan_ino = inode
                    stopped = self._walk(segment, opened, size, bound)
            finally:
                opened.release()
            if replaced:
                self._reset()  # truncated or replaced: walk everything again
                return self.refresh(bound)
            self._walked[base] = inode
            at = bisect.bisect_right(bases, base)  # (not a scan of `bases` per segment: O(segments^2) on a first walk)
            if stopped:
                break
            if at == len(bases):
                if max(self._next_offset, base) < bound:
                    self._walk_cut(segment, bound)
                break
            if self._scan_pos != size:
                self._walk_cut(segment, bound)
            self._sealed[base] = (inode, size, began, self._entered.get(base, began))
            self._scan_base, self._scan_pos, self._scan_ino = bases[at], 0, None
        self._lso = self._first_unstable(bound)
        self._folder, self._looked_until = folder, 0.0
        if self._next_offset - self._saved_offset >= SAVE_AFTER_OFFSETS and not self._unconfirmed:
            self._save(bases)
        return self._lso

    def _cache_path(self) -> str | None:
        """The partition's saved walk (txn_cache), if the replica belongs to a store's Partition."""
        return getattr(self.replica, "txn_view_path", None)

    def _load_saved(self, bases: list[int], bound: int, began: int) -> None:
        """A fresh view: start where the saved walk ended, if it is provably this log's (txn_cache)."""
        path = self._cache_path()
        if path is None:
            return
        from klog.store import txn_cache

        saved = txn_cache.load(path, self.replica, bases, bound)
        if saved is None:
            return
        self.tracker.open = dict(saved.open)
        for entry in saved.aborted:
            self._add_aborted(entry)
        self._prune(bases[0])
        self._walked = {b: inode for b, (inode, _) in saved.segments.items()}
        self._indexed = set(saved.segments)
        # (unchanged since a refresh before this one walked them: as if walked whole by this one)
        self._sealed = {b: (inode, size, began, began) for b, (inode, size) in saved.segments.items()}
        base, inode, position = saved.last[:3]
        self._walked[base] = inode
        self._indexed.add(base)
        self._scan_base, self._scan_pos, self._scan_ino = base, position, inode
        self._next_offset = self._saved_offset = saved.next_offset

    def _save(self, bases: list[int]) -> None:
        """Save the state the walk reached (txn_cache), once it walked SAVE_AFTER_OFFSETS offsets
        past the saved one: a first walk of a long log, then now and then as the log grows."""
        path = self._cache_path()
        last = self._last
        base = self._scan_base
        if path is None or last is None or last[0] != base or not self._scan_pos:
            return  # (nothing walked in the segment the walk is in yet: the next refresh)
        from klog.store import txn_cache

        sealed = self._sealed
        covered = bases[:bisect.bisect_left(bases, base)]
        if any(b not in sealed for b in covered):
            return  # (walked partly before a prune)
        position, header = last[1], last[2]
        if position + header.size != self._scan_pos:
            return
        if txn_cache.save(path, self.replica, [(b, *sealed[b]) for b in covered],
                          (base, self._scan_ino, self._scan_pos, position, header.base_offset, header.crc),
                          self._next_offset, self.tracker.open, self.aborted_txns):
            self._saved_offset = self._next_offset

    def _skip_absent_indexes(self, bases: list[int]) -> None:
        """Take as read the `.txnindex` of the sealed segments ahead of the walk that have none, from
        one listing of the folder, when the walk has many ahead (a first walk): an open that fails
        per segment cost more (5,000 of them: ~0.5 s of CPU here). The active segment's is always
        opened: its entry is written after the marker a walk may already read. A sealed segment's
        was written before the roll that sealed it (under the partition's lock with its marker)."""
        start = bisect.bisect_left(bases, self._scan_base)
        if len(bases) - start < INDEX_LISTING_AHEAD or bases[-2] in self._indexed:
            return
        try:
            names = os.listdir(self.replica.directory)
        except OSError:
            return  # (each is opened, as before)
        with_index = {parse_segment_base(n) for n in names if n.endswith(TXN_INDEX_SUFFIX)}
        self._indexed.update(b for b in bases[start:-1] if b not in with_index)

    def _walk_cut(self, segment, bound: int) -> None:  # noqa: ANN001 - LogSegment
        """The walk stopped at a batch it cannot read (damage, a cut file) before the bound: what
        lies beyond is unknown, a marker among it. Going on from the next segment (or answering
        with what was walked) left a committed transaction open, and read_committed readers stopped
        at its first offset with exit 0: a silent short read. It is an error, as for any reader."""
        position = self._scan_pos
        self._reset()  # (the next refresh walks again: the damage may be repaired)
        raise CorruptLogError(f"read_committed cannot walk the batches below the high watermark {bound}",
                              segment.log_path, position)

    def _walk(self, segment, opened, size: int, bound: int) -> bool:  # noqa: ANN001 - LogSegment, OpenLog
        """Walk the pinned file `opened` (`size` bytes) from _scan_pos up to `bound`; True if
        the walk stopped at the bound."""
        base = segment.base_offset
        if base not in self._indexed:
            self._indexed.add(base)
            for entry in read_txn_index(self.replica.directory, base) or ():
                if entry.last_offset >= base:  # (Kafka indexes a range in its marker's segment)
                    self._unconfirmed.setdefault(entry.last_offset, []).append(entry)
        while True:
            last = None  # (position, header) of the last batch walked
            try:
                for pos, header in segment.iter_headers(self._scan_pos, size, opened.read):
                    if header.base_offset >= bound:
                        if last is not None:
                            self._last = (base, *last)
                        if max(self._next_offset, base) < bound:
                            # a base offset damage raised past the bound: the batches below it are unknown
                            self._walk_cut(segment, bound)
                        return True
                    kind = batch_event(opened.read, pos, header, segment.log_path)
                    self._settle_indexed(header, kind)
                    if kind == DATA:
                        self.tracker.data(header.producer_id, header.base_offset)
                    elif kind is not None:
                        ended = self.tracker.marker(header.producer_id, header.base_offset, kind)
                        if ended is not None:
                            self._add_aborted(ended)
                    self._scan_pos = pos + header.size
                    self._next_offset = header.next_offset
                    last = (pos, header)
            except CorruptLogError:
                if last is not None:
                    self._last = (base, *last)  # (the save's last batch walked: kept per walk, not per batch)
                if not self._past_length_damage(segment, opened, size, last):
                    raise
                continue
            if last is not None:
                self._last = (base, *last)
            if self._scan_pos >= size or not self._past_length_damage(segment, opened, size, last):
                return False

    def _past_length_damage(self, segment, opened, size: int, last) -> bool:  # noqa: ANN001 - LogSegment, OpenLog
        """The walk stopped short of `size` after the batch `last` (position, header), a data batch
        that fails its CRC: a flipped bit in its length led the walk into garbage (damage recovery
        keeps in place). When the next valid batch (resume.resume_after) starts at that batch's
        next offset, nothing but it is unknown (its header was read: a damaged marker raised
        already), and the walk goes on there; True. Else (False) the walk stops, an error as before."""
        if last is None:
            return False
        from klog.store import codec
        from klog.store.format import MAGIC_V2

        pos, header = last
        if header.magic != MAGIC_V2 or header.is_control:
            return False
        data = opened.read(pos, header.size)
        if len(data) == header.size and codec.crc_ok(data, 0, header):
            return False
        resumed = segment.resume_after_damage(pos, header.base_offset, None, opened.read, size)
        if resumed is None or resumed.header.base_offset != header.next_offset or resumed.position <= pos:
            return False
        self._scan_pos = resumed.position
        return True

    def _settle_indexed(self, header, kind: int | None) -> None:  # noqa: ANN001 - BatchHeader
        """Take or drop the .txnindex entries whose marker offset the walk reached at `header`.

        An entry fills in what the markers cannot tell: a range whose data or marker is gone (a
        Kafka log compacted after its transactions), or one Kafka's index holds at an ABORT marker
        of its producer. One whose end offset holds a data batch, another producer's batch or a
        COMMIT marker is no range Kafka writes (a flipped byte, a stray file): taken, it made
        read_committed readers skip committed records without a word, so it is dropped. When the
        walk saw the aborted transaction begin, its own range wins over the entry's first offset."""
        if not self._unconfirmed:
            return
        for offset in [o for o in self._unconfirmed if o <= header.last_offset]:
            entries = self._unconfirmed.pop(offset)
            if offset < header.base_offset:  # no batch holds the marker's offset any more
                for entry in entries:
                    self._take_without_marker(entry)
                continue
            at_marker = header.is_control and header.base_offset == offset
            for entry in entries:
                if not at_marker or entry.producer_id != header.producer_id or kind == COMMIT:
                    continue
                if kind != ABORT or self.tracker.open.get(entry.producer_id) is None:
                    self._add_aborted(entry)

    def _take_without_marker(self, entry: AbortedTxn) -> None:
        """An entry whose marker's offset holds no batch (cleaned away): the range it names ended
        there. A transaction of its producer the walk saw begin within it ends with it (left open,
        it held the last stable offset, and read_committed readers stopped there for good)."""
        began = self.tracker.open.get(entry.producer_id)
        if began is not None and began <= entry.last_offset:
            del self.tracker.open[entry.producer_id]
            entry = AbortedTxn(entry.producer_id, began, entry.last_offset, entry.last_stable_offset)
        self._add_aborted(entry)

    def known_lso(self, bound: int) -> int | None:
        """The last stable offset below `bound` as the last refresh left it, without reading
        anything: None unless that refresh walked every batch below `bound` (the high watermark only
        grows: nothing appended since) in the segment file it still reads (none replaced or
        deleted), and the folder is as that refresh found it (no cleaning swapped a segment in
        since, in any process: one lstat, at most every INLINE_FOLDER_LOOK_S). For the event loop,
        which must not list folders or read headers."""
        base = self._scan_base
        segment = self.replica.segments.get(base) if base is not None else None
        if segment is None or self._next_offset < bound or segment._log_inode != self._scan_ino:
            return None
        if not self._unchanged_since_refresh():
            return None
        return self._first_unstable(bound)

    def _first_unstable(self, bound: int) -> int:
        open_txns = self.tracker.open
        return min(bound, min(open_txns.values())) if open_txns else bound

    def first_open_offset(self, producer_id: int) -> int | None:
        """Where `producer_id`'s open transaction began (as of the last refresh), or None."""
        return self.tracker.open.get(producer_id)

    def aborted(self, header: BatchHeader) -> bool:
        """Is this batch part of an aborted transaction (as of the last refresh)?"""
        return _in_aborted_range(self._by_pid, header)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions a fetch of [start, end) must name (Kafka's collectAbortedTransactions:
        those whose marker is at or after start and whose first offset is below end)."""
        txns = self.aborted_txns
        at = bisect.bisect_left(txns, start, key=lambda a: a.last_offset)
        return [a for a in txns[at:] if a.first_offset < end]


def as_transactional(data: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A batch encoded at base offset 0 made a transactional producer's: attribute bit 4, the
    producer id, epoch and base sequence, and the CRC over them again."""
    from klog.store import codec
    from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET, PRODUCER_ID_OFFSET

    buf = bytearray(data)
    (attributes,) = struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attributes | TRANSACTIONAL_FLAG_MASK)
    struct.pack_into(">qhi", buf, PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence)
    struct.pack_into(">I", buf, CRC_OFFSET, codec.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)

"""LogSegment: one `.log` file joined to its `.index` and `.timeindex` (Kafka's LogSegment).

Not thread-safe; writes happen under the partition's file lock (see partition.py). Reads may
run in any process at any time: they only look at bytes below a bound the caller got from
the partition state, which is published after those bytes were written.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from klog.errors import CorruptLogError, StorageError
from klog.store import codec
from klog.store.codec import BatchHeader, read_header
from klog.store.format import (
    INDEX_SUFFIX,
    LOG_OVERHEAD,
    LOG_SUFFIX,
    MAGIC_OFFSET,
    MAGIC_V2,
    OFFSET_INDEX_ENTRY,
    RECORD_BATCH_OVERHEAD,
    RELATIVE_OFFSET_MAX,
    TIME_INDEX_ENTRY,
    TIME_INDEX_SUFFIX,
)
from klog.store.index import IndexBuilder, OffsetIndex, TimeIndex
from klog.store.limits import DECLARED_BATCH_BYTES_MAX
from klog.store.names import FILE_MODE, join_name, nofollow_opener, open_nofollow
from klog.store.plain import Plain
from klog.store.resume import Resumed, resume_after
from klog.store.validate import SegmentScan
from klog.store.walk import HEADER_CHUNK_BYTES, SCAN_CHUNK_BYTES, Read, follows, walk_batches

GapOk = Callable[[int], bool]  # may the batch at this position start above where the one before ended?
BATCH_BYTES_MAX = DECLARED_BATCH_BYTES_MAX
READ_FDS_MIN = 128  # open segment files kept by a process's readers (5,000 segments must not be 5,000 fds)
READ_FDS_MAX = 4096
READ_FDS_SHARE = 16  # ... up to this fraction of the open-file limit: a fetch of 500 partitions would
# otherwise open and close each one's segment every time (two system calls per partition)


def _read_fds_capacity() -> int:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return READ_FDS_MAX
    return max(READ_FDS_MIN, min(READ_FDS_MAX, soft // READ_FDS_SHARE))


class _ReadFdCache:
    """A bounded, least-recently-used set of segments whose `.log` is open for reading.

    A read pins the open file it reads (OpenLog) under the lock; a close (eviction here, the
    cleaner's swap, retention) of a pinned one waits for its last release, so a descriptor is
    never closed (and its number reused by another file) while a thread reads through it.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lock = threading.RLock()
        self.open: OrderedDict[LogSegment, None] = OrderedDict()

    def use(self, segment: LogSegment) -> None:
        """`segment` was just read: keep it, and close the least recently read beyond capacity."""
        try:
            self.open.move_to_end(segment)  # kept already (every read but a segment's first)
            return
        except KeyError:
            self.open[segment] = None
        if len(self.open) > self.capacity:
            self.capacity = _read_fds_capacity()  # the limit may have been raised since (a writer raises it)
        while len(self.open) > self.capacity:
            oldest, _ = self.open.popitem(last=False)
            oldest._close_read_fd()

    def shed(self) -> bool:
        """Out of descriptors: close half of ours; False if we hold none to give back."""
        n = len(self.open) // 2 or len(self.open)
        for _ in range(n):
            oldest, _ = self.open.popitem(last=False)
            oldest._close_read_fd()
        return n > 0

    def forget(self, segment: LogSegment) -> None:
        self.open.pop(segment, None)


_read_fds = _ReadFdCache(_read_fds_capacity())


def open_or_shed(path: str, flags: int, mode: int = FILE_MODE) -> int:
    """os.open, giving back cached read descriptors once if the process ran out of them; still
    out of them is a StorageError naming the limit (never "no more data")."""
    for attempt in range(2):
        try:
            return open_nofollow(path, flags, mode)
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            with _read_fds.lock:
                if attempt == 0 and _read_fds.shed():
                    continue
            raise StorageError(f"too many open files opening {path} (raise the limit: ulimit -n)") from None
    raise AssertionError("unreachable")


# the writer's descriptors of the active segment (see LogSegment.open_fds; links refused, as by open_nofollow)
_WRITE_LOG_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
_WRITE_INDEX_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW


class OpenLog:
    """One open of a segment's `.log` for reading, shared by the reads of it (the cache's
    descriptor). A read pins it (LogSegment.pin) for its whole walk, and a served fetch until
    its range is sent: a close meanwhile (the cleaner's swap replacing the file, the cache's
    eviction) only retires it, and the last release closes it (the old file's disk space is
    freed then). So every position a read found is read (and sent) from the file it was found
    in, never from a rewritten file opened at the same path. Pins are counted under the cache's
    lock; the preads through a pinned descriptor need no lock."""

    __slots__ = ("fd", "pins", "retired")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.retired = False  # closed by its segment: the descriptor goes with the last release

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def release(self) -> None:
        with _read_fds.lock:
            self.pins -= 1
            last = self.pins == 0 and self.retired
        if last:  # (no read can pin it again; the close, which may free a swapped file's blocks, is not
            os.close(self.fd)  # made under the lock the event loop's release of a sent range takes)

    def _retire(self) -> None:
        """Its segment closes it (lock held): now, or at the last release if a read holds it."""
        if self.pins:
            self.retired = True
        else:
            os.close(self.fd)


Found = tuple[int, BatchHeader, bytes, int]  # where a read starts: position, header, the chunk holding it from `at`


def _first_step(opened: OpenLog, position: int, end: int, chunk_bytes: int, path: str) -> Found | None:
    """The first batch walk_batches(opened.read, position, end) would yield, without a generator
    per read: a v2 header within the walker's bounds, whole below `end`, is taken from the one read
    the walker makes; anything else (a magic 0/1 entry, damage, a cut batch) goes to the walker
    itself, which decides it (one pread more, off the common path)."""
    n = end - position
    chunk = opened.read(position, chunk_bytes if chunk_bytes < n else n)
    if len(chunk) >= RECORD_BATCH_OVERHEAD and chunk[MAGIC_OFFSET] == MAGIC_V2:
        header = read_header(chunk)
        size = header.batch_length + LOG_OVERHEAD
        if RECORD_BATCH_OVERHEAD <= size <= DECLARED_BATCH_BYTES_MAX and position + size <= end:
            return position, header, chunk, 0
    for batch in walk_batches(opened.read, position, end, chunk_bytes=chunk_bytes, path=path):
        return batch.position, batch.header, batch.chunk, batch.at
    return None


class RecoveryResult(Plain):
    """What LogSegment.recover found: valid bytes kept, bytes cut, and why; `kept`: the damaged
    batches below the acknowledged end it left in place (KeptDamage), valid batches after each."""

    _fields = ("valid_bytes", "truncated_bytes", "next_offset", "reason", "kept")

    def __init__(self, valid_bytes: int, truncated_bytes: int, next_offset: int | None, reason: str | None,
                 kept: list[KeptDamage] | None = None) -> None:
        self.valid_bytes = valid_bytes
        self.truncated_bytes = truncated_bytes
        self.next_offset = next_offset
        self.reason = reason
        self.kept = [] if kept is None else kept


class KeptDamage(Plain):
    """A damaged batch recovery left in the segment: its bytes [position, resumed_at) hold the
    acknowledged offset `first_missing` on, and a provably valid batch starts at `resumed_at`
    (resume.resume_after), at offset `resumed_offset`; `problem` says what is wrong with it."""

    _fields = ("position", "resumed_at", "first_missing", "resumed_offset", "problem")

    def __init__(self, position: int, resumed_at: int, first_missing: int, resumed_offset: int, problem: str) -> None:
        self.position = position
        self.resumed_at = resumed_at
        self.first_missing = first_missing
        self.resumed_offset = resumed_offset
        self.problem = problem


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int = 4096) -> None:
        assert base_offset >= 0
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        # (one join for the three: a segment object is made for every segment of every folder listed)
        stem = join_name(directory, f"{base_offset:020d}")  # (segment_file_name's, without its call)
        self.log_path = stem + LOG_SUFFIX
        self.offset_index = OffsetIndex(stem + INDEX_SUFFIX, base_offset)
        self.time_index = TimeIndex(stem + TIME_INDEX_SUFFIX, base_offset)
        self._read: OpenLog | None = None  # the `.log` open for reading (in _read_fds)
        self._log_inode: int | None = None  # the .log the cached index entries belong to
        # (offset, position, the OpenLog read) where the last byte_range ended: the batch a consumer
        # asks for next starts there, found without the offset index (see _first_walked)
        self._read_end: tuple[int, int, OpenLog] | None = None
        # writer state; valid only while the partition lock is held (see load_tail_state)
        self.size = 0
        self.indexer = IndexBuilder(base_offset, index_interval_bytes)
        self.next_offset: int | None = None
        # the first batch's max timestamp (segment.ms rolls by it): known when it is appended, else read
        # once; forgotten whenever the size is set from outside (another writer, recovery, truncation)
        self.first_batch_max_timestamp: int | None = None
        # the sizes of the `.index` and `.timeindex` files as the writer knows them (None: unknown):
        # what the replica state file records for the next writer, and where appends go
        self.index_bytes: int | None = None
        self.time_index_bytes: int | None = None

    @property
    def max_timestamp(self) -> int:
        return self.indexer.max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self.indexer.offset_of_max_timestamp

    # -- files ---------------------------------------------------------------------------------
    def create_files(self) -> None:
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            fd = open_nofollow(path, os.O_CREAT | os.O_WRONLY)
            os.close(fd)

    def _open_read(self) -> OpenLog:
        """The `.log` open for reading, pinned (the caller releases it)."""
        with _read_fds.lock:
            opened = self._read
            if opened is not None:
                opened.pins += 1
                _read_fds.use(self)
                return opened
        fd = open_or_shed(self.log_path, os.O_RDONLY)  # (not under the lock: a slow disk holds this read only)
        with _read_fds.lock:
            opened = self._read
            if opened is None:
                opened = self._read = OpenLog(fd)
                fd = -1
            opened.pins += 1
            _read_fds.use(self)
        if fd >= 0:
            os.close(fd)  # another read opened it meanwhile
        return opened

    def _pin_stat(self) -> tuple[OpenLog, os.stat_result]:
        opened = self._open_read()
        try:
            return opened, os.fstat(opened.fd)
        except BaseException:
            opened.release()
            raise

    def pin(self) -> tuple[OpenLog, int]:
        """The `.log` pinned for one read (the caller releases it), and its size: every pread of
        the read goes through it, so a cleaner's swap meanwhile cannot put another file under the
        positions the read found. The size is an fstat of the descriptor (no path walk: a wide
        fetch asks once per partition). A descriptor whose file is no longer linked (replaced by
        the cleaner, deleted) is let go once, for the file now at the path (file_size notices the
        swap: the indexes reload); one opened on another file than the indexes belong to (another
        process swapped it while the cache had closed ours) reloads them. (A segment retention
        renamed to .deleted keeps being read, as Kafka reads one until file.delete.delay.ms: its
        offsets are below the log start the caller checked.)"""
        cache = _read_fds
        with cache.lock:  # (the usual case inline, _open_read's first lines: a wide fetch pins per partition)
            opened = self._read
            if opened is not None:
                opened.pins += 1
                try:
                    cache.open.move_to_end(self)  # (_ReadFdCache.use of a segment it keeps)
                except KeyError:
                    cache.use(self)
        if opened is not None:
            try:
                st = os.fstat(opened.fd)
            except BaseException:
                opened.release()
                raise
        else:
            opened, st = self._pin_stat()
        if st.st_nlink and st.st_ino == self._log_inode:
            return opened, st.st_size
        if not st.st_nlink:
            opened.release()
            self.file_size()  # it notices the swap (FileNotFoundError: the segment was deleted)
            opened, st = self._pin_stat()  # (unlinked again: another swap; still one file to read)
        if st.st_ino != self._log_inode:
            self._adopt(st.st_ino)
        return opened, st.st_size

    def _close_read_fd(self) -> None:
        opened = self._read
        if opened is not None:
            self._read = None
            opened._retire()

    def close(self) -> None:
        with _read_fds.lock:
            _read_fds.forget(self)
            self._close_read_fd()

    def file_size(self) -> int:
        st = os.stat(self.log_path)
        if st.st_ino != self._log_inode:
            if self._log_inode is not None:
                self.close()  # the cleaner swapped in a rewritten file (indexes first, then the log): reopen
            self._adopt(st.st_ino)
        return st.st_size

    def _adopt(self, inode: int) -> None:
        """The `.log` is now the file `inode`: the cached index entries were another file's."""
        if self._log_inode is not None:
            self.offset_index.forget()
            self.time_index.forget()
            self._read_end = None
        self._log_inode = inode

    def delete_files(self) -> None:
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    # -- reading -------------------------------------------------------------------------------
    def read_bytes(self, position: int, length: int) -> bytes:
        """One pread of the `.log` (for reads that need no one file across calls: see pin)."""
        if position < 0:  # a garbage index entry must not become EINVAL (or a read of the wrong place)
            raise CorruptLogError("negative file position", self.log_path, position)
        opened = self._open_read()
        try:
            return os.pread(opened.fd, length, position)
        finally:
            opened.release()

    def iter_headers(self, start: int, end: int, read: Read | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch in [start, end); stops at a partial one. `read`:
        a pinned file's (OpenLog.read), for a walk that must stay in one file."""
        for batch in walk_batches(read or self.read_bytes, start, end, path=self.log_path):
            yield batch.position, batch.header

    def pinned_headers(self, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """iter_headers over the whole `.log` (or its first `end` bytes), every read from one
        pinned file (pin): for a walk off the partition's lock, which a cleaner's swap meanwhile
        would otherwise shift onto the rewritten file. The pin goes when the walk ends or is dropped."""
        opened, size = self.pin()
        try:
            yield from self.iter_headers(0, size if end is None else min(end, size), opened.read)
        finally:
            opened.release()

    def pinned_headers_past_damage(self) -> Iterator[tuple[int, BatchHeader]]:
        """pinned_headers over the whole `.log`, going on past damage a valid batch follows (as
        recovery keeps it: resume.resume_after) instead of stopping there: the producer-state walk's,
        which stopping at kept damage left without the sequences after it (every later batch of
        those producers refused as out of order). A damaged batch whose header the walk read (its
        length flipped: the walk went on by it into garbage) still counts; a torn tail ends the walk."""
        opened, size = self.pin()
        try:
            start = 0
            while start < size:
                last: tuple[int, BatchHeader] | None = None
                stop = start
                try:
                    for pos, header in self.iter_headers(start, size, opened.read):
                        yield pos, header
                        last, stop = (pos, header), pos + header.size
                except CorruptLogError:
                    pass
                if stop >= size:
                    return
                at, first_missing = stop, self.base_offset if last is None else last[1].next_offset
                if last is not None and last[1].magic == MAGIC_V2:
                    data = opened.read(last[0], last[1].size)
                    if len(data) < last[1].size or not codec.crc_ok(data, 0, last[1]):
                        at, first_missing = last[0], last[1].base_offset  # (its length led the walk astray)
                resumed = self.resume_after_damage(at, first_missing, None, opened.read, size)
                if resumed is None or resumed.position <= start:
                    return
                start = resumed.position
        finally:
            opened.release()

    def position_for_offset(self, offset: int, end: int, read: Read | None = None) -> tuple[int, BatchHeader] | None:
        """Start of the first batch whose last offset ≥ offset, scanning from the index hint."""
        read = read or self.read_bytes
        self.offset_index.refresh()
        start = self.offset_index.lookup(offset)
        if start >= end or (start and not self._hint_ok(start, offset, read)):
            start = 0  # a stale index entry (a swap in progress): scan from the start
        for pos, header in self.iter_headers(start, end, read):
            if header.last_offset >= offset:
                return pos, header
        return None

    def first_batch(self, opened: OpenLog, offset: int, end: int, gap_ok: GapOk | None = None,
                    chunk_bytes: int = SCAN_CHUNK_BYTES) -> tuple[int, BatchHeader] | None:
        """(position, header) of the batch a read from `offset` starts at, in `opened` (pinned:
        the read goes on through it), below `end`: see _first_walked."""
        found = self._first_walked(opened, offset, end, gap_ok, chunk_bytes)
        return (found[0], found[1]) if found is not None else None

    def _first_walked(self, opened: OpenLog, offset: int, end: int, gap_ok: GapOk | None = None,
                      chunk_bytes: int = SCAN_CHUNK_BYTES) -> Found | None:
        """Where a read from `offset` starts: the first batch whose last offset ≥ offset, checked
        against the batch before it. The walk starts at the index entry below `offset`, so that
        batch is seen: it must end where this one starts, and the segment's first batch must start
        at the segment's base offset. A base offset raised or lowered by damage is then an error
        whatever offset a read starts at, not records handed out under offsets that are not
        theirs. `gap_ok(position)`: an upward gap is legal there (a compacted log)."""
        read = opened.read
        known = self._read_end
        if known is not None and known[0] == offset and known[2] is opened and 0 < known[1] < end:
            # where the last range ended (in this same open file), its last batch checked then: a
            # consumer's next fetch starts there (no index read), if a batch starting exactly at
            # `offset` is still there
            found = _first_step(opened, known[1], end, chunk_bytes, self.log_path)
            if found is not None and found[1].base_offset == offset:
                return found
        hint = 0
        if offset > self.base_offset:  # (at or below the base no entry can help: no index read)
            self.offset_index.refresh()
            hint = self.offset_index.lookup(offset - 1)  # the entry's batch ends below `offset`
        if hint >= end or (hint and not self._hint_ok(hint, offset, read)):
            hint = 0
        before = None  # the last batch walked over (its offsets are below `offset`)
        before_at = 0  # where it starts
        try:
            found = _first_step(opened, hint, end, chunk_bytes, self.log_path)
            if found is None:
                if hint >= end:
                    return None
                # the batch at `hint` runs past the end: one being appended, or a flipped bit in its
                # length (then a valid batch follows it, and the read goes on there)
                return self._past_overlong_batch(opened, offset, end, hint, self.base_offset, gap_ok, chunk_bytes)
            position, header, chunk, at = found
            if header.base_offset + header.last_offset_delta >= offset:  # (its last offset: the usual case)
                if not hint and header.base_offset != self.base_offset:  # (else _check_follows has nothing to say)
                    self._check_follows(None, 0, header, gap_ok)
                return found
            before, before_at = header, position  # the walk goes on after it, from the bytes already read
            for batch in walk_batches(read, position + header.batch_length + LOG_OVERHEAD, end,
                                      chunk_bytes=chunk_bytes, path=self.log_path, read_ahead=(position - at, chunk)):
                header = batch.header
                if header.last_offset >= offset:
                    self._check_follows(before, batch.position, header, gap_ok)
                    return batch.position, header, batch.chunk, batch.at
                before, before_at = header, batch.position
        except CorruptLogError as e:
            # damage on the way to `offset`: a read from past it starts at the first valid batch
            # after it (resume.py) if that batch is at or below `offset`; else the damage is the read's
            walked = self._past_damage_toward(opened, offset, end, e, before, gap_ok, chunk_bytes)
            if walked is None:
                walked = self._past_damaged_walked_over(opened, offset, end, before, before_at, gap_ok, chunk_bytes,
                                                        stopped=False)
            if walked is None:
                raise
            return walked
        if before is not None and before_at + before.size < end:  # the walk stopped short of the end
            return self._past_damaged_walked_over(opened, offset, end, before, before_at, gap_ok, chunk_bytes,
                                                  stopped=True)
        return None

    def _past_damaged_walked_over(self, opened: OpenLog, offset: int, end: int, before: BatchHeader | None,
                                  before_at: int, gap_ok: GapOk | None, chunk_bytes: int,
                                  stopped: bool) -> Found | None:
        """The walk toward `offset` stepped over the batch `before` (at `before_at`) by its own
        length, unchecked, into garbage (an error, or, `stopped`, what looks like a partial batch
        short of the end): when that batch fails its CRC, it is the damage (a flipped bit in its
        length field), and the read goes on past it as past any damage (None: it was whole, the
        damage is the walk's own; CorruptLogError naming it: nothing valid after it reaches
        `offset`)."""
        if before is None or before.magic != MAGIC_V2:
            return None
        data = opened.read(before_at, before.size)
        if len(data) == before.size and codec.crc_ok(data, 0, before):
            # whole: the walk stopped at the batch after it, whose length runs past the end (a
            # flipped bit in it, or a batch being appended): damage only if a valid batch follows
            stop = before_at + before.size
            if not stopped or stop >= end:
                return None
            return self._past_overlong_batch(opened, offset, end, stop, before.next_offset, gap_ok, chunk_bytes)
        damage = CorruptLogError("CRC mismatch", self.log_path, before_at, before.base_offset)
        walked = self._past_damage_toward(opened, offset, end, damage, before, gap_ok, chunk_bytes)
        if walked is None:
            raise damage
        return walked

    def _past_overlong_batch(self, opened: OpenLog, offset: int, end: int, position: int, first_missing: int,
                             gap_ok: GapOk | None, chunk_bytes: int) -> Found | None:
        """The walk toward `offset` stopped at `position`, where a batch's length runs past the
        end: a batch being appended (nothing valid after it: None, the read ends there) or a
        flipped bit in its length field (a valid batch follows it, resume.py): then the read goes
        on there, and a read from inside the damaged batch's offsets is an error naming it."""
        resumed = self.resume_after_damage(position, first_missing, None, opened.read, end)
        if resumed is None:
            return None
        damage = CorruptLogError("invalid batch header", self.log_path, position, first_missing)
        if resumed.header.base_offset > offset:
            raise damage
        walked = self._past_damage_toward(opened, offset, end, damage, None, gap_ok, chunk_bytes,
                                          first_missing=first_missing)
        if walked is None:
            raise damage
        return walked

    def _past_damage_toward(self, opened: OpenLog, offset: int, end: int, error: CorruptLogError,
                            before: BatchHeader | None, gap_ok: GapOk | None, chunk_bytes: int,
                            first_missing: int | None = None) -> Found | None:
        """The batch holding `offset` (or the first after it), walked to from the first valid
        batch after the damage `error` names, when that batch starts at or below `offset` (each
        batch on the way checked against the one before it, as the walk from an index entry is)."""
        while True:
            if error.position is None or error.path != self.log_path:
                return None
            # (the batch walked over last was not CRC-checked: its own length may have led the walk into
            # garbage, so the offsets after its base are not known to be read)
            missing = first_missing if first_missing is not None else \
                before.base_offset if before is not None and before.magic == MAGIC_V2 else self.base_offset
            first_missing = None  # (the caller's, for the first damage only)
            resumed = self.resume_after_damage(error.position, missing, None, opened.read, end)
            if resumed is None or resumed.header.base_offset > offset:
                return None
            before = None
            try:
                for batch in walk_batches(opened.read, resumed.position, end, chunk_bytes=chunk_bytes,
                                          path=self.log_path):
                    if before is not None:
                        self._check_follows(before, batch.position, batch.header, gap_ok)
                    if batch.header.last_offset >= offset:
                        return batch.position, batch.header, batch.chunk, batch.at
                    before = batch.header
            except CorruptLogError as e:
                # a further damaged batch on the way to `offset`: resume past it too (its position
                # is past this one's, so the loop ends); before, a read from past a second damage
                # in one segment failed there and --skip-damaged reported the good batches
                # between it and the read's offset as damaged
                if e.position is None or e.position <= error.position:
                    raise
                error = e
                continue
            return None

    def resume_after_damage(self, position: int, first_missing: int, upper: int | None = None,
                            read: Read | None = None, end: int | None = None,
                            end_offset: int | None = None) -> Resumed | None:
        """The first valid batch after the damaged one at `position` (resume.resume_after; None:
        none in this segment); `first_missing` is the first offset not read (the damaged batch
        holds it), `upper` the log end, `end_offset` where this segment's offsets end (if known)."""
        read = read or self.read_bytes
        if end is None:
            end = self.file_size()
        index = self.offset_index
        index.refresh()
        first = max(0, index.floor(first_missing - 1 - self.base_offset))
        positions = (index.entry_at(i)[1] for i in range(first, index.entries))
        return resume_after(read, end, self.base_offset, position, first_missing, upper, positions,
                            end_offset=end_offset)

    def _check_follows(self, before: BatchHeader | None, position: int, header: BatchHeader,
                       gap_ok: GapOk | None) -> None:
        """Raise CorruptLogError if the batch at `position` cannot follow `before` (None: the batch
        is the segment's first when `position` is 0; else unknown, as after a bad index entry)."""
        if before is None:
            if position or header.magic != MAGIC_V2 or header.base_offset == self.base_offset:
                return
            problem = f"the segment's first batch starts at offset {header.base_offset}, not {self.base_offset}"
            if header.base_offset < self.base_offset:
                raise CorruptLogError(problem, self.log_path, position, header.base_offset)
        else:
            problem = follows(before, header)
            if problem is None:
                return
        if header.base_offset > (before.next_offset if before else self.base_offset) and gap_ok is not None \
                and gap_ok(position):
            return  # compacted: the offsets between were removed by the cleaner
        raise CorruptLogError(problem, self.log_path, position, header.base_offset)

    def pinned_range(self, offset: int, upper: int, max_bytes: int, gap_ok: GapOk | None = None,
                     read_max: int = 0) -> tuple[OpenLog | None, int, int, BatchHeader, bytes | None] | None:
        """byte_range over this segment's `.log`, pinned for it (pin): (the OpenLog the range
        keeps pinned until the caller has sent it and releases it, or None when the range came
        read; position, length, first header, the bytes or None). None when the segment holds no
        batch from `offset` below `upper`, or is gone (deleted meanwhile)."""
        try:
            opened, end = self.pin()
        except FileNotFoundError:
            return None
        found = None
        try:
            if end:
                found = self.byte_range(opened, offset, upper, max_bytes, end, gap_ok, read_max)
        finally:
            if found is None or found[3] is not None:
                opened.release()  # (else the range holds the pin until it is sent)
        if found is None:
            return None
        return (opened if found[3] is None else None, *found)

    def byte_range(self, opened: OpenLog, offset: int, upper: int, max_bytes: int, end: int,
                   gap_ok: GapOk | None = None,
                   read_max: int = 0) -> tuple[int, int, BatchHeader, bytes | None] | None:
        """(position, length, first header) of the whole batches from the one holding `offset` up
        to the first batch at or above `upper`, up to `max_bytes` but never less than the first
        batch (Kafka's fetch rule).

        Every batch boundary in the range is checked by a header walk over it (the bytes are about
        to be sent, so reading them costs little more than the sendfile): the range ends before
        the first batch that does not follow on from the one before (the next fetch starts there
        and fails); a first batch that does not follow its own predecessor is a CorruptLogError
        (see first_batch).

        A range of at most `read_max` bytes comes with its bytes (else None): the walk to the first
        batch reads `read_max` bytes at once, so a range within them costs no read of its own.
        Every read is of `opened` (pinned by the caller, who sends the range from it)."""
        found = self._first_walked(opened, offset, end, gap_ok,
                                   read_max if read_max > HEADER_CHUNK_BYTES else HEADER_CHUNK_BYTES)
        if found is None:
            return None
        start, header, chunk, at = found
        if header.base_offset >= upper:
            return None
        size = header.batch_length + LOG_OVERHEAD  # (header.size, without a call)
        # the first batch is whole and checked (first_batch): the walk starts after it, so a
        # one-batch range (a consumer at the log's end) costs no second read
        before, stop = header, start + size
        whole_end = stop  # where the last whole batch of the range ends
        limit = start + (max_bytes if max_bytes > size else size)
        if limit > end:
            limit = end
        if stop < limit:
            try:
                walk = walk_batches(opened.read, stop, limit, path=self.log_path, read_ahead=(start - at, chunk))
                for batch in walk:  # (the batches within the first read are not read again)
                    h = batch.header
                    if h.base_offset >= upper:
                        break
                    self._check_follows(before, batch.position, h, gap_ok)
                    before, stop = h, batch.position + h.size
                    whole_end = stop
                else:
                    if stop < limit < end and self._cut_batch_follows(opened, before, stop, end, upper, gap_ok):
                        stop = limit  # Kafka's fetch sends the last batch cut at the budget; clients drop it
            except CorruptLogError:
                pass  # damage after the first batch: the range ends before it, the next fetch starts there and fails
        self._read_end = (before.base_offset + before.last_offset_delta + 1, whole_end, opened)  # (its next offset)
        length = stop - start
        if length > read_max:
            return start, length, header, None
        data = chunk[at:at + length] if at + length <= len(chunk) else opened.read(start, length)
        return start, length, header, data

    def _cut_batch_follows(self, opened: OpenLog, before: BatchHeader | None, position: int, end: int, upper: int,
                           gap_ok: GapOk | None) -> bool:
        """Is the batch at `position` (cut by a fetch's budget) one to send the start of?"""
        for batch in walk_batches(opened.read, position, end, chunk_bytes=HEADER_CHUNK_BYTES, path=self.log_path):
            self._check_follows(before, position, batch.header, gap_ok)
            return batch.header.base_offset < upper
        return False

    def _hint_ok(self, position: int, offset: int, read: Read) -> bool:
        """An index entry points at a batch whose base offset lies in [segment base, offset]."""
        if position < 0:
            return False
        head = read(position, RECORD_BATCH_OVERHEAD)
        if len(head) < min(codec.header_bytes(head), RECORD_BATCH_OVERHEAD):
            return False
        # (a magic 0/1 entry longer than `head` parses as framing only: its own offset, which for a
        # compressed one is its last, also lies in [segment base, offset] when the hint is right)
        header = read_header(head)
        return header.magic <= MAGIC_V2 and self.base_offset <= header.base_offset <= offset

    def offset_for_timestamp(self, timestamp: int, end: int, opened: OpenLog,
                             whole: bool = False) -> tuple[int, int] | None:
        """(first offset whose record timestamp ≥ timestamp, its batch's position), or None if none
        here; read from `opened` (pinned by the caller, with `end` its size). `whole`: a sealed
        segment, whose batches must reach its end for "none here" to be an answer (one cut or
        damaged otherwise sent the lookup on to the next segment, past its records)."""
        read = opened.read
        self.time_index.refresh()
        hint_offset = self.time_index.lookup(timestamp)
        found = self.position_for_offset(hint_offset, end, read)
        if found is None and hint_offset > self.base_offset:
            # an entry naming an offset past what the file holds (a garbage .timeindex): the
            # batches before it are still this segment's to search
            found = self.position_for_offset(self.base_offset, end, read)
        walked = 0
        for pos, header in self.iter_headers(found[0] if found is not None else 0, end, read):
            walked = pos + header.size
            if found is None or header.max_timestamp < timestamp:
                continue
            data = read(pos, header.size)
            for offset, ts, *_ in codec.decode_batch_records(data, 0, header):
                if ts >= timestamp:
                    return offset, pos
        if whole and walked != end:
            raise CorruptLogError("no batch can be read here, before the end of the segment", self.log_path, walked)
        return None

    # -- writing (partition lock held) -------------------------------------------------------
    def load_tail_state(self, size: int, max_timestamp: int, offset_of_max_timestamp: int,
                        next_offset: int | None, fds: SegmentFds | None = None) -> None:
        """Adopt the writer state another process (or recovery) left, without a scan. `fds`:
        this segment's writer descriptors, through which the indexes are read (no open each)."""
        self.size = size
        self.first_batch_max_timestamp = None
        if fds is not None:
            self.index_bytes = self.offset_index.refresh_from(fds.index)
            self.time_index_bytes = self.time_index.refresh_from(fds.time_index)
        else:
            self.offset_index.refresh()
            self.time_index.refresh()
            self.index_bytes = self.time_index_bytes = None
        last = self.offset_index.last_entry()
        self.indexer = IndexBuilder(self.base_offset, self.index_interval_bytes, size - (last[1] if last else 0),
                                    max_timestamp, offset_of_max_timestamp, self.time_index.last_timestamp())
        self.next_offset = next_offset

    def adopt_trusted(self, size: int, next_offset: int, max_timestamp: int, offset_of_max_timestamp: int,
                      index_bytes: int, time_index_bytes: int, since_last: int, last_time_ts: int,
                      first_batch_max_timestamp: int | None) -> None:
        """load_tail_state from what the last writer recorded (ReplicaTrust), the caller having
        checked the files against it: no index read. The cached index entries stay as they are
        (a prefix of the files: append_raw's `at` keeps them so)."""
        self.size = size
        self.next_offset = next_offset
        self.first_batch_max_timestamp = first_batch_max_timestamp
        self.index_bytes = index_bytes
        self.time_index_bytes = time_index_bytes
        # (the segment's own builder, set as a new one would be: every field but its base and
        # interval, which are the segment's; no second builder per partition a writer opens)
        indexer = self.indexer
        indexer.since_last = since_last
        indexer.max_timestamp = max_timestamp
        indexer.offset_of_max_timestamp = offset_of_max_timestamp
        indexer.last_time_ts = last_time_ts

    def index_entries(self) -> tuple[int, int]:
        """(offset index entries, time index entries) as the writer knows the files."""
        index, time_ = self.index_bytes, self.time_index_bytes
        return (index // OFFSET_INDEX_ENTRY.size if index is not None else self.offset_index.entries,
                time_ // TIME_INDEX_ENTRY.size if time_ is not None else self.time_index.entries)

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= RELATIVE_OFFSET_MAX

    def append(self, fds: SegmentFds, batch: bytes, header: BatchHeader) -> int:
        """Write `batch` at the end; returns its position. Index entries follow Kafka's rule."""
        position = self.size
        last_offset = header.base_offset + header.last_offset_delta  # (header.last_offset: no property call)
        assert header.base_offset >= self.base_offset and self.can_hold(last_offset)
        assert self.next_offset is None or header.base_offset >= self.next_offset, (self.next_offset, header)
        written = os.pwrite(fds.log, batch, position)
        if written != len(batch):
            raise OSError(f"short write to {self.log_path}: {written} of {len(batch)} bytes")
        index_entry, time_entry = self.indexer.add(position, last_offset, header.max_timestamp, len(batch))
        if index_entry is not None:
            at = self.index_bytes
            self.offset_index.append_raw(fds.index, index_entry, at)
            if at is not None:
                self.index_bytes = at + len(index_entry)
            if time_entry is not None:
                at = self.time_index_bytes
                self.time_index.append_raw(fds.time_index, time_entry, at)
                if at is not None:
                    self.time_index_bytes = at + len(time_entry)
        self.size = position + len(batch)
        self.next_offset = last_offset + 1
        if position == 0:
            self.first_batch_max_timestamp = header.max_timestamp
        return position

    def open_fds(self) -> SegmentFds:
        log = index = -1
        try:  # (the usual case, without a call per file: a writer's first open of every partition does this)
            log = os.open(self.log_path, _WRITE_LOG_FLAGS, FILE_MODE)
            index = os.open(self.offset_index.path, _WRITE_INDEX_FLAGS, FILE_MODE)
            return SegmentFds(log, index, os.open(self.time_index.path, _WRITE_INDEX_FLAGS, FILE_MODE))
        except OSError:
            for fd in (log, index):
                if fd >= 0:
                    os.close(fd)
        # again, as open_or_shed does: it names a link, and gives back cached read descriptors
        # when the process ran out of them
        return SegmentFds(
            open_or_shed(self.log_path, os.O_RDWR | os.O_CREAT),
            # read-write (appends only): load_tail_state reads the indexes' tails through them
            open_or_shed(self.offset_index.path, os.O_RDWR | os.O_APPEND | os.O_CREAT),
            open_or_shed(self.time_index.path, os.O_RDWR | os.O_APPEND | os.O_CREAT),
        )

    def seal(self) -> None:
        """On roll or close: the final time-index entry (segment max timestamp, its offset)."""
        self.time_index.refresh()
        if self.max_timestamp < 0:
            return
        self.indexer.last_time_ts = self.time_index.last_timestamp()  # another writer may have sealed it
        packed = self.indexer.time_entry()
        if packed is not None:
            fd = open_nofollow(self.time_index.path, os.O_WRONLY | os.O_APPEND)
            try:
                self.time_index.append_raw(fd, packed)
            finally:
                os.close(fd)
            self.time_index_bytes = None  # (sealed: no writer appends to it again)

    # -- recovery ------------------------------------------------------------------------------
    def recover(self, committed_end: int | None = None, sealed: bool = True,
                keep_damage: bool = True) -> RecoveryResult:
        """Kafka's LogSegment.recover: validate every batch (validate.SegmentScan: size, magic, CRC,
        offsets), truncate at the first bad or partial one, and rebuild both indexes
        (index.IndexBuilder, the rule appends follow; `sealed`: with the final time entry seal()
        writes, which the active segment does not have yet). Bytes cut from below
        `committed_end` (the high watermark: acknowledged records) are first kept in
        `<segment>.log.<position>.corrupt` beside it, for inspection.

        Unlike Kafka, a bad batch holding acknowledged offsets (below `committed_end`) that a
        provably valid batch follows (resume.resume_after: bit rot under acknowledged records, not
        the torn tail of a crash) is not cut: it stays where it is, damage as in any segment
        (readers stop at it, `--skip-damaged` skips its offsets, `verify` reports it), and the walk
        goes on after it (RecoveryResult.kept); the indexes skip it. A torn tail (nothing valid
        after the bad batch, or the bad batch above `committed_end`) is cut as Kafka cuts it, and
        so is all damage when not `keep_damage`."""
        file_size = self.file_size()
        fd = open_or_shed(self.log_path, os.O_RDONLY)
        try:
            read = lambda pos, n: os.pread(fd, n, pos)  # noqa: E731
            walked, kept, problem, valid, next_offset = self._walk_keeping_damage(
                read, file_size, committed_end if keep_damage else None)
        finally:
            os.close(fd)
        indexer = IndexBuilder(self.base_offset, self.index_interval_bytes)
        index_data, time_data = indexer.add_all(_skipping_damage(indexer, walked), sealed)
        cut_from = next_offset if next_offset is not None else self.base_offset
        if valid < file_size and committed_end is not None and cut_from < committed_end:
            keep_corrupt_bytes(self.log_path, valid, file_size)
        if valid < file_size:
            with open(self.log_path, "r+b", opener=nofollow_opener) as f:
                f.truncate(valid)
                os.fsync(f.fileno())
        self.offset_index.write_all(index_data)
        self.time_index.write_all(time_data)
        self.index_bytes, self.time_index_bytes = len(index_data), len(time_data)
        self.size = valid
        self.first_batch_max_timestamp = None
        self.indexer = indexer
        self.next_offset = next_offset
        return RecoveryResult(valid, file_size - valid, next_offset, problem if valid < file_size else None, kept)

    def _walk_keeping_damage(self, read: Read, file_size: int, committed_end: int | None
                             ) -> tuple[list[tuple[int, BatchHeader | None, int]], list[KeptDamage], str | None,
                                        int, int | None]:
        """Recovery's walk: the valid batches as (position, header, size), each damaged batch kept
        as (position, None, its bytes up to the valid batch after it), the damage kept, why the
        walk stopped (None: at the end), and where the valid bytes and offsets end."""
        walked: list[tuple[int, BatchHeader | None, int]] = []
        kept: list[KeptDamage] = []
        start, next_offset = 0, None
        while True:
            scan = SegmentScan(read, file_size, self.base_offset, start=start)
            for position, header in scan:
                walked.append((position, header, header.size))
            if scan.next_offset is not None:
                next_offset = scan.next_offset
            if scan.problem is None:
                return walked, kept, None, scan.valid_bytes, next_offset
            damage_at = scan.valid_bytes
            first_missing = next_offset if next_offset is not None else self.base_offset
            resumed = None
            if committed_end is not None and first_missing < committed_end:  # acknowledged offsets
                resumed = self.resume_after_damage(damage_at, first_missing, None, read, file_size)
            if resumed is None:  # a torn tail: cut
                return walked, kept, scan.problem, damage_at, next_offset
            kept.append(KeptDamage(damage_at, resumed.position, first_missing, resumed.header.base_offset,
                                   scan.problem))
            walked.append((damage_at, None, resumed.position - damage_at))
            start = resumed.position

    def rebuild_indexes(self, sealed: bool) -> str | None:
        """Write both indexes again from the `.log`, exactly as the append path (and seal(), if
        `sealed`) wrote them, fsynced; the `.log` is left as it is: a damaged batch ends the
        entries (the problem is returned; recovery or `klog verify` deal with it). The writer
        state becomes the scan's; with damage, the writer keeps its size and end, and its index
        builder goes on from the rebuilt files (as load_tail_state sets it)."""
        file_size = self.file_size()
        scan, indexer, index_data, time_data = self._scan_indexes(file_size, sealed)
        self.offset_index.write_all(index_data, sync=True)
        self.time_index.write_all(time_data, sync=True)
        self.index_bytes, self.time_index_bytes = len(index_data), len(time_data)
        if scan.problem is None:
            self.size = scan.valid_bytes
            self.first_batch_max_timestamp = None
            self.indexer = indexer
            self.next_offset = scan.next_offset
        else:
            last = self.offset_index.last_entry()
            self.indexer = IndexBuilder(self.base_offset, self.index_interval_bytes,
                                        max(self.size - (last[1] if last else 0), 0), self.indexer.max_timestamp,
                                        self.indexer.offset_of_max_timestamp, self.time_index.last_timestamp())
        return scan.problem

    def _scan_indexes(self, file_size: int, sealed: bool) -> tuple[SegmentScan, IndexBuilder, bytes, bytes]:
        """Validate the batches (SegmentScan) and make both index files of the valid ones."""
        indexer = IndexBuilder(self.base_offset, self.index_interval_bytes)
        fd = open_or_shed(self.log_path, os.O_RDONLY)
        try:
            scan = SegmentScan(lambda pos, n: os.pread(fd, n, pos), file_size, self.base_offset)
            index_data, time_data = indexer.add_all(scan, sealed)
        finally:
            os.close(fd)
        return scan, indexer, index_data, time_data

    def truncate_to_position(self, position: int, next_offset: int | None) -> None:
        """Cut the log at position and drop index entries that point at or past it."""
        with open(self.log_path, "r+b", opener=nofollow_opener) as f:
            f.truncate(position)
            os.fsync(f.fileno())
        self.recover(sealed=False)  # (the log's active segment now, or about to be: no final time entry)
        assert self.size == position, (self.size, position)
        assert next_offset is None or self.next_offset in (None, next_offset)


def _skipping_damage(indexer: IndexBuilder, walked: list[tuple[int, BatchHeader | None, int]]
                     ) -> Iterator[tuple[int, BatchHeader]]:
    """The valid batches of a recovery walk for IndexBuilder.add_all; a damaged batch's bytes
    count towards the next offset entry (as they did when it was appended) but get none."""
    for position, header, size in walked:
        if header is None:
            indexer.since_last += size
        else:
            yield position, header


CORRUPT_SUFFIX = ".corrupt"


def keep_corrupt_bytes(log_path: str, start: int, end: int) -> str:
    """Copy bytes [start, end) of a segment to `<log>.<start>.corrupt`, fsynced, before they are cut."""
    path = f"{log_path}.{start}{CORRUPT_SUFFIX}"
    src = open_nofollow(log_path, os.O_RDONLY)
    try:
        dst = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            pos = start
            while pos < end:
                chunk = os.pread(src, min(SCAN_CHUNK_BYTES, end - pos), pos)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
                pos += len(chunk)
            os.fsync(dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return path


class SegmentFds(Plain):
    """The writer's open descriptors of the active segment."""

    _fields = ("log", "index", "time_index")

    def __init__(self, log: int, index: int, time_index: int) -> None:
        self.log = log
        self.index = index
        self.time_index = time_index

    def close(self) -> None:
        # (three calls, no tuple and loop: once per partition a producer closes)
        os.close(self.log)
        os.close(self.index)
        os.close(self.time_index)

    def fsync(self) -> None:
        os.fsync(self.log)
        os.fsync(self.index)
        os.fsync(self.time_index)

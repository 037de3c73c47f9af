"""`.index` and `.timeindex` files (kafka-log-format.md §2).

klog writes index files trimmed (no preallocated zero tail): every byte is a real entry, so
several processes can share them with plain appends and Kafka reads them as-is. An index is
never the source of truth: recovery rebuilds it from the `.log`, so it carries no checksum.

Readers cache the entries and re-read only the tail that grew since they last looked. Threads
share one cache (klog serve's readers, its append worker and cleaner): a lookup works on the
entries as they were when it began (`_data` is replaced, never cut in place), and a tail read is
added only to the entries it was read after.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from klog.store.format import NO_TIMESTAMP, OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from klog.store.names import nofollow_opener, open_nofollow

if TYPE_CHECKING:
    from klog.store.codec import BatchHeader


def _pread_upto(fd: int, count: int, offset: int) -> bytes:
    """Up to `count` bytes at `offset` (fewer at the end of the file), as a file's read() gives."""
    first = os.pread(fd, count, offset)
    if len(first) == count or not first:
        return first
    parts = [first]
    got = len(first)
    while got < count:
        more = os.pread(fd, count - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _IndexFile:
    """An append-only array of fixed-size big-endian entries (one concern: the file)."""

    entry: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # a bytearray grows in place (amortised O(1) per entry); `bytes +=` copied the whole
        # index on every append (25 k / 50 k / 100 k appends took 1 / 6 / 23 s in one process)
        self._data = bytearray()
        self._growing = threading.Lock()  # a tail added to `_data` (a reader's load, the writer's append)

    def forget(self) -> None:
        """Drop the cached entries (the file was replaced); the next refresh reloads them."""
        self._data = bytearray()

    # -- reading -----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Load entries appended since the last look (or everything after a shrink)."""
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            self._data = bytearray()
            return
        size -= size % self.entry.size
        if size == len(self._data):
            return
        # os.pread on a bare descriptor: a buffered file object cost ~4 more system calls and
        # ~15 us of Python per refresh
        fd = open_nofollow(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._load(fd, size)
        finally:
            os.close(fd)

    def refresh_from(self, fd: int) -> int:
        """refresh() through an open descriptor of the file (a writer's: no open and close, at
        each partition's first open for writing); returns the file's size."""
        file_size = os.fstat(fd).st_size
        size = file_size - file_size % self.entry.size
        if size != len(self._data):
            self._load(fd, size)
        return file_size

    def _load(self, fd: int, size: int) -> None:
        data = self._data
        have = len(data)
        if size > have:
            tail = _pread_upto(fd, size - have, have)
            tail = tail[:len(tail) - len(tail) % self.entry.size]  # (a file cut meanwhile: whole entries only)
            with self._growing:
                # not if another thread grew or replaced the entries meanwhile (a duplicated tail,
                # or one of a file the cleaner has since replaced): the next refresh looks again
                if self._data is data and len(data) == have:
                    data += tail
        else:
            loaded = _pread_upto(fd, size, 0)
            self._data = bytearray(loaded[:len(loaded) - len(loaded) % self.entry.size])

    @property
    def entries(self) -> int:
        return len(self._data) // self.entry.size

    def entry_at(self, i: int) -> tuple[int, int]:
        return self.entry.unpack_from(self._data, i * self.entry.size)

    def floor_entry(self, key: int) -> tuple[int, int] | None:
        """The last entry whose first field (relative offset, timestamp) is ≤ key, or None; found
        and read in one version of the entries (another thread may replace them meanwhile)."""
        data = self._data
        i = self.floor(key, data)
        return self.entry.unpack_from(data, i * self.entry.size) if i >= 0 else None

    def floor(self, key: int, data: bytearray | None = None) -> int:
        """Index of the last entry whose first field (relative offset, timestamp) is ≤ key; -1 if
        none; in `data` if given (a version of the entries the caller reads the entry from)."""
        if data is None:
            data = self._data
        unpack = self.entry.unpack_from
        size = self.entry.size
        lo, hi = 0, len(data) // size - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if unpack(data, mid * size)[0] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def last_entry(self) -> tuple[int, int] | None:
        data = self._data  # (one version: another thread may replace it meanwhile)
        n = len(data) // self.entry.size
        return self.entry.unpack_from(data, (n - 1) * self.entry.size) if n else None

    # -- writing -----------------------------------------------------------------------------
    def append_raw(self, fd: int, packed: bytes, at: int | None = None) -> None:
        """Append an entry through `fd` (O_APPEND). `at`: where the file ends before it, as the
        writer knows (LogSegment.index_bytes): the cached entries take it only if they are the
        whole file up to there (a writer that adopted the file without reading it leaves them to
        the next refresh, which loads what they lack)."""
        with self._growing:  # (a reader's load between the write and the add would add it twice)
            written = os.write(fd, packed)
            assert written == len(packed), (self.path, written)
            if at is None or len(self._data) == at:
                self._data += packed

    def truncate_entries(self, keep: int) -> None:
        assert keep >= 0
        with open(self.path, "r+b", opener=nofollow_opener) as f:
            f.truncate(keep * self.entry.size)
        self._data = self._data[:keep * self.entry.size]  # (a copy: lookups under way keep theirs)

    def write_all(self, packed_entries: bytes, sync: bool = False) -> None:
        """Replace the whole file (recovery's rebuild); `sync`: fsync it too."""
        with open(self.path, "wb", opener=nofollow_opener) as f:
            f.write(packed_entries)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        self._data = bytearray(packed_entries)


class OffsetIndex(_IndexFile):
    """Entries (relativeOffset int32, position int32): a batch's last offset → its start."""

    entry = OFFSET_INDEX_ENTRY

    def lookup(self, offset: int) -> int:
        """Start position for a scan toward `offset`: the last entry ≤ offset, else 0."""
        found = self.floor_entry(offset - self.base_offset)
        return found[1] if found is not None else 0


class TimeIndex(_IndexFile):
    """Entries (timestamp int64, relativeOffset int32): max timestamp so far → the batch's last offset."""

    entry = TIME_INDEX_ENTRY

    def lookup(self, timestamp: int) -> int:
        """Offset to start a search for `timestamp`: the last entry with ts ≤ timestamp, else base."""
        found = self.floor_entry(timestamp)
        return self.base_offset + found[1] if found is not None else self.base_offset

    def last_timestamp(self) -> int:
        last = self.last_entry()
        return last[0] if last else -1


class IndexBuilder:
    """Kafka's rule for index entries, in one place: appends (LogSegment.append), recovery's
    rebuild (LogSegment.recover) and the cleaner's rewritten segments all add batches here.

    Once more than `interval_bytes` of batches follow the last entry, the next batch gets an
    offset entry (its last offset -> its position) and, if the segment's largest timestamp grew
    since the last time entry, a time entry (that timestamp -> the offset holding it).
    """

    __slots__ = ("base_offset", "interval_bytes", "since_last", "max_timestamp", "offset_of_max_timestamp",
                 "last_time_ts")

    def __init__(self, base_offset: int, interval_bytes: int, since_last: int = 0, max_timestamp: int = -1,
                 offset_of_max_timestamp: int = -1, last_time_ts: int = NO_TIMESTAMP) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self.since_last = since_last  # bytes of batches after the last offset entry
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.last_time_ts = last_time_ts  # the time index's last timestamp (NO_TIMESTAMP: none)

    def add(self, position: int, last_offset: int, max_timestamp: int, size: int) -> tuple[bytes | None, bytes | None]:
        """The batch at `position` was added: the (offset, time) index entries it gets, if any."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        index_entry = time_entry = None
        if self.since_last > self.interval_bytes:
            index_entry = OFFSET_INDEX_ENTRY.pack(last_offset - self.base_offset, position)
            time_entry = self.time_entry()
            self.since_last = 0
        self.since_last += size
        return index_entry, time_entry

    def time_entry(self) -> bytes | None:
        """A time entry for the largest timestamp so far, if the index does not hold it yet (also
        a sealed segment's final entry)."""
        if self.max_timestamp <= self.last_time_ts:
            return None
        self.last_time_ts = self.max_timestamp
        return TIME_INDEX_ENTRY.pack(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset)

    def add_all(self, batches: Iterable[tuple[int, BatchHeader]], sealed: bool = True) -> tuple[bytes, bytes]:
        """Both index files of a whole segment of these (position, header) batches, as the append
        path writes them: `sealed` ends the time index with the final entry seal() appends at a
        roll (recovery's rebuild of a sealed segment, the cleaner's output); an active segment's
        has none until it rolls (LogSegment.append writes none)."""
        index: list[bytes] = []
        times: list[bytes] = []
        for position, header in batches:
            index_entry, time_entry = self.add(position, header.last_offset, header.max_timestamp, header.size)
            if index_entry is not None:
                index.append(index_entry)
                if time_entry is not None:
                    times.append(time_entry)
        final = self.time_entry() if sealed else None
        if final is not None:
            times.append(final)
        return b"".join(index), b"".join(times)

"""`.index` and `.timeindex` files (kafka-log-format.md §2).

klog writes index files trimmed (no preallocated zero tail): every byte is a real entry, so
several processes can share them with plain appends and Kafka reads them as-is. An index is
never the source of truth: recovery rebuilds it from the `.log`, so it carries no checksum.

Readers cache the entries and re-read only the tail that grew since they last looked.
"""

from __future__ import annotations

import os
import struct

from klog.store.format import NO_TIMESTAMP, OFFSET_INDEX_ENTRY, RELATIVE_OFFSET_MAX, TIME_INDEX_ENTRY
from klog.store.names import nofollow_opener


class _IndexFile:
    """An append-only array of fixed-size big-endian entries (one concern: the file)."""

    entry: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # a bytearray grows in place (amortised O(1) per entry); `bytes +=` copied the whole
        # index on every append (25 k / 50 k / 100 k appends took 1 / 6 / 23 s in one process)
        self._data = bytearray()

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
        with open(self.path, "rb", opener=nofollow_opener) as f:
            if size > len(self._data):
                f.seek(len(self._data))
                self._data += f.read(size - len(self._data))
            else:
                self._data = bytearray(f.read(size))
        # a file shorter than expected (truncated concurrently) keeps whole entries only
        del self._data[len(self._data) - len(self._data) % self.entry.size:]

    @property
    def entries(self) -> int:
        return len(self._data) // self.entry.size

    def entry_at(self, i: int) -> tuple[int, int]:
        return self.entry.unpack_from(self._data, i * self.entry.size)

    def last_entry(self) -> tuple[int, int] | None:
        n = self.entries
        return self.entry_at(n - 1) if n else None

    # -- writing -----------------------------------------------------------------------------
    def append_raw(self, fd: int, packed: bytes) -> None:
        written = os.write(fd, packed)
        assert written == len(packed), (self.path, written)
        self._data += packed

    def truncate_entries(self, keep: int) -> None:
        assert keep >= 0
        with open(self.path, "r+b", opener=nofollow_opener) as f:
            f.truncate(keep * self.entry.size)
        del self._data[keep * self.entry.size:]

    def write_all(self, packed_entries: bytes) -> None:
        """Replace the whole file (recovery's rebuild)."""
        with open(self.path, "wb", opener=nofollow_opener) as f:
            f.write(packed_entries)
        self._data = bytearray(packed_entries)

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= RELATIVE_OFFSET_MAX:
            raise ValueError(f"offset {offset} does not fit as a relative offset of {self.base_offset}")
        return rel


class OffsetIndex(_IndexFile):
    """Entries (relativeOffset int32, position int32): a batch's last offset → its start."""

    entry = OFFSET_INDEX_ENTRY

    def lookup(self, offset: int) -> int:
        """Start position for a scan toward `offset`: the last entry ≤ offset, else 0."""
        target = offset - self.base_offset
        lo, hi = 0, self.entries - 1
        found = 0
        unpack = self.entry.unpack_from
        data = self._data
        while lo <= hi:
            mid = (lo + hi) // 2
            rel, pos = unpack(data, mid * OFFSET_INDEX_ENTRY.size)
            if rel <= target:
                found = pos
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def pack(self, last_offset: int, position: int) -> bytes:
        last = self.last_entry()
        rel = self.relative(last_offset)
        if last is not None:
            assert rel > last[0] and position > last[1], (self.path, last, rel, position)
        return self.entry.pack(rel, position)


class TimeIndex(_IndexFile):
    """Entries (timestamp int64, relativeOffset int32): max timestamp so far → the batch's last offset."""

    entry = TIME_INDEX_ENTRY

    def lookup(self, timestamp: int) -> int:
        """Offset to start a search for `timestamp`: the last entry with ts ≤ timestamp, else base."""
        lo, hi = 0, self.entries - 1
        found = self.base_offset
        unpack = self.entry.unpack_from
        data = self._data
        while lo <= hi:
            mid = (lo + hi) // 2
            ts, rel = unpack(data, mid * TIME_INDEX_ENTRY.size)
            if ts <= timestamp:
                found = self.base_offset + rel
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def last_timestamp(self) -> int:
        last = self.last_entry()
        return last[0] if last else -1

    def pack_if_newer(self, timestamp: int, offset: int) -> bytes | None:
        """Kafka's maybeAppend: only a timestamp above the last entry's gets an entry. An empty
        index counts as (NO_TIMESTAMP, base offset), as in Kafka's lastEntry(), so batches
        without timestamps (-1) get none."""
        last = self.last_entry()
        if timestamp <= (last[0] if last is not None else NO_TIMESTAMP):
            return None
        rel = self.relative(offset)
        if last is not None and rel < last[1]:
            return None
        return self.entry.pack(timestamp, rel)

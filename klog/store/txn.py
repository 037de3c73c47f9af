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

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from klog.store.format import TRANSACTIONAL_FLAG_MASK, TXN_INDEX_SUFFIX, segment_file_name

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


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int = -1

    def pack(self) -> bytes:
        return ABORTED_TXN.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def read_txn_index(folder: str, base_offset: int) -> list[AbortedTxn] | None:
    """The segment's `.txnindex` entries, or None when it has none (or an unreadable one)."""
    path = os.path.join(folder, segment_file_name(base_offset, TXN_INDEX_SUFFIX))
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
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
    """Open transactions and aborted ranges, fed batches in offset order (the rebuild of Kafka's
    producer state that recovery does for the .txnindex)."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction
        self.aborted: list[AbortedTxn] = []

    def data(self, producer_id: int, offset: int) -> None:
        self.open.setdefault(producer_id, offset)

    def marker(self, producer_id: int, offset: int, kind: int) -> None:
        first = self.open.pop(producer_id, None)
        if kind == ABORT and first is not None:
            self.aborted.append(AbortedTxn(producer_id, first, offset))

    def first_unstable_offset(self) -> int | None:
        return min(self.open.values()) if self.open else None


def aborted_filter(aborted: Iterable[AbortedTxn]):
    """A predicate (producer id, offset) -> True if that record belongs to an aborted transaction."""
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for a in aborted:
        by_pid.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))

    def is_aborted(producer_id: int, offset: int) -> bool:
        return any(first <= offset <= last for first, last in by_pid.get(producer_id, ()))

    return is_aborted


# per segment: (producer id, offset, kind) of each transactional batch, kind DATA or a marker
DATA = -1
_Event = tuple[int, int, int]


def _segment_events(segment, end: int) -> list[_Event]:
    """The transactional batches of one segment (headers only; control batches decoded)."""
    from klog.store import codec, validate  # (codec is heavy on import; txn is imported by readers only)

    events: list[_Event] = []
    for pos, header in segment.iter_headers(0, end):
        if not is_transactional(header.attributes):
            continue
        if header.is_control:
            data = segment.read_bytes(pos, header.size)
            records = ([] if validate.crc_problem(data, 0, header) else codec.decode_batch_records(data, 0, header))
            kind = DATA
            if records:
                name, _ = control_marker(records[0][2], records[0][3])
                kind = COMMIT if name == "COMMIT" else ABORT if name == "ABORT" else DATA
            if kind != DATA:
                events.append((header.producer_id, header.base_offset, kind))
        else:
            events.append((header.producer_id, header.base_offset, DATA))
    return events


class StableView:
    """read_committed over one replica (a PartitionLog): the last stable offset below a bound (the
    high watermark) and which transactional batches were aborted. Aborted ranges come from each
    segment's `.txnindex` when it has one, else from the markers; per-segment scans are cached by
    the file's identity and size, so following a growing log rescans only the active segment."""

    def __init__(self, replica) -> None:
        self.replica = replica
        self._events: dict[int, tuple[tuple[int, int, int], list[_Event]]] = {}
        self._key: tuple | None = None
        self._lso = 0
        self._is_aborted = aborted_filter(())
        self.aborted_txns: list[AbortedTxn] = []  # as of the last refresh

    def refresh(self, bound: int) -> int:
        """Recompute for batches below `bound`; returns the last stable offset."""
        replica = self.replica
        replica.refresh_segments()
        stats = []
        for base in replica.bases:
            segment = replica.segments[base]
            try:
                st = os.stat(segment.log_path)
            except FileNotFoundError:
                continue
            stats.append((base, (st.st_ino, st.st_size, st.st_mtime_ns)))
        key = (bound, tuple(stats))
        if key == self._key:
            return self._lso
        tracker = TxnTracker()
        aborted: list[AbortedTxn] = []
        for base, ident in stats:
            cached = self._events.get(base)
            if cached is None or cached[0] != ident:
                cached = (ident, _segment_events(replica.segments[base], ident[1]))
                self._events[base] = cached
            before = len(tracker.aborted)
            for pid, offset, kind in cached[1]:
                if offset >= bound:
                    break
                if kind == DATA:
                    tracker.data(pid, offset)
                else:
                    tracker.marker(pid, offset, kind)
            from_index = read_txn_index(replica.directory, base)
            aborted.extend(tracker.aborted[before:] if from_index is None else from_index)
        for base in [b for b in self._events if b not in dict(stats)]:
            del self._events[base]
        unstable = tracker.first_unstable_offset()
        self._lso = bound if unstable is None else min(bound, unstable)
        self._is_aborted = aborted_filter(aborted)
        self.aborted_txns = aborted
        self._key = key
        return self._lso

    def aborted(self, header) -> bool:
        """Is this batch part of an aborted transaction (as of the last refresh)?"""
        return is_transactional(header.attributes) and not header.is_control and self._is_aborted(
            header.producer_id, header.base_offset)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions a fetch of [start, end) must name (Kafka's collectAbortedTransactions:
        those whose marker is at or after start and whose first offset is below end)."""
        return [a for a in self.aborted_txns if a.last_offset >= start and a.first_offset < end]

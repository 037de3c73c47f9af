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
    """Walks batches in offset order and finds aborted ranges and open transactions (the
    rebuild of Kafka's producer state that recovery does for the .txnindex)."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction
        self.aborted: list[AbortedTxn] = []

    def add(self, header, marker: str | None = None) -> None:
        """One batch: `marker` is the control record's type for a control batch."""
        if not is_transactional(header.attributes):
            return
        pid = header.producer_id
        if header.is_control:
            first = self.open.pop(pid, None)
            if marker == "ABORT" and first is not None:
                self.aborted.append(AbortedTxn(pid, first, header.base_offset))
            return
        self.open.setdefault(pid, header.base_offset)

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

"""Segments and checkpoint files as a Kafka broker writes them, built with kafka-python's record
builders (not klog's codec): old message sets (magic 0/1, plain and compressed), v2 batches
(idempotent, transactional) and control batches, a .txnindex, preallocated indexes.

A broker assigns a compressed v0/v1 message (a "wrapper") the offset of its LAST inner message;
inner offsets are absolute in v0 and relative (0..n-1) in v1, and a v1 CreateTime wrapper carries
the largest inner timestamp (Kafka's LogValidator). kafka-python's builder leaves the wrapper at
offset 0 and timestamp 0, so wrap() stamps them as the broker would.
"""

from __future__ import annotations

import os
import struct
import zlib

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

Rec = tuple[bytes | None, bytes | None, int]  # key, value, timestamp


def legacy_plain(magic: int, offset: int, key: bytes | None, value: bytes | None, ts: int = -1) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    b.append(offset, timestamp=ts if magic else None, key=key, value=value)
    return bytes(b.build())


def legacy_wrapper(magic: int, first_offset: int, records: list[Rec], codec: int = 1) -> bytes:
    """A compressed v0/v1 message set holding `records`, offsets first_offset.., as a broker stores it."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(records):
        inner = first_offset + i if magic == 0 else i
        b.append(inner, timestamp=ts if magic else None, key=key, value=value)
    data = bytearray(b.build())
    data[0:8] = struct.pack(">q", first_offset + len(records) - 1)
    if magic == 1:
        data[18:26] = struct.pack(">q", max(ts for _, _, ts in records))
    data[12:16] = struct.pack(">I", zlib.crc32(bytes(data[16:])))
    return bytes(data)


def v2_batch(base_offset: int, records: list[Rec], *, producer_id: int = -1, producer_epoch: int = -1,
             base_sequence: int = -1, transactional: bool = False, leader_epoch: int = 0,
             codec: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=[])
    data = bytearray(b.build())
    data[0:8] = struct.pack(">q", base_offset)
    data[12:16] = struct.pack(">i", leader_epoch)
    return bytes(data)


def control_batch(offset: int, producer_id: int, producer_epoch: int, commit: bool, ts: int,
                  coordinator_epoch: int = 0, leader_epoch: int = 0) -> bytes:
    """An end-transaction marker (COMMIT or ABORT) as the transaction coordinator has it written."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    data = bytearray(v2_batch(offset, [(key, value, ts)], producer_id=producer_id,
                              producer_epoch=producer_epoch, transactional=True, leader_epoch=leader_epoch))
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20  # isControl
    struct.pack_into(">h", data, 21, attributes)
    from kafka.record.util import calc_crc32c
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def txn_index_entry(producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> bytes:
    """One .txnindex entry (Kafka's AbortedTxn): version int16 0, producerId, firstOffset,
    lastOffset, lastStableOffset (int64 each)."""
    return struct.pack(">hqqqq", 0, producer_id, first_offset, last_offset, last_stable_offset)


def write_segment(folder: str, base_offset: int, batches: list[bytes], *, preallocate: bool = False,
                  txn_entries: list[bytes] | None = None) -> str:
    """Write `<base>.log` (+ an empty or 10 MiB zero-filled active .index/.timeindex, like a
    running broker's)."""
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, f"{base_offset:020d}")
    with open(stem + ".log", "wb") as f:
        f.write(b"".join(batches))
    for suffix, size in ((".index", 10485760), (".timeindex", 10485756)):
        with open(stem + suffix, "wb") as f:
            if preallocate:
                f.truncate(size)
    if txn_entries is not None:
        with open(stem + ".txnindex", "wb") as f:
            f.write(b"".join(txn_entries))
    return stem + ".log"


def write_checkpoint(path: str, entries: list[str]) -> None:
    """Kafka's CheckpointFile text: version 0, the count, one entry per line."""
    with open(path, "w") as f:
        f.write(f"0\n{len(entries)}\n" + "".join(e + "\n" for e in entries))


def read_checkpoint(path: str, fields: int) -> list[list[str]]:
    """A reader written from Kafka's format description (CheckpointFile.readLines): version must
    be 0, the count must match the lines that follow, each line must have `fields` fields."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "", "a checkpoint file ends with a newline"
    lines = lines[:-1]
    assert lines[0] == "0", f"version {lines[0]!r}"
    count = int(lines[1])
    assert count == len(lines) - 2, (count, lines)
    rows = [line.split() for line in lines[2:]]
    assert all(len(r) == fields for r in rows), rows
    return rows

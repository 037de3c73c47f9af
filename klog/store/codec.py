"""RecordBatch v2 encode and decode (no files here; see format.py for the layout).

Per-batch work (header, CRC, compression) is done once per batch; the per-record loops are
kept flat, with lookup tables for the one- and two-byte varints that nearly every record uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import crcmod
import crcmod.predefined

from klog.errors import CorruptLogError
from klog.store import compression
from klog.store.format import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET,
    BATCH_HEADER,
    BATCH_PREFIX,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_COVERED_HEADER,
    CREATE_TIME,
    DELETE_HORIZON_FLAG_MASK,
    INT32,
    KLOG_LEADER_EPOCH,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
)

crc32c = crcmod.predefined.mkCrcFun("crc-32c")
# The pure-Python fallback is ~100x slower; klog's speed targets assume the C extension.
CRC_C_EXTENSION = bool(getattr(crcmod, "_usingExtension", False))
assert crc32c(b"123456789") == 0xE3069283

# A record as the producer hands it over: (key, value, headers, timestamp_ms).
# headers: a sequence of (str key, bytes-or-None value) pairs.
Header = tuple[str, bytes | None]
RecordIn = tuple[bytes | None, bytes | None, Sequence[Header], int]
# A record as the reader hands it back: (offset, timestamp_ms, key, value, headers).
RecordOut = tuple[int, int, bytes | None, bytes | None, list[Header]]

RECORDS_PER_BATCH_MAX = 2**31 - 1


# --- varints (zigzag, protobuf base-128) ------------------------------------------------------
def encode_varint(n: int) -> bytes:
    """Zigzag varlong/varint encoding (the same bytes for both when n fits an int32)."""
    z = (n << 1) ^ (n >> 63)
    z &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Non-negative n below this encode from a table: lengths, offset deltas, header counts.
_VARINT_TABLE_SIZE = 1 << 14
_VARINT = [encode_varint(i) for i in range(_VARINT_TABLE_SIZE)]
_NULL = encode_varint(-1)
_ZERO = _VARINT[0]
# One-byte zigzag values decode from a table too.
_ZIGZAG1 = [(b >> 1) ^ -(b & 1) for b in range(128)]


def _varint(n: int) -> bytes:
    if 0 <= n < _VARINT_TABLE_SIZE:
        return _VARINT[n]
    return encode_varint(n)


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varlong at pos; returns (value, next position)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end of the batch")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


# --- batch header -----------------------------------------------------------------------------
class BatchHeader(NamedTuple):
    """The 61-byte header of one batch, plus where it sits."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the batch takes on disk."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at pos (the caller made sure 61 bytes are there)."""
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, pos))


def crc_ok(buf: bytes | memoryview, pos: int, header: BatchHeader) -> bool:
    """True if the stored CRC-32C matches bytes [pos+21, pos+size)."""
    end = pos + header.size
    return crc32c(buf[pos + ATTRIBUTES_OFFSET:end]) == header.crc


# --- encode -----------------------------------------------------------------------------------
def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [_varint(len(headers))]
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        parts.append(_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL)
        else:
            parts.append(_varint(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


def encode_records(records: Sequence[RecordIn], base_timestamp: int) -> bytes:
    """The records section of a batch: each record's length varint then its body."""
    out: list[bytes] = []
    append = out.append
    varint_table = _VARINT
    for delta, (key, value, headers, timestamp) in enumerate(records):
        ts_delta = timestamp - base_timestamp
        ts_part = varint_table[ts_delta] if 0 <= ts_delta < _VARINT_TABLE_SIZE else encode_varint(ts_delta)
        off_part = varint_table[delta] if delta < _VARINT_TABLE_SIZE else encode_varint(delta)
        if key is None:
            key_part = _NULL
        else:
            n = len(key)
            key_part = (varint_table[n] if n < _VARINT_TABLE_SIZE else encode_varint(n)) + key
        if value is None:
            value_part = _NULL
        else:
            n = len(value)
            value_part = (varint_table[n] if n < _VARINT_TABLE_SIZE else encode_varint(n)) + value
        header_part = _encode_headers(headers) if headers else _ZERO
        body_length = 1 + len(ts_part) + len(off_part) + len(key_part) + len(value_part) + len(header_part)
        append(varint_table[body_length] if body_length < _VARINT_TABLE_SIZE else encode_varint(body_length))
        append(b"\x00")
        append(ts_part)
        append(off_part)
        append(key_part)
        append(value_part)
        append(header_part)
    return b"".join(out)


def encode_batch(
    records: Sequence[RecordIn],
    base_offset: int = 0,
    *,
    codec: int = compression.NONE,
    timestamp_type: int = CREATE_TIME,
    log_append_time_ms: int | None = None,
    leader_epoch: int = KLOG_LEADER_EPOCH,
) -> bytes:
    """Encode one RecordBatch v2 holding `records` (non-empty), offsets base_offset.."""
    count = len(records)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    assert count <= RECORDS_PER_BATCH_MAX
    base_timestamp = records[0][3]
    max_timestamp = max(r[3] for r in records)
    attributes = codec & COMPRESSION_CODEC_MASK
    if timestamp_type == LOG_APPEND_TIME:
        assert log_append_time_ms is not None
        attributes |= TIMESTAMP_TYPE_MASK
        max_timestamp = log_append_time_ms
    body = encode_records(records, base_timestamp)
    if codec:
        body = compression.compress(codec, body)
    covered = CRC_COVERED_HEADER.pack(
        attributes, count - 1, base_timestamp, max_timestamp,
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, count,
    )
    crc = crcmod_crc_of(covered, body)
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)
    prefix = BATCH_PREFIX.pack(base_offset, batch_length, leader_epoch, MAGIC_V2, crc)
    return b"".join((prefix, covered, body))


def crcmod_crc_of(first: bytes, second: bytes) -> int:
    """CRC-32C over first+second without joining them."""
    return crc32c(second, crc32c(first))


def encode_header_fields(header: BatchHeader) -> bytes:
    """Re-pack a header (used when rewriting a batch's base offset or leader epoch)."""
    return BATCH_HEADER.pack(*header)


# --- decode -----------------------------------------------------------------------------------
def decode_batch_records(buf: bytes, pos: int, header: BatchHeader) -> list[RecordOut]:
    """Decode every record of the batch at buf[pos:]; the caller has already checked the CRC.

    Raises CorruptLogError (without a path; the caller adds it) when the records do not
    fill the batch exactly, as Kafka's "Incorrect declared batch size".
    """
    end = pos + header.size
    if header.codec:
        data = compression.decompress(header.codec, memoryview(buf)[pos + RECORDS_OFFSET:end])
        start = 0
        stop = len(data)
    else:
        data = buf
        start = pos + RECORDS_OFFSET
        stop = end
    try:
        records, consumed_to = _decode_records(data, start, stop, header)
    except (ValueError, IndexError) as e:
        raise CorruptLogError(f"malformed records in batch: {e}", offset=header.base_offset) from None
    if consumed_to != stop:
        raise CorruptLogError("incorrect declared batch size", offset=header.base_offset)
    return records


def _decode_records(data: bytes, pos: int, stop: int, header: BatchHeader) -> tuple[list[RecordOut], int]:
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    max_timestamp = header.max_timestamp
    zz = _ZIGZAG1
    out: list[RecordOut] = []
    append = out.append
    for _ in range(header.records_count):
        b = data[pos]
        if b < 0x80:
            length = zz[b]
            pos += 1
        else:
            length, pos = decode_varint(data, pos)
        record_end = pos + length
        if length < 0 or record_end > stop:
            raise ValueError("record length past the end of the batch")
        pos += 1  # attributes, unused
        b = data[pos]
        if b < 0x80:
            ts_delta = zz[b]
            pos += 1
        else:
            ts_delta, pos = decode_varint(data, pos)
        b = data[pos]
        if b < 0x80:
            off_delta = zz[b]
            pos += 1
        else:
            off_delta, pos = decode_varint(data, pos)
        b = data[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        else:
            n, pos = decode_varint(data, pos)
        if n < 0:
            key = None
        else:
            key = data[pos:pos + n]
            pos += n
        b = data[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        else:
            n, pos = decode_varint(data, pos)
        if n < 0:
            value = None
        else:
            value = data[pos:pos + n]
            pos += n
        b = data[pos]
        if b == 0:
            headers: list[Header] = []
            pos += 1
        else:
            headers, pos = _decode_headers(data, pos)
        if pos != record_end:
            raise ValueError("record body does not match its declared length")
        timestamp = max_timestamp if log_append else base_timestamp + ts_delta
        append((base_offset + off_delta, timestamp, key, value, headers))
    return out, pos


def _decode_headers(data: bytes, pos: int) -> tuple[list[Header], int]:
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise ValueError("negative header count")
    headers: list[Header] = []
    for _ in range(count):
        n, pos = decode_varint(data, pos)
        if n < 0:
            raise ValueError("null header key")
        hkey = bytes(data[pos:pos + n]).decode("utf-8", errors="surrogateescape")
        pos += n
        n, pos = decode_varint(data, pos)
        if n < 0:
            hvalue = None
        else:
            hvalue = bytes(data[pos:pos + n])
            pos += n
        headers.append((hkey, hvalue))
    return headers, pos


def with_base_offset(batch: bytes, base_offset: int, leader_epoch: int | None = None) -> bytes:
    """The batch with its base offset (and leader epoch) stamped; both lie outside the CRC."""
    if leader_epoch is None:
        return BASE_OFFSET.pack(base_offset) + batch[8:]
    return b"".join((BASE_OFFSET.pack(base_offset), batch[8:12], INT32.pack(leader_epoch), batch[16:]))

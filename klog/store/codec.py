"""RecordBatch v2 encode and decode (no files here; see format.py for the layout).

Per-batch work (header, CRC, compression) is done once per batch; the per-record loops are
kept flat, with lookup tables for the one- and two-byte varints that nearly every record uses.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

from klog.errors import (
    CompressionError,
    CorruptLogError,
    DecompressionError,
    UnknownCodecIdError,
    UnsupportedCodecError,
)
from klog.store import compression, fastrecords, legacy
from klog.store.format import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET,
    BASE_OFFSET_OFFSET,
    BATCH_HEADER,
    BATCH_PREFIX,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_COVERED_HEADER,
    CREATE_TIME,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_SIZE_UP_TO_MAGIC,
    INT32,
    KLOG_LEADER_EPOCH,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
)


def _load_crc32c():  # noqa: ANN202 - crc32c.crc32c
    """crc32c's C function (hardware CRC-32C: SSE 4.2 / ARMv8, software fallback inside), loaded
    without the package's __init__, which asks importlib.metadata for its own version: that imports
    email, zipfile and argparse, a fifth of `klog consume`'s start-up."""
    import importlib.machinery

    try:
        package = importlib.machinery.PathFinder.find_spec("crc32c")
        spec = importlib.machinery.PathFinder.find_spec("crc32c._crc32c", package.submodule_search_locations)
        module = spec.loader.create_module(spec)
        spec.loader.exec_module(module)
        return module.crc32c
    except Exception:  # noqa: BLE001 - any other layout: the ordinary import
        from crc32c import crc32c

        return crc32c


crc32c = _load_crc32c()

# The `crc32c` package computes CRC-32C in hardware where the CPU can (61x crcmod's C table
# here, and 58 % of a consume of 1 MB records was crcmod); the tests cross-check it against crcmod.
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
    return encode_uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_uvarint(n: int) -> bytes:
    """Unsigned varint encoding (protobuf's; the flexible protocol versions' lengths and counts)."""
    if n < 0x80:
        return bytes((n,))  # most lengths and counts: one byte
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


# Encoding tables: _VARINT[n] for 0 <= n < 2**14 (lengths, offset deltas, header counts) and
# _SIGNED_VARINT[d + 2**13] for timestamp deltas -2**13 <= d < 2**13 (one or two bytes).
# Decoding tables: _ZIGZAG[b] for a one-byte varint b (< 0x80); _ZIGZAG2[c][b] for a two-byte
# one b, c (b >= 0x80 > c); _LENGTH2[c][b] is that plus 2, where a record whose two-byte length
# starts at p must end.
# The big ones are filled on first use, not at import: building them took ~40 ms of every
# command's start-up, `klog --help` included. A reader fills only the decoding ones
# (_decode_tables(), ~2 ms), a writer only the encoding ones (_encode_tables(), ~5 ms): what a
# `klog consume t -n 1` or a one-line `klog produce` pays. They are filled in place, so a
# function that called them may bind the tables to locals.
_VARINT_TABLE_SIZE = 1 << 14
_SIGNED_HALF = 1 << 13
_VARINT: list[bytes] = []
_SIGNED_VARINT: list[bytes] = []
_ZIGZAG2: list[list[int]] = []
_LENGTH2: list[list[int]] = []
_ZIGZAG = [_unzigzag(b) for b in range(0x80)]
_NULL = encode_varint(-1)
_ZERO = b"\x00"
_ATTRIBUTES = b"\x00"


# Threads (a program's producers, klog serve's workers) may ask for the tables at once: one builds
# them, and each table appears whole (a table extended item by item from a generator was seen
# half-built by another thread: IndexError in an encode).
_TABLES_BUILT = threading.Lock()


def _encode_tables() -> None:
    if _SIGNED_VARINT:
        return
    with _TABLES_BUILT:
        if _SIGNED_VARINT:
            return
        # the varint of each zigzagged value z < 2**15 (encode_varint's bytes, built 3x faster than
        # calling it per entry): _VARINT[n] is that of z = 2n, _SIGNED_VARINT[d + 2**13] that of d's zigzag
        raw = [bytes((z,)) for z in range(0x80)]
        raw += [bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(0x80, 1 << 14)]
        raw += [bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80, z >> 14)) for z in range(1 << 14, 1 << 15)]
        _VARINT.extend(raw[0:2 * _VARINT_TABLE_SIZE:2])
        # last, from a list (one step under the GIL): a non-empty table says both are whole
        _SIGNED_VARINT.extend([raw[(d << 1) ^ (d >> 63)] for d in range(-_SIGNED_HALF, _SIGNED_HALF)])


def _decode_tables() -> None:
    if _LENGTH2:
        return
    with _TABLES_BUILT:
        if _LENGTH2:
            return
        rows = [[0] * 0x80 + [_unzigzag((b & 0x7F) | (c << 7)) for b in range(0x80, 0x100)] for c in range(0x80)]
        _ZIGZAG2.extend(rows)
        _LENGTH2.extend([[v + 2 for v in row] for row in rows])  # last, from a list: it says both are whole


def _varint(n: int) -> bytes:
    if 0 <= n < _VARINT_TABLE_SIZE:
        _encode_tables()
        return _VARINT[n]
    return encode_varint(n)


def _read_varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Zigzag varint of at most max_bytes (5: int32, 10: int64) at pos; (value, next position).

    Raises IndexError past the end of buf and ValueError for an over-long or too-wide varint
    (Kafka's readVarint/readVarlong refuse more than 5/10 bytes; bits beyond 32/64 are garbage).
    """
    raw = 0
    shift = 0
    limit = 7 * max_bytes
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= limit:
            raise ValueError(f"varint longer than {max_bytes} bytes")
    if raw >> (32 if max_bytes == 5 else 64):
        raise ValueError(f"varint wider than {32 if max_bytes == 5 else 64} bits")
    return (raw >> 1) ^ -(raw & 1), pos


def _varint32(buf: bytes, pos: int) -> tuple[int, int]:
    return _read_varint(buf, pos, 5)


def _varlong(buf: bytes, pos: int) -> tuple[int, int]:
    return _read_varint(buf, pos, 10)


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varlong at pos; returns (value, next position).

    Raises ValueError if the varint runs past the end of buf, is longer than 10 bytes or does
    not fit in 64 bits.
    """
    try:
        return _read_varint(buf, pos, 10)
    except IndexError:
        raise ValueError("varint runs past the end of the batch") from None


# --- batch header -----------------------------------------------------------------------------
# The fields as (name, type) pairs rather than class annotations: under `from __future__ import
# annotations` those are strings, and NamedTuple compiles each one (the process's first compile()
# costs ~2 ms of every `klog consume`).
class BatchHeader(NamedTuple("BatchHeader", [
        ("base_offset", int), ("batch_length", int), ("leader_epoch", int), ("magic", int), ("crc", int),
        ("attributes", int), ("last_offset_delta", int), ("base_timestamp", int), ("max_timestamp", int),
        ("producer_id", int), ("producer_epoch", int), ("base_sequence", int), ("records_count", int)])):
    """The 61-byte header of one batch, plus where it sits."""

    __slots__ = ()

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


_new_header = tuple.__new__


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at pos (the caller made sure header_bytes(buf, pos) bytes are there).

    Magic 0/1 entries (Kafka's old message sets, legacy.py) come back as a BatchHeader too, so
    every reader walks them like v2 batches; given fewer bytes than the whole entry, only the
    framing (size, magic) and the entry's own offset are meaningful.
    """
    if len(buf) - pos > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] < MAGIC_V2:
        if len(buf) - pos < legacy.header_bytes(buf, pos):
            offset, length = BASE_OFFSET.unpack_from(buf, pos)[0], INT32.unpack_from(buf, pos + 8)[0]
            return BatchHeader(offset, length, legacy.NO_LEADER_EPOCH, buf[pos + MAGIC_OFFSET], 0, 0, 0,
                               -1, -1, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, -1)
        return BatchHeader._make(legacy.header_fields(buf, pos))
    return _new_header(BatchHeader, BATCH_HEADER.unpack_from(buf, pos))  # BatchHeader._make, without its Python frame


def header_bytes(buf: bytes | memoryview, pos: int = 0) -> int:
    """Bytes from pos that read_header needs: 61 for v2, the whole entry for magic 0/1 (a
    compressed one's first offset is inside it); 17 while fewer than that are there."""
    if len(buf) - pos < HEADER_SIZE_UP_TO_MAGIC:
        return HEADER_SIZE_UP_TO_MAGIC
    if buf[pos + MAGIC_OFFSET] < MAGIC_V2:
        return max(legacy.header_bytes(buf, pos), HEADER_SIZE_UP_TO_MAGIC)
    return RECORD_BATCH_OVERHEAD


def min_batch_size(magic: int) -> int:
    """The smallest valid batch (or magic 0/1 entry) on disk."""
    return legacy.ENTRY_OVERHEAD[magic] if legacy.is_legacy(magic) else RECORD_BATCH_OVERHEAD


def crc_ok(buf: bytes | memoryview, pos: int, header: BatchHeader) -> bool:
    """True if the stored CRC-32C matches bytes [pos+21, pos+size) (and all of them are there);
    for magic 0/1, the CRC-32 of [pos+16, pos+size)."""
    if header.magic < MAGIC_V2:
        return legacy.crc_ok(buf, pos, header.batch_length, header.crc)
    end = pos + header.size
    covered = memoryview(buf)[pos + ATTRIBUTES_OFFSET:end]  # no copy of a ~1 MiB batch
    return len(covered) == end - pos - ATTRIBUTES_OFFSET and crc32c(covered) == header.crc


# --- encode -----------------------------------------------------------------------------------
def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [_varint(len(headers))]
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8", "surrogateescape")  # the decoder's inverse, for any key it returns
        parts.append(_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL)
        else:
            parts.append(_varint(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


def encode_records(records: Sequence[RecordIn], base_timestamp: int,
                   offset_deltas: Sequence[int] | None = None) -> bytes:
    """The records section of a batch: each record's length varint then its body. Offset deltas
    are 0, 1, 2... unless given (a compacted batch keeps its survivors' own offsets).
    Big batches go through the compiled builder (fastrecords), the same bytes."""
    if fastrecords.wanted(len(records)):
        fast = fastrecords.encode_records(records, base_timestamp, offset_deltas)
        if fast is not None:
            return fast
    _encode_tables()
    out: list[bytes] = []
    append = out.append
    join = b"".join
    unsigned = _VARINT
    size = _VARINT_TABLE_SIZE
    signed = _SIGNED_VARINT
    null = _NULL
    zero = _ZERO
    attributes = _ATTRIBUTES
    # ts - low indexes the signed table for deltas in [-2**13, 2**13)
    low = base_timestamp - _SIGNED_HALF
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    for delta, (key, value, headers, timestamp) in zip(deltas, records, strict=True):
        t = timestamp - low
        ts_part = signed[t] if 0 <= t < size else encode_varint(timestamp - base_timestamp)
        off_part = unsigned[delta] if 0 <= delta < size else encode_varint(delta)
        if key is None:
            key_part = null
        else:
            n = len(key)
            key_part = (unsigned[n] if n < size else encode_varint(n)) + key
        if value is None:
            value_length = null
            value = b""
        else:
            n = len(value)
            value_length = unsigned[n] if n < size else encode_varint(n)
        body = join((attributes, ts_part, off_part, key_part, value_length, value,
                     _encode_headers(headers) if headers else zero))
        n = len(body)
        append(unsigned[n] if n < size else encode_varint(n))
        append(body)
    return join(out)


_TIMESTAMP_OF = itemgetter(3)


def encode_batch(
    records: Sequence[RecordIn],
    base_offset: int = 0,
    *,
    codec: int = compression.NONE,
    timestamp_type: int = CREATE_TIME,
    log_append_time_ms: int | None = None,
    leader_epoch: int = KLOG_LEADER_EPOCH,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one RecordBatch v2 holding `records` (non-empty), offsets base_offset..;
    `max_timestamp`: the records' largest timestamp when the caller kept it (saves a pass)."""
    count = len(records)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    assert count <= RECORDS_PER_BATCH_MAX
    base_timestamp = records[0][3]
    if max_timestamp is None:
        max_timestamp = max(map(_TIMESTAMP_OF, records))
    return write_section(encode_records(records, base_timestamp), count, base_offset=base_offset,
                         base_timestamp=base_timestamp, max_timestamp=max_timestamp, codec=codec,
                         timestamp_type=timestamp_type, log_append_time_ms=log_append_time_ms,
                         leader_epoch=leader_epoch)


def write_batch(records: Sequence[RecordIn], *, base_offset: int, attributes: int, last_offset_delta: int,
                base_timestamp: int, max_timestamp: int, leader_epoch: int = KLOG_LEADER_EPOCH,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, offset_deltas: Sequence[int] | None = None) -> bytes:
    """klog's one RecordBatch v2 writer: every header field as given, the records section
    (compressed by the codec in `attributes`) and its CRC. encode_batch (producers) and the
    cleaner's rewrite of a compacted batch (explicit offset deltas, producer fields, the
    delete-horizon flag, an empty batch) both come here."""
    return _framed(encode_records(records, base_timestamp, offset_deltas), len(records), base_offset=base_offset,
                   attributes=attributes, last_offset_delta=last_offset_delta, base_timestamp=base_timestamp,
                   max_timestamp=max_timestamp, leader_epoch=leader_epoch, producer_id=producer_id,
                   producer_epoch=producer_epoch, base_sequence=base_sequence)


def _framed(body: bytes, count: int, *, base_offset: int, attributes: int, last_offset_delta: int,
            base_timestamp: int, max_timestamp: int, leader_epoch: int, producer_id: int = NO_PRODUCER_ID,
            producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE) -> bytes:
    """A batch around an encoded records section: compressed by the codec in `attributes`, the header, the CRC."""
    codec_id = attributes & COMPRESSION_CODEC_MASK
    if codec_id and count:
        body = compression.compress(codec_id, body)
    covered = CRC_COVERED_HEADER.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                      producer_id, producer_epoch, base_sequence, count)
    crc = crc_of(covered, body)
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)
    prefix = BATCH_PREFIX.pack(base_offset, batch_length, leader_epoch, MAGIC_V2, crc)
    return b"".join((prefix, covered, body))


class RecordsBuilder:
    """A producer batch's records section; the bytes are encode_records' of them all at once.

    Records added are kept as tuples and encoded when the batch is written (one batch at a time,
    sequentially: the cheapest for a partition that fills its batches in turn), unless go_fast()
    started the compiled builder: from then on they are encoded as they arrive, which costs about
    half as much as walking a partition's records, scattered among a thousand others', at flush
    (klog produce -K into 1,000 partitions). From the first record the compiled builder refuses,
    the rest are kept as tuples again. `append` and `size` are the compiled builder's methods while
    it takes records (None otherwise): a caller appending records itself passes offset delta `count`
    and calls appended()."""

    __slots__ = ("count", "first_ts", "append", "size", "_fast", "_fast_count", "_tail", "_refused", "_whole")

    def __init__(self) -> None:
        self.count = 0
        self.first_ts: int | None = None
        self.append: Any = None
        self.size: Any = None
        self._fast: Any = None  # the compiled builder
        self._fast_count = 0  # records it holds (the first ones); count - _fast_count are in _tail
        self._tail: list[RecordIn] = []
        self._refused = False  # the compiled builder refused a record of this batch: Python for the rest
        self._whole: bytearray | None = None  # what whole_batch() gave (the builder is not built again)

    def add(self, records: Sequence[RecordIn]) -> None:
        if not records:
            return
        if self.count == 0:
            self.first_ts = records[0][3]
        if self.append is not None:
            self._sync()
            taken = fastrecords.append_records(self._fast, records, range(self.count, self.count + len(records)))
            self.count += taken
            self._fast_count = self.count
            if taken == len(records):
                return
            self.append = self.size = None  # refused one: the rest in Python
            self._refused = True
            records = records[taken:]
        self._tail.extend(records)
        self.count += len(records)

    def go_fast(self, limit: int | None = None) -> bool:
        """Whether the compiled builder takes the next records, starting it (with the records kept
        so far) if it can: the compiled module is there and took every record so far. `limit`:
        a new builder's (see fastrecords.new_builder)."""
        if self.append is not None:
            return True
        if self._refused or self.first_ts is None or self.first_ts == -1 or not fastrecords.available():
            return False  # -1 as a first timestamp means "none yet" to it (None: no first record yet)
        fast = fastrecords.new_builder(limit)
        if self._tail:
            if fastrecords.append_records(fast, self._tail, range(len(self._tail))) < len(self._tail):
                self._refused = True
                return False
            self._fast_count = len(self._tail)
            self._tail = []
        self._fast, self.append, self.size = fast, fast.append, fast.size
        return True

    def _sync(self) -> None:
        """After a caller appended through `append` and bumped `count`."""
        if self.append is not None:
            self._fast_count = self.count

    def appended(self, count: int) -> None:
        """A caller appended through `append` (offset deltas up to count - 1): it holds `count` records."""
        self.count = self._fast_count = count

    def section(self) -> bytes:
        """The records section (once: the compiled builder takes no more after it)."""
        if self._whole is not None:  # (its records, which stamping a base offset leaves as they are)
            return bytes(memoryview(self._whole)[RECORDS_OFFSET:])
        self._sync()
        head = fastrecords.built_section(self._fast) if self._fast is not None and self._fast_count > 0 else b""
        self.append = self.size = None
        if not self._tail:
            return head
        base = self._fast_count
        tail = encode_records(self._tail, self.first_ts, range(base, base + len(self._tail)) if base else None)
        return head + tail if head else tail

    def whole_batch(self, max_timestamp: int) -> bytearray | None:
        """The uncompressed create-time batch write_section would give, in the compiled builder's
        buffer, its header and CRC written there: no copy of the records section, and a
        bytearray, which the store stamps in place. None when the builder does not hold every
        record (then section() and write_section)."""
        if self._whole is not None:
            return self._whole
        if not self.count or (self._fast is not None if self._tail else self._fast is None) or (
                self._tail and not (fastrecords.wanted(self.count) and self.go_fast())):
            return None  # (go_fast: the records kept as tuples, appended to a new builder in one pass;
            # not for a few, which would load the compiled module for less than its import costs)
        # klog's header over the builder's (base offset 0, what klog knows of the records it
        # appended), packed in place, and the CRC over it and the records
        built = self._fast.buffer
        CRC_COVERED_HEADER.pack_into(built, ATTRIBUTES_OFFSET, CREATE_TIME, self.count - 1, self.first_ts,
                                     max_timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, self.count)
        BATCH_PREFIX.pack_into(built, 0, 0, len(built) - LOG_OVERHEAD, KLOG_LEADER_EPOCH, MAGIC_V2,
                               crc32c(memoryview(built)[ATTRIBUTES_OFFSET:]))
        self.append = self.size = self._fast = None  # (it takes no more: its buffer is the batch)
        self._whole = built
        return built

    def records(self, section: bytes) -> list[RecordIn]:
        """The records back from their section (to split a batch that passed max.message.bytes)."""
        out, _ = _decode_records(section, 0, self.count, 0, self.first_ts)
        return [(key, value, headers, ts) for _, ts, key, value, headers in out]


def write_section(section: bytes, count: int, *, base_timestamp: int, max_timestamp: int, base_offset: int = 0,
                  codec: int = compression.NONE, timestamp_type: int = CREATE_TIME,
                  log_append_time_ms: int | None = None, leader_epoch: int = KLOG_LEADER_EPOCH) -> bytes:
    """encode_batch's batch around an encoded records section of `count` records (a RecordsBuilder's)."""
    attributes = codec & COMPRESSION_CODEC_MASK
    if timestamp_type == LOG_APPEND_TIME:
        assert log_append_time_ms is not None
        attributes |= TIMESTAMP_TYPE_MASK
        max_timestamp = log_append_time_ms
    return _framed(section, count, base_offset=base_offset, attributes=attributes, last_offset_delta=count - 1,
                   base_timestamp=base_timestamp, max_timestamp=max_timestamp, leader_epoch=leader_epoch)


def crc_of(first: bytes, second: bytes) -> int:
    """CRC-32C over first+second without joining them."""
    return crc32c(second, crc32c(first))


def encode_header_fields(header: BatchHeader) -> bytes:
    """Re-pack a header (used when rewriting a batch's base offset or leader epoch)."""
    return BATCH_HEADER.pack(*header)


# --- decode -----------------------------------------------------------------------------------
# The smallest record body: attributes, timestampDelta, offsetDelta, keyLength, valueLength and
# headersCount, one byte each, after a one-byte length.
_MIN_RECORD_BYTES = 7
_GC_PAUSE_MIN_RECORDS = 512


def records_section(buf: bytes, pos: int, header: BatchHeader) -> tuple[bytes, int, int]:
    """The v2 batch's records section as (bytes, start, stop), decompressed if need be; checks
    that the record count can fit (each record takes at least _MIN_RECORD_BYTES)."""
    end = pos + header.size
    count = header.records_count
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec:
        try:
            data = compression.decompress(codec, memoryview(buf)[pos + RECORDS_OFFSET:end])
        except UnknownCodecIdError:
            raise UnsupportedCodecError(
                f"unsupported compression codec id {codec} (offset {header.base_offset})") from None
        except DecompressionError as e:
            raise CompressionError(str(e), offset=header.base_offset) from None
        start = 0
        stop = len(data)
    elif type(buf) is bytes:
        data = buf
        start = pos + RECORDS_OFFSET
        stop = end
    else:  # bytearray / memoryview: slices of those would not be bytes
        data = bytes(memoryview(buf)[pos + RECORDS_OFFSET:end])
        start = 0
        stop = end - pos - RECORDS_OFFSET  # the declared size: a truncated buf fails the checks below
    if count < 0 or count > (stop - start) // _MIN_RECORD_BYTES:
        raise CorruptLogError(f"invalid record count {count} for a batch of {header.size} bytes",
                              offset=header.base_offset)
    return data, start, stop


def decode_batch_records(buf: bytes, pos: int, header: BatchHeader, *, fast: bool = False,
                         trust_attributes: bool = True) -> list[RecordOut]:
    """Decode every record of the batch at buf[pos:]; the caller has already checked the CRC.

    fast=True (the read path) decodes with the compiled reader when it imports (fastrecords.wanted:
    from the first batch of FAST_MIN_RECORDS or more on), the same records; it also accepts a few malformations no
    Kafka client writes (see fastrecords), so validators keep the strict default.
    trust_attributes=False (batches from a cluster, whose logs klog cannot mark) first checks that
    no record's attributes byte is >= 0x80, the one byte the two read differently.

    Returns (offset, timestamp, key, value, headers) tuples; key, value and header values are
    `bytes` (or None), whatever buffer type `buf` is. Raises CorruptLogError (without a path; the
    caller adds it) when the records do not fill the batch exactly (Kafka's "Incorrect declared
    batch size"), when a record's fields do not fill its declared length, or for a malformed
    varint; klog.errors.CompressionError (a CorruptLogError) when the records section does not
    decompress; klog.errors.UnsupportedCodecError for codec ids 5-7.
    """
    if header.magic < MAGIC_V2:
        return legacy.records_of(buf, pos)
    data, start, stop = records_section(buf, pos, header)
    # The loop allocates two tracked containers per record (the tuple and its headers list), so
    # on a big batch the cyclic GC would run every few hundred records and, as the list grows and
    # gets promoted, walk the whole heap; none of them can form a cycle, so pause it meanwhile.
    pause_gc = header.records_count >= _GC_PAUSE_MIN_RECORDS and gc.isenabled()
    if pause_gc:
        gc.disable()
    try:
        if fast and fastrecords.wanted(header.records_count) and (
                trust_attributes or fastrecords.plain_attributes(data, start, header.records_count)):
            fast_records = fastrecords.records(buf, pos, data, start, stop)
            if fast_records is not None:  # LogAppendTime applied already
                return fast_records
        records, consumed_to = _decode_records(data, start, header.records_count, header.base_offset,
                                               header.base_timestamp)
    except (ValueError, IndexError) as e:
        raise CorruptLogError(f"malformed records in batch: {e}", offset=header.base_offset) from None
    finally:
        if pause_gc:
            gc.enable()
    if consumed_to != stop:
        raise CorruptLogError("incorrect declared batch size", offset=header.base_offset)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        # LogAppendTime: every record's timestamp is the batch's maxTimestamp
        append_time = header.max_timestamp
        records = [(offset, append_time, key, value, headers) for offset, _, key, value, headers in records]
    return records


def _decode_records(data: bytes, pos: int, count: int, base_offset: int,
                    base_timestamp: int) -> tuple[list[RecordOut], int]:
    """`count` records from data[pos:]; returns them and the position after the last one.

    One flat loop: the one- and two-byte varints (and three-byte offset deltas) that nearly every
    record uses are decoded inline from the tables; anything longer goes through _read_varint.
    Each record's fields must end exactly where its length says (ValueError otherwise); reading
    past the end of data raises IndexError. pos only moves forward, so it never wraps around.
    """
    _decode_tables()
    zz = _ZIGZAG
    zz2 = _ZIGZAG2
    len2 = _LENGTH2
    varint32 = _varint32
    out: list[RecordOut] = []
    append = out.append
    for _ in repeat(None, count):
        # length (end = where the record must end), then skip the attributes byte (unused)
        b = data[pos]
        if b < 0x80:
            end = pos + 1 + zz[b]
            pos += 2
        else:
            c = data[pos + 1]
            if c < 0x80:
                end = pos + len2[c][b]
                pos += 3
            else:
                n, pos = varint32(data, pos)
                end = pos + n
                pos += 1
        # timestampDelta (varlong)
        b = data[pos]
        if b < 0x80:
            ts_delta = zz[b]
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                ts_delta = zz2[c][b]
                pos += 2
            else:
                ts_delta, pos = _varlong(data, pos)
        # offsetDelta: past 63 records it takes two bytes, past 8191 three
        b = data[pos]
        if b < 0x80:
            off_delta = zz[b]
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                off_delta = zz2[c][b]
                pos += 2
            else:
                d = data[pos + 2]
                if d < 0x80:
                    raw = (b & 0x7F) | ((c & 0x7F) << 7) | (d << 14)
                    off_delta = (raw >> 1) ^ -(raw & 1)
                    pos += 3
                else:
                    off_delta, pos = varint32(data, pos)
        # key: 0x01 is -1, null; any negative length is null (Kafka: keySize < 0)
        if data[pos] == 1:
            key = None
            pos += 1
        else:
            b = data[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            else:
                n, pos = varint32(data, pos)
            if n < 0:
                key = None
            else:
                key = data[pos:pos + n]
                pos += n
        # value
        b = data[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        else:
            c = data[pos + 1]
            if c < 0x80:
                n = zz2[c][b]
                pos += 2
            else:
                n, pos = varint32(data, pos)
        if n < 0:
            value = None
        else:
            value = data[pos:pos + n]
            pos += n
        # headers; then the record must end exactly at `end`
        if data[pos] == 0 and pos + 1 == end:
            headers: list[Header] = []
            pos = end
        else:
            headers, pos = _decode_headers(data, pos)
            if pos != end:
                raise ValueError("record fields do not fill its declared length")
        append((base_offset + off_delta, base_timestamp + ts_delta, key, value, headers))
    return out, pos


def decode_batch_values(buf: bytes, pos: int, header: BatchHeader, null: bytes | None = None, *,
                        fast: bool = False, trust_attributes: bool = True) -> list[bytes | None]:
    """The values of every record of the batch at buf[pos:], `null` for a null value: what
    value-only output needs. With the compiled reader (fast=True, see decode_batch_records) only
    the values are built; otherwise this is decode_batch_records' one Python loop, values kept.

    The same checks as decode_batch_records (the CRC is the caller's), the same errors.
    """
    values = None
    if header.magic >= MAGIC_V2 and fast and fastrecords.wanted(header.records_count):
        data, start, stop = records_section(buf, pos, header)
        if trust_attributes or fastrecords.plain_attributes(data, start, header.records_count):
            values = fastrecords.values(buf, pos, data, start, stop)
    if values is None:
        values = [r[3] for r in decode_batch_records(buf, pos, header)]
    if null is not None and None in values:
        values = [null if v is None else v for v in values]
    return values


def decode_batch_timestamps_values(buf: bytes, pos: int, header: BatchHeader, null: bytes | None = None, *,
                                   fast: bool = False,
                                   trust_attributes: bool = True) -> tuple[list[int], list[bytes | None]]:
    """The timestamps and the values (`null` for a null one) of every record of the batch, as two
    lists: what merging several partitions' values in time order needs. The same checks and
    errors as decode_batch_records (whose records it falls back to)."""
    pair = None
    if header.magic >= MAGIC_V2 and fast and fastrecords.wanted(header.records_count):
        data, start, stop = records_section(buf, pos, header)
        if trust_attributes or fastrecords.plain_attributes(data, start, header.records_count):
            # the reader's record objects are GC-tracked and all alive at once (see decode_batch_records)
            pause_gc = header.records_count >= _GC_PAUSE_MIN_RECORDS and gc.isenabled()
            if pause_gc:
                gc.disable()
            try:
                pair = fastrecords.timestamps_values(buf, pos, data, start, stop)
            finally:
                if pause_gc:
                    gc.enable()
    if pair is None:
        records = decode_batch_records(buf, pos, header)
        pair = [r[1] for r in records], [r[3] for r in records]
    timestamps, values = pair
    if null is not None and None in values:
        values = [null if v is None else v for v in values]
    return timestamps, values


def _decode_headers(data: bytes, pos: int) -> tuple[list[Header], int]:
    count, pos = _varint32(data, pos)
    if count < 0:
        raise ValueError(f"invalid number of record headers {count}")
    if count > (len(data) - pos) // 2:  # each header takes at least two bytes
        raise ValueError(f"{count} record headers cannot fit in the batch")
    headers: list[Header] = []
    for _ in range(count):
        n, pos = _varint32(data, pos)
        if n < 0:
            raise ValueError(f"invalid negative header key size {n}")
        if pos + n > len(data):
            raise ValueError("header key runs past the end of the batch")
        hkey = data[pos:pos + n].decode("utf-8", "surrogateescape")
        pos += n
        n, pos = _varint32(data, pos)
        if n < 0:
            hvalue = None
        else:
            hvalue = data[pos:pos + n]
            pos += n
        headers.append((hkey, hvalue))
    return headers, pos


def with_base_offset(batch: bytes | bytearray, base_offset: int, leader_epoch: int | None = None) -> bytearray:
    """The batch with its base offset (and leader epoch) stamped in place, both outside the CRC:
    a bytearray is stamped as it is (and returned), bytes are copied once."""
    stamped = batch if isinstance(batch, bytearray) else bytearray(batch)
    BASE_OFFSET.pack_into(stamped, BASE_OFFSET_OFFSET, base_offset)
    if leader_epoch is not None:
        INT32.pack_into(stamped, PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
    return stamped

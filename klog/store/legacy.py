"""Kafka's old message formats, magic 0 and 1 (message sets), read in place.

A Kafka broker's log directory can hold segments written before 0.11 (or by brokers configured
with an old `log.message.format.version`). They are data: klog reads them through the same
read cursor as RecordBatch v2, by presenting each log entry as a BatchHeader:

    offset int64 | size int32 | crc uint32 | magic int8 | attributes int8 | [timestamp int64, v1]
    | key (int32 length, -1 null) | value (int32 length, -1 null)

The framing (offset, size, magic at byte 16) is the same as a v2 batch, so an entry takes
size + 12 bytes. The CRC is plain CRC-32 over magic..end. A compressed entry (a "wrapper") holds
a whole inner message set as its value; its offset is the LAST inner offset. Inner offsets are
absolute in v0 and relative (0..n-1) in v1, where absolute = wrapper offset - last relative +
relative (Kafka's AbstractLegacyRecordBatch). In v1 a LogAppendTime wrapper's timestamp is every
inner record's timestamp; v0 has no timestamps (-1).
"""

from __future__ import annotations

import struct
import zlib

from klog.errors import (
    CompressionError,
    CorruptLogError,
    DecompressionError,
    UnknownCodecIdError,
    UnsupportedCodecError,
)
from klog.store import compression
from klog.store.format import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
MAGIC_OFFSET = 16
# bytes of an entry with a null key and a null value (Kafka's LegacyRecord.RECORD_OVERHEAD_V0/V1 + 12)
ENTRY_OVERHEAD = {MAGIC_V0: LOG_OVERHEAD + 14, MAGIC_V1: LOG_OVERHEAD + 22}
_KEY_AT = {MAGIC_V0: 18, MAGIC_V1: 26}  # from the entry's start
NO_LEADER_EPOCH = -1  # the field does not exist before v2


def is_legacy(magic: int) -> bool:
    return magic in (MAGIC_V0, MAGIC_V1)


def header_bytes(buf: bytes | memoryview, pos: int) -> int:
    """Bytes from pos a legacy header needs: the whole entry (a wrapper's first offset is inside)."""
    magic = buf[pos + MAGIC_OFFSET]
    return max(_LENGTH.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD, ENTRY_OVERHEAD.get(magic, 0))


def _entry(buf: bytes | memoryview, pos: int) -> tuple[int, int, int, int, int, int, bytes | None, bytes | None]:
    """(offset, size, crc, magic, attributes, timestamp, key, value) of the entry at pos."""
    offset, size, crc, magic, attributes = _PREFIX.unpack_from(buf, pos)
    end = pos + size + LOG_OVERHEAD
    if not is_legacy(magic) or size + LOG_OVERHEAD < ENTRY_OVERHEAD[magic] or end > len(buf):
        raise ValueError(f"invalid message at offset {offset}")
    timestamp = _TIMESTAMP.unpack_from(buf, pos + 18)[0] if magic == MAGIC_V1 else NO_TIMESTAMP
    at = pos + _KEY_AT[magic]
    fields: list[bytes | None] = []
    for _ in range(2):
        (n,) = _LENGTH.unpack_from(buf, at)
        at += 4
        if n < 0:
            fields.append(None)
            continue
        if at + n > end:
            raise ValueError(f"message at offset {offset} runs past its size")
        fields.append(bytes(buf[at:at + n]))
        at += n
    if at != end:
        raise ValueError(f"message at offset {offset}: fields do not fill its size")
    return offset, size, crc, magic, attributes, timestamp, fields[0], fields[1]


def _crc_matches(buf: bytes | memoryview, pos: int, size: int, crc: int) -> bool:
    return zlib.crc32(memoryview(buf)[pos + MAGIC_OFFSET:pos + size + LOG_OVERHEAD]) == crc


def crc_ok(buf: bytes | memoryview, pos: int, size: int, crc: int) -> bool:
    """CRC-32 (not CRC-32C) of magic..end matches, and the whole entry is in buf."""
    return len(buf) >= pos + size + LOG_OVERHEAD and _crc_matches(buf, pos, size, crc)


def _decompress(codec: int, magic: int, value: bytes, offset: int) -> bytes:
    if codec == compression.LZ4 and magic == MAGIC_V0 and len(value) >= 7:
        # Kafka 0.8-0.9 hashed the frame's magic number into the LZ4 header checksum; put the
        # checksum the frame format expects back before decoding
        descriptor_end = 7 + (8 if value[4] & 0x08 else 0)
        fixed = (compression._xxh32(value[4:descriptor_end - 1]) >> 8) & 0xFF
        value = value[:descriptor_end - 1] + bytes((fixed,)) + value[descriptor_end:]
    try:
        return compression.decompress(codec, value)
    except UnknownCodecIdError:
        raise UnsupportedCodecError(f"unsupported compression codec id {codec} (offset {offset})") from None
    except DecompressionError as e:
        raise CompressionError(str(e), offset=offset) from None


Record = tuple[int, int, bytes | None, bytes | None, list]


def records_of(buf: bytes | memoryview, pos: int) -> list[Record]:
    """Every record of the entry at pos, as codec.RecordOut tuples (offset, timestamp, key, value,
    headers=[]). Raises CorruptLogError for a malformed entry or inner message set."""
    try:
        offset, size, crc, magic, attributes, timestamp, key, value = _entry(buf, pos)
    except (ValueError, struct.error) as e:
        raise CorruptLogError(f"malformed message: {e}") from None
    codec = attributes & COMPRESSION_CODEC_MASK
    if not codec:
        return [(offset, timestamp, key, value, [])]
    if value is None:
        raise CorruptLogError("compressed message without a value", offset=offset)
    inner = _decompress(codec, magic, value, offset)
    entries = []
    at = 0
    try:
        while at < len(inner):
            e = _entry(inner, at)
            if e[3] != magic or e[4] & COMPRESSION_CODEC_MASK:
                raise ValueError(f"inner message at {e[0]} has magic {e[3]} or is compressed again")
            if not _crc_matches(inner, at, e[1], e[2]):
                raise ValueError(f"inner message CRC mismatch at inner offset {e[0]}")
            entries.append(e)
            at += e[1] + LOG_OVERHEAD
    except (ValueError, struct.error) as e:
        raise CorruptLogError(f"malformed compressed message set: {e}", offset=offset) from None
    if not entries:
        raise CorruptLogError("compressed message holds no messages", offset=offset)
    shift = offset - entries[-1][0] if magic == MAGIC_V1 else 0
    append_time = attributes & TIMESTAMP_TYPE_MASK and magic == MAGIC_V1
    return [(e[0] + shift, timestamp if append_time else e[5], e[6], e[7], []) for e in entries]


def header_fields(buf: bytes | memoryview, pos: int) -> tuple:
    """The BatchHeader fields of the entry at pos (the whole entry must be in buf).

    base_offset is the first record's offset; for a wrapper whose payload does not decode it is
    the wrapper's own (last) offset, and records_count is -1: reading it raises the damage.
    """
    offset, size, crc, magic, attributes = _PREFIX.unpack_from(buf, pos)
    timestamp = _TIMESTAMP.unpack_from(buf, pos + 18)[0] if magic == MAGIC_V1 else NO_TIMESTAMP
    base, count, base_ts = offset, 1, timestamp
    if attributes & COMPRESSION_CODEC_MASK:
        try:
            records = records_of(buf, pos)
            base, count, base_ts = records[0][0], len(records), records[0][1]
        except (CorruptLogError, UnsupportedCodecError):
            count = -1
    return (base, size, NO_LEADER_EPOCH, magic, crc, attributes & 0x0F, offset - base, base_ts, timestamp,
            NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, count)


# -- conversion for Kafka's oldest clients (klog serve's Produce v0-v2 and Fetch v0-v3) -------------
# Kafka 3.x stores only v2 batches: message sets from old producers are validated and up-converted on
# the way in, and old fetchers get message sets down-converted from the stored batches on the way out.

def message_bytes(offset: int, timestamp: int, key: bytes | None, value: bytes | None, magic: int,
                  attributes: int = 0) -> bytes:
    """One uncompressed magic 0/1 log entry (its CRC-32 over magic..end)."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == MAGIC_V1:
        body += _TIMESTAMP.pack(timestamp)
    for field in (key, value):
        body += _LENGTH.pack(-1) if field is None else _LENGTH.pack(len(field)) + field
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + bytes(body)


def to_v2_batch(message_set: bytes) -> bytes:
    """A Produce v0-v2 message set as the one RecordBatch v2 Kafka 3.x would store: every entry's CRC
    and framing checked (CorruptLogError otherwise), compressed wrappers opened, the records' keys,
    values and timestamps (magic 1: CreateTime, as Kafka keeps them; magic 0: none) in order, in the
    set's codec (the broker recompresses per the topic's compression.type). The offsets the producer
    put there are ignored: the log assigns them, as Kafka's LogValidator does."""
    from klog.store import codec

    buf = memoryview(message_set)
    records: list = []
    codecs: set[int] = set()
    magics: set[int] = set()
    pos = 0
    while pos < len(buf):
        if len(buf) - pos < LOG_OVERHEAD + 6:
            raise CorruptLogError(f"message set ends in a partial message at byte {pos}")
        _, size, crc, magic, attributes = _PREFIX.unpack_from(buf, pos)
        if not is_legacy(magic):
            raise CorruptLogError(f"message of magic {magic} in a Produce v0-v2 message set")
        if not crc_ok(buf, pos, size, crc):
            raise CorruptLogError(f"message at byte {pos}: CRC mismatch or truncated")
        magics.add(magic)
        codecs.add(attributes & COMPRESSION_CODEC_MASK)
        append_time = magic == MAGIC_V1 and attributes & TIMESTAMP_TYPE_MASK
        for _, timestamp, key, value, _ in records_of(buf, pos):
            # a client's LogAppendTime means nothing: the topic's message.timestamp.type decides
            records.append((key, value, [], NO_TIMESTAMP if append_time else timestamp))
        pos += size + LOG_OVERHEAD
    if not records:
        raise CorruptLogError("empty message set")
    if len(magics) > 1:
        raise CorruptLogError("message set mixes magic 0 and 1")
    return codec.encode_batch(records, 0, codec=max(codecs))


def wrapper_bytes(records: list[tuple[int, int, bytes | None, bytes | None]], magic: int, codec: int,
                  append_time: int | None = None) -> bytes:
    """A compressed magic 0/1 wrapper message holding `records` (offset, timestamp, key, value), as
    Kafka's MemoryRecordsBuilder writes one: inner offsets absolute (magic 0) or relative to the
    first (magic 1), the wrapper at the last offset with the largest timestamp (or `append_time`,
    LogAppendTime), the value compressed with `codec` (never LZ4 with magic 0: from_v2_batches sends
    those records uncompressed)."""
    first = records[0][0]
    type_bit = TIMESTAMP_TYPE_MASK if append_time is not None and magic == MAGIC_V1 else 0
    inner = b"".join(message_bytes(offset - first if magic == MAGIC_V1 else offset,
                                   append_time if append_time is not None else ts, key, value, magic, type_bit)
                     for offset, ts, key, value in records)
    value = compression.compress(codec, inner)
    wrapper_ts = append_time if append_time is not None else max(ts for _, ts, _, _ in records)
    return message_bytes(records[-1][0], wrapper_ts, None, value, magic, codec | type_bit)


def from_v2_batches(data: bytes | memoryview, magic: int, from_offset: int = 0) -> bytes:
    """Stored batches (whole ones; a partial one at the end is left out, as clients drop it) as
    a magic 0/1 message set: what Fetch v0-v1 (magic 0) and v2-v3 (magic 1) read, as Kafka's
    RecordsUtil.downConvert makes it: an uncompressed batch becomes one message per record (those
    below `from_offset` left out), a compressed one a wrapper message in the same codec with all
    its records (UnsupportedCodecError for zstd, which magic 0/1 cannot hold: Kafka answers
    UNSUPPORTED_COMPRESSION_TYPE); control batches (transaction markers) are left out and headers
    dropped. Old entries of an imported Kafka log are converted the same way."""
    from klog.store import codec

    out = []
    pos = 0
    view = memoryview(data)
    while len(view) - pos >= LOG_OVERHEAD + 6:
        if is_legacy(view[pos + MAGIC_OFFSET]):
            size = _LENGTH.unpack_from(view, pos + 8)[0]
            if pos + size + LOG_OVERHEAD > len(view):
                break
            out.extend(message_bytes(offset, ts, key, value, magic) for offset, ts, key, value, _
                       in records_of(view, pos) if offset >= from_offset)
            pos += size + LOG_OVERHEAD
            continue
        if len(view) - pos < codec.min_batch_size(2):
            break
        header = codec.read_header(view, pos)
        end = pos + header.batch_length + LOG_OVERHEAD
        if end > len(view):
            break
        batch_codec = header.attributes & COMPRESSION_CODEC_MASK
        if batch_codec == compression.LZ4 and magic == MAGIC_V0:
            # Kafka sends magic 0 LZ4 with Kafka 0.8's broken frame checksum (KAFKA-3160), which
            # readers that check it (sarama, whose defaults fetch magic 0) refuse: uncompressed instead
            batch_codec = 0
        if not header.is_control and header.last_offset >= from_offset and batch_codec:
            if batch_codec == compression.ZSTD:
                raise UnsupportedCodecError(f"a zstd batch at offset {header.base_offset} cannot be down-converted "
                                            f"to magic {magic}")
            records = [r[:4] for r in codec.decode_batch_records(bytes(view[pos:end]), 0, header)]
            if records:
                append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
                out.append(wrapper_bytes(records, magic, batch_codec, append_time))
        elif not header.is_control and header.last_offset >= from_offset:
            append_time = header.attributes & TIMESTAMP_TYPE_MASK
            attributes = TIMESTAMP_TYPE_MASK if append_time and magic == MAGIC_V1 else 0
            for offset, timestamp, key, value, _ in codec.decode_batch_records(bytes(view[pos:end]), 0, header):
                if offset >= from_offset:
                    ts = header.max_timestamp if append_time else timestamp
                    out.append(message_bytes(offset, ts, key, value, magic, attributes))
        pos = end
    return b"".join(out)

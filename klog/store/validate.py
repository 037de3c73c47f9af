"""klog's one batch validator (Kafka's RecordBatch.ensureValid and LogValidator), used by a
client's batch on the way in (klog serve's Produce, broker/batches.py), recovery
(segment.recover), and `verify`/`dump` (inspect.py).

Each check returns the one-line text of what is wrong (None: nothing), so every caller words a
problem the same way and adds only where it is (a position, an offset).

The record-structure check is a validate-only walk over the records (record_structure_ok): it
steps over each field with the decoder's bounds and builds nothing per record, which costs a
fraction of decoding them into tuples. Only when it finds a fault (or meets an encoding it does
not take the fast way, such as a 3-byte record length) is the batch decoded by the store's one
decoder (codec.decode_batch_records), which then names the fault in its own words.

Before the walk, a batch whose records all share one shape (key and value lengths, no headers:
what most producers send, e.g. librdkafka's batches of equal-sized values) is checked by one
regular-expression pass in C (uniform_records_ok), ~3x faster than the walk; anything else, or
any doubt, goes on to the walk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from klog.errors import CorruptLogError, UnsupportedCodecError
from klog.store import codec, compression
from klog.store.codec import BatchHeader, read_header
from klog.store.format import CONTROL_FLAG_MASK, MAGIC_V2, RECORD_BATCH_OVERHEAD, RELATIVE_OFFSET_MAX
from klog.store.limits import MAX_MESSAGE_BYTES_DEFAULT, read_expansion_bytes_max
from klog.store.plain import FrozenPlain
from klog.store.walk import SCAN_CHUNK_BYTES, Tail, walk_batches

MIN_RECORD_BYTES = 7  # length, attributes, timestamp and offset deltas, key/value lengths, header count


class Problem(FrozenPlain):
    """What is wrong with a batch: `corrupt` False means well-formed but not acceptable (Kafka's
    INVALID_RECORD rather than CORRUPT_MESSAGE); `record_index` the record at fault, if one is."""

    _fields = ("text", "corrupt", "record_index")
    text: str
    corrupt: bool
    record_index: int | None

    def __init__(self, text: str, corrupt: bool = True, record_index: int | None = None) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "corrupt", corrupt)
        object.__setattr__(self, "record_index", record_index)


# --- one batch, as a client sent it -----------------------------------------------------------
def client_batch_problem(data: bytes) -> tuple[BatchHeader | None, Problem | None]:
    """The header of `data` and what makes it unacceptable as exactly one whole CRC-valid
    RecordBatch v2 written by a client (None: nothing), checked in Kafka's order."""
    have = len(data)
    if have < RECORD_BATCH_OVERHEAD:
        return None, Problem(f"record batch of {have} bytes is shorter than its 61-byte header")
    header = read_header(data)
    if header.magic != MAGIC_V2:
        return header, Problem(f"record batch magic {header.magic} (only v2 batches are accepted)", corrupt=False)
    size = header.size  # (each property read is a Python call: read once)
    if size > have:
        return header, Problem(f"record batch is cut short ({have} of {size} bytes)")
    if size < have:
        if have - size >= RECORD_BATCH_OVERHEAD:
            return header, Problem("more than one record batch in one partition's data", corrupt=False)
        return header, Problem(f"{have - size} bytes after the record batch")
    count = header.records_count
    if count < 1 or header.last_offset_delta != count - 1:
        return header, Problem(f"record count {count} does not match last offset delta {header.last_offset_delta}")
    batch_codec = header.codec
    if batch_codec not in compression.CODEC_NAMES:
        return header, Problem(f"unknown compression codec id {batch_codec}", corrupt=False)
    if not batch_codec and count > (size - RECORD_BATCH_OVERHEAD) // MIN_RECORD_BYTES:
        return header, Problem(f"{count} records cannot fit in a batch of {size} bytes")
    if not codec.crc_ok(data, 0, header):
        return header, Problem("record batch CRC mismatch")
    if header.attributes & CONTROL_FLAG_MASK:
        return header, Problem("clients may not write control batches", corrupt=False)
    return header, None


# --- one batch's framing (walk.py, where every walk checks it), CRC and records ---------------------

def crc_problem(data: bytes | memoryview, pos: int, header: BatchHeader) -> str | None:
    return None if codec.crc_ok(data, pos, header) else "CRC mismatch"


def records_problem(data: bytes, pos: int, header: BatchHeader, consecutive: bool = False) -> Problem | None:
    """What is wrong with the records of the CRC-valid batch at data[pos:] (None: nothing): their
    structure (the decoder's rules: varints and lengths in bounds, records filling the batch
    exactly, a bounded decompressed size) and, with `consecutive`, offset deltas other than
    0, 1, 2, ... (a client's batch; a compacted one on disk has gaps)."""
    try:
        if header.magic == MAGIC_V2 and record_structure_ok(data, pos, header, consecutive):
            return None
        records = codec.decode_batch_records(data, pos, header)
    except (CorruptLogError, UnsupportedCodecError) as e:
        # the decoder names the batch's base offset; callers say where the batch is themselves
        return Problem(str(e).removesuffix(f" (offset {header.base_offset})"))
    if consecutive:
        index = high_attributes_record(data, pos, header)
        if index is not None:
            return Problem(f"record {index} has attributes byte >= 0x80: Kafka's record attributes are unused "
                           "and clients write 0", record_index=index)
        base = header.base_offset
        offsets = [record[0] for record in records]
        if offsets != list(range(base, base + len(offsets))):  # compared in C; the culprit found only if wrong
            index = next(i for i, offset in enumerate(offsets) if offset != base + i)
            return Problem(f"record {index} has offset delta {offsets[index] - base} (expected {index}): "
                           "offsets inside a batch must be consecutive", corrupt=False, record_index=index)
    return None


def high_attributes_record(data: bytes, pos: int, header: BatchHeader) -> int | None:
    """The index of the first record of the (decodable) v2 batch whose attributes byte is >= 0x80,
    or None. Kafka leaves record attributes unused, and no client writes anything but 0; the
    compiled reader (store/fastrecords.py) reads that byte as a varint, so a batch with such a byte
    could be read differently by it and by the strict decoder: a client may not write one."""
    if header.magic != MAGIC_V2:
        return None
    data, at, _ = codec.records_section(data, pos, header)
    for index in range(header.records_count):
        length, body = codec.decode_varint(data, at)
        if data[body] >= 0x80:
            return index
        at = body + length
    return None


def _unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


# Step tables for the one- and two-byte varints nearly every record uses, built on first use:
# _END1[b] / _END2[c][b]: how far past a length varint b (b, c) its record ends; _SKIP1[b] /
# _SKIP2[c][b]: how far past a key or value length varint the next field starts (a negative
# length is a null: nothing follows it).
_KEY_AND_VALUE = (0, 1)  # two length-prefixed fields, stepped over alike
_END1: list[int] = []
_END2: list[list[int]] = []
_SKIP1: list[int] = []
_SKIP2: list[list[int]] = []


def _step_tables() -> None:
    if _SKIP2:
        return
    _END1.extend(1 + _unzigzag(b) for b in range(0x80))
    _SKIP1.extend(1 + max(_unzigzag(b), 0) for b in range(0x80))
    rows = [[0] * 0x80 + [_unzigzag((b & 0x7F) | (c << 7)) for b in range(0x80, 0x100)] for c in range(0x80)]
    _END2.extend([2 + n for n in row] for row in rows)
    _SKIP2.extend([2 + max(n, 0) for n in row] for row in rows)  # last: it says all are built


def record_structure_ok(data: bytes, pos: int, header: BatchHeader, consecutive: bool = False) -> bool:
    """True if the v2 batch's records are certainly well-formed (and, with `consecutive`, their
    offset deltas run 0, 1, 2, ...); False if they may not be: the caller then decodes them to
    find out and say why. Raises what codec's records-section reader raises (decompression, count).

    Steps over each record's fields without building anything, the way the decoder reads them:
    each record must end exactly where its length says (a varint wider than the common widths,
    such as a record over 8 KiB, leaves the batch to the decoder).
    """
    data, pos, stop = codec.records_section(data, pos, header)  # the decoder's own bounds and count check
    count = header.records_count
    if UNIFORM_MIN_RECORDS <= count <= UNIFORM_MAX_RECORDS and uniform_records_ok(data, pos, stop, count, consecutive):
        return True
    _step_tables()
    end1, end2, skip1, skip2 = _END1, _END2, _SKIP1, _SKIP2
    try:
        for want in range(0, 2 * header.records_count, 2):  # zigzag of offset delta i is 2i
            b = data[pos]  # length (then the attributes byte)
            if b < 0x80:
                end = pos + end1[b]
                pos += 2
            else:
                c = data[pos + 1]
                if c >= 0x80:
                    return False
                end = pos + end2[c][b]
                pos += 3
            if data[pos - 1] >= 0x80:  # attributes with the high bit: see high_attributes_record
                return False
            if data[pos] < 0x80:  # timestampDelta
                pos += 1
            elif data[pos + 1] < 0x80:
                pos += 2
            else:
                return False
            b = data[pos]  # offsetDelta: past 63 records two bytes, past 8191 three
            if b < 0x80:
                raw = b
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    raw = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    d = data[pos + 2]
                    if d >= 0x80:
                        return False
                    raw = (b & 0x7F) | ((c & 0x7F) << 7) | (d << 14)
                    pos += 3
            if consecutive and raw != want:
                return False
            for _ in _KEY_AND_VALUE:
                b = data[pos]
                if b < 0x80:
                    pos += skip1[b]
                else:
                    c = data[pos + 1]
                    if c >= 0x80:
                        return False
                    pos += skip2[c][b]
            if data[pos]:
                if _after_headers(data, pos) != end:  # -1 (not sure) never is
                    return False
            elif pos + 1 != end:  # no headers, and nothing left over
                return False
            pos = end
    except IndexError:
        return False
    return pos == stop


# --- batches of records of one shape: one regular-expression pass ------------------------------
# Below this many records the walk costs little; a pattern is built (and cached) per key/value
# length pair, for lengths whose varints take one or two bytes (the walk's own limit).
UNIFORM_MIN_RECORDS = 16
# Above this many the walk takes the batch: the pass's list holds two entries a record and the
# expected offset deltas one bytes object each (a 100 MiB batch of empty records would be 15 M)
UNIFORM_MAX_RECORDS = 1 << 15
UNIFORM_LENGTH_MAX = 8191 - 16  # the record length varint stays within two bytes
_UNIFORM_PATTERNS_MAX = 256
_uniform_patterns: dict[tuple[int, int], re.Pattern[bytes]] = {}
_offset_deltas: list[bytes] = []  # encode_varint(i) for i in range(len): offset deltas 0, 1, 2, ...
_LAST = b"[\x00-\x7f]"  # a varint's last byte
_MORE = b"[\x80-\xff]"  # a varint's byte with more to follow


def _uniform_pattern(key_len: int, value_len: int) -> re.Pattern[bytes]:
    """One record with a key of `key_len` bytes (-1: null) and a value of `value_len` bytes,
    attributes 0 and no headers, in canonical varints; group 1 is its offset delta's bytes.

    The record length literal is tied to the widths of the timestamp delta (1 or 2 bytes) and
    offset delta (1-3 bytes) that make the fields fill it exactly; those widths are told apart by
    the high bit of each byte, so a record matches at most one way at a given position."""
    found = _uniform_patterns.get((key_len, value_len))
    if found is not None:
        return found
    fields = b""
    fields_bytes = 0
    for length in (key_len, value_len):
        encoded = codec.encode_varint(length)
        fields += re.escape(encoded) + (b".{%d}" % length if length > 0 else b"")
        fields_bytes += len(encoded) + max(length, 0)
    starts = []
    for ts_bytes in (1, 2):
        for od_bytes in (1, 2, 3):
            record_len = 1 + ts_bytes + od_bytes + fields_bytes + 1  # attributes ... header count
            timestamp = _LAST if ts_bytes == 1 else _MORE + _LAST
            starts.append(re.escape(codec.encode_varint(record_len)) + b"\x00" + timestamp +
                          b"(?=" + _MORE * (od_bytes - 1) + _LAST + b")")
    # `|.+`: where no record matches, the rest of the batch is one match with no offset delta
    # (None), at once, instead of a search on through it (`.` with DOTALL: no byte is looked at)
    pattern = re.compile(b"(?:" + b"|".join(starts) + b")(" + _LAST + b"|" + _MORE + _LAST + b"|" + _MORE + _MORE +
                         _LAST + b")" + fields + b"\x00|.+", re.DOTALL)
    if len(_uniform_patterns) >= _UNIFORM_PATTERNS_MAX:
        _uniform_patterns.clear()
    _uniform_patterns[(key_len, value_len)] = pattern
    return pattern


def _expected_offset_deltas(count: int) -> list[bytes]:
    global _offset_deltas
    deltas = _offset_deltas
    if len(deltas) < count:  # a new list, swapped in whole: other threads may be reading the old one
        size = max(count, min(2 * len(deltas), UNIFORM_MAX_RECORDS), 1 << 13)
        deltas = _offset_deltas = [codec.encode_varint(i) for i in range(size)]
    return deltas[:count]


def _uniform_size_fits(size: int, count: int, key_len: int, value_len: int) -> bool:
    """Whether `count` records of this shape can fill `size` bytes: each record's size is fixed
    but for its timestamp delta's width (1 or 2 bytes) and its offset delta's (1, 2 or 3 bytes
    by its index). A batch of records of other sizes almost never lands in this window, so it
    goes to the walk at once instead of after a pass that finds nothing."""
    fields = sum(len(codec.encode_varint(n)) + max(n, 0) for n in (key_len, value_len))
    low = high = 0
    for od_bytes, first, end in ((1, 0, 64), (2, 64, 8192), (3, 8192, count)):
        records = max(0, min(count, end) - first)
        for ts_bytes in (1, 2):
            record_len = 1 + ts_bytes + od_bytes + fields + 1
            total = records * (len(codec.encode_varint(record_len)) + record_len)
            if ts_bytes == 1:
                low += total
            else:
                high += total
    return low <= size <= high


def uniform_records_ok(data: bytes, pos: int, stop: int, count: int, consecutive: bool = False) -> bool:
    """True if data[pos:stop] is certainly `count` well-formed records of the first record's shape
    (key and value lengths, attributes 0, no headers; with `consecutive`, offset deltas 0, 1, 2,
    ...); False says nothing (the walk decides).

    One Pattern.split in C: the records it matches come back with their offset deltas between
    them; the pieces in between must all be empty, and where no record matches the rest of the
    data is one last match without an offset delta (None), which fails the comparison."""
    try:
        _, at = codec.decode_varint(data, pos)  # the first record's length
        at += 1  # attributes (the pattern wants 0)
        for _ in range(2):  # timestamp and offset deltas
            _, at = codec.decode_varint(data, at)
        key_len, at = codec.decode_varint(data, at)
        at += max(key_len, 0)
        value_len, _ = codec.decode_varint(data, at)
    except (ValueError, IndexError):
        return False
    if not (-1 <= key_len <= UNIFORM_LENGTH_MAX and -1 <= value_len <= UNIFORM_LENGTH_MAX
            and max(key_len, 0) + max(value_len, 0) <= UNIFORM_LENGTH_MAX):
        return False
    if not _uniform_size_fits(stop - pos, count, key_len, value_len):
        return False  # records of other shapes: no pattern built, no pass made
    parts = _uniform_pattern(key_len, value_len).split(memoryview(data)[pos:stop])
    if len(parts) != 2 * count + 1 or any(parts[::2]):
        return False
    deltas = parts[1::2]
    return deltas == _expected_offset_deltas(count) if consecutive else None not in deltas


def _after_headers(data: bytes, pos: int) -> int:
    """Where a record's headers at data[pos] end, stepped over by the decoder's rules (a count,
    then per header a key length that may not be negative and a value length); -1 when they
    may not be well-formed or use wider varints than the walk takes."""
    b = data[pos]
    if b >= 0x80 or b & 1:  # a count of 64 or more, or negative
        return -1
    pos += 1
    skip1, skip2 = _SKIP1, _SKIP2
    for _ in range(b >> 1):
        for field in _KEY_AND_VALUE:
            b = data[pos]
            if b < 0x80:
                if b & 1 and not field:  # a negative key length
                    return -1
                pos += skip1[b]
            else:
                c = data[pos + 1]
                if c >= 0x80 or (b & 1 and not field):
                    return -1
                pos += skip2[c][b]
    return pos


# --- a segment, batch by batch ----------------------------------------------------------------
class SegmentScan:
    """Walk a segment's batches from position 0 (or `start`), validating each (Kafka's LogSegment.recover loop):
    iterate for (position, header) of each valid batch; afterwards `problem` says why the
    walk stopped before `end` (None: it reached it) and `valid_bytes`/`next_offset` where it did.

    `read(position, length)` reads the segment. `deep` also checks each batch's records
    (verify; recovery trusts the CRC, as Kafka's does), a compressed batch decompressed only up to
    what readers allow it (limits.read_expansion_bytes_max, from the topic's `max_message_bytes`).
    `gaps_ok` False: offsets must follow on from the previous batch exactly (a compacted segment may
    have upward gaps).
    """

    def __init__(self, read: Callable[[int, int], bytes], end: int, base_offset: int, *,
                 deep: bool = False, gaps_ok: bool = True,
                 max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT, start: int = 0) -> None:
        self.max_message_bytes = max_message_bytes
        self.start = start  # where the walk begins (a batch boundary: recovery goes on past kept damage)
        self.read = read
        self.end = end
        self.base_offset = base_offset
        self.deep = deep
        self.gaps_ok = gaps_ok
        self.problem: str | None = None
        self.valid_bytes = start
        self.next_offset: int | None = None
        # deep: the offset of the first record whose attributes byte is >= 0x80 (high_attributes_record),
        # found in this walk (verify asks; a second walk for it cost a third of verify's time)
        self.high_attributes_offset: int | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        # SCAN_CHUNK_BYTES is read at each walk: tests shrink it to cross chunk boundaries
        walk = walk_batches(self.read, self.start, self.end, tail=Tail.RAISE, whole=True, chunk_bytes=SCAN_CHUNK_BYTES)
        try:
            for batch in walk:
                header, pos = batch.header, batch.position
                problem = crc_problem(batch.chunk, batch.at, header) or self._offsets_problem(header)
                if problem is None and self.deep:
                    found = self._records_problem(batch.chunk, batch.at, header)
                    problem = found.text if found is not None else None
                if problem is not None:
                    self.problem = f"{problem} at position {pos} (offset {header.base_offset})"
                    return
                yield pos, header
                self.valid_bytes = pos + header.size
                self.next_offset = header.next_offset
        except CorruptLogError as e:  # framing, or a batch cut by the end of the file
            self.problem = f"{e.reason} at position {e.position}"

    def _records_problem(self, data: bytes, pos: int, header: BatchHeader) -> Problem | None:
        if not header.codec:
            return self._records_check(data, pos, header)
        with compression.expansion_limit(read_expansion_bytes_max(header.size, self.max_message_bytes)):
            return self._records_check(data, pos, header)

    def _records_check(self, data: bytes, pos: int, header: BatchHeader) -> Problem | None:
        """records_problem, noting the first record whose attributes byte is >= 0x80 on the way: a
        batch the validate-only walk passes has none (it passes only attributes below 0x80), so
        only a batch it does not pass (rare) is looked at again, after the decoder took it."""
        try:
            if header.magic == MAGIC_V2 and record_structure_ok(data, pos, header):
                return None
        except (CorruptLogError, UnsupportedCodecError):
            pass  # records_problem words it
        problem = records_problem(data, pos, header)
        if problem is None and self.high_attributes_offset is None:
            index = high_attributes_record(data, pos, header)
            if index is not None:
                self.high_attributes_offset = codec.decode_batch_records(data, pos, header)[index][0]  # Kafka's
        return problem

    def _offsets_problem(self, header: BatchHeader) -> str | None:
        if header.base_offset < self.base_offset or header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
            return f"offset {header.last_offset} out of range for the segment"
        expected = self.next_offset
        if expected is not None and header.base_offset < expected:
            return "offsets go backwards"
        if expected is not None and header.base_offset > expected and not self.gaps_ok:
            return f"offsets {expected}..{header.base_offset - 1} are missing"
        return None

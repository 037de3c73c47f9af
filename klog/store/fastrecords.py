"""The compiled record reader and writer: aiokafka's Cython DefaultRecordBatch and
DefaultRecordBatchBuilder, for klog's read path and its producers' records sections.

codec.decode_batch_values / decode_batch_records call this with `fast=True` (FetchedBatch, i.e.
every consumer) once a batch holds FAST_MIN_RECORDS records; it decodes the records section
3-6x faster than klog's pure-Python loop (benchmarks/cases/codec.py). klog keeps everything
around it: the header, the CRC (crc32c), decompression with its 256 MiB cap (the C reader only
ever sees an uncompressed records section) and the legacy magic 0/1 path.

The pure-Python decoder stays the authority: any refusal here (or a failed import) returns
None and the caller decodes the batch again in Python, which accepts it or raises klog's own
error. What the C reader accepts that the strict decoder refuses, so validators (produce,
verify, recovery) keep `fast=False`: int32 varints longer than 5 bytes or wider than 32 bits.
One byte the two read differently without a refusal: a record attributes byte >= 0x80, which the
C reader reads as a varint (shifting the record's later fields, silently when they still fill the
record) while Kafka (an int8, unused) and the strict decoder leave it alone. No Kafka client
writes one and `klog serve` refuses a batch with one (validate.high_attributes_record), so klog's
own logs never hold one; `dirs import` walks every record of a foreign log and marks a partition
holding one (PartitionLog.mark_strict_records), whose FetchedBatches then never come here. (A
per-batch check on the local read path would cost ~80 ns a record, more than this reader's
decoding.) Batches from a cluster, whose logs klog cannot mark, pay that check
(plain_attributes, FetchedBatch.trusted=False) before they come here.
The CRC must match before a batch gets here.

encode_records gives codec.encode_records' bytes 2-3x faster (the builder writes the same canonical
varints); klog still writes the header, compresses and computes the CRC (the builder's own CRC,
computed by its build(), is never asked for: see _keeping_its_buffer). Anything it cannot take
as it is (a first timestamp of -1, which it reads as "none yet", non-bytes header values, header
keys that are not UTF-8-encodable) returns None and codec's Python loop encodes the batch.

Imported lazily, and only the reader: `import aiokafka.record._crecords` runs aiokafka's package
__init__, which loads its whole client (asyncio included: ~60 ms, a sixth of a 1 M-record
consume); _import_reader loads the one extension module (~3 ms in a klog command) with
klog.store.bare_import, which leaves sys.modules as a plain import would have (a later `import
aiokafka` runs its __init__ as usual).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any

from klog.store.bare_import import import_bare
from klog.store.format import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    INT16,
    INT32,
    RECORDS_OFFSET,
)

# Below this many records the Python loop costs less than the first import (tests force it).
FAST_MIN_RECORDS = 64
# The C reader may read a varint (<= 10 bytes) past the end of the buffer it is given before it
# checks bounds: hand it a slice only if that many bytes follow it in the same object (a whole
# `bytes` object is safe too: its trailing NUL ends any varint).
_OVERREAD = 10

_reader: Any = None  # the DefaultRecordBatch class once imported; False if it cannot be
_builder: Any = None  # DefaultRecordBatchBuilder, imported with it
_import_lock = threading.Lock()  # one first import at a time (the others then find it done)
_VALUE = attrgetter("value")
_TIMESTAMP = attrgetter("timestamp")
_RECORD = attrgetter("offset", "timestamp", "key", "value", "headers")


_READER_MODULE = "aiokafka.record._crecords.default_records"


def _import_reader() -> Any:
    """aiokafka's default_records module without running its packages' __init__ files (see the module
    docstring); the plain import if aiokafka is loaded already or its layout is not as expected."""
    try:
        return import_bare(_READER_MODULE)
    except Exception:  # noqa: BLE001 - any surprise: the plain import decides
        return importlib.import_module(_READER_MODULE)


@contextlib.contextmanager
def python_only() -> Iterator[None]:
    """codec's pure-Python loops only, as if aiokafka were missing (for cross-checks and
    benchmarks; not thread-safe)."""
    global _reader
    saved = _reader
    _reader = False
    try:
        yield
    finally:
        _reader = saved


def wanted(records_count: int) -> bool:
    """Whether to decode a batch of this many records here: any batch once the reader is loaded
    (below FAST_MIN_RECORDS the first import would cost more than the Python loop saves)."""
    return records_count >= FAST_MIN_RECORDS or bool(_reader)


def _unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


# how far past a one-byte (_PAST1[b]) or two-byte (_PAST2[c][b]) record length varint its record
# ends, built on first use
_PAST1: list[int] = []
_PAST2: list[list[int]] = []


def plain_attributes(data: bytes | bytearray | memoryview, start: int, count: int) -> bool:
    """Whether every one of the `count` records of the uncompressed records section at data[start:]
    has an attributes byte below 0x80, the one byte this reader and the strict decoder read
    differently (False also for a record of 8 KiB or more, or a cut section: the strict decoder
    takes those). A walk over the records' lengths only (~80 ns a record): for batches from a
    source klog cannot mark (a cluster's Fetch answers), where a foreign log may hold such a record."""
    if not _PAST1:
        _PAST1.extend(1 + _unzigzag(b) for b in range(0x80))
        _PAST2.extend([2 + _unzigzag((b & 0x7F) | (c << 7)) if b >= 0x80 else 0 for b in range(0x100)]
                      for c in range(0x80))
    past1, past2, at = _PAST1, _PAST2, start
    try:
        for _ in range(count):
            b = data[at]
            if b < 0x80:
                if data[at + 1] >= 0x80:
                    return False
                at += past1[b]
            elif (c := data[at + 1]) < 0x80:
                if data[at + 2] >= 0x80:
                    return False
                at += past2[c][b]
            else:  # a record of 8 KiB or more: the strict decoder's cost per record is small beside it
                return False
    except IndexError:
        return False  # cut or malformed: the strict decoder names it
    return True


def available() -> bool:
    """Whether the compiled reader imports (importing it on first call)."""
    global _reader, _builder
    if _reader is None:
        with _import_lock:
            if _reader is None:
                try:
                    module = _import_reader()
                    _builder = _keeping_its_buffer(module.DefaultRecordBatchBuilder)
                    _reader = module.DefaultRecordBatch
                except (ImportError, AttributeError):
                    _reader = False
    return _reader is not False


def _keeping_its_buffer(base: type) -> type:
    class Builder(base):  # type: ignore[misc, valid-type]
        """aiokafka's builder, with the bytearray it appends into as `buffer` (what build() hands
        out: the same object for the builder's life), so that klog takes its records and writes
        the batch's header and CRC itself: build() computes a CRC-32C in software, ~8x the CPU of
        klog's (codec.crc32c), ~0.5 ms a MB."""

        __slots__ = ("buffer",)

    return Builder


def _batch_buffer(buf: bytes | bytearray | memoryview, pos: int, data: bytes, start: int,
                  stop: int) -> bytes | memoryview:
    """One whole batch, uncompressed, for the C reader: the original bytes when they can be
    lent as they are, else klog's header (codec bits cleared) joined to the records section.
    Raises ValueError for a records section cut short (the strict decoder names that)."""
    if stop > len(data):
        raise ValueError("truncated batch")
    if data is buf:  # uncompressed `bytes`: no copy
        if pos == 0 and stop == len(buf):
            return buf
        if stop + _OVERREAD <= len(buf):
            return memoryview(buf)[pos:stop]
    header = bytearray(memoryview(buf)[pos:pos + RECORDS_OFFSET])
    (attributes,) = INT16.unpack_from(header, ATTRIBUTES_OFFSET)
    INT16.pack_into(header, ATTRIBUTES_OFFSET, attributes & ~COMPRESSION_CODEC_MASK)
    return b"".join((header, memoryview(data)[start:stop]))


def values(buf: bytes | bytearray | memoryview, pos: int, data: bytes, start: int,
           stop: int) -> list[bytes | None] | None:
    """The batch's values (None for a null one), or None if the C reader is missing or refuses."""
    if not available():
        return None
    try:
        return list(map(_VALUE, _reader(_batch_buffer(buf, pos, data, start, stop))))
    except Exception:  # noqa: BLE001 - any refusal: the strict decoder decides and names it
        return None


def timestamps_values(buf: bytes | bytearray | memoryview, pos: int, data: bytes, start: int,
                      stop: int) -> tuple[list[int], list[bytes | None]] | None:
    """The batch's timestamps and values, two lists (what merging several partitions' values by
    time needs: no per-record tuples), or None as values()."""
    if not available():
        return None
    try:
        records = list(_reader(_batch_buffer(buf, pos, data, start, stop)))
    except Exception:  # noqa: BLE001 - as values()
        return None
    return list(map(_TIMESTAMP, records)), list(map(_VALUE, records))


def records(buf: bytes | bytearray | memoryview, pos: int, data: bytes, start: int,
            stop: int) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] | None:
    """The batch's (offset, timestamp, key, value, headers) tuples, or None as values()."""
    if not available():
        return None
    try:
        return list(map(_RECORD, _reader(_batch_buffer(buf, pos, data, start, stop))))
    except Exception:  # noqa: BLE001 - as values()
        return None


_NO_HEADERS: list = []  # the builder wants a list; it only reads it
# magic 2, no compression (klog compresses), not transactional, no producer id/epoch/sequence
_BUILDER_ARGS = (2, 0, 0, -1, -1, -1)
_NO_LIMIT = 1 << 62
# where the batch header holds its record count
_RECORD_COUNT_OFFSET = RECORDS_OFFSET - 4


def new_builder(limit: int | None = None) -> Any:
    """A compiled records builder (klog writes the header: only its records section is used), or
    None when the compiled module is missing. Its first record's timestamp must not be -1.

    `limit`: the most bytes its batch (header included) may hold. Its append() then returns None
    instead of taking a record that would pass it, leaving the builder as it was (the size check
    costs nothing there: the builder sizes every record anyway); its first record it always takes."""
    if not available():
        return None
    builder = _builder(*_BUILDER_ARGS, _NO_LIMIT if limit is None else limit + 1)
    builder.buffer = builder.build()  # (a header only, yet: no cost)
    return builder


def held_records(builder: Any) -> int:
    """How many records `builder` holds (from the header build() writes; it still takes records after)."""
    (count,) = INT32.unpack_from(builder.build(), _RECORD_COUNT_OFFSET)
    return count


def append_records(builder: Any, records: Sequence[tuple[bytes | None, bytes | None,
                                                           Sequence[tuple[str, bytes | None]], int]],
                   deltas: Sequence[int]) -> int:
    """Append `records` to `builder` at these offset deltas; returns how many it took (it stops at
    the first it refuses, e.g. a bytearray header value, which leaves the builder unchanged)."""
    append = builder.append
    empty = _NO_HEADERS
    delta = None
    try:
        for delta, (key, value, headers, timestamp) in zip(deltas, records, strict=True):
            if append(delta, timestamp, key, value,
                      headers if headers.__class__ is list else (list(headers) if headers else empty)) is None:
                break  # past the builder's limit (see new_builder)
        else:
            return len(records)
    except Exception:  # noqa: BLE001 - the Python encoder takes (or names) what the builder refuses
        pass
    return deltas.index(delta) if delta is not None else 0  # (deltas increase: the refused one's place)


def built_section(builder: Any) -> bytes:
    """The records section of what `builder` holds (a copy: it may take more after)."""
    return bytes(memoryview(builder.buffer)[RECORDS_OFFSET:])


def encode_records(records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]],
                   base_timestamp: int, offset_deltas: Sequence[int] | None) -> bytes | None:
    """codec.encode_records' bytes, or None when the builder is missing or cannot take these."""
    if not records or records[0][3] != base_timestamp or base_timestamp == -1 or not available():
        return None  # the builder's base timestamp is its first record's; -1 means "not yet"
    builder = new_builder()
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    if append_records(builder, records, deltas) < len(records):
        return None  # e.g. a bytearray header value: the Python encoder takes it
    return built_section(builder)

"""RecordBatch v2 codec: spec golden bytes, interop with kafka-python both ways, rejection of bad input.

kafka-python 3.0.12 is the independent reader/writer; a small reference decoder written here from
the spec (Java's DefaultRecord.readFrom rules) is the oracle for the fuzz tests.
"""

from __future__ import annotations

import gc
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog import errors
from klog.store import codec, compression
from klog.store.format import (
    BATCH_PREFIX,
    CRC_COVERED_HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
)

kp_records = pytest.importorskip("kafka.record.default_records")
kp_memory = pytest.importorskip("kafka.record.memory_records")
DefaultRecordBatch = kp_records.DefaultRecordBatch
DefaultRecordBatchBuilder = kp_records.DefaultRecordBatchBuilder
MemoryRecords = kp_memory.MemoryRecords

ALL_CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
TS = 1_700_000_000_000

GOLDEN = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "0000003e"  # batchLength 62
    "00000000"  # partitionLeaderEpoch 0
    "02"  # magic
    "675a95fd"  # crc
    "0000"  # attributes
    "00000000"  # lastOffsetDelta
    "0000018bcfe56800"  # baseTimestamp
    "0000018bcfe56800"  # maxTimestamp
    "ffffffffffffffff"  # producerId
    "ffff"  # producerEpoch
    "ffffffff"  # baseSequence
    "00000001"  # recordsCount
    "18000000026b02760202680231"  # the record: length 12, attrs, tsΔ, offΔ, k, v, 1 header (h, 1)
)

VARINT_EXAMPLES = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (300, "d804"), (-300, "d704"),
]


def _codec_id(c: int) -> str:
    return compression.CODEC_NAMES[c]


# --- helpers --------------------------------------------------------------------------------------
def kp_build(records, codec_id: int = 0, base_offset: int = 0, first_offset_delta: int = 0) -> bytes:
    """A batch written by kafka-python's builder (leader epoch 0, producer fields -1)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec_id, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (key, value, headers, ts) in enumerate(records):
        assert builder.append(first_offset_delta + i, timestamp=ts, key=key, value=value,
                              headers=list(headers)) is not None
    batch = bytes(builder.build())
    return codec.with_base_offset(batch, base_offset) if base_offset else batch


def kp_read(batch: bytes) -> tuple[DefaultRecordBatch, list[codec.RecordOut]]:
    """Decode with kafka-python: (its batch object, records as klog's tuples)."""
    kb = DefaultRecordBatch(batch)
    assert kb.validate_crc()
    kb = DefaultRecordBatch(batch)
    out = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    return kb, out


def klog_read(batch: bytes | bytearray | memoryview, pos: int = 0) -> list[codec.RecordOut]:
    header = codec.read_header(batch, pos)
    assert codec.crc_ok(batch, pos, header)
    return decode_both(batch, pos, header)


def decode_both(batch: bytes | bytearray | memoryview, pos: int, header: codec.BatchHeader) -> list[codec.RecordOut]:
    """decode_batch_records, checking that the values-only decoder agrees: the same values, the
    same refusals."""
    try:
        records = codec.decode_batch_records(batch, pos, header)
    except errors.CorruptLogError:
        with pytest.raises(errors.CorruptLogError):
            codec.decode_batch_values(batch, pos, header)
        raise
    assert codec.decode_batch_values(batch, pos, header) == [r[3] for r in records]
    assert codec.decode_batch_values(batch, pos, header, b"") == [b"" if r[3] is None else r[3] for r in records]
    return records


def expected(records, base_offset: int = 0, log_append_time: int | None = None) -> list[codec.RecordOut]:
    return [(base_offset + i, ts if log_append_time is None else log_append_time,
             None if key is None else bytes(key), None if value is None else bytes(value),
             [(hk, None if hv is None else bytes(hv)) for hk, hv in headers])
            for i, (key, value, headers, ts) in enumerate(records)]


def make_batch(body: bytes, count: int, *, attributes: int = 0, base_offset: int = 0, base_ts: int = TS,
               max_ts: int = TS, last_offset_delta: int | None = None, batch_length: int | None = None) -> bytes:
    """A batch around a raw records section, with a correct CRC (for hand-made corruption)."""
    covered = CRC_COVERED_HEADER.pack(attributes, count - 1 if last_offset_delta is None else last_offset_delta,
                                      base_ts, max_ts, -1, -1, -1, count)
    crc = codec.crc32c(covered + body)
    if batch_length is None:
        batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)
    return BATCH_PREFIX.pack(base_offset, batch_length, 0, MAGIC_V2, crc) + covered + body


def raw_record(*fields: bytes, length_delta: int = 0, length: bytes | None = None) -> bytes:
    body = b"".join(fields)
    return (codec.encode_varint(len(body) + length_delta) if length is None else length) + body


V = codec.encode_varint


def simple_record(offset_delta: int, value: bytes = b"v", ts_delta: int = 0) -> bytes:
    return raw_record(b"\x00", V(ts_delta), V(offset_delta), V(-1), V(len(value)), value, V(0))


SAMPLE_RECORDS = [
    (b"k", b"v", [("h", b"1")], TS),
    (None, b"value-without-key", [], TS + 5),
    (b"tombstone", None, [], TS - 3),  # negative timestamp delta
    (None, None, [("null-header", None), ("", b""), ("h2", b"x" * 70)], TS + 100_000),
    (b"", b"", [], TS - 100_000_000),  # empty key and value, large negative delta
    (b"k" * 200, b"w" * 20_000, [("\u00e9t\u00e9", b"\x00\xff")], TS + 2**40),
    (None, bytes(range(256)) * 4, [], TS + 63),
]


# --- golden bytes and varints -----------------------------------------------------------------------
def test_crc32c_check_value() -> None:
    assert codec.crc32c(b"123456789") == 0xE3069283


def test_crc32c_agrees_with_crcmod() -> None:
    """The hot path's CRC (the crc32c package) against an independent implementation."""
    import random

    import crcmod.predefined

    reference = crcmod.predefined.mkCrcFun("crc-32c")
    rng = random.Random(18)
    for size in (0, 1, 7, 8, 61, 1000, 1 << 16):
        data = rng.randbytes(size)
        assert codec.crc32c(data) == reference(data)
        assert codec.crc_of(data[:size // 3], data[size // 3:]) == reference(data)


@pytest.mark.parametrize(("n", "hexbytes"), VARINT_EXAMPLES)
def test_varint_examples(n: int, hexbytes: str) -> None:
    assert codec.encode_varint(n).hex() == hexbytes
    assert codec.decode_varint(bytes.fromhex(hexbytes), 0) == (n, len(hexbytes) // 2)
    # at an offset, with bytes after it
    assert codec.decode_varint(b"\xaa" + bytes.fromhex(hexbytes) + b"\xff", 1) == (n, 1 + len(hexbytes) // 2)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(n: int) -> None:
    enc = codec.encode_varint(n)
    assert len(enc) <= 10
    if -(2**31) <= n < 2**31:
        assert len(enc) <= 5
    assert codec.decode_varint(enc, 0) == (n, len(enc))


def test_the_encoders_varint_tables_hold_encode_varints_bytes() -> None:
    """The tables are built without calling encode_varint per entry (start-up): the same bytes."""
    codec._encode_tables()
    assert codec._VARINT == [codec.encode_varint(n) for n in range(1 << 14)]
    assert codec._SIGNED_VARINT == [codec.encode_varint(d) for d in range(-(1 << 13), 1 << 13)]


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff\xff", b"\xff" * 11, b"\xff" * 10 + b"\x7f"],
                         ids=["empty", "cut-1", "cut-2", "eleven-bytes", "wider-than-64-bits"])
def test_decode_varint_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(ValueError):
        codec.decode_varint(raw, 0)


def test_golden_batch_from_spec() -> None:
    records = [(b"k", b"v", [("h", b"1")], TS)]
    batch = codec.encode_batch(records, 0, leader_epoch=0)
    assert len(batch) == 74
    assert batch == GOLDEN
    header = codec.read_header(batch)
    assert header.crc == 0x675A95FD
    assert (header.base_offset, header.batch_length, header.leader_epoch, header.magic) == (0, 62, 0, 2)
    assert (header.attributes, header.last_offset_delta, header.records_count) == (0, 0, 1)
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.size == 74 and header.last_offset == 0 and header.next_offset == 1
    assert codec.crc_ok(batch, 0, header)
    assert codec.decode_batch_records(batch, 0, header) == [(0, TS, b"k", b"v", [("h", b"1")])]
    # kafka-python writes exactly the same bytes and reads ours
    assert kp_build(records) == GOLDEN
    assert kp_read(GOLDEN)[1] == [(0, TS, b"k", b"v", [("h", b"1")])]


def test_crc_ok_detects_damage() -> None:
    header = codec.read_header(GOLDEN)
    for i in range(21, len(GOLDEN)):  # every covered byte
        damaged = bytearray(GOLDEN)
        damaged[i] ^= 0x01
        assert not codec.crc_ok(bytes(damaged), 0, header)
    assert not codec.crc_ok(GOLDEN[:-1], 0, header)  # truncated: false, not an exception
    # the leader epoch and base offset are outside the CRC
    stamped = codec.with_base_offset(GOLDEN, 1234, 7)
    h2 = codec.read_header(stamped)
    assert (h2.base_offset, h2.leader_epoch) == (1234, 7) and codec.crc_ok(stamped, 0, h2)
    assert codec.with_base_offset(GOLDEN, 99)[8:] == GOLDEN[8:]
    kb, out = kp_read(stamped)
    assert kb.base_offset == 1234 and kb.leader_epoch == 7 and out[0][0] == 1234


# --- klog -> kafka-python and kafka-python -> klog ----------------------------------------------
@pytest.mark.parametrize("codec_id", ALL_CODECS, ids=_codec_id)
def test_klog_batches_read_by_kafka_python(codec_id: int) -> None:
    batch = codec.encode_batch(SAMPLE_RECORDS, 1_000_000, codec=codec_id)
    kb, out = kp_read(batch)
    assert kb.compression_type == codec_id
    assert kb.timestamp_type == 0
    assert kb.base_offset == 1_000_000 and kb.last_offset_delta == len(SAMPLE_RECORDS) - 1
    assert kb.first_timestamp == TS and kb.max_timestamp == max(r[3] for r in SAMPLE_RECORDS)
    assert kb.producer_id == -1 and kb.producer_epoch == -1 and kb.base_sequence == -1
    assert out == expected(SAMPLE_RECORDS, 1_000_000)
    assert klog_read(batch) == out


@pytest.mark.parametrize("codec_id", ALL_CODECS, ids=_codec_id)
def test_klog_log_append_time_read_by_kafka_python(codec_id: int) -> None:
    append_time = TS + 777
    batch = codec.encode_batch(SAMPLE_RECORDS, 5, codec=codec_id, timestamp_type=1, log_append_time_ms=append_time)
    kb, out = kp_read(batch)
    assert kb.timestamp_type == 1 and kb.max_timestamp == append_time
    assert [r[1] for r in out] == [append_time] * len(SAMPLE_RECORDS)
    assert out == expected(SAMPLE_RECORDS, 5, log_append_time=append_time)
    assert klog_read(batch) == out


@pytest.mark.parametrize("codec_id", ALL_CODECS, ids=_codec_id)
def test_kafka_python_batches_read_by_klog(codec_id: int) -> None:
    batch = kp_build(SAMPLE_RECORDS, codec_id, base_offset=42)
    header = codec.read_header(batch)
    assert header.attributes & 0x07 == codec_id  # the sample compresses, so the builder kept the codec
    assert klog_read(batch) == expected(SAMPLE_RECORDS, 42) == kp_read(batch)[1]


@pytest.mark.parametrize("codec_id", ALL_CODECS, ids=_codec_id)
def test_kafka_python_log_append_time_read_by_klog(codec_id: int) -> None:
    # kafka-python's builder only writes CreateTime; set the bit and maxTimestamp like a broker would
    batch = bytearray(kp_build(SAMPLE_RECORDS, codec_id))
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 0x08)
    struct.pack_into(">q", batch, 35, TS + 1)
    struct.pack_into(">I", batch, 17, codec.crc32c(bytes(batch[21:])))
    batch = bytes(batch)
    assert klog_read(batch) == expected(SAMPLE_RECORDS, log_append_time=TS + 1) == kp_read(batch)[1]


def test_big_batch_both_ways() -> None:
    """20,000 records: offset deltas take 1, 2 and 3 bytes; keyed, null-keyed, with headers."""
    rng = random.Random(7)
    records = []
    for i in range(20_000):
        key = None if i % 3 else rng.randbytes(rng.choice((1, 10, 63, 64, 200)))
        value = None if i % 997 == 0 else rng.randbytes(rng.choice((0, 1, 100, 8191, 8192)) if i % 50 == 0 else 100)
        headers = [("trace", rng.randbytes(8)), ("n", None)] if i % 11 == 0 else []
        records.append((key, value, headers, TS + rng.randint(-100_000, 100_000)))
    want = expected(records, 10**12)
    ours = codec.encode_batch(records, 10**12)
    assert kp_read(ours)[1] == want
    theirs = kp_build(records, base_offset=10**12)
    assert klog_read(theirs) == want
    assert ours == theirs  # same choices: leader epoch 0, producer fields -1, same varints


def test_gaps_in_offsets_from_compaction() -> None:
    """Offset deltas need not be 0..count-1 (compaction keeps lastOffsetDelta, drops records)."""
    body = simple_record(0) + simple_record(5) + simple_record(9000) + simple_record(2**31 - 1)
    batch = make_batch(body, 4, last_offset_delta=2**31 - 1, base_offset=100)
    assert [r[0] for r in klog_read(batch)] == [100, 105, 9100, 100 + 2**31 - 1]
    assert [r[0] for r in kp_read(batch)[1]] == [100, 105, 9100, 100 + 2**31 - 1]


def test_decode_from_any_buffer_and_position() -> None:
    first = codec.encode_batch(SAMPLE_RECORDS[:3], 0)
    second = codec.encode_batch(SAMPLE_RECORDS, 3)
    log = first + second + b"\x00" * 30  # a following partial batch must not matter
    want = expected(SAMPLE_RECORDS, 3)
    for buf in (log, bytearray(log), memoryview(log)):
        got = klog_read(buf, len(first))
        assert got == want
        for _, _, key, value, headers in got:
            assert key is None or type(key) is bytes
            assert value is None or type(value) is bytes
            assert all(hv is None or type(hv) is bytes for _, hv in headers)
    # kafka-python frames the same log into the same two batches
    records = MemoryRecords(log[: len(first) + len(second)])
    offsets = []
    while (kb := records.next_batch()) is not None:
        offsets += [r.offset for r in kb]
    assert offsets == list(range(3 + len(SAMPLE_RECORDS)))


def test_header_keys_round_trip_invalid_utf8() -> None:
    """Header keys are decoded with surrogateescape, and encode back to the same bytes."""
    body = raw_record(b"\x00", V(0), V(0), V(-1), V(-1), V(1), V(2), b"\xff\xfe", V(-1))
    got = klog_read(make_batch(body, 1))
    assert got == [(0, TS, None, None, [("\udcff\udcfe", None)])]
    again = codec.encode_batch([(None, None, got[0][4], TS)])
    assert again[RECORDS_OFFSET:] == body


def test_gc_state_is_restored() -> None:
    batch = codec.encode_batch([(None, b"x", [], TS)] * 2000)
    bad = make_batch(simple_record(0) * 1000, 1001)
    assert gc.isenabled()
    klog_read(batch)
    with pytest.raises(errors.CorruptLogError):
        klog_read(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        klog_read(batch)
        assert not gc.isenabled()
    finally:
        gc.enable()


# --- hypothesis: arbitrary records ---------------------------------------------------------------------
header_st = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12))
record_st = st.tuples(
    st.none() | st.binary(max_size=80),
    st.none() | st.binary(max_size=200),
    st.lists(header_st, max_size=3),
    st.integers(min_value=0, max_value=2**42),
)
records_st = st.lists(record_st, min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, codec_id=st.sampled_from(ALL_CODECS),
       base_offset=st.integers(min_value=0, max_value=2**62), log_append=st.booleans())
def test_arbitrary_records_klog_to_kafka_python(records, codec_id, base_offset, log_append) -> None:
    append_time = TS if log_append else None
    batch = codec.encode_batch(records, base_offset, codec=codec_id, timestamp_type=1 if log_append else 0,
                               log_append_time_ms=append_time)
    want = expected(records, base_offset, append_time)
    assert klog_read(batch) == want
    assert kp_read(batch)[1] == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, codec_id=st.sampled_from(ALL_CODECS), base_offset=st.integers(0, 2**62))
def test_arbitrary_records_kafka_python_to_klog(records, codec_id, base_offset) -> None:
    batch = kp_build(records, codec_id, base_offset=base_offset)
    assert klog_read(batch) == expected(records, base_offset) == kp_read(batch)[1]


# --- rejection of bad input ---------------------------------------------------------------------------
def _decode(batch: bytes | bytearray | memoryview) -> list[codec.RecordOut]:
    return decode_both(batch, 0, codec.read_header(batch))


def _kafka_python_rejects(batch: bytes) -> bool:
    try:
        list(DefaultRecordBatch(batch))
    except Exception:  # noqa: BLE001 - any refusal counts (CorruptRecordError, struct, index)
        return True
    return False


GOOD = simple_record(0) + simple_record(1)
BAD_RECORDS = {
    "count-one-too-many": (GOOD, 3),
    "count-one-too-few": (GOOD, 1),
    "count-negative": (b"", -1),
    "count-huge": (GOOD, 2**31 - 1),
    "trailing-byte": (GOOD + b"\x00", 2),
    "record-length-plus-one": (simple_record(0) + raw_record(b"\x00", V(0), V(1), V(-1), V(1), b"v", V(0),
                                                               length_delta=1), 2),
    "record-length-minus-one": (raw_record(b"\x00", V(0), V(0), V(-1), V(1), b"v", V(0), length_delta=-1)
                                + simple_record(1), 2),
    "record-length-covers-an-extra-byte": (raw_record(b"\x00", V(0), V(0), V(-1), V(1), b"v", V(0), length_delta=1)
                                           + b"\x00", 1),
    "record-length-negative": (raw_record(b"\x00", V(0), V(0), V(-1), V(1), b"v", V(0), length=V(-9)), 1),
    "length-varint-overlong": (raw_record(b"\x00", V(0), V(0), V(-1), V(-1), V(0),
                                          length=b"\x8e\x80\x80\x80\x80\x00"), 1),
    "length-varint-cut": (b"\x80", 1),
    "offset-delta-wider-than-32-bits": (raw_record(b"\x00", V(0), b"\xfe\xff\xff\xff\x7f", V(-1), V(-1), V(0)), 1),
    "timestamp-delta-eleven-bytes": (raw_record(b"\x00", b"\x80" * 10 + b"\x00", V(0), V(-1), V(-1), V(0)), 1),
    "key-past-the-end": (raw_record(b"\x00", V(0), V(0), V(50), b"k", V(-1), V(0)), 1),
    "value-past-the-record": (raw_record(b"\x00", V(0), V(0), V(-1), V(5), b"v", V(0)) + simple_record(1), 2),
    "negative-header-count": (raw_record(b"\x00", V(0), V(0), V(-1), V(-1), V(-1)), 1),
    "negative-header-key-length": (raw_record(b"\x00", V(0), V(0), V(-1), V(-1), V(1), V(-1), V(-1)), 1),
    "header-key-past-the-end": (raw_record(b"\x00", V(0), V(0), V(-1), V(-1), V(1), V(40), b"h"), 1),
    "header-count-too-big": (raw_record(b"\x00", V(0), V(0), V(-1), V(-1), V(2), V(1), b"h", V(-1)), 1),
    "all-ff": (b"\xff" * 64, 3),
}


@pytest.mark.parametrize("name", list(BAD_RECORDS))
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview], ids=lambda k: k.__name__)
def test_bad_records_raise_corrupt_log_error(name: str, kind) -> None:
    body, count = BAD_RECORDS[name]
    batch = make_batch(body, count)
    with pytest.raises(errors.CorruptLogError):
        _decode(kind(batch))
    # decoding inside a larger buffer (more bytes after the batch) changes nothing
    with pytest.raises(errors.CorruptLogError):
        _decode(kind(batch + GOLDEN))
    # kafka-python is looser in two places (Java refuses both): it reads any varint up to 64 bits,
    # and a negative recordsCount just yields no records (Java: "Found invalid record count").
    if name not in ("offset-delta-wider-than-32-bits", "count-negative"):
        assert _kafka_python_rejects(batch), name


@pytest.mark.parametrize("codec_id", [c for c in ALL_CODECS if c], ids=_codec_id)
def test_bad_records_inside_compressed_batches(codec_id: int) -> None:
    for body, count in BAD_RECORDS.values():
        batch = make_batch(compression.compress(codec_id, body), count, attributes=codec_id)
        with pytest.raises(errors.CorruptLogError):
            _decode(batch)


@pytest.mark.parametrize("codec_id", [c for c in ALL_CODECS if c], ids=_codec_id)
def test_undecompressable_batch(codec_id: int) -> None:
    batch = make_batch(b"this is not compressed data at all" * 3, 1, attributes=codec_id)
    with pytest.raises(errors.CompressionError):  # a CorruptLogError
        _decode(batch)
    good = codec.encode_batch(SAMPLE_RECORDS, codec=codec_id)
    with pytest.raises(errors.CorruptLogError):
        _decode(good[:-5])  # truncated compressed stream


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec(codec_id: int) -> None:
    batch = make_batch(compression.compress(compression.GZIP, GOOD), 2, attributes=codec_id)
    with pytest.raises(errors.UnsupportedCodecError):
        _decode(batch)


def test_truncated_and_undersized_batches() -> None:
    batch = codec.encode_batch(SAMPLE_RECORDS)
    for cut in (1, 10, 1000, len(batch) - RECORDS_OFFSET):
        for kind in (bytes, bytearray, memoryview):
            with pytest.raises(errors.CorruptLogError):
                codec.decode_batch_records(kind(batch[:-cut]), 0, codec.read_header(batch))
    # batchLength below the 49 bytes a header needs
    small = make_batch(b"", 0, batch_length=40)
    with pytest.raises(errors.CorruptLogError):
        _decode(small + b"\x00" * 40)


def test_empty_batch_decodes_to_nothing() -> None:
    batch = make_batch(b"", 0, base_ts=-1, max_ts=-1, last_offset_delta=0)
    assert _decode(batch) == []


# --- fuzz against a reference decoder ---------------------------------------------------------------
class RefError(Exception):
    pass


def ref_decode(body: bytes, count: int, base_offset: int, base_ts: int) -> list[codec.RecordOut]:
    """Straight from the spec (Java's DefaultRecord.readFrom), slow and simple. Varints longer than
    5/10 bytes or wider than 32/64 bits are refused, as klog does."""
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(body):
            raise RefError("past the end")
        pos += n
        return body[pos - n:pos]

    def varint(max_bytes: int) -> int:
        raw = 0
        for i in range(max_bytes):
            b = take(1)[0]
            raw |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                break
        else:
            raise RefError("too long")
        if raw >= 1 << (32 if max_bytes == 5 else 64):
            raise RefError("too wide")
        return (raw >> 1) ^ -(raw & 1)

    if count < 0:
        raise RefError("negative count")
    out = []
    for _ in range(count):
        length = varint(5)
        start = pos
        take(1)  # attributes
        ts_delta = varint(10)
        off_delta = varint(5)
        n = varint(5)
        key = None if n < 0 else take(n)
        n = varint(5)
        value = None if n < 0 else take(n)
        n_headers = varint(5)
        if n_headers < 0:
            raise RefError("negative header count")
        headers = []
        for _ in range(n_headers):
            n = varint(5)
            if n < 0:
                raise RefError("negative header key")
            hkey = take(n).decode("utf-8", "surrogateescape")
            n = varint(5)
            headers.append((hkey, None if n < 0 else take(n)))
        if pos - start != length:
            raise RefError("record size")
        out.append((base_offset + off_delta, base_ts + ts_delta, key, value, headers))
    if pos != len(body):
        raise RefError("batch size")
    return out


def _both(body: bytes, count: int) -> None:
    batch = make_batch(body, count, base_offset=77)
    try:
        want = ref_decode(body, count, 77, TS)
    except RefError:
        with pytest.raises(errors.CorruptLogError):
            _decode(batch)
        with pytest.raises(errors.CorruptLogError):
            _decode(batch + GOLDEN)
    else:
        assert _decode(batch) == want
        assert _decode(batch + GOLDEN) == want


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, data=st.data())
def test_fuzz_mutated_batches_match_reference(records, data) -> None:
    body = bytearray(codec.encode_records(records, records[0][3]))
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        at = data.draw(st.integers(0, len(body)))
        if op == "set" and at < len(body):
            body[at] = data.draw(st.integers(0, 255))
        elif op == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        elif op == "delete":
            del body[at:at + data.draw(st.integers(1, 3))]
    count = len(records) + data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    _both(bytes(body), count)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, data=st.data())
def test_fuzz_wrong_record_length_matches_reference(records, data) -> None:
    """One record's declared length is off by a few bytes, with or without bytes to cover it."""
    parts = [codec.encode_records([r], r[3]) for r in records]
    i = data.draw(st.integers(0, len(parts) - 1))
    length, after = codec.decode_varint(parts[i], 0)
    delta = data.draw(st.integers(-3, 3).filter(bool))
    pad = data.draw(st.binary(min_size=max(delta, 0), max_size=max(delta, 0))) if data.draw(st.booleans()) else b""
    parts[i] = codec.encode_varint(length + delta) + parts[i][after:] + pad
    _both(b"".join(parts), len(records))


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=40), count=st.integers(-2, 6))
def test_fuzz_random_bytes_match_reference(body: bytes, count: int) -> None:
    _both(body, count)

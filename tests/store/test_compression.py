"""Kafka batch compression codecs: round trips, interop with independent libraries, error paths."""

import gzip
import io
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.errors import DecompressionError, UnknownCodecIdError
from klog.store import compression as c

kafka_codec = pytest.importorskip("kafka.codec")
lz4_frame = pytest.importorskip("lz4.frame")
lz4_block = pytest.importorskip("lz4.block")
snappy = pytest.importorskip("snappy")
zstandard = pytest.importorskip("zstandard")

ALL_CODECS = [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
COMPRESSED_CODECS = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]

_rng = random.Random(20240611)
RANDOM_200K = _rng.randbytes(200 * 1024)
REPETITIVE_200K = (b"klog-record-" + bytes(range(20))) * (200 * 1024 // 32)
SAMPLES = {
    "empty": b"",
    "one": b"\x00",
    "small": b"hello kafka batch",
    "random200k": RANDOM_200K,
    "repetitive200k": REPETITIVE_200K,
    # random head then a long run: one incompressible-ish block next to compressible ones
    "mixed": _rng.randbytes(70_000) + b"z" * 100_000,
}

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
LZ4_MAGIC = struct.pack("<I", 0x184D2204)
LZ4_FLG = 0x60  # version 01 | block independence
LZ4_BD = 0x40  # 64 KiB max block size


def _codec_id(codec: int) -> str:
    return c.CODEC_NAMES[codec]


# --- constants ------------------------------------------------------------


def test_codec_tables() -> None:
    assert c.CODEC_IDS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert c.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    assert (c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD) == (0, 1, 2, 3, 4)


# --- round trips ----------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS, ids=_codec_id)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_round_trip(codec: int, name: str) -> None:
    data = SAMPLES[name]
    packed = c.compress(codec, data)
    assert type(packed) is bytes
    out = c.decompress(codec, packed)
    assert type(out) is bytes
    assert out == data


@pytest.mark.parametrize("codec", ALL_CODECS, ids=_codec_id)
def test_accepts_buffers(codec: int) -> None:
    data = SAMPLES["mixed"]
    packed = c.compress(codec, bytearray(data))
    assert packed == c.compress(codec, memoryview(data))
    # a memoryview slice into a larger buffer, as the batch decoder passes it
    framed = b"prefix" + packed + b"suffix"
    assert c.decompress(codec, memoryview(framed)[6 : 6 + len(packed)]) == data
    assert c.decompress(codec, bytearray(packed)) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(ALL_CODECS), data=st.binary(max_size=4096))
def test_round_trip_arbitrary(codec: int, data: bytes) -> None:
    assert c.decompress(codec, c.compress(codec, data)) == data


@settings(max_examples=15, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED_CODECS),
    chunk=st.binary(min_size=1, max_size=64),
    repeat=st.integers(min_value=1, max_value=5000),
)
def test_round_trip_across_block_boundaries(codec: int, chunk: bytes, repeat: int) -> None:
    # up to ~320 KiB: crosses snappy's 32 KiB and lz4's 64 KiB block edges at odd offsets
    data = chunk * repeat
    assert c.decompress(codec, c.compress(codec, data)) == data


# --- gzip -----------------------------------------------------------------


@pytest.mark.parametrize("name", list(SAMPLES))
def test_gzip_interop(name: str) -> None:
    data = SAMPLES[name]
    assert gzip.decompress(c.compress(c.GZIP, data)) == data
    assert c.decompress(c.GZIP, gzip.compress(data)) == data
    assert c.decompress(c.GZIP, kafka_codec.gzip_encode(data)) == data


def test_gzip_reads_multi_member() -> None:
    # GZIPInputStream reads concatenated members; so must we
    assert c.decompress(c.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


# --- snappy ---------------------------------------------------------------


def _snappy_raw_decode(buf: bytes) -> bytes:
    """Tiny independent raw-snappy decoder (python-snappy itself is built on cramjam)."""
    pos = shift = size = 0
    while True:
        b = buf[pos]
        pos += 1
        size |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    out = bytearray()
    while pos < len(buf):
        tag = buf[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            n = tag >> 2
            if n >= 60:
                extra = n - 59
                n = int.from_bytes(buf[pos : pos + extra], "little")
                pos += extra
            n += 1
            out += buf[pos : pos + n]
            pos += n
            continue
        if kind == 1:
            n = ((tag >> 2) & 7) + 4
            off = ((tag >> 5) << 8) | buf[pos]
            pos += 1
        elif kind == 2:
            n = (tag >> 2) + 1
            off = int.from_bytes(buf[pos : pos + 2], "little")
            pos += 2
        else:
            n = (tag >> 2) + 1
            off = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        assert 0 < off <= len(out)
        start = len(out) - off
        for i in range(n):  # byte-wise: copies may overlap their own output
            out.append(out[start + i])
    assert len(out) == size
    return bytes(out)


def _xerial_blocks(packed: bytes) -> list[bytes]:
    assert packed[:16] == XERIAL_HEADER
    blocks, pos = [], 16
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        assert n > 0
        blocks.append(packed[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(packed)
    return blocks


@pytest.mark.parametrize("name", list(SAMPLES))
def test_snappy_xerial_layout(name: str) -> None:
    data = SAMPLES[name]
    blocks = _xerial_blocks(c.compress(c.SNAPPY, data))
    decoded = [_snappy_raw_decode(b) for b in blocks]
    # SnappyOutputStream cuts the input into 32 KiB blocks
    assert [len(d) for d in decoded] == [len(data[i : i + 32768]) for i in range(0, len(data), 32768)]
    assert b"".join(decoded) == data


@pytest.mark.parametrize("name", list(SAMPLES))
def test_snappy_interop_kafka_python(name: str) -> None:
    data = SAMPLES[name]
    ours = c.compress(c.SNAPPY, data)
    if data:
        # kafka-python only detects xerial when len > 16, so it can't read the header-only
        # stream that xerial (and we) write for an empty payload
        assert kafka_codec.snappy_decode(ours) == data
    assert c.decompress(c.SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=True)) == data
    # byte-identical with kafka-python's xerial writer (same block size, same raw compressor)
    assert ours == kafka_codec.snappy_encode(data, xerial_compatible=True)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_snappy_reads_raw_blocks(name: str) -> None:
    data = SAMPLES[name]
    assert c.decompress(c.SNAPPY, snappy.compress(data)) == data
    assert c.decompress(c.SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=False)) == data


def test_snappy_reads_concatenated_and_le_header_streams() -> None:
    a, b = SAMPLES["mixed"], SAMPLES["small"]
    assert c.decompress(c.SNAPPY, c.compress(c.SNAPPY, a) + c.compress(c.SNAPPY, b)) == a + b
    # some producers write version/compat little-endian; only the magic is significant
    le = c.compress(c.SNAPPY, b)
    le = le[:8] + struct.pack("<ii", 1, 1) + le[16:]
    assert c.decompress(c.SNAPPY, le) == b


# --- lz4 ------------------------------------------------------------------


def _expected_lz4_header() -> bytes:
    descriptor = bytes((LZ4_FLG, LZ4_BD))
    try:
        import xxhash
    except ImportError:
        # liblz4 configured like Kafka's Lz4BlockOutputStream writes the same 7 bytes
        return lz4_frame.compress(
            b"",
            block_size=lz4_frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )[:7]
    hc = (xxhash.xxh32_intdigest(descriptor, seed=0) >> 8) & 0xFF
    return LZ4_MAGIC + descriptor + bytes((hc,))


EXPECTED_LZ4_HEADER = _expected_lz4_header()


def test_lz4_header_is_kafkas() -> None:
    assert EXPECTED_LZ4_HEADER == bytes.fromhex("04224d18604082")


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=2048))
def test_lz4_golden_header(data: bytes) -> None:
    assert c.compress(c.LZ4, data)[:7] == EXPECTED_LZ4_HEADER


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=100))
def test_xxh32_matches_reference(data: bytes) -> None:
    xxhash = pytest.importorskip("xxhash")
    for seed in (0, 1, 0xFFFFFFFF):
        assert c._xxh32(data, seed) == xxhash.xxh32_intdigest(data, seed=seed)


def _lz4_walk(packed: bytes) -> list[tuple[bool, bytes]]:
    """Split one of our frames into (stored_raw, block) pairs, checking Kafka's layout."""
    assert packed[:7] == EXPECTED_LZ4_HEADER
    blocks, pos = [], 7
    while True:
        (word,) = struct.unpack_from("<I", packed, pos)
        pos += 4
        if word == 0:
            break
        raw, n = bool(word & 0x80000000), word & 0x7FFFFFFF
        assert 0 < n <= 64 * 1024
        blocks.append((raw, packed[pos : pos + n]))
        pos += n
    assert pos == len(packed)  # end mark, no content checksum
    return blocks


@pytest.mark.parametrize("name", list(SAMPLES))
def test_lz4_frame_layout(name: str) -> None:
    data = SAMPLES[name]
    out = []
    for raw, block in _lz4_walk(c.compress(c.LZ4, data)):
        if raw:
            out.append(block)
        else:
            plain = lz4_block.decompress(block, uncompressed_size=64 * 1024)
            assert len(block) < len(plain)  # only stored compressed when it shrank
            out.append(plain)
    assert [len(b) for b in out] == [len(data[i : i + 65536]) for i in range(0, len(data), 65536)]
    assert b"".join(out) == data


def test_lz4_incompressible_and_empty_are_exact() -> None:
    # These bytes don't depend on the compressor: raw 64 KiB blocks with the high bit set.
    data = RANDOM_200K
    expected = EXPECTED_LZ4_HEADER
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        expected += struct.pack("<I", len(chunk) | 0x80000000) + chunk
    expected += b"\x00\x00\x00\x00"
    assert c.compress(c.LZ4, data) == expected
    assert c.compress(c.LZ4, b"") == EXPECTED_LZ4_HEADER + b"\x00\x00\x00\x00"


@pytest.mark.parametrize("name", list(SAMPLES))
def test_lz4_interop(name: str) -> None:
    data = SAMPLES[name]
    assert lz4_frame.decompress(c.compress(c.LZ4, data)) == data
    assert c.decompress(c.LZ4, kafka_codec.lz4_encode(data)) == data
    # liblz4 defaults: linked blocks, content size, 64 KiB blocks
    assert c.decompress(c.LZ4, lz4_frame.compress(data)) == data
    checked = lz4_frame.compress(
        data, block_size=lz4_frame.BLOCKSIZE_MAX4MB, content_checksum=True, block_checksum=True
    )
    assert c.decompress(c.LZ4, checked) == data


# --- zstd -----------------------------------------------------------------


@pytest.mark.parametrize("name", list(SAMPLES))
def test_zstd_interop(name: str) -> None:
    data = SAMPLES[name]
    ours = c.compress(c.ZSTD, data)
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(ours)) as reader:
        assert reader.read() == data
    assert c.decompress(c.ZSTD, zstandard.ZstdCompressor().compress(data)) == data
    # a streamed frame has no content size, like zstd-jni's ZstdOutputStream in Kafka
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(buf, closefd=False) as writer:
        writer.write(data)
    assert c.decompress(c.ZSTD, buf.getvalue()) == data


# --- errors ---------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 99])
def test_unknown_codec(codec: int) -> None:
    for fn in (c.compress, c.decompress):
        with pytest.raises(UnknownCodecIdError, match=str(codec)) as info:
            fn(codec, b"data")
        assert isinstance(info.value, ValueError)
        assert "\n" not in str(info.value)
        assert info.value.codec == codec


def _garbage_cases(codec: int) -> list[bytes]:
    good = c.compress(codec, SAMPLES["mixed"])
    return [b"", b"garbage in, garbage out", good[: len(good) // 2], good[:-3], good + b"junk"]


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=_codec_id)
def test_garbage_raises_compression_error(codec: int) -> None:
    for bad in _garbage_cases(codec):
        with pytest.raises(DecompressionError) as info:
            c.decompress(codec, bad)
        message = str(info.value)
        assert c.CODEC_NAMES[codec] in message
        assert "\n" not in message
        assert isinstance(info.value, ValueError)
        assert info.value.codec == codec


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_HEADER + b"\x00\x00",  # truncated block length
        XERIAL_HEADER + struct.pack(">i", 1000) + b"short",  # block overruns input
        XERIAL_HEADER + struct.pack(">i", -5) + b"xxxxx",  # negative length
        XERIAL_HEADER + b"\x82SNAPPY\x00\x00",  # truncated second header
    ],
)
def test_snappy_bad_framing(bad: bytes) -> None:
    with pytest.raises(DecompressionError, match="snappy"):
        c.decompress(c.SNAPPY, bad)


def test_lz4_bad_header_checksum() -> None:
    bad = bytearray(c.compress(c.LZ4, b"payload"))
    bad[6] ^= 0xFF
    with pytest.raises(DecompressionError, match="lz4"):
        c.decompress(c.LZ4, bytes(bad))


# Valid-looking starts get the fuzzer past the magic checks into the real parsers.
_MAGICS = [b"", b"\x1f\x8b\x08\x00", XERIAL_HEADER, EXPECTED_LZ4_HEADER, b"\x28\xb5\x2f\xfd"]


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED_CODECS),
    prefix=st.sampled_from(_MAGICS),
    data=st.binary(max_size=512),
)
def test_fuzzed_input_only_raises_compression_error(codec: int, prefix: bytes, data: bytes) -> None:
    try:
        out = c.decompress(codec, prefix + data)
    except DecompressionError:
        return
    assert type(out) is bytes

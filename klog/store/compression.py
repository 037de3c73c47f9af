"""Kafka RecordBatch v2 compression codecs (batch attributes bits 0-2).

Every codec is backed by cramjam. The byte layouts written here follow what the Java
client writes, so batches produced by klog are readable by Kafka and vice versa:

* gzip   -- a plain gzip stream (java.util.zip.GZIPOutputStream).
* snappy -- xerial snappy-java's SnappyOutputStream framing, not raw snappy and not the
            official snappy framing format.
* lz4    -- the LZ4 frame layout of Kafka's Lz4BlockOutputStream (independent 64 KiB
            blocks, no content size, no checksums).
* zstd   -- a standard zstd frame at Kafka's default level.
"""

import contextlib
import mmap
import struct
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

from klog.errors import DecompressionError, UnknownCodecIdError
from klog.store.limits import DECOMPRESSED_BATCH_BYTES_MAX

if TYPE_CHECKING:
    import cramjam
else:
    class _LazyCramjam:
        """cramjam, imported at the first compressed batch: an uncompressed read or write (`klog
        consume t -n 1` in a shell loop) does not load the library (~1 ms)."""

        def __getattr__(self, name: str) -> Any:
            import cramjam as module

            globals()["cramjam"] = module  # from now on the module itself
            return getattr(module, name)

    cramjam = _LazyCramjam()

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

# The codec lives in the low three bits of the batch attributes.
CODEC_MASK = 0x07

CODEC_IDS: dict[str, int] = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES: dict[int, str] = {v: k for k, v in CODEC_IDS.items()}

Bytes: TypeAlias = bytes | bytearray | memoryview


def _decompression_error(codec: int, detail: str) -> DecompressionError:
    return DecompressionError(codec, CODEC_NAMES.get(codec, str(codec)), detail)


def _view(data: Bytes) -> memoryview:
    # Slice without copying; cramjam accepts memoryviews directly.
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


# --- gzip -----------------------------------------------------------------

# Java's GZIPOutputStream uses Deflater.DEFAULT_COMPRESSION, i.e. zlib level 6.
_GZIP_LEVEL = 6


def _gzip_compress(data: memoryview) -> bytes:
    return bytes(cramjam.gzip.compress(data, level=_GZIP_LEVEL))


def _gzip_decompress(data: memoryview) -> bytes:
    return bytes(cramjam.gzip.decompress(data))


# --- snappy (xerial framing) ----------------------------------------------

# SnappyCodec header: marker byte -126, "SNAPPY", NUL, then int32 BE version and
# minimum compatible version, both 1.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_LEN = len(_XERIAL_HEADER)  # 16
# SnappyOutputStream's default block size, which Kafka does not override.
_XERIAL_BLOCK = 32 * 1024


def _snappy_compress(data: memoryview) -> bytes:
    # Like SnappyOutputStream: the header is written even for empty input.
    parts = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK])
        parts.append(struct.pack(">i", len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _is_xerial(data: memoryview) -> bool:
    # As kafka-python's _detect_xerial_stream, only the 8 magic bytes are checked: some
    # producers (redpanda) write version/compat little-endian. Unlike kafka-python we take
    # exactly 16 bytes too, which is what xerial writes for an empty payload. A raw snappy
    # block cannot start with these bytes and also be valid.
    return len(data) >= _XERIAL_HEADER_LEN and data[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC


def _snappy_decompress(data: memoryview) -> bytes:
    if not _is_xerial(data):
        # Older/non-Java producers write one raw snappy block.
        return bytes(cramjam.snappy.decompress_raw(data))
    out: list[bytes] = []
    pos = _XERIAL_HEADER_LEN
    end = len(data)
    while pos < end:
        # SnappyInputStream accepts concatenated streams: a fresh header may follow a block.
        # A block length can never start with 0x82 (it would be negative), so no ambiguity.
        if data[pos : pos + len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
            if end - pos < _XERIAL_HEADER_LEN:
                raise _decompression_error(SNAPPY, "truncated xerial header")
            pos += _XERIAL_HEADER_LEN
            continue
        if end - pos < 4:
            raise _decompression_error(SNAPPY, f"truncated xerial block length at offset {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or size > end - pos:
            raise _decompression_error(SNAPPY, f"xerial block of {size} bytes at offset {pos} overruns input")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)


# --- lz4 (Kafka's frame layout) -------------------------------------------

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data: bytes, seed: int = 0) -> int:
    """Plain-Python xxHash32; only used on the 2-byte LZ4 frame descriptor."""
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            lanes = struct.unpack_from("<4I", data, i)
            v = [
                (_rotl((acc + lane * _P2) & _M32, 13) * _P1) & _M32
                for acc, lane in zip(v, lanes, strict=True)
            ]
            i += 16
        h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
    else:
        h = seed + _P5
    h = (h + n) & _M32
    while i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


_LZ4_MAGIC = struct.pack("<I", 0x184D2204)
# FLG: version 01 (bits 6-7) and block independence (bit 5); Kafka sets nothing else.
_LZ4_FLG = 0x60
# BD: block max size id 4 = 64 KiB (bits 4-6).
_LZ4_BD = 0x40
_LZ4_BLOCK = 64 * 1024
# Header checksum is the second byte of xxh32 over the descriptor (FLG, BD), per the
# frame spec; Kafka's "broken" variant (hashing the magic too) is only for magic v0/v1.
_LZ4_DESCRIPTOR = bytes((_LZ4_FLG, _LZ4_BD))
_LZ4_HEADER = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes(((_xxh32(_LZ4_DESCRIPTOR) >> 8) & 0xFF,))
_LZ4_UNCOMPRESSED = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"


def _lz4_compress(data: memoryview) -> bytes:
    parts = [_LZ4_HEADER]
    for i in range(0, len(data), _LZ4_BLOCK):
        chunk = data[i : i + _LZ4_BLOCK]
        # Same as lz4-java's fastCompressor (LZ4_compress_default), without a size prefix.
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) >= len(chunk):
            # Incompressible: Kafka stores the block raw and flags it in the size's high bit.
            parts.append(struct.pack("<I", len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(chunk))
        else:
            parts.append(struct.pack("<I", len(block)))
            parts.append(bytes(block))
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data: memoryview) -> bytes:
    # cramjam reads any standard frame (linked blocks, checksums, content size, several
    # concatenated frames) and verifies the header checksum.
    return bytes(cramjam.lz4.decompress(data))


# --- zstd -----------------------------------------------------------------

# Kafka's compression.zstd.level default (ZSTD_CLEVEL_DEFAULT); cramjam's own default is 11.
_ZSTD_LEVEL = 3


def _zstd_compress(data: memoryview) -> bytes:
    return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))


def _zstd_decompress(data: memoryview) -> bytes:
    return bytes(cramjam.zstd.decompress(data))


# --- dispatch -------------------------------------------------------------


def _identity(data: memoryview) -> bytes:
    return bytes(data)


_CODECS: dict[int, tuple[Callable[[memoryview], bytes], Callable[[memoryview], bytes]]] = {
    NONE: (_identity, _identity),
    GZIP: (_gzip_compress, _gzip_decompress),
    SNAPPY: (_snappy_compress, _snappy_decompress),
    LZ4: (_lz4_compress, _lz4_decompress),
    ZSTD: (_zstd_compress, _zstd_decompress),
}


def compress(codec: int, data: Bytes) -> bytes:
    """Compress a batch's records section with the given codec id."""
    try:
        fn = _CODECS[codec][0]
    except (KeyError, TypeError):
        raise UnknownCodecIdError(codec) from None
    return fn(_view(data))


# Bounded memory for any input: a 77 KB zstd batch can expand to 2.4 GB. A batch's records are
# decompressed into a buffer of at most `limit` bytes (the caller's: klog serve passes the topic's
# max.message.bytes); one that expands further is refused as damage (DecompressionError) when the
# buffer is full, never after expanding it, whatever its compressed size. Buffers larger than the
# reused per-thread one come out of a process-wide budget, so many bombs at once cost at most
# DECOMPRESSION_BYTES_IN_FLIGHT_MAX, not one limit per thread.

_SMALL_OUTPUT_BYTES = 4 << 20  # most batches fit a reused buffer of this size: no allocation per batch
DECOMPRESSION_BYTES_IN_FLIGHT_MAX = 512 << 20
_local = threading.local()
_TOO_SMALL = ("failed to write whole buffer", "smaller than required")


class _Budget:
    """Bytes of large decompression buffers in use by every thread; a thread waits for room."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.peak = 0  # the most ever in use at once
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, n: int) -> Iterator[None]:
        n = min(n, self.total)  # one buffer alone may use it all
        with self._cond:
            self._cond.wait_for(lambda: self.used + n <= self.total)
            self.used += n
            self.peak = max(self.peak, self.used)
        try:
            yield
        finally:
            with self._cond:
                self.used -= n
                self._cond.notify_all()


budget = _Budget(DECOMPRESSION_BYTES_IN_FLIGHT_MAX)


class ExpansionLimit:
    """What `expansion_limit` set: the bound, and whether a batch hit it (so the caller can say
    MESSAGE_TOO_LARGE rather than corrupt)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.exceeded = False


@contextlib.contextmanager
def expansion_limit(limit: int) -> Iterator[ExpansionLimit]:
    """Within this block, this thread's decompress() calls without a limit use `limit`."""
    previous = getattr(_local, "bound", None)
    bound = _local.bound = ExpansionLimit(limit)
    try:
        yield bound
    finally:
        _local.bound = previous


def _expanded_past(codec: int, limit: int) -> DecompressionError:
    bound = getattr(_local, "bound", None)
    if bound is not None:
        bound.exceeded = True
    return _decompression_error(codec, f"the batch expands past {limit} bytes (klog's limit per batch)")


def _into(fn_into: Callable, data: memoryview, codec: int, limit: int) -> bytes:
    """Decompress with `fn_into(input, output)` into a bounded buffer: a reused small one, then an
    anonymous mapping of `limit` bytes (pages cost memory only once written) out of the budget."""
    small = getattr(_local, "buf", None)
    if small is None:
        small = _local.buf = bytearray(_SMALL_OUTPUT_BYTES)
    try:
        n = fn_into(data, memoryview(small)[:limit])
        return bytes(memoryview(small)[:n])
    except cramjam.DecompressionError as exc:
        if not any(t in str(exc) for t in _TOO_SMALL):
            raise
        if limit <= len(small):
            raise _expanded_past(codec, limit) from None
    with budget.reserve(limit), mmap.mmap(-1, limit) as big:
        view = memoryview(big)
        try:
            n = fn_into(data, view)
            return bytes(view[:n])
        except cramjam.DecompressionError as exc:
            if any(t in str(exc) for t in _TOO_SMALL):
                raise _expanded_past(codec, limit) from None
            raise
        finally:
            view.release()


def _snappy_raw_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    n = shift = 0
    for i in range(min(5, len(block))):
        n |= (block[i] & 0x7F) << shift
        if not block[i] & 0x80:
            return n
        shift += 7
    raise _decompression_error(SNAPPY, "bad snappy length header")


def _bounded_snappy(data: memoryview, limit: int) -> bytes:
    """Snappy declares each block's length up front: check the total before decompressing."""
    blocks = [data]
    if _is_xerial(data):
        blocks, pos, end = [], _XERIAL_HEADER_LEN, len(data)
        while pos < end:
            if data[pos:pos + len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
                pos += _XERIAL_HEADER_LEN
                continue
            if end - pos < 4:
                break  # _snappy_decompress reports it
            (size,) = struct.unpack_from(">i", data, pos)
            if size < 0 or size > end - pos - 4:
                break
            blocks.append(data[pos + 4:pos + 4 + size])
            pos += 4 + size
    if sum(_snappy_raw_length(b) for b in blocks) > limit:
        raise _expanded_past(SNAPPY, limit)
    return _snappy_decompress(data)


_BOUNDED: dict[int, Callable[[memoryview, int], bytes]] = {
    GZIP: lambda d, limit: _into(cramjam.gzip.decompress_into, d, GZIP, limit),
    LZ4: lambda d, limit: _into(cramjam.lz4.decompress_into, d, LZ4, limit),
    ZSTD: lambda d, limit: _into(cramjam.zstd.decompress_into, d, ZSTD, limit),
    SNAPPY: _bounded_snappy,
}


def decompress(codec: int, data: Bytes, limit: int | None = None) -> bytes:
    """Decompress a batch's records section into at most `limit` bytes (None: the enclosing
    expansion_limit's, else DECOMPRESSED_BATCH_BYTES_MAX); raises DecompressionError on bad input or
    on data that would expand past the limit (never an unbounded allocation)."""
    if limit is None:
        bound = getattr(_local, "bound", None)
        limit = bound.limit if bound is not None else DECOMPRESSED_BATCH_BYTES_MAX
    try:
        fn = _CODECS[codec][1]
    except (KeyError, TypeError):
        raise UnknownCodecIdError(codec) from None
    try:
        if codec == NONE:
            return fn(_view(data))
        return _BOUNDED[codec](_view(data), limit)
    except cramjam.DecompressionError as exc:
        raise _decompression_error(codec, str(exc)) from exc

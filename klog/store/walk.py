"""The one batch walker: header -> framing -> size over a range of a segment file or of bytes in
memory, with an explicit rule for a range that ends inside a batch.

Every batch's header is parsed from chunks read with `read(position, length)` (1 MiB by default,
so a walk over small batches is not one system call each; a chunk of one header's size makes it one
header-sized read per batch, for short walks over big batches). A header no batch of any Kafka
format can have (validate.framing_problem) is damage, always: a CorruptLogError naming the file
and position. What follows the last whole batch is decided by `tail`:

- Tail.STOP: a batch cut by the end of the range ends the walk quietly. For ranges that may end
  mid-batch by design: a fetch answer cut at its byte budget, a file another process is appending to.
- Tail.RAISE: a cut batch is damage (CorruptLogError): for ranges that must hold whole batches.

Callers that want "what was read, then the error" catch the CorruptLogError after using the
batches already yielded. CRCs and records are the caller's to check (validate.py): with
`whole=True` each yielded chunk holds the whole batch, so they can be checked without a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum

from klog.errors import CorruptLogError
from klog.store import codec
from klog.store.codec import BatchHeader, read_header
from klog.store.format import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_V2, RECORD_BATCH_OVERHEAD
from klog.store.limits import DECLARED_BATCH_BYTES_MAX
from klog.store.plain import Plain

SCAN_CHUNK_BYTES = 1 << 20  # headers are parsed from 1 MiB reads, not one pread each
HEADER_CHUNK_BYTES = RECORD_BATCH_OVERHEAD  # one header-sized read per batch

Read = Callable[[int, int], bytes]


class Tail(Enum):
    STOP = "stop"
    RAISE = "raise"


class Walked(Plain):
    """One batch: where it starts, its header, and the chunk holding it from `at` (its header at
    least; the whole batch when the walk was asked for whole batches)."""

    __slots__ = _fields = ("position", "header", "chunk", "at")

    def __init__(self, position: int, header: BatchHeader, chunk: bytes, at: int) -> None:
        self.position = position
        self.header = header
        self.chunk = chunk
        self.at = at

    def data(self) -> bytes:
        """The whole batch's bytes (a walk with whole=True)."""
        chunk, at, size = self.chunk, self.at, self.header.size
        return chunk if at == 0 and len(chunk) == size else chunk[at:at + size]


def framing_problem(header: BatchHeader, max_bytes: int = DECLARED_BATCH_BYTES_MAX) -> str | None:
    """A header no batch of any Kafka format can have (magic, declared size)."""
    if header.magic > MAGIC_V2 or not codec.min_batch_size(header.magic) <= header.size <= max_bytes:
        return "invalid batch header"
    return None


def walk_batches(read: Read, start: int, end: int, *, tail: Tail = Tail.STOP, whole: bool = False,
                 chunk_bytes: int = SCAN_CHUNK_BYTES, path: str | None = None,
                 stop_before: Callable[[BatchHeader], bool] | None = None,
                 read_ahead: tuple[int, bytes] | None = None) -> Iterator[Walked]:
    """Each batch in [start, end), in order (see the module's docstring for the rules).
    `stop_before(header)` True ends the walk at that batch, before its size is checked or its
    bytes read (a reader's bound: the batch a writer is appending there may be partial).
    `read_ahead`: (position, bytes) the caller already read of the file, at or before `start`
    (a walk that goes on where the caller's own look ended, without reading them again)."""
    pos = start
    base, chunk = read_ahead or (start, b"")  # the range's bytes [base, base + len(chunk))
    while pos < end:
        at = pos - base
        if at + codec.header_bytes(chunk, at) > len(chunk):
            chunk, base, at = read(pos, min(max(chunk_bytes, HEADER_SIZE_UP_TO_MAGIC), end - pos)), pos, 0
            need = codec.header_bytes(chunk, 0)
            if need > len(chunk) and pos + need <= end:  # a magic 0/1 entry larger than the chunk
                chunk = read(pos, need)
            if need > len(chunk):
                return _cut(tail, path, pos, "partial batch header")
        header = read_header(chunk, at)
        if stop_before is not None and stop_before(header):
            return None
        size = header.batch_length + LOG_OVERHEAD  # header.size, without a call per batch
        if header.magic != MAGIC_V2 or not RECORD_BATCH_OVERHEAD <= size <= DECLARED_BATCH_BYTES_MAX:
            problem = framing_problem(header)  # (a v2 header within bounds passes it: no call for those)
            if problem is not None:
                raise CorruptLogError(problem, path, pos, header.base_offset)
        if pos + size > end:
            return _cut(tail, path, pos, "partial batch")
        if whole and at + size > len(chunk):
            chunk, base, at = read(pos, max(size, min(chunk_bytes, end - pos))), pos, 0
            if len(chunk) < size:  # the file shrank meanwhile
                return _cut(tail, path, pos, "partial batch")
        yield Walked(pos, header, chunk, at)
        pos += size


def _cut(tail: Tail, path: str | None, position: int, what: str) -> None:
    if tail is Tail.RAISE:
        raise CorruptLogError(what, path, position)


def follows(before: BatchHeader | None, header: BatchHeader) -> str | None:
    """Why `header` cannot be the batch after `before` in a log (None: it can, or the formats do
    not say: a magic 0/1 entry's offset is not its first). An upward gap is named too: only a
    compacted log may have one, which the caller knows."""
    if before is None or before.magic != MAGIC_V2 or header.magic != MAGIC_V2:
        return None
    expected = before.next_offset
    if header.base_offset < expected:
        return f"offsets {header.base_offset}..{min(expected, header.next_offset) - 1} are in two batches"
    if header.base_offset > expected:
        return f"offsets {expected}..{header.base_offset - 1} are missing"
    return None

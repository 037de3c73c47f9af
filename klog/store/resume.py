"""Where reading resumes after a damaged batch in a segment: the one rule readers
(`klog consume --skip-damaged`, any read from an offset past the damage) and `klog verify
--repair --discard-damaged` follow, so that one bad bit costs only the damaged batch's offsets,
not the rest of its segment.

Kafka's LogSegment.recover cuts a segment at its first invalid batch. klog resumes at the first
position after the damage that provably holds a valid batch, trying in turn:

(0) "itself": the batch at the damage, when it is whole, CRC-valid, starts past the first
    offset not read and the next batch starts exactly where it ends (the damage was offsets
    missing before it; the CRC does not cover the base offset: the batch after it vouches for it,
    or for the segment's last batch, the offset the segment must end at, when the caller knows it);
(a) "length": the damaged batch's own length field, when the batch right after it is a whole v2
    batch whose CRC-32C matches and whose offsets lie after the first offset not read;
(b) "index": the first offset-index entry past the damage that points at such a batch;
(c) "scan": a bounded scan, byte by byte, for such a batch (magic 2, a length that fits, base
    offset in the readable range, the CRC over the rest) that is followed by a header that
    continues it (or by the batch (b) found, reached by a walk of whole headers); it looks
    before (b)'s entry too, to keep the small batches between the damage and that entry;
(d) None: the caller goes on at the next segment.

The scan reads at most RESUME_SCAN_BYTES_MAX past the damage and checks at most
RESUME_CANDIDATES_MAX candidate positions (a byte 2 where the magic would be and a base offset
within range), so a segment of garbage costs a bounded time whatever its size (measured on 1 GiB:
zeros or 2s 0.01 s, random bytes 0.16 s, a header-like pattern that makes every 17th byte a
candidate 0.38 s; tests/store/test_damage_resume.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from klog.store import codec
from klog.store.codec import BatchHeader, read_header
from klog.store.format import MAGIC_OFFSET, MAGIC_V2, RECORD_BATCH_OVERHEAD, RELATIVE_OFFSET_MAX
from klog.store.limits import DECLARED_BATCH_BYTES_MAX
from klog.store.plain import Plain
from klog.store.walk import SCAN_CHUNK_BYTES

RESUME_SCAN_BYTES_MAX = 8 << 20  # how far the scan (c) looks (8 batches of Kafka's default 1 MiB bound)
RESUME_CANDIDATES_MAX = 1 << 16  # candidate positions the scan checks at most (a run of 0x02 bytes)
SPARSE_MAGIC_BYTES = 1 << 12  # a chunk with at most this many 2s is searched byte by byte
RESUME_INDEX_ENTRIES_MAX = 64  # index entries past the damage (b) tries at most

Read = Callable[[int, int], bytes]


class Resumed(Plain):
    """A valid batch after damage: its position, header, and which rule found it."""

    _fields = ("position", "header", "how")

    def __init__(self, position: int, header: BatchHeader, how: str) -> None:
        self.position = position
        self.header = header
        self.how = how


class _Bounds:
    """What a batch found after the damage must satisfy."""

    def __init__(self, read: Read, end: int, base_offset: int, first_missing: int, upper: int | None) -> None:
        self.read = read
        self.end = end
        self.base_offset = base_offset
        # the first offset not read: the damaged batch holds it, so a resumed batch starts after it
        self.first_missing = first_missing
        self.upper = upper  # the log end (None: no bound): a resumed batch starts below it
        self.scan_after = -1  # the damaged batch's claimed last offset: a batch the scan finds starts past it

    def offsets_ok(self, header: BatchHeader) -> bool:
        base = header.base_offset
        return (base > self.first_missing and base >= self.base_offset and (self.upper is None or base < self.upper)
                and 0 <= header.last_offset_delta and header.last_offset - self.base_offset <= RELATIVE_OFFSET_MAX)

    def header_at(self, position: int, head: bytes | None = None) -> BatchHeader | None:
        """The v2 header at `position` if its framing and offsets are plausible (no CRC check)."""
        if head is None:
            head = self.read(position, RECORD_BATCH_OVERHEAD)
        if len(head) < RECORD_BATCH_OVERHEAD or head[MAGIC_OFFSET] != MAGIC_V2:
            return None
        header = read_header(head)
        if not RECORD_BATCH_OVERHEAD <= header.size <= DECLARED_BATCH_BYTES_MAX or position + header.size > self.end:
            return None
        return header if self.offsets_ok(header) else None

    def valid_at(self, position: int, head: bytes | None = None) -> BatchHeader | None:
        """The header of the whole, CRC-valid v2 batch at `position` within bounds, else None."""
        header = self.header_at(position, head)
        if header is None:
            return None
        data = self.read(position, header.size)
        return header if codec.crc_ok(data, 0, header) else None

    def continued(self, position: int, header: BatchHeader) -> bool:
        """Does what follows the batch at `position` go on as a log would (the segment's end, a
        cut batch at the end, or a header whose offsets come after it)?"""
        after = position + header.size
        if after == self.end:
            return True
        # (a few bytes short of the end is no log's end: a batch held as a record's value in the
        # damaged batch's last record ends there, before the record's header count)
        following = self.header_at(after)
        return following is not None and following.base_offset >= header.next_offset

    def followed_exactly(self, position: int, header: BatchHeader, end_offset: int | None) -> bool:
        """Does a header whose base offset is the next offset of the batch at `position` follow it
        (or, the segment's last batch, does it end at `end_offset`, where the segment's offsets end)?"""
        after = position + header.size
        if after == self.end:
            return end_offset is not None and header.next_offset == end_offset
        following = self.header_at(after)
        return following is not None and following.base_offset == header.next_offset

    def chains_to(self, position: int, header: BatchHeader, target: int) -> bool:
        """Does a walk of whole headers from the batch at `position` reach `target` exactly, its
        offsets going up?"""
        while True:
            position += header.size
            if position >= target:
                return position == target
            following = self.header_at(position)
            if following is None or following.base_offset < header.next_offset:
                return False
            header = following


def resume_after(read: Read, end: int, base_offset: int, damage_position: int, first_missing: int,
                 upper: int | None = None, index_positions: Iterable[int] = (),
                 scan_bytes_max: int = RESUME_SCAN_BYTES_MAX, end_offset: int | None = None) -> Resumed | None:
    """The first provably valid batch after the damaged one at `damage_position` in a segment of
    `end` bytes read by `read` (see the module's docstring); its base offset is above
    `first_missing` (the first offset not read, which the damaged batch holds) and below `upper`.
    `index_positions`: the offset index's positions, in order; `end_offset`: where the segment's offsets end (the next
    segment's base, or the log end), if known. None: nothing valid in reach (go on at the next
    segment)."""
    bounds = _Bounds(read, end, base_offset, first_missing, upper)
    damaged = read(damage_position, RECORD_BATCH_OVERHEAD)
    header = bounds.valid_at(damage_position, damaged)  # (0) not damaged itself
    if header is not None and bounds.followed_exactly(damage_position, header, end_offset):
        return Resumed(damage_position, header, "itself")
    if len(damaged) >= MAGIC_OFFSET + 1:  # (a) the damaged batch's own length
        size = read_header(damaged.ljust(RECORD_BATCH_OVERHEAD, b"\0")).size
        after = damage_position + size
        if RECORD_BATCH_OVERHEAD <= size <= DECLARED_BATCH_BYTES_MAX and after < end:
            header = bounds.valid_at(after)
            if header is not None:
                return Resumed(after, header, "length")
    target = None  # (b) the first index entry past the damage at a valid batch
    tried = 0
    for position in index_positions:
        if position <= damage_position:
            continue
        header = bounds.valid_at(position)
        if header is not None:
            target = Resumed(position, header, "index")
            break
        tried += 1
        if tried >= RESUME_INDEX_ENTRIES_MAX:
            break
    start, stop = damage_position + 1, min(end, damage_position + 1 + scan_bytes_max)
    if target is not None:  # the window ends at the entry: the batches just before it are the ones to find
        start, stop = max(start, target.position - scan_bytes_max), target.position
    # a batch the scan finds inside the damaged batch's own bytes (a record's value that is itself a
    # batch) claims offsets the damaged batch holds: past a damaged header whose offsets still read
    # as a batch reaching the first offset not read, the scan takes only batches past them
    claimed = read_header(damaged) if len(damaged) == RECORD_BATCH_OVERHEAD else None
    if (claimed is not None and claimed.magic == MAGIC_V2 and claimed.last_offset >= first_missing
            and 0 <= claimed.last_offset_delta <= RELATIVE_OFFSET_MAX):
        bounds.scan_after = claimed.last_offset
    found = _scan(bounds, start, stop, target)
    return found if found is not None else target


def _scan(bounds: _Bounds, start: int, stop: int, target: Resumed | None) -> Resumed | None:
    """(c): the first position in [start, stop) holding a valid batch that continues (to
    `target`, if given), in chunks of SCAN_CHUNK_BYTES; at most RESUME_CANDIDATES_MAX candidates."""
    upper = bounds.upper
    # the base offset's leading bytes every offset in [low, upper) shares: most random bytes
    # before a 2 fail this prefix at once
    low = max(bounds.first_missing + 1, bounds.base_offset)
    high = (upper - 1) if upper is not None and upper > low else low + RELATIVE_OFFSET_MAX
    low_bytes, high_bytes = low.to_bytes(8, "big", signed=True), high.to_bytes(8, "big", signed=True)
    shared = 0
    while shared < 8 and low_bytes[shared] == high_bytes[shared]:
        shared += 1
    prefix = low_bytes[:shared]
    # a candidate: the prefix, the rest of the base offset, length and epoch, then magic 2
    pattern = re.compile(re.escape(prefix) + b".{%d}\x02" % (MAGIC_OFFSET - len(prefix)), re.DOTALL)
    candidates = 0
    position = start
    while position < stop:
        chunk_end = min(stop, position + SCAN_CHUNK_BYTES)
        # the chunk holds the headers of every candidate that starts in [position, chunk_end)
        chunk = bounds.read(position, chunk_end - position + RECORD_BATCH_OVERHEAD)
        for head_at in _candidates(chunk, chunk_end - position, prefix, pattern):
            candidates += 1
            if candidates > RESUME_CANDIDATES_MAX:
                return None
            here = position + head_at
            header = bounds.valid_at(here, chunk[head_at:head_at + RECORD_BATCH_OVERHEAD])
            if header is None or header.base_offset <= bounds.scan_after:
                continue
            if (bounds.chains_to(here, header, target.position) if target is not None
                    else bounds.continued(here, header)):
                return Resumed(here, header, "scan")
        position = chunk_end
    return None


def _candidates(chunk: bytes, limit: int, prefix: bytes, pattern: re.Pattern[bytes]) -> Iterator[int]:
    """Positions below `limit` in `chunk` where a header with magic 2 and a base offset starting
    with `prefix` could start: found from the magic bytes where they are few (garbage of zeros
    costs a count), by the pattern, whose literal prefix rules most positions out in C, where
    they are many (a run of 2s)."""
    if chunk.count(b"\x02", MAGIC_OFFSET, limit + MAGIC_OFFSET) <= SPARSE_MAGIC_BYTES:
        at = MAGIC_OFFSET
        while (at := chunk.find(b"\x02", at, limit + MAGIC_OFFSET)) >= 0:
            if chunk.startswith(prefix, at - MAGIC_OFFSET):
                yield at - MAGIC_OFFSET
            at += 1
        return
    at = 0
    while at < limit and (found := pattern.search(chunk, at, limit + MAGIC_OFFSET + 1)) is not None:
        if found.start() >= limit:
            return
        yield found.start()
        at = found.start() + 1

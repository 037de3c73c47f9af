"""Read-only inspection of segments: dump (kafka-dump-log's deep iteration) and checks for verify."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from klog.errors import CorruptLogError, KlogError, SymlinkError, UsageError
from klog.store import codec, compression, txn, validate
from klog.store.codec import BatchHeader
from klog.store.format import (
    LOG_SUFFIX,
    NO_TIMESTAMP,
    TRANSACTIONAL_FLAG_MASK,
    TXN_INDEX_SUFFIX,
    parse_segment_base,
    segment_file_name,
)
from klog.store.limits import MAX_MESSAGE_BYTES_DEFAULT
from klog.store.segment import KeptDamage, LogSegment
from klog.store.walk import Tail, walk_batches


def _segment_paths(path: str) -> list[str]:
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith(LOG_SUFFIX) and parse_segment_base(n) is not None)
        return [os.path.join(path, n) for n in names]
    if path.endswith(LOG_SUFFIX) and os.path.isfile(path):
        return [path]
    if not os.path.exists(path):
        raise KlogError(f"no such file or folder: {path}")
    raise UsageError(f"{path} is not a .log segment or a partition folder")


def dump_path(path: str, deep: bool = True) -> Iterator[dict]:
    for seg_path in _segment_paths(path):
        yield {"type": "segment", "path": seg_path}
        with open(seg_path, "rb") as f:  # read a chunk at a time: a segment may be bigger than memory
            size = os.fstat(f.fileno()).st_size
            try:
                for batch in walk_batches(lambda pos, n: os.pread(f.fileno(), n, pos), 0, size, tail=Tail.RAISE,
                                          whole=True, path=seg_path):
                    yield from _dump_batch(batch.chunk, batch.at, batch.header, batch.position, deep)
            except CorruptLogError as e:
                if e.reason.startswith("partial") and e.position is not None:  # a torn tail, or no segment at all
                    raise CorruptLogError(f"{e.reason} of {size - e.position} bytes", seg_path, e.position) from None
                raise


def _dump_batch(data: bytes, pos: int, header: codec.BatchHeader, position: int, deep: bool) -> Iterator[dict]:
    valid = validate.crc_problem(data, pos, header) is None
    yield {"type": "batch", "base_offset": header.base_offset, "last_offset": header.last_offset,
           "count": header.records_count, "position": position, "size": header.size,
           "max_timestamp": header.max_timestamp, "base_timestamp": header.base_timestamp,
           "compression": compression.CODEC_NAMES.get(header.codec, str(header.codec)),
           "timestamp_type": "LogAppendTime" if header.timestamp_type else "CreateTime",
           "crc": header.crc, "valid": valid, "leader_epoch": header.leader_epoch,
           "control": header.is_control, "magic": header.magic, "producer_id": header.producer_id,
           "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
           "transactional": txn.is_transactional(header.attributes)}
    if deep and valid:
        for offset, ts, key, value, headers in codec.decode_batch_records(data, pos, header):
            record = {"type": "record", "offset": offset, "timestamp": ts, "key": key, "value": value,
                      "headers": headers}
            if header.is_control:  # kafka-dump-log: endTxnMarker: COMMIT coordinatorEpoch: N
                record["end_txn_marker"], record["coordinator_epoch"] = txn.control_marker(key, value)
            yield record


@dataclass
class SegmentCheck:
    base_offset: int
    log_problem: str | None = None
    valid_next_offset: int | None = None  # offset after the last valid batch (None: none valid)
    first_offset: int | None = None  # base offset of the first valid batch
    # each starts "offset index", "time index" or "txn index": the file it is about
    index_problems: list[str] = field(default_factory=list)
    # what the segment's .txnindex must hold, when it holds something else (--repair writes it)
    txn_index: list[txn.AbortedTxn] | None = None
    high_attributes_offset: int | None = None  # the first record with attributes >= 0x80 (SegmentScan's)


class TxnWalk:
    """The transactions of one replica's log, as verify checks its segments in order (one
    txn.TxnTracker across them: a transaction may begin in one segment and end in the next).

    `whole_history`: the walk sees every transaction begin (the log's first segment starts at
    offset 0, it is not compacted, and no damaged segment is stepped over), so each aborted range
    and last stable offset is known exactly. Otherwise a transaction may have begun in what is
    gone (retention, Kafka's cleaner), and a .txnindex entry may name an earlier first offset and
    last stable offset, or end at an ABORT marker of a transaction the walk never saw begin."""

    def __init__(self, whole_history: bool) -> None:
        self.tracker = txn.TxnTracker()
        self.whole_history = whole_history


def check_segment(segment: LogSegment, gaps_ok: bool = False,
                  max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT, sealed: bool = False,
                  txns: TxnWalk | None = None) -> SegmentCheck:
    """Validate every batch (size, CRC, records, offsets: validate.SegmentScan) and the three
    indexes against the log, in that one walk. `gaps_ok`: a compacted topic's cleaned segment,
    where Kafka's cleaner leaves upward gaps between batches. `max_message_bytes`: the topic's (how
    far a batch may expand). `sealed`: not the log's last segment (its time index ends with the
    segment's largest timestamp). `txns`: the replica's walk so far (checks the .txnindex)."""
    result = SegmentCheck(segment.base_offset)
    segment.file_size()  # (a swapped segment's cached entries go first)
    # the indexes before the log's size: a writer appends a batch before its index entries, so
    # every entry read names a batch within that size
    segment.offset_index.refresh()
    times = _TimeIndexCheck(segment, result.index_problems)
    aborts = _SegmentTxns(segment, txns) if txns is not None else None
    scan = validate.SegmentScan(segment.read_bytes, segment.file_size(), segment.base_offset, deep=True,
                                gaps_ok=gaps_ok, max_message_bytes=max_message_bytes)
    starts: dict[int, int] = {}  # position -> last offset
    for pos, header in scan:
        if result.first_offset is None:
            result.first_offset = header.base_offset
        starts[pos] = header.last_offset
        times.add(header)
        if aborts is not None and header.attributes & TRANSACTIONAL_FLAG_MASK:
            aborts.add(pos, header)
    result.log_problem = scan.problem
    result.valid_next_offset = scan.next_offset
    result.high_attributes_offset = scan.high_attributes_offset
    valid = [(0, scan.valid_bytes)]  # the walked valid byte ranges, and the damage between them
    damage = _batches_after_damage(segment, scan, starts, times, valid, gaps_ok, max_message_bytes)
    last = (-1, -1)
    for i in range(_used_entries(segment.offset_index)):
        rel, position = segment.offset_index.entry_at(i)
        offset = segment.base_offset + rel
        if rel <= last[0] or position <= last[1]:
            result.index_problems.append(f"offset index entry {i} does not increase")
        elif starts.get(position) == offset:
            pass
        elif any(start <= position < end for start, end in valid):
            result.index_problems.append(f"offset index entry {i} ({rel}, {position}) does not match the log")
        elif (kept := next((d for d in damage if d.position <= position < d.resumed_at), None)) is not None:
            # (the damaged bytes held batches: an entry of theirs cannot be checked, only its offset)
            if not kept.first_missing <= offset < kept.resumed_offset:
                result.index_problems.append(
                    f"offset index entry {i} ({rel}, {position}) does not match the log: it points into the "
                    f"damaged bytes at position {kept.position}, which hold offsets "
                    f"{kept.first_missing}..{kept.resumed_offset - 1}")
        else:
            result.index_problems.append(f"offset index entry {i} points past the valid log")
        last = (rel, position)
    times.finish(sealed and result.log_problem is None)
    if aborts is not None and result.log_problem is None:
        result.txn_index = aborts.finish(result.index_problems)
    return result


KEPT_DAMAGE_MAX = 64  # damaged stretches of one segment the index checks step over (then: past the valid log)


def _batches_after_damage(segment: LogSegment, scan: validate.SegmentScan, starts: dict[int, int],
                          times: _TimeIndexCheck, valid: list[tuple[int, int]], gaps_ok: bool,
                          max_message_bytes: int) -> list[KeptDamage]:
    """The valid batches after the damage that ended `scan`, found as recovery and readers find
    them (resume.resume_after, through LogSegment.resume_after_damage; again after each further
    damage), added to `starts`, `times` and `valid` (their byte ranges): recovery keeps such damage
    in place, and the index entries past it point at these batches. The damaged stretches, in order."""
    kept: list[KeptDamage] = []
    size = segment.file_size()
    problem, damage_at = scan.problem, scan.valid_bytes
    missing = scan.next_offset if scan.next_offset is not None else segment.base_offset
    while problem is not None and damage_at < size and len(kept) < KEPT_DAMAGE_MAX:
        resumed = segment.resume_after_damage(damage_at, missing, end=size)
        if resumed is None:
            break
        kept.append(KeptDamage(damage_at, resumed.position, missing, resumed.header.base_offset, problem))
        times.skip_before(resumed.header.base_offset)
        after = validate.SegmentScan(segment.read_bytes, size, segment.base_offset, deep=True, gaps_ok=gaps_ok,
                                     max_message_bytes=max_message_bytes, start=resumed.position)
        for pos, header in after:
            starts[pos] = header.last_offset
            times.add(header)
        valid.append((resumed.position, after.valid_bytes))
        problem, damage_at = after.problem, after.valid_bytes
        missing = after.next_offset if after.next_offset is not None else resumed.header.base_offset
    return kept


class _TimeIndexCheck:
    """The `.timeindex` against the batches, fed each batch of the scan (kafka-log-format.md §2,
    Kafka's rule): an entry (T, O) says T is the largest timestamp of the segment up to the batch
    holding offset O, first reached in that batch; entries go up in both fields; a sealed segment's
    last entry holds its largest timestamp. A wrong entry sends a lookup by time (`consume
    --since`, ListOffsets) past records it should return; a missing final one skips the segment."""

    def __init__(self, segment: LogSegment, problems: list[str]) -> None:
        index = segment.time_index
        index.refresh()
        self.problems = problems
        self.pending: list[tuple[int, int, int]] = []  # (entry number, timestamp, offset), both going up
        self.last_ts = NO_TIMESTAMP
        last_rel = -1
        for i in range(_used_entries(index)):
            ts, rel = index.entry_at(i)
            offset = segment.base_offset + rel
            if rel < 0:
                problems.append(f"time index entry {i} ({ts} at offset {offset}) points before the segment")
            elif ts < self.last_ts or rel < last_rel:
                problems.append(f"time index entry {i} ({ts} at offset {offset}) goes backwards")
            else:
                self.pending.append((i, ts, offset))
                self.last_ts, last_rel = ts, rel
        self.next = 0  # the first pending entry no batch has settled yet
        self.max_timestamp = NO_TIMESTAMP  # the largest timestamp of the batches so far
        self.offset_of_max_timestamp = -1  # the last offset of the batch that first held it

    def add(self, header: BatchHeader) -> None:
        before = self.max_timestamp
        if header.max_timestamp > before:
            self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
        pending, last_offset = self.pending, header.last_offset
        while self.next < len(pending) and pending[self.next][2] <= last_offset:
            i, ts, offset = pending[self.next]
            self.next += 1
            if ts != self.max_timestamp or before >= ts:
                self.problems.append(f"time index entry {i} ({ts} at offset {offset}) does not match the log: the "
                                     f"largest timestamp up to offset {last_offset} is {self.max_timestamp}, first "
                                     f"at offset {self.offset_of_max_timestamp}")

    def skip_before(self, offset: int) -> None:
        """Damage up to `offset` (kept by recovery): the entries of offsets in it cannot be checked.
        The batches after it are added as before: the largest timestamp so far is then only a lower
        bound, but an entry they settle is checked right (it must be its batch's largest timestamp,
        above every earlier one)."""
        while self.next < len(self.pending) and self.pending[self.next][2] < offset:
            self.next += 1

    def finish(self, sealed_whole: bool) -> None:
        """After the last valid batch: entries past it; a whole sealed segment's final entry."""
        for i, ts, offset in self.pending[self.next:]:
            self.problems.append(f"time index entry {i} ({ts} at offset {offset}) points past the segment's "
                                 "last valid batch")
        if sealed_whole and self.max_timestamp > self.last_ts:
            self.problems.append(f"time index lacks the sealed segment's final entry ({self.max_timestamp} at "
                                 f"offset {self.offset_of_max_timestamp})")


class _SegmentTxns:
    """The segment's transactional batches fed to the replica's TxnWalk in the scan's one pass, and
    its `.txnindex` against them: each entry (producer id, first offset, last offset, last stable
    offset) must be an aborted transaction whose ABORT marker is in this segment (Kafka indexes a
    range in its marker's segment), and each such transaction must have its entry. A wrong entry
    makes read_committed readers drop committed records (klog takes an entry only where a marker
    agrees, but not every wrong one is caught); a missing one shows aborted records to a Kafka
    broker's read_committed readers once it adopts the log."""

    def __init__(self, segment: LogSegment, walk: TxnWalk) -> None:
        self.segment = segment
        self.walk = walk
        # the log's, ended by a marker in this segment, by (producer id, marker offset)
        self.aborted: dict[tuple[int, int], txn.AbortedTxn] = {}
        self.unseen_starts: set[tuple[int, int]] = set()  # (producer id, ABORT offset): no data of it seen
        self.named: dict[tuple[int, int], int] = {}  # (producer id, marker offset) -> the entry naming it

    def add(self, pos: int, header: BatchHeader) -> None:
        kind = txn.batch_event(self.segment.read_bytes, pos, header, self.segment.log_path)
        tracker = self.walk.tracker
        if kind == txn.DATA:
            tracker.data(header.producer_id, header.base_offset)
        elif kind is not None:
            ended = tracker.marker(header.producer_id, header.base_offset, kind)
            if ended is not None:
                self.aborted[(ended.producer_id, ended.last_offset)] = ended
            elif kind == txn.ABORT:
                self.unseen_starts.add((header.producer_id, header.base_offset))

    def finish(self, problems: list[str]) -> list[txn.AbortedTxn] | None:
        """Problems of the `.txnindex`; what it must hold instead (None: it holds that)."""
        folder, base = self.segment.directory, self.segment.base_offset
        try:
            entries = txn.read_txn_index(folder, base)
        except SymlinkError:  # (named among the folder's links too; --repair writes a file in its place)
            problems.append("txn index is a symbolic link, not read")
            return list(self.aborted.values())
        if entries is None and os.path.exists(os.path.join(folder, segment_file_name(base, TXN_INDEX_SUFFIX))):
            problems.append(f"txn index cannot be read (not whole {txn.ABORTED_TXN.size}-byte entries of version 0)")
            return list(self.aborted.values())
        before = len(problems)
        kept = [self._entry(i, entry, problems) for i, entry in enumerate(entries or ())]
        for log in self.aborted.values():  # what no entry named
            problems.append(f"txn index lacks the aborted transaction {_txn_text(log)}")
            kept.append(log)
        if len(problems) == before:
            return None
        return sorted((entry for entry in kept if entry is not None), key=lambda entry: entry.last_offset)

    def _entry(self, i: int, entry: txn.AbortedTxn, problems: list[str]) -> txn.AbortedTxn | None:
        """The i-th entry against the log's aborted transactions (the one it names is taken off
        self.aborted): what the index must hold in its place (None: nothing)."""
        key = (entry.producer_id, entry.last_offset)
        if key in self.named:
            problems.append(f"txn index entry {i} {_txn_text(entry)} repeats entry {self.named[key]}")
            return None
        self.named[key] = i
        log = self.aborted.pop(key, None)
        whole = self.walk.whole_history
        if log is not None:
            if entry == log or (not whole and entry.first_offset <= log.first_offset
                                and entry.last_stable_offset <= log.last_stable_offset):
                return entry  # (a transaction begun before the walk's start: the index knows better)
            problems.append(f"txn index entry {i} {_txn_text(entry)} does not match the log's aborted "
                            f"transaction {_txn_text(log)}")
            return log
        if not whole and key in self.unseen_starts and entry.first_offset <= entry.last_offset:
            self.unseen_starts.discard(key)
            return entry
        problems.append(f"txn index entry {i} {_txn_text(entry)} ends at no ABORT marker of a transaction of that "
                        "producer in this segment")
        return None


def _txn_text(entry: txn.AbortedTxn) -> str:
    return (f"(producer {entry.producer_id}, offsets {entry.first_offset}..{entry.last_offset}, last stable offset "
            f"{entry.last_stable_offset})")


def _used_entries(index) -> int:
    """Entries before a zero-filled tail: Kafka preallocates the active segment's index files
    (10 MiB of zeros) and trims them on roll or close, so an all-zero tail is unused, not damage
    (an offset index entry (0, 0) never exists: the first batch of a segment gets no entry)."""
    n = index.entries
    while n and not any(index.entry_at(n - 1)):
        n -= 1
    return n

"""Read-only inspection of segments: dump (kafka-dump-log's deep iteration) and checks for verify."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from klog.errors import CorruptLogError, KlogError, UsageError
from klog.store import codec, compression, txn, validate
from klog.store.format import LOG_SUFFIX, parse_segment_base
from klog.store.limits import MAX_MESSAGE_BYTES_DEFAULT
from klog.store.segment import LogSegment
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
    index_problems: list[str] = field(default_factory=list)


def check_segment(segment: LogSegment, gaps_ok: bool = False,
                  max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT) -> SegmentCheck:
    """Validate every batch (size, CRC, records, offsets: validate.SegmentScan) and both indexes
    against the log. `gaps_ok`: a compacted topic's cleaned segment, where Kafka's cleaner leaves
    upward gaps between batches. `max_message_bytes`: the topic's (how far a batch may expand)."""
    result = SegmentCheck(segment.base_offset)
    scan = validate.SegmentScan(segment.read_bytes, segment.file_size(), segment.base_offset, deep=True,
                                gaps_ok=gaps_ok, max_message_bytes=max_message_bytes)
    starts: dict[int, int] = {}  # position -> last offset
    max_ts = -1
    for pos, header in scan:
        if result.first_offset is None:
            result.first_offset = header.base_offset
        starts[pos] = header.last_offset
        max_ts = max(max_ts, header.max_timestamp)
    result.log_problem = scan.problem
    result.valid_next_offset = scan.next_offset
    pos = scan.valid_bytes
    segment.offset_index.refresh()
    last = (-1, -1)
    for i in range(_used_entries(segment.offset_index)):
        rel, position = segment.offset_index.entry_at(i)
        if rel <= last[0] or position <= last[1]:
            result.index_problems.append(f"offset index entry {i} does not increase")
        elif starts.get(position) != segment.base_offset + rel and position < pos:
            result.index_problems.append(f"offset index entry {i} ({rel}, {position}) does not match the log")
        elif position >= pos:
            result.index_problems.append(f"offset index entry {i} points past the valid log")
        last = (rel, position)
    segment.time_index.refresh()
    last_ts = -1
    for i in range(_used_entries(segment.time_index)):
        ts, _rel = segment.time_index.entry_at(i)
        if ts < last_ts:
            result.index_problems.append(f"time index entry {i} goes backwards")
        last_ts = ts
    if last_ts > max_ts and result.log_problem is None:
        result.index_problems.append("time index holds a timestamp above the log's largest")
    return result


def _used_entries(index) -> int:
    """Entries before a zero-filled tail: Kafka preallocates the active segment's index files
    (10 MiB of zeros) and trims them on roll or close, so an all-zero tail is unused, not damage
    (an offset index entry (0, 0) never exists: the first batch of a segment gets no entry)."""
    n = index.entries
    while n and not any(index.entry_at(n - 1)):
        n -= 1
    return n

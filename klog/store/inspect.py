"""Read-only inspection of segments: dump (kafka-dump-log's deep iteration) and checks for verify."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from klog.errors import CorruptLogError, KlogError, UnsupportedCodecError, UsageError
from klog.store import codec, compression, txn
from klog.store.format import LOG_SUFFIX, RECORD_BATCH_OVERHEAD, parse_segment_base
from klog.store.segment import LogSegment


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
        with open(seg_path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + codec.header_bytes(data, pos) <= len(data):
            header = codec.read_header(data, pos)
            if header.size < codec.min_batch_size(header.magic) or pos + header.size > len(data):
                raise CorruptLogError("partial or invalid batch", seg_path, pos, header.base_offset)
            valid = codec.crc_ok(data, pos, header)
            yield {"type": "batch", "base_offset": header.base_offset, "last_offset": header.last_offset,
                   "count": header.records_count, "position": pos, "size": header.size,
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
            pos += header.size
        if pos < len(data):  # a torn tail, or not a segment at all
            raise CorruptLogError(f"partial batch header of {len(data) - pos} bytes", seg_path, pos)


@dataclass
class SegmentCheck:
    base_offset: int
    log_problem: str | None = None
    valid_next_offset: int | None = None  # offset after the last valid batch (None: none valid)
    first_offset: int | None = None  # base offset of the first valid batch
    index_problems: list[str] = field(default_factory=list)


def check_segment(segment: LogSegment, gaps_ok: bool = False) -> SegmentCheck:
    """Validate every batch (size, CRC, offsets) and both indexes against the log. `gaps_ok`: a
    compacted topic's cleaned segment, where Kafka's cleaner leaves upward gaps between batches."""
    result = SegmentCheck(segment.base_offset)
    end = segment.file_size()
    starts: dict[int, int] = {}  # position -> last offset
    pos = 0
    prev_next = None
    max_ts = -1
    while pos < end:
        head = segment.read_bytes(pos, RECORD_BATCH_OVERHEAD)
        if len(head) < min(codec.header_bytes(head), RECORD_BATCH_OVERHEAD):
            result.log_problem = f"partial batch header at position {pos}"
            break
        header = codec.read_header(head)
        if header.size < codec.min_batch_size(header.magic) or pos + header.size > end or header.magic > 2:
            result.log_problem = f"partial or invalid batch at position {pos}"
            break
        data = segment.read_bytes(pos, header.size)
        if header.magic < 2:
            header = codec.read_header(data)  # Kafka's old message formats: parsed from the whole entry
        if not codec.crc_ok(data, 0, header):
            result.log_problem = f"CRC mismatch at position {pos} (offset {header.base_offset})"
            break
        try:  # the CRC does not vouch for the records' structure (or a compressed payload)
            codec.decode_batch_records(data, 0, header)
        except (CorruptLogError, UnsupportedCodecError) as e:
            detail = str(e).removesuffix(f" (offset {header.base_offset})")
            result.log_problem = f"{detail} at position {pos} (offset {header.base_offset})"
            break
        if prev_next is not None and header.base_offset < prev_next:
            result.log_problem = f"offsets go backwards at position {pos}"
            break
        if prev_next is not None and header.base_offset > prev_next and not gaps_ok:  # klog's cleaner keeps emptied
            # batches; Kafka's drops them (gaps_ok)
            result.log_problem = f"offsets {prev_next}..{header.base_offset - 1} are missing at position {pos}"
            break
        if result.first_offset is None:
            result.first_offset = header.base_offset
        starts[pos] = header.last_offset
        max_ts = max(max_ts, header.max_timestamp)
        prev_next = header.next_offset
        result.valid_next_offset = prev_next
        pos += header.size
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

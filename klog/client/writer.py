"""The one partition writer: records encoded into batches that fit max.message.bytes, appended
through the ReplicaManager (one partition's batch, or the batches of many partitions under one
call), with retention run after an append that rolled a segment.

The producer, replay and klog serve's Produce (RawAppender) all write here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from klog.store import codec
from klog.store.codec import RecordIn
from klog.store.format import CREATE_TIME

# The most a record adds to its key and value in a batch: length, attributes, timestamp delta,
# offset delta, key and value lengths (varints at their widest), headers count; each header adds
# at most HEADER_OVERHEAD_BYTES_MAX to its key and value. Size estimates are upper bounds.
RECORD_OVERHEAD_BYTES_MAX = 21 + 10
HEADER_OVERHEAD_BYTES_MAX = 10


def headers_bytes(headers: Sequence[tuple[bytes, bytes | None]] | None) -> int:
    """The most `headers` add to a record (their keys, values and framing)."""
    return sum(len(h[0]) + len(h[1] or b"") + HEADER_OVERHEAD_BYTES_MAX for h in headers) if headers else 0


def record_bytes(key: bytes | None, value: bytes | None, headers: Sequence | None = None) -> int:
    """An upper bound of the record's size in a batch (compression aside)."""
    return ((len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            + RECORD_OVERHEAD_BYTES_MAX + headers_bytes(headers))


@dataclass(frozen=True, slots=True)
class EncodedPiece:
    """Records[start:start + count] of what was given, encoded at base offset 0."""

    start: int
    count: int
    data: bytes


def encode_fitting(records: Sequence[RecordIn], *, codec_id: int, max_bytes: int, now_ms: int,
                   timestamp_type: int = CREATE_TIME, max_timestamp: int | None = None) -> list[EncodedPiece]:
    """`records` as one batch, or, when that passes max.message.bytes, split in halves until each
    fits (a single record that does not fit is returned as it is: the caller decides)."""
    encoded = codec.encode_batch(records, 0, codec=codec_id, timestamp_type=timestamp_type,
                                 log_append_time_ms=now_ms, max_timestamp=max_timestamp)
    if len(encoded) <= max_bytes or len(records) == 1:
        return [EncodedPiece(0, len(records), encoded)]
    half = len(records) // 2
    first = encode_fitting(records[:half], codec_id=codec_id, max_bytes=max_bytes, now_ms=now_ms,
                           timestamp_type=timestamp_type)
    second = encode_fitting(records[half:], codec_id=codec_id, max_bytes=max_bytes, now_ms=now_ms,
                            timestamp_type=timestamp_type)
    return first + [EncodedPiece(p.start + half, p.count, p.data) for p in second]


BeforeAppend = Callable[[int], None]  # called under the partition lock with the offset the batch will get


class PartitionWriter:
    """Appends encoded batches through `replicas` (a ReplicaManager), running retention after a roll."""

    def __init__(self, store, replicas) -> None:  # noqa: ANN001 - klog.Store, ReplicaManager
        self.store = store
        self.replicas = replicas

    def append_batch(self, topic: str, partition: int, encoded: bytes, acks: str,
                     before: BeforeAppend | None = None) -> int:
        """Append one batch; returns its base offset once `acks` is satisfied."""
        part = self.store.partition(topic, partition)
        active_before = part.active_segment_base()
        base = self.replicas.append(topic, partition, encoded, acks, before=before)
        if active_before is not None and part.active_segment_base() != active_before:
            self.after_roll(topic, partition)
        return base

    def after_roll(self, topic: str, partition: int) -> None:
        from klog.client.lifecycle import retain_after_roll  # a roll: rare, and cleaning is heavier

        retain_after_roll(self.store, topic, partition, self.replicas.warn)

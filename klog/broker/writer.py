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
# What a buffered record costs in memory beyond its size estimate: its tuple and the headers of its
# key and value objects (sys.getsizeof: 72 + 33 + 33, less a shared timestamp). A writer's
# buffer.memory counts it, so that the bound holds for the process's memory, not only for the
# records' bytes.
RECORD_OBJECT_BYTES = 100


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
        from klog.broker.lifecycle import retain_after_roll  # a roll: rare, and cleaning is heavier

        retain_after_roll(self.store, topic, partition, self.replicas.warn)

    def append_batches(self, topic: str, items: Sequence[tuple[int, Sequence[bytes]]], acks: str,
                       acknowledged: Callable[[int, list[int]], None] | None = None) -> None:
        """Append the batches of many partitions of `topic` in one call: items[i] is a partition
        and its batches (in order), appended under one acquisition of its lock; each log directory
        is checked once for them all. `acknowledged(i, base offsets)` runs as items[i]'s `acks`
        are satisfied, before the next partition is written (an error leaves the rest unwritten)."""
        store, replicas = self.store, self.replicas
        with replicas.shared_dir_checks():
            for i, (partition, batches) in enumerate(items):
                part = store.partition(topic, partition)
                active_before = part.active_segment_base()
                with part.lock:
                    bases = [replicas.append(topic, partition, encoded, acks) for encoded in batches]
                if active_before is not None and part.active_segment_base() != active_before:
                    self.after_roll(topic, partition)
                if acknowledged is not None:
                    acknowledged(i, bases)

"""The one partition writer: records encoded into batches that fit max.message.bytes, appended
through the ReplicaManager (one partition's batch, or the batches of many partitions under one
call), with retention run after an append that rolled a segment.

The producer, replay and klog serve's Produce (RawAppender) all write here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from klog.store import codec
from klog.store.codec import RecordIn
from klog.store.format import CREATE_TIME
from klog.store.plain import FrozenPlain

if TYPE_CHECKING:
    from klog.broker.replication import ReplicaManager
    from klog.broker.store_protocol import BrokerStore
    from klog.store.partition import Partition

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


class EncodedPiece(FrozenPlain):
    """Records[start:start + count] of what was given, encoded at base offset 0."""

    __slots__ = _fields = ("start", "count", "data")
    start: int
    count: int
    data: bytes

    def __init__(self, start: int, count: int, data: bytes) -> None:
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "data", data)


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


# A multi-partition append of at least this many partitions syncs them with one syncfs per
# filesystem (klog.store.syncfs) rather than an fsync each; fewer are not worth holding locks for
SYNC_TOGETHER_MIN = 8
# Partition locks one multi-partition append holds at once (each is an open file, held until the
# group is synced: a writer of one of them waits that long)
LOCKS_HELD_MAX = 256
# A written partition keeps ~6 descriptors open (lock, states, the active segment's three files);
# a writer keeps at most this share of the process's limit in recently written partitions and
# closes the least recently written ones' beyond it (10,000 partitions ran out of descriptors)
DESCRIPTORS_PER_PARTITION = 8
OPEN_PARTITIONS_SHARE = 0.5


def open_partitions_max() -> int:
    """How many written partitions a writer keeps open: its share of the descriptor limit, first
    raised from the soft to the hard limit (as Go's runtime does: the soft 1,024 of many systems
    is a compatibility default for select(), which klog does not use)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(8, int(soft * OPEN_PARTITIONS_SHARE) // DESCRIPTORS_PER_PARTITION)


BeforeAppend = Callable[[int], None]  # called under the partition lock with the offset the batch will get


class PartitionWriter:
    """Appends encoded batches through `replicas` (a ReplicaManager), running retention after a roll."""

    def __init__(self, store: BrokerStore, replicas: ReplicaManager, *, release_files: bool = True) -> None:
        """release_files=False: of the least recently written partitions, close only the writer's
        own descriptors, never those readers use (klog serve, whose other threads read the same
        partitions: a descriptor closed under a reader could be reused by another open meanwhile).
        Either way a writer keeps open_partitions_max() partitions open for writing (serve held
        six descriptors for every partition it ever wrote: 10,000 partitions ran out of them)."""
        self.store = store
        self.replicas = replicas
        self.readers_too = release_files
        self.open_max = open_partitions_max()
        self._open: OrderedDict[tuple[str, int], object] = OrderedDict()  # written partitions, oldest first
        self._open_guard = threading.Lock()

    def note_written(self, topic: str, partition: int, part: Partition, release: bool = True) -> list[Partition]:
        """Remember `part` as the most recently written; beyond open_max, close the files of the
        least recently written one (it reopens them when written again). release=False: return
        those partitions for the caller to release_files() (an event loop hands that to a thread:
        closing may wait for a sealed segment's background fsync)."""
        return self.note_written_many(topic, [(partition, part)], release)

    def note_written_many(self, topic: str, written: list[tuple[int, Partition]],
                          release: bool = True) -> list[Partition]:
        """note_written() of several partitions of `topic`, in order, under one hold of the guard."""
        opened = self._open
        with self._open_guard:  # (klog serve appends from several threads)
            for partition, part in written:
                key = (topic, partition)
                opened[key] = part
                opened.move_to_end(key)
            over = len(opened) - self.open_max
            released = [opened.popitem(last=False)[1] for _ in range(over)] if over > 0 else []
        if not release:
            return released
        if released:
            self.release_files(released)
        return []

    def release_files(self, parts: list[Partition]) -> None:
        """What note_written(release=False) returned."""
        for oldest in parts:
            oldest.release_files(self.readers_too)

    def append_batch(self, topic: str, partition: int, encoded: bytes, acks: str,
                     before: BeforeAppend | None = None) -> int:
        """Append one batch; returns its base offset once `acks` is satisfied."""
        part = self.store.partition(topic, partition)
        rolls = part.rolls
        base = self.replicas.append(topic, partition, encoded, acks, before=before)
        self._after_append(topic, partition, part, rolls)
        return base

    def after_roll(self, topic: str, partition: int) -> None:
        from klog.broker.lifecycle import retain_after_roll  # a roll: rare, and cleaning is heavier

        retain_after_roll(self.store, topic, partition, self.replicas.warn)

    def append_batches(self, topic: str, items: Sequence[tuple[int, Sequence[bytes]]], acks: str,
                       acknowledged: Callable[[int, list[int]], None] | None = None) -> None:
        """Append the batches of many partitions of `topic` in one call: items[i] is a partition
        and its batches (in order), appended under one acquisition of its lock; each log directory
        is checked once for them all. `acknowledged(i, base offsets)` runs once items[i]'s `acks`
        are satisfied.

        With acks 1 or all and at least SYNC_TOGETHER_MIN partitions (where syncfs is there), up
        to LOCKS_HELD_MAX partitions at a time are locked (in partition order: two such writers
        never wait for each other in a circle), appended, made durable by one syncfs per
        filesystem instead of an fsync per partition, published, and unlocked. Otherwise each
        partition is locked, appended, synced per the flush policy and published in turn. Either
        way another writer's batches interleave whole with these, and an error leaves the
        partitions not yet acknowledged unwritten or unacknowledged (the later ones untouched)."""
        from klog.store import syncfs

        with self.replicas.shared_dir_checks():
            if len(items) >= SYNC_TOGETHER_MIN and acks != "0" and syncfs.available():
                order = sorted(range(len(items)), key=lambda i: items[i][0])
                step = min(LOCKS_HELD_MAX, self.open_max)
                for at in range(0, len(order), step):
                    self._append_together(topic, [(i, *items[i]) for i in order[at:at + step]], acks, acknowledged)
                return
            for i, (partition, batches) in enumerate(items):
                part = self.store.partition(topic, partition)
                rolls = part.rolls
                bases = self.replicas.append_batches(topic, partition, batches, acks)
                self._after_append(topic, partition, part, rolls)
                if acknowledged is not None:
                    acknowledged(i, bases)

    def _append_together(self, topic: str, group: list[tuple[int, int, Sequence[bytes]]], acks: str,
                         acknowledged: Callable[[int, list[int]], None] | None) -> None:
        from klog.broker.replication import SyncTogether

        store, replicas = self.store, self.replicas
        parts = [store.partition(topic, partition) for _, partition, _ in group]
        rolls_before = [part.rolls for part in parts]
        results: list[list[int]] = []
        held = []
        try:
            for part in parts:  # every lock first: the topic's metadata is then read once for them all
                part.lock.acquire()
                held.append(part.lock)
            together = SyncTogether(store, topic)
            try:
                for (_, partition, batches), part in zip(group, parts, strict=True):
                    results.append(replicas.append_batches(topic, partition, batches, acks, together=together,
                                                           part=part))
                together.finish()
            finally:
                together.close()
        finally:
            for lock in reversed(held):  # (as the ExitStack this replaces did: the last taken first)
                lock.release()
        # (the group's partitions are the most recently written: none of them is released here)
        self.note_written_many(topic, [(partition, part) for (_, partition, _), part in zip(group, parts, strict=True)])
        for (i, partition, _), part, before, bases in zip(group, parts, rolls_before, results, strict=True):
            if part.rolls != before:  # the append rolled a segment
                self.after_roll(topic, partition)
            if acknowledged is not None:
                acknowledged(i, bases)

    def _after_append(self, topic: str, partition: int, part: Partition, rolls_before: int) -> None:
        if part.rolls != rolls_before:  # the append rolled a segment
            self.after_roll(topic, partition)
        self.note_written(topic, partition, part)

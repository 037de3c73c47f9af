"""Record batches that arrive already encoded (klog serve's Produce): checked, adjusted in place,
appended through the producer's path, with idempotent producers' sequence checks.

A batch from a Kafka client is appended as it came, its base offset stamped by the store (outside
the CRC): no re-encode, unless the topic forces a timestamp type (LogAppendTime rewrites
maxTimestamp and the CRC, as Kafka does) or a compression codec other than the batch's. Its records
are checked once, as Kafka's LogValidator does, by the store's one validator (klog.store.validate:
varints and lengths in bounds, no bytes left over, the decompressed size bounded), and their offset
deltas must run 0, 1, 2, ...: a CRC only proves the bytes arrived as the client sent them.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klog.errors import (
    DuplicateSequenceError,
    InvalidBatchError,
    InvalidProducerEpochError,
    InvalidTimestampError,
    InvalidTxnStateError,
    KlogError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownProducerError,
)
from klog.store import codec, compression, validate
from klog.store.codec import BatchHeader, read_header
from klog.store.config import LONG_MAX
from klog.store.format import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from klog.store.limits import MAX_MESSAGE_BYTES_DEFAULT
from klog.store.producer_scan import PRODUCER_ID_EXPIRATION_MS, recent_headers

if TYPE_CHECKING:
    from collections.abc import Iterator

    from klog.broker.store_protocol import BrokerStore
    from klog.store.config import LogConfig
    from klog.store.partition import Partition

SEQUENCES_KEPT = 5  # Kafka keeps the last 5 batches' sequence ranges per producer and partition
SEQUENCE_MAX = 2**31 - 1
# Idempotent producers' entries kept at most (each ~1 KB with its sequence ranges; see ProducerStates):
# far more than real producers use (one id per producer instance), ~10 MB a partition, ~200 MB in all
PRODUCERS_PER_PARTITION_MAX = 10_000
PRODUCERS_MAX = 200_000
# producers dropped past those bounds (not expired) remembered by their last sequences (~0.5 KB each),
# so that a retry of a batch already written is still a duplicate and the next batch goes on
DROPPED_MAX = 20_000
TOPIC_REFRESH_S = 5.0  # how stale a long-lived writer's view of a topic's configs may get


def check_batch(data: bytes) -> BatchHeader:
    """The header of `data`, which must be exactly one whole CRC-valid RecordBatch v2 (the store's
    validator, klog.store.validate); raises InvalidBatchError naming what is wrong."""
    header, problem = validate.client_batch_problem(data)
    if problem is not None:
        raise InvalidBatchError(problem.text, corrupt=problem.corrupt)
    assert header is not None
    check_records(data, header)
    return header


def check_records(data: bytes, header: BatchHeader) -> None:
    """Every record of the CRC-valid batch `data` well-formed (Kafka's LogValidator checks them
    too): a malformed record is CORRUPT_MESSAGE, offset deltas other than 0, 1, 2, ...
    INVALID_RECORD naming the record."""
    problem = validate.records_problem(data, 0, header, consecutive=True)
    if problem is not None:
        text = problem.text if problem.record_index is not None else f"record batch refused: {problem.text}"
        raise InvalidBatchError(text, corrupt=problem.corrupt, record_index=problem.record_index)


def with_log_append_time(data: bytes, now_ms: int) -> bytes:
    """The batch with the LogAppendTime flag and maxTimestamp = now; both are under the CRC."""
    buf = bytearray(data)
    (attributes,) = struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", buf, MAX_TIMESTAMP_OFFSET, now_ms)
    struct.pack_into(">I", buf, CRC_OFFSET, codec.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def with_codec(data: bytes, header: BatchHeader, new_codec: int) -> bytes:
    """The batch recompressed with `new_codec` (the topic's compression.type); header kept."""
    body = memoryview(data)[RECORD_BATCH_OVERHEAD:]
    raw = compression.decompress(header.codec, body) if header.codec else bytes(body)
    packed = compression.compress(new_codec, raw) if new_codec else raw
    attributes = (header.attributes & ~compression.CODEC_MASK) | new_codec
    fixed = header._replace(attributes=attributes, batch_length=RECORD_BATCH_OVERHEAD - 12 + len(packed), crc=0)
    buf = bytearray(codec.encode_header_fields(fixed) + packed)
    struct.pack_into(">I", buf, CRC_OFFSET, codec.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def with_max_timestamp(data: bytes, max_timestamp: int) -> bytes:
    """The batch with its header's maxTimestamp set (it is under the CRC: recomputed)."""
    buf = bytearray(data)
    struct.pack_into(">q", buf, MAX_TIMESTAMP_OFFSET, max_timestamp)
    struct.pack_into(">I", buf, CRC_OFFSET, codec.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def validated_for_topic(data: bytes, header: BatchHeader, config: LogConfig, now_ms: int) -> bytes:
    """What Kafka's LogValidator checks of a well-formed batch against its topic, and the batch as
    it is to be stored: a record without a key refused in a compacted topic (INVALID_RECORD), CreateTime
    timestamps outside message.timestamp.before/after.max.ms refused (INVALID_TIMESTAMP), and a header
    whose maxTimestamp is below its first record's (sarama writes -1) set from the records, so the
    time index finds them. The records are decoded only where one of these needs them: a well-formed
    batch into a default topic costs nothing more."""
    bounded = not config.log_append_time and (config.timestamp_before_max_ms < LONG_MAX
                                               or config.timestamp_after_max_ms < LONG_MAX)
    wrong_max = header.max_timestamp < header.base_timestamp and not config.log_append_time
    if not (config.compacted or bounded or wrong_max):
        return data
    records = codec.decode_batch_records(data, 0, header)
    if config.compacted:
        for i, record in enumerate(records):
            if record[2] is None:
                raise InvalidBatchError(f"record {i} has no key: a compacted topic cannot accept it", corrupt=False,
                                        record_index=i)
    if bounded:
        for i, record in enumerate(records):
            ts = record[1]
            if ts < now_ms - config.timestamp_before_max_ms or ts > now_ms + config.timestamp_after_max_ms:
                raise InvalidTimestampError(
                    f"record {i} has timestamp {ts}, outside message.timestamp.before.max.ms "
                    f"({config.timestamp_before_max_ms}) / after.max.ms ({config.timestamp_after_max_ms}) "
                    f"of the broker time {now_ms}", record_index=i)
    if wrong_max:
        return with_max_timestamp(data, max(record[1] for record in records))
    return data


@dataclass(slots=True)
class _Appended:
    first_seq: int
    last_seq: int
    base_offset: int
    max_timestamp: int = -1  # the batch's (DescribeProducers' last timestamp, as Kafka's BatchMetadata)


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    recent: deque  # of _Appended, the last SEQUENCES_KEPT
    last_ms: int = 0  # when its last batch was appended (wall clock, ms): what expiration counts from
    in_txn: bool = False  # a transactional batch appended and no marker since: never dropped


@dataclass(slots=True, frozen=True)
class _Dropped:
    """What is kept of a producer's entry dropped past the bounds: its epoch and last batches."""
    epoch: int
    recent: tuple  # of _Appended
    dropped_ms: int


def _seq_add(seq: int, delta: int) -> int:
    """Sequences wrap at 2^31-1 back to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    return (seq + delta) % (SEQUENCE_MAX + 1)


class ProducerStates:
    """Per partition: each idempotent producer's epoch and last batches' sequence ranges.

    Built from the log's batch headers the first time a partition is written by an idempotent
    producer (Kafka rebuilds it the same way, from its snapshot plus the log tail): it survives a
    restart and a kill -9 because the log is the only record of it.

    Bounded, since any client may put any producer id in a batch (~1 KB an entry; one connection
    made 420 new ids a second, 1.4 GB an hour): an entry idle for producer.id.expiration.ms is
    dropped by expire() (Kafka's removeExpiredProducers), and past `per_partition_max` entries in
    a partition or `total_max` in all, the least recently appended one goes. Never one with an open
    transaction.

    A producer with no entry (new in the partition, its batches deleted, or expired) may start at
    any sequence, as in Kafka 3.9 (ProducerAppendInfo.checkSequence: no epoch known, any sequence;
    librdkafka keeps a producer's sequences past a batch refused inside an aborted transaction).
    One dropped past the bounds (Kafka has none) is remembered by its last batches (`DROPPED_MAX`
    of them, until producer.id.expiration.ms): a retry of one of them is answered as a duplicate,
    the next sequence is taken, and any other is answered UNKNOWN_PRODUCER_ID (its clients reset
    their sequences on it): a retry is never written twice.
    """

    def __init__(self, per_partition_max: int = PRODUCERS_PER_PARTITION_MAX, total_max: int = PRODUCERS_MAX,
                 expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                 clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._by_partition: dict[tuple[str, int], dict[int, _ProducerEntry]] = {}
        # every entry, least recently appended first (each partition's dict keeps that order too)
        self._lru: OrderedDict[tuple[str, int, int], None] = OrderedDict()
        # held for every change of the entries (deletions come from other partitions' appends and
        # the expiration timer, so a partition's lock is not enough); reads are single dict steps
        self._lock = threading.Lock()
        self.per_partition_max = per_partition_max
        self.total_max = total_max
        self.expiration_ms = expiration_ms
        self.clock = clock  # epoch ms (a test's hook)
        self.evicted = 0  # entries dropped past the bounds (the serve timer logs and resets it)
        self._dropped: OrderedDict[tuple[str, int, int], _Dropped] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._lru)

    def forget(self, topic: str, partition: int | None = None) -> None:
        # list(): one step for the GIL. Appends in other threads (klog serve's append workers) add
        # partitions meanwhile (_load, under their partition's lock only): iterating the dict
        # itself raised "dictionary changed size during iteration" into a topic's alter or delete
        with self._lock:
            for key in [k for k in list(self._by_partition) if k[0] == topic and partition in (None, k[1])]:
                for pid in list(self._by_partition.pop(key, {})):
                    self._lru.pop((*key, pid), None)

    def _load(self, key: tuple[str, int], part) -> dict[int, _ProducerEntry]:
        states = self._by_partition.get(key)
        if states is None:
            states = {}
            # Kafka forgets a producer idle for producer.id.expiration.ms (1 day): older segments need
            # not be read, which bounds the first idempotent write's scan of a long log
            now = self.clock()
            since = now - self.expiration_ms
            dropped: dict[int, _ProducerEntry] = {}
            for header in batch_headers(part, since_ms=since):
                if header.producer_id < 0:
                    continue
                if header.is_control:  # a transaction's marker: it is over
                    self._marked(states, header, min(header.max_timestamp, now))
                    dropped.update(self._over_partition_max(states, len(states) - self.per_partition_max))
                elif header.base_sequence >= 0:
                    self._record(states, header, header.base_offset, min(header.max_timestamp, now))
                    dropped.update(self._over_partition_max(states, len(states) - self.per_partition_max))
            with self._lock:
                for pid, entry in dropped.items():
                    if pid not in states:
                        self._remember_dropped((*key, pid), entry)
                for pid in states:
                    self._dropped.pop((*key, pid), None)
                # the log's producers count as the least recently used: first to go past total_max
                for pid in reversed(states):
                    self._lru[(*key, pid)] = None
                    self._lru.move_to_end((*key, pid), last=False)
                self._by_partition[key] = states
                self._bound_total()
        return states

    @staticmethod
    def _record(states: dict[int, _ProducerEntry], header: BatchHeader, base_offset: int, now_ms: int,
                append_time: int = -1) -> None:
        entry = states.pop(header.producer_id, None)  # (put back last: the partition's order of use)
        if entry is None or header.producer_epoch > entry.epoch:
            in_txn = entry is not None and entry.in_txn
            entry = _ProducerEntry(header.producer_epoch, deque(maxlen=SEQUENCES_KEPT), in_txn=in_txn)
        states[header.producer_id] = entry
        last_seq = _seq_add(header.base_sequence, header.last_offset_delta)
        max_timestamp = append_time if append_time >= 0 else header.max_timestamp  # (LogAppendTime: the broker's)
        entry.recent.append(_Appended(header.base_sequence, last_seq, base_offset, max_timestamp))
        entry.last_ms = now_ms
        if header.attributes & TRANSACTIONAL_FLAG_MASK:
            entry.in_txn = True

    @staticmethod
    def _marked(states: dict[int, _ProducerEntry], header: BatchHeader, now_ms: int) -> None:
        """A transaction marker read from the log (Kafka's appendEndTxnMarker): the producer's
        transaction is over, and the marker's epoch, where newer than its batches' (the coordinator
        fenced it: a timed-out transaction's abort, or one a new InitProducerId ended), is its epoch
        from then on, its sequences starting over; a producer known only by its marker (its batches
        cleaned away) has an entry at that epoch. An emptied marker (a cleaning removed its
        transaction) tells nothing more, as for Kafka and the cleaner's active producers."""
        entry = states.get(header.producer_id)
        if entry is None:
            if not header.records_count:
                return
            entry = states[header.producer_id] = _ProducerEntry(header.producer_epoch, deque(maxlen=SEQUENCES_KEPT),
                                                                last_ms=now_ms)
        entry.in_txn = False
        if header.records_count and header.producer_epoch > entry.epoch:
            entry.epoch = header.producer_epoch
            entry.recent.clear()

    @staticmethod
    def _over_partition_max(states: dict[int, _ProducerEntry], excess: int) -> list[tuple[int, _ProducerEntry]]:
        """Take the `excess` least recently appended entries without an open transaction out of
        `states`; their producer ids and entries. (Every change of a published partition's entries
        is made under self._lock: none meanwhile.)"""
        if excess <= 0:
            return []
        gone = list(itertools.islice((pid for pid, e in states.items() if not e.in_txn), excess))
        return [(pid, states.pop(pid)) for pid in gone]

    def _remember_dropped(self, lru_key: tuple[str, int, int], entry: _ProducerEntry) -> None:
        """An entry dropped past the bounds: keep its last batches (lock held)."""
        self._dropped.pop(lru_key, None)
        self._dropped[lru_key] = _Dropped(entry.epoch, tuple(entry.recent), self.clock())
        while len(self._dropped) > DROPPED_MAX:
            self._dropped.popitem(last=False)

    def _bound_total(self) -> None:
        """Drop the least recently appended entries past total_max (lock held); an entry with an open
        transaction is passed over (moved to the back: the coordinator bounds how many there are)."""
        passed = 0
        while len(self._lru) > self.total_max and passed < len(self._lru):
            lru_key = next(iter(self._lru))
            states = self._by_partition.get(lru_key[:2])
            entry = states.get(lru_key[2]) if states is not None else None
            if entry is not None and entry.in_txn:
                self._lru.move_to_end(lru_key)
                passed += 1
                continue
            del self._lru[lru_key]
            self.evicted += 1
            if states is not None and (gone := states.pop(lru_key[2], None)) is not None:
                self._remember_dropped(lru_key, gone)

    def expire(self, entries_max: int = 10_000, chunk: int = 1_000) -> int:
        """Drop the entries idle for expiration_ms (by their last append) without an open transaction,
        Kafka's removeExpiredProducers: at most `entries_max` looked at, least recently appended
        first (one pass's bounded work), the lock taken `chunk` entries at a time (appends wait
        less than a millisecond for it). Returns how many were dropped."""
        dropped = 0
        deadline = self.clock() - self.expiration_ms
        with self._lock:
            oldest = list(itertools.islice(self._lru, entries_max))
        for at in range(0, len(oldest), chunk):
            with self._lock:
                for lru_key in oldest[at:at + chunk]:
                    states = self._by_partition.get(lru_key[:2])
                    entry = states.get(lru_key[2]) if states is not None else None
                    # (an entry built from the log may come before later appends: no stop at the
                    # first one kept, the pass looks at all of its entries_max)
                    if entry is not None and (entry.last_ms > deadline or entry.in_txn):
                        continue
                    if self._lru.pop(lru_key, 0) is None:  # (still there: not dropped meanwhile)
                        if states is not None:
                            states.pop(lru_key[2], None)
                        dropped += 1
        return dropped

    def txn_ended(self, key: tuple[str, int], producer_id: int, marker_epoch: int | None = None) -> None:
        """A marker ended (or found no) open transaction of the producer in the partition.
        `marker_epoch`: the epoch of the marker appended, which a newer one makes the producer's (see
        _marked: the state rebuilt from the log takes it too). Partition's lock held."""
        states = self._by_partition.get(key)
        entry = states.get(producer_id) if states is not None else None
        if entry is not None:
            entry.in_txn = False
            if marker_epoch is not None and marker_epoch > entry.epoch:
                with self._lock:
                    entry.epoch = marker_epoch
                    entry.recent.clear()

    def states(self, key: tuple[str, int], part: Partition) -> dict[int, _ProducerEntry]:
        """The partition's producers, built from its log on first use. Lock held."""
        return self._load(key, part)

    def check(self, key: tuple[str, int], part, header: BatchHeader, data: bytes, built_only: bool = False) -> bool:
        """Raise if the batch `data` must not be appended: a duplicate (with its original offset), a
        gap, an older epoch. Lock held. built_only: return False, checking nothing, where the
        partition's states are not built (building them reads the log: not the event loop's work);
        else True.

        A duplicate is answered only for the same batch written before (read back from the log and
        compared): sequence numbers alone are not proof, as another client may have sent a batch
        under the same producer id, epoch and sequences, and acknowledging this one as a duplicate of
        it would acknowledge records that are not in the log."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return True
        states = self._by_partition.get(key) if built_only else self._load(key, part)
        if states is None:
            return False  # (forgotten since the caller's look: an alter or delete of the topic)
        entry = states.get(header.producer_id)
        if entry is None:
            dropped = self._dropped.get((*key, header.producer_id))
            if dropped is not None and self.clock() - dropped.dropped_ms < self.expiration_ms:
                self._check_dropped(part, header, data, dropped)
            return True  # no state: any sequence (Kafka 3.9's checkSequence without a producer epoch)
        if entry.in_txn and not header.attributes & TRANSACTIONAL_FLAG_MASK:
            # Kafka's rule: else any client allowed the topic raised the epoch kept here under the id
            # (in every fetched batch), and the transaction's next batch was refused
            raise InvalidTxnStateError(f"producer {header.producer_id} has a transaction open here: a "
                                       "non-transactional batch under its id is refused")
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"producer {header.producer_id} epoch {header.producer_epoch} is older "
                                      f"than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(f"producer {header.producer_id}: a new epoch must start at "
                                              f"sequence 0, not {header.base_sequence}")
            return True
        last_seq = _seq_add(header.base_sequence, header.last_offset_delta)
        for done in entry.recent:
            if done.first_seq == header.base_sequence and done.last_seq == last_seq:
                if not _written_at(part, done.base_offset, data, header):
                    raise OutOfOrderSequenceError(
                        f"producer {header.producer_id} epoch {header.producer_epoch}: sequences "
                        f"{done.first_seq}..{done.last_seq} are taken by a different batch at offset "
                        f"{done.base_offset}; this one is not written")
                raise DuplicateSequenceError(done.base_offset)
        expected = _seq_add(entry.recent[-1].last_seq, 1) if entry.recent else 0
        if header.base_sequence != expected:
            raise OutOfOrderSequenceError(f"producer {header.producer_id}: sequence {header.base_sequence}, "
                                          f"expected {expected}")
        return True

    @staticmethod
    def _check_dropped(part, header: BatchHeader, data: bytes, dropped: _Dropped) -> None:  # noqa: ANN001
        """A batch of a producer dropped past the bounds: a retry of one of its last batches is a
        duplicate, the next sequence or a new start at 0 goes on; anything else cannot be told from
        a retry of a batch older than those kept, so it is refused (the client resets)."""
        if header.producer_epoch < dropped.epoch:
            raise InvalidProducerEpochError(f"producer {header.producer_id} epoch {header.producer_epoch} is older "
                                            f"than {dropped.epoch}")
        last_seq = _seq_add(header.base_sequence, header.last_offset_delta)
        if header.producer_epoch == dropped.epoch:
            for done in dropped.recent:
                if done.first_seq == header.base_sequence and done.last_seq == last_seq:
                    if _written_at(part, done.base_offset, data, header):
                        raise DuplicateSequenceError(done.base_offset)
                    break
            if dropped.recent and header.base_sequence == _seq_add(dropped.recent[-1].last_seq, 1):
                return
        if header.base_sequence != 0:
            raise UnknownProducerError(f"producer {header.producer_id} has no state here any more (dropped past "
                                       f"the producer state bounds) and sent sequence {header.base_sequence}")

    def appended(self, key: tuple[str, int], header: BatchHeader, base_offset: int, append_time: int = -1) -> None:
        """The batch (`header` as the client sent it) is in the log at `base_offset`; `append_time`:
        the LogAppendTime it was given, or -1."""
        if header.producer_id >= 0 and header.base_sequence >= 0:
            with self._lock:
                states = self._by_partition.get(key)
                if states is not None:
                    self._record(states, header, base_offset, self.clock(), append_time)
                    lru_key = (key[0], key[1], header.producer_id)
                    try:
                        self._lru.move_to_end(lru_key)
                    except KeyError:
                        self._lru[lru_key] = None
                        if self._dropped:
                            self._dropped.pop(lru_key, None)
                        for pid, gone in self._over_partition_max(states, len(states) - self.per_partition_max):
                            del self._lru[(key[0], key[1], pid)]
                            self.evicted += 1
                            self._remember_dropped((key[0], key[1], pid), gone)
                        if len(self._lru) > self.total_max:
                            self._bound_total()


def _written_at(part: Partition, base_offset: int, data: bytes, header: BatchHeader) -> bool:
    """Is the batch in the log at `base_offset` the batch `data` (a client's retry of it)? Same
    producer fields, sequences, record count, first timestamp and records: the header fields the
    store rewrites (base offset, leader epoch, LogAppendTime's max timestamp and CRC) are left out,
    and records recompressed to the topic's compression.type are compared decompressed."""
    leader = part.leader
    try:
        found = leader.read(base_offset, base_offset + 1, max_bytes=len(data))
    except (KlogError, OSError):
        return False  # unreadable: not proof that this batch was written
    if not found or found[0].header.base_offset != base_offset:
        return False  # deleted since (retention, delete-records): nothing to compare with
    stored, written = found[0].data, found[0].header

    def same(*fields: str) -> bool:
        return all(getattr(written, f) == getattr(header, f) for f in fields)

    if not same("producer_id", "producer_epoch", "base_sequence", "last_offset_delta", "records_count",
                "base_timestamp"):
        return False
    body, stored_body = memoryview(data)[RECORD_BATCH_OVERHEAD:], memoryview(stored)[RECORD_BATCH_OVERHEAD:]
    if written.codec == header.codec and body == stored_body:
        return True
    try:
        return compression.decompress(header.codec, body) == compression.decompress(written.codec, stored_body)
    except (KlogError, ValueError):  # compression's errors are ValueErrors
        return False


def batch_headers(part: Partition, since_ms: int | None = None) -> Iterator[BatchHeader]:
    """The batch headers of the partition's leader, oldest first (header reads only): the store's
    one producer-state walk (klog.store.producer_scan.recent_headers), which the cleaner's
    active producers read too. With `since_ms`, segments whose newest time-index entry is older
    are skipped, counting back from the newest segment."""
    return recent_headers(part.leader, since_ms)


@dataclass(frozen=True)
class RawAppendResult:
    base_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


# klog serve's event loop appends a batch itself (its fsync through io_uring) only up to this size:
# an append's CPU (the CRC check, the copy into the page cache) grows with it, and the loop serves
# every other connection meanwhile; larger batches go to the append threads
LOOP_APPEND_BYTES_MAX = 64 * 1024


class PendingAppend:
    """A batch appended by RawAppender.append_begin, its locks held, waiting for its fsyncs:
    the caller fsyncs `fds` (or, when None, calls flush() in a thread), then done() on the thread
    that began it."""

    def __init__(self, owner: RawAppender, topic: str, partition: int, part: Partition, header: BatchHeader,
                 base_offset: int, append_time: int, together: Any, rolls_before: int,
                 thread_lock: threading.Lock) -> None:
        self.owner = owner
        self.topic = topic
        self.partition = partition
        self.part = part
        self.header = header
        self.base_offset = base_offset
        self.append_time = append_time
        self.together = together
        self.rolled = False  # (after done(): the append started a segment, retention is due)
        self.to_release: list[Partition] = []  # (after done(): partitions whose files to close, in a thread)
        self._rolls_before = rolls_before
        self._thread_lock = thread_lock  # (and the partition's file lock: both released by done())
        self.fds: list[int] | None = together.fsyncs()

    def flush(self) -> None:
        """The flushes `fds` could not name (any thread; raises OSError)."""
        self.together.flush()

    def done(self, error: OSError | None = None) -> RawAppendResult:
        """After the fsyncs (`error`: the first that failed, then StorageError is raised and nothing
        is acknowledged): publish the batch, record it for its producer, release the locks."""
        owner, part, key = self.owner, self.part, (self.topic, self.partition)
        try:
            self.together.synced(error)
            owner.producers.appended(key, self.header, self.base_offset, self.append_time)
            log_start = part.log_start_offset()  # (the lock held: the state just written, no read)
        finally:
            part.lock.release()
            self._thread_lock.release()
        self.rolled = part.rolls != self._rolls_before
        # (the least recently written partitions' files, beyond what a writer keeps open, are
        # closed by the caller's thread: closing may wait for a sealed segment's fsync)
        self.to_release = owner.writer.note_written(self.topic, self.partition, part, release=False)
        return RawAppendResult(self.base_offset, self.append_time, log_start)


class RawAppender:
    """Appends client-encoded batches with the producer's ReplicaManager (the one write path),
    one at a time per partition (threads of one process share the partition's file lock)."""

    def __init__(self, store: BrokerStore, warn: Callable[[str], None] | None = None) -> None:
        from klog.broker.replication import ReplicaManager, SyncAfter
        from klog.broker.writer import PartitionWriter

        self._sync_after = SyncAfter

        self.store = store
        self.replicas = ReplicaManager(store, warn=warn)
        self.writer = PartitionWriter(store, self.replicas, release_files=False)
        self.producers = ProducerStates()
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._guard = threading.Lock()
        self._topic_read: dict[str, float] = {}
        self._topic_ids: dict[str, str | None] = {}
        # topic -> the metadata's last write id when check_topic last read it: unchanged, the topic
        # cannot have been deleted or created again since (any process's change is a write)
        self._topic_checked: dict[str, int] = {}

    def lock_for(self, topic: str, partition: int) -> threading.Lock:
        with self._guard:
            lock = self._locks.get((topic, partition))
            if lock is None:
                lock = self._locks[(topic, partition)] = threading.Lock()
            return lock

    def _lock_taken_now(self, topic: str, partition: int) -> threading.Lock | None:
        """lock_for's lock, taken, or None where taking it (or the guard) would wait. The event
        loop must not wait on the guard either: check_topic holds it while closing a deleted
        topic's partitions, which waits for a writer to finish, and a writer whose fsync is in
        flight finishes on the loop."""
        lock = self._locks.get((topic, partition))
        if lock is None:
            if not self._guard.acquire(blocking=False):
                return None
            try:
                lock = self._locks.setdefault((topic, partition), threading.Lock())
            finally:
                self._guard.release()
        return lock if lock.acquire(blocking=False) else None

    def _refresh_topic(self, topic: str) -> None:
        """Re-read the topic's metadata at most every TOPIC_REFRESH_S: configs another process
        altered, and a topic deleted and created again (check_topic does that part at once)."""
        now = time.monotonic()
        with self._guard:
            if now - self._topic_read.get(topic, 0.0) < TOPIC_REFRESH_S:
                return
            self._topic_read[topic] = now
            self.store.forget_topic_metadata(topic)
        self.check_topic(topic)

    def check_topic(self, topic: str) -> None:
        """Notice now a topic deleted and created again by another process (the files this process
        holds open are the old topic's: an append there would be lost, a fetch would read the old
        records): one LMDB read, 3-13 us, so callers make it once per topic per request, not per
        partition. Skipped while the metadata has had no write since the last look (~1 us)."""
        if self._topic_checked.get(topic) == self.store.meta.last_write():
            return
        # the snapshot the lookup reads names what it saw, not last_write(): LMDB writes a commit's
        # meta page (which last_write reads) before it lets new readers see the commit, so a
        # lookup begun in between misses a delete last_write already counts, and recording that
        # count would skip every later check (a deleted topic served from its old files for good)
        with self.store.meta.txn() as txn:
            written = txn.id()
            found = self.store.topics.find(topic, txn)
        topic_id = found.topic_id if found is not None else None
        with self._guard:
            if self._topic_ids.get(topic, topic_id) != topic_id:
                self.store.forget_topic(topic)
                self.producers.forget(topic)
            self._topic_ids[topic] = topic_id
            self._topic_checked[topic] = written

    def topic_current(self, topic: str, written: int, now: float) -> bool:
        """Whether what this process knows of `topic` still stands without reading anything: its
        check_topic saw the metadata as of `written` (the metadata's last write id, read by the
        caller) and its periodic re-read (TOPIC_REFRESH_S) is not due at `now`. For the event loop,
        which must not read LMDB tables."""
        return self._topic_checked.get(topic) == written and now - self._topic_read.get(topic, 0.0) < TOPIC_REFRESH_S

    def known_topic_id(self, topic: str) -> str | None:
        """The topic id check_topic last saw for `topic` (None: none seen, or no such topic)."""
        return self._topic_ids.get(topic)

    def forget_producer_states(self, topic: str) -> None:
        """The topic was altered or deleted: its producer states are rebuilt on next use."""
        with self._guard:
            self.producers.forget(topic)

    def _max_message_bytes(self, topic: str) -> int:
        try:
            return self.store.log_config(topic).max_message_bytes
        except KlogError:  # an unknown topic: the append's own checks say so
            return MAX_MESSAGE_BYTES_DEFAULT

    def partition(self, topic: str, partition: int, refresh: bool = True) -> Partition:
        """`refresh` False: the caller refreshed the topic just before (a fetch of many partitions
        of one topic refreshes once, not once per partition)."""
        if refresh:
            self._refresh_topic(topic)
        with self._guard:  # Store's partition cache is a plain dict
            return self.store.partition(topic, partition)

    def append_message_set(self, topic: str, partition: int, data: bytes, acks: str,
                           txn_check: Callable[[BatchHeader], None] | None = None) -> RawAppendResult:
        """Append a magic 0/1 message set (Produce v0-v2) as Kafka 3.x does: up-converted to one v2
        batch (klog.store.legacy), then appended like any batch. Its decompression is bounded by
        max.message.bytes, as a v2 batch's is."""
        from klog.errors import CorruptLogError, UnsupportedCodecError
        from klog.store import legacy

        max_bytes = self._max_message_bytes(topic)
        with compression.expansion_limit(max_bytes) as bound:
            try:
                batch = legacy.to_v2_batch(data)
            except (CorruptLogError, UnsupportedCodecError) as e:
                if bound.exceeded:
                    raise RecordTooLargeError(f"message set of {len(data)} bytes expands past max.message.bytes "
                                              f"({max_bytes}) of topic '{topic}' when decompressed") from None
                raise InvalidBatchError(f"message set refused: {e}") from None
        return self.append(topic, partition, batch, acks, txn_check)

    def append(self, topic: str, partition: int, data: bytes, acks: str,
               txn_check: Callable[[BatchHeader], None] | None = None) -> RawAppendResult:
        """Check and append one batch as a Kafka client sent it. Raises InvalidBatchError,
        RecordTooLargeError, the producer errors of klog.errors, and the store's errors. A transactional
        batch needs `txn_check` (the coordinator's: is this partition in the producer's ongoing
        transaction?), asked under the partition's lock, so no marker can come between the
        check and the append."""
        header, data, append_time, txn_check = self._prepared(topic, data, txn_check, check_topic=True)
        part = self.partition(topic, partition)  # refreshes the topic's metadata when due
        key = (topic, partition)
        with self.lock_for(topic, partition), part.lock if txn_check is not None else contextlib.nullcontext():
            if txn_check is not None:
                txn_check(header)
            try:
                self.producers.check(key, part, header, data)
            except DuplicateSequenceError as dup:
                return RawAppendResult(dup.base_offset, append_time, part.log_start_offset(), duplicate=True)
            base = self.writer.append_batch(topic, partition, data, acks)
            self.producers.appended(key, header, base, append_time)
            return RawAppendResult(base, append_time, part.log_start_offset())

    def append_begin(self, topic: str, partition: int, data: bytes,
                     acks: str) -> RawAppendResult | PendingAppend | None:
        """append() for an event loop, which must not wait: checked and appended under the locks
        (kept), published once its fsyncs are made (PendingAppend), or a duplicate's answer. None,
        with nothing done, where any step could wait or take long: a topic whose metadata another
        process may have changed or whose re-read is due, a partition not open yet (or its files
        closed since: PartitionWriter's least recently written), with followers
        (their copies go to threads), a lock another thread or process holds, a reconcile due, a
        producer whose state is not built, a compressed, transactional or large batch, acks=0,
        flush.messages or flush.ms set (appends left unsynced fill the page cache with dirty pages,
        and a writer among many dirty pages may be made to wait). Raises what append() raises for
        a refused batch."""
        store = self.store
        part = store.opened_partitions().get((topic, partition))
        if part is None:
            return None
        opened_with = part.config
        # every batch fsynced (klog's default, flush.messages=1): the loop's own writes leave
        # next to nothing dirty in the page cache, so they are not the ones the kernel throttles
        if (len(part.replicas) != 1 or acks == "0" or opened_with.flush_messages != 1
                or opened_with.flush_ms != LONG_MAX
                or len(data) > LOOP_APPEND_BYTES_MAX or len(data) < RECORD_BATCH_OVERHEAD
                # (the attributes' low byte: compressed or transactional batches go to a thread)
                or data[ATTRIBUTES_OFFSET + 1] & (compression.CODEC_MASK | TRANSACTIONAL_FLAG_MASK)
                or store.cached_topic(topic) is None
                or not self.topic_current(topic, store.meta.last_write(), time.monotonic())):
            return None
        config = store.log_config(topic)  # (read once: _prepared and the append use it too)
        if config.compression_type not in ("producer", "uncompressed"):
            return None
        header, data, append_time, _ = self._prepared(topic, data, None, check_topic=False, config=config)
        key = (topic, partition)
        thread_lock = self._lock_taken_now(topic, partition)
        if thread_lock is None:
            return None
        pending = None
        try:
            try:  # (under the thread lock only, as append() checks it)
                if not self.producers.check(key, part, header, data, built_only=True):
                    return None
            except DuplicateSequenceError as dup:
                return RawAppendResult(dup.base_offset, append_time, part.log_start_offset(), duplicate=True)
            if not part.lock.acquire(blocking=False, wait_threads=False):
                return None
            try:
                # (under the lock: release_files closes them only while nobody holds it)
                if not part.leader.files_open:
                    return None
                meta = self.replicas.checked_recently(topic, partition, part)
                if meta is None:
                    return None
                together = self._sync_after(store, topic, config.min_insync_replicas)
                rolls = part.rolls
                base = self.replicas.append_batches(topic, partition, [data], acks, together=together,
                                                    checked=meta, part=part)[0]
                pending = PendingAppend(self, topic, partition, part, header, base, append_time, together, rolls,
                                        thread_lock)
                return pending
            finally:
                if pending is None:
                    part.lock.release()
        finally:
            if pending is None:
                thread_lock.release()

    def _prepared(self, topic: str, data: bytes, txn_check: Callable[[BatchHeader], None] | None,
                  check_topic: bool, config: LogConfig | None = None,
                  ) -> tuple[BatchHeader, bytes, int, Callable[[BatchHeader], None] | None]:
        """A client's batch checked against the topic's configs, as it will be appended: (its header,
        its bytes, the log append time or -1, the txn_check it needs or None). `config`: the
        topic's, when the caller read it after the topic's checks."""
        if len(data) > ATTRIBUTES_OFFSET + 1 and not data[ATTRIBUTES_OFFSET + 1] & compression.CODEC_MASK:
            header = check_batch(data)  # uncompressed (the attributes' low byte): nothing expands, no bound
        else:
            header = self._checked_compressed(topic, data)
        if header.attributes & TRANSACTIONAL_FLAG_MASK:
            if txn_check is None:
                raise InvalidBatchError("a transactional batch needs a transactional id in the request", corrupt=False)
        else:
            txn_check = None
        if check_topic:
            self.check_topic(topic)
            self._refresh_topic(topic)
        if config is None:
            config = self.store.log_config(topic)
        max_bytes = config.max_message_bytes
        wanted_codec = config.compression_type
        if wanted_codec != "producer" and compression.CODEC_IDS[wanted_codec] != header.codec:
            data = with_codec(data, header, compression.CODEC_IDS[wanted_codec])
            header = read_header(data)
        if len(data) > max_bytes:
            raise RecordTooLargeError(f"record batch of {len(data)} bytes is larger than max.message.bytes "
                                      f"({max_bytes}) of topic '{topic}'")
        data = validated_for_topic(data, header, config, int(time.time() * 1000))
        append_time = -1
        if config.log_append_time:
            append_time = int(time.time() * 1000)
            data = with_log_append_time(data, append_time)
        return header, data, append_time, txn_check

    def _checked_compressed(self, topic: str, data: bytes) -> BatchHeader:
        """check_batch of a compressed batch, its decompression bounded: its records may not expand
        past max.message.bytes either (a few KB of zstd would otherwise cost hundreds of MB here,
        and every consumer as much again)."""
        max_bytes = self._max_message_bytes(topic)
        with compression.expansion_limit(max_bytes) as bound:
            try:
                return check_batch(data)
            except InvalidBatchError:
                if bound.exceeded:
                    raise RecordTooLargeError(f"record batch of {len(data)} bytes expands past max.message.bytes "
                                              f"({max_bytes}) of topic '{topic}' when decompressed") from None
                raise

    def append_many(self, topic: str, items: list[tuple[int, bytes]], acks: str) -> list[RawAppendResult | Exception]:
        """Check and append the non-transactional batches of many partitions of `topic` (a Produce
        request's), in one multi-partition write (PartitionWriter.append_batches: one lock
        acquisition per partition, the metadata read once, one syncfs for many): each item's
        result, or the exception that refused it. The topic is checked once; each batch is checked
        as append() checks it, and its producer's sequence under the partition's lock."""
        out: list[RawAppendResult | Exception | None] = [None] * len(items)
        try:
            self.check_topic(topic)
            self._refresh_topic(topic)
        except (KlogError, OSError) as e:
            return [e] * len(items)
        ready: list[tuple[int, int, BatchHeader, bytes, int]] = []  # (item, partition, header, data, append time)
        for i, (partition, data) in enumerate(items):
            try:
                header, data, append_time, txn_check = self._prepared(topic, data, None, check_topic=False)
                if txn_check is not None or header.attributes & TRANSACTIONAL_FLAG_MASK:
                    raise InvalidBatchError("a transactional batch needs a transactional id in the request",
                                            corrupt=False)
                with self._guard:
                    self.store.partition(topic, partition)  # an unknown partition is refused here
                ready.append((i, partition, header, data, append_time))
            except (KlogError, OSError) as e:
                out[i] = e
        ready.sort(key=lambda r: r[1])  # thread locks in partition order: never two waiting in a circle
        with contextlib.ExitStack() as held:
            writes: list[tuple[int, int, BatchHeader, bytes, int]] = []
            for i, partition, header, data, append_time in ready:
                held.enter_context(self.lock_for(topic, partition))
                with self._guard:
                    part = self.store.partition(topic, partition)
                try:
                    self.producers.check((topic, partition), part, header, data)
                except DuplicateSequenceError as dup:
                    out[i] = RawAppendResult(dup.base_offset, append_time, part.log_start_offset(), duplicate=True)
                    continue
                except (KlogError, OSError) as e:
                    out[i] = e
                    continue
                writes.append((i, partition, header, data, append_time))

            def acknowledged(w: int, bases: list[int]) -> None:
                i, partition, header, _, append_time = writes[w]
                self.producers.appended((topic, partition), header, bases[0], append_time)
                with self._guard:
                    part = self.store.partition(topic, partition)
                out[i] = RawAppendResult(bases[0], append_time, part.log_start_offset())

            try:
                self.writer.append_batches(topic, [(partition, [data]) for _, partition, _, data, _ in writes], acks,
                                           acknowledged)
            except (KlogError, OSError) as e:
                for i, *_ in writes:
                    if out[i] is None:
                        out[i] = e  # not acknowledged: the client retries it
        return out  # type: ignore[return-value]

    def active_producers(self, topic: str, partition: int) -> list[tuple[int, int, int, int, int]]:
        """(producer id, epoch, last sequence, start offset of its open transaction or -1, its last
        batch's max timestamp or -1) of each producer the partition keeps state for
        (DescribeProducers)."""
        from klog.broker.offsets import stable_view

        part = self.partition(topic, partition)
        key = (topic, partition)
        with self.lock_for(topic, partition):
            states = self.producers.states(key, part)
            view, view_lock = stable_view(part)
            with view_lock:
                view.refresh(part.high_watermark())
                open_txns = dict(view.tracker.open)
            out = [(pid, e.epoch, e.recent[-1].last_seq if e.recent else -1, open_txns.get(pid, -1),
                    e.recent[-1].max_timestamp if e.recent else -1)
                   for pid, e in list(states.items())]  # (list: one step; the timer may drop entries)
            out += [(pid, -1, -1, first, -1) for pid, first in open_txns.items() if pid not in states]
        return sorted(out)

    # -- transaction markers (the coordinator's writes: klog.broker.txn_coordinator) ------------------
    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, kind: int,
                     coordinator_epoch: int, still_wanted: Callable[[], bool], *,
                     refuse_older_epoch: bool = False) -> int | None:
        """End `producer_id`'s transaction in the partition with a COMMIT/ABORT control batch, once:
        nothing is written when the producer has no open transaction there (it wrote nothing, or
        the marker is already in: a restart completing a commit). `still_wanted()` is asked under
        the partition's lock (the coordinator's state may have moved on). An ABORT adds its range
        to the segment's `.txnindex`. Returns the marker's offset, or None.

        `refuse_older_epoch` (a marker someone else names, WriteTxnMarkers): InvalidProducerEpochError
        if `producer_epoch` is older than the producer's batches here, as Kafka's partition leader
        refuses it (a stale abort would end the producer's newer transaction in this partition only).
        Not for the coordinator's own markers: an idempotent batch under the producer's id may raise
        the epoch kept here, and its transaction must still end."""
        from klog.broker.offsets import stable_view
        from klog.store.txn import ABORT, append_txn_index, control_batch

        part = self.partition(topic, partition)
        with self.lock_for(topic, partition), part.lock:
            # recover the tail first: a writer killed after appending a marker and before publishing
            # the high watermark left it in the file but invisible; this brings the high watermark
            # over it (else the marker would count as written while readers stay before it). Then,
            # with the lock held, the high watermark is the log's end.
            self.replicas.reconcile_if_due(topic, partition, part)
            view, view_lock = stable_view(part)  # the one the partition's read_committed fetches use
            with view_lock:
                view.refresh(part.high_watermark())
                open_at = view.first_open_offset(producer_id)
            if open_at is None:
                self.producers.txn_ended((topic, partition), producer_id)
            if open_at is None or not still_wanted():
                return None
            if refuse_older_epoch:
                entry = self.producers.states((topic, partition), part).get(producer_id)
                if entry is not None and producer_epoch < entry.epoch:
                    raise InvalidProducerEpochError(f"{topic}-{partition}: a marker of producer {producer_id} epoch "
                                                    f"{producer_epoch}, older than its batches' {entry.epoch}")
            data = control_batch(producer_id, producer_epoch, kind, coordinator_epoch, int(time.time() * 1000))
            base = self.writer.append_batch(topic, partition, data, "all")
            self.producers.txn_ended((topic, partition), producer_id, producer_epoch)
            with view_lock:
                view.refresh(part.high_watermark())
                entry = next((a for a in reversed(view.aborted_txns) if a.last_offset == base), None)
            if kind == ABORT:
                segment_base = part.active_segment_base()
                if entry is not None and segment_base is not None:
                    for replica in part.replicas:
                        try:
                            append_txn_index(replica.directory, segment_base, entry)
                        except OSError as e:  # the markers stay the truth: readers rebuild the range
                            self.replicas.warn(f"{topic}-{partition}: .txnindex not written in "
                                               f"{replica.directory}: {e}")
            return base

"""Replayer: re-publish a range of a topic into another topic (or hand it to a callback), the way
a recording is played back: as fast as possible, at the original pace, or N times faster.

Records of all chosen source partitions are merged by timestamp (as `klog consume` does). Keyed
records go to their key's partition in DEST (Kafka's partitioner, as the producer does); keyless
records keep their source partition number (modulo DEST's partition count), so a replay is
deterministic and can resume exactly. Keys and headers are kept; timestamps too with
`keep_timestamps`, otherwise records are stamped with the time they are replayed. The source is
read at read_committed unless `isolation_level` says read_uncommitted.

Writing: records are buffered per DEST partition and each buffer is appended as one batch (split
only if it would pass max.message.bytes), through the same replica manager a producer uses.

Resuming (`group`): progress lives in `<data dir>/state/replay/<group>.json` (not in the consumer
groups' offsets: an exact resume needs, per pair of source and DEST partition, the next source
offset written, plus a write intent). Under the DEST partition's lock, before each append, the
replayer records the intent (DEST partition, the offset the batch will get, the batch's CRC, the
source records in it); after it, the progress. A resumed replay first settles an intent left by
a kill: the batch landed if DEST holds a batch with that CRC at that offset (batches are atomic),
so it neither writes it twice nor skips it, whoever else writes to DEST.

DEST in another store (`dest_store`: a second local store or a Kafka cluster): SRC's store only
reads. A cluster DEST is written through its producer (`dest_store.producer()`, the client
interface `klog produce` uses), each record to the partition the replayer routed it to; it is
flushed (every record acknowledged) before run() returns. `group` needs a local DEST: its exact
resume relies on DEST's partition locks and batch CRCs, which a cluster does not expose.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.broker.writer import RECORD_OBJECT_BYTES, EncodedPiece, PartitionWriter, encode_fitting, record_bytes
from klog.client.consumer import StartSpec
from klog.client.partitioner import partition_for_key
from klog.client.producer_settings import BUFFER_MEMORY_DEFAULT
from klog.client.records import Record
from klog.errors import KlogError, RecordTooLargeError, UsageError
from klog.store import codec, compression
from klog.store.format import CREATE_TIME, LOG_APPEND_TIME
from klog.store.names import FILE_NAME_BYTES_MAX, fit_stem
from klog.store.txn import READ_COMMITTED

if TYPE_CHECKING:
    from klog.client.interface import AnyStore

BATCH_RECORDS_MAX = 10_000  # records per DEST batch
BATCH_BYTES_MAX = 900_000  # under max.message.bytes' default (1048588)
SLEEP_MIN_S = 0.001  # waits shorter than this are not worth a sleep
FLUSH_WAIT_MIN_S = 0.005  # a wait this long first writes what is due (records leave on time) ...
LINGER_S = 0.05  # ... shorter waits write only when the buffer is this old (a batch per record costs fsyncs)
KEY_CACHE_MAX = 100_000  # key -> DEST partition memo (murmur2 in Python costs a few µs a key)


@dataclass
class ReplayStats:
    records: int = 0  # written (or emitted)
    skipped: int = 0  # already written by an interrupted run of the same group
    batches: int = 0
    total: int = 0  # records in range when the replay started (before --until/--count)


@dataclass
class _Pending:
    records: list[tuple] = field(default_factory=list)  # (key, value, headers, timestamp)
    sources: list[tuple[int, int]] = field(default_factory=list)  # (source partition, offset)
    size: int = 0  # the records' size estimate (writer.record_bytes)

    def charge(self) -> int:
        """What it counts against the replayer's buffer_memory."""
        return self.size + len(self.records) * RECORD_OBJECT_BYTES


class ReplayProgress:
    """The state file of one replay group (see the module doc)."""

    def __init__(self, path: str, source: str, dest: str) -> None:
        self.path = path
        self.source = source
        self.dest = dest
        self.done: dict[int, int] = {}  # source partition -> every record below was written
        self.committed: dict[tuple[int, int], int] = {}  # (source p, DEST p) -> next source offset written
        self.intent: dict | None = None
        self.exists = False

    @classmethod
    def open(cls, state_dir: str, group: str, source: str, dest: str) -> ReplayProgress:
        if not group or len(group) > 255 or not group.isprintable():
            raise UsageError(f"invalid replay group {group!r}: use 1-255 printable characters")
        folder = os.path.join(state_dir, "replay")
        os.makedirs(folder, exist_ok=True)
        stem = urllib.parse.quote(group, safe="")
        if len(stem.encode()) + len(".json.tmp") > FILE_NAME_BYTES_MAX:  # names that fit keep the name they had
            stem = fit_stem(stem)
        progress = cls(os.path.join(folder, stem + ".json"), source, dest)
        try:
            with open(progress.path) as f:
                doc = json.load(f)
        except FileNotFoundError:
            return progress
        except (OSError, ValueError) as e:
            raise KlogError(f"cannot read replay progress {progress.path}: {e}") from None
        if (doc.get("source"), doc.get("dest")) != (source, dest):
            raise UsageError(f"replay group '{group}' replays {doc.get('source')} into {doc.get('dest')}, "
                             f"not {source} into {dest}; use another --group")
        progress.exists = True
        progress.done = {int(k): v for k, v in doc["done"].items()}
        progress.committed = {tuple(map(int, k.split(":"))): v for k, v in doc["committed"].items()}
        progress.intent = doc.get("intent")
        return progress

    def save(self) -> None:
        doc = {"source": self.source, "dest": self.dest, "done": {str(k): v for k, v in self.done.items()},
               "committed": {f"{s}:{q}": v for (s, q), v in self.committed.items()}, "intent": self.intent}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def apply(self, dest_partition: int, sources: list[tuple[int, int]]) -> None:
        for s, o in sources:
            key = (s, dest_partition)
            if o + 1 > self.committed.get(key, -1):
                self.committed[key] = o + 1

    def written(self, source_partition: int, offset: int, dest_partition: int) -> bool:
        return offset < self.committed.get((source_partition, dest_partition), -1)


class Replayer:
    """Replay `source` into `dest` (or into `emit` when dest is None). Call run() once."""

    def __init__(self, store, source: str, dest: str | None = None, *, partitions: list[int] | None = None,
                 start: StartSpec | str = "beginning", until_ms: int | None = None, count: int | None = None,
                 keep_timestamps: bool = False, speed: float | None = None, rate: float | None = None,
                 group: str | None = None, acks: str = "all", dest_store: AnyStore | None = None,
                 buffer_memory: int = BUFFER_MEMORY_DEFAULT, isolation_level: str = READ_COMMITTED,
                 emit: Callable[[Record], None] | None = None,
                 on_progress: Callable[[ReplayStats], None] | None = None,
                 on_warning: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        dest_store = store if dest_store is None else dest_store
        if dest is not None and dest == source and dest_store is store:
            raise UsageError(f"refusing to replay '{source}' into itself (it would never end)")
        if speed is not None and speed <= 0:
            raise UsageError("--speed must be positive (or max)")
        if rate is not None and not rate > 0:  # NaN compares False with everything
            raise UsageError("--rate must be positive")
        if count is not None and count < 0:
            raise UsageError("--count needs a count of 0 or more")
        if group is not None and dest is None:
            raise UsageError("--group needs --to DEST (progress is kept for a DEST topic)")
        if dest is None and emit is None:
            raise UsageError("nothing to replay into: give a DEST topic or an emit callback")
        if group is not None and not getattr(dest_store, "is_local", True):
            raise UsageError("--group needs a local DEST store: a cluster cannot show which records of a killed "
                             "write landed, so a resume could not avoid duplicates; use klog mirror (at-least-once)")
        self.store = store
        self.dest_store = dest_store
        self._producer = None  # a cluster DEST's producer
        self.source = source
        self.dest = dest
        self.group = group
        self.until_ms = until_ms
        self.count = count
        self.keep_timestamps = keep_timestamps
        self.speed = speed
        self.rate = rate
        self.acks = acks
        self.emit = emit
        self.on_progress = on_progress
        self.on_warning = on_warning
        self.clock, self.sleep, self.wall_ms = clock, sleep, wall_ms
        self.stats = ReplayStats()
        # read_committed by default: a replay writes outside the source's transactions, so an aborted
        # or still open transaction's records would become records DEST's read_committed readers see
        self.consumer = store.consumer(source, partitions=partitions, start=start, until_ms=until_ms,
                                       isolation_level=isolation_level)
        self.progress: ReplayProgress | None = None
        self._pending: dict[int, _Pending] = {}
        self.buffer_memory = buffer_memory  # what the DEST partitions' buffers hold at most, together
        self._buffered = 0
        self._key_partition: dict[bytes, int] = {}
        self._seen_next: dict[int, int] = {}
        self._flushed_at = 0.0
        if dest is not None:
            if group is not None:  # a refused group must not leave a DEST behind
                self.progress = ReplayProgress.open(dest_store.data_dir.state_dir, group, source, dest)
            self._open_dest(dest)
            if self.progress is not None:
                self._resume()
        self.stats.total = sum(max(0, (c.stop or 0) - c.offset) for c in self.consumer.cursors)

    # -- set-up --------------------------------------------------------------------------------
    def _open_dest(self, dest: str) -> None:
        store = self.dest_store
        if not store.has_topic(dest):
            if not store.auto_create_enabled():
                store.topic(dest)  # raises the unknown-topic error
            # a copy of SRC's shape and topic configs (retention too: a --keep-timestamps replay of old
            # records into a 7-day default topic would be deleted at the next roll)
            source = self.store.topic(self.source)
            configs = (dict(source.configs) if getattr(self.store, "is_local", True)
                       else self.store.topic_configs(self.source))
            store.create_topic(dest, partitions=len(source.partitions), configs=configs, exist_ok=True)
        self.dest_partitions = store.partition_count(dest)
        config = store.log_config(dest)
        name = config.compression_type
        self.codec = compression.NONE if name == "producer" else compression.CODEC_IDS[name]
        self.timestamp_type = LOG_APPEND_TIME if config.log_append_time else CREATE_TIME
        self.max_bytes = config.max_message_bytes
        self.dest_compacted = config.compacted
        if not getattr(store, "is_local", True):  # a cluster: its producer; the broker batches and stamps
            self._producer = store.producer(acks=self.acks, on_warning=self.on_warning)
            return
        from klog.broker.replication import ReplicaManager

        self.replicas = ReplicaManager(store, warn=self.on_warning)
        self.writer = PartitionWriter(store, self.replicas)

    def _resume(self) -> None:
        """Settle a write a kill interrupted, then start each source partition where it is done."""
        progress = self.progress
        assert progress is not None
        if progress.intent is not None:
            intent = progress.intent
            q, sources = intent["dest_partition"], [tuple(x) for x in intent["sources"]]
            if self._landed(q, intent["dest_end"], intent["crc"], len(sources)):
                progress.apply(q, sources)  # the batch was written before the kill
            progress.intent = None
            progress.save()
        self._forget_progress_past_the_end()
        for cursor in self.consumer.cursors:
            done = progress.done.get(cursor.partition)
            if done is not None and done > cursor.offset:
                self.consumer.seek(self.source, cursor.partition, done)

    def _forget_progress_past_the_end(self) -> None:
        """A source partition that now ends below the group's progress was deleted and recreated (or
        truncated) since: that progress would skip the new records up to it, for good. It is
        forgotten (the partition replayed from the range's start), and said."""
        progress = self.progress
        assert progress is not None
        ends = self.store.offsets(self.source, -1)
        for s, done in sorted(progress.done.items()):
            end = ends.get(s) or 0
            if done > end:
                if self.on_warning is not None:
                    self.on_warning(f"replay group '{self.group}': its progress in {self.source}-{s} (offset {done}) "
                                    f"is past the partition's end ({end}): the topic was recreated or truncated; "
                                    "replaying it from the start")
                del progress.done[s]
                for key in [k for k in progress.committed if k[0] == s]:
                    del progress.committed[key]
                progress.save()

    def _landed(self, q: int, base_offset: int, crc: int, count: int) -> bool:
        """Is our batch at base_offset of DEST partition q? Asked after a writer opened the partition
        (a killed append is then either complete and visible, or cut). The batch's CRC covers its
        records and timestamps, not the offset, so it identifies the bytes the replayer encoded."""
        part = self.dest_store.partition(self.dest, q)
        with part.lock:
            self.replicas.reconcile(self.dest, q, part)
            part.publish()
        found = part.read(base_offset, 1)
        if not found:
            return False
        header = found[0].header
        return header.base_offset == base_offset and header.crc == crc and header.records_count == count

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> ReplayStats:
        start_clock = self.clock()
        first_ts: int | None = None
        speed, rate = self.speed, self.rate
        emitted = 0
        self._flushed_at = start_clock
        whole = True  # the read went to its end (not stopped by --count)
        for record in self.consumer:
            if self.count is not None and emitted >= self.count:
                whole = False
                break
            due = start_clock
            if speed is not None:
                if first_ts is None:
                    first_ts = record.timestamp
                due += max(0, record.timestamp - first_ts) / 1000 / speed
            if rate is not None:
                due = max(due, start_clock + emitted / rate)
            now = self.clock()
            if due - now >= SLEEP_MIN_S:
                if due - now >= FLUSH_WAIT_MIN_S or now - self._flushed_at >= LINGER_S:
                    self._flush_all()
                wait = due - self.clock()
                if wait > 0:
                    self.sleep(wait)
            self._take(record)
            emitted += 1
        self._flush_all()
        if self._producer is not None:
            self._producer.flush()  # every record acknowledged (or the first failure raised)
        if whole and self.until_ms is None and self.progress is not None:
            self._done_to_the_end()
        if self.on_progress is not None:
            self.on_progress(self.stats)
        return self.stats

    def _done_to_the_end(self) -> None:
        """A read gone to its end with everything written: the progress moves to where the reader
        stopped, past offsets that hold no record for the replay (an aborted transaction's, a marker,
        a compacted gap), so a resumed run does not read them again (an aborted transaction may be
        large), as a mirror's checkpoint does. (Not after --until: the records past it are not done.)"""
        progress = self.progress
        assert progress is not None and not self._pending
        moved = False
        for (topic, s), offset in self.consumer.positions().items():
            if topic == self.source and offset > progress.done.get(s, 0):
                progress.done[s] = offset
                moved = True
        if moved:
            progress.save()

    def close(self) -> None:
        """Release the source consumer (a cluster's holds connections)."""
        close = getattr(self.consumer, "close", None)
        if close is not None:
            close()

    def _take(self, record: Record) -> None:
        s = record.partition
        self._seen_next[s] = record.offset + 1
        if self.dest is None:
            assert self.emit is not None
            self.emit(record)
            self.stats.records += 1
            if self.on_progress is not None and self.stats.records % 1000 == 0:
                self.on_progress(self.stats)
            return
        if record.key is None and self.dest_compacted:
            self._flush_all()  # what came before is written (and recorded); then stop, as a producer would
            raise UsageError(f"topic '{self.dest}' is compacted: every record needs a key, and "
                             f"{self.source}-{s} offset {record.offset} has none")
        q = self._route(record)
        if self.progress is not None and self.progress.written(s, record.offset, q):
            self.stats.skipped += 1
            return
        ts = record.timestamp if self.keep_timestamps else self.wall_ms()
        pending = self._pending.get(q)
        if pending is None:
            pending = self._pending[q] = _Pending()
        pending.records.append((record.key, record.value, record.headers, ts))
        pending.sources.append((s, record.offset))
        size = record_bytes(record.key, record.value, record.headers)
        pending.size += size
        self._buffered += size + RECORD_OBJECT_BYTES
        if len(pending.records) >= BATCH_RECORDS_MAX or pending.size >= min(BATCH_BYTES_MAX, self.max_bytes // 2):
            self._flush(q)
        elif self._buffered > self.buffer_memory:
            # a wide DEST: the fullest buffers are written until half of buffer_memory is left
            for fullest in sorted(self._pending, key=lambda k: self._pending[k].size, reverse=True):
                self._flush(fullest)
                if self._buffered <= self.buffer_memory // 2:
                    break

    def _route(self, record: Record) -> int:
        key = record.key
        if key is None:
            return record.partition % self.dest_partitions
        q = self._key_partition.get(key)
        if q is None:
            q = partition_for_key(key, self.dest_partitions)
            if len(self._key_partition) < KEY_CACHE_MAX:
                self._key_partition[key] = q
        return q

    # -- writing -------------------------------------------------------------------------------
    def _flush_all(self) -> None:
        self._flushed_at = self.clock()
        for q in list(self._pending):
            self._flush(q)

    def _flush(self, q: int) -> None:
        pending = self._pending.pop(q, None)
        if pending is None or not pending.records:
            return
        self._buffered -= pending.charge()
        self._append(q, pending.records, pending.sources)
        if self.on_progress is not None:
            self.on_progress(self.stats)

    def _append(self, q: int, records: list[tuple], sources: list[tuple[int, int]]) -> None:
        if self._producer is not None:
            send = self._producer.send
            for key, value, headers, ts in records:
                send(self.dest, value, key, headers or None, partition=q, timestamp=ts)
            self.stats.records += len(records)
            self.stats.batches += 1
            return
        pieces = encode_fitting(records, codec_id=self.codec, timestamp_type=self.timestamp_type,
                                now_ms=self.wall_ms(), max_bytes=self.max_bytes)
        for piece in pieces:
            if len(piece.data) > self.max_bytes:  # one record alone
                s, o = sources[piece.start]
                raise RecordTooLargeError(f"{self.source}-{s} offset {o} is {len(piece.data)} bytes as a batch, "
                                          f"more than max.message.bytes ({self.max_bytes}) of topic '{self.dest}'")
            self._append_piece(q, piece, sources[piece.start:piece.start + piece.count])

    def _append_piece(self, q: int, piece: EncodedPiece, sources: list[tuple[int, int]]) -> None:
        progress = self.progress
        before = None
        if progress is not None:
            def before(base: int) -> None:
                # under the partition's lock, so the intent names the exact offset the batch gets,
                # whoever else writes to DEST
                progress.intent = {"dest_partition": q, "dest_end": base, "crc": codec.read_header(piece.data).crc,
                                   "sources": sources}
                progress.save()
        self.writer.append_batch(self.dest, q, piece.data, self.acks, before=before)
        self.stats.records += piece.count
        self.stats.batches += 1
        if progress is not None:
            progress.apply(q, sources)
            progress.intent = None
            progress.done = self._done_offsets()
            progress.save()

    def _done_offsets(self) -> dict[int, int]:
        """Per source partition: every record below this offset is written (none is still buffered)."""
        assert self.progress is not None
        done = dict(self.progress.done)
        for s, seen in self._seen_next.items():
            done[s] = max(done.get(s, 0), seen)
        for pending in self._pending.values():
            for s, o in pending.sources:
                if o < done.get(s, o + 1):
                    done[s] = o
        return done

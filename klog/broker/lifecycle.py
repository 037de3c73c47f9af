"""Log lifecycle: retention, delete-records and compaction across all replicas of a partition.

These run when a producer rolls a segment (for the partition it rolled), on `klog topics
clean|compact|delete-records`, in `klog serve`'s log cleaner thread (klog.broker.log_manager), and
when called from Python. Each partition is changed under its write lock, after the same
reconciliation a producer does (health, leader, ISR, catch-up), so every in-sync replica is changed
the same way while no append runs; readers keep reading throughout. Compaction holds the lock only
to pick what to clean and to swap the cleaned segments in: the cleaning itself runs without it
(klog.store.cleaner), so appends to the partition go on meanwhile.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.broker.resolve import resolve_partitions
from klog.errors import (
    CorruptLogError,
    KlogError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
    UsageError,
)
from klog.store import cleaner, faults, retention
from klog.store.config import LogConfig
from klog.store.partition import Partition
from klog.store.throttle import Throttler

if TYPE_CHECKING:
    from klog.broker.store_protocol import BrokerStore
    from klog.store.txn import AbortedTxn

Clock = Callable[[], float]  # seconds, like time.time


@dataclass
class PartitionCleanup:
    """What one clean / compact / delete-records did to one partition."""

    topic: str
    partition: int
    log_start_before: int
    log_start_after: int
    segments_deleted: int = 0
    bytes_deleted: int = 0
    compacted: bool = False
    records_read: int = 0  # by the cleaner, in the segments it went through
    records_removed: int = 0
    tombstones_removed: int = 0
    segments_rewritten: int = 0
    dirty_ratio: float | None = None  # before compaction, for compacted topics
    cleanable_end: int | None = None  # compaction stops here: the active segment, the HW or min.compaction.lag.ms
    cleanings_abandoned: int = 0  # the segments changed under a cleaning (retention, another cleaner): redone


CLEANING_ATTEMPTS = 3  # a partition whose segments keep changing under the cleaner waits for the next pass


def _now_ms(clock: Clock | None) -> int:
    return round((clock or time.time)() * 1000)


def _checkpoint(part: Partition) -> cleaner.CleanerCheckpoint:
    return cleaner.CleanerCheckpoint(part.state.path.removesuffix(".state") + ".cleaner")


def _locked(store: BrokerStore, topic: str, partition: int) -> Partition:
    """The partition, reconciled (leader + ISR opened for write); the caller holds part.lock."""
    from klog.broker.replication import ReplicaManager

    part = store.partition(topic, partition)
    ReplicaManager(store).reconcile(topic, partition, part)
    return part


def _topics(store: BrokerStore, topic: str | None) -> list[str]:
    return [topic] if topic is not None else store.topic_names()


# -- retention -----------------------------------------------------------------------------------
def _apply_log_start(part: Partition, new_start: int, result: PartitionCleanup) -> None:
    """Persist the new log start first (readers stop asking for what goes), then delete segments."""
    if new_start > part.snapshot().log_start_offset:
        part.set_log_start_offset(new_start)
        faults.point("retention-log-start")
    for i, replica in enumerate(part.replicas):
        deleted = retention.delete_segments_below(replica, new_start)
        if i == 0:
            result.segments_deleted += len(deleted.bases)
            result.bytes_deleted += deleted.size_bytes
    result.log_start_after = part.log_start_offset()


def _retain(store: BrokerStore, topic: str, part: Partition, now_ms: int, result: PartitionCleanup) -> None:
    config = store.log_config(topic)
    snap = part.snapshot()
    facts = retention.segment_facts(part.leader, lazy=True)
    cut = retention.retention_cut(
        facts, now_ms=now_ms, retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes, high_watermark=snap.high_watermark,
        log_start_offset=snap.log_start_offset, delete_policy=config.deletes)
    _apply_log_start(part, cut, result)


# -- compaction ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _CompactionPlan:
    rng: cleaner.CleanableRange
    replicas: list[tuple[str, LogConfig]]  # (directory, config) of each replica, the leader first
    aborted: list[AbortedTxn]  # the log's aborted transactions below the range's end (cleaner.build_cleaning)


def _plan_compaction(store: BrokerStore, topic: str, part: Partition, now_ms: int, force: bool,
                     result: PartitionCleanup, walked: bool) -> _CompactionPlan | None:
    """Lock held: what to clean, if compaction is due; the sealed segments fsynced first. `walked`:
    the last stable offset was found off the lock just before (forced, or found due by the high
    watermark), so no due check by the high watermark again under the lock."""
    config = store.log_config(topic)
    rng = None if walked or force else _by_high_watermark(part, now_ms, config)  # (forced: never past the LSO)
    if rng is None or _due(part, rng, now_ms, config):
        rng = _range(part, _stable(part), now_ms, config)
    result.dirty_ratio = rng.dirty_ratio
    result.cleanable_end = rng.first_uncleanable
    if not force and not _due(part, rng, now_ms, config):
        return None
    for replica in part.replicas:
        replica.finish_flushes()  # the segments it rewrites are fsynced as they were sealed first
    return _CompactionPlan(rng, [(r.directory, r.config) for r in part.replicas], _aborted(part, rng))


def _range(part: Partition, end: int, now_ms: int, config: LogConfig) -> cleaner.CleanableRange:
    return cleaner.cleanable_range(part.leader, _checkpoint(part).read(), end, now_ms, config.min_compaction_lag_ms)


def _by_high_watermark(part: Partition, now_ms: int, config: LogConfig) -> cleaner.CleanableRange:
    """The cleanable range bounded by the high watermark, which needs no walk of the headers (the
    last stable offset does: a first one reads every batch header of the log). When it is not
    due, the range bounded by the last stable offset (at most the high watermark) is not either:
    a lower end only shrinks the dirty part, its first dirty offset (and so its age) unchanged
    while it holds anything. So `klog topics clean` and serve's passes walk only partitions that
    may be due."""
    return _range(part, part.high_watermark(), now_ms, config)


def _stable(part: Partition) -> int:
    """Where cleaning must stop, the last stable offset (Kafka's cleaner cleans nothing of a
    transaction still open: one that aborts later would have removed the values it replaced)."""
    from klog.broker.offsets import stable_view

    view, view_lock = stable_view(part)
    with view_lock:
        return view.refresh(part.high_watermark())


def _aborted(part: Partition, rng: cleaner.CleanableRange) -> list[AbortedTxn]:
    """The aborted transactions of the log below its first uncleanable offset (copied: the cleaning
    reads them without the lock): the cleaner removes their batches wherever they are, and their
    ABORT markers once no batch of theirs is left, as Kafka's (CleanedTransactionMetadata)."""
    from klog.broker.offsets import stable_view

    view, view_lock = stable_view(part)
    with view_lock:
        view.refresh(part.high_watermark())  # (nothing new to walk under the lock, but the view is shared)
        return view.aborted_between(0, rng.first_uncleanable)


def _compact(store: BrokerStore, topic: str, partition: int, plan: _CompactionPlan, now_ms: int,
             result: PartitionCleanup, throttler: Throttler | None) -> bool:
    """Clean without the partition's lock (appends go on), then take it to swap the result in;
    False if the segments changed meanwhile (nothing swapped in)."""
    config = store.log_config(topic)
    try:
        cleaning = cleaner.build_cleaning(plan.replicas, plan.rng, now_ms, config.delete_retention_ms, throttler,
                                          plan.aborted)
    except CorruptLogError as e:  # damage kept in the log, not a race (build_cleaning tells them apart)
        raise cleaner.damage_blocks_compaction(topic, partition, e) from None
    try:
        if cleaning.abandoned:
            return False
        part = store.partition(topic, partition)
        with part.lock:
            part = _locked(store, topic, partition)
            if not cleaner.swap_cleaned(part.replicas, cleaning, part.log_start_offset()):
                return False
            _rewalk_transactions(part)
            faults.point("before-checkpoint")
            _checkpoint(part).write(plan.rng.first_uncleanable)
    finally:
        cleaning.discard()
    stats = cleaning.stats
    result.compacted = True
    result.records_read = stats.records_read
    result.records_removed = stats.records_removed
    result.tombstones_removed = stats.tombstones_removed
    result.segments_rewritten = stats.segments_rewritten
    return True


def _rewalk_transactions(part: Partition) -> None:
    """After a swap (the partition's lock held): the partition's shared StableView (read_committed
    fetches, the next cleaning's aborted transactions) walks the log again; it went on naming an
    aborted transaction whose ABORT marker the cleaner removed, and Kafka clients then skipped its
    producer's later committed batches."""
    from klog.broker.offsets import stable_view

    view, view_lock = stable_view(part)
    with view_lock:
        view.segments_rewritten()


def _due(part: Partition, rng: cleaner.CleanableRange, now_ms: int, config: LogConfig) -> bool:
    """min.cleanable.dirty.ratio reached, or a dirty record older than max.compaction.lag.ms."""
    if rng.dirty_bytes == 0:
        return False
    if rng.dirty_ratio >= config.min_cleanable_dirty_ratio:
        return True
    first_ts = cleaner.first_dirty_timestamp(part.leader, rng.first_dirty)
    return first_ts >= 0 and now_ms - first_ts > config.max_compaction_lag_ms


# -- the public calls ----------------------------------------------------------------------------
def clean_partition(store: BrokerStore, topic: str, partition: int, *, clock: Clock | None = None,
                    force_compact: bool = False, retain: bool = True, compact: bool = True,
                    throttler: Throttler | None = None) -> PartitionCleanup:
    """Retention (by the topic's policy), then compaction if the topic is compacted and it is due
    (or `force_compact`). A producer's roll calls it with compact=False: cleaning may take long.
    `throttler` paces the compaction's reads and writes (log.cleaner.io.max.bytes.per.second)."""
    now_ms = _now_ms(clock)
    config = store.log_config(topic)
    part = store.partition(topic, partition)
    plan = None
    compacting = config.compacted and (compact or force_compact)
    walked = compacting and (force_compact or _due(part, _by_high_watermark(part, now_ms, config), now_ms, config))
    if walked:
        _stable(part)  # the walk of the headers off the lock: the plan's look under it reads only what came since
    with part.lock:
        part = _locked(store, topic, partition)
        start = part.log_start_offset()
        result = PartitionCleanup(topic, partition, start, start)
        if retain:
            _retain(store, topic, part, now_ms, result)
        if compacting:
            plan = _plan_compaction(store, topic, part, now_ms, force_compact, result, walked)
    # the cleaning itself runs without the lock, so produces are not held up; segments changed
    # under it (retention, delete-records, another cleaner) make it start over from a new plan
    while plan is not None and not _compact(store, topic, partition, plan, now_ms, result, throttler):
        result.cleanings_abandoned += 1
        plan = None
        if result.cleanings_abandoned < CLEANING_ATTEMPTS:
            part = store.partition(topic, partition)  # anew: a config change meanwhile closes the old object
            _stable(part)  # (off the lock, as above: the swap that abandoned the cleaning may have reset it)
            with part.lock:
                part = _locked(store, topic, partition)
                plan = _plan_compaction(store, topic, part, now_ms, force_compact, result, walked=True)
    return result


def retain_after_roll(store: BrokerStore, topic: str, partition: int, warn: Callable[[str], None]) -> None:
    """A writer's append rolled a segment (Partition.rolls moved): the moment
    retention runs, as no broker does it. Compaction is left to `klog topics clean|compact`, since
    it may take long. A failure is a warning: the append succeeded, and the next roll tries again."""
    try:
        if retention_due(store, topic, partition):
            retain(store, topic, partition)
    except (UnknownTopicError, UnknownPartitionError):
        return  # deleted since the append: nothing is left to retain, and the next append says so
    except (KlogError, OSError) as e:
        warn(f"retention of {topic}-{partition} failed: {e}")


def retention_due(store: BrokerStore, topic: str, partition: int) -> bool:
    """False when retention surely has nothing to do (cheap: see below); True when it may."""
    return not _retention_not_due(store, topic, partition)


def retain(store: BrokerStore, topic: str, partition: int) -> PartitionCleanup:
    """Retention of one partition (no compaction), remembering what makes the next check cheap."""
    result = clean_partition(store, topic, partition, compact=False)
    _remember_oldest(store.partition(topic, partition))
    return result


# After a roll's retention, what the next roll needs to know that nothing is due yet, so that it
# does not list and read a log of thousands of segments (which made every roll O(segments)):
# Partition.retention_hint = (oldest segment's base, its log file's (device, inode), its largest
# timestamp, the base of the segment after it). Kafka's passes delete a prefix; time retention
# stops at the oldest segment that has not expired, and delete-records moves the log start past
# the oldest segment's end: if neither holds for the oldest segment, nothing is due.


def _remember_oldest(part: Partition) -> None:
    log = part.leader
    facts = retention.segment_facts(log, lazy=True)
    if len(facts) < 2:
        part.retention_hint = None  # only the active segment: the next roll checks again
        return
    oldest = facts[0]
    try:
        # (the lock is off: retention or delete-records in another thread may delete it meanwhile)
        st = os.stat(oldest.segment.log_path)  # type: ignore[attr-defined]  # (lazy: retention._LazyFacts)
        largest_ms = oldest.largest_timestamp_ms
    except FileNotFoundError:
        part.retention_hint = None  # gone meanwhile: the next roll checks again
        return
    part.retention_hint = (oldest.base_offset, (st.st_dev, st.st_ino), largest_ms, facts[1].base_offset)


def _retention_not_due(store: BrokerStore, topic: str, partition: int) -> bool:
    part = store.partition(topic, partition)
    hint = part.retention_hint
    if hint is None:
        return False
    base, identity, largest_ms, next_base = hint
    config = store.log_config(topic)
    if config.deletes:
        retention_ms = config.retention_ms
        if config.retention_bytes >= 0 or (retention_ms >= 0 and _now_ms(None) - largest_ms > retention_ms):
            return False
    if part.snapshot().log_start_offset >= next_base:
        return False
    try:
        st = os.stat(part.leader.segments[base].log_path)  # still there, and not rewritten (compaction)
    except (KeyError, OSError):
        return False
    return (st.st_dev, st.st_ino) == identity


def clean(store: BrokerStore, topic: str | None = None, *, clock: Clock | None = None,
          throttler: Throttler | None = None) -> list[PartitionCleanup]:
    """`klog topics clean [TOPIC]`: retention everywhere, compaction where due. A partition whose
    compaction meets damage kept in its log (CorruptLogError, naming the way past it) does not stop
    the others' (Kafka's cleaner marks it uncleanable and goes on): the first such error is raised
    once every partition was cleaned."""
    out, damaged = [], None
    for t in _topics(store, topic):
        for p in resolve_partitions(store, t, None):
            try:
                out.append(clean_partition(store, t, p, clock=clock, throttler=throttler))
            except CorruptLogError as e:
                damaged = damaged or e
    if damaged is not None:
        raise damaged
    return out


def compact(store: BrokerStore, topic: str, *, clock: Clock | None = None,
            partitions: Iterable[int] | None = None, throttler: Throttler | None = None) -> list[PartitionCleanup]:
    """`klog topics compact TOPIC`: compact now, whatever the dirty ratio (lag and active segment still hold)."""
    config = store.log_config(topic)
    if not config.compacted:
        raise UsageError(f"topic '{topic}' is not compacted (cleanup.policy={config.cleanup_policy}); "
                         f"set it with: klog topics alter {topic} -c cleanup.policy=compact")
    return [clean_partition(store, topic, p, clock=clock, force_compact=True, retain=False, throttler=throttler)
            for p in resolve_partitions(store, topic, partitions)]


def delete_records(store: BrokerStore, topic: str, *, before_offset: int | None = None, before_ms: int | None = None,
                   partitions: Iterable[int] | None = None) -> list[PartitionCleanup]:
    """kafka-delete-records: move the log start up to `before_offset` (or to the first record at or
    after `before_ms`) and delete the segments wholly below it. Records below it are never read again."""
    if (before_offset is None) == (before_ms is None):
        raise UsageError("give either an offset or a time to delete records before")
    if before_offset is not None and before_offset < 0:
        raise UsageError(f"invalid offset {before_offset}: use 0 or more")
    out = []
    for p in resolve_partitions(store, topic, partitions):
        part = store.partition(topic, p)
        with part.lock:
            part = _locked(store, topic, p)
            hw = part.high_watermark()
            start = part.log_start_offset()
            if before_offset is not None:
                if before_offset > hw:
                    raise OffsetOutOfRangeError(f"offset {before_offset} is past the high watermark ({hw}) "
                                                f"of {topic}-{p}; nothing was deleted")
                target = before_offset
            else:
                found = part.offset_for_timestamp(before_ms)
                target = hw if found is None else found
            result = PartitionCleanup(topic, p, start, start)
            _apply_log_start(part, max(target, start), result)
            out.append(result)
    return out


def dirty_ratio(store: BrokerStore, topic: str, partition: int, *, clock: Clock | None = None) -> float:
    """The share of the cleanable log not yet compacted (0 when nothing is cleanable); read-only,
    without the partition's lock (segment sizes, the cleaner checkpoint, the last stable offset)."""
    part = store.partition(topic, partition)
    return _range(part, _stable(part), _now_ms(clock), store.log_config(topic)).dirty_ratio


def compaction_due(store: BrokerStore, topic: str, partition: int, *, clock: Clock | None = None) -> bool:
    """Whether `klog topics clean` would compact this partition now; read-only, without its lock."""
    now_ms = _now_ms(clock)
    config = store.log_config(topic)
    part = store.partition(topic, partition)
    if not _due(part, _by_high_watermark(part, now_ms, config), now_ms, config):
        return False  # (nor by the last stable offset: see _by_high_watermark)
    return _due(part, _range(part, _stable(part), now_ms, config), now_ms, config)

"""Leaders, in-sync replicas and catch-up: the decisions a Kafka controller and follower
fetchers make, taken here by the writing process under the partition lock.

Before each append the writer re-reads the partition's metadata (LMDB), checks the health of
each replica's log directory, shrinks the ISR for failed ones, elects a new leader from the
ISR when the leader's directory failed (bumping the leader epoch), catches up healthy
out-of-sync replicas from the leader (truncating any divergent suffix first) and lets them
rejoin. Every change is a metadata transaction, so other processes see it at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from klog.broker import data_loss
from klog.errors import (
    DataLossError,
    KlogError,
    LeaderAppendError,
    NoLeaderError,
    NotEnoughReplicasError,
    StorageError,
)
from klog.meta.topics import PartitionMeta, TopicMeta
from klog.store import faults, health
from klog.store.config import LogConfig
from klog.store.format import partition_dir_name
from klog.store.log import PartitionLog
from klog.store.partition import SYNC_ALL, SYNC_BY_ACKS, SYNC_LEADER, SYNC_NONE, AppendResult
from klog.store.plain import replace
from klog.store.reader import PartitionReader

if TYPE_CHECKING:
    from klog.broker.store_protocol import BrokerStore
    from klog.store.layout import LogDir
    from klog.store.partition import Partition

CATCH_UP_BYTES_PER_FETCH = 4 << 20
DIVERGENCE_STEPS_MAX = 100_000  # bounded walk back over batches while looking for agreement
CATCH_UP_RETRY_S = 5.0  # after a failed catch-up (a full or broken disk), appends go on without retrying it
# Before an append, the full replica check (metadata from LMDB, election, catch-up, state writes:
# ~200 us) runs only after an error, when another holder took the partition lock since this
# process's last clean append (it may have elected, moved or cut replicas), when a replica is out
# of the ISR (its catch-up must not wait), or when this long has passed (belt and braces: whatever
# else changes the metadata holds the partition lock, and a failed leader shows in its directory's
# health, so unclean.leader.election and the like are read again whenever they matter). Otherwise only each
# replica's directory health is checked again (a read-only or full disk can still take writes
# through files opened before; a replaced disk must not be written to) and the partition re-opened.
REPLICA_RECHECK_S = 30.0
# Between those checks, a directory found healthy is trusted this long before its health (the id
# file's stat, access, statvfs: ~25 us of a served produce's ~500) is read again; the partition's
# folder is still looked for before every append. A disk that fills or turns read-only meanwhile
# fails the write itself, which is cut back and takes the replica out of the ISR as before.
HEALTHY_TRUSTED_S = 0.01

Warn = Callable[[str], None]


def dir_health(store: BrokerStore, log_dir_id: int, path: str | None = None) -> str:
    """`path`: the directory's, when the caller has it already."""
    data_dir = store.data_dir
    if path is None:
        try:
            path = data_dir.log_dir_path(log_dir_id)
        except KlogError:
            return health.MISSING
    identity = next((d.identity for d in data_dir.log_dirs if d.id == log_dir_id), None)
    return health.check_log_dir(path, identity)


def replica_path(store: BrokerStore, topic: str, partition: int, log_dir_id: int) -> str:
    return os.path.join(store.data_dir.log_dir_path(log_dir_id), partition_dir_name(topic, partition))


def elect(meta: PartitionMeta, healthy: set[int], unclean: bool) -> PartitionMeta | None:
    """The partition's metadata with failed replicas out of the ISR and a live leader; None if no change."""
    isr = [r for r in meta.isr if r in healthy]
    leader = meta.leader
    epoch = meta.leader_epoch
    if leader not in isr:
        candidates = [r for r in meta.replicas if r in isr]
        if not candidates and unclean:
            candidates = [r for r in meta.replicas if r in healthy]
            isr = candidates[:1]
        if not candidates:
            return replace(meta, isr=isr) if isr != meta.isr else None
        leader = candidates[0]
        epoch += 1
    if (leader, isr, epoch) == (meta.leader, meta.isr, meta.leader_epoch):
        return None
    return replace(meta, leader=leader, isr=isr, leader_epoch=epoch)


def ensure_min_isr(topic: str, partition: int, meta: PartitionMeta, min_isr: int) -> None:
    if len(meta.isr) < min_isr:
        raise NotEnoughReplicasError(
            f"not enough in-sync replicas for {topic}-{partition}: ISR is [{','.join(map(str, meta.isr))}] "
            f"but min.insync.replicas is {min_isr}; nothing was written")


def catch_up(leader: PartitionLog, follower: PartitionLog, leader_end: int,
             epochs: list[list[int]] | None = None) -> int:
    """Make follower a prefix-copy of leader up to leader_end; returns the follower's new log end.

    `epochs` is the partition's leader-epoch history ([epoch, start offset], ...): the follower
    is first cut to where its last epoch ended on the leader, as Kafka's OffsetsForLeaderEpoch
    does; a byte comparison of batches then confirms it. The caller holds the partition lock and
    has opened both logs for writing.
    """
    if leader.strict_records and not follower.strict_records:
        follower.mark_strict_records()  # the copy holds the same foreign records
    if epochs:
        _truncate_to_epoch_end(follower, epochs, leader_end)
    _truncate_divergent_suffix(leader, follower)
    compacted, first = leader.cleaner_gaps, leader.first_offset()
    if leader.cleaned and not follower.cleaned:
        follower.mark_cleaned()  # (the copy has the same gaps)
    for fetched in PartitionReader(leader, follower.log_end_offset, leader_end, max_bytes=CATCH_UP_BYTES_PER_FETCH):
        for fb in fetched.batches:
            if fb.header.base_offset >= fetched.low:  # (a batch the follower holds part of is not copied)
                if compacted:
                    _follow_segments(follower, fb.segment_base, fb.header.base_offset, first)
                follower.append(fb.data, fb.header, gap_ok=compacted)
                faults.point("catch-up-copied")  # (tests: a kill -9 mid-copy, "catch-up-copied:N")
    follower.flush()
    return follower.log_end_offset


def _follow_segments(follower: PartitionLog, segment_base: int, base_offset: int, leader_first: int) -> None:
    """Before copying a batch of a compacted leader's segment at `segment_base`: the follower
    starts a segment where the leader's does. Its cleaner leaves gaps (emptied batches and
    segments removed) only in sealed segments and before a segment's first batch, which is where
    readers take them (PartitionLog.cleaner_gap_ok); copied into one segment of the follower's, a
    gap would sit inside its active segment, which readers refuse as damage (where the follower's
    own segments already hold part of the leader's, it starts one at the batch after a gap). A
    follower ending below the leader's first segment starts over there (retention moved the log
    start past it)."""
    end = follower.log_end_offset
    if end < leader_first:
        follower.start_at(leader_first)
        end = leader_first
    if follower.active.base_offset < segment_base and end <= segment_base:
        follower.roll(segment_base)
    elif base_offset > end:
        follower.roll(base_offset)


def epoch_end_offset(epochs: list[list[int]], epoch: int, leader_end: int) -> int:
    """Where `epoch` ended on the leader: the start of the first later epoch, else its log end
    (Kafka's OffsetsForLeaderEpoch answer for the largest epoch <= `epoch`)."""
    if epoch < 0:  # a Kafka v0/v1 message set has no epoch: nothing to go by (the byte comparison decides)
        return leader_end
    later = [start for e, start in epochs if e > epoch]
    return min(later) if later else leader_end


def _truncate_to_epoch_end(follower: PartitionLog, epochs: list[list[int]], leader_end: int) -> None:
    last = follower.last_batch()
    if last is None:
        return
    end = epoch_end_offset(epochs, last.header.leader_epoch, leader_end)
    if follower.log_end_offset > end:
        follower.truncate_to(end)


def _truncate_divergent_suffix(leader: PartitionLog, follower: PartitionLog) -> None:
    """Walk back from the follower's end until its last batch is byte-for-byte the leader's."""
    for _ in range(DIVERGENCE_STEPS_MAX):
        end = follower.log_end_offset
        if end == follower.first_offset():
            return
        last = follower.last_batch()
        if last is None:
            return
        theirs = leader.read(last.header.base_offset, last.header.next_offset, 1)
        if theirs and theirs[0].header.base_offset == last.header.base_offset and theirs[0].data == last.data:
            return
        follower.truncate_to(last.header.base_offset)
    raise StorageError(f"could not find where {follower.directory} agrees with its leader")


def _leader_first(meta: PartitionMeta) -> list[int]:
    """The leader's log directory, then the other in-sync replicas'."""
    leader, isr = meta.leader, meta.isr
    return [leader] if len(isr) == 1 and isr[0] == leader else [leader] + [d for d in isr if d != leader]


DATA_LOSS_PREFIX = "data loss: "  # a warning that starts so makes the command exit 1 (klog/cli/app.py)


class ReplicaManager:
    """Runs under a partition's lock: reconcile replicas with metadata, then append."""

    def __init__(self, store: BrokerStore, warn: Warn | None = None) -> None:
        self.store = store
        self.warn = warn or store.warn
        # (topic, partition, log dir) -> when its append or catch-up last failed, in this process:
        # retrying on every append would cost a read of the whole lag and a warning per batch
        self._failed_at: dict[tuple[str, int, int], float] = {}
        # log dir id -> (its path, its health), while a producer writes many batches in one go
        # (see shared_dir_checks); None otherwise: every append checks its directories again
        self._dir_checks: dict[int, tuple[str, str]] | None = None
        self._list_read = False  # klog.json looked at within this shared_dir_checks block (reconcile)
        self._group: DeferredSync | None = None  # the group of partitions being appended together, if any
        # (topic, partition, log dir) -> the unhealthy state last warned of: a full disk is said once
        # when it fills, not once per produce request while it stays full
        self._said_unhealthy: dict[tuple[str, int, int], str] = {}
        # (topic, partition) -> the paths _replicas_healthy looks at (see _replica_places)
        self._places: dict[tuple[str, int], tuple[list[LogDir], int, list[int], list[tuple[LogDir, str, str, str]]]] \
            = {}
        # (log dir id, its identity) -> until when its last healthy check is trusted (HEALTHY_TRUSTED_S)
        self._healthy_until: dict[tuple[int, str | None], float] = {}
        # (topic, partition, from, to): the move this manager's move_replica makes (a move settled
        # by reconcile that is not this one was cut short before, and is said in a warning)
        self.moving: tuple[str, int, int, int] | None = None
        # (topic, partition) -> why its move's new replica could not catch up (this reconcile's
        # catch-up, read by the settling of the move that follows it)
        self._move_failures: dict[tuple[str, int], str] = {}
        self.move_failure: str | None = None  # why the last move settled here was rolled back

    @contextmanager
    def shared_dir_checks(self) -> Iterator[None]:
        """Within this block, each log directory's health is checked once, not once per append:
        a producer's flush writes a batch to each of its partitions (1,000 partitions on one disk
        were 1,000 checks of the same directory). A directory that fails meanwhile still fails
        the append that meets it (LeaderAppendError), which clears what was learnt."""
        outer = self._dir_checks is not None
        if not outer:
            self._dir_checks = {}
        try:
            yield
        finally:
            if not outer:
                self._dir_checks = None
                self._list_read = False

    def _forget_health(self) -> None:
        """After a failed append: every directory's health is read again before the next append."""
        self._healthy_until.clear()
        self._list_read = False
        if self._dir_checks is not None:
            self._dir_checks.clear()

    def _metadata_written(self, topic: str) -> None:
        """A partition's metadata was written: caches of the topic's metadata read it again."""
        self.store.forget_topic_metadata(topic)
        if self._group is not None:
            self._group.forget_topic_meta()

    def _health(self, log_dir_id: int, path: str | None = None) -> str:
        """The log directory's health; within shared_dir_checks, a healthy one is checked once."""
        checks = self._dir_checks
        known = checks.get(log_dir_id) if checks is not None else None
        if known is not None:
            return known[1]
        state = dir_health(self.store, log_dir_id, path)
        if state != health.OK:
            self._healthy_until.clear()  # (trusted no more, by any partition's next append)
        elif checks is not None:
            checks[log_dir_id] = (path or self.store.data_dir.log_dir_path(log_dir_id), state)
        return state

    def _dirs(self, topic: str, partition: int, ids: list[int]) -> list[str]:
        """The log directories' paths (as the directory checks of shared_dir_checks found them, if they did)."""
        if len(ids) == 1:
            return [self._dir(ids[0])]
        checks = self._dir_checks or {}
        return [known[0] if (known := checks.get(d)) is not None else self.store.data_dir.log_dir_path(d) for d in ids]

    def _dir(self, log_dir_id: int) -> str:
        """One log directory's path, as _dirs gives it."""
        checks = self._dir_checks
        known = checks.get(log_dir_id) if checks else None
        return known[0] if known is not None else self.store.data_dir.log_dir_path(log_dir_id)

    def reconcile_if_due(self, topic: str, partition: int, part,
                         topic_meta: Callable[[], TopicMeta] | None = None) -> PartitionMeta:
        """reconcile(), or when nothing can have changed since the last one (see REPLICA_RECHECK_S)
        only the cheap re-open of `part` (it checks the lock generation)."""
        # kept on the Partition (one per store), so that every producer of the store shares it
        # (no replica check kept, as after another process's hold: no call to look at it)
        checked = self.checked_recently(topic, partition, part) if part.replica_check is not None else None
        return checked if checked is not None else self.reconcile(topic, partition, part, topic_meta)

    def checked_recently(self, topic: str, partition: int, part) -> PartitionMeta | None:
        """Lock held: the metadata of the last reconcile when nothing can have changed since (see
        REPLICA_RECHECK_S), `part` re-opened cheaply (it checks the lock generation); None when a
        reconcile is due (it reads and may write the metadata: klog serve's event loop leaves
        that to a thread)."""
        known = part.replica_check
        if (known is not None and time.monotonic() - known[0] < REPLICA_RECHECK_S
                and part.unchanged_since_last_append() and self._replicas_healthy(topic, partition, known[1])):
            part.open_for_write()
            return known[1]
        return None

    def _replicas_healthy(self, topic: str, partition: int, meta: PartitionMeta) -> bool:
        """Every replica's directory is healthy and holds the partition's folder. The same look
        as dir_health's, before every append: so the paths it looks at are worked out once per
        partition (they were a third of the look's cost), while the system calls all stay."""
        places = self._replica_places(topic, partition, meta.replicas)
        if places is None:
            return False
        checks = self._dir_checks
        trusted = self._healthy_until
        now = time.monotonic()
        for log_dir, path, id_file, folder in places:
            known = checks.get(log_dir.id) if checks is not None else None
            if known is not None:  # (within shared_dir_checks: once per directory, not per partition)
                state = known[1]
            elif trusted.get(key := (log_dir.id, log_dir.identity), 0.0) > now:
                state = health.OK
            else:
                state = health.check_log_dir(path, log_dir.identity, id_file)
                if state == health.OK:
                    trusted[key] = now + HEALTHY_TRUSTED_S
                    if checks is not None:
                        checks[log_dir.id] = (path, state)
                else:
                    trusted.pop(key, None)
            if state != health.OK or not os.path.isdir(folder):
                return False
        return True

    def _replica_places(self, topic: str, partition: int,
                        replicas: list[int]) -> list[tuple[LogDir, str, str, str]] | None:
        """Each replica's log directory (its LogDir, read live: a replaced disk gets a new identity),
        path, id file and the partition's folder in it; worked out again when the data dir's list
        of log directories or the partition's replicas change."""
        log_dirs = self.store.data_dir.log_dirs
        known = self._places.get((topic, partition))
        if known is not None and known[0] is log_dirs and known[1] == len(log_dirs) and known[2] == replicas:
            return known[3]
        name = partition_dir_name(topic, partition)
        places = []
        for d in replicas:
            log_dir = next((x for x in log_dirs if x.id == d), None)
            if log_dir is None:
                return None
            path = self.store.data_dir.log_dir_path(d)
            places.append((log_dir, path, os.path.join(path, health.ID_FILE), os.path.join(path, name)))
        if len(self._places) >= 10_000:  # (bounded: a broker with more partitions than this re-works some)
            self._places.clear()
        self._places[(topic, partition)] = (log_dirs, len(log_dirs), list(replicas), places)
        return places

    def reconcile(self, topic: str, partition: int, part,
                  topic_meta: Callable[[], TopicMeta] | None = None) -> PartitionMeta:
        """Health, election, catch-up; leaves `part` configured as leader + ISR, opened for write.
        `topic_meta`: the topic's metadata as read under this partition's lock (a group of
        partitions locked together reads it once for all, see SyncTogether)."""
        part.replica_check = None
        store = self.store
        # klog.json as it is now (one stat when unchanged; not per append: reconcile runs at a writer's
        # first append, then every REPLICA_RECHECK_S or after another process's): a directory another
        # process added (a topic placed there) or removed and added again (its id, another path);
        # within shared_dir_checks once for the block, as the directories' health (1,000 partitions'
        # first appends were 1,000 stats of it)
        if not self._list_read:
            store.data_dir.refresh()
            self._list_read = self._dir_checks is not None
        topic_meta = topic_meta() if topic_meta is not None else store.topics.get(topic)
        meta = topic_meta.partitions[partition]
        before = meta
        states: dict[int, str] = {}
        all_ok = True
        for d in meta.replicas:  # (a loop, no comprehension nor sets: once per partition a producer writes)
            state = states[d] = self._health(d)
            if state != health.OK:
                all_ok = False
        for d, state in () if all_ok else states.items():  # (the usual case: every directory healthy)
            if state == health.REPLACED:
                if not store.data_dir.reidentify(d):  # another process gave it its new identity already:
                    states[d] = self._health(d)  # as it is now (an empty folder leaves the ISR below)
                    continue
                self.warn(f"log directory {d} was replaced by a new one; its replicas will be caught up")
                meta = replace(meta, isr=[r for r in meta.isr if r != d])  # a new empty disk: out of sync
                states[d] = health.OK
        # (the fields, no snapshot built) a lost state file reads 0 here: open_for_write rebuilds it
        fields = part.state.read_valid_fields()
        hw = fields[0] if fields is not None else 0
        for d in list(meta.isr) if hw > 0 else ():
            if states[d] == health.OK and not part.replica_folder_present(self._dir(d)):
                meta = replace(meta, isr=[r for r in meta.isr if r != d])  # its folder was deleted
        healthy = set(states) if all_ok else {d for d, s in states.items() if s == health.OK}
        for d in meta.replicas if self._said_unhealthy or not all_ok else ():
            said = self._said_unhealthy.get((topic, partition, d))
            if d in healthy:
                self._said_unhealthy.pop((topic, partition, d), None)
            elif d in meta.isr and said != states[d]:
                self._said_unhealthy[(topic, partition, d)] = states[d]
                self.warn(f"replica of {topic}-{partition} in log directory {d} left the ISR "
                          f"({states[d]})")
        # no election when the leader and every in-sync replica are healthy (elect would change nothing)
        if meta.leader not in meta.isr or not healthy.issuperset(meta.isr):
            # the topic's configs are parsed only when an election may need unclean.leader.election
            unclean = (meta.leader not in healthy or meta.leader not in meta.isr) and \
                LogConfig.from_configs(topic_meta.configs).unclean_leader_election_enable
            elected = elect(meta, healthy, unclean)
            if elected is not None:
                meta = elected
        if meta.leader not in healthy or meta.leader not in meta.isr:
            raise NoLeaderError(f"no in-sync replica of {topic}-{partition} is available "
                                f"(replicas {meta.replicas}: {', '.join(f'{d} {states[d]}' for d in meta.replicas)})")
        part.set_replica_dirs(self._dirs(topic, partition, _leader_first(meta)))
        part.open_for_write()
        if part.state_rebuilt:
            self.warn(part.state_rebuilt)
            part.state_rebuilt = None
        for report in part.last_recovery:  # damage under acknowledged records recovery left in place
            for found in report.damaged:
                self.warn(f"{topic}-{partition}: {found}; read past it with 'klog consume {topic} --skip-damaged', "
                          f"then drop it with 'klog verify {topic} --repair --discard-damaged'")
        if len(part.replicas) > 1 or part.leader.log_end_offset < hw:  # (else nothing committed is missing)
            self._restore_leader_tail(part, hw)
        if meta.leader_epoch != before.leader_epoch:
            meta = replace(meta, epochs=[*meta.epochs, [meta.leader_epoch, part.leader.log_end_offset]])
            self.warn(f"{topic}-{partition}: replica in log directory {meta.leader} is the new leader "
                      f"(epoch {meta.leader_epoch})")
        if len(part.replicas) > 1 or len(meta.isr) > 1:  # (else there is no follower to align)
            meta = self._align_in_sync_followers(topic, partition, part, meta)
        if len(part.replicas) > 1:  # (one replica: open_for_write published its end, and nothing since moved it)
            part.publish()  # open_for_write lowered the high watermark to the shortest replica's end
        if len(meta.isr) < len(meta.replicas):  # (else nobody is out of sync)
            meta = self._catch_up_out_of_sync(topic, partition, part, meta, healthy)
        if meta is not before and meta != before:
            store.topics.update_partition(topic, partition, meta)
            self._metadata_written(topic)
        if meta.move is not None:  # a replica move recorded and not finished (move_replica)
            meta = self._settle_move(topic, partition, part, meta)
        if part.state.leader_epoch() != meta.leader_epoch:
            snap = part.state.read()
            snap.leader_epoch = meta.leader_epoch
            part.state.write(snap, sync=True)  # readers in other processes re-read the replica list
        part.leader_epoch_loaded = meta.leader_epoch
        # (a folder the open for write just listed shows whether the marker is there: no look)
        looks = []
        for r in part.replicas:  # (a loop, no comprehension: once per partition a producer writes)
            if r.listed_names is None or data_loss.MARKER in r.listed_names:
                looks.append(r.directory)
        lost = data_loss.unacknowledged(looks) if looks else None
        if lost is not None:  # checked on every reconcile: part.replica_check stays unset meanwhile
            raise DataLossError(f"{topic}-{partition} takes no writes: {lost}; new records would take the lost "
                                f"offsets. Acknowledge the loss with: {data_loss.ACKNOWLEDGE_COMMAND}")
        if len(meta.isr) == len(meta.replicas):
            part.replica_check = (time.monotonic(), meta)
        return meta

    def _settle_move(self, topic: str, partition: int, part, meta: PartitionMeta) -> PartitionMeta:
        """A move recorded in the metadata ([from, to], by move_replica), after this reconcile's
        catch-up: with both replicas listed, finished if the new one is in the ISR (it takes the
        old one's place, a moved leader handing over with a new epoch), else rolled back (the new
        one dropped: its directory failed, or it could not catch up). Then the folder of the
        replica no longer listed is deleted and the record cleared. Each step is one metadata
        write, so a kill between two leaves a state the next reconcile settles from."""
        source, target = meta.move
        own = self.moving == (topic, partition, source, target)  # (else one cut short, in any process)
        store = self.store
        if source in meta.replicas and target in meta.replicas:
            if target in meta.isr:
                faults.point("move-caught-up")
                replicas = [target if r == source else r for r in meta.replicas if r != target]
                isr = [r for r in meta.isr if r != source]
                new = replace(meta, replicas=replicas, isr=isr)
                if meta.leader == source:
                    leader = next(r for r in replicas if r in isr)
                    new = replace(new, leader=leader, leader_epoch=meta.leader_epoch + 1,
                                  epochs=[*meta.epochs, [meta.leader_epoch + 1, part.leader.log_end_offset]])
                if not own:
                    self.warn(f"{topic}-{partition}: finished the move of its replica from log directory {source} "
                              f"to {target} (cut short before)")
            else:
                new = replace(meta, replicas=[r for r in meta.replicas if r != target],
                              isr=[r for r in meta.isr if r != target])
                self.move_failure = (self._move_failures.pop((topic, partition), None)
                                     or f"log directory {target}: {dir_health(store, target)}")
                if not own:
                    self.warn(f"{topic}-{partition}: rolled back the move of its replica from log directory {source} "
                              f"to {target} (cut short before): the new replica could not catch up "
                              f"({self.move_failure})")
            store.topics.update_partition(topic, partition, new)
            self._metadata_written(topic)
            faults.point("move-settled")
            if new.leader != meta.leader or new.isr != meta.isr:
                part.set_replica_dirs(self._dirs(topic, partition, _leader_first(new)))  # (closes the old one)
                part.open_for_write()
            meta = new
        if (source in meta.replicas) != (target in meta.replicas):
            gone = target if source in meta.replicas else source
            try:
                delete_replica_folder(replica_path(store, topic, partition, gone))
            except (OSError, KlogError) as e:
                self.warn(f"cannot delete the replica of {topic}-{partition} left in log directory {gone} by a move: "
                          f"{getattr(e, 'strerror', None) or e}")
        meta = replace(meta, move=None)
        store.topics.update_partition(topic, partition, meta)
        self._metadata_written(topic)
        return meta

    def _restore_leader_tail(self, part, hw: int) -> None:
        """The leader can come out of recovery shorter than an in-sync follower: killed between
        writes, or cut at a damaged batch below the high watermark after a power cut. In-sync
        followers hold the same batches, so the longest one's tail is copied back, rather than
        every replica being cut to the leader's end. A replica that lost committed records is
        named in a warning (with RF=1 they are gone). Called (by reconcile) only when there are
        followers or the leader ends below `hw`: with one replica and nothing committed missing,
        nothing here applies."""
        cut_by_recovery = False
        for replica, report in zip(part.replicas, part.last_recovery, strict=True):
            if report.repaired and replica.log_end_offset < hw:
                cut_by_recovery = True
                self.warn(f"recovery cut committed records of {replica.directory} from offset "
                          f"{replica.log_end_offset} (high watermark {hw}): {'; '.join(report.reasons)}")
        leader = part.leader
        longest = max(part.replicas, key=lambda r: r.log_end_offset)
        if longest.log_end_offset > leader.log_end_offset:
            try:
                catch_up(longest, leader, longest.log_end_offset)
            except OSError as e:
                why = f"{leader.directory}: {e.strerror or e}"
                raise LeaderAppendError(f"cannot restore the leader {leader.directory} from {longest.directory}: "
                                        f"{e.strerror or e}", why) from None
        if leader.log_end_offset < hw:
            lost = (f"committed records {leader.log_end_offset}..{hw - 1} of {part.topic}-{part.partition} are gone "
                    f"from every replica; the bytes cut are kept in .corrupt files in {leader.directory} (klog verify "
                    f"lists them)")
            if cut_by_recovery:  # (an unclean election the topic allows loses records by the user's choice)
                data_loss.record(leader.directory, lost)  # writes stop until the loss is acknowledged
                leader.listed_names = None  # (the listing predates the marker: reconcile looks for it)
            self.warn(DATA_LOSS_PREFIX + lost)

    def _align_in_sync_followers(self, topic: str, partition: int, part, meta: PartitionMeta) -> PartitionMeta:
        """A writer killed between the leader's append and a follower's left that follower short
        (or, after an election, with a suffix the leader lacks): bring it to the leader's end
        before the next append, which stamps the leader's next offset on every replica. Called (by
        reconcile) only when there is a follower, in `part` or in the ISR."""
        leader = part.leader
        end = leader.log_end_offset
        dirs = _leader_first(meta)
        lost = set()
        for d, follower in zip(dirs[1:], part.replicas[1:], strict=True):
            if follower.log_end_offset == end:
                continue
            try:
                catch_up(leader, follower, end, meta.epochs)
            except (OSError, KlogError) as e:
                self.warn(f"replica of {topic}-{partition} in log directory {d} left the ISR: {e}")
                lost.add(d)
        if not lost:
            return meta
        meta = replace(meta, isr=[d for d in meta.isr if d not in lost])
        part.set_replica_dirs(self._dirs(topic, partition, [d for d in dirs if d not in lost]))
        return meta

    def _catch_up_out_of_sync(self, topic: str, partition: int, part, meta: PartitionMeta,
                              healthy: set[int]) -> PartitionMeta:
        leader = part.leader
        before_isr = meta.isr
        for d in meta.replicas:
            if d in meta.isr or d not in healthy:
                continue
            failed_at = self._failed_at.get((topic, partition, d))
            if failed_at is not None and time.monotonic() - failed_at < CATCH_UP_RETRY_S:
                continue
            follower = PartitionLog(replica_path(self.store, topic, partition, d), part.config)
            try:
                follower.open_for_write()
                end = catch_up(leader, follower, leader.log_end_offset, meta.epochs)
            except (OSError, KlogError) as e:
                if meta.move is not None and meta.move[1] == d:  # a move's new replica: the move is rolled back
                    self._move_failures[(topic, partition)] = str(getattr(e, "strerror", None) or e)
                elif failed_at is None:  # once per failure, not per retry
                    self.warn(f"cannot catch up the replica of {topic}-{partition} in log directory {d}: {e} "
                              f"(retrying every {CATCH_UP_RETRY_S:g} s)")
                self._failed_at[(topic, partition, d)] = time.monotonic()
                follower.close()
                continue
            self._failed_at.pop((topic, partition, d), None)
            follower.close()
            if end == leader.log_end_offset:
                meta = replace(meta, isr=[r for r in meta.replicas if r in meta.isr or r == d])
                self.warn(f"replica of {topic}-{partition} in log directory {d} caught up and rejoined the ISR")
        if meta.isr == before_isr:
            return meta  # nobody joined: `part` is already leader + ISR, opened (saves a re-open per append)
        part.set_replica_dirs(self._dirs(topic, partition, _leader_first(meta)))
        part.open_for_write()
        return meta

    def append(self, topic: str, partition: int, encoded: bytes, acks: str,
               before: Callable[[int], None] | None = None, together: DeferredSync | None = None) -> int:
        """Append one encoded batch; returns its base offset once `acks` is satisfied: acks=all
        when every in-sync replica has fsynced it (per the flush policy), acks=1 when the leader
        has, acks=0 without waiting for any fsync. Every in-sync replica gets the bytes either way.
        `before(base offset)` runs under the lock once the offset the batch gets is known.

        With `together` (the caller holds the partition's lock until together.finish()), the
        batch is appended but neither synced nor published: finish() does both for every batch
        of the group, and only then is `acks` satisfied."""
        return self.append_batches(topic, partition, [encoded], acks, before, together)[0]

    def append_batches(self, topic: str, partition: int, batches: Sequence[bytes], acks: str,
                       before: Callable[[int], None] | None = None,
                       together: DeferredSync | None = None, checked: PartitionMeta | None = None,
                       part: Partition | None = None) -> list[int]:
        """append() of several batches of one partition under one hold of its lock: the replicas
        are checked once (reconcile_if_due; again only after a failover), the batches appended in
        order, synced once after the last (flush.messages counts each of them) and published
        once; returns their base offsets once `acks` is satisfied for all of them. `checked`:
        what checked_recently() returned under the lock the caller holds (no second look).
        `part`: store.partition(topic, partition), when the caller has it."""
        if not batches:
            return []
        store = self.store
        if part is None:
            part = store.partition(topic, partition)
        min_isr = (together.min_insync_replicas() if together is not None
                   else store.log_config(topic).min_insync_replicas)
        sync = SYNC_BY_ACKS[str(acks)]
        self._group = together
        bases: list[int] = []
        lock = part.lock
        # (with `together` the caller holds the lock until it is synced: no second acquisition)
        take = together is None or not lock.held
        try:
            if take:
                lock.acquire()
            try:
                meta: PartitionMeta | None = checked
                try:
                    for i, encoded in enumerate(batches):
                        # only the last batch's append syncs (with `together`, finish() does)
                        append_sync = SYNC_NONE if together is not None or i < len(batches) - 1 else sync
                        meta, result = self._append_with_failover(topic, partition, part, encoded, sync, min_isr,
                                                                  before, append_sync, together, meta)
                        if result.failed_followers:
                            meta = self._drop_failed_followers(topic, partition, part, meta, result)
                        bases.append(result.base_offset)
                except BaseException:
                    part.replica_check = None  # whatever failed, the next append checks everything
                    self._forget_health()
                    raise
                assert meta is not None
                if together is not None:
                    together.appended(part, meta, sync, min_isr, bases[0])
                    return bases
                part.publish()
                part.settle_early_holds()
                if sync == SYNC_ALL and len(meta.isr) < min_isr:
                    raise NotEnoughReplicasError(
                        f"{topic}-{partition}: the batch at offset {bases[0]} reached only "
                        f"ISR [{','.join(map(str, meta.isr))}] (min.insync.replicas {min_isr}) after appending")
            finally:
                if take:
                    lock.release()
        finally:
            self._group = None
        return bases

    def _drop_failed_followers(self, topic: str, partition: int, part, meta: PartitionMeta,
                               result: AppendResult) -> PartitionMeta:
        """Followers whose append failed leave the ISR (the metadata is written at once)."""
        part.replica_check = None
        self._forget_health()
        dirs = _leader_first(meta)
        lost = {dirs[i] for i in result.failed_followers}
        for i, why in result.failed_followers.items():
            self.warn(f"replica of {topic}-{partition} in log directory {dirs[i]} left the ISR: {why}")
            self._failed_at[(topic, partition, dirs[i])] = time.monotonic()
        meta = replace(meta, isr=[d for d in meta.isr if d not in lost])
        self.store.topics.update_partition(topic, partition, meta)
        self._metadata_written(topic)
        return meta

    def _append_with_failover(self, topic: str, partition: int, part, encoded: bytes, sync: str, min_isr: int,
                              before: Callable[[int], None] | None, append_sync: str,
                              together: DeferredSync | None,
                              checked: PartitionMeta | None = None) -> tuple[PartitionMeta, AppendResult]:
        """A leader whose directory fails the append (EIO, ENOSPC, ...) leaves the ISR, an in-sync
        follower is elected (epoch + 1) and the batch is appended there: the write goes on while
        an in-sync replica is left, as in Kafka, where the producer's retry finds the new leader.
        `checked`: the metadata an earlier append of this hold of the lock reconciled (nothing
        can have changed since but what that append's own errors said): no check again."""
        attempts = 1
        while True:
            try:
                meta = checked if checked is not None else self.reconcile_if_due(
                    topic, partition, part, together.topic_meta if together is not None else None)
                checked = None  # (a failover below reconciles again)
                if sync == SYNC_ALL and len(meta.isr) < min_isr:
                    ensure_min_isr(topic, partition, meta, min_isr)  # (raises)
                if before is not None:
                    before(part.leader.log_end_offset)
                return meta, part.append_batch(encoded, append_sync)
            except LeaderAppendError as e:
                part.replica_check = None
                self._forget_health()  # the other partitions of this flush check their directories again
                replicas = self.store.topics.get(topic).partitions[partition].replicas
                failed = self._log_dir_of(part.leader, replicas)
                stuck = {self._log_dir_of(r, replicas) for r in e.stuck}
                current = self.store.topics.get(topic).partitions[partition]
                rest = [d for d in current.isr if d != failed and d not in stuck]
                if not rest:  # as in Kafka, the ISR never empties: the last replica keeps its place
                    raise StorageError(str(e)) from None
                self.warn(f"replica of {topic}-{partition} in log directory {failed} left the ISR: {e.why}")
                for d in stuck:
                    self.warn(f"replica of {topic}-{partition} in log directory {d} left the ISR: it holds "
                              "a batch its leader failed to write and could not be cut back")
                for d in {failed} | stuck:
                    self._failed_at[(topic, partition, d)] = time.monotonic()
                self.store.topics.update_partition(topic, partition, replace(current, isr=rest))
                self._metadata_written(topic)
                if attempts > len(replicas):
                    break
                attempts += 1
        raise StorageError(f"cannot append to {topic}-{partition}: every replica failed")

    def _log_dir_of(self, replica: PartitionLog, candidates: list[int]) -> int:
        root = os.path.dirname(replica.directory)
        found = [d for d in candidates if self.store.data_dir.log_dir_path(d) == root]
        assert len(found) == 1, (replica.directory, candidates)
        return found[0]


def _sync_scope(part: Partition, sync: str) -> list[PartitionLog]:
    """The replicas whose fsync a batch's acks wait for (SYNC_ALL, SYNC_LEADER or SYNC_NONE)."""
    return part.replicas if sync == SYNC_ALL else part.replicas[:1] if sync == SYNC_LEADER else []


class DeferredSync:
    """The batches of a group of partitions appended under their locks (held by the caller until
    they are published), synced by the caller's means, then published; a subclass says how."""

    def __init__(self, store: BrokerStore, topic: str, min_isr: int | None = None) -> None:
        """min_isr: the topic's min.insync.replicas, when the caller has its configs at hand."""
        self.store = store
        self.topic = topic
        self._topic_meta: TopicMeta | None = None
        self._min_isr = min_isr
        self._appended: list[tuple[Partition, PartitionMeta, str, int, int]] = []

    def min_insync_replicas(self) -> int:
        """The topic's min.insync.replicas, read once for the group."""
        if self._min_isr is None:
            self._min_isr = self.store.log_config(self.topic).min_insync_replicas
        return self._min_isr

    def topic_meta(self) -> TopicMeta:
        """The topic's metadata, read once for the group: every partition of it is locked, and a
        partition's metadata changes only under its lock (by this group's own reconciles, which
        write theirs back and keep them here)."""
        if self._topic_meta is None:
            self._topic_meta = self.store.topics.get(self.topic)
        return self._topic_meta

    def forget_topic_meta(self) -> None:
        self._topic_meta = None

    def appended(self, part: Partition, meta: PartitionMeta, sync: str, min_isr: int, base_offset: int) -> None:
        self._appended.append((part, meta, sync, min_isr, base_offset))

    def publish(self) -> None:
        """Every batch of the group synced as its acks ask: make them visible to readers (raises
        NotEnoughReplicasError for an acks=all batch an ISR below min.insync.replicas took)."""
        short = []
        for part, meta, sync, min_isr, base_offset in self._appended:
            part.publish()
            part.settle_early_holds()
            if sync == SYNC_ALL and len(meta.isr) < min_isr:
                short.append(f"{part.topic}-{part.partition}: the batch at offset {base_offset} reached only "
                             f"ISR [{','.join(map(str, meta.isr))}] (min.insync.replicas {min_isr}) after "
                             "appending")
        if short:
            raise NotEnoughReplicasError("; ".join(short))


class SyncTogether(DeferredSync):
    """The batches of a group of partitions appended under their locks (held by the caller until
    finish()), made durable by one syncfs per filesystem instead of an fsync per replica file
    (klog.store.syncfs), then published. Use only where syncfs.available()."""

    def __init__(self, store: BrokerStore, topic: str) -> None:
        """Call with the locks of the group's partitions (of `topic`) taken, before appending."""
        from klog.store.syncfs import SyncedTogether

        super().__init__(store, topic)
        paths = []
        for d in store.data_dir.log_dirs:
            try:
                paths.append(store.data_dir.log_dir_path(d.id))
            except KlogError:
                continue  # a lost directory: its replicas' appends fail and say so
        self._fds = SyncedTogether(paths)  # opened before the writes their syncfs must cover

    def finish(self) -> None:
        """Sync what the acks of the group's batches wait for (when the flush policy says so), then
        publish every partition. A failed syncfs raises StorageError: nothing of the group is
        acknowledged, and the next writer of each partition re-opens it from its files."""
        try:
            due: set[str] = set()
            for part, _, sync, _, _ in self._appended:
                replicas = part.replicas
                if len(replicas) == 1:  # (the usual case: the scope is the leader, unless acks=0; no generators)
                    if sync != SYNC_NONE and replicas[0].flush_due():
                        due.add(replicas[0].log_dir)
                    continue
                scope = _sync_scope(part, sync)
                if any(r.flush_due() for r in scope):
                    due.update(r.log_dir for r in scope)
            synced = self._sync(due)
            if synced:  # (nothing synced: no flush was due, nothing to mark)
                devices = self._fds.devices
                for entry in self._appended:
                    for replica in entry[0].replicas:
                        if devices.get(replica.log_dir) in synced:
                            replica.mark_synced(settle=False)  # (its state file: the append settled it)
            self.publish()
        finally:
            self._fds.close()

    def _sync(self, due: set[str]) -> set[int]:
        unknown = due - set(self._fds.devices)
        if unknown:  # a log directory that was not there when the group began: sync it now
            from klog.store.names import fsync_dir

            for path in unknown:
                fsync_dir(path)
            due = due - unknown
        try:
            return self._fds.sync(due)
        except OSError as e:
            for part, *_ in self._appended:
                part.distrust()
            raise StorageError(f"cannot make the batches of {len(self._appended)} partitions durable: syncfs of "
                               f"{e.filename}: {e.strerror or e}; nothing of them was acknowledged") from None

    def close(self) -> None:
        self._fds.close()


class SyncAfter(DeferredSync):
    """A partition's batch appended under its lock (held by the caller until synced()), its
    fsyncs made by the caller (or by flush(), in a thread), then published: klog serve's event loop hands the
    fsync of the active segment to io_uring instead of a thread (klog.server.loop_fsync).
    fsyncs() says which descriptors that is; when a flush has more to do (a sealed segment not yet
    fsynced, a new folder or file name to make durable) it says None and flush() does it all."""

    def __init__(self, store: BrokerStore, topic: str, min_isr: int | None = None) -> None:
        super().__init__(store, topic, min_isr)
        self._due: list[PartitionLog] = []

    def fsyncs(self) -> list[int] | None:
        """The descriptors whose fsync is all the acks of the appended batches wait for (none: no
        flush is due), or None when a flush has more to do (then flush(), then synced())."""
        due, fds = [], []
        for part, _, sync, _, _ in self._appended:
            for replica in _sync_scope(part, sync):
                if replica.flush_due():
                    fd = replica.active_log_fd_to_sync()
                    if fd is None:
                        return None
                    due.append(replica)
                    fds.append(fd)
        self._due = due
        return fds

    def synced(self, error: OSError | None = None) -> None:
        """The caller's fsyncs of fsyncs() returned (`error`: the first that failed): publish, or
        raise StorageError with nothing acknowledged (the next writer re-opens from the files)."""
        if error is not None:
            for part, *_ in self._appended:
                part.distrust()
            raise StorageError(f"cannot make the batch of {self.topic} durable: fsync failed: "
                               f"{error.strerror or error}; it was not acknowledged")
        for replica in self._due:
            replica.mark_synced(settle=False)  # (its state file: the append settled it)
        self.publish()

    def flush(self) -> None:
        """Instead of the caller's fsyncs: every flush the acks wait for, as flush() makes it
        (raises OSError); the caller then calls synced(). Any thread: the caller's still holds
        the lock."""
        self._due = []
        for part, _, sync, _, _ in self._appended:
            for replica in _sync_scope(part, sync):
                replica.maybe_flush(by_count=True, settle=False)


def move_replica(store: BrokerStore, topic: str, partition: int, source: int, target: int,
                 warn: Warn | None = None) -> None:
    """Move one replica from log dir `source` to `target` without losing or duplicating a record:
    the new replica is caught up and joins the ISR before the old one is dropped.

    The move is recorded in the partition's metadata first (PartitionMeta.move, in the same LMDB
    write that adds the new replica), so that one cut short (a kill, a failure) is settled by the
    partition's next reconcile, in any process: finished when the new replica is in the ISR, else
    rolled back (see ReplicaManager._settle_move). A move still pending when another is asked
    for is settled first; asked again, a move that is then done does nothing."""
    # the new replica catching up is the move itself, not a replica back in the ISR: not said
    # (the command says what it moved; a move cut short and settled by another write still says it)
    joined = f"replica of {topic}-{partition} in log directory {target} caught up and rejoined the ISR"
    say = warn or store.warn
    manager = ReplicaManager(store, lambda message: None if message == joined else say(message))
    part = store.partition(topic, partition)
    with part.lock:
        meta = store.topics.get(topic).partitions[partition]
        if meta.move is not None:
            pending = list(meta.move)
            meta = manager.reconcile(topic, partition, part)  # settles it
            if pending == [source, target] and target in meta.replicas and source not in meta.replicas:
                return  # the move asked for, cut short before, now finished
        if source not in meta.replicas:
            raise KlogError(f"{topic}-{partition} has no replica in log directory {source}")
        if target in meta.replicas:
            raise KlogError(f"{topic}-{partition} already has a replica in log directory {target}")
        # the target checked in klog.json as it is now, and the move recorded, under the log-dirs
        # lock (shared; taken after the partition's): a `dirs remove` in another process forgets a
        # directory only under it exclusive, after a last look finds no replica nor move naming it
        with store.data_dir.log_dirs_lock():
            if target in store.data_dir.removed_ids and not any(d.id == target for d in store.data_dir.log_dirs):
                raise KlogError(f"log directory {target} was removed")
            if dir_health(store, target) != health.OK:
                raise KlogError(f"log directory {target} is not healthy ({dir_health(store, target)})")
            manager.moving = (topic, partition, source, target)
            store.topics.update_partition(topic, partition, replace(meta, replicas=[*meta.replicas, target],
                                                                    move=[source, target]))
        manager._metadata_written(topic)
        faults.point("move-recorded")
        meta = manager.reconcile(topic, partition, part)  # catches the new replica up, then settles the move
        if target not in meta.replicas or source in meta.replicas:
            raise StorageError(f"the new replica of {topic}-{partition} in log directory {target} "
                               f"could not catch up ({manager.move_failure or 'not in sync'}); nothing was moved")


def settle_move(store: BrokerStore, topic: str, partition: int, warn: Warn | None = None) -> PartitionMeta:
    """The partition's metadata once a move recorded in it (cut short) is finished or rolled back;
    as it is when none is. Takes the partition's lock (re-entrant: the caller may hold it)."""
    meta = store.topics.get(topic).partitions[partition]
    if meta.move is None:
        return meta
    part = store.partition(topic, partition)
    with part.lock:
        return ReplicaManager(store, warn).reconcile(topic, partition, part)


def _doomed_path(folder: str) -> str:
    """Where a replica's folder is renamed to be deleted: a short name (a 249-character topic's
    folder + a suffix would pass 255 bytes) that never parses as a partition folder ("delete" is no
    partition number), and the same for the same folder, so a deletion cut short is finished by
    the next one."""
    import hashlib  # here: only a replica move needs it, not every producer

    digest = hashlib.sha1(os.fsencode(os.path.basename(folder))).hexdigest()[:32]
    return os.path.join(os.path.dirname(folder), f"klog-moved-{digest}-delete")


def delete_replica_folder(folder: str) -> None:
    """Delete a replica's folder no replica list names any more: renamed first (readers and
    writers then find no half-deleted partition folder), then removed. Raises OSError."""
    import shutil

    doomed = _doomed_path(folder)
    if os.path.lexists(doomed):
        shutil.rmtree(doomed, ignore_errors=True)
    if os.path.isdir(folder):
        os.replace(folder, doomed)
        faults.point("move-renamed")
    shutil.rmtree(doomed, ignore_errors=True)

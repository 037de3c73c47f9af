"""Partition: the replicas of one partition, its writer lock and its shared state.

The writing process stamps the batch's offset once, appends the same bytes to the leader and
then to every in-sync follower, flushes per the flush policy, and only then publishes the new
high watermark. Readers read the leader below the high watermark, so they never see a batch
that is not completely written (and replicated).
"""

from __future__ import annotations

import operator
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from klog.errors import (
    CorruptLogError,
    KlogError,
    LeaderAppendError,
    PartitionClosedError,
    StateLostError,
    StorageError,
)
from klog.store import codec, faults, loader
from klog.store.config import LogConfig
from klog.store.flush_pipeline import FLUSH_MS_TIMED_MAX
from klog.store.format import partition_dir_name
from klog.store.limits import PARTITION_READ_BYTES_DEFAULT
from klog.store.locks import FileLock
from klog.store.log import ByteRange, FetchedBatch, PartitionLog, RecoveryReport
from klog.store.names import fit_stem, join_name
from klog.store.plain import FrozenPlain
from klog.store.state import PartitionSnapshot, PartitionState, ReplicaSnapshot
from klog.store.txn_cache import FILE_SUFFIX as TXN_VIEW_SUFFIX

if TYPE_CHECKING:
    from concurrent import futures

T = TypeVar("T")
R = TypeVar("R")
# After another writer took a turn between two of this object's appends, the replica state files
# are written at every append until this many opens went by without one: writers taking turns find
# them current, with no tail to check (loader.appended_tail); a writer that has the partition to
# itself lets them lag (see log.py)
EAGER_STATE_OPENS = 64
# The first holds of the lock in which an object appends (counted from its first open, or from
# another writer's turn) write the replica state files at their end, before the lock goes: a
# producer that writes each partition in a few flushes then leaves nothing for its close to settle
# under a second hold of each lock (a run of 400,000 lines into 1,000 partitions, two flushes each,
# took most locks three times). Later holds let them lag (see log.STATE_LAG_BATCHES_MAX).
SETTLED_HOLDS = 4
IDLE_FLUSH_MS_MAX = FLUSH_MS_TIMED_MAX  # a longer flush.ms (the default is Long.MAX: never) arms no timer
# a file that vanishes under a lookup (retention deleting a segment meanwhile) is looked up again this
# often, then is an error: never "nothing there" (a consume --since that prints nothing and exits 0)
ASKS_ON_VANISHED_FILE = 3
# known_empty trusts a state folder's mtime this long after it (a file created in the same clock
# tick as the look may leave the mtime as it was: the folder is looked at again until then)
EMPTY_TRUST_AFTER_NS = 500_000_000
FOLLOWER_THREADS = 4  # followers written at once; more replicas than this queue up
_pool: futures.ThreadPoolExecutor | None = None


def _follower_pool() -> futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        from concurrent import futures  # only with followers: ~5 ms of imports a one-replica command skips

        _pool = futures.ThreadPoolExecutor(FOLLOWER_THREADS, thread_name_prefix="klog-follower")
    return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None  # a forked child has none of its parent's threads: an inherited pool would never run


os.register_at_fork(after_in_child=_forget_pool)


# What an append waits for, by the producer's acks: which replicas are fsynced (per the flush
# policy) before it returns. The bytes reach every in-sync replica either way, so the high
# watermark (the lowest log end over the ISR) moves at once; what acks=1 and acks=0 give up is
# durability against a power cut, not visibility. Unsynced bytes are fsynced by the next
# append that waits for them (flush.messages counts every batch) or by flush.ms.
SYNC_ALL = "all"        # acks=all: leader and every in-sync follower
SYNC_LEADER = "leader"  # acks=1: the leader only
SYNC_NONE = "none"      # acks=0: none
SYNC_BY_ACKS = {"all": SYNC_ALL, "1": SYNC_LEADER, "0": SYNC_NONE}


def _append_and_flush(replica: PartitionLog, batch: bytes, header: codec.BatchHeader, new_segment: bool,
                      sync: bool, eager_state: bool, leader: bool = False) -> None:
    """Append, starting a new segment exactly where the leader starts one (a writer killed in the
    middle of a roll leaves one replica an empty new segment the others lack). The replica state
    file is written once, after the flush (it carries the recovery point), and only when it lags
    too far (PartitionLog.settle_state) unless `eager_state`. leader: `new_segment` is this
    replica's own should_roll, not asked again (a follower's own rule still applies to it)."""
    active = replica.active
    if new_segment:
        if active.size > 0:
            replica.roll(header.base_offset)
    elif active.size == 0:
        replica.drop_empty_active(header.base_offset)  # it rolled where the leader did not
    if leader:
        replica.roll_decided = header
    replica.append(batch, header)
    replica.maybe_flush(by_count=sync, settle=False)  # flush.ms holds whatever acks waits for
    replica.settle_state(eager_state)


def _replica_log(log_dir: str, name: str, config: LogConfig) -> PartitionLog:
    """A replica of a Partition (its folder `name` in `log_dir`): its appends leave the replica
    state file to settle_state()."""
    # (listed by its open for write, or its first read)
    return PartitionLog(join_name(log_dir, name), config, listed=False,
                        log_dir=None if log_dir.endswith(os.sep) else log_dir, defer_state=True)


class AppendResult(FrozenPlain):
    _fields = ("base_offset", "last_offset", "log_append_time_ms", "failed_followers")
    base_offset: int
    last_offset: int
    log_append_time_ms: int | None
    failed_followers: dict[int, str]  # replica index -> why its append failed (it leaves the ISR)

    def __init__(self, base_offset: int, last_offset: int, log_append_time_ms: int | None,
                 failed_followers: dict[int, str]) -> None:
        # (its __dict__ filled directly: object.__setattr__ four times cost a call each, at every append)
        fields = self.__dict__
        fields["base_offset"] = base_offset
        fields["last_offset"] = last_offset
        fields["log_append_time_ms"] = log_append_time_ms
        fields["failed_followers"] = failed_followers


_RANGE_START = operator.attrgetter("first", "path", "position")  # a ByteRange's first batch, where it is


class Partition:
    def __init__(self, topic: str, partition: int, replica_dirs: list[str], state_dir: str, lock_dir: str,
                 config: LogConfig) -> None:
        assert replica_dirs, "a partition needs at least one replica"
        self.topic = topic
        self.partition = partition
        self.config = config
        name = partition_dir_name(topic, partition)
        self.replicas = [_replica_log(d, name, config) for d in replica_dirs]
        fitted = fit_stem(name) is name  # (the state and lock files' stem: the name itself, as a rule)
        # read_committed's saved walk (klog.store.txn_cache): the leader's, whichever replica leads
        self._txn_view_path = join_name(state_dir, fit_stem(name) + TXN_VIEW_SUFFIX)
        for r in self.replicas:
            r.txn_view_path = self._txn_view_path
        self.state = PartitionState(join_name(state_dir, name + PartitionState.SUFFIX), fitted)
        self.lock = FileLock(join_name(lock_dir, name + ".lock"), fitted)
        self.state.held = self.lock.held_generation
        self.last_recovery: list[RecoveryReport] = []
        self.state_rebuilt: str | None = None  # set by open_for_write when it had to: the caller warns
        # readers: the leader epoch the replica list was built for, and how to rebuild it when a
        # writer elected a new leader (a reader kept open must not read a deposed leader's tail)
        self.leader_epoch_loaded = 0
        # the lock generation under which this object last appended cleanly (see open_for_write)
        self._appended_generation: tuple[int, int] | None = None
        self._eager_state_opens = 0  # see EAGER_STATE_OPENS
        self.rolls = 0  # segments the leader rolled at this object's appends (a writer runs retention after one)
        # holds left whose appends settle the replica state files before the lock goes (see
        # SETTLED_HOLDS and settle_early_holds)
        self._settled_holds_left = 0
        self._flush_timer: threading.Timer | None = None
        # flush.ms is kept by a timer (see _arm_idle_flush; the default, never, is not)
        self._flush_timed = config.flush_ms <= IDLE_FLUSH_MS_MAX
        # release_files(readers_too) asked for while an idle flush was armed (it declined: closing
        # would skip the fsync): the idle flush releases the files once it has run
        self._release_after_flush: bool | None = None
        # what the last full replica check left (broker.replication): when it ended, and the metadata
        self.replica_check: tuple[float, object] | None = None
        # what retention after a roll learnt about the oldest segment (broker.lifecycle)
        self.retention_hint: tuple[int, tuple[int, int], int, int] | None = None
        self._closed = False
        self.reload_replicas: Callable[[], None] | None = None
        # an empty partition's reads (see known_empty): the state folder, and its (inode, mtime)
        # when this partition was last seen with no state file and no replica folder
        self._state_dir = state_dir
        self._empty_at: tuple[int, int] | None = None

    def set_replica_dirs(self, replica_dirs: list[str]) -> None:
        """Leader first, then the in-sync followers; keeps the open logs it already has."""
        assert replica_dirs
        if len(replica_dirs) == 1 == len(self.replicas) and self.replicas[0].log_dir == replica_dirs[0]:
            return  # (the usual case: the same one replica)
        name = partition_dir_name(self.topic, self.partition)
        known = {r.log_dir: r for r in self.replicas}
        replicas = [known.get(d) or _replica_log(d, name, self.config) for d in replica_dirs]
        for r in replicas:
            r.txn_view_path = self._txn_view_path
        if replicas != self.replicas:
            self._appended_generation = None  # a replica joined or left: open every one afresh
        self.replicas = replicas
        for r in known.values():
            if r not in self.replicas:
                r.close()

    @property
    def leader(self) -> PartitionLog:
        return self.replicas[0]

    # -- shared state --------------------------------------------------------------------------
    def snapshot(self) -> PartitionSnapshot:
        return self.state.read()

    def reader_snapshot(self) -> PartitionSnapshot:
        """The state as readers must see it: a missing, empty or damaged state file over a log
        that holds data is an error (the high watermark is unknown, and reading nothing would be
        a silent short read); the next write, or `klog verify --repair`, rebuilds it."""
        if self._empty_at is not None and self.known_empty():
            return PartitionSnapshot(0, 0, 0)
        snap = self.state.read_valid()
        if snap is not None:
            return snap
        looked = self._state_dir_key()  # (before the looks below: a state file created after it is seen next time)
        if self.holds_data():
            # a writer creating the partition may have published its first state and appended
            # between the two looks (it writes the state before the first byte of data), so
            # the state is only lost if it is still missing once data was seen
            snap = self.state.read_valid()
            if snap is not None:
                return snap
            raise StateLostError(f"the state file of {self.topic}-{self.partition} ({self.state.path}) is missing "
                                 f"or damaged, so its high watermark is unknown; `klog verify --repair` or the next "
                                 f"write rebuilds it from the log")
        if looked is not None and not os.path.lexists(self.state.path) and not self.state.held():
            self._empty_at = looked  # (no state file, no data: so until a state file comes or goes)
        return PartitionSnapshot(0, 0, 0)

    def known_empty(self, looked: tuple[str, tuple[int, int] | None] | None = None) -> bool:
        """One stat: this partition was seen with no state file and no replica folder, and no file
        was created or removed in the state folder since. A writer creates the state file before
        the first byte of data, and a lost state file is one removed (or never written, as an
        empty one it creates first, which this does not take for missing), so nothing can have
        been appended since: a served Fetch of 20,000 empty partitions reads no state file and
        lists no folder for them (`tests/store/test_empty_partition_reads.py`). `looked`: (state
        folder, its key) as a caller asking for many partitions at once looked at it just before."""
        key = self._empty_at
        if key is None:
            return False
        now = looked[1] if looked is not None and looked[0] == self._state_dir else self._state_dir_key()
        if now == key and not self.state.held():
            return True
        self._empty_at = None
        return False

    def _state_dir_key(self) -> tuple[int, int] | None:
        """The state folder's (inode, mtime), or None while its mtime is too recent to tell a
        change in the same clock tick from none (a file created just after the look)."""
        try:
            st = os.stat(self._state_dir)
        except OSError:
            return None
        if time.time_ns() - st.st_mtime_ns < EMPTY_TRUST_AFTER_NS:
            return None
        return st.st_ino, st.st_mtime_ns

    def holds_data(self) -> bool:
        replicas = self.replicas
        if not any(r._bases for r in replicas) and not any(os.path.lexists(r.directory) for r in replicas):
            return False  # no folder, no segment known: an empty partition's every read, without a listing
        for replica in self._present_replicas():
            replica.refresh_segments()
            try:
                if any(seg.file_size() > 0 for seg in list(replica.segments.values())):  # (a roll may add one)
                    return True
            except OSError:
                return True  # cannot tell: assume the worst
        return False

    def high_watermark(self) -> int:
        return self.reader_snapshot().high_watermark

    def log_start_offset(self) -> int:
        """As retention and delete-records published it, not the first segment found: a lost
        first segment must be reported by the read, not skipped by starting past it."""
        known = self.state.known_fields()  # (the lock's holder: what it wrote, no read)
        return known[1] if known is not None else self.reader_snapshot().log_start_offset

    def _first_readable(self, ask: Callable[[PartitionLog], T], default: T) -> T:
        """`ask` of the leader, or of the first in-sync replica that can answer (a lost directory).
        When none can, the first error is raised: a time lookup that fails must not read as "no
        record at or after that time" (a consume --since that prints nothing and exits 0)."""
        failure: KlogError | None = None
        for replica in self._present_replicas():
            for attempt in range(ASKS_ON_VANISHED_FILE):
                try:
                    return ask(replica)
                except StorageError:
                    raise
                except CorruptLogError as e:
                    failure = failure or e
                except FileNotFoundError as e:
                    if attempt + 1 < ASKS_ON_VANISHED_FILE:
                        continue  # a segment removed by retention meanwhile: ask again (it re-lists the folder)
                    failure = failure or StorageError(f"cannot read {self.topic}-{self.partition}: "
                                                      f"{e.filename or replica.directory} keeps vanishing")
                except OSError as e:
                    failure = failure or StorageError(f"cannot read {self.topic}-{self.partition} from "
                                                      f"{e.filename or replica.directory}: {e.strerror or e}")
                break
        if failure is not None:
            raise failure
        return default

    # -- writing -------------------------------------------------------------------------------
    def unchanged_since_last_append(self) -> bool:
        """Lock held: nobody (no other process, no other Partition object) held the lock since this
        object's last clean append, so its replicas and their metadata are as that append left them."""
        return self._appended_generation is not None and self._appended_generation == self.lock.previous_generation

    def replica_folder_present(self, log_dir: str) -> bool:
        """Lock held: is the partition's folder in log directory `log_dir` there? For a replica of
        this object, the look is the one its next open_for_write in this hold makes anyway
        (PartitionLog.probe_folder)."""
        for replica in self.replicas:
            if replica.log_dir == log_dir:
                return replica.probe_folder(self.lock.generation)
        return os.path.isdir(os.path.join(log_dir, partition_dir_name(self.topic, self.partition)))

    def release_files(self, readers_too: bool = True) -> None:
        """Close what a writer keeps open between appends (the lock file, the state file, each
        replica's files): a process writing thousands of partitions would otherwise run out of
        descriptors. Everything reopens on the next use; the next append re-opens the replicas
        from their files, as after another writer. Not while this thread holds the lock, nor
        while an idle flush is armed. readers_too=False: only the writer's own descriptors (the
        lock file, the replicas' write descriptors and replica state files); what readers in
        other threads use (the partition's state file, segments' read descriptors) stays open."""
        def release() -> None:
            if self._closed:
                return
            if self._flush_timer is None:
                self._settle_states()  # (the next writer, in any process, then adopts the logs without a check)
            if self._flush_timer is not None or not all([r.release_files(readers_too) for r in self.replicas]):
                self._release_after_flush = readers_too  # (the writer forgets this partition: nobody else would)
                return
            self._release_after_flush = None
            if readers_too:
                self.state.close()
            self.lock.close_file()  # reopened by the next acquire (close() is for good)

        self.lock.run_if_idle(release)

    def settle_states(self) -> None:
        """Bring the replicas' state files up to date (see log.STATE_LAG_BATCHES_MAX) unless a
        thread of this process or another process holds the lock: before the files are closed,
        or read by others (Kafka's checkpoint files take the recovery points from them)."""
        if not self._closed and self._states_lag():
            self.lock.run_if_idle(self._settle_states)

    def _states_lag(self) -> bool:
        """Does any replica's state file lag its appends (see log.STATE_LAG_BATCHES_MAX)?"""
        for replica in self.replicas:  # (a loop, not any() of a generator: twice per partition at a close)
            if replica.state_lags:
                return True
        return False

    def _settle_states(self) -> None:
        """Lock not held by this process. Written only where this object's append was the last
        hold of the lock (in any process): another writer's appends since would make its view
        stale, and a stale state must never look current."""
        if self._appended_generation is None or not self._states_lag():
            return
        if not self.lock.acquire(blocking=False):
            return  # another writer has it: it checks the short tail the files do not describe
        try:
            if self._appended_generation == self.lock.previous_generation:
                for replica in self.replicas:
                    replica.settle_state(now=True)
                # (the partition state is as that append left it: known to written_states still)
                self.state.carry(self.lock.previous_generation, self.lock.generation)
                self._appended_generation = self.lock.generation
        except OSError:
            self._appended_generation = None  # the next writer checks the tail (or recovers)
        finally:
            self.lock.release()

    def distrust(self) -> None:
        """The next acquisition of the lock re-opens every replica from its files (a write whose
        durability is unknown: a failed syncfs), as if another process had held the lock."""
        self._appended_generation = None
        self.replica_check = None

    def open_for_write(self) -> None:
        """Lock held: bring every replica to a clean tail and the high watermark in line.

        When the lock's previous holder was this object's own last successful append (the lock
        file's generation says nobody else, in any process, held it since), the replicas are as
        that append left them: their folders are not listed again (a listing per append made the
        per-batch cost grow with the number of segments). Otherwise recovery keeps what it cuts
        from below the published high watermark in `.corrupt` files."""
        lock = self.lock
        appended, self._appended_generation = self._appended_generation, None  # until this hold's append succeeds
        trusted = appended == lock.previous_generation
        if appended is None:  # (its first hold, as a rule: see SETTLED_HOLDS)
            self._settled_holds_left = SETTLED_HOLDS
        if trusted:
            self.state.carry(lock.previous_generation, lock.generation)  # (no re-read of the state file)
            if self._eager_state_opens:
                self._eager_state_opens -= 1
        elif appended is not None:  # another writer took a turn since this object's last append
            self._eager_state_opens = EAGER_STATE_OPENS
        committed = fields = None
        if not trusted:  # (the fields: no snapshot built for a value read once)
            fields = self.state.read_valid_fields()
            committed = fields[0] if fields is not None else None
        token = lock.generation
        replicas = self.replicas
        if len(replicas) == 1:  # (the usual case: no lists to build)
            leader = replicas[0]
            # (one in-sync replica: damage under acknowledged records stays, no copy can restore them)
            self.last_recovery = [leader.open_for_write(committed, trusted=trusted, token=token)]
            hw = leader.log_end_offset
        else:
            # damage under acknowledged records stays where no replica is intact (as with one:
            # cutting every replica at its own damage lost the valid batches after it from all of
            # them); a damaged replica is cut where another one is intact, and reconcile copies the
            # records back from it
            self.last_recovery = [r.open_for_write(committed, trusted=trusted, token=token) for r in replicas]
            if any(report.damage_at for report in self.last_recovery):
                end = max(r.log_end_offset for r in replicas)
                if any(not report.damage_at and r.log_end_offset == end
                       for r, report in zip(replicas, self.last_recovery, strict=True)):
                    for r, report in zip(replicas, self.last_recovery, strict=True):
                        if report.damage_at:
                            loader.cut_kept_damage(r, report, committed)
            hw = min(r.log_end_offset for r in replicas)
        if trusted:
            fields = self.state.read_valid_fields()
        if fields is not None:  # (the usual case: as this object's last append, or the last writer, left it)
            if fields[0] != hw:
                self.state.write_values((hw, *fields[1:]))
        else:
            # lost (deleted, emptied, torn): every replica was just recovered, so the shortest
            # log end is committed everywhere; the log starts at the leader's first segment
            # (retention publishes a new start before deleting); the epoch comes back from the
            # metadata at the next reconcile
            snap = PartitionSnapshot(hw, self.leader.first_offset(), 0)
            rebuilt = hw > 0 or snap.log_start_offset > 0
            if rebuilt:
                self.state_rebuilt = (f"the state file of {self.topic}-{self.partition} ({self.state.path}) was "
                                      f"missing or damaged; rebuilt from the log (high watermark {hw}, "
                                      f"log start {snap.log_start_offset})")
            # a new partition's first state (all zeros) is not fsynced: lost, it reads as zeros
            # again and is rebuilt the same way (an fsync per new partition: 1,000 of them when a
            # producer first writes a 1,000-partition topic)
            self.state.write(snap, sync=rebuilt)

    def written_states(self) -> tuple[tuple, dict[str, ReplicaSnapshot]] | None:
        """The partition state's fields (high watermark, log start offset, leader epoch: no
        snapshot built, once per partition a producer's close writes checkpoints for) and each
        replica's state file (by folder) as this object's last hold of the lock left them, when
        that hold appended, every replica's state file is settled, and nobody (in any process)
        took the lock since (FileLock.unchanged_since_held); else None: read the files. Lock not held
        by this process."""
        generation = self._appended_generation
        if generation is None or generation != self.lock.generation or self._closed:
            return None
        replicas = {}
        for replica in self.replicas:
            written = replica.state_written
            if written is None or replica.state_lags:
                return None
            replicas[replica.directory] = written
        fields = self.state.known_at(generation)
        if fields is None or not self.lock.unchanged_since_held():
            return None
        return fields, replicas

    def settle_early_holds(self) -> None:
        """Lock held, this hold's appends done (and synced, if they were): one of the first holds
        (SETTLED_HOLDS) writes the replica state files now (a pwrite each) rather than leaving them
        to settle_states() at close, which takes the lock again for them (a producer writing 1,000
        partitions once each took each lock twice). Later holds let them lag (see
        STATE_LAG_BATCHES_MAX)."""
        if self._settled_holds_left > 0 and self._appended_generation == self.lock.generation:
            self._settled_holds_left -= 1
            for replica in self.replicas:
                replica.settle_state(now=True)

    def append_batch(self, batch: bytes, sync: str = SYNC_ALL) -> AppendResult:
        """Stamp `batch` (encoded at base offset 0) with the next offsets and append it everywhere,
        fsyncing the replicas `sync` names (SYNC_ALL, SYNC_LEADER or SYNC_NONE) per the flush policy.

        The caller holds self.lock and has called open_for_write() under it. A failed follower is
        dropped (AppendResult.failed_followers); a failed leader raises LeaderAppendError after
        the followers were truncated back, so the batch is nowhere and the caller may elect anew.
        """
        assert sync in (SYNC_ALL, SYNC_LEADER, SYNC_NONE), sync
        replicas = self.replicas
        leader = replicas[0]
        active = leader.active
        base = active.next_offset  # (leader.log_end_offset, the active segment looked up once)
        assert base is not None
        stamped = codec.with_base_offset(batch, base, self.state.leader_epoch())
        header = codec.read_header(stamped)
        # the same bytes, encoded once: followers copy them, in threads beside the leader's write,
        # since pwrite and fsync release the GIL (RF=3 costs about one write + fsync, not three)
        size = active.size
        new_segment = size == 0 or leader.should_roll(header, active)
        rolls = new_segment and size > 0
        eager = self._eager_state_opens > 0
        copies = [_follower_pool().submit(_append_and_flush, r, stamped, header, new_segment, sync == SYNC_ALL, eager)
                  for r in replicas[1:]] if len(replicas) > 1 else ()
        try:
            _append_and_flush(leader, stamped, header, new_segment, sync != SYNC_NONE, eager, leader=True)
            if base == 0:  # a new partition's first batch is in its log, its high watermark not yet published
                faults.point("first-append")
        except OSError as e:
            if copies:
                from concurrent import futures

                futures.wait(copies)
            stuck = [self.replicas[i] for i in self._undo_follower_copies(base)]
            why = f"{leader.directory}: {e.strerror or e}"
            raise LeaderAppendError(f"cannot append to the leader of {self.topic}-{self.partition} ({why})",
                                    why, stuck) from None
        if rolls:
            self.rolls += 1
        failed: dict[int, str] = {}
        if copies:  # (one replica: none, and no enumerate over them)
            for i, copy in enumerate(copies, start=1):
                try:
                    copy.result()
                except OSError as e:
                    failed[i] = f"{self.replicas[i].directory}: {e.strerror or e}"
        if failed:
            self.replicas = [r for i, r in enumerate(self.replicas) if i not in failed]
        else:
            self._appended_generation = self.lock.generation
        self._release_after_flush = None  # written again: the writer keeps it open (or asks again)
        if self._flush_timed:
            self._arm_idle_flush()
        return AppendResult(base, header.last_offset, None, failed)

    # -- flush.ms for a partition that goes quiet ----------------------------------------------
    def _arm_idle_flush(self) -> None:
        """flush.ms is otherwise checked only by the next append: a partition that goes quiet
        after acks=0/1 writes (or under a large flush.messages) would keep its bytes unsynced for
        good. A one-shot daemon timer fsyncs them when flush.ms has passed."""
        if self._flush_timer is not None or self._closed or self.config.flush_ms > IDLE_FLUSH_MS_MAX:
            return
        waits = [w for w in (r.flush_due_in_ms() for r in self.replicas) if w is not None]
        if not waits:
            return
        timer = threading.Timer(max(0.0, min(waits)) / 1000, self._idle_flush)
        timer.daemon = True  # never keeps a process alive
        self._flush_timer = timer
        timer.start()

    def _idle_flush(self) -> None:
        if self._closed:
            return
        try:
            self.lock.acquire()
        except PartitionClosedError:  # closed since the check: nothing left to flush here
            return
        try:
            self._flush_timer = None
            if self._closed:
                return
            if self._appended_generation == self.lock.previous_generation:
                self._appended_generation = self.lock.generation  # (an fsync changes nothing the next append re-reads)
            for replica in self.replicas:
                try:
                    replica.maybe_flush(by_count=False)
                except OSError:
                    pass  # a failing directory: the next append finds it and drops the replica
            self._arm_idle_flush()  # bytes appended since the last fsync that are not due yet
        finally:
            self.lock.release()
        release = self._release_after_flush
        if release is not None and self._flush_timer is None:
            self.release_files(release)  # what the writer asked for while this flush was armed

    def active_segment_base(self) -> int | None:
        """The leader's active segment."""
        bases = self.leader.bases
        return bases[-1] if bases else None

    def _undo_follower_copies(self, base: int) -> list[int]:
        """The leader failed: the batch must not stay on followers alone (it was never
        acknowledged, and a follower elected next would commit it). Returns the indexes of the
        followers that could not be cut back: they must leave the ISR with the leader."""
        stuck = []
        for i, replica in enumerate(self.replicas[1:], start=1):
            try:
                if replica.log_end_offset > base:
                    replica.truncate_to(base)
            except (OSError, CorruptLogError):
                stuck.append(i)
        return stuck

    def publish(self) -> None:
        """Lock held: make everything appended so far visible to readers."""
        fields = self.state.read_valid_fields()
        replicas = self.replicas
        hw = replicas[0].log_end_offset if len(replicas) == 1 else min(r.log_end_offset for r in replicas)
        if fields is None:
            fields = (hw, 0, 0)
        elif fields[0] == hw:
            return  # (a writer's first open publishes what open_for_write just wrote: no second write)
        self.state.write_values((hw, *fields[1:]))

    def flush(self) -> None:
        for replica in self.replicas:
            replica.flush()

    def truncate_to(self, offset: int) -> None:
        with self.lock:
            self.open_for_write()
            for replica in self.replicas:
                replica.truncate_to(offset)
            self.publish()

    def set_log_start_offset(self, offset: int) -> None:
        with self.lock:
            snap = self.state.read()
            snap.log_start_offset = max(snap.log_start_offset, offset)
            self.state.write(snap, sync=True)

    # -- reading -------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int = PARTITION_READ_BYTES_DEFAULT,
             upper: int | None = None) -> list[FetchedBatch]:
        """Batches at or after `offset`, below the high watermark (and `upper` if given)."""
        batches = self._from_replicas(offset, upper, lambda replica, bound: replica.read(offset, bound, max_bytes),
                                      lambda got: (got[0].header, got[0].path, got[0].position), lambda got: None)
        return batches or []

    def byte_range(self, offset: int, max_bytes: int, upper: int | None = None,
                   snap: PartitionSnapshot | None = None, read_max: int = 0) -> ByteRange | None:
        """Like read(), but where the bytes are instead of the bytes (zero-copy fetch), with read()'s
        rules. (The batches after the first are sent as they lie in one segment file: Kafka's
        clients check their CRCs.) `snap`: the reader_snapshot() the caller just took for the
        same answer (a fetch's high watermark), so the state file is read once per partition.
        `read_max`: see PartitionLog.byte_range."""
        return self._from_replicas(offset, upper,
                                   lambda replica, bound: replica.byte_range(offset, bound, max_bytes, read_max),
                                   _RANGE_START, ByteRange.close, snap)

    def _from_replicas(self, offset: int, upper: int | None, ask: Callable[[PartitionLog, int], R | None],
                       first_of: Callable[[R], tuple[codec.BatchHeader, str | None, int]],
                       release: Callable[[R], None], snap: PartitionSnapshot | None = None) -> R | None:
        """What `ask(replica, bound)` reads from `offset` below the high watermark (and `upper`),
        from the leader or else the first in-sync replica that has the range intact (Kafka does
        not do this; klog does). The answer starts at `offset` (or the log start): a read that
        starts later, an I/O error, or a log that ends below the high watermark is an error,
        never an empty answer (a silent short read)."""
        if snap is None:
            snap = self.reader_snapshot()
        if snap.leader_epoch != self.leader_epoch_loaded and self.reload_replicas is not None:
            self.reload_replicas()
            # the state file's epoch, not the metadata's: a writer killed between writing the two
            # leaves them apart until the next write, and a reader must not reload on every fetch
            self.leader_epoch_loaded = snap.leader_epoch
        hw = snap.high_watermark
        bound = hw if upper is None else min(hw, upper)
        if offset >= bound:
            return None
        failure: KlogError | None = None
        for replica in self.replicas:
            try:
                got = ask(replica, bound)
            except CorruptLogError as e:
                failure = failure or e
                continue
            except StorageError:
                raise  # out of file descriptors: no replica is to blame
            except OSError as e:
                failure = failure or StorageError(f"cannot read {self.topic}-{self.partition} from "
                                                  f"{e.filename or replica.directory}: {e.strerror or e}")
                continue
            if not got:
                if self._in_cleaner_gap(replica, offset, bound, hw, ask, first_of, release):
                    return None  # [offset, upper) lies wholly in offsets compaction removed: nothing there
                continue
            first, path, position = first_of(got)
            if first.base_offset <= offset or offset < self._published_log_start() \
                    or replica.cleaner_gap_ok(path, position):
                return got
            release(got)
            failure = failure or CorruptLogError(f"offsets {offset}..{first.base_offset - 1} are missing", path,
                                                 position, first.base_offset)
        if failure is not None:
            raise failure
        if offset < self._published_log_start():
            return None  # retention or delete-records moved the start past `offset` meanwhile
        # every replica ends below the high watermark: records were acknowledged that no log holds
        raise CorruptLogError(f"the log of {self.topic}-{self.partition} ends before its high watermark {hw}: "
                              f"offsets from {offset} are missing", self.leader.directory)

    def _in_cleaner_gap(self, replica: PartitionLog, offset: int, bound: int, hw: int,
                        ask: Callable[[PartitionLog, int], R | None],
                        first_of: Callable[[R], tuple[codec.BatchHeader, str | None, int]],
                        release: Callable[[R], None]) -> bool:
        """Nothing below `bound` (an upper bound under the high watermark: a read of a window, as
        consume --last reads back): is that a compacted log's gap (the next batch starts at `bound`
        or later, where its cleaner may have removed offsets), not a log that ends too soon?"""
        if bound >= hw or not replica.cleaner_gaps:
            return False
        try:
            got = ask(replica, hw)
        except (CorruptLogError, OSError):
            return False  # no answer here: the caller goes on to the next replica, or reports the range missing
        if not got:
            return False
        first, path, position = first_of(got)
        release(got)
        return first.base_offset >= bound and replica.cleaner_gap_ok(path, position)

    def _published_log_start(self) -> int:
        """The log start offset as retention and delete-records published it (the state file)."""
        return self.reader_snapshot().log_start_offset

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        hw = self.high_watermark()
        return self._first_readable(lambda r: r.offset_for_timestamp(timestamp, hw), None)

    def _present_replicas(self) -> list[PartitionLog]:
        """Leader first, leaving out replicas whose folder is gone (a deleted log directory
        lists as empty, which is not the same as holding nothing)."""
        present = [r for r in self.replicas if os.path.isdir(r.directory)]
        return present or self.replicas[:1]

    def size_bytes(self) -> int:
        return self._first_readable(lambda r: r.size_bytes(), 0)

    def close(self) -> None:
        self.settle_states()  # (the next writer, in any process, then adopts the logs without a check)
        self._closed = True
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        # the lock first: it waits for a writer holding it (an append, a flush) to finish, and any
        # later one gets PartitionClosedError instead of writing through closed descriptors
        self.lock.close()
        for replica in self.replicas:
            replica.close()
        self.state.close()

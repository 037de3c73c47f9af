"""Store: an open data directory — topic administration and the partitions behind them."""

from __future__ import annotations

import functools
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from klog.broker.resolve import resolve_topic_names
from klog.client.store_groups import GroupAdminMethods
from klog.errors import (
    CorruptLogError,
    KlogError,
    StorageError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
    log_warning,
)
from klog.meta.db import MetaDB
from klog.meta.topics import PARTITIONS_MAX, TopicMeta, TopicsMeta
from klog.store.config import LogConfig
from klog.store.format import partition_dir_name
from klog.store.layout import DataDir, default_data_dir
from klog.store.names import partition_file_stem, validate_topic_name
from klog.store.partition import Partition
from klog.store.plain import Plain

if TYPE_CHECKING:
    from klog.client.consumer import Consumer
    from klog.client.group import GroupConsumer
    from klog.client.producer import Producer
    from klog.client.replay import Replayer


class PartitionInfo(Plain):
    _fields = __match_args__ = ("partition", "leader", "replicas", "isr", "leader_epoch", "log_start_offset",
                                "high_watermark", "log_end_offset", "size_bytes", "segments", "replica_log_end",
                                "move")

    def __init__(self, partition: int, leader: int, replicas: list[int], isr: list[int], leader_epoch: int,
                 log_start_offset: int, high_watermark: int, log_end_offset: int, size_bytes: int, segments: int,
                 replica_log_end: dict[int, int] | None = None, move: list[int] | None = None) -> None:
        self.partition = partition
        self.leader = leader
        self.replicas = replicas
        self.isr = isr
        self.leader_epoch = leader_epoch
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.log_end_offset = log_end_offset
        self.size_bytes = size_bytes
        self.segments = segments
        self.replica_log_end = {} if replica_log_end is None else replica_log_end
        # [from, to]: a replica move recorded and not settled yet (the partition's next write settles it)
        self.move = move


class TopicInfo(Plain):
    _fields = __match_args__ = ("name", "topic_id", "partitions", "replication_factor", "configs")

    def __init__(self, name: str, topic_id: str, partitions: list[PartitionInfo], replication_factor: int,
                 configs: dict[str, str]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.configs = configs  # only the ones set on the topic

    @property
    def offsets(self) -> int:
        """The offsets between each partition's log start and high watermark, summed: at most the
        records a consumer gets from the beginning (transaction markers, compaction and discarded
        damage leave offsets that hold no record)."""
        return sum(p.high_watermark - p.log_start_offset for p in self.partitions)

    @property
    def records(self) -> int:
        """Deprecated: `offsets` (the same sum; it never counted records)."""
        warnings.warn("TopicInfo.records is deprecated: use TopicInfo.offsets (offsets summed, not a "
                      "record count)", DeprecationWarning, stacklevel=2)
        return self.offsets

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions)


class Store(GroupAdminMethods):
    """Open (creating if needed) the klog store at `path` (default: $KLOG_DATA_DIR or XDG).

    `on_warning` receives what happens to replicas behind a call's back (a directory leaving the
    ISR, a new leader, a catch-up); by default the `klog` logger; the CLI prints it on stderr.
    """

    def __init__(self, path: str | None = None, create: bool = True, log_dirs: list[str] | None = None,
                 on_warning: Callable[[str], None] | None = None, read_only: bool = False) -> None:
        self.warn = on_warning or log_warning
        self.read_only = read_only
        self.data_dir = DataDir.open(default_data_dir() if path is None else path, create=create,
                                     log_dirs=log_dirs, read_only=read_only)
        self.path = self.data_dir.path
        self.meta = MetaDB(self.data_dir.meta_dir, read_only=read_only)
        self.topics = TopicsMeta(self.meta)
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._topic_cache: dict[str, TopicMeta] = {}
        # topic -> (the TopicMeta it was parsed from, its LogConfig): re-parsed when the metadata is re-read
        self._log_configs: dict[str, tuple[TopicMeta, LogConfig]] = {}
        self.kafka_checkpoints_due = False  # a write happened that Kafka's checkpoint files must show
        # Topic lifecycle across this process's threads (klog serve answers requests in a pool):
        # partitions are opened and forgotten under _opening; a topic being deleted opens no new
        # partition; creates and deletes of one name run one at a time (_name_lock)
        self._opening = threading.Lock()
        self._deleting: set[str] = set()
        self._name_locks: dict[str, threading.Lock] = {}

    def _name_lock(self, name: str) -> threading.Lock:
        with self._opening:
            lock = self._name_locks.get(name)
            if lock is None:
                lock = self._name_locks[name] = threading.Lock()
            return lock

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        written = {key for key, p in self._partitions.items() if p.last_recovery}
        if self.kafka_checkpoints_due or written:
            # only the written partitions' lines, unless topics or log starts changed meanwhile
            self.write_kafka_checkpoints(None if self.kafka_checkpoints_due else written)
            self.kafka_checkpoints_due = False
        for p in self._partitions.values():
            p.close()
        self._partitions.clear()
        self.meta.close()

    def write_kafka_checkpoints(self, only: set[tuple[str, int]] | None = None) -> None:
        """Kafka's checkpoint files in every log directory and partition folder (a broker can
        adopt the directories), or only the lines and folders of the partitions `only` names;
        see klog.broker.kafka_checkpoints. Failures warn: they never undo or fail the write that
        made them due."""
        from klog.broker.kafka_checkpoints import write_kafka_checkpoints

        for key, p in list(self._partitions.items()):
            if only is None or key in only:
                p.settle_states()  # the replica state files the recovery points and log ends are read from
        try:
            write_kafka_checkpoints(self, only)
        except (OSError, KlogError) as e:
            self.warn(f"cannot update Kafka's checkpoint files: {e}")

    # -- topics ------------------------------------------------------------------------------
    def log_dir_ids(self) -> list[int]:
        """The store's log directories as klog.json has them now (one stat when unchanged): another
        process's `klog dirs add/remove` is seen by a long-running one (klog serve)."""
        self.data_dir.refresh()
        return [d.id for d in self.data_dir.log_dirs]

    def healthy_log_dir_ids(self) -> list[int]:
        """The log directories new replicas may go to (a missing, read-only or full one may not), in
        klog.json as it is now (log_dir_ids). A placement holds data_dir.log_dirs_lock() (shared)
        from this look to the metadata write."""
        from klog.broker.replication import dir_health
        from klog.store import health

        return [d for d in self.log_dir_ids() if dir_health(self, d) in (health.OK, health.REPLACED)]

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None, exist_ok: bool = False,
                     adopt_folders: bool = False) -> TopicMeta:
        """`adopt_folders`: partition folders already there are the topic's own (`klog dirs import`
        adopting a Kafka broker's folders in place); otherwise they are refused as leftovers."""
        validate_topic_name(name)  # before any folder is looked for under it ('\0', '../x')
        partitions = partitions if partitions is not None else int(self.data_dir.default("num.partitions"))
        rf = replication_factor if replication_factor is not None else int(
            self.data_dir.default("default.replication.factor"))
        with self._name_lock(name):  # never while a delete of the name is under way
            # the existence check first: an existing topic's own folders are not leftovers
            # (Kafka answers TOPIC_ALREADY_EXISTS, and frameworks creating their topics at start expect it)
            exists = self.topics.find(name) is not None
            if exists and not exist_ok:
                raise TopicExistsError(f"topic '{name}' already exists")
            if not adopt_folders and not exists:
                self._refuse_leftover_folders(name, range(min(partitions, PARTITIONS_MAX)))
            # (a `dirs remove` forgets a directory under the exclusive lock, after a last look at the metadata)
            with self.data_dir.log_dirs_lock():
                topic = self.topics.create(name, partitions, rf, configs or {}, self.healthy_log_dir_ids(),
                                           exist_ok=exist_ok)
            self._topic_cache.pop(name, None)
        self.kafka_checkpoints_due = True
        return topic

    def cached_topic(self, name: str) -> TopicMeta | None:
        """The topic's metadata if this Store holds it already, reading nothing."""
        return self._topic_cache.get(name)

    def opened_partitions(self) -> dict:
        """The partitions open in this Store, by (topic, partition): a look that never opens one
        (`partition()` opens files and reads metadata), for the event loop."""
        return self._partitions

    def topic(self, name: str) -> TopicMeta:
        cached = self._topic_cache.get(name)
        if cached is None:
            validate_topic_name(name)
            cached = self.topics.get(name)
            self._topic_cache[name] = cached
        return cached

    def has_topic(self, name: str) -> bool:
        return self.topics.find(name) is not None

    def list_topics(self) -> list[TopicMeta]:
        return self.topics.list()

    def topic_names(self) -> list[str]:
        return [t.name for t in self.topics.list()]

    def auto_create_enabled(self) -> bool:
        return self.data_dir.default("auto.create.topics.enable") == "true"

    def alter_topic(self, name: str, partitions: int | None = None, set_configs: dict[str, str] | None = None,
                    delete_configs: Iterable[str] = ()) -> TopicMeta:
        topic = self.topics.get(name)
        if partitions is not None and partitions != len(topic.partitions):
            self._refuse_leftover_folders(name, range(len(topic.partitions), min(partitions, PARTITIONS_MAX)))
            with self.data_dir.log_dirs_lock():  # (as create_topic's placement)
                topic = self.topics.add_partitions(name, partitions, self.healthy_log_dir_ids())
        if set_configs or delete_configs:
            topic = self.topics.update_configs(name, set_configs or {}, list(delete_configs))
        self.forget_topic(name)
        return topic

    def delete_topic(self, name: str) -> TopicMeta:
        """Delete a topic's records and metadata; never half: the partition folders are first
        renamed aside (`.<topic id>.<partition>.deleting`, as Kafka renames to `-delete`), and if one cannot be, the
        others are put back and nothing is deleted. Only then does the metadata go, and the
        renamed folders are removed; any file that cannot be is named in a StorageError (a
        folder under its `.deleting` name is never read as the topic again).

        In this process, no partition of the topic is opened meanwhile, its open partitions are
        closed once no thread is writing them, and creates of the name wait for the delete."""
        with self._name_lock(name):
            with self._opening:
                self._deleting.add(name)
            try:
                return self._delete_topic(name)
            finally:
                with self._opening:
                    self._deleting.discard(name)
                    self._topic_cache.pop(name, None)  # a stale copy cached while it went

    def _delete_topic(self, name: str) -> TopicMeta:
        from contextlib import ExitStack

        from klog.broker.writer import open_partitions_max
        from klog.store.locks import FileLock

        topic = self.topics.get(name)
        open_partitions_max()  # (raises the descriptor limit: one lock file is held per partition)
        self.forget_topic(name)
        self.kafka_checkpoints_due = True
        with ExitStack() as held:
            # Every partition's lock, in partition order, across the renames and the metadata
            # delete: a writer in any process then either finished its append before, or finds
            # the topic gone under its lock (it reads the metadata there) and never brings a
            # folder or state file back. (Another process may add partitions meanwhile: their
            # locks are taken too.)
            locks: list[FileLock] = []
            while True:
                for p in range(len(locks), len(topic.partitions)):
                    lock = FileLock(os.path.join(self.data_dir.lock_dir, partition_dir_name(name, p) + ".lock"))
                    held.enter_context(lock)
                    locks.append(lock)
                now = self.topics.find(name)
                if now is None or now.topic_id != topic.topic_id:
                    raise UnknownTopicError(f"unknown topic '{name}' (deleted meanwhile by another process)")
                topic = now
                if len(topic.partitions) <= len(locks):
                    break
            moved = self._move_partition_folders_aside(name, topic)
            left = self._remove_partition_files(name, topic, (".state", ".cleaner", ".txnview", ".txnview.tmp"))
            self.topics.delete(name)
            # unlinked while held: a writer waiting on one locks the file then at the path (FileLock)
            left += self._remove_partition_files(name, topic, (".lock",))
        for _, aside in moved:
            import shutil

            shutil.rmtree(aside, onerror=lambda _f, path, exc: left.append(f"{path}: {exc[1].strerror or exc[1]}"))
        if left:
            raise StorageError(f"deleted topic '{name}', but could not remove {len(left)} file(s): {left[0]}"
                               + (f" (and {len(left) - 1} more)" if len(left) > 1 else ""))
        return topic

    def _move_partition_folders_aside(self, name: str, topic: TopicMeta) -> list[tuple[str, str]]:
        """Rename every replica folder of the topic to `.<topic id>.<partition>.deleting`, or, if
        one cannot be, put the others back and raise StorageError."""
        moved: list[tuple[str, str]] = []
        known = {d.id for d in self.data_dir.log_dirs}
        for p, pm in enumerate(topic.partitions):
            # and the folder a move cut short left to delete (PartitionMeta.move), if its directory is still known
            left_by_move = [d for d in pm.move or () if d not in pm.replicas and d in known]
            for d in [*pm.replicas, *left_by_move]:
                folder = os.path.join(self.data_dir.log_dir_path(d), partition_dir_name(name, p))
                # short, whatever the topic's length; never parses as a partition folder
                aside = os.path.join(os.path.dirname(folder), f".{topic.topic_id}.{p}.deleting")
                try:
                    os.rename(folder, aside)
                except FileNotFoundError:
                    continue
                except OSError as e:
                    for old, new in reversed(moved):
                        os.rename(new, old)
                    raise StorageError(f"cannot delete topic '{name}': {folder}: {e.strerror}; "
                                       f"nothing was deleted") from None
                moved.append((folder, aside))
        return moved

    def _remove_partition_files(self, name: str, topic: TopicMeta, suffixes: tuple[str, ...]) -> list[str]:
        """Unlink the topic's files of these suffixes in state/ and locks/; what could not be, described."""
        left: list[str] = []
        for p in range(len(topic.partitions)):
            stem = partition_file_stem(name, p)
            for suffix in suffixes:
                folder = self.data_dir.lock_dir if suffix == ".lock" else self.data_dir.state_dir
                try:
                    os.unlink(os.path.join(folder, stem + suffix))
                except FileNotFoundError:
                    pass
                except OSError as e:
                    left.append(f"{os.path.join(folder, stem + suffix)}: {e.strerror}")
        return left

    def _refuse_leftover_folders(self, name: str, partitions: range) -> None:
        """A folder of one of the partitions about to be created (or added), holding files, in any
        log directory: its metadata was lost (an emptied data.mdb) or a delete was cut short.
        Creating the partition over it would bring old records back as new ones. Only those
        folders are looked for (not a listing of the log directory, which grows with the store)."""
        for log_dir in self.data_dir.log_dirs:
            root = self.data_dir.log_dir_path(log_dir.id)
            for p in partitions:
                folder = os.path.join(root, partition_dir_name(name, p))
                try:
                    held = os.listdir(folder)
                except OSError:  # none there (or not a folder: the partition's creation will say)
                    continue
                if held:
                    raise StorageError(f"cannot create partition {name}-{p}: {folder} already holds a "
                                       f"partition no metadata names (lost metadata?); move it away first")

    def forget_topic_metadata(self, name: str) -> None:
        """Metadata changed underneath (ISR, leader): re-read it next time."""
        self._topic_cache.pop(name, None)

    def forget_topic(self, name: str) -> None:
        """Drop everything cached about the topic, its open partitions closed (altered, deleted, or
        deleted and created again by another process: the open files are the old topic's);
        forget_topic_metadata drops only the metadata."""
        with self._opening:
            self._topic_cache.pop(name, None)
            gone = [self._partitions.pop(k) for k in [k for k in self._partitions if k[0] == name]]
        for part in gone:  # outside the lock: close waits for a writer of the partition to finish
            part.close()

    def effective_configs(self, name: str) -> dict[str, str]:
        return self.topic(name).effective_configs()

    def log_config(self, name: str) -> LogConfig:
        """The topic's configs, every key typed (parsed once per read of its metadata)."""
        topic = self.topic(name)
        cached = self._log_configs.get(name)
        if cached is None or cached[0] is not topic:
            cached = (topic, LogConfig.from_configs(topic.configs))
            self._log_configs[name] = cached
        return cached[1]

    # -- partitions --------------------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> Partition:
        found = self._partitions.get((topic, partition))
        if found is not None:
            return found
        with self._opening:
            found = self._partitions.get((topic, partition))
            if found is not None:
                return found
            meta, config = self._opening_meta(topic)
            return self._open_partition(topic, partition, meta, config)

    def open_partitions(self, topic: str, partitions: Iterable[int]) -> None:
        """Open those of `partitions` not open yet, reading and parsing the topic's metadata once
        for them all (partition() reads it for each: a first write into 1,000 partitions read and
        parsed a 1,000-partition topic 1,000 times)."""
        missing = [p for p in partitions if (topic, p) not in self._partitions]
        if not missing:
            return
        with self._opening:
            meta, config = self._opening_meta(topic)
            places = (self.data_dir.state_dir, self.data_dir.lock_dir, {})  # (once for them all)
            for partition in missing:
                if (topic, partition) not in self._partitions:
                    self._open_partition(topic, partition, meta, config, places)

    def _opening_meta(self, topic: str) -> tuple[TopicMeta, LogConfig]:
        """Under _opening: the topic's metadata as it is now, not a cached copy another thread may
        have read before a delete (a partition of a deleted topic opened here would bring its
        folder back), and its configs."""
        if topic in self._deleting:
            raise UnknownTopicError(f"unknown topic '{topic}' (being deleted)")
        validate_topic_name(topic)
        # klog.json as it is now (one stat when unchanged): a topic placed in a directory another process
        # added since this Store opened (or removed and added again: its id, another path)
        self.data_dir.refresh()
        meta = self._topic_cache[topic] = self.topics.get(topic)
        return meta, self.log_config(topic)

    def _open_partition(self, topic: str, partition: int, meta: TopicMeta, config: LogConfig,
                        places: tuple[str, str, dict[int, str]] | None = None) -> Partition:
        """places: the state and lock directories and a cache of log directory paths by id, for a
        caller that opens many partitions."""
        if not 0 <= partition < len(meta.partitions):
            raise UnknownPartitionError(f"topic '{topic}' has no partition {partition} "
                                        f"(it has {len(meta.partitions)})")
        pm = meta.partitions[partition]
        if places is None:
            places = (self.data_dir.state_dir, self.data_dir.lock_dir, {})
        p = Partition(topic, partition, self._leader_and_isr_dirs(pm, places[2]), places[0], places[1], config)
        # the epoch readers compare with (see Partition.read): the metadata's the replica list was
        # built from (no read of the state file per partition opened; one that lags the metadata,
        # a writer killed between the two, costs one reload)
        p.leader_epoch_loaded = pm.leader_epoch
        # (one object, not a closure's three; the partition by a weak reference: a strong one, held
        # by the partition itself, was a reference cycle per partition that only the cyclic GC frees,
        # so every partition's objects were walked once more at exit, ~15 k instructions each)
        p.reload_replicas = functools.partial(self._reload_replicas, weakref.ref(p))
        self._partitions[(topic, partition)] = p
        return p

    def opened_partition(self, topic: str, partition: int) -> Partition | None:
        """The partition if this Store has it open, else None (nothing is opened)."""
        return self._partitions.get((topic, partition))

    def _leader_and_isr_dirs(self, pm, paths: dict[int, str] | None = None) -> list[str]:
        """paths: log directory paths already looked up, by id (filled in here)."""
        leader = pm.leader
        if paths is None:
            paths = {}
        path = paths.get(leader)
        if path is None:
            path = paths[leader] = self.data_dir.log_dir_path(leader)
        if len(pm.replicas) == 1:
            return [path]  # (the usual case)
        order = [r for r in pm.replicas if r != leader and r in pm.isr]
        return [path] + [self.data_dir.log_dir_path(d) for d in order]

    def _reload_replicas(self, partition: weakref.ref[Partition]) -> None:
        """A writer elected a new leader since `partition` was opened: read from the new leader
        and ISR (a deposed leader may hold a batch nobody else has, above what was committed)."""
        part = partition()
        if part is None:  # (gone: nobody reads it)
            return
        self.forget_topic_metadata(part.topic)
        self.data_dir.refresh()  # (as _opening_meta: the new leader may be in a directory added since)
        pm = self.topic(part.topic).partitions[part.partition]
        part.set_replica_dirs(self._leader_and_isr_dirs(pm))

    def partition_count(self, topic: str) -> int:
        return len(self.topic(topic).partitions)

    def describe_topic(self, name: str) -> TopicInfo:
        topic = self.topics.get(name)
        self._topic_cache[name] = topic
        parts = []
        for i, pm in enumerate(topic.partitions):
            p = self.partition(name, i)
            snap = p.snapshot()
            leader = p.leader
            leader.refresh_segments()
            replica_ends = self._replica_log_ends(name, i, pm, p)
            parts.append(PartitionInfo(
                i, pm.leader, pm.replicas, pm.isr, pm.leader_epoch, p.log_start_offset(), snap.high_watermark,
                replica_ends.get(pm.leader, snap.high_watermark), p.size_bytes(), len(leader.bases), replica_ends,
                None if pm.move is None else list(pm.move)))
        return TopicInfo(name, topic.topic_id, parts, topic.replication_factor, dict(topic.configs))

    def _replica_log_ends(self, topic: str, partition: int, pm, part: Partition) -> dict[int, int]:
        """Every replica's log end, the out-of-sync ones too (a replica whose directory cannot be
        read is left out)."""
        from klog.store.log import PartitionLog

        open_logs = {os.path.dirname(r.directory): r for r in part.replicas}
        ends: dict[int, int] = {}
        for d in pm.replicas:
            try:
                root = self.data_dir.log_dir_path(d)
                replica = open_logs.get(root)
                if replica is not None:
                    ends[d] = _log_end(replica)
                    continue
                folder = os.path.join(root, partition_dir_name(topic, partition))
                if not os.path.isdir(folder):
                    continue
                replica = PartitionLog(folder, part.config)
                try:
                    ends[d] = _log_end(replica)
                finally:
                    replica.close()
            except (OSError, KlogError):
                continue
        return ends

    def offsets(self, topic: str, timestamp: int | None = None, committed: bool = False) -> dict[int, int | None]:
        """Per partition: earliest (timestamp -2), latest (None or -1), or first offset at a time;
        `committed`: latest as a read_committed consumer sees it (the last stable offset)."""
        out: dict[int, int | None] = {}
        for i in range(self.partition_count(topic)):
            p = self.partition(topic, i)
            if timestamp == -2:
                out[i] = p.log_start_offset()
            elif (timestamp is None or timestamp == -1) and committed:
                from klog.broker.offsets import last_stable_offset

                out[i] = last_stable_offset(p)
            elif timestamp is None or timestamp == -1:
                out[i] = p.high_watermark()
            else:
                found = p.offset_for_timestamp(timestamp)  # never below the log start (delete-records)
                out[i] = None if found is None else max(found, p.log_start_offset())
        return out

    def resolve_topics(self, topics: Iterable[str] = (), pattern: str | None = None) -> list[str]:
        return resolve_topic_names(self, topics, pattern)

    # -- clients -----------------------------------------------------------------------------
    def producer(self, transactional_id: str | None = None, **kwargs: Any) -> Producer:
        """A producer; with `transactional_id`, a transactional one (klog.client.transactional)."""
        if transactional_id is not None:
            from klog.client.transactional import TransactionalProducer

            return TransactionalProducer(self, transactional_id, **kwargs)
        from klog.client.producer import Producer

        return Producer(self, **kwargs)

    # -- transactions (klog.client.transactional) -------------------------------------------------
    def list_transactions(self) -> list:
        """Every transactional id's coordinator state (klog.meta.transactions.TxnMetadata)."""
        from klog.client.transactional import list_transactions

        return list_transactions(self)

    def describe_transaction(self, transactional_id: str):  # noqa: ANN201 - TxnMetadata
        from klog.client.transactional import describe_transaction

        return describe_transaction(self, transactional_id)

    def abort_transaction(self, transactional_id: str) -> bool:
        """Abort a hanging transaction (ABORT markers, its producer fenced); False if none was open."""
        from klog.client.transactional import abort_transaction

        return abort_transaction(self, transactional_id, warn=self.warn)

    def find_hanging_transactions(self, topic: str | None = None, partition: int | None = None,
                                  max_timeout_ms: int | None = None) -> list:
        """Open transactions no coordinator will end (KIP-664's find-hanging): klog.broker.hanging."""
        from klog.client.transactional import find_hanging_transactions

        return find_hanging_transactions(self, topic, partition, max_timeout_ms, warn=self.warn)

    def abort_open_transaction(self, topic: str, partition: int, start_offset: int):  # noqa: ANN201 - OpenTransaction
        """ABORT the hanging transaction starting at `start_offset` in the partition (its marker only)."""
        from klog.client.transactional import abort_open_transaction

        return abort_open_transaction(self, topic, partition, start_offset, warn=self.warn)

    def consumer(self, *topics: str, **kwargs: Any) -> Consumer:
        from klog.client.consumer import Consumer

        return Consumer(self, list(topics), **kwargs)

    # -- lifecycle (klog.broker.lifecycle, klog.client.replay) -----------------------------------
    def replayer(self, source: str, dest: str | None = None, **kwargs: Any) -> Replayer:
        from klog.client.replay import Replayer

        return Replayer(self, source, dest, **kwargs)

    def clean(self, topic: str | None = None, **kwargs) -> list:
        """Retention now (and compaction where due); see klog.broker.lifecycle.clean."""
        from klog.broker.lifecycle import clean

        self.kafka_checkpoints_due = True  # the log start may move
        return clean(self, topic, **kwargs)

    def compact(self, topic: str, **kwargs) -> list:
        from klog.broker.lifecycle import compact

        return compact(self, topic, **kwargs)

    def delete_records(self, topic: str, **kwargs) -> list:
        from klog.broker.lifecycle import delete_records

        self.kafka_checkpoints_due = True
        return delete_records(self, topic, **kwargs)

    def dirty_ratio(self, topic: str, partition: int) -> float:
        from klog.broker.lifecycle import dirty_ratio

        return dirty_ratio(self, topic, partition)

    def group_consumer(self, group: str, *topics: str, **kwargs: Any) -> GroupConsumer:
        """Join consumer group `group` reading `topics` (see klog.client.group)."""
        from klog.client.group import GroupConsumer

        return GroupConsumer(self, group, list(topics), **kwargs)

    # -- security state klog serve enforces (users, ACLs, quotas: klog.meta) -------------------
    @property
    def credentials(self):  # noqa: ANN201 - klog.meta.credentials.CredentialsMeta
        """SCRAM users: add, list (never a password), delete."""
        from klog.meta.credentials import CredentialsMeta

        return CredentialsMeta(self.meta)

    @property
    def acls(self):  # noqa: ANN201 - klog.meta.acls.AclsMeta
        """ACL bindings and the authorizer's settings (super users, allow when none match)."""
        from klog.meta.acls import AclsMeta

        return AclsMeta(self.meta)

    @property
    def quotas(self):  # noqa: ANN201 - klog.meta.quotas.QuotasMeta
        """Client quotas per user / client id."""
        from klog.meta.quotas import QuotasMeta

        return QuotasMeta(self.meta)

    # -- administration (groups: GroupAdminMethods; the work is in the modules named) -----------
    def reassign(self, topic: str, source: int, target: int, partitions: Iterable[int] | None = None) -> list[int]:
        """Move the replicas of `topic` (those of `partitions`, default every one with a replica in log
        directory `source`) to log directory `target`, each caught up before the old one goes; returns
        the partitions moved (klog.broker.replication.move_replica)."""
        from klog.broker.replication import move_replica

        meta = self.topic(topic)
        parts = list(partitions) if partitions is not None else [
            i for i, p in enumerate(meta.partitions) if source in p.replicas or p.move == [source, target]]
        for p in parts:
            move_replica(self, topic, p, source, target)
        return parts

    def verify(self, topic: str | None = None, repair: bool = False) -> list[dict]:
        """Check every batch's CRC and every index (of `topic`, default all); see klog.broker.verify."""
        from klog.broker.verify import verify_store

        return verify_store(self, topic, repair=repair)

    def list_dirs(self) -> list:
        """Each log directory's health, size and replica counts (klog.broker.dirs.LogDirInfo)."""
        from klog.broker.dirs import list_dirs

        return list_dirs(self)

    def add_dir(self, path: str):  # noqa: ANN201 - a klog.broker.dirs.LogDirInfo
        from klog.broker.dirs import add_dir

        return add_dir(self, path)

    def remove_dir(self, log_dir_id: int) -> int:
        """Move every replica off a log directory, then remove it; returns the replicas moved."""
        from klog.broker.dirs import remove_dir

        return remove_dir(self, log_dir_id)

    def partition_folders(self, name: str) -> list[str] | None:
        """The leader replica folders `name` means: TOPIC (each partition's), TOPIC-P, or
        <log dir>/TOPIC-P; only folders that exist (a partition never written has none). None when
        `name` is neither a topic nor a partition of this store."""
        given = os.path.abspath(name)  # abspath also drops a trailing slash
        parent = os.path.realpath(os.path.dirname(given))
        if any(parent == os.path.realpath(self.data_dir.log_dir_path(d)) for d in self.log_dir_ids()):
            name = os.path.basename(given)
        if self.has_topic(name):
            folders = [self.partition(name, p).leader.directory for p in range(self.partition_count(name))]
        else:
            topic, _, number = name.rpartition("-")
            if not (topic and number.isdigit() and self.has_topic(topic)):
                return None
            folders = [self.partition(topic, int(number)).leader.directory]
        return [f for f in folders if os.path.isdir(f)]


def _log_end(replica) -> int:
    """A replica's log end: from the state its writer left, else by scanning the last segment."""
    snap = replica.state.read()
    replica.refresh_segments()
    if not replica.bases:
        return 0
    seg = replica.segments[replica.bases[-1]]
    end = seg.file_size()
    if snap is not None and snap.active_base == seg.base_offset and snap.valid_size <= end:
        # the writer lets the state lag a few batches (klog.store.log.STATE_LAG_BATCHES_MAX): walk those
        last_end = snap.log_end_offset
        try:
            for _, header in seg.iter_headers(snap.valid_size, end):
                last_end = header.next_offset
            return last_end
        except CorruptLogError:
            pass  # not where a batch starts: a stale state (the scan below decides)
    last = None
    for _, header in seg.pinned_headers(end):  # (a roll and a compaction may come during a long walk)
        last = header
    return last.next_offset if last else seg.base_offset


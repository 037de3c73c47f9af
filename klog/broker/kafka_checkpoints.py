"""Keep Kafka's checkpoint files current, so a Kafka broker can adopt klog's log directories.

Written when a Store that wrote (appended, moved a log start, created or deleted a topic) is
closed, and by `klog dirs checkpoint`; each file is rewritten only when its content changed
(store/checkpoints.py: tmp file, fsync, rename). Per log directory:
`recovery-point-offset-checkpoint` (each replica's recovery point), `replication-offset-checkpoint`
(the high watermark, capped at the replica's log end), `log-start-offset-checkpoint` (only
partitions whose log start is above their first segment, as Kafka lists them) and
`meta.properties` (written once: version=1, node.id=1, a cluster.id and the directory.id).
Per partition folder: `leader-epoch-checkpoint` (klog's leader epochs) and `partition.metadata`
(the topic id).
"""

from __future__ import annotations

import os
import time
import zlib
from typing import TYPE_CHECKING

from klog.errors import KlogError
from klog.store import checkpoints, health
from klog.store.format import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    parse_segment_base,
    partition_dir_name,
)
from klog.store.state import PartitionState, ReplicaSnapshot, ReplicaState

if TYPE_CHECKING:
    from klog.broker.store_protocol import BrokerStore
    from klog.store.syncfs import SyncedTogether

META_PROPERTIES = "meta.properties"
NODE_ID = 1  # a single broker; a broker adopting the directory with another node.id edits this line


def _first_base(folder: str) -> int | None:
    bases = [b for n in os.listdir(folder) if n.endswith(LOG_SUFFIX) and (b := parse_segment_base(n)) is not None]
    return min(bases) if bases else None


def _write_if_changed(path: str, text: str, synced: set[str] | None = None) -> bool:
    """`synced`: write without fsyncs and add the log directory to it (the caller syncs each
    once: a new partition's two files cost four fsyncs, 4,000 for a producer's first write into
    1,000 partitions); None: fsynced here."""
    wanted = text.encode()
    try:  # (bytes through a bare descriptor: a text-mode open cost ~4 times as much, twice per partition)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.pread(fd, len(wanted) + 1, 0) == wanted:
                return False
        finally:
            os.close(fd)
    except OSError:
        pass
    checkpoints.write_atomically(path, text, sync=synced is None)
    if synced is not None:
        synced.add(path)
    return True


def _sync_written(together: SyncedTogether | None, written: set[str]) -> None:
    """One syncfs per filesystem for the files written without fsync (`together`: opened on the
    log directories before the writes, so a writeback error among them is reported), or an fsync
    each where syncfs is missing."""
    if not written:
        return
    if together is not None:
        together.sync({d for d in together.fds if any(w.startswith(d + os.sep) for w in written)})
        return
    for path in sorted(written):
        checkpoints.fsync_path(path)


def _synced_together(store: BrokerStore) -> SyncedTogether | None:
    from klog.store import syncfs

    if not syncfs.available():
        return None
    return syncfs.SyncedTogether([store.data_dir.log_dir_path(d) for d in store.log_dir_ids()])


def write_kafka_checkpoints(store: BrokerStore, only: set[tuple[str, int]] | None = None) -> None:
    """Bring every log directory's and partition folder's Kafka checkpoint files up to date.

    `only`: the partitions written since the files were last brought up to date (a producer's
    close): only their folders are visited and only their lines of the log directories' files
    change, so the cost follows what was written, not the size of the store. A log directory
    file that cannot be read as a checkpoint is rewritten from a walk of every partition."""
    together = _synced_together(store)
    try:
        _write_kafka_checkpoints(store, only, together)
    finally:
        if together is not None:
            together.close()


def _write_kafka_checkpoints(store: BrokerStore, only: set[tuple[str, int]] | None,
                             together: SyncedTogether | None) -> None:
    dirs = store.log_dir_ids()
    recovery: dict[int, dict[tuple[str, int], int]] = {d: {} for d in dirs}
    replication: dict[int, dict[tuple[str, int], int]] = {d: {} for d in dirs}
    log_start: dict[int, dict[tuple[str, int], int]] = {d: {} for d in dirs}
    if only is not None:
        try:
            known = {d: _read_dir_checkpoints(store, d) for d in dirs}
        except (KlogError, OSError):
            only = None  # a missing or foreign file: the full walk writes it afresh
        else:
            for d, (rec, rep, start) in known.items():
                recovery[d], replication[d], log_start[d] = rec, rep, start
                for offsets in (rec, rep, start):
                    for key in only:  # (no tuple built per partition)
                        offsets.pop(key, None)  # rewritten below where the replica is in this directory
    topics = [(t, range(len(t.partitions))) for t in store.list_topics()] if only is None else _topics_of(store, only)
    unsynced: set[str] = set()  # the partition folders' files: made durable together below
    # (once, not per replica; with the separator a partition folder's name follows: no join per folder)
    dir_prefixes = {d: os.path.join(store.data_dir.log_dir_path(d), "") for d in dirs}
    opened_partitions = store.opened_partitions()  # (a look that opens none)
    for topic, partitions in topics:
        topic_name = topic.name
        try:
            topic_id = checkpoints.kafka_uuid(topic.topic_id)
        except (ValueError, TypeError, AttributeError):
            topic_id = None  # not a UUID (an old store's id): no partition.metadata
        metadata = f"version: 0\ntopic_id: {topic_id}\n" if topic_id is not None else ""
        # (epochs text, digest) by the epochs a partition's folder lists: most partitions of a
        # topic list the same ones (its first epoch only), worked out once for them
        texts: dict[tuple[tuple[int, int], ...], tuple[str, int]] = {}
        for p in partitions:
            pm = topic.partitions[p]
            key = (topic_name, p)
            part = opened_partitions.get(key)
            written: dict[str, ReplicaSnapshot] = {}
            known = None
            if part is not None:
                # the states as this process's last append left them, while nobody else wrote since
                # (no read of the state files, nor a look for the folders: they were just written)
                known = part.written_states()
                if known is not None:
                    (high_watermark, log_start_offset, _), written = known
                else:
                    snap = part.snapshot()
                    high_watermark, log_start_offset = snap.high_watermark, snap.log_start_offset
                # listed by this process's last open for write
                replicas = part.replicas
                opened = ({replicas[0].directory: replicas[0]} if len(replicas) == 1
                          else {r.directory: r for r in replicas})
            else:  # read and closed: a walk of every partition must not keep each one's files open
                state = PartitionState(os.path.join(store.data_dir.state_dir, partition_dir_name(topic_name, p)
                                                    + PartitionState.SUFFIX))
                try:
                    snap = state.read()
                finally:
                    state.close()
                high_watermark, log_start_offset = snap.high_watermark, snap.log_start_offset
                opened = {}
            name = partition_dir_name(topic_name, p)
            for d in pm.replicas:
                prefix = dir_prefixes.get(d)
                folder = prefix + name if prefix is not None else os.path.join(store.data_dir.log_dir_path(d), name)
                replica = written.get(folder)
                if replica is None and not os.path.isdir(folder):
                    continue
                log = opened.get(folder)
                if replica is not None:
                    pass
                elif log is not None:  # its state file's open descriptor (written in place: current)
                    replica = log.state.read()
                else:
                    state = ReplicaState(os.path.join(folder, ReplicaState.FILE_NAME))
                    try:
                        replica = state.read()
                    finally:
                        state.close()
                end = replica.log_end_offset if replica is not None else 0
                # (comparisons, not min(): two builtin calls per partition)
                recovery[d][key] = ((replica.recovery_point if replica.recovery_point < end else end)
                                    if replica is not None else 0)
                replication[d][key] = high_watermark if high_watermark < end else end
                if log_start_offset > 0:  # (else no segment starts below it: no look at the folder)
                    first = log.bases[0] if log is not None and only is not None and log.bases else _first_base(folder)
                    if first is not None and log_start_offset > first:
                        log_start[d][key] = log_start_offset
                single = pm.epochs[0] if len(pm.epochs) == 1 else None
                listed = (((single[0], single[1]),) if single is not None and single[1] <= end  # (as a rule)
                          else tuple((e, o) for e, o in pm.epochs if o <= end))
                known_text = texts.get(listed)
                if known_text is None:
                    epochs = checkpoints.checkpoint_text([f"{e} {o}" for e, o in listed])
                    # (the CRC of epochs then metadata, as zlib.crc32(metadata, zlib.crc32(epochs)))
                    known_text = texts[listed] = (epochs, zlib.crc32(metadata.encode(), zlib.crc32(epochs.encode())))
                epochs, digest = known_text
                # the folder's files hold these texts already, as its open for write was shown (the
                # replica state file's record: see PartitionLog.checkpoints_digest), nobody took
                # the partition's lock since, and nothing was renamed into the folder meanwhile
                # (these files are rewritten without the lock: a close in another process): no look at them
                if (known is not None and log is not None and log.checkpoints_digest == digest
                        and log.folder_as_seen()):
                    continue
                try:  # (`folder` is a join's: a separator and the name make the file's path)
                    changed = _write_if_changed(folder + os.sep + LEADER_EPOCH_CHECKPOINT, epochs, unsynced)
                    if topic_id is not None:
                        changed = _write_if_changed(folder + os.sep + "partition.metadata", metadata,
                                                    unsynced) or changed
                except FileNotFoundError:
                    if os.path.isdir(folder):
                        raise
                    for offsets in (recovery[d], replication[d], log_start[d]):  # gone since (moved, deleted)
                        offsets.pop(key, None)
                    continue
                if known is not None and log is not None and not changed:
                    log.note_checkpoints(digest)  # (a file written changed the folder: nothing to record)
    _sync_written(together, unsynced)  # before the log directories' files, as each was fsynced before
    for d in dirs:
        path = store.data_dir.log_dir_path(d)
        if not os.path.isdir(path):
            continue  # a lost directory: nothing to write into
        for name, offsets in ((RECOVERY_POINT_CHECKPOINT, recovery[d]), (REPLICATION_OFFSET_CHECKPOINT, replication[d]),
                              (LOG_START_OFFSET_CHECKPOINT, log_start[d])):
            _write_if_changed(os.path.join(path, name), checkpoints.offsets_text(offsets))
        _write_meta_properties(store, path)


def _read_dir_checkpoints(store: BrokerStore, d: int) -> tuple[dict, dict, dict]:
    """A log directory's three offset checkpoints as written last (KlogError if one is not there)."""
    path = store.data_dir.log_dir_path(d)
    return tuple(checkpoints.read_offsets(os.path.join(path, name))  # type: ignore[return-value]
                 for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT))


def _topics_of(store: BrokerStore, only: set[tuple[str, int]]) -> list:
    """(TopicMeta, its partitions among `only`) for each topic still there."""
    by_topic: dict[str, list[int]] = {}
    for name, p in only:
        by_topic.setdefault(name, []).append(p)
    out = []
    for name, partitions in sorted(by_topic.items()):
        topic = store.topics.find(name)
        if topic is not None:
            out.append((topic, sorted(p for p in partitions if p < len(topic.partitions))))
    return out


def _write_meta_properties(store: BrokerStore, path: str) -> None:
    target = os.path.join(path, META_PROPERTIES)
    if os.path.exists(target):
        return
    import uuid  # here: only a log directory's first checkpoint needs it, not every produce

    ident = health.read_identity(path)
    directory = str(uuid.UUID(ident)) if ident else str(uuid.uuid4())
    cluster = str(uuid.uuid5(uuid.NAMESPACE_URL, "klog:" + os.path.realpath(store.path)))
    checkpoints.write_atomically(target, (
        f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
        f"cluster.id={checkpoints.kafka_uuid(cluster)}\n"
        f"directory.id={checkpoints.kafka_uuid(directory)}\n"
        f"node.id={NODE_ID}\nversion=1\n"))

"""Log directories: list with health, size and replica count (like kafka-log-dirs); add; remove."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.broker.replication import dir_health, replica_path
from klog.errors import KlogError, UsageError
from klog.store.format import parse_partition_dir
from klog.store.log import folder_log_bytes

if TYPE_CHECKING:
    from klog.broker.store_protocol import BrokerStore


@dataclass
class LogDirInfo:
    id: int
    path: str
    health: str
    size_bytes: int
    replicas: int
    leaders: int


def list_dirs(store: BrokerStore) -> list[LogDirInfo]:
    store.data_dir.refresh()  # (klog.json as it is now: another process may have added or removed one)
    counts: dict[int, int] = {}
    leaders: dict[int, int] = {}
    for topic in store.list_topics():
        for pm in topic.partitions:
            for d in pm.replicas:
                counts[d] = counts.get(d, 0) + 1
            leaders[pm.leader] = leaders.get(pm.leader, 0) + 1
    out = []
    for d in store.data_dir.log_dirs:
        path = store.data_dir.log_dir_path(d.id)
        size = 0
        if os.path.isdir(path):
            # what Kafka's DescribeLogDirs counts (and `topics describe` too): segment logs only
            size = sum(folder_log_bytes(os.path.join(path, n)) for n in os.listdir(path)
                       if parse_partition_dir(n) is not None)
        out.append(LogDirInfo(d.id, path, dir_health(store, d.id), size, counts.get(d.id, 0), leaders.get(d.id, 0)))
    return out


def replica_log_bytes(store: BrokerStore, topic: str, partition: int, log_dir_id: int) -> int:
    """One replica's size as Kafka reports it (UnifiedLog.size, DescribeLogDirs): its segments'
    `.log` files in log directory `log_dir_id`, no indexes; 0 when the folder cannot be read."""
    try:
        return folder_log_bytes(replica_path(store, topic, partition, log_dir_id))
    except OSError:
        return 0


def add_dir(store: BrokerStore, path: str) -> LogDirInfo:
    if os.path.isdir(path) and any(parse_partition_dir(n) for n in os.listdir(path)):
        raise UsageError(f"{path} already holds partition folders; give an empty or new directory")
    new = store.data_dir.add_log_dir(path)
    return next(i for i in list_dirs(store) if i.id == new.id)


REMOVE_PASSES = 3  # passes over the topics, while other processes move replicas into the directory meanwhile


def remove_dir(store: BrokerStore, log_dir_id: int, warn=None) -> int:
    """Move every replica off the directory, then forget it; returns the replicas moved.

    A move recorded and not finished (PartitionMeta.move: one cut short, or one another process is
    making: its lock is waited for) of a partition with a replica in the directory, or that starts
    or ends there, is settled first, as the partition's next write would settle it (finished when
    its new replica catches up, else rolled back): what the directory then holds is moved as any
    other replica, and no move is left naming a directory that is gone. The directory is forgotten
    only after a pass over the topics finds nothing in it: a replica another process moved into it
    meanwhile (`topics reassign`, klog serve) is moved off too, not left in a directory the store no
    longer knows."""
    from klog.broker.replication import move_replica, settle_move

    moved = 0

    def replicas_in_dir() -> list:
        return [(topic.name, p, pm) for topic in store.list_topics() for p, pm in enumerate(topic.partitions)
                if log_dir_id in pm.replicas or (pm.move is not None and log_dir_id in pm.move)]

    for _ in range(REMOVE_PASSES):
        left = replicas_in_dir()
        if not left:
            # the last look and the forget under the log-dirs lock, exclusive: a placement in another
            # process (a new topic's replicas, a move's target) holds it shared from its look at the
            # list to its metadata write, so it is either seen here or sees the directory gone. (No
            # partition lock is taken under it: move_replica takes this lock inside a partition's.)
            with store.data_dir.log_dirs_lock(exclusive=True):
                left = replicas_in_dir()
                if not left:
                    store.data_dir.remove_log_dir(log_dir_id)
                    return moved
        others = [d for d in list_dirs(store) if d.id != log_dir_id and d.health == "ok"]
        for name, p, pm in left:
            if pm.move is not None:
                pm = settle_move(store, name, p, warn)
            if log_dir_id not in pm.replicas:
                continue
            choices = sorted((d for d in others if d.id not in pm.replicas), key=lambda d: (d.replicas, d.id))
            if not choices:
                raise UsageError(f"cannot remove log directory {log_dir_id}: no other healthy directory can "
                                 f"take the replica of {name}-{p}")
            try:
                move_replica(store, name, p, log_dir_id, choices[0].id, warn)
            except KlogError:
                now = store.topics.get(name).partitions[p]
                if choices[0].id in store.data_dir.removed_ids and now.move is None:
                    continue  # its target removed meanwhile (another `dirs remove`): the next pass picks another
                if log_dir_id in now.replicas or now.move is not None:
                    raise
                continue  # moved off it meanwhile, by another process
            choices[0].replicas += 1
            moved += 1
    raise KlogError(f"cannot remove log directory {log_dir_id}: replicas are being moved into it meanwhile "
                    "(by another process); run the command again once they are")

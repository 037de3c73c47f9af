"""Topic metadata: partitions, replica placement, leader/ISR per partition, configs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from klog.errors import InvalidConfigError, InvalidTopicError, TopicExistsError, UnknownTopicError, UsageError
from klog.meta.db import MetaDB
from klog.meta.topic_index import TopicIndex
from klog.store.config import CONFIG_KEYS, validate_configs
from klog.store.names import TOPIC_NAME_LENGTH_MAX, validate_topic_name
from klog.store.plain import Plain

if TYPE_CHECKING:
    import lmdb

PARTITIONS_MAX = 10_000


class PartitionMeta(Plain):
    """Changed with klog.store.plain.replace, stored as as_json()."""

    _fields = ("replicas", "leader", "isr", "leader_epoch", "epochs", "move")

    def __init__(self, replicas: list[int], leader: int, isr: list[int], leader_epoch: int = 0,
                 epochs: list[list[int]] | None = None, move: list[int] | None = None) -> None:
        self.replicas = replicas  # log dir ids; the first is the preferred leader
        self.leader = leader
        self.isr = isr
        self.leader_epoch = leader_epoch
        self.epochs = [[0, 0]] if epochs is None else epochs  # [epoch, start offset]
        # a replica move not finished: [from log dir, to log dir] (klog.broker.replication.move_replica,
        # which the partition's next reconcile finishes or rolls back); stored only while there is one
        self.move = move

    @property
    def replication_factor(self) -> int:
        """The replicas the partition keeps: a move's new replica, beside the old one, is not counted."""
        move = self.move
        return len(self.replicas) - (1 if move is not None and move[0] in self.replicas
                                     and move[1] in self.replicas else 0)

    def as_json(self) -> dict:
        doc = {"replicas": list(self.replicas), "leader": self.leader, "isr": list(self.isr),
               "leader_epoch": self.leader_epoch, "epochs": [list(e) for e in self.epochs]}
        if self.move is not None:
            doc["move"] = list(self.move)
        return doc


class TopicMeta(Plain):
    _fields = ("name", "topic_id", "created_ms", "configs", "partitions")

    def __init__(self, name: str, topic_id: str, created_ms: int, configs: dict[str, str],
                 partitions: list[PartitionMeta]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.created_ms = created_ms
        self.configs = configs
        self.partitions = partitions

    def as_json(self) -> dict:
        return {"name": self.name, "topic_id": self.topic_id, "created_ms": self.created_ms,
                "configs": dict(self.configs), "partitions": [p.as_json() for p in self.partitions]}

    @property
    def replication_factor(self) -> int:
        return self.partitions[0].replication_factor if self.partitions else 0

    def effective_configs(self) -> dict[str, str]:
        """Every config key: the topic's own value, else the default."""
        configs = self.configs
        return {k: configs.get(k, key.default) for k, key in CONFIG_KEYS.items()}

    @classmethod
    def from_json(cls, doc: dict) -> TopicMeta:
        return cls(doc["name"], doc["topic_id"], doc["created_ms"], doc["configs"],
                   [PartitionMeta(**p) for p in doc["partitions"]])


def place_replicas(partition_ids: range, replication_factor: int, log_dir_ids: list[int],
                   replica_counts: dict[int, int]) -> list[list[int]]:
    """Spread replicas over distinct log dirs, least-loaded first, leaders rotating."""
    if replication_factor < 1:
        raise UsageError("replication factor must be at least 1")
    if replication_factor > len(log_dir_ids):
        raise UsageError(f"replication factor {replication_factor} is larger than the number of healthy "
                         f"log directories ({len(log_dir_ids)})")
    counts = {d: replica_counts.get(d, 0) for d in log_dir_ids}
    leader_counts = dict.fromkeys(log_dir_ids, 0)
    out = []
    for _ in partition_ids:
        order = sorted(log_dir_ids, key=lambda d: (leader_counts[d], counts[d], d))
        leader = order[0]
        followers = sorted((d for d in log_dir_ids if d != leader), key=lambda d: (counts[d], d))
        replicas = [leader, *followers[: replication_factor - 1]]
        for d in replicas:
            counts[d] += 1
        leader_counts[leader] += 1
        out.append(replicas)
    return out


class TopicsMeta:
    def __init__(self, db: MetaDB) -> None:
        self.db = db
        # name -> (the stored JSON, its parse): a writer re-reads its topic before every append,
        # and parsing a 1,000-partition document each time was 76 % of a keyed produce; an
        # unchanged document (a byte comparison) is not parsed again. Callers must not mutate
        # what get/find return (they use klog.store.plain.replace and update_* instead).
        self._parsed: dict[str, tuple[bytes, TopicMeta]] = {}
        self.index = TopicIndex(db)  # replica counts and names, so a create never reads every topic

    def get(self, name: str) -> TopicMeta:
        topic = self.find(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic '{name}'")
        return topic

    def find(self, name: str, txn: lmdb.Transaction | None = None) -> TopicMeta | None:
        """`txn`: read in the caller's transaction (its snapshot), else in one of its own."""
        if not name or len(name) > TOPIC_NAME_LENGTH_MAX or not name.isascii():
            return None  # no topic has such a name (and LMDB refuses an empty key or one over 511 bytes)
        if txn is not None:
            raw = self.db.get_raw(txn, "topics", name)
        else:
            with self.db.txn() as own:
                raw = self.db.get_raw(own, "topics", name)
        if raw is None:
            self._parsed.pop(name, None)
            return None
        return self._parse(name, raw)

    def _parse(self, name: str, raw: bytes) -> TopicMeta:
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == raw:
            return cached[1]
        topic = TopicMeta.from_json(json.loads(raw))
        self._parsed[name] = (raw, topic)
        return topic

    def _all(self, txn) -> Iterator[TopicMeta]:
        for name, raw in self.db.items_raw(txn, "topics"):
            yield self._parse(name, raw)

    def list(self) -> list[TopicMeta]:
        with self.db.txn() as txn:
            return list(self._all(txn))

    def create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
               log_dir_ids: list[int], exist_ok: bool = False) -> TopicMeta:
        validate_topic_name(name)
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise UsageError(f"partitions must be between 1 and {PARTITIONS_MAX}, not {partitions}")
        configs = validate_configs(configs)
        with self.db.txn(write=True) as txn:
            existing = self.db.get_json(txn, "topics", name)
            if existing is not None:
                if exist_ok:
                    return TopicMeta.from_json(existing)
                raise TopicExistsError(f"topic '{name}' already exists")
            self.index.ensure(txn, self._all(txn))
            other = self.index.name_holder(txn, name)
            if other is not None:
                raise InvalidTopicError(f"topic '{name}' collides with existing topic '{other}'")
            counts = self.index.replica_counts(txn, log_dir_ids)
            placement = place_replicas(range(partitions), replication_factor, log_dir_ids, counts)
            import uuid  # here: only a creation needs it (and it imports platform)

            topic = TopicMeta(name, str(uuid.uuid4()), int(time.time() * 1000), configs,
                              [PartitionMeta(r, r[0], list(r)) for r in placement])
            self.db.put_json(txn, "topics", name, topic.as_json())
            self.index.added(txn, topic)
        return topic

    def index_problems(self) -> list[str]:
        """How the kept placement counts differ from the topics (klog verify); [] if they match."""
        with self.db.txn() as txn:
            return self.index.problems(txn, self._all(txn))

    def rebuild_index(self, only_if_absent: bool = False) -> None:
        """Count again from every topic (klog verify --repair); `only_if_absent`: unless the index
        is there and counts every topic (a store from before it gets one)."""
        with self.db.txn(write=True) as txn:
            if only_if_absent:
                self.index.ensure(txn, self._all(txn))
            else:
                self.index.rebuild(txn, self._all(txn))

    def add_partitions(self, name: str, total: int, log_dir_ids: list[int]) -> TopicMeta:
        with self.db.txn(write=True) as txn:
            doc = self.db.get_json(txn, "topics", name)
            if doc is None:
                raise UnknownTopicError(f"unknown topic '{name}'")
            topic = TopicMeta.from_json(doc)
            current = len(topic.partitions)
            if total <= current:
                raise UsageError(f"topic '{name}' has {current} partitions; the new count must be larger")
            if total > PARTITIONS_MAX:
                raise UsageError(f"partitions must be at most {PARTITIONS_MAX}")
            self.index.ensure(txn, self._all(txn))
            counts = self.index.replica_counts(txn, log_dir_ids)
            placed = place_replicas(range(current, total), topic.replication_factor, log_dir_ids, counts)
            for r in placed:
                topic.partitions.append(PartitionMeta(r, r[0], list(r)))
            self.db.put_json(txn, "topics", name, topic.as_json())
            self.index.moved(txn, [], [d for r in placed for d in r])
        return topic

    def update_configs(self, name: str, set_configs: dict[str, str], delete: list[str]) -> TopicMeta:
        set_configs = validate_configs(set_configs)
        for k in delete:
            if k not in CONFIG_KEYS:
                raise InvalidConfigError(f"unknown topic config '{k}'")
        with self.db.txn(write=True) as txn:
            doc = self.db.get_json(txn, "topics", name)
            if doc is None:
                raise UnknownTopicError(f"unknown topic '{name}'")
            topic = TopicMeta.from_json(doc)
            for k in delete:
                topic.configs.pop(k, None)
            topic.configs.update(set_configs)
            self.db.put_json(txn, "topics", name, topic.as_json())
        return topic

    def update_partition(self, name: str, partition: int, meta: PartitionMeta) -> None:
        with self.db.txn(write=True) as txn:
            doc = self.db.get_json(txn, "topics", name)
            if doc is None:
                raise UnknownTopicError(f"unknown topic '{name}'")
            old = doc["partitions"][partition]["replicas"]
            if old != meta.replicas:
                self.index.ensure(txn, self._all(txn))
                self.index.moved(txn, old, meta.replicas)
            doc["partitions"][partition] = meta.as_json()
            self.db.put_json(txn, "topics", name, doc)

    def delete(self, name: str) -> TopicMeta:
        with self.db.txn(write=True) as txn:
            doc = self.db.get_json(txn, "topics", name)
            if doc is None:
                raise UnknownTopicError(f"unknown topic '{name}'")
            topic = TopicMeta.from_json(doc)
            self.index.ensure(txn, self._all(txn))
            self.db.delete(txn, "topics", name)
            self.index.removed(txn, topic)
        return topic

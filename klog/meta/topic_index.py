"""What creating a topic needs to know about all the others, kept so it never reads them all.

Placement balances on how many replicas each log directory holds, and a name must not collide
('.' and '_' are the same to Kafka) with another topic's. Scanning every topic document for
these made each create cost O(topics) (creating 5,000 topics: the last tenth 10x the first).
The `topic_index` LMDB database keeps them instead, changed in the same write transaction as
the topic documents (create, add-partitions, a partition's replicas, delete), so it can never
be half-updated:

    "dir:<log dir id>"     -> replicas that log directory holds (absent: none)
    "name:<collision key>" -> the topic holding that key
    "topics"               -> how many topics it counts

A store written before it has none, and one whose topic count differs from the topics
database's entry count (LMDB keeps that in O(1)) is out of date: either is rebuilt from one scan,
in the write transaction that needs it. `klog verify` compares it with a scan; `--repair`
rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import lmdb

from klog.meta.db import MetaDB
from klog.store.names import collision_key

if TYPE_CHECKING:
    from klog.meta.topics import TopicMeta

INDEX_DB = "topic_index"
_COUNT = "topics"


def _dir_key(log_dir_id: int) -> str:
    return f"dir:{log_dir_id}"


def _name_key(name: str) -> str:
    return "name:" + collision_key(name)


def _expected(topics: Iterable[TopicMeta]) -> tuple[dict[int, int], dict[str, str]]:
    """Replica counts per log directory and collision key -> topic, from the topics themselves."""
    counts: dict[int, int] = {}
    names: dict[str, str] = {}
    for topic in topics:
        names[collision_key(topic.name)] = topic.name
        for p in topic.partitions:
            for d in p.replicas:
                counts[d] = counts.get(d, 0) + 1
    return counts, names


class TopicIndex:
    def __init__(self, db: MetaDB) -> None:
        self.db = db

    def _topic_entries(self, txn: lmdb.Transaction) -> int:
        return txn.stat(self.db.dbs["topics"])["entries"]

    def current(self, txn: lmdb.Transaction) -> bool:
        """Present and counting as many topics as there are (a store written before the index,
        or by a klog that did not keep it, fails this)."""
        if INDEX_DB not in self.db.dbs:
            return False
        return self.db.get_json(txn, INDEX_DB, _COUNT) == self._topic_entries(txn)

    def ensure(self, txn: lmdb.Transaction, topics: Iterable[TopicMeta]) -> None:
        """Before a change, in its write transaction: rebuild from `topics` (all of them, as the
        transaction sees them; only iterated when needed) unless current."""
        if not self.current(txn):
            self.rebuild(txn, topics)

    def rebuild(self, txn: lmdb.Transaction, topics: Iterable[TopicMeta]) -> None:
        counts, names = _expected(topics)
        txn.drop(self.db.dbs[INDEX_DB], delete=False)
        for d, n in counts.items():
            self.db.put_json(txn, INDEX_DB, _dir_key(d), n)
        for key, name in names.items():
            self.db.put_json(txn, INDEX_DB, "name:" + key, name)
        self.db.put_json(txn, INDEX_DB, _COUNT, len(names))

    def problems(self, txn: lmdb.Transaction, topics: Iterable[TopicMeta]) -> list[str]:
        """How the stored index differs from `topics` (all of them); [] when it matches. An
        absent or out-of-date one is no problem: the next change rebuilds it."""
        if not self.current(txn):
            return []
        counts, names = _expected(topics)
        stored_counts: dict[int, int] = {}
        stored_names: dict[str, str] = {}
        for key, value in self.db.items(txn, INDEX_DB):
            if key.startswith("dir:"):
                stored_counts[int(key[4:])] = value
            elif key.startswith("name:"):
                stored_names[key[5:]] = value
        out = []
        for d in sorted(set(counts) | set(stored_counts)):
            if counts.get(d, 0) != stored_counts.get(d, 0):
                out.append(f"log directory {d} holds {counts.get(d, 0)} replicas, but the placement counts say "
                           f"{stored_counts.get(d, 0)}")
        if names != stored_names:
            out.append(f"the topic name index lists {len(stored_names)} names, not the {len(names)} topics")
        return out

    # -- changes, in the write transaction of the topic document they follow --------------------
    def name_holder(self, txn: lmdb.Transaction, name: str) -> str | None:
        """The topic whose name collides with `name` (or is `name`)."""
        return self.db.get_json(txn, INDEX_DB, _name_key(name))

    def replica_counts(self, txn: lmdb.Transaction, log_dir_ids: Iterable[int]) -> dict[int, int]:
        return {d: self.db.get_json(txn, INDEX_DB, _dir_key(d)) or 0 for d in log_dir_ids}

    def added(self, txn: lmdb.Transaction, topic: TopicMeta) -> None:
        self.db.put_json(txn, INDEX_DB, _name_key(topic.name), topic.name)
        self.moved(txn, [], [d for p in topic.partitions for d in p.replicas])
        self._count(txn, +1)

    def removed(self, txn: lmdb.Transaction, topic: TopicMeta) -> None:
        self.db.delete(txn, INDEX_DB, _name_key(topic.name))
        self.moved(txn, [d for p in topic.partitions for d in p.replicas], [])
        self._count(txn, -1)

    def moved(self, txn: lmdb.Transaction, old: Iterable[int], new: Iterable[int]) -> None:
        """Replicas left the log directories in `old` and were placed on those in `new`."""
        delta: dict[int, int] = {}
        for d in old:
            delta[d] = delta.get(d, 0) - 1
        for d in new:
            delta[d] = delta.get(d, 0) + 1
        for d, change in delta.items():
            if change:
                n = (self.db.get_json(txn, INDEX_DB, _dir_key(d)) or 0) + change
                if n > 0:
                    self.db.put_json(txn, INDEX_DB, _dir_key(d), n)
                else:
                    self.db.delete(txn, INDEX_DB, _dir_key(d))

    def _count(self, txn: lmdb.Transaction, change: int) -> None:
        self.db.put_json(txn, INDEX_DB, _COUNT, self.db.get_json(txn, INDEX_DB, _COUNT) + change)

"""Creating a topic reads no other topic (issue 18): replica counts per log directory and the
name-collision keys are kept in LMDB beside the topics, in the same write transaction."""

from __future__ import annotations

import os

import pytest

import klog
from klog.errors import InvalidTopicError, StorageError
from klog.meta import topic_index
from klog.meta.topics import TopicsMeta


@pytest.fixture
def dstore(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    s = klog.Store(str(tmp_path / "data"), log_dirs=dirs)
    yield s
    s.close()


def dirs_of(store, topic):
    return [p.replicas for p in store.topics.get(topic).partitions]


def test_a_create_reads_no_other_topic(dstore, monkeypatch):
    for i in range(20):
        dstore.create_topic(f"t{i}", partitions=2)
    read: list[str] = []
    real = TopicsMeta._parse
    monkeypatch.setattr(TopicsMeta, "_parse", lambda self, name, raw: read.append(name) or real(self, name, raw))
    dstore.create_topic("new", partitions=3)
    dstore.alter_topic("new", partitions=5)
    assert set(read) <= {"new"}  # its own document only
    assert dstore.topics.index_problems() == []


def test_placement_follows_deletes_moves_and_added_partitions(dstore, cli):
    dstore.create_topic("x")  # dir 0
    dstore.create_topic("y")  # dir 1
    dstore.create_topic("z")  # dir 0: counts 2 / 1
    assert [dirs_of(dstore, t) for t in "xyz"] == [[[0]], [[1]], [[0]]]
    dstore.delete_topic("x")  # 1 / 1: the tie goes to dir 0 (it would go to dir 1 if the delete was not counted)
    dstore.create_topic("w")
    assert dirs_of(dstore, "w") == [[0]]
    dstore.reassign("w", 0, 1)  # 1 / 2
    assert dirs_of(dstore, "w") == [[1]]
    dstore.create_topic("v")
    assert dirs_of(dstore, "v") == [[0]]
    dstore.alter_topic("v", partitions=3)  # 2 / 2, then 3 / 2 or 2 / 3 by leader rotation: one each
    assert sorted(r[0] for r in dirs_of(dstore, "v")[1:]) == [0, 1]
    assert dstore.topics.index_problems() == []
    r = cli("verify", "--data-dir", dstore.path)
    assert r.exit_code == 0 and "metadata" not in r.out


def test_names_that_collide_are_refused_until_the_other_is_deleted(store):
    store.create_topic("a.b")
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'a.b'"):
        store.create_topic("a_b")
    store.delete_topic("a.b")
    store.create_topic("a_b")
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'a_b'"):
        store.create_topic("a.b")


def forget_index(store):
    """A store last written before the index: the topic_index database is empty."""
    with store.meta.txn(write=True) as txn:
        txn.drop(store.meta.dbs[topic_index.INDEX_DB], delete=False)


def test_a_store_from_before_the_index_gets_it_on_its_next_create(dstore):
    for t in ("a.1", "b", "c"):
        dstore.create_topic(t)  # dirs 0, 1, 0
    forget_index(dstore)
    assert dstore.topics.index_problems() == []  # absent is not damage: the next change builds it
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'a.1'"):
        dstore.create_topic("a_1")
    dstore.create_topic("d")  # counts 2 / 1: dir 1
    assert dirs_of(dstore, "d") == [[1]]
    assert dstore.topics.index_problems() == []


def test_verify_repair_builds_a_missing_index_without_calling_it_damage(dstore, cli):
    dstore.create_topic("a", partitions=3)
    forget_index(dstore)
    r = cli("verify", "--repair", "--data-dir", dstore.path)
    assert r.exit_code == 0 and "metadata" not in r.out
    with dstore.meta.txn() as txn:
        assert dstore.topics.index.current(txn)
        assert dstore.topics.index.replica_counts(txn, [0, 1]) == {0: 2, 1: 1}


def test_verify_reports_wrong_counts_and_repair_rebuilds_them(dstore, cli):
    dstore.create_topic("a", partitions=4)
    with dstore.meta.txn(write=True) as txn:  # as an older klog's reassign would leave it
        dstore.meta.put_json(txn, topic_index.INDEX_DB, "dir:0", 7)
    path = dstore.path
    dstore.close()
    r = cli("verify", "--data-dir", path)
    assert r.exit_code == 1
    assert "metadata: DAMAGED — log directory 0 holds 2 replicas, but the placement counts say 7" in r.out
    r = cli("verify", "--repair", "--data-dir", path)
    assert r.exit_code == 0 and "metadata: repaired" in r.out and "rebuilt the placement counts" in r.out
    r = cli("verify", "--data-dir", path)
    assert r.exit_code == 0 and "metadata" not in r.out


def test_a_leftover_folder_is_refused_when_its_partition_would_be_created(store):
    folder = os.path.join(store.data_dir.log_dir_path(0), "t-2")
    os.makedirs(folder)
    with open(os.path.join(folder, "00000000000000000000.log"), "wb") as f:
        f.write(b"old")
    with pytest.raises(StorageError, match=r"cannot create partition t-2: .*t-2 already holds a partition"):
        store.create_topic("t", partitions=3)
    assert not store.has_topic("t")
    store.create_topic("t", partitions=2)  # t-2 is not one of its partitions
    with pytest.raises(StorageError, match="cannot create partition t-2"):
        store.alter_topic("t", partitions=4)
    assert len(store.topics.get("t").partitions) == 2
    assert store.topics.index_problems() == []

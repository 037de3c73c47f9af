"""The library's transactional producer on a cluster (`RemoteStore.producer(transactional_id=...)`).

Goal: the calls of the local transactional producer (begin/commit/abort, `with
producer.transaction()`, send_offsets) work the same through `--bootstrap-server`: a read_committed
reader that is not ours (confluent-kafka's consumer) sees a committed transaction whole and an
aborted one never; offsets sent in a transaction become the group's committed offsets only with
it; a local transactional producer of the same id fences the cluster one (one coordinator state).
Method: the API against an in-process `klog serve`, checked with confluent-kafka's consumer.
"""

from __future__ import annotations

import pytest

import klog
from klog.client.remote.store import RemoteStore
from klog.client.remote.target import ClusterTarget
from klog.errors import ProducerFencedError, UsageError
from tests.server.test_serve_transactions import _read_all

ck = pytest.importorskip("confluent_kafka")


def _committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([ck.TopicPartition(topic, partition)], timeout=20)
        return tp.offset
    finally:
        consumer.close()


@pytest.mark.slow  # a librdkafka transactional producer and two consumers: ~2 s
def test_commit_abort_exception_and_offsets_through_a_cluster(kafka_server, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("t", 2)
        s.create_topic("in", 1)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store, \
            store.producer(transactional_id="remote-1") as producer:
        with producer.transaction():
            for i in range(4):
                producer.send("t", b"c%d" % i, partition=i % 2)
            producer.send_offsets("remote-group", {("in", 0): 10})
        producer.begin()
        producer.send_values("t", [b"aborted-1", b"aborted-2"], partition=1)
        producer.flush()  # written to the log, then aborted
        producer.send_offsets("remote-group", {("in", 0): 20})
        producer.abort()
        with pytest.raises(RuntimeError), producer.transaction():
            producer.send("t", b"raised", partition=0)
            producer.flush()
            raise RuntimeError("the block failed")
        with pytest.raises(UsageError, match="begin"):
            producer.send("t", b"outside a transaction")
        with producer.transaction():  # the aborts ended their transactions: this one is read after them
            producer.send("t", b"after", partition=0)
            producer.send("t", b"after", partition=1)
    assert sorted(_read_all(kafka_server.bootstrap, "t", 2, "read_committed")) == [
        b"after", b"after", b"c0", b"c1", b"c2", b"c3"]
    uncommitted = sorted(_read_all(kafka_server.bootstrap, "t", 2, "read_uncommitted"))
    assert uncommitted == [b"aborted-1", b"aborted-2", b"after", b"after", b"c0", b"c1", b"c2", b"c3", b"raised"]
    assert _committed_offset(kafka_server.bootstrap, "remote-group", "in", 0) == 10


@pytest.mark.slow
def test_a_local_producer_of_the_same_id_fences_the_cluster_one(kafka_server, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("f", 1)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store:
        old = store.producer(transactional_id="shared-id")
        with old.transaction():
            old.send("f", b"first")
        with klog.open(data_dir) as local, local.producer(transactional_id="shared-id") as new, new.transaction():
            new.send("f", b"second")
        old.begin()
        old.send("f", b"zombie")
        with pytest.raises(ProducerFencedError, match="shared-id"):
            old.commit()
        old.close()
    assert _read_all(kafka_server.bootstrap, "f", 1, "read_committed") == [b"first", b"second"]


def test_acks_other_than_all_is_refused_before_connecting():
    store = RemoteStore.__new__(RemoteStore)  # no cluster needed: the check comes first
    from klog.client.remote.transactional import RemoteTransactionalProducer

    with pytest.raises(UsageError, match="acks=all"):
        RemoteTransactionalProducer(store, "x", acks="1")


@pytest.mark.slow  # a group join (the coordinator's initial rebalance delay): ~4 s
def test_consume_transform_produce_with_a_group_member(kafka_server, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("in", 1)
        s.create_topic("out", 1)
        with s.producer() as p:
            p.send_values("in", [b"r%d" % i for i in range(10)])
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store, \
            store.producer(transactional_id="ctp") as producer:
        consumer = store.group_consumer("ctp-group", "in", follow=False)
        try:
            for records in consumer.batches():
                with producer.transaction():
                    for r in records:
                        producer.send("out", r.value.upper())
                    last = records[-1]
                    # the member's own metadata: its generation fences a zombie member (KIP-447)
                    producer.send_offsets(consumer, {(last.topic, last.partition): last.offset + 1})
        finally:
            consumer.close()
    assert _read_all(kafka_server.bootstrap, "out", 1, "read_committed", expect=10) == [b"R%d" % i for i in range(10)]
    assert _committed_offset(kafka_server.bootstrap, "ctp-group", "in", 0) == 10

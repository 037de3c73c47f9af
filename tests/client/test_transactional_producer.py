"""The library's transactional producer (`store.producer(transactional_id=...)`).

Goal: what a transaction sent is read by read_committed readers all together after commit() and
never after abort() or an exception in `with producer.transaction():`; send_offsets() moves a
group's committed offsets only with a commit; the same transactional id is fenced across the
library and Kafka clients of `klog serve` (one coordinator state). Method: the API in-process,
klog's own read_committed consumer, confluent-kafka through an in-process server.
"""

from __future__ import annotations

import pytest

import klog
from klog.errors import ProducerFencedError, UsageError
from klog.meta.groups import GroupsMeta


def _committed_values(store, topic: str) -> list[bytes]:  # noqa: ANN001
    return [r.value for r in store.consumer(topic, isolation_level="read_committed")]


def test_commit_abort_and_exception(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("t", 2)
        with store.producer(transactional_id="lib-1") as producer:
            with producer.transaction():
                for i in range(4):
                    producer.send("t", b"c%d" % i, partition=i % 2)
            producer.begin()
            for value in (b"aborted-1", b"aborted-2"):  # two batches, written, then aborted
                producer.send("t", value, partition=1)
                producer.flush()
            producer.abort()
            with pytest.raises(RuntimeError), producer.transaction():
                producer.send("t", b"raised", partition=0)
                producer.flush()
                raise RuntimeError("the block failed")
            with pytest.raises(UsageError):
                producer.send("t", b"outside a transaction")
            # the aborts ended their transactions: the next commit carries only its own records
            with producer.transaction():
                producer.send("t", b"after", partition=1)
                producer.send("t", b"after", partition=0)
        assert sorted(_committed_values(store, "t")) == [b"after", b"after", b"c0", b"c1", b"c2", b"c3"]
        uncommitted = sorted(r.value for r in store.consumer("t"))
        assert uncommitted == [b"aborted-1", b"aborted-2", b"after", b"after", b"c0", b"c1", b"c2", b"c3", b"raised"]


def test_bulk_sends_after_an_abort_are_committed(data_dir):
    """Keyed bulk sends into a topic of several partitions (routed straight into each partition's
    batch): an abort drops what was buffered, and the next transaction's records all land."""
    with klog.open(data_dir) as store:
        store.create_topic("t", 4)
        with store.producer(transactional_id="lib-bulk") as producer:
            producer.begin()
            producer.send_keyed("t", [(b"k%d" % (i % 9), b"dropped-%d" % i) for i in range(200)])
            producer.abort()
            with producer.transaction():
                producer.send_keyed("t", [(b"k%d" % (i % 9), b"kept-%d" % i) for i in range(200)])
        assert sorted(_committed_values(store, "t")) == sorted(b"kept-%d" % i for i in range(200))


def test_send_offsets_commit_with_the_transaction(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("out")
        with store.producer(transactional_id="lib-2") as producer:
            with producer.transaction():
                producer.send("out", b"x")
                producer.send_offsets("lib-group", {("in", 0): 10})
            producer.begin()
            producer.send("out", b"y")
            producer.send_offsets("lib-group", {("in", 0): 20})
            producer.abort()
        assert GroupsMeta(store.meta).committed("lib-group")[("in", 0)].offset == 10
        assert _committed_values(store, "out") == [b"x"]


def test_a_fenced_producer_names_its_id_once(tmp_path):
    """`klog produce --transactional-id h2` fenced by `klog transactions abort h2` said
    "transactional id 'h2': transactional id 'h2': epoch 0 is fenced by 1"."""
    with klog.open(str(tmp_path / "s")) as store:
        store.create_topic("fx")
        first = store.producer(transactional_id="h2")
        first.begin()
        first.send("fx", b"zombie")
        first.flush()
        with store.producer(transactional_id="h2"):  # a new producer of the id fences the first
            pass
        with pytest.raises(ProducerFencedError) as raised:
            first.send("fx", b"more")
            first.flush()
        assert str(raised.value).count("transactional id 'h2'") == 1, raised.value


def test_fenced_across_the_library_and_kafka_clients(kafka_server):
    ck = pytest.importorskip("confluent_kafka")
    store = kafka_server.store
    store.create_topic("fx")
    with klog.open(store.path) as local:
        first = local.producer(transactional_id="shared-id")
        first.begin()
        first.send("fx", b"zombie")
        first.flush()
        kafka = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "shared-id"})
        kafka.init_transactions(30)  # aborts the library's open transaction, fences it
        with pytest.raises(ProducerFencedError):
            first.send("fx", b"more")
            first.commit()
        kafka.begin_transaction()
        kafka.produce("fx", b"kafka")
        kafka.commit_transaction(30)
        second = local.producer(transactional_id="shared-id")  # and the other way round
        with second.transaction():
            second.send("fx", b"library")
        with pytest.raises(ck.KafkaException):
            kafka.begin_transaction()
            kafka.produce("fx", b"fenced")
            kafka.commit_transaction(10)
        assert _committed_values(local, "fx") == [b"kafka", b"library"]

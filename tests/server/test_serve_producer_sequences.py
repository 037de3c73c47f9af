"""Where an idempotent producer may start in a partition it has no state in (Kafka 3.9's
ProducerAppendInfo.checkSequence): at any sequence, while a retry is never written twice.

Goal: a producer new in a partition whose first batch there has a sequence past 0 is accepted
(librdkafka keeps its sequences past a batch refused inside an aborted transaction: its next
transaction then commits at once); a retry of it is a duplicate; a producer dropped past the
state bounds still has its retries answered as duplicates and goes on at its next sequence.
Method: raw Produce requests to an in-process `klog serve`, and confluent-kafka's transactional
producer for librdkafka's path.
"""

from __future__ import annotations

import pytest

import klog
from tests.serve_helpers import RawClient, batch, produce

pytest.importorskip("kio")
ck = pytest.importorskip("confluent_kafka")
from kio.schema.errors import ErrorCode as E  # noqa: E402


def values(data_dir: str, topic: str) -> list[bytes]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic)]


def test_a_producer_new_in_a_partition_may_start_past_sequence_0(kafka_server, data_dir):
    kafka_server.store.create_topic("t")
    first = batch([b"a", b"b"], producer_id=42, epoch=0, sequence=5)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, first) == (E.none, 0)  # before: UNKNOWN_PRODUCER_ID
        assert produce(client, "t", 0, first) == (E.none, 0)  # its retry: a duplicate, not written again
        assert produce(client, "t", 0, batch([b"c"], producer_id=42, epoch=0, sequence=7)) == (E.none, 2)
        assert produce(client, "t", 0, batch([b"x"], producer_id=42, epoch=0, sequence=9))[0] == \
            E.out_of_order_sequence_number  # from now on it has state: in sequence only
    assert values(data_dir, "t") == [b"a", b"b", b"c"]


def test_a_producer_dropped_past_the_bounds_keeps_its_retries_and_next_sequence(kafka_server, data_dir):
    kafka_server.store.create_topic("v")
    kafka_server.store.create_topic("flood")
    producers = kafka_server.appender.producers
    second = batch([b"m2"], producer_id=7, epoch=3, sequence=1)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "v", 0, batch([b"m1"], producer_id=7, epoch=3, sequence=0)) == (E.none, 0)
        assert produce(client, "v", 0, second) == (E.none, 1)
        producers.per_partition_max, producers.total_max = 100, 5
        for i in range(10):  # another client's ids push it out
            assert produce(client, "flood", 0, batch([b"x"], producer_id=1000 + i, epoch=0, sequence=0))[0] == E.none
        assert 7 not in producers._by_partition[("v", 0)]
        assert produce(client, "v", 0, second) == (E.none, 1)  # a retry: still a duplicate
        assert produce(client, "v", 0, batch([b"old"], producer_id=7, epoch=2, sequence=0))[0] == \
            E.invalid_producer_epoch
        assert produce(client, "v", 0, batch([b"gap"], producer_id=7, epoch=3, sequence=9))[0] == \
            E.unknown_producer_id  # not its next: maybe a retry older than those kept (the client resets)
        assert produce(client, "v", 0, batch([b"m3"], producer_id=7, epoch=3, sequence=2)) == (E.none, 2)
    assert values(data_dir, "v") == [b"m1", b"m2", b"m3"]


def test_a_transaction_after_a_refused_record_commits_at_once(kafka_server, data_dir):
    kafka_server.store.create_topic("t", configs={"max.message.bytes": "2000"})
    p = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "ab",
                     "message.max.bytes": 100000, "linger.ms": 0})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("t", value=b"ok-before")
    p.produce("t", value=b"x" * 50000)
    with pytest.raises(ck.KafkaException) as refused:
        p.commit_transaction(15)
    assert refused.value.args[0].txn_requires_abort()
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce("t", value=b"after")
    p.commit_transaction(15)  # before: failed once more (UNKNOWN_PRODUCER_ID: its sequences went on)
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("t", isolation_level="read_committed")] == [b"after"]

"""The hand-written Metadata answer is, byte for byte, what kio's generated writer makes of the same
answer at every version klog serves (v0-v12), throttle time included; and so is the
DescribeTopicPartitions answer, whose paging by partition limit is checked on a store."""

from __future__ import annotations

import datetime
import logging
import uuid

import pytest

from klog.protocol.framing import encode_body
from klog.protocol.kafka import make
from klog.protocol.schemas import payload_module
from klog.server.context import BrokerInfo, RequestContext
from klog.server.metadata import _describe_topic_partitions
from klog.server.metadata_response import (
    NO_OPERATIONS,
    BrokerEntry,
    TopicEntry,
    describe_topic_partitions_answer,
    metadata_answer,
)
from klog.server.throttle import with_throttle

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

METADATA = 3
DESCRIBE_TOPIC_PARTITIONS = 75
LEADER = 7
BROKERS = (BrokerEntry(LEADER, "broker-7.example", 9092, None), BrokerEntry(8, "h\u00f4te", 19092, "rack-\u00e9"))
ORDERS_ID = uuid.UUID("8f0c2bd4-5a53-4e49-9a5f-4c1a2b3d4e5f")


def _topics(version: int) -> list[TopicEntry]:
    topics = [
        TopicEntry(ErrorCode.none, "orders", ORDERS_ID, False, [0, 5, 2**31 - 1], 0b110111111000),
        TopicEntry(ErrorCode.unknown_topic_or_partition, "missing"),
        TopicEntry(ErrorCode.none, "__consumer_offsets", uuid.UUID(int=1), True, [3, 3]),
        TopicEntry(ErrorCode.none, "\u00e9v\u00e9nements-\u6587", uuid.UUID(int=2**128 - 1), False, [12], 0),
        TopicEntry(ErrorCode.topic_authorization_failed, "secret"),
    ]
    if version >= 12:  # a topic asked for by an unknown id: its name null
        topics.append(TopicEntry(ErrorCode.unknown_topic_id, None, uuid.UUID(int=99)))
    return topics


def _kio_answer(version: int, throttle_ms: int, cluster_id: str | None, cluster_ops: int) -> bytes:
    mod = payload_module(METADATA, version, EntityType.response)
    topics = tuple(
        make(mod.MetadataResponseTopic, error_code=t.error, name=t.name, topic_id=t.topic_id or uuid.UUID(int=0),
             is_internal=t.is_internal, topic_authorized_operations=t.authorized_operations,
             partitions=tuple(make(mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=i,
                                   leader_id=LEADER, leader_epoch=epoch, replica_nodes=(LEADER,),
                                   isr_nodes=(LEADER,), offline_replicas=())
                              for i, epoch in enumerate(t.leader_epochs)))
        for t in _topics(version))
    brokers = tuple(make(mod.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                    for b in BROKERS)
    return encode_body(make(mod.MetadataResponse, brokers=brokers, cluster_id=cluster_id, controller_id=LEADER,
                            topics=topics, cluster_authorized_operations=cluster_ops,
                            throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))))


@pytest.mark.parametrize("version", range(0, 13))
@pytest.mark.parametrize("throttle_ms", [0, 1234])
@pytest.mark.parametrize(("cluster_id", "cluster_ops"), [(None, NO_OPERATIONS), ("klog-\u00e7luster", 0b1111110100000)])
def test_metadata_answer_is_kios_encoding(version, throttle_ms, cluster_id, cluster_ops):
    mod = payload_module(METADATA, version, EntityType.response)
    answer = metadata_answer(version, mod.MetadataResponse, BROKERS, cluster_id, LEADER, LEADER, _topics(version),
                             cluster_ops)
    body = with_throttle(answer, throttle_ms)
    assert body.parts == [_kio_answer(version, throttle_ms, cluster_id, cluster_ops)]


def test_an_answer_without_topics_is_kios_encoding():
    for version in range(0, 13):
        mod = payload_module(METADATA, version, EntityType.response)
        answer = metadata_answer(version, mod.MetadataResponse, BROKERS[:1], "c", LEADER, LEADER, ())
        expected = encode_body(make(mod.MetadataResponse, brokers=(make(
            mod.MetadataResponseBroker, node_id=LEADER, host=BROKERS[0].host, port=9092, rack=None),),
            cluster_id="c", controller_id=LEADER, topics=(), throttle_time=i32Timedelta.parse(datetime.timedelta(0))))
        assert answer.parts == [expected], version


@pytest.mark.parametrize("throttle_ms", [0, 1234])
@pytest.mark.parametrize("next_cursor", [None, ("\u00e9v\u00e9nements-\u6587", 1), ("zz", 0)])
def test_describe_topic_partitions_answer_is_kios_encoding(throttle_ms, next_cursor):
    mod = payload_module(DESCRIBE_TOPIC_PARTITIONS, 0, EntityType.response)
    paged = TopicEntry(ErrorCode.none, "paged", uuid.UUID(int=5), False, [4, 0, 9], 8, first_index=1998)
    topics = [*_topics(12), paged]
    answer = with_throttle(describe_topic_partitions_answer(mod.DescribeTopicPartitionsResponse, LEADER, topics,
                                                            next_cursor), throttle_ms)
    expected = encode_body(mod.DescribeTopicPartitionsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)),
        next_cursor=mod.Cursor(topic_name=next_cursor[0], partition_index=next_cursor[1]) if next_cursor else None,
        topics=tuple(mod.DescribeTopicPartitionsResponseTopic(
            error_code=t.error, name=t.name, topic_id=t.topic_id or uuid.UUID(int=0), is_internal=t.is_internal,
            topic_authorized_operations=t.authorized_operations,
            partitions=tuple(mod.DescribeTopicPartitionsResponsePartition(
                error_code=ErrorCode.none, partition_index=t.first_index + i, leader_id=LEADER, leader_epoch=epoch,
                replica_nodes=(LEADER,), isr_nodes=(LEADER,), eligible_leader_replicas=(), last_known_elr=(),
                offline_replicas=()) for i, epoch in enumerate(t.leader_epochs)))
            for t in topics)))
    assert answer.parts == [expected]


def test_a_cursor_past_its_topics_end_takes_none_of_the_partition_limit(store):
    """A cursor past the last partition of its topic answers it with no partitions (Kafka's handler),
    which take none of the limit: the next topic gets all of it."""
    from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest
    from kio.serial import entity_reader

    store.create_topic("t2", 2)
    store.create_topic("t5", 5)
    ctx = RequestContext(store=store, broker=BrokerInfo(LEADER, "localhost", 9092, "c"), client_id=None,
                         client_host="127.0.0.1", api_version=0, executor=None, log=logging.getLogger(__name__))
    body = _describe_topic_partitions(ctx, DescribeTopicPartitionsRequest(
        topics=(), response_partition_limit=2, cursor=Cursor(topic_name="t2", partition_index=9)))
    mod = payload_module(DESCRIBE_TOPIC_PARTITIONS, 0, EntityType.response)
    answer, _ = entity_reader(mod.DescribeTopicPartitionsResponse)(body.parts[0], 0)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics] == [("t2", []), ("t5", [0, 1])]
    assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == ("t5", 2)


def test_the_metadata_answer_is_laid_out_off_the_event_loop(kafka_server, monkeypatch):
    """An answer of 100,000 partitions takes ~15 ms to lay out (all of 20,000 topics ~50 ms): in a
    handler thread, not on the event loop every connection waits on."""
    import threading

    from klog.server import metadata as metadata_module
    from tests.serve_helpers import RawClient

    threads: list[str] = []
    real = metadata_module.metadata_answer

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(metadata_module, "metadata_answer", recording)
    kafka_server.store.create_topic("wide", 3)
    with RawClient(kafka_server.port) as client:
        answer = client.send(METADATA, 9, topics=None, allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert [(t.name, len(t.partitions)) for t in answer.topics] == [("wide", 3)]
    assert len(threads) == 1 and threads[0] != "klog-serve-loop"


def _random_text(rng, nullable: bool = False) -> str | None:
    """Empty, short or past 127 bytes (a compact length of two bytes), ASCII or not."""
    if nullable and rng.random() < 0.2:
        return None
    alphabet = "az._-09" if rng.random() < 0.5 else "a\u00e9\u6587\U0001f600-"
    return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 40, 130, 300])))


def _random_topic(rng, version: int) -> TopicEntry:
    epochs = [rng.choice([0, 1, 2**31 - 1, rng.randrange(2**31)]) for _ in range(rng.choice([0, 1, 3, 127, 200]))]
    error = rng.choice([ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception,
                        ErrorCode.topic_authorization_failed, ErrorCode.unknown_topic_id])
    return TopicEntry(error, _random_text(rng, nullable=version >= 12) if version >= 12 else _random_text(rng),
                      rng.choice([None, uuid.UUID(int=rng.randrange(2**128))]), rng.random() < 0.3, epochs,
                      rng.choice([NO_OPERATIONS, 0, rng.randrange(-(2**31), 2**31)]))


@pytest.mark.parametrize("version", range(0, 13))
def test_random_metadata_answers_are_kios_encoding(version):
    """Random answers (seeded): names empty, past 127 bytes or not ASCII, counts past 127 (compact
    counts of two bytes), any epoch, operations and throttle time, byte for byte kio's writer."""
    import random

    rng = random.Random(version)
    mod = payload_module(METADATA, version, EntityType.response)
    for _ in range(8):
        brokers = [BrokerEntry(rng.randrange(2**31), _random_text(rng), rng.randrange(2**16),
                               _random_text(rng, nullable=True)) for _ in range(rng.choice([0, 1, 3]))]
        topics = [_random_topic(rng, version) for _ in range(rng.choice([0, 1, 4]))]
        cluster_id, leader = _random_text(rng, nullable=True), rng.randrange(2**31)
        cluster_ops, throttle_ms = rng.choice([NO_OPERATIONS, rng.randrange(-(2**31), 2**31)]), rng.randrange(2**31)
        answer = with_throttle(metadata_answer(version, mod.MetadataResponse, brokers, cluster_id, leader, leader,
                                               topics, cluster_ops), throttle_ms)
        expected = encode_body(make(
            mod.MetadataResponse, controller_id=leader, cluster_id=cluster_id,
            cluster_authorized_operations=cluster_ops,
            throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)),
            brokers=tuple(make(mod.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                          for b in brokers),
            topics=tuple(make(
                mod.MetadataResponseTopic, error_code=t.error, name=t.name, topic_id=t.topic_id or uuid.UUID(int=0),
                is_internal=t.is_internal, topic_authorized_operations=t.authorized_operations,
                partitions=tuple(make(mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=i,
                                      leader_id=leader, leader_epoch=epoch, replica_nodes=(leader,),
                                      isr_nodes=(leader,), offline_replicas=())
                                 for i, epoch in enumerate(t.leader_epochs)))
                for t in topics)))
        assert answer.parts == [expected]

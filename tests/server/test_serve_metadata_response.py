"""The hand-written Metadata answer is, byte for byte, what kio's generated writer makes of the same
answer at every version klog serves (v0-v12), throttle time included."""

from __future__ import annotations

import datetime
import uuid

import pytest

from klog.protocol.framing import encode_body
from klog.protocol.kafka import make
from klog.protocol.schemas import payload_module
from klog.server.metadata_response import NO_OPERATIONS, BrokerEntry, TopicEntry, metadata_answer
from klog.server.throttle import with_throttle

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

METADATA = 3
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

"""The hand-written Produce answer is, byte for byte, what kio's generated writer makes of the same
answer at every version klog serves (v0-v11), throttle time included; and a Produce naming many
partition entries is answered entry for entry through a real connection."""

from __future__ import annotations

import datetime

import pytest

from klog.protocol.framing import encode_body
from klog.protocol.kafka import make
from klog.protocol.schemas import payload_module
from klog.server.produce_response import PartitionResult, ProduceAnswer, single_answer
from klog.server.throttle import with_throttle
from tests.serve_helpers import RawClient, huge_produce, read_answer

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

APPENDED_AT = 1_700_000_000_123

TOPICS = [
    ("orders", [PartitionResult(0, 0, 41, -1, 0),
                PartitionResult(3, 0, 7, APPENDED_AT, 5),
                PartitionResult(1, 87, -1, -1, -1, ((2, "record 2 has no key"),), "keyless record, compacted topic"),
                PartitionResult(2, 3, -1, -1, -1, (), "unknown partition")]),
    ("", []),
    ("\u00e9v\u00e9nements", [PartitionResult(0, 6, -1)]),
]


def _timestamp(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC) + datetime.timedelta(milliseconds=ms % 1000)


def _kio_answer(version: int, throttle_ms: int) -> bytes:
    mod = payload_module(0, version, EntityType.response)
    error_cls = getattr(mod, "BatchIndexAndErrorMessage", None)
    topics = []
    for name, parts in TOPICS:
        entries = tuple(make(mod.PartitionProduceResponse, index=p.index, error_code=ErrorCode(p.error),
                             base_offset=p.base_offset, log_append_time=_timestamp(p.log_append_time_ms),
                             log_start_offset=p.log_start_offset,
                             record_errors=tuple(make(error_cls, batch_index=i, batch_index_error_message=m)
                                                 for i, m in p.record_errors) if error_cls else (),
                             error_message=p.error_message) for p in parts)
        topics.append(make(mod.TopicProduceResponse, name=name, partition_responses=entries))
    return encode_body(make(mod.ProduceResponse, responses=tuple(topics),
                            throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))))


@pytest.mark.parametrize("version", range(0, 12))
@pytest.mark.parametrize("throttle_ms", [0, 1234])
def test_produce_answer_is_kios_encoding(version, throttle_ms):
    mod = payload_module(0, version, EntityType.response)
    answer = ProduceAnswer(version, len(TOPICS))
    for name, parts in TOPICS:
        answer.topic(name, len(parts))
        for p in parts:
            answer.partition(p)
    body = with_throttle(answer.finish(mod.ProduceResponse), throttle_ms)
    assert body.parts == [_kio_answer(version, throttle_ms)]


@pytest.mark.parametrize("version", range(0, 12))
@pytest.mark.parametrize("throttle_ms", [0, 1234])
@pytest.mark.parametrize("topic", ["orders", "\u00e9v\u00e9nements"])
def test_a_one_partition_answer_is_the_general_answer(version, throttle_ms, topic):
    """The answer packed for a Produce of one partition (the usual request) is the general one's bytes."""
    mod = payload_module(0, version, EntityType.response)
    general = ProduceAnswer(version, 1)
    general.topic(topic, 1)
    general.partition(PartitionResult(3, 0, 41, APPENDED_AT, 5))
    expected = with_throttle(general.finish(mod.ProduceResponse), throttle_ms)
    for _ in range(2):  # laid out, then from the cache of its topic's part
        packed = with_throttle(single_answer(version, topic, 3, 41, APPENDED_AT, 5, mod.ProduceResponse), throttle_ms)
        assert packed.parts == expected.parts


def test_a_produce_of_many_entries_is_answered_entry_for_entry(kafka_server):
    kafka_server.store.create_topic("free")
    with RawClient(kafka_server.port) as client:
        client.send_raw(huge_produce(5000)[4:])  # partition 0 named 5,000 times, no records
        frame = read_answer(client.sock)
    mod = payload_module(0, 9, EntityType.response)
    from kio.serial import entity_reader

    answer, _ = entity_reader(mod.ProduceResponse)(frame, 5)  # after the correlation id and tagged fields
    [topic] = answer.responses
    assert topic.name == "free" and len(topic.partition_responses) == 5000
    assert {(int(p.index), int(p.error_code), p.error_message) for p in topic.partition_responses} == \
        {(0, 2, "no record batch")}  # CORRUPT_MESSAGE

"""ListOffsets by time answers the found record's timestamp, as Kafka 3.9 does.

Goal: a client asking "the first offset at or after T" is told that record's timestamp (not T):
kafka-python's offsets_for_times hands it to users, Kafka Streams and tools compare it. Method:
raw ListOffsets v7 to an in-process `klog serve`, over CreateTime and LogAppendTime topics.
"""

from __future__ import annotations

import time

import pytest

from tests.serve_helpers import RawClient

pytest.importorskip("kio")


def _list_offsets(client: RawClient, topic: str, ts: int) -> tuple[int, int, int]:
    """(error, timestamp, offset) of ListOffsets v7 for partition 0 at `ts`."""
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module

    mod = payload_module(2, 7, EntityType.request)
    part = mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)
    resp = client.send(2, 7, replica_id=-1, isolation_level=0,
                       topics=(mod.ListOffsetsTopic(name=topic, partitions=(part,)),))
    got = resp.topics[0].partitions[0]
    return int(got.error_code), int(got.timestamp), int(got.offset)


def test_by_time_answers_the_found_records_timestamp(kafka_server):
    store = kafka_server.store
    store.create_topic("lt")
    start = int(time.time() * 1000) - 60_000  # (recent: older records are retention's)
    with store.producer() as producer:
        for i in range(10):
            producer.send("lt", b"v", timestamp=start + i * 1000)
    with RawClient(kafka_server.port) as client:
        assert _list_offsets(client, "lt", start + 4500) == (0, start + 5000, 5)  # before: start + 4500
        assert _list_offsets(client, "lt", start + 5000) == (0, start + 5000, 5)
        assert _list_offsets(client, "lt", start - 1) == (0, start, 0)
        assert _list_offsets(client, "lt", start + 9001) == (0, -1, -1)  # none at or after it
        assert _list_offsets(client, "lt", -3) == (0, start + 9000, 9)  # the largest timestamp


def test_by_time_on_a_log_append_time_topic_answers_the_append_time(kafka_server):
    store = kafka_server.store
    store.create_topic("la", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    with store.producer() as producer:
        producer.send("la", b"v", timestamp=1)
    after = int(time.time() * 1000)
    with RawClient(kafka_server.port) as client:
        err, ts, offset = _list_offsets(client, "la", before - 1)
    assert (err, offset) == (0, 0)
    assert before <= ts <= after  # the time it was appended, not the one asked (nor the one sent)

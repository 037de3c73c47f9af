"""Kafka's LogValidator on every Produce: a header whose max timestamp is -1 while its records carry
real timestamps (sarama writes such batches) is repaired, so the time index finds the records; a
keyless record into a compacted topic is INVALID_RECORD and message.timestamp.before/after.max.ms
are enforced (INVALID_TIMESTAMP), each naming the record at fault (RecordErrors, Produce v8+)."""

from __future__ import annotations

import json
import struct
import time

from kio.schema.errors import ErrorCode

from klog.store import codec
from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET, MAX_TIMESTAMP_OFFSET
from tests.serve_helpers import RawClient, produce_request_fields

T = 1_700_000_000_000


def _batch(records: list[tuple[bytes | None, bytes, int]], max_timestamp: int | None = None) -> bytes:
    data = bytearray(codec.encode_batch([(k, v, [], ts) for k, v, ts in records], 0))
    if max_timestamp is not None:
        struct.pack_into(">q", data, MAX_TIMESTAMP_OFFSET, max_timestamp)
        struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def _produce(client: RawClient, topic: str, data: bytes):  # noqa: ANN202 - the partition's answer
    resp = client.send(0, 9, **produce_request_fields(9, topic, 0, data))
    return resp.responses[0].partition_responses[0]


def _list_offsets_by_time(client: RawClient, topic: str, ts: int) -> int:
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module

    mod = payload_module(2, 1, EntityType.request)
    part = mod.ListOffsetsPartition(partition_index=0, timestamp=ts)
    resp = client.send(2, 1, replica_id=-1, topics=(mod.ListOffsetsTopic(name=topic, partitions=(part,)),))
    return int(resp.topics[0].partitions[0].offset)


def test_a_batch_claiming_no_max_timestamp_is_found_by_time(kafka_server, store, cli):
    store.create_topic("sarama", partitions=1)
    with RawClient(kafka_server.port) as client:
        for i in range(3):  # three batches, each saying max timestamp -1
            answer = _produce(client, "sarama", _batch([(b"k", b"v%d" % i, T + i * 60_000)], max_timestamp=-1))
            assert answer.error_code == ErrorCode.none
        assert _list_offsets_by_time(client, "sarama", T + 60_000) == 1
    assert store.offsets("sarama", timestamp=T + 120_000) == {0: 2}  # klog offsets --time
    r = cli("consume", "sarama", "--since", str(T + 60_000), "--json")
    assert r.exit_code == 0, r.stderr
    assert [json.loads(line)["offset"] for line in r.out.splitlines()] == [1, 2]


def test_keyless_records_into_a_compacted_topic_are_refused_naming_the_record(kafka_server, store):
    store.create_topic("table", partitions=1, configs={"cleanup.policy": "compact"})
    with RawClient(kafka_server.port) as client:
        answer = _produce(client, "table", _batch([(b"a", b"1", T), (None, b"2", T), (b"c", b"3", T)]))
        assert answer.error_code == ErrorCode.invalid_record
        assert [int(e.batch_index) for e in answer.record_errors] == [1]
        assert _produce(client, "table", _batch([(b"a", b"1", T)])).error_code == ErrorCode.none


def test_timestamps_outside_before_and_after_max_ms_are_refused(kafka_server, store):
    store.create_topic("recent", partitions=1, configs={"message.timestamp.before.max.ms": "3600000",
                                                        "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    with RawClient(kafka_server.port) as client:
        old = _produce(client, "recent", _batch([(b"a", b"1", now), (b"b", b"2", now - 7_200_000)]))
        assert old.error_code == ErrorCode.invalid_timestamp
        assert [int(e.batch_index) for e in old.record_errors] == [1]
        future = _produce(client, "recent", _batch([(b"a", b"1", now + 3_600_000)]))
        assert future.error_code == ErrorCode.invalid_timestamp
        assert _produce(client, "recent", _batch([(b"a", b"1", now)])).error_code == ErrorCode.none

"""Produce's first check (klog.server.produce._txn_allowed, Kafka's KafkaApis.handleProduceRequest):
a request holding transactional records (the first batch of any partition) without a transactional
id the client may Write is refused as a whole, TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every
partition, nothing of it appended; with acks=0 the connection closes. The check reads a v2 batch's
attributes whatever its compression, and never a v0/v1 message's."""

from __future__ import annotations

import struct

import pytest

from tests.serve_helpers import RawClient, batch, produce_request_fields
from tests.server.test_serve_acks0_group import _closed, _frame, _values

pytest.importorskip("kio")

TXN_AUTH_FAILED = 53


def _transactional(records: bytes) -> bytes:
    from klog.store import codec
    from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET

    data = bytearray(records)
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)[0] | 0x10)
    struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def _send(client: RawClient, entries: list[tuple[int, bytes]], version: int = 9, topic: str = "t") -> list:
    """(partition, error code) of a Produce acks=1 of `entries` (partition, records) of `topic`."""
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module

    mod = payload_module(0, version, EntityType.request)
    fields = produce_request_fields(version, topic, 0, b"", acks=1)
    fields["topic_data"] = (mod.TopicProduceData(name=topic, partition_data=tuple(
        mod.PartitionProduceData(index=p, records=r) for p, r in entries)),)
    answer = client.send(0, version, **fields)
    return [(int(p.index), int(p.error_code)) for t in answer.responses for p in t.partition_responses]


def _idempotent(value: bytes, sequence: int = 0) -> bytes:
    return batch([value], 1000, 0, sequence)


def test_a_transactional_first_batch_in_one_partition_refuses_the_plain_other_partitions_too(kafka_server):
    kafka_server.store.create_topic("t", 3)
    with RawClient(kafka_server.port) as client:
        got = _send(client, [(0, batch([b"plain"])), (1, _transactional(_idempotent(b"txn"))),
                             (2, batch([b"plain"]))])
    assert got == [(0, TXN_AUTH_FAILED), (1, TXN_AUTH_FAILED), (2, TXN_AUTH_FAILED)]
    assert _values(kafka_server.data_dir, "t", 3) == {0: [], 1: [], 2: []}


def test_with_acks0_the_whole_request_is_refused_and_the_connection_closes(kafka_server):
    import socket

    kafka_server.store.create_topic("t", 2)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_frame(1, [("t", 0, batch([b"plain"])), ("t", 1, _transactional(_idempotent(b"txn")))])
                     + _frame(2, [("t", 0, batch([b"after"]))]))
        assert _closed(sock)
    assert _values(kafka_server.data_dir, "t", 2) == {0: [], 1: []}


def test_a_compressed_transactional_batch_is_seen_as_transactional(kafka_server):
    from klog.store import codec, compression

    kafka_server.store.create_topic("t", 1)
    gz = _transactional(bytes(codec.encode_batch([(None, b"z" * 100, [], 1_700_000_000_000)], 0,
                                                 codec=compression.GZIP)))
    with RawClient(kafka_server.port) as client:
        assert _send(client, [(0, gz)]) == [(0, TXN_AUTH_FAILED)]


def test_a_v1_message_is_never_transactional_whatever_its_bytes(kafka_server):
    """Produce v2 carries magic 0/1 message sets: where a v2 batch has its attributes, a v1
    message has its timestamp; one whose timestamp byte there has the transactional bit appends."""
    from tests.kafka_files import legacy_plain

    kafka_server.store.create_topic("t", 1)
    import time

    stamp = int(time.time() * 1000)  # (recent: an old one would be deleted by retention.ms)
    while not (stamp >> 24) & 0x10:  # (its byte 22 of the message: the 0x10 bit set, at most ~3 days back)
        stamp -= 1 << 24
    message = legacy_plain(1, 0, None, b"old", stamp)
    assert message[22] & 0x10
    with RawClient(kafka_server.port) as client:
        assert _send(client, [(0, message)], version=2) == [(0, 0)]
    assert _values(kafka_server.data_dir, "t", 1) == {0: [b"old"]}

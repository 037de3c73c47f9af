"""Pipelined Produce requests a hostile or unusual client sends in one burst (the request loop's
grouping, klog.server.produce.produce_group): requests of other acks or versions, one refused in
the middle, an idempotent producer's in-flight batches; each is answered as if sent alone, in order."""

from __future__ import annotations

import datetime
import io
import struct
import time

import pytest

from tests.serve_helpers import RawClient, batch, huge_produce, produce_request_fields

pytest.importorskip("kio")
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

from klog.protocol.kafka import make  # noqa: E402
from klog.protocol.schemas import payload_module  # noqa: E402


def _frame(version: int, correlation: int, partition: int, records: bytes, acks: int = 1, topic: str = "free") -> bytes:
    from kio.schema.request_header.v1.header import RequestHeader as V1
    from kio.schema.request_header.v2.header import RequestHeader as V2

    mod = payload_module(0, version, EntityType.request)
    header = V2 if mod.ProduceRequest.__flexible__ else V1
    buf = io.BytesIO()
    entity_writer(header)(buf, header(request_api_key=0, request_api_version=version, correlation_id=correlation,
                                      client_id="burst"))
    entity_writer(mod.ProduceRequest)(buf, make(mod.ProduceRequest,
                                                **produce_request_fields(version, topic, partition, records, acks)))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


def _answers(client: RawClient, versions: list[int]) -> list[tuple[int, int, int, int]]:
    """(correlation id, partition, error code, base offset) of the next answers, one per version."""
    got = []
    for version in versions:
        size = struct.unpack(">i", client._exactly(4))[0]
        data = client._exactly(size)
        answer_type = payload_module(0, version, EntityType.response).ProduceResponse
        answer, _ = entity_reader(answer_type)(data, 5 if answer_type.__flexible__ else 4)
        [topic] = answer.responses
        [part] = topic.partition_responses
        got.append((struct.unpack_from(">i", data)[0], int(part.index), int(part.error_code), int(part.base_offset)))
    return got


def test_a_burst_of_other_acks_versions_and_a_refused_request_is_answered_in_order(kafka_server):
    kafka_server.store.create_topic("free", partitions=3)
    refused = bytearray(huge_produce(20_001))  # (past --max-request-entries: INVALID_REQUEST)
    struct.pack_into(">i", refused, 8, 5)
    burst = [_frame(7, 1, 0, batch([b"a"])), _frame(7, 2, 1, batch([b"b"]), acks=0), _frame(7, 3, 2, batch([b"c"])),
             _frame(8, 4, 0, batch([b"d"])), bytes(refused), _frame(9, 6, 1, batch([b"e"])),
             _frame(9, 7, 2, batch([b"f"])), _frame(9, 8, 0, batch([b"g"]))]
    with RawClient(kafka_server.port) as client:
        client.sock.sendall(b"".join(burst))
        got = _answers(client, [7, 7, 8])
        size = struct.unpack(">i", client._exactly(4))[0]
        refusal = client._exactly(size)
        got += _answers(client, [9, 9, 9])
    assert got == [(1, 0, 0, 0), (3, 2, 0, 0), (4, 0, 0, 1), (6, 1, 0, 1), (7, 2, 0, 1), (8, 0, 0, 2)]
    assert struct.unpack_from(">i", refusal)[0] == 5
    # (the acks=0 one appended too: p1 holds it and the one after)
    assert [kafka_server.store.partition("free", p).high_watermark() for p in range(3)] == [3, 2, 2]


def test_an_idempotent_producers_pipelined_batches_append_in_sequence(kafka_server):
    kafka_server.store.create_topic("free", partitions=2)
    with RawClient(kafka_server.port) as client:
        pid = client.send(22, 2, transactional_id=None,
                          transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)))
        producer_id, epoch = int(pid.producer_id), int(pid.producer_epoch)

        # one timestamp: the retry of seq 1 is the same bytes, as a real retry is (a duplicate is
        # acknowledged only for the batch written: batches made in two milliseconds differed, 45)
        stamp = int(time.time() * 1000)

        def idem(correlation: int, partition: int, sequence: int) -> bytes:
            records = batch([b"%d-%d" % (partition, sequence)], producer_id, epoch, sequence, timestamp=stamp)
            return _frame(9, correlation, partition, records, acks=-1)

        # in flight at once: p0 seq 0-3 with p1 seq 0-1 between; p0 seq 1 again (a retry: its offset),
        # then p0 seq 9 (a gap: OUT_OF_ORDER_SEQUENCE_NUMBER, 45)
        sent = [idem(1, 0, 0), idem(2, 1, 0), idem(3, 0, 1), idem(4, 0, 2), idem(5, 1, 1), idem(6, 0, 3),
                idem(7, 0, 1), idem(8, 0, 9)]
        client.sock.sendall(b"".join(sent))
        got = _answers(client, [9] * len(sent))
    assert got == [(1, 0, 0, 0), (2, 1, 0, 0), (3, 0, 0, 1), (4, 0, 0, 2), (5, 1, 0, 1), (6, 0, 0, 3),
                   (7, 0, 0, 1), (8, 0, 45, -1)]

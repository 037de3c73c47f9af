"""Pipelined Produce requests (librdkafka sends one partition per request: a wide topic's requests
come in a burst) are appended together and answered one by one, in order, each with its own
partitions' offsets and errors; a partition named in two of them gets its batches in request order."""

from __future__ import annotations

import io
import struct

import pytest

from tests.serve_helpers import RawClient, batch, produce, produce_request_fields

pytest.importorskip("kio")
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

from klog.protocol.kafka import make  # noqa: E402
from klog.protocol.schemas import payload_module  # noqa: E402

VERSION = 7  # not flexible: a v1 header, the answer right after the correlation id


def frame(correlation: int, partition: int, values: list[bytes]) -> bytes:
    from kio.schema.request_header.v1.header import RequestHeader

    mod = payload_module(0, VERSION, EntityType.request)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=VERSION,
                                                    correlation_id=correlation, client_id="burst"))
    entity_writer(mod.ProduceRequest)(buf, make(mod.ProduceRequest,
                                                **produce_request_fields(VERSION, "burst", partition, batch(values))))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


def test_a_burst_of_pipelined_produces_is_appended_together_and_answered_in_order(kafka_server, monkeypatch):
    import klog.server.produce as produce_module

    groups: list[int] = []
    grouped = produce_module.produce_group

    async def counting(ctxs, requests):  # noqa: ANN001, ANN202 - the handler's own types
        groups.append(len(requests))
        return await grouped(ctxs, requests)

    monkeypatch.setattr(produce_module, "produce_group", counting)
    kafka_server.store.create_topic("burst", partitions=4)
    sent = [(0, [b"a"]), (1, [b"b", b"c"]), (2, [b"d"]), (0, [b"e", b"f"]), (9, [b"lost"]), (3, [b"g"]), (0, [b"h"])]
    answer_type = payload_module(0, VERSION, EntityType.response).ProduceResponse
    with RawClient(kafka_server.port) as client:
        client.sock.sendall(b"".join(frame(i + 1, p, values) for i, (p, values) in enumerate(sent)))
        got = []
        for _ in sent:
            size = struct.unpack(">i", client._exactly(4))[0]
            data = client._exactly(size)
            answer, _ = entity_reader(answer_type)(data, 4)
            [topic] = answer.responses
            [part] = topic.partition_responses
            correlation = struct.unpack_from(">i", data)[0]
            got.append((correlation, int(part.index), int(part.error_code), int(part.base_offset)))
        client.correlation = len(sent)
        assert produce(client, "burst", 0, batch([b"after"]), version=VERSION) == (0, 4)
    assert got == [(1, 0, 0, 0), (2, 1, 0, 0), (3, 2, 0, 0), (4, 0, 0, 1), (5, 9, 3, -1), (6, 3, 0, 0), (7, 0, 0, 3)]
    assert max(groups) > 1  # the burst was handled as one group (or a few), not request by request

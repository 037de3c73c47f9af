"""A request whose strings are not valid UTF-8 is read as Kafka's Java readers read it (`new
String(bytes, UTF_8)`: every malformed sequence becomes U+FFFD) and answered as Kafka answers the
name it then holds, instead of closing the connection: Metadata and CreateTopics say
INVALID_TOPIC_EXCEPTION, Produce UNKNOWN_TOPIC_OR_PARTITION (a name Kafka's metadata does not hold)."""

from __future__ import annotations

import logging
import struct

import pytest

from klog.protocol.walk import uvarint_bytes, with_valid_strings
from tests.serve_helpers import RawClient, batch

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402

BAD = b"ab\xffc\xc3d"  # a byte that starts nothing, and a sequence cut short
READ_AS = "ab\ufffdc\ufffdd"  # what Java's decoder (and Python's "replace") make of it


def _header(api_key: int, version: int, correlation: int, client_id: bytes = b"utf", flexible: bool = False) -> bytes:
    tags = b"\0" if flexible else b""
    return struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id + tags


def _metadata_v1(names: list[bytes]) -> bytes:
    return struct.pack(">i", len(names)) + b"".join(struct.pack(">h", len(n)) + n for n in names)


def _metadata_v12(names: list[bytes]) -> bytes:
    topics = b"".join(bytes(16) + uvarint_bytes(len(n) + 1) + n + b"\0" for n in names)
    return uvarint_bytes(len(names) + 1) + topics + b"\1\0\0"  # auto-create, no operations, no tags


def _answer(client: RawClient, frame: bytes, api_key: int, version: int):  # noqa: ANN202 - a kio response
    from klog.protocol.schemas import response_schema

    schema = response_schema(api_key, version)  # (imported before the server imports the request's module)
    client.correlation = struct.unpack_from(">i", frame, 4)[0]
    client.send_raw(frame)
    return client.read(schema)


@pytest.mark.parametrize("version,body", [(1, _metadata_v1), (12, _metadata_v12)])
def test_metadata_of_a_name_not_utf8_is_answered_invalid_topic(kafka_server, caplog, version, body):
    caplog.set_level(logging.INFO, logger="klog.serve")
    with RawClient(kafka_server.port) as client:
        frame = _header(3, version, 7, flexible=version >= 9) + body([BAD, b"fine"])
        answer = _answer(client, frame, 3, version)
        assert [(t.name, t.error_code) for t in answer.topics] == \
            [(READ_AS, E.invalid_topic_exception), ("fine", E.none)]
        assert client.send(18, 0).error_code == E.none  # the connection carries on
    lines = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(lines) == 1 and "Metadata" in lines[0], lines


def test_produce_to_a_name_not_utf8_is_unknown_topic_and_a_bad_client_id_is_read_too(kafka_server):
    records = batch([b"x"])
    body = (struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", 1) + struct.pack(">h", len(BAD)) + BAD
            + struct.pack(">i", 1) + struct.pack(">ii", 0, len(records)) + records)
    with RawClient(kafka_server.port) as client:
        answer = _answer(client, _header(0, 3, 3, client_id=b"cli\xfe") + body, 0, 3)
        assert [(t.name, [p.error_code for p in t.partition_responses]) for t in answer.responses] == \
            [(READ_AS, [E.unknown_topic_or_partition])]
        assert client.send(18, 0).error_code == E.none


def test_create_topics_of_a_name_not_utf8_is_invalid_topic(kafka_server):
    body = (struct.pack(">i", 1) + struct.pack(">h", len(BAD)) + BAD + struct.pack(">ih", 1, 1)
            + struct.pack(">ii", 0, 0) + struct.pack(">i", 5000) + b"\0")  # no assignments, configs; not validate-only
    with RawClient(kafka_server.port) as client:
        answer = _answer(client, _header(19, 1, 9) + body, 19, 1)
        assert [(t.name, t.error_code) for t in answer.topics] == [(READ_AS, E.invalid_topic_exception)]
    assert READ_AS not in [t.name for t in kafka_server.store.list_topics()]


def test_strings_are_rewritten_with_their_new_lengths_and_nothing_else_changes():
    from klog.protocol.schemas import request_schema

    schema = request_schema(3, 12)
    body = _metadata_v12([b"ok", BAD, b"\xe2\x82"])
    fixed = with_valid_strings(body, 0, schema)
    assert fixed == _metadata_v12([b"ok", READ_AS.encode(), "\ufffd".encode()])
    assert with_valid_strings(_metadata_v12([b"ok", "h\u00e9".encode()]), 0, schema) is None  # valid: untouched
    assert with_valid_strings(_metadata_v1([BAD]), 0, request_schema(3, 1)) == _metadata_v1([READ_AS.encode()])

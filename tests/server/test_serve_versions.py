"""The version matrix: klog serve accepts at least every version Kafka 3.9's broker accepts (KIP-896's
old versions included), and every advertised version of every API answers a request built from
kio's types with a well-formed response of that version. A version past the range gets Kafka's
treatment: ApiVersions answers UNSUPPORTED_VERSION (v0 framing), every other API closes the
connection with one log line naming the client, the API and the version."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import socket
import struct
import time
import types
import typing
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from klog.protocol.schemas import request_schema
from tests.serve_helpers import RawClient, raw_answer

# apache/kafka 3.9.0 clients/src/main/resources/common/message/*Request.json "validVersions"
KAFKA_3_9: dict[int, tuple[int, int]] = {
    0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4),
    13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2),
    22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4),
    29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4), 36: (0, 2),
    37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 44: (0, 1), 47: (0, 0), 48: (0, 1),
    49: (0, 1), 50: (0, 0), 51: (0, 0), 60: (0, 1), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1),
}
# what each request needs beyond "empty": an answer (acks=0 gets none), no long poll
OVERRIDES: dict[int, dict[str, typing.Any]] = {0: {"acks": -1}, 1: {"replica_id": -1, "max_bytes": 1 << 20}}


def _default(tp: typing.Any) -> typing.Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        return None if type(None) in args else _default(args[0])
    if origin is tuple:
        return ()
    if getattr(tp, "__supertype__", None) is not None:
        return _default(tp.__supertype__)
    if dataclasses.is_dataclass(tp):
        return build(tp)
    if getattr(tp, "__name__", "").endswith("Timedelta"):
        return tp.parse(datetime.timedelta(0))
    for base, value in ((bool, False), (int, 0), (str, ""), (bytes, b"")):
        if issubclass(tp, base):
            return tp(value)
    if issubclass(tp, uuid.UUID):
        return uuid.UUID(int=0)
    raise TypeError(f"no default for {tp}")


def build(cls: type, **values: typing.Any) -> typing.Any:
    """An instance of a kio entity with every required field at its empty value."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = _default(hints[f.name])
    return cls(**values)


def advertised(port: int) -> dict[int, tuple[int, int]]:
    with RawClient(port) as client:
        resp = client.send(18, 3, client_software_name="t", client_software_version="1")
    assert resp.error_code == ErrorCode.none
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


def test_every_kafka_3_9_version_is_advertised(kafka_server):
    ranges = advertised(kafka_server.port)
    short = {key: ranges.get(key) for key, want in KAFKA_3_9.items()
             if key not in ranges or ranges[key][0] > want[0] or ranges[key][1] < want[1]}
    assert short == {}


def _served() -> list[int]:
    from klog.server.dispatch import load_handlers

    return sorted(set(KAFKA_3_9) | set(load_handlers()))


@pytest.mark.parametrize("api_key", _served())
def test_every_advertised_version_answers(kafka_server, api_key):
    lo, hi = advertised(kafka_server.port)[api_key]
    for version in range(lo, hi + 1):
        cls = request_schema(api_key, version)
        fields = {f.name: getattr(build(cls, **{k: v for k, v in OVERRIDES.get(api_key, {}).items()
                                                 if k in {g.name for g in dataclasses.fields(cls)}}), f.name)
                  for f in dataclasses.fields(cls)}
        with RawClient(kafka_server.port) as client:
            if api_key in NEGATIVE_TIMESTAMPS:
                body = raw_answer(client, api_key, version, **fields)
                assert struct.unpack_from(">h", body)[0] == ErrorCode.delegation_token_request_not_allowed.value
                continue
            response = client.send(api_key, version, **fields)  # parses as that version, or raises
        assert int(type(response).__version__) == version


# answers carrying Kafka's -1 timestamps (a refused token request), which kio's reader refuses to read:
# checked by their bytes (tests/server/test_serve_tokens.py decodes each field)
NEGATIVE_TIMESTAMPS = frozenset({38, 39, 40})


def test_api_versions_past_the_range_answers_unsupported_version(kafka_server):
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        body = struct.pack(">hhih", 18, 99, 7, -1)
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", sock.recv(4))[0]
        frame = b""
        while len(frame) < size:
            frame += sock.recv(size - len(frame))
    correlation, error = struct.unpack_from(">ih", frame)
    assert (correlation, error) == (7, ErrorCode.unsupported_version.value)


@pytest.mark.parametrize("api_key,version", [(0, 99), (1, 99), (3, 99)])
def test_a_refused_version_closes_with_one_line_naming_client_api_and_version(kafka_server, caplog, api_key,
                                                                                 version):
    caplog.set_level(logging.WARNING)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        client_id = b"old-client"
        body = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
        for _ in range(2):  # the second never gets read: the first closed the connection
            try:
                sock.sendall(struct.pack(">i", len(body)) + body)
            except OSError:
                break
        try:
            answer = sock.recv(4)
        except ConnectionResetError:  # (closed with the second frame unread: a reset, not an end)
            answer = b""
        assert answer == b""
    name = {0: "Produce", 1: "Fetch", 3: "Metadata"}[api_key]
    deadline = time.monotonic() + 5
    while True:  # (the server's thread logs it; bounded wait, under load it can trail the close)
        lines = [r.getMessage() for r in caplog.records if f"{name} v{version}" in r.getMessage()]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert len(lines) == 1, lines
    assert "127.0.0.1" in lines[0] and "old-client" in lines[0]


def test_legacy_types_round_trip_through_kio():
    """The vendored 3.9 types (ListOffsets v0 here) are read and written by kio's runtime."""
    import io

    from kio.serial import entity_reader, entity_writer

    cls = request_schema(2, 0)
    assert cls.__type__ == EntityType.request
    req = build(cls, replica_id=-1)
    buf = io.BytesIO()
    entity_writer(cls)(buf, req)
    assert entity_reader(cls)(buf.getvalue(), 0)[0] == req


def _create(client: RawClient, version: int, name: str, partitions: int = 1) -> typing.Any:
    mod = request_schema(19, version)
    topic = build(typing.get_type_hints(mod)["topics"].__args__[0], name=name, num_partitions=partitions,
                  replication_factor=1)
    return client.send(19, version, topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False)


def test_the_oldest_versions_do_their_work(kafka_server):
    """What sarama 1.22 and Burrow send: CreateTopics v0, Produce, ListOffsets v0, OffsetCommit v0/v1,
    OffsetFetch v0, DescribeConfigs v0, DeleteTopics v0."""
    from kio.static.primitive import i32Timedelta

    from tests.serve_helpers import batch, produce

    with RawClient(kafka_server.port) as client:
        created = _create(client, 0, "old")
        assert created.topics[0].error_code == ErrorCode.none
        assert produce(client, "old", 0, batch([b"a", b"b", b"c"])) == (ErrorCode.none, 0)

        lo = request_schema(2, 0)
        hints = typing.get_type_hints(lo)
        topic_cls = hints["topics"].__args__[0]
        part_cls = typing.get_type_hints(topic_cls)["partitions"].__args__[0]
        answers = {}
        for ts in (-1, -2):
            resp = client.send(2, 0, replica_id=-1, topics=(topic_cls(name="old", partitions=(
                part_cls(partition_index=0, timestamp=ts, max_num_offsets=1),)),))
            p = resp.topics[0].partitions[0]
            answers[ts] = (p.error_code, tuple(int(o) for o in p.old_style_offsets))
        assert answers == {-1: (ErrorCode.none, (3,)), -2: (ErrorCode.none, (0,))}

        for version, offset in ((0, 2), (1, 1)):
            oc = request_schema(8, version)
            t_cls = typing.get_type_hints(oc)["topics"].__args__[0]
            p_cls = typing.get_type_hints(t_cls)["partitions"].__args__[0]
            part = build(p_cls, partition_index=0, committed_offset=offset, committed_metadata="m")
            resp = client.send(8, version, group_id="sarama", generation_id_or_member_epoch=-1, member_id="",
                               topics=(t_cls(name="old", partitions=(part,)),))
            assert resp.topics[0].partitions[0].error_code == ErrorCode.none, version
        of = request_schema(9, 0)
        t_cls = typing.get_type_hints(of)["topics"].__args__[0]
        resp = client.send(9, 0, group_id="sarama", topics=(t_cls(name="old", partition_indexes=(0,)),))
        p = resp.topics[0].partitions[0]
        assert (p.error_code, int(p.committed_offset), p.metadata) == (ErrorCode.none, 1, "m")

        dc = request_schema(32, 0)
        r_cls = typing.get_type_hints(dc)["resources"].__args__[0]
        resp = client.send(32, 0, resources=(r_cls(resource_type=2, resource_name="old", configuration_keys=None),))
        result = resp.results[0]
        assert result.error_code == ErrorCode.none
        assert {c.name: c.is_default for c in result.configs}["cleanup.policy"] is True

        resp = client.send(20, 0, topic_names=("old",), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)))
        assert resp.responses[0].error_code == ErrorCode.none


def test_internal_topics_are_reserved_and_listed_as_internal(kafka_server, store):
    """Burrow's Metadata for __consumer_offsets must not auto-create an ordinary topic; clients may not
    create or delete Kafka's internal topics; one that exists (an old store's) is listed as internal."""
    from kio.static.primitive import i32Timedelta

    md = request_schema(3, 4)
    topic_cls = typing.get_type_hints(md)["topics"].__args__[0].__args__[0]
    with RawClient(kafka_server.port) as client:
        resp = client.send(3, 4, topics=(topic_cls(name="__consumer_offsets"),), allow_auto_topic_creation=True)
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert not store.has_topic("__consumer_offsets")
        created = _create(client, 2, "__transaction_state")
        assert created.topics[0].error_code == ErrorCode.invalid_request
        store.create_topic("__consumer_offsets", partitions=1)  # as an old klog auto-created it
        resp = client.send(3, 4, topics=(topic_cls(name="__consumer_offsets"),), allow_auto_topic_creation=True)
        assert (resp.topics[0].error_code, resp.topics[0].is_internal) == (ErrorCode.none, True)
        resp = client.send(20, 1, topic_names=("__consumer_offsets",),
                           timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)))
        assert resp.responses[0].error_code == ErrorCode.invalid_request
        assert store.has_topic("__consumer_offsets")


def test_create_topics_on_a_topic_holding_records_answers_topic_already_exists(kafka_server, store):
    from tests.serve_helpers import batch, produce

    with RawClient(kafka_server.port) as client:
        assert _create(client, 5, "busy").topics[0].error_code == ErrorCode.none
        assert produce(client, "busy", 0, batch([b"a"]))[0] == ErrorCode.none
        again = _create(client, 5, "busy").topics[0]
        assert again.error_code == ErrorCode.topic_already_exists, again.error_message


def test_negative_committed_offsets_are_stored_as_kafka_stores_them(kafka_server, store):
    store.create_topic("neg", partitions=1)
    with RawClient(kafka_server.port) as client:
        oc = request_schema(8, 2)
        t_cls = typing.get_type_hints(oc)["topics"].__args__[0]
        p_cls = typing.get_type_hints(t_cls)["partitions"].__args__[0]
        part = build(p_cls, partition_index=0, committed_offset=-1, committed_metadata="reset")
        resp = client.send(8, 2, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                           retention_time=datetime.timedelta(milliseconds=-1),
                           topics=(t_cls(name="neg", partitions=(part,)),))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.none
        of = request_schema(9, 1)
        t_cls = typing.get_type_hints(of)["topics"].__args__[0]
        resp = client.send(9, 1, group_id="g", topics=(t_cls(name="neg", partition_indexes=(0,)),))
        p = resp.topics[0].partitions[0]
        assert (p.error_code, int(p.committed_offset), p.metadata) == (ErrorCode.none, -1, "reset")

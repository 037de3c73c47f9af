"""Schemas whose named types are met again and again stay linear (klog/connect/protobuf.py, klog/connect/avro.py,
klog/connect/data.py): a Protobuf message or an Avro named type is made once into a Connect struct, and met
again its fields are shared (Confluent's ProtobufData keeps one struct per message), so messages holding each
other both ways, or a type held twice at each of 40 levels, are read, keyed and written back in time linear in
the schema, not in the paths through it. Checked with confluent-kafka's serializers and deserializers. The
time bounds guard an exponential (seconds, with a wide margin), not a benchmark."""

from __future__ import annotations

import json
import time
from urllib.request import urlopen

import pytest

pytest.importorskip("google.protobuf", reason="the ProtobufConverter needs protobuf (pip install 'klog[connect]')")
protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.data import recursive_struct, schema_key  # noqa: E402
from tests.connect.test_connect_avro import ctx  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

PROTOBUF = "io.confluent.connect.protobuf.ProtobufConverter"
MESSAGES = 30
BOUND_S = 30.0  # linear: 1-5 s here under load; the old expansion was refused past 50,000 fields


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def _mutual_proto(n: int) -> str:
    """n messages, each holding every other one (M0 holds M1 ... and M1 holds M0 ...)."""
    out = ['syntax = "proto3";', "package mutual;"]
    for i in range(n):
        fields = ["  string label = 1;", *(f"  M{j} m{j} = {j + 2};" for j in range(n) if j != i)]
        out.append(f"message M{i} {{\n" + "\n".join(fields) + "\n}")
    return "\n".join(out) + "\n"


def _mutual_classes(n: int) -> list[type]:
    from google.protobuf import descriptor_pool, message_factory

    from klog.protocol import protobuf_schema as proto

    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto.to_descriptor(proto.parse_text(_mutual_proto(n)), proto.well_known(), name="mutual/m.proto"))
    return [message_factory.GetMessageClass(pool.FindMessageTypeByName(f"mutual.M{i}")) for i in range(n)]


def _structs(schema: dict) -> dict[int, dict]:
    """The distinct fields lists of a schema's structs (id -> a struct holding them), each walked once."""
    seen: dict[int, dict] = {}
    todo = [schema]
    while todo:
        s = todo.pop()
        for part in ("items", "keys", "values"):
            if isinstance(s.get(part), dict):
                todo.append(s[part])
        fields = s.get("fields")
        if isinstance(fields, list) and id(fields) not in seen:
            seen[id(fields)] = s
            todo += fields
    return seen


@pytest.mark.slow
def test_messages_holding_each_other_both_ways_are_read_and_written_back_in_linear_time(registry_url):
    """30 messages each holding the 29 others (as fields both ways): the Connect schema has one struct per message
    (30 fields lists, 900 fields), where expanding each path made more than 50,000 fields and failed the record.
    Written back by the converter, confluent-kafka's ProtobufDeserializer reads the same message, and the
    converter reads its own record again as the same value."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    classes = _mutual_classes(MESSAGES)
    m0 = classes[0]
    message = m0(label="top")
    message.m1.label = "one"
    message.m1.m0.label = "back to M0"
    message.m1.m2.m29.m3.label = "deep"
    message.m29.m28.label = "other way"
    data = protobuf.ProtobufSerializer(m0, SchemaRegistryClient({"url": registry_url}),
                                       {"use.deprecated.format": False})(message, ctx("mutual"))
    c = make_converter("value.converter", PROTOBUF, {"schema.registry.url": registry_url}, False)
    started = time.monotonic()
    schema, value = c.to_connect("mutual", data)
    structs = _structs(schema)
    assert len(structs) == MESSAGES and sum(len(s["fields"]) for s in structs.values()) == MESSAGES * MESSAGES
    fields = {f["field"]: f for f in schema["fields"]}
    m1_fields = {f["field"]: f for f in fields["m1"]["fields"]}
    assert m1_fields["m0"]["fields"] is schema["fields"]  # M0 inside M1: the struct being made (it holds itself)
    assert m1_fields["m2"]["fields"] is fields["m2"]["fields"]  # M2 met again elsewhere: the same struct
    assert recursive_struct(schema) is not None and "shared" in schema_key(schema)
    assert value["label"] == "top" and value["m1"]["m0"]["label"] == "back to M0"
    assert value["m1"]["m2"]["m29"]["m3"]["label"] == "deep" and value["m29"]["m28"]["label"] == "other way"

    written = c.from_connect("mutual-copy", schema, value)
    again = protobuf.ProtobufDeserializer(m0, {"use.deprecated.format": False})(written, ctx("mutual-copy"))
    assert again == message
    assert c.to_connect("mutual-copy", written)[1] == value
    assert time.monotonic() - started < BOUND_S
    with urlopen(f"{registry_url}/subjects/mutual-copy-value/versions/latest") as answer:
        text = json.loads(answer.read())["schema"]
    # one message definition per struct: a message met again elsewhere is named by its full name
    assert text.count("message M") == MESSAGES and len(text) < 100_000


@pytest.mark.slow
def test_a_message_held_twice_at_each_of_30_levels_is_read_and_written_back(registry_url):
    """M0 holds two M1s, M1 two M2s, ... M30: one struct per message (the tree of its uses has 2^30), written back
    as nested messages each defined once (nested 30 deep: the registry's parser takes 32 levels); confluent-kafka's
    deserializer reads the same message."""
    from google.protobuf import descriptor_pool, message_factory

    from klog.protocol import protobuf_schema as proto

    levels = 30
    text = 'syntax = "proto3";\npackage fan;\n' + "".join(
        f"message M{i} {{ M{i + 1} a = 1; M{i + 1} b = 2; }}\n" for i in range(levels)) + \
        f"message M{levels} {{ int32 v = 1; }}\n"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto.to_descriptor(proto.parse_text(text), proto.well_known(), name="fan/m.proto"))
    m0 = message_factory.GetMessageClass(pool.FindMessageTypeByName("fan.M0"))
    from confluent_kafka.schema_registry import SchemaRegistryClient

    message = m0()
    message.a.b.a.SetInParent()
    message.b.a.SetInParent()
    data = protobuf.ProtobufSerializer(m0, SchemaRegistryClient({"url": registry_url}),
                                       {"use.deprecated.format": False})(message, ctx("fan"))
    started = time.monotonic()
    c = make_converter("value.converter", PROTOBUF, {"schema.registry.url": registry_url}, False)
    schema, value = c.to_connect("fan", data)
    assert len(_structs(schema)) == levels + 1
    leaf = {"a": None, "b": None}
    assert value == {"a": {"a": None, "b": {"a": leaf, "b": None}}, "b": {"a": leaf, "b": None}}
    written = c.from_connect("fan-copy", schema, value)
    assert protobuf.ProtobufDeserializer(m0, {"use.deprecated.format": False})(written, ctx("fan-copy")) == message
    assert time.monotonic() - started < BOUND_S
    with urlopen(f"{registry_url}/subjects/fan-copy-value/versions/latest") as answer:
        assert json.loads(answer.read())["schema"].count("message M") == levels + 1

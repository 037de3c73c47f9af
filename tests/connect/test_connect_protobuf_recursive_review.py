"""A hostile review of Connect's recursive Protobuf support (klog/connect/protobuf.py, klog/connect/data.py): what
writing a recursive schema back named wrongly, a deep schema's write failing other than in one line, a refusal
naming no struct. Checked with an independent implementation where there is one: confluent-kafka's Protobuf
deserializer reads what the converter writes."""

from __future__ import annotations

import json
from urllib.request import urlopen

import pytest

pytest.importorskip("google.protobuf", reason="the ProtobufConverter needs protobuf (pip install 'klog[connect]')")
protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")

from klog.connect.data import ConnectRecord, recursive_struct  # noqa: E402
from klog.connect.errors import DataError  # noqa: E402
from klog.connect.transforms import Chain  # noqa: E402
from tests.connect.test_connect_avro import ctx  # noqa: E402
from tests.connect.test_connect_protobuf_recursive import converter  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

# X holds a Y holding both another message named X (Z.X) and X itself: written back, Y's nested X (Z.X's struct)
# is the nearest type named X, so the back reference to the outer X must name it in full
SHADOWED = '''syntax = "proto3";
package p;
message X { Y y = 1; int32 n = 2; }
message Y { Z.X other = 1; X back = 2; }
message Z { message X { int32 v = 1; } message S { int32 v = 1; } }
message S { Z.S other = 1; S back = 2; int32 n = 3; }
'''


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def _classes(text: str, *names: str) -> list[type]:
    from google.protobuf import descriptor_pool, message_factory, struct_pb2

    from klog.protocol import protobuf_schema as proto

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto.to_descriptor(proto.parse_text(text), proto.well_known(), name="p/test.proto"))
    return [message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in names]


def _serialize(url: str, cls: type, message: object, topic: str) -> bytes:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return protobuf.ProtobufSerializer(cls, SchemaRegistryClient({"url": url}),
                                       {"use.deprecated.format": False})(message, ctx(topic))


def _latest(url: str, subject: str) -> str:
    with urlopen(f"{url}/subjects/{subject}/versions/latest") as answer:
        return json.loads(answer.read())["schema"]


@pytest.mark.parametrize("enhanced", [False, True], ids=["short-names", "enhanced"])
def test_a_back_reference_shadowed_by_a_nearer_message_of_its_name_is_written_in_full(registry_url, enhanced):
    """The written schema named the enclosing message by its short name: inside Y, whose nested X is Z.X's
    struct, `X back` meant that nested X, and the record failed ('y.back.y: Cannot find field with name y in
    X.Y.X'). It names .p.X (.X without enhanced names: the Connect schema has no package then); Confluent's
    deserializer reads the bytes as the original message. (A back reference nothing shadows keeps its short
    name: the Confluent schema texts of test_connect_protobuf_recursive.)"""
    x_class, s_class = _classes(SHADOWED, "p.X", "p.S")
    c = converter(registry_url, **({"enhanced.protobuf.schema.support": "true"} if enhanced else {}))
    full = ".p.X" if enhanced else ".X"

    x = x_class(n=1)
    x.y.other.v = 7
    x.y.back.n = 5
    x.y.back.y.other.v = 8
    schema, value = c.to_connect("xs", _serialize(registry_url, x_class, x, "xs"))
    assert value == {"y": {"other": {"v": 7}, "back": {"y": {"other": {"v": 8}, "back": None}, "n": 5}}, "n": 1}
    written = c.from_connect("xs-copy", schema, value)
    assert protobuf.ProtobufDeserializer(x_class, {"use.deprecated.format": False})(written, ctx("xs-copy")) == x
    assert c.to_connect("xs-copy", written)[1] == value
    text = _latest(registry_url, "xs-copy-value")
    assert f"    X other = 1;\n    {full} back = 2;\n" in text and "  Y y = 1;\n" in text

    # the same with a message holding itself: its own nested S (Z.S's struct) shadows it
    s = s_class(n=1)
    s.other.v = 7
    s.back.n = 5
    s.back.back.other.v = 9
    schema, value = c.to_connect("ss", _serialize(registry_url, s_class, s, "ss"))
    written = c.from_connect("ss-copy", schema, value)
    assert protobuf.ProtobufDeserializer(s_class, {"use.deprecated.format": False})(written, ctx("ss-copy")) == s
    assert c.to_connect("ss-copy", written)[1] == value
    assert f"  S other = 1;\n  {full[:-1]}S back = 2;\n" in _latest(registry_url, "ss-copy-value")


def test_a_connect_schema_nesting_100_structs_or_more_fails_its_record_in_one_line(registry_url):
    """Its Protobuf schema nests as many messages, and protobuf's descriptors (messages too) nest no deeper: the
    write raised protobuf's DecodeError ('Exceeded upb_DecodeOptions_MaxDepth'), not a DataError; a schema deeper
    than Python's stack raised a RecursionError from the writers' cache key. Both are one-line DataErrors now."""
    c = converter(registry_url)
    for levels, refused in ((150, "^the Connect schema M0 nests its structs too deeply for a Protobuf schema"),
                            (600, "^a Connect schema nested too deeply for klog")):
        schema: dict = {"type": "int32", "optional": True}
        for i in range(levels, -1, -1):
            schema = {"type": "struct", "name": f"M{i}", "optional": True, "fields": [{**schema, "field": "m"}]}
        for _ in range(2):
            with pytest.raises(DataError, match=refused):
                c.from_connect("deep", schema, {"m": None})


def test_a_refusal_names_the_struct_holding_itself_after_a_transform_copied_its_fields(registry_url):
    """ReplaceField renaming a field of a Node at the top copies its fields: the copies share the struct that holds
    itself, and the refusal named 'an unnamed struct' (the array field met on the way), not Node."""
    node_class, = _classes('syntax = "proto3";\npackage p;\n'
                           "message Node { string label = 1; repeated Node children = 2; Node next = 3; }\n", "p.Node")
    node = node_class(label="r")
    node.next.label = "n"
    schema, value = converter(registry_url).to_connect("nodes", _serialize(registry_url, node_class, node, "nodes"))
    record = ConnectRecord("nodes", 0, None, None, schema, value)
    renamed = Chain({"transforms": "r", "transforms.r.type": "ReplaceField$Value",
                     "transforms.r.renames": "next:after"}).apply(record)
    assert recursive_struct(renamed.value_schema) == "Node"
    flatten = Chain({"transforms": "f", "transforms.f.type": "Flatten$Value"})
    with pytest.raises(DataError, match="^Flatten takes no recursive schema: Node holds itself"):
        flatten.apply(renamed)
    # and the renamed record is written and read back (its nested Nodes keep their field names)
    written = converter(registry_url).from_connect("nodes-renamed", renamed.value_schema, renamed.value)
    assert converter(registry_url).to_connect("nodes-renamed", written)[1] == \
        {"label": "r", "children": [], "after": {"label": "n", "children": [], "next": None}}


def test_flatten_keeps_a_google_protobuf_struct_whole_as_kafkas_flatten_does(registry_url):
    """Kafka's Flatten recurses into struct fields only; a map or an array is kept whole. google.protobuf.Struct
    recurses through its map (and ListValue's array), so Kafka's flattens a message holding one: klog's refused
    every recursive schema before flattening. It refuses only a struct holding itself as a struct field (Node's
    `next`: Kafka's overflows its stack), in one line naming it."""
    text = ('syntax = "proto3";\npackage p;\nimport "google/protobuf/struct.proto";\n'
            "message Bag { string id = 1; Inner inner = 2; }\n"
            "message Inner { google.protobuf.Struct payload = 1; int32 n = 2; }\n"
            "message Node { string label = 1; Node next = 2; }\n")
    bag_class, node_class = _classes(text, "p.Bag", "p.Node")
    bag = bag_class(id="b")
    bag.inner.n = 3
    bag.inner.payload.update({"k": "v"})
    c = converter(registry_url)
    schema, value = c.to_connect("bags", _serialize(registry_url, bag_class, bag, "bags"))
    flatten = Chain({"transforms": "f", "transforms.f.type": "Flatten$Value"})
    out = flatten.apply(ConnectRecord("bags", 0, None, None, schema, value))
    assert [f["field"] for f in out.value_schema["fields"]] == ["id", "inner.payload.fields", "inner.n"]
    assert out.value == {"id": "b", "inner.payload.fields": value["inner"]["payload"]["fields"], "inner.n": 3}
    assert out.value_schema["fields"][1]["type"] == "map"

    node = node_class(label="a")
    node.next.label = "b"
    schema, value = c.to_connect("nodes", _serialize(registry_url, node_class, node, "nodes"))
    for _ in range(2):
        with pytest.raises(DataError, match="^Flatten takes no recursive schema: Node holds itself"):
            flatten.apply(ConnectRecord("nodes", 0, None, None, schema, value))


def test_a_schema_rebuilt_per_record_is_not_walked_for_recursion_per_record(monkeypatch):
    """Debezium's unwrap with add.fields and InsertField rebuild the value's schema per record; the writers cache
    schemas by object, so JsonConverter (schemas.enable=true) writes each record's schema. The recursion check ran
    before it, per record: 107-113 us a record against 82-87 before recursive schemas were taken (+27%, measured
    alternating, load 9 on 2 cores; 77-89 now). It runs only once a write failed (a recursive schema overflows
    the walk), as the refusals above show."""
    import klog.connect.data as data
    from klog.connect.converters import make_converter

    row = [{"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"}]
    envelope = {"type": "struct", "name": "db.t.Envelope", "optional": False, "fields": [
        {"type": "struct", "fields": row, "optional": True, "name": "db.t.Value", "field": "before"},
        {"type": "struct", "fields": row, "optional": True, "name": "db.t.Value", "field": "after"},
        {"type": "string", "optional": False, "field": "op"}]}
    chain = Chain({"transforms": "u,i", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState",
                   "transforms.u.add.fields": "op", "transforms.i.type": "InsertField$Value",
                   "transforms.i.topic.field": "topic"})
    walks = []
    cycle_of = data._cycle_of
    monkeypatch.setattr(data, "_cycle_of", lambda schema: walks.append(1) or cycle_of(schema))
    json_converter = make_converter("value.converter", "json", {}, False)
    schemas = set()
    for i in range(20):
        record = chain.apply(ConnectRecord("t", 0, None, None, envelope, {"before": None, "after": {
            "id": i, "name": "x"}, "op": "c"}, kafka_offset=i))
        schemas.add(id(record.value_schema))
        written = json.loads(json_converter.from_connect("t", record.value_schema, record.value))
        assert written["payload"] == {"id": i, "name": "x", "__op": "c", "topic": "t"}
    assert len(schemas) > 1 and walks == []

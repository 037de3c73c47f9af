"""Connect's ProtobufConverter on recursive messages (klog/connect/protobuf.py): google.protobuf.Struct, Value
and ListValue, and a message holding its own type. As Confluent's ProtobufData (DG-535, DGS-1569) the Connect
schema holds itself (a field of the message's own type shares its struct's fields) and values convert both
ways; checked with an independent implementation: confluent-kafka's ProtobufSerializer writes the records, its
ProtobufDeserializer reads what the converter writes back. The walks that expand a schema as a tree refuse a
recursive one in one line."""

from __future__ import annotations

import json
from urllib.request import Request, urlopen

import pytest

pytest.importorskip("google.protobuf", reason="the ProtobufConverter needs protobuf (pip install 'klog[connect]')")
protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.data import recursive_struct, schema_key  # noqa: E402
from klog.connect.errors import DataError  # noqa: E402
from tests.connect.test_connect_avro import ctx  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

PROTOBUF = "io.confluent.connect.protobuf.ProtobufConverter"
TAG = "io.confluent.connect.protobuf.Tag"
UNION = "io.confluent.connect.protobuf.Union"

TREE_PROTO = '''syntax = "proto3";
package tree;
import "google/protobuf/struct.proto";
message Node {
  string label = 1;
  repeated Node children = 2;
  Node next = 3;
}
message Doc {
  string id = 1;
  google.protobuf.Struct payload = 2;
  google.protobuf.Value extra = 3;
  Node root = 4;
}
message Bag { google.protobuf.Struct payload = 1; }
'''


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def converter(url: str, **settings: str):  # noqa: ANN201
    return make_converter("value.converter", PROTOBUF, {"schema.registry.url": url, **settings}, False)


def _classes() -> tuple[type, type]:
    from google.protobuf import descriptor_pool, message_factory, struct_pb2

    from klog.protocol import protobuf_schema as proto

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto.to_descriptor(proto.parse_text(TREE_PROTO), proto.well_known(), name="tree/doc.proto"))
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(n))
                 for n in ("tree.Doc", "tree.Node", "tree.Bag"))


def _doc(doc_class: type) -> object:
    doc = doc_class(id="d-1")
    doc.payload.update({"name": "widget", "size": 3.5, "ok": True, "none": None, "tags": ["a", 1.0, {"deep": [[]]}],
                        "nested": {"k": "v"}})
    doc.extra.list_value.values.add().string_value = "x"
    doc.root.label = "r"
    child = doc.root.children.add(label="c1")
    child.children.add(label="c1.1")
    doc.root.children.add(label="c2")
    doc.root.next.label = "n"
    return doc


def _kind(**members: object) -> dict:
    out = dict.fromkeys(("null_value", "number_value", "string_value", "bool_value", "struct_value", "list_value"))
    out.update(members)
    return {"kind_0": out}


def test_struct_value_and_a_tree_are_read_as_connect_data_and_written_back(registry_url):
    doc_class, *_ = _classes()
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    doc = _doc(doc_class)
    data = protobuf.ProtobufSerializer(doc_class, client, {"use.deprecated.format": False})(doc, ctx("docs"))
    schema, value = converter(registry_url).to_connect("docs", data)

    # the Connect schema holds itself: Node's field `children` (and `next`) shares Node's fields
    fields = {f["field"]: f for f in schema["fields"]}
    node = fields["root"]
    node_fields = {f["field"]: f for f in node["fields"]}
    assert node["name"] == "Node" and node_fields["children"]["items"]["fields"] is node["fields"]
    assert node_fields["next"]["fields"] is node["fields"] and node_fields["next"]["parameters"] == {TAG: "3"}
    assert (node_fields["next"]["name"], node_fields["next"]["optional"]) == ("Node", True)
    struct = fields["payload"]
    assert struct["name"] == "Struct" and [f["field"] for f in struct["fields"]] == ["fields"]
    value_schema = struct["fields"][0]["values"]
    union = value_schema["fields"][0]
    assert (union["field"], union["name"]) == ("kind_0", UNION + ".kind")
    members = {f["field"]: f for f in union["fields"]}
    assert members["struct_value"]["fields"] is struct["fields"]
    assert members["list_value"]["fields"][0]["items"]["fields"] is value_schema["fields"]
    assert recursive_struct(schema) in ("Node", "Struct", "Value")
    assert "recursive" in schema_key(schema)

    # the values, as Confluent's converter reads them
    number, text, true = _kind(number_value=3.5), _kind(string_value="widget"), _kind(bool_value=True)
    assert value["id"] == "d-1"
    payload = value["payload"]["fields"]
    assert payload["size"] == number and payload["name"] == text and payload["ok"] == true
    assert payload["none"] == _kind(null_value="NULL_VALUE")
    assert payload["nested"] == _kind(struct_value={"fields": {"k": _kind(string_value="v")}})
    assert payload["tags"] == _kind(list_value={"values": [
        _kind(string_value="a"), _kind(number_value=1.0),
        _kind(struct_value={"fields": {"deep": _kind(list_value={"values": [_kind(list_value={"values": []})]})}})]})
    assert value["extra"] == _kind(list_value={"values": [_kind(string_value="x")]})
    leaf = {"label": "c1.1", "children": [], "next": None}
    assert value["root"] == {"label": "r", "children": [{"label": "c1", "children": [leaf], "next": None},
                                                       {"label": "c2", "children": [], "next": None}],
                             "next": {"label": "n", "children": [], "next": None}}

    # written back by the converter (its own schema: Node, Struct, Value, ListValue nested messages naming
    # themselves), Confluent's deserializer reads the same message: its deterministic bytes equal (map entries
    # are written in the order the Connect map holds them, not upb's hash order)
    written = converter(registry_url).from_connect("docs-copy", schema, value)
    again = protobuf.ProtobufDeserializer(doc_class, {"use.deprecated.format": False})(written, ctx("docs-copy"))
    assert again == doc
    assert again.SerializeToString(deterministic=True) == doc.SerializeToString(deterministic=True)
    # and read back by the converter, the same Connect value
    assert converter(registry_url).to_connect("docs-copy", written)[1] == value
    # with use.latest.version, into the subject's latest schema: Confluent's, google.protobuf.Struct's own classes
    latest = converter(registry_url, **{"enhanced.protobuf.schema.support": "true", "auto.register.schemas": "false",
                                        "use.latest.version": "true", "latest.compatibility.strict": "false"})
    schema, value = latest.to_connect("docs", data)
    assert (schema["name"], [f.get("name") for f in schema["fields"]][1:]) == (
        "tree.Doc", ["google.protobuf.Struct", "google.protobuf.Value", "tree.Node"])
    written = latest.from_connect("docs", schema, value)
    assert written[:5] == data[:5]  # the latest's id: nothing registered
    assert protobuf.ProtobufDeserializer(doc_class, {"use.deprecated.format": False})(written, ctx("docs")) == doc


def _chain(node_class: type, levels: int) -> object:
    """A Node holding `levels` Nodes, each the `next` of the one before."""
    top = node = node_class(label="0")
    for i in range(1, levels + 1):
        node = node.next
        node.label = str(i)
    return top


def _chain_value(levels: int) -> dict:
    value = None
    for i in range(levels, -1, -1):
        value = {"label": str(i), "children": [], "next": value}
    return value


def test_a_message_holding_itself_at_the_top_and_nesting_past_protobufs_limit(registry_url):
    """A Node at the top: its struct optional (Confluent's SchemaWrapper makes the struct it wraps optional), its
    schema the one Confluent's ProtobufData makes of that Connect schema. 100 messages below the root are written
    and read by Confluent's deserializer; 1,000 are refused in one line both ways (Protobuf's parsers read no
    deeper than 100), not a RecursionError."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from google.protobuf.message import DecodeError

    _, node_class, _ = _classes()
    serializer = protobuf.ProtobufSerializer(node_class, SchemaRegistryClient({"url": registry_url}),
                                             {"use.deprecated.format": False})
    deserializer = protobuf.ProtobufDeserializer(node_class, {"use.deprecated.format": False})
    c = converter(registry_url)
    data = serializer(_chain(node_class, 100), ctx("nodes"))
    schema, value = c.to_connect("nodes", data)
    assert (schema["name"], schema["optional"], schema["version"]) == ("Node", True, 1)
    assert value == _chain_value(100)
    written = c.from_connect("nodes-copy", schema, value)
    assert deserializer(written, ctx("nodes-copy")) == _chain(node_class, 100)
    assert written[5:] == data[5:]  # byte for byte after the schema id (message index [0] both)
    with urlopen(f"{registry_url}/subjects/nodes-copy-value/versions/latest") as answer:
        assert json.loads(answer.read())["schema"] == (
            'syntax = "proto3";\n\nmessage Node {\n  string label = 1;\n  repeated Node children = 2;\n'
            "  Node next = 3;\n}\n")
    # one more level: no Protobuf parser reads it, so it is not written
    with pytest.raises(DecodeError):
        node_class.FromString(_chain(node_class, 101).SerializeToString())
    with pytest.raises(DataError, match=r"^\.\.\.(\.next){24}: a value nested deeper than 100 messages"):
        c.from_connect("nodes-copy", schema, _chain_value(101))
    with pytest.raises(DataError, match="nested deeper than 100 messages"):
        c.from_connect("nodes-copy", schema, _chain_value(1000))
    children: dict = {"label": "leaf", "children": [], "next": None}
    for _ in range(1000):
        children = {"label": "", "children": [children], "next": None}
    with pytest.raises(DataError, match=r"^\.\.\.[^:]*\.children\[\]: a value nested deeper than 100"):
        c.from_connect("nodes-copy", schema, children)
    # Confluent's serializer writes 1,000 levels; reading them is refused
    deep = serializer(_chain(node_class, 1000), ctx("nodes"))
    with pytest.raises(DataError, match="^not Protobuf of schema 1: .*Depth"):
        c.to_connect("nodes", deep)
    # the same depth through google.protobuf.Struct's Value and ListValue (two messages a level)
    doc_class, *_ = _classes()
    doc = doc_class(id="deep")
    level = doc.extra
    for _ in range(500):
        level = level.list_value.values.add()
    doc_data = protobuf.ProtobufSerializer(doc_class, SchemaRegistryClient({"url": registry_url}),
                                           {"use.deprecated.format": False})(doc, ctx("docs"))
    with pytest.raises(DataError, match="^not Protobuf of schema 1: .*Depth"):
        c.to_connect("docs", doc_data)
    doc_schema, doc_value = c.to_connect("docs", protobuf.ProtobufSerializer(
        doc_class, SchemaRegistryClient({"url": registry_url}), {"use.deprecated.format": False})(
        doc_class(id="flat"), ctx("docs")))
    deep_value: dict = _kind(string_value="x")
    for _ in range(500):
        deep_value = _kind(list_value={"values": [deep_value]})
    with pytest.raises(DataError, match=r"^\.\.\.(\.kind_0\.values\[\])+: a value nested deeper than 100"):
        c.from_connect("docs-copy", doc_schema, {**doc_value, "extra": deep_value})


def test_a_recursive_connect_schema_becomes_the_proto_confluents_protobufdata_registers(registry_url):
    """Confluent's ProtobufDataTest.getRecursiveSchema (a SchemaWrapper of the struct's own builder as a field):
    here the field's struct shares the struct's fields. Written twice from two equal schemas, one schema."""
    def recursive() -> dict:
        fields: list = [{"type": "int32", "optional": True, "parameters": {TAG: "1"}, "field": "key"},
                        {"type": "string", "optional": True, "parameters": {TAG: "2"}, "field": "value"}]
        fields.append({"type": "struct", "fields": fields, "optional": True, "name": "RecursiveKeyValueMessage",
                       "parameters": {TAG: "10"}, "field": "key_value"})
        return {"type": "struct", "fields": fields, "optional": False, "name": "RecursiveKeyValueMessage"}

    c = converter(registry_url)
    value = {"key": 1, "value": "a", "key_value": {"key": 2, "value": "b", "key_value": None}}
    data = c.from_connect("kv", recursive(), value)
    again = c.from_connect("kv", recursive(), value)
    assert data == again and len(c._by_text) == 1  # equal recursive schemas: one writer (schema_key)
    with urlopen(f"{registry_url}/subjects/kv-value/versions") as answer:
        assert json.loads(answer.read()) == [1]
    with urlopen(f"{registry_url}/subjects/kv-value/versions/1") as answer:
        assert json.loads(answer.read())["schema"] == (
            'syntax = "proto3";\n\nmessage RecursiveKeyValueMessage {\n  int32 key = 1;\n  string value = 2;\n'
            "  RecursiveKeyValueMessage key_value = 10;\n}\n")
    schema, read = c.to_connect("kv", data)
    assert read == {"key": 1, "value": "a", "key_value": {"key": 2, "value": "b", "key_value": None}}
    assert schema["fields"][2]["fields"] is schema["fields"] and schema["optional"] is True
    assert "RecursiveKeyValueMessage" in repr(schema)  # (repr of a dict holding itself: Python's [...])


def test_walks_that_expand_a_schema_refuse_a_recursive_one_in_one_line(registry_url):
    """Kafka's JsonConverter (writing the schema) and Flatten recurse over a recursive schema until the JVM's stack
    overflows; Confluent's AvroConverter and JsonSchemaConverter are other schemas' converters. Here each refuses
    the record with one line (a DataError: errors.tolerance decides), naming the struct. JsonConverter without
    the schema writes the payload, as Kafka's does; a value too deep for the stack fails in one line."""
    from klog.connect.data import ConnectRecord
    from klog.connect.errors_handler import _source_record_text
    from klog.connect.transforms import Chain

    doc_class, *_ = _classes()
    from confluent_kafka.schema_registry import SchemaRegistryClient

    data = protobuf.ProtobufSerializer(doc_class, SchemaRegistryClient({"url": registry_url}),
                                       {"use.deprecated.format": False})(_doc(doc_class), ctx("docs"))
    schema, value = converter(registry_url).to_connect("docs", data)
    refused = r"takes no recursive schema: (Struct|Value|Node) holds itself"
    for name, props in (("json", {}), ("avro", {"schema.registry.url": registry_url}),
                        ("jsonschema", {"schema.registry.url": registry_url})):
        c = make_converter("value.converter", name, props, False)
        for _ in range(2):  # (the refusal is not cached as a success)
            with pytest.raises(DataError, match=refused):
                c.from_connect("docs-out", schema, value)
    # JsonConverter without the schema: the payload follows the value, as Kafka's convertToJson
    plain = make_converter("value.converter", "json", {"schemas.enable": "false"}, False)
    written = json.loads(plain.from_connect("docs-out", schema, value))
    assert written["root"] == value["root"] and written["payload"]["fields"]["size"] == _kind(number_value=3.5)
    assert written == json.loads(json.dumps(value))
    deep: dict = {"label": "", "children": [], "next": None}
    for _ in range(1000):
        deep = {"label": "", "children": [deep], "next": None}
    with pytest.raises(DataError, match="^JsonConverter: a value nested too deeply to write$"):
        plain.from_connect("docs-out", schema, {**value, "root": deep})
    chain = Chain({"transforms": "flat", "transforms.flat.type": "Flatten$Value"})
    record = ConnectRecord("docs", 0, None, None, schema, value)
    with pytest.raises(DataError, match="^Flatten " + refused):
        chain.apply(record)
    # a transform of the top level only keeps what it does not touch
    chain = Chain({"transforms": "drop", "transforms.drop.type": "ReplaceField$Value",
                               "transforms.drop.exclude": "extra"})
    out = chain.apply(record)
    assert [f["field"] for f in out.value_schema["fields"]] == ["id", "payload", "root"]
    written = converter(registry_url).from_connect("docs-dropped", out.value_schema, out.value)
    assert converter(registry_url).to_connect("docs-dropped", written)[1] == \
        {k: v for k, v in value.items() if k != "extra"}
    # errors.log.include.messages prints a source record's schema: where it holds itself, "[...]"
    text = _source_record_text(ConnectRecord("docs", 0, None, None, schema, value, source_partition={},
                                             source_offset={}))
    assert "fields=[...]" in text and len(text) < 100_000


@pytest.mark.slow
@pytest.mark.parametrize("sink", [
    {"connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "auto.create": "true"},
    {"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "schema.evolution": "basic"}],
    ids=["confluent", "debezium"])
def test_a_jdbc_sink_takes_recursive_records_and_a_too_deep_one_goes_to_the_dlq(data_dir, tmp_path, sink):
    """Through the worker: Confluent's serializer's records of Doc into Confluent's and Debezium's JDBC sinks
    (SQLite) with the ProtobufConverter; the nested structs are JSON text columns. A record nested 1,000 deep fails its
    conversion in one line and goes to the dead letter queue with the others written."""
    import sqlite3

    from confluent_kafka.schema_registry import SchemaRegistryClient

    import klog
    from tests.connect.helpers import running, values, wait_for

    doc_class, *_ = _classes()
    deep = doc_class(id="deep")
    level = deep.extra
    for _ in range(1000):
        level = level.list_value.values.add()
    db = str(tmp_path / "out.db")
    with registry_at(str(tmp_path / "registry")) as url:
        serialize = protobuf.ProtobufSerializer(doc_class, SchemaRegistryClient({"url": url}),
                                                {"use.deprecated.format": False})
        records = [serialize(d, ctx("docs")) for d in (_doc(doc_class), deep, doc_class(id="d-2"))]
        with klog.open(data_dir) as s:
            s.create_topic("docs", partitions=1)
            with s.producer() as p:
                for r in records:
                    p.send("docs", r)
        config = {"name": "docs-sink", **sink, "topics": "docs", "connection.url": f"jdbc:sqlite:{db}",
                  "value.converter": PROTOBUF, "value.converter.schema.registry.url": url,
                  "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                  "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
                  "errors.deadletterqueue.context.headers.enable": "true"}

        def rows() -> list:
            try:
                with sqlite3.connect(db) as conn:
                    return conn.execute('SELECT id, payload, root FROM "docs" ORDER BY id').fetchall()
            except sqlite3.OperationalError:
                return []

        with running(data_dir, config):
            wait_for(lambda: len(rows()) == 2 and values(data_dir, "dlq"), what="two rows and the DLQ record")
    assert values(data_dir, "dlq") == [records[1]]
    with klog.open(data_dir) as s:
        headers = dict(next(iter(s.consumer("dlq"))).headers)
    message = headers["__connect.errors.exception.message"]
    assert b"Depth" in message and b"\n" not in message
    (first_id, payload, root), (second_id, empty_payload, empty_root) = rows()
    assert (first_id, second_id, empty_payload, empty_root) == ("d-1", "d-2", None, None)
    assert json.loads(payload)["fields"]["nested"] == _kind(struct_value={"fields": {"k": _kind(string_value="v")}})
    assert json.loads(root)["children"][0]["children"] == [{"label": "c1.1", "children": [], "next": None}]


def test_a_chain_of_messages_deeper_than_the_stack_fails_its_records_in_one_line(registry_url):
    """Not recursive, but 400 messages each holding the next: past Python's stack, a one-line DataError (it was a
    RecursionError's text), kept for the schema's next records; a Connect schema as deep is refused too."""
    levels = 400
    text = 'syntax = "proto3";\n' + "".join(f"message M{i} {{ M{i + 1} m = 1; }}\n" for i in range(levels)) + \
        f"message M{levels} {{ int32 v = 1; }}\n"
    request = Request(f"{registry_url}/subjects/deep-value/versions", json.dumps(
        {"schemaType": "PROTOBUF", "schema": text}).encode(), {"Content-Type": "application/json"})
    with urlopen(request) as answer:
        header = b"\x00" + json.loads(answer.read())["id"].to_bytes(4, "big") + b"\x00"
    c = converter(registry_url)
    for _ in range(2):
        with pytest.raises(DataError, match="^the Connect schema of M0 nests too deeply for klog$"):
            c.to_connect("deep", header)
    schema: dict = {"type": "int32", "optional": True}
    for i in range(levels, -1, -1):
        schema = {"type": "struct", "name": f"M{i}", "optional": True, "fields": [{**schema, "field": "m"}]}
    with pytest.raises(DataError, match="^Invalid protobuf schema definition: a schema nested too deeply"):
        c.from_connect("deep", schema, {"m": None})


def test_generate_struct_for_nulls_on_a_message_holding_itself(registry_url):
    """generate.struct.for.nulls makes an unset message field the struct of its defaults: of Node's `next`, a Node
    whose `next` is another, endlessly (Confluent's converter overflows its stack): the record fails in one line.
    google.protobuf.Struct's recursion goes through a oneof, a map and a repeated field, never generated: read."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    _, node_class, bag_class = _classes()
    client = SchemaRegistryClient({"url": registry_url})
    c = converter(registry_url, **{"generate.struct.for.nulls": "true"})
    data = protobuf.ProtobufSerializer(node_class, client, {"use.deprecated.format": False})(
        node_class(label="a"), ctx("nodes"))
    for _ in range(2):
        with pytest.raises(DataError, match="^generate.struct.for.nulls makes an endless struct of a null tree.Node"):
            c.to_connect("nodes", data)
    bag = bag_class()
    bag.payload.update({"k": {"n": None}})
    data = protobuf.ProtobufSerializer(bag_class, client, {"use.deprecated.format": False})(bag, ctx("bags"))
    assert c.to_connect("bags", data)[1] == {"payload": {"fields": {"k": _kind(struct_value={"fields": {
        "n": _kind(null_value="NULL_VALUE")}})}}}
    assert c.to_connect("bags", protobuf.ProtobufSerializer(bag_class, client, {"use.deprecated.format": False})(
        bag_class(), ctx("bags")))[1] == {"payload": {"fields": {}}}

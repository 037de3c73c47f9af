"""`klog registry`'s normalization (Confluent's `normalize=true` and the `normalize` config) for Avro, JSON
Schema and Protobuf: two schemas that differ only in what normalization removes are one schema, one id (and
without it, where klog's own identity does not already equate them, two); the normalized text is what is
stored; confluent-kafka's serializers with `normalize.schemas` get one id."""

from __future__ import annotations

import decimal
import json

import pytest

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from klog.registry.normalize import avro_normalized  # noqa: E402
from tests.registry.helpers import serving  # noqa: E402
from tests.registry.test_registry_rest import call  # noqa: E402


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def register(url: str, subject: str, schema: str, kind: str = "AVRO", query: str = "") -> tuple[int, object]:
    return call(url, "POST", f"/subjects/{subject}/versions{query}", {"schemaType": kind, "schema": schema})


ORDER = {"type": "record", "name": "Order", "namespace": "shop", "aliases": ["b", "a"], "doc": "an order",
         "fields": [{"name": "id", "type": {"type": "long"}},
                    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 0}},
                    {"name": "note", "type": ["null", "string"], "default": None, "x-b": 1, "x-a": 2}],
         "connect.name": "shop.Order"}
# the same schema as Confluent's normalization sees it: names made full, aliases in another order, the decimal's
# scale 0 left out, a primitive without properties as its name, keys in another order
ORDER_AGAIN = {"fields": [{"type": "long", "name": "id"},
                          {"type": {"logicalType": "decimal", "type": "bytes", "precision": 9}, "name": "price"},
                          {"x-a": 2, "default": None, "x-b": 1, "type": ["null", "string"], "name": "note"}],
               "connect.name": "shop.Order", "doc": "an order", "aliases": ["shop.a", "shop.b"],
               "name": "shop.Order", "type": "record"}


def test_avro_normalization_is_confluents_normalized_form():
    assert json.loads(avro_normalized(json.dumps(ORDER))) == {
        "type": "record", "name": "Order", "namespace": "shop", "doc": "an order",
        "fields": [{"name": "id", "type": "long"},
                   {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9}},
                   {"name": "note", "type": ["null", "string"], "default": None, "x-a": 2, "x-b": 1}],
        "connect.name": "shop.Order", "aliases": ["a", "b"]}
    assert avro_normalized(json.dumps(ORDER)) == avro_normalized(json.dumps(ORDER_AGAIN))
    # named types once, later uses (and those references define) by name; a field's order when not ascending
    twice = {"type": "record", "name": "a.R", "fields": [
        {"name": "x", "type": {"type": "enum", "name": "E", "symbols": ["A"]}, "order": "descending"},
        {"name": "y", "type": "E", "order": "ascending"}, {"name": "z", "type": "b.Money"}]}
    assert json.loads(avro_normalized(json.dumps(twice), {"b.Money"}))["fields"] == [
        {"name": "x", "type": {"type": "enum", "name": "E", "symbols": ["A"]}, "order": "descending"},
        {"name": "y", "type": "E"}, {"name": "z", "type": "b.Money"}]
    assert avro_normalized("not json") == "not json"  # left for parsing to refuse


# shaped as Confluent's own normalization tests (AvroSchemaTest.testNormalization*), whose texts klog's output
# matches byte for byte: the very text its registry stores
CONFLUENT_CASES = [
    ('{"type":"record","name":"Shipment","doc":"say \\"hi\\"","fields":[{"type":"int","name":"n","doc":"a \\"n\\""}]}',
     '{"type":"record","name":"Shipment","doc":"say \\"hi\\"","fields":[{"name":"n","type":"int","doc":"a \\"n\\""}]}'),
    ('{"connect.name": "inv.orders.Envelope", "fields": [{"default": null, "name": "before", "type": ["null", '
     '{"connect.name": "inv.orders.Value", "fields": [{"name": "placed", "type": {"connect.name": '
     '"io.debezium.time.MicroTimestamp", "connect.version": 1, "type": "long"}}, {"name": "qty", "type": "int"}], '
     '"name": "Value", "type": "record"}]}, {"default": null, "name": "after", "type": ["null", "Value"]}], '
     '"name": "Envelope", "namespace": "inv.orders", "type": "record"}',
     '{"type":"record","name":"Envelope","namespace":"inv.orders","fields":[{"name":"before","type":["null",'
     '{"type":"record","name":"Value","fields":[{"name":"placed","type":{"type":"long","connect.name":'
     '"io.debezium.time.MicroTimestamp","connect.version":1}},{"name":"qty","type":"int"}],'
     '"connect.name":"inv.orders.Value"}],"default":null},{"name":"after","type":["null","Value"],"default":null}],'
     '"connect.name":"inv.orders.Envelope"}')]


@pytest.mark.parametrize(("text", "stored"), CONFLUENT_CASES)
def test_avro_normalized_text_is_the_text_confluents_registry_stores(text, stored):
    assert avro_normalized(text) == stored


def test_avro_schemas_that_normalize_alike_get_one_id(url):
    assert register(url, "o-value", json.dumps(ORDER)) == (200, {"id": 1})
    assert register(url, "o-value", json.dumps(ORDER_AGAIN)) == (200, {"id": 2})  # not normalized: another schema
    assert register(url, "n-value", json.dumps(ORDER), query="?normalize=true") == (200, {"id": 3})
    assert register(url, "n-value", json.dumps(ORDER_AGAIN), query="?normalize=true") == (200, {"id": 3})
    stored = call(url, "GET", "/subjects/n-value/versions/1")[1]
    assert stored["schema"] == avro_normalized(json.dumps(ORDER)) and stored["version"] == 1
    assert call(url, "GET", "/subjects/n-value/versions") == (200, [1])
    assert call(url, "POST", "/subjects/n-value?normalize=true", {"schema": json.dumps(ORDER)})[1]["id"] == 3
    assert call(url, "POST", "/subjects/n-value", {"schema": json.dumps(ORDER)})[1]["error_code"] == 40403
    assert call(url, "POST", "/compatibility/subjects/n-value/versions/latest?normalize=true",
                {"schema": json.dumps(ORDER_AGAIN)}) == (200, {"is_compatible": True})


def test_the_normalize_config_normalizes_without_the_query(url):
    assert call(url, "PUT", "/config/c-value", {"normalize": True}) == (200, {"normalize": True})
    assert call(url, "GET", "/config/c-value") == (200, {"normalize": True})
    assert call(url, "GET", "/config/c-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD",
                                                                             "normalize": True})
    assert register(url, "c-value", json.dumps(ORDER)) == (200, {"id": 1})
    assert register(url, "c-value", json.dumps(ORDER_AGAIN)) == (200, {"id": 1})
    assert call(url, "POST", "/subjects/c-value", {"schema": json.dumps(ORDER_AGAIN)})[1]["id"] == 1
    assert register(url, "other-value", json.dumps(ORDER)) == (200, {"id": 2})  # its config does not
    # the global config, and a subject's own over it; a PUT keeps what it leaves out
    assert call(url, "PUT", "/config", {"normalize": True}) == (200, {"normalize": True})
    assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD", "normalize": True})
    assert register(url, "g-value", json.dumps(ORDER_AGAIN)) == (200, {"id": 1})
    assert call(url, "PUT", "/config/c-value", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE",
                                                                                  "normalize": True})
    assert call(url, "PUT", "/config/x-value", {"normalize": False})[0] == 200
    assert register(url, "x-value", json.dumps(ORDER)) == (200, {"id": 2})
    status, answer = call(url, "PUT", "/config", {"normalize": "yes"})
    assert (status, answer["error_code"]) == (422, 42203)
    assert call(url, "PUT", "/config", {})[1]["error_code"] == 42203
    assert call(url, "DELETE", "/config/c-value") == (200, {"compatibilityLevel": "NONE", "normalize": True})
    assert call(url, "GET", "/config/c-value")[1]["error_code"] == 40408


def test_json_schemas_normalized_by_the_config(url):
    first = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    again = json.dumps({"properties": {"a": {"type": "string"}}, "type": "object"}, indent=2)
    assert call(url, "PUT", "/config/j-value", {"normalize": True})[0] == 200
    assert register(url, "j-value", first, "JSON") == (200, {"id": 1})
    assert register(url, "j-value", again, "JSON") == (200, {"id": 1})
    assert call(url, "GET", "/schemas/ids/1")[1]["schema"] == \
        '{"properties":{"a":{"type":"string"}},"type":"object"}'


PROTO = """syntax = "proto2";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
option java_package = "shop.proto";
option java_multiple_files = true;
message Order {
  reserved 9, 2 to 3;
  reserved "b", "a";
  optional string id = 1 [json_name = "ident", deprecated = true];
  oneof when { google.protobuf.Timestamp at = 4; google.protobuf.Duration after = 5; }
  oneof what { string sku = 6; }
  extensions 100 to 200, 50;
  enum State { DONE = 2; NEW = 0; OPEN = 1; }
  optional State state = 7;
}
"""
# what Confluent's normalization makes the same: imports, options, reserved, enum constants, oneofs and
# extension ranges in another order, no syntax line (proto2 either way)
PROTO_AGAIN = """package shop;
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";
option java_multiple_files = true;
option java_package = "shop.proto";
message Order {
  reserved 2 to 3, 9;
  reserved "a", "b";
  optional State state = 7;
  optional string id = 1 [deprecated = true, json_name = "ident"];
  oneof what { string sku = 6; }
  oneof when { google.protobuf.Duration after = 5; google.protobuf.Timestamp at = 4; }
  extensions 50, 100 to 200;
  enum State { NEW = 0; OPEN = 1; DONE = 2; }
}
"""


def test_protobuf_schemas_that_normalize_alike_get_one_id(url):
    pytest.importorskip("google.protobuf")
    assert register(url, "p-value", PROTO, "PROTOBUF") == (200, {"id": 1})
    assert register(url, "p-value", PROTO_AGAIN, "PROTOBUF") == (200, {"id": 2})  # not normalized: another
    assert register(url, "q-value", PROTO, "PROTOBUF", "?normalize=true") == (200, {"id": 3})
    assert register(url, "q-value", PROTO_AGAIN, "PROTOBUF", "?normalize=true") == (200, {"id": 3})
    assert call(url, "GET", "/subjects/q-value/versions") == (200, [1])
    stored = call(url, "GET", "/schemas/ids/3")[1]["schema"]
    assert "syntax" not in stored and stored.index("duration.proto") < stored.index("timestamp.proto")
    assert stored.index("NEW = 0") < stored.index("OPEN = 1") < stored.index("DONE = 2")
    assert stored.index("oneof when") < stored.index("oneof what")  # by their first field's number
    assert call(url, "POST", "/subjects/q-value?normalize=true",
                {"schemaType": "PROTOBUF", "schema": PROTO})[1]["id"] == 3
    assert "optional .shop.Order.State state = 7;" in stored and ".google.protobuf.Timestamp at = 4;" in stored
    # the serialized form (a FileDescriptorProto) normalizes to the same text: what confluent-kafka's
    # ProtobufSerializer registers and a .proto file are one text, as on Confluent's registry
    serialized = call(url, "GET", "/schemas/ids/1?format=serialized")[1]["schema"]
    assert register(url, "r-value", serialized, "PROTOBUF", "?normalize=true") == (200, {"id": 3})
    assert call(url, "GET", "/subjects/r-value/versions/1")[1]["schema"] == stored


def test_protobuf_maps_and_type_names_normalize_as_confluents(url):
    pytest.importorskip("google.protobuf")
    text = """syntax = "proto3";
package shop;
message Money { int64 units = 1; }
message Order { map<string, Money> prices = 1; Line line = 2; message Line { Money m = 1; } }
service S { rpc Get (Order) returns (Money); }
"""
    assert register(url, "m-value", text, "PROTOBUF", "?normalize=true") == (200, {"id": 1})
    stored = call(url, "GET", "/subjects/m-value/versions/1")[1]["schema"]
    for line in ("map<string, .shop.Money> prices = 1;", ".shop.Order.Line line = 2;", ".shop.Money m = 1;",
                 "rpc Get (.shop.Order) returns (.shop.Money);"):
        assert line in stored
    serialized = call(url, "GET", "/schemas/ids/1?format=serialized")[1]["schema"]  # PricesEntry in it
    assert register(url, "n-value", serialized, "PROTOBUF", "?normalize=true") == (200, {"id": 1})
    assert call(url, "GET", "/subjects/n-value/versions/1")[1]["schema"] == stored  # no PricesEntry
    assert register(url, "m-value", stored, "PROTOBUF", "?normalize=true") == (200, {"id": 1})  # idempotent


@pytest.mark.slow
def test_confluent_kafkas_serializers_with_normalize_schemas_get_one_id(url):
    """confluent-kafka's AvroSerializer and JSONSerializer with `normalize.schemas`: a schema and the same one
    spelt differently register as one id, and its records read back."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url})
    context = SerializationContext("orders", MessageField.VALUE)
    order = {"id": 7, "price": decimal.Decimal("12"), "note": None}
    conf = {"normalize.schemas": True}
    first = AvroSerializer(client, json.dumps(ORDER), conf=conf)(order, context)
    again = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ORDER_AGAIN), conf=conf)(order, context)
    assert first[:5] == again[:5] == b"\x00\x00\x00\x00\x01"
    assert call(url, "GET", "/subjects/orders-value/versions") == (200, [1])
    assert AvroDeserializer(client)(first, context) == order
    lookup = {"auto.register.schemas": False, "normalize.schemas": True}  # a lookup (POST /subjects/s?normalize)
    assert AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ORDER_AGAIN), conf=lookup)(
        order, context)[:5] == b"\x00\x00\x00\x00\x01"
    pytest.importorskip("jsonschema")
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    js = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    js_again = json.dumps({"properties": {"a": {"type": "string"}}, "type": "object"})
    events = SerializationContext("events", MessageField.VALUE)
    one = JSONSerializer(js, client, conf=conf)({"a": "x"}, events)
    two = JSONSerializer(js_again, SchemaRegistryClient({"url": url}), conf=conf)({"a": "y"}, events)
    assert one[:5] == two[:5] == b"\x00\x00\x00\x00\x02"
    assert JSONDeserializer(None, schema_registry_client=client)(two, events) == {"a": "y"}


def test_an_import_keeps_the_text_it_is_sent_normalize_or_not(url):
    """In IMPORT mode a schema is the source registry's, as it was: not normalized (Confluent's
    maybeValidateAndNormalizeSchema skips normalizing an import)."""
    assert call(url, "PUT", "/config", {"normalize": True})[0] == 200
    assert call(url, "PUT", "/mode", {"mode": "IMPORT"})[0] == 200
    body = {"schema": json.dumps(ORDER), "id": 40, "version": 2}
    assert call(url, "POST", "/subjects/o-value/versions?normalize=true", body) == (200, {"id": 40})
    assert call(url, "GET", "/schemas/ids/40")[1]["schema"] == json.dumps(ORDER)
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert register(url, "o-value", json.dumps(ORDER)) == (200, {"id": 41})  # normalized now: another schema


@pytest.mark.slow
def test_confluent_kafkas_protobuf_serializer_with_normalize_schemas_round_trips(url):
    protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.registry.test_registry_protobuf import _order_classes

    order_class, line_class = _order_classes()
    client = SchemaRegistryClient({"url": url})
    context = SerializationContext("orders", MessageField.VALUE)
    order = order_class(id="o-1", lines=[line_class(sku="s-1", quantity=2)])
    conf = {"normalize.schemas": True, "use.deprecated.format": False}
    data = protobuf.ProtobufSerializer(order_class, client, conf)(order, context)
    assert data[:6] == b"\x00\x00\x00\x00\x01\x00"
    stored = call(url, "GET", "/subjects/orders-value/versions/1")[1]["schema"]
    assert "repeated .shop.Order.Line lines = 3;" in stored and ".google.protobuf.Timestamp placed_at = 2;" in stored
    reader = protobuf.ProtobufDeserializer(order_class, {"use.deprecated.format": False}, client)
    assert reader(data, context) == order


RULES = """syntax = "proto2";
package inv;
import "google/protobuf/descriptor.proto";
message Range { optional double lo = 1; optional double hi = 2; }
message Tag { optional string name = 1; }
message Rules { optional Range range = 1; repeated Tag tags = 2; optional string note = 3; }
extend google.protobuf.FieldOptions { optional Rules rules = 50001; repeated string labels = 50002; }
extend google.protobuf.MessageOptions { optional int32 width = 50003; }
message Item {
  option (width) = 0x10;
  optional string sku = 1 [(rules).range.hi = 10.0, (labels) = "b", (rules).tags.name = "x", (rules).range.lo = 1.50,
                           (rules).tags.name = "y", (labels) = "a", (rules).note = "n", deprecated = true];
}
"""
# the same options as one aggregate, full names, numbers written otherwise
RULES_AGAIN = RULES.replace("option (width) = 0x10;", "option (.inv.width) = 16;").replace(
    """[(rules).range.hi = 10.0, (labels) = "b", (rules).tags.name = "x", (rules).range.lo = 1.50,
                           (rules).tags.name = "y", (labels) = "a", (rules).note = "n", deprecated = true]""",
    """[deprecated = true, (inv.labels) = "b", (inv.labels) = "a",
       (inv.rules) = {tags: [{name: "x"}, {name: "y"}], range: {lo: 1.5, hi: 10}, note: "n"}]""")


def test_protobuf_custom_options_normalize_as_confluents(url):
    """Custom options by their full names, `(opt).a.b = v` settings of one non-repeated option merged into one
    aggregate (a repeated field's values gathered), options sorted by name, numbers in plain decimal."""
    pytest.importorskip("google.protobuf")
    assert register(url, "r-value", RULES, "PROTOBUF") == (200, {"id": 1})
    assert register(url, "r-value", RULES_AGAIN, "PROTOBUF") == (200, {"id": 2})  # not normalized: another
    assert register(url, "s-value", RULES, "PROTOBUF", "?normalize=true") == (200, {"id": 3})
    assert register(url, "s-value", RULES_AGAIN, "PROTOBUF", "?normalize=true") == (200, {"id": 3})
    stored = call(url, "GET", "/schemas/ids/3")[1]["schema"]
    assert "  option (inv.width) = 16;\n" in stored
    assert """  optional string sku = 1 [
    deprecated = true,
    (inv.labels) = "b",
    (inv.labels) = "a",
    (inv.rules) = {
      note: "n",
      range: {
        hi: 10,
        lo: 1.5
      },
      tags: [
        {
          name: "x"
        },
        {
          name: "y"
        }
      ]
    }
  ];""" in stored
    assert register(url, "s-value", stored, "PROTOBUF", "?normalize=true") == (200, {"id": 3})  # idempotent


def test_normalization_sorts_references_by_subject_and_version(url):
    """Two references in either order are one schema when normalized (Confluent's normalize() sorts them)."""
    pytest.importorskip("jsonschema")
    assert register(url, "a", json.dumps({"type": "string"}), "JSON") == (200, {"id": 1})
    assert register(url, "b", json.dumps({"type": "integer"}), "JSON") == (200, {"id": 2})
    doc = json.dumps({"type": "object", "properties": {"x": {"$ref": "a.json"}, "y": {"$ref": "b.json"}}})
    to_a = {"name": "a.json", "subject": "a", "version": 1}
    to_b = {"name": "b.json", "subject": "b", "version": 1}

    def post(subject: str, references: list, query: str = "") -> tuple[int, object]:
        return call(url, "POST", f"/subjects/{subject}/versions{query}",
                    {"schemaType": "JSON", "schema": doc, "references": references})
    assert post("c", [to_b, to_a]) == (200, {"id": 3})
    assert post("c", [to_a, to_b]) == (200, {"id": 4})  # not normalized: another
    assert post("d", [to_b, to_a], "?normalize=true") == (200, {"id": 5})
    assert post("d", [to_a, to_b], "?normalize=true") == (200, {"id": 5})
    assert call(url, "GET", "/subjects/d/versions/1")[1]["references"] == [to_a, to_b]


def test_protobuf_numbers_normalize_without_loss_or_blowing_up():
    from klog.protocol.protobuf_schema import Raw
    from klog.registry.normalize import _number

    written = {"10.0": "10", "2.50": "2.5", "1e3": "1000", "1E-3": "0.001", "0x1F": "31", "010": "8", "-7": "-7",
               "0.0001": "0.0001", "1.2345": "1.2345", "nan": "nan", "-inf": "-inf", "1e999999999": "1e999999999",
               "TRUE_ENUM": "TRUE_ENUM"}
    assert {text: _number(Raw(text)) for text in written} == written


def test_merging_many_option_settings_takes_linear_time():
    """5,000 settings of one repeated sub-field (each gathered once) and 5,000 of one singular field: under a
    second each (gathering re-checked the whole list at every setting: minutes)."""
    pytest.importorskip("google.protobuf")
    import time

    from klog.protocol import protobuf_schema as proto
    from klog.registry.normalize import protobuf_normalized
    from klog.registry.schemas import parse_protobuf

    head = RULES.split("message Item")[0]
    for settings in (", ".join(f'(rules).tags.name = "x{i}"' for i in range(5000)),
                     ", ".join(f'(rules).note = "n{i}"' for i in range(5000))):
        parsed = parse_protobuf(head + f"message Item {{ optional string sku = 1 [{settings}]; }}", {})
        started = time.monotonic()
        text = proto.canonical_text(protobuf_normalized(parsed.schema.proto, parsed.descriptor,
                                                        parsed.schema.dependencies))
        assert time.monotonic() - started < 5
        assert text.count("name:") in (5000, 0) and text.count("note:") in (1, 0)


@pytest.mark.slow
def test_configs_confluents_registry_wrote_are_read_whole(data_dir):
    """A CONFIG record replaces the one before it: Confluent's with only settings klog does not keep (an alias)
    leaves the subject without level or normalize, and one with normalize is read."""
    import klog

    def key(subject: str | None) -> bytes:
        return json.dumps({"keytype": "CONFIG", "subject": subject, "magic": 0}, separators=(",", ":")).encode()

    with klog.open(data_dir) as s:
        s.create_topic("_schemas", partitions=1, configs={"cleanup.policy": "compact"})
        with s.producer() as p:
            p.send("_schemas", b'{"compatibilityLevel": "NONE"}', key=key("a"))
            p.send("_schemas", b'{"alias": "b"}', key=key("a"))
            p.send("_schemas", b'{"compatibilityLevel": "FULL", "normalize": true, "validateFields": false}',
                   key=key(None))
    with serving(data_dir) as url:
        assert call(url, "GET", "/config/a")[1]["error_code"] == 40408
        assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "FULL", "normalize": True})
        assert register(url, "n-value", json.dumps(ORDER)) == (200, {"id": 1})
        assert call(url, "GET", "/schemas/ids/1")[1]["schema"] == avro_normalized(json.dumps(ORDER))

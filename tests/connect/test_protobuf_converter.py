"""Confluent's ProtobufConverter (klog/connect/protobuf.py) against klog's registry, checked with an independent
implementation: confluent-kafka's ProtobufDeserializer reads what the converter writes (its message class
built from the registry's serialized descriptor), and what its ProtobufSerializer writes the converter reads
as Connect data. The .proto texts are what Confluent's ProtobufData generates for the same Connect schemas."""

from __future__ import annotations

import base64
import decimal
import json
import urllib.request

import pytest

pytest.importorskip("google.protobuf", reason="the ProtobufConverter needs protobuf (pip install 'klog[connect]')")
protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.errors import ConfigError, DataError  # noqa: E402
from tests.connect.test_connect_avro import ctx, field  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

PROTOBUF = "io.confluent.connect.protobuf.ProtobufConverter"
TAG = "io.confluent.connect.protobuf.Tag"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def converter(url: str, is_key: bool = False, **settings: str):  # noqa: ANN201
    return make_converter("key.converter" if is_key else "value.converter", PROTOBUF,
                          {"schema.registry.url": url, **settings}, is_key)


ROW = {"type": "struct", "optional": True, "name": "shop.public.orders.Value", "fields": [
    field("id", "int32"), field("note", "string", True),
    field("total", "bytes", True, name=DECIMAL, version=1,
          parameters={"scale": "2", "connect.decimal.precision": "10"}),
    field("qty", "int16"), field("flag", "int8", True), field("big", "int64", True), field("ratio", "float64", True),
    field("share", "float32", True), field("paid", "boolean", True), field("blob", "bytes", True),
    field("day", "int32", True, name=DATE, version=1), field("at_time", "int32", True, name=TIME, version=1),
    field("at", "int64", True, name=TIMESTAMP, version=1),
    field("micro", "int64", True, name="io.debezium.time.MicroTimestamp", version=1),
    {"type": "array", "items": {"type": "string", "optional": True}, "optional": True, "field": "tags"},
    {"type": "map", "keys": {"type": "string", "optional": False}, "values": {"type": "int64", "optional": False},
     "optional": True, "field": "counts"}]}
SOURCE = {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "fields": [
    field("version", "string"), field("connector", "string"), field("ts_ms", "int64"),
    field("snapshot", "string", True, name="io.debezium.data.Enum", version=1,
          parameters={"allowed": "true,last,false,incremental"}, default="false"),
    field("db", "string"), field("lsn", "int64", True)]}
ENVELOPE = {"type": "struct", "optional": False, "name": "shop.public.orders.Envelope", "version": 1, "fields": [
    {**ROW, "field": "before"}, {**ROW, "field": "after"}, {**SOURCE, "field": "source"},
    field("op", "string"), field("ts_ms", "int64", True)]}
AFTER = {"id": 7, "note": None, "total": decimal.Decimal("12.50"), "qty": 3, "flag": -1, "big": 2**40, "ratio": 0.25,
         "share": 1.5, "paid": True, "blob": b"\x00\xff", "day": 19000, "at_time": 3_723_004, "at": 1700000000123,
         "micro": 1700000000123456, "tags": ["a", "b"], "counts": {"x": 1, "y": -2}}
SOURCE_VALUE = {"version": "2.7.0", "connector": "postgresql", "ts_ms": 1700000000000, "snapshot": None, "db": "shop",
                "lsn": 123}


def test_connect_schemas_become_the_proto_confluents_protobufdata_registers():
    """A struct is a proto3 message in the schema name's package, fields numbered in order, int8/int16 int32 with
    connect.type in (confluent.field_meta), Decimal confluent.type.Decimal with precision and scale there, the
    time types Google's, an array repeated, a map a repeated ConnectDefault<n>Entry, a nested struct a nested
    message defined once (before and after are one Value), one named as its field gets "Message"."""
    from klog.connect.protobuf import proto_schema

    row = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [
        field("qty", "int16"), field("total", "bytes", True, name=DECIMAL, version=1, parameters={"scale": "2"}),
        field("day", "int32", True, name=DATE, version=1), field("at", "int64", True, name=TIMESTAMP, version=1),
        {"type": "array", "items": {"type": "int64", "optional": False}, "optional": True, "field": "ids"},
        {"type": "map", "keys": {"type": "string", "optional": False}, "values": {"type": "string", "optional": True},
         "optional": True, "field": "labels"},
        {"type": "struct", "optional": True, "name": "shop.inner", "fields": [field("x", "boolean")],
         "field": "inner"}]}
    assert proto_schema(row).text == '''syntax = "proto3";
package shop;

import "confluent/meta.proto";
import "confluent/type/decimal.proto";
import "google/type/date.proto";
import "google/protobuf/timestamp.proto";

message Row {
  int32 qty = 1 [(confluent.field_meta) = {
    params: [
      {
        key: "connect.type",
        value: "int16"
      }
    ]
  }];
  confluent.type.Decimal total = 2 [(confluent.field_meta) = {
    params: [
      {
        key: "scale",
        value: "2"
      }
    ]
  }];
  google.type.Date day = 3;
  google.protobuf.Timestamp at = 4;
  repeated int64 ids = 5;
  repeated ConnectDefault1Entry labels = 6;
  innerMessage inner = 7;

  message ConnectDefault1Entry {
    string key = 1;
    string value = 2;
  }
  message innerMessage {
    bool x = 1;
  }
}
'''
    envelope = proto_schema(ENVELOPE)
    assert envelope.message == "shop.public.orders.Envelope"
    assert "  Value before = 1;\n  Value after = 2;\n  Source source = 3;\n  string op = 4;\n  int64 ts_ms = 5;\n" \
        in envelope.text
    assert envelope.text.count("message Value {") == 1


def test_a_debezium_envelope_round_trips(registry_url):
    c = converter(registry_url)
    value = {"before": None, "after": AFTER, "source": SOURCE_VALUE, "op": "c", "ts_ms": 1700000000999}
    data = c.from_connect("shop.public.orders", ENVELOPE, value)
    assert data[:6] == b"\x00\x00\x00\x00\x01\x00"  # schema 1, message index [0]
    schema, got = converter(registry_url).to_connect("shop.public.orders", data)
    # Confluent's reading: unset scalars their proto3 defaults, the null snapshot the string default "false"
    assert got == {"before": None, "after": {**AFTER, "note": ""}, "source": {**SOURCE_VALUE, "snapshot": "false"},
                   "op": "c", "ts_ms": 1700000000999}
    assert (schema["name"], schema["version"], schema["optional"]) == ("Envelope", 1, False)
    after = {f["field"]: f for f in schema["fields"]}["after"]
    assert (after["name"], after["optional"], after["parameters"]) == ("Value", True, {TAG: "2"})
    fields = {f["field"]: f for f in after["fields"]}
    assert all(f["optional"] for f in fields.values())  # every field optional, as ProtobufData reads proto3
    assert [fields[n]["type"] for n in ("id", "qty", "flag", "share", "micro")] == \
        ["int32", "int16", "int8", "float32", "int64"]
    assert fields["total"] == {"type": "bytes", "optional": True, "name": DECIMAL, "version": 1,
                               "parameters": {"scale": "2", "connect.decimal.precision": "10", TAG: "3"},
                               "field": "total"}
    assert [(fields[n]["name"], fields[n]["type"]) for n in ("day", "at_time", "at")] == \
        [(DATE, "int32"), (TIME, "int32"), (TIMESTAMP, "int64")]
    assert fields["tags"]["items"] == {"type": "string", "optional": True}
    assert (fields["counts"]["type"], fields["counts"]["name"]) == ("map", "connect_default1")
    update = {"before": {**AFTER, "note": "old"}, "after": {**AFTER, "tags": [], "counts": {}}, "source": SOURCE_VALUE,
              "op": "u", "ts_ms": None}
    _, got = c.to_connect("shop.public.orders", c.from_connect("shop.public.orders", ENVELOPE, update))
    assert (got["before"]["note"], got["after"]["tags"], got["after"]["counts"], got["op"], got["ts_ms"]) == \
        ("old", [], {}, "u", 0)
    assert c.from_connect("shop.public.orders", ENVELOPE, None) is None  # a tombstone stays one
    assert c.to_connect("shop.public.orders", None) == (None, None)


def _registered_class(url: str, schema_id: int, message: str):  # noqa: ANN202 - a message class
    """The message class of a registered schema, from the registry's serialized descriptor (what
    confluent-kafka's deserializer fetches) and the imports' own modules."""
    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2
    from google.type import date_pb2, timeofday_pb2

    with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}?format=serialized") as answer:
        serialized = json.loads(answer.read())["schema"]
    pool = descriptor_pool.DescriptorPool()
    for module in (descriptor_pb2, meta_pb2, decimal_pb2, timestamp_pb2, wrappers_pb2, date_pb2, timeofday_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized)))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


def test_confluent_kafkas_deserializer_reads_what_the_converter_writes(registry_url):
    c = converter(registry_url)
    value = {"before": None, "after": AFTER, "source": SOURCE_VALUE, "op": "c", "ts_ms": None}
    data = c.from_connect("orders", ENVELOPE, value)
    envelope = _registered_class(registry_url, 1, "shop.public.orders.Envelope")
    got = protobuf.ProtobufDeserializer(envelope, {"use.deprecated.format": False})(data, ctx("orders"))
    after = got.after
    assert not got.HasField("before") and got.op == "c" and got.source.db == "shop"
    assert (after.id, after.qty, after.flag, after.big, after.ratio, after.share, after.paid, after.blob) == \
        (7, 3, -1, 2**40, 0.25, 1.5, True, b"\x00\xff")
    assert (after.total.value, after.total.precision, after.total.scale) == ((1250).to_bytes(2, "big"), 4, 2)
    assert (after.day.year, after.day.month, after.day.day) == (2022, 1, 8)  # day 19000
    assert (after.at_time.hours, after.at_time.minutes, after.at_time.seconds, after.at_time.nanos) == \
        (1, 2, 3, 4_000_000)
    assert (after.at.seconds, after.at.nanos) == (1_700_000_000, 123_000_000)
    assert list(after.tags) == ["a", "b"] and {e.key: e.value for e in after.counts} == {"x": 1, "y": -2}
    key = converter(registry_url, is_key=True).from_connect("orders", {"type": "string", "optional": False}, "k-1")
    from google.protobuf import wrappers_pb2

    assert protobuf.ProtobufDeserializer(wrappers_pb2.StringValue, {"use.deprecated.format": False})(
        key, ctx("orders", is_key=True)).value == "k-1"


SHOP_PROTO = '''syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  message Line { string sku = 1; uint32 quantity = 2; }
  string id = 1;
  google.protobuf.Timestamp placed_at = 2;
  repeated Line lines = 3;
  map<string, int32> counts = 4;
  Status status = 5;
  oneof payment { string card = 6; int64 voucher = 7; }
  google.protobuf.StringValue note = 8;
  sint64 delta = 9;
  optional int32 priority = 10;
  uint64 huge = 11;
}
message Refund { string order_id = 1; }
'''


def _shop_classes() -> tuple[type, type]:
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2

    from klog.protocol import protobuf_schema as proto

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto.to_descriptor(proto.parse_text(SHOP_PROTO), proto.well_known(), name="shop/order.proto"))
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in ("shop.Order", "shop.Refund"))


def test_the_converter_reads_what_confluent_kafkas_serializer_writes(registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    order_class, refund_class = _shop_classes()
    client = SchemaRegistryClient({"url": registry_url})
    order = order_class(id="o-1", counts={"a": 2}, status=1, card="4111", delta=-5, priority=0, huge=2**64 - 1)
    order.placed_at.seconds, order.placed_at.nanos = 1_700_000_000, 5_000_000
    order.lines.add(sku="s-1", quantity=3)
    order.note.value = "fragile"
    data = protobuf.ProtobufSerializer(order_class, client)(order, ctx("orders"))
    schema, got = converter(registry_url).to_connect("orders", data)
    assert got == {"payment_0": {"card": "4111", "voucher": None}, "id": "o-1", "placed_at": 1_700_000_000_005,
                   "lines": [{"sku": "s-1", "quantity": 3}], "counts": {"a": 2}, "status": "PAID",
                   "note": {"value": "fragile"}, "delta": -5, "priority": 0, "huge": -1}
    fields = {f["field"]: f for f in schema["fields"]}
    assert (schema["name"], list(fields)[0]) == ("Order", "payment_0")  # oneofs first, as unions
    assert fields["payment_0"]["name"] == "io.confluent.connect.protobuf.Union.payment"
    assert fields["status"]["parameters"] == {"io.confluent.connect.protobuf.Enum": "Status",
                                              "io.confluent.connect.protobuf.Enum.NEW": "0",
                                              "io.confluent.connect.protobuf.Enum.PAID": "1",
                                              "io.confluent.connect.protobuf.Enum.SHIPPED": "2", TAG: "5"}
    assert fields["delta"]["parameters"] == {"io.confluent.connect.protobuf.Type": "sint64", TAG: "9"}
    assert (fields["counts"]["type"], fields["counts"]["name"]) == ("map", "counts")
    assert fields["placed_at"]["name"] == TIMESTAMP
    # an unset proto3 optional field and an unset message are null, an unset scalar its default
    _, empty = converter(registry_url).to_connect("orders", protobuf.ProtobufSerializer(order_class, client)(
        order_class(), ctx("orders")))
    assert (empty["priority"], empty["placed_at"], empty["note"], empty["id"], empty["payment_0"]) == \
        (None, None, None, "", None)
    # the second message of the file: message index [1]
    refund = protobuf.ProtobufSerializer(refund_class, client, {"auto.register.schemas": False,
                                                                 "use.latest.version": True})
    schema, got = converter(registry_url).to_connect("orders", refund(refund_class(order_id="o-1"), ctx("orders")))
    assert (schema["name"], got) == ("Refund", {"order_id": "o-1"})
    # written back by the converter (its own schema: the oneof a oneof again, the map a repeated countsEntry),
    # Confluent's deserializer reads the same order; but priority's presence: proto3 `optional` is written only
    # with optional.for.nullables, so its 0 is not written
    written = converter(registry_url).from_connect("orders-copy", *converter(registry_url).to_connect("orders", data))
    again = protobuf.ProtobufDeserializer(order_class, {"use.deprecated.format": False})(written, ctx("orders-copy"))
    order.ClearField("priority")
    assert again == order


def test_protobuf_data_options_change_the_schema_as_confluents_do(registry_url):
    from klog.connect.protobuf import Options, proto_schema

    row = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [
        field("id", "int32"), field("note", "string", True), field("n", "int64", True)]}
    wrapped = proto_schema(row, Options(wrapper_for_nullables=True)).text
    assert "  int32 id = 1;\n  google.protobuf.StringValue note = 2;\n  google.protobuf.Int64Value n = 3;\n" in wrapped
    assert "  int32 id = 1;\n  optional string note = 2;\n  optional int64 n = 3;\n" in \
        proto_schema(row, Options(optional_for_nullables=True)).text
    labels = {"type": "map", "keys": {"type": "string", "optional": False},
              "values": {"type": "string", "optional": True}, "optional": True, "field": "labels"}
    entry = proto_schema({**row, "fields": [labels]}, Options(optional_for_nullables=True)).text
    assert "    string value = 2;\n" in entry  # a map entry's fields get no proto3 `optional`
    for settings in ({"wrapper.for.nullables": "true"}, {"optional.for.nullables": "true"}):
        c = converter(registry_url, **settings)
        topic = "t-" + next(iter(settings))
        schema, got = c.to_connect(topic, c.from_connect(topic, row, {"id": 1, "note": None, "n": 5}))
        assert got == {"id": 1, "note": None, "n": 5}  # a null stays null, not ""
        assert [f["optional"] for f in schema["fields"]] == [False, True, True]
    enhanced = converter(registry_url, **{"enhanced.protobuf.schema.support": "true", "int.for.enums": "true",
                                          "generate.index.for.unions": "false"})
    order_class, _ = _shop_classes()
    from confluent_kafka.schema_registry import SchemaRegistryClient

    data = protobuf.ProtobufSerializer(order_class, SchemaRegistryClient({"url": registry_url}))(
        order_class(status=2, voucher=9), ctx("orders"))
    schema, got = enhanced.to_connect("orders", data)
    fields = {f["field"]: f for f in schema["fields"]}
    assert (schema["name"], fields["status"]["type"], fields["status"]["name"]) == \
        ("shop.Order", "int32", "shop.Order.Status")
    assert (got["status"], got["payment"]) == (2, {"card": None, "voucher": 9})


def test_scrub_invalid_names_and_unnamed_structs():
    from klog.connect.protobuf import Options, proto_schema

    row = {"type": "struct", "optional": False, "name": "my-server.public.my-table.Value",
           "fields": [field("the-id", "int32"), field("_x", "string")]}
    text = proto_schema(row, Options(scrub=True)).text
    assert "package my_server.public.my_table;" in text and "int32 the_id = 1;" in text and "string x_x = 2;" in text
    unnamed = proto_schema({"type": "struct", "optional": False, "fields": [field("a", "int32")]})
    assert unnamed.message == "ConnectDefault1"


def test_a_struct_named_as_its_message_is_nested_in_it_and_fields_are_never_dropped(registry_url):
    """As ProtobufData: a nested struct whose unqualified name is its parent's is defined inside it (its field's
    type resolves to the nested message, not to the parent); a struct field the message lacks (two structs of one
    name in a message: Confluent defines the first) fails the record ("Cannot find field"), never dropped."""
    from klog.connect.protobuf import proto_schema

    inner = {"type": "struct", "optional": True, "name": "b.Value", "fields": [field("y", "string")]}
    outer = {"type": "struct", "optional": False, "name": "a.Value", "fields": [field("id", "int32"),
                                                                                {**inner, "field": "x"}]}
    assert "  Value x = 2;\n\n  message Value {\n    string y = 1;\n  }\n" in proto_schema(outer).text
    c = converter(registry_url)
    data = c.from_connect("t", outer, {"id": 1, "x": {"y": "hello"}})
    assert c.to_connect("t", data)[1] == {"id": 1, "x": {"y": "hello"}}
    got = protobuf.ProtobufDeserializer(_registered_class(registry_url, 1, "a.Value"),
                                        {"use.deprecated.format": False})(data, ctx("t"))
    assert (got.id, got.x.y) == (1, "hello")
    rows = {"type": "struct", "optional": False, "name": "a.Top", "fields": [
        {"type": "struct", "optional": True, "name": "x.Row", "fields": [field("p", "string")], "field": "a"},
        {"type": "struct", "optional": True, "name": "y.Row", "fields": [field("q", "string")], "field": "b"}]}
    with pytest.raises(DataError, match="b.q: Cannot find field with name q"):
        c.from_connect("u", rows, {"a": None, "b": {"q": "2"}})


def test_record_name_strategy_lookup_only_and_latest(registry_url):
    row = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [field("id", "int32")]}
    by_record = converter(registry_url, **{"value.subject.name.strategy": "RecordNameStrategy"})
    by_record.from_connect("a", row, {"id": 1})
    with urllib.request.urlopen(f"{registry_url}/subjects") as answer:
        assert json.loads(answer.read()) == ["shop.Row"]
    lookup_only = converter(registry_url, **{"auto.register.schemas": "false"})
    with pytest.raises(DataError, match="Schema Registry"):
        lookup_only.from_connect("b", row, {"id": 1})  # not under b-value
    latest = converter(registry_url, **{"use.latest.version": "true", "auto.register.schemas": "false",
                                        "value.subject.name.strategy": "RecordNameStrategy"})
    assert latest.to_connect("x", latest.from_connect("x", row, {"id": 2}))[1] == {"id": 2}
    wider = {**row, "fields": [*row["fields"], field("extra", "string", True)]}  # a field the latest lacks
    assert latest.to_connect("x", latest.from_connect("x", wider, {"id": 3, "extra": "e"}))[1] == {"id": 3}
    # auto.register.schemas (the default) comes first, as in Confluent's serializer: the record's own schema is
    # registered and written, use.latest.version notwithstanding
    registering = converter(registry_url, **{"use.latest.version": "true",
                                             "value.subject.name.strategy": "RecordNameStrategy"})
    data = registering.from_connect("x", wider, {"id": 4, "extra": "f"})
    assert registering.to_connect("x", data)[1] == {"id": 4, "extra": "f"}
    with urllib.request.urlopen(f"{registry_url}/subjects/shop.Row/versions") as answer:
        assert json.loads(answer.read()) == [1, 2]


def test_values_that_do_not_fit_and_records_that_are_not_protobuf_fail_the_record(registry_url):
    c = converter(registry_url)
    row = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [field("id", "int32")]}
    with pytest.raises(DataError, match="id"):
        c.from_connect("t", row, {"id": "seven"})
    with pytest.raises(DataError, match="null for a required int32"):
        c.from_connect("t", row, {"id": None})
    with pytest.raises(DataError, match="Unknown magic byte"):
        c.to_connect("t", b"{}")
    good = c.from_connect("t", row, {"id": 1})
    with pytest.raises(DataError, match="not Protobuf of schema 1"):
        c.to_connect("t", good + b"\xff")
    avro = make_converter("value.converter", "avro", {"schema.registry.url": registry_url}, False)
    with pytest.raises(DataError, match="not PROTOBUF"):
        c.to_connect("t", avro.from_connect("avro-topic", {"type": "string", "optional": False}, "x"))
    with pytest.raises(DataError, match="Unsupported root schema of type array"):
        c.from_connect("t", {"type": "array", "items": {"type": "int32"}, "optional": False}, [1])
    bad_tag = {**row, "fields": [field("id", "int32", parameters={TAG: "one"})]}
    with pytest.raises(DataError, match="Invalid protobuf schema definition: ValueError"):
        c.from_connect("t", bad_tag, {"id": 1})


def test_a_value_that_does_not_fit_registers_no_schema(registry_url):
    """The value is converted before its schema is registered (as Confluent's converter): a record that fails
    leaves no subject behind; the next good one registers and is written as before."""
    c = converter(registry_url)
    row = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [field("id", "int32")]}
    with pytest.raises(DataError, match="id"):
        c.from_connect("t", row, {"id": "seven"})
    with urllib.request.urlopen(f"{registry_url}/subjects") as answer:
        assert json.loads(answer.read()) == []
    assert c.from_connect("t", row, {"id": 1}) == b"\x00\x00\x00\x00\x01\x00\x08\x01"
    assert converter(registry_url).to_connect("t", c.from_connect("t", row, {"id": 2}))[1] == {"id": 2}


def test_a_proto2_record_without_its_required_fields_fails_the_record(registry_url):
    """Confluent's deserializer parses with DynamicMessage.parseFrom, which refuses a message whose proto2
    `required` fields are unset (read here they were their defaults)."""
    text = 'syntax = "proto2";\npackage p2;\nmessage M {\n  required string b = 1;\n  optional int32 a = 2;\n}\n'
    request = urllib.request.Request(f"{registry_url}/subjects/p2-value/versions", json.dumps(
        {"schemaType": "PROTOBUF", "schema": text}).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        header = b"\x00" + json.loads(answer.read())["id"].to_bytes(4, "big") + b"\x00"
    c = converter(registry_url)
    assert c.to_connect("p2", header + b"\x0a\x02hi")[1] == {"b": "hi", "a": None}
    with pytest.raises(DataError, match="required fields missing: b"):
        c.to_connect("p2", header + b"\x10\x05")


def test_a_timestamp_past_year_9999_fails_the_record(registry_url):
    """Timestamps.fromMillis and toMillis (Timestamps.checkValid) fail a Timestamp outside years 1 to 9999: a
    Java consumer could not read one written, and one read is no Connect value Confluent gives."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    c = converter(registry_url)
    row = {"type": "struct", "optional": False, "name": "shop.Row",
           "fields": [field("at", "int64", True, name=TIMESTAMP, version=1)]}
    last = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
    assert c.to_connect("t", c.from_connect("t", row, {"at": last}))[1] == {"at": last}
    with pytest.raises(DataError, match="at: .*Timestamp is not valid"):
        c.from_connect("t", row, {"at": last + 1})
    order_class, _ = _shop_classes()
    order = order_class()
    order.placed_at.seconds = 253_402_300_800
    data = protobuf.ProtobufSerializer(order_class, SchemaRegistryClient({"url": registry_url}))(order, ctx("orders"))
    with pytest.raises(DataError, match="Timestamp is not valid"):
        c.to_connect("orders", data)


@pytest.mark.slow
def test_a_message_held_twice_at_each_level_is_read_with_its_struct_shared(registry_url):
    """A message held by two fields was two Connect subtrees: 20 levels of that were a million fields (refused
    past 50,000). As Confluent's ProtobufData (one struct per message), the message's struct is made once and
    shared, so the schema is read; another message of the schema is read too."""
    levels = 20
    text = 'syntax = "proto3";\n' + "".join(f"message M{i} {{ M{i + 1} a = 1; M{i + 1} b = 2; }}\n"
                                            for i in range(levels)) + \
        f"message M{levels} {{ int32 v = 1; }}\nmessage Small {{ M{levels - 1} m = 1; }}\n"
    request = urllib.request.Request(f"{registry_url}/subjects/fan-value/versions", json.dumps(
        {"schemaType": "PROTOBUF", "schema": text}).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        header = b"\x00" + json.loads(answer.read())["id"].to_bytes(4, "big")
    c = converter(registry_url)
    schema, value = c.to_connect("fan", header + b"\x00")
    assert value == {"a": None, "b": None}
    a, b = schema["fields"]
    assert a["fields"] is b["fields"] and (a["name"], b["name"]) == ("M1", "M1")
    small = header + b"\x02" + bytes([2 * (levels + 1)]) + b"\x0a\x06\x0a\x02\x08\x07\x12\x00"  # index [21]
    assert c.to_connect("fan", small)[1] == {"m": {"a": {"v": 7}, "b": {"v": 0}}}


def test_configs_naming_the_converter_pass_validation_and_bad_values_are_refused():
    from klog.connect.worker import validate

    config = {"name": "s", "connector.class": "FileStreamSink", "topics": "t", "file": "/dev/null",
              "value.converter": PROTOBUF, "value.converter.schema.registry.url": "http://127.0.0.1:1",
              "value.converter.wrapper.for.nullables": "true", "key.converter": "protobuf",
              "key.converter.schema.registry.url": "http://127.0.0.1:1"}
    assert validate(config).name == "s"  # nothing contacted at validation
    with pytest.raises(ConfigError, match="value.converter.optional.for.nullables"):
        validate({**config, "value.converter.optional.for.nullables": "maybe"})
    with pytest.raises(ConfigError, match="value.converter.value.subject.name.strategy"):
        validate({**config, "value.converter.value.subject.name.strategy": "com.example.Mine"})
    with pytest.raises(ConfigError, match="key.converter.schema.registry.url"):
        make_converter("key.converter", "protobuf", {}, True)
    # Confluent's settings that would change the bytes or the registered schema are refused by name
    header_ids = "io.confluent.kafka.serializers.schema.id.HeaderSchemaIdSerializer"
    for key, raw in (("use.schema.id", "3"), ("schema.backup.enabled", "true"),
                     ("skip.known.types", "false"), ("use.latest.with.metadata", "app=1"),
                     ("latest.cache.ttl.sec", "60"), ("value.schema.id.serializer", header_ids)):
        with pytest.raises(ConfigError, match=f"value.converter.{key}"):
            validate({**config, f"value.converter.{key}": raw})
    assert validate({**config, "value.converter.use.schema.id": "-1", "value.converter.skip.known.types": "true",
                     "value.converter.schemas.cache.config": "10",
                     "value.converter.normalize.schemas": "true"}).name == "s"  # sends ?normalize=true


def test_a_decimal_is_rounded_to_the_precision_its_message_gives():
    """DecimalUtils.toBigDecimal: the unscaled value at its scale, in a MathContext of its precision; an unscaled
    value past 64 KiB fails the record."""
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    from klog.connect.protobuf import _logical_value

    message = decimal_pb2.Decimal(value=(12345).to_bytes(2, "big"), scale=2, precision=3)
    assert _logical_value(DECIMAL, message) == decimal.Decimal("123")
    assert _logical_value(DECIMAL, decimal_pb2.Decimal(value=b"\xff\x85", scale=1)) == decimal.Decimal("-12.3")
    with pytest.raises(DataError, match="65537 bytes"):  # a hostile one: quadratic to read (400 KiB: 17 s)
        _logical_value(DECIMAL, decimal_pb2.Decimal(value=b"\x01" * 65_537))


@pytest.mark.slow
def test_debeziums_tutorial_connector_with_protobuf_converters(pg_db, data_dir, tmp_path):
    """Debezium's tutorial connector, its converters Confluent's ProtobufConverter: the snapshot, an update, a
    delete and its tombstone on dbserver1.inventory.customers, registered under <topic>-key and <topic>-value,
    read back by the converter and by confluent-kafka's ProtobufDeserializer."""
    from tests.connect.helpers import records, running
    from tests.connect.test_connect_published_configs import (
        at_test_server,
        change_customers,
        debezium_customers,
        published,
    )

    debezium_customers(pg_db)
    topic = "dbserver1.inventory.customers"
    warnings: list[str] = []
    with registry_at(str(tmp_path / "registry")) as url:
        config = {**at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db),
                  "key.converter": PROTOBUF, "key.converter.schema.registry.url": url,
                  "value.converter": PROTOBUF, "value.converter.schema.registry.url": url}
        with running(data_dir, config, warnings=warnings):
            change_customers(pg_db, data_dir, topic, 4)
        key, value = converter(url, is_key=True), converter(url)
        got = [(key.to_connect(topic, r.key)[1], value.to_connect(topic, r.value)[1]) for r in records(data_dir, topic)]
        with urllib.request.urlopen(f"{url}/subjects") as answer:
            assert json.loads(answer.read()) == [f"{topic}-key", f"{topic}-value"]
        with urllib.request.urlopen(f"{url}/subjects/{topic}-value/versions/latest") as answer:
            envelope = _registered_class(url, json.loads(answer.read())["id"], f"{topic}.Envelope")
        first = protobuf.ProtobufDeserializer(envelope, {"use.deprecated.format": False})(
            records(data_dir, topic)[0].value, ctx(topic))
    sally = {"id": 1, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
    assert [k for k, _ in got] == [{"id": 1}] * 4
    assert [(v["op"], v["before"], v["after"]) for _, v in got[:3]] == [
        ("r", None, sally), ("u", None, {**sally, "first_name": "Anne Marie"}),
        ("d", {"id": 1, "first_name": "", "last_name": "", "email": ""}, None)]
    assert got[3][1] is None  # the tombstone stays one
    assert (first.op, first.after.first_name, first.source.name) == ("r", "Sally", "dbserver1")
    assert warnings == []

"""Confluent's AvroConverter (klog/connect/avro.py) against klog's registry, checked with an independent
implementation: confluent-kafka's AvroSerializer and AvroDeserializer (over its own SchemaRegistryClient)
read what the converter writes and write what it reads. The Avro schemas are compared with what
Confluent's AvroData registers for the same Connect schemas."""

from __future__ import annotations

import decimal
import json

import pytest

pytest.importorskip("fastavro", reason="the AvroConverter needs fastavro (pip install 'klog[connect]')")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.errors import ConfigError, DataError, RetriableError  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

AVRO = "io.confluent.connect.avro.AvroConverter"
DECIMAL = "org.apache.kafka.connect.data.Decimal"




@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def converter(url: str, is_key: bool = False, **settings: str):  # noqa: ANN201
    return make_converter("key.converter" if is_key else "value.converter", AVRO,
                          {"schema.registry.url": url, **settings}, is_key)


def confluent(url: str):  # noqa: ANN201 - (client, deserializer, context of a topic's value)
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    client = SchemaRegistryClient({"url": url})
    return client, AvroDeserializer(client)


def ctx(topic: str, is_key: bool = False):  # noqa: ANN201
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)


def field(field_name: str, type_: str, optional: bool = False, **extra: object) -> dict:
    return {"type": type_, "optional": optional, **extra, "field": field_name}


ROW = {"type": "struct", "optional": True, "name": "shop.public.orders.Value", "fields": [
    field("id", "int32"), field("note", "string", True),
    field("total", "bytes", True, name=DECIMAL, version=1,
          parameters={"scale": "2", "connect.decimal.precision": "10"}),
    field("qty", "int16"), field("flag", "int8", True), field("big", "int64", True), field("ratio", "float64", True),
    field("paid", "boolean", True), field("blob", "bytes", True),
    field("day", "int32", True, name="org.apache.kafka.connect.data.Date", version=1),
    field("at", "int64", True, name="org.apache.kafka.connect.data.Timestamp", version=1),
    field("micro", "int64", True, name="io.debezium.time.MicroTimestamp", version=1),
    {"type": "array", "items": {"type": "string", "optional": True}, "optional": True, "field": "tags"},
    {"type": "map", "keys": {"type": "string", "optional": False}, "values": {"type": "int64", "optional": False},
     "optional": True, "field": "counts"},
    {"type": "map", "keys": {"type": "int32", "optional": False}, "values": {"type": "string", "optional": True},
     "optional": True, "field": "by_id"}]}
ENVELOPE = {"type": "struct", "optional": False, "name": "shop.public.orders.Envelope", "version": 1, "fields": [
    {**ROW, "field": "before"}, {**ROW, "field": "after"},
    field("snapshot", "string", True, name="io.debezium.data.Enum", version=1,
          parameters={"allowed": "true,last,false,incremental"}, default="false"),
    field("op", "string")]}
AFTER = {"id": 7, "note": None, "total": decimal.Decimal("12.50"), "qty": 3, "flag": -1, "big": 2**40, "ratio": 0.25,
         "paid": True, "blob": b"\x00\xff", "day": 19000, "at": 1700000000123, "micro": 1700000000123456,
         "tags": ["a", None], "counts": {"x": 1}, "by_id": {5: "five"}}


def test_connect_schemas_become_the_avro_schemas_confluents_avrodata_registers():
    """The Avro schema of a Debezium-shaped envelope, as Confluent's AvroData writes it: records with
    namespace, name and connect.name, ["null", T] with default null, the second use of a record by name,
    int16 with connect.type, Decimal's bytes with scale and precision, Date and Timestamp's logical types,
    Debezium's semantic names as connect.name, a field default with connect.default and [T, "null"],
    a non-string-keyed map as MapEntry records."""
    from klog.connect.avro import avro_schema

    got = avro_schema(ENVELOPE)
    assert [f["name"] for f in got["fields"]] == ["before", "after", "snapshot", "op"]
    assert {k: got[k] for k in ("type", "name", "namespace", "connect.version", "connect.name")} == {
        "type": "record", "name": "Envelope", "namespace": "shop.public.orders", "connect.version": 1,
        "connect.name": "shop.public.orders.Envelope"}
    before, after, snapshot, op = got["fields"]
    assert before["type"][0] == "null" and before["default"] is None
    assert after == {"name": "after", "type": ["null", "shop.public.orders.Value"], "default": None}
    assert snapshot == {"name": "snapshot", "type": [
        {"type": "string", "connect.version": 1, "connect.parameters": {"allowed": "true,last,false,incremental"},
         "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"], "default": "false"}
    assert op == {"name": "op", "type": "string"}
    row = {f["name"]: f["type"] for f in before["type"][1]["fields"]}
    assert row["id"] == "int" and row["qty"] == {"type": "int", "connect.type": "int16"}
    assert row["flag"] == ["null", {"type": "int", "connect.type": "int8"}]
    assert row["total"] == ["null", {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                                     "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                                     "connect.name": DECIMAL, "logicalType": "decimal"}]
    assert row["day"] == ["null", {"type": "int", "connect.version": 1, "connect.name":
                                   "org.apache.kafka.connect.data.Date", "logicalType": "date"}]
    assert row["at"][1]["logicalType"] == "timestamp-millis"
    assert row["micro"] == ["null", {"type": "long", "connect.version": 1, "connect.name":
                                     "io.debezium.time.MicroTimestamp"}]
    assert row["counts"] == ["null", {"type": "map", "values": "long"}]
    assert row["by_id"] == ["null", {"type": "array", "items": {
        "type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro", "fields": [
            {"name": "key", "type": "int"}, {"name": "value", "type": ["null", "string"], "default": None}]}}]
    unnamed = avro_schema({"type": "struct", "optional": False, "fields": [
        {"type": "struct", "optional": False, "fields": [field("x", "int32")], "field": "inner"}]})
    assert (unnamed["namespace"], unnamed["name"], unnamed["fields"][0]["type"]["name"]) == (
        "io.confluent.connect.avro", "ConnectDefault", "ConnectDefault2")


def test_the_avro_schema_gives_back_the_connect_schema():
    from klog.connect.avro import avro_schema, connect_schema

    assert connect_schema(avro_schema(ENVELOPE)) == ENVELOPE


def test_values_round_trip_and_confluent_kafkas_deserializer_reads_them(registry_url):
    c = converter(registry_url)
    data = c.from_connect("shop.public.orders", ENVELOPE, {"before": None, "after": AFTER, "op": "c"})
    assert data[:1] == b"\x00" and int.from_bytes(data[1:5], "big") == 1
    schema, value = c.to_connect("shop.public.orders", data)
    assert schema == ENVELOPE
    assert value == {"before": None, "after": AFTER, "snapshot": "false", "op": "c"}  # the default filled in
    client, deserializer = confluent(registry_url)
    read = deserializer(data, ctx("shop.public.orders"))
    after = read["after"]
    assert (after["id"], after["total"], after["qty"], after["blob"], after["tags"]) == (
        7, decimal.Decimal("12.50"), 3, b"\x00\xff", ["a", None])
    assert after["by_id"] == [{"key": 5, "value": "five"}] and read["snapshot"] == "false"
    assert after["day"].isoformat() == "2022-01-08" and after["at"].timestamp() == 1700000000.123
    assert client.get_subjects() == ["shop.public.orders-value"]
    registered = json.loads(client.get_latest_version("shop.public.orders-value").schema.schema_str)
    assert registered["connect.name"] == "shop.public.orders.Envelope"
    assert c.from_connect("shop.public.orders", ENVELOPE, None) is None  # a tombstone stays one
    assert c.to_connect("shop.public.orders", None) == (None, None)


def test_keys_and_primitives_under_topic_name_strategy(registry_url):
    key = converter(registry_url, is_key=True)
    key_schema = {"type": "struct", "optional": False, "name": "shop.public.orders.Key",
                  "fields": [field("id", "int32", default=0)]}
    data = key.from_connect("orders", key_schema, {"id": 7})
    # read back with the version the registry gave it under its subject (no connect.version): Confluent's too
    assert key.to_connect("orders", data) == ({**key_schema, "version": 1}, {"id": 7})
    plain = converter(registry_url, is_key=True)
    assert plain.to_connect("t", plain.from_connect("t", {"type": "string", "optional": False}, "k")) == (
        {"type": "string", "optional": False, "version": 1}, "k")
    client, deserializer = confluent(registry_url)
    assert sorted(client.get_subjects()) == ["orders-key", "t-key"]
    assert deserializer(data, ctx("orders", True)) == {"id": 7}


def test_confluent_kafkas_serializer_output_is_read_as_connect_data(registry_url):
    from confluent_kafka.schema_registry.avro import AvroSerializer

    client, _ = confluent(registry_url)
    writer_schema = {"type": "record", "name": "Order", "namespace": "shop", "doc": "an order", "fields": [
        {"name": "id", "type": "long"}, {"name": "status", "type": {"type": "enum", "name": "Status",
                                                                   "symbols": ["NEW", "PAID"]}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}},
        {"name": "either", "type": ["null", "string", "long"], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None}]}
    serialize = AvroSerializer(client, json.dumps(writer_schema))
    import datetime as dt

    at = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    data = serialize({"id": 1, "status": "PAID", "amount": decimal.Decimal("9.99"), "at": at, "tags": {"a": "b"},
                      "code": b"XY", "either": 5, "note": None}, ctx("orders"))
    schema, value = converter(registry_url).to_connect("orders", data)
    fields = {f["field"]: f for f in schema["fields"]}
    assert schema["name"] == "shop.Order" and schema["parameters"]["io.confluent.connect.avro.record.doc"] == \
        "an order"
    assert schema["version"] == 1  # the registry's version under orders-value, as Confluent's converter gives it
    assert fields["status"]["type"] == "string" and fields["status"]["parameters"][
        "io.confluent.connect.avro.Enum"] == "shop.Status"
    assert (fields["amount"]["name"], fields["amount"]["parameters"]) == (
        DECIMAL, {"scale": "2", "connect.decimal.precision": "8"})
    assert fields["at"]["type"] == "int64" and "name" not in fields["at"]
    assert fields["code"]["parameters"] == {"connect.fixed.size": "2"} and fields["code"]["name"] == "shop.Code"
    assert fields["either"]["name"] == "io.confluent.connect.avro.Union" and fields["either"]["optional"]
    assert fields["note"] == {"type": "string", "optional": True, "field": "note"}
    assert value == {"id": 1, "status": "PAID", "amount": decimal.Decimal("9.99"),
                     "at": 1767323045678901, "tags": {"a": "b"}, "code": b"XY",
                     "either": {"string": None, "long": 5}, "note": None}


def test_record_name_strategies_and_lookup_only(registry_url):
    schema = {"type": "struct", "optional": False, "name": "shop.Order", "fields": [field("id", "int64")]}
    by_record = converter(registry_url, **{"value.subject.name.strategy":
                                           "io.confluent.kafka.serializers.subject.RecordNameStrategy"})
    by_record.from_connect("a", schema, {"id": 1})
    topic_record = converter(registry_url, **{"value.subject.name.strategy": "TopicRecordNameStrategy"})
    topic_record.from_connect("a", schema, {"id": 1})
    client, _ = confluent(registry_url)
    assert sorted(client.get_subjects()) == ["a-shop.Order", "shop.Order"]
    # read by a converter of the default strategy: not under a-value, so no version (Confluent's would fail)
    assert "version" not in converter(registry_url).to_connect("a", by_record.from_connect("a", schema, {"id": 1}))[0]
    assert by_record.to_connect("a", by_record.from_connect("a", schema, {"id": 1}))[0]["version"] == 1
    lookup_only = converter(registry_url, **{"auto.register.schemas": "false"})
    with pytest.raises(DataError, match="40401"):
        lookup_only.from_connect("b", schema, {"id": 1})
    other = converter(registry_url)
    other.from_connect("b", schema, {"id": 1})
    assert lookup_only.from_connect("b", schema, {"id": 2})[1:5] == (1).to_bytes(4, "big")


def test_use_latest_version_writes_with_the_subjects_latest_schema(registry_url):
    from confluent_kafka.schema_registry import Schema

    client, deserializer = confluent(registry_url)
    latest = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"},
                                                        {"name": "extra", "type": "string", "default": "x"}]}
    schema_id = client.register_schema("t-value", Schema(json.dumps(latest), "AVRO"))
    c = converter(registry_url, **{"use.latest.version": "true", "auto.register.schemas": "false"})
    data = c.from_connect("t", {"type": "struct", "optional": False, "name": "R", "fields": [field("id", "int64")]},
                          {"id": 3})
    assert int.from_bytes(data[1:5], "big") == schema_id
    assert deserializer(data, ctx("t")) == {"id": 3, "extra": "x"}


def test_auto_register_comes_before_use_latest_version(registry_url):
    """Confluent's serializer registers when auto.register.schemas (the default) is on, whatever
    use.latest.version says: the record's own schema is written, not the subject's latest."""
    from confluent_kafka.schema_registry import Schema

    client, deserializer = confluent(registry_url)
    latest = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"},
                                                        {"name": "extra", "type": "string", "default": "x"}]}
    latest_id = client.register_schema("u-value", Schema(json.dumps(latest), "AVRO"))
    c = converter(registry_url, **{"use.latest.version": "true"})
    data = c.from_connect("u", {"type": "struct", "optional": False, "name": "R", "fields": [field("id", "int64")]},
                          {"id": 3})
    assert int.from_bytes(data[1:5], "big") != latest_id
    assert deserializer(data, ctx("u")) == {"id": 3}
    assert client.get_versions("u-value") == [1, 2]


def test_latest_compatibility_strict_checks_the_latest_reads_the_records_schema(registry_url):
    from confluent_kafka.schema_registry import Schema

    client, deserializer = confluent(registry_url)
    # the latest schema's int cannot read the long the record's schema writes (Avro promotes only upwards)
    latest = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "int"}]}
    schema_id = client.register_schema("s-value", Schema(json.dumps(latest), "AVRO"))
    record = {"type": "struct", "optional": False, "name": "R", "fields": [field("id", "int64")]}
    strict = converter(registry_url, **{"use.latest.version": "true", "auto.register.schemas": "false"})
    with pytest.raises(DataError, match="Incompatible schema .*/fields/id.*Set latest.compatibility.strict=false"):
        strict.from_connect("s", record, {"id": 3})
    # a logical type in the record's schema (Decimal: bytes) is read by the latest's plain bytes
    money = {"type": "struct", "optional": False, "name": "M", "fields": [
        field("price", "bytes", name=DECIMAL, version=1, parameters={"scale": "2"})]}
    client.register_schema("m-value", Schema(json.dumps({"type": "record", "name": "M", "fields": [
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 64, "scale": 2}}]}),
        "AVRO"))
    assert strict.from_connect("m", money, {"price": decimal.Decimal("1.25")})[:1] == b"\0"
    unchecked = converter(registry_url, **{"use.latest.version": "true", "auto.register.schemas": "false",
                                           "latest.compatibility.strict": "false"})
    data = unchecked.from_connect("s", {**record}, {"id": 3})
    assert int.from_bytes(data[1:5], "big") == schema_id
    assert deserializer(data, ctx("s")) == {"id": 3}


def test_refusals_name_the_key_or_the_reason(registry_url):
    with pytest.raises(ConfigError, match="value.converter.schema.registry.url"):
        make_converter("value.converter", AVRO, {}, False)
    with pytest.raises(ConfigError, match="key.converter.key.subject.name.strategy"):
        make_converter("key.converter", AVRO, {"schema.registry.url": registry_url,
                                               "key.subject.name.strategy": "MyStrategy"}, True)
    with pytest.raises(ConfigError, match="basic.auth.credentials.source"):
        converter(registry_url, **{"basic.auth.credentials.source": "SASL_INHERIT"})
    c = converter(registry_url)
    with pytest.raises(DataError, match="schema"):
        c.from_connect("t", None, {"a": 1})
    with pytest.raises(DataError, match="id"):
        c.from_connect("t", ROW, {"note": "no id"})
    with pytest.raises(DataError, match="magic"):
        c.to_connect("t", b"\x01\x00\x00\x00\x01")
    with pytest.raises(DataError, match="40403"):
        c.to_connect("t", b"\x00\x00\x00\x00\x63\x00")
    incompatible = {"type": "struct", "optional": False, "name": "R", "fields": [field("a", "string")]}
    c.from_connect("t", incompatible, {"a": "x"})
    with pytest.raises(DataError, match="409"):
        c.from_connect("t", {**incompatible, "fields": [field("b", "string")]}, {"b": "x"})


def test_a_registry_that_does_not_answer_is_retriable():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    c = converter(f"http://127.0.0.1:{port}")
    with pytest.raises(RetriableError, match="no Schema Registry answered"):
        c.from_connect("t", {"type": "string", "optional": False}, "x")


def test_basic_auth_from_user_info_or_the_url():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"id": 1}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        converter(f"http://127.0.0.1:{port}", **{"basic.auth.credentials.source": "USER_INFO",
                                                 "basic.auth.user.info": "fred:letmein"}).from_connect(
            "t", {"type": "string", "optional": False}, "x")
        converter(f"http://ann:p%40ss@127.0.0.1:{port}").from_connect("t", {"type": "string", "optional": False}, "x")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    import base64

    assert seen == ["Basic " + base64.b64encode(b"fred:letmein").decode(),
                    "Basic " + base64.b64encode(b"ann:p@ss").decode()]


def test_avro_configs_pass_validation_and_others_are_still_refused():
    from klog.connect.worker import validate

    config = {"name": "s", "connector.class": "FileStreamSink", "topics": "t", "file": "/dev/null",
              "value.converter": AVRO, "value.converter.schema.registry.url": "http://127.0.0.1:1"}
    assert validate(config).name == "s"  # nothing contacted at validation
    assert validate({**config, "value.converter": "io.confluent.connect.protobuf.ProtobufConverter"}).name == "s"
    with pytest.raises(ConfigError, match="unknown converter"):
        validate({**config, "value.converter": "com.example.XmlConverter"})


def test_a_decimal_scale_over_its_precision_is_written_as_confluent_writes_it(registry_url):
    """Connect's Decimal with scale 127 (the JDBC source's unconstrained numeric) has no valid Avro decimal
    (scale over the default precision 64): Confluent writes the logicalType anyway and Avro's Java library
    ignores it. The registry takes it, the converter writes and reads the value (fastavro, and so
    confluent-kafka's AvroDeserializer, refuses that schema: a Java consumer reads it)."""
    from klog.connect.avro import avro_schema

    schema = {"type": "struct", "optional": False, "name": "accounts", "fields": [
        field("n", "bytes", True, name=DECIMAL, version=1, parameters={"scale": "127"})]}
    assert avro_schema(schema)["fields"][0]["type"][1] == {
        "type": "bytes", "scale": 127, "precision": 64, "connect.version": 1, "connect.parameters": {"scale": "127"},
        "connect.name": DECIMAL, "logicalType": "decimal"}
    c = converter(registry_url)
    data = c.from_connect("accounts", schema, {"n": decimal.Decimal("2.5")})
    assert c.to_connect("accounts", data) == ({**schema, "version": 1}, {"n": decimal.Decimal("2.5")})


def test_general_unions_round_trip_as_confluents_union_structs(registry_url):
    """An Avro union other than [null, T] is Connect's io.confluent.connect.avro.Union struct (one field per
    branch, named after it); two records of the same shape stay told apart, both ways."""
    union = "io.confluent.connect.avro.Union"

    def record(name: str) -> dict:
        return {"type": "struct", "optional": True, "name": name, "fields": [field("x", "int32")]}

    schema = {"type": "struct", "optional": False, "name": "T", "fields": [
        {"type": "struct", "optional": True, "name": union, "field": "u", "fields": [
            {**record("a.A"), "field": "A"}, {**record("a.B"), "field": "B"}, field("string", "string", True)]}]}
    c = converter(registry_url)
    for value in ({"u": {"A": None, "B": {"x": 2}, "string": None}}, {"u": {"A": None, "B": None, "string": "hi"}},
                  {"u": None}):
        assert c.to_connect("t", c.from_connect("t", schema, value)) == ({**schema, "version": 1}, value)
    _, deserializer = confluent(registry_url)
    assert deserializer(c.from_connect("t", schema, {"u": {"A": {"x": 1}, "B": None, "string": None}}),
                        ctx("t")) == {"u": {"x": 1}}


def test_scrub_invalid_names_makes_avro_names_as_confluent_does(registry_url):
    """A Debezium topic prefix with a dash names structs Avro refuses: refused by the registry (42201) as
    Confluent's converter refuses them, unless scrub.invalid.names=true, which makes each name an Avro name
    the way Confluent's doScrubName does (connect.name keeps the original)."""
    from klog.connect.avro import avro_schema, scrub_name

    assert [scrub_name(n) for n in ("ok_1", "my-field", "1st", "a b", "é", "")] == [
        "ok_1", "my_field", "x1st", "a_b", "_C3_A9", ""]
    schema = {"type": "struct", "optional": False, "name": "my-server.inventory.t.Value", "fields": [
        field("my-field", "int32"), {"type": "struct", "optional": True, "name": "my-server.inventory.t.Inner",
                                     "fields": [field("x", "int32")], "field": "inner"}]}
    with pytest.raises(DataError, match="42201"):
        converter(registry_url).from_connect("t", schema, {"my-field": 1, "inner": None})
    avro = avro_schema(schema, scrub=True)
    assert (avro["namespace"], avro["name"], avro["connect.name"]) == ("my_server.inventory.t", "Value",
                                                                      "my-server.inventory.t.Value")
    c = converter(registry_url, **{"scrub.invalid.names": "true"})
    data = c.from_connect("t", schema, {"my-field": 1, "inner": {"x": 2}})
    _, deserializer = confluent(registry_url)
    assert deserializer(data, ctx("t")) == {"my_field": 1, "inner": {"x": 2}}
    read_schema, value = c.to_connect("t", data)
    assert read_schema["name"] == "my-server.inventory.t.Value" and value == {"my_field": 1, "inner": {"x": 2}}


MONEY = {"type": "record", "name": "Money", "namespace": "shop", "fields": [
    {"name": "units", "type": "long"}, {"name": "currency", "type": {"type": "enum", "name": "Currency",
                                                                     "symbols": ["EUR", "USD"]}}]}
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "total", "type": "Money"},
    {"name": "refund", "type": ["null", "shop.Money"], "default": None}]}
PAYMENT = {"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "paid", "type": "shop.Money"}, {"name": "via", "type": "shop.Currency"}]}


def _connect_money(optional: bool = False) -> dict:
    currency = {"type": "string", "optional": False, "name": "shop.Currency", "parameters": {
        "io.confluent.connect.avro.Enum": "shop.Currency", "io.confluent.connect.avro.Enum.EUR": "EUR",
        "io.confluent.connect.avro.Enum.USD": "USD"}}
    return {"type": "struct", "optional": optional, "name": "shop.Money",
            "fields": [field("units", "int64"), {**currency, "field": "currency"}]}


def _registered_references(url: str):  # noqa: ANN202 - (client, the References of Order and Payment)
    """money, then order and payment referencing it, registered by hand as Confluent's clients would."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    client, _ = confluent(url)
    client.register_schema("money", Schema(json.dumps(MONEY), "AVRO"))
    to_money = [SchemaReference("shop.Money", "money", 1)]
    client.register_schema("order", Schema(json.dumps(ORDER), "AVRO", references=to_money))
    client.register_schema("payment", Schema(json.dumps(PAYMENT), "AVRO", references=to_money))
    return client, to_money


def test_records_whose_schema_has_references_read_as_connect_data(registry_url):
    """confluent-kafka's AvroSerializer writes with schemas whose named types other subjects define: a field
    of a referenced record type, and a top-level union of two referenced records (several event types in one
    topic). The converter reads them as Confluent's AvroData: each use of a referenced type is its
    definition, the union Connect's io.confluent.connect.avro.Union struct with a field per record."""
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.avro import AvroSerializer

    client, to_money = _registered_references(registry_url)
    c = converter(registry_url)
    write_order = AvroSerializer(client, Schema(json.dumps(ORDER), "AVRO", references=to_money))
    order = {"id": 7, "total": {"units": 250, "currency": "EUR"}, "refund": None}
    schema, value = c.to_connect("orders", write_order(order, ctx("orders")))
    connect_order = {"type": "struct", "optional": False, "name": "shop.Order", "version": 1, "fields": [
        field("id", "int64"), {**_connect_money(), "field": "total"}, {**_connect_money(True), "field": "refund"}]}
    assert (schema, value) == (connect_order, order)

    union = Schema(json.dumps(["shop.Order", "shop.Payment"]), "AVRO", references=[
        SchemaReference("shop.Order", "order", 1), SchemaReference("shop.Payment", "payment", 1)])
    write_event = AvroSerializer(client, union, conf={"auto.register.schemas": False, "use.latest.version": True})
    client.register_schema("events-value", union)
    payment = {"paid": {"units": 3, "currency": "USD"}, "via": "USD"}
    read = [c.to_connect("events", write_event(v, ctx("events"))) for v in (order, payment)]
    connect_payment = {"type": "struct", "optional": True, "name": "shop.Payment", "fields": [
        {**_connect_money(), "field": "paid"}, {**_connect_money()["fields"][1], "field": "via"}]}
    member_order = {**{k: v for k, v in connect_order.items() if k != "version"}, "optional": True, "field": "Order"}
    events = {"type": "struct", "optional": False, "name": "io.confluent.connect.avro.Union", "version": 1,
              "fields": [member_order, {**connect_payment, "field": "Payment"}]}
    assert read == [(events, {"Order": order, "Payment": None}), (events, {"Order": None, "Payment": payment})]


def test_a_reference_the_registry_does_not_give_fails_the_record(registry_url):
    """A referenced version the registry refuses fails the record naming the schema and the reference; a
    registry that does not answer for it is retriable, as for the schema itself."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.avro import AvroSerializer

    from klog.connect.avro import RegistryError

    client, to_money = _registered_references(registry_url)
    data = AvroSerializer(client, Schema(json.dumps(ORDER), "AVRO", references=to_money))(
        {"id": 1, "total": {"units": 1, "currency": "EUR"}, "refund": None}, ctx("orders"))
    for failure, expected, match in ((RegistryError(404, "Subject 'money' not found."), DataError,
                                      "schema 2's references: .*money"),
                                     (RetriableError("no Schema Registry answered"), RetriableError, "answered")):
        c = converter(registry_url)
        _fail_for_money(c.registry, failure)
        with pytest.raises(expected, match=match):
            c.to_connect("orders", data)


def _fail_for_money(registry, failure: Exception) -> None:  # noqa: ANN001 - the converter's RegistryClient
    """The registry client raises `failure` for the subject money's versions, answers the rest."""
    call = registry.call

    def refusing(method: str, path: str, body: object = None) -> object:
        if path.startswith("/subjects/money/"):
            raise failure
        return call(method, path, body)

    registry.call = refusing


def test_use_latest_version_writes_with_a_latest_that_has_references(registry_url):
    """use.latest.version (auto.register.schemas=false) with a latest schema whose named types other subjects
    define: resolved as the reader resolves them (checked, then written under the latest's id), so
    confluent-kafka's AvroDeserializer reads the record."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    client, to_money = _registered_references(registry_url)
    latest_id = client.register_schema("orders-value", Schema(json.dumps(ORDER), "AVRO", references=to_money))
    connect_order = {"type": "struct", "optional": False, "name": "shop.Order", "fields": [
        field("id", "int64"), {**_connect_money(), "field": "total"}, {**_connect_money(True), "field": "refund"}]}
    order = {"id": 7, "total": {"units": 250, "currency": "EUR"}, "refund": {"units": 1, "currency": "USD"}}
    latest = {"use.latest.version": "true", "auto.register.schemas": "false"}
    # the check sees through the references: Money's currency is an enum, which cannot read the string
    # Confluent's AvroData makes of Connect's enum (without enhanced.avro.schema.support)
    with pytest.raises(DataError, match="/fields/total/fields/currency: the reader's enum cannot read"):
        converter(registry_url, **latest).from_connect("orders", connect_order, order)
    c = converter(registry_url, **latest, **{"latest.compatibility.strict": "false"})
    data = c.from_connect("orders", connect_order, order)
    assert int.from_bytes(data[1:5], "big") == latest_id
    _, deserializer = confluent(registry_url)
    assert deserializer(data, ctx("orders")) == order
    assert c.to_connect("orders", data)[1] == order
    # a latest that is a union of referenced records (several event types in one topic): the branch named
    events = Schema(json.dumps(["shop.Order", "shop.Payment"]), "AVRO", references=[
        SchemaReference("shop.Order", "order", 1), SchemaReference("shop.Payment", "payment", 1)])
    events_id = client.register_schema("events-value", events)
    union_schema, _ = c.to_connect("orders", data)
    union = {"type": "struct", "optional": False, "name": "io.confluent.connect.avro.Union", "fields": [
        {**union_schema, "optional": True, "field": "Order"}]}
    data = c.from_connect("events", union, {"Order": order})
    assert int.from_bytes(data[1:5], "big") == events_id
    assert deserializer(data, ctx("events")) == order


def test_a_named_type_its_references_define_is_not_defined_again_differently():
    """Avro's Java parser refuses a schema (or a second reference) defining again, differently, a type a
    reference defines ("Can't redefine"), so Confluent has no such schema; klog does not silently read with
    the last definition. The same definition again (one type reached through two references) is that type."""
    from klog.connect.avro import with_references_inlined

    money = json.dumps(MONEY)
    other_money = {"type": "record", "name": "Money", "namespace": "shop", "fields": [{"name": "cents", "type": "int"}]}
    order = {**ORDER, "fields": [{"name": "total", "type": other_money}]}
    for texts in ([money, json.dumps(order)], [money, json.dumps(other_money), json.dumps(ORDER)]):
        with pytest.raises(DataError, match="Can't redefine: shop.Money"):
            with_references_inlined(texts)
    twice = with_references_inlined([money, json.dumps({**ORDER, "fields": [{"name": "total", "type": MONEY}]})])
    assert twice["fields"][0]["type"]["fields"][0] == {"name": "units", "type": "long"}


def test_references_that_cycle_fan_out_or_are_not_avro_fail_the_record_naming_the_schema():
    """References are followed boundedly: a cycle (through a version named `latest`) ends where it began,
    the named type it leaves undefined is named; more than REFERENCES_MAX of them, or one that is not Avro,
    fail the record naming its schema id."""
    a = {"type": "record", "name": "shop.A", "fields": [{"name": "b", "type": ["null", "shop.B"]}]}
    b = {"type": "record", "name": "shop.B", "fields": [{"name": "a", "type": ["null", "shop.A"]}]}
    answers = {
        "/schemas/ids/1": {"schema": json.dumps(a), "references": [{"name": "shop.B", "subject": "b", "version": 1}]},
        "/subjects/b/versions/1": {"schema": json.dumps(b),
                                   "references": [{"name": "shop.A", "subject": "a", "version": "latest"}]},
        "/subjects/a/versions/latest": {"schema": json.dumps(a),
                                        "references": [{"name": "shop.B", "subject": "b", "version": 1}]},
        "/schemas/ids/2": {"schema": json.dumps(a), "references": [
            {"name": f"n{i}", "subject": f"s{i}", "version": 1} for i in range(150)]},
        "/schemas/ids/3": {"schema": json.dumps(a), "references": [{"name": "shop.B", "subject": "j", "version": 1}]},
        "/subjects/j/versions/1": {"schema": json.dumps({"type": "object", "properties": {}}), "schemaType": "JSON"},
    }
    for i in range(150):
        answers[f"/subjects/s{i}/versions/1"] = {"schema": json.dumps({"type": "fixed", "name": f"F{i}", "size": 1})}
    calls = []

    def answer(method: str, path: str, body: object = None) -> object:
        calls.append(path)
        return answers[path.removesuffix("?deleted=true")]

    c = converter("http://127.0.0.1:9")
    c.registry.call = answer
    for schema_id, match in ((1, "schema 1 is not an Avro schema .*: unknown type shop.B"),
                             (2, "schema 2's references: more than 100 schema references"),
                             (3, "schema 3 is not an Avro schema .*: unknown type")):
        with pytest.raises(DataError, match=match):
            c.to_connect("t", b"\0" + schema_id.to_bytes(4, "big") + b"\0")
    assert len(calls) == 3 + 1 + 100 + 2  # each reference fetched once, the 101st not


def test_a_diamond_over_two_versions_of_a_referenced_type_reads_with_the_first():
    """Order references money version 1, Payment version 2, a union references both: Confluent's
    resolveReferences follows the name shop.Money once, so Payment's Money is version 1's (not a second
    definition of it)."""
    money_2 = {**MONEY, "fields": [*MONEY["fields"], {"name": "cents", "type": "int", "default": 0}]}

    def to(subject: str, name: str, version: int = 1) -> list:
        return [{"name": name, "subject": subject, "version": version}]

    answers = {
        "/schemas/ids/4": {"schema": json.dumps(["shop.Order", "shop.Payment"]),
                           "references": [*to("order", "shop.Order"), *to("payment", "shop.Payment")]},
        "/subjects/order/versions/1": {"schema": json.dumps(ORDER), "references": to("money", "shop.Money")},
        "/subjects/payment/versions/1": {"schema": json.dumps(PAYMENT), "references": to("money", "shop.Money", 2)},
        "/subjects/money/versions/1": {"schema": json.dumps(MONEY)},
        "/subjects/money/versions/2": {"schema": json.dumps(money_2)},
    }

    def answer(method: str, path: str, body: object = None) -> object:
        if path.removesuffix("?deleted=true") not in answers:
            raise RegistryError(404, "Subject not found.")
        return answers[path.removesuffix("?deleted=true")]

    from klog.connect.avro import RegistryError

    c = converter("http://127.0.0.1:9")
    c.registry.call = answer
    # the union's Payment (index 1): paid {units 3, currency USD}, via USD
    schema, value = c.to_connect("events", b"\0\0\0\0\x04" + b"\x02" + b"\x06\x02" + b"\x02")
    assert schema["fields"][1]["fields"][0] == {**_connect_money(), "field": "paid"}
    assert value["Payment"] == {"paid": {"units": 3, "currency": "USD"}, "via": "USD"}


def test_a_type_a_reference_defines_inside_another_is_defined_at_its_first_use():
    """fin.Money defines its enum Cur (short name, in its namespace); the schema uses fin.Cur before fin.Money
    and a referenced fixed in an array: each definition moves to its first use (as Avro's Java parser
    gives AvroData the types), later uses are names, and the Connect schema is the same at every use."""
    from klog.connect.avro import connect_schema, with_references_inlined

    money = {"type": "record", "name": "Money", "namespace": "fin", "fields": [
        {"name": "cur", "type": {"type": "enum", "name": "Cur", "symbols": ["EUR"]}}, {"name": "again", "type": "Cur"}]}
    fixed = {"type": "fixed", "name": "fin.Id", "size": 2}
    order = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "cur", "type": "fin.Cur"}, {"name": "money", "type": "fin.Money"},
        {"name": "ids", "type": {"type": "array", "items": "fin.Id"}}, {"name": "id", "type": ["null", "fin.Id"]}]}
    inlined = with_references_inlined([json.dumps(money), json.dumps(fixed), json.dumps(order)])
    types = [f["type"] for f in inlined["fields"]]
    assert types[0] == {"type": "enum", "name": "Cur", "namespace": "fin", "symbols": ["EUR"]}
    assert types[1]["fields"][0]["type"] == types[1]["fields"][1]["type"] == "fin.Cur"
    assert types[2]["items"] == {"type": "fixed", "name": "Id", "namespace": "fin", "size": 2}
    assert types[3] == ["null", "fin.Id"]
    connect = {f["field"]: f for f in connect_schema(inlined)["fields"]}
    assert connect["money"]["fields"][0] == {**connect["cur"], "field": "cur"}
    assert connect["id"] == {**connect["ids"]["items"], "optional": True, "field": "id"}


def test_a_schema_text_that_is_not_json_fails_the_record():
    """A registry answering a text that is not JSON for an Avro schema (or the latest version) fails the
    record with a DataError (errors.tolerance applies), not json's ValueError."""
    answers = {"/schemas/ids/1": {"schema": "{not json"},
               "/subjects/t-value/versions/latest": {"schema": "[" * 100_000, "id": 1}}
    record = {"type": "struct", "optional": False, "name": "R", "fields": [field("id", "int64")]}
    for strict in ("true", "false"):
        c = converter("http://127.0.0.1:9", **{"use.latest.version": "true", "auto.register.schemas": "false",
                                               "latest.compatibility.strict": strict})
        c.registry.call = lambda method, path, body=None: answers[path]
        with pytest.raises(DataError, match="schema 1 is not an Avro schema"):
            c.to_connect("t", b"\0\0\0\0\x01\x00")
        with pytest.raises(DataError, match="schema 1 is not an Avro schema"):
            c.from_connect("t", record, {"id": 1})


def test_an_avro_error_type_with_references_fails_the_record_as_without_them():
    """Avro's error (a record of protocols) a reference defines, or one using a referenced type: inlined as
    the named type it is, then refused by name as klog refuses it without references (a DataError, not a
    KeyError escaping the converter)."""
    from klog.connect.avro import connect_schema, with_references_inlined

    error = {"type": "error", "name": "E", "fields": [{"name": "r", "type": "R"}]}
    texts = [json.dumps({"type": "record", "name": "R", "fields": []}), json.dumps(error),
             json.dumps({"type": "record", "name": "O", "fields": [{"name": "e", "type": "E"}]})]
    inlined = with_references_inlined(texts)
    assert inlined["fields"][0]["type"]["fields"][0]["type"] == {"type": "record", "name": "R", "namespace": "",
                                                                 "fields": []}
    with pytest.raises(DataError, match="unknown Avro type 'error'"):
        connect_schema(inlined)

"""Confluent's JsonSchemaConverter (klog/connect/json_schema.py) against klog's registry, checked with an
independent implementation: confluent-kafka's JSONDeserializer reads (and validates against the registered
schema) what the converter writes, and the converter reads what confluent-kafka's JSONSerializer writes.
The JSON schemas are compared with what Confluent's JsonSchemaData registers for the same Connect schemas."""

from __future__ import annotations

import decimal
import json
import urllib.request

import pytest

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")
pytest.importorskip("jsonschema", reason="confluent-kafka's JSON serdes need jsonschema")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.errors import ConfigError, DataError  # noqa: E402
from klog.connect.json_schema import ONE_OF, connect_schema, json_schema  # noqa: E402
from tests.connect.test_connect_avro import AFTER, ENVELOPE, ctx, field  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"
TOPIC = "shop.public.orders"


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def converter(url: str, is_key: bool = False, **settings: str):  # noqa: ANN201
    return make_converter("key.converter" if is_key else "value.converter", JSON_SCHEMA,
                          {"schema.registry.url": url, **settings}, is_key)


def deserializer(url: str):  # noqa: ANN201 - confluent-kafka's JSONDeserializer over its own client
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer

    return JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": url}))


def test_connect_schemas_become_the_json_schemas_confluents_jsonschemadata_registers():
    """Per JsonSchemaData.fromConnectSchema: integer/number with connect.type, bytes a string with
    connect.type bytes, optional a oneOf with null, a field's position connect.index (on the oneOf when
    optional), names as title, versions as connect.version, parameters as connect.parameters, maps by
    their key type, structs open unless object.additional.properties=false."""
    row = ENVELOPE["fields"][1]
    out = json_schema({**row, "optional": False})
    assert out["type"] == "object" and out["title"] == "shop.public.orders.Value" and "additionalProperties" not in out
    props = out["properties"]
    assert props["id"] == {"type": "integer", "connect.type": "int32", "connect.index": 0}
    assert props["note"] == {"oneOf": [{"type": "null"}, {"type": "string"}], "connect.index": 1}
    assert props["total"] == {"oneOf": [{"type": "null"}, {
        "type": "string", "connect.type": "bytes", "title": "org.apache.kafka.connect.data.Decimal",
        "connect.version": 1, "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}}],
        "connect.index": 2}
    assert props["ratio"]["oneOf"][1] == {"type": "number", "connect.type": "float64"}
    assert props["counts"]["oneOf"][1] == {"type": "object", "additionalProperties": {"type": "integer",
                                                                                      "connect.type": "int64"},
                                           "connect.type": "map"}
    assert props["by_id"]["oneOf"][1] == {"type": "array", "connect.type": "map", "items": {
        "type": "object", "properties": {"key": {"type": "integer", "connect.type": "int32", "connect.index": 0},
                                         "value": {"oneOf": [{"type": "null"}, {"type": "string"}],
                                                   "connect.index": 1}}}}
    snapshot = json_schema(ENVELOPE)["properties"]["snapshot"]["oneOf"][1]
    assert snapshot == {"type": "string", "title": "io.debezium.data.Enum", "connect.version": 1,
                        "connect.parameters": {"allowed": "true,last,false,incremental"}, "default": "false"}
    assert json_schema({**row, "optional": False}, closed=True)["additionalProperties"] is False


def test_the_json_schema_gives_back_the_connect_schema():
    assert connect_schema(json_schema(ENVELOPE)) == ENVELOPE


def test_values_round_trip_and_confluent_kafkas_deserializer_reads_them(registry_url):
    c = converter(registry_url)
    value = {"before": None, "after": AFTER, "snapshot": "false", "op": "c"}
    data = c.from_connect(TOPIC, ENVELOPE, value)
    assert data[:5] == b"\x00\x00\x00\x00\x01"
    assert c.to_connect(TOPIC, data) == (ENVELOPE, value)
    decoded = deserializer(registry_url)(data, ctx(TOPIC))  # validated against the registered schema
    assert decoded["after"]["total"] == "BOI=" and decoded["after"]["blob"] == "AP8="  # base64, as Confluent
    assert decoded["after"]["by_id"] == [{"key": 5, "value": "five"}]
    assert decoded["op"] == "c" and decoded["before"] is None
    # a second converter (another task) registers nothing new
    assert converter(registry_url).from_connect(TOPIC, ENVELOPE, value) == data
    assert converter(registry_url).from_connect(TOPIC, None, None) is None  # a tombstone stays one


def test_confluent_kafkas_serializer_output_is_read_as_connect_data(registry_url):
    """A plain JSON schema (no connect.* annotations) as JsonSchemaData reads it: integer int64, number
    float64, a oneOf with null optional, title the name, the registry's version as the schema's version."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    schema = json.dumps({"title": "User", "type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
        "email": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name"]})
    client = SchemaRegistryClient({"url": registry_url})
    serialize = JSONSerializer(schema, client)
    data = serialize({"name": "ada", "age": 36, "score": 0.1, "email": None, "tags": ["x"]}, ctx("users"))
    got_schema, got = converter(registry_url).to_connect("users", data)
    assert got_schema == {"type": "struct", "fields": [
        {"type": "string", "optional": False, "field": "name"}, {"type": "int64", "optional": False, "field": "age"},
        {"type": "float64", "optional": False, "field": "score"},
        {"type": "string", "optional": True, "field": "email"},
        {"type": "array", "items": {"type": "string", "optional": False}, "optional": False, "field": "tags"}],
        "optional": False, "name": "User", "version": 1}
    assert got == {"name": "ada", "age": 36, "score": 0.1, "email": None, "tags": ["x"]}
    assert isinstance(got["score"], float)


def test_hand_written_schemas_read_as_jsonschemadata_reads_them():
    """A list of types is an anyOf: with null, the other type optional; a type with an enum an enum
    string; several types a union struct."""
    got = connect_schema({"type": "object", "title": "T", "properties": {
        "a": {"type": ["string", "null"]}, "b": {"type": "string", "enum": ["x", "y"]},
        "c": {"type": ["integer", "string"]}, "d": {"$ref": "#/definitions/D"}},
        "definitions": {"D": {"type": "boolean", "default": True}}})
    enum = {"io.confluent.connect.json.Enum": "", "io.confluent.connect.json.Enum.x": "x",
            "io.confluent.connect.json.Enum.y": "y"}
    assert got == {"type": "struct", "optional": False, "name": "T", "fields": [
        {"type": "string", "optional": True, "field": "a"},
        {"type": "string", "optional": False, "parameters": enum, "field": "b"},
        {"type": "struct", "optional": False, "name": ONE_OF, "field": "c", "fields": [
            {"type": "int64", "optional": True, "field": f"{ONE_OF}.field.0"},
            {"type": "string", "optional": True, "field": f"{ONE_OF}.field.1"}]},
        {"type": "boolean", "optional": False, "default": True, "field": "d"}]}
    with pytest.raises(DataError, match="recursive"):
        connect_schema({"type": "object", "properties": {"next": {"$ref": "#"}}})


def test_decimals_keep_their_digits_both_ways(registry_url):
    schema = {"type": "struct", "optional": False, "fields": [
        field("amount", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
              parameters={"scale": "9"})]}
    value = {"amount": decimal.Decimal("123456789012345678901234567890.123456789")}
    c = converter(registry_url)
    # no connect.version on the root: the version under its subject, as Confluent's converter gives it
    assert c.to_connect("money", c.from_connect("money", schema, value)) == ({**schema, "version": 1}, value)
    # a Java worker with decimal.format=NUMERIC writes the decimal as a JSON number: read with all its digits
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    numeric = {"type": "object", "properties": {"amount": {
        "type": "number", "connect.type": "bytes", "title": "org.apache.kafka.connect.data.Decimal",
        "connect.version": 1, "connect.parameters": {"scale": "9"}, "connect.index": 0}}}
    schema_id = SchemaRegistryClient({"url": registry_url}).register_schema("numeric-value",
                                                                            Schema(json.dumps(numeric), "JSON"))
    data = b"\x00" + schema_id.to_bytes(4, "big") + b'{"amount":123456789012345678901234567890.123456789}'
    assert c.to_connect("numeric", data)[1] == value


def test_decimal_format_numeric_writes_json_numbers_with_every_digit(registry_url):
    """decimal.format=NUMERIC: JsonSchemaData's NumberSchema (connect.type bytes) and the BigDecimal as
    Jackson writes it (toString, at the schema's scale); confluent-kafka's deserializer validates it."""
    schema = {"type": "struct", "optional": False, "fields": [
        field("amount", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1, parameters={"scale": "9"}),
        field("tiny", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1, parameters={"scale": "8"})]}
    value = {"amount": decimal.Decimal("123456789012345678901234567890.123456789"), "tiny": decimal.Decimal("1.2E-7")}
    c = converter(registry_url, **{"decimal.format": "NUMERIC"})
    data = c.from_connect("money", schema, value)
    assert data[5:] == b'{"amount":123456789012345678901234567890.123456789,"tiny":1.2E-7}'
    from confluent_kafka.schema_registry import SchemaRegistryClient

    latest = SchemaRegistryClient({"url": registry_url}).get_latest_version("money-value")
    registered = json.loads(latest.schema.schema_str)
    assert registered["properties"]["amount"]["type"] == "number"
    assert registered["properties"]["amount"]["connect.type"] == "bytes"
    assert c.to_connect("money", data) == ({**schema, "version": 1}, value)
    assert deserializer(registry_url)(data, ctx("money"))["tiny"] == pytest.approx(1.2e-7)
    # a value is written as given, as JsonSchemaData writes the BigDecimal (not rescaled: 1.5, 1.50)
    assert c.from_connect("money", schema, {**value, "amount": decimal.Decimal("1.50")})[5:].startswith(
        b'{"amount":1.50,')
    with pytest.raises(DataError, match="number"):
        c.from_connect("money", schema, {**value, "amount": decimal.Decimal("NaN")})


def test_floats_are_written_as_jackson_writes_them(registry_url):
    """Java's Double/Float.toString (klog.connect.java_numbers, JsonConverter's texts), not Python's repr:
    1.0E20, 1.0E-5, 1.2345678E7, a float32's 0.1 (as a double 0.10000000149011612) 0.1."""
    schema = {"type": "struct", "optional": False, "fields": [
        field("big", "float64"), field("small", "float64"), field("seven", "float64"), field("single", "float32"),
        {"field": "many", "type": "array", "optional": False, "items": {"type": "float64", "optional": False}}]}
    value = {"big": 1e20, "small": 1e-5, "seven": 12345678.0, "single": 0.10000000149011612, "many": [2.5, 1e300]}
    c = converter(registry_url)
    data = c.from_connect("floats", schema, value)
    assert data[5:] == b'{"big":1.0E20,"small":1.0E-5,"seven":1.2345678E7,"single":0.1,"many":[2.5,1.0E300]}'
    assert c.to_connect("floats", data)[1] == {**value, "single": 0.1}
    with pytest.raises(DataError, match="NaN"):
        c.from_connect("floats", schema, {**value, "big": float("nan")})


def test_keys_subject_name_strategies_lookup_and_latest(registry_url):
    key_schema = {"type": "struct", "optional": False, "name": "shop.Key", "fields": [field("id", "int32")]}
    key = converter(registry_url, is_key=True)
    data = key.from_connect(TOPIC, key_schema, {"id": 1})
    assert key.to_connect(TOPIC, data) == ({**key_schema, "version": 1}, {"id": 1})
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    assert client.get_subjects() == [f"{TOPIC}-key"]
    record = converter(registry_url, **{"value.subject.name.strategy": "RecordNameStrategy"})
    record.from_connect(TOPIC, key_schema, {"id": 2})
    assert "shop.Key" in client.get_subjects()
    with pytest.raises(DataError, match="title"):
        record.from_connect(TOPIC, {"type": "string", "optional": False}, "unnamed")
    # lookup only: a schema the subject does not have fails the record with the registry's reason
    lookup = converter(registry_url, **{"auto.register.schemas": "false"})
    with pytest.raises(DataError, match="40401"):
        lookup.from_connect("elsewhere", key_schema, {"id": 3})
    # use.latest.version writes with the subject's latest id
    # (latest.compatibility.strict, Confluent's default: the latest schema is the record's own, so it reads it)
    latest = converter(registry_url, is_key=True, **{"use.latest.version": "true", "auto.register.schemas": "false"})
    assert latest.from_connect(TOPIC, key_schema, {"id": 4})[1:5] == \
        (client.get_latest_version(f"{TOPIC}-key").schema_id).to_bytes(4, "big")
    # with auto.register.schemas (the default) on as well, the record's own schema is registered and written,
    # as Confluent's serializer registers first
    wider = {**key_schema, "fields": [*key_schema["fields"], field("note", "string", True)]}
    client.set_compatibility(f"{TOPIC}-key", "NONE")  # (an added property is no BACKWARD change of JSON schemas)
    registering = converter(registry_url, is_key=True, **{"use.latest.version": "true"})
    written = registering.from_connect(TOPIC, wider, {"id": 5, "note": "n"})
    with urllib.request.urlopen(f"{registry_url}/subjects/{TOPIC}-key/versions/latest") as answer:
        newest = json.loads(answer.read())  # (asked afresh: the client keeps the latest it saw)
    assert newest["version"] == 2 and "note" in newest["schema"]
    assert written[1:5] == newest["id"].to_bytes(4, "big")


def test_confluents_json_schema_converter_settings(registry_url):
    """Each of Confluent's settings does what it does there, or is refused naming why."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    short = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}, "note": {"type": "string"}},
             "required": ["name"]}
    schema_id = client.register_schema("people-value", Schema(json.dumps(short), "JSON"))
    connect = {"type": "struct", "optional": False, "fields": [field("name", "string"), field("note", "string")]}
    # latest.compatibility.strict (Confluent's default true): the latest schema must read what the record's
    # schema writes; a name of at most 3 characters does not read any string: the record fails, naming the setting
    checked = converter(registry_url, **{"use.latest.version": "true", "auto.register.schemas": "false"})
    with pytest.raises(DataError, match="Incompatible schema .*Set latest.compatibility.strict=false"):
        checked.from_connect("people", connect, {"name": "Ada", "note": "x"})
    unchecked = {"use.latest.version": "true", "auto.register.schemas": "false", "latest.compatibility.strict": "false"}
    # json.fail.invalid.schema: the payload validated against the schema written with (here the latest)
    loose = converter(registry_url, **unchecked)
    data = loose.from_connect("people", connect, {"name": "Adaline", "note": "x"})
    assert data[1:5] == schema_id.to_bytes(4, "big")
    strict = converter(registry_url, **unchecked, **{"json.fail.invalid.schema": "true"})
    with pytest.raises(DataError, match="json.fail.invalid.schema.*name.*too long"):
        strict.from_connect("people", connect, {"name": "Adaline", "note": "x"})
    assert strict.from_connect("people", connect, {"name": "Ada", "note": "x"})[5:] == b'{"name":"Ada","note":"x"}'
    # ... and when reading: the record above breaks its schema
    assert loose.to_connect("people", data)[1] == {"name": "Adaline", "note": "x"}
    with pytest.raises(DataError, match="too long"):
        strict.to_connect("people", data)
    # a number under a float multipleOf (jsonschema divides by it: a Decimal could not be)
    priced = {"type": "object", "properties": {"price": {"type": "number", "multipleOf": 0.01}}}
    client.register_schema("priced-value", Schema(json.dumps(priced), "JSON"))
    money = {"type": "struct", "optional": False, "fields": [field("price", "float64")]}
    assert strict.from_connect("priced", money, {"price": 12.5})[5:] == b'{"price":12.5}'
    # a schema (another registry's) with a $ref jsonschema cannot resolve: the record fails, nothing fetched
    remote = json.dumps({"type": "object", "properties": {"x": {"$ref": "http://127.0.0.1:9/x.json"}}})
    strict.registry.call = lambda method, path, body=None: {"schemaType": "JSON", "schema": remote}
    with pytest.raises(DataError, match="cannot validate"):
        strict._check(999, b'{"x": 1}')
    # use.optional.for.nonrequired: a property `required` does not name is an optional field
    fields = {f["field"]: f["optional"] for f in loose.to_connect("people", data)[0]["fields"]}
    assert fields == {"name": False, "note": False}
    optional = converter(registry_url, **unchecked, **{"use.optional.for.nonrequired": "true"})
    assert {f["field"]: f["optional"] for f in optional.to_connect("people", data)[0]["fields"]} == \
        {"name": False, "note": True}
    # settings for schemas derived from Java objects and for java.util.Date values: nothing to change here
    plain = converter(registry_url).from_connect("same", connect, {"name": "Ada", "note": "x"})
    assert converter(registry_url, **{"json.oneof.for.nullables": "false", "json.write.dates.iso8601": "true"}) \
        .from_connect("same", connect, {"name": "Ada", "note": "x"}) == plain


def test_a_schema_with_references_is_read_validated_and_written_with_as_the_latest(registry_url):
    """A JSON schema whose `$ref`s name its references' schemas (confluent-kafka's JSONSerializer with a
    Schema carrying references): its Connect schema reads through them, json.fail.invalid.schema checks the
    payload against them, and latest.compatibility.strict compares through them before use.latest.version
    writes with it. Before, the converter read the top schema only: `address.json` named nothing."""
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    client = SchemaRegistryClient({"url": registry_url})
    address = {"type": "object", "properties": {"zip": {"type": "string", "maxLength": 5}}, "required": ["zip"]}
    client.register_schema("address", Schema(json.dumps(address), "JSON"))
    customer = {"title": "Customer", "type": "object", "required": ["name", "address"],
                "properties": {"name": {"type": "string"}, "address": {"$ref": "address.json"}}}
    schema = Schema(json.dumps(customer), "JSON", [SchemaReference("address.json", "address", 1)])
    data = JSONSerializer(schema, client)({"name": "ada", "address": {"zip": "12345"}}, ctx("customers"))
    strict = converter(registry_url, **{"json.fail.invalid.schema": "true"})
    connect, value = strict.to_connect("customers", data)
    assert connect == {"type": "struct", "fields": [
        field("name", "string"),
        {"type": "struct", "fields": [field("zip", "string")], "optional": False, "field": "address"}],
        "optional": False, "name": "Customer", "version": 1}
    assert value == {"name": "ada", "address": {"zip": "12345"}}
    with pytest.raises(DataError, match="json.fail.invalid.schema.*address/zip.*too long"):
        strict.to_connect("customers", data[:5] + b'{"name": "ada", "address": {"zip": "123456"}}')
    use_latest = {"use.latest.version": "true", "auto.register.schemas": "false"}
    # the Connect schema's JSON schema has no maxLength: the latest (through its reference) reads less
    with pytest.raises(DataError, match="MAX_LENGTH_ADDED.*#/properties/address/properties/zip/maxLength"):
        converter(registry_url, **use_latest).from_connect("customers", connect, value)
    latest = converter(registry_url, **use_latest, **{"latest.compatibility.strict": "false"})
    assert latest.from_connect("customers", connect, value) == data[:5] + b'{"name":"ada","address":{"zip":"12345"}}'


def test_unions_round_trip_as_confluents_oneof_structs(registry_url):
    union = {"type": "struct", "optional": False, "name": ONE_OF, "fields": [
        {"type": "int64", "optional": True, "field": f"{ONE_OF}.field.0"},
        {"type": "string", "optional": True, "field": f"{ONE_OF}.field.1"}]}
    schema = {"type": "struct", "optional": False, "fields": [{**union, "field": "either"}]}
    assert json_schema(schema)["properties"]["either"] == {"oneOf": [
        {"type": "integer", "connect.type": "int64", "connect.index": 0}, {"type": "string", "connect.index": 1}],
        "connect.index": 0}
    c = converter(registry_url)
    value = {"either": {f"{ONE_OF}.field.0": None, f"{ONE_OF}.field.1": "text"}}
    data = c.from_connect("u", schema, value)
    assert data[5:] == b'{"either":"text"}'
    assert c.to_connect("u", data) == ({**schema, "version": 1}, {"either": {f"{ONE_OF}.field.1": "text"}})


def test_refusals_name_the_reason(registry_url):
    with pytest.raises(ConfigError, match="schema.registry.url"):
        make_converter("value.converter", JSON_SCHEMA, {}, False)
    with pytest.raises(ConfigError, match="decimal.format"):
        converter(registry_url, **{"decimal.format": "STRING"})
    c = converter(registry_url)
    with pytest.raises(DataError, match="schema"):
        c.from_connect("t", None, {"a": 1})
    with pytest.raises(DataError, match="Invalid type for INT32"):  # a value its schema does not allow
        c.from_connect("t", {"type": "struct", "optional": False, "fields": [field("n", "int32")]}, {"n": "7"})
    with pytest.raises(DataError, match="magic"):
        c.to_connect("t", b"{}")
    # an Avro schema's id is no JSON schema
    avro = make_converter("value.converter", "io.confluent.connect.avro.AvroConverter",
                          {"schema.registry.url": registry_url}, False)
    data = avro.from_connect("t", {"type": "string", "optional": False}, "x")
    with pytest.raises(DataError, match="not JSON"):
        c.to_connect("t", data)


def test_the_class_name_and_its_aliases_are_known():
    for name in (JSON_SCHEMA, "JsonSchemaConverter", "jsonschema"):
        assert type(make_converter("value.converter", name, {"schema.registry.url": "http://127.0.0.1:1"},
                                   False)).__name__ == "JsonSchemaConverter"

"""JsonConverter's bytes as Kafka's: the texts below are what Kafka's JsonConverter builds (its
JsonNodeFactory(true) nodes, written by a plain ObjectMapper, connect/json JsonConverter.java and
JsonSerializer.java) as Jackson 2.17.2 on JDK 17 printed them, or quoted from Kafka's
JsonConverterTest."""

import decimal

import pytest

from klog.connect import converters
from klog.connect.converters import JsonConverter
from klog.connect.errors import DataError

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def decimal_schema(scale: int) -> dict:
    return {"type": "bytes", "optional": False, "name": DECIMAL, "version": 1, "parameters": {"scale": str(scale)}}


def big_decimal(unscaled: int, scale: int) -> decimal.Decimal:
    """new BigDecimal(BigInteger.valueOf(unscaled), scale) as a Python Decimal."""
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return decimal.Decimal((int(unscaled < 0), digits, -scale))


# (unscaled, scale) -> Jackson's text for numberNode(new BigDecimal(unscaled, scale)): BigDecimal.toString,
# scientific where the scale is negative or the adjusted exponent below -6 (Jackson 2.17.2, JDK 17)
JACKSON_DECIMALS = [
    (123, 0, "123"), (-123, 0, "-123"), (123, -1, "1.23E+3"), (123, -3, "1.23E+5"), (123, 1, "12.3"),
    (123, 5, "0.00123"), (123, 10, "1.23E-8"), (-123, 12, "-1.23E-10"), (0, 2, "0.00"), (0, -3, "0E+3"),
    (0, 10, "0E-10"), (0, 0, "0"), (15600, 4, "1.5600"), (10, 8, "1.0E-7"), (1, -3, "1E+3"), (1, 7, "1E-7"),
    (1, 6, "0.000001"), (123456789012345678901234567890123456789, 9, "123456789012345678901234567890.123456789"),
    (-5, -20, "-5E+20"), (0, 7, "0E-7"), (0, 6, "0.000000"),
]


@pytest.mark.parametrize(("unscaled", "scale", "text"), JACKSON_DECIMALS)
def test_a_numeric_decimal_is_written_as_jackson_writes_a_big_decimal(unscaled: int, scale: int, text: str) -> None:
    """decimal.format=numeric: Kafka's JSON_NODE_FACTORY.numberNode(decimal), BigDecimal.toString's text.
    klog printed the float nearest it (1.56 for 1.5600, 1000.0 for 1E+3, 1.2345678901234568e+38)."""
    value = big_decimal(unscaled, scale)
    schemaless = JsonConverter({"decimal.format": "numeric", "schemas.enable": "false"}, is_key=False)
    assert schemaless.from_connect("t", decimal_schema(scale), value) == text.encode()
    enveloped = JsonConverter({"decimal.format": "numeric"}, is_key=False)
    data = enveloped.from_connect("t", decimal_schema(scale), value)
    assert data == (b'{"schema":{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal",'
                    b'"version":1,"parameters":{"scale":"' + str(scale).encode() + b'"}},"payload":'
                    + text.encode() + b"}")
    # and read back as the BigDecimal Jackson reads from that text: the same digits and scale
    read = enveloped.to_connect("t", data)[1]
    assert read == value and read.as_tuple() == value.as_tuple()


def test_numeric_decimals_in_a_struct_and_a_negative_zero() -> None:
    schema = {"type": "struct", "fields": [{**decimal_schema(2), "field": "price"},
                                           {"type": "array", "items": {**decimal_schema(0), "optional": True},
                                            "field": "counts"},
                                           {"type": "float64", "optional": False, "field": "rate"}]}
    converter = JsonConverter({"decimal.format": "numeric", "schemas.enable": "false"}, is_key=False)
    value = {"price": decimal.Decimal("-0.00"), "counts": [decimal.Decimal("1E+3"), None], "rate": 0.5}
    # a BigDecimal has no negative zero: Kafka's -0.00 is 0.00
    assert converter.from_connect("t", schema, value) == b'{"price":0.00,"counts":[1E+3,null],"rate":0.5}'


@pytest.mark.parametrize(("payload", "expected"), [
    # Kafka's JsonConverterTest: numericDecimalToConnect, numericDecimalWithTrailingZerosToConnect,
    # highPrecisionNumericDecimalToConnect ("this number is too big to be kept in a float64!")
    ("1.56", big_decimal(156, 2)), ("1.5600", big_decimal(15600, 4)),
    ("1.23456789123456789", decimal.Decimal("1.23456789123456789")),
    # Jackson's decimalValue() of each: 1E+3 scale -3, 1.0E-7 unscaled 10 scale 8, 0E+3, -0.0 as 0.0 (scale 1),
    # 156 an IntNode (scale 0)
    ("1E+3", big_decimal(1, -3)), ("1.0E-7", big_decimal(10, 8)), ("0E+3", big_decimal(0, -3)),
    ("-0.0", big_decimal(0, 1)), ("156", big_decimal(156, 0)), ("1.23E-8", big_decimal(123, 10)),
])
def test_a_numeric_decimal_is_read_as_jackson_reads_it(payload: str, expected: decimal.Decimal) -> None:
    """Kafka's toConnectData: USE_BIG_DECIMAL_FOR_FLOATS, then decimalValue(). klog read a float and made a
    Decimal of its repr: 1.56 for 1.5600, 1000.0 for 1E+3, 1.2345678912345679 for the high-precision one."""
    converter = JsonConverter({}, is_key=False)
    schema_text = ('{"type":"struct","fields":[{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.'
                   'data.Decimal","version":1,"parameters":{"scale":"2"},"field":"n"},'
                   '{"type":"double","optional":false,"field":"d"}],"optional":false}')
    for envelope in (f'{{"schema":{schema_text},"payload":{{"n":{payload},"d":1.5}}}}',
                     f'{{ "schema": {schema_text}, "payload": {{ "n": {payload}, "d": 1.5 }} }}'):  # the slow path
        value = converter.to_connect("t", envelope.encode())[1]
        assert value["n"].as_tuple() == expected.as_tuple()
        assert type(value["d"]) is float and value["d"] == 1.5  # a float part stays a float


def envelope_schema(schema: dict) -> bytes:
    """The envelope's schema JsonConverter writes (a null value under a required schema is refused, as
    Kafka's convertToJson refuses it: the schema's JSON is asked for itself)."""
    return converters._schema_json(schema, numeric=False)


@pytest.mark.parametrize(("schema", "kafka"), [
    # JsonConverterTest floatToJson / doubleToJson: { "type": "float", "optional": false }, "double"
    ({"type": "float32"}, b'{"type":"float","optional":false}'),
    ({"type": "float64", "optional": True}, b'{"type":"double","optional":true}'),
    # arrayToJson: { "type": "array", "items": { "type": "int32", "optional": false }, "optional": false }
    ({"type": "array", "optional": False, "items": {"type": "int32"}},
     b'{"type":"array","items":{"type":"int32","optional":false},"optional":false}'),
    # mapToJsonNonStringKeys: keys, then values, then optional
    ({"optional": False, "values": {"type": "int32"}, "keys": {"type": "int32"}, "type": "map"},
     b'{"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32","optional":false},'
     b'"optional":false}'),
    # testJsonSchemaMetadataTranslation: { "type": "boolean", "optional": false, "name": "bool", "version": 3,
    # "doc": "the documentation", "parameters": { "foo": "bar" }}, a default after them (asJsonSchema)
    ({"default": True, "parameters": {"foo": "bar"}, "doc": "the documentation", "version": 3, "name": "bool",
      "optional": False, "type": "boolean"},
     b'{"type":"boolean","optional":false,"name":"bool","version":3,"doc":"the documentation",'
     b'"parameters":{"foo":"bar"},"default":true}'),
    # a struct's fields after its type, each field's name last (asJsonSchema puts "field" on a copy)
    ({"type": "struct", "optional": False, "name": "row", "fields": [
        {"field": "id", "type": "int64", "optional": False}, {"field": "x", "default": 1e20, "type": "float64"}]},
     b'{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"},'
     b'{"type":"double","optional":false,"default":1.0E20,"field":"x"}],"optional":false,"name":"row"}'),
])
def test_a_schema_is_laid_out_as_kafka_lays_it_out(schema: dict, kafka: bytes) -> None:
    """Kafka's JsonConverter.asJsonSchema builds each schema's node in one order whatever the Schema
    (type; fields / items / keys, values; optional; name; version; doc; parameters; default) and names
    FLOAT32 and FLOAT64 "float" and "double" (JsonSchema.FLOAT_TYPE_NAME, DOUBLE_TYPE_NAME); klog wrote
    its schema dict as it was built, "float64" and all, and left out an unsaid "optional"."""
    assert envelope_schema(schema) == kafka


def test_kafkas_float_and_double_are_read_as_float32_and_float64() -> None:
    converter = JsonConverter({}, is_key=False)
    data = b'{"schema":{"type":"struct","fields":[{"type":"double","optional":false,"field":"d"},' \
           b'{"type":"array","items":{"type":"float","optional":false},"optional":false,"field":"a"}],' \
           b'"optional":false},"payload":{"d":1.0E20,"a":[0.1]}}'
    for envelope in (data, data.replace(b',"payload"', b', "payload"')):  # the slow path too
        schema, value = converter.to_connect("t", envelope)
        assert [f["type"] for f in schema["fields"]] == ["float64", "array"]
        assert schema["fields"][1]["items"]["type"] == "float32"
        assert value == {"d": 1e20, "a": [0.1]}
        assert converter.from_connect("t", schema, value) == data  # and written back as Kafka wrote it
    # klog's own older envelopes ("float64") still read
    assert converter.to_connect("t", b'{"schema":{"type":"float64"},"payload":1.5}') == ({"type": "float64"}, 1.5)


def test_control_characters_are_escaped_as_jackson_escapes_them() -> None:
    """Jackson writes a control character without a short escape as \\u00XX in upper case; Python's encoder
    in lower case. Jackson 2.17.2 wrote the string below as "a\\u0001\\u001F\\u000B\\n\\t\\b\\f\\r\\"\\\\/\x7f\u2028é"
    (DEL and U+2028 as they are). An escaped backslash followed by "u001f" is text, left alone."""
    converter = JsonConverter({"schemas.enable": "false"}, is_key=False)
    text = "a\u0001\u001f\u000b\n\t\b\f\r\"\\/\x7f\u2028é"
    assert converter.from_connect("t", {"type": "string"}, text) == \
        '"a\\u0001\\u001F\\u000B\\n\\t\\b\\f\\r\\"\\\\/\x7f\u2028é"'.encode()
    assert converter.from_connect("t", {"type": "string"}, "\\u001f \\\x1f") == b'"\\\\u001f \\\\\\u001F"'
    assert converter.from_connect("t", None, {"k\x1e": ["\x0e"]}) == b'{"k\\u001E":["\\u000E"]}'
    assert converter.to_connect("t", b'"\\u001F\\u000b"') == (None, "\x1f\x0b")


INT_MAP = {"type": "map", "keys": {"type": "int32", "optional": False}, "values": {"type": "int32", "optional": False},
           "optional": False}


def test_a_map_whose_keys_are_not_strings_is_an_array_of_pairs() -> None:
    """Kafka's JsonConverterTest mapToJsonNonStringKeys: the payload is an array of [key, value] arrays
    ([1, 12], [2, 15]); klog wrote an object with the keys as strings ({"1":12,"2":15})."""
    converter = JsonConverter({}, is_key=False)
    data = converter.from_connect("t", INT_MAP, {1: 12, 2: 15})
    assert data == (b'{"schema":{"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32",'
                    b'"optional":false},"optional":false},"payload":[[1,12],[2,15]]}')
    assert converter.to_connect("t", data) == (INT_MAP, {1: 12, 2: 15})
    # the keys and values converted as their schemas say, nested in a struct
    schema = {"type": "struct", "fields": [{"type": "map", "keys": {"type": "float64"},
                                            "values": {"type": "bytes", "optional": True}, "field": "m"}]}
    schemaless = JsonConverter({"schemas.enable": "false"}, is_key=False)
    assert schemaless.from_connect("t", schema, {"m": {1e20: b"\x00", 0.5: None}}) == \
        b'{"m":[[1.0E20,"AA=="],[0.5,null]]}'


def test_kafkas_array_of_pairs_is_read_as_a_map() -> None:
    """JsonConverterTest mapToConnectNonStringKeys, its bytes as given (spaces: the slow path), and as
    Kafka writes them (the fast one); an object, as klog wrote such a map before, still reads."""
    converter = JsonConverter({}, is_key=False)
    spaced = (b'{ "schema": { "type": "map", "keys": { "type" : "int32" }, "values": { "type" : "int32" } }, '
              b'"payload": [ [1, 12], [2, 15] ] }')
    compact = b'{"schema":{"type":"map","keys":{"type":"int32"},"values":{"type":"bytes"}},"payload":[[1,"AA=="]]}'
    assert converter.to_connect("t", spaced)[1] == {1: 12, 2: 15}
    assert converter.to_connect("t", compact)[1] == {1: b"\x00"}
    old = b'{"schema":{"type":"map","keys":{"type":"int32"},"values":{"type":"int32"}},"payload":{"1":12}}'
    assert converter.to_connect("t", old)[1] == {"1": 12}


STRING_WITH_DEFAULT = {"type": "string", "optional": True, "default": "default"}


@pytest.mark.parametrize(("replace", "payload"), [("true", b'"default"'), ("false", b"null")])
def test_a_null_with_a_default_is_written_as_kafka_writes_it(replace: str, payload: bytes) -> None:
    """Kafka's JsonConverterTest serializeNullToDefault / serializeNullToNull and serializeFieldNullToDefault /
    serializeFieldNullToNull: replace.null.with.default (true unless set) writes a null's default; klog
    wrote null whatever the setting."""
    converter = JsonConverter({"replace.null.with.default": replace}, is_key=False)
    assert converter.from_connect("t", STRING_WITH_DEFAULT, None) == (
        b'{"schema":{"type":"string","optional":true,"default":"default"},"payload":' + payload + b"}")
    struct = {"type": "struct", "fields": [{**STRING_WITH_DEFAULT, "field": "field1"}]}
    assert converter.from_connect("t", struct, {"field1": None}) == (
        b'{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"default":"default",'
        b'"field":"field1"}],"optional":false},"payload":{"field1":' + payload + b"}}")


@pytest.mark.parametrize(("replace", "value"), [("true", "default"), ("false", None)])
def test_a_null_with_a_default_is_read_as_kafka_reads_it(replace: str, value: object) -> None:
    """JsonConverterTest deserializeNullToDefault / deserializeNullToNull, deserializeFieldNullToDefault /
    deserializeFieldNullToNull, their bytes as given."""
    converter = JsonConverter({"replace.null.with.default": replace}, is_key=False)
    data = b'{"schema":{"type":"string","optional":true,"default":"default"},"payload":null}'
    assert converter.to_connect("t", data)[1] == value
    data = (b'{"schema":{"type":"struct","fields":[{"field":"field1","type":"string","optional":true,'
            b'"default":"default"}],"optional":false},"payload":{"field1":null}}')
    assert converter.to_connect("t", data)[1] == {"field1": value}
    assert converter.to_connect("t", data.replace(b',"payload"', b', "payload"'))[1] == {"field1": value}


def test_defaults_are_written_as_their_values_are() -> None:
    """Kafka writes a default as convertToJson(schema, defaultValue), in the schema and for a null: a float's
    as Java prints it, bytes in base64, and under decimal.format=numeric a decimal's as a number (klog's
    schemas hold a decimal's default in base64, as the base64 format writes it)."""
    scale2 = {**decimal_schema(2), "optional": True, "default": "AJw="}  # 1.56 (JsonConverterTest's "AJw=")
    schema = {"type": "struct", "fields": [{**scale2, "field": "n"},
                                           {"type": "float64", "optional": True, "default": 1e20, "field": "d"},
                                           {"type": "array", "optional": True, "field": "a",
                                            "items": {"type": "float32", "optional": True, "default": 0.5}}]}
    value = {"n": None, "d": None, "a": [None, 1.0]}
    numeric = JsonConverter({"decimal.format": "numeric"}, is_key=False).from_connect("t", schema, value)
    assert b'"parameters":{"scale":"2"},"default":1.56,"field":"n"}' in numeric
    assert numeric.endswith(b'"payload":{"n":1.56,"d":1.0E20,"a":[0.5,1.0]}}')
    base64 = JsonConverter({}, is_key=False).from_connect("t", schema, value)
    assert b'"parameters":{"scale":"2"},"default":"AJw=","field":"n"}' in base64
    assert base64.endswith(b'"payload":{"n":"AJw=","d":1.0E20,"a":[0.5,1.0]}}')
    # and read back: a null field's default as its value
    read = JsonConverter({"decimal.format": "numeric"}, is_key=False).to_connect("t", numeric.replace(
        b'"payload":{"n":1.56', b'"payload":{"n":null'))[1]
    assert read["n"] == decimal.Decimal("1.56") and read["d"] == 1e20


def test_a_numeric_decimal_default_is_read_with_its_scale() -> None:
    converter = JsonConverter({"decimal.format": "numeric"}, is_key=False)
    data = (b'{"schema":{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,'
            b'"parameters":{"scale":"4"},"default":1.5600},"payload":null}')
    for envelope in (data, data.replace(b',"payload"', b', "payload"')):
        schema, value = converter.to_connect("t", envelope)
        assert value.as_tuple() == big_decimal(15600, 4).as_tuple()
        # written back with the same text (a null as its default: replace.null.with.default)
        assert converter.from_connect("t", schema, None) == data.replace(b'"payload":null', b'"payload":1.5600')


@pytest.mark.parametrize(("schema", "value", "kafka"), [
    # JsonConverterTest dateToJson, timeToJson, timestampToJson: klog holds these logical types as Kafka
    # writes them (days, milliseconds of the day, milliseconds since the epoch), so they pass as they are
    ({"type": "int32", "optional": False, "name": "org.apache.kafka.connect.data.Date", "version": 1}, 10000,
     b'{"schema":{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Date","version":1},'
     b'"payload":10000}'),
    ({"type": "int32", "optional": False, "name": "org.apache.kafka.connect.data.Time", "version": 1}, 14400000,
     b'{"schema":{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Time","version":1},'
     b'"payload":14400000}'),
    ({"type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
     4000000000, b'{"schema":{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp",'
                 b'"version":1},"payload":4000000000}'),
    # bytes as Jackson's binaryNode writes them (MIME_NO_LINEFEEDS: standard alphabet, padded): "AJwB"
    ({"type": "bytes", "optional": False}, b"\x00\x9c\x01",
     b'{"schema":{"type":"bytes","optional":false},"payload":"AJwB"}'),
])
def test_logical_times_and_bytes_as_kafka_writes_them(schema: dict, value: object, kafka: bytes) -> None:
    converter = JsonConverter({}, is_key=False)
    assert converter.from_connect("t", schema, value) == kafka
    assert converter.to_connect("t", kafka) == (schema, value)


STRUCT = {"type": "struct", "optional": False, "fields": [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "string", "optional": True, "default": "n/a", "field": "note"},
    {"type": "struct", "optional": True, "field": "inner",
     "fields": [{"type": "int64", "optional": False, "field": "a"},
                {"type": "int64", "optional": True, "field": "b"}]}]}


@pytest.mark.parametrize(("replace", "value", "payload"), [
    # every schema field in schema order: a missing optional one null (or its default), an extra key left out
    ("true", {"inner": {"b": 2, "a": 1, "x": 0}, "id": 7, "extra": "dropped"},
     b'{"id":7,"name":null,"note":"n/a","inner":{"a":1,"b":2}}'),
    ("false", {"inner": {"b": 2, "a": 1, "x": 0}, "id": 7, "extra": "dropped"},
     b'{"id":7,"name":null,"note":null,"inner":{"a":1,"b":2}}'),
    ("true", {"id": 7, "name": "x", "note": None, "inner": None},
     b'{"id":7,"name":"x","note":"n/a","inner":null}'),
])
def test_a_struct_is_written_with_its_schemas_fields_in_order(replace: str, value: dict, payload: bytes) -> None:
    """Kafka's convertToJson of a Struct: each schema field in the schema's order, convertToJson(field
    schema, its value) (klog wrote the dict as given: its keys, its order, extra ones too)."""
    converter = JsonConverter({"schemas.enable": "false", "replace.null.with.default": replace}, is_key=False)
    assert converter.from_connect("t", STRUCT, value) == payload


@pytest.mark.parametrize("value", [{"name": "no id"}, {"id": None}, {"id": 1, "inner": {"b": 2}}])
def test_a_required_field_without_a_value_fails_as_kafkas(value: dict) -> None:
    """A required field with no value and no default: Kafka's DataException (klog wrote it out or left
    it out)."""
    converter = JsonConverter({}, is_key=False)
    with pytest.raises(DataError, match="^Conversion error: null value for field that is required and has no "
                                        "default value$"):
        converter.from_connect("t", STRUCT, value)


def test_a_required_field_with_a_default_is_its_default_unless_replace_null_is_off() -> None:
    """Kafka: a null required field with a default is written as the default under replace.null.with.default
    (true unless set); with it false the null is refused, the field not being optional."""
    schema = {"type": "struct", "optional": False,
              "fields": [{"type": "int32", "optional": False, "default": 5, "field": "n"}]}
    assert JsonConverter({"schemas.enable": "false"}, is_key=False).from_connect("t", schema, {}) == b'{"n":5}'
    off = JsonConverter({"schemas.enable": "false", "replace.null.with.default": "false"}, is_key=False)
    with pytest.raises(DataError, match="^Conversion error"):
        off.from_connect("t", schema, {"n": None})

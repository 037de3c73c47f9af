"""JsonConverter's compiled struct walk, one loop for both directions: writing refuses a struct value
that is not a map (a DataError: the record goes to the dead letter queue), reading passes a payload of
the wrong shape through as it is."""

import pytest

from klog.connect.converters import JsonConverter
from klog.connect.errors import DataError

SCHEMA = {"type": "struct", "fields": [{"field": "id", "type": "int32"}, {"field": "blob", "type": "bytes"}]}


def test_writing_a_struct_that_is_not_a_map_is_a_data_error() -> None:
    conv = JsonConverter({}, is_key=False)
    assert conv.from_connect("t", SCHEMA, {"id": 1, "blob": b"\x00"}).endswith(b'"payload":{"id":1,"blob":"AA=="}}')
    with pytest.raises(DataError, match="a struct value must be a map, not str"):
        conv.from_connect("t", SCHEMA, "not a struct")


def test_reading_a_payload_that_is_not_a_map_passes_it_through() -> None:
    conv = JsonConverter({}, is_key=False)
    row = {"id": 1, "blob": b"\x00"}
    assert conv.to_connect("t", conv.from_connect("t", SCHEMA, row))[1] == row
    envelope = b'{"schema":' + conv.from_connect("t", SCHEMA, row).split(b',"payload"')[0][10:] + b',"payload":"odd"}'
    assert conv.to_connect("t", envelope)[1] == "odd"
    arrays = {"type": "array", "items": {"type": "bytes"}}
    odd = b'{"schema":{"type":"array","items":{"type":"bytes"}},"payload":{"a":1}}'
    assert conv.to_connect("t", odd) == (arrays, {"a": 1})


@pytest.mark.parametrize(("data", "expected"), [
    (b'{"schema":{"type":"int32"},"payload":5}', 5),
    (b'{"schema":{"type":"int32"},"payload": 5 }', 5),  # whitespace: the plain parse decides
    (b'{"schema":{"type":"string"},"payload":"caf\xc3\xa9 \\u00e9"}', "caf\u00e9 \u00e9"),
    (b'{"schema":{"type":"struct","fields":[{"type":"string","field":"a"}]},"payload":{"a":"x"}}', {"a": "x"}),
    (b'{"schema":{"type":"int32","optional":true},"payload":null}', None),  # (required: a DataError)
])
def test_envelopes_read_as_json_reads_them(data: bytes, expected: object) -> None:
    assert JsonConverter({}, False).to_connect("t", data)[1] == expected


@pytest.mark.parametrize("data", [b'{"schema":{"type":"int32"},"payload":1 2}',
                                  b'{"schema":{"type":"int32"},"payload":[1}',
                                  b'{"schema":{"type":"int32"},"payload":\xff}'])
def test_a_broken_payload_is_a_data_error(data: bytes) -> None:
    with pytest.raises(DataError):
        JsonConverter({}, False).to_connect("t", data)


@pytest.mark.parametrize("text", ["1234567890123456789012345678901234567890.123456789",
                                  "-98765432109876543210987654321098765.000000001", "0.000000000"])
def test_a_decimal_of_more_than_28_digits_keeps_every_digit(text: str) -> None:
    """Connect's Decimal is an unscaled integer of any length (PostgreSQL's numeric has up to 1,000 digits):
    Python's decimal context rounded it to 28 significant digits both ways."""
    import decimal

    schema = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
              "parameters": {"scale": "9"}}
    conv = JsonConverter({}, is_key=False)
    data = conv.from_connect("t", schema, decimal.Decimal(text))
    value = conv.to_connect("t", data)[1]
    assert value == decimal.Decimal(text) and value.as_tuple().exponent == -9


def test_nan_and_infinities_are_written_as_jackson_writes_them() -> None:
    """Bare NaN/Infinity are no JSON (kafkajs's JSON.parse, jq and Jackson itself refuse them): quoted, as
    Jackson writes them under Kafka's JsonConverter; a string that only contains the words is left alone."""
    import json

    schema = {"type": "struct", "fields": [{"field": "a", "type": "float64"}, {"field": "b", "type": "array",
                                                                               "items": {"type": "float32"}},
                                           {"field": "s", "type": "string"}]}
    conv = JsonConverter({"schemas.enable": "false"}, is_key=False)
    data = conv.from_connect("t", schema, {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "s": "NaN"})
    assert json.loads(data) == {"a": "NaN", "b": ["Infinity", "-Infinity", 1.5], "s": "NaN"}


def test_a_decimal_past_64_kib_fails_its_record_at_once():
    """Python makes a Decimal of a big int in quadratic time (400 KiB: ~17 s): a record's Decimal bytes are
    bounded (PostgreSQL's widest numeric takes 61 KiB) for every converter that reads one."""
    import base64
    import json

    from klog.connect.converters import DECIMAL_BYTES_MAX, decimal_from_bytes

    assert decimal_from_bytes(b"\x01" * DECIMAL_BYTES_MAX, 0) > 0
    with pytest.raises(DataError, match="at most 65536"):
        decimal_from_bytes(b"\x01" * (DECIMAL_BYTES_MAX + 1), 2)
    schema = {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
              "parameters": {"scale": "2"}}
    data = json.dumps({"schema": schema, "payload": base64.b64encode(b"\x01" * 70_000).decode()}).encode()
    with pytest.raises(DataError, match="at most"):
        JsonConverter({}, False).to_connect("t", data)

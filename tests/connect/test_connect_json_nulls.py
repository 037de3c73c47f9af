"""JsonConverter's nulls under a required schema as Kafka 3.9's: convertToJson refuses a null top-level
value, array element, map key or map value whose schema is not optional ("Conversion error: null value for
field that is required and has no default value") unless its default replaces it
(replace.null.with.default); convertToConnect refuses a JSON null (or a missing struct field) there
("Invalid null value for required INT32 field"). klog wrote and read them as nulls. The refusal is a
converter failure: the record takes the errant-record path (errors.tolerance, errors.log.enable, DLQ)."""

from __future__ import annotations

import json

import pytest

from klog.connect.api import SourceConnector, SourceTask
from klog.connect.converters import NULL_REQUIRED, JsonConverter
from klog.connect.data import ConnectRecord
from klog.connect.errors import DataError
from tests.connect.helpers import running, values, wait_for

INT = {"type": "int32", "optional": False}
OPTIONAL_INT = {"type": "int32", "optional": True}
INT_WITH_DEFAULT = {"type": "int32", "optional": False, "default": 7}


def _array(items: dict) -> dict:
    return {"type": "array", "items": items, "optional": False}


def _map(keys: dict, values_: dict) -> dict:
    return {"type": "map", "keys": keys, "values": values_, "optional": False}


STRING = {"type": "string", "optional": False}


@pytest.mark.parametrize(("schema", "value"), [
    (INT, None),  # a top-level null
    (_array(INT), [1, None]),
    (_map(STRING, INT), {"a": None}),
    (_map(INT, INT), {1: None}),  # a map of pairs
    (_map(INT, OPTIONAL_INT), {None: 1}),  # its key
    (_map(STRING, OPTIONAL_INT), {None: 1}),
    ({"type": "struct", "optional": False, "fields": [{**_array(INT), "field": "a"}]}, {"a": [None]}),
])
@pytest.mark.parametrize("schemas_enable", ["true", "false"])
def test_a_null_under_a_required_schema_is_not_written(schema, value, schemas_enable):
    converter = JsonConverter({"schemas.enable": schemas_enable}, is_key=False)
    with pytest.raises(DataError, match=NULL_REQUIRED):
        converter.from_connect("t", schema, value)


@pytest.mark.parametrize(("schema", "value", "payload"), [
    (OPTIONAL_INT, None, b"null"),  # with schemas.enable: an envelope whose payload is null
    (INT_WITH_DEFAULT, None, b"7"),  # replace.null.with.default
    (_array(OPTIONAL_INT), [1, None], b"[1,null]"),
    (_array(INT_WITH_DEFAULT), [1, None], b"[1,7]"),
    (_map(STRING, OPTIONAL_INT), {"a": None}, b'{"a":null}'),
    (_map(INT, INT_WITH_DEFAULT), {1: None}, b"[[1,7]]"),
])
def test_a_null_kafka_takes_is_written(schema, value, payload):
    data = JsonConverter({}, is_key=False).from_connect("t", schema, value)
    assert data.endswith(b',"payload":' + payload + b"}")


def test_without_replace_null_with_default_a_default_does_not_save_a_required_null():
    converter = JsonConverter({"replace.null.with.default": "false"}, is_key=False)
    with pytest.raises(DataError, match=NULL_REQUIRED):
        converter.from_connect("t", INT_WITH_DEFAULT, None)
    with pytest.raises(DataError, match=NULL_REQUIRED):
        converter.from_connect("t", _array(INT_WITH_DEFAULT), [None])


def _envelope(schema: dict, payload: str) -> bytes:
    return b'{"schema":' + json.dumps(schema, separators=(",", ":")).encode() + b',"payload":' + payload.encode() + b"}"


@pytest.mark.parametrize(("schema", "payload", "kafka_type"), [
    (INT, "null", "INT32"),
    ({"type": "struct", "optional": False, "fields": [{**STRING, "field": "s"}]}, "{}", "STRING"),  # missing
    ({"type": "struct", "optional": False, "fields": [{**STRING, "field": "s"}]}, '{"s":null}', "STRING"),
    (_array(INT), "[1,null]", "INT32"),
    (_map(STRING, {"type": "float64", "optional": False}), '{"a":null}', "FLOAT64"),
    (_map(INT, STRING), '[[1,null]]', "STRING"),
    (_map(INT, STRING), '[[null,"x"]]', "INT32"),
    ({"type": "int32"}, "null", "INT32"),  # an unsaid "optional" is false (Kafka's asConnectSchema)
])
def test_a_json_null_under_a_required_schema_is_not_read(schema, payload, kafka_type):
    data = _envelope(schema, payload)
    for envelope in (data, data.replace(b',"payload"', b', "payload"')):  # the fast path and the plain parse
        with pytest.raises(DataError, match=f"Invalid null value for required {kafka_type} field"):
            JsonConverter({}, is_key=False).to_connect("t", envelope)


@pytest.mark.parametrize(("schema", "payload", "value"), [
    (OPTIONAL_INT, "null", None),
    (INT_WITH_DEFAULT, "null", 7),
    (_array(INT_WITH_DEFAULT), "[null]", [7]),
    ({"type": "struct", "optional": False, "fields": [{**OPTIONAL_INT, "field": "i"}]}, '{"i":null}', {"i": None}),
])
def test_a_json_null_kafka_takes_is_read(schema, payload, value):
    assert JsonConverter({}, is_key=False).to_connect("t", _envelope(schema, payload))[1] == value


POLLED: list[ConnectRecord] = []


class ListSourceTask(SourceTask):
    def poll(self) -> list[ConnectRecord]:
        out, POLLED[:] = list(POLLED), []
        return out


class ListSource(SourceConnector):
    task_class = ListSourceTask


def test_a_refused_null_takes_the_errant_record_path(data_dir):
    """errors.tolerance=all: the record whose required value is null is logged (VALUE_CONVERTER, Kafka's
    JsonConverter) and skipped; the others are written. klog wrote its null payload."""
    POLLED[:] = [ConnectRecord("out", None, None, None, STRING, v, source_partition={"p": 0},
                               source_offset={"o": i}) for i, v in enumerate(["a", None, "c"])]
    warnings: list[str] = []
    config = {"name": "nulls", "connector.class": f"{__name__}.ListSource", "value.converter": "json",
              "value.converter.schemas.enable": "false", "errors.tolerance": "all", "errors.log.enable": "true"}
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: len(values(data_dir, "out")) >= 2 and not POLLED, what="the two records it takes")
    assert values(data_dir, "out") == [b'"a"', b'"c"']
    [logged] = [w for w in warnings if "VALUE_CONVERTER" in w]
    assert "org.apache.kafka.connect.json.JsonConverter" in logged and NULL_REQUIRED in logged

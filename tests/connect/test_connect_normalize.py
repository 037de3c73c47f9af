"""Confluent's registry converters' `normalize.schemas` (klog/connect/avro.py, json_schema.py, protobuf.py)
against a running klog registry: as Confluent's serializers, the registration and the lookup by schema send
`?normalize=true`, so the registry stores the normalized text and two spellings of a schema are one id. And
the worker's `producer.acks=-1`, Kafka's spelling of all."""

from __future__ import annotations

import json
import struct
import urllib.request

import pytest

pytest.importorskip("fastavro", reason="the AvroConverter needs fastavro (pip install 'klog[connect]')")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.errors import ConfigError  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

AVRO = "io.confluent.connect.avro.AvroConverter"
JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
# a decimal of scale 0 and properties out of name order: normalization changes AvroData's text
ROW = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "bytes", "optional": False, "name": DECIMAL, "version": 1,
     "parameters": {"scale": "0", "connect.decimal.precision": "10"}, "field": "total"}]}


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def rest(url: str, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def written_id(data: bytes) -> int:
    return struct.unpack(">I", data[1:5])[0]


def connector_converter(url: str, kind: str, **settings: str):  # noqa: ANN201
    """The value converter of a connector config with value.converter.* settings, as the worker makes it."""
    from klog.connect.worker import validate

    config = {"name": "s", "connector.class": "FileStreamSink", "topics": "t", "file": "/dev/null",
              "value.converter": kind, "value.converter.schema.registry.url": url,
              **{f"value.converter.{k}": v for k, v in settings.items()}}
    assert validate(config).name == "s"
    props = {k[len("value.converter."):]: v for k, v in config.items() if k.startswith("value.converter.")}
    return make_converter("value.converter", kind, props, False)


def test_avro_normalize_schemas_registers_the_normalized_text_two_spellings_one_id(registry_url):
    plain = connector_converter(registry_url, AVRO)
    plain_id = written_id(plain.from_connect("plain", ROW, {"id": 1, "total": 5}))
    text = rest(registry_url, "GET", f"/schemas/ids/{plain_id}")["schema"]
    normalized = connector_converter(registry_url, AVRO, **{"normalize.schemas": "true"})
    norm_id = written_id(normalized.from_connect("orders", ROW, {"id": 1, "total": 5}))
    assert norm_id != plain_id  # the normalized text is another schema than the one registered as written
    stored = rest(registry_url, "GET", "/subjects/orders-value/versions/latest")
    assert stored["id"] == norm_id and stored["schema"] != text
    # Confluent's normalized form: a decimal's scale 0 left out, the properties sorted by name
    assert '"scale":0,' in text and '"scale":0,' not in stored["schema"]
    assert stored["schema"].index('"logicalType"') < stored["schema"].index('"connect.version"')
    # another spelling of the same schema (keys in reverse order), registered normalized: the same id, no version
    respelled = json.dumps(json.loads(text, object_pairs_hook=lambda kv: dict(reversed(kv))))
    assert respelled != text
    assert rest(registry_url, "POST", "/subjects/orders-value/versions?normalize=true",
                {"schema": respelled})["id"] == norm_id
    assert rest(registry_url, "GET", "/subjects/orders-value/versions") == [1]
    # lookup only (auto.register.schemas=false): the lookup by schema sends normalize=true too
    lookup = connector_converter(registry_url, AVRO, **{"normalize.schemas": "true", "auto.register.schemas": "false"})
    assert written_id(lookup.from_connect("orders", ROW, {"id": 2, "total": 6})) == norm_id
    assert normalized.to_connect("orders", lookup.from_connect("orders", ROW, {"id": 2, "total": 6}))[1] == \
        {"id": 2, "total": 6}


def test_json_schema_normalize_schemas_registers_the_normalized_text(registry_url):
    schema = {"type": "struct", "optional": False, "name": "Row", "fields": [
        {"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "a"}]}
    plain = connector_converter(registry_url, JSON_SCHEMA)
    text = rest(registry_url, "GET", f"/schemas/ids/{written_id(plain.from_connect('plain', schema, {'id': 1}))}")
    normalized = connector_converter(registry_url, JSON_SCHEMA, **{"normalize.schemas": "true"})
    norm_id = written_id(normalized.from_connect("rows", schema, {"id": 1}))
    stored = rest(registry_url, "GET", "/subjects/rows-value/versions/latest")
    sorted_text = json.dumps(json.loads(text["schema"]), sort_keys=True, separators=(",", ":"))
    assert stored["id"] == norm_id and stored["schema"] == sorted_text  # keys sorted, no whitespace


def test_protobuf_converter_takes_normalize_schemas(registry_url):
    pytest.importorskip("google.protobuf")
    kind = "io.confluent.connect.protobuf.ProtobufConverter"
    schema = {"type": "struct", "optional": False, "name": "shop.Row", "fields": [
        {"type": "int32", "optional": False, "field": "id"}]}
    normalized = connector_converter(registry_url, kind, **{"normalize.schemas": "true"})
    norm_id = written_id(normalized.from_connect("rows", schema, {"id": 1}))
    stored = rest(registry_url, "GET", "/subjects/rows-value/versions/latest")
    assert stored["id"] == norm_id
    assert normalized.to_connect("rows", normalized.from_connect("rows", schema, {"id": 3}))[1] == {"id": 3}


def test_normalize_schemas_must_be_a_boolean():
    with pytest.raises(ConfigError, match="normalize.schemas"):
        make_converter("value.converter", AVRO, {"schema.registry.url": "http://127.0.0.1:1",
                                                 "normalize.schemas": "maybe"}, False)


def test_worker_producer_acks_minus_one_is_all():
    from klog.connect.worker import producer_settings

    assert producer_settings({"producer.acks": "-1"}, {}) == {"acks": "all"}
    assert producer_settings({"producer.acks": "1"}, {"producer.override.acks": "-1"}) == {"acks": "all"}
    with pytest.raises(ConfigError, match="producer.override.acks"):
        producer_settings({}, {"producer.override.acks": "2"})

"""Debezium's tutorial connector with Confluent's JsonSchemaConverter for keys and values, run end to end
against klog's registry and a real PostgreSQL (tests/connect/conftest.py), checked with an independent
implementation: confluent-kafka's JSONDeserializer decodes (and validates against the registered schemas)
what the connector wrote."""

from __future__ import annotations

import json

import pytest

from klog.connect.converters import make_converter
from tests.connect.helpers import records, running
from tests.connect.test_connect_published_configs import (
    at_test_server,
    change_customers,
    debezium_customers,
    published,
)

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")
pytest.importorskip("jsonschema", reason="confluent-kafka's JSON serdes need jsonschema")

from tests.connect.test_connect_avro import ctx  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"


@pytest.mark.slow
def test_debezium_tutorial_with_json_schema_converter_read_by_confluent_kafkas_deserializer(pg_db, data_dir,
                                                                                             tmp_path):
    """The snapshot, an update, a delete and its tombstone on `dbserver1.inventory.customers` as JSON with
    registered schema ids under `<topic>-key` / `<topic>-value`; the key schema the one Confluent's
    JsonSchemaData registers; klog's converter reads the records back to Debezium's change events."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer

    debezium_customers(pg_db)
    topic = "dbserver1.inventory.customers"
    warnings: list[str] = []
    with registry_at(str(tmp_path / "registry")) as url:
        config = {**at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db),
                  "key.converter": JSON_SCHEMA, "key.converter.schema.registry.url": url,
                  "value.converter": JSON_SCHEMA, "value.converter.schema.registry.url": url}
        with running(data_dir, config, warnings=warnings):
            change_customers(pg_db, data_dir, topic, 4)
        client = SchemaRegistryClient({"url": url})
        decode = JSONDeserializer(None, schema_registry_client=client)
        written = records(data_dir, topic)
        out = [(decode(r.key, ctx(topic, True)), decode(r.value, ctx(topic, False))) for r in written]
        assert client.get_subjects() == [f"{topic}-key", f"{topic}-value"]
        key_version = client.get_latest_version(f"{topic}-key")
        ours = make_converter("value.converter", JSON_SCHEMA, {"schema.registry.url": url}, False)
        envelope_schema, first = ours.to_connect(topic, written[0].value)
    assert [r.value[:1] for r in written[:3]] == [b"\x00"] * 3  # Confluent's wire format
    assert [k for k, _ in out] == [{"id": 1}] * 4
    sally = {"id": 1, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
    assert [(v["op"], v["before"], v["after"]) for _, v in out[:3]] == [
        ("r", None, sally), ("u", None, {**sally, "first_name": "Anne Marie"}),
        ("d", {"id": 1, "first_name": "", "last_name": "", "email": ""}, None)]
    assert out[3][1] is None  # the tombstone stays one
    assert key_version.schema.schema_type == "JSON"
    assert json.loads(key_version.schema.schema_str) == {
        "type": "object", "title": "dbserver1.inventory.customers.Key",
        "properties": {"id": {"type": "integer", "connect.type": "int32", "default": 0, "connect.index": 0}}}
    assert envelope_schema["name"] == "dbserver1.inventory.customers.Envelope"
    assert first["after"] == sally and first["op"] == "r"
    assert warnings == []

"""Published configs with Confluent's AvroConverter, run end to end against klog's registry and a real
PostgreSQL (tests/connect/conftest.py), checked with an independent implementation: confluent-kafka's
AvroDeserializer reads what Debezium's tutorial connector wrote, and Confluent's JDBC sink (Debezium's
end-to-end demo config) consumes what confluent-kafka's AvroSerializer wrote."""

from __future__ import annotations

import json

import pytest

import klog
from tests.connect.helpers import records, running, wait_for
from tests.connect.test_connect_published_configs import (
    at_test_server,
    change_customers,
    debezium_customers,
    jdbc_url_at,
    published,
    with_snippet,
)

pytest.importorskip("fastavro", reason="the AvroConverter needs fastavro (pip install 'klog[connect]')")

from tests.registry.helpers import serving as registry_at  # noqa: E402


def with_registry(config: dict[str, str], url: str) -> dict[str, str]:
    """The published config with only its registry's address pointed at the test's."""
    return {**config, **{k: url for k in config if k.endswith("schema.registry.url")}}


def serde(url: str):  # noqa: ANN201
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url})


def ctx(topic: str, is_key: bool):  # noqa: ANN201
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)


@pytest.mark.slow
def test_debezium_tutorial_avro_connector_read_by_confluent_kafkas_deserializer(pg_db, data_dir, tmp_path):
    """Debezium's tutorial connector with the Avro settings of Debezium's documentation: the snapshot, an
    update, a delete and its tombstone on `dbserver1.inventory.customers` as Avro records with registered
    ids, which confluent-kafka's AvroDeserializer decodes to Debezium's change events; the subjects are
    `<topic>-key` and `<topic>-value`, the key schema the one Confluent's AvroData registers."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    debezium_customers(pg_db)
    topic = "dbserver1.inventory.customers"
    warnings: list[str] = []
    with registry_at(str(tmp_path / "registry")) as url:
        tutorial = at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db)
        config = with_registry(with_snippet(tutorial, "debezium-docs-avro-confluent.properties"), url)
        with running(data_dir, config, warnings=warnings):
            change_customers(pg_db, data_dir, topic, 4)
        client = serde(url)
        decode = AvroDeserializer(client)
        out = [(decode(r.key, ctx(topic, True)), decode(r.value, ctx(topic, False))) for r in records(data_dir, topic)]
        assert client.get_subjects() == [f"{topic}-key", f"{topic}-value"]
        envelope = json.loads(client.get_latest_version(f"{topic}-value").schema.schema_str)
        key_schema = json.loads(client.get_latest_version(f"{topic}-key").schema.schema_str)
    assert [r.value[:1] for r in records(data_dir, topic)[:3]] == [b"\x00"] * 3  # Confluent's wire format
    assert [k for k, _ in out] == [{"id": 1}] * 4
    sally = {"id": 1, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
    assert [(v["op"], v["before"], v["after"]) for _, v in out[:3]] == [
        ("r", None, sally), ("u", None, {**sally, "first_name": "Anne Marie"}),
        ("d", {"id": 1, "first_name": "", "last_name": "", "email": ""}, None)]
    assert out[3][1] is None  # the tombstone stays one
    assert out[0][1]["source"]["name"] == "dbserver1" and out[0][1]["source"]["snapshot"] in ("first", "true", "last")
    assert (envelope["name"], envelope["namespace"], envelope["connect.name"]) == (
        "Envelope", "dbserver1.inventory.customers", "dbserver1.inventory.customers.Envelope")
    assert key_schema == {"type": "record", "name": "Key", "namespace": "dbserver1.inventory.customers",
                          "fields": [{"name": "id", "type": {"type": "int", "connect.default": 0}, "default": 0}],
                          "connect.name": "dbserver1.inventory.customers.Key"}
    assert warnings == []


HIKE_KEY = {"type": "record", "name": "Key", "namespace": "dbserver1.inventory.Hike",
            "fields": [{"name": "id", "type": "int"}]}
HIKE_ROW = {"type": "record", "name": "Value", "namespace": "dbserver1.inventory.Hike", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": "string"},
    {"name": "km", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 1}],
     "default": None}]}
HIKE_ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.Hike", "fields": [
    {"name": "before", "type": ["null", HIKE_ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


@pytest.mark.slow
def test_confluent_jdbc_sink_avro_config_consumes_confluent_kafkas_avro_records(pg_db, data_dir, tmp_path):
    """Debezium's end-to-end demo sink (Confluent's JDBC sink, ExtractNewRecordState, Avro keys and values)
    over records confluent-kafka's AvroSerializer wrote as Debezium would: creates, an update and a delete
    with its tombstone; the table it creates ends with the rows the events leave, decimals exact."""
    import decimal

    from confluent_kafka.schema_registry.avro import AvroSerializer

    topic = "dbserver1_inventory_Hike"
    sink = published("debezium-end-to-end-jdbc-sink-avro.json")
    sink["connection.url"] = jdbc_url_at(sink["connection.url"], pg_db)
    warnings: list[str] = []
    with registry_at(str(tmp_path / "registry")) as url:
        client = serde(url)
        key_of = AvroSerializer(client, json.dumps(HIKE_KEY))
        value_of = AvroSerializer(client, json.dumps(HIKE_ENVELOPE))

        def row(hike_id: int, name: str, km: str | None) -> dict:
            return {"id": hike_id, "name": name, "km": None if km is None else decimal.Decimal(km)}

        events = [(1, {"before": None, "after": row(1, "Tour du Mont Blanc", "170.0"), "op": "c", "ts_ms": 1}),
                  (2, {"before": None, "after": row(2, "GR20", None), "op": "c", "ts_ms": 2}),
                  (1, {"before": None, "after": row(1, "Tour du Mont Blanc", "172.5"), "op": "u", "ts_ms": 3}),
                  (2, {"before": row(2, "GR20", None), "after": None, "op": "d", "ts_ms": 4}),
                  (2, None)]
        with klog.open(data_dir) as s:
            s.create_topic(topic, partitions=1)
            with s.producer() as p:
                for hike_id, value in events:
                    p.send(topic, None if value is None else value_of(value, ctx(topic, False)),
                           key=key_of({"id": hike_id}, ctx(topic, True)))

        def table() -> list:
            try:
                return sorted(pg_db.execute(f'SELECT id, name, km FROM "{topic}"'))
            except Exception:  # noqa: BLE001 - not created yet
                return []

        with running(data_dir, with_registry(sink, url), warnings=warnings):
            wait_for(lambda: table() == [(1, "Tour du Mont Blanc", decimal.Decimal("172.5"))], timeout=30,
                     what="the sink's table after the update and the delete")
    assert warnings == []


@pytest.mark.slow
def test_debezium_source_to_jdbc_sink_through_avro(pg_db, data_dir, tmp_path):
    """The deployment most Avro users run: Debezium's tutorial source and Debezium's postgres-toast JDBC sink,
    both with the Avro settings of Debezium's documentation, one worker, one registry: the sink's table
    ends equal to the source's (inserts, an update, a delete), every record in between Avro."""
    debezium_customers(pg_db)
    pg_db.execute("CREATE SCHEMA inventorysink")
    pg_db.execute("CREATE TABLE inventorysink.customers (id int PRIMARY KEY, first_name text, last_name text, "
                  "email text)")
    avro = "debezium-docs-avro-confluent.properties"
    with registry_at(str(tmp_path / "registry")) as url:
        source = with_registry(with_snippet(at_test_server(published("debezium-tutorial-register-postgres.json"),
                                                           pg_db), avro), url)
        sink = with_snippet(published("debezium-postgres-toast-jdbc-sink.json"), avro)
        sink = with_registry({**sink, "connection.url": jdbc_url_at(sink["connection.url"], pg_db)}, url)
        warnings: list[str] = []
        with running(data_dir, source, sink, warnings=warnings):
            pg_db.execute("INSERT INTO inventory.customers (first_name, last_name, email) "
                          "VALUES ('George', 'Bailey', 'gbailey@foobar.com'), ('Edward', 'Walker', 'ed@walker.com')")
            pg_db.execute("UPDATE inventory.customers SET first_name = 'Anne Marie' WHERE id = 1")
            pg_db.execute("DELETE FROM inventory.customers WHERE id = 2")
            want = sorted(pg_db.execute("SELECT id, first_name, last_name, email FROM inventory.customers"))
            wait_for(lambda: sorted(pg_db.execute("SELECT id, first_name, last_name, email FROM "
                                                  "inventorysink.customers")) == want, timeout=30,
                     what="the sink's table equal to the source's")
    assert len(want) == 2 and want[0][1] == "Anne Marie" and warnings == []
    assert {r.value[:1] for r in records(data_dir, "dbserver1.inventory.customers") if r.value} == {b"\x00"}

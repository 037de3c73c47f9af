"""Published Kafka Connect configs, run as their authors wrote them (tests/connect/configs/, where each
came from is in configs/SOURCES.md): only the database's address is pointed at the test server; the
records they produce are checked against what Kafka, Debezium and Confluent document for them."""

from __future__ import annotations

import json
import os

import pytest

from klog.connect.config import load_config_file, parse_properties_text
from tests.connect.helpers import records, running, wait_for

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def published(name: str) -> dict[str, str]:
    return load_config_file(os.path.join(CONFIGS, name))


def envelopes(data_dir: str, topic: str) -> list[tuple]:
    """(key, value) of each record as JSON (None for a null)."""
    return [(json.loads(r.key) if r.key is not None else None, json.loads(r.value) if r.value is not None else None)
            for r in records(data_dir, topic)]


def test_kafka_docs_file_source_with_hoistfield_and_insertfield(data_dir, tmp_path, monkeypatch):
    """Kafka's documented example: each line hoisted into a struct's `line`, then `data_source` added; the
    docs show exactly these records."""
    monkeypatch.chdir(tmp_path)  # the config's file=test.txt is relative, as in Kafka's quickstart
    (tmp_path / "test.txt").write_text("foo\nbar\n")
    warnings: list[str] = []
    with running(data_dir, published("kafka-docs-file-source-smt.properties"), warnings=warnings):
        wait_for(lambda: len(records(data_dir, "connect-test")) == 2, what="the two lines")
    schema = {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "line"},
                                           {"type": "string", "optional": True, "field": "data_source"}],
              "optional": False}
    assert envelopes(data_dir, "connect-test") == [
        (None, {"schema": schema, "payload": {"line": "foo", "data_source": "test-file-source"}}),
        (None, {"schema": schema, "payload": {"line": "bar", "data_source": "test-file-source"}})]
    assert warnings == []


def at_test_server(config: dict[str, str], db) -> dict[str, str]:  # noqa: ANN001 - tests.connect.pg_server.Database
    """The published config with its database's address replaced by the test server's, nothing else."""
    return {**config, "database.hostname": db.host, "database.port": str(db.port), "database.user": db.user,
            "database.password": "", "database.dbname": db.dbname}


def debezium_customers(db) -> None:  # noqa: ANN001
    """The `customers` table of Debezium's PostgreSQL documentation, in the tutorial's schema `inventory`."""
    db.execute("CREATE SCHEMA inventory")
    db.execute("CREATE TABLE inventory.customers (id SERIAL, first_name VARCHAR(255) NOT NULL, "
               "last_name VARCHAR(255) NOT NULL, email VARCHAR(255) NOT NULL, PRIMARY KEY(id))")
    db.execute("INSERT INTO inventory.customers (first_name, last_name, email) "
               "VALUES ('Sally', 'Thomas', 'sally.thomas@acme.com')")


def change_customers(db, data_dir: str, topic: str, expected: int) -> None:  # noqa: ANN001
    wait_for(lambda: len(records(data_dir, topic)) >= 1, what="the snapshot")
    db.execute("UPDATE inventory.customers SET first_name = 'Anne Marie' WHERE id = 1")
    db.execute("DELETE FROM inventory.customers WHERE id = 1")
    wait_for(lambda: len(records(data_dir, topic)) >= expected, what="the update and the delete")


# the id is SERIAL: its default nextval(...) is a function, which Debezium's PostgresDefaultValueConverter
# gives the placeholder 0 (its documentation's example predates column defaults)
CUSTOMER_FIELDS = [{"type": "int32", "optional": False, "default": 0, "field": "id"},
                   {"type": "string", "optional": False, "field": "first_name"},
                   {"type": "string", "optional": False, "field": "last_name"},
                   {"type": "string", "optional": False, "field": "email"}]


@pytest.mark.slow
def test_debezium_tutorial_postgres_connector(pg_db, data_dir):
    """Debezium's tutorial connector: topics `dbserver1.inventory.<table>`, the documented key and value
    schemas (a NOT NULL column is a required field), a delete's before image under REPLICA IDENTITY
    DEFAULT with the key and, for the required columns it lacks, Debezium's stand-ins ("" for text),
    then a tombstone."""
    debezium_customers(pg_db)
    topic = "dbserver1.inventory.customers"
    warnings: list[str] = []
    with running(data_dir, at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db),
                 warnings=warnings):
        change_customers(pg_db, data_dir, topic, 4)
    out = envelopes(data_dir, topic)
    assert [k for k, _ in out] == [{"schema": {"type": "struct", "optional": False,
                                               "name": "dbserver1.inventory.customers.Key",
                                               "fields": CUSTOMER_FIELDS[:1]}, "payload": {"id": 1}}] * 4
    value_schema = {f["field"]: f for f in out[0][1]["schema"]["fields"]}
    assert value_schema["after"] == {"type": "struct", "optional": True, "name": "dbserver1.inventory.customers.Value",
                                     "fields": CUSTOMER_FIELDS, "field": "after"}
    payloads = [v["payload"] if v else None for _, v in out]
    sally = {"id": 1, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
    assert [(p["op"], p["before"], p["after"]) for p in payloads[:3]] == [
        ("r", None, sally), ("u", None, {**sally, "first_name": "Anne Marie"}),
        ("d", {"id": 1, "first_name": "", "last_name": "", "email": ""}, None)]
    assert payloads[3] is None and out[3][1] is None  # the tombstone
    assert payloads[0]["source"]["name"] == "dbserver1" and payloads[0]["source"]["schema"] == "inventory"
    assert warnings == []


def with_snippet(config: dict[str, str], snippet: str) -> dict[str, str]:
    """A connector config with a documentation page's `.properties` snippet added (as a user pastes it)."""
    with open(os.path.join(CONFIGS, snippet)) as f:
        return {**config, **parse_properties_text(f.read())}


@pytest.mark.slow
def test_debezium_docs_event_flattening_with_metadata(pg_db, data_dir):
    """Debezium's "Adding metadata" example on the tutorial connector: rows flattened with `__deleted`
    and `__op`, `__table`, `__lsn`, `__source_ts_ms` in the value, each with the schema the envelope
    gives it; the struct rebuilt as Kafka's InsertField builds one (required); a `__db` header; the delete
    rewritten to its before image and its tombstone dropped."""
    debezium_customers(pg_db)
    topic = "dbserver1.inventory.customers"
    config = with_snippet(at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db),
                          "debezium-docs-event-flattening-metadata.properties")
    with running(data_dir, config):
        change_customers(pg_db, data_dir, topic, 3)
    out = envelopes(data_dir, topic)
    assert len(out) == 3 and all(v is not None for _, v in out)
    schema = out[2][1]["schema"]
    assert schema == {"type": "struct", "optional": False, "name": "dbserver1.inventory.customers.Value",
                      "fields": [*CUSTOMER_FIELDS, {"type": "string", "optional": True, "field": "__deleted"},
                                 {"type": "string", "optional": False, "field": "__op"},
                                 {"type": "string", "optional": False, "field": "__table"},
                                 {"type": "int64", "optional": True, "field": "__lsn"},
                                 {"type": "int64", "optional": False, "field": "__source_ts_ms"}]}
    rows = [v["payload"] for _, v in out]
    assert [(r["first_name"], r["__deleted"], r["__op"], r["__table"]) for r in rows] == [
        ("Sally", "false", "r", "customers"), ("Anne Marie", "false", "u", "customers"), ("", "true", "d", "customers")]
    assert rows[2]["__lsn"] > 0 and rows[2]["__source_ts_ms"] > 0
    assert [r.headers for r in records(data_dir, topic)] == [[("__db", pg_db.dbname.encode())]] * 3


@pytest.mark.slow
def test_debezium_docs_event_flattening_rewrite(pg_db, data_dir):
    """The documented `rewrite` example with `add.fields=table,lsn`: the delete is `{..., "__deleted":
    "true"}` and no tombstone follows."""
    debezium_customers(pg_db)
    topic = "dbserver1.inventory.customers"
    config = with_snippet(at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db),
                          "debezium-docs-event-flattening-rewrite.properties")
    with running(data_dir, config):
        change_customers(pg_db, data_dir, topic, 3)
    out = envelopes(data_dir, topic)
    assert [list(v["payload"])[-3:] for _, v in out] == [["__deleted", "__table", "__lsn"]] * 3
    assert [v["payload"]["__deleted"] for _, v in out] == ["false", "false", "true"]
    assert [f["field"] for f in out[0][1]["schema"]["fields"]][-3:] == ["__deleted", "__table", "__lsn"]


def jdbc_url_at(url: str, db) -> str:  # noqa: ANN001
    """A published jdbc:postgresql URL pointed at the test database: host, port, database, user and password
    replaced; its other parameters (currentSchema, ...) kept."""
    from urllib.parse import parse_qsl, urlencode, urlparse

    parsed = urlparse(url[len("jdbc:"):])
    query = dict(parse_qsl(parsed.query))
    query.update({k: v for k, v in (("user", db.user), ("password", "")) if k in query})
    return f"jdbc:postgresql://{db.host}:{db.port}/{db.dbname}" + (f"?{urlencode(query)}" if query else "")


def sink_rows(db, table: str) -> list[tuple]:  # noqa: ANN001
    return sorted(db.execute(f"SELECT id, first_name, last_name, email FROM {table}"))


@pytest.mark.slow
def test_debezium_postgres_toast_example_jdbc_sink_into_current_schema(pg_db, data_dir):
    """Debezium's postgres-toast example: the tutorial source, then Confluent's JDBC sink with the unwrap
    transform into `customers` of the URL's `currentSchema=inventorysink` (auto.create=false: the table is
    there); the sink's table ends equal to the source's, deletes included."""
    debezium_customers(pg_db)
    pg_db.execute("CREATE SCHEMA inventorysink")
    pg_db.execute("CREATE TABLE inventorysink.customers (id int PRIMARY KEY, first_name text, last_name text, "
                  "email text)")
    source = at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db)
    sink = published("debezium-postgres-toast-jdbc-sink.json")
    sink["connection.url"] = jdbc_url_at(sink["connection.url"], pg_db)
    assert "currentSchema=inventorysink" in sink["connection.url"]
    warnings: list[str] = []
    with running(data_dir, source, sink, warnings=warnings):
        pg_db.execute("INSERT INTO inventory.customers (first_name, last_name, email) "
                      "VALUES ('George', 'Bailey', 'gbailey@foobar.com'), ('Edward', 'Walker', 'ed@walker.com')")
        pg_db.execute("UPDATE inventory.customers SET first_name = 'Anne Marie' WHERE id = 1")
        pg_db.execute("DELETE FROM inventory.customers WHERE id = 2")
        want = sink_rows(pg_db, "inventory.customers")
        wait_for(lambda: sink_rows(pg_db, "inventorysink.customers") == want, timeout=30,
                 what="the sink's table equal to the source's")
    assert len(want) == 2 and want[0][1] == "Anne Marie"
    assert pg_db.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'customers' "
                         "AND table_schema = 'public'") == [(0,)]
    assert warnings == []


def test_debezium_kstreams_example_flat_config_without_schemas(pg_db, data_dir):
    """Debezium's kstreams-fk-join connector: a flat config without a name (the body of PUT
    /connectors/{name}/config) is named after its file; keys and values are plain JSON (schemas.enable
    false), numerics strings (decimal.handling.mode=string); `source.sequence` is Debezium's compact JSON
    array of strings."""
    from klog.connect.worker import validate

    debezium_customers(pg_db)
    pg_db.execute("CREATE TABLE inventory.orders (id int PRIMARY KEY, total numeric(10,2))")
    pg_db.execute("INSERT INTO inventory.orders VALUES (1, 12.50)")
    config = at_test_server(published("debezium-kstreams-fk-join-register-postgres.json"), pg_db)
    assert validate(config).name == "debezium-kstreams-fk-join-register-postgres"
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "dbserver1.inventory.orders")) == 1, what="the snapshot")
        pg_db.execute("UPDATE inventory.orders SET total = 13.75 WHERE id = 1")
        wait_for(lambda: len(records(data_dir, "dbserver1.inventory.orders")) == 2, what="the update")
    (key, snap), (_, update) = envelopes(data_dir, "dbserver1.inventory.orders")
    assert key == {"id": 1} and set(update) == {"before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns",
                                                "transaction"}
    assert (snap["after"], update["after"], update["op"]) == ({"id": 1, "total": "12.50"}, {"id": 1, "total": "13.75"},
                                                             "u")
    assert json.loads(update["source"]["sequence"])[1] == str(update["source"]["lsn"])
    assert update["source"]["sequence"] == json.dumps(json.loads(update["source"]["sequence"]), separators=(",", ":"))


def test_confluent_jdbc_sink_quickstart_sqlite(data_dir, tmp_path, monkeypatch):
    """Confluent's sink quickstart, verbatim: the quickstart's `orders` record (as JsonConverter with its
    schema carries it) becomes a row of the table `orders` it creates in ./test.db, its columns typed as
    Confluent's SQLite dialect types them, NOT NULL for the required fields."""
    import sqlite3

    import klog

    monkeypatch.chdir(tmp_path)
    schema = {"type": "struct", "name": "myrecord", "optional": False, "fields": [
        {"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": False, "field": "product"},
        {"type": "int32", "optional": False, "field": "quantity"},
        {"type": "float32", "optional": False, "field": "price"}]}  # the quickstart's Avro float
    with klog.open(data_dir) as s:
        s.create_topic("orders", partitions=1)
        with s.producer() as p:
            p.send("orders", json.dumps({"schema": schema, "payload": {"id": 999, "product": "foo", "quantity": 100,
                                                                       "price": 50}}).encode())
    warnings: list[str] = []

    def rows() -> list:
        try:
            with sqlite3.connect(tmp_path / "test.db") as conn:
                return conn.execute('SELECT * FROM "orders"').fetchall()
        except sqlite3.OperationalError:
            return []

    with running(data_dir, published("confluent-sink-quickstart-sqlite.properties"), warnings=warnings):
        wait_for(lambda: rows() == [(999, "foo", 100, 50.0)], what="the quickstart's row")
    with sqlite3.connect(tmp_path / "test.db") as conn:
        columns = [(r[1], r[2], r[3]) for r in conn.execute('PRAGMA table_info("orders")')]
    assert columns == [("id", "INTEGER", 1), ("product", "TEXT", 1), ("quantity", "INTEGER", 1), ("price", "REAL", 1)]
    assert warnings == []


@pytest.mark.slow
def test_kafka_docs_predicate_example_on_debezium_topics(pg_db, data_dir):
    """Kafka's predicate example after Debezium's RegexRouter: each table's topic is its name; `foo`'s
    records are filtered out; every topic but `bar` has its key replaced by the key's `other_field`."""
    pg_db.execute("CREATE SCHEMA inventory")
    for table in ("foo", "bar", "baz"):
        pg_db.execute(f"CREATE TABLE inventory.{table} (other_field int PRIMARY KEY, v text)")
        pg_db.execute(f"INSERT INTO inventory.{table} VALUES (7, '{table}')")
    config = with_snippet(at_test_server(published("debezium-tutorial-register-postgres.json"), pg_db),
                          "kafka-docs-predicates-after-debezium-route.properties")
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: records(data_dir, "bar") and records(data_dir, "baz"), what="the snapshot")
    assert records(data_dir, "foo") == [] and records(data_dir, "dbserver1.inventory.foo") == []
    [(bar_key, bar)] = envelopes(data_dir, "bar")
    [(baz_key, baz)] = envelopes(data_dir, "baz")
    assert bar_key["payload"] == {"other_field": 7} and bar_key["schema"]["type"] == "struct"
    assert baz_key == {"schema": {"type": "int32", "optional": False}, "payload": 7}
    assert (bar["payload"]["after"]["v"], baz["payload"]["after"]["v"]) == ("bar", "baz")
    assert warnings == []


@pytest.mark.slow
def test_debezium_outbox_example_event_router(pg_db, data_dir):
    """Debezium's outbox example: each row inserted into `inventory.outboxevent` (the table Debezium's
    Quarkus extension writes, then deletes at once) is one event on `<aggregatetype>.events`, keyed by
    `aggregateid`, its value the `payload` column, with the headers `id` and `eventType`; the delete
    (and no tombstone: tombstones.on.delete=false) gives nothing."""
    pg_db.execute("CREATE SCHEMA inventory")
    pg_db.execute("CREATE TABLE inventory.outboxevent (id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) "
                  "NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, timestamp timestamp "
                  "NOT NULL, payload varchar(8000), tracingspancontext varchar(256))")
    event_id = "d7d7a1b6-2b5e-4c59-9a3e-7f4a7c0c1a01"
    payload = '{"id": 1, "customerId": 123, "lineItems": []}'
    warnings: list[str] = []
    with running(data_dir, at_test_server(published("debezium-outbox-register-postgres.json"), pg_db),
                 warnings=warnings):
        wait_for(lambda: task_running(data_dir, "debezium-outbox-register-postgres"), what="the connector")
        pg_db.execute(f"INSERT INTO inventory.outboxevent VALUES ('{event_id}', 'Order', '1', 'OrderCreated', "
                      f"now(), '{payload}', NULL)")
        pg_db.execute(f"DELETE FROM inventory.outboxevent WHERE id = '{event_id}'")
        pg_db.execute("INSERT INTO inventory.outboxevent VALUES ('d7d7a1b6-2b5e-4c59-9a3e-7f4a7c0c1a02', 'Order', "
                      "'1', 'OrderLineUpdated', now(), '{}', NULL)")
        wait_for(lambda: len(records(data_dir, "Order.events")) == 2, what="the two events")
    [first, second] = records(data_dir, "Order.events")
    assert json.loads(first.key) == {"schema": {"type": "string", "optional": False}, "payload": "1"}
    assert json.loads(first.value) == {"schema": {"type": "string", "optional": True}, "payload": payload}
    assert first.headers == [("id", event_id.encode()), ("eventType", b"OrderCreated")]
    assert second.headers[1] == ("eventType", b"OrderLineUpdated") and json.loads(second.value)["payload"] == "{}"
    assert first.timestamp > 0
    assert records(data_dir, "dbserver1.inventory.outboxevent") == [] and warnings == []


def task_running(data_dir: str, name: str) -> bool:
    states = [json.loads(r.value)["state"] for r in records(data_dir, "connect-status")
              if r.key == f"status-task-{name}-0".encode() and r.value]
    return bool(states) and states[-1] == "RUNNING"


@pytest.mark.slow
def test_confluent_jdbc_source_quickstart_sqlite(data_dir, tmp_path, monkeypatch):
    """Confluent's source quickstart, verbatim: its `accounts` table's rows on `test-sqlite-jdbc-accounts`
    as structs named `accounts` (id required, name optional), a row inserted later follows after
    poll.interval.ms (5 s by default), and a restart sends only what is new (Confluent's offsets)."""
    import sqlite3

    monkeypatch.chdir(tmp_path)
    with sqlite3.connect(tmp_path / "test.db") as db:
        db.execute("CREATE TABLE accounts(id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL, name VARCHAR(255))")
        db.execute("INSERT INTO accounts(name) VALUES('alice')")
        db.execute("INSERT INTO accounts(name) VALUES('bob')")
    topic = "test-sqlite-jdbc-accounts"
    config = published("confluent-source-quickstart-sqlite.properties")
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: len(records(data_dir, topic)) == 2, what="alice and bob")
        with sqlite3.connect(tmp_path / "test.db") as db:
            db.execute("INSERT INTO accounts(name) VALUES('cathy')")
        wait_for(lambda: len(records(data_dir, topic)) == 3, timeout=20, what="cathy, a poll interval later")
    with sqlite3.connect(tmp_path / "test.db") as db:
        db.execute("INSERT INTO accounts(name) VALUES('dave')")
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, topic)) == 4, what="dave after the restart")
    out = envelopes(data_dir, topic)
    assert [v["payload"] for _, v in out] == [{"id": 1, "name": "alice"}, {"id": 2, "name": "bob"},
                                              {"id": 3, "name": "cathy"}, {"id": 4, "name": "dave"}]
    assert out[0][1]["schema"] == {"type": "struct", "optional": False, "name": "accounts", "fields": [
        {"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"}]}
    assert all(k is None for k, _ in out) and warnings == []
    stored = [json.loads(r.key) for r in records(data_dir, "connect-offsets")]
    assert stored[-1] == ["test-source-sqlite-jdbc-autoincrement", {"protocol": "1", "table": "accounts"}]


@pytest.mark.slow
def test_debezium_cqrs_example_by_logical_table_router(pg_db, data_dir):
    """Debezium's CQRS example: its tables' topics rerouted by ByLogicalTableRouter (`polls.public.(.*)` →
    `$1`); the key gains `__dbz__physicalTableIdentifier` (the physical topic); the key, envelope and row
    schemas are renamed after the new topic."""
    for table in ("optionentity", "pollentity", "pollentity_optionentity", "pollentity_voteentity", "voteentity"):
        pg_db.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)")
    pg_db.execute("INSERT INTO pollentity VALUES (1, 'Best color?')")
    pg_db.execute("CREATE TABLE other (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO other VALUES (1)")
    with running(data_dir, at_test_server(published("debezium-cqrs-postgres-source.json"), pg_db)):
        wait_for(lambda: records(data_dir, "pollentity"), what="the snapshot")
        pg_db.execute("INSERT INTO voteentity VALUES (7, 'blue')")
        wait_for(lambda: records(data_dir, "voteentity"), what="the vote")
    [(key, value)] = envelopes(data_dir, "pollentity")
    assert key == {"schema": {"type": "struct", "optional": False, "name": "pollentity.Key", "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": False, "field": "__dbz__physicalTableIdentifier"}]},
        "payload": {"id": 1, "__dbz__physicalTableIdentifier": "polls.public.pollentity"}}
    assert value["schema"]["name"] == "pollentity.Envelope"
    assert {f["field"]: f.get("name") for f in value["schema"]["fields"]}["after"] == "pollentity.Value"
    assert value["payload"]["after"] == {"id": 1, "v": "Best color?"} and value["payload"]["op"] == "r"
    assert envelopes(data_dir, "voteentity")[0][0]["payload"]["__dbz__physicalTableIdentifier"] == \
        "polls.public.voteentity"
    assert records(data_dir, "other") == [] and records(data_dir, "polls.public.other") == []


@pytest.mark.slow
def test_debezium_keys_klog_lacks_are_named_in_one_warning_line(pg_db, data_dir):
    """Debezium's HTTP signaling example, posted over the REST API: its `notification.enabled.channels` is
    named in one warning line (as `klog connect run` names them), its `signal.enabled.channels` channel
    (http: klog reads the source channel only) in another; the change events are the tutorial's.
    Its `tasks.max` and `database.port` are JSON numbers, which Kafka Connect takes as strings."""
    debezium_customers(pg_db)
    warnings: list[str] = []
    with running(data_dir, warnings=warnings) as worker:  # posted as to the REST API (POST /connectors)
        worker.put(at_test_server(published("debezium-http-signaling-register-postgres.json"), pg_db))
        wait_for(lambda: records(data_dir, "dbserver1.inventory.customers"), what="the snapshot")
    [line] = [w for w in warnings if "does not implement" in w]
    assert "\n" not in line and "notification.enabled.channels" in line
    assert any("signal.enabled.channels: http not implemented" in w for w in warnings)
    assert envelopes(data_dir, "dbserver1.inventory.customers")[0][1]["payload"]["after"]["first_name"] == "Sally"

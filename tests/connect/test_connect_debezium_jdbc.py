"""Debezium's JDBC sink (io.debezium.connector.jdbc.JdbcSinkConnector) with its published configs, over
klog's one JDBC sink: change event envelopes read natively (after written, op=d deleting, op=t
truncating, each only when enabled), flat records as rows, Debezium's table naming, field filters and
validation; Debezium's PostgreSQL source into a second database end to end; kill -9 mid-stream."""

from __future__ import annotations

import json
import signal
import sqlite3

import pytest

import klog
from tests.connect.helpers import running, start_cli, values, wait_for, wait_started, write_config

ROW_FIELDS = [{"type": "int32", "optional": False, "field": "id"},
              {"type": "string", "optional": True, "field": "name"}]
KEY_SCHEMA = {"type": "struct", "optional": False, "name": "shop.public.items.Key",
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}
ROW_SCHEMA = {"type": "struct", "optional": True, "name": "shop.public.items.Value", "fields": ROW_FIELDS}
SOURCE_SCHEMA = {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "fields": [
    {"type": "string", "optional": False, "field": "db"}, {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"}]}
ENVELOPE_SCHEMA = {"type": "struct", "optional": False, "name": "shop.public.items.Envelope", "fields": [
    {**ROW_SCHEMA, "field": "before"}, {**ROW_SCHEMA, "field": "after"}, {**SOURCE_SCHEMA, "field": "source"},
    {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]}
TOPIC = "shop.public.items"
SOURCE = {"db": "shop", "schema": "public", "table": "items"}


def change(op: str, before: dict | None = None, after: dict | None = None) -> tuple:
    """(key, value) of a Debezium change event as JsonConverter with schemas writes it."""
    row = after or before
    key = None if row is None else {"schema": KEY_SCHEMA, "payload": {"id": row["id"]}}
    value = {"schema": ENVELOPE_SCHEMA, "payload": {"before": before, "after": after, "source": SOURCE, "op": op,
                                                    "ts_ms": 0}}
    return key, value


def tombstone(key_id: int) -> tuple:
    return {"schema": KEY_SCHEMA, "payload": {"id": key_id}}, None


def send(data_dir: str, events: list[tuple], topic: str = TOPIC) -> None:
    with klog.open(data_dir) as s:
        s.create_topic(topic, partitions=1, exist_ok=True)
        with s.producer() as p:
            for key, value in events:
                p.send(topic, None if value is None else json.dumps(value).encode(),
                       key=None if key is None else json.dumps(key).encode())


HISTORY = [change("r", after={"id": 1, "name": "one"}), change("r", after={"id": 2, "name": "two"}),
           change("c", after={"id": 3, "name": "three"}),
           change("u", before={"id": 1, "name": "one"}, after={"id": 1, "name": "uno"}),
           change("d", before={"id": 2, "name": "two"}), tombstone(2),
           change("c", after={"id": 4, "name": "four"})]


def tutorial_config(url: str, **extra: str) -> dict:
    """Debezium's documented JDBC sink example (its keys and values), pointed at `url`."""
    return {"name": "jdbc-connector", "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
            "tasks.max": "1", "connection.url": url, "connection.username": "pguser",
            "connection.password": "pgpassword", "insert.mode": "upsert", "delete.enabled": "true",
            "primary.key.mode": "record_key", "schema.evolution": "basic", "use.time.zone": "UTC", "topics": TOPIC,
            **extra}


def rows(db: str, table: str = "shop_public_items") -> list:
    try:
        with sqlite3.connect(db) as conn:
            return sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall())
    except sqlite3.OperationalError:
        return []


def offset(db: str, connector: str = "jdbc-connector") -> int | None:
    try:
        with sqlite3.connect(db) as conn:
            found = conn.execute("SELECT next_offset FROM __klog_connect_offsets WHERE connector = ?",
                                 (connector,)).fetchall()
    except sqlite3.OperationalError:
        return None
    return found[0][0] if found else None


def test_change_events_land_as_debeziums_sink_writes_them(tmp_path, data_dir):
    """The envelope natively: r/c/u write `after` (upsert by key), d and the tombstone delete, the table
    named from the topic with its dots as underscores (DefaultCollectionNamingStrategy), created by
    schema.evolution=basic with the key as primary key."""
    db = str(tmp_path / "out.db")
    send(data_dir, HISTORY)
    with running(data_dir, tutorial_config(f"jdbc:sqlite:{db}")):
        wait_for(lambda: offset(db) == len(HISTORY), what="every event")
    assert rows(db) == [(1, "uno"), (3, "three"), (4, "four")]
    with sqlite3.connect(db) as conn:
        assert [(c[1], c[5]) for c in conn.execute('PRAGMA table_info("shop_public_items")')] == [
            ("id", 1), ("name", 0)]


def test_truncate_only_when_enabled_deletes_skipped_when_disabled(tmp_path, data_dir):
    """op=t empties the table with truncate.enabled, is skipped without (the default); with delete.enabled
    off (the default) a delete and a tombstone are skipped, not a failure (Confluent's sink fails on a
    tombstone)."""
    db = str(tmp_path / "out.db")
    send(data_dir, [*HISTORY, change("t"), change("c", after={"id": 5, "name": "five"})])
    total = len(HISTORY) + 2
    truncating = tutorial_config(f"jdbc:sqlite:{db}", **{"truncate.enabled": "true", "name": "truncating",
                                                        "collection.name.format": "truncated"})
    keeping = tutorial_config(f"jdbc:sqlite:{db}", **{"name": "keeping", "delete.enabled": "false",
                                                     "collection.name.format": "kept"})
    with running(data_dir, truncating, keeping) as w:
        wait_for(lambda: (offset(db, "truncating"), offset(db, "keeping")) == (total, total)
                 or any(r.error for r in w.runners()), what="every event, twice")
        assert not [r.error for r in w.runners() if r.error]
    assert rows(db, "truncated") == [(5, "five")]
    assert rows(db, "kept") == [(1, "uno"), (2, "two"), (3, "three"), (4, "four"), (5, "five")]


def test_flat_records_after_extract_new_record_state(tmp_path, data_dir):
    """The same history through ExtractNewRecordState (flat rows; a delete as a tombstone) gives the same
    table; collection.name.format takes the source block (${source.schema}_${source.table}) of envelopes,
    field.exclude.list drops a column, table.name.format is the older name of collection.name.format."""
    db = str(tmp_path / "out.db")
    send(data_dir, HISTORY)
    flat = tutorial_config(f"jdbc:sqlite:{db}", **{
        "name": "flat", "table.name.format": "flat_${topic}", "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"})
    by_source = tutorial_config(f"jdbc:sqlite:{db}", **{
        "name": "by-source", "collection.name.format": "${source.schema}_${source.table}",
        "field.exclude.list": f"{TOPIC}:name", "delete.enabled": "false", "primary.key.mode": "record_value",
        "primary.key.fields": "id"})
    with running(data_dir, flat, by_source):
        wait_for(lambda: (offset(db, "flat"), offset(db, "by-source")) == (len(HISTORY),) * 2, what="the events")
    assert rows(db, "flat_shop_public_items") == [(1, "uno"), (3, "three"), (4, "four")]
    assert rows(db, "public_items") == [(1,), (2,), (3,), (4,)]


def test_debezium_temporal_types_are_written_as_dates_and_times(tmp_path, data_dir):
    """MicroTimestamp, Date, MicroTime, ZonedTimestamp and VariableScaleDecimal (Debezium's PostgreSQL
    defaults) are written as the dates, times and numbers Debezium's sink writes, not their integers or
    structs, from envelopes and flat records (SQLite has no timestamptz: a ZonedTimestamp is its instant as
    ISO text in UTC with the offset)."""
    db = str(tmp_path / "out.db")
    fields = [{"type": "int32", "optional": False, "field": "id"},
              {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "at"},
              {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "day"},
              {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "clock"},
              {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "field": "seen"},
              {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal", "field": "amount",
               "fields": [{"type": "int32", "optional": False, "field": "scale"},
                          {"type": "bytes", "optional": False, "field": "value"}]}]
    row_schema = {**ROW_SCHEMA, "fields": fields}
    envelope = {**ENVELOPE_SCHEMA, "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"},
                                              *ENVELOPE_SCHEMA["fields"][2:]]}
    after = {"id": 1, "at": 1_709_296_496_789_012, "day": 19_724, "clock": 45_296_000_001, "seen":
             "2024-03-01T10:00:00.5+02:00", "amount": {"scale": 3, "value": "7Sm8"}}  # -1234.500
    send(data_dir, [({"schema": KEY_SCHEMA, "payload": {"id": 1}},
                     {"schema": envelope, "payload": {"before": None, "after": after, "source": SOURCE, "op": "c"}})])
    flat = {"name": "flat", "collection.name.format": "flat", "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}
    with running(data_dir, tutorial_config(f"jdbc:sqlite:{db}"), tutorial_config(f"jdbc:sqlite:{db}", **flat)):
        wait_for(lambda: (offset(db), offset(db, "flat")) == (1, 1), what="the record, twice")
    written = (1, "2024-03-01T12:34:56.789012", "2024-01-02", "12:34:56.000001",
               "2024-03-01T08:00:00.500000+00:00", -1234.5)  # ZonedTimestamp: the instant, its offset kept (UTC)
    assert rows(db) == rows(db, "flat") == [written]


@pytest.mark.parametrize(("change_keys", "named"), [
    ({"delete.enabled": "true", "primary.key.mode": "record_value"}, "delete.enabled"),
    ({"insert.mode": "upsert", "primary.key.mode": None, "delete.enabled": "false"}, "insert.mode"),
    ({"insert.mode": "merge"}, "insert.mode"),
    ({"primary.key.mode": "record_header", "delete.enabled": "false"}, "primary.key.mode"),
    ({"primary.key.mode": "key"}, "primary.key.mode"),
    ({"schema.evolution": "advanced"}, "schema.evolution"),
    ({"field.include.list": "id", "field.exclude.list": "name"}, "field.include.list"),
    ({"collection.naming.strategy": "com.example.Mine"}, "collection.naming.strategy"),
    ({"use.time.zone": "Mars/Olympus"}, "use.time.zone"),
    ({"batch.size": "0"}, "batch.size"),
    ({"connection.url": "jdbc:mysql://h/db"}, "connection.url"),
    ({"connection.url": None}, "connection.url"),
])
def test_invalid_configs_fail_in_one_line_naming_the_key(change_keys, named):
    from klog.connect.errors import ConfigError
    from klog.connect.worker import validate

    config = {k: v for k, v in {**tutorial_config("jdbc:sqlite:x.db"), **change_keys}.items() if v is not None}
    with pytest.raises(ConfigError) as failed:
        validate(config)
    assert failed.value.field == named and "\n" not in str(failed.value) and named in str(failed.value)


def test_hibernate_and_pool_keys_are_accepted_and_named_in_one_warning():
    """Keys of Debezium's Hibernate pool, and a time zone other than UTC (klog writes UTC), in the one
    warning line; the simple name JdbcSinkConnector stays Confluent's sink."""
    from klog.connect.api import find_connector
    from klog.connect.worker import ignored_warning, validate

    v = validate(tutorial_config("jdbc:sqlite:x.db", **{"hibernate.c3p0.max_size": "10",
                                                       "hibernate.dialect": "org.hibernate.dialect.PostgreSQLDialect",
                                                       "connection.pool.max_size": "8",
                                                       "use.time.zone": "Europe/Paris"}))
    warning = ignored_warning(v)
    assert warning is not None and "\n" not in warning
    assert v.ignored == ["connection.pool.max_size", "hibernate.c3p0.max_size", "hibernate.dialect",
                         "use.time.zone=Europe/Paris"]
    assert find_connector("JdbcSinkConnector").java_classes == ("io.confluent.connect.jdbc.JdbcSinkConnector",)


def test_schema_evolution_none_writes_into_an_existing_table_only(tmp_path, data_dir):
    """schema.evolution=none (Debezium's default): rows go into a table that exists; a missing one fails
    the task with a message naming schema.evolution."""
    db = str(tmp_path / "out.db")
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "shop_public_items" (id INTEGER PRIMARY KEY, name TEXT)')
    send(data_dir, HISTORY)
    send(data_dir, [change("c", after={"id": 9, "name": "nine"})], topic="other")
    existing = tutorial_config(f"jdbc:sqlite:{db}", **{"schema.evolution": "none"})
    missing = tutorial_config(f"jdbc:sqlite:{db}", **{"schema.evolution": "none", "name": "missing",
                                                     "topics": "other"})
    with running(data_dir, existing, missing) as w:
        wait_for(lambda: offset(db) == len(HISTORY) and any(r.error for r in w.runners()), what="both")
        errors = [str(r.error) for r in w.runners() if r.error]
    assert rows(db) == [(1, "uno"), (3, "three"), (4, "four")]
    assert len(errors) == 1 and "schema.evolution=none" in errors[0], errors


@pytest.mark.slow
def test_kill_9_mid_stream_loses_and_duplicates_no_row(tmp_path, data_dir):
    """SIGKILL the worker while it sinks change events (insert.mode=insert: a duplicate would fail the
    primary key): each row lands once, the rows and the offsets stored with them agree after every kill."""
    from tests.connect.test_connect_jdbc import _consistent_offset, kill_three_times_mid_way

    db = str(tmp_path / "out.db")
    total = 20_000
    send(data_dir, [change("c", after={"id": i, "name": f"n{i}"}) for i in range(total)], topic="rows")
    config = write_config(str(tmp_path / "sink.json"), tutorial_config(
        f"jdbc:sqlite:{db}", **{"topics": "rows", "insert.mode": "insert", "delete.enabled": "false",
                                "primary.key.mode": "record_value", "primary.key.fields": "id"}))
    killed_at = kill_three_times_mid_way(data_dir, config, db)
    assert any(o < total for o in killed_at), killed_at
    proc = start_cli(data_dir, config)
    wait_started(proc)
    wait_for(lambda: _consistent_offset(db) == total, timeout=120, what="every row")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    with sqlite3.connect(db) as conn:
        assert conn.execute('SELECT count(*), count(DISTINCT id) FROM "rows"').fetchone() == (total, total)


@pytest.mark.slow
def test_debezium_postgres_source_into_a_second_database(pg_db, data_dir, tmp_path):
    """Debezium's tutorial pairing: its PostgreSQL source (JsonConverter with schemas, truncates captured)
    -> a topic -> its JDBC sink, unchanged, into another PostgreSQL table and into SQLite: the snapshot,
    inserts, updates, a key change, deletes and a truncate land as in the source table, column types (uuid,
    json, interval, bit(3), timetz, numeric(10, 2), text[], int[], ...) and values alike."""
    from tests.connect.test_connect_postgres import cdc, table_state

    pg_db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, qty int, at timestamp, day date, "
                  "seen timestamptz, amount numeric, uid uuid, doc json, took interval, flags bit(3), clock timetz, "
                  "price numeric(10, 2), words text[], nums int[])")
    pg_db.execute("INSERT INTO items SELECT g, 'n' || g, g, '2024-02-29 12:34:56.789012'::timestamp + g * "
                  "interval '1 day', '2024-01-01'::date + g, '2024-03-01 10:00:00.5+02', g * 1.25 - 10, "
                  "'0b4a3f8e-9c1d-4e2f-8a7b-6c5d4e3f2a1b', '{\"a\": [1, 2]}', '1 day 02:03:04.5', B'101', "
                  "'10:15:30.5+02', g + 0.25, ARRAY['x', 'y\"z', NULL], ARRAY[g, -g] FROM generate_series(1, 20) g")
    lite = str(tmp_path / "copy.db")
    sink = {"truncate.enabled": "true", "connection.username": pg_db.user, "connection.password": ""}
    to_pg = tutorial_config(pg_db.jdbc_url, **sink, **{"name": "to-pg", "collection.name.format": "items_copy"})
    to_lite = tutorial_config(f"jdbc:sqlite:{lite}", **sink, **{"name": "to-lite",
                                                               "field.include.list": f"{TOPIC}:id,name,qty"})
    source = cdc(pg_db, **{"table.include.list": "public.items", "skipped.operations": "none"})
    with running(data_dir, source, to_pg, to_lite) as w:
        wait_for(lambda: len(values(data_dir, TOPIC)) >= 20, what="the snapshot")
        pg_db.execute("UPDATE items SET qty = qty * 10 WHERE id % 3 = 0")
        pg_db.execute("DELETE FROM items WHERE id % 5 = 0")
        pg_db.execute("INSERT INTO items VALUES (100, 'hundred', 100)")
        pg_db.execute("UPDATE items SET id = 101 WHERE id = 1")

        def copies() -> tuple:
            pg_copy = table_state(pg_db, "items_copy") if pg_db.execute(
                "SELECT to_regclass('items_copy') IS NOT NULL")[0][0] else {}
            lite_copy = {(r[0],): dict(zip(("id", "name", "qty"), r, strict=True)) for r in rows(lite)}
            return pg_copy, lite_copy

        def expected() -> tuple:
            state = table_state(pg_db, "items")
            return state, {k: {c: row[c] for c in ("id", "name", "qty")} for k, row in state.items()}

        wait_for(lambda: copies() == expected() or any(r.error for r in w.runners()), timeout=60,
                 what="both copies to equal the source table")
        assert not [r.error for r in w.runners() if r.error]
        pg_db.execute("TRUNCATE items")
        pg_db.execute("INSERT INTO items VALUES (7, 'after truncate', 7)")
        wait_for(lambda: copies() == expected(), timeout=60, what="the truncate in both copies")
    # Debezium's types became the columns its sink's PostgreSQL dialect creates, not integers, bytes and text;
    # VariableScaleDecimal numeric (Debezium's: double precision, which rounds)
    types = ("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
             "'items_copy'::regclass AND attnum > 0 ORDER BY attnum")
    assert pg_db.execute(types) == [
        ("id", "integer"), ("name", "text"), ("qty", "integer"), ("at", "timestamp without time zone"),
        ("day", "date"), ("seen", "timestamp with time zone"), ("amount", "numeric"), ("uid", "uuid"),
        ("doc", "json"), ("took", "interval"), ("flags", "bit(3)"), ("clock", "time with time zone"),
        ("price", "numeric(10,2)"), ("words", "text[]"), ("nums", "integer[]")]


@pytest.mark.slow
def test_published_unwrap_smt_sink_runs_unchanged(pg_db, data_dir):
    """debezium-examples' unwrap-smt/jdbc-sink.json (refused before: klog had no Debezium sink), only its
    database pointed at the test server, behind Debezium's PostgreSQL source routed as that example's
    source.json routes it (topic `customers`): the customers table copied, then an update and a delete."""
    from tests.connect.test_connect_postgres import cdc, table_state
    from tests.connect.test_connect_published_configs import debezium_customers, published

    debezium_customers(pg_db)
    route = {"transforms": "route", "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
             "transforms.route.regex": "([^.]+)\\.([^.]+)\\.([^.]+)", "transforms.route.replacement": "$3"}
    source = cdc(pg_db, **{"topic.prefix": "dbserver1", "table.include.list": "inventory.customers", **route})
    sink = {**published("debezium-unwrap-smt-jdbc-sink.json"), "connection.url": pg_db.jdbc_url,
            "connection.username": pg_db.user, "connection.password": ""}
    warnings: list[str] = []
    with running(data_dir, source, sink, warnings=warnings):
        def copied() -> bool:
            exists = pg_db.execute("SELECT to_regclass('public.customers') IS NOT NULL")[0][0]
            return exists and table_state(pg_db, "public.customers") == table_state(pg_db, "inventory.customers")

        wait_for(copied, timeout=60, what="the snapshot copied")
        pg_db.execute("INSERT INTO inventory.customers (first_name, last_name, email) VALUES ('Ann', 'K', 'a@k')")
        pg_db.execute("UPDATE inventory.customers SET first_name = 'Anne Marie' WHERE id = 1")
        wait_for(lambda: copied() and len(table_state(pg_db, "public.customers")) == 2, timeout=60,
                 what="the insert and the update")
        pg_db.execute("DELETE FROM inventory.customers WHERE id = 1")
        wait_for(lambda: copied() and len(table_state(pg_db, "public.customers")) == 1, timeout=60,
                 what="the delete")
    assert not [w for w in warnings if "failed" in w], warnings


def test_quote_identifiers_false_folds_names_as_postgresql_does(pg_db, data_dir):
    """quote.identifiers=false (Debezium's default): names are unquoted in Debezium's SQL, so PostgreSQL
    folds them to lower case (topic Shop.Orders -> table shop_orders, field OrderId -> orderid); with true
    they keep their case. A second layout of the table (a field added) widens it, not re-adds its columns."""
    fields = [{"type": "int32", "optional": False, "field": "OrderId"},
              {"type": "string", "optional": True, "field": "Name"}]
    key = {"type": "struct", "optional": False, "fields": fields[:1]}

    def event(row: dict, extra: list) -> tuple:
        schema = {**ROW_SCHEMA, "fields": fields + extra}
        envelope = {**ENVELOPE_SCHEMA, "fields": [{**schema, "field": "before"}, {**schema, "field": "after"},
                                                  *ENVELOPE_SCHEMA["fields"][2:]]}
        return ({"schema": key, "payload": {"OrderId": row["OrderId"]}},
                {"schema": envelope, "payload": {"before": None, "after": row, "source": SOURCE, "op": "c"}})

    send(data_dir, [event({"OrderId": 1, "Name": "a"}, []),
                    event({"OrderId": 2, "Name": "b", "Total": 5}, [{"type": "int32", "optional": True,
                                                                   "field": "Total"}])], topic="Shop.Orders")
    base = {"topics": "Shop.Orders", "connection.username": pg_db.user, "connection.password": ""}
    folded = tutorial_config(pg_db.jdbc_url, **base, name="folded")
    quoted = tutorial_config(pg_db.jdbc_url, **base, **{"name": "quoted", "quote.identifiers": "true"})

    def stored(connector: str) -> int:
        found = pg_db.execute("SELECT next_offset FROM __klog_connect_offsets WHERE connector = %s", (connector,)) \
            if pg_db.execute("SELECT to_regclass('__klog_connect_offsets') IS NOT NULL")[0][0] else []
        return found[0][0] if found else 0

    with running(data_dir, folded, quoted) as w:
        wait_for(lambda: (stored("folded"), stored("quoted")) == (2, 2) or any(r.error for r in w.runners()),
                 what="both records, twice")
        assert not [r.error for r in w.runners() if r.error]
    columns = ("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
               "AND table_name ILIKE 'shop_orders' ORDER BY table_name, ordinal_position")
    assert pg_db.execute(columns) == [("Shop_Orders", "OrderId"), ("Shop_Orders", "Name"), ("Shop_Orders", "Total"),
                                      ("shop_orders", "orderid"), ("shop_orders", "name"), ("shop_orders", "total")]
    assert pg_db.execute("SELECT * FROM shop_orders ORDER BY 1") == [(1, "a", None), (2, "b", 5)]

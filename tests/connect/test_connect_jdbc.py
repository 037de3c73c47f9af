"""The JDBC sink with Confluent's configs: upserts and deletes by key, tables created and evolved, offsets
stored in the database with the rows (exactly-once across kills), into SQLite and a real PostgreSQL."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time

import pytest

import klog
from tests.connect.helpers import running, start_cli, values, wait_for, wait_started, write_config

ROW_SCHEMA = {"type": "struct", "optional": False, "name": "row", "fields": [
    {"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"}]}
KEY_SCHEMA = {"type": "struct", "optional": False, "fields": [{"type": "int32", "optional": False, "field": "id"}]}


def _send(data_dir, topic, items):
    """(id, row or None) as JsonConverter-with-schema records; None is a tombstone."""
    with klog.open(data_dir) as s:
        s.create_topic(topic, partitions=1, exist_ok=True)
        with s.producer() as p:
            for key, row in items:
                k = json.dumps({"schema": KEY_SCHEMA, "payload": {"id": key}}).encode()
                v = None if row is None else json.dumps({"schema": ROW_SCHEMA, "payload": row}).encode()
                p.send(topic, v, key=k)


def sink_config(url, **extra) -> dict:
    return {"name": "jdbc", "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "topics": "rows",
            "connection.url": url, "insert.mode": "upsert", "pk.mode": "record_key", "delete.enabled": "true",
            "auto.create": "true", "auto.evolve": "true", **extra}


def sqlite_rows(path, table="rows"):
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall())


def test_upsert_delete_and_offsets_in_the_database(tmp_path, data_dir):
    db = str(tmp_path / "out.db")
    _send(data_dir, "rows", [(1, {"id": 1, "name": "a"}), (2, {"id": 2, "name": "b"}), (1, {"id": 1, "name": "A"}),
                             (2, None)])
    with running(data_dir, sink_config(f"jdbc:sqlite:{db}")):
        wait_for(lambda: _offset(db) == 4, what="the four records")
    assert sqlite_rows(db) == [(1, "A")]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT connector, topic, kafka_partition, next_offset FROM __klog_connect_offsets") \
            .fetchall() == [("jdbc", "rows", 0, 4)]


def _offset(db):
    try:
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT next_offset FROM __klog_connect_offsets").fetchall()
        return rows[0][0] if rows else None
    except sqlite3.OperationalError:
        return None


def test_offsets_in_the_database_win_over_the_groups(tmp_path, data_dir):
    """The database's offsets are the truth: rows it holds are not written again even when the consumer
    group's commit is behind (a kill between the database commit and the group commit)."""
    db = str(tmp_path / "out.db")
    _send(data_dir, "rows", [(1, {"id": 1, "name": "a"}), (2, {"id": 2, "name": "b"})])
    config = sink_config(f"jdbc:sqlite:{db}", **{"insert.mode": "insert"})  # a duplicate insert would fail
    with running(data_dir, config):
        wait_for(lambda: _offset(db) == 2)
    with klog.open(data_dir) as s:  # the group forgets: as if killed before committing
        s.delete_group("connect-jdbc")
    _send(data_dir, "rows", [(3, {"id": 3, "name": "c"})])
    with running(data_dir, config) as w:
        wait_for(lambda: _offset(db) == 3 or any(r.error for r in w.runners()))
        assert not any(r.error for r in w.runners())
    assert sqlite_rows(db) == [(1, "a"), (2, "b"), (3, "c")]


def test_auto_evolve_adds_a_column_and_schemaless_json_is_inferred(tmp_path, data_dir):
    db = str(tmp_path / "out.db")
    with klog.open(data_dir) as s:
        s.create_topic("rows", partitions=1)
        with s.producer() as p:
            p.send("rows", b'{"id": 1, "name": "a"}', key=b'{"id": 1}')
            p.send("rows", b'{"id": 2, "name": "b", "score": 2.5}', key=b'{"id": 2}')
    config = sink_config(f"jdbc:sqlite:{db}", **{"key.converter": "json", "value.converter": "json",
                                                  "key.converter.schemas.enable": "false",
                                                  "value.converter.schemas.enable": "false"})
    with running(data_dir, config):
        wait_for(lambda: _offset(db) == 2)
    assert sqlite_rows(db) == [(1, "a", None), (2, "b", 2.5)]


def test_pk_modes_record_value_and_kafka_and_insert_mode_update(tmp_path, data_dir):
    """Confluent's other key and write modes, each a connector over the same three records:
    pk.mode=record_value with pk.fields (an upsert by the value's id), pk.mode=kafka (a row per
    record, keyed by its topic, partition and offset), insert.mode=update (existing rows changed,
    none added)."""
    db = str(tmp_path / "out.db")
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "updated" (id INTEGER PRIMARY KEY, name TEXT)')
        conn.execute("INSERT INTO updated VALUES (1, 'x')")
    _send(data_dir, "rows", [(1, {"id": 1, "name": "a"}), (2, {"id": 2, "name": "b"}), (1, {"id": 1, "name": "A"})])
    by_value = sink_config(f"jdbc:sqlite:{db}", **{"name": "by-value", "pk.mode": "record_value",
                                                    "pk.fields": "id", "delete.enabled": "false",
                                                    "table.name.format": "by_value"})
    by_kafka = sink_config(f"jdbc:sqlite:{db}", **{"name": "by-kafka", "pk.mode": "kafka", "insert.mode": "insert",
                                                    "delete.enabled": "false", "table.name.format": "by_kafka"})
    update = sink_config(f"jdbc:sqlite:{db}", **{"name": "update", "insert.mode": "update",
                                                  "table.name.format": "updated"})

    def offsets() -> dict:
        try:
            with sqlite3.connect(db) as conn:
                return dict(conn.execute("SELECT connector, next_offset FROM __klog_connect_offsets").fetchall())
        except sqlite3.OperationalError:
            return {}

    with running(data_dir, by_value, by_kafka, update):
        wait_for(lambda: offsets() == {"by-value": 3, "by-kafka": 3, "update": 3}, what="the three records, thrice")
    assert sqlite_rows(db, "by_value") == [(1, "A"), (2, "b")]
    assert sqlite_rows(db, "by_kafka") == [("rows", 0, 0, 1, "a"), ("rows", 0, 1, 2, "b"), ("rows", 0, 2, 1, "A")]
    assert sqlite_rows(db, "updated") == [(1, "A")]
    with sqlite3.connect(db) as conn:
        keys = {t: [c[1] for c in sorted(conn.execute(f'PRAGMA table_info("{t}")'), key=lambda c: c[5]) if c[5]]
                for t in ("by_value", "by_kafka")}
    assert keys == {"by_value": ["id"], "by_kafka": ["__connect_topic", "__connect_partition", "__connect_offset"]}


def test_invalid_sink_configs_name_the_field(tmp_path):
    from klog.connect.errors import ConfigError
    from klog.connect.worker import validate

    with pytest.raises(ConfigError, match="delete.enabled"):
        validate(sink_config("jdbc:sqlite:x.db", **{"pk.mode": "record_value"}))
    with pytest.raises(ConfigError, match="connection.url"):
        validate(sink_config("jdbc:mysql://h/db"))
    with pytest.raises(ConfigError, match="insert.mode"):
        validate(sink_config("jdbc:sqlite:x.db", **{"insert.mode": "merge"}))


def kill_three_times_mid_way(data_dir, config: str, db: str) -> list[int]:
    """Start the sink worker (`klog connect run config`) and SIGKILL it once it has committed more rows,
    three times; the offsets the database held after each kill."""
    killed_at = []
    for _ in range(3):
        proc = start_cli(data_dir, config)
        wait_started(proc)
        before = _consistent_offset(db)
        wait_for(lambda b=before, p=proc: _consistent_offset(db) > b or p.poll() is not None, timeout=60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        killed_at.append(_consistent_offset(db))
    return killed_at


def _consistent_offset(db) -> int:
    """The next offset the database holds, read in one transaction with the rows: each put commits
    its rows and their offset together, so a reader (or a crash) never finds one without the other
    (insert.mode=insert from offset 0: as many rows as the offset)."""
    from contextlib import closing

    try:
        with closing(sqlite3.connect(db, timeout=30)) as conn:
            conn.execute("BEGIN")
            offset = conn.execute("SELECT next_offset FROM __klog_connect_offsets").fetchone()
            rows = conn.execute('SELECT count(*) FROM "rows"').fetchone()[0]
    except sqlite3.OperationalError:  # no table yet
        return 0
    assert rows == (offset[0] if offset else 0), f"{rows} rows and next offset {offset}"
    return rows


@pytest.mark.slow
def test_kill_9_during_a_sink_loses_and_duplicates_nothing(tmp_path, data_dir):
    """SIGKILL the worker at several points of a long sink: the table ends with every row once, and
    the rows and the offsets stored with them agree whenever they are read (meanwhile and after a kill)."""
    db = str(tmp_path / "out.db")
    total = 20_000
    _send(data_dir, "rows", [(i, {"id": i, "name": f"n{i}"}) for i in range(total)])
    config = write_config(str(tmp_path / "sink.json"), sink_config(f"jdbc:sqlite:{db}", **{"insert.mode": "insert"}))
    done = threading.Event()
    disagreements: list[str] = []

    def read_meanwhile() -> None:  # a reader of the database all along, as fast as it can (bounded in time)
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            try:
                _consistent_offset(db)
            except AssertionError as e:
                disagreements.append(str(e))

    reader = threading.Thread(target=read_meanwhile, daemon=True)
    reader.start()
    try:
        killed_at = kill_three_times_mid_way(data_dir, config, db)
        assert any(o < total for o in killed_at), killed_at  # the kills landed mid-way
        proc = start_cli(data_dir, config)
        wait_started(proc)
        wait_for(lambda: _consistent_offset(db) == total, timeout=120, what="every row")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        done.set()
        reader.join(30)
    assert not disagreements, disagreements[:3]
    with sqlite3.connect(db) as conn:
        assert conn.execute('SELECT count(*), count(DISTINCT id) FROM "rows"').fetchone() == (total, total)


@pytest.mark.slow
def test_cdc_topic_sinks_into_sqlite_and_postgresql_equal_to_the_source(pg_db, data_dir, tmp_path):
    from tests.connect.test_connect_postgres import cdc, table_state

    pg_db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, qty int)")
    pg_db.execute("INSERT INTO items SELECT g, 'n' || g, g FROM generate_series(1, 50) g")
    unwrap = {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
              "topics": "shop.public.items"}
    lite = str(tmp_path / "copy.db")
    to_sqlite = {**sink_config(f"jdbc:sqlite:{lite}", **unwrap), "name": "to-sqlite",
                 "table.name.format": "items"}
    to_pg = {**sink_config(pg_db.jdbc_url, **unwrap), "name": "to-pg", "table.name.format": "items_copy"}
    with running(data_dir, cdc(pg_db, **{"table.include.list": "public.items"}), to_sqlite, to_pg):
        wait_for(lambda: len(values(data_dir, "shop.public.items")) >= 50, what="the snapshot")
        pg_db.execute("UPDATE items SET qty = qty * 10 WHERE id % 3 = 0")
        pg_db.execute("DELETE FROM items WHERE id % 5 = 0")
        pg_db.execute("INSERT INTO items VALUES (100, 'hundred', 100)")
        pg_db.execute("UPDATE items SET id = 101 WHERE id = 1")
        expected = table_state(pg_db, "items")

        def copies_match() -> bool:
            try:
                lite_rows = {(r[0],): dict(zip(("id", "name", "qty"), r, strict=True))
                             for r in sqlite_rows(lite, "items")}
            except sqlite3.OperationalError:
                return False
            pg_copy = table_state(pg_db, "items_copy") if pg_db.execute(
                "SELECT to_regclass('items_copy') IS NOT NULL")[0][0] else {}
            return lite_rows == expected and pg_copy == expected

        wait_for(copies_match, timeout=60, what="both copies to equal the source table")
    # auto.create made Confluent's column types (INT32 INTEGER, STRING TEXT) and the key the primary key
    types = ("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s "
             "ORDER BY ordinal_position")
    assert pg_db.execute(types, ("items_copy",)) == pg_db.execute(types, ("items",)) == [
        ("id", "integer"), ("name", "text"), ("qty", "integer")]
    with sqlite3.connect(lite) as conn:
        assert [(c[1], c[2], c[5]) for c in conn.execute('PRAGMA table_info("items")')] == [
            ("id", "INTEGER", 1), ("name", "TEXT", 0), ("qty", "INTEGER", 0)]


def test_rows_of_changing_layouts_in_one_batch_and_a_poison_record(tmp_path, data_dir):
    """One batch mixing two layouts of a table (a column added, then the first layout again), a delete,
    and a record that is not JSON: each row lands as its own layout says (the per-layout statement
    plans never apply one layout's columns to another), the poison record goes to the DLQ."""
    db = str(tmp_path / "out.db")
    wide = {**ROW_SCHEMA, "fields": [*ROW_SCHEMA["fields"], {"type": "int64", "optional": True, "field": "score"}]}
    poison = b'{"schema": {"type": "struct"'

    def envelope(schema: dict, payload: object) -> bytes:
        return json.dumps({"schema": schema, "payload": payload}).encode()

    with klog.open(data_dir) as s:
        s.create_topic("rows", partitions=1)
        with s.producer() as p:
            for key, value in [(1, envelope(ROW_SCHEMA, {"id": 1, "name": "a"})),
                               (2, envelope(wide, {"id": 2, "name": "b", "score": 20})),
                               (3, envelope(ROW_SCHEMA, {"id": 3, "name": "c"})),
                               (9, poison),
                               (1, envelope(wide, {"id": 1, "name": "A", "score": 10})),
                               (3, None),
                               (4, envelope(ROW_SCHEMA, {"id": 4, "name": None}))]:
                p.send("rows", value, key=envelope(KEY_SCHEMA, {"id": key}))
    config = sink_config(f"jdbc:sqlite:{db}", **{"errors.tolerance": "all",
                                                  "errors.deadletterqueue.topic.name": "dlq"})
    with running(data_dir, config):
        wait_for(lambda: _offset(db) == 7, what="the seven records")
    assert sqlite_rows(db) == [(1, "A", 10), (2, "b", 20), (4, None, None)]
    assert values(data_dir, "dlq") == [poison]


@pytest.mark.parametrize("connector", ["sink", "source"])
def test_pgjdbc_url_parameters_klog_does_not_pass_on_are_named(connector):
    """currentSchema, user, password, sslmode... are used; any other pgjdbc parameter is named in the
    connector's warning instead of being dropped silently, by the sink and the source alike (the
    source's were silent)."""
    pytest.importorskip("psycopg2")
    from klog.connect.worker import validate

    url = ("jdbc:postgresql://127.0.0.1:5432/db?currentSchema=s&user=u&password=p&sslmode=disable"
           "&reWriteBatchedInserts=true&stringtype=unspecified")
    config = sink_config(url) if connector == "sink" else {
        "name": "src", "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector", "connection.url": url,
        "mode": "bulk", "topic.prefix": "t-"}
    v = validate(config)
    assert v.ignored == ["connection.url parameter reWriteBatchedInserts", "connection.url parameter stringtype"]


def test_auto_create_not_null_and_defaults_as_confluent(tmp_path, data_dir):
    """auto.create: a required field is NOT NULL, unless it has a default: Confluent's writeColumnSpec writes
    DEFAULT then, the value as its formatColumnValue does (klog wrote none); an optional one nullable."""
    ts = {"name": "org.apache.kafka.connect.data.Timestamp", "version": 1}
    schema = {"type": "struct", "optional": False, "fields": [
        {"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": False, "field": "a"},
        {"type": "string", "optional": False, "default": "it's", "field": "b"},
        {"type": "string", "optional": True, "field": "c"},
        {"type": "int64", "optional": False, "default": 0, "field": "n", **ts},
        {"type": "boolean", "optional": True, "default": True, "field": "ok"},
        {"type": "bytes", "optional": False, "default": "AJY=", "field": "price",
         "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}]}
    with klog.open(data_dir) as s:
        s.create_topic("rows", partitions=1)
        with s.producer() as p:
            p.send("rows", json.dumps({"schema": schema, "payload": {"id": 1, "a": "a", "b": "b", "c": None, "n": 5,
                                                                     "ok": False, "price": "AJY="}}).encode())
    db = str(tmp_path / "out.db")
    with running(data_dir, sink_config(f"jdbc:sqlite:{db}", **{"pk.mode": "record_value", "pk.fields": "id",
                                                          "delete.enabled": "false"})):
        wait_for(lambda: _offset(db) == 1, what="the record")
    with sqlite3.connect(db) as conn:
        assert [(r[1], r[3], r[4]) for r in conn.execute('PRAGMA table_info("rows")')] == [
            ("id", 1, None), ("a", 1, None), ("b", 0, "'it''s'"), ("c", 0, None),
            ("n", 0, "'1970-01-01 00:00:00.000'"), ("ok", 0, "1"), ("price", 0, "1.50")]


def test_timestamps_into_postgresql_are_utc_whatever_the_servers_time_zone(pg_db, data_dir):
    """A Connect Timestamp is an instant: written as UTC (Confluent's db.timezone default) into a timestamptz
    and a timestamp column alike, with the database's TimeZone New York's (the timestamptz was read in the
    session's zone: five hours late)."""
    pg_db.execute(f"ALTER DATABASE \"{pg_db.dbname}\" SET timezone TO 'America/New_York'")
    pg_db.execute("CREATE TABLE rows (id int PRIMARY KEY, at timestamptz, plain timestamp)")
    ts = {"type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1}
    schema = {"type": "struct", "optional": False, "fields": [
        {"type": "int32", "optional": False, "field": "id"}, {**ts, "field": "at"}, {**ts, "field": "plain"}]}
    with klog.open(data_dir) as s:
        s.create_topic("rows", partitions=1)
        with s.producer() as p:
            p.send("rows", json.dumps({"schema": schema, "payload": {"id": 1, "at": 1_577_836_800_000,
                                                                     "plain": 1_577_836_800_000}}).encode())
    config = sink_config(pg_db.jdbc_url, **{"pk.mode": "record_value", "pk.fields": "id", "delete.enabled": "false",
                                            "auto.create": "false"})
    with running(data_dir, config):
        wait_for(lambda: pg_db.execute("SELECT count(*) FROM rows") == [(1,)], what="the row")
    assert pg_db.execute("SELECT extract(epoch FROM at)::bigint, plain::text FROM rows") == [
        (1_577_836_800, "2020-01-01 00:00:00")]


def test_a_row_the_database_refuses_goes_to_the_dlq_through_the_worker(tmp_path, data_dir):
    """errors.tolerance=all with a DLQ: a record whose row the database refuses (a NOT NULL column sent
    null) lands in the DLQ as it was consumed, the rows around it are written; without a DLQ the task
    fails with a message naming the record (it failed with the driver's bare IntegrityError)."""
    db = str(tmp_path / "out.db")
    strict = {**ROW_SCHEMA, "fields": [ROW_SCHEMA["fields"][0], {"type": "string", "optional": False,
                                                                  "field": "name"}]}
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "rows" (id INTEGER PRIMARY KEY, name TEXT NOT NULL)')
    refused = json.dumps({"schema": ROW_SCHEMA, "payload": {"id": 2, "name": None}}).encode()
    with klog.open(data_dir) as s:
        s.create_topic("rows", partitions=1)
        with s.producer() as p:
            for key, value in [(1, json.dumps({"schema": strict, "payload": {"id": 1, "name": "a"}}).encode()),
                               (2, refused),
                               (3, json.dumps({"schema": strict, "payload": {"id": 3, "name": "c"}}).encode())]:
                p.send("rows", value, key=json.dumps({"schema": KEY_SCHEMA, "payload": {"id": key}}).encode())
    config = sink_config(f"jdbc:sqlite:{db}", **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"})
    with running(data_dir, config):
        wait_for(lambda: _offset(db) == 3, what="the three records")
    assert sqlite_rows(db) == [(1, "a"), (3, "c")] and values(data_dir, "dlq") == [refused]
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM __klog_connect_offsets")
        conn.execute('DELETE FROM "rows"')
    with running(data_dir, {**sink_config(f"jdbc:sqlite:{db}"), "name": "strict"}) as w:
        wait_for(lambda: any(r.error for r in w.runners()), what="the task to fail")
        error = str(next(r.error for r in w.runners() if r.error))
    assert "rows-0@1 was refused by the database: NOT NULL constraint failed: rows.name" in error, error

"""The one JDBC sink (both faces) fed hostile names and Debezium's awkward event sequences: table names
from record data (${source.table}) and column names from record schemas run nothing but the intended
statement; a name quoting cannot carry, or one naming the offsets table, fails that record into the
errant record reporter (errors.tolerance, the DLQ) with a message naming it. Driven through the task
directly (start, open, put) against SQLite: each test well under a second."""

from __future__ import annotations

import sqlite3
import time

import pytest

from klog.connect.api import TaskContext
from klog.connect.connectors.debezium_jdbc import DebeziumJdbcSinkTask
from klog.connect.connectors.jdbc import JdbcSinkTask, PostgresDialect
from klog.connect.data import ConnectRecord
from klog.connect.errors import ConfigError, DataError

ROW_FIELDS = [{"type": "int32", "optional": False, "field": "id"},
              {"type": "string", "optional": True, "field": "name"}]
KEY_SCHEMA = {"type": "struct", "optional": False, "fields": [{"type": "int32", "optional": False, "field": "id"}]}
ROW_SCHEMA = {"type": "struct", "optional": True, "name": "shop.public.items.Value", "fields": ROW_FIELDS}
SOURCE_SCHEMA = {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "fields": [
    {"type": "string", "optional": False, "field": "db"}, {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"}, {"type": "int64", "optional": False, "field": "ts_ms"}]}
ENVELOPE_SCHEMA = {"type": "struct", "optional": False, "name": "shop.public.items.Envelope", "fields": [
    {**ROW_SCHEMA, "field": "before"}, {**ROW_SCHEMA, "field": "after"}, {**SOURCE_SCHEMA, "field": "source"},
    {"type": "string", "optional": False, "field": "op"}]}
TOPIC = "shop.public.items"


class Sink:
    """A sink task over an SQLite file, its warnings and the records it reported as errant."""

    def __init__(self, db: str, props: dict[str, str], task_class: type = DebeziumJdbcSinkTask,
                 reporter: bool = True) -> None:
        self.db, self.reported, self.warnings, self.offset = db, [], [], 0
        self.task = task_class()
        self.task.initialize(TaskContext("hostile", 0, self.warnings.append,
                                         errant_reporter=self._report if reporter else None))
        url = db if db.startswith("jdbc:") else f"jdbc:sqlite:{db}"
        self.task.start({"connection.url": url, **props})
        self.task.open([(TOPIC, 0)])

    def _report(self, record: ConnectRecord, error: BaseException) -> None:
        self.reported.append((record.kafka_offset, str(error)))

    def put(self, *values: tuple) -> None:
        """(key, value schema, value) triples as consecutive records of TOPIC."""
        records = []
        for key, schema, value in values:
            records.append(ConnectRecord(TOPIC, 0, KEY_SCHEMA if key is not None else None,
                                         None if key is None else {"id": key}, schema, value, kafka_offset=self.offset))
            self.offset += 1
        self.task.put(records)

    def tables(self) -> set[str]:
        with sqlite3.connect(self.db) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def rows(self, table: str) -> list:
        with sqlite3.connect(self.db) as conn:
            return sorted(conn.execute(f'SELECT * FROM "{table.replace(chr(34), chr(34) * 2)}"').fetchall())

    def next_offset(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return conn.execute("SELECT next_offset FROM __klog_connect_offsets").fetchone()[0]


DEBEZIUM = {"insert.mode": "upsert", "delete.enabled": "true", "primary.key.mode": "record_key",
            "schema.evolution": "basic"}
BY_SOURCE = {**DEBEZIUM, "collection.name.format": "${source.table}"}


def change(op: str, key: int, after: dict | None, source_table: object = "items", before: dict | None = None,
           **source: object) -> tuple:
    src = {"db": "shop", "schema": "public", "table": source_table, "ts_ms": 0, **source}
    return key, ENVELOPE_SCHEMA, {"before": before, "after": after, "source": src, "op": op}


@pytest.fixture
def victim(tmp_path) -> str:
    """A database holding a table `y` an injected statement would drop or change."""
    db = str(tmp_path / "out.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE y (v TEXT)")
        conn.execute("INSERT INTO y VALUES ('kept')")
    return db


@pytest.mark.parametrize("name", ["x; DROP TABLE y; --", 'q"uo"te', "it's", "with space", "ünïcödé ☃", "Mixed",
                                  "select", "t" * 200, "y\"; DELETE FROM y; --"])
def test_hostile_source_table_names_are_one_quoted_name_each(victim, name):
    """Quotes, semicolons, spaces, unicode, a reserved word and 200 characters are all part of one quoted
    name: the row lands in a table of exactly that name, upserted then deleted, and `y` is untouched."""
    sink = Sink(victim, BY_SOURCE)
    sink.put(change("c", 1, {"id": 1, "name": "a"}, name), change("c", 2, {"id": 2, "name": "b"}, name),
             change("u", 1, {"id": 1, "name": "A"}, name), change("d", 2, None, name, before={"id": 2}))
    assert sink.reported == [] and sink.rows("y") == [("kept",)]
    assert sink.tables() == {"y", "__klog_connect_offsets", name}
    assert sink.rows(name) == [(1, "A")] and sink.next_offset() == 4


@pytest.mark.parametrize(("name", "why"), [
    ("", "is empty"), ("a\x00b", "NUL"), ("public.y", "not a name without dots"), ("x.", "not a name without dots"),
    ("__klog_connect_offsets", "keeps its offsets"), ("sqlite_master", "reserved by SQLite"),
    ("SQLITE_sequence", "reserved by SQLite")])
def test_table_names_quoting_cannot_carry_fail_that_record_only(victim, name, why):
    """An empty name, a NUL, a dot (another schema's table), the offsets table or SQLite's own tables: the
    record goes to the errant record reporter naming it, the records around it are written, the offsets
    table keeps its layout and `y` is untouched. (The sink wrote into `y` for `public.y`, into the offsets
    table for its name, a table named "" for the empty name.)"""
    sink = Sink(victim, BY_SOURCE)
    sink.put(change("c", 1, {"id": 1, "name": "a"}), change("c", 2, {"id": 2, "name": "b"}, name),
             change("c", 3, {"id": 3, "name": "c"}))
    assert [o for o, _ in sink.reported] == [1] and why in sink.reported[0][1], sink.reported
    assert "shop.public.items-0@1" in sink.reported[0][1]
    assert sink.rows("items") == [(1, "a"), (3, "c")] and sink.rows("y") == [("kept",)]
    assert sink.tables() == {"y", "__klog_connect_offsets", "items"} and sink.next_offset() == 3
    with sqlite3.connect(victim) as conn:
        assert [c[1] for c in conn.execute("PRAGMA table_info(__klog_connect_offsets)")] == [
            "connector", "topic", "kafka_partition", "next_offset"]


def test_without_a_reporter_the_task_fails_naming_the_record(victim):
    sink = Sink(victim, BY_SOURCE, reporter=False)
    with pytest.raises(DataError, match=r"shop.public.items-0@0 names the table '__klog_connect_offsets'"):
        sink.put(change("c", 1, {"id": 1, "name": "a"}, "__klog_connect_offsets"))
    assert sink.rows("y") == [("kept",)]


@pytest.mark.parametrize(("name_format", "source", "found"), [
    ("${source.nosuch}", {}, "no such field"), ("${source.ts_ms}", {}, "0"),
    ("${source.schema}_${source.table}", {"schema": None}, "None")])
def test_source_placeholders_without_a_string_fail_the_record(victim, name_format, source, found):
    """Debezium's naming reads the source field as a string (its getString throws for an unknown field or
    another type): the record fails naming the placeholder (klog created a table named "None" or "0")."""
    sink = Sink(victim, {**DEBEZIUM, "collection.name.format": name_format})
    sink.put(change("c", 1, {"id": 1, "name": "a"}, **source))
    assert len(sink.reported) == 1 and found in sink.reported[0][1], sink.reported
    assert "${source." in sink.reported[0][1]
    assert sink.tables() == {"y", "__klog_connect_offsets"}


@pytest.mark.parametrize("name_format", ["${topic}_${tpoic}", "${source}", "${source.}", "x_${database}"])
def test_unknown_placeholders_in_collection_name_format_are_a_config_error(name_format):
    """Debezium leaves an unknown ${...} in the name (a table called `x_${database}`); klog refuses the
    config in one line naming the key and the placeholder."""
    from klog.connect.worker import validate

    config = {"name": "n", "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "topics": TOPIC,
              "connection.url": "jdbc:sqlite:x.db", **DEBEZIUM, "collection.name.format": name_format}
    with pytest.raises(ConfigError) as failed:
        validate(config)
    assert failed.value.field == "collection.name.format" and "\n" not in str(failed.value)
    assert name_format.split("${")[-1].rstrip("}") in str(failed.value)
    old_name = {k: v for k, v in config.items() if k != "collection.name.format"}
    with pytest.raises(ConfigError) as failed:
        validate({**old_name, "table.name.format": name_format})
    assert failed.value.field == "table.name.format"


def test_hostile_column_names_are_quoted_and_an_empty_one_fails_its_record(victim):
    """Column names come from the record's schema: quotes and semicolons stay inside one name (the table
    created and evolved with them), sqlite_* is a column name SQLite takes; an empty one fails that record
    only."""
    evil = 'x"; DROP TABLE y; --'
    schema = {"type": "struct", "optional": False, "fields": [*ROW_FIELDS, {"type": "string", "optional": True,
                                                                            "field": evil},
                                                              {"type": "int32", "optional": True,
                                                               "field": "sqlite_version"}]}
    empty = {"type": "struct", "optional": False, "fields": [*ROW_FIELDS, {"type": "string", "optional": True,
                                                                           "field": ""}]}
    sink = Sink(victim, DEBEZIUM)
    sink.put((1, ROW_SCHEMA, {"id": 1, "name": "a"}),
             (2, schema, {"id": 2, "name": "b", evil: "e", "sqlite_version": 3}),
             (3, empty, {"id": 3, "name": "c", "": "?"}))
    assert [o for o, _ in sink.reported] == [2] and "column name ''" in sink.reported[0][1]
    assert sink.rows("shop_public_items") == [(1, "a", None, None), (2, "b", "e", 3)]
    assert sink.rows("y") == [("kept",)]


def test_postgresql_names_longer_than_63_bytes_are_refused_not_cut_short():
    """PostgreSQL cuts names to 63 bytes (NAMEDATALEN): two source tables sharing those would be one table
    (and two such columns one column). UTF-8 bytes count, after case folding."""
    d = PostgresDialect("jdbc:postgresql://127.0.0.1/db", "u", "")
    assert d.identifier_problem("t" * 63) is None
    assert "63 bytes" in d.identifier_problem("t" * 64)
    assert "63 bytes" in d.identifier_problem("é" * 32)  # 64 bytes
    assert d.identifier_problem('x"; DROP TABLE y; --') is None and d.identifier_problem("") == "is empty"


@pytest.mark.parametrize("face", ["debezium", "confluent"])
def test_a_primary_key_field_the_value_lacks_fails_the_record_naming_it(tmp_path, face):
    """primary.key.mode=record_value (pk.mode) naming a field the value lacks: the record fails with
    Confluent's FieldsMetadata text naming the field (the whole batch failed on the driver's NOT NULL
    error for the key column, naming no record, and no DLQ could take it)."""
    props = ({"primary.key.mode": "record_value", "primary.key.fields": "ident", "insert.mode": "upsert",
              "schema.evolution": "basic"} if face == "debezium" else
             {"pk.mode": "record_value", "pk.fields": "ident", "insert.mode": "upsert", "auto.create": "true"})
    sink = Sink(str(tmp_path / "out.db"), props, DebeziumJdbcSinkTask if face == "debezium" else JdbcSinkTask)
    sink.put((1, ROW_SCHEMA, {"id": 1, "name": "a"}), (1, ROW_SCHEMA, {"id": 1, "name": "b"}))
    sink.task.stop()
    assert [o for o, _ in sink.reported] == [0, 1]
    assert "does not contain field: ident" in sink.reported[0][1]
    assert sink.tables() == {"__klog_connect_offsets"} and sink.next_offset() == 2


# -- Debezium's event sequences ------------------------------------------------------------------------
def test_a_changed_primary_key_is_a_delete_then_a_create(tmp_path):
    """Debezium's PostgreSQL source emits an update of the key as a delete of the old key, its tombstone,
    then a create of the new: the old row goes, the new one is written; a tombstone after a delete is a
    no-op; op=r snapshot rows are upserts."""
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM)
    sink.put(change("r", 1, {"id": 1, "name": "a"}), change("r", 2, {"id": 2, "name": "b"}),
             change("d", 1, None, before={"id": 1, "name": "a"}), (1, None, None),
             change("c", 10, {"id": 10, "name": "a"}, before=None), change("r", 2, {"id": 2, "name": "B"}))
    assert sink.reported == [] and sink.rows("shop_public_items") == [(2, "B"), (10, "a")]


def test_delete_disabled_skips_deletes_and_tombstones(tmp_path):
    sink = Sink(str(tmp_path / "out.db"), {**DEBEZIUM, "delete.enabled": "false"})
    sink.put(change("c", 1, {"id": 1, "name": "a"}), change("d", 1, None, before={"id": 1}), (1, None, None))
    assert sink.reported == [] and sink.rows("shop_public_items") == [(1, "a")] and sink.next_offset() == 3


def test_a_record_of_the_older_schema_after_a_column_was_added(tmp_path):
    """Schema evolution mid-stream: the wider layout adds the column; a later record of the older layout
    upserts its columns and leaves the added one as it was."""
    wide = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "int32", "optional": True, "field": "score"}]}
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM)
    sink.put((1, ROW_SCHEMA, {"id": 1, "name": "a"}), (1, wide, {"id": 1, "name": "b", "score": 7}),
             (1, ROW_SCHEMA, {"id": 1, "name": "c"}), (2, ROW_SCHEMA, {"id": 2, "name": "d"}))
    assert sink.rows("shop_public_items") == [(1, "c", 7), (2, "d", None)]


def test_insert_mode_update_of_a_missing_row_writes_nothing(tmp_path):
    """As Debezium's and Confluent's sinks: an UPDATE matching no row is no error and inserts nothing."""
    db = str(tmp_path / "out.db")
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE shop_public_items (id INTEGER PRIMARY KEY, name TEXT)')
        conn.execute("INSERT INTO shop_public_items VALUES (1, 'a')")
    sink = Sink(db, {**DEBEZIUM, "insert.mode": "update", "delete.enabled": "false"})
    sink.put((1, ROW_SCHEMA, {"id": 1, "name": "A"}), (2, ROW_SCHEMA, {"id": 2, "name": "b"}))
    assert sink.reported == [] and sink.rows("shop_public_items") == [(1, "A")] and sink.next_offset() == 2


def test_hostile_names_into_postgresql(pg_db):
    """PostgreSQL's side (its quoting, case folding with quote.identifiers=false, TRUNCATE, 63-byte names):
    each hostile source table is one table of that (folded) name, created, upserted, truncated; a name past
    63 bytes fails its record instead of being cut short into another table's; `y` is untouched."""
    pg_db.execute("CREATE TABLE y (v TEXT)")
    pg_db.execute("INSERT INTO y VALUES ('kept')")
    names = ["x; DROP TABLE y; --", 'q"uo"te', "Mixed Case", "ünï ☃", "t" * 63]
    long_a, long_b = "u" * 63 + "a", "u" * 63 + "b"
    sink = Sink(pg_db.jdbc_url, {**BY_SOURCE, "connection.username": pg_db.user, "truncate.enabled": "true"})
    sink.put(*[change("c", i, {"id": i, "name": n}, n) for i, n in enumerate(names)],
             change("c", 1, {"id": 1, "name": "A"}, 'q"uo"te'), change("c", 9, {"id": 9, "name": "a"}, long_a),
             change("c", 9, {"id": 9, "name": "b"}, long_b), change("t", 0, None, "x; DROP TABLE y; --"))
    sink.task.stop()
    assert [o for o, _ in sink.reported] == [6, 7] and all("63 bytes" in e for _, e in sink.reported)
    tables = {r[0] for r in pg_db.execute("SELECT table_name FROM information_schema.tables "
                                          "WHERE table_schema = 'public'")}
    assert tables == {"y", "__klog_connect_offsets", "x; drop table y; --", 'q"uo"te', "mixed case", "ünï ☃",
                      "t" * 63}
    assert pg_db.execute("SELECT * FROM y") == [("kept",)]
    assert pg_db.execute('SELECT * FROM "x; drop table y; --"') == []
    assert pg_db.execute('SELECT * FROM "q""uo""te"') == [(1, "A")]
    assert pg_db.execute('SELECT * FROM "ünï ☃"') == [(3, "ünï ☃")]


def test_tasks_creating_and_widening_the_same_postgresql_tables_at_once(pg_db):
    """tasks.max > 1 (or two connectors on one database): tasks start together, each creating the offsets
    table, and write the same new table, each creating then widening it. PostgreSQL's CREATE TABLE IF NOT
    EXISTS and ADD COLUMN race (a unique violation on pg_type, a duplicate column) and failed a task; the
    sink now serializes its DDL per table (an advisory lock) and looks again after taking it."""
    import threading

    wide = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "int32", "optional": True, "field": "score"}]}
    props = {**DEBEZIUM, "connection.username": pg_db.user}
    for attempt in range(3):
        table = f"t{attempt}"
        barrier, errors = threading.Barrier(4), []

        def task(n: int, table: str = table, barrier: threading.Barrier = barrier, errors: list = errors) -> None:
            try:
                barrier.wait()
                sink = Sink(pg_db.jdbc_url, {**props, "collection.name.format": table,
                                             "exactly.once.offsets.table": f"offsets_{table}"})
                sink.offset = n * 10
                sink.put((n, ROW_SCHEMA, {"id": n, "name": "a"}), (100 + n, wide, {"id": 100 + n, "name": "b",
                                                                                  "score": n}))
                sink.task.stop()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=task, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(pg_db.execute(f"SELECT * FROM {table}")) == 8


REQUIRED = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "string", "optional": False, "field": "must"}]}


def test_a_row_the_database_refuses_fails_that_record_only(tmp_path):
    """A NOT NULL column without a value (a required field sent null): the batch is written record by
    record (Confluent's unrollAndRetry), the refused one reported naming it and the database's reason, the
    others written with their offsets; a record refused by a name check in the same batch is reported once,
    not again by the unrolled pass. (The whole batch failed on the driver's IntegrityError.)"""
    sink = Sink(str(tmp_path / "out.db"), BY_SOURCE)
    envelope = {**ENVELOPE_SCHEMA, "fields": [{**REQUIRED, "field": "before"}, {**REQUIRED, "field": "after"},
                                              *ENVELOPE_SCHEMA["fields"][2:]]}
    sink.put((1, envelope, {**change("c", 1, None)[2], "after": {"id": 1, "name": "a", "must": "m"}}))
    sink.put(change("c", 2, {"id": 2, "name": "b"}, ""),
             (3, envelope, {**change("c", 3, None)[2], "after": {"id": 3, "name": "c", "must": None}}),
             (4, envelope, {**change("c", 4, None)[2], "after": {"id": 4, "name": "d", "must": "m"}}),
             (5, envelope, {**change("c", 5, None)[2], "after": {"id": 5, "name": "e", "must": None}}))
    assert [o for o, _ in sink.reported] == [1, 2, 4]
    assert "shop.public.items-0@2 was refused by the database: NOT NULL constraint failed: items.must" in \
        sink.reported[1][1]
    assert sink.rows("items") == [(1, "a", "m"), (4, "d", "m")] and sink.next_offset() == 5
    assert any("written one by one" in w for w in sink.warnings)


def test_without_a_reporter_a_refused_row_fails_the_task_naming_it(tmp_path):
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM, reporter=False)
    with pytest.raises(DataError, match="record at shop.public.items-0@1 was refused by the database: NOT NULL"):
        sink.put((1, REQUIRED, {"id": 1, "name": "a", "must": "m"}),
                 (2, REQUIRED, {"id": 2, "name": "b", "must": None}))
    assert sink.rows("shop_public_items") == [(1, "a", "m")] and sink.next_offset() == 1


def test_an_sqlite_statement_refused_is_not_retried_as_a_lost_link(tmp_path):
    """Fields `a` and `A`: SQLite's column names ignore case, so CREATE TABLE fails (duplicate column). That
    is sqlite3's OperationalError, which the sink retried flush.max.retries times a flush.retry.delay.ms
    apart per batch as a lost link, then failed the task; now the record goes to the reporter at once."""
    twins = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "int32", "optional": True, "field": "a"},
                                      {"type": "int32", "optional": True, "field": "A"}]}
    sink = Sink(str(tmp_path / "out.db"), {**DEBEZIUM, "flush.retry.delay.ms": "2000"})
    started = time.monotonic()
    sink.put((1, twins, {"id": 1, "name": "a", "a": 1, "A": 2}), (2, ROW_SCHEMA, {"id": 2, "name": "b"}))
    assert time.monotonic() - started < 1.5
    assert [o for o, _ in sink.reported] == [0] and "duplicate column name" in sink.reported[0][1]
    assert sink.rows("shop_public_items") == [(2, "b")] and sink.warnings == [sink.warnings[0]]


def test_a_table_dropped_behind_the_sinks_back_is_created_again(tmp_path):
    """The sink remembers a table's columns; dropped by someone else, the next batch's INSERT is refused
    (SQLite: OperationalError, no such table) and the record-by-record pass creates it again."""
    db = str(tmp_path / "out.db")
    sink = Sink(db, DEBEZIUM, reporter=False)
    sink.put((1, ROW_SCHEMA, {"id": 1, "name": "a"}))
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE shop_public_items")
    sink.put((2, ROW_SCHEMA, {"id": 2, "name": "b"}), (3, ROW_SCHEMA, {"id": 3, "name": "c"}))
    assert sink.rows("shop_public_items") == [(2, "b"), (3, "c")] and sink.next_offset() == 3


def test_a_refused_row_in_the_batch_that_created_the_postgresql_table(pg_db):
    """PostgreSQL's DDL is transactional: the refused batch's CREATE TABLE is rolled back with it, so the
    record-by-record pass creates the table again rather than trusting what the sink had seen."""
    sink = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user})
    sink.put((1, REQUIRED, {"id": 1, "name": "a", "must": "m"}), (2, REQUIRED, {"id": 2, "name": "b", "must": None}),
             (3, REQUIRED, {"id": 3, "name": "c", "must": "m"}))
    sink.task.stop()
    assert [o for o, _ in sink.reported] == [1] and "not-null" in sink.reported[0][1]
    assert pg_db.execute("SELECT id, must FROM shop_public_items ORDER BY 1") == [(1, "m"), (3, "m")]
    assert pg_db.execute("SELECT next_offset FROM __klog_connect_offsets") == [(3,)]


def test_a_hostile_default_is_one_string_even_where_backslashes_escape(pg_db):
    """A field's default (from the record's schema) is written into CREATE TABLE as a string literal. With
    standard_conforming_strings=off (a database or role setting) a backslash escapes the quote klog doubles,
    so the default below closed the string and ran DROP TABLE y. klog writes PostgreSQL's escape string
    (E'...', backslashes doubled too), one string whatever the setting."""
    pg_db.execute("CREATE TABLE y (v TEXT)")
    pg_db.execute(f'ALTER DATABASE "{pg_db.dbname}" SET standard_conforming_strings = off')
    hostile = "\\'" + ', "c" TEXT, PRIMARY KEY ("id")); DROP TABLE y; --'
    schema = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "string", "optional": True, "default": hostile,
                                                     "field": "b"}]}
    sink = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user})
    sink.put((1, schema, {"id": 1, "name": "a", "b": None}))
    sink.task.stop()
    assert sink.reported == []
    assert pg_db.execute("SELECT to_regclass('y') IS NOT NULL") == [(True,)]
    assert pg_db.execute("SELECT column_name FROM information_schema.columns WHERE table_name = "
                         "'shop_public_items' ORDER BY ordinal_position") == [("id",), ("name",), ("b",)]
    pg_db.execute("INSERT INTO shop_public_items (id) VALUES (2)")
    assert pg_db.execute("SELECT b FROM shop_public_items WHERE id = 2") == [(hostile,)]


def test_a_default_of_the_wrong_type_fails_its_record_not_the_task(tmp_path):
    """A schema default that is no value of its field's type (text for an int32): the record goes to the
    errant record reporter naming the field (a bare ValueError from int() failed the task)."""
    schema = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "int32", "optional": True, "default": "1); --",
                                                     "field": "n"}]}
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM)
    sink.put((1, schema, {"id": 1, "name": "a", "n": None}), (2, ROW_SCHEMA, {"id": 2, "name": "b"}))
    assert [o for o, _ in sink.reported] == [0] and "field 'n'" in sink.reported[0][1]
    assert sink.rows("shop_public_items") == [(2, "b")]


def test_source_placeholders_on_a_flat_record_fail_it_a_tombstone_is_skipped(tmp_path):
    """${source.table} on a record without the envelope (flattened by ExtractNewRecordState): Debezium's
    naming throws; klog skipped every such record with a warning, so a migrated pipeline wrote nothing. It
    now fails the record naming the format; a tombstone is still skipped (Debezium: no table to resolve)."""
    sink = Sink(str(tmp_path / "out.db"), BY_SOURCE)
    sink.put((1, ROW_SCHEMA, {"id": 1, "name": "a"}), (1, None, None), change("c", 2, {"id": 2, "name": "b"}))
    assert [o for o, _ in sink.reported] == [0] and "'${source.table}'" in sink.reported[0][1]
    assert sink.rows("items") == [(2, "b")] and sink.next_offset() == 3


def test_a_put_retried_after_the_database_was_lost_reports_its_errant_record_once(tmp_path):
    """The database lost past flush.max.retries after the batch's errant record was reported: put() fails
    retriable and the worker (errors.retry.timeout) puts the same records again. The record goes to the
    reporter (the DLQ) once, not once per attempt; the rows and offsets are written by the second put."""
    import sqlite3 as driver

    from klog.connect.errors import RetriableError

    sink = Sink(str(tmp_path / "out.db"), {**DEBEZIUM, "flush.max.retries": "0"})
    bad = {**ROW_SCHEMA, "fields": [*ROW_FIELDS, {"type": "int32", "optional": True, "field": ""}]}
    records = [ConnectRecord(TOPIC, 0, KEY_SCHEMA, {"id": k}, schema, {"id": k, "name": "n", "": 1}, kafka_offset=k)
               for k, schema in ((0, ROW_SCHEMA), (1, bad), (2, ROW_SCHEMA))]
    executemany, lost = sink.task.dialect.executemany, [True]

    def losing_once(cur, sql, rows) -> None:  # noqa: ANN001
        if lost.pop() if lost else False:
            raise driver.OperationalError("disk I/O error")
        executemany(cur, sql, rows)

    sink.task.dialect.executemany = losing_once
    with pytest.raises(RetriableError):
        sink.task.put(records)
    sink.task.put(records)
    assert [o for o, _ in sink.reported] == [1] and "''" in sink.reported[0][1]
    assert sink.rows("shop_public_items") == [(0, "n"), (2, "n")] and sink.next_offset() == 3

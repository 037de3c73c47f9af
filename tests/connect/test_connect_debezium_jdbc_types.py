"""Debezium's JDBC sink type for type and knob for knob: the column types its PostgreSQL dialect gives
Debezium's semantic types (by schema name, and by the source column's type that column.propagate.source.type
adds), a geometry failing its record by name, batch.size bounding each statement batch, and
use.reduction.buffer writing only the last change of each key (the same final rows, fewer statements).
Driven through the task directly (start, open, put)."""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3

import pytest

from klog.connect.data import ConnectRecord
from tests.connect.test_connect_jdbc_hostile import DEBEZIUM, ROW_SCHEMA, TOPIC, Sink, change

SOURCE_TYPE = "__debezium.source.column.type"


def field(name: str, kind: str, semantic: str | None = None, **parameters: str) -> dict:
    schema = {"type": kind, "optional": True, "field": name}
    if semantic:
        schema["name"] = semantic
    if parameters:
        schema["parameters"] = parameters
    return schema


def by_source(name: str, kind: str, source_type: str, semantic: str | None = None, **parameters: str) -> dict:
    """A field as Debezium's source writes it with column.propagate.source.type."""
    return field(name, kind, semantic, **{SOURCE_TYPE: source_type, **parameters})


TYPED_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {**field("seen", "string", "io.debezium.time.ZonedTimestamp"), "default": "2000-01-01T00:00:00Z"},
    field("clock", "string", "io.debezium.time.ZonedTime"),
    field("doc", "string", "io.debezium.data.Json"),
    by_source("docb", "string", "JSONB", "io.debezium.data.Json"),
    field("uid", "string", "io.debezium.data.Uuid"),
    field("page", "string", "io.debezium.data.Xml"),
    {**field("took", "int64", "io.debezium.time.MicroDuration"), "default": 1_500_000},
    field("took_iso", "string", "io.debezium.time.Interval"),
    field("flags", "bytes", "io.debezium.data.Bits", length="3"),
    field("wide", "bytes", "io.debezium.data.Bits", length="16"),
    by_source("vary", "bytes", "VARBIT", "io.debezium.data.Bits", length="8"),
    field("free", "bytes", "io.debezium.data.Bits", length="2147483647"),
    by_source("one", "boolean", "BIT", **{"__debezium.source.column.length": "1"}),
    field("mood", "string", "io.debezium.data.Enum", allowed="sad,happy"),
    by_source("addr", "string", "INET"),
    by_source("price", "float64", "MONEY"),
    by_source("span", "string", "INT4RANGE"),
    {**by_source("seq", "int32", "SERIAL"), "default": 0},
    by_source("code", "string", "BPCHAR", **{"__debezium.source.column.length": "3"}),
    by_source("label", "string", "VARCHAR", **{"__debezium.source.column.length": "20"}),
    field("amount", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "10"}),
    by_source("at", "int64", "TIMESTAMP", "io.debezium.time.MicroTimestamp", **{"__debezium.source.column.scale": "3"}),
    by_source("seen3", "string", "TIMESTAMPTZ", "io.debezium.time.ZonedTimestamp",
              **{"__debezium.source.column.length": "35", "__debezium.source.column.scale": "3"}),
    {"type": "array", "optional": True, "items": {"type": "string", "optional": True}, "field": "words"},
    {"type": "array", "optional": True, "items": {"type": "int32", "optional": False}, "field": "nums"},
    {"type": "array", "optional": True, "items": field("", "string", "io.debezium.data.Uuid"), "field": "uids"},
    {"type": "array", "optional": True, "items": field("", "int32", "io.debezium.time.Date"), "field": "days"},
    {"type": "map", "optional": True, "keys": {"type": "string"}, "values": {"type": "string", "optional": True},
     "field": "tags"},
]
TYPED_ROW = {"id": 1, "seen": "2024-03-01T10:00:00.5+02:00", "clock": "10:15:30.5+02:00", "doc": '{"a":1}',
             "docb": '{"b":2}', "uid": "0b4a3f8e-9c1d-4e2f-8a7b-6c5d4e3f2a1b", "page": "<a>1</a>",
             "took": 90_061_500_000, "took_iso": "P0Y0M1DT1H1M1.5S", "flags": b"\x05", "wide": b"\x00\x01",
             "vary": b"\x05", "free": b"\x05", "one": True, "mood": "happy", "addr": "10.0.0.1", "price": 12.5,
             "span": "[1,5)", "tags": {"a": "1", "q\"uote": None}, "seq": 7,
             "code": "ab", "label": "twenty", "amount": decimal.Decimal("12.34"), "at": 1_709_296_496_789_012,
             "seen3": "2024-03-01T10:00:00.1234+02:00", "words": ["a", 'b"c\\', "{,}", "NULL", "", None],
             "nums": [1, -2], "uids": ["0b4a3f8e-9c1d-4e2f-8a7b-6c5d4e3f2a1b"], "days": [19724]}


@pytest.mark.slow
def test_debeziums_semantic_types_get_its_postgresql_column_types(pg_db):
    """Each of Debezium's semantic types becomes the column its PostgreSQL dialect creates (timestamptz,
    timetz, json, jsonb by the source column type, uuid, xml, interval, bit(n), bit varying, bit for a
    boolean from bit(1), a map as hstore; inet, money, int4range, serial, char(n) and varchar(n) by the source
    column type; numeric(p, s) by the decimal's precision; timestamps' precision propagated; arrays of
    primitives and string types as PostgreSQL arrays; Enum and the ISO Interval as text) and the value reads
    back as the source's, defaults included (a serial's is its sequence: the field's is dropped, as
    Debezium's)."""
    pg_db.execute("CREATE EXTENSION IF NOT EXISTS hstore")
    schema = {**ROW_SCHEMA, "fields": TYPED_FIELDS}
    sink = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user, "collection.name.format": "typed"})
    sink.put((1, schema, TYPED_ROW), (2, schema, {"id": 2, "seq": 8}))
    assert sink.reported == []
    columns = dict(pg_db.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                                 "attrelid = 'typed'::regclass AND attnum > 0 ORDER BY attnum"))
    assert columns == {
        "id": "integer", "seen": "timestamp with time zone", "clock": "time with time zone", "doc": "json",
        "docb": "jsonb", "uid": "uuid", "page": "xml", "took": "interval", "took_iso": "text", "flags": "bit(3)",
        "wide": "bit(16)", "vary": "bit varying(8)", "free": "bit varying", "one": "bit(1)", "mood": "text",
        "addr": "inet", "price": "money", "span": "int4range", "tags": "hstore", "seq": "integer",
        "code": "character(3)", "label": "character varying(20)", "amount": "numeric(10,2)",
        "at": "timestamp(3) without time zone", "seen3": "timestamp(3) with time zone", "words": "text[]",
        "nums": "integer[]", "uids": "uuid[]", "days": "text"}
    got = pg_db.execute("SELECT seen, clock::text, doc::text, docb::text, uid::text, page::text, took, took_iso, "
                        "flags::text, wide::text, vary::text, free::text, one::text, mood, addr::text, "
                        "price::numeric, span::text, tags -> 'a', tags -> 'q\"uote', code, label, amount, at, seen3, "
                        "words, nums, uids::text[], days FROM typed ORDER BY id")
    utc = dt.UTC
    assert got[0] == (dt.datetime(2024, 3, 1, 8, 0, 0, 500000, utc), "10:15:30.5+02", '{"a":1}', '{"b": 2}',
                      TYPED_ROW["uid"], "<a>1</a>", dt.timedelta(days=1, hours=1, seconds=61.5), "P0Y0M1DT1H1M1.5S",
                      "101", "0000000100000000", "00000101", "101", "1", "happy", "10.0.0.1/32", 12.5, "[1,5)", "1",
                      None, "ab ", "twenty", decimal.Decimal("12.34"), dt.datetime(2024, 3, 1, 12, 34, 56, 789000),
                      dt.datetime(2024, 3, 1, 8, 0, 0, 123000, utc), TYPED_ROW["words"], [1, -2], TYPED_ROW["uids"],
                      "[19724]")  # an array of dates: JSON text (its elements would need converting)
    assert set(got[1]) == {None}
    # PostgreSQL's infinity is kept; a value that is no ZonedTimestamp fails its record, not the batch
    sink.put((3, schema, {"id": 3, "seq": 9, "seen": "infinity"}), (4, schema, {"id": 4, "seq": 10, "seen": "soon"}))
    assert pg_db.execute("SELECT id, seen::text FROM typed WHERE id > 2") == [(3, "infinity")]
    assert [o for o, _ in sink.reported] == [3] and "'soon'" in sink.reported[0][1]
    # the columns' defaults, as Debezium's dialect writes them
    defaults = dict(pg_db.execute("SET TimeZone = 'UTC'; SELECT column_name, column_default FROM information_schema"
                                  ".columns WHERE table_name = 'typed' AND column_default IS NOT NULL"))
    assert defaults == {"seen": "'2000-01-01 00:00:00+00'::timestamp with time zone",
                        "took": "'00:00:01.5'::interval", "seq": "nextval('typed_seq_seq'::regclass)"}
    # a row with nothing to convert but a default to drop (its schema is still the one written)
    serial_only = {**ROW_SCHEMA, "fields": [TYPED_FIELDS[0], {**by_source("seq", "int32", "SERIAL"), "default": 0}]}
    plain = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user,
                                  "collection.name.format": "serial_only"})
    plain.put((1, serial_only, {"id": 1, "seq": 7}))
    assert plain.reported == [] and pg_db.execute("SELECT * FROM serial_only") == [(1, 7)]


def test_a_geometry_fails_its_record_naming_the_type_unless_left_out(tmp_path):
    """klog writes no PostGIS geometry: a record with one is refused naming the field and its type (to the
    errant record reporter; the others are written); field.exclude.list leaves it out and the row lands."""
    geometry = {"type": "struct", "optional": True, "name": "io.debezium.data.geometry.Geometry", "field": "shape",
                "fields": [{"type": "bytes", "optional": False, "field": "wkb"},
                           {"type": "int32", "optional": True, "field": "srid"}]}
    schema = {**ROW_SCHEMA, "fields": [*ROW_SCHEMA["fields"], geometry]}
    row = {"id": 1, "name": "a", "shape": {"wkb": b"\x01", "srid": 4326}}
    refusing = Sink(str(tmp_path / "a.db"), DEBEZIUM)
    refusing.put((1, schema, row), (2, ROW_SCHEMA, {"id": 2, "name": "b"}))
    assert [o for o, _ in refusing.reported] == [0] and "'shape'" in refusing.reported[0][1] \
        and "io.debezium.data.geometry.Geometry" in refusing.reported[0][1]
    assert refusing.rows("shop_public_items") == [(2, "b")]
    leaving = Sink(str(tmp_path / "b.db"), {**DEBEZIUM, "field.exclude.list": "shape"})
    leaving.put((1, schema, row))
    assert leaving.reported == [] and leaving.rows("shop_public_items") == [(1, "a")]


def _counting(db: str) -> None:
    """The table created beforehand with triggers logging every row statement into `log`."""
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "shop_public_items" (id INTEGER PRIMARY KEY, name TEXT)')
        conn.execute("CREATE TABLE log (what TEXT)")
        for event in ("INSERT", "UPDATE", "DELETE"):
            conn.execute(f'CREATE TRIGGER log_{event} AFTER {event} ON "shop_public_items" '
                         f"BEGIN INSERT INTO log VALUES ('{event}'); END")


HISTORY = [("c", 1, "a"), ("u", 1, "b"), ("c", 2, "x"), ("d", 2, None), ("u", 1, "c"), ("c", 3, "y"),
           ("d", 3, None), ("c", 3, "z"), ("c", 4, "w")]


def _events(history: list) -> list[tuple]:
    out = []
    for op, key, name in history:
        if op == "d":
            out.append(change("d", key, None, before={"id": key, "name": None}))
        else:
            out.append(change(op, key, {"id": key, "name": name}))
    return out


@pytest.mark.parametrize(("reduce", "statements"), [
    ("false", ["INSERT", "UPDATE", "INSERT", "DELETE", "UPDATE", "INSERT", "DELETE", "INSERT", "INSERT"]),
    ("true", ["INSERT", "INSERT", "INSERT"])])
def test_reduction_buffer_writes_the_last_change_of_each_key_only(tmp_path, reduce, statements):
    """use.reduction.buffer=true: of each key's changes in one batch only the last is written (key 2's insert
    then delete: nothing but a delete of no row; key 1's three changes: one upsert); the table is the same as
    without it, which writes every change. Row triggers log what each statement did to a row."""
    db = str(tmp_path / "out.db")
    _counting(db)
    sink = Sink(db, {**DEBEZIUM, "use.reduction.buffer": reduce, "schema.evolution": "none"})
    sink.put(*_events(HISTORY))
    assert sink.reported == [] and sink.next_offset() == len(HISTORY)
    assert sink.rows("shop_public_items") == [(1, "c"), (3, "z"), (4, "w")]
    with sqlite3.connect(db) as conn:
        assert [w for (w,) in conn.execute("SELECT what FROM log ORDER BY rowid")] == statements


def test_reduction_in_insert_mode_drops_only_what_a_delete_decides(tmp_path):
    """insert.mode=insert: an insert depends on what came before it (a delete then an insert of an existing
    row is the new row; the insert alone would fail on the key), so only a delete supersedes the key's
    earlier changes: the same table as without the buffer."""
    db = str(tmp_path / "out.db")
    _counting(db)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO \"shop_public_items\" VALUES (9, 'old')")
        conn.execute("DELETE FROM log")
    sink = Sink(db, {**DEBEZIUM, "insert.mode": "insert", "use.reduction.buffer": "true",
                     "schema.evolution": "none"})
    sink.put(*_events([("d", 9, None), ("c", 9, "new"), ("c", 5, "five"), ("d", 5, None)]))
    assert sink.reported == [] and sink.rows("shop_public_items") == [(9, "new")]
    with sqlite3.connect(db) as conn:
        # key 5's insert was never written (its delete then touched no row)
        assert [w for (w,) in conn.execute("SELECT what FROM log ORDER BY rowid")] == ["DELETE", "INSERT"]


@pytest.mark.parametrize("reduce", ["false", "true"])
def test_reduction_keeps_an_upsert_of_other_columns(tmp_path, reduce):
    """An upsert of fewer columns leaves the others as the key's earlier upsert set them, so the buffer keeps
    both (as Debezium's flushes at a change of schema): the same row with it as without."""
    wide = {**ROW_SCHEMA, "fields": [*ROW_SCHEMA["fields"], {"type": "int32", "optional": True, "field": "extra"}]}
    sink = Sink(str(tmp_path / "out.db"), {**DEBEZIUM, "use.reduction.buffer": reduce})
    sink.put((1, wide, {"id": 1, "name": "a", "extra": 5}), (1, ROW_SCHEMA, {"id": 1, "name": "b"}),
             (2, ROW_SCHEMA, {"id": 2, "name": "c"}), (2, wide, {"id": 2, "name": "d", "extra": 6}))
    assert sink.reported == [] and sink.rows("shop_public_items") == [(1, "b", 5), (2, "d", 6)]


def test_reduction_stops_at_a_truncate(tmp_path):
    """A truncate is a barrier, as Debezium flushes its buffers before it: a key's change before it is not
    dropped for one after it (here the same outcome either way, the row written again after the truncate)."""
    db = str(tmp_path / "out.db")
    sink = Sink(db, {**DEBEZIUM, "use.reduction.buffer": "true", "truncate.enabled": "true"})
    sink.put(*_events([("c", 1, "a"), ("c", 2, "b")]), change("t", None, None), *_events([("c", 1, "again")]))
    assert sink.rows("shop_public_items") == [(1, "again")]


def test_batch_size_bounds_the_rows_of_each_statement_batch(tmp_path):
    """batch.size: 7 rows of one table and shape go to the database as batches of at most 3 (3, 3, 1);
    the default (500) sends them as one; the rows are the same."""
    sent: dict[str, list[int]] = {}
    for size in ("3", None):
        db = str(tmp_path / f"out{size}.db")
        sink = Sink(db, {**DEBEZIUM, **({"batch.size": size} if size else {})})
        executemany = sink.task.dialect.executemany
        batches = sent[size or "default"] = []

        def counted(cur, sql, rows, executemany=executemany, batches=batches) -> None:  # noqa: ANN001
            batches.append(len(rows))
            executemany(cur, sql, rows)

        sink.task.dialect.executemany = counted
        sink.put(*_events([("c", k, f"n{k}") for k in range(7)]))
        assert sink.rows("shop_public_items") == [(k, f"n{k}") for k in range(7)]
    assert sent == {"3": [3, 3, 1], "default": [7]}


def test_reduction_is_the_debezium_faces_only(tmp_path):
    """Confluent's JdbcSinkConnector keeps writing every record (it has no use.reduction.buffer): the
    same changes of one key give every statement."""
    from klog.connect.connectors.jdbc import JdbcSinkTask

    db = str(tmp_path / "out.db")
    _counting(db)
    sink = Sink(db, {"insert.mode": "upsert", "pk.mode": "record_key", "table.name.format": "shop_public_items",
                     "use.reduction.buffer": "true"}, JdbcSinkTask)
    sink.put(*[(k, ROW_SCHEMA, {"id": k, "name": n}) for k, n in ((1, "a"), (1, "b"), (2, "c"))])
    with sqlite3.connect(db) as conn:
        assert [w for (w,) in conn.execute("SELECT what FROM log ORDER BY rowid")] == ["INSERT", "UPDATE", "INSERT"]


@pytest.mark.slow
def test_an_existing_column_of_the_connect_type_gets_the_connect_types_value(pg_db):
    """A table an earlier klog created (or a user did) with the Connect types' columns: bigint for a
    MicroDuration, bytea for Bits, text for a map, an array and a range. Its rows are written as those
    columns take them (the microseconds, the bytes, JSON text, the range's text), not rewritten for
    interval, bit, hstore or array columns: an interval's text was refused by the bigint and a bit string
    went into the bytea as its characters ('101'). A field new to the table still gets its new column."""
    pg_db.execute('CREATE TABLE legacy (id integer PRIMARY KEY, took bigint, flags bytea, tags text, words text, '
                  'span text)')
    names = ("id", "took", "flags", "tags", "words", "span")
    fields = [f for f in TYPED_FIELDS if f["field"] in names]
    schema = {**ROW_SCHEMA, "fields": [*fields, field("late", "bytes", "io.debezium.data.Bits", length="3")]}
    sink = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user, "collection.name.format": "legacy"})
    sink.put((1, schema, {**{n: TYPED_ROW[n] for n in names}, "late": b"\x06"}))
    assert sink.reported == []
    got = pg_db.execute("SELECT took, encode(flags, 'hex'), tags, words, span, late::text, format_type(atttypid, "
                        "atttypmod) FROM legacy, pg_attribute WHERE attrelid = 'legacy'::regclass AND attname = 'late'")
    words = '["a","b\\"c\\\\","{,}","NULL","",null]'
    assert got == [(90_061_500_000, "05", '{"a":"1","q\\"uote":null}', words, "[1,5)", "110", "bit(3)")]


FLAT_TYPED = {**ROW_SCHEMA, "fields": [f for f in TYPED_FIELDS if f["field"] in ("id", "words", "tags", "clock")]}


@pytest.mark.slow
def test_a_flat_row_whose_converted_fields_keep_their_schema_is_converted(pg_db):
    """A flat row (ExtractNewRecordState's) whose only fields to convert keep their schema (an array, a map,
    a ZonedTime: no type changes) is converted all the same: the array as PostgreSQL's array text, the map
    as hstore's. The sink wrote such a row as it came (its schema unchanged), the list and the map as JSON
    text, which text[] and hstore refused: every such record failed."""
    pg_db.execute("CREATE EXTENSION IF NOT EXISTS hstore")
    sink = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user, "collection.name.format": "flat"})
    sink.put((1, FLAT_TYPED, {n: TYPED_ROW[n] for n in ("id", "words", "tags", "clock")}))
    assert sink.reported == []
    assert pg_db.execute("SELECT words, tags -> 'a', clock::text FROM flat") == [
        (TYPED_ROW["words"], "1", "10:15:30.5+02")]


def test_a_flat_zoned_timestamp_alone_is_written_as_its_utc_instant(tmp_path):
    """SQLite: a flat row whose one converted field is a ZonedTimestamp (its schema unchanged) is written as
    its instant in UTC, as in an envelope; it was written as the text it came as."""
    schema = {**ROW_SCHEMA, "fields": [TYPED_FIELDS[0], field("seen", "string", "io.debezium.time.ZonedTimestamp")]}
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM)
    sink.put((1, schema, {"id": 1, "seen": "2024-03-01T10:00:00.5+02:00"}))
    assert sink.reported == [] and sink.rows("shop_public_items") == [(1, "2024-03-01T08:00:00.500000+00:00")]


def test_a_zoned_timestamp_finer_than_microseconds_is_rounded_not_cut(tmp_path):
    """Oracle's and SQL Server's ZonedTimestamps carry up to 9 fractional digits: rounded half up to the
    microsecond (a carry into the next second), as pgjdbc binds Debezium's and PostgreSQL reads the text;
    Python's fromisoformat cut them (.123456789 as .123456, .9999996 as .999999)."""
    schema = {**ROW_SCHEMA, "fields": [TYPED_FIELDS[0], field("seen", "string", "io.debezium.time.ZonedTimestamp")]}
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM)
    sink.put((1, schema, {"id": 1, "seen": "2024-03-01T10:59:59.9999996+02:00"}),
             (2, schema, {"id": 2, "seen": "2024-03-01T10:00:00.123456789Z"}))
    assert sink.reported == [] and sink.rows("shop_public_items") == [
        (1, "2024-03-01T09:00:00+00:00"), (2, "2024-03-01T10:00:00.123457+00:00")]



DAY_KEY = {"type": "struct", "optional": False, "name": "shop.public.items.Key",
           "fields": [{**field("day", "int32", "io.debezium.time.Date"), "optional": False}]}
DAY_ROW = {**ROW_SCHEMA, "fields": [*DAY_KEY["fields"], {"type": "string", "optional": True, "field": "name"}]}


def _by_day(offset: int, day: int, name: str | None) -> ConnectRecord:
    return ConnectRecord(TOPIC, 0, DAY_KEY, {"day": day}, DAY_ROW,
                         None if name is None else {"day": day, "name": name}, kafka_offset=offset)


@pytest.mark.slow
def test_a_key_of_a_debezium_type_is_written_as_the_values_are(pg_db):
    """A date primary key (io.debezium.time.Date in the record key, as Debezium's sources write a date
    column's) is a date column holding the date, upserted and deleted (a tombstone) by it, as Debezium's sink
    types key fields by their schemas; it was an integer column of epoch days (the key's fields were written
    as they came, only the value's converted). A table an earlier klog created so keeps its integers."""
    pg_db.execute("CREATE TABLE old_days (day integer PRIMARY KEY, name text)")
    for table in ("days", "old_days"):
        sink = Sink(pg_db.jdbc_url, {**DEBEZIUM, "connection.username": pg_db.user, "collection.name.format": table})
        sink.task.put([_by_day(0, 19783, "a"), _by_day(1, 19784, "b"), _by_day(2, 19783, "c"),
                       _by_day(3, 19784, None)])
        assert sink.reported == []
    assert pg_db.execute("SELECT day, name, pg_typeof(day)::text FROM days") == [(dt.date(2024, 3, 1), "c", "date")]
    assert pg_db.execute("SELECT day, name FROM old_days") == [(19783, "c")]


def test_a_time_outside_one_day_is_refused_not_wrapped(tmp_path):
    """MicroTime is microseconds since midnight, but MySQL's TIME runs to 838:59:59 and below zero:
    100:00:00 was written as 04:00:00 and -00:00:01 as 23:59:59 (another time of day, silently). Now such a
    record is refused naming the value (Debezium's sink fails on it too); PostgreSQL's 24:00:00 is kept."""
    schema = {**ROW_SCHEMA, "fields": [TYPED_FIELDS[0], field("at", "int64", "io.debezium.time.MicroTime")]}
    sink = Sink(str(tmp_path / "out.db"), DEBEZIUM)
    sink.put(*[(k, schema, {"id": k, "at": at}) for k, at in ((1, 3_600_000_000), (2, 86_400_000_000),
                                                               (3, 360_000_000_000), (4, -1_000_000))])
    assert [(o, "is no time of day" in m) for o, m in sink.reported] == [(2, True), (3, True)]
    assert "4 days, 4:00:00" in sink.reported[0][1] and "-1 day, 23:59:59" in sink.reported[1][1]
    assert sink.rows("shop_public_items") == [(1, "01:00:00"), (2, "24:00:00")]


def test_a_batch_unrolled_by_another_keys_failure_keeps_the_reduction(tmp_path):
    """use.reduction.buffer=true: key 1's first change (refused by the database: NOT NULL) is superseded by
    its second, so the batch writes only that; key 3's refusal fails the batch, which is written again record
    by record. Key 1's dropped change was written then too, and went to the DLQ: what the DLQ got depended
    on another key. Now the unrolled pass drops it as the batch did: only key 3 is reported; the offsets
    cover all four."""
    from tests.connect.test_connect_jdbc_hostile import REQUIRED

    sink = Sink(str(tmp_path / "out.db"), {**DEBEZIUM, "use.reduction.buffer": "true"})
    sink.put((1, REQUIRED, {"id": 1, "name": "a", "must": None}), (1, REQUIRED, {"id": 1, "name": "b", "must": "m"}),
             (3, REQUIRED, {"id": 3, "name": "c", "must": None}), (4, REQUIRED, {"id": 4, "name": "d", "must": "m"}))
    assert [o for o, _ in sink.reported] == [2] and "NOT NULL" in sink.reported[0][1]
    assert sink.rows("shop_public_items") == [(1, "b", "m"), (4, "d", "m")] and sink.next_offset() == 4

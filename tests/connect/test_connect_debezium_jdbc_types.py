"""Debezium's JDBC sink type for type: the column types its PostgreSQL dialect gives Debezium's semantic
types (by schema name, and by the source column's type that column.propagate.source.type adds), and a
geometry failing its record by name. Driven through the task directly (start, open, put)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.connect.test_connect_jdbc_hostile import DEBEZIUM, ROW_SCHEMA, Sink

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
    {"type": "map", "optional": True, "keys": {"type": "string"}, "values": {"type": "string", "optional": True},
     "field": "tags"},
]
TYPED_ROW = {"id": 1, "seen": "2024-03-01T10:00:00.5+02:00", "clock": "10:15:30.5+02:00", "doc": '{"a":1}',
             "docb": '{"b":2}', "uid": "0b4a3f8e-9c1d-4e2f-8a7b-6c5d4e3f2a1b", "page": "<a>1</a>",
             "took": 90_061_500_000, "took_iso": "P0Y0M1DT1H1M1.5S", "flags": b"\x05", "wide": b"\x00\x01",
             "vary": b"\x05", "free": b"\x05", "one": True, "mood": "happy", "addr": "10.0.0.1", "price": 12.5,
             "span": "[1,5)", "tags": {"a": "1", "q\"uote": None}, "seq": 7}


@pytest.mark.slow
def test_debeziums_semantic_types_get_its_postgresql_column_types(pg_db):
    """Each of Debezium's semantic types becomes the column its PostgreSQL dialect creates (timestamptz,
    timetz, json, jsonb by the source column type, uuid, xml, interval, bit(n), bit varying, bit for a
    boolean from bit(1), a map as hstore; inet, money, int4range and serial by the source column type; Enum
    and the ISO Interval as text) and the value reads back as the source's, defaults included (a serial's
    is its sequence: the field's is dropped, as Debezium's)."""
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
        "addr": "inet", "price": "money", "span": "int4range", "tags": "hstore", "seq": "integer"}
    got = pg_db.execute("SELECT seen, clock::text, doc::text, docb::text, uid::text, page::text, took, took_iso, "
                        "flags::text, wide::text, vary::text, free::text, one::text, mood, addr::text, "
                        "price::numeric, span::text, tags -> 'a', tags -> 'q\"uote' FROM typed ORDER BY id")
    utc = dt.UTC
    assert got[0] == (dt.datetime(2024, 3, 1, 8, 0, 0, 500000, utc), "10:15:30.5+02", '{"a":1}', '{"b": 2}',
                      TYPED_ROW["uid"], "<a>1</a>", dt.timedelta(days=1, hours=1, seconds=61.5), "P0Y0M1DT1H1M1.5S",
                      "101", "0000000100000000", "00000101", "101", "1", "happy", "10.0.0.1/32", 12.5, "[1,5)", "1",
                      None)
    assert set(got[1]) == {None}
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

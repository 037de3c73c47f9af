"""klog's PostgreSQL connector against Debezium's own source: every event's key, value and schema as Kafka's
JsonConverter (schemas.enable=true) writes what Debezium's PostgresConnector emits, byte for byte where
the bytes are deterministic (schema layout, names, versions, parameters, docs; values of each type).

Each expectation names the Debezium class it comes from (debezium-connector-postgres:
PostgresValueConverter, PostgresSourceInfoStructMaker, PostgresStreamingChangeEventSource,
UnchangedToastedPlaceholder; debezium-connector-common: TableSchemaBuilder, SchemaFactory, Envelope,
SpecialValueDecimal, VariableScaleDecimal, Bits, geometry.Point, time.Interval), read at Debezium 3.5+.
Deliberate differences are named where they are asserted (source.version is klog's own)."""

from __future__ import annotations

import json

import pytest

from klog import __version__
from tests.connect.helpers import records, running, wait_for

PREFIX = "shop"
# ~30 connector runs against PostgreSQL on the one worker that holds its server: the whole suite (CI)
# runs them, the fast lane leaves them out to stay under 4 minutes
pytestmark = pytest.mark.slow


def cdc(db, **extra) -> dict:
    return db.debezium_config(name="pg", **{"topic.prefix": PREFIX, "slot.name": "klog_slot",
                                            "publication.name": "klog_pub", **extra})


def raw(data_dir: str, table: str) -> list[tuple[str | None, str | None]]:
    """(key, value) of each record of the table's topic, as the bytes JsonConverter wrote (decoded)."""
    return [(r.key.decode() if r.key else None, r.value.decode() if r.value else None)
            for r in records(data_dir, f"{PREFIX}.public.{table}")]


def compact(value: object) -> str:
    """JSON as Kafka's JsonConverter (Jackson) writes it: no spaces, keys in the order given."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def capture(pg_db, data_dir: str, setup: list[str], changes: list[str], table: str, count: int,
            warnings: list | None = None, snapshotted: int = 0, **config: str) -> list[tuple[str | None, str | None]]:
    """Run the connector over `setup` (snapshotted: the changes wait for that many records) then `changes`
    (streamed) until `count` records of the table are in its topic; its records' raw JSON."""
    for sql in setup:
        pg_db.execute(sql)
    with running(data_dir, cdc(pg_db, **config), warnings=warnings):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        wait_for(lambda: len(records(data_dir, f"{PREFIX}.public.{table}")) >= snapshotted, what="the snapshot")
        for sql in changes:
            pg_db.execute(sql)
        wait_for(lambda: len(records(data_dir, f"{PREFIX}.public.{table}")) >= count, timeout=30,
                 what=f"{count} records of {table}")
    return raw(data_dir, table)


def task_running(data_dir: str) -> bool:
    states = [json.loads(r.value)["state"] for r in records(data_dir, "connect-status")
              if r.key == b"status-task-pg-0" and r.value]
    return bool(states) and states[-1] == "RUNNING"


def envelope_parts(value: str) -> tuple[dict, dict]:
    doc = json.loads(value)
    return doc["schema"], doc["payload"]


def after_fields(value: str) -> list[dict]:
    return json.loads(value)["schema"]["fields"][1]["fields"]


def field(name: str, schema: dict) -> dict:
    return {**schema, "field": name}


def opt(type_: str, **extra) -> dict:
    return {"type": type_, "optional": True, **extra}


def req(type_: str, **extra) -> dict:
    return {"type": type_, "optional": False, **extra}


def logical(type_: str, name: str, **extra) -> dict:
    return {"type": type_, "optional": True, "name": name, "version": 1, **extra}


# PostgresSourceInfoStructMaker over SchemaFactory.sourceInfoSchemaBuilder (version 1; origin and
# origin_lsn since Debezium 3.5), in JsonConverter's layout
SOURCE = {"type": "struct", "fields": [
    field("version", req("string")), field("connector", req("string")), field("name", req("string")),
    field("ts_ms", req("int64")),
    {**logical("string", "io.debezium.data.Enum", parameters={
        "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"}),
     "default": "false", "field": "snapshot"},
    field("db", req("string")), field("sequence", opt("string")), field("ts_us", opt("int64")),
    field("ts_ns", opt("int64")), field("schema", req("string")), field("table", req("string")),
    field("txId", opt("int64")), field("lsn", opt("int64")), field("xmin", opt("int64")),
    field("origin", opt("string")), field("origin_lsn", opt("int64"))],
    "optional": False, "name": "io.debezium.connector.postgresql.Source", "version": 1}
# SchemaFactory.transactionBlockSchema
TRANSACTION = {"type": "struct", "fields": [field("id", req("string")), field("total_order", req("int64")),
                                            field("data_collection_order", req("int64"))],
               "optional": True, "name": "event.block", "version": 1}


def envelope_schema(table: str, columns: list[dict]) -> dict:
    """TableSchemaBuilder's envelope: before, after, source, transaction, then Envelope.Builder.build()'s
    op, ts_ms, ts_us, ts_ns; version 2 since Debezium 2.6 (DBZ-7107)."""
    row = {"type": "struct", "fields": columns, "optional": True, "name": f"{PREFIX}.public.{table}.Value"}
    return {"type": "struct", "fields": [
        field("before", row), field("after", row), field("source", SOURCE), field("transaction", TRANSACTION),
        field("op", req("string")), field("ts_ms", opt("int64")), field("ts_us", opt("int64")),
        field("ts_ns", opt("int64"))], "optional": False, "name": f"{PREFIX}.public.{table}.Envelope", "version": 2}


def test_key_envelope_and_source_as_debeziums_json(pg_db, data_dir):
    """The key and the envelope's schema byte for byte (JsonConverter's layout: type, fields, optional,
    name, version); the source block's fields in order, snapshot records' txId the snapshot transaction's,
    sequence [last commit LSN, this event's LSN], and each streamed change's lsn its own WAL position."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)", "INSERT INTO t VALUES (1, 'a')"]
    got = capture(pg_db, data_dir, setup,
                  ["INSERT INTO t VALUES (2, 'b'), (3, 'c')", "UPDATE t SET v = 'd' WHERE id = 3"], "t", 4)
    key, value = got[0]
    assert key == compact({"schema": {"type": "struct", "fields": [field("id", req("int32"))], "optional": False,
                                      "name": "shop.public.t.Key"}, "payload": {"id": 1}})
    columns = [field("id", req("int32")), field("v", req("string"))]
    assert value.startswith('{"schema":' + compact(envelope_schema("t", columns)) + ',"payload":')
    sources = [envelope_parts(v)[1]["source"] for _, v in got]
    for source in sources:
        assert list(source) == ["version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us",
                                "ts_ns", "schema", "table", "txId", "lsn", "xmin", "origin", "origin_lsn"]
        assert (source["version"], source["connector"], source["name"], source["db"], source["schema"],
                source["table"], source["xmin"], source["origin"], source["origin_lsn"]) == (
            __version__, "postgresql", "shop", pg_db.dbname, "public", "t", None, None, None)  # version: klog's
        assert source["ts_us"] // 1000 == source["ts_ms"] and source["ts_ns"] == source["ts_us"] * 1000
    snapshot, first, second, update = sources
    assert snapshot["snapshot"] == "last" and snapshot["txId"] > 0
    assert snapshot["sequence"] == f'[null,"{snapshot["lsn"]}"]'  # no commit seen yet
    assert first["txId"] == second["txId"] != update["txId"] and first["snapshot"] == "false"
    assert first["lsn"] < second["lsn"] < update["lsn"]  # each change's own LSN, not its commit's
    assert first["sequence"] == f'[null,"{first["lsn"]}"]' and second["sequence"] == f'[null,"{second["lsn"]}"]'
    previous_commit = json.loads(update["sequence"])[0]
    assert second["lsn"] < int(previous_commit) <= update["lsn"]  # the end of the transaction before
    payload = envelope_parts(got[1][1])[1]
    assert list(payload) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]


TYPES_DDL = (
    "CREATE TABLE t (id int PRIMARY KEY, i2 smallint, i8 bigint, r real, d double precision, n numeric, "
    "n52 numeric(5,2), m money, b boolean, c char(3), vc varchar(5), tx text, by bytea, dt date, tm time, "
    "tm3 time(3), tmtz timetz, ts timestamp, ts3 timestamp(3), tstz timestamptz, iv interval, u uuid, j json, "
    "jb jsonb, x xml, ip inet, ci cidr, mac macaddr, b1 bit(1), b3 bit(3), vb varbit, e mood, dom posint, "
    "o oid, h hstore, p point, ai int[], at text[], an numeric[], ad date[], ats timestamptz[], ae mood[], "
    "aj jsonb[], aby bytea[], nm name, tr int4range, tsv tsvector)")
TYPES_ROW = (
    "1, 1, 2, 1.5, 2.5, 3.140, 1.5, 1234.5, true, 'ab', 'xy', 'hello', '\\x0102ff', '2020-01-02', '01:02:03.5', "
    "'01:02:03.004', '01:02:03+02', '2020-01-02 03:04:05.123456', '2020-01-02 03:04:05.1234', "
    "'2020-01-02 03:04:05.1+02', '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
    "'{\"a\": 1}', '{\"b\": 2}', '<a>1</a>', '192.168.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', B'1', B'101', "
    "B'1101', 'ok', 5, 7, 'a=>1, b=>NULL, zz=>\"q\\\"x\"', '(1.5,-2)', '{1,NULL}', '{a,\"b c\"}', '{1.50,2}', "
    "'{2020-01-02}', '{\"2020-01-02 03:04:05+00\"}', '{sad,ok}', '{\"{}\"}', '{\"\\\\x01\"}', 'nm', "
    "'[1,5)', 'a:1 b:2'")
TYPES_SCHEMAS = [
    field("id", req("int32")), field("i2", opt("int16")), field("i8", opt("int64")), field("r", opt("float")),
    field("d", opt("double")),
    # VariableScaleDecimal: SchemaFactory.datatypeVariableScaleDecimalSchema, with its doc
    field("n", {"type": "struct", "fields": [field("scale", req("int32")), field("value", req("bytes"))],
                "optional": True, "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
                "doc": "Variable scaled decimal"}),
    field("n52", logical("bytes", "org.apache.kafka.connect.data.Decimal",
                         parameters={"scale": "2", "connect.decimal.precision": "5"})),
    # PostgresValueConverter.moneySchema: Decimal.builder(money.fraction.digits), no precision parameter
    field("m", logical("bytes", "org.apache.kafka.connect.data.Decimal", parameters={"scale": "2"})),
    field("b", opt("boolean")), field("c", opt("string")), field("vc", opt("string")), field("tx", opt("string")),
    field("by", opt("bytes")), field("dt", logical("int32", "io.debezium.time.Date")),
    field("tm", logical("int64", "io.debezium.time.MicroTime")),
    field("tm3", logical("int32", "io.debezium.time.Time")),
    field("tmtz", logical("string", "io.debezium.time.ZonedTime")),
    field("ts", logical("int64", "io.debezium.time.MicroTimestamp")),
    field("ts3", logical("int64", "io.debezium.time.Timestamp")),
    field("tstz", logical("string", "io.debezium.time.ZonedTimestamp")),
    field("iv", logical("int64", "io.debezium.time.MicroDuration")),
    field("u", logical("string", "io.debezium.data.Uuid")),
    field("j", logical("string", "io.debezium.data.Json")), field("jb", logical("string", "io.debezium.data.Json")),
    field("x", logical("string", "io.debezium.data.Xml")), field("ip", opt("string")), field("ci", opt("string")),
    field("mac", opt("string")), field("b1", opt("boolean")),
    # Bits.builder(length): varbit without a length has pgjdbc's unknown length, Integer.MAX_VALUE
    field("b3", logical("bytes", "io.debezium.data.Bits", parameters={"length": "3"})),
    field("vb", logical("bytes", "io.debezium.data.Bits", parameters={"length": "2147483647"})),
    field("e", logical("string", "io.debezium.data.Enum", parameters={"allowed": "sad,ok"})),
    field("dom", opt("int32")),  # a domain is its base type
    field("o", opt("int64")),
    field("h", logical("string", "io.debezium.data.Json")),  # hstore.handling.mode=json
    field("p", {"type": "struct", "fields": [field("x", req("double")), field("y", req("double")),
                                             field("wkb", opt("bytes")), field("srid", opt("int32"))],
                "optional": True, "name": "io.debezium.data.geometry.Point", "version": 1, "doc": "Geometry (POINT)"}),
    field("ai", {"type": "array", "items": opt("int32"), "optional": True}),
    field("at", {"type": "array", "items": opt("string"), "optional": True}),
    field("an", {"type": "array", "items": {"type": "struct", "fields": [field("scale", req("int32")),
                                                                         field("value", req("bytes"))],
                                            "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
                                            "version": 1, "doc": "Variable scaled decimal"}, "optional": True}),
    field("ad", {"type": "array", "items": logical("int32", "io.debezium.time.Date"), "optional": True}),
    field("ats", {"type": "array", "items": logical("string", "io.debezium.time.ZonedTimestamp"), "optional": True}),
    # an enum array's elements: Enum.builder's schema as it is, required (PostgresValueConverter.schemaBuilder)
    field("ae", {"type": "array", "items": {**logical("string", "io.debezium.data.Enum", parameters={
        "allowed": "sad,ok"}), "optional": False}, "optional": True}),
    field("aj", {"type": "array", "items": logical("string", "io.debezium.data.Json"), "optional": True}),
    field("aby", {"type": "array", "items": opt("bytes"), "optional": True}),
    field("nm", opt("string")), field("tr", opt("string")),
    field("tsv", logical("string", "io.debezium.data.Tsvector"))]
TYPES_VALUES = {
    "id": 1, "i2": 1, "i8": 2, "r": 1.5, "d": 2.5,
    "n": {"scale": 2, "value": "ATo="},  # 3.140 stripped of its trailing zero: 314 at scale 2
    "n52": "AJY=", "m": "AeI6",  # 1234.50 as 123450
    "b": True, "c": "ab ", "vc": "xy", "tx": "hello", "by": "AQL/", "dt": 18263, "tm": 3723500000,
    "tm3": 3723004, "tmtz": "23:02:03Z", "ts": 1577934245123456, "ts3": 1577934245123,
    "tstz": "2020-01-02T01:04:05.100000Z", "iv": 37091106789000, "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "j": '{"a": 1}', "jb": '{"b": 2}', "x": "<a>1</a>", "ip": "192.168.0.1", "ci": "10.0.0.0/8",
    "mac": "08:00:2b:01:02:03", "b1": True,
    "b3": "BQ==", "vb": "DQ==",  # a Java BitSet's little-endian bytes: 101 is 5, 1101 is 13
    "e": "ok", "dom": 5, "o": 7,
    "h": '{"zz":"q\\"x","a":"1","b":null}',  # pgjdbc reads hstore into a java.util.HashMap: its order
    "p": {"x": 1.5, "y": -2.0, "wkb": "AQEAAAAAAAAAAAD4PwAAAAAAAADA", "srid": None},
    "ai": [1, None], "at": ["a", "b c"], "an": [{"scale": 1, "value": "Dw=="}, {"scale": 0, "value": "Ag=="}],
    "ad": [18263], "ats": ["2020-01-02T03:04:05.000000Z"], "ae": ["sad", "ok"], "aj": ["{}"], "aby": ["AQ=="],
    "nm": "nm", "tr": "[1,5)", "tsv": "'a':1 'b':2"}
TYPES_SETUP = ["CREATE EXTENSION hstore", "CREATE TYPE mood AS ENUM ('sad', 'ok')",
               "CREATE DOMAIN posint AS int CHECK (VALUE > 0)", TYPES_DDL]


def test_every_common_type_as_debeziums_schema_and_value(pg_db, data_dir):
    """One row of each common type, snapshotted and streamed: the same schema and value both ways, each
    Debezium's (PostgresValueConverter.schemaBuilder / converter over the text pgoutput sends)."""
    got = capture(pg_db, data_dir, [*TYPES_SETUP, f"INSERT INTO t VALUES ({TYPES_ROW})"],
                  [f"INSERT INTO t SELECT 2, {TYPES_ROW.split(', ', 1)[1]}"], "t", 2)
    (_, snapshot), (_, streamed) = got
    assert after_fields(snapshot) == after_fields(streamed) == TYPES_SCHEMAS
    assert envelope_parts(snapshot)[1]["after"] == TYPES_VALUES
    assert envelope_parts(streamed)[1]["after"] == {**TYPES_VALUES, "id": 2}
    # byte for byte, as JsonConverter lays each value out (struct fields in schema order)
    assert f',"after":{compact({**TYPES_VALUES, "id": 2})},' in streamed


SPECIAL_SETUP = [
    "CREATE TABLE t (id int PRIMARY KEY, n numeric, n52 numeric(5,2), r real, d double precision, dt date, "
    "ts timestamp, ts3 timestamp(3), tstz timestamptz)",
    "INSERT INTO t VALUES (1, 'NaN', 'NaN', 'NaN', 'NaN', 'infinity', 'infinity', 'infinity', 'infinity'), "
    "(2, 'Infinity', 1.5, 'Infinity', '-Infinity', '-infinity', '-infinity', '-infinity', '-infinity'), "
    "(3, '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL)"]


def test_special_values_with_decimal_handling_mode_string(pg_db, data_dir):
    """numeric's NaN and infinities as SpecialValueDecimal's enum names in string mode; infinite dates and
    timestamps as PostgresValueConverter turns them (PGStatement.DATE_POSITIVE/NEGATIVE_INFINITY in
    microseconds, the LocalDates -5877611-06-21/22 in days; timestamptz the text)."""
    got = capture(pg_db, data_dir, SPECIAL_SETUP, [], "t", 3, **{"decimal.handling.mode": "string"})
    rows = [{k: v for k, v in envelope_parts(value)[1]["after"].items() if k not in ("r", "d")} for _, value in got]
    assert [f["type"] for f in after_fields(got[0][1])[1:3]] == ["string", "string"]
    assert rows[0] == {"id": 1, "n": "NAN", "n52": "NAN", "dt": -2147472692, "ts": 9223372036825200000,
                       "ts3": 9223372036825200, "tstz": "infinity"}
    assert rows[1] == {"id": 2, "n": "POSITIVE_INFINITY", "n52": "1.50", "dt": -2147472691,
                       "ts": -9223372036832400000, "ts3": -9223372036832400, "tstz": "-infinity"}
    assert rows[2]["n"] == "NEGATIVE_INFINITY"


def test_float_special_values_are_quoted_as_jackson_writes_them(pg_db, data_dir):
    """Jackson, under Kafka's JsonConverter, quotes NaN and the infinities (bare, they are no JSON)."""
    got = capture(pg_db, data_dir, ["CREATE TABLE t (id int PRIMARY KEY, r real, d double precision)",
                                    "INSERT INTO t VALUES (1, 'NaN', '-Infinity')"], [], "t", 1)
    assert '"r":"NaN","d":"-Infinity"' in got[0][1]


def test_numeric_nan_in_precise_mode_fails_the_task_as_debezium(pg_db, data_dir):
    """decimal.handling.mode=precise cannot hold NaN: Debezium's SpecialValueDecimal.fromLogical fails the
    task with its message (klog crashed in the converter's arithmetic instead)."""
    warnings: list = []
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, n numeric)")
    pg_db.execute("INSERT INTO t VALUES (1, 'NaN')")
    with running(data_dir, cdc(pg_db), warnings=warnings):
        wait_for(lambda: warnings, what="the task's failure")
    assert "Got a special value (NaN/Infinity) for Decimal type" in warnings[0]
    assert "set decimal handling mode to 'string'" in warnings[0]


@pytest.mark.parametrize(("mode", "schema", "value", "toasted"), [
    ("bytes", {"type": "bytes", "optional": True}, "AQL/+w==", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
    ("base64", {"type": "string", "optional": True}, "AQL/+w==", None),
    ("base64-url-safe", {"type": "string", "optional": True}, "AQL_-w==", None),
    ("hex", {"type": "string", "optional": True}, "0102fffb", "__debezium_unavailable_value")])
def test_binary_handling_mode(pg_db, data_dir, mode, schema, value, toasted):
    """bytea per binary.handling.mode (CommonConnectorConfig.BinaryHandlingMode: bytes, or base64 /
    URL-safe base64 with padding / lower-case hex text); an unchanged TOASTed bytea is the placeholder's
    bytes (its text in hex mode: PostgresValueConverter.convertBinaryToHex)."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY, v int, by bytea)",
             "ALTER TABLE t ALTER COLUMN by SET STORAGE EXTERNAL", "INSERT INTO t VALUES (1, 0, '\\x0102fffb')"]
    changes = ["UPDATE t SET by = decode(repeat('ab', 5000), 'hex') WHERE id = 1", "UPDATE t SET v = 1 WHERE id = 1"]
    got = capture(pg_db, data_dir, setup, changes if toasted else [], "t", 3 if toasted else 1,
                  **{"binary.handling.mode": mode})
    assert after_fields(got[0][1])[2] == {**schema, "field": "by"}
    assert envelope_parts(got[0][1])[1]["after"]["by"] == value
    if toasted:
        assert envelope_parts(got[2][1])[1]["after"]["by"] == toasted


def test_interval_string_and_hstore_map_modes(pg_db, data_dir):
    """interval.handling.mode=string: io.debezium.time.Interval, PGInterval's fields as ISO 8601
    (Interval.toIsoString); hstore.handling.mode=map: a map of optional strings in HashMap order."""
    setup = ["CREATE EXTENSION hstore",
             "CREATE TABLE t (id int PRIMARY KEY, iv interval, h hstore)",
             "INSERT INTO t VALUES (1, '1 year 2 mons 3 days 04:05:06.789', 'b=>NULL, a=>1'), "
             "(2, '-1 days -00:00:01.5', ''), (3, '0', NULL)"]
    got = capture(pg_db, data_dir, setup, [], "t", 3,
                  **{"interval.handling.mode": "string", "hstore.handling.mode": "map"})
    fields = after_fields(got[0][1])
    assert fields[1:] == [field("iv", logical("string", "io.debezium.time.Interval")),
                          field("h", {"type": "map", "keys": req("string"), "values": opt("string"), "optional": True})]
    rows = [envelope_parts(v)[1]["after"] for _, v in got]
    assert [(r["iv"], r["h"]) for r in rows] == [("P1Y2M3DT4H5M6.789S", {"a": "1", "b": None}),
                                                  ("P0Y0M-1DT0H0M-1.5S", {}), ("P0Y0M0DT0H0M0S", None)]
    assert '"h":{"a":"1","b":null}' in got[0][1]  # the map in Java HashMap order


def test_unchanged_toasted_values_as_debezium(pg_db, data_dir):
    """An update that leaves TOASTed values alone: under REPLICA IDENTITY DEFAULT each is
    UnchangedToastedPlaceholder's value for its type (text, json: the placeholder; text[]: [placeholder];
    int[]: the placeholder's bytes; hstore: {placeholder: placeholder}); under FULL the old row's value."""
    big = "repeat('x', 10000)"
    setup = ["CREATE EXTENSION hstore",
             "CREATE TABLE t (id int PRIMARY KEY, v int, tx text, jb jsonb, at text[], ai int[], h hstore)",
             "CREATE TABLE f (id int PRIMARY KEY, v int, tx text)", "ALTER TABLE f REPLICA IDENTITY FULL"]
    for table, columns in (("t", ("tx", "jb", "at", "ai", "h")), ("f", ("tx",))):
        setup += [f"ALTER TABLE {table} ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in columns]
    changes = [f"INSERT INTO t VALUES (1, 0, {big}, to_jsonb({big}), ARRAY[{big}], "
               "(SELECT array_agg(g) FROM generate_series(1, 3000) g), hstore('k', " + big + "))",
               f"INSERT INTO f VALUES (1, 0, {big})", "UPDATE f SET v = 1", "UPDATE t SET v = 1"]
    # (f's update first: capture stops the connector once t has its 2 records, so what came before them in
    # the WAL is in its topic by then; f's update last raced the stop on a loaded machine)
    got = capture(pg_db, data_dir, setup, changes, "t", 2)
    wait_for(lambda: len(raw(data_dir, "f")) == 2, what="f's update")
    placeholder = "__debezium_unavailable_value"
    assert envelope_parts(got[1][1])[1]["after"] == {
        "id": 1, "v": 1, "tx": placeholder, "jb": placeholder, "at": [placeholder],
        "ai": list(placeholder.encode()), "h": f'{{"{placeholder}":"{placeholder}"}}'}
    full = envelope_parts(raw(data_dir, "f")[1][1])[1]
    assert full["after"]["tx"] == "x" * 10000 and full["before"]["tx"] == "x" * 10000


def test_a_type_debezium_does_not_know_is_left_out(pg_db, data_dir):
    """A column of a type PostgresValueConverter has no schema for (pg_lsn, tsquery) is not in Debezium's
    events (TableSchemaBuilder skips it): left out, with one warning naming it; include.unknown.datatypes
    sends its text as bytes."""
    warnings: list = []
    setup = ["CREATE DOMAIN posint AS int CHECK (VALUE > 0)",  # an array of a domain: no schema in Debezium
             "CREATE TABLE t (id int PRIMARY KEY, l pg_lsn, q tsquery, da posint[])",
             "INSERT INTO t VALUES (1, '0/1', 'a & b', '{1}')"]
    got = capture(pg_db, data_dir, setup, ["INSERT INTO t VALUES (2, '0/2', 'c', '{2}')"], "t", 2, warnings=warnings)
    assert [f["field"] for f in after_fields(got[1][1])] == ["id"]
    assert [envelope_parts(v)[1]["after"] for _, v in got] == [{"id": 1}, {"id": 2}]
    assert sum("public.t.l of type pg_lsn is left out" in w for w in warnings) == 1



def test_keys_as_debeziums_primary_key_unique_index_and_message_key_columns(pg_db, data_dir):
    """The key as TableSchemaBuilder builds it: the primary key in its own column order (not the table's);
    without one, the first unique index by name over plain columns (JdbcConnection.readTableUniqueIndices),
    its nullable columns optional; with neither, no key at all (a null key, no key schema); and
    message.key.columns (KeyMapper: `<table regex>:<columns>`) over either."""
    setup = ["CREATE TABLE pk (a int, b int, v text, PRIMARY KEY (b, a))",
             "CREATE TABLE uq (id int, code text, v text)", "CREATE UNIQUE INDEX uq_b ON uq (code)",
             "CREATE UNIQUE INDEX uq_a ON uq (lower(v))", "CREATE TABLE nokey (v text)",
             "CREATE TABLE custom (id int PRIMARY KEY, tenant int NOT NULL, v text)",
             "INSERT INTO pk VALUES (1, 2, 'x')", "INSERT INTO uq VALUES (1, 'c', 'x')",
             "INSERT INTO nokey VALUES ('x')", "INSERT INTO custom VALUES (1, 7, 'x')"]
    capture(pg_db, data_dir, setup, ["INSERT INTO nokey VALUES ('y')"], "nokey", 2,
            **{"message.key.columns": r"public\.cust.*:v,tenant"})
    keys = {table: raw(data_dir, table)[0][0] for table in ("pk", "uq", "nokey", "custom")}
    pk_fields = [field("b", req("int32")), field("a", req("int32"))]
    assert keys["pk"] == compact({"schema": {"type": "struct", "fields": pk_fields, "optional": False,
                                             "name": "shop.public.pk.Key"}, "payload": {"b": 2, "a": 1}})
    uq_fields = [field("code", opt("string"))]
    assert keys["uq"] == compact({"schema": {"type": "struct", "fields": uq_fields, "optional": False,
                                             "name": "shop.public.uq.Key"}, "payload": {"code": "c"}})
    assert keys["nokey"] is None and raw(data_dir, "nokey")[1][0] is None
    assert json.loads(keys["custom"])["payload"] == {"v": "x", "tenant": 7}


def test_truncate_and_a_column_added_and_dropped_mid_stream(pg_db, data_dir):
    """skipped.operations=none: a TRUNCATE is op t with no before, after or key value (Envelope.truncate,
    PostgresChangeRecordEmitter.emitTruncateRecord); a column added or dropped between two changes is in
    the next change's schema and value, and not after it is dropped."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')"]
    changes = ["ALTER TABLE t ADD COLUMN extra int DEFAULT 5", "INSERT INTO t VALUES (2, 'b', 6)",
               "ALTER TABLE t DROP COLUMN v", "INSERT INTO t VALUES (3, 7)", "TRUNCATE t"]
    # (DDL after the snapshot read the table; snapshot.locking.mode=shared would make DDL during it wait)
    got = capture(pg_db, data_dir, setup, changes, "t", 4, snapshotted=1, **{"skipped.operations": "none"})
    assert [[f["field"] for f in after_fields(v)] for _, v in got] == [
        ["id", "v"], ["id", "v", "extra"], ["id", "extra"], ["id", "extra"]]
    assert after_fields(got[1][1])[2] == {**opt("int32"), "default": 5, "field": "extra"}
    assert [envelope_parts(v)[1]["after"] for _, v in got[:3]] == [{"id": 1, "v": "a"}, {"id": 2, "v": "b", "extra": 6},
                                                                   {"id": 3, "extra": 7}]
    key, value = got[3]
    truncate = envelope_parts(value)[1]
    assert (truncate["op"], truncate["before"], truncate["after"]) == ("t", None, None)
    assert key is None  # no key, no key schema (Debezium DBZ-3469): a null under the required key schema is refused


def test_heartbeats_as_debeziums_and_they_advance_the_slot(pg_db, data_dir):
    """heartbeat.interval.ms: HeartbeatImpl's record on __debezium-heartbeat.<prefix> (partition 0, key
    ServerNameKey {serverName}, value Heartbeat {ts_ms}); its offset lets the slot be confirmed past
    changes to tables the connector does not capture, while the captured one is quiet."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY)", "CREATE TABLE other (id int PRIMARY KEY)"]
    for sql in setup:
        pg_db.execute(sql)
    config = cdc(pg_db, **{"table.include.list": "public.t", "heartbeat.interval.ms": "100"})
    topic = "__debezium-heartbeat.shop"
    with running(data_dir, config):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        pg_db.execute("INSERT INTO other SELECT generate_series(1, 100)")
        (written,) = pg_db.execute("SELECT pg_current_wal_lsn()")[0]

        def confirmed() -> bool:
            (flushed,) = pg_db.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                                       "WHERE slot_name = 'klog_slot'", (written,))[0]
            return flushed

        wait_for(confirmed, timeout=30, what="the slot confirmed past the uncaptured changes")
    beats = records(data_dir, topic)
    assert beats and {r.partition for r in beats} == {0}
    key = beats[0].key.decode()
    assert key == compact({"schema": {"type": "struct", "fields": [field("serverName", req("string"))],
                                      "optional": False, "name": "io.debezium.connector.common.ServerNameKey",
                                      "version": 1}, "payload": {"serverName": "shop"}})
    value = json.loads(beats[-1].value)
    assert value["schema"] == {"type": "struct", "fields": [field("ts_ms", req("int64"))], "optional": False,
                               "name": "io.debezium.connector.common.Heartbeat", "version": 1}
    assert list(value["payload"]) == ["ts_ms"] and value["payload"]["ts_ms"] > 0


def test_transaction_metadata_as_debeziums(pg_db, data_dir):
    """provide.transaction.metadata: TransactionMonitor's BEGIN and END records on <prefix>.transaction
    (TransactionMetadataKey {id}, TransactionMetadataValue; END's data_collections in the Java HashMap
    order of TransactionContext's counts) and each streamed event's transaction block {id, total_order,
    data_collection_order}; snapshot records have none (the snapshot does not pass the monitor)."""
    setup = ["CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)", "INSERT INTO a VALUES (0)"]
    for sql in setup:
        pg_db.execute(sql)
    with running(data_dir, cdc(pg_db, **{"provide.transaction.metadata": "true"})):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        conn = pg_db.connect(autocommit=False)
        with conn.cursor() as q:
            q.execute("INSERT INTO b VALUES (1), (2)")  # b first: the END lists a first all the same
            q.execute("INSERT INTO a VALUES (1)")
            q.execute("DELETE FROM a WHERE id = 1")
            q.execute("SELECT txid_current()")
            (xid,) = q.fetchone()
        conn.commit()
        conn.close()
        wait_for(lambda: len(records(data_dir, "shop.transaction")) >= 2, what="BEGIN and END")
    tx = [(r.key.decode(), json.loads(r.value)) for r in records(data_dir, "shop.transaction")]
    key_schema = {"type": "struct", "fields": [field("id", req("string"))], "optional": False,
                  "name": "io.debezium.connector.common.TransactionMetadataKey", "version": 1}
    assert tx[0][0] == compact({"schema": key_schema, "payload": {"id": str(xid)}})
    begin, end = tx[0][1], tx[1][1]
    assert begin["schema"] == {"type": "struct", "fields": [
        field("status", req("string")), field("id", req("string")), field("event_count", opt("int64")),
        field("data_collections", {"type": "array", "items": {
            "type": "struct", "fields": [field("data_collection", req("string")), field("event_count", req("int64"))],
            "optional": True, "name": "event.collection", "version": 1}, "optional": True}),
        field("ts_ms", req("int64"))], "optional": False,
        "name": "io.debezium.connector.common.TransactionMetadataValue", "version": 1}
    assert {**begin["payload"], "ts_ms": 0} == {"status": "BEGIN", "id": str(xid), "event_count": None,
                                                "data_collections": None, "ts_ms": 0}
    assert {**end["payload"], "ts_ms": 0} == {"status": "END", "id": str(xid), "event_count": 4, "data_collections": [
        {"data_collection": "public.a", "event_count": 2}, {"data_collection": "public.b", "event_count": 2}],
        "ts_ms": 0}  # HashMap order: "public.a" is in bucket 6, "public.b" in 7
    assert end["payload"]["ts_ms"] == begin["payload"]["ts_ms"] > 0  # the commit time
    blocks = [json.loads(r.value)["payload"]["transaction"] for t in ("a", "b")
              for r in records(data_dir, f"shop.public.{t}") if r.value]
    assert blocks == [None, {"id": str(xid), "total_order": 3, "data_collection_order": 1},
                      {"id": str(xid), "total_order": 4, "data_collection_order": 2},
                      {"id": str(xid), "total_order": 1, "data_collection_order": 1},
                      {"id": str(xid), "total_order": 2, "data_collection_order": 2}]


def test_logical_decoding_messages_as_debeziums(pg_db, data_dir):
    """pg_logical_emit_message: LogicalDecodingMessageMonitor's record on <prefix>.message (MessageKey
    {prefix}; MessageValue {op m, ts_ms, source, transaction, message {prefix, content}}, the content per
    binary.handling.mode); a transactional one carries its transaction's id, a non-transactional one none;
    message.prefix.exclude.list leaves a prefix out."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    config = cdc(pg_db, **{"binary.handling.mode": "hex", "message.prefix.exclude.list": "secret.*"})
    with running(data_dir, config):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        pg_db.execute("SELECT pg_logical_emit_message(false, 'secret', 'x')")
        conn = pg_db.connect(autocommit=False)
        with conn.cursor() as q:
            q.execute("INSERT INTO t VALUES (1)")
            q.execute("SELECT pg_logical_emit_message(true, 'audit', 'hello'), txid_current()")
            (_, xid) = q.fetchone()
        conn.commit()
        conn.close()
        pg_db.execute("SELECT pg_logical_emit_message(false, 'plain', '\\x01ff'::bytea)")
        wait_for(lambda: len(records(data_dir, "shop.message")) >= 2, what="the messages")
    got = [(r.key.decode(), json.loads(r.value)) for r in records(data_dir, "shop.message")]
    assert len(got) == 2 and got[0][0] == compact({"schema": {
        "type": "struct", "fields": [field("prefix", opt("string"))], "optional": False,
        "name": "io.debezium.connector.postgresql.MessageKey", "version": 1}, "payload": {"prefix": "audit"}})
    schema = got[0][1]["schema"]
    assert schema == {"type": "struct", "fields": [
        field("op", req("string")), field("ts_ms", opt("int64")), field("source", SOURCE),
        field("transaction", TRANSACTION),
        field("message", {"type": "struct", "fields": [field("prefix", opt("string")),
                                                       field("content", opt("string"))],
                          "optional": False, "name": "io.debezium.connector.postgresql.Message", "version": 1})],
        "optional": False, "name": "io.debezium.connector.postgresql.MessageValue", "version": 1}
    audit, plain = got[0][1]["payload"], got[1][1]["payload"]
    assert (audit["op"], audit["message"], audit["transaction"]) == ("m", {"prefix": "audit", "content": "68656c6c6f"},
                                                                    None)
    assert (audit["source"]["txId"], audit["source"]["table"]) == (xid, "t")  # the last change's table
    assert plain["message"] == {"prefix": "plain", "content": "01ff"} and plain["source"]["txId"] is None
    # no commit time of its own: the source keeps the last transaction's (Debezium's SourceInfo.update)
    assert plain["source"]["ts_us"] == audit["source"]["ts_us"]


def test_geometric_types_as_debeziums_structs(pg_db, data_dir):
    """box, lseg, path, polygon as io.debezium.data.geometry.Geometry (version 2; WkbWriter's little-endian
    polygon or line string, the type and a path's closedness in extensions), circle as Circle (a Point
    center and a radius), line as Line {a, b, c} (PostgresValueConverter.convertBox ... convertLine)."""
    import base64
    import struct

    setup = ["CREATE TABLE g (id int PRIMARY KEY, bx box, ls lseg, op path, cp path, pg polygon, ci circle, ln line)",
             "INSERT INTO g VALUES (1, '((0,0),(2,1))', '[(0,0),(1,1)]', '[(0,0),(1,0),(1,1)]', '((0,0),(1,0))', "
             "'((0,0),(1,0),(0,1))', '<(1,2),3>', '{1,-1,0}')"]
    got = capture(pg_db, data_dir, setup, [], "g", 1)
    geometry = {"type": "struct", "fields": [
        field("wkb", req("bytes")), field("srid", opt("int32")),
        field("extensions", {"type": "map", "keys": req("string"), "values": req("string"), "optional": True})],
        "optional": True, "name": "io.debezium.data.geometry.Geometry", "version": 2, "doc": "Geometry"}
    point = {"type": "struct", "fields": [field("x", req("double")), field("y", req("double")),
                                          field("wkb", opt("bytes")), field("srid", opt("int32"))],
             "optional": False, "name": "io.debezium.data.geometry.Point", "version": 1, "doc": "Geometry (POINT)"}
    assert after_fields(got[0][1])[1:] == [
        field("bx", geometry), field("ls", geometry), field("op", geometry), field("cp", geometry),
        field("pg", geometry),
        field("ci", {"type": "struct", "fields": [field("center", point), field("radius", req("double"))],
                     "optional": True, "name": "io.debezium.data.geometry.Circle", "version": 1,
                     "doc": "Geometry (CIRCLE)"}),
        field("ln", {"type": "struct", "fields": [field("a", req("double")), field("b", req("double")),
                                                  field("c", req("double"))],
                     "optional": True, "name": "io.debezium.data.geometry.Line", "version": 1,
                     "doc": "Geometry (LINE)"})]

    def wkb(kind: int, *rings: list) -> str:
        out = struct.pack("<bI", 1, kind) + (struct.pack("<I", len(rings)) if kind == 3 else b"")
        for ring in rings:
            out += struct.pack("<I", len(ring)) + b"".join(struct.pack("<dd", x, y) for x, y in ring)
        return base64.b64encode(out).decode()

    after = envelope_parts(got[0][1])[1]["after"]
    # PostgreSQL prints a box upper-right corner first: (2,1),(0,0)
    assert after["bx"] == {"wkb": wkb(3, [(2, 1), (2, 0), (0, 0), (0, 1), (2, 1)]), "srid": None,
                           "extensions": {"type": "box"}}
    assert after["ls"] == {"wkb": wkb(2, [(0, 0), (1, 1)]), "srid": None, "extensions": {"type": "lseg"}}
    assert after["op"] == {"wkb": wkb(2, [(0, 0), (1, 0), (1, 1)]), "srid": None,
                           "extensions": {"type": "path", "closed": "false"}}
    assert after["cp"]["extensions"] == {"type": "path", "closed": "true"}
    assert after["pg"] == {"wkb": wkb(3, [(0, 0), (1, 0), (0, 1), (0, 0)]), "srid": None,
                           "extensions": {"type": "polygon"}}
    center_wkb = base64.b64encode(struct.pack("<bIdd", 1, 1, 1, 2)).decode()
    assert after["ci"] == {"center": {"x": 1.0, "y": 2.0, "wkb": center_wkb, "srid": None}, "radius": 3.0}
    assert after["ln"] == {"a": 1.0, "b": -1.0, "c": 0.0}


def test_a_38_digit_decimal_is_encoded_exactly(pg_db, data_dir):
    import base64

    digits = 12345678901234567890123456789012345678
    got = capture(pg_db, data_dir, ["CREATE TABLE t (id int PRIMARY KEY, n numeric(38,0))",
                                    f"INSERT INTO t VALUES (1, {digits})"], [], "t", 1)
    exact = base64.b64encode(digits.to_bytes((digits.bit_length() + 8) // 8, "big", signed=True)).decode()
    assert envelope_parts(got[0][1])[1]["after"]["n"] == exact


def test_float_exponents_as_java_prints_them(pg_db, data_dir):
    got = capture(pg_db, data_dir, ["CREATE TABLE t (id int PRIMARY KEY, d double precision)",
                                    "INSERT INTO t VALUES (1, 1e20)"], [], "t", 1)
    assert '"d":1.0E20' in got[0][1]


def test_a_table_name_kafka_cannot_take_is_sanitized_as_debezium(pg_db, data_dir):
    """SchemaTopicNamingStrategy's topic <prefix>.<schema>.<table> through sanitizedTopicName: each
    character outside [a-zA-Z0-9._-] an underscore; the Key/Value/Envelope schema names follow it."""
    got = capture(pg_db, data_dir, ['CREATE TABLE "Order Items€" (id int PRIMARY KEY)',
                                    'INSERT INTO "Order Items€" VALUES (1)'], [], "Order_Items_", 1)
    key, value = got[0]
    assert json.loads(key)["schema"]["name"] == "shop.public.Order_Items_.Key"
    assert json.loads(value)["schema"]["name"] == "shop.public.Order_Items_.Envelope"
    assert envelope_parts(value)[1]["source"]["table"] == "Order Items€"


def test_defaults_of_enum_interval_and_bit_columns_as_debeziums(pg_db, data_dir):
    """PostgresDefaultValueConverter's mappers beyond the plain types: an enum's quoted label, an interval's
    literal through its converter (MicroDuration), bit(1) as a boolean, bit(n)/varbit as Bits bytes (base64
    in the schema's JSON, as JsonConverter writes a bytes default)."""
    setup = ["CREATE TYPE mood AS ENUM ('sad', 'ok')",
             "CREATE TABLE d (id int PRIMARY KEY, e mood DEFAULT 'ok', iv interval DEFAULT '1 day 00:00:01', "
             "b1 bit(1) DEFAULT B'1', b3 bit(3) DEFAULT B'101', vb varbit DEFAULT B'11', "
             "f interval DEFAULT now() - now())",
             "INSERT INTO d (id) VALUES (1)"]
    got = capture(pg_db, data_dir, setup, [], "d", 1)
    defaults = {f["field"]: f.get("default") for f in after_fields(got[0][1])}
    assert defaults == {"id": None, "e": "ok", "iv": 86401000000, "b1": True, "b3": "BQ==", "vb": "Aw==", "f": None}


def test_required_columns_a_delete_lacks_get_debeziums_fallbacks(pg_db, data_dir):
    """Under REPLICA IDENTITY DEFAULT a delete carries only the key; each NOT NULL column it lacks gets
    the fallback its converter gives convertValue (ZonedTime's midnight UTC, an empty array, "{}" for
    hstore as JSON, a unit Point, Line {0, 1, 0}, geometryFallback's unit box; numeric and money in
    string mode BigDecimal.ZERO at the column's scale)."""
    setup = ["CREATE EXTENSION hstore",
             "CREATE TABLE t (id int PRIMARY KEY, tz timetz NOT NULL, h hstore NOT NULL, a int[] NOT NULL, "
             "p point NOT NULL, l line NOT NULL, b box NOT NULL, n numeric(5,2) NOT NULL, m money NOT NULL)",
             "INSERT INTO t VALUES (1, '01:00+00', '', '{}', '(1,1)', '{1,1,1}', '((0,0),(1,1))', 1, 1)"]
    got = capture(pg_db, data_dir, setup, ["DELETE FROM t"], "t", 3, snapshotted=1,
                  **{"decimal.handling.mode": "string"})
    before = envelope_parts(got[1][1])[1]["before"]
    assert before == {
        "id": 1, "tz": "00:00:00Z", "h": "{}", "a": [],
        "p": {"x": 0.0, "y": 0.0, "wkb": "AQEAAAAAAAAAAAAAAAAAAAAAAAAA", "srid": None},
        "l": {"a": 0.0, "b": 1.0, "c": 0.0},
        "b": {"wkb": "AQMAAAABAAAABQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAPA/AAAAAAAA8D8AAAAAAADwPwAAAAAAAPA/"
                     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "srid": None, "extensions": {"type": "box"}},
        "n": "0.00", "m": "0.00"}


def test_the_end_of_the_day_as_debezium(pg_db, data_dir):
    """time '24:00:00' (PostgreSQL allows it) is a whole day in MicroTime (Strings.asDuration; klog's task
    failed on it), and timetz '24:00:00+00' stays 24:00:00Z (PostgresTimeBoundary), snapshot and stream."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY, tm time, tm3 time(3), tz timetz)",
             "INSERT INTO t VALUES (1, '24:00:00', '24:00:00', '24:00:00+00')"]
    got = capture(pg_db, data_dir, setup, ["INSERT INTO t VALUES (2, '24:00:00', '24:00:00', '24:00:00+00')"], "t", 2)
    assert [envelope_parts(v)[1]["after"] for _, v in got] == [
        {"id": i, "tm": 86_400_000_000, "tm3": 86_400_000, "tz": "24:00:00Z"} for i in (1, 2)]


def test_dates_and_timestamps_beyond_python_datetime_as_debezium(pg_db, data_dir):
    """BC dates and years past 9999 (PostgreSQL's range; Python's datetime cannot hold them, and klog sent
    null): epoch days and microseconds of the proleptic calendar as java.time counts them (1 BC is year
    0), ZonedTimestamp's year as java.time prints it (a sign past 9999)."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz)",
             "INSERT INTO t VALUES (1, '0044-03-15 BC', '10000-01-01 00:00:00', '0001-01-01 00:00:00+00 BC'), "
             "(2, '12345-06-07', '0001-01-01 00:00:00 BC', '12345-06-07 08:09:10.5+00')"]
    got = capture(pg_db, data_dir, setup, [], "t", 2)
    assert [envelope_parts(v)[1]["after"] for _, v in got] == [
        {"id": 1, "d": -735160, "ts": 253402300800000000, "tz": "0000-01-01T00:00:00.000000Z"},
        {"id": 2, "d": 3789548, "ts": -62167219200000000, "tz": "+12345-06-07T08:09:10.500000Z"}]


def test_skipped_operations_are_validated_as_debezium(pg_db):
    """skipped.operations takes r, c, u, d, t, or none alone (CommonConnectorConfig.validateSkippedOperation):
    anything else is refused naming the key (klog took any letter, and skipped logical decoding messages
    for an m Debezium refuses)."""
    from klog.connect.worker import validate

    for bad in ("c,m", "none,t", "x"):
        with pytest.raises(Exception, match="skipped.operations"):
            validate(cdc(pg_db, **{"skipped.operations": bad}))
    validate(cdc(pg_db, **{"skipped.operations": "c,u"}))


def test_a_hex_unavailable_value_placeholder_is_its_bytes(pg_db, data_dir):
    """unavailable.value.placeholder=hex:... is those bytes (PostgresConnectorConfig.
    getUnavailableValuePlaceholder), as text in a text column and as the bytes in a bytea one."""
    setup = ["CREATE TABLE t (id int PRIMARY KEY, v int, tx text, by bytea)",
             "ALTER TABLE t ALTER COLUMN tx SET STORAGE EXTERNAL", "ALTER TABLE t ALTER COLUMN by SET STORAGE EXTERNAL"]
    changes = ["INSERT INTO t VALUES (1, 0, repeat('x', 10000), decode(repeat('ab', 5000), 'hex'))",
               "UPDATE t SET v = 1"]
    got = capture(pg_db, data_dir, setup, changes, "t", 2, **{"unavailable.value.placeholder": "hex:414243"})
    after = envelope_parts(got[1][1])[1]["after"]
    assert (after["tx"], after["by"]) == ("ABC", "QUJD")


def test_a_multi_dimensional_array_does_not_fail_the_task(pg_db, data_dir):
    """int[][] (one Connect array schema, as Debezium's for int[]): its inner arrays are null elements, as
    Debezium's handleUnknownData makes the Integer[] its element converter cannot read (klog's task failed
    on such a row)."""
    got = capture(pg_db, data_dir, ["CREATE TABLE t (id int PRIMARY KEY, m int[][])",
                                    "INSERT INTO t VALUES (1, '{{1,2},{3,4}}'), (2, '{5}')"], [], "t", 2)
    assert [envelope_parts(v)[1]["after"]["m"] for _, v in got] == [[None, None], [5]]


def test_transaction_metadata_goes_on_counting_after_a_restart_inside_a_transaction(pg_db, data_dir):
    """A worker stopped while a transaction is part delivered (one change a poll): the next run's events go
    on with the transaction's orders (stored in the offsets, as Debezium's TransactionContext), with no
    second BEGIN, and the END counts the whole transaction."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    config = cdc(pg_db, **{"provide.transaction.metadata": "true", "max.batch.size": "1"})
    with running(data_dir, config):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        pg_db.execute("INSERT INTO t SELECT generate_series(1, 2000)")
        wait_for(lambda: len(records(data_dir, "shop.public.t")) >= 20, what="part of the transaction")
    assert len(records(data_dir, "shop.public.t")) < 2000  # stopped inside the transaction
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "shop.transaction")) >= 2, timeout=60, what="the END")
    orders = [json.loads(r.value)["payload"]["transaction"]["total_order"] for r in records(data_dir, "shop.public.t")]
    assert orders == list(range(1, 2001))
    statuses = [json.loads(r.value)["payload"]["status"] for r in records(data_dir, "shop.transaction")]
    assert statuses == ["BEGIN", "END"]
    assert json.loads(records(data_dir, "shop.transaction")[1].value)["payload"]["event_count"] == 2000

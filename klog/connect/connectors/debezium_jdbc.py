"""Debezium's JDBC sink (io.debezium.connector.jdbc.JdbcSinkConnector): its keys, names, defaults and
validation as a second face of klog's one JDBC sink (klog.connect.connectors.jdbc: the same dialects,
statements, transactions and exactly-once offsets table; this module only maps the keys onto SinkSettings).

Like Debezium's, it reads the change event envelope natively: a create, read or update (op c, r, u) writes
`after`; a delete (op d) or a tombstone deletes by the record key when delete.enabled (else it is skipped);
a truncate (op t) empties the table when truncate.enabled (else skipped). A flat record (after
ExtractNewRecordState) is the row itself. Tables are named by collection.name.format (table.name.format
before Debezium 3) with ${topic} (its dots as underscores, as DefaultCollectionNamingStrategy) and
${source.<field>} from the envelope's source block (${source.db}, ${source.schema}, ${source.table}).
schema.evolution=basic creates and widens tables; none writes into existing ones only. Debezium's semantic
types become the columns Debezium's PostgreSQL dialect creates (pg_column_type: timestamptz, json, uuid,
interval, bit(n), ... and what column.propagate.source.type adds); batch.size bounds a statement batch and
use.reduction.buffer writes the last change of each key only (jdbc.SinkSettings).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klog.connect.api import SinkConnector
from klog.connect.config import ConfigDef
from klog.connect.connectors.jdbc import (
    DELETE,
    ROW,
    SKIP,
    TRUNCATE,
    Dialect,
    JdbcConnection,
    JdbcSinkTask,
    OffsetsInDatabase,
    PostgresDialect,
    SinkSettings,
    jdbc_url_check,
)
from klog.connect.data import (
    DATE,
    DECIMAL,
    EPOCH,
    TIME,
    TIMESTAMP,
    ConnectRecord,
    Schema,
    fields_by_name,
    from_epoch_days,
    from_epoch_millis,
)
from klog.connect.errors import ConfigError, DataError

NAMING_STRATEGIES = ("io.debezium.sink.naming.DefaultCollectionNamingStrategy",
                     "io.debezium.connector.jdbc.naming.DefaultTableNamingStrategy")  # the latter before 3.0
COLUMN_NAMING_STRATEGIES = ("io.debezium.connector.jdbc.naming.DefaultColumnNamingStrategy",
                            "io.debezium.sink.naming.DefaultColumnNamingStrategy")
UTC_NAMES = ("utc", "z", "gmt", "etc/utc", "+00:00")
SCHEMA_CHANGE = "SchemaChangeValue"  # Debezium's schema change topic's value schema names contain it
SOURCE_PLACEHOLDER = re.compile(r"\$\{source\.(.*?)}")
PLACEHOLDER = re.compile(r"\$\{(.*?)}")

CONFIG = (ConfigDef()
          .define("connection.url", check=jdbc_url_check, doc="Valid JDBC URL")
          .define("connection.username", default="")
          .define("connection.password", "password", "")
          .define("insert.mode", default="insert", choices=("insert", "upsert", "update"))
          .define("delete.enabled", "boolean", False)
          .define("truncate.enabled", "boolean", False)
          .define("collection.name.format", default="${topic}")
          .define("table.name.format", default="${topic}", doc="collection.name.format's name before Debezium 3")
          .define("collection.naming.strategy", default=NAMING_STRATEGIES[0])
          .define("table.naming.strategy", default=NAMING_STRATEGIES[0],
                  doc="collection.naming.strategy's name before Debezium 3")
          .define("column.naming.strategy", default=COLUMN_NAMING_STRATEGIES[0])
          .define("primary.key.mode", default="none",
                  choices=("none", "kafka", "record_key", "record_value", "record_header"))
          .define("primary.key.fields", "list", [])
          .define("schema.evolution", default="none", choices=("none", "basic"))
          .define("quote.identifiers", "boolean", False)
          .define("use.time.zone", default="UTC")
          .define("database.time_zone", default="UTC", doc="use.time.zone's name before Debezium 3")
          .define("batch.size", "int", 500, at_least=1)
          .define("use.reduction.buffer", "boolean", False)
          .define("field.include.list", "list", [])
          .define("field.exclude.list", "list", [])
          .define("flush.max.retries", "int", 5, at_least=0)
          .define("flush.retry.delay.ms", "long", 1000, at_least=0)
          .define("exactly.once.offsets.table", default="__klog_connect_offsets",
                  doc="klog: where the consumed offsets are stored with the rows (exactly-once)"))


def _given(props: dict[str, str], config: dict[str, Any], key: str, old: str) -> Any:
    """A key or, when only it is set, its name before Debezium 3 (Debezium's deprecated aliases)."""
    return config[old] if key not in props and old in props else config[key]


# -- the change event envelope ------------------------------------------------------------------------
def is_change_event(r: ConnectRecord) -> bool:
    """Debezium's test: a value whose schema is named ...Envelope, or unnamed with an `op` field."""
    schema = r.value_schema
    if r.value is None or schema is None or type(r.value) is not dict:
        return False
    name = schema.get("name")
    if name:
        return name.endswith("Envelope")
    return "op" in fields_by_name(schema)


def _micros(us: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=us)


def _same(default: Any) -> Any:
    return default


def _variable_scale(value: dict) -> decimal.Decimal:
    """A VariableScaleDecimal ({scale, value: the unscaled big-endian bytes}) as its number."""
    from klog.connect.converters import decimal_from_bytes

    return decimal_from_bytes(value["value"], value["scale"])


def _dropped(default: Any) -> None:
    return None  # a default the Connect type cannot hold: the column gets none


DAY_MICROS = 86_400_000_000


def _time_of_day(us: int) -> dt.time | str:
    """A Time's, MicroTime's or NanoTime's microseconds since midnight as the time of day; 24:00:00
    (PostgreSQL's time takes it) as its text. Any other value outside one day (MySQL's TIME runs from
    -838:59:59 to 838:59:59; Debezium's sink fails on it too) is no time of day: refused, not wrapped into
    another one (100:00:00 written as 04:00:00, -00:00:01 as 23:59:59)."""
    if 0 <= us < DAY_MICROS:
        return (EPOCH + dt.timedelta(microseconds=us)).time()
    if us == DAY_MICROS:
        return "24:00:00"
    raise ValueError(f"{dt.timedelta(microseconds=us)} is no time of day")


# Debezium's semantic types its sink writes as dates, times, timestamps and numbers (its PostgreSQL source's
# defaults: MicroTimestamp for timestamp, Date, MicroTime, VariableScaleDecimal for an unconstrained numeric) as
# the Connect logical type whose column the sink creates, not an integer or a struct: name -> (Connect's type and
# name, the value as the dialect binds it, a schema default in Connect's form)
SEMANTIC_TYPES: dict[str, tuple[str, str, Callable[[Any], Any], Callable[[Any], Any]]] = {
    "io.debezium.time.Date": ("int32", DATE, from_epoch_days, _same),
    "io.debezium.time.Time": ("int32", TIME, lambda ms: _time_of_day(ms * 1000), _same),
    "io.debezium.time.MicroTime": ("int32", TIME, _time_of_day, lambda us: us // 1000),
    "io.debezium.time.NanoTime": ("int32", TIME, lambda ns: _time_of_day(ns // 1000), lambda ns: ns // 1_000_000),
    "io.debezium.time.Timestamp": ("int64", TIMESTAMP, from_epoch_millis, _same),
    "io.debezium.time.MicroTimestamp": ("int64", TIMESTAMP, _micros, lambda us: us // 1000),
    "io.debezium.time.NanoTimestamp": ("int64", TIMESTAMP, lambda ns: _micros(ns // 1000), lambda ns: ns // 1_000_000),
    "io.debezium.data.VariableScaleDecimal": ("bytes", DECIMAL, _variable_scale, _dropped),
}


# -- the column types of Debezium's PostgreSQL dialect ------------------------------------------------
SOURCE_TYPE = "__debezium.source.column.type"  # from the source's column.propagate.source.type
SOURCE_LENGTH, SOURCE_SCALE = "__debezium.source.column.length", "__debezium.source.column.scale"
ZONED_TIMESTAMP, ZONED_TIME = "io.debezium.time.ZonedTimestamp", "io.debezium.time.ZonedTime"
MICRO_DURATION, BITS, JSON = "io.debezium.time.MicroDuration", "io.debezium.data.Bits", "io.debezium.data.Json"
GEOMETRIES = ("io.debezium.data.geometry.Geometry", "io.debezium.data.geometry.Geography",
              "io.debezium.data.geometry.Point")
PG_BY_NAME = {ZONED_TIMESTAMP: "timestamptz", ZONED_TIME: "timetz", MICRO_DURATION: "interval",
              "io.debezium.data.Uuid": "uuid", "io.debezium.data.Xml": "xml", "io.debezium.data.Ltree": "ltree"}
# the names Debezium's dialects resolve a column type by before the source column's type (Enum: text)
BY_NAME = {*PG_BY_NAME, *SEMANTIC_TYPES, JSON, BITS, *GEOMETRIES, "io.debezium.data.Enum", DATE, TIME, TIMESTAMP,
           DECIMAL}
# then, for another schema, the source column's type (column.propagate.source.type on the source)
PG_BY_SOURCE_TYPE = {"XML": "xml", "MONEY": "money", "CIDR": "cidr", "MACADDR": "macaddr", "INET": "inet",
                     "CITEXT": "citext", "OID": "oid", **{t: t.lower() for t in (
                         "INT4RANGE", "INT8RANGE", "NUMRANGE", "TSRANGE", "TSTZRANGE", "DATERANGE", "SMALLSERIAL",
                         "SERIAL", "BIGSERIAL")}}
VARYING = 2_147_483_647  # Bits' length of an unbounded bit varying
# the types whose column takes the source column's precision (fractional second digits), when propagated
PG_WITH_PRECISION = {TIMESTAMP: "timestamp", TIME: "time", ZONED_TIMESTAMP: "timestamptz", ZONED_TIME: "timetz"}
# a string's column by its propagated source column type: char(n) or varchar(n) (ConnectStringType's)
PG_SIZED_STRINGS = {"CHAR": "char", "CHARACTER": "char", "BPCHAR": "char", "NCHAR": "char", "VARCHAR": "varchar",
                    "VARCHAR2": "varchar", "CHARACTER VARYING": "varchar", "NVARCHAR": "varchar",
                    "NVARCHAR2": "varchar"}


def _source_type(schema: Schema) -> str:
    return str((schema.get("parameters") or {}).get(SOURCE_TYPE, "")).upper()


def column_type(dialect: Dialect, schema: Schema) -> str | None:
    """SinkSettings.column_type: PostgreSQL's as Debezium's PostgreSQL dialect (pg_column_type); any other
    database's the Connect type's (Debezium's generic dialect knows none of these types)."""
    return pg_column_type(schema) if isinstance(dialect, PostgresDialect) else None


def pg_column_type(schema: Schema) -> str | None:
    """The column type Debezium's PostgreSQL dialect gives a field: by the schema's name, else by its source
    column's type, else a map as hstore; None: the Connect type's."""
    name, source = schema.get("name"), _source_type(schema)
    if name in PG_WITH_PRECISION:
        return _with_precision(PG_WITH_PRECISION[name], schema)
    if name == DECIMAL:
        return _numeric(schema)
    if name in PG_BY_NAME:
        return PG_BY_NAME[name]
    if name == JSON:
        return {"JSONB": "jsonb", "HSTORE": "hstore"}.get(source, "json")
    if name == BITS or (name not in BY_NAME and source in ("BIT", "VARBIT")):
        return _bit_type(schema, source)
    if name in BY_NAME:
        return None
    if source in PG_BY_SOURCE_TYPE:
        return PG_BY_SOURCE_TYPE[source]
    if source in PG_SIZED_STRINGS and schema.get("type") == "string":
        return _sized_string(PG_SIZED_STRINGS[source], schema)
    if schema.get("type") == "array":
        element = _element_type(schema.get("items"))
        return None if element is None else element + "[]"
    return "hstore" if schema.get("type") == "map" else None


PG_ELEMENTS = {"int8": "smallint", "int16": "smallint", "int32": "integer", "int64": "bigint", "float32": "real",
               "float64": "double precision", "boolean": "boolean", "string": "text"}


def _element_type(items: Schema | None) -> str | None:
    """An array's element as Debezium's ArrayType types it: a primitive, or a string type of its own (uuid,
    json, xml, an Enum's text); None for elements whose values need converting (dates, decimals, bytes,
    nested arrays: klog writes those arrays as JSON text)."""
    if not items or items.get("type") not in PG_ELEMENTS:
        return None
    name = items.get("name")
    if name is None or name == "io.debezium.data.Enum":
        return PG_ELEMENTS[items["type"]]
    column = pg_column_type(items)
    return column if column is not None and _pg_rewrite(items) is None else None


def _array_literal(values: list) -> str:
    """A list as PostgreSQL's array text ({...}: each element quoted, NULL for None), which the column's
    element type reads."""
    def element(value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "true" if value else "false"
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(element(v) for v in values) + "}"


def _parameter(schema: Schema, key: str) -> int | None:
    try:
        return int((schema.get("parameters") or {})[key])
    except (KeyError, ValueError, TypeError):
        return None


def _with_precision(base: str, schema: Schema) -> str | None:
    """A timestamp's or time's column with the source column's fractional digits (its scale, else its length)
    when propagated and 1 to 6, as Debezium's AbstractTimestampType; None: klog's timestamp or time."""
    precision = _parameter(schema, SOURCE_SCALE)
    if precision is None:
        precision = _parameter(schema, SOURCE_LENGTH)
    if precision is not None and 0 < precision <= 6:
        return f"{base}({precision})"
    return base if base.endswith("tz") else None


def _numeric(schema: Schema) -> str | None:
    """Decimal with its precision (connect.decimal.precision, which Debezium's sources set) as numeric(p, s),
    as Debezium's ConnectDecimalType (a negative scale as 0); None: an unconstrained numeric."""
    precision = _parameter(schema, "connect.decimal.precision")
    if precision is None or precision <= 0:
        return None
    return f"numeric({min(precision, 1000)}, {max(_parameter(schema, 'scale') or 0, 0)})"


def _sized_string(base: str, schema: Schema) -> str:
    """char(n) (n at least 1) or varchar(n) from the propagated source column length; varchar without one
    is text, as Debezium's."""
    length = _parameter(schema, SOURCE_LENGTH) or 0
    if base == "char":
        return f"char({max(length, 1)})"
    return f"varchar({length})" if length > 0 else "text"


def _bit_type(schema: Schema, source: str) -> str:
    """Debezium's BitType: bit for one bit (a boolean), bit varying unbounded, else bit(n) or, from a
    varbit column, bit varying(n)."""
    if schema.get("name") is None:
        return "bit"
    length = _bits_length(schema)
    if length == VARYING:
        return "bit varying"
    return f"bit varying({length})" if source == "VARBIT" else f"bit({length})"


def _bits_length(schema: Schema) -> int:
    try:
        return int((schema.get("parameters") or {})["length"])
    except (KeyError, ValueError, TypeError):
        raise DataError(f"field {schema.get('field')!r} of type {BITS} has no length parameter") from None


FINER_THAN_MICROS = re.compile(r"\.(\d{7,})")


def _instant(text: str) -> dt.datetime:
    """ISO text with its offset as a datetime; a fraction finer than microseconds (ZonedTimestamp's nanoseconds
    from Oracle or SQL Server) rounded half up to them, as pgjdbc binds Debezium's (fromisoformat cuts it)."""
    finer = FINER_THAN_MICROS.search(text)
    if finer is None:
        return dt.datetime.fromisoformat(text)
    nanos = int(finer.group(1)[:9].ljust(9, "0"))
    whole = dt.datetime.fromisoformat(text[:finer.start()] + text[finer.end():])
    return whole + dt.timedelta(microseconds=(nanos + 500) // 1000)


def _zoned_timestamp(text: str) -> Any:
    """ZonedTimestamp's ISO text with its offset as the instant a timestamptz holds (PostgreSQL's
    infinity and -infinity as they are)."""
    return text if text in ("infinity", "-infinity") else _instant(text)


def _zoned_timestamp_utc(text: str) -> str:
    """ZonedTimestamp in a database without timestamptz (SQLite): ISO text in UTC, with its offset."""
    return _instant(text).astimezone(dt.UTC).isoformat()


def _zoned_time(text: str) -> str:
    dt.time.fromisoformat(text)  # a bad value fails its record here, not its batch in the database
    return text


def _interval(us: int) -> str:
    """MicroDuration's microseconds as an interval (exact: Debezium's sink drops the fraction of a second)."""
    return f"{int(us)} microseconds"


def _bits_writer(schema: Schema) -> Callable[[Any], str]:
    """Bits' bytes (a little-endian number, as Debezium's PostgreSQL source writes a Java BitSet's) as the
    bit string, padded to the column's length; a boolean (bit(1)) as 1 or 0."""
    if schema.get("name") is None:
        return lambda value: "1" if value else "0"
    length = _bits_length(schema)

    def bits(value: bytes) -> str:
        text = format(int.from_bytes(value, "little"), "b")
        return text if length == VARYING else text.rjust(length, "0")

    return bits


def _hstore(value: Any) -> str:
    """A map, or Json text of one (Debezium's hstore.handling.mode json), as hstore's text."""
    pairs = json.loads(value) if isinstance(value, str) else value
    if not isinstance(pairs, dict):
        raise ValueError("an hstore is a JSON object")

    def quoted(text: Any) -> str:
        return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'

    return ", ".join(f"{quoted(k)}=>{'NULL' if v is None else quoted(v)}" for k, v in pairs.items())


def _unquoted_range(text: str) -> str:
    return text.replace('"', "")  # Debezium's RangeType binds the range's text without its quotes


def _pg_rewrite(f: Schema) -> tuple[str | None, Callable[[Any], Any] | None, Callable[[Any], Any]] | None:
    """A field of a column type Debezium's PostgreSQL dialect writes (pg_column_type) whose value or default
    the sink must convert: (the Connect type written, the value's converter, the default's: None drops it)."""
    column = pg_column_type(f)
    if column is None:
        return None
    name = f.get("name")
    if name == ZONED_TIMESTAMP:
        return None, _zoned_timestamp, _same
    if name == ZONED_TIME:
        return None, _zoned_time, _same
    if name == MICRO_DURATION:
        return "string", _interval, _interval
    if column.startswith("bit"):
        return "string", _bits_writer(f), _dropped  # Debezium's BitType writes no default
    if column == "hstore":
        return None, _hstore, _dropped  # a map stays one to pg_column_type
    if column.endswith("range"):
        return None, _unquoted_range, _same
    if column.endswith("serial"):
        return None, None, _dropped  # the column's sequence is its default
    if column.endswith("[]"):
        return None, _array_literal, _dropped
    return None


@dataclass(frozen=True)
class Layout:
    """What a value schema is to the sink: an envelope or a flat row; the row's schema as written (Debezium's
    temporal fields as Connect's), and how those fields' values convert."""

    schema: Schema
    envelope: bool
    row_schema: Schema | None
    converters: tuple[tuple[str, Callable[[Any], Any]], ...]


# the columns the sink creates for Connect's logical types (Dialect.sql_type), by kind (_kind)
LOGICAL_COLUMNS = {DATE: "date", TIME: "time", TIMESTAMP: "timestamp", DECIMAL: "numeric"}
SAME_KIND = {"timestamptz": "timestamp", "timetz": "time", "varbit": "bit"}


def _kind(column: str) -> str:
    """A column type as its kind, the sink's (pg_column_type) and an existing column's (format_type) alike:
    bit(3) and bit varying are bit, text[] an array, int4range a range, timestamptz(3) and timestamp without
    time zone a timestamp, numeric(10,2) numeric."""
    if column.endswith("[]"):
        return "array"
    word = (column.split("(")[0].split() or [""])[0].rsplit(".", 1)[-1]
    return "range" if word.endswith("range") else SAME_KIND.get(word, word)


def _rewrite(f: Schema, postgres: bool) -> tuple[str, str | None, str, Callable | None, Callable] | None:
    """How the sink writes a field of a Debezium type: (the kind of column it creates, the Connect type and
    name written, the value's converter, the default's: None drops it); None: as it comes."""
    name = f.get("name") or ""
    if name in SEMANTIC_TYPES:
        kind, logical, value_of, default_of = SEMANTIC_TYPES[name]
        return LOGICAL_COLUMNS[logical], kind, logical, value_of, default_of
    if postgres and (rewrite := _pg_rewrite(f)) is not None:
        kind, value_of, default_of = rewrite
        return _kind(pg_column_type(f) or ""), kind, name, value_of, default_of
    if name == ZONED_TIMESTAMP:
        return "text", None, name, _zoned_timestamp_utc, _zoned_timestamp_utc
    return None


def _of_the_connect_type(f: Schema, column: str | None, kind: str) -> bool:
    """Whether an existing column is of the kind the field's Connect type creates (PostgreSQL's, as
    Dialect.sql_type) and not of the kind the sink creates for its Debezium type."""
    if column is None:
        return False
    existing = _kind(column)
    return existing != kind and existing == _kind(PostgresDialect.types.get(f.get("type"), "TEXT").lower())


def _written_row(row: Schema | None, postgres: bool, kept: Callable[[str], bool],
                 existing: Callable[[str], str | None]) -> tuple[Schema | None, tuple]:
    """The row schema (a value's or a key's) with Debezium's temporal fields as Connect's logical types, the
    fields of its PostgreSQL dialect's own types as it writes them there (pg_column_type), and their
    converters; a geometry (PostGIS) fails the record.

    A field whose column exists as the column of its Connect type, not of the kind the sink creates for it
    (existing: the declared type of a field's column, None: no such column), is left as it comes: a table
    an earlier klog created has bigint for a MicroDuration, bytea for Bits, text for a map or an array,
    integer for a date key, where an interval's text, a bit string, hstore's or an array's text, a date
    would be refused or, a bit string into a bytea, stored as its characters."""
    if not row or row.get("type") != "struct":
        return row, ()
    converters = []
    fields = []
    for f in row.get("fields", []):
        name = f.get("name") or ""
        if name in GEOMETRIES and kept(f["field"]):
            raise DataError(f"field {f['field']!r} is a {name}: klog's Debezium JDBC sink does not write geometries "
                            "(Debezium's writes them into PostGIS types); leave it out with field.exclude.list")
        rewrite = _rewrite(f, postgres)
        if rewrite is None or _of_the_connect_type(f, existing(f["field"]), rewrite[0]):
            fields.append(f)
            continue
        _, kind, name, value_of, default_of = rewrite
        field = {k: v for k, v in f.items() if k not in ("fields", "default")}
        field.update(type=kind or f["type"], **({"name": name} if name else {}))
        if f.get("default") is not None and (default := default_of(f["default"])) is not None:
            field["default"] = default
        fields.append(field)
        if value_of is not None:
            converters.append((f["field"], value_of))
    return ({**row, "fields": fields} if fields != row.get("fields") else row), tuple(converters)


class ChangeEvents:
    """What each record asks of the table (jdbc.SinkSettings.classify), as Debezium's sink reads it."""

    def __init__(self, delete_enabled: bool, truncate_enabled: bool, postgres: bool = False,
                 keep_field: Callable[[str, str], bool] | None = None) -> None:
        self.delete = DELETE if delete_enabled else SKIP
        self.truncate = TRUNCATE if truncate_enabled else SKIP
        self.postgres = postgres  # the fields of Debezium's PostgreSQL dialect's own types written as it does
        self.keep_field = keep_field
        # (value schema id, topic, table) -> its Layout: the same row schema object for every event of a table
        # (the writer's statement plans key on it), the schema read once
        self.layouts: dict[tuple[int, str, str], Layout] = {}
        # (key schema id, table) -> (the key schema, as written, its converters): a struct key's, as a row's
        self.key_layouts: dict[tuple[int, str], tuple[Schema, Schema, tuple]] = {}
        self.plain_keys: dict[int, Schema] = {}  # key schemas without a field to convert, by id

    def forget(self) -> None:
        """The tables' columns may have changed (jdbc.SinkSettings.forget_classified): layouts read again."""
        self.layouts.clear()
        self.key_layouts.clear()

    def __call__(self, r: ConnectRecord, table: str = "",
                 existing_type: Callable[[str, str], str | None] | None = None) -> tuple[str, ConnectRecord]:
        key_schema = r.key_schema
        if key_schema is not None and self.plain_keys.get(id(key_schema)) is not key_schema:
            r = self._with_key(r, table, existing_type)
        schema = r.value_schema
        if r.value is None:
            return self.delete, r  # a tombstone, or a delete a transform flattened
        if schema is None or type(r.value) is not dict:
            return ROW, r
        layout = self.layouts.get((id(schema), r.topic, table))
        if layout is None or layout.schema is not schema:
            layout = self._layout(r, table, existing_type)
        if layout.envelope:
            op = r.value.get("op")
            if op == "d":
                return self.delete, r.new_record(value=None, value_schema=None)
            if op == "t":
                return self.truncate, r
            row = r.value.get("after")
            if op not in ("c", "r", "u") or row is None:
                return SKIP, r  # a logical decoding message (op m) has no row
        elif layout.row_schema is schema and not layout.converters:
            return ROW, r  # a flat row written as it is (a value converted under the same schema is not)
        else:
            row = r.value
        if layout.converters:
            row = _converted(row, layout.converters, r)
        return ROW, ConnectRecord(r.topic, r.kafka_partition, r.key_schema, r.key, layout.row_schema, row, r.timestamp,
                                  r.headers, kafka_offset=r.kafka_offset, raw=r.raw)

    def _with_key(self, r: ConnectRecord, table: str,
                  existing_type: Callable[[str, str], str | None] | None) -> ConnectRecord:
        """r with its struct key's Debezium types written as a row's (a date key a date column, a
        MicroTimestamp key a timestamp: Debezium's sink types key fields by their schemas as value fields),
        for its upserts and its deletes alike. PostgreSQL's only: SQLite's date column is an INTEGER, which
        as the one key column is the rowid and takes no date's text."""
        schema = r.key_schema
        if type(r.key) is not dict:
            return r
        if not self.postgres or schema.get("type") != "struct" or \
                not any(_rewrite(f, True) for f in schema.get("fields", [])):
            if len(self.plain_keys) >= 1024:
                self.plain_keys.clear()
            self.plain_keys[id(schema)] = schema  # nothing to write otherwise, whatever the table
            return r
        cached = self.key_layouts.get((id(schema), table))
        if cached is None or cached[0] is not schema:
            written, converters = _written_row(
                schema, self.postgres, lambda field: True,
                lambda field: None if existing_type is None else existing_type(table, field))
            if len(self.key_layouts) >= 1024:
                self.key_layouts.clear()
            cached = self.key_layouts[(id(schema), table)] = (schema, written, converters)
        _, written, converters = cached
        if written is schema and not converters:
            return r
        return r.new_record(key_schema=written, key=_converted(r.key, converters, r) if converters else r.key)

    def _layout(self, r: ConnectRecord, table: str, existing_type: Callable[[str, str], str | None] | None) -> Layout:
        schema = r.value_schema
        if SCHEMA_CHANGE in (schema.get("name") or ""):
            raise DataError("Schema change records are not supported by JDBC connector. Adjust `topics` or "
                            "`topics.regex` to exclude schema change topic.")
        envelope = is_change_event(r)
        keep = self.keep_field
        row_schema, converters = _written_row(
            fields_by_name(schema).get("after") if envelope else schema, self.postgres,
            lambda field: keep is None or keep(r.topic, field),
            lambda field: None if existing_type is None else existing_type(table, field))
        if len(self.layouts) >= 1024:
            self.layouts.clear()
        layout = self.layouts[(id(schema), r.topic, table)] = Layout(schema, envelope, row_schema, converters)
        return layout


def _converted(row: dict, converters: tuple, r: ConnectRecord) -> dict:
    row = dict(row)
    for field, value_of in converters:
        value = row.get(field)
        if value is not None:
            try:
                row[field] = value_of(value)
            except (OverflowError, ValueError, TypeError, KeyError) as e:  # PostgreSQL's infinity is no datetime
                raise DataError(f"field {field} of the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset}: "
                                f"{value!r} is no value of its type the sink can write ({e!r})") from None
    return row


def table_namer(name_format: str):  # noqa: ANN201 - (record) -> table name or None
    """DefaultCollectionNamingStrategy: ${topic} with its dots as underscores, then each ${source.<field>}
    from the change event's source block (None, the record skipped, for a tombstone, as Debezium)."""
    def name(r: ConnectRecord) -> str | None:
        table = name_format.replace("${topic}", r.topic.replace(".", "_"))
        if "${source." not in table:
            return table
        if r.value is None:
            return None
        if not is_change_event(r):  # Debezium's getStruct("source") throws: a flat record is not dropped unseen
            raise DataError(f"the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} is no change event "
                            f"envelope, so it has no source block for the table name {name_format!r} (a record "
                            "flattened by ExtractNewRecordState has none)")
        source = r.value.get("source") or {}
        return SOURCE_PLACEHOLDER.sub(lambda m: _source_name(source, m.group(1), r), table)

    return name


def _source_name(source: dict, field: str, r: ConnectRecord) -> str:
    """A source block field as part of a table name: a string (Debezium's getString fails on any other) and
    one name, its dots not read as schema.table (the record would write into another schema's table)."""
    value = source.get(field)
    if type(value) is not str or "." in value:
        found = "no such field" if field not in source else repr(value)
        raise DataError(f"the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} has no table name for "
                        f"${{source.{field}}}: its source block's {field} is {found}, not a name without dots")
    return value


def field_filter(include: list[str], exclude: list[str]):  # noqa: ANN201 - (topic, field) -> kept
    """Debezium's FieldFilterFactory: entries `field` or `topic:field`, matched exactly; the exclude list
    wins when both are set (validation refuses that)."""
    if not include and not exclude:
        return None
    listed = exclude or include
    keep_listed = not exclude
    entries = [(parts[0].strip(), parts[1].strip()) if len(parts) == 2 else (None, parts[0].strip())
               for parts in (e.split(":") for e in listed)]

    def keep(topic: str, field: str) -> bool:
        for entry_topic, entry_field in entries:
            if entry_field == field and (entry_topic is None or entry_topic == topic):
                return keep_listed
        return not keep_listed

    return keep


def settings_from_debezium(props: dict[str, str]) -> SinkSettings:
    c = CONFIG.parse(props)
    name_format = _given(props, c, "collection.name.format", "table.name.format")
    evolve = c["schema.evolution"] == "basic"
    keep_field = field_filter(c["field.include.list"], c["field.exclude.list"])
    events = ChangeEvents(c["delete.enabled"], c["truncate.enabled"], c["connection.url"].startswith(
        "jdbc:postgresql:"), keep_field)
    return SinkSettings(
        url=c["connection.url"], user=c["connection.username"], password=c["connection.password"],
        insert_mode=c["insert.mode"], pk_mode=c["primary.key.mode"],
        pk_fields=[] if c["primary.key.mode"] == "kafka" else c["primary.key.fields"],
        delete_enabled=c["delete.enabled"], auto_create=evolve, auto_evolve=evolve,
        max_retries=c["flush.max.retries"], retry_backoff_ms=c["flush.retry.delay.ms"],
        offsets_table=c["exactly.once.offsets.table"],
        table_name=table_namer(name_format), tables_by_topic="${source." not in name_format,
        classify=events, forget_classified=events.forget, keep_field=keep_field, column_type=column_type,
        batch_size=c["batch.size"], reduce_by_key=c["use.reduction.buffer"],
        fold_unquoted=not c["quote.identifiers"],
        create_refused="schema evolution is disabled (schema.evolution=none)",
        evolve_refused="schema evolution is disabled (schema.evolution=none)")


class DebeziumJdbcSinkTask(JdbcSinkTask):
    settings_from = staticmethod(settings_from_debezium)


class DebeziumJdbcSinkConnector(OffsetsInDatabase, JdbcConnection, SinkConnector):
    java_classes = ("io.debezium.connector.jdbc.JdbcSinkConnector",)
    short_names = ("debezium-jdbc-sink",)
    config_def = CONFIG
    # Debezium's keys of its Hibernate pool (hibernate.*, connection.pool.*, connection.provider) and its other
    # dialects (dialect.*) are not defined here: the worker names them in its one warning
    task_class = DebeziumJdbcSinkTask

    def validate(self, config: dict[str, Any]) -> None:
        super().validate(config)
        props = self.props
        if config["connection.url"].startswith("jdbc:postgresql:") and not config["connection.username"]:
            raise ConfigError("connection.username", None, "Name of the database user to be used when connecting "
                              "to the connection")
        mode = config["primary.key.mode"]
        if config["delete.enabled"] and mode != "record_key":
            raise ConfigError("delete.enabled", "true", "When 'delete.enabled' is set to 'true', the "
                              "'primary.key.mode' option must be set to 'record_key'")
        if config["insert.mode"] == "upsert" and "primary.key.mode" not in props:
            raise ConfigError("insert.mode", "upsert", "When using UPSERT, please define 'primary.key.mode'")
        if config["insert.mode"] in ("upsert", "update") and mode == "none":
            raise ConfigError("primary.key.mode", "none", f"insert.mode={config['insert.mode']} needs a primary key")
        if mode == "record_header":
            raise ConfigError("primary.key.mode", "record_header", "klog does not implement keys from headers; use "
                              "record_key, record_value or kafka")
        if config["field.include.list"] and config["field.exclude.list"]:
            raise ConfigError("field.include.list", ",".join(config["field.include.list"]), "Cannot define both "
                              "field.exclude.list and field.include.list; specify only one")
        for key, old, allowed in (("collection.naming.strategy", "table.naming.strategy", NAMING_STRATEGIES),
                                  ("column.naming.strategy", "column.naming.strategy", COLUMN_NAMING_STRATEGIES)):
            value = _given(props, config, key, old)
            if value not in allowed:
                raise ConfigError(key if key in props or old not in props else old, value,
                                  f"klog implements Debezium's default strategy only ({allowed[0]})")
        name_key = "collection.name.format" if "collection.name.format" in props or "table.name.format" not in props \
            else "table.name.format"
        for placeholder in PLACEHOLDER.findall(config[name_key]):
            if placeholder != "topic" and not (placeholder.startswith("source.") and len(placeholder) > 7):
                raise ConfigError(name_key, config[name_key], f"${{{placeholder}}} is none of ${{topic}} and "
                                  "${source.<field>} (the record's source block: db, schema, table...)")
        zone_key = "database.time_zone" if "use.time.zone" not in props and "database.time_zone" in props \
            else "use.time.zone"
        _time_zone(zone_key, config[zone_key])

    @classmethod
    def unimplemented_in(cls, props: dict[str, str]) -> list[str]:
        """The pgjdbc URL parameters klog does not pass on, and a time zone other than UTC (klog writes
        temporal values as UTC instants)."""
        zone = props.get("use.time.zone", props.get("database.time_zone", "UTC"))
        return super().unimplemented_in(props) + ([] if zone.strip().lower() in UTC_NAMES
                                                  else [f"use.time.zone={zone}"])

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]


def _time_zone(key: str, zone: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if zone.strip().lower() in UTC_NAMES:
        return
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(key, zone, "not a time zone") from None

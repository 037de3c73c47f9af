"""A JDBC-style sink accepting Confluent's JdbcSinkConnector configs (io.confluent.connect.jdbc.JdbcSinkConnector),
into PostgreSQL (`jdbc:postgresql://host:port/db`) and SQLite (`jdbc:sqlite:PATH`).

insert.mode insert | upsert | update; pk.mode none | kafka | record_key | record_value with pk.fields;
delete.enabled (a tombstone deletes by key); auto.create and auto.evolve from the record schema (or, for
schemaless JSON, from the values); table.name.format with ${topic}.

The task reads a SinkSettings, not the keys: Confluent's keys map onto it here, Debezium's JDBC sink's in
debezium_jdbc (whose classify hook reads change event envelopes: a row, a delete, a truncate or nothing).
One write path serves both.

Exactly-once: each put() is one database transaction holding the rows and, in the table
`__klog_connect_offsets` (exactly.once.offsets.table), the next offset of every topic-partition it covers. At
start (open) the task reads them back and the worker skips what the database already holds, so a kill
at any instant neither loses nor duplicates a row.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from klog.connect.api import TP, SinkConnector, SinkTask
from klog.connect.config import ConfigDef
from klog.connect.data import (
    DATE,
    DECIMAL,
    TIME,
    TIMESTAMP,
    ConnectRecord,
    Schema,
    fields_by_name,
    from_epoch_days,
    from_epoch_millis,
    infer_schema,
    primitive,
)
from klog.connect.errors import ConfigError, ConnectError, DataError, RetriableError

KAFKA_PK = ["__connect_topic", "__connect_partition", "__connect_offset"]
UNIMPLEMENTED = frozenset({"dialect.name", "table.types", "db.timezone", "mssql.use.merge.holdlock",
                           "trim.sensitive.log", "sql.quote.identifiers", "connection.attempts",
                           "connection.backoff.ms", "fields.whitelist"})


# pgjdbc's URL parameters klog passes on (as libpq's); with currentSchema, user and password, the others
# (ssl=true, stringtype, reWriteBatchedInserts, ...) are named in the connector's warning
PGJDBC_PARAMS = {"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert", "sslkey": "sslkey",
                 "ApplicationName": "application_name", "connectTimeout": "connect_timeout"}
PGJDBC_HANDLED = {*PGJDBC_PARAMS, "currentSchema", "user", "password"}


def _required(schema: Schema) -> bool:
    return schema.get("optional") is False and "default" not in schema


def jdbc_url_check(url: str) -> str | None:
    if url.startswith("jdbc:sqlite:") or url.startswith("jdbc:postgresql://"):
        return None
    return "klog's JDBC connectors speak jdbc:postgresql://HOST[:PORT]/DB and jdbc:sqlite:PATH"


# the keys of the connection, Confluent's JDBC source and sink alike
CONNECTION = (ConfigDef().define("connection.url", check=jdbc_url_check).define("connection.user", default="")
              .define("connection.password", "password", ""))


class JdbcConnection:
    """What Confluent's JDBC source and sink share as connectors: the pgjdbc URL parameters klog does
    not pass on named in the warning, and PostgreSQL's driver checked at validation."""

    @classmethod
    def unimplemented_in(cls, props: dict[str, str]) -> list[str]:
        url = props.get("connection.url", "")
        if not url.startswith("jdbc:postgresql:"):
            return []
        return [f"connection.url parameter {p}" for p in parse_qs(urlparse(url[len("jdbc:"):]).query)
                if p not in PGJDBC_HANDLED]

    def validate(self, config: dict[str, Any]) -> None:
        if config["connection.url"].startswith("jdbc:postgresql:"):
            try:
                import psycopg2  # noqa: F401
            except ImportError:
                raise ConfigError("connection.url", config["connection.url"],
                                  "PostgreSQL needs psycopg2: pip install 'klog[connect]'") from None


# what Confluent's source makes of a column's type, by dialect
NUMERIC_SCALE_UNSET = 127

# PostgreSQL type OIDs → Connect types, as Confluent's dialect maps their JDBC types
_PG_TYPES = {16: "boolean", 21: "int16", 23: "int32", 20: "int64", 700: "float32", 701: "float64", 17: "bytes"}


# a query column SQLite declares no type for, by the storage class of its first value (as sqlite-jdbc's
# getColumnType; integers as int64: an expression's values have no declared width)
_SQLITE_VALUE_TYPES = {int: "int64", float: "float64", bytes: "bytes", str: "string"}
_view_ids = itertools.count()


def _sqlite_type(declared: str) -> Schema:
    """A SQLite column's declared type as sqlite-jdbc reports it, then as Confluent maps that."""
    t = declared.upper()
    if t in ("INTEGER", "INT", "MEDIUMINT"):
        return primitive("int32")
    if t in ("BIGINT", "INT8", "UNSIGNED BIG INT"):
        return primitive("int64")
    if t in ("SMALLINT", "INT2"):
        return primitive("int16")
    if t == "TINYINT":
        return primitive("int8")
    if t == "REAL":
        return primitive("float32")
    if t.startswith(("FLOAT", "DOUBLE")):
        return primitive("float64")
    if t.startswith(("BOOLEAN", "BIT")):
        return primitive("boolean")
    if t.startswith(("NUMERIC", "DECIMAL")):
        m = re.search(r"\(\s*\d+\s*,\s*(\d+)\s*\)", t)
        return primitive("bytes", name=DECIMAL, version=1, parameters={"scale": m.group(1) if m else "0"})
    if t == "DATE":
        return primitive("int32", name=DATE, version=1)
    if t.startswith(("DATETIME", "TIMESTAMP")):
        return primitive("int64", name=TIMESTAMP, version=1)
    if t.startswith(("BLOB", "BINARY", "VARBINARY")):
        return primitive("bytes")
    return primitive("string")


def _pg_type(oid: int, typmod: int) -> Schema:
    if oid in _PG_TYPES:
        return primitive(_PG_TYPES[oid])
    if oid == 1700:
        # an unconstrained numeric has no scale: Confluent's PostgreSQL dialect gives it 127 (its
        # NUMERIC_TYPE_SCALE_HIGH) rather than 0, which would round 12.12 to 12
        scale = (typmod - 4) & 0xFFFF if typmod >= 4 else NUMERIC_SCALE_UNSET
        return primitive("bytes", name=DECIMAL, version=1, parameters={"scale": str(scale)})
    if oid == 1082:
        return primitive("int32", name=DATE, version=1)
    if oid == 1083:
        return primitive("int32", name=TIME, version=1)
    if oid in (1114, 1184):
        return primitive("int64", name=TIMESTAMP, version=1)
    return primitive("string")


# Debezium's number of any scale (an unconstrained PostgreSQL numeric under decimal.handling.mode=precise, the
# default): a struct {scale, value: the unscaled big-endian bytes}, written as its number in a NUMERIC column
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"


class Dialect:
    param = "?"
    types: dict[str, str] = {}

    def connect(self):  # noqa: ANN201 - a DB-API connection with autocommit off
        raise NotImplementedError

    def operational_errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def errors(self) -> tuple[type[BaseException], ...]:
        """Every error of the database's driver (DB-API's Error): a failed statement as well as a lost link."""
        raise NotImplementedError

    def transient(self, error: BaseException) -> bool:
        """Whether an operational_errors() error is worth retrying (the link, a lock), not a refused statement."""
        return True

    # -- what the source reads --------------------------------------------------------------------
    def tables(self, cur) -> list[str]:  # noqa: ANN001
        """The database's tables, in name order."""
        raise NotImplementedError

    def source_columns(self, cur, table: str) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        """Each column's name, Connect schema as Confluent's source types it, and NOT NULL, in order."""
        raise NotImplementedError

    def result_columns(self, cur) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        """Each column of the query `cur` ran: its name, Connect schema and NOT NULL (SQLite's driver
        reports no types: text, nullable)."""
        return [(d[0], primitive("string"), False) for d in cur.description]

    def query_columns(self, cur, query: str) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        """Each column of the source's `query` (its query mode): name, Connect schema and NOT NULL."""
        cur.execute(f"SELECT * FROM ({query}) AS klog_query WHERE 1 = 0")
        return self.result_columns(cur)

    def timestamp_param(self, when: dt.datetime) -> Any:
        return when

    # unquoted names folded as the database folds them (Debezium's quote.identifiers=false): klog still
    # quotes every name (a reserved word works), the name being the folded one
    fold_case = False

    def name(self, identifier: str) -> str:
        """An identifier as the database keeps it (see fold_case)."""
        return identifier

    def quote(self, name: str) -> str:
        return '"' + self.name(name).replace('"', '""') + '"'

    def identifier_problem(self, name: str) -> str | None:
        """Why `name` cannot be one table or column name as written (None: it can). Every name is quoted,
        so quotes, spaces and semicolons are part of the name; these are what quoting cannot carry."""
        if not name:
            return "is empty"
        if "\x00" in name:
            return "holds a NUL character"
        return None

    def table_problem(self, name: str) -> str | None:
        """identifier_problem for one part of a table name."""
        return self.identifier_problem(name)

    def table(self, name: str) -> str:
        return self.quote(name)

    def sql_type(self, schema: Schema) -> str:
        name = schema.get("name")
        if name in (DECIMAL, VARIABLE_SCALE_DECIMAL):
            return "NUMERIC"
        if name in (DATE, TIME, TIMESTAMP):
            return {DATE: "DATE", TIME: "TIME", TIMESTAMP: "TIMESTAMP"}[name]
        return self.types.get(schema.get("type", "string"), "TEXT")

    def column_spec(self, name: str, schema: Schema, not_null: bool, sql_type: str | None = None) -> str:
        """A column as Confluent's writeColumnSpec writes it: with the field's default as DEFAULT (the
        column then nullable), else NOT NULL when asked; of `sql_type` when given, else the Connect type's."""
        spec = f"{self.quote(name)} {sql_type or self.sql_type(schema)}"
        try:
            literal = self.default_literal(schema)
        except (ValueError, TypeError, OverflowError) as e:  # the record's schema, not the sink, is at fault
            raise DataError(f"the default {schema.get('default')!r} of field {name!r} is no value of its type "
                            f"{schema.get('name') or schema.get('type')} ({e})") from None
        if literal is not None:
            return f"{spec} DEFAULT {literal}"
        return spec + (" NOT NULL" if not_null else "")

    def default_literal(self, schema: Schema) -> str | None:
        """The schema's default (in JsonConverter's form) as Confluent's formatColumnValue writes it: numbers
        bare, strings, dates and times quoted (UTC), a boolean 1 or 0; none for bytes and structures."""
        value = schema.get("default")
        if value is None:
            return None
        name, kind = schema.get("name"), schema.get("type")
        if name == DECIMAL:
            from klog.connect.converters import decimal_from_bytes

            scale = int(schema.get("parameters", {}).get("scale", 0))
            return str(decimal_from_bytes(base64.b64decode(value), scale))
        if name == DATE:
            return self.quote_string(from_epoch_days(value).isoformat())
        if name == TIME:
            return self.quote_string(f"{from_epoch_millis(value):%H:%M:%S.%f}"[:-3])
        if name == TIMESTAMP:
            return self.quote_string(f"{from_epoch_millis(value):%Y-%m-%d %H:%M:%S.%f}"[:-3])
        if kind == "boolean":
            return self.boolean_literal(bool(value))
        if kind in ("int8", "int16", "int32", "int64", "float32", "float64"):
            return repr(value) if isinstance(value, float) else str(int(value))
        if kind == "string":
            return self.quote_string(str(value))
        return None

    def quote_string(self, text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    def truncate(self, qtable: str) -> str:
        return f"DELETE FROM {qtable}"  # SQLite has no TRUNCATE (its DELETE without WHERE is one)

    def boolean_literal(self, value: bool) -> str:
        return "1" if value else "0"

    def existing_columns(self, cur, table: str) -> set[str] | None:  # noqa: ANN001
        raise NotImplementedError

    def column_types(self, cur, table: str) -> dict[str, str]:  # noqa: ANN001
        """Each existing column of `table` (as the database keeps its name) and its declared type, as the
        database writes it; empty when there is no such table (SQLite: none, its columns take any value)."""
        return {}

    def lock_ddl(self, cur, table: str) -> None:  # noqa: ANN001
        """Hold, until the transaction ends, the right to create or alter `table` (other tasks wait)."""
        # SQLite: its one writer at a time already serializes DDL

    def executemany(self, cur, sql: str, rows: list[tuple]) -> None:  # noqa: ANN001
        cur.executemany(sql, rows)

    def value(self, schema: Schema | None, value: Any) -> Any:
        if value is None:
            return None
        name = (schema or {}).get("name")
        if name == DATE and isinstance(value, int):
            return from_epoch_days(value)
        if name == TIMESTAMP and isinstance(value, int):
            return from_epoch_millis(value)
        if name == TIME and isinstance(value, int):
            return from_epoch_millis(value).time()
        if name == VARIABLE_SCALE_DECIMAL and isinstance(value, dict):
            from klog.connect.converters import decimal_from_bytes

            return decimal_from_bytes(value["value"], value["scale"])
        if isinstance(value, dict | list):
            from klog.connect.converters import _json_default

            return json.dumps(value, separators=(",", ":"), default=_json_default)
        return value


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class PostgresDialect(Dialect):
    param = "%s"
    types = {"int8": "SMALLINT", "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT", "float32": "REAL",
             "float64": "DOUBLE PRECISION", "boolean": "BOOLEAN", "string": "TEXT", "bytes": "BYTEA"}

    def __init__(self, url: str, user: str, password: str) -> None:
        parsed = urlparse(url[len("jdbc:"):])
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        self.dsn = {"host": parsed.hostname or "localhost", "port": parsed.port or 5432,
                    "dbname": unquote(parsed.path.lstrip("/")) or "postgres",
                    "user": user or query.get("user") or "postgres"}
        if password or query.get("password"):
            self.dsn["password"] = password or query["password"]
        for param, libpq in PGJDBC_PARAMS.items():
            if query.get(param):
                self.dsn[libpq] = query[param]
        # timestamps are UTC (Confluent's db.timezone default): a timestamptz is read and written as the instant
        self.dsn["options"] = "-c TimeZone=UTC"
        if query.get("currentSchema"):  # pgjdbc sets the search path: unqualified tables are created and found there
            self.dsn["options"] += " -c search_path=" + query["currentSchema"].replace("\\", "\\\\").replace(" ", "\\ ")

    def connect(self):  # noqa: ANN201
        import psycopg2

        return psycopg2.connect(**self.dsn, connect_timeout=10)

    def operational_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg2

        return (psycopg2.OperationalError, psycopg2.InterfaceError)

    def errors(self) -> tuple[type[BaseException], ...]:
        import psycopg2

        return (psycopg2.Error,)

    def tables(self, cur) -> list[str]:  # noqa: ANN001
        cur.execute("SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_type = "
                    "'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")
        return [r[0] for r in cur.fetchall()]

    def source_columns(self, cur, table: str) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        cur.execute("SELECT attname, atttypid, atttypmod, attnotnull FROM pg_attribute WHERE attrelid = "
                    "%s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (self.table(table),))
        return [(name, _pg_type(oid, typmod), notnull) for name, oid, typmod, notnull in cur.fetchall()]

    def result_columns(self, cur) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        """A column straight from a table is NOT NULL as its table's is (pgjdbc's isNullable looks it up);
        a numeric(p, s) keeps its scale (its typmod; psycopg2 says 65535 for none)."""
        described = list(cur.description)
        sources = {(d.table_oid, d.table_column) for d in described if d.table_oid}
        not_null: set[tuple[int, int]] = set()
        if sources:
            cur.execute("SELECT attrelid::bigint, attnum FROM pg_attribute WHERE attnotnull AND "
                        "(attrelid::bigint, attnum) IN (SELECT * FROM unnest(%s::bigint[], %s::int[]))",
                        ([o for o, _ in sources], [c for _, c in sources]))
            not_null = {(o, c) for o, c in cur.fetchall()}
        return [(d.name, _pg_type(d.type_code, ((d.precision << 16) | d.scale) + 4
                                  if d.precision and d.precision < 0xFFFF else -1),
                 (d.table_oid, d.table_column) in not_null) for d in described]

    def boolean_literal(self, value: bool) -> str:
        return "TRUE" if value else "FALSE"  # PostgreSQL's boolean takes no 1 or 0 (Confluent's dialect too)

    def quote_string(self, text: str) -> str:
        """An escape string: with standard_conforming_strings=off (a database or role may set it) a
        backslash in '...' escapes the next quote, so record text could close the literal; in E'...' both
        are escaped whatever the setting."""
        return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"

    def executemany(self, cur, sql: str, rows: list[tuple]) -> None:  # noqa: ANN001
        """psycopg2's executemany is a round trip per row; execute_batch sends pages of statements."""
        from psycopg2.extras import execute_batch

        execute_batch(cur, sql, rows, page_size=500)

    def truncate(self, qtable: str) -> str:
        return f"TRUNCATE TABLE {qtable}"

    def lock_ddl(self, cur, table: str) -> None:  # noqa: ANN001
        """CREATE TABLE IF NOT EXISTS and ADD COLUMN race in PostgreSQL (two tasks: a unique violation on
        pg_type, a duplicate column): a transaction-scoped advisory lock on the table's name serializes them."""
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("klog-connect-ddl " + self.table(table),))

    def table(self, name: str) -> str:
        parts = name.split(".")[-2:]  # catalog.schema.table as Confluent's TableId: the catalog is the database
        return ".".join(self.quote(p) for p in parts)

    def name(self, identifier: str) -> str:
        return identifier.translate(_ASCII_LOWER) if self.fold_case else identifier  # PostgreSQL folds ASCII only

    def identifier_problem(self, name: str) -> str | None:
        """PostgreSQL cuts a longer name to its first 63 bytes (NAMEDATALEN - 1) with a notice: two long
        names sharing them would be one table or column."""
        problem = super().identifier_problem(name)
        if problem is None and len(self.name(name).encode()) > 63:
            return "is longer than PostgreSQL's 63 bytes (it would be cut short, silently)"
        return problem

    def existing_columns(self, cur, table: str) -> set[str] | None:  # noqa: ANN001
        parts = [self.name(p) for p in table.split(".")[-2:]]
        schema, name = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        if schema is None:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                        "AND table_schema = ANY(current_schemas(false))", (name,))
        else:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                        "AND table_schema = %s", (name, schema))
        cols = {r[0] for r in cur.fetchall()}
        return cols or None

    def column_types(self, cur, table: str) -> dict[str, str]:  # noqa: ANN001
        cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                    "to_regclass(%s) AND attnum > 0 AND NOT attisdropped", (self.table(table),))
        return dict(cur.fetchall())


class SqliteDialect(Dialect):
    types = {"int8": "INTEGER", "int16": "INTEGER", "int32": "INTEGER", "int64": "INTEGER", "float32": "REAL",
             "float64": "REAL", "boolean": "INTEGER", "string": "TEXT", "bytes": "BLOB"}

    def __init__(self, url: str) -> None:
        self.path = url[len("jdbc:sqlite:"):]

    def connect(self):  # noqa: ANN201
        import sqlite3

        conn = sqlite3.connect(self.path, timeout=30, isolation_level="DEFERRED")
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # readers do not block the sink (and other tasks' writes)
        except sqlite3.OperationalError:
            pass  # another task is switching it at this instant: it will be WAL
        conn.execute("PRAGMA synchronous=FULL")  # a committed batch and its offsets survive a crash together
        return conn

    def query_columns(self, cur, query: str) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        """Python's sqlite3 reports no column types (sqlite-jdbc does): a column the query takes from a
        table has its declared type, typed as table mode types it (read from a temporary view of the
        query, whose columns keep it); another (an expression) the type of its first row's value; with
        none (NULL, no row), a string. Every column nullable (the driver does not say)."""
        view = self.quote(f"klog_query_{next(_view_ids)}")
        cur.execute(f"CREATE TEMP VIEW {view} AS {query}")
        try:
            declared = [(name, kind) for _, name, kind, *_ in cur.execute(f"PRAGMA temp.table_info({view})").fetchall()]
            first = cur.execute(f"SELECT * FROM temp.{view} LIMIT 1").fetchone()
        finally:
            cur.execute(f"DROP VIEW temp.{view}")
        columns = []
        for i, (name, kind) in enumerate(declared):
            value_type = _SQLITE_VALUE_TYPES.get(type(first[i])) if first is not None else None
            columns.append((name, _sqlite_type(kind) if kind else primitive(value_type or "string"), False))
        return columns

    def operational_errors(self) -> tuple[type[BaseException], ...]:
        import sqlite3

        return (sqlite3.OperationalError,)

    def errors(self) -> tuple[type[BaseException], ...]:
        import sqlite3

        return (sqlite3.Error,)

    def transient(self, error: BaseException) -> bool:
        """sqlite3 raises OperationalError for a busy database and a refused statement alike (a duplicate
        column, a reserved name): SQLITE_ERROR, the primary code of the latter, is not retried."""
        return getattr(error, "sqlite_errorcode", 0) & 0xFF != 1

    def tables(self, cur) -> list[str]:  # noqa: ANN001
        cur.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1")
        return [r[0] for r in cur.fetchall()]

    def source_columns(self, cur, table: str) -> list[tuple[str, Schema, bool]]:  # noqa: ANN001
        cur.execute(f"PRAGMA table_info({self.quote(table)})")
        return [(name, _sqlite_type(declared or ""), bool(notnull))
                for _, name, declared, notnull, _, _ in cur.fetchall()]

    def timestamp_param(self, when: dt.datetime) -> Any:
        return when.isoformat(sep=" ")  # SQLite keeps timestamps as ISO text: compared as text in its format

    def table(self, name: str) -> str:
        return self.quote(name.split(".")[-1])  # SQLite has no schemas: the table part of Confluent's TableId

    def sql_type(self, schema: Schema) -> str:
        return "NUMERIC" if schema.get("name") in (DECIMAL, VARIABLE_SCALE_DECIMAL) else \
            self.types.get(schema.get("type", "string"), "TEXT")

    def table_problem(self, name: str) -> str | None:
        problem = super().table_problem(name)
        if problem is None and name.lower().startswith("sqlite_"):  # a column may be called so
            return "is reserved by SQLite (sqlite_...)"  # its refusal is an OperationalError, retried as a lost link
        return problem

    def existing_columns(self, cur, table: str) -> set[str] | None:  # noqa: ANN001
        cur.execute(f"PRAGMA table_info({self.table(table)})")
        cols = {r[1] for r in cur.fetchall()}
        return cols or None

    def value(self, schema: Schema | None, value: Any) -> Any:
        if isinstance(value, decimal.Decimal):
            return str(value)
        out = super().value(schema, value)
        return out.isoformat() if isinstance(out, dt.date | dt.time) else out


def make_dialect(config: dict[str, Any]) -> Dialect:
    """The dialect of Confluent's connection keys (the JDBC source's)."""
    return dialect_for(config["connection.url"], config["connection.user"], config["connection.password"])


def dialect_for(url: str, user: str, password: str) -> Dialect:
    if url.startswith("jdbc:sqlite:"):
        return SqliteDialect(url)
    return PostgresDialect(url, user, password)


# what a change event asks of the sink (SinkSettings.classify): write its row, delete by key, empty the table,
# or nothing
ROW, DELETE, TRUNCATE, SKIP = "row", "delete", "truncate", "skip"


@dataclass(frozen=True)
class SinkSettings:
    """What the one JDBC sink does, whichever connector's keys said it: Confluent's JdbcSinkConnector
    (settings_from_confluent) or Debezium's (klog.connect.connectors.debezium_jdbc)."""

    url: str
    user: str
    password: str
    insert_mode: str  # insert | upsert | update
    pk_mode: str  # none | kafka | record_key | record_value
    pk_fields: list[str]
    delete_enabled: bool
    auto_create: bool
    auto_evolve: bool
    max_retries: int
    retry_backoff_ms: int
    offsets_table: str
    # the record's table (None: the record is skipped); tables_by_topic: it depends on the topic alone
    table_name: Callable[[ConnectRecord], str | None]
    tables_by_topic: bool = True
    # a record as a change: (ROW | DELETE | TRUNCATE | SKIP, the record whose value is the row), given the
    # record's table and a lookup of its existing columns' types ((table, field name) -> the column's declared
    # type, None: no such column); None: a null value is a delete (Confluent's tombstone), any other the row
    classify: Callable[[ConnectRecord, str, Callable[[str, str], str | None]], tuple[str, ConnectRecord]] | None \
        = None
    forget_classified: Callable[[], None] | None = None  # what classify learnt of the tables is stale
    keep_field: Callable[[str, str], bool] | None = None  # (topic, field): written as a column?
    # (dialect, field schema) -> the column type a created or added column gets (None: the Connect type's)
    column_type: Callable[[Dialect, Schema], str | None] | None = None
    batch_size: int | None = None  # at most this many rows per statement batch (None: a run of one shape)
    # only the last change of each key (table and key column values) within a put() is written
    reduce_by_key: bool = False
    fold_unquoted: bool = False  # names folded as the database folds unquoted ones (Dialect.fold_case)
    # how a refused create or alter names the setting that refuses it
    create_refused: str = "auto-creation is disabled (auto.create=false)"
    evolve_refused: str = "auto-evolution is disabled (auto.evolve=false)"


def settings_from_confluent(props: dict[str, str]) -> SinkSettings:
    c = JdbcSinkConnector.config_def.parse(props)
    table_format = c["table.name.format"]
    return SinkSettings(
        url=c["connection.url"], user=c["connection.user"], password=c["connection.password"],
        insert_mode=c["insert.mode"], pk_mode=c["pk.mode"], pk_fields=c["pk.fields"],
        delete_enabled=c["delete.enabled"], auto_create=c["auto.create"], auto_evolve=c["auto.evolve"],
        max_retries=c["max.retries"], retry_backoff_ms=c["retry.backoff.ms"],
        offsets_table=c["exactly.once.offsets.table"],
        table_name=lambda r: table_format.replace("${topic}", r.topic))


def ensure_offsets_table(dialect: Dialect, cur, name: str) -> None:  # noqa: ANN001 - a DB-API cursor
    t = dialect.table(name)
    dialect.lock_ddl(cur, name)  # every task of every connector creates it at start
    cur.execute(f"CREATE TABLE IF NOT EXISTS {t} (connector TEXT NOT NULL, topic TEXT NOT NULL, "
                "kafka_partition INTEGER NOT NULL, next_offset BIGINT NOT NULL, "
                "PRIMARY KEY (connector, topic, kafka_partition))")


class OffsetsInDatabase:
    """The JDBC sinks keep their offsets in the target database (exactly.once.offsets.table), which win over
    the group's when a task starts: the REST API's PATCH and DELETE /connectors/{name}/offsets change them
    there too (KIP-875's alterOffsets), else a reset or a rewind would say it succeeded and change nothing."""

    task_class: type

    def alter_offsets(self, props: dict[str, str], offsets: dict[TP, int | None] | None) -> bool:
        c = self.task_class.settings_from(props)
        dialect = dialect_for(c.url, c.user, c.password)
        dialect.fold_case = c.fold_unquoted
        name, p, t = props.get("name", ""), dialect.param, dialect.table(c.offsets_table)
        conn = dialect.connect()
        try:
            cur = conn.cursor()
            ensure_offsets_table(dialect, cur, c.offsets_table)
            if offsets is None:
                cur.execute(f"DELETE FROM {t} WHERE connector = {p}", (name,))
            for (topic, partition), offset in (offsets or {}).items():
                cur.execute(f"DELETE FROM {t} WHERE connector = {p} AND topic = {p} AND kafka_partition = {p}",
                            (name, topic, partition))
                if offset is not None:
                    cur.execute(f"INSERT INTO {t} (connector, topic, kafka_partition, next_offset) "
                                f"VALUES ({p}, {p}, {p}, {p})", (name, topic, partition, offset))
            conn.commit()
        finally:
            conn.close()
        return True


class JdbcSinkTask(SinkTask):
    settings_from: Callable[[dict[str, str]], SinkSettings] = staticmethod(settings_from_confluent)

    def start(self, props: dict[str, str]) -> None:
        self.c = self.settings_from(props)
        self.dialect = dialect_for(self.c.url, self.c.user, self.c.password)
        self.dialect.fold_case = self.c.fold_unquoted
        self.offsets_table = self.c.offsets_table
        self.tables: dict[str, str] = {}  # topic -> its table, when the topic alone decides it
        self.columns: dict[str, set[str]] = {}  # table → its columns, as last seen
        self.column_types: dict[str, dict[str, str]] = {}  # table -> its columns' declared types (_existing_type)
        self.statements: dict[tuple, tuple] = {}  # (table, columns, key columns) -> its INSERT statement
        # (topic, id of value schema, id of key schema) -> (value schema, key schema, table, statement, params of
        # a record): see _plan
        self.plans: dict[tuple, tuple] = {}
        self.sound_names: set[str] = set()  # column names identifier_problem passed (checked once each)
        self.reported: set[tuple] = set()  # (topic, partition, offset) of the records put() reported as errant
        self.superseded: set[tuple] = set()  # (topic, partition, offset) of the records the reduction buffer dropped
        self.conn = None
        self._with_retries(self._ensure_offsets_table)

    # -- connection and retries ------------------------------------------------------------------
    def _connection(self):  # noqa: ANN202
        if self.conn is None:
            self.conn = self.dialect.connect()
        return self.conn

    def _drop_connection(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001, S110 - the connection is already broken
                pass
        self.conn = None
        self.columns.clear()

    def _with_retries(self, fn, *args: Any) -> Any:  # noqa: ANN001
        """fn(cursor, *args) in one transaction; a lost connection retried max.retries times."""
        attempts = 0
        while True:
            try:
                conn = self._connection()
                cur = conn.cursor()
                try:
                    out = fn(cur, *args)
                    conn.commit()
                    return out
                except BaseException:
                    conn.rollback()
                    raise
                finally:
                    cur.close()
            except self.dialect.operational_errors() as e:
                if not self.dialect.transient(e):
                    raise  # a statement refused, not a link lost: put() finds the record at fault
                self._drop_connection()
                attempts += 1
                if attempts > self.c.max_retries:
                    raise RetriableError(f"database error after {self.c.max_retries} retries: "
                                         f"{str(e).strip()}") from None
                self.context.warn(f"connector '{self.context.connector_name}': database error, retry {attempts} of "
                                  f"{self.c.max_retries} in {self.c.retry_backoff_ms} ms: {str(e).strip()}")
                time.sleep(self.c.retry_backoff_ms / 1000)

    def _ensure_offsets_table(self, cur) -> None:  # noqa: ANN001
        ensure_offsets_table(self.dialect, cur, self.offsets_table)

    # -- the sink contract -------------------------------------------------------------------------
    def open(self, partitions: list[TP]) -> None:
        """The offsets the database holds: the worker resumes after them (exactly-once)."""
        def read(cur) -> list:  # noqa: ANN001
            p = self.dialect.param
            cur.execute(f"SELECT topic, kafka_partition, next_offset FROM {self.dialect.table(self.offsets_table)} "
                        f"WHERE connector = {p}", (self.context.connector_name,))
            return cur.fetchall()

        wanted = set(partitions)
        for topic, partition, offset in self._with_retries(read):
            if (topic, partition) in wanted:
                self.context.offset((topic, partition), offset)

    def put(self, records: list[ConnectRecord]) -> None:
        if not records:
            return
        self.superseded.clear()
        try:
            self._with_retries(self._write, records)
        except self.dialect.errors() as e:  # a statement the database refused (a lost link was retried above)
            self._forget_layouts()
            self.context.warn(f"connector '{self.context.connector_name}': {str(e).strip()}: the batch of "
                              f"{len(records)} records written one by one to find the records at fault")
            self._write_each(records)
        # their offsets are committed: forgotten only now, so a put() that failed (the database lost past
        # flush.max.retries) and is retried with the same records (errors.retry.timeout) reports none twice
        self.reported.clear()

    def _write_each(self, records: list[ConnectRecord]) -> None:
        """Confluent's unrollAndRetry: each record in its own transaction (its row with its offset, so
        exactly-once holds); one the database refuses goes to the errant record reporter, its offset
        stored with the next record's (without a reporter the task fails naming it; the records before
        it are written, and a table dropped behind the sink's back is created again on the way). A record
        the reduction buffer dropped is not written here either: what a key's row becomes, and what goes to
        the DLQ, does not depend on another key's record failing the batch."""
        done: dict[TP, int] = {}
        for r in records:
            if (r.topic, r.kafka_partition, r.kafka_offset) in self.superseded:
                done[(r.topic, r.kafka_partition)] = r.kafka_offset + 1  # not written, as in the batch
                continue
            try:
                self._with_retries(self._write, [r], done)
                done = {}
            except self.dialect.errors() as e:
                self._forget_layouts()
                self._reject(r, DataError(f"the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} was "
                                          f"refused by the database: {str(e).strip()}"))
                done[(r.topic, r.kafka_partition)] = r.kafka_offset + 1
        if done:
            self._with_retries(self._write, [], done)

    def _forget_layouts(self) -> None:
        """After a rolled back transaction: the tables it created or widened may not exist (PostgreSQL's
        DDL is transactional), so the columns are read again."""
        self.columns.clear()
        self.column_types.clear()
        if self.c.forget_classified is not None:
            self.c.forget_classified()

    def _existing_type(self, cur, table: str, field: str) -> str | None:  # noqa: ANN001
        """The declared type of the column `field` of `table` (None: no such column or table), read once
        per table until the layouts are forgotten."""
        types = self.column_types.get(table)
        if types is None:
            types = self.column_types[table] = self.dialect.column_types(cur, table)
        return types.get(self.dialect.name(field))

    def _write(self, cur, records: list[ConnectRecord], done: dict[TP, int] | None = None) -> None:  # noqa: ANN001
        ops: list[tuple | None] = []  # (statement shape, parameters) of each record, in order; None: superseded
        origins: list[tuple] = []  # (topic, partition, offset) of each op's record
        last_of_key: dict[tuple, int] | None = {} if self.c.reduce_by_key else None  # (table, key) -> its op
        next_offsets: dict[TP, int] = dict(done) if done else {}
        plans, columns, classify = self.plans, self.columns, self.c.classify
        existing_type = partial(self._existing_type, cur)
        tables = self.tables if self.c.tables_by_topic else {}
        for r in records:
            next_offsets[(r.topic, r.kafka_partition)] = r.kafka_offset + 1
            try:
                table = tables.get(r.topic)
                if table is None:
                    table = self._table(r)
                    if table is None:
                        continue
                op = None
                if classify is not None:
                    action, r = classify(r, table, existing_type)
                    if action == SKIP:
                        continue
                    if action == TRUNCATE:
                        op = self._truncate(cur, table)
                        if op is None:
                            continue
                if op is None and r.value is not None and r.value_schema is not None:
                    # a record of a layout seen before (the same schema objects: one per table from the
                    # converter): its statement and its parameters straight from the layout's plan
                    plan = plans.get((r.topic, id(r.value_schema), id(r.key_schema)))
                    if plan is not None and plan[0] is r.value_schema and plan[1] is r.key_schema and plan[2] == table \
                            and table in columns and type(r.value) is dict:
                        params = plan[4](r)
                        if params is not None:
                            op = (plan[3], params)
                if op is None:
                    op = self._statement(cur, r, table)
                if op is not None:
                    if last_of_key is not None:
                        self._supersede(ops, origins, last_of_key, r, table, op)
                    ops.append(op)
                    origins.append((r.topic, r.kafka_partition, r.kafka_offset))
            except DataError as e:  # this record's fault: to errors.tolerance and the DLQ, the batch goes on
                self._reject(r, e)
        for shape, rows in self._runs(ops):
            if shape[-1] == TRUNCATE:
                cur.execute(shape[0])
            else:
                self.dialect.executemany(cur, shape[0], rows)
        p = self.dialect.param
        t = self.dialect.table(self.offsets_table)
        cur.executemany(f"INSERT INTO {t} (connector, topic, kafka_partition, next_offset) VALUES ({p}, {p}, {p}, {p}) "
                        "ON CONFLICT (connector, topic, kafka_partition) "
                        "DO UPDATE SET next_offset = EXCLUDED.next_offset",
                        [(self.context.connector_name, tp[0], tp[1], o) for tp, o in next_offsets.items()])

    def _supersede(self, ops: list[tuple | None], origins: list[tuple], last_of_key: dict[tuple, int],
                   r: ConnectRecord, table: str, op: tuple) -> None:
        """Debezium's reduction buffer: the op of an earlier change of the same row (table and key column
        values) in this transaction is dropped when r's alone decides the row: a delete, or an upsert of the
        same columns over an upsert (an insert or update depends on what came before it, an upsert of other
        columns leaves some of the earlier's: dropping those would change the table; Debezium's buffer
        flushes at a change of schema too). A truncate is a barrier (what came before it is written before
        it, as Debezium flushes its buffers)."""
        kind = op[0][-1]
        if kind == TRUNCATE:
            last_of_key.clear()
            return
        key = self._row_key(r)
        if key is None:
            return
        try:
            earlier = last_of_key.get((table, key))
        except TypeError:  # a key value that is a structure: no reduction for it
            return
        if earlier is not None and (kind == "d" or kind == "upsert" and ops[earlier][0] == op[0]):
            ops[earlier] = None
            self.superseded.add(origins[earlier])  # not written when the batch is unrolled either
        last_of_key[(table, key)] = len(ops)

    def _row_key(self, r: ConnectRecord) -> tuple | None:
        """The values of r's key columns (None: no key columns, or pk.mode=kafka, each record its own row)."""
        mode, names = self.c.pk_mode, self.c.pk_fields
        if mode == "record_key":
            if isinstance(r.key, dict):
                return tuple(r.key.get(n) for n in names or r.key)
            return None if r.key is None else (r.key,)
        if mode == "record_value" and isinstance(r.value, dict):
            return tuple(r.value.get(n) for n in names or r.value)
        return None

    def _runs(self, ops: list[tuple | None]) -> list[tuple[tuple, list]]:
        """Consecutive ops of one statement shape as one batch (executemany), of at most batch_size rows."""
        runs: list[tuple[tuple, list]] = []
        limit = self.c.batch_size
        for op in ops:
            if op is None:
                continue
            if runs and runs[-1][0] == op[0] and (limit is None or len(runs[-1][1]) < limit):
                runs[-1][1].append(op[1])
            else:
                runs.append((op[0], [op[1]]))
        return runs

    def _table(self, r: ConnectRecord) -> str | None:
        """The record's table (None: skipped, as Debezium skips a record whose name it cannot resolve),
        remembered for its topic when the topic alone decides it."""
        table = self.c.table_name(r)
        if table is None:
            self.context.warn(f"connector '{self.context.connector_name}': no table name for the record at "
                              f"{r.topic}-{r.kafka_partition}@{r.kafka_offset}: skipped")
            return None
        self._check_table(table, r)
        if self.c.tables_by_topic:
            self.tables[r.topic] = table
        return table

    def _check_table(self, table: str, r: ConnectRecord) -> None:
        """A table name (from the topic or, for Debezium's, the record's source block) the sink may write:
        each part a name quoting carries, and not the offsets table, whose rows decide what is skipped."""
        d = self.dialect
        for part in table.split("."):
            problem = d.table_problem(part)
            if problem is not None:
                raise DataError(f"the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} names the table "
                                f"{table!r}, whose part {part!r} {problem}")
        if d.quote(table.split(".")[-1]) == d.quote(self.offsets_table.split(".")[-1]):
            raise DataError(f"the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} names the table "
                            f"{table!r}: that is where the sink keeps its offsets (exactly.once.offsets.table)")

    def _check_columns(self, names: list[str], r: ConnectRecord) -> None:
        for n in names:
            if n not in self.sound_names:
                problem = self.dialect.identifier_problem(n)
                if problem is not None:
                    raise DataError(f"the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} has the column "
                                    f"name {n!r}, which {problem}")
                self.sound_names.add(n)

    def _reject(self, r: ConnectRecord, error: DataError) -> None:
        """A record the sink cannot write, handed to the worker's errant record reporter (the DLQ); the
        task fails with it when there is none."""
        reporter = self.context.errant_record_reporter
        if reporter is None:
            raise error
        where = (r.topic, r.kafka_partition, r.kafka_offset)
        if where not in self.reported:  # once, though its transaction be retried or its batch unrolled
            self.reported.add(where)
            reporter(r, error)

    def _truncate(self, cur, table: str) -> tuple[tuple, tuple] | None:  # noqa: ANN001
        """Emptying a table (Debezium's truncate event); none for a table that does not exist."""
        if table not in self.columns:
            existing = self.dialect.existing_columns(cur, table)
            if existing is None:
                return None
            self.columns[table] = existing
        return (self.dialect.truncate(self.dialect.table(table)), TRUNCATE), ()

    def _statement(self, cur, r: ConnectRecord, table: str) -> tuple[tuple, tuple] | None:  # noqa: ANN001
        """(sql and its shape, parameters) for one record, the table created or evolved first if allowed."""
        c, d = self.c, self.dialect
        qtable = d.table(table)
        pk_mode = c.pk_mode
        if r.value is None:
            if not c.delete_enabled:
                raise ConnectError(f"Sink connector '{self.context.connector_name}' is configured with "
                                   f"'delete.enabled=false' and therefore requires records with a non-null value, but "
                                   f"found record at (topic='{r.topic}',partition={r.kafka_partition},"
                                   f"offset={r.kafka_offset}) with a null value")
            keys = self._key_values(r)
            self._check_columns(list(keys), r)
            if table not in self.columns:
                existing = d.existing_columns(cur, table)
                if existing is None:
                    return None  # nothing to delete from a table that does not exist
                self.columns[table] = existing
            where = " AND ".join(f"{d.quote(k)} = {d.param}" for k in keys)
            return (f"DELETE FROM {qtable} WHERE {where}", "d"), tuple(v for _, v in keys.items())
        value_schema = r.value_schema or infer_schema(r.value)
        if not isinstance(r.value, dict) or (value_schema or {}).get("type") != "struct":
            raise ConnectError(f"the JDBC sink needs a struct (or JSON object) value, found {type(r.value).__name__} "
                               f"at "
                               f"{r.topic}-{r.kafka_partition}@{r.kafka_offset}")
        all_fields = fields = fields_by_name(value_schema)
        if c.keep_field is not None:
            fields = {n: f for n, f in fields.items() if c.keep_field(r.topic, n)}
        pk: dict[str, tuple[Schema | None, Any]] = {}
        if pk_mode == "kafka":
            names = c.pk_fields or KAFKA_PK
            pk = {names[0]: ({"type": "string"}, r.topic), names[1]: ({"type": "int32"}, r.kafka_partition),
                  names[2]: ({"type": "int64"}, r.kafka_offset)}
        elif pk_mode == "record_key":
            pk = {k: (self._key_schema(r, k), v) for k, v in self._key_values(r).items()}
        elif pk_mode == "record_value":
            names = c.pk_fields or list(fields)
            for n in names:
                if n not in all_fields:  # Confluent's FieldsMetadata text; else a key column of NULLs
                    raise DataError(f"PK mode for table '{table}' is record_value with configured PK fields {names}, "
                                    f"but record value schema does not contain field: {n} (the record at "
                                    f"{r.topic}-{r.kafka_partition}@{r.kafka_offset})")
            pk = {n: (all_fields.get(n), r.value.get(n)) for n in names}
        cols = {**pk, **{n: (f, r.value.get(n)) for n, f in fields.items() if n not in pk}}
        self._check_columns(list(cols), r)
        self._ensure_table(cur, table, {n: s or {"type": "string"} for n, (s, _) in cols.items()}, list(pk))
        names = list(cols)
        params = tuple(d.value(s, v) for s, v in cols.values())
        mode = c.insert_mode
        if mode != "update":  # the statement is the same for every record of a table's shape: built once
            cache_key = (qtable, tuple(names), tuple(pk))
            shape = self.statements.get(cache_key)
            if shape is None:
                shape = self.statements[cache_key] = self._shape(qtable, names, pk, mode)
            self._plan(r, table, shape, fields, {n: s for n, (s, _) in pk.items()}, names)
            return shape, params
        non_key = [n for n in names if n not in pk]
        sets = ", ".join(f"{d.quote(n)} = {d.param}" for n in non_key)
        where = " AND ".join(f"{d.quote(n)} = {d.param}" for n in pk)
        return (f"UPDATE {qtable} SET {sets} WHERE {where}", tuple(names), "u"), \
            tuple(params[names.index(n)] for n in non_key) + tuple(params[names.index(n)] for n in pk)

    def _plan(self, r: ConnectRecord, table: str, shape: tuple, fields: dict[str, Schema],
              pk_schemas: dict[str, Schema | None], names: list[str]) -> None:
        """Remember how a record of r's layout (topic, value and key schema objects) becomes its
        statement's parameters, so the next ones skip _statement's per-record work. Only where the
        layout alone decides the columns: a struct key with its schema, or no key columns from the key."""
        if r.value_schema is None:
            return  # schemaless: the columns come from each value (infer_schema), no layout to remember
        pk_mode, pk_fields = self.c.pk_mode, self.c.pk_fields
        if pk_mode == "record_key" and (r.key_schema is None or r.key_schema.get("type") != "struct"
                                        or not isinstance(r.key, dict)
                                        or list(r.key) != [f.get("field") for f in r.key_schema.get("fields", [])]):
            return
        if pk_mode == "record_value" and not pk_fields and list(pk_schemas) != list(fields):
            return
        if pk_mode == "record_value" and any(n not in fields for n in pk_schemas):
            return  # a named key column the value lacks: the slow path decides each time
        d = self.dialect
        logical = (DATE, TIME, TIMESTAMP)
        getters = []
        for n in names:
            if n in pk_schemas:
                schema = pk_schemas[n]
                if pk_mode == "kafka":
                    source = names.index(n)
                elif pk_mode == "record_key":
                    source = "key"
                else:
                    source = "value"
            else:
                schema, source = fields[n], "value"
            getters.append((n, source, schema, (schema or {}).get("name") in logical))
        plain = (str, int, float, bool, type(None))  # what every dialect's value() passes as it is
        value_of = d.value
        by_key = pk_mode == "record_key"

        def params(rec: ConnectRecord) -> tuple | None:
            if by_key and type(rec.key) is not dict:
                return None  # no key to take the columns from: _statement says what is wrong
            out = []
            for n, source, schema, converts in getters:
                if source == "value":
                    v = rec.value.get(n)
                elif source == "key":
                    v = rec.key.get(n)
                else:
                    v = (rec.topic, rec.kafka_partition, rec.kafka_offset)[source]
                out.append(value_of(schema, v) if converts or type(v) not in plain else v)
            return tuple(out)

        if len(self.plans) >= 1024:
            self.plans.clear()
        self.plans[(r.topic, id(r.value_schema), id(r.key_schema))] = (r.value_schema, r.key_schema, table, shape,
                                                                       params)

    def _shape(self, qtable: str, names: list[str], pk: dict, mode: str) -> tuple:
        """The INSERT (insert.mode=insert) or INSERT ... ON CONFLICT (upsert) of these columns."""
        d = self.dialect
        q = [d.quote(n) for n in names]
        marks = ", ".join([d.param] * len(names))
        if mode == "insert":
            return f"INSERT INTO {qtable} ({', '.join(q)}) VALUES ({marks})", tuple(names)
        non_key = [n for n in names if n not in pk]
        conflict = ", ".join(d.quote(n) for n in pk)
        sets = ", ".join(f"{d.quote(n)} = EXCLUDED.{d.quote(n)}" for n in non_key)
        action = f"DO UPDATE SET {sets}" if non_key else "DO NOTHING"
        return (f"INSERT INTO {qtable} ({', '.join(q)}) VALUES ({marks}) ON CONFLICT ({conflict}) {action}",
                tuple(names), "upsert")

    def _key_values(self, r: ConnectRecord) -> dict[str, Any]:
        if self.c.pk_mode != "record_key":
            raise ConnectError("deleting needs pk.mode=record_key")
        if isinstance(r.key, dict):
            names = self.c.pk_fields or list(r.key)
            return {n: r.key.get(n) for n in names}
        if r.key is None:
            raise ConnectError(f"pk.mode=record_key and the record at {r.topic}-{r.kafka_partition}@{r.kafka_offset} "
                               "has no key")
        return {(self.c.pk_fields or ["__connect_key"])[0]: r.key}

    @staticmethod
    def _key_schema(r: ConnectRecord, name: str) -> Schema | None:
        if r.key_schema is not None and r.key_schema.get("type") == "struct":
            return fields_by_name(r.key_schema).get(name)
        return r.key_schema or infer_schema(r.key.get(name) if isinstance(r.key, dict) else r.key)

    def _ensure_table(self, cur, table: str, cols: dict[str, Schema], pk: list[str]) -> None:  # noqa: ANN001
        """Create or widen the table for `cols` (auto.create, auto.evolve); the columns compared as the
        database keeps their names (folded: Dialect.fold_case)."""
        d = self.dialect
        stored = {d.name(n): n for n in cols} if d.fold_case else {n: n for n in cols}  # its name -> the field
        known = self.columns.get(table)
        if known is not None and stored.keys() <= known:
            return
        existing = d.existing_columns(cur, table)
        if existing is None or not stored.keys() <= existing:
            d.lock_ddl(cur, table)  # another task may be creating or widening it: look again once it is done
            existing = d.existing_columns(cur, table)
        if existing is None:
            if not self.c.auto_create:
                raise ConnectError(f"Table {table} is missing and {self.c.create_refused}")
            defs = [d.column_spec(n, s, n in pk or _required(s), self._column_type(s)) for n, s in cols.items()]
            if pk:
                defs.append(f"PRIMARY KEY ({', '.join(d.quote(n) for n in pk)})")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {d.table(table)} ({', '.join(defs)})")
            existing = set(stored)
        missing = [n for stored_name, n in stored.items() if stored_name not in existing]
        if missing:
            if not self.c.auto_evolve:
                raise ConnectError(f"Table {table} is missing fields {missing} and {self.c.evolve_refused}")
            for n in missing:
                cur.execute(f"ALTER TABLE {d.table(table)} ADD COLUMN "
                            f"{d.column_spec(n, cols[n], False, self._column_type(cols[n]))}")
            existing |= {d.name(n) for n in missing}
        self.columns[table] = existing

    def _column_type(self, schema: Schema) -> str | None:
        return self.c.column_type(self.dialect, schema) if self.c.column_type is not None else None

    def flush(self, offsets: dict[TP, int]) -> None:
        pass  # every put() committed its rows with their offsets

    def stop(self) -> None:
        self._drop_connection()


class JdbcSinkConnector(OffsetsInDatabase, JdbcConnection, SinkConnector):
    java_classes = ("io.confluent.connect.jdbc.JdbcSinkConnector",)
    short_names = ("jdbc-sink",)
    config_def = (CONNECTION.merged(ConfigDef())
                  .define("insert.mode", default="insert", choices=("insert", "upsert", "update"))
                  .define("pk.mode", default="none", choices=("none", "kafka", "record_key", "record_value"))
                  .define("pk.fields", "list", [])
                  .define("delete.enabled", "boolean", False)
                  .define("auto.create", "boolean", False).define("auto.evolve", "boolean", False)
                  .define("table.name.format", default="${topic}")
                  .define("batch.size", "int", 3000, at_least=1)
                  .define("max.retries", "int", 10, at_least=0).define("retry.backoff.ms", "long", 3000, at_least=0)
                  .define("quote.sql.identifiers", default="always", choices=("always", "never"))
                  .define("exactly.once.offsets.table", default="__klog_connect_offsets",
                          doc="klog: where the consumed offsets are stored with the rows (exactly-once)"))
    unimplemented = UNIMPLEMENTED
    task_class = JdbcSinkTask

    def validate(self, config: dict[str, Any]) -> None:
        super().validate(config)
        if config["delete.enabled"] and config["pk.mode"] != "record_key":
            raise ConfigError("delete.enabled", "true", "Primary key mode must be 'record_key' when delete support "
                              "is enabled")
        if config["insert.mode"] in ("upsert", "update") and config["pk.mode"] == "none":
            raise ConfigError("pk.mode", "none", f"insert.mode={config['insert.mode']} needs a primary key mode")
        if config["pk.mode"] == "kafka" and config["pk.fields"] and len(config["pk.fields"]) != 3:
            raise ConfigError("pk.fields", ",".join(config["pk.fields"]), "pk.mode=kafka takes three names "
                              "(topic, partition, offset)")

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]

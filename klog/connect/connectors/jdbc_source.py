"""Confluent's JDBC source (io.confluent.connect.jdbc.JdbcSourceConnector) for SQLite and PostgreSQL:
each table (or one query) polled in Confluent's modes, its rows as struct records on
`<topic.prefix><table>`.

Modes: `bulk` (the whole table each poll), `incrementing` (rows whose `incrementing.column.name` is
above the last one sent), `timestamp` (rows whose `timestamp.column.name` is after the last one sent
and before now minus `timestamp.delay.interval.ms`) and `timestamp+incrementing` (Confluent's
combination: a later timestamp, or the same timestamp and a higher id). The queries, the source
partition `{"protocol": "1", "table": name}` (`{"query": "query"}` in query mode) and the offsets
`{"incrementing": n}`, `{"timestamp": ms, "timestamp_nanos": ns}` are Confluent's, so a restart resumes
where it stopped. The value schema is named after the table, the key is null, columns typed as
Confluent's GenericDatabaseDialect types them (a nullable column optional).

As Confluent's, the connector lists the tables and splits them into min(tasks.max, tables) tasks, each
given its share (task config `tables`, contiguous groups as ConnectorUtils.groupPartitions); it lists
them again every table.poll.interval.ms and asks its worker for new task configs when they changed
(Confluent's TableMonitorThread). Offsets stay per table, whichever task reads it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import threading
import time
from typing import Any

from klog.connect.api import SourceConnector, SourceTask
from klog.connect.config import ConfigDef, java_regex, regex_list_check
from klog.connect.connectors.jdbc import CONNECTION, JdbcConnection, make_dialect
from klog.connect.data import (
    DATE,
    DECIMAL,
    TIME,
    TIMESTAMP,
    ConnectRecord,
    Schema,
    epoch_days,
    epoch_millis,
    from_epoch_millis,
    micros_of_day,
    struct,
)
from klog.connect.errors import ConfigError, ConnectError

MODES = ("bulk", "incrementing", "timestamp", "timestamp+incrementing")
# Confluent's keys klog accepts and does not implement (named in the connector's warning)
UNIMPLEMENTED = frozenset({
    "numeric.mapping", "numeric.precision.mapping", "dialect.name", "db.timezone", "schema.pattern",
    "catalog.pattern", "query.suffix", "transaction.isolation.mode", "table.types", "timestamp.granularity",
    "quote.sql.identifiers", "poll.linger.ms", "max.buffer.size",
    "timestamp.columns.mapping", "incrementing.column.mapping", "date.calendar.system", "query.masked"})
TABLES = "tables"  # a task's share of the tables (Confluent's JdbcSourceTaskConfig.TABLES_CONFIG)
MONITOR_JOIN_S = 10.0  # how long a stop waits for a table listing under way (Confluent's MAX_TIMEOUT)
_QUOTED = re.compile(r'"((?:[^"]|"")*)"([.,]?)')


def list_tables(dialect: Any, cur: Any, c: dict[str, Any]) -> list[str]:
    """The tables the config selects: table.include/exclude.list (regular expressions over schema.table,
    Confluent's TableCollectionUtils) or table.whitelist/blacklist (exact names, qualified or not)."""
    names = dialect.tables(cur)
    if c["table.include.list"]:
        included, excluded = ([java_regex(p) for p in c[k]] for k in ("table.include.list", "table.exclude.list"))
        return [n for n in names if any(p.fullmatch(n) for p in included)
                and not any(p.fullmatch(n) for p in excluded)]
    allowed, denied = c["table.whitelist"], c["table.blacklist"]

    def named(patterns: list[str], name: str) -> bool:
        return name in patterns or name.split(".")[-1] in patterns

    return [n for n in names if (not allowed or named(allowed, n)) and not named(denied, n)]


def group_tables(tables: list[str], groups: int) -> list[list[str]]:
    """Kafka's ConnectorUtils.groupPartitions: `groups` contiguous runs, the first ones one longer."""
    size, longer = divmod(len(tables), groups)
    out, start = [], 0
    for i in range(groups):
        end = start + size + (1 if i < longer else 0)
        out.append(tables[start:end])
        start = end
    return out


def quoted_tables(tables: list[str]) -> str:
    """As Confluent writes a task's tables: each part of a name quoted, names comma-separated."""
    return ",".join(".".join('"' + part.replace('"', '""') + '"' for part in t.split(".")) for t in tables)


def unquoted_tables(text: str) -> list[str]:
    tables, parts = [], []
    for m in _QUOTED.finditer(text):
        parts.append(m.group(1).replace('""', '"'))
        if m.group(2) != ".":
            tables.append(".".join(parts))
            parts = []
    return tables

def _millis(value: Any) -> int:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return epoch_millis(value)


def _connect_value(schema: Schema, value: Any) -> Any:
    """A column's value as Connect carries it for its schema (days, milliseconds, Decimal, bytes)."""
    if value is None:
        return None
    name = schema.get("name")
    if name == TIMESTAMP:
        return _millis(value)
    if name == DATE:
        return epoch_days(value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value)))
    if name == TIME:
        return micros_of_day(value if isinstance(value, dt.time) else dt.time.fromisoformat(str(value))) // 1000
    if name == DECIMAL:
        return decimal.Decimal(str(value))
    if schema["type"] == "bytes":
        return bytes(value)
    if schema["type"] == "boolean":
        return bool(value)
    return value


class MissingTable(ConnectError):
    """A table listed is not there (any more): its query fails as Confluent's would."""


class _Scan:
    """One query of a table, read batch.max.rows at a time across polls (Confluent keeps its ResultSet)."""

    def __init__(self, cursor: Any, schema: Schema, names: list[str]) -> None:
        self.cursor, self.schema, self.names = cursor, schema, names
        self.held: tuple | None = None  # a row read and not sent yet: the next batch's first

    def row(self, values: tuple) -> dict:
        return dict(zip(self.names, values, strict=False))


class JdbcSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        self.c = JdbcSourceConnector.config_def.parse(props)
        self.dialect = make_dialect(self.c)
        self.conn = None
        self.tables: list[str] = []
        # the tables the connector gave this task; None (a config from before the split, or the database
        # could not be listed when the tasks were configured): every table the config selects
        self.assigned = unquoted_tables(props[TABLES]) if TABLES in props else None
        self.listed = 0.0  # monotonic time of the last table listing
        self.next_poll: dict[str, float] = {}  # table (or "query") → when it is polled next
        self.offsets: dict[str, dict] = {}
        self.schemas: dict[str, tuple[Schema, list[str]]] = {}
        self.scans: dict[str, _Scan] = {}  # table (or "query") → its query being read
        self.failures: dict[str, int] = {}  # table (or "query") → its queries failed in a row (query.retry.attempts)

    # -- connection -------------------------------------------------------------------------------
    def _connect(self):  # noqa: ANN202 - a DB-API connection
        """connection.attempts tries connection.backoff.ms apart, then the task fails (Confluent's
        CachedConnectionProvider)."""
        for attempt in range(1, self.c["connection.attempts"] + 1):
            try:
                return self.dialect.connect()
            except self.dialect.operational_errors() as e:
                if attempt == self.c["connection.attempts"]:
                    raise ConnectError(f"cannot connect to {self.c['connection.url']} after {attempt} attempts: "
                                       f"{str(e).strip()}") from None
                time.sleep(self.c["connection.backoff.ms"] / 1000)
        raise AssertionError("unreachable")

    def _cursor(self):  # noqa: ANN202 - a DB-API cursor
        if self.conn is None:
            self.conn = self._connect()
        return self.conn.cursor()

    def _partition(self, table: str | None) -> dict:
        return {"query": "query"} if table is None else {"protocol": "1", "table": table}

    def _offset(self, table: str | None) -> dict:
        """The table's stored offset; with none, timestamp.initial's (resolved once, as Confluent's
        computeInitialOffset: -1 is the time the task first reads the table, not each poll's)."""
        key = table or "query"
        if key not in self.offsets:
            reader = self.context.offset_storage_reader
            stored = dict((reader.offset(self._partition(table)) if reader else None) or {})
            initial = self.c["timestamp.initial"]
            if not stored and initial is not None:
                stored = {"timestamp": _millis(dt.datetime.now(dt.UTC)) if initial == -1 else initial}
            self.offsets[key] = stored
        return self.offsets[key]

    # -- tables -----------------------------------------------------------------------------------
    def _list_tables(self) -> list[str]:
        """The task's tables that are there (a dropped one leaves the list)."""
        names = list_tables(self.dialect, self._cursor(), self.c)
        self.conn.commit()
        return names if self.assigned is None else [t for t in self.assigned if t in names]

    def _table_schema(self, table: str) -> tuple[Schema, list[str]]:
        """The value schema of a table (named after it) and its column names, in order."""
        fields = [{**schema, "optional": not not_null, "field": name}
                  for name, schema, not_null in self.dialect.source_columns(self._cursor(), table)]
        self.conn.commit()
        if not fields:
            raise MissingTable(f"table {table} has no columns (is it there?)")
        self._check_columns(table, {f["field"]: f for f in fields})
        return struct(fields, name=table.split(".")[-1]), [f["field"] for f in fields]

    def _check_columns(self, table: str, fields: dict[str, Schema]) -> None:
        """validate.non.null: Confluent refuses to query by a nullable incrementing or timestamp column."""
        mode, inc = self.c["mode"], self.c["incrementing.column.name"]
        wanted = ([inc] if "incrementing" in mode else []) + (self.c["timestamp.column.name"] if
                                                             mode.startswith("timestamp") else [])
        for column in wanted:
            if column not in fields:
                raise ConnectError(f"table {table} has no column {column}")
            if self.c["validate.non.null"] and fields[column]["optional"]:
                raise ConnectError(f"Cannot make incremental queries using {column} on table {table} because this "
                                   "column is nullable (set validate.non.null=false to allow it)")

    # -- queries ----------------------------------------------------------------------------------
    def _source_sql(self, table: str | None) -> str:
        return f"({self.c['query']}) AS klog_query" if table is None else self.dialect.table(table)

    def _where(self, offset: dict) -> tuple[str, list]:
        """Confluent's TimestampIncrementingCriteria: the WHERE and ORDER BY of a mode, with its parameters."""
        q, p = self.dialect.quote, self.dialect.param
        mode = self.c["mode"]
        if mode == "bulk":
            return "", []
        inc = q(self.c["incrementing.column.name"]) if "incrementing" in mode else None
        last_id = int(offset.get("incrementing", -1))
        if mode == "incrementing":
            return f" WHERE {inc} > {p} ORDER BY {inc} ASC", [last_id]
        ts_cols = [q(c) for c in self.c["timestamp.column.name"]]
        ts = ts_cols[0] if len(ts_cols) == 1 else f"COALESCE({', '.join(ts_cols)})"
        last_ts = self._stamp(offset.get("timestamp"), offset.get("timestamp_nanos"))
        end = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(
            milliseconds=self.c["timestamp.delay.interval.ms"])
        last, until = self._param(last_ts), self._param(end)
        if mode == "timestamp":
            return f" WHERE {ts} > {p} AND {ts} < {p} ORDER BY {ts} ASC", [last, until]
        return (f" WHERE {ts} < {p} AND (({ts} = {p} AND {inc} > {p}) OR {ts} > {p}) ORDER BY {ts}, {inc} ASC",
                [until, last, last_id, last])

    def _stamp(self, millis: Any, nanos: Any) -> dt.datetime:
        when = from_epoch_millis(int(millis or 0))  # none: Confluent's Timestamp(0)
        return when.replace(microsecond=int(nanos) // 1000) if nanos is not None else when

    def _param(self, when: dt.datetime) -> Any:
        # SQLite keeps timestamps as ISO text: compare as text in its own format
        return self.dialect.timestamp_param(when)

    def _start_scan(self, table: str | None) -> _Scan:
        key = table or "query"
        if key not in self.schemas or self.c["mode"] == "bulk":
            self.schemas[key] = self._table_schema(table) if table is not None else self._query_schema()
        schema, names = self.schemas[key]
        where, params = self._where(self._offset(table))
        cur = self._cursor()
        cur.execute(f"SELECT * FROM {self._source_sql(table)}{where}", params)
        return _Scan(cur, schema, names)

    def _poll_one(self, table: str | None) -> tuple[list[ConnectRecord], bool]:
        """Up to batch.max.rows records of the table's query, and whether the query is read to its end.
        As Confluent's, one query is read to its end over as many polls as it takes (querying again
        from the batch's last timestamp would skip the rest of a group of equal timestamps)."""
        key = table or "query"
        scan = self.scans.get(key) or self._start_scan(table)
        self.scans[key] = scan
        batch = self.c["batch.max.rows"]
        fetched = scan.cursor.fetchmany(batch)
        ended = len(fetched) < batch
        rows = ([scan.held] if scan.held is not None else []) + fetched
        scan.held = None
        if rows and (not ended or len(rows) > batch):  # the next row decides the last one's timestamp offset
            scan.held, ended = rows.pop(), False
        fields = scan.schema["fields"]
        topic = self.c["topic.prefix"] + (table.split(".")[-1] if table is not None else "")
        offset, out = self._offset(table), []
        for i, row in enumerate(rows):
            value = {f["field"]: _connect_value(f, v) for f, v in zip(fields, row, strict=False)}
            following = rows[i + 1] if i + 1 < len(rows) else scan.held
            offset = self._next_offset(offset, scan.row(row), None if following is None else scan.row(following))
            out.append(ConnectRecord(topic, None, None, None, scan.schema, value, None,
                                     source_partition=self._partition(table), source_offset=dict(offset)))
        self.offsets[key] = offset
        if ended:
            del self.scans[key]
            scan.cursor.close()
            self.conn.commit()
        return out, ended

    def _next_offset(self, offset: dict, row: dict, following: dict | None) -> dict:
        """Confluent's TimestampIncrementingOffset after `row`: its incrementing value and timestamp; in
        timestamp mode the timestamp only once no following row shares it (TimestampTableQuerier)."""
        mode = self.c["mode"]
        if mode == "bulk":
            return offset
        out = {}
        if "incrementing" in mode:
            out["incrementing"] = int(row[self.c["incrementing.column.name"]])
        if mode.startswith("timestamp"):
            stamp = self._row_stamp(row)
            if mode == "timestamp" and stamp is not None and following is not None:
                after = self._row_stamp(following)
                if after is not None and after <= stamp:  # the group of this timestamp is not read whole yet
                    return offset
            if stamp is not None:
                out["timestamp"], out["timestamp_nanos"] = _millis(stamp), stamp.microsecond * 1000
        return out

    def _row_stamp(self, row: dict) -> dt.datetime | None:
        """The first non-null of the row's timestamp columns (their COALESCE)."""
        stamp = next((row[c] for c in self.c["timestamp.column.name"] if row.get(c) is not None), None)
        return dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else stamp

    def _query_schema(self) -> tuple[Schema, list[str]]:
        cur = self._cursor()
        columns = self.dialect.query_columns(cur, self.c["query"])
        fields = [{**schema, "optional": not not_null, "field": name} for name, schema, not_null in columns]
        self.conn.commit()
        return struct(fields), [f["field"] for f in fields]

    def poll(self) -> list[ConnectRecord]:
        now = time.monotonic()
        if self.c["query"]:
            self.tables = [None]  # type: ignore[list-item]
        elif now - self.listed >= self.c["table.poll.interval.ms"] / 1000:
            try:
                self.tables, self.listed = self._list_tables(), now
            except self.dialect.errors() as e:
                self._query_failed("the table list", now, e)
        for table in self.tables:
            key = table or "query"
            if self.next_poll.get(key, 0.0) > now:
                continue
            try:
                records, ended = self._poll_one(table)
            except (*self.dialect.errors(), MissingTable) as e:
                self._query_failed(key, now, e)
                continue
            self.failures.pop(key, None)
            # a query with more rows waiting is read on at once; one read to its end waits an interval
            if ended:
                self.next_poll[key] = now + self.c["poll.interval.ms"] / 1000
            if records:
                return records
        time.sleep(min(0.1, self.c["poll.interval.ms"] / 1000))
        return []

    def _query_failed(self, key: str, now: float, error: BaseException) -> None:
        """A lost connection or failed query (a dropped table's too): the connection dropped, the tables
        listed again and the table queried again a poll interval later from the offset of the last record
        sent (Confluent's query.retry.attempts, -1 forever; over them the task fails)."""
        self.failures[key] = self.failures.get(key, 0) + 1
        attempts = self.c["query.retry.attempts"]
        if 0 <= attempts < self.failures[key]:
            raise ConnectError(f"Failed to query table after retries: {str(error).strip()}") from error
        self.context.warn(f"connector '{self.context.connector_name}': query of {key} failed, retrying in "
                          f"{self.c['poll.interval.ms']} ms: {str(error).strip()}")
        self._drop_connection()
        self.next_poll[key] = now + self.c["poll.interval.ms"] / 1000
        self.listed = 0.0  # the table may be gone: list them again (Confluent's table monitor drops it)

    def _drop_connection(self) -> None:
        self.scans.clear()
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001, S110 - the connection is already broken
                pass
            self.conn = None

    def stop(self) -> None:
        self._drop_connection()


class JdbcSourceConnector(JdbcConnection, SourceConnector):
    java_classes = ("io.confluent.connect.jdbc.JdbcSourceConnector",)
    short_names = ("jdbc-source",)
    config_def = (CONNECTION.merged(ConfigDef())
                  .define("mode", choices=MODES)
                  .define("incrementing.column.name", default="")
                  .define("timestamp.column.name", "list", [])
                  .define("timestamp.initial", "long", None)
                  .define("timestamp.delay.interval.ms", "long", 0, at_least=0)
                  .define("validate.non.null", "boolean", True)
                  .define("table.whitelist", "list", []).define("table.blacklist", "list", [])
                  .define("table.include.list", "list", [], check=regex_list_check)
                  .define("table.exclude.list", "list", [], check=regex_list_check)
                  .define("query", default="")
                  .define("topic.prefix")
                  .define("poll.interval.ms", "int", 5000, at_least=1)
                  .define("batch.max.rows", "int", 100, at_least=1)
                  .define("table.poll.interval.ms", "long", 60_000, at_least=1)
                  .define("query.retry.attempts", "int", -1, at_least=-1)
                  .define("connection.attempts", "int", 3, at_least=1)
                  .define("connection.backoff.ms", "long", 10_000, at_least=0))
    unimplemented = UNIMPLEMENTED
    task_class = JdbcSourceTask
    context: Any = None  # the worker's ConnectorContext (request_task_reconfiguration), set before start
    monitor: threading.Thread | None = None

    def start(self, props: dict[str, str]) -> None:
        super().start(props)
        self.dialect = make_dialect(self.config)
        self.tables: list[str] | None = None  # as the last task configs split them
        self.shares: list[dict[str, str]] | None = None  # those task configs
        self.monitor_stop = threading.Event()
        if not self.config["query"] and self.context is not None:
            self.monitor = threading.Thread(target=self._watch_tables, daemon=True,
                                            name=f"klog-jdbc-tables-{self.props.get('name')}")
            self.monitor.start()

    def _current_tables(self) -> list[str]:
        conn = self.dialect.connect()  # one attempt: a database down is tried again at the next listing
        try:
            return list_tables(self.dialect, conn.cursor(), self.config)
        finally:
            conn.close()

    def _watch_tables(self) -> None:
        """Confluent's TableMonitorThread: the tables listed every table.poll.interval.ms; a change (a table
        added or dropped) asks the worker for new task configs."""
        while not self.monitor_stop.wait(self.config["table.poll.interval.ms"] / 1000):
            try:
                tables = self._current_tables()
            except self.dialect.errors():
                continue  # as Confluent's: tried again at the next interval
            if tables != self.tables and not self.monitor_stop.is_set():
                self.context.request_task_reconfiguration()

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor_stop.set()
            self.monitor.join(MONITOR_JOIN_S)  # a listing that hangs on the database is left to end alone

    def validate(self, config: dict[str, Any]) -> None:
        super().validate(config)
        mode = config["mode"]
        if "incrementing" in mode and not config["incrementing.column.name"]:
            raise ConfigError("incrementing.column.name", "", f"mode={mode} needs the incrementing column")
        if mode.startswith("timestamp") and not config["timestamp.column.name"]:
            raise ConfigError("timestamp.column.name", "", f"mode={mode} needs the timestamp column")
        if config["query"] and (config["table.whitelist"] or config["table.include.list"]):
            raise ConfigError("query", config["query"], "query mode takes no table list")
        if config["table.whitelist"] and config["table.blacklist"]:
            raise ConfigError("table.blacklist", ",".join(config["table.blacklist"]),
                              "table.whitelist and table.blacklist cannot both be set")
        if (config["table.whitelist"] or config["table.blacklist"]) and \
                (config["table.include.list"] or config["table.exclude.list"]):
            raise ConfigError("table.include.list", ",".join(config["table.include.list"]),
                              "table.whitelist/blacklist and table.include/exclude.list cannot be mixed")
        if config["table.exclude.list"] and not config["table.include.list"]:
            raise ConfigError("table.exclude.list", ",".join(config["table.exclude.list"]),
                              "table.exclude.list cannot be used without table.include.list")

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """Query mode: one task. Otherwise min(tasks.max, tables) tasks, each its contiguous share of the
        tables (Confluent's taskConfigs); none found: one task with none. A database that cannot be listed
        now: the shares given last, or one task that lists them itself (Confluent starts an idle one,
        reconfigured once they are listed)."""
        if self.config["query"]:
            return [dict(self.props)]
        try:
            tables = self._current_tables()
        except self.dialect.errors():
            return self.shares or [dict(self.props)]
        groups = group_tables(tables, min(max_tasks, len(tables))) if tables else [[]]
        self.tables, self.shares = tables, [{**self.props, TABLES: quoted_tables(group)} for group in groups]
        return self.shares

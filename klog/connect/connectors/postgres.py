"""PostgreSQL change data capture, accepting Debezium's PostgresConnector configs
(io.debezium.connector.postgresql.PostgresConnector).

A consistent initial snapshot (the replication slot is created with EXPORT_SNAPSHOT and the tables are
read in that snapshot), then logical replication with the built-in pgoutput plugin through a
publication and a slot it creates or reuses. One topic per table, `<topic.prefix>.<schema>.<table>`;
key = the primary key; value = Debezium's envelope (before, after, source with lsn and txId, op c/u/d/r/t,
ts_ms); a tombstone after each delete; a primary key change is a delete (and tombstone) of the old key
and a create of the new one, as Debezium emits it.

Offsets (source partition {"server": topic.prefix}): the commit LSN of the change's transaction and
the change's position in it, so a restart skips exactly what was delivered. The slot is confirmed
(its flush LSN moved) only in commit(), after the worker stored the offsets of records Kafka
acknowledged, and only up to the last transaction whose every change is durable.

psycopg2 is the driver: PostgreSQL's streaming replication protocol (LogicalReplicationConnection,
with send_feedback to confirm the slot) is only in psycopg2; psycopg 3 would have to poll
pg_logical_slot_get_binary_changes, which re-decodes the WAL from the slot's restart point each call.
"""

from __future__ import annotations

import json
import re
import select
import time
from collections.abc import Iterator
from typing import Any

from klog import __version__ as VERSION
from klog.connect import signals
from klog.connect.api import SourceConnector, SourceTask
from klog.connect.config import ConfigDef, java_regex, regex_list_check
from klog.connect.connectors import pgoutput
from klog.connect.connectors.column_mappers import KEY as MAPPER_KEY
from klog.connect.connectors.column_mappers import check_mapper_keys, column_mappers, rule_for
from klog.connect.connectors.pgtypes import (
    TIME_MODES,
    UNAVAILABLE,
    Modes,
    PgType,
    binary_content,
    column_type,
    default_value,
    java_hashmap_order,
    kschema,
    named,
    required_fallback,
    toast_placeholder,
)
from klog.connect.data import ConnectRecord
from klog.connect.errors import ConfigError, ConnectError, RetriableError


def _field(name: str, schema: dict) -> dict:
    return {**schema, "field": name}


# Debezium's PostgresSourceInfoStructMaker (3.5+: origin and origin_lsn, from pgoutput's Origin message)
SOURCE_SCHEMA = kschema("struct", fields=[
    _field("version", kschema("string", optional=False)), _field("connector", kschema("string", optional=False)),
    _field("name", kschema("string", optional=False)), _field("ts_ms", kschema("int64", optional=False)),
    {**named("string", "io.debezium.data.Enum", parameters={
        "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"}),
     "default": "false", "field": "snapshot"},
    _field("db", kschema("string", optional=False)), _field("sequence", kschema("string")),
    _field("ts_us", kschema("int64")), _field("ts_ns", kschema("int64")),
    _field("schema", kschema("string", optional=False)), _field("table", kschema("string", optional=False)),
    _field("txId", kschema("int64")), _field("lsn", kschema("int64")), _field("xmin", kschema("int64")),
    _field("origin", kschema("string")), _field("origin_lsn", kschema("int64"))],
    optional=False, name="io.debezium.connector.postgresql.Source", version=1)
TRANSACTION_SCHEMA = kschema("struct", fields=[_field("id", kschema("string", optional=False)),
                                               _field("total_order", kschema("int64", optional=False)),
                                               _field("data_collection_order", kschema("int64", optional=False))],
                             name="event.block", version=1)
ENVELOPE_VERSION = 2  # Debezium 2.6+ (DBZ-7107)
# SchemaFactory.transactionKeySchema / transactionValueSchema
TRANSACTION_KEY = kschema("struct", fields=[_field("id", kschema("string", optional=False))], optional=False,
                          name="io.debezium.connector.common.TransactionMetadataKey", version=1)
TRANSACTION_VALUE = kschema("struct", fields=[
    _field("status", kschema("string", optional=False)), _field("id", kschema("string", optional=False)),
    _field("event_count", kschema("int64")),
    _field("data_collections", kschema("array", items=kschema("struct", fields=[
        _field("data_collection", kschema("string", optional=False)),
        _field("event_count", kschema("int64", optional=False))], name="event.collection", version=1))),
    _field("ts_ms", kschema("int64", optional=False))],
    optional=False, name="io.debezium.connector.common.TransactionMetadataValue", version=1)
# PostgresSchemaFactory.logicalDecodingMessageMonitorKeySchema
MESSAGE_KEY = kschema("struct", fields=[_field("prefix", kschema("string"))], optional=False,
                      name="io.debezium.connector.postgresql.MessageKey", version=1)
# SchemaFactory.heartbeatKeySchema / heartbeatValueSchema
HEARTBEAT_KEY = kschema("struct", fields=[_field("serverName", kschema("string", optional=False))], optional=False,
                        name="io.debezium.connector.common.ServerNameKey", version=1)
HEARTBEAT_VALUE = kschema("struct", fields=[_field("ts_ms", kschema("int64", optional=False))], optional=False,
                          name="io.debezium.connector.common.Heartbeat", version=1)
SLOT_BUSY_S = 60  # Debezium's slot.max.retries x slot.retry.delay.ms: how long a slot in use is waited for
SNAPSHOT_MODES = ("initial", "always", "never", "no_data", "initial_only", "when_needed")
UNIMPLEMENTED = frozenset({
    "heartbeat.action.query",
    "event.processing.failure.handling.mode",
    "slot.stream.params", "schema.history.internal.kafka.topic", "converters",
    "snapshot.isolation.mode", "include.schema.changes", "flush.lsn.source",
    "notification.enabled.channels", "topic.naming.strategy", "topic.delimiter", "tombstones.on.delete.mode",
})


def _pattern_list(values: list[str]) -> list[re.Pattern]:
    return [java_regex(v) for v in values]


class PostgresTask(SourceTask):
    slot_busy_since: float | None = None  # when START_REPLICATION first found the slot held by another walsender

    def start(self, props: dict[str, str]) -> None:
        c = PostgresConnector.config_def.parse(props)
        self.c, self.props = c, props
        self.prefix = c["topic.prefix"]
        self.partition = {"server": self.prefix}
        self.include = _pattern_list(c["table.include.list"])
        self.exclude = _pattern_list(c["table.exclude.list"])
        self.schemas_in = _pattern_list(c["schema.include.list"])
        self.schemas_out = _pattern_list(c["schema.exclude.list"])
        self.columns_in = _pattern_list(c["column.include.list"])
        self.columns_out = _pattern_list(c["column.exclude.list"])
        self.key_columns = _key_column_patterns(c["message.key.columns"])
        self.mappers = column_mappers(props)  # column.truncate.to.*, column.mask.*
        self.skipped = {s.strip() for s in c["skipped.operations"] if s.strip() and s.strip() != "none"}
        self.relations: dict[int, dict] = {}
        self.modes = Modes(decimal=c["decimal.handling.mode"], time=c["time.precision.mode"],
                           binary=c["binary.handling.mode"], interval=c["interval.handling.mode"],
                           hstore=c["hstore.handling.mode"], money_digits=c["money.fraction.digits"],
                           unknown=c["include.unknown.datatypes"], placeholder=c["unavailable.value.placeholder"])
        self.warned_columns: set[str] = set()
        self.tx: pgoutput.Begin | None = None
        self.tx_sources: dict[int, dict] = {}  # id(relation info) -> the source block of this transaction
        self.event = 0
        self.lsn_safe = 0  # the end LSN of the last transaction all of whose changes were handed over
        self.last_commit_lsn: int | None = None
        self.last_commit_ts_us = 0  # the commit time of the last transaction seen
        self.message_lsn = 0  # the WAL position of the message being handled
        self.last_offset: dict | None = None  # the offset of the last change record made
        self.last_beat = time.monotonic()
        self.tx_counts: dict[str, int] | None = None  # provide.transaction.metadata: events per table
        self.last_table: dict | None = None  # the relation of the last change (a message's source names it)
        self.prefixes_in = _pattern_list(c["message.prefix.include.list"])
        self.prefixes_out = _pattern_list(c["message.prefix.exclude.list"])
        content_schema, self.content_encoder = binary_content(c["binary.handling.mode"])
        self.message_schema = kschema("struct", fields=[
            _field("op", kschema("string", optional=False)), _field("ts_ms", kschema("int64")),
            _field("source", SOURCE_SCHEMA), _field("transaction", TRANSACTION_SCHEMA),
            _field("message", kschema("struct", fields=[_field("prefix", kschema("string")),
                                                         _field("content", content_schema)], optional=False,
                                       name="io.debezium.connector.postgresql.Message", version=1))],
            optional=False, name="io.debezium.connector.postgresql.MessageValue", version=1)
        self.confirmed = 0
        self.snapshot_rows: Iterator[ConnectRecord] | None = None
        self.stream_started = False
        self.stored = (self.context.offset_storage_reader.offset(self.partition)
                       if self.context.offset_storage_reader else None) or {}
        self.returned: dict | None = None  # the offset of the last record poll() handed over
        self.lost: BaseException | None = None  # the connection failure to recover from (a reconnect)
        self.reconnects, self.reconnect_at = 0, 0.0
        self.kafka = None
        self.connected = False  # once: the first connection made (what a failure to connect again is called)
        try:
            self._signals_setup()
            try:
                self._connect()
                self.connected = True
            except RetriableError as e:  # the server is not up yet: as Debezium's BaseSourceTask.start, tried
                self._lose(e)  # again by poll() after retriable.restart.connector.wait.ms, within errors.max.retries
        except BaseException:
            # a start that fails is not stopped (the worker calls stop() after a start only): what it opened closed
            self._close_kafka(commit=False)
            self._close_connections()
            raise

    # -- connections -----------------------------------------------------------------------------
    def _dsn(self) -> dict[str, Any]:
        c = self.c
        dsn = {"host": c["database.hostname"], "port": c["database.port"], "user": c["database.user"],
               "dbname": c["database.dbname"], "options": "-c TimeZone=UTC -c IntervalStyle=postgres",
               "application_name": f"klog-connect-{self.context.connector_name}",
               "connect_timeout": max(1, c["database.connect.timeout.ms"] // 1000)}
        if c["database.password"]:
            dsn["password"] = c["database.password"]
        if c["database.sslmode"]:
            dsn["sslmode"] = c["database.sslmode"]
        return dsn

    def _jdbc_connection(self):  # noqa: ANN202 - a psycopg2 connection
        """A connection for queries, as Debezium's JDBC connections (the replication one is not): the
        database.initial.statements run on it first and are committed, as JdbcConnection.connection() runs
        them (`;` separates them, `;;` is a semicolon)."""
        import psycopg2

        conn = psycopg2.connect(**self._dsn())
        statement = ""
        try:
            with conn.cursor() as q:
                for statement in sql_statements(self.c["database.initial.statements"]):
                    q.execute(statement)
            conn.commit()
        except psycopg2.Error as e:
            conn.close()
            first_line = str(e).strip().splitlines()[0]  # (not the LINE 1: / ^ lines that point at the error)
            raise ConnectError(f"database.initial.statements: {statement!r} failed: {first_line}") from None
        return conn

    def _connect(self) -> None:
        import psycopg2
        import psycopg2.errors
        import psycopg2.extras

        mode = self.c["snapshot.mode"]
        self.initial_only = mode == "initial_only"
        try:
            self.conn = self._jdbc_connection()
            self.conn.autocommit = True
            # initial_only never streams: as Debezium's (a slot only when the snapshotter streams), neither a
            # replication connection nor a slot, which would hold the server's WAL for no reader
            self.repl = None if self.initial_only else psycopg2.connect(
                **self._dsn(), connection_factory=psycopg2.extras.LogicalReplicationConnection)
        except psycopg2.OperationalError as e:
            self._close_connections()
            if _connection_lost(e, connecting=True):  # not up yet, not reachable: connected again later
                raise RetriableError(f"cannot connect to PostgreSQL: {_first_line(e)}") from None
            # the server refused: a wrong password, a missing database or role, no permission
            raise ConnectError(f"cannot connect to PostgreSQL: {_first_line(e)}") from None
        self.dbname = self.c["database.dbname"]
        snapshot_done = bool(self.stored) and not (self.stored.get("snapshot") and not self.stored.get(
            "last_snapshot_record") and str(self.stored.get("snapshot_completed")).lower() != "true")
        if self.initial_only:  # (nor a publication: Debezium's replication connection makes it)
            with self.conn.cursor() as q:
                q.execute("SELECT pg_current_wal_lsn()::text")
                self.slot_lsn = pgoutput.parse_lsn(q.fetchone()[0])
            self.lsn_safe = self.slot_lsn
            self.last_commit_lsn, self.skip_commit, self.skip_events, self.resume_counts = None, 0, 0, None
            if not snapshot_done:
                self.snapshot_rows = self._snapshot(None)
            return
        self.cur = self.repl.cursor()
        self._publication()
        slot = self.c["slot.name"]
        with self.conn.cursor() as q:
            q.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                      "WHERE slot_name = %s AND database = %s", (slot, self.dbname))
            row = q.fetchone()
        want_snapshot = mode == "always" or (mode in ("initial", "initial_only", "when_needed") and not snapshot_done) \
            or (mode == "when_needed" and row is None and bool(self.stored))
        if row is not None and want_snapshot:
            self.context.warn(f"connector '{self.context.connector_name}': dropping replication slot '{slot}' to take "
                              "a consistent snapshot (no stored offsets of a finished snapshot)")
            with self.conn.cursor() as q:
                q.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            row = None
        if row is None and self.stored and not want_snapshot:
            self.context.warn(f"connector '{self.context.connector_name}': replication slot '{slot}' was missing and "
                              "is created again: changes made while it was gone are not captured "
                              "(snapshot.mode=when_needed snapshots again)")
        if row is None:
            try:
                self.cur.execute(f"CREATE_REPLICATION_SLOT {_ident(slot)} LOGICAL pgoutput"
                                 + (" EXPORT_SNAPSHOT" if want_snapshot else " NOEXPORT_SNAPSHOT"))
            except psycopg2.errors.DuplicateObject:  # (a slot of another database: slot names are the server's)
                raise ConnectError(f"replication slot '{slot}' already exists for another database of this server; "
                                   "when setting up multiple connectors for the same database host, please make sure "
                                   "to use a distinct replication slot name for each (slot.name)") from None
            _, consistent_point, snapshot_name, _ = self.cur.fetchone()
            self.slot_lsn = pgoutput.parse_lsn(consistent_point)
            if want_snapshot:
                self.snapshot_rows = self._snapshot(snapshot_name)
        else:
            self.slot_lsn = pgoutput.parse_lsn(row[0]) if row[0] else 0
        self.lsn_safe = max(self.slot_lsn, int(self.stored.get("lsn_safe", 0) or 0))
        self.last_commit_lsn = int(self.stored.get("lsn_safe", 0) or 0) or None
        self.skip_commit = int(self.stored.get("lsn_commit", 0) or 0) if not self.stored.get("snapshot") else 0
        self.skip_events = int(self.stored.get("event", 0) or 0)
        self.resume_counts = self.stored.get("transaction_counts")  # provide.transaction.metadata's

    def _publication(self) -> None:
        """The publication, created if missing as publication.autocreate.mode says. With `filtered`, an
        existing one is set to the tables the filters keep now, as Debezium's initPublication does at each
        start (ALTER PUBLICATION ... SET TABLE): a table added to table.include.list is then streamed; one
        created FOR ALL TABLES cannot be altered so, and fails the task as Debezium's."""
        name, mode = self.c["publication.name"], self.c["publication.autocreate.mode"]
        with self.conn.cursor() as q:
            q.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s", (name,))
            found = q.fetchone()
            if found is not None:
                if mode != "filtered":
                    return
                if found[0]:
                    raise ConnectError(f"publication '{name}' is FOR ALL TABLES and cannot be altered to the tables "
                                       "of publication.autocreate.mode=filtered: drop it (the connector creates it "
                                       "again) or set publication.autocreate.mode=all_tables")
                tables = [f"{_ident(s)}.{_ident(t)}" for s, t in self._tables()]
                if not tables:
                    raise ConnectError("publication.autocreate.mode=filtered and table.include.list matches no table")
                q.execute(f"ALTER PUBLICATION {_ident(name)} SET TABLE {', '.join(tables)}")
                return
            if mode == "disabled":
                raise ConnectError(f"publication '{name}' does not exist and publication.autocreate.mode=disabled")
            # publish.via.partition.root: a partition's changes are sent as its partitioned table's (their
            # topic the root's), as Debezium's buildWithClause creates the publication
            options = " WITH (publish_via_partition_root = true)" if self.c["publish.via.partition.root"] else ""
            if mode == "all_tables":
                q.execute(f"CREATE PUBLICATION {_ident(name)} FOR ALL TABLES{options}")
                return
            tables = [f"{_ident(s)}.{_ident(t)}" for s, t in self._tables()]
            if not tables:
                raise ConnectError("publication.autocreate.mode=filtered and table.include.list matches no table")
            q.execute(f"CREATE PUBLICATION {_ident(name)} FOR TABLE {', '.join(tables)}{options}")

    def _wanted(self, schema: str, table: str) -> bool:
        full = f"{schema}.{table}"
        if self.include and not any(p.fullmatch(full) for p in self.include):
            return False
        if any(p.fullmatch(full) for p in self.exclude):
            return False
        if self.schemas_in and not any(p.fullmatch(schema) for p in self.schemas_in):
            return False
        return not any(p.fullmatch(schema) for p in self.schemas_out)

    def _tables(self, conn=None) -> list[tuple[str, str]]:  # noqa: ANN001 - a psycopg2 connection
        with (conn or self.conn).cursor() as q:
            q.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
                      "AND n.nspname NOT LIKE 'pg_toast%%' AND n.nspname NOT LIKE 'pg_temp%%' ORDER BY 1, 2")
            return [(s, t) for s, t in q.fetchall() if self._wanted(s, t)]

    # -- relations and records -------------------------------------------------------------------
    def _relation(self, rel: pgoutput.Relation) -> dict:
        topic = sanitized_topic(f"{self.prefix}.{rel.schema}.{rel.table}")
        fields, parsers, toasts, kept, hidden = [], [], [], [], []
        key_fields: dict[str, dict] = {}
        mappings: dict[str, Any] = {}  # column → its column mapper's converter (column.truncate.to.*, column.mask.*)
        nulls: dict[str, Any] = {}  # required column → what a change that lacks it carries
        facts = self._column_facts(rel)
        key_names = self._key_columns(rel)
        for i, col in enumerate(rel.columns):
            if not self._column_wanted(rel, col.name):
                if col.name not in key_names:
                    continue
                hidden.append(col.name)  # a key column column.*.list leaves out: in the key, not the value
            not_null, expression, pg_type = facts[col.name]
            found = column_type(pg_type, self.modes)
            if found is None:
                self._warn_type(rel, col.name, pg_type)
                continue  # Debezium leaves a column of a type it does not know out
            schema, parser = found
            required = not_null  # a key column too: Debezium's optionality is the column's
            default = default_value(pg_type, schema, parser, expression)  # (not mapped, as Debezium's)
            field_tail = {"optional": not required, **({"default": default[1]} if default else {}), "field": col.name}
            # the key's field and values are not mapped: Debezium builds the key without the column mappers
            field = key_fields[col.name] = {**schema, **field_tail}
            rule = rule_for(self.mappers, rel.schema, rel.table, col.name) if self.mappers else None
            if rule is not None:
                mapped, mapping = rule.apply(schema, pg_type)
                field = {**mapped, **field_tail}
                if mapping is not None:
                    mappings[col.name] = mapping
            fields.append(field)
            parsers.append(parser)
            toasts.append(toast_placeholder(pg_type, schema, self.modes))
            kept.append(i)
            # a required column a change lacks: its default, else Debezium's stand-in for its type
            if required:
                nulls[col.name] = default[0] if default else required_fallback(schema, pg_type, self.modes)
        value = kschema("struct", fields=[f for f in fields if f["field"] not in hidden], name=f"{topic}.Value")
        keys = [k for k in key_names if k in key_fields]  # the key's order: the primary key's, not the table's
        key_schema = kschema("struct", fields=[key_fields[k] for k in keys], optional=False,
                             name=f"{topic}.Key") if keys else None
        envelope = kschema("struct", fields=[
            {**value, "field": "before"}, {**value, "field": "after"}, {**SOURCE_SCHEMA, "field": "source"},
            {**TRANSACTION_SCHEMA, "field": "transaction"}, _field("op", kschema("string", optional=False)),
            _field("ts_ms", kschema("int64")), _field("ts_us", kschema("int64")), _field("ts_ns", kschema("int64"))],
            optional=False, name=f"{topic}.Envelope", version=ENVELOPE_VERSION)
        return {"rel": rel, "topic": topic, "names": [rel.columns[i].name for i in kept], "parsers": parsers,
                "toasts": toasts, "nulls": nulls, "keys": keys, "key_schema": key_schema, "envelope": envelope,
                "hidden": hidden, "mappings": mappings,
                "wanted": self._wanted(rel.schema, rel.table),
                "kept": None if len(kept) == len(rel.columns) else kept}  # positions of the columns kept

    def _warn_type(self, rel: pgoutput.Relation, column: str, pg_type: PgType) -> None:
        """Once per column: a type Debezium does not know is left out, as Debezium leaves it out (with
        include.unknown.datatypes, its text is sent as bytes)."""
        where = f"{rel.schema}.{rel.table}.{column}"
        if where in self.warned_columns:
            return
        self.warned_columns.add(where)
        type_name = pg_type.name or f"oid {pg_type.oid}"
        self.context.warn(f"connector '{self.context.connector_name}': column {where} of type {type_name} "
                          "is left out of the events, as Debezium leaves out a type it does not know "
                          "(include.unknown.datatypes=true sends its text as bytes)")

    def _column_wanted(self, rel: pgoutput.Relation, column: str) -> bool:
        """column.include.list / column.exclude.list: regular expressions over schema.table.column (a key
        column left out stays in the key: Debezium filters the value's columns only)."""
        full = f"{rel.schema}.{rel.table}.{column}"
        if self.columns_in and not any(p.fullmatch(full) for p in self.columns_in):
            return False
        return not any(p.fullmatch(full) for p in self.columns_out)

    def _column_facts(self, rel: pgoutput.Relation) -> dict[str, tuple[bool, str | None, PgType]]:
        """Each column's NOT NULL (a required field in Debezium's schemas), DEFAULT expression (the field's
        default there) and type as Debezium resolves it (domains to their base type, enums with their labels,
        arrays with their element type); pgoutput's relation message carries none of them.

        The type is the relation message's (its type and modifier), as Debezium's decoder takes it: a change
        streamed after the connector lagged may predate an ALTER COLUMN ... TYPE the catalog holds now, and
        its values are texts of the type they had then (an int's `1` is no boolean's `t`). The catalog's
        DEFAULT is then left out (an expression of the new type)."""
        with self.conn.cursor() as q:
            q.execute("SELECT a.attname, a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.atttypid, a.atttypmod "
                      "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                      "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped", (rel.oid,))
            catalog = {name: (not_null, expression, int(type_oid), int(typmod))
                       for name, not_null, expression, type_oid, typmod in q.fetchall()}
            types: dict[int, tuple] = {}  # read afresh for each relation: an enum may have gained a label
            facts = {}
            for col in rel.columns:
                not_null, expression, type_oid, typmod = catalog.get(col.name, (False, None, None, None))
                if (type_oid, typmod) != (col.type_oid, col.typmod):
                    expression, type_oid, typmod = None, col.type_oid, col.typmod
                facts[col.name] = (bool(not_null), expression, self._pg_type(q, types, type_oid, typmod))
            return facts

    def _pg_type(self, q, types: dict[int, tuple], type_oid: int, typmod: int,  # noqa: ANN001
                 element_of_array: bool = False) -> PgType:
        if type_oid not in types:
            q.execute("SELECT t.typname, t.typtype, t.typbasetype, t.typtypmod, t.typelem, t.typcategory, "
                      "(SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e "
                      "WHERE e.enumtypid = t.oid) FROM pg_type t WHERE t.oid = %s", (type_oid,))
            types[type_oid] = q.fetchone() or ("", "b", 0, -1, 0, "X", None)
        name, kind, base, base_typmod, element, category, labels = types[type_oid]
        if kind == "d" and not element_of_array:  # its base type, with the domain's modifier (the column has none)
            return self._pg_type(q, types, base, typmod if typmod >= 0 else base_typmod)
        if category == "A" and element:
            # an array of a domain is not resolved: Debezium has no schema for it (PostgresValueConverter)
            return PgType(type_oid, typmod, name, None, self._pg_type(q, types, element, -1, element_of_array=True))
        return PgType(type_oid, typmod, name, labels if kind == "e" else None)

    def _key_columns(self, rel: pgoutput.Relation) -> list[str]:
        """The columns of a table's key, as Debezium's: message.key.columns where it names any of the
        table's columns (in the order it names them), else the primary key in its own column order, else
        the columns of the table's first unique index (by name) over plain columns (JdbcConnection.
        readTableUniqueIndices); none without either. pgoutput's key flags are the replica identity's,
        which Debezium does not key by."""
        names = [c.name for c in rel.columns]
        chosen = [name for pattern in self.key_columns for name in names
                  if pattern.fullmatch(f"{rel.schema}.{rel.table}.{name}")]
        if chosen:
            return list(dict.fromkeys(chosen))
        with self.conn.cursor() as q:
            q.execute("SELECT ic.relname, i.indisprimary, a.attname FROM pg_index i "
                      "JOIN pg_class ic ON ic.oid = i.indexrelid "
                      "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position) "
                      "LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0 "
                      "WHERE i.indrelid = %s AND i.indisunique ORDER BY NOT i.indisprimary, ic.relname, k.position",
                      (rel.oid,))
            indexes: dict[str, tuple[bool, list[str | None]]] = {}
            for index, primary, column in q.fetchall():
                indexes.setdefault(index, (primary, []))[1].append(column)
        for primary, columns in indexes.values():
            if primary or None not in columns:  # an expression in a unique index: Debezium skips the index
                return [c for c in columns if c in names]
        return []

    @staticmethod
    def _row(info: dict, values: list | None) -> dict | None:
        if values is None:
            return None
        if info["kept"] is not None:
            values = [values[i] for i in info["kept"] if i < len(values)]
        row = {}
        for name, parser, toast, text in zip(info["names"], info["parsers"], info["toasts"], values, strict=False):
            if text is None:
                row[name] = info["nulls"].get(name)  # None, or a required column's stand-in
            elif text is pgoutput.UNCHANGED_TOAST:
                row[name] = toast
            else:
                row[name] = parser(text)
        return row

    def _source(self, info: dict, ts_us: int, snapshot: str, tx_id: int | None, lsn: int) -> dict:
        """Debezium's source block. sequence is [the end LSN of the last transaction committed before, this
        event's LSN] (Debezium's SourceInfo.sequence: null before the first commit it saw)."""
        rel = info["rel"]
        previous = f'"{self.last_commit_lsn}"' if self.last_commit_lsn else "null"
        return {"version": VERSION, "connector": "postgresql", "name": self.prefix,
                "ts_ms": ts_us // 1000, "snapshot": snapshot, "db": self.dbname,
                "sequence": f'[{previous},"{lsn}"]',
                "ts_us": ts_us, "ts_ns": ts_us * 1000,
                "schema": rel.schema, "table": rel.table, "txId": tx_id, "lsn": lsn, "xmin": None, "origin": None,
                "origin_lsn": None}

    def _tx_source(self, info: dict) -> dict:
        """The source block of a streamed change: its lsn is the change's own WAL position (the walsender's
        for the message, Debezium's stream.lastReceivedLsn()); the rest is the same for every change of one
        table in one transaction, so built once per (transaction, table)."""
        cached = self.tx_sources.get(id(info))
        if cached is None:
            tx = self.tx
            base = self._source(info, tx.commit_ts_us, "false", tx.xid, 0)
            cached = self.tx_sources[id(info)] = (base, base["sequence"].rpartition(",")[0] + ',"')
        base, sequence_head = cached
        lsn = self.message_lsn
        return {**base, "sequence": f'{sequence_head}{lsn}"]', "lsn": lsn}

    def _event(self, info: dict, op: str, before: dict | None, after: dict | None, ts_ms: int,
               source: dict, offset: dict) -> list[ConnectRecord]:
        row = after if after is not None else before
        key = {k: row.get(k) for k in info["keys"]} if info["key_schema"] is not None and row else None
        if self.incremental is not None:  # an incremental snapshot's progress, kept in the offsets as Debezium's
            offset["incremental_snapshot"] = self.incremental
            window = self.window
            if window is not None and window["open"] and op != "r" and row and \
                    (info["rel"].schema, info["rel"].table) == window["table"]:
                window["buffer"].pop(_key_id(info, row), None)  # changed in the window: the streamed change wins
        if info["hidden"]:  # read for the key only (Debezium's TableSchemaBuilder filters the value alone)
            before, after = _without(before, info["hidden"]), _without(after, info["hidden"])
        if info["mappings"]:  # after the type's conversion: a null, a stand-in, the placeholder too
            before, after = _mapped(before, info["mappings"]), _mapped(after, info["mappings"])
        now_ns = time.time_ns()
        value = {"before": before, "after": after, "source": source, "transaction": None, "op": op,
                 "ts_ms": now_ns // 1_000_000, "ts_us": now_ns // 1000, "ts_ns": now_ns}  # the envelope's order
        if self.tx_counts is not None and op != "r":
            value["transaction"] = self._transaction_block(info)
            offset["transaction_counts"] = dict(self.tx_counts)  # a restart inside the transaction goes on counting
        self.last_table = info
        self.last_offset = offset
        key_schema = None if key is None else info["key_schema"]  # a truncate's: no key, no key schema (DBZ-3469)
        out = [ConnectRecord(info["topic"], None, key_schema, key, info["envelope"], value, ts_ms,
                             source_partition=self.partition, source_offset=offset)]
        if op == "d" and self.c["tombstones.on.delete"]:
            out.append(ConnectRecord(info["topic"], None, info["key_schema"], key, None, None, ts_ms,
                                     source_partition=self.partition, source_offset=offset))
        return out

    # -- snapshot ---------------------------------------------------------------------------------
    def _snapshot(self, snapshot_name: str | None) -> Iterator[ConnectRecord]:
        """The snapshot's records, read in the slot's exported snapshot (`snapshot_name`), or (initial_only,
        no slot) in a transaction of its own."""
        snap = self._jdbc_connection()
        snap.set_session(isolation_level="REPEATABLE READ")  # not read-only: it takes a txId, as Debezium's
        _values_as_text(snap)
        try:
            with snap.cursor() as q:
                if snapshot_name is not None:
                    q.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                # PostgresConnection.currentTransactionId: none on a standby (it cannot assign one)
                q.execute("SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE txid_current() END, "
                          "(EXTRACT(EPOCH FROM now()) * 1000)::bigint")
                tx_id, ts_ms = (None if v is None else int(v) for v in q.fetchone())  # text, as every value here
            tables = self._tables(snap)  # the tables of the snapshot, not those created since
            if self.c["snapshot.locking.mode"] == "shared":
                self._lock_tables(snap, tables)
            # each record is held until the next one shows whether it ends its table or the snapshot:
            # (record, first of the snapshot, first of its table, its table)
            pending: tuple[ConnectRecord, bool, bool, tuple[str, str]] | None = None
            overrides = self._select_overrides()
            for schema, table in tables:
                info = self._relation(self._catalog_relation(snap, schema, table))
                first_of_table = True
                for values in self._table_rows(snap, info, overrides.get((schema, table))):
                    offset = {"snapshot": True, "last_snapshot_record": False, "lsn": self.slot_lsn,
                              "lsn_safe": self.slot_lsn, "ts_usec": ts_ms * 1000}
                    # each row's source time is when it was read (Debezium's offset.event(table, now))
                    source = self._source(info, time.time_ns() // 1000, "true", tx_id, self.slot_lsn)
                    record = self._event(info, "r", None, self._row(info, values), ts_ms, source, offset)[0]
                    if pending is not None:
                        yield _snapshot_marked(*pending, last_of_table=pending[3] != (schema, table), last=False)
                    pending = (record, pending is None, first_of_table, (schema, table))
                    first_of_table = False
            if pending is not None:
                record = _snapshot_marked(*pending, last_of_table=True, last=True)
                # Debezium's last snapshot record: last_snapshot_record and snapshot_completed (preSnapshotCompletion)
                record.source_offset = {**record.source_offset, "last_snapshot_record": True,
                                        "snapshot_completed": True}
                yield record
                self.context.request_offset_commit()  # stored now: a kill from here on does not snapshot again
            else:
                # no row to carry the snapshot's end: the offset of a completed snapshot (Debezium's after its
                # postSnapshotCompletion: the snapshot's LSN, no snapshot keys), stored now as one of its own
                completed = {"lsn": self.slot_lsn, "lsn_safe": self.slot_lsn, "ts_usec": ts_ms * 1000,
                             **({"txId": tx_id} if tx_id is not None else {})}
                self.context.request_offset_commit(self.partition, completed)
                self.returned = completed  # (a reconnect goes on from it, as from a record's)
            snap.commit()
        finally:
            snap.close()

    def _table_rows(self, snap, info: dict, override: tuple[str, str] | None) -> Iterator[list]:  # noqa: ANN001
        """A table's rows for the snapshot, each a list of texts in the table's column order: all its columns,
        or what its snapshot.select.statement.overrides statement selects. An override's result columns are
        the table's of the same name (case aside; the others null), as Debezium's ColumnUtils.toArray reads
        them; one the table does not have fails the task."""
        rel = info["rel"]
        by_name = {c.name.lower(): i for i, c in reversed(list(enumerate(rel.columns)))}
        with snap.cursor(name=f"klog_snapshot_{len(self.relations)}") as q:
            q.itersize = self.c["snapshot.fetch.size"]
            if override is None:
                q.execute(f"SELECT {', '.join(_ident(c.name) for c in rel.columns)} "
                          f"FROM {_ident(rel.schema)}.{_ident(rel.table)}")
                yield from q
                return
            key, statement = override
            q.execute(statement.strip().rstrip(";"))  # (a cursor's query: JDBC takes a trailing semicolon)
            positions: list[int] | None = None
            for values in q:
                if positions is None:  # (a named cursor describes its result once it fetched)
                    positions = [self._override_column(key, by_name, d.name, rel) for d in q.description]
                row = [None] * len(rel.columns)
                for value, i in zip(values, positions, strict=True):
                    row[i] = value
                yield row

    @staticmethod
    def _override_column(key: str, by_name: dict[str, int], name: str, rel: pgoutput.Relation) -> int:
        if name.lower() not in by_name:
            raise ConnectError(f"{key}: its column '{name}' is not a column of table {rel.schema}.{rel.table} "
                               f"({', '.join(c.name for c in rel.columns)})")
        return by_name[name.lower()]

    def _select_overrides(self) -> dict[tuple[str, str], tuple[str, str]]:
        """snapshot.select.statement.overrides: (schema, table) → (its statement's key, the statement), as
        RelationalDatabaseConnectorConfig.getSnapshotSelectOverridesByTable reads them: a listed table without
        a `snapshot.select.statement.overrides.<schema>.<table>` key is named in a warning and read whole."""
        out = {}
        for entry in self.c["snapshot.select.statement.overrides"]:
            key = f"snapshot.select.statement.overrides.{entry}"
            statement = self.props.get(key)
            if statement is None:
                self.context.warn(f"connector '{self.context.connector_name}': snapshot.select.statement.overrides "
                                  f"names {entry} but there is no {key}: the snapshot reads the whole table")
                continue
            parts = table_id_parts(entry)
            if len(parts) == 3 and parts[0] == self.dbname:  # database.schema.table
                parts = parts[1:]
            if len(parts) == 2:
                out[(parts[0], parts[1])] = (key, statement)
        return out

    def _lock_tables(self, snap, tables: list[tuple[str, str]]) -> None:  # noqa: ANN001 - a psycopg2 connection
        """snapshot.locking.mode=shared, as Debezium's SharedSnapshotLock in PostgresSnapshotChangeEventSource.
        lockTablesForSchemaSnapshot: `SET lock_timeout` to snapshot.lock.timeout.ms, then each captured table
        locked IN ACCESS SHARE MODE in the snapshot's transaction. The locks last until the transaction ends
        (Debezium's releaseSchemaSnapshotLocks releases nothing for PostgreSQL), so DDL on a table the snapshot
        has not read yet waits for it instead of failing it; writes go on."""
        import psycopg2.errors

        timeout = self.c["snapshot.lock.timeout.ms"]
        with snap.cursor() as q:
            q.execute(f"SET lock_timeout = {int(timeout)}")
            for schema, table in tables:
                try:
                    q.execute(f"LOCK TABLE {_ident(schema)}.{_ident(table)} IN ACCESS SHARE MODE")
                except psycopg2.errors.LockNotAvailable:
                    raise ConnectError(f"snapshot.locking.mode=shared: the lock on table {schema}.{table} was not "
                                       f"granted within snapshot.lock.timeout.ms={timeout} (another transaction holds "
                                       "a conflicting lock); the snapshot was not taken") from None

    @staticmethod
    def _catalog_relation(conn, schema: str, table: str) -> pgoutput.Relation:  # noqa: ANN001
        with conn.cursor() as q:
            q.execute("SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = %s AND c.relname = %s", (schema, table))
            oid, identity = q.fetchone()
            oid = int(oid)  # the snapshot's connection reads every value as text
            # (no key flags: the key is _key_columns', from the catalog, for the snapshot and the stream alike)
            q.execute("SELECT a.attname, a.atttypid, a.atttypmod FROM pg_attribute a "
                      "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (oid,))
            cols = [pgoutput.Column(n, int(t), int(m), False) for n, t, m in q.fetchall()]
        return pgoutput.Relation(oid, schema, table, identity, cols)

    # -- signals (klog/connect/signals.py) ----------------------------------------------------------
    def _signals_setup(self) -> None:
        """signal.data.collection: the signal table, read through the source channel (its inserts in the
        change stream); signal.kafka.*: the kafka channel's topic, read while streaming once every
        signal.poll.interval.ms; the other channels of signal.enabled.channels are named in a warning."""
        name = self.c["signal.data.collection"].strip()
        channels = [ch.strip() for ch in self.c["signal.enabled.channels"] if ch.strip()]
        others = [ch for ch in channels if ch not in ("source", "kafka")]
        if others:
            self.context.warn(f"connector '{self.context.connector_name}': signal.enabled.channels: "
                              f"{', '.join(others)} not implemented (klog reads the source channel, the "
                              "signal.data.collection table, and the kafka channel); ignored")
        self.source_channel = "source" in channels
        self.kafka: signals.KafkaChannel | None = None
        self.kafka_due = 0.0
        self.kafka_pending: list[tuple[str, str, object]] = []
        self.kafka_hold: tuple[str, str, object] | None = None  # the kafka signal of a blocking snapshot under way
        # signals acted on whose progress the worker has not stored yet: their offsets are committed by commit(),
        # which the worker calls once it stored the task's offsets (committed before, a kill in between lost them)
        self.kafka_unstored = False
        self.kafka_failed: str | None = None  # the last read's failure, named once (not at each read)
        if "kafka" in channels:
            self.kafka = signals.KafkaChannel(self.props, self.prefix, self.context.connector_name, self.context.warn)
            self.kafka_failed = self.kafka.unreached  # (a cluster not reached at the start: named already)
        self.signal_table: tuple[str, str] | None = None
        # the signal table: the source channel's, and where an incremental snapshot's watermarks are written
        # (as Debezium's, whatever channel asked for it)
        if name:
            try:
                self.signal_table = signals.signal_table(name, self.c["database.dbname"])
            except signals.SignalError as e:
                raise ConfigError("signal.data.collection", name, str(e)) from None
            if not self._wanted(*self.signal_table):  # Debezium's EventDispatcher filters it out too
                self.context.warn(f"connector '{self.context.connector_name}': signal.data.collection {name} is not "
                                  "a table the connector captures (table.include.list and the other filters): its "
                                  "signals are not read; add it to the captured tables, as Debezium requires")
        self._incremental_resume()

    def _signal(self, values: list) -> None:
        """A row inserted into the signal table: acted on where it is in the stream. An execute-snapshot of
        type blocking pauses streaming after it for the snapshot of the tables it names (_poll reads the
        records of snapshot_rows first); a signal klog does not take is named in a warning and ignored."""
        try:
            signal_id, kind, data = signals.parse(["" if v is pgoutput.UNCHANGED_TOAST else v for v in values])
        except signals.SignalError as e:
            self.context.warn(f"connector '{self.context.connector_name}': {e}")
            return
        if kind in ("snapshot-window-open", "snapshot-window-close"):
            self._watermark_seen(signal_id, kind)
        elif self.source_channel:
            self._act(signal_id, kind, data)

    def _act(self, signal_id: str, kind: str, data: object, at: dict | None = None) -> None:
        """A signal acted on: a source channel's where it is in the stream, a kafka channel's (`at`: the offset
        of the last change handed over) between two messages of the stream."""
        where = f"connector '{self.context.connector_name}'"
        try:
            if kind == "stop-snapshot":
                self._stop_incremental(signal_id, data)
                return
            if kind in ("pause-snapshot", "resume-snapshot"):
                self._pause_incremental(signal_id, kind == "pause-snapshot")
                return
            if kind == "log":
                message = data.get("message") if isinstance(data, dict) else None
                self.context.warn(f"{where}: signal {signal_id!r} (log): {message}")
                return
            if kind != "execute-snapshot":
                raise signals.SignalError(f"signal {signal_id!r}: type {kind!r} is not implemented; ignored")
            plan = signals.execute_snapshot(signal_id, data)
        except signals.SignalError as e:
            self.context.warn(f"{where}: {e}")
            return
        if plan.kind == "incremental":
            if self.signal_table is None:
                self.context.warn(f"{where}: execute-snapshot signal {plan.id!r}: an incremental snapshot writes its "
                                  "watermarks to the signal table: it needs signal.data.collection, as Debezium's; "
                                  "the signal is ignored")
                return
            self._start_incremental(plan)
            return
        if at is not None:  # a kafka signal: its offset committed once the snapshot ended
            self.kafka_hold = (signal_id, kind, data)
            self.snapshot_rows = self._kafka_held(self._signalled_snapshot(plan, at, at))
            return
        done = self._signal_offset()
        self.snapshot_rows = self._signalled_snapshot(plan, {**done, "event": self.event - 1}, done)

    def _kafka_signals(self) -> bool:
        """The kafka channel's signals come since its last read, acted on now (between two messages of the
        stream); their offsets committed. True when one was: the progress they made (an incremental snapshot
        started, paused, resumed or stopped) is stored now, with no record of this poll after it."""
        got, self.kafka_pending = self.kafka_pending, []
        if not got:
            try:
                got = self.kafka.read()
            except Exception as e:  # noqa: BLE001 - the cluster unreachable, the group fenced: read again later
                if _first_line(e) != self.kafka_failed:  # (a cluster down for hours: one warning, not one a read)
                    self.kafka_failed = _first_line(e)
                    self.context.warn(f"connector '{self.context.connector_name}': the kafka signal channel failed "
                                      f"({self.kafka_failed}); read again every {self.c['signal.poll.interval.ms']} "
                                      "ms (named again if it fails otherwise)")
                return False
            self.kafka_failed = None
        if not got:
            if not self.kafka_unstored:
                self._kafka_commit()  # (what was read: ignored records)
            return False
        for n, (signal_id, kind, data) in enumerate(got):
            at = self._current_offset()
            at.setdefault("lsn", self.lsn_safe)
            at.setdefault("txId", None)
            at.setdefault("ts_usec", self.last_commit_ts_us)
            try:
                self._act(signal_id, kind, data, at)
            except BaseException:
                # the connection lost (a chunk's watermark): a reconnect goes on from the offsets before this
                # read (returned), so all of its signals are acted on again, not only this one (a stop-snapshot
                # before it would be undone)
                self.kafka_pending = list(got)
                raise
            if self.snapshot_rows is not None:
                # a blocking snapshot: the signals after it acted on after it, and the offsets committed only
                # then, so a snapshot cut short is taken again after a restart (its signal read again)
                self.kafka_pending = list(got[n + 1:])
                break
        offset = self._current_offset()
        if self.incremental is not None:
            offset["incremental_snapshot"] = self.incremental
        else:
            offset.pop("incremental_snapshot", None)
        self.context.request_offset_commit(self.partition, offset)
        self.returned = offset  # (stored after this poll: what a reconnect goes on from)
        self.kafka_unstored = True  # (their offsets committed once that is stored: commit())
        return True

    def _kafka_held(self, rows: Iterator[ConnectRecord]) -> Iterator[ConnectRecord]:
        """A kafka signal's blocking snapshot: until its last record, the signal's offset is not committed
        (a restart reads it again and takes the snapshot again; a reconnect takes it again too)."""
        yield from rows
        self.kafka_hold = None

    def _kafka_commit(self) -> None:
        try:
            self.kafka.commit()
        except Exception as e:  # noqa: BLE001 - committed with the next read
            self.context.warn(f"connector '{self.context.connector_name}': the kafka signal channel's offsets were "
                              f"not committed ({_first_line(e)})")

    def _signal_offset(self) -> dict:
        """The offset of the signal being handled (a change's, as _insert makes it)."""
        tx = self.tx
        # the offset of the snapshot's records is the signal's position less one event: a restart before
        # the snapshot's end reads the signal again and takes the snapshot again from its beginning; the
        # last record's is the signal's own, so streaming goes on after it
        done = {"lsn": tx.final_lsn, "lsn_commit": tx.final_lsn, "txId": tx.xid, "ts_usec": tx.commit_ts_us,
                "event": self.event, "lsn_safe": self.lsn_safe}
        if self.tx_counts is not None:
            done["transaction_counts"] = dict(self.tx_counts)
        return done

    def _signalled_snapshot(self, plan: signals.SnapshotSignal, resume: dict, done: dict) -> Iterator[ConnectRecord]:
        """A blocking snapshot's records: the tables the connector captures that the signal names, each read
        in one REPEATABLE READ transaction taken now (rows changed after the signal and before it began are
        in it and streamed after it too, as with Debezium), with its additional condition."""
        import psycopg2

        where = f"connector '{self.context.connector_name}'"
        tables = self._signalled_tables(plan)
        if not tables:
            return
        statements = {}
        for schema, table in tables:
            condition = plan.condition(self.dbname, schema, table)
            if condition is None:
                continue
            names = [c for c, in self._query("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND "
                                             "attnum > 0 AND NOT attisdropped ORDER BY attnum",
                                             (f"{_ident(schema)}.{_ident(table)}",))]
            statement = (f"SELECT {', '.join(_ident(n) for n in names)} FROM {_ident(schema)}.{_ident(table)} "
                         f"WHERE {condition}")
            try:
                self._query(f"{statement} LIMIT 0")
            except psycopg2.Error as e:
                first_line = str(e).strip().splitlines()[0]
                self.context.warn(f"{where}: execute-snapshot signal {plan.id!r}: the additional condition of "
                                  f"{schema}.{table} fails ({first_line}); the signal is ignored")
                return
            statements[(schema, table)] = ("additional-conditions", statement)
        self.context.warn(f"{where}: execute-snapshot signal {plan.id!r}: blocking snapshot of "
                          f"{', '.join(f'{s}.{t}' for s, t in tables)}; streaming resumes after it")
        snap = self._jdbc_connection()
        snap.set_session(isolation_level="REPEATABLE READ")
        _values_as_text(snap)
        beat = time.monotonic()
        try:
            with snap.cursor() as q:
                q.execute("SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE txid_current() END, "
                          "(EXTRACT(EPOCH FROM now()) * 1000)::bigint")
                tx_id, ts_ms = (None if v is None else int(v) for v in q.fetchone())
            pending: tuple[ConnectRecord, bool, bool, tuple[str, str]] | None = None
            for schema, table in tables:
                info = self._relation(self._catalog_relation(snap, schema, table))
                first_of_table = True
                for values in self._table_rows(snap, info, statements.get((schema, table))):
                    source = self._source(info, time.time_ns() // 1000, "true", tx_id, resume["lsn"])
                    record = self._event(info, "r", None, self._row(info, values), ts_ms, source, dict(resume))[0]
                    if pending is not None:
                        yield _snapshot_marked(*pending, last_of_table=pending[3] != (schema, table), last=False)
                    pending = (record, pending is None, first_of_table, (schema, table))
                    first_of_table = False
                    if time.monotonic() - beat > 5:  # the paused replication stream kept alive (wal_sender_timeout)
                        self.cur.send_feedback(force=True)
                        beat = time.monotonic()
            if pending is not None:
                record = _snapshot_marked(*pending, last_of_table=True, last=True)
                record.source_offset = dict(done)
                yield record
            snap.commit()
        finally:
            snap.close()

    # -- incremental snapshots: DBLog's watermarks, as Debezium's SignalBasedIncrementalSnapshotChangeEventSource
    def _incremental_resume(self) -> None:
        """The incremental snapshot the stored offsets were in (a restart, a reconnect): its chunk read again."""
        self.window: dict | None = None
        state = self.stored.get("incremental_snapshot") if isinstance(self.stored, dict) else None
        self.incremental: dict | None = state if isinstance(state, dict) and state.get("tables") and \
            self.signal_table is not None else None
        self.chunk_due = self.incremental is not None

    def _signalled_tables(self, plan: signals.SnapshotSignal) -> list[list[str]]:
        """[schema, table] of each table the connector captures that the signal names; none: one warning."""
        tables = [[s, t] for s, t in self._tables() if plan.wants(self.dbname, s, t)]
        if not tables:
            self.context.warn(f"connector '{self.context.connector_name}': execute-snapshot signal {plan.id!r}: "
                              f"data-collections {', '.join(plan.names)} name no table the connector captures; "
                              "nothing to snapshot")
        return tables

    def _start_incremental(self, plan: signals.SnapshotSignal) -> None:
        where = f"connector '{self.context.connector_name}'"
        tables = self._signalled_tables(plan)
        if not tables:
            return
        conditions = {}
        for s, t in tables:
            condition = plan.condition(self.dbname, s, t)
            if condition is not None:
                conditions[f"{s}.{t}"] = condition
        self.context.warn(f"{where}: execute-snapshot signal {plan.id!r}: incremental snapshot of "
                          f"{', '.join(f'{s}.{t}' for s, t in tables)}")
        if self.incremental is not None:  # added to the one running
            state = self.incremental
            self.incremental = {**state, "tables": state["tables"] + [t for t in tables if t not in state["tables"]],
                                "conditions": {**state["conditions"], **conditions}}
            return
        self.incremental = {"id": plan.id, "tables": tables, "last_key": None, "max_key": None,
                            "conditions": conditions}
        self._next_chunk()

    def _stop_incremental(self, signal_id: str, data: object) -> None:
        """stop-snapshot (type incremental): the tables data-collections names, or all, left out of it."""
        state = self.incremental
        if state is None:
            return
        patterns = signals.stop_snapshot(signal_id, data)  # (a SignalError: named in a warning, ignored)
        names = [p.pattern for p in patterns or []]
        if patterns is None:
            self.incremental, self.window = None, None
        else:
            kept = [t for t in state["tables"] if not any(p.fullmatch(f"{t[0]}.{t[1]}") for p in patterns)]
            if kept and kept[0] == state["tables"][0]:
                self.incremental = {**state, "tables": kept}
            else:  # the table being read is stopped: the next one from its beginning
                self.incremental = {**state, "tables": kept, "last_key": None, "max_key": None}
                self.window = None
                if kept:
                    self._next_chunk()
                else:
                    self.incremental = None
        self.context.warn(f"connector '{self.context.connector_name}': stop-snapshot signal {signal_id!r}: "
                          "incremental snapshot stopped" + (f" for {', '.join(names)}" if names else ""))

    def _pause_incremental(self, signal_id: str, pause: bool) -> None:
        """pause-snapshot / resume-snapshot (Debezium's PauseIncrementalSnapshot, ResumeIncrementalSnapshot):
        no chunk is read while paused (a window open goes on to its close), and the next one is when resumed.
        Unlike Debezium's (a flag in memory), the pause is kept in the offsets: it outlasts a restart."""
        where = f"connector '{self.context.connector_name}'"
        state = self.incremental
        kind = "pause-snapshot" if pause else "resume-snapshot"
        if state is None or bool(state.get("paused")) == pause:
            self.context.warn(f"{where}: {kind} signal {signal_id!r}: no incremental snapshot is "
                              + ("running" if state is None else "paused" if not pause else "running unpaused")
                              + "; nothing to do")
            return
        if pause:
            self.incremental = {**state, "paused": True}
            self.context.warn(f"{where}: {kind} signal {signal_id!r}: incremental snapshot {state['id']!r} paused "
                              "(a resume-snapshot signal resumes it)")
            return
        self.incremental = {k: v for k, v in state.items() if k != "paused"}
        self.context.warn(f"{where}: {kind} signal {signal_id!r}: incremental snapshot {state['id']!r} resumed")
        if self.window is None:
            self._next_chunk()

    def _next_chunk(self) -> None:
        """The next chunk of the incremental snapshot: the open watermark written to the signal table, the
        chunk (by primary key, after the last key read, up to the table's maximum key at its start) read into
        the window's buffer, the close watermark written. The buffer is sent when the close watermark comes
        in the stream, less the rows a change streamed between the two watermarks replaced."""
        import uuid

        import psycopg2

        where = f"connector '{self.context.connector_name}'"
        while self.incremental is not None:
            state = self.incremental
            if state.get("paused"):
                return  # (resume-snapshot reads the next chunk)
            if not state["tables"]:
                self.context.warn(f"{where}: incremental snapshot {state['id']!r} finished")
                self.incremental, self.window = None, None
                return
            schema, table = state["tables"][0]
            snap = self._jdbc_connection()
            try:  # (READ COMMITTED: each statement sees what was committed before it, the open watermark too)
                _values_as_text(snap)
                info = self._relation(self._catalog_relation(snap, schema, table))
                keys = info["keys"]
                if not keys:
                    self.context.warn(f"{where}: incremental snapshot: table {schema}.{table} has no primary key "
                                      "(nor message.key.columns): skipped, as Debezium skips it")
                    self.incremental = {**state, "tables": state["tables"][1:], "last_key": None, "max_key": None}
                    continue
                name = f"{_ident(schema)}.{_ident(table)}"
                columns = ", ".join(_ident(k) for k in keys)
                condition = state["conditions"].get(f"{schema}.{table}")
                filtered = f" WHERE ({condition})" if condition else ""
                with snap.cursor() as q:
                    if state["max_key"] is None:
                        q.execute(f"SELECT {columns} FROM {name}{filtered} ORDER BY "
                                  f"{', '.join(_ident(k) + ' DESC' for k in keys)} LIMIT 1")
                        top = q.fetchone()
                        if top is None:  # nothing to read
                            self.incremental = {**state, "tables": state["tables"][1:], "last_key": None}
                            continue
                        state = self.incremental = {**state, "max_key": list(top)}
                    q.execute("SELECT bool_or(NOT attnotnull) FROM pg_attribute WHERE attrelid = %s::regclass "
                              "AND attname = ANY(%s)", (name, list(keys)))
                    if q.fetchone()[0]:  # a nullable key (message.key.columns): NULL-safe bounds
                        above_max, params = _key_after(keys, state["max_key"])
                        conditions = [f"NOT {above_max}"]
                        if state["last_key"] is not None:
                            above_last, more = _key_after(keys, state["last_key"])
                            conditions.append(above_last)
                            params += more
                    else:
                        marks = ", ".join(["%s"] * len(keys))
                        conditions, params = [f"({columns}) <= ({marks})"], list(state["max_key"])
                        if state["last_key"] is not None:
                            conditions.append(f"({columns}) > ({marks})")
                            params += state["last_key"]
                    if condition:
                        conditions.append(f"({condition})")
                    size = self.c["incremental.snapshot.chunk.size"]
                    statement = q.mogrify(
                        f"SELECT {', '.join(_ident(c.name) for c in info['rel'].columns)} FROM {name} WHERE "
                        f"{' AND '.join(conditions)} ORDER BY {columns} LIMIT {int(size)}", params).decode()
                chunk_id = str(uuid.uuid4())
                self._watermark(chunk_id, "snapshot-window-open")
                rows = list(self._table_rows(snap, info, ("incremental.snapshot.chunk", statement)))
                snap.commit()
                self._watermark(chunk_id, "snapshot-window-close")
            except psycopg2.Error as e:
                if _connection_lost(e):
                    raise
                first_line = str(e).strip().splitlines()[0]
                self.context.warn(f"{where}: incremental snapshot {state['id']!r} of {schema}.{table} failed "
                                  f"({first_line}); stopped")
                self.incremental, self.window = None, None
                return
            finally:
                snap.close()
            positions = [[c.name for c in info["rel"].columns].index(k) for k in keys]
            buffer = {}
            for values in rows:
                row = self._row(info, values)
                buffer[_key_id(info, row)] = row
            last = [rows[-1][i] for i in positions] if rows else None
            finished = len(rows) < size or last == state["max_key"]
            self.window = {"id": chunk_id, "open": False, "table": (schema, table), "info": info,
                           "buffer": buffer, "last": last, "finished": finished}
            return

    def _watermark(self, chunk_id: str, kind: str) -> None:
        """A watermark row in the signal table, as Debezium writes it: id <chunk>-open or <chunk>-close."""
        table = f"{_ident(self.signal_table[0])}.{_ident(self.signal_table[1])}"
        suffix = "open" if kind.endswith("open") else "close"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data = {"openWindowTimestamp": now} if suffix == "open" else {"closeWindowTimestamp": now}
        self._query(f"INSERT INTO {table} VALUES (%s, %s, %s)", (f"{chunk_id}-{suffix}", kind, json.dumps(data)))

    def _watermark_seen(self, signal_id: str, kind: str) -> None:
        window = self.window
        if window is None or self.incremental is None:
            return  # a watermark of a chunk before a restart: read again since
        if kind == "snapshot-window-open" and signal_id == f"{window['id']}-open":
            window["open"] = True
        elif kind == "snapshot-window-close" and signal_id == f"{window['id']}-close":
            state = self.incremental
            if window["finished"]:
                self.incremental = {**state, "tables": state["tables"][1:], "last_key": None, "max_key": None}
            else:
                self.incremental = {**state, "last_key": window["last"]}
            if not self.incremental["tables"]:
                self.incremental = None
            self.window = None
            self.snapshot_rows = self._window_rows(window, self._signal_offset(), state)

    def _window_rows(self, window: dict, offset: dict, before: dict) -> Iterator[ConnectRecord]:
        """A closed window's rows (op r, source.snapshot incremental), then the next chunk read. Each row but
        the last keeps in its offset the snapshot's progress `before` the window: a restart after some of
        them reads the chunk again (rows sent twice, none lost); the last one's moves on past the chunk."""
        info = window["info"]
        rows = list(window["buffer"].values())
        for n, row in enumerate(rows, 1):
            source = self._source(info, time.time_ns() // 1000, "incremental", offset["txId"], offset["lsn"])
            record = self._event(info, "r", None, row, time.time_ns() // 1_000_000, source, dict(offset))[0]
            progress = self.incremental if n == len(rows) else before
            if progress is None:
                record.source_offset.pop("incremental_snapshot", None)
            else:
                record.source_offset["incremental_snapshot"] = progress
            yield record
        if self.incremental is not None:
            self._next_chunk()
        else:
            self.context.warn(f"connector '{self.context.connector_name}': incremental snapshot finished")

    def _query(self, sql: str, params: tuple = ()) -> list:
        with self.conn.cursor() as q:
            q.execute(sql, params or None)
            return q.fetchall() if q.description else []

    # -- streaming --------------------------------------------------------------------------------
    def poll(self) -> list[ConnectRecord]:
        """The next records; a lost connection (the server restarted, a failover, the walsender terminated)
        is recovered, as Debezium's retriable errors restart its task: after retriable.restart.connector.
        wait.ms the connector connects again and goes on after the last record it handed over, as a
        restarted task goes on after its stored offsets (errors.max.retries bounds the attempts)."""
        if self.lost is not None:
            self._reconnect()
            return []
        try:
            out = self._poll()
        except Exception as e:
            if not _connection_lost(e):
                raise
            self._lose(e)
            return []
        if out:
            self.returned = out[-1].source_offset
        return out

    def _lose(self, error: BaseException) -> None:
        wait = self.c["retriable.restart.connector.wait.ms"]
        what = (_first_line(error) if isinstance(error, RetriableError) else
                f"the connection to PostgreSQL was lost ({_first_line(error)})")
        self.context.warn(f"connector '{self.context.connector_name}': {what}; connecting again in {wait} ms "
                          "(retriable.restart.connector.wait.ms)")
        self.lost, self.reconnect_at = error, time.monotonic() + wait / 1000
        self._close_connections()

    def _reconnect(self) -> None:
        if time.monotonic() < self.reconnect_at:
            time.sleep(0.05)
            return
        limit = self.c["errors.max.retries"]
        if 0 <= limit <= self.reconnects:
            if not self.connected:  # (the first start's: "cannot connect to PostgreSQL: ...")
                raise ConnectError(f"{_first_line(self.lost)} ({self.reconnects} attempts to connect again failed, "
                                   f"errors.max.retries={limit})")
            raise ConnectError(f"the connection to PostgreSQL was lost and {self.reconnects} attempts to connect "
                               f"again failed (errors.max.retries={limit}): {_first_line(self.lost)}")
        self.reconnects += 1
        if self.returned is not None:
            self.stored = self.returned  # what was handed over is delivered: skipped when streamed again
        self.relations, self.tx, self.tx_counts, self.tx_sources = {}, None, None, {}
        self.stream_started, self.snapshot_rows, self.event, self.last_offset = False, None, 0, None
        if self.kafka_hold is not None:  # a kafka signal's blocking snapshot cut short: taken again
            self.kafka_pending.insert(0, self.kafka_hold)
            self.kafka_hold = None
        self._incremental_resume()
        try:
            self._connect()
        except Exception as e:
            if not (isinstance(e, RetriableError) or _connection_lost(e)):
                raise
            self._lose(e)
            return
        self.lost, self.reconnects = None, 0
        self.context.warn(f"connector '{self.context.connector_name}': connected to PostgreSQL"
                          + (" again" if self.connected else ""))
        self.connected = True

    def _poll(self) -> list[ConnectRecord]:
        if self.snapshot_rows is not None:
            out = []
            tc = self.context.transaction_context  # transaction.boundary=connector: a snapshot batch each
            for record in self.snapshot_rows:
                out.append(record)
                if len(out) >= self.c["max.batch.size"]:
                    if tc is not None:
                        tc.commit_transaction(out[-1])
                    return out
            self.snapshot_rows = None
            if out and tc is not None:
                tc.commit_transaction(out[-1])
            # the snapshot's end: its offsets are stored after this poll's records (request_offset_commit), so
            # no streamed record comes in this poll
            return out
        if self.initial_only:
            time.sleep(0.1)
            return []
        if not self.stream_started:
            import psycopg2.errors

            try:
                self.cur.start_replication(slot_name=self.c["slot.name"], decode=False, status_interval=10,
                                           options=self._stream_options())
            except psycopg2.errors.ObjectInUse as e:
                return self._slot_busy(e)
            self.stream_started, self.slot_busy_since = True, None
        return self._heartbeat(self._stream())

    def _slot_busy(self, error: BaseException) -> list[ConnectRecord]:
        """START_REPLICATION found the slot active for another walsender (55006): most often the one of the
        connection just lost, which a loaded server has not ended yet. Asked again after a second, for up to
        SLOT_BUSY_S, as Debezium's startStreaming retries (slot.max.retries=6 x slot.retry.delay.ms=10000);
        then the task fails naming the slot."""
        now = time.monotonic()
        since = self.slot_busy_since = self.slot_busy_since or now
        first_line = str(error).strip().splitlines()[0]
        slot = self.c["slot.name"]
        if now - since >= SLOT_BUSY_S:
            raise ConnectError(f"replication slot '{slot}' is still in use by another connection after "
                               f"{SLOT_BUSY_S} s ({first_line}): is another connector reading it? (slot.name)")
        self.context.warn(f"connector '{self.context.connector_name}': replication slot '{slot}' is in use "
                          f"({first_line}); asked again in 1 s")
        self.lost, self.reconnect_at = error, now + 1
        self._close_connections()
        return []

    def _logical_message(self, message: pgoutput.Message) -> list[ConnectRecord]:
        """A logical decoding message as Debezium's LogicalDecodingMessageMonitor: on <topic.prefix>.message,
        key MessageKey {prefix}, value MessageValue {op m, ts_ms, source, transaction, message {prefix,
        content per binary.handling.mode}}; message.prefix.include.list / exclude.list choose the prefixes.
        The source block names the table of the last change seen, as Debezium's (it keeps its last)."""
        prefix = message.prefix
        if (self.prefixes_in and not any(p.fullmatch(prefix) for p in self.prefixes_in)) or any(
                p.fullmatch(prefix) for p in self.prefixes_out):
            return []  # (skipped.operations does not apply: PostgresEventDispatcher filters by prefix only)
        tx = self.tx if message.transactional else None
        # a non-transactional message has no commit time: Debezium's source keeps the last one it saw
        ts_us = tx.commit_ts_us if tx is not None else self.last_commit_ts_us or time.time_ns() // 1000
        source = self._source(self.last_table or {"rel": pgoutput.Relation(0, "", "", "d", [])}, ts_us, "false",
                              tx.xid if tx is not None else None, self.message_lsn)
        value = {"op": "m", "ts_ms": time.time_ns() // 1_000_000, "source": source, "transaction": None,
                 "message": {"prefix": prefix, "content": self.content_encoder(message.content)}}
        if tx is not None and self.tx_counts is not None:
            self.tx_counts["LOGICAL_DECODING_MESSAGE"] = self.tx_counts.get("LOGICAL_DECODING_MESSAGE", 0) + 1
            value["transaction"] = {"id": str(tx.xid), "total_order": sum(self.tx_counts.values()),
                                    "data_collection_order": self.tx_counts["LOGICAL_DECODING_MESSAGE"]}
        return [ConnectRecord(f"{self.prefix}.message", None, MESSAGE_KEY, {"prefix": prefix}, self.message_schema,
                              value, value["ts_ms"], source_partition=self.partition,
                              source_offset=self._current_offset())]

    def _transaction_block(self, info: dict) -> dict:
        """provide.transaction.metadata: the event's place in its transaction (TransactionContext.event):
        its order among all the transaction's events and among its table's, both from 1."""
        table = f'{info["rel"].schema}.{info["rel"].table}'
        self.tx_counts[table] = self.tx_counts.get(table, 0) + 1
        return {"id": str(self.tx.xid), "total_order": sum(self.tx_counts.values()),
                "data_collection_order": self.tx_counts[table]}

    def _transaction_record(self, status: str) -> ConnectRecord:
        """provide.transaction.metadata: TransactionMonitor's BEGIN or END record on <topic.prefix>.transaction
        (END with the event count of the transaction and of each table, in Java HashMap order as Debezium's
        TransactionContext holds them); ts_ms the commit time."""
        tx, counts = self.tx, self.tx_counts
        value = {"status": status, "id": str(tx.xid), "event_count": None, "data_collections": None,
                 "ts_ms": tx.commit_ts_us // 1000}
        if status == "END":
            value["event_count"] = sum(counts.values())
            value["data_collections"] = [{"data_collection": table, "event_count": counts[table]}
                                         for table in java_hashmap_order(list(counts))]
        return ConnectRecord(f'{self.prefix}.{self.c["topic.transaction"]}', None, TRANSACTION_KEY, {"id": str(tx.xid)},
                             TRANSACTION_VALUE, value, tx.commit_ts_us // 1000, source_partition=self.partition,
                             source_offset=self._current_offset())

    def _current_offset(self) -> dict:
        """The offset of a record that is not a change (a heartbeat, a transaction's BEGIN or END): the last
        change's, with the LSN up to which every transaction was handed over."""
        base = self.last_offset or self.stored
        offset = {k: v for k, v in base.items() if k not in ("snapshot", "last_snapshot_record", "snapshot_completed")}
        offset["lsn_safe"] = self.lsn_safe
        return offset

    def _heartbeat(self, out: list[ConnectRecord]) -> list[ConnectRecord]:
        """heartbeat.interval.ms: Debezium's heartbeat record (key {serverName}, value {ts_ms}, partition 0)
        on __debezium-heartbeat.<topic.prefix> once an interval, busy or idle, carrying the current offset: a
        stream whose captured tables are quiet still has the slot confirmed past what it read."""
        interval = self.c["heartbeat.interval.ms"]
        now = time.monotonic()
        if interval <= 0 or now - self.last_beat < interval / 1000:
            return out
        self.last_beat = now
        offset = self._current_offset()
        topic = f'{self.c["topic.heartbeat.prefix"]}.{self.prefix}'
        ts_ms = time.time_ns() // 1_000_000
        out.append(ConnectRecord(topic, 0, HEARTBEAT_KEY, {"serverName": self.prefix}, HEARTBEAT_VALUE,
                                 {"ts_ms": ts_ms}, ts_ms, source_partition=self.partition, source_offset=offset))
        return out

    def _stream_options(self) -> dict[str, str]:
        """pgoutput's options as Debezium's PgOutputMessageDecoder sets them: logical decoding messages too
        from PostgreSQL 14 on."""
        options = {"proto_version": "1", "publication_names": self.c["publication.name"]}
        if self.conn.server_version >= 140000:
            options["messages"] = "true"
        return options

    def _stream(self) -> list[ConnectRecord]:
        import psycopg2

        out: list[ConnectRecord] = []
        if self.chunk_due:  # an incremental snapshot resumed after a restart: its next chunk
            self.chunk_due = False
            self._next_chunk()
        if self.kafka is not None and (self.kafka_pending or time.monotonic() >= self.kafka_due):
            self.kafka_due = time.monotonic() + self.c["signal.poll.interval.ms"] / 1000
            if self._kafka_signals():
                return out  # (their progress stored after this poll: no record of what comes after)
        deadline = time.monotonic() + self.c["poll.interval.ms"] / 1000
        try:
            while len(out) < self.c["max.batch.size"]:
                msg = self.cur.read_message()
                if msg is None:
                    left = deadline - time.monotonic()
                    if out or left <= 0:
                        break
                    select.select([self.cur], [], [], min(left, 0.2))
                    continue
                payload = msg.payload
                self.message_lsn = msg.data_start
                if payload[:1] == b"I" and self.tx is not None:
                    out.extend(self._insert(payload))  # most of a load: decoded straight into its record
                    if self.snapshot_rows is not None:
                        break  # a signal's blocking snapshot: streaming pauses after the signal
                else:
                    out.extend(self._handle(pgoutput.decode(bytes(payload))))
                    if self.snapshot_rows is not None:
                        break  # a signal's blocking snapshot (the signal decoded on the slow path)
                    if payload[:1] == b"C" and self.context.transaction_context is not None:
                        # transaction.boundary=connector: one Kafka transaction per database transaction
                        # (after its last record, or before this poll's if that went out in an earlier one)
                        tc = self.context.transaction_context
                        tc.commit_transaction(out[-1]) if out else tc.commit_transaction()
        except psycopg2.Error as e:
            if _connection_lost(e):
                if not out:
                    raise
                self._lose(e)  # the records made before it are handed over: the reconnect goes on after them
                return out
            raise ConnectError(f"PostgreSQL replication failed: {str(e).strip()}") from None
        return out

    def _handle(self, message: object) -> list[ConnectRecord]:
        if type(message) is pgoutput.Change or type(message) is pgoutput.Truncate:
            if self.tx is None:
                return []
            self.event += 1
            tx = self.tx
            if tx.final_lsn < self.skip_commit or (tx.final_lsn == self.skip_commit and self.event <= self.skip_events):
                return []  # delivered before the restart
            offset = {"lsn": tx.final_lsn, "lsn_commit": tx.final_lsn, "txId": tx.xid, "ts_usec": tx.commit_ts_us,
                      "event": self.event, "lsn_safe": self.lsn_safe}
            ts_ms = tx.commit_ts_us // 1000
            if type(message) is pgoutput.Truncate:
                window = self.window
                if window is not None and window["open"] and any(
                        (i["rel"].schema, i["rel"].table) == window["table"]
                        for i in map(self.relations.get, message.relation_oids) if i is not None):
                    window["buffer"].clear()  # the chunk read before it: none of its rows is there any more
                if "t" in self.skipped:
                    return []
                out = []
                for oid in message.relation_oids:
                    info = self.relations.get(oid)
                    if info is not None and info["wanted"]:
                        out.extend(self._event(info, "t", None, None, ts_ms, self._tx_source(info), offset))
                return out
            return self._change(message, ts_ms, offset)
        if isinstance(message, pgoutput.Begin):
            self.tx, self.event = message, 0
            self.tx_sources = {}
            if self.c["provide.transaction.metadata"]:
                resumed = self.resume_counts
                if resumed is not None and message.final_lsn == self.skip_commit:
                    # the transaction a restart came back into (TransactionMonitor.transactionStartedEvent):
                    # its counts go on from the stored offset, and its BEGIN is not sent again
                    self.tx_counts, self.resume_counts = dict(resumed), None
                    return []
                self.tx_counts = {}
                return [self._transaction_record("BEGIN")]
            return []
        if isinstance(message, pgoutput.Commit):
            # every change of this transaction was handed over: once a later record's offset is stored,
            # the slot may skip it (the walsender resends a transaction whose commit is not below the flush LSN)
            self.lsn_safe = max(self.lsn_safe, message.end_lsn)
            self.last_commit_lsn = message.end_lsn
            self.last_commit_ts_us = message.commit_ts_us
            end = [self._transaction_record("END")] if self.tx_counts is not None and self.tx is not None else []
            self.tx, self.tx_counts = None, None
            return end
        if isinstance(message, pgoutput.Message):
            return self._logical_message(message)
        if isinstance(message, pgoutput.Relation):
            self.relations[message.oid] = self._relation(message)
            self.tx_sources = {}
            return []
        return []

    def _insert(self, payload: bytes) -> list[ConnectRecord]:
        """An Insert message of the current transaction: what _handle and _change do for one, without
        the message object."""
        self.event += 1
        tx = self.tx
        if tx.final_lsn <= self.skip_commit and (tx.final_lsn < self.skip_commit or self.event <= self.skip_events):
            return []  # delivered before the restart
        oid, count = pgoutput.insert_head(payload)
        info = self.relations[oid]
        values = None
        if self.signal_table is not None and info["wanted"] and \
                (info["rel"].schema, info["rel"].table) == self.signal_table:
            values = pgoutput.read_tuple(payload, pgoutput.INSERT_TUPLE_AT, count)[0]
            self._signal(values)
        if not info["wanted"] or "c" in self.skipped:
            return []
        offset = {"lsn": tx.final_lsn, "lsn_commit": tx.final_lsn, "txId": tx.xid, "ts_usec": tx.commit_ts_us,
                  "event": self.event, "lsn_safe": self.lsn_safe}
        if values is None:
            values = pgoutput.read_tuple(payload, pgoutput.INSERT_TUPLE_AT, count)[0]
        row = self._row(info, values)
        return self._event(info, "c", None, row, tx.commit_ts_us // 1000, self._tx_source(info), offset)

    def _change(self, message: pgoutput.Change, ts_ms: int, offset: dict) -> list[ConnectRecord]:
        info = self.relations[message.relation_oid]
        kind = message.kind
        if kind == "I" and self.signal_table is not None and info["wanted"] and \
                (info["rel"].schema, info["rel"].table) == self.signal_table:
            self._signal(message.new)
        if not info["wanted"]:
            return []
        if kind == "I":
            if "c" in self.skipped:
                return []
            return self._event(info, "c", None, self._row(info, message.new), ts_ms, self._tx_source(info), offset)
        new = message.new
        if kind == "U" and message.old is not None and not message.old_is_key and pgoutput.UNCHANGED_TOAST in new:
            # REPLICA IDENTITY FULL: an unchanged TOASTed value is in the old row (Debezium's cached old value)
            new = [o if n is pgoutput.UNCHANGED_TOAST else n for n, o in zip(new, message.old, strict=False)]
        before, after = self._row(info, message.old), self._row(info, new)
        source = self._tx_source(info)
        if kind == "D":
            return [] if "d" in self.skipped else self._event(info, "d", before, None, ts_ms, source, offset)
        if before is not None and info["keys"] and any(before.get(k) != after.get(k) for k in info["keys"]) \
                and (message.old_is_key or info["rel"].replica_identity == "f"):  # the old key was sent
            # a primary key change: Debezium's delete (+ tombstone) of the old key, create of the new
            # (each of them left out when skipped.operations names it, as Debezium's receiver skips it)
            old = {n: before.get(n) for n in info["names"]}
            return [*([] if "d" in self.skipped else self._event(info, "d", old, None, ts_ms, source, offset)),
                    *([] if "c" in self.skipped else self._event(info, "c", None, after, ts_ms, source, offset))]
        if message.old_is_key:
            before = None  # only the key was sent: Debezium's before is null under REPLICA IDENTITY DEFAULT
        return [] if "u" in self.skipped else self._event(info, "u", before, after, ts_ms, source, offset)

    def commit(self, offsets: dict[str, dict]) -> None:
        if self.kafka is not None and self.kafka_unstored and self.kafka_hold is None and not self.kafka_pending:
            self.kafka_unstored = False  # the progress of the kafka signals acted on is stored: their offsets too
            self._kafka_commit()
        offset = offsets.get(json.dumps(self.partition, sort_keys=True))
        if not offset or offset.get("snapshot") or not self.stream_started:
            return
        safe = int(offset.get("lsn_safe") or 0)
        if safe > self.confirmed and self.lost is None:
            try:
                self.cur.send_feedback(flush_lsn=safe, reply=True)
            except Exception as e:
                if not _connection_lost(e):
                    raise
                self._lose(e)  # confirmed once connected again, at the next commit
                return
            self.confirmed = safe

    def stop(self) -> None:
        repl = getattr(self, "repl", None)
        _close(repl)
        # the offsets of what was read committed, unless a signal's progress is not stored (a task failing before
        # the worker stored it) or its blocking snapshot was cut short: read again at the next start
        self._close_kafka(commit=not (getattr(self, "kafka_unstored", False) or getattr(self, "kafka_hold", None)
                                      or getattr(self, "kafka_pending", None)))
        try:
            c, conn = getattr(self, "c", None), getattr(self, "conn", None)
            if c is not None and c["slot.drop.on.stop"] and repl is not None and conn is not None and \
                    self.lost is None:
                self._drop_slot()
        finally:
            _close(getattr(self, "conn", None))

    def _close_kafka(self, commit: bool) -> None:
        kafka, self.kafka = getattr(self, "kafka", None), None
        if kafka is not None:
            try:
                kafka.close(commit=commit)
            except Exception as e:  # noqa: BLE001 - the stop goes on
                self.context.warn(f"connector '{self.context.connector_name}': the kafka signal channel did not "
                                  f"close cleanly ({_first_line(e)})")

    def _close_connections(self) -> None:
        for conn in (getattr(self, "repl", None), getattr(self, "conn", None)):
            _close(conn)

    def _drop_slot(self) -> None:
        """slot.drop.on.stop, as Debezium's: a graceful stop drops the slot (a killed worker's stays). Its
        walsender may take a moment to go once the replication connection is closed: asked again for 5 s."""
        import psycopg2
        import psycopg2.errors

        slot, deadline = self.c["slot.name"], time.monotonic() + 5
        while True:
            try:
                with self.conn.cursor() as q:
                    q.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                              "WHERE slot_name = %s AND database = %s", (slot, self.dbname))
                return
            except psycopg2.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    self.context.warn(f"connector '{self.context.connector_name}': slot.drop.on.stop: replication "
                                      f"slot '{slot}' is still in use and was not dropped")
                    return
                time.sleep(0.1)
            except psycopg2.Error as e:
                self.context.warn(f"connector '{self.context.connector_name}': slot.drop.on.stop: replication slot "
                                  f"'{slot}' was not dropped: {str(e).strip()}")
                return


def _close(conn) -> None:  # noqa: ANN001 - a psycopg2 connection or None
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001, S110 - closing a connection that already broke
            pass


def _connection_lost(error: BaseException, connecting: bool = False) -> bool:
    """A failure of the connection, not of what it was asked (Debezium's PostgresErrorHandler retries these):
    psycopg2's closed connection, one the server or the network broke (no SQLSTATE: a replication stream the
    server ended after wal_sender_timeout without a reply, a paused connector's), or SQLSTATE class 08
    (connection exception), 57P01-57P03 (the server shutting down, crashed, or not accepting yet) and 53300
    (too many connections).

    `connecting`: an error of psycopg2.connect(), which has no SQLSTATE (libpq keeps the server's to itself):
    it is read off the message (_startup_sqlstate); a server that refused the login (a wrong password, a
    missing database or role, no permission) is no lost connection."""
    import psycopg2

    if isinstance(error, psycopg2.InterfaceError):
        return True
    if not isinstance(error, psycopg2.DatabaseError):
        return False
    code = error.pgcode or (_startup_sqlstate(str(error)) if connecting else "") or ""
    if not code:  # libpq's own: an OperationalError, or the bare DatabaseError a dead replication stream gives
        return isinstance(error, psycopg2.OperationalError) or type(error) is psycopg2.DatabaseError
    return code.startswith("08") or code in ("57P01", "57P02", "57P03", "53300")


# the server's answers to a login that mean "not now" (PostgreSQL's postmaster.c and proc.c), by SQLSTATE
_NOT_NOW = (("the database system is starting up", "57P03"), ("the database system is shutting down", "57P03"),
            ("the database system is in recovery mode", "57P03"), ("the database system is not yet accepting", "57P03"),
            ("the database system is not accepting connections", "57P03"), ("too many clients already", "53300"),
            ("connection slots are reserved", "53300"), ("terminating connection due to", "57P01"))


def _startup_sqlstate(message: str) -> str | None:
    """The SQLSTATE of a failed login, from libpq's message (`connection to server at ... failed: FATAL:  ...`):
    none when libpq failed by itself (refused, timed out, an unknown host: the server not reachable); a
    not-now state by its text (above); any other error the server sent, "28000" (it refused the login)."""
    text = message.strip()
    head, sep, tail = text.partition(" failed: ")
    said = tail if sep and head.startswith("connection to server") else text
    severity, colon, what = said.partition(":  ")  # the server's error: its severity, two spaces, its message
    if not colon or not severity.isupper() or " " in severity.strip():
        return None
    for words, code in _NOT_NOW:
        if words in what:
            return code
    return "28000"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _key_after(keys: list[str], values: list) -> tuple[str, list]:
    """SQL true where a row's key sorts after `values` in ORDER BY keys (ascending, NULLS LAST: PostgreSQL's
    default), a NULL the greatest of its column; a row comparison, (a, b) > (x, y), is NULL where a NULL is
    met and would leave such rows out of every chunk."""
    terms, params = [], []
    for i, key in enumerate(keys):
        if values[i] is None:
            continue  # nothing sorts after a NULL in this column
        same = []
        for k, v in zip(keys[:i], values[:i], strict=True):
            same.append(f"{_ident(k)} IS NULL" if v is None else f"{_ident(k)} = %s")
            params += [] if v is None else [v]
        same.append(f"({_ident(key)} > %s OR {_ident(key)} IS NULL)")
        params.append(values[i])
        terms.append("(" + " AND ".join(same) + ")")
    return ("(" + " OR ".join(terms) + ")" if terms else "FALSE"), params


def _key_id(info: dict, row: dict) -> str:
    """A row's primary key as one value: the buffer of an incremental snapshot's window is keyed by it."""
    return repr([row.get(k) for k in info["keys"]])


def _mapped(row: dict | None, mappings: dict[str, Any]) -> dict | None:
    if row is None:
        return None
    return {k: (mappings[k](v) if k in mappings else v) for k, v in row.items()}


def sanitized_topic(name: str) -> str:
    """Debezium's AbstractTopicNamingStrategy.sanitizedTopicName: each character outside [a-zA-Z0-9._-]
    an underscore, at most 249 characters; the schemas are named after the topic so named."""
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", name)[:249]
    return {".": "_", "..": "__"}.get(name, name)


def table_id_parts(text: str) -> list[str]:
    """A table's name as Debezium's TableIdParser reads it: parts split at dots, a double-quoted part
    taken as written (`""` a quote inside it)."""
    parts, current, quoted, i = [], [], False, 0
    while i < len(text):
        char = text[i]
        if char == '"' and quoted and text[i + 1:i + 2] == '"':
            current.append('"')
            i += 1
        elif char == '"':
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return [p.strip() for p in parts]


def sql_statements(text: str) -> list[str]:
    """database.initial.statements split as Debezium's JdbcConnection.parseSqlStatementString: at each `;`,
    `;;` a semicolon kept, each statement trimmed, empty ones dropped."""
    statements, current, i = [], [], 0
    while i < len(text):
        if text[i] != ";":
            current.append(text[i])
        elif text[i + 1:i + 2] == ";":
            current.append(";")
            i += 1
        else:
            statements.append("".join(current).strip())
            current = []
        i += 1
    statements.append("".join(current).strip())
    return [s for s in statements if s]


def _key_column_patterns(spec: str) -> list[re.Pattern]:
    """message.key.columns (`<table regex>:<column>,<column>;...`) as Debezium's KeyMapper reads it: one
    case-insensitive pattern over schema.table.column per column named, in the order named."""
    patterns = []
    for part in filter(str.strip, spec.split(";")):
        table, columns = part.split(":", 1)
        patterns += [re.compile(java_regex(f"{table.strip()}.{column.strip()}").pattern, re.IGNORECASE)
                     for column in columns.split(",")]
    return patterns


def _check_placeholder(value: str) -> str | None:
    if value.startswith("hex:"):
        try:
            bytes.fromhex(value[4:])
        except ValueError:
            return "hex: is followed by an even number of hexadecimal digits"
    return None


def _check_skipped_operations(operations: list[str]) -> str | None:
    """CommonConnectorConfig.validateSkippedOperation: r, c, u, d, t, or none alone."""
    given = [o.strip() for o in operations]
    for operation in given:
        if operation not in ("none", "r", "c", "u", "d", "t"):
            return f"Invalid operation: {operation!r} (r, c, u, d, t or none)"
    if "none" in given and len(set(given)) > 1:
        return "'none' cannot be specified with other skipped operation types"
    return None


def _check_key_columns(spec: str) -> str | None:
    for part in filter(str.strip, spec.split(";")):
        if not re.fullmatch(r"\s*([^:]+):([^:,]+(,[^:,]+)*)\s*", part):
            return "each ';'-separated entry is <fully-qualified table>:<column>[,<column>...]"
    try:
        _key_column_patterns(spec)
    except re.error as e:
        return f"not a regular expression: {e}"
    return None


def _without(row: dict | None, names: list[str]) -> dict | None:
    return None if row is None else {k: v for k, v in row.items() if k not in names}


def _snapshot_marked(record: ConnectRecord, first: bool, first_of_table: bool, _table: tuple[str, str],
                     last_of_table: bool, last: bool) -> ConnectRecord:
    """source.snapshot of a snapshot record as Debezium's SnapshotRecord.resolve marks it: last, first,
    last_in_data_collection, first_in_data_collection, else true."""
    record.value["source"]["snapshot"] = ("last" if last else "first" if first else "last_in_data_collection"
                                          if last_of_table else "first_in_data_collection" if first_of_table
                                          else "true")
    return record


def _values_as_text(conn) -> None:  # noqa: ANN001 - a psycopg2 connection
    """Every column of the snapshot in its type's output text, as pgoutput sends a change's (a `::text`
    cast is not that: it trims char(n)'s padding and gives inet its /32), so one parser reads both."""
    import psycopg2.extensions

    as_text = psycopg2.extensions.new_type(tuple(psycopg2.extensions.string_types), "KLOG_TEXT",
                                           lambda value, _cursor: value)
    psycopg2.extensions.register_type(as_text, conn)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresConnector(SourceConnector):
    java_classes = ("io.debezium.connector.postgresql.PostgresConnector",)
    short_names = ("postgres-cdc",)
    config_def = (ConfigDef()
                  .define("database.hostname").define("database.port", "int", 5432).define("database.user")
                  .define("database.password", "password", "").define("database.dbname")
                  .define("database.sslmode", default="").define("database.initial.statements", default="")
                  .define("database.connect.timeout.ms", "long", 30_000)
                  .define("topic.prefix", doc="the prefix of every topic (Debezium's logical server name; Debezium 1's "
                          "database.server.name)")
                  .define("plugin.name", default="pgoutput", choices=("pgoutput",))
                  .define("slot.name", default="debezium", check=lambda v: None if re.fullmatch(r"[a-z0-9_]{1,63}", v)
                          else "a slot name is lower-case letters, digits and underscores")
                  .define("slot.drop.on.stop", "boolean", False)
                  .define("publication.name", default="dbz_publication")
                  .define("publication.autocreate.mode", default="all_tables",
                          choices=("all_tables", "disabled", "filtered"))
                  .define("publish.via.partition.root", "boolean", False)
                  .define("table.include.list", "list", [], check=regex_list_check)
                  .define("table.exclude.list", "list", [], check=regex_list_check)
                  .define("schema.include.list", "list", [], check=regex_list_check)
                  .define("schema.exclude.list", "list", [], check=regex_list_check)
                  .define("column.include.list", "list", [], check=regex_list_check)
                  .define("column.exclude.list", "list", [], check=regex_list_check)
                  .define("message.key.columns", default="", check=_check_key_columns)
                  .define("message.prefix.include.list", "list", [], check=regex_list_check)
                  .define("message.prefix.exclude.list", "list", [], check=regex_list_check)
                  .define("snapshot.mode", default="initial", choices=SNAPSHOT_MODES)
                  .define("snapshot.fetch.size", "int", 10240, at_least=1)
                  .define("snapshot.select.statement.overrides", "list", [])
                  # Debezium 2.6+ (DBZ-7300): none by default for PostgreSQL; custom needs a Java SnapshotLock
                  .define("snapshot.locking.mode", default="none", choices=("shared", "none"))
                  .define("snapshot.lock.timeout.ms", "long", 10_000, at_least=0)
                  .define("tombstones.on.delete", "boolean", True)
                  .define("decimal.handling.mode", default="precise", choices=("precise", "double", "string"))
                  .define("time.precision.mode", default="adaptive", choices=TIME_MODES)
                  .define("binary.handling.mode", default="bytes",
                          choices=("bytes", "base64", "base64-url-safe", "hex"))
                  .define("interval.handling.mode", default="numeric", choices=("numeric", "string"))
                  .define("hstore.handling.mode", default="json", choices=("json", "map"))
                  .define("money.fraction.digits", "int", 2, at_least=0)
                  .define("include.unknown.datatypes", "boolean", False)
                  .define("unavailable.value.placeholder", default=UNAVAILABLE, check=_check_placeholder)
                  .define("skipped.operations", "list", ["t"], check=_check_skipped_operations)
                  .define("max.batch.size", "int", 2048, at_least=1)
                  .define("max.queue.size", "int", 8192, at_least=1)
                  .define("poll.interval.ms", "long", 500, at_least=1)
                  .define("retriable.restart.connector.wait.ms", "long", 10_000, at_least=0)
                  .define("errors.max.retries", "int", -1, at_least=-1)
                  .define("heartbeat.interval.ms", "int", 0, at_least=0)
                  .define("provide.transaction.metadata", "boolean", False)
                  .define("topic.transaction", default="transaction")
                  .define("topic.heartbeat.prefix", default="__debezium-heartbeat")
                  .define("signal.data.collection", default="")
                  .define("signal.enabled.channels", "list", ["source"])
                  .define("signal.poll.interval.ms", "long", 5000, at_least=0)
                  .define("signal.kafka.topic", default="")
                  .define("signal.kafka.bootstrap.servers", default="")
                  .define("signal.kafka.groupId", default="kafka-signal")
                  .define("signal.kafka.poll.timeout.ms", "long", 0, at_least=0)
                  .define("incremental.snapshot.chunk.size", "int", 1024, at_least=1))
    unimplemented = UNIMPLEMENTED
    task_class = PostgresTask

    @classmethod
    def known_key(cls, key: str) -> bool:
        """The keys this connector reads whose names are patterns (config_def cannot list them): the column
        mappers', each table's snapshot.select.statement.overrides.<schema>.<table> and the kafka signal
        channel's client properties, signal.consumer.*."""
        return bool(MAPPER_KEY.fullmatch(key)) or key.startswith(("snapshot.select.statement.overrides.",
                                                                  "signal.consumer."))

    def validate(self, config: dict[str, Any]) -> None:
        for kind in ("table", "column"):
            if config[f"{kind}.include.list"] and config[f"{kind}.exclude.list"]:
                raise ConfigError(f"{kind}.exclude.list", ",".join(config[f"{kind}.exclude.list"]),
                                  f"{kind}.include.list and {kind}.exclude.list cannot both be set")
        check_mapper_keys(self.props)
        if "kafka" in [ch.strip() for ch in config["signal.enabled.channels"]] and \
                not config["signal.kafka.bootstrap.servers"].strip():  # (named at validation, not at the task's start)
            raise ConfigError("signal.kafka.bootstrap.servers", None, "the kafka signal channel reads its topic "
                              "there: a klog store's path or a cluster (kafka://HOST:PORT, @NAME, HOST:PORT)")
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            raise ConfigError("connector.class", "PostgresConnector", "needs psycopg2: pip install 'klog[connect]'") \
                from None

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]  # one task reads the slot, as Debezium's

    def stop(self) -> None:
        pass

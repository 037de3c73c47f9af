"""Debezium's signals through the source channel (SourceSignalChannel): a row inserted into the table named by
`signal.data.collection` and seen in the change stream is a signal, its columns read by position as
Debezium reads them: id, type, data (a JSON text).

Taken: `execute-snapshot` (Debezium's ExecuteSnapshot) of type `blocking` (streaming pauses at the signal,
the tables named by `data-collections` are read as the initial snapshot reads them, op `r`, then streaming
goes on after the signal) and `incremental` (chunks between watermarks, DBLog's algorithm, in the PostgreSQL
task), with `additional-conditions` (`[{"data-collection": ..., "filter": ...}]`, or the older single
`additional-condition`); `stop-snapshot` of an incremental snapshot; `log`. Other types (`pause-snapshot`,
`resume-snapshot`, `schema-changes`, ...) are named in a warning and ignored. Only the `source` channel is
read; the others of `signal.enabled.channels` (kafka, jmx, file, in-process) are named in a
warning."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from klog.connect.config import java_regex

CHANNELS = ("source", "kafka", "jmx", "file", "in-process")


@dataclass
class SnapshotSignal:
    """An execute-snapshot signal: its id, the data-collections' patterns, its type (blocking or incremental)
    and each table's additional condition (schema.table → a SQL boolean expression)."""
    id: str
    patterns: list[re.Pattern]
    kind: str = "blocking"
    conditions: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    def wants(self, dbname: str, schema: str, table: str) -> bool:
        """Whether a data-collection names the table: a regular expression over schema.table (or
        database.schema.table), as Debezium matches them."""
        return any(p.fullmatch(f"{schema}.{table}") or p.fullmatch(f"{dbname}.{schema}.{table}")
                   for p in self.patterns)

    def condition(self, dbname: str, schema: str, table: str) -> str | None:
        for name in (f"{schema}.{table}", f"{dbname}.{schema}.{table}"):
            if name in self.conditions:
                return self.conditions[name]
        for name, condition in self.conditions.items():  # a data-collection given as a pattern
            try:
                if java_regex(name).fullmatch(f"{schema}.{table}"):
                    return condition
            except re.error:
                continue
        return self.conditions.get("")  # the older additional-condition, for every table


class SignalError(ValueError):
    """A signal that cannot be acted on: the message names what was wrong."""


def signal_table(name: str, dbname: str) -> tuple[str, str]:
    """signal.data.collection as Debezium's PostgreSQL connector reads it: <schema>.<table> (a leading
    database name is accepted)."""
    parts = [p.strip().strip('"') for p in name.split(".")]
    if len(parts) == 3 and parts[0] == dbname:
        parts = parts[1:]
    if len(parts) != 2 or not all(parts):
        raise SignalError(f"signal.data.collection {name!r} is not <schema>.<table>")
    return parts[0], parts[1]


def parse(values: list) -> tuple[str, str, object]:
    """A signal row's (id, type, data): its first three columns, data a JSON text (or none)."""
    if len(values) < 2:
        raise SignalError("a signal row has the columns id, type and data")
    signal_id, kind = values[0], values[1]
    text = values[2] if len(values) > 2 else None
    if not isinstance(kind, str) or not kind:
        raise SignalError(f"signal {signal_id!r} has no type")
    data: object = None
    if isinstance(text, str) and text.strip():
        try:
            data = json.loads(text)
        except ValueError:
            raise SignalError(f"signal {signal_id!r}: its data is not JSON: {text[:80]!r}") from None
    return str(signal_id), kind, data


def execute_snapshot(signal_id: str, data: object) -> SnapshotSignal:
    """An execute-snapshot signal's data, as ExecuteSnapshot reads it (incremental the default type). A type
    other than blocking and incremental raises SignalError naming it."""
    if not isinstance(data, dict):
        raise SignalError(f"execute-snapshot signal {signal_id!r}: its data is a JSON object")
    kind = str(data.get("type") or "incremental").lower()
    if kind not in ("blocking", "incremental"):
        raise SignalError(f"execute-snapshot signal {signal_id!r}: type {kind!r} is not implemented (klog takes "
                          "'blocking' and 'incremental'); the signal is ignored")
    collections = data.get("data-collections")
    if not isinstance(collections, list) or not collections or not all(isinstance(c, str) for c in collections):
        raise SignalError(f"execute-snapshot signal {signal_id!r}: data-collections is a list of table names")
    try:
        patterns = [java_regex(c.strip()) for c in collections]
    except re.error as e:
        raise SignalError(f"execute-snapshot signal {signal_id!r}: a data-collection is not a regular "
                          f"expression: {e}") from None
    conditions: dict[str, str] = {}
    older = data.get("additional-condition")
    if isinstance(older, str) and older.strip():
        conditions[""] = older
    for entry in data.get("additional-conditions") or []:
        if not (isinstance(entry, dict) and isinstance(entry.get("data-collection"), str)
                and isinstance(entry.get("filter"), str)):
            raise SignalError(f"execute-snapshot signal {signal_id!r}: each additional-conditions entry is "
                              '{"data-collection": ..., "filter": ...}')
        conditions[entry["data-collection"].strip()] = entry["filter"]
    return SnapshotSignal(signal_id, patterns, kind, conditions, [c.strip() for c in collections])


def stop_snapshot(signal_id: str, data: object) -> list[re.Pattern] | None:
    """A stop-snapshot signal's data-collections as patterns (None: all of the snapshot is stopped). A value
    that is not a list of regular expressions raises SignalError naming it: the signal is ignored, the
    connector goes on."""
    names = data.get("data-collections") if isinstance(data, dict) else None
    if not names:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SignalError(f"stop-snapshot signal {signal_id!r}: data-collections is a list of table names")
    try:
        return [java_regex(n.strip()) for n in names]
    except re.error as e:
        raise SignalError(f"stop-snapshot signal {signal_id!r}: a data-collection is not a regular expression: "
                          f"{e}; the signal is ignored") from None

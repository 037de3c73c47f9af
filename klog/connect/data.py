"""Connect's data model: records with schemas, schemas in Kafka's JsonConverter form.

A schema is the dict JsonConverter writes in its envelope ({"type": "struct", "fields": [...],
"optional": false, "name": ...}); a value is plain Python (dict for a struct, list, str, int, float,
bool, bytes, decimal.Decimal for Kafka's Decimal logical type). Keeping schemas in their wire form
means the converters, transforms and connectors share one representation and nothing is mapped twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

Schema = dict[str, Any]
Headers = list[tuple[str, bytes | None]]

DECIMAL = "org.apache.kafka.connect.data.Decimal"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"

# Connect's logical time types count from the epoch: days (Date), milliseconds (Time, Timestamp); naive
# datetimes are UTC. Integer arithmetic throughout (a float timestamp() loses microseconds).
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DATE = dt.date(1970, 1, 1)


def epoch_micros(when: dt.datetime) -> int:
    delta = when - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def epoch_millis(when: dt.datetime) -> int:
    return epoch_micros(when) // 1000


def epoch_days(day: dt.date) -> int:
    return (day - EPOCH_DATE).days


def micros_of_day(t: dt.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def from_epoch_millis(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def from_epoch_days(days: int) -> dt.date:
    return EPOCH_DATE + dt.timedelta(days=days)


@dataclass(slots=True)
class ConnectRecord:
    """A SourceRecord (source_partition/offset set) or a SinkRecord (kafka_offset set)."""

    topic: str
    kafka_partition: int | None
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    timestamp: int | None = None
    headers: Headers = field(default_factory=list)
    source_partition: dict | None = None
    source_offset: dict | None = None
    kafka_offset: int | None = None
    raw: Any = None  # the Kafka record a sink record came from (for the DLQ)

    def new_record(self, **changes: Any) -> ConnectRecord:
        """A copy with `changes` (dataclasses.replace, without its per-call introspection: every
        transformed record goes through here)."""
        if not changes.keys() <= _RECORD_FIELDS:
            raise TypeError(f"ConnectRecord has no field {sorted(changes.keys() - _RECORD_FIELDS)[0]!r}")
        c = changes.get
        return ConnectRecord(c("topic", self.topic), c("kafka_partition", self.kafka_partition),
                             c("key_schema", self.key_schema), c("key", self.key),
                             c("value_schema", self.value_schema), c("value", self.value),
                             c("timestamp", self.timestamp), c("headers", self.headers),
                             c("source_partition", self.source_partition), c("source_offset", self.source_offset),
                             c("kafka_offset", self.kafka_offset), c("raw", self.raw))


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(ConnectRecord))


def primitive(type_: str, optional: bool = True, name: str | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": type_, "optional": optional}
    if name:
        schema["name"] = name
    schema.update(extra)
    return schema


def struct(fields: list[Schema], name: str | None = None, optional: bool = False, **extra: Any) -> Schema:
    """`fields`: schemas each with a "field" entry (their name)."""
    return primitive("struct", optional, name, fields=fields, **extra)


def field_of(schema: Schema, name: str, child: Schema) -> Schema:
    return {**child, "field": name}


def fields_by_name(schema: Schema | None) -> dict[str, Schema]:
    if not schema or schema.get("type") != "struct":
        return {}
    return {f["field"]: f for f in schema.get("fields", [])}


def infer_schema(value: Any) -> Schema | None:
    """A schema for a schemaless value (what the JDBC sink needs to create a table from JSON)."""
    import decimal

    if value is None:
        return None
    if isinstance(value, bool):
        return primitive("boolean")
    if isinstance(value, int):
        return primitive("int64")
    if isinstance(value, float):
        return primitive("float64")
    if isinstance(value, decimal.Decimal):
        return primitive("string")
    if isinstance(value, bytes | bytearray):
        return primitive("bytes")
    if isinstance(value, dict):
        return struct([{**(infer_schema(v) or primitive("string")), "field": k} for k, v in value.items()],
                      optional=True)
    if isinstance(value, list):
        return primitive("array", items=infer_schema(value[0]) if value else primitive("string"))
    return primitive("string")

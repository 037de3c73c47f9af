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
from typing import Any, NamedTuple

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


# -- recursive schemas -----------------------------------------------------------------------------------
# A recursive schema (ProtobufConverter reads google.protobuf.Struct, Value and self-referencing messages as
# one, as Confluent's ProtobufData builds them) holds itself: a struct's field (or an array's items, a map's
# values) is a schema sharing the "fields" list of a struct around it, as Confluent's SchemaWrapper shares
# its builder's fields. The walks that expand a schema as a tree refuse it (recursive_struct); the ones that
# follow a value, or compile a schema with what they met on the way, take it.
_PARTS = ("fields", "items", "keys", "values")
_RECURSIVE: dict[int, tuple[Any, Shape]] = {}
_RECURSIVE_MAX = 4096


def recursive_struct(schema: Any) -> str | None:
    """The name of a struct in `schema` that holds itself ("an unnamed struct" for one without a name), None
    where none does. Each dict and list is walked once, without recursion (a deep schema overflows no stack);
    cached by the schema object (a connector reuses its schemas)."""
    return _shape(schema).recursive


class Shape(NamedTuple):
    """What one walk of a schema finds: the struct holding itself (None: none does), whether a part of it is
    reached twice (a struct's fields shared by two fields: the Avro and Protobuf converters read a named type
    met again so), and how many dicts and lists it is as a tree (a walk expanding it meets that many)."""

    recursive: str | None
    shared: bool
    tree_parts: int


def _shape(schema: Any) -> Shape:
    if not isinstance(schema, dict):
        return Shape(None, False, 0)
    hit = _RECURSIVE.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    parts = _tree_parts(schema)
    found = Shape(None, False, parts) if parts is not None else _cycle_of(schema)
    if len(_RECURSIVE) >= _RECURSIVE_MAX:
        _RECURSIVE.clear()
    _RECURSIVE[id(schema)] = (schema, found)  # kept alive: its id is not reused meanwhile
    return found


def _tree_parts(schema: Schema) -> int | None:
    """The dicts and lists of a schema that is a tree (most are); None where one is reached twice (shared, or
    a struct holding itself: then _cycle_of tells which). A tight walk: a writer keys each new schema object
    with it (a transform may rebuild one per record)."""
    seen: set[int] = set()
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return None
        seen.add(id(node))
        if isinstance(node, list):
            stack += [x for x in node if isinstance(x, dict | list)]
            continue
        for part in _PARTS:
            child = node.get(part)
            if isinstance(child, dict | list):
                stack.append(child)
    return len(seen)


def _children(node: Any) -> list:
    if isinstance(node, list):
        return [x for x in node if isinstance(x, dict | list)]
    return [node[p] for p in _PARTS if isinstance(node.get(p), dict | list)]


def _cycle_of(schema: Schema) -> Shape:
    on_path: set[int] = set()
    parts: dict[int, int] = {}  # id of a dict or list walked -> its parts as a tree (itself included)
    shared = False
    stack = [(schema, iter(_children(schema)), [1])]
    on_path.add(id(schema))
    while stack:
        node, todo, count = stack[-1]
        child = next(todo, None)
        if child is None:
            stack.pop()
            on_path.discard(id(node))
            parts[id(node)] = count[0]
            if stack:
                stack[-1][2][0] += count[0]
            continue
        if id(child) in on_path:  # the struct met again (a struct copied around shared fields: that struct)
            owner = child if isinstance(child, dict) and child.get("type") == "struct" else \
                node if isinstance(node, dict) else stack[-2][0] if len(stack) > 1 else {}
            return Shape(str(owner.get("name") or "an unnamed struct"), True, 0)
        known = parts.get(id(child))
        if known is not None:
            shared = True
            count[0] += known
        else:
            on_path.add(id(child))
            stack.append((child, iter(_children(child)), [1]))
    return Shape(None, shared, parts[id(schema)])


def refuse_recursive(schema: Any, what: str) -> None:
    """A DataError naming the struct that holds itself where `schema` is recursive (`what`: who refuses it)."""
    name = recursive_struct(schema)
    if name is not None:
        from klog.connect.errors import DataError

        raise DataError(f"{what} takes no recursive schema: {name} holds itself (a google.protobuf.Struct or a "
                        "message holding its own type, as ProtobufConverter reads them)")


TREE_PARTS_MAX = 200_000  # dicts and lists of a schema written out as a tree (4 a field of 50,000 fields)


def schema_text(schema: Any, what: str, shares: bool = False) -> str:
    """A schema's JSON (keys sorted), a writer's cache key; a recursive schema or one nested deeper than Python's
    stack is a DataError naming `what` refuses it. A schema with shared parts (named types met again, as the Avro
    and Protobuf converters read them) is keyed in the size of its dicts and lists (schema_key), not of the tree
    it expands to, which past TREE_PARTS_MAX `what` refuses unless it `shares` them too (Avro's named types)."""
    shape = _shape(schema)
    if shape.recursive is not None:
        refuse_recursive(schema, what)
    if shape.shared and not shares and shape.tree_parts > TREE_PARTS_MAX:
        raise _data_error(f"{what} takes no schema of more than {TREE_PARTS_MAX} parts written out as a tree "
                          f"({shape.tree_parts}: its structs share structs, as named types met again are read)")
    return _key(schema, f"{what}: a schema nested too deeply for klog (deeper than Python's stack)")


def _data_error(message: str) -> Exception:
    from klog.connect.errors import DataError

    return DataError(message)


def schema_key(schema: Any) -> str:
    """A schema's JSON (keys sorted) as a cache key, a recursive one's too: where a struct's fields (or any part)
    are those of one around it, they are {"recursive": <levels up>}; a part met again elsewhere (a shared struct)
    is {"shared": <its place among the parts met before>}, so the key grows with the parts, not the tree."""
    return _key(schema, "a Connect schema nested too deeply for klog (deeper than Python's stack)")


def _key(schema: Any, too_deep: str) -> str:
    import json

    if isinstance(schema, dict) and not _shape(schema).shared:
        try:
            return json.dumps(schema, sort_keys=True, default=str)
        except RecursionError:
            raise _data_error(too_deep) from None
    path: dict[int, int] = {}  # ids of the dicts and lists around the one being copied -> their depth
    index: dict[int, int] = {}  # ids of the dicts and lists met -> their place in the order they were met

    def copy(node: Any) -> Any:
        if not isinstance(node, dict | list):
            return node
        depth = path.get(id(node))
        if depth is not None:
            return {"recursive": len(path) - depth}
        seen = index.get(id(node))
        if seen is not None:
            return {"shared": seen}
        index[id(node)] = len(index)
        path[id(node)] = len(path)
        try:
            if isinstance(node, list):
                return [copy(x) for x in node]
            return {k: copy(v) if k in _PARTS else v for k, v in node.items()}
        finally:
            del path[id(node)]

    try:
        return json.dumps(copy(schema), sort_keys=True, default=str)
    except RecursionError:
        raise _data_error(too_deep) from None


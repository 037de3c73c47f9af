"""Confluent's schema normalization (`normalize=true` on a register, lookup or compatibility request, or the
`normalize` config of a subject or the registry): a schema's text made its normalized form before it is parsed,
looked up and stored, so that two schemas that differ only in what normalization removes are one schema, one id.

- JSON Schema (Confluent's JsonSchema.normalize): keys sorted, no whitespace.
- Avro (Confluent's AvroSchemaUtils.toNormalizedString, its adaptation of Avro's Parsing Canonical Form that keeps
  what the canonical form drops): each named type defined once (later uses and the types the schema's references
  define are their name), `{"type": "int"}` without properties just `"int"`, other properties sorted by name,
  aliases sorted, a decimal's scale 0 left out; `doc`, `aliases`, `default`, `order` (when not ascending),
  logical types and every other property kept. Then written as Confluent's registry stores it, the text Avro's
  Schema.toString gives the normalized schema (`type`, `name`, `namespace` where it changes, ...).
- Protobuf (Confluent's ProtobufSchemaUtils with its normalize context): fields, oneof members and `extend` fields
  by number, oneofs by their first field's number (empty ones dropped), enum constants by number, reserved and
  extension ranges one a statement and sorted (`5 to 5` is `5`), options by name (an aggregate's keys sorted),
  imports sorted and each once, no `syntax = "proto2"` line, every message or enum type named by its full name
  with a leading dot (`.shop.Money`) in fields, map values, `extend` blocks and rpcs, and a map field as
  `map<K, V>` (a serialized schema's `...Entry` messages dropped), so the .proto text of a schema and its
  serialized form normalize to one text.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from klog.protocol import protobuf_schema as proto

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_SCHEMA_RESERVED = frozenset(("type", "name", "namespace", "fields", "items", "values", "symbols", "size", "doc",
                              "aliases"))
_FIELD_RESERVED = frozenset(("name", "type", "order", "doc", "aliases", "default"))
_LOGICAL = ("logicalType", "precision", "scale")


def json_normalized(text: Any) -> Any:
    """A JSON schema's text normalized (text that is not JSON is left for parsing to refuse)."""
    if not isinstance(text, str):
        return text
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


def avro_normalized(text: Any, known: set[str] | frozenset[str] = frozenset()) -> Any:
    """An Avro schema's text normalized; `known`: the full names of the named types its references define.
    Text that is not JSON is left for parsing to refuse."""
    if not isinstance(text, str):
        return text
    try:
        doc = json.loads(text)
        normalized = _avro(doc, "", set(known))
        return json.dumps(_avro_text(normalized, set(known), None), separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError, TypeError, AttributeError):
        return text


_TYPE_NAMES = PRIMITIVES | {"record", "enum", "array", "map", "union", "fixed"}


def _qualified(full: str, space: str | None) -> str:
    """Avro's Name.getQualified: a name in the enclosing namespace short (unless it is a type's name)."""
    namespace, _, name = full.rpartition(".")
    return name if namespace and namespace == space and name not in _TYPE_NAMES else full


def _avro_text(schema: Any, known: set[str], space: str | None) -> Any:
    """A normalized schema (full names) as Avro's Schema.toString writes it (knownNames: the references' types,
    then each named type as it is written), key order and namespaces included."""
    if isinstance(schema, list):
        return [_avro_text(member, known, space) for member in schema]
    if isinstance(schema, str):
        return schema if schema in PRIMITIVES else _qualified(schema, space)
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in ("array", "map"):
        part = "items" if kind == "array" else "values"
        return {"type": kind, part: _avro_text(schema.get(part), known, space),
                **{k: v for k, v in schema.items() if k not in ("type", part)}}
    if "name" not in schema or kind not in ("record", "error", "enum", "fixed"):
        return schema
    full = str(schema["name"])
    if full in known:
        return _qualified(full, space)
    known.add(full)
    namespace = full.rpartition(".")[0] or None
    out: dict[str, Any] = {"type": kind, "name": full.rpartition(".")[2]}
    if namespace is not None and namespace != space:
        out["namespace"] = namespace
    elif namespace is None and space is not None:
        out["namespace"] = ""
    if "doc" in schema:
        out["doc"] = schema["doc"]
    if kind in ("record", "error"):
        out["fields"] = [_field_text(f, known, namespace) for f in schema.get("fields", [])]
    elif kind == "enum":
        out["symbols"] = schema.get("symbols")
        if "default" in schema:
            out["default"] = schema["default"]
    else:
        out["size"] = schema.get("size")
    out.update({k: v for k, v in schema.items() if k not in _SCHEMA_RESERVED and k != "default"})
    if schema.get("aliases"):
        out["aliases"] = [_qualified(str(a), namespace) for a in schema["aliases"]]
    return out


def _field_text(f: Any, known: set[str], space: str | None) -> Any:
    if not isinstance(f, dict):
        return f
    out = {"name": f.get("name"), "type": _avro_text(f.get("type"), known, space)}
    out.update({k: f[k] for k in ("doc", "default", "order", "aliases") if k in f})
    out.update({k: v for k, v in f.items() if k not in _FIELD_RESERVED})
    return out


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _props(schema: dict[str, Any], reserved: frozenset[str] | set[str]) -> dict[str, Any]:
    return {k: schema[k] for k in sorted(schema) if k not in reserved}


def _logical(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"logicalType": schema["logicalType"]}
    if schema["logicalType"] == "decimal":
        if "precision" in schema:
            out["precision"] = schema["precision"]
        if schema.get("scale", 0) != 0:
            out["scale"] = schema["scale"]
    return out


def _avro(schema: Any, namespace: str, defined: set[str]) -> Any:
    if isinstance(schema, list):
        return [_avro(member, namespace, defined) for member in schema]
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return schema
        qualified = _full(schema, namespace)
        return qualified if qualified in defined or schema not in defined else schema
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, dict | list):  # {"type": {...}}: the inner schema
        return _avro(kind, namespace, defined)
    logical = "logicalType" in schema and isinstance(schema["logicalType"], str)
    reserved = _SCHEMA_RESERVED | (set(_LOGICAL) if logical else set())
    if kind in ("array", "map"):
        out: dict[str, Any] = {"type": kind}
        part = "items" if kind == "array" else "values"
        out[part] = _avro(schema.get(part), namespace, defined)
        return {**out, **(_logical(schema) if logical else {}), **_props(schema, reserved)}
    if kind in ("record", "error", "enum", "fixed"):
        name = str(schema.get("name"))
        if "." in name:
            space = name.rpartition(".")[0]
        else:
            space = str(schema.get("namespace") or "") if "namespace" in schema else namespace
        full = _full(name, space)
        if full in defined:
            return full
        defined.add(full)
        out = {"name": full, "type": kind}
        if kind == "enum":
            out["symbols"] = schema.get("symbols")
        elif kind == "fixed":
            out["size"] = schema.get("size")
        else:
            out["fields"] = [_field(f, space, defined) for f in schema.get("fields", [])]
        if logical:
            out.update(_logical(schema))
        if schema.get("doc"):
            out["doc"] = schema["doc"]
        if schema.get("aliases"):
            out["aliases"] = sorted({_full(str(a), space) for a in schema["aliases"]})
        if kind == "enum" and "default" in schema:
            out["default"] = schema["default"]
        return {**out, **_props(schema, reserved | ({"default"} if kind == "enum" else set()))}
    if isinstance(kind, str) and kind in PRIMITIVES:
        extra = _props(schema, reserved)
        if not logical and not extra:
            return kind
        return {"type": kind, **(_logical(schema) if logical else {}), **extra}
    return _avro(kind, namespace, defined) if isinstance(kind, str) else schema


def _field(f: Any, namespace: str, defined: set[str]) -> Any:
    if not isinstance(f, dict):
        return f
    out: dict[str, Any] = {"name": f.get("name"), "type": _avro(f.get("type"), namespace, defined)}
    if f.get("order", "ascending") != "ascending":
        out["order"] = f["order"]
    if "doc" in f:
        out["doc"] = f["doc"]
    if f.get("aliases"):
        out["aliases"] = sorted(f["aliases"])
    if "default" in f:
        out["default"] = f["default"]
    return {**out, **_props(f, _FIELD_RESERVED)}


_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
            9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def protobuf_normalized(model: proto.ProtoFile, descriptor: Any = None) -> proto.ProtoFile:
    """A parsed .proto (klog's model) normalized, as a new model; its canonical text is what is stored.
    `descriptor`: its resolved FileDescriptorProto, whose type names are written in (none: left as written)."""
    out = copy.deepcopy(model)
    if descriptor is not None:
        _Resolver(descriptor).file(out)
    if out.syntax == "proto2":
        out.syntax = None
    out.imports = sorted(set(out.imports))
    out.public_imports = sorted(set(out.public_imports))
    out.options = _options(out.options)
    for t in out.types:
        _type(t)
    for e in out.extends:
        _extend(e)
    for service in out.services:
        service.options = _options(service.options)
        for rpc in service.rpcs:
            rpc.options = _options(rpc.options)
    return out


def _options(options: list[proto.Option]) -> list[proto.Option]:
    return sorted((proto.Option(o.name, _value(o.value)) for o in options), key=lambda o: o.name)


def _value(value: Any) -> Any:
    """An aggregate option value's keys sorted, empty lists dropped, a one-item list its item (as Confluent's)."""
    if isinstance(value, dict):
        return {k: _value(value[k]) for k in sorted(value) if value[k] != []}
    if isinstance(value, list):
        return _value(value[0]) if len(value) == 1 else [_value(v) for v in value]
    return value


def _ranges(statements: list[list[Any]]) -> list[list[Any]]:
    """reserved / extensions statements: one value each, `n to n` as n, by their (first) number, then text."""
    values = [(v[0] if isinstance(v, tuple) and v[0] == v[1] else v) for statement in statements for v in statement]

    def place(v: Any) -> tuple[int, str]:
        return (v[0] if isinstance(v, tuple) else v if isinstance(v, int) else 2**31, str(v))
    return [[v] for v in sorted(values, key=place)]


def _fields(fields: list[proto.Field]) -> list[proto.Field]:
    for f in fields:
        f.options = _options(f.options)
    return sorted(fields, key=lambda f: f.number)


def _extend(extend: proto.Extend) -> None:
    extend.fields = _fields(extend.fields)


def _type(t: proto.Message | proto.Enum) -> None:
    t.options = _options(t.options)
    t.reserved = _ranges(t.reserved)
    if isinstance(t, proto.Enum):
        for c in t.constants:
            c.options = _options(c.options)
        t.constants = sorted(t.constants, key=lambda c: (c.number, c.name))
        return
    t.fields = _fields(t.fields)
    oneofs = [o for o in t.oneofs if o.fields]
    for o in oneofs:
        o.fields = _fields(o.fields)
        o.options = _options(o.options)
    t.oneofs = sorted(oneofs, key=lambda o: o.fields[0].number)
    t.extensions = _ranges(t.extensions)
    for e in t.extends:
        _extend(e)
    for nested in t.nested:
        _type(nested)


class _Resolver:
    """Writes a model's type names as its descriptor resolved them (a full name with a leading dot), and a map
    field (a text's `map<K, V>`, a serialized schema's repeated `...Entry` message) as `map<K, .V>`, its entry
    message dropped: a model and its descriptor are walked side by side, messages by name, fields by number."""

    def __init__(self, descriptor: Any) -> None:
        self.entries: dict[str, Any] = {}  # a map entry message's full name -> its descriptor

        def walk(messages: Any, scope: str) -> None:
            for m in messages:
                name = f"{scope}.{m.name}"
                if m.options.map_entry:
                    self.entries[name] = m
                walk(m.nested_type, name)
        package = f".{descriptor.package}" if descriptor.package else ""
        walk(descriptor.message_type, package)
        self.descriptor = descriptor

    def file(self, model: proto.ProtoFile) -> None:
        self._types(model.types, self.descriptor.message_type)
        self._extends(model.extends, self.descriptor.extension)
        services = {s.name: s for s in self.descriptor.service}
        for service in model.services:
            methods = {m.name: m for m in services[service.name].method} if service.name in services else {}
            for rpc in service.rpcs:
                if rpc.name in methods:
                    rpc.request, rpc.response = methods[rpc.name].input_type, methods[rpc.name].output_type

    def _types(self, types: list[proto.Message | proto.Enum], messages: Any) -> None:
        described = {m.name: m for m in messages}
        for t in list(types):
            d = described.get(t.name)
            if not isinstance(t, proto.Message) or d is None:
                continue
            if d.options.map_entry:
                types.remove(t)
                continue
            fields = {f.number: f for f in d.field}
            for f in [*t.fields, *(member for oneof in t.oneofs for member in oneof.fields)]:
                if f.number in fields:
                    self._field(f, fields[f.number])
            self._extends(t.extends, d.extension)
            self._types(t.nested, d.nested_type)

    def _field(self, f: proto.Field, d: Any) -> None:
        if not d.type_name:
            return
        entry = self.entries.get(d.type_name)
        if entry is None:
            f.type = d.type_name
            return
        key, value = sorted(entry.field, key=lambda e: e.number)[:2]
        f.type = f"map<{_SCALARS.get(key.type, 'string')}, {value.type_name or _SCALARS.get(value.type, '')}>"
        f.label = None

    def _extends(self, extends: list[proto.Extend], described: Any) -> None:
        by_number: dict[int, list[Any]] = {}
        for d in described:
            by_number.setdefault(d.number, []).append(d)
        for extend in extends:
            found = [d for f in extend.fields for d in by_number.get(f.number, [])]
            if found:
                extend.name = found[0].extendee
            for f in extend.fields:
                same = [d for d in by_number.get(f.number, []) if d.name == f.name]
                if same:
                    self._field(f, same[0])

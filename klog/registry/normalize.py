"""Confluent's schema normalization (`normalize=true` on a register, lookup or compatibility request, or the
`normalize` config of a subject or the registry): a schema's text made its normalized form before it is parsed,
looked up and stored, so that two schemas that differ only in what normalization removes are one schema, one id.

- JSON Schema (Confluent's JsonSchema.normalize): keys sorted, no whitespace, numbers as written.
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
import decimal
import itertools
import json
import re
import uuid
from typing import Any

from klog.protocol import protobuf_schema as proto

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_SCHEMA_RESERVED = frozenset(("type", "name", "namespace", "fields", "items", "values", "symbols", "size", "doc",
                              "aliases"))
_FIELD_RESERVED = frozenset(("name", "type", "order", "doc", "aliases", "default"))
_LOGICAL = ("logicalType", "precision", "scale")


def json_normalized(text: Any) -> Any:
    """A JSON schema's text normalized (text that is not JSON is left for parsing to refuse). Each number is
    kept as written: read as a float, `1e400` was written `Infinity` (no JSON) and `1e-400` `0.0`."""
    if not isinstance(text, str):
        return text
    token, numbers = uuid.uuid4().hex, []

    def keep(number: str) -> str:
        numbers.append(number)
        return f"{token}{len(numbers) - 1}"
    try:
        doc = json.loads(text, parse_float=keep, parse_int=keep, parse_constant=keep)
        out = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return text
    return re.sub(f'"{token}([0-9]+)"', lambda m: numbers[int(m.group(1))], out) if numbers else out


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
            out["aliases"] = sorted({_full(a, space) for a in _aliases(schema["aliases"])})
        if kind == "enum" and "default" in schema:
            out["default"] = schema["default"]
        return {**out, **_props(schema, reserved | ({"default"} if kind == "enum" else set()))}
    if isinstance(kind, str) and kind in PRIMITIVES:
        extra = _props(schema, reserved)
        if not logical and not extra:
            return kind
        return {"type": kind, **(_logical(schema) if logical else {}), **extra}
    return _avro(kind, namespace, defined) if isinstance(kind, str) else schema


def _aliases(aliases: Any) -> list[str]:
    """Aliases as Avro has them, a list of names; anything else (a string, whose letters sorted would be other
    aliases) leaves the schema as it was written (avro_normalized's TypeError)."""
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise TypeError("aliases are a list of names")
    return aliases


def _field(f: Any, namespace: str, defined: set[str]) -> Any:
    if not isinstance(f, dict):
        return f
    out: dict[str, Any] = {"name": f.get("name"), "type": _avro(f.get("type"), namespace, defined)}
    if f.get("order", "ascending") != "ascending":
        out["order"] = f["order"]
    if "doc" in f:
        out["doc"] = f["doc"]
    if f.get("aliases"):
        out["aliases"] = sorted(_aliases(f["aliases"]))
    if "default" in f:
        out["default"] = f["default"]
    return {**out, **_props(f, _FIELD_RESERVED)}


_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
            9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def protobuf_normalized(model: proto.ProtoFile, descriptor: Any = None,
                        dependencies: dict[str, proto.ProtoFile] | None = None) -> proto.ProtoFile:
    """A parsed .proto (klog's model) normalized, as a new model; its canonical text is what is stored.
    `descriptor`: its resolved FileDescriptorProto, whose type names are written in (none: left as written);
    `dependencies`: its imports (import name -> parsed), where the custom options it uses may be declared."""
    out = copy.deepcopy(model)
    if descriptor is not None:
        _Resolver(descriptor).file(out)
    names = _Declared([model, *(dependencies or {}).values()])
    scope = out.package.split(".") if out.package else []
    names.proto3 = out.syntax == "proto3"
    if out.syntax == "proto2":
        out.syntax = None
    out.imports = sorted(set(out.imports))
    out.public_imports = sorted(set(out.public_imports))
    out.options = names.options(out.options, scope)
    for t in out.types:
        _type(t, names, scope)
    out.extends = _extends(out.extends, names, scope)
    for service in out.services:
        service.options = names.options(service.options, scope)
        for rpc in service.rpcs:
            rpc.options = names.options(rpc.options, scope)
    return out


def _value(value: Any) -> Any:
    """An aggregate option value's keys sorted, empty lists dropped, a one-item list its item, a number in plain
    decimal (as Confluent's)."""
    if isinstance(value, dict):
        return {k: _value(value[k]) for k in sorted(value) if value[k] != []}
    if isinstance(value, list):
        return _value(value[0]) if len(value) == 1 else [_value(v) for v in value]
    return _number(value) if isinstance(value, proto.Raw) else value


_FLOAT = re.compile(r"-?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?")


def _number(raw: proto.Raw) -> proto.Raw:
    """A number as Confluent's normalization writes it (Java's DecimalFormat: plain decimal, no exponent, no
    trailing zeros, 0x10 as 16, 010 as 8), where that loses nothing: DecimalFormat keeps 3 fraction digits, and a value
    with more is left as written rather than rounded."""
    text = str(raw)
    try:
        if re.fullmatch(r"-?0[xX][0-9a-fA-F]+", text):
            return proto.Raw(str(int(text, 16)))
        if re.fullmatch(r"-?0[0-7]+", text):  # octal, as protobuf (and Java's createNumber) read it
            return proto.Raw(str(int(text, 8)))
        if not _FLOAT.fullmatch(text) or re.fullmatch(r"-?(0|[1-9][0-9]*)", text):
            return raw
        value = decimal.Decimal(text)
        if value and not -4 <= value.adjusted() <= 30:  # (1e999999999 written out would be a gigabyte)
            return raw
        plain = format(value.normalize(), "f")
        if "." in plain and len(plain.split(".")[1]) > 3:
            return raw
        return proto.Raw("0" if plain in ("-0", "0") and not text.startswith("-") else plain)
    except (ValueError, decimal.InvalidOperation):
        return raw


def _ranges(statements: list[list[Any]]) -> list[list[Any]]:
    """reserved / extensions statements: one value each, `n to n` as n, by their (first) number, then text."""
    values = [(v[0] if isinstance(v, tuple) and v[0] == v[1] else v) for statement in statements for v in statement]

    def place(v: Any) -> tuple[int, str]:
        return (v[0] if isinstance(v, tuple) else v if isinstance(v, int) else 2**31, str(v))
    return [[v] for v in sorted(values, key=place)]


def _fields(fields: list[proto.Field], names: _Declared, scope: list[str]) -> list[proto.Field]:
    """By number, each one's options by name, its `default` and `json_name` among them (as Confluent's are)."""
    for f in fields:
        options = list(f.options)
        if f.default is not None:  # written as proto.canonical_text writes it
            kind = f.type.rsplit(".", 1)[-1]
            quoted = kind == "string" or (kind == "bytes" and not re.fullmatch(r"[A-Za-z0-9_.+-]+", f.default))
            options.append(proto.Option("default", f.default if quoted else _number(proto.Raw(f.default))))
        if f.json_name is not None:
            options.append(proto.Option("json_name", f.json_name))
        f.default = f.json_name = None
        f.options = names.options(options, scope)
    return sorted(fields, key=lambda f: f.number)


def _extends(extends: list[proto.Extend], names: _Declared, scope: list[str]) -> list[proto.Extend]:
    """`extend` blocks of one (resolved) message made one, in the order they first appear, fields by number."""
    merged: dict[str, proto.Extend] = {}
    for e in extends:
        merged.setdefault(e.name, proto.Extend(e.name)).fields.extend(e.fields)
    for e in merged.values():
        e.fields = _fields(e.fields, names, scope)
    return list(merged.values())


def _type(t: proto.Message | proto.Enum, names: _Declared, scope: list[str]) -> None:
    inner = [*scope, t.name]
    t.options = names.options(t.options, inner)
    t.reserved = _ranges(t.reserved)
    if isinstance(t, proto.Enum):
        for c in t.constants:
            c.options = names.options(c.options, inner)
        constants = sorted(t.constants, key=lambda c: (c.number, c.name))
        if names.proto3 and constants and constants[0].number != 0 and t.constants:  # a negative number sorted
            constants.remove(t.constants[0])  # first: proto3's first constant is its zero, its fields' default
            constants.insert(0, t.constants[0])  # (protoc refuses another), so it stays first
        t.constants = constants
        return
    t.fields = _fields(t.fields, names, inner)
    oneofs = [o for o in t.oneofs if o.fields]
    for o in oneofs:
        o.fields = _fields(o.fields, names, inner)
        o.options = names.options(o.options, inner)
    t.oneofs = sorted(oneofs, key=lambda o: o.fields[0].number)
    t.extensions = _ranges(t.extensions)
    t.extends = _extends(t.extends, names, inner)
    for nested in t.nested:
        _type(nested, names, inner)


_CUSTOM = re.compile(r"\(\.?([A-Za-z_][A-Za-z0-9_.]*)\)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


class _Declared:
    """The messages and custom options (extension fields) a schema and its imports declare, for Confluent's
    normalization of options: a custom option's name made its full name, `(opt).a.b = v` made `(full.opt) = {a: {b:
    v}}`, the settings of one non-repeated option merged into one aggregate (a singular message field's merged
    again, a singular scalar's last one kept, a repeated field's gathered into a list), all sorted by name."""

    def __init__(self, files: list[proto.ProtoFile]) -> None:
        self.proto3 = False  # the schema's syntax (its enums open: their first constant is zero)
        self.messages: dict[str, tuple[proto.Message, list[str]]] = {}  # full name -> (message, its scope)
        self.extensions: dict[str, tuple[proto.Field, list[str]]] = {}  # full name -> (field, where declared)
        self._by_name: dict[int, dict[str, proto.Field]] = {}  # a message's id -> its fields by name
        for file in files:
            package = file.package.split(".") if file.package else []
            self._declare(file.types, file.extends, package)

    def _declare(self, types: list[proto.Message | proto.Enum], extends: list[proto.Extend], scope: list[str]) -> None:
        for e in extends:
            for f in e.fields:
                self.extensions[".".join([*scope, f.name])] = (f, scope)
        for t in types:
            if isinstance(t, proto.Message):
                self.messages[".".join([*scope, t.name])] = (t, [*scope, t.name])
                self._declare(t.nested, t.extends, [*scope, t.name])

    @staticmethod
    def _resolve(name: str, scope: list[str], known: dict[str, Any]) -> str | None:
        """A name as protoc resolves it from a scope: the innermost enclosing scope that has it."""
        if name.startswith("."):
            return name[1:] if name[1:] in known else None
        for i in range(len(scope), -1, -1):
            candidate = ".".join([*scope[:i], name])
            if candidate in known:
                return candidate
        return None

    def _message_of(self, field: proto.Field | None, scope: list[str]) -> tuple[proto.Message, list[str]] | None:
        if field is None or field.type.startswith("map<"):
            return None
        full = self._resolve(field.type, scope, self.messages)
        return None if full is None else self.messages[full]

    def options(self, options: list[proto.Option], scope: list[str]) -> list[proto.Option]:
        entries: list[tuple[str, str, Any, str | None]] = []  # (sort name, name written, value, extension)
        for o in options:
            m = _CUSTOM.fullmatch(o.name)
            full = None if m is None else self._resolve(("." if o.name.startswith("(.") else "") + m.group(1), scope,
                                                        self.extensions)
            if m is None or full is None:
                entries.append((o.name if m is None else m.group(1), o.name, o.value, None))
                continue
            value = o.value
            for part in reversed(m.group(2).split(".")[1:]):
                value = {part: value}
            entries.append((full, f"({full})", value, full))
        entries.sort(key=lambda e: e[0])
        out: list[proto.Option] = []
        for _, group in itertools.groupby(entries, key=lambda e: e[0]):
            items = list(group)
            extension = items[0][3]
            field, where = self.extensions[extension] if extension is not None else (None, scope)
            if field is None or field.label == "repeated":
                out.extend(proto.Option(name, value) for _, name, value, _ in items)
                continue
            value, seen = items[0][2], {}
            for item in items[1:]:
                value = self._merge(self._message_of(field, where), value, item[2], seen) \
                    if isinstance(value, dict) and isinstance(item[2], dict) else item[2]
            out.append(proto.Option(items[0][1], value))
        return [proto.Option(o.name, _value(o.value)) for o in out]

    def _merge(self, container: tuple[proto.Message, list[str]] | None, into: dict[str, Any], new: dict[str, Any],
               seen: dict[int, set[str]]) -> dict[str, Any]:
        """`new` merged into `into`, changed in place (the model is protobuf_normalized's copy): linear however
        many settings are merged; `seen`: the values each gathered list holds, by the list's id."""
        for key, value in new.items():
            if key not in into:
                into[key] = value
                continue
            field = self._field_named(container[0], key) if container else None
            singular = field is not None and field.label != "repeated"
            inner = self._message_of(field, container[1]) if singular and container else None
            if singular and isinstance(into[key], dict) and isinstance(value, dict) and inner is not None:
                into[key] = self._merge(inner, into[key], value, seen)
            elif singular:
                into[key] = value
            else:
                gathered = into[key]
                if not isinstance(gathered, list) or id(gathered) not in seen:
                    gathered, was = [], gathered
                    seen[id(gathered)] = set()
                    self._gather(gathered, was, seen)
                    into[key] = gathered
                self._gather(gathered, value, seen)
        return into

    def _field_named(self, message: proto.Message, name: str) -> proto.Field | None:
        fields = self._by_name.get(id(message))
        if fields is None:
            fields = self._by_name[id(message)] = {f.name: f for f in message.fields}
        return fields.get(name)

    @staticmethod
    def _gather(gathered: list[Any], value: Any, seen: dict[int, set[str]]) -> None:
        for v in value if isinstance(value, list) else [value]:
            key = json.dumps(v, sort_keys=True, default=repr)
            if key not in seen[id(gathered)]:
                seen[id(gathered)].add(key)
                gathered.append(v)


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

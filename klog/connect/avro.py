"""Confluent's AvroConverter (`io.confluent.connect.avro.AvroConverter`): Connect data as Avro in
Confluent's wire format (magic byte 0, the schema's 4-byte big-endian id in a Schema Registry, Avro's
binary encoding), the schemas registered in and read from a Schema Registry over its REST API.

Connect schemas map to Avro as Confluent's AvroData maps them (connect.meta.data on): a struct is a
record named after it (`connect.name` too; unnamed ones `io.confluent.connect.avro.ConnectDefault<n>`), an
optional schema a union with null (`["null", T]` with default null; `[T, "null"]` when it has a default),
int8/int16 an int with `connect.type`, a map with string keys an Avro map (any other map an array of
`MapEntry` key/value records), Decimal bytes with `scale`/`precision` and logicalType decimal, Date,
Time and Timestamp Avro's date, time-millis and timestamp-millis; a schema's name (Debezium's
io.debezium.time.* ...), version, doc, parameters and default ride along as `connect.*` properties,
so the other direction restores them. fastavro encodes and decodes (imported only when an Avro
converter is configured).
"""

from __future__ import annotations

import base64
import decimal
import io
import json
import re
import struct as struct_
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from klog.connect.config import ConfigDef
from klog.connect.converters import Converter, decimal_from_bytes, decimal_to_bytes, from_json
from klog.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, Schema, schema_key, schema_text
from klog.connect.errors import ConfigError, DataError, RetriableError
from klog.protocol import registry_client
from klog.protocol.avro_compat import read_problems
from klog.protocol.avro_schema import HIDDEN_LOGICAL, without_logical_types

NAMESPACE = "io.confluent.connect.avro"
DEFAULT_NAME = "ConnectDefault"
UNION = NAMESPACE + ".Union"
ENUM = NAMESPACE + ".Enum"
MAP_ENTRY = "MapEntry"
FIELD_DEFAULT_FLAG = NAMESPACE + ".field.default"
RECORD_DOC = NAMESPACE + ".record.doc"
FIELD_DOC = NAMESPACE + ".field.doc."
PRECISION_PARAM = "connect.decimal.precision"
FIXED_SIZE = "connect.fixed.size"
PRECISION_DEFAULT = 64
MAGIC = b"\x00"

PRIMITIVE_TO_AVRO = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float",
                     "float64": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}
LOGICAL = {DATE: "date", TIME: "time-millis", TIMESTAMP: "timestamp-millis"}
AVRO_NAMED = ("record", "enum", "fixed")
AVRO_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


def fastavro(field: str = "value.converter"):  # noqa: ANN201 - the module
    try:
        import fastavro as module
    except ImportError:
        raise ConfigError(field, "io.confluent.connect.avro.AvroConverter",
                          "needs the fastavro package: pip install 'klog[connect]'") from None
    return module


# -- Connect schema -> Avro schema ---------------------------------------------------------------------
def avro_schema(schema: Schema, scrub: bool = False) -> Any:
    """The Avro schema (its JSON form) of a Connect schema, as Confluent's AvroData.fromConnectSchema;
    `scrub`: names Avro refuses made Avro names (Confluent's scrub.invalid.names)."""
    return _ToAvro(scrub).schema(schema)


_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def scrub_name(name: str, scrub: bool = True) -> str:
    """Confluent's doScrubName: a name Avro refuses URL-encoded (Java's URLEncoder), every character but
    [A-Za-z0-9_] then made '_', an 'x' before a leading digit ("my-field" -> "my_field", "1a" -> "x1a")."""
    if not scrub or not name or _AVRO_NAME.fullmatch(name):
        return name
    from urllib.parse import quote_plus

    encoded = quote_plus(name, safe="*-._")  # what java.net.URLEncoder leaves as it is
    if encoded[0].isdigit():
        encoded = "x" + encoded
    return re.sub(r"[^A-Za-z0-9_]", "_", encoded)


def avro_full_name(name: str, scrub: bool) -> str:
    """A Connect schema name as the Avro full name of its record (each dotted part scrubbed)."""
    return ".".join(scrub_name(part, scrub) for part in name.split(".")) if scrub else name


def split_name(full: str) -> tuple[str | None, str]:
    namespace, _, name = full.rpartition(".")
    return (namespace or None), name


def _definition_key(schema: Schema) -> str:
    """What makes two uses of a named Connect schema the same type (its optionality aside); linear in the
    schema's parts where it shares some (schema_key)."""
    return schema_key({k: v for k, v in schema.items() if k not in ("field", "optional")})


def _own_key(schema: Schema) -> str:
    """A named Connect schema's own properties (its parts, its optionality and field name aside)."""
    return json.dumps({k: v for k, v in schema.items() if k not in ("field", "optional", "fields")}, sort_keys=True,
                      default=str)


class _ToAvro:
    def __init__(self, scrub: bool = False) -> None:
        self.scrub = scrub
        self.defined: dict[str, list] = {}  # an Avro full name -> [the Connect schema defining it, its key once made]
        self.unnamed = 0

    def schema(self, s: Schema, ignore_optional: bool = False) -> Any:
        base = self._base(s)
        if s.get("optional") and not ignore_optional and not isinstance(base, list):
            return [base, "null"] if s.get("default") is not None else ["null", base]
        return base

    def _record_name(self, name: str | None) -> tuple[str | None, str]:
        if name is not None:
            return split_name(avro_full_name(name, self.scrub))
        self.unnamed += 1
        return NAMESPACE, DEFAULT_NAME + (str(self.unnamed) if self.unnamed > 1 else "")

    def _named(self, s: Schema, namespace: str | None, name: str) -> str | None:
        """The full name when this named type was defined already (then it is referred to by name). A struct
        met again with the same fields (shared: a named type the converters read once) is that type without
        comparing its fields again: a schema is made in the size of its definitions, not of its uses."""
        full = f"{namespace}.{name}" if namespace else name
        seen = self.defined.get(full)
        if seen is None:
            self.defined[full] = [s, None]
            return None
        first = seen[0]
        if first is s or (first.get("fields") is s.get("fields") and _own_key(first) == _own_key(s)):
            return full
        if seen[1] is None:
            seen[1] = _definition_key(first)
        if seen[1] != _definition_key(s):
            raise DataError(f"two different Connect schemas are named {full}: Avro needs one definition per name")
        return full

    def _base(self, s: Schema) -> Any:
        kind = s.get("type")
        name = s.get("name")
        params = dict(s.get("parameters") or {})
        out: dict[str, Any]
        if kind in PRIMITIVE_TO_AVRO:
            if kind == "bytes" and FIXED_SIZE in params:
                namespace, short = self._record_name(name)
                if (ref := self._named(s, namespace, short)) is not None:
                    return ref
                out = {"type": "fixed", "name": short, **({"namespace": namespace} if namespace else {}),
                       "size": int(params[FIXED_SIZE])}
            else:
                out = {"type": PRIMITIVE_TO_AVRO[kind]}
            if name == DECIMAL:
                out["scale"] = int(params.get("scale", 0))
                out["precision"] = int(params.get(PRECISION_PARAM, PRECISION_DEFAULT))
        elif kind == "array":
            out = {"type": "array", "items": self.schema(s["items"])}
        elif kind == "map":
            keys = s["keys"]
            if keys.get("type") == "string" and not keys.get("optional"):
                out = {"type": "map", "values": self.schema(s["values"])}
            else:
                namespace, short = (NAMESPACE, MAP_ENTRY) if name is None else self._record_name(name)
                entry: dict[str, Any] = {"type": "record", "name": short,
                                         **({"namespace": namespace} if namespace else {}),
                                         "fields": [self._field("key", keys), self._field("value", s["values"])]}
                if name is not None:
                    entry["connect.internal.type"] = MAP_ENTRY
                out = {"type": "array", "items": entry}
        elif kind == "struct" and name == UNION:
            branches = [self.schema({**f, "optional": False}) for f in s.get("fields", [])]
            return (["null"] if s.get("optional") else []) + branches
        elif kind == "struct":
            namespace, short = self._record_name(name)
            if (ref := self._named(s, namespace, short)) is not None:
                return ref
            out = {"type": "record", "name": short}
            if namespace:
                out["namespace"] = namespace
            if params.get(RECORD_DOC) is not None:
                out["doc"] = params[RECORD_DOC]
            out["fields"] = [self._field(f["field"], f, params.get(FIELD_DOC + f["field"]))
                             for f in s.get("fields", [])]
        else:
            raise DataError(f"unknown Connect schema type {kind!r}")
        self._connect_props(s, params, out)
        if name == DECIMAL or name in LOGICAL:
            out["logicalType"] = "decimal" if name == DECIMAL else LOGICAL[name]
        for key, value in params.items():
            if key.startswith("avro"):
                out[key] = value
        return out["type"] if len(out) == 1 else out

    def _connect_props(self, s: Schema, params: dict[str, str], out: dict[str, Any]) -> None:
        if s.get("doc") is not None:
            out["connect.doc"] = s["doc"]
        if s.get("version") is not None:
            out["connect.version"] = s["version"]
        shown = {k: v for k, v in params.items() if k != FIELD_DEFAULT_FLAG}
        if shown:
            out["connect.parameters"] = shown
        if s.get("default") is not None and FIELD_DEFAULT_FLAG not in params:
            default = avro_default(s, s["default"])
            if default is not _NO_DEFAULT:
                out["connect.default"] = default
        if s.get("name") is not None:
            out["connect.name"] = s["name"]
        if s.get("type") in ("int8", "int16"):
            out["connect.type"] = s["type"]

    def _field(self, name: str, s: Schema, doc: str | None = None) -> dict[str, Any]:
        field: dict[str, Any] = {"name": scrub_name(name, self.scrub), "type": self.schema(s)}
        if doc is not None:
            field["doc"] = doc
        if s.get("default") is not None:
            default = avro_default(s, s["default"])
            if default is not _NO_DEFAULT:
                field["default"] = default
        elif s.get("optional"):
            field["default"] = None
        return field


_NO_DEFAULT = object()


def _default_bytes(schema: Schema, value: Any) -> bytes:
    if isinstance(value, str):
        return base64.b64decode(value)
    if schema.get("name") == DECIMAL:
        return decimal_to_bytes(decimal.Decimal(str(value)), int((schema.get("parameters") or {}).get("scale", 0)))
    return bytes(value)


def avro_default(schema: Schema, value: Any) -> Any:
    """A Connect default (in its JSON form: bytes and decimals base64) as an Avro default: bytes as
    ISO-8859-1 text, as Avro writes them."""
    if value is None:
        return None
    kind = schema.get("type")
    if kind == "bytes":
        return _default_bytes(schema, value).decode("latin-1")
    if kind == "array":
        return [avro_default(schema["items"], v) for v in value]
    if kind == "map":
        if schema["keys"].get("type") != "string" or schema["keys"].get("optional"):
            return _NO_DEFAULT  # an array of records in Avro: Confluent drops such a default too
        return {k: avro_default(schema["values"], v) for k, v in value.items()}
    if kind == "struct" and isinstance(value, dict):
        return {f["field"]: avro_default(f, value.get(f["field"])) for f in schema.get("fields", [])}
    return value


# -- Avro schema -> Connect schema ---------------------------------------------------------------------
def connect_schema(avro: Any) -> Schema:
    """The Connect schema of an Avro schema (its JSON form), as Confluent's AvroData.toConnectSchema."""
    parsed = fastavro().parse_schema(hidden_logical_types(avro), _write_hint=False)
    return _ToConnect().schema(parsed)


def with_references_inlined(texts: list[str], what: str = "the schema") -> Any:
    """The last of `texts` (an Avro schema's JSON) made self-contained: each named type the texts before it
    (its references', theirs first) define is inlined at its first use and named afterwards, as Avro's Java
    parser (references parsed first) gives Confluent's AvroData the schema; so a type used by name is the
    referenced definition. Full names, logical types hidden (connect_schema and plain_schema take it)."""
    named: dict[str, Any] = {}
    try:
        for text in texts:
            before = dict(named)
            parsed = fastavro().parse_schema(hidden_logical_types(json.loads(text)), named_schemas=named,
                                             _write_hint=False)
            _refuse_redefinitions(before, named)
    except Exception as e:  # noqa: BLE001 - json's ValueError, fastavro's SchemaParseException and others
        why = f"unknown type {e.name}" if isinstance(e, fastavro().schema.UnknownType) else str(e)
        raise DataError(f"{what} is not an Avro schema klog reads with its references: {why}") from None
    return _first_use(parsed, named, set())


def _refuse_redefinitions(before: dict[str, Any], after: dict[str, Any]) -> None:
    """A text that defines again, differently, a named type an earlier one (a reference) defined: Avro's Java
    parser refuses it ("Can't redefine"), so Confluent registers and reads no such schema; fastavro would
    silently take the last definition for every use. The same definition again is the type (Avro 1.12)."""
    redefined = [name for name, definition in before.items()
                 if after[name] is not definition and after[name] != definition]
    if redefined:
        raise ValueError(f"Can't redefine: {', '.join(redefined)} (a named type its references define)")


def _first_use(avro: Any, named: dict[str, Any], defined: set[str]) -> Any:
    """`avro` (fastavro-parsed: full names) with each named type `defined` does not hold yet inlined from
    `named` (and added to it); a definition met again is its name."""
    if isinstance(avro, list):
        return [_first_use(member, named, defined) for member in avro]
    if isinstance(avro, str):
        return avro if avro in AVRO_PRIMITIVES or avro in defined else _first_use(named[avro], named, defined)
    if not isinstance(avro, dict):
        return avro
    kind = avro.get("type")
    if kind in AVRO_NAMED or kind == "error":  # an error is a record (which connect_schema refuses, by name)
        if avro["name"] in defined:
            return avro["name"]
        defined.add(avro["name"])  # before its fields: a recursive use stays a name
        namespace, short = split_name(avro["name"])
        out = {**avro, "name": short, "namespace": namespace or ""}  # "": not the enclosing one
        if kind in ("record", "error"):
            out["fields"] = [{**f, "type": _first_use(f["type"], named, defined)} for f in avro["fields"]]
        return out
    out = dict(avro)
    for key in ("items", "values"):
        if key in out:
            out[key] = _first_use(out[key], named, defined)
    if isinstance(kind, dict | list) or (isinstance(kind, str) and kind not in AVRO_PRIMITIVES + ("array", "map")):
        out["type"] = _first_use(kind, named, defined)
    return out


def hidden_logical_types(avro: Any) -> Any:
    """The schema with each logicalType renamed, so fastavro parses it without judging it (it refuses a
    decimal whose scale exceeds its precision, which Avro's Java library ignores) and keeps it as a property."""
    return without_logical_types(avro, keep_as=HIDDEN_LOGICAL)


_ORDER = ("type", "items", "keys", "values", "fields", "optional", "default", "name", "version", "doc", "parameters")


def _ordered(schema: Schema) -> Schema:
    """Keys in the order Kafka's JsonConverter writes them."""
    return {k: schema[k] for k in _ORDER if k in schema}


def _avro_type(avro: Any) -> str:
    if isinstance(avro, list):
        return "union"
    return avro["type"] if isinstance(avro, dict) else avro


def union_member_name(avro: Any) -> str:
    kind = _avro_type(avro)
    if kind in AVRO_NAMED:
        return split_name(avro["name"])[1] if isinstance(avro, dict) else split_name(avro)[1]
    return kind


class _ToConnect:
    def __init__(self) -> None:
        self.named: dict[str, dict] = {}
        self.open: set[str] = set()
        # the records made -> their struct's fields and the parameters their docs give: a named type met again
        # (by its name) shares them, so a schema is made in the size of its definitions, not of the tree of its
        # uses (a record holding two of another, that two of a third ... doubles at each level)
        self.made: dict[str, tuple[list[Schema], dict[str, str]]] = {}

    def resolve(self, avro: Any) -> Any:
        if isinstance(avro, str) and avro not in AVRO_PRIMITIVES:
            if avro not in self.named:
                raise DataError(f"the Avro schema refers to an undefined type {avro}")
            return self.named[avro]
        if isinstance(avro, dict) and avro.get("type") in AVRO_NAMED:
            self.named[avro["name"]] = avro
        return avro

    def schema(self, avro: Any, optional: bool = False, field_default: Any = _NO_DEFAULT,
               doc: str | None = None) -> Schema:
        avro = self.resolve(avro)
        if isinstance(avro, list):
            return self._union(avro, optional, doc)
        props = avro if isinstance(avro, dict) else {"type": avro}
        kind = props["type"]
        logical = props.get(HIDDEN_LOGICAL)
        out: Schema = {}
        params: dict[str, str] = {}
        name = None
        if kind in ("bytes", "fixed"):
            out["type"] = "bytes"
            if logical == "decimal":
                name = DECIMAL
                out["version"] = 1
                params["scale"] = str(int(props.get("scale", 0)))
                precision = props.get("precision")
                if precision is not None and int(precision) != PRECISION_DEFAULT:
                    params[PRECISION_PARAM] = str(int(precision))
            if kind == "fixed":
                params[FIXED_SIZE] = str(props["size"])
                name = name or props["name"]
        elif kind == "int":
            if logical in ("date", "time-millis"):
                out["type"], name, out["version"] = "int32", DATE if logical == "date" else TIME, 1
            else:
                out["type"] = props.get("connect.type") if props.get("connect.type") in ("int8", "int16") else "int32"
        elif kind == "long":
            out["type"] = "int64"
            if logical == "timestamp-millis":
                name, out["version"] = TIMESTAMP, 1
        elif kind in ("float", "double", "boolean", "string"):
            out["type"] = {"float": "float32", "double": "float64"}.get(kind, kind)
        elif kind == "enum":
            out["type"] = "string"
            short = split_name(props["name"])[1]
            if props.get("doc") is not None:
                params[f"{NAMESPACE}.enum.doc.{short}"] = props["doc"]
            if props.get("default") is not None:
                params[f"{NAMESPACE}.enum.default.{short}"] = props["default"]
            params[ENUM] = props["name"]
            params.update({f"{ENUM}.{symbol}": symbol for symbol in props["symbols"]})
            name = props["name"]
        elif kind == "array":
            items = self.resolve(props["items"])
            if _is_map_entry(items):
                fields = {f["name"]: f for f in items["fields"]}
                if set(fields) != {"key", "value"}:
                    raise DataError("an Avro array of MapEntry records needs exactly the fields key and value")
                out.update(type="map", keys=self.schema(fields["key"]["type"]),
                           values=self.schema(fields["value"]["type"]))
            else:
                out.update(type="array", items=self.schema(items))
        elif kind == "map":
            out.update(type="map", keys={"type": "string", "optional": False}, values=self.schema(props["values"]))
        elif kind == "record":
            full = props["name"]
            made = self.made.get(full)
            if made is None:
                if full in self.open:
                    raise DataError(f"recursive Avro schemas ({full}) have no Connect schema")
                self.open.add(full)
                docs: dict[str, str] = {}
                if props.get("doc") is not None:
                    docs[RECORD_DOC] = props["doc"]
                fields = []
                for f in props["fields"]:
                    if f.get("doc") is not None:
                        docs[FIELD_DOC + f["name"]] = f["doc"]
                    fields.append({**self.schema(f["type"], False, f.get("default", _NO_DEFAULT), f.get("doc")),
                                   "field": f["name"]})
                self.open.discard(full)
                made = self.made[full] = (fields, docs)
            params.update(made[1])
            out.update(type="struct", fields=made[0])
            name = full
        elif kind == "null":
            raise DataError("standalone null schemas have no Connect schema")
        else:
            raise DataError(f"unknown Avro type {kind!r}")
        return self._finish(out, props, params, name, optional, field_default)

    def _finish(self, out: Schema, props: dict, params: dict[str, str], name: str | None, optional: bool,
                field_default: Any) -> Schema:
        if props.get("connect.doc") is not None:
            out["doc"] = props["connect.doc"]
        if isinstance(props.get("connect.version"), int):
            out["version"] = props["connect.version"]
        if isinstance(props.get("connect.parameters"), dict):
            params.update({k: str(v) for k, v in props["connect.parameters"].items()})
        params.update({k: str(v) for k, v in props.items() if k.startswith("avro")})
        connect_default = props.get("connect.default")
        if field_default is _NO_DEFAULT or field_default is None:
            default = connect_default
        else:
            default = field_default
            if connect_default is None:
                params[FIELD_DEFAULT_FLAG] = "true"
        if params:
            out["parameters"] = params
        if isinstance(props.get("connect.name"), str):
            name = props["connect.name"]
        if name is not None and not name.startswith(f"{NAMESPACE}.{DEFAULT_NAME}"):
            out["name"] = name
        out["optional"] = optional
        if default is not None:
            out["default"] = connect_json_default(out, default)
        return _ordered(out)

    def _union(self, members: list, optional: bool, doc: str | None) -> Schema:
        if len(members) == 2 and "null" in members:
            other = members[1] if members[0] == "null" else members[0]
            return self.schema(other, True, _NO_DEFAULT, doc)
        fields = []
        for member in members:
            if member == "null":
                optional = True
                continue
            fields.append({**self.schema(member, True), "field": union_member_name(self.resolve(member))})
        if len({f["field"] for f in fields}) != len(fields):
            raise DataError("two members of an Avro union map to the same Connect union field name")
        return _ordered({"type": "struct", "fields": fields, "optional": optional, "name": UNION})


def _is_map_entry(avro: Any) -> bool:
    if not isinstance(avro, dict) or avro.get("type") != "record":
        return False
    return avro["name"] == f"{NAMESPACE}.{MAP_ENTRY}" or avro.get("connect.internal.type") == MAP_ENTRY


def connect_json_default(schema: Schema, value: Any) -> Any:
    """An Avro default as a Connect default in its JSON form (bytes and decimals base64)."""
    if value is None:
        return None
    kind = schema.get("type")
    if kind == "bytes" and isinstance(value, str):
        return base64.b64encode(value.encode("latin-1")).decode()
    if kind == "array" and isinstance(value, list):
        return [connect_json_default(schema["items"], v) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: connect_json_default(schema["values"], v) for k, v in value.items()}
    if kind == "struct" and isinstance(value, dict) and schema.get("name") != UNION:
        return {f["field"]: connect_json_default(f, value.get(f["field"])) for f in schema.get("fields", [])}
    return value


# -- values -------------------------------------------------------------------------------------------
ValueFn = Callable[[Any], Any]


def to_avro_value(schema: Schema, scrub: bool = False) -> ValueFn:
    """A function from a Connect value of `schema` to what fastavro writes for its Avro schema. A struct met
    again with the same fields (a named type shared) is converted by the function made for it first (its errors
    name the path where it was met first)."""
    return _to_avro(schema, "", scrub, {})


def _to_avro(schema: Schema, path: str, scrub: bool, made: dict[int, tuple[Any, ValueFn]]) -> ValueFn:
    kind = schema.get("type")
    name = schema.get("name")
    optional = bool(schema.get("optional"))
    where = path or "the value"

    def required(v: Any) -> None:
        raise DataError(f"{where}: null for a required {kind} (not optional in its schema)")

    inner: ValueFn
    if name == DECIMAL:
        scale = int((schema.get("parameters") or {}).get("scale", 0))

        def inner(v: Any) -> Any:
            if isinstance(v, bytes | bytearray):
                return bytes(v)  # the unscaled two's complement bytes already
            try:
                dec = v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v))
                return decimal_to_bytes(dec, scale)
            except (decimal.InvalidOperation, ValueError, OverflowError):
                raise DataError(f"{where}: {v!r} is no decimal") from None
    elif kind == "bytes":
        def inner(v: Any) -> Any:
            if not isinstance(v, bytes | bytearray | memoryview):
                raise DataError(f"{where}: a bytes value must be bytes, not {type(v).__name__}")
            return bytes(v)
    elif kind == "array":
        item = _to_avro(schema["items"], f"{path}[]", scrub, made)

        def inner(v: Any) -> Any:
            return [item(x) for x in v]
    elif kind == "map":
        value_fn = _to_avro(schema["values"], f"{path}{{}}", scrub, made)
        if schema["keys"].get("type") == "string" and not schema["keys"].get("optional"):
            def inner(v: Any) -> Any:
                return {k: value_fn(x) for k, x in v.items()}
        else:
            key_fn = _to_avro(schema["keys"], f"{path}{{key}}", scrub, made)

            def inner(v: Any) -> Any:
                return [{"key": key_fn(k), "value": value_fn(x)} for k, x in v.items()]
    elif kind == "struct" and name == UNION:
        # each branch optional: a named struct's converts to fastavro's (name, value), naming its branch
        branches = [(f["field"], _to_avro({**f, "optional": True}, f"{path}.{f['field']}", scrub, made))
                    for f in schema.get("fields", [])]

        def inner(v: Any) -> Any:
            for field_name, fn in branches:
                x = v.get(field_name) if isinstance(v, dict) else None
                if x is not None:
                    return fn(x)
            return None
    elif kind == "struct" and (hit := made.get(id(schema.get("fields")))) is not None \
            and hit[0] is schema.get("fields"):
        inner = hit[1]
    elif kind == "struct":
        fields = [(f["field"], scrub_name(f["field"], scrub),
                   _to_avro(f, f"{path}.{f['field']}" if path else f["field"], scrub, made),
                   None if f.get("default") is None else from_json(f, f["default"]))
                  for f in schema.get("fields", [])]

        def inner(v: Any) -> Any:
            if not isinstance(v, dict):
                raise DataError(f"{where}: a struct value must be a map, not {type(v).__name__}")
            out = {}
            for field_name, avro_field, fn, default in fields:
                x = v.get(field_name)
                out[avro_field] = fn(default if x is None else x)
            return out

        made[id(schema.get("fields"))] = (schema.get("fields"), inner)
    else:
        def inner(v: Any) -> Any:
            return v

    def convert(v: Any) -> Any:
        if v is None:
            if optional:
                return None
            required(v)
        return inner(v)

    if optional and kind == "struct" and name and name != UNION:
        # fastavro's tuple notation names the union's branch: otherwise it validates the whole record against
        # each branch to choose one (a Debezium envelope's before and after: ~30% of its encoding time)
        avro_name = avro_full_name(name, scrub)

        def named_branch(v: Any) -> Any:
            return None if v is None else (avro_name, inner(v))

        return named_branch
    return convert


def from_avro_value(schema: Schema, made: dict[int, tuple[Any, ValueFn | None]] | None = None) -> ValueFn | None:
    """A function from what fastavro reads (for the plain_schema of `schema`'s Avro schema) to the Connect
    value; None where the value is the same (most schemas: records of primitives). `made`: a struct's function
    by its fields (a named type met again shares its struct's fields: made once)."""
    made = {} if made is None else made
    fields = schema.get("fields")
    if schema.get("type") == "struct" and isinstance(fields, list):
        hit = made.get(id(fields))
        if hit is not None and hit[0] is fields:
            return hit[1]
        fn = _from_avro_value(schema, made)
        made[id(fields)] = (fields, fn)
        return fn
    return _from_avro_value(schema, made)


def _from_avro_value(schema: Schema, made: dict[int, tuple[Any, ValueFn | None]]) -> ValueFn | None:
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        scale = int((schema.get("parameters") or {}).get("scale", 0))
        return lambda v: decimal_from_bytes(v, scale)
    if kind == "struct" and schema.get("name") == UNION:
        branches = [(f["field"], f, from_avro_value(f, made)) for f in schema.get("fields", [])]

        def union(v: Any) -> Any:
            if isinstance(v, tuple):  # a record member, named by fastavro
                full, v = v
                wanted = split_name(full)[1]
            else:
                wanted = None
            out: dict[str, Any] = {name: None for name, _, _ in branches}
            for name, field, fn in branches:
                if (name == wanted) if wanted is not None else _fits(field, v):
                    out[name] = v if fn is None else fn(v)
                    return out
            raise DataError(f"an Avro union value of type {type(v).__name__} matches none of {list(out)}")

        return union
    if kind == "struct":
        todo = [(f["field"], fn) for f in schema.get("fields", []) if (fn := from_avro_value(f, made)) is not None]
        if not todo:
            return None

        def record(v: Any) -> Any:
            for name, fn in todo:
                if v.get(name) is not None:
                    v[name] = fn(v[name])
            return v

        return record
    if kind == "array":
        fn = from_avro_value(schema["items"], made)
        return None if fn is None else (lambda v: [x if x is None else fn(x) for x in v])
    if kind == "map":
        key_fn = from_avro_value(schema["keys"], made)
        value_fn = from_avro_value(schema["values"], made)
        if schema["keys"].get("type") != "string" or schema["keys"].get("optional"):
            def entries(v: Any) -> Any:
                out = {}
                for e in v:
                    k, x = e["key"], e["value"]
                    k = k if key_fn is None or k is None else key_fn(k)
                    try:
                        out[k] = x if value_fn is None or x is None else value_fn(x)
                    except TypeError:
                        raise DataError("a map whose keys are structs, maps or arrays has no Python form") from None
                return out

            return entries
        return None if value_fn is None else (lambda v: {k: x if x is None else value_fn(x) for k, x in v.items()})
    return None


_PY_TYPES = {"boolean": bool, "string": str, "bytes": bytes, "struct": dict, "map": dict, "array": list,
             "float32": float, "float64": float}


def _fits(schema: Schema, v: Any) -> bool:
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        return isinstance(v, decimal.Decimal)
    if kind in ("int8", "int16", "int32", "int64"):
        return isinstance(v, int) and not isinstance(v, bool)
    wanted = _PY_TYPES.get(kind)
    return wanted is not None and isinstance(v, wanted)


def plain_schema(avro: Any) -> Any:
    """The Avro schema without its logical types, which change no byte of the encoding: fastavro then reads
    dates, times and timestamps as the numbers Connect keeps (days, milliseconds, microseconds), uuids as
    strings, decimals as their bytes (scaled here by the Connect schema); and a decimal Confluent writes
    with a scale over its precision (Connect's scale 127 for an unconstrained numeric: Avro's Java library
    ignores such a logical type) parses."""
    return without_logical_types(avro)


# -- the Schema Registry's REST API, as a client ------------------------------------------------------
class RegistryClient(registry_client.RegistryClient):
    """klog.protocol's registry client with Connect's errors: an answer refusing a call fails the
    record (RegistryError, a DataError), no registry answering is retriable."""

    def call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return super().call(method, path, body)
        except registry_client.RegistryAnswerError as e:
            raise RegistryError(e.status, e.message) from None
        except registry_client.RegistryUnreachableError as e:
            raise RetriableError(str(e)) from None


class RegistryError(DataError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Schema Registry: {message} (HTTP {status})")
        self.status = status


# -- the converter -----------------------------------------------------------------------------------
STRATEGIES = {"TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"}
STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."


def _strategy_check(value: str) -> str | None:
    short = value.removeprefix(STRATEGY_PACKAGE)
    return None if short in STRATEGIES else f"klog knows {', '.join(sorted(STRATEGIES))} (in {STRATEGY_PACKAGE})"


def subject_name(strategy: str, topic: str, is_key: bool, avro: Any) -> str:
    """The subject a schema is registered under, as Confluent's SubjectNameStrategy classes name it."""
    short = strategy.removeprefix(STRATEGY_PACKAGE)
    if short == "TopicNameStrategy":
        return f"{topic}-{'key' if is_key else 'value'}"
    record = _full_name(avro)
    return record if short == "RecordNameStrategy" else f"{topic}-{record}"


def _full_name(avro: Any) -> str:
    if isinstance(avro, dict) and avro.get("type") in AVRO_NAMED:
        namespace = avro.get("namespace")
        return f"{namespace}.{avro['name']}" if namespace and "." not in avro["name"] else avro["name"]
    if isinstance(avro, dict):
        return _full_name(avro["type"])
    if isinstance(avro, list):
        raise DataError("RecordNameStrategy needs a record schema, not a union (an optional top-level schema)")
    return str(avro)


def normalize_query(config: dict[str, Any]) -> str:
    """The query string of a registration or a lookup by schema: `?normalize=true` with normalize.schemas,
    as Confluent's serializers send it (the registry then registers and looks up the normalized form)."""
    return "?normalize=true" if config.get("normalize.schemas") else ""


class AvroConverter(Converter):
    java_class = "io.confluent.connect.avro.AvroConverter"
    config_def = (ConfigDef()
                  .define("schema.registry.url", "list", doc="the Schema Registry's URLs (comma-separated)")
                  .define("auto.register.schemas", "boolean", True)
                  .define("use.latest.version", "boolean", False)
                  .define("latest.compatibility.strict", "boolean", True)
                  .define("key.subject.name.strategy", default="TopicNameStrategy", check=_strategy_check)
                  .define("value.subject.name.strategy", default="TopicNameStrategy", check=_strategy_check)
                  .define("basic.auth.credentials.source", default="URL", choices=("url", "user_info"))
                  .define("basic.auth.user.info", "password", default="")
                  .define("schemas.cache.size", "int", 1000, at_least=1)
                  .define("scrub.invalid.names", "boolean", False)
                  # as Confluent's serializer: the registration and the lookup by schema send normalize=true
                  .define("normalize.schemas", "boolean", False))

    def __init__(self, props: dict[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        fastavro(f"{'key' if is_key else 'value'}.converter")  # refused at validation, not at the first record
        if not self.config["schema.registry.url"]:
            raise ConfigError("schema.registry.url", "", "AvroConverter needs the Schema Registry's URL")
        user_info = self.config["basic.auth.user.info"] if self.config["basic.auth.credentials.source"] == "user_info" \
            else None
        self.registry = RegistryClient(self.config["schema.registry.url"], user_info or None)
        self.strategy = self.config["key.subject.name.strategy" if is_key else "value.subject.name.strategy"]
        self.cache_size = self.config["schemas.cache.size"]
        self._lock = threading.Lock()
        # identity of a Connect schema object -> (the schema kept alive, its writer); then by its JSON text
        self._by_object: dict[int, tuple[Schema, _Writer]] = {}
        self._by_text: OrderedDict[str, _Writer] = OrderedDict()
        self._writers_by_subject: dict[tuple[str, str], _Writer] = {}
        self._readers: OrderedDict[tuple[int, str], _Reader] = OrderedDict()  # (schema id, topic) -> reader

    # Connect -> bytes
    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None  # a tombstone stays one (Confluent's serializer returns null)
        if schema is None:
            raise DataError("AvroConverter writes records with a schema; this one has none (a schemaless value: "
                            "use JsonConverter with schemas.enable=false)")
        writer = self._writer_of(schema)
        datum = writer.convert(value)  # the value checked before anything is registered, as Confluent's order
        writer, schema_id = self._registered(topic, writer)
        out = io.BytesIO()
        out.write(MAGIC + struct_.pack(">I", schema_id))
        try:
            fastavro().schemaless_writer(out, writer.parsed, datum)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError, struct_.error) as e:
            raise DataError(f"the value does not fit its Avro schema: {e}") from None
        return out.getvalue()

    def _writer_of(self, schema: Schema) -> _Writer:
        hit = self._by_object.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        text = schema_text(schema, "AvroConverter", shares=True)  # named types: by name
        writer = self._by_text.get(text)
        if writer is None:
            writer = _Writer(schema, scrub=self.config["scrub.invalid.names"])
            _put_bounded(self._by_text, text, writer, self.cache_size)
        if len(self._by_object) >= self.cache_size:
            self._by_object.clear()
        self._by_object[id(schema)] = (schema, writer)  # the schema kept alive: its id cannot be reused meanwhile
        return writer

    def _registered(self, topic: str, writer: _Writer) -> tuple[_Writer, int]:
        """The writer the value is written with (the subject's latest with use.latest.version) and the id of
        its schema, asked of the registry once per subject."""
        subject = subject_name(self.strategy, topic, self.is_key, writer.avro)
        registered = writer.ids.get(subject)
        if registered is None:
            with self._lock:
                registered = writer.ids.get(subject)
                if registered is None:
                    registered = writer.ids[subject] = self._register(subject, writer)
        return registered

    def _register(self, subject: str, writer: _Writer) -> tuple[_Writer, int]:
        """The schema's id under `subject` (registered when auto.register.schemas), or with
        use.latest.version the writer of the subject's latest schema (only without
        auto.register.schemas, as in Confluent's serializer, which registers first)."""
        from urllib.parse import quote

        path = f"/subjects/{quote(subject, safe='')}"
        if self.config["use.latest.version"] and not self.config["auto.register.schemas"]:
            latest = self.registry.call("GET", f"{path}/versions/latest")
            latest_id = int(latest["id"])
            # its references resolved as the reader resolves them (before the check: a registry not
            # answering for them stays retriable); the check judges a type of another kind itself
            is_avro = (latest.get("schemaType") or "AVRO") == "AVRO"
            latest_avro = self._avro_of(latest_id, latest) if is_avro else None
            if self.config["latest.compatibility.strict"]:
                check_latest_reads(latest, "AVRO", writer.text,
                                   lambda _: read_problems(_resolvable(latest_avro), _resolvable(writer.avro)))
            if latest_avro is None:
                raise DataError(f"the latest schema of {subject} is {latest['schemaType']}, not Avro")
            return _Writer(writer.connect, latest_avro=latest_avro, scrub=writer.scrub), latest_id
        body = {"schema": writer.text}
        query = normalize_query(self.config)
        if self.config["auto.register.schemas"]:
            return writer, int(self.registry.call("POST", f"{path}/versions{query}", body)["id"])
        return writer, int(self.registry.call("POST", path + query, body)["id"])

    # bytes -> Connect
    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        schema_id, reader = framed_reader(data, topic, self._readers, self._lock, self.cache_size, self._reader,
                                          "an Avro record")
        try:
            datum = fastavro().schemaless_reader(io.BytesIO(data[5:]), reader.parsed, None, return_record_name=True,
                                                 return_record_name_override=True)
        except (EOFError, ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError, struct_.error) as e:
            raise DataError(f"not Avro of schema {schema_id}: {e}") from None
        return reader.connect, datum if reader.convert is None or datum is None else reader.convert(datum)


    def _reader(self, topic: str, schema_id: int) -> _Reader:
        """The reader of a schema id on a topic: the schema, and its version under the topic's subject, which
        Confluent's converter gives the Connect schema when the Avro one has no connect.version (a schema
        not under that subject, where Confluent's converter fails the record, is read without a version)."""
        from urllib.parse import quote

        found = self.registry.call("GET", f"/schemas/ids/{schema_id}")
        if found.get("schemaType", "AVRO") != "AVRO":
            raise DataError(f"schema {schema_id} is {found['schemaType']}, not Avro")
        references = found.get("references") or []
        avro = self._avro_of(schema_id, found)
        version = None
        if not (isinstance(avro, dict) and "connect.version" in avro):
            try:
                subject = subject_name(self.strategy, topic, self.is_key, avro)
                lookup = {"schema": found["schema"], **({"references": references} if references else {})}
                version = self.registry.call("POST", f"/subjects/{quote(subject, safe='')}", lookup).get("version")
            except DataError:  # not under that subject (a RegistryError), or no subject for it: no version
                pass
        return _Reader(avro, version if isinstance(version, int) else None)

    def _avro_of(self, schema_id: int, found: dict[str, Any]) -> Any:
        """The Avro schema of the registry's answer for a schema (by id, or a subject's version), with
        references self-contained (the named types they define inlined): the referenced versions fetched as
        -s avro fetches them."""
        from klog.client.deserializers import avro_texts, referenced_schemas

        if not found.get("references"):
            try:
                return json.loads(found["schema"])
            except (ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
                raise DataError(f"schema {schema_id} is not an Avro schema: {e}") from None
        try:
            referenced = referenced_schemas(self.registry, found["references"], DataError)
        except DataError as e:  # a referenced version the registry does not give, too many of them: named here
            raise DataError(f"schema {schema_id}'s references: {e}") from None
        return with_references_inlined([*avro_texts(referenced), found["schema"]],
                                        f"schema {schema_id}")


def check_latest_reads(latest: dict[str, Any], schema_type: str, text: str,
                       problems_of: Callable[[Any], list[str]]) -> None:
    """latest.compatibility.strict, for every converter with a registry: the subject's `latest` version (the
    registry's answer) must read what the record's schema (`text`, of `schema_type`) writes, as Confluent's
    AbstractKafkaSchemaSerDe checks latestVersion.isBackwardCompatible(schema) before use.latest.version
    writes with it; `problems_of(latest's parsed schema)` gives the type's own rules' reasons. DataError
    with Confluent's wording if it may not."""
    kind = latest.get("schemaType") or "AVRO"
    try:
        problems = ["a schema of type " + kind] if kind != schema_type else problems_of(json.loads(latest["schema"]))
    except Exception as e:  # noqa: BLE001 - a schema the type's parser refuses is one it cannot read with
        problems = [f"{type(e).__name__}: {e}"]
    if problems:
        raise DataError(f"Incompatible schema {latest.get('schema')} of type {kind} for schema {text}: "
                        f"{'; '.join(problems)[:500]}. Set latest.compatibility.strict=false to disable this check")


def _resolvable(avro: Any) -> Any:
    """An Avro schema as read_problems takes it: fastavro-parsed with full names, unhinted, its logical
    types kept as properties (they change no byte, so no reading)."""
    return fastavro().parse_schema(hidden_logical_types(avro), _write_hint=False)


def framed_reader(data: bytes, topic: str, readers: OrderedDict, lock: threading.Lock, size: int,
                  make: Callable[[str, int], Any], what: str = "a record") -> tuple[int, Any]:
    """Confluent's wire format (magic byte 0, a 4-byte schema id) of a record every registry converter
    reads: its schema id and the reader `make(topic, id)` gives, kept per (id, topic) in `readers` (at
    most `size`). A record without that header is a DataError."""
    if len(data) < 5 or data[:1] != MAGIC:
        raise DataError("Unknown magic byte!" if data[:1] != MAGIC else f"{what} shorter than its header")
    schema_id = struct_.unpack(">I", data[1:5])[0]
    reader = readers.get((schema_id, topic))
    if reader is None:
        reader = make(topic, schema_id)
        with lock:
            _put_bounded(readers, (schema_id, topic), reader, size)
    return schema_id, reader


def _put_bounded(cache: OrderedDict, key: Any, value: Any, size: int) -> None:
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)


class _Writer:
    """One Connect schema's Avro side: its Avro schema (and text), parsed, the value conversion, and
    its id per subject."""

    def __init__(self, connect: Schema, latest_avro: Any = None, scrub: bool = False) -> None:
        self.scrub = scrub
        self.avro = avro_schema(connect, scrub) if latest_avro is None else latest_avro
        try:
            # parsed with fastavro's hint (its default): schemaless_writer does not parse it again per record
            self.parsed = fastavro().parse_schema(plain_schema(self.avro))
        except Exception as e:  # noqa: BLE001 - fastavro's SchemaParseException and others: no valid Avro
            raise DataError(f"the Connect schema has no valid Avro form: {e}") from None
        self.connect = connect
        self.text = json.dumps(self.avro, separators=(",", ":"), ensure_ascii=False)
        self.convert = to_avro_value(connect, scrub)
        self.ids: dict[str, tuple[_Writer, int]] = {}  # subject -> the writer used there and its schema id


class _Reader:
    def __init__(self, avro: Any, version: int | None = None) -> None:
        try:
            self.connect = connect_schema(avro)
            if version is not None and "version" not in self.connect:
                self.connect = _ordered({**self.connect, "version": version})
            self.parsed = fastavro().parse_schema(plain_schema(avro))  # hinted, as above
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - fastavro's SchemaParseException and others
            raise DataError(f"an Avro schema klog cannot read: {e}") from None
        self.convert = from_avro_value(self.connect)

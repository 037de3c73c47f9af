"""Confluent's JsonSchemaConverter (`io.confluent.connect.json.JsonSchemaConverter`): Connect data as JSON in
Confluent's wire format (magic byte 0, the schema's 4-byte big-endian id in a Schema Registry, the JSON
text), its JSON Schema registered in and read from a Schema Registry over its REST API (AvroConverter's
client, subject name strategies and caching rules: klog/connect/avro.py).

Connect schemas map to JSON Schema as Confluent's JsonSchemaData maps them: int8..int64 `integer` and
float32/float64 `number`, each with `connect.type`; bytes (and Decimal) a `string` with `connect.type`
bytes (base64 text); a struct an `object` of `properties` (closed, `additionalProperties: false`, with
`object.additional.properties=false`); a map with string keys an `object` with `additionalProperties`,
any other map an array of {key, value} objects, both `connect.type: map`; an optional schema
`{"oneOf": [{"type": "null"}, T]}`; a struct field's position `connect.index`; a schema's name `title`,
its version `connect.version`, doc `description`, parameters `connect.parameters`, default `default`;
Connect's unions (io.confluent.connect.json.OneOf) a `oneOf`. The other way reads any JSON Schema as
JsonSchemaData.toConnectSchema does (no `connect.type`: integer is int64, number float64; a `oneOf`
of null and T an optional T, other `oneOf`/`anyOf`s unions; `enum` a string with
io.confluent.connect.json.Enum parameters).
"""

from __future__ import annotations

import base64
import decimal
import json
import math
import struct as struct_
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from klog.client.deserializers import referenced_schemas
from klog.connect.avro import (
    MAGIC,
    STRATEGY_PACKAGE,
    AvroConverter,
    RegistryClient,
    _ordered,
    _put_bounded,
    check_latest_reads,
    framed_reader,
    normalize_query,
    subject_name,
)
from klog.connect.config import ConfigDef
from klog.connect.converters import (  # JsonConverter's Jackson number texts: one mechanism for both
    Converter,
    _encode_as_jackson,
    _float32,
    _float64,
    _stand_in,
    decimal_from_bytes,
    decimal_to_bytes,
    from_json,
)
from klog.connect.data import DECIMAL, Schema, schema_text
from klog.connect.errors import ConfigError, DataError
from klog.protocol.json_compat import backward_problems
from klog.protocol.json_schema import Document, Loader, Node, document_of, validator_of

NAMESPACE = "io.confluent.connect.json"
ONE_OF = NAMESPACE + ".OneOf"
ENUM = NAMESPACE + ".Enum"
NULL_MARKER = "<NULL>"
INTEGERS = ("int8", "int16", "int32", "int64")
FLOATS = ("float32", "float64")


@dataclass(frozen=True)
class Writing:
    """How JsonSchemaData writes: `closed` structs refuse other properties (object.additional.properties=
    false); `numeric` decimals are JSON numbers (decimal.format=NUMERIC), else base64 strings; `java`: the
    numbers are stand-ins for Jackson's texts (converters._encode_as_jackson puts the texts in)."""

    closed: bool = False
    numeric: bool = False
    java: bool = False


PLAIN = Writing()


# -- Connect schema -> JSON Schema --------------------------------------------------------------------
def json_schema(schema: Schema, closed: bool = False, numeric: bool = False) -> dict[str, Any]:
    """The JSON Schema of a Connect schema, as Confluent's JsonSchemaData.fromConnectSchema; `closed`:
    structs refuse other properties (object.additional.properties=false); `numeric`: decimals are numbers."""
    return _to_json_schema(schema, None, Writing(closed, numeric))


def json_schema_text(schema: Schema, closed: bool = False, numeric: bool = False) -> str:
    """json_schema's JSON text as Jackson writes it (a default's floats and decimals in Java's text)."""
    return _encode_as_jackson(lambda s, _: _to_json_schema(s, None, Writing(closed, numeric, java=True)),
                              schema, None, False)


def _to_json_schema(s: Schema, index: int | None, style: Writing, ignore_optional: bool = False) -> dict[str, Any]:
    kind = s.get("type")
    params = s.get("parameters") or {}
    out: dict[str, Any]
    if kind in INTEGERS or kind in FLOATS:
        out = {"type": "integer" if kind in INTEGERS else "number", "connect.type": kind}
    elif kind == "boolean":
        out = {"type": "boolean"}
    elif kind == "string":
        symbols = [k[len(ENUM) + 1:] for k in params if k.startswith(ENUM + ".")]
        out = {"type": "string"} if ENUM not in params else \
            {"enum": [None if symbol == NULL_MARKER else symbol for symbol in symbols]}
    elif kind == "bytes":
        number = style.numeric and s.get("name") == DECIMAL  # JsonSchemaData: a NumberSchema then
        out = {"type": "number" if number else "string", "connect.type": "bytes"}
    elif kind == "array":
        out = {"type": "array", "items": _to_json_schema(s["items"], None, style)}
    elif kind == "map":
        keys, values = s["keys"], s["values"]
        if keys.get("type") == "string" and not keys.get("optional"):
            out = {"type": "object", "additionalProperties": _to_json_schema(values, None, style),
                   "connect.type": "map"}
        else:
            entry = {"type": "object", "properties": {"key": _to_json_schema(keys, 0, style),
                                                      "value": _to_json_schema(values, 1, style)}}
            out = {"type": "array", "items": entry, "connect.type": "map"}
    elif kind == "struct" and s.get("name") == ONE_OF:
        branches = [_to_json_schema({**f, "optional": False}, i, style, ignore_optional=True)
                    for i, f in enumerate(s.get("fields", []))]
        out = {"oneOf": ([{"type": "null"}] if s.get("optional") else []) + branches}
        if index is not None:
            out["connect.index"] = index
        return out
    elif kind == "struct":
        out = {"type": "object", "properties": {f["field"]: _to_json_schema(f, i, style)
                                                for i, f in enumerate(s.get("fields", []))}}
        if style.closed:
            out["additionalProperties"] = False
    else:
        raise DataError(f"unknown Connect schema type {kind!r}")
    _describe(s, out, style)
    if s.get("optional") and not ignore_optional:
        out = {"oneOf": [{"type": "null"}, out]}
    if index is not None:
        out["connect.index"] = index
    return out


def _describe(s: Schema, out: dict[str, Any], style: Writing) -> None:
    """A schema's name, version, doc, parameters and default, as JsonSchemaData writes them."""
    if s.get("name") is not None:
        out["title"] = s["name"]
    if s.get("version") is not None:
        out["connect.version"] = s["version"]
    if s.get("doc") is not None:
        out["description"] = s["doc"]
    shown = {k: v for k, v in (s.get("parameters") or {}).items() if not k.startswith(NAMESPACE)}
    if shown:
        out["connect.parameters"] = shown
    if s.get("default") is not None:
        out["default"] = to_payload(s, from_json(s, s["default"]), style)


# -- JSON Schema -> Connect schema --------------------------------------------------------------------
class _ToConnect:
    """JsonSchemaData.toConnectSchema over one JSON Schema document ($refs within it and into the documents
    its references name followed)."""

    def __init__(self, root: Any, optional_for_nonrequired: bool = False) -> None:
        self.loader = Loader(root)  # the registry's reading of a schema document: one reading
        self.open: set[int] = set()
        self.optional_for_nonrequired = optional_for_nonrequired  # use.optional.for.nonrequired

    def schema(self, doc: Any, version: int | None = None, optional: bool = False) -> Schema:
        """The Connect schema of a schema document, or of a Node of one (the parts of {"type": [...]} or of
        {"type": "string", "enum": [...]} share their document, so they are passed as Nodes)."""
        node = doc if isinstance(doc, Node) else self.loader.node(doc)
        if id(node) in self.open:
            raise DataError("recursive JSON schemas have no Connect schema in klog")
        self.open.add(id(node))
        try:
            return self._base(node, version, optional)
        finally:
            self.open.discard(id(node))

    def _base(self, node: Any, version: int | None, optional: bool) -> Schema:
        doc = node.doc if isinstance(node.doc, dict) else {}
        kind = node.kind
        connect_type = doc.get("connect.type")
        out: Schema = {}
        params: dict[str, str] = {}
        name = None
        if kind == "boolean":
            out["type"] = "boolean"
        elif kind == "number":
            if connect_type in (*INTEGERS, *FLOATS, "bytes"):
                out["type"] = connect_type
            else:
                out["type"] = "int64" if node.integer else "float64"
        elif kind == "string":
            out["type"] = "bytes" if connect_type == "bytes" else "string"
        elif kind in ("enum", "const"):
            values = doc["enum"] if kind == "enum" else [doc["const"]]
            out["type"] = "string"
            params[ENUM] = ""
            for value in values:
                symbol = NULL_MARKER if value is None else value if isinstance(value, str) else json.dumps(value)
                params[f"{ENUM}.{symbol}"] = symbol
        elif kind == "combined":
            return self._combined(node, version, optional)
        elif kind == "array":
            items = doc.get("items")
            if not isinstance(items, dict | bool):
                raise DataError("Array schema did not specify the items type")
            entry = self.loader.node(items)
            if connect_type == "map" and entry.kind == "object":
                props = entry.doc.get("properties") or {}
                out.update(type="map", keys=self.schema(props.get("key", {})),
                           values=self.schema(props.get("value", {})))
            else:
                out.update(type="array", items=self.schema(items))
        elif kind == "object" and connect_type == "map":
            extra = doc.get("additionalProperties")
            out.update(type="map", keys={"type": "string", "optional": False},
                       values=self.schema(extra if isinstance(extra, dict) else {}))
        elif kind == "object":
            out.update(type="struct", fields=self._fields(doc))
        else:
            raise DataError(f"a JSON schema of kind {kind} has no Connect schema in klog")
        return self._finish(out, doc, params, name, version, optional)

    def _fields(self, doc: dict) -> list[Schema]:
        """A struct's fields in connect.index order (a property without one: the count so far, as Confluent);
        with use.optional.for.nonrequired a property `required` does not name is an optional field."""
        ordered: dict[int, tuple[str, Any]] = {}
        for key, sub in (doc.get("properties") or {}).items():
            index = sub.get("connect.index") if isinstance(sub, dict) else None
            ordered[index if isinstance(index, int) else len(ordered)] = (key, sub)
        required = doc.get("required") if isinstance(doc.get("required"), list) else []
        return [{**self.schema(sub, None, self.optional_for_nonrequired and key not in required), "field": key}
                for _, (key, sub) in sorted(ordered.items())]

    def _combined(self, node: Any, version: int | None, optional: bool) -> Schema:
        parts = node.parts
        if len(parts) == 1:  # flatten.singleton.unions (Confluent's default)
            return self.schema(parts[0], version, optional)
        if node.criterion == "allOf":
            return self._all_of(node, version, optional)
        nulls = [p for p in parts if p.kind == "null"]
        if len(parts) == 2 and nulls:
            other = parts[1] if parts[0] is nulls[0] else parts[0]
            return self.schema(other, version, True)
        fields = []
        for part in parts:
            if part.kind == "null":
                optional = True
                continue
            fields.append({**self.schema(part, None, True), "field": f"{ONE_OF}.field.{len(fields)}"})
        return self._finish({"type": "struct", "fields": fields}, node.doc if isinstance(node.doc, dict) else {},
                            {}, ONE_OF, version, optional)

    def _all_of(self, node: Any, version: int | None, optional: bool) -> Schema:
        """allOf as JsonSchemaData reads it: the properties of its objects as one struct; else its enum or
        string or number part."""
        objects = [p for p in node.parts if p.kind == "object"]
        if objects:
            merged = {"type": "object", "properties": {k: v for p in objects
                                                       for k, v in (p.doc.get("properties") or {}).items()},
                      "required": [k for p in objects for k in (p.doc.get("required") or [])]}
            return self._finish({"type": "struct", "fields": self._fields(merged)}, {}, {}, None, version, optional)
        by_kind = {p.kind: p for p in node.parts}
        for kind in ("combined", "enum", "const", "string", "number"):
            if kind in by_kind:
                return self.schema(by_kind[kind], version, optional)
        raise DataError("an allOf klog cannot read as a Connect schema")

    @staticmethod
    def _finish(out: Schema, doc: dict, params: dict[str, str], name: str | None, version: int | None,
                optional: bool) -> Schema:
        title = doc.get("title")
        if name is None and isinstance(title, str):
            name = title
        if name is not None:
            out["name"] = name
        if isinstance(doc.get("connect.version"), int):
            out["version"] = doc["connect.version"]
        elif version is not None:
            out["version"] = version
        if isinstance(doc.get("description"), str):
            out["doc"] = doc["description"]
        if isinstance(doc.get("connect.parameters"), dict):
            params.update({k: str(v) for k, v in doc["connect.parameters"].items()})
        if params:
            out["parameters"] = params
        out["optional"] = optional
        if doc.get("default") is not None:
            out["default"] = _json_default(out, from_payload(out, doc["default"]))
        return _ordered(out)


def connect_schema(doc: Any, version: int | None = None, optional_for_nonrequired: bool = False) -> Schema:
    """The Connect schema of a JSON Schema document (or a json_schema.Document, with the ones its references
    name), as Confluent's JsonSchemaData.toConnectSchema; `version`: the registry's version of it, when the
    schema has no connect.version; `optional_for_nonrequired`: use.optional.for.nonrequired."""
    try:
        reader = _ToConnect(doc, optional_for_nonrequired)
        return reader.schema(reader.loader.root, version)
    except RecursionError:
        raise DataError("the JSON schema is nested too deep") from None
    except ValueError as e:  # the Loader's SchemaProblem: a $ref not in the document
        raise DataError(f"a JSON schema klog cannot read: {e}") from None


def _json_default(schema: Schema, value: Any) -> Any:
    """A Connect value as the JSON form klog's schemas keep defaults in (JsonConverter's: bytes base64)."""
    from klog.connect.converters import to_json

    return to_json(schema, value)


# -- values ------------------------------------------------------------------------------------------
_PYTHON_KINDS = {"boolean": (bool,), "string": (str,), "float32": (int, float), "float64": (int, float),
                 "array": (list, tuple), "map": (dict,), **dict.fromkeys(INTEGERS, (int,))}


def to_payload(schema: Schema, value: Any, style: Writing = PLAIN) -> Any:
    """A Connect value as JsonSchemaData.fromConnectData writes it (bytes base64, decimals base64 or numbers,
    maps with other keys than strings [{key, value}], a union its set branch); a null takes the default.
    With style.java, inside converters._encode_as_jackson: floats and numeric decimals as Jackson's texts."""
    if value is None:
        if schema.get("default") is not None:
            return to_payload(schema, from_json(schema, schema["default"]), style)
        if schema.get("optional"):
            return None
        raise DataError(f"null for a required {schema.get('type')} (not optional in its schema)")
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        dec = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
        scale = int((schema.get("parameters") or {}).get("scale", 0))
        if not style.numeric:
            return base64.b64encode(decimal_to_bytes(dec, scale)).decode()
        if not dec.is_finite():
            raise DataError(f"a decimal must be a number, not {dec}")
        # a JSON number of the decimal as given, as Jackson writes JsonSchemaData's BigDecimal (toString:
        # 1.50, 1.2E-7, 5E+3; Python's str of a Decimal is the same text)
        return _stand_in(str(dec)) if style.java else float(dec)
    if kind == "bytes":
        if not isinstance(value, bytes | bytearray | memoryview):
            raise DataError(f"a bytes value must be bytes, not {type(value).__name__}")
        return base64.b64encode(bytes(value)).decode()
    wanted = _PYTHON_KINDS.get(kind)
    if wanted is not None and (not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted)):
        raise DataError(f"Invalid type for {kind.upper()}: {type(value).__name__}")  # Confluent's wording
    if kind in FLOATS:
        number = float(value)
        if not math.isfinite(number):  # JSON has no number for them (Jackson would write a string)
            raise DataError("NaN and the infinities have no JSON number")
        if style.java:  # Java's Float/Double.toString: 1.0E20, 1.0E-4, a float32's 0.1 as 0.1
            return _float32(number) if kind == "float32" else _float64(number)
        return number
    if kind == "array":
        return [to_payload(schema["items"], v, style) for v in value]
    if kind == "map":
        keys = schema["keys"]
        if keys.get("type") == "string" and not keys.get("optional"):
            return {k: to_payload(schema["values"], v, style) for k, v in value.items()}
        return [{"key": to_payload(keys, k, style), "value": to_payload(schema["values"], v, style)}
                for k, v in value.items()]
    if kind == "struct":
        if not isinstance(value, dict):
            raise DataError(f"a struct value must be a map, not {type(value).__name__}")
        if schema.get("name") == ONE_OF:
            for f in schema.get("fields", []):
                if value.get(f["field"]) is not None:
                    return to_payload({**f, "optional": True}, value[f["field"]], style)
            return None
        return {f["field"]: to_payload(f, value.get(f["field"]), style) for f in schema.get("fields", [])}
    return value


def from_payload(schema: Schema, value: Any) -> Any:
    """JSON (numbers with a fraction read as decimal.Decimal, so a Decimal keeps its digits) as the
    Connect value of `schema`, as JsonSchemaData.toConnectData."""
    if value is None:
        if schema.get("default") is not None:
            return from_json(schema, schema["default"])
        return None
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        if isinstance(value, str):
            scale = int((schema.get("parameters") or {}).get("scale", 0))
            return decimal_from_bytes(base64.b64decode(value), scale)
        return decimal.Decimal(value) if isinstance(value, int | decimal.Decimal) else decimal.Decimal(str(value))
    if kind == "bytes":
        return base64.b64decode(value) if isinstance(value, str) else value
    if kind in FLOATS:
        return float(value) if isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool) \
            else value
    if kind in INTEGERS:
        return int(value) if isinstance(value, decimal.Decimal | float) else value
    if kind == "array" and isinstance(value, list):
        return [from_payload(schema["items"], v) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: from_payload(schema["values"], v) for k, v in value.items()}
    if kind == "map" and isinstance(value, list):
        return {from_payload(schema["keys"], e.get("key")): from_payload(schema["values"], e.get("value"))
                for e in value if isinstance(e, dict)}
    if kind == "struct" and schema.get("name") == ONE_OF:
        return _union_value(schema, value)
    if kind == "struct" and isinstance(value, dict):
        return {f["field"]: from_payload(f, value.get(f["field"])) for f in schema.get("fields", [])}
    if isinstance(value, decimal.Decimal):  # a number where the schema wanted something else: as JSON reads it
        return float(value)
    return value


_JSON_KINDS = {"boolean": (bool,), "string": (str,), "bytes": (str,), "array": (list,), "map": (dict, list),
               "struct": (dict,), "float32": (int, float, decimal.Decimal), "float64": (int, float, decimal.Decimal),
               **dict.fromkeys(INTEGERS, (int,))}


def _union_value(schema: Schema, value: Any) -> dict[str, Any]:
    """The union struct with the branch the value fits set: the first whose type matches (for objects
    the branch sharing the most properties), as JsonSchemaData picks it."""
    best, best_score = None, 0
    for f in schema.get("fields", []):
        wanted = _JSON_KINDS.get(f.get("type"), ())
        fits = isinstance(value, wanted) and not (isinstance(value, bool) and bool not in wanted)
        if fits and f.get("type") != "struct":
            return {f["field"]: from_payload(f, value)}
        if fits:
            score = len({g["field"] for g in f.get("fields", [])} & set(value))
            if score > best_score:
                best, best_score = f, score
    if best is None:
        raise DataError("Did not find matching oneof field for data")
    return {best["field"]: from_payload(best, value)}


# -- the converter -----------------------------------------------------------------------------------

class JsonSchemaConverter(Converter):
    java_class = "io.confluent.connect.json.JsonSchemaConverter"
    # AvroConverter's settings (the registry, subjects, auth, cache) but its Avro name scrubbing
    config_def = ConfigDef({k: v for k, v in AvroConverter.config_def.keys.items() if k != "scrub.invalid.names"}) \
        .merged(ConfigDef().define("object.additional.properties", "boolean", True)
                .define("decimal.format", default="BASE64", choices=("base64", "numeric"))
                .define("use.optional.for.nonrequired", "boolean", False)
                .define("json.fail.invalid.schema", "boolean", False)
                .define("latest.compatibility.strict", "boolean", True)
                # Confluent's serializer settings for schemas derived from Java objects and for java.util.Date
                # values: JsonSchemaData gives a schema and numbers for dates, so they change nothing here
                .define("json.oneof.for.nullables", "boolean", True)
                .define("json.write.dates.iso8601", "boolean", False))

    def __init__(self, props: dict[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        if not self.config["schema.registry.url"]:
            raise ConfigError("schema.registry.url", "", "JsonSchemaConverter needs the Schema Registry's URL")
        user_info = self.config["basic.auth.user.info"] if self.config["basic.auth.credentials.source"] == "user_info" \
            else None
        self.registry = RegistryClient(self.config["schema.registry.url"], user_info or None)
        self.strategy = self.config["key.subject.name.strategy" if is_key else "value.subject.name.strategy"]
        self.cache_size = self.config["schemas.cache.size"]
        self.closed = not self.config["object.additional.properties"]
        self.numeric = self.config["decimal.format"] == "numeric"
        self.validate = self.config["json.fail.invalid.schema"]
        if self.validate:
            try:
                import jsonschema  # noqa: F401 - the check json.fail.invalid.schema asks for
            except ImportError:
                raise ConfigError("json.fail.invalid.schema", "true", "needs the jsonschema package "
                                  "(pip install 'klog[connect]')") from None
        self._validators: OrderedDict[int, Any] = OrderedDict()  # schema id -> its jsonschema validator
        self._values = Writing(self.closed, self.numeric, java=True)
        self._lock = threading.Lock()
        # a Connect schema's JSON text -> (its JSON Schema text, {subject: schema id}); first by the schema
        # object's identity (a connector reuses its schema objects: no JSON text of the schema per record)
        self._writers: OrderedDict[str, tuple[str, dict[str, int]]] = OrderedDict()
        self._by_object: dict[int, tuple[Schema, tuple[str, dict[str, int]]]] = {}
        self._readers: OrderedDict[tuple[int, str], Schema] = OrderedDict()  # (schema id, topic) -> Connect schema

    # Connect -> bytes
    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None:
            if value is None:
                return None  # a tombstone stays one
            raise DataError("JsonSchemaConverter writes records with a schema; this one has none (a schemaless "
                            "value: use JsonConverter with schemas.enable=false)")
        if value is None and not schema.get("optional") and schema.get("default") is None:
            return None  # Confluent's JsonSchemaData gives no JSON for it, so no record bytes
        # the value's JSON first: one its schema does not allow fails the record before anything is registered
        body = _encode_as_jackson(self._payload, schema, value, False)
        text, ids = self._writer_of(schema)
        schema_id = self._registered(topic, schema, text, ids)
        if self.validate:
            self._check(schema_id, body)
        return MAGIC + struct_.pack(">I", schema_id) + body.encode()

    def _payload(self, schema: Schema, value: Any) -> Any:
        return to_payload(schema, value, self._values)

    def _writer_of(self, schema: Schema) -> tuple[str, dict[str, int]]:
        known = self._by_object.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        key = schema_text(schema, "JsonSchemaConverter")
        hit = self._writers.get(key)
        if hit is None:
            hit = (json_schema_text(schema, self.closed, self.numeric), {})
        with self._lock:
            _put_bounded(self._writers, key, hit, self.cache_size)
            if len(self._by_object) >= self.cache_size:
                self._by_object.clear()
            self._by_object[id(schema)] = (schema, hit)  # the schema kept alive: its id is not reused meanwhile
        return hit

    def _registered(self, topic: str, schema: Schema, text: str, ids: dict[str, int]) -> int:
        """The schema id under the record's subject, asked of the registry once per subject: registered
        (auto.register.schemas), looked up, or the subject's latest (use.latest.version without
        auto.register.schemas: Confluent's serializer registers first)."""
        title = schema.get("name") if schema.get("name") != ONE_OF else None
        subject = self._subject(topic, title)
        found = ids.get(subject)
        if found is not None:
            return found
        path = f"/subjects/{quote(subject, safe='')}"
        if self.config["use.latest.version"] and not self.config["auto.register.schemas"]:
            latest = self.registry.call("GET", f"{path}/versions/latest")
            if self.config["latest.compatibility.strict"]:
                # the latest with the schemas its references name, fetched first: a registry that does not
                # answer stays a retriable failure, not a reason the latest cannot read the record
                reader = self._document(latest) if latest.get("schemaType") == "JSON" else None
                check_latest_reads(latest, "JSON", text, lambda _: backward_problems(reader, json.loads(text)))
            found = int(latest["id"])
        else:
            body = {"schemaType": "JSON", "schema": text}
            found = int(self.registry.call("POST", (f"{path}/versions" if self.config["auto.register.schemas"]
                                            else path) + normalize_query(self.config), body)["id"])
        ids[subject] = found
        return found

    def _subject(self, topic: str, title: Any) -> str:
        """The subject by avro.subject_name's strategies; RecordNameStrategy and TopicRecordNameStrategy
        name a JSON schema by its title (a Connect schema's name), as Confluent's do."""
        if not isinstance(title, str):
            if self.strategy.removeprefix(STRATEGY_PACKAGE) != "TopicNameStrategy":
                raise DataError(f"{self.strategy} needs a schema with a title (a named Connect schema)")
            title = ""
        return subject_name(self.strategy, topic, self.is_key, {"type": "record", "name": title})

    # bytes -> Connect
    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        schema_id, schema = framed_reader(data, topic, self._readers, self._lock, self.cache_size, self._reader)
        try:
            doc = json.loads(data[5:], parse_float=decimal.Decimal)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataError(f"not JSON of schema {schema_id}: {e}") from None
        if self.validate:
            self._check(schema_id, data[5:])
        if doc is None:
            return schema, None
        return schema, from_payload(schema, doc)

    def _check(self, schema_id: int, text: str | bytes) -> None:
        """json.fail.invalid.schema: the payload validated against the registered schema it is written with
        (jsonschema, its `$ref`s to the schemas its references name resolved to them), DataError naming the first
        breach. Its numbers read as floats: jsonschema's multipleOf divides by a float schema's value."""
        doc = json.loads(text)
        validator = self._validators.get(schema_id)
        if validator is None:
            import jsonschema

            found = self._document(self.registry.call("GET", f"/schemas/ids/{schema_id}"))
            validator = validator_of(found, default=jsonschema.Draft7Validator)
            with self._lock:
                _put_bounded(self._validators, schema_id, validator, self.cache_size)
        try:
            error = next(iter(validator.iter_errors(doc)), None)
        except Exception as e:  # noqa: BLE001 - jsonschema's Unresolvable (a remote $ref) and kin: no verdict
            raise DataError(f"schema {schema_id} cannot validate the JSON (json.fail.invalid.schema): "
                            f"{type(e).__name__}: {e}") from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the payload"
            raise DataError(f"the JSON does not match schema {schema_id} (json.fail.invalid.schema): "
                            f"{where}: {error.message}")

    def _reader(self, topic: str, schema_id: int) -> Schema:
        """The Connect schema of a registered JSON schema, with the version it has under the topic's subject
        when it has no connect.version (as Confluent's converter gives it)."""
        found = self.registry.call("GET", f"/schemas/ids/{schema_id}")
        if found.get("schemaType") != "JSON":
            raise DataError(f"schema {schema_id} is {found.get('schemaType', 'AVRO')}, not JSON")
        document = self._document(found, f"schema {schema_id}")
        doc = document.root
        version = None
        if not (isinstance(doc, dict) and "connect.version" in doc):
            try:
                subject = self._subject(topic, doc.get("title") if isinstance(doc, dict) else None)
                lookup: dict[str, Any] = {"schemaType": "JSON", "schema": found["schema"]}
                if found.get("references"):
                    lookup["references"] = found["references"]
                version = self.registry.call("POST", f"/subjects/{quote(subject, safe='')}", lookup).get("version")
            except DataError:  # not under that subject, or no subject for it: no version
                pass
        return connect_schema(document, version if isinstance(version, int) else None,
                              self.config["use.optional.for.nonrequired"])

    def _document(self, found: dict[str, Any], what: str = "the schema") -> Document:
        """A registry answer's JSON schema with the schemas its references name (fetched: the registry client
        klog's -s json uses too), which its `$ref`s name."""
        try:
            return document_of(found["schema"],
                               referenced_schemas(self.registry, found.get("references") or [], DataError))
        except ValueError:
            raise DataError(f"{what} is no JSON document") from None

"""Single message transforms and predicates with Kafka's names, configs and semantics
(org.apache.kafka.connect.transforms.*), and Debezium's ExtractNewRecordState.

`transforms=a,b` with `transforms.a.type=...`, optionally `transforms.a.predicate=p` and
`transforms.a.negate=true`; `predicates=p` with `predicates.p.type=...`. A transform returns the
new record or None (dropped). Schemas are JsonConverter-form dicts (klog.connect.data).
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import re
from collections.abc import Callable
from typing import Any, ClassVar

from klog.connect.config import ConfigDef, java_regex, regex_check, with_prefix
from klog.connect.data import (
    DATE,
    TIME,
    TIMESTAMP,
    TREE_PARTS_MAX,
    ConnectRecord,
    Schema,
    fields_by_name,
    primitive,
    refuse_recursive,
)
from klog.connect.errors import ConfigError, DataError

KAFKA_PKG = "org.apache.kafka.connect.transforms."


class Transform:
    config_def: ClassVar[ConfigDef] = ConfigDef()
    java_class: ClassVar[str] = ""  # the Kafka class it is (set where it is registered below)
    unimplemented: ClassVar[frozenset[str]] = frozenset()  # keys of the original accepted, not implemented
    on_key: ClassVar[bool] = False  # the $Key variant

    def __init__(self, prefix: str, props: dict[str, str]) -> None:
        try:
            self.config = self.config_def.parse(props)
        except ConfigError as e:  # name the key as the user wrote it (transforms.x.field)
            raise ConfigError(prefix + e.field, props.get(e.field), e.reason) from None
        self.prefix = prefix
        self.configure()

    def configure(self) -> None:
        pass

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError

    # the part of the record a $Key/$Value transform works on
    def operating(self, record: ConnectRecord) -> tuple[Schema | None, Any]:
        return (record.key_schema, record.key) if self.on_key else (record.value_schema, record.value)

    def replaced(self, record: ConnectRecord, schema: Schema | None, value: Any) -> ConnectRecord:
        if self.on_key:
            return record.new_record(key_schema=schema, key=value)
        return record.new_record(value_schema=schema, value=value)

    def need_map(self, value: Any, purpose: str) -> dict:
        if not isinstance(value, dict):
            raise DataError(f"Only Map objects supported in absence of schema for [{purpose}], "
                            f"found: {type(value).__name__}")
        return value


def rebuilt_struct(schema: Schema, fields: list[Schema]) -> Schema:
    """A struct schema with new fields as Kafka's transforms build it (SchemaUtil.copySchemaBasics into
    SchemaBuilder.struct()): name, version, doc and parameters kept, and required whatever the input was."""
    return {**schema, "optional": False, "fields": fields}


def _field_spec(text: str | None) -> tuple[str | None, bool]:
    """InsertField's `name!` (required) / `name?` (optional, the default)."""
    if not text:
        return None, True
    if text[-1] in "!?":
        return text[:-1], text[-1] == "?"
    return text, True


class InsertField(Transform):
    config_def = (ConfigDef().define("topic.field", default=None).define("partition.field", default=None)
                  .define("offset.field", default=None).define("timestamp.field", default=None)
                  .define("static.field", default=None).define("static.value", default=None)
                  .define("replace.null.with.default", "boolean", True))

    def configure(self) -> None:
        c = self.config
        self.adds: list[tuple[str, bool, str, Callable[[ConnectRecord], Any]]] = []
        for key, type_, name, get in (
                ("topic.field", "string", None, lambda r: r.topic),
                ("partition.field", "int32", None, lambda r: r.kafka_partition),
                ("offset.field", "int64", None, lambda r: r.kafka_offset),
                ("timestamp.field", "int64", TIMESTAMP, lambda r: r.timestamp),
                ("static.field", "string", None, lambda r: c["static.value"])):
            field, optional = _field_spec(c[key])
            if field:
                self.adds.append((field, optional, type_, get) if name is None else (field, optional, type_, get))
                if name:
                    self._timestamp_field = field

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record  # tombstones pass (Kafka 2.x+)
        if schema is None:
            out = dict(self.need_map(value, "field insertion"))
            for field, optional, _, get in self.adds:
                v = get(record)
                if v is None and not optional:
                    raise DataError(f"{field} is required but the record has none")
                out[field] = v
            return self.replaced(record, None, out)
        fields = list(schema.get("fields", []))
        out = dict(value)
        for field, optional, type_, get in self.adds:
            extra = {"name": TIMESTAMP, "version": 1} if type_ == "int64" and field == getattr(
                self, "_timestamp_field", None) else {}
            fields.append({"type": type_, "optional": optional, **extra, "field": field})
            out[field] = get(record)
        return self.replaced(record, rebuilt_struct(schema, fields), out)


class ReplaceField(Transform):
    config_def = (ConfigDef().define("exclude", "list", []).define("include", "list", [])
                  .define("blacklist", "list", []).define("whitelist", "list", [])
                  .define("renames", "list", []).define("replace.null.with.default", "boolean", True))

    def configure(self) -> None:
        c = self.config
        self.exclude = set(c["exclude"] or c["blacklist"])
        self.include = set(c["include"] or c["whitelist"])
        self.renames: dict[str, str] = {}
        for pair in c["renames"]:
            old, sep, new = pair.partition(":")
            if not sep or not old or not new:
                raise ConfigError(self.prefix + "renames", ",".join(c["renames"]), "must be a list of old:new pairs")
            self.renames[old] = new

    def _kept(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record
        if schema is None:
            data = self.need_map(value, "field replacement")
            return self.replaced(record, None, {self.renames.get(k, k): v for k, v in data.items() if self._kept(k)})
        fields = [{**f, "field": self.renames.get(f["field"], f["field"])}
                  for f in schema.get("fields", []) if self._kept(f["field"])]
        out = {self.renames.get(k, k): v for k, v in value.items() if self._kept(k)}
        return self.replaced(record, rebuilt_struct(schema, fields), out)


_MASKS = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0, "boolean": False,
          "string": "", "bytes": b"", "array": [], "map": {}}


def _mask_for(value: Any) -> Any:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, str):
        return ""
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    return None


class MaskField(Transform):
    config_def = ConfigDef().define("fields", "list").define("replacement", default=None) \
        .define("replace.null.with.default", "boolean", True)

    def _masked(self, type_: str | None, value: Any) -> Any:
        replacement = self.config["replacement"]
        if replacement is None:
            return _MASKS.get(type_, None) if type_ else _mask_for(value)
        kind = type_ or ("int64" if isinstance(value, int) and not isinstance(value, bool) else
                         "float64" if isinstance(value, float) else "string")
        try:
            if kind.startswith("int"):
                return int(replacement)
            if kind.startswith("float"):
                return float(replacement)
        except ValueError:
            raise DataError(f"Invalid value {replacement} for type {kind}") from None
        if kind == "string":
            return replacement
        raise DataError(f"Cannot mask value of type {kind} with custom replacement")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record
        types = {n: f.get("type") for n, f in fields_by_name(schema).items()}
        data = dict(value if schema is not None else self.need_map(value, "masking"))
        for name in self.config["fields"]:
            if name in data:
                data[name] = self._masked(types.get(name), data[name])
        return self.replaced(record, schema, data)


class ValueToKey(Transform):
    config_def = ConfigDef().define("fields", "list").define("replace.null.with.default", "boolean", True)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value is None:
            return record
        names = self.config["fields"]
        if record.value_schema is None:
            data = self.need_map(record.value, "copying fields from value to key")
            return record.new_record(key_schema=None, key={n: data.get(n) for n in names})
        by_name = fields_by_name(record.value_schema)
        missing = [n for n in names if n not in by_name]
        if missing:
            raise DataError(f"Field does not exist: {missing[0]}")
        key_schema = {"type": "struct", "optional": False, "fields": [by_name[n] for n in names]}
        return record.new_record(key_schema=key_schema, key={n: record.value.get(n) for n in names})


class HoistField(Transform):
    """The whole key or value wrapped in a one-field struct (with a schema) or map (without)."""

    config_def = ConfigDef().define("field")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        name = self.config["field"]
        if schema is None:
            return self.replaced(record, None, {name: value})
        # Kafka's SchemaBuilder.struct().field(name, schema): a required struct without a name
        return self.replaced(record, {"type": "struct", "fields": [{**schema, "field": name}], "optional": False},
                             {name: value})


class _TooLarge(Exception):
    pass


class Flatten(Transform):
    """Nested structs (maps without a schema) flattened into one level, their names joined by `delimiter`;
    a field under an optional struct is optional, as Kafka's Flatten makes it. Arrays and maps with a
    schema are kept whole."""

    config_def = ConfigDef().define("delimiter", default=".")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record
        if schema is None:
            out: dict = {}
            self._flat_map(self.need_map(value, "flattening"), "", out)
            return self.replaced(record, None, out)
        fields: list[Schema] = []
        out = {}
        try:
            self._flat_struct(schema, value, "", schema.get("optional", False), fields, out, [TREE_PARTS_MAX, set()])
        except _TooLarge:  # structs sharing structs (named types met again, as the Avro and Protobuf converters
            # read them): flattened, a field per path through them
            raise DataError(f"Flatten takes no schema of more than {TREE_PARTS_MAX} fields flattened (its structs "
                            "share structs, as named types met again are read)") from None
        except RecursionError:  # a struct holding itself as a struct field (Kafka's recurses until its stack
            # overflows; through a map or an array, as google.protobuf.Struct's, it is kept whole: flattened)
            refuse_recursive(schema, "Flatten")
            raise DataError("Flatten: a schema nested too deeply") from None
        return self.replaced(record, rebuilt_struct(schema, fields), out)

    def _name(self, prefix: str, name: str) -> str:
        return f"{prefix}{self.config['delimiter']}{name}" if prefix else name

    def _flat_map(self, data: dict, prefix: str, out: dict) -> None:
        for name, v in data.items():
            if isinstance(v, dict):
                self._flat_map(v, self._name(prefix, name), out)
            else:
                out[self._name(prefix, name)] = v

    def _flat_struct(self, schema: Schema, value: dict | None, prefix: str, optional: bool, fields: list,
                     out: dict, budget: list) -> None:
        """`budget`: [the fields left to flatten, the ids of the fields lists met]: past it, where a struct's fields
        were met twice (shared), _TooLarge (a tree is flattened as it is)."""
        fields_of = schema.get("fields") or []
        budget[0] -= len(fields_of) + 1
        if fields_of:
            if id(fields_of) in budget[1]:
                budget[1].add(0)  # (no list has id 0) a part shared
            budget[1].add(id(fields_of))
        if budget[0] < 0 and 0 in budget[1]:
            raise _TooLarge
        for f in fields_of:
            name = self._name(prefix, f["field"])
            is_optional = optional or f.get("optional", False)
            child = None if value is None else value.get(f["field"])
            if f.get("type") == "struct":
                self._flat_struct(f, child, name, is_optional, fields, out, budget)
                continue
            fields.append({**{k: v for k, v in f.items() if k not in ("field", "optional")},
                           "optional": is_optional, "field": name})
            out[name] = child


class SetSchemaMetadata(Transform):
    """The key's or value's schema renamed (`schema.name`) or re-versioned (`schema.version`); the data
    stays. A record without a schema is refused, as Kafka's requireSchema does."""

    config_def = ConfigDef().define("schema.name", default=None).define("schema.version", "int", None) \
        .define("replace.null.with.default", "boolean", True)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if schema is None and value is None:
            return record  # a tombstone passes (newer Kafka)
        if schema is None:
            raise DataError("Schema required for [updating schema metadata]")
        updated = dict(schema)
        if self.config["schema.name"] is not None:
            updated["name"] = self.config["schema.name"]
        if self.config["schema.version"] is not None:
            updated["version"] = self.config["schema.version"]
        return self.replaced(record, updated, value)


class ExtractField(Transform):
    config_def = ConfigDef().define("field").define("field.syntax.version", default="V1", choices=("v1", "v2"))

    def _get(self, schema: Schema | None, value: Any) -> tuple[Schema | None, Any]:
        name = self.config["field"]
        path = name.split(".") if self.config["field.syntax.version"] == "v2" else [name]
        for name in path:
            if value is None:
                return None, None
            if schema is None:
                value = self.need_map(value, "field extraction").get(name)
            else:
                child = fields_by_name(schema).get(name)
                if child is None:
                    raise DataError(f"Unknown field: {name}")
                schema = {k: v for k, v in child.items() if k != "field"}
                value = value.get(name)
        return schema, value

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record
        return self.replaced(record, *self._get(schema, value))


_CAST_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")


def _cast(value: Any, to: str) -> Any:
    if value is None:
        return None
    try:
        if to.startswith("int"):
            if isinstance(value, str):
                return int(float(value)) if "." in value else int(value)
            return int(value)
        if to.startswith("float"):
            return float(value)
        if to == "boolean":
            if isinstance(value, str):
                return value.strip().lower() == "true"
            return bool(value)
        if isinstance(value, bytes | bytearray):
            return base64.b64encode(value).decode()
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    except (TypeError, ValueError):
        raise DataError(f"Cannot cast {value!r} to {to}") from None


class Cast(Transform):
    config_def = ConfigDef().define("spec", "list").define("replace.null.with.default", "boolean", True)

    def configure(self) -> None:
        self.whole: str | None = None
        self.casts: dict[str, str] = {}
        for item in self.config["spec"]:
            name, sep, to = item.rpartition(":")
            if to not in _CAST_TYPES:
                raise ConfigError(self.prefix + "spec", ",".join(self.config["spec"]),
                                  f"invalid type '{to}': use {', '.join(_CAST_TYPES)}")
            if sep:
                self.casts[name] = to
            elif len(self.config["spec"]) == 1:
                self.whole = to
            else:
                raise ConfigError(self.prefix + "spec", ",".join(self.config["spec"]),
                                  "a whole-value cast stands alone")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record
        if self.whole is not None:
            return self.replaced(record, primitive(self.whole, (schema or {}).get("optional", True))
                                 if schema is not None else None, _cast(value, self.whole))
        data = dict(value if schema is not None else self.need_map(value, "casting"))
        for name, to in self.casts.items():
            if name in data:
                data[name] = _cast(data[name], to)
        if schema is not None:
            schema = rebuilt_struct(schema, [
                {"type": self.casts[f["field"]], "optional": f.get("optional", True), "field": f["field"]}
                if f["field"] in self.casts else f for f in schema.get("fields", [])])
        return self.replaced(record, schema, data)


# -- time --------------------------------------------------------------------------------------------
_JAVA_FORMAT = [("yyyy", "%Y"), ("yy", "%y"), ("MMMM", "%B"), ("MMM", "%b"), ("MM", "%m"), ("dd", "%d"),
                ("HH", "%H"), ("hh", "%I"), ("mm", "%M"), ("ss", "%S"), ("SSS", "%f"), ("a", "%p"),
                ("XXX", "%:z"), ("Z", "%z"), ("X", "%z"), ("EEE", "%a"), ("D", "%j")]


def java_to_strftime(pattern: str) -> str:
    """A java.text.SimpleDateFormat pattern as strftime's (the letters Kafka's users write)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "'":
            end = pattern.find("'", i + 1)
            end = len(pattern) if end < 0 else end
            out.append(pattern[i + 1:end].replace("%", "%%") or "'")
            i = end + 1
            continue
        for java, py in _JAVA_FORMAT:
            if pattern.startswith(java, i):
                out.append(py)
                i += len(java)
                break
        else:
            out.append(pattern[i].replace("%", "%%"))
            i += 1
    return "".join(out)


def format_millis(ms: int, pattern: str) -> str:
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    fmt = java_to_strftime(pattern)
    text = when.strftime(fmt.replace("%f", "\x01"))  # strftime's %f is microseconds; Java's SSS millis
    return text.replace("\x01", f"{ms % 1000:03d}")


def parse_millis(text: str, pattern: str) -> int:
    fmt = java_to_strftime(pattern)
    try:
        when = dt.datetime.strptime(text, fmt)
    except ValueError as e:
        raise DataError(f"Could not parse timestamp: value ({text}) does not match pattern ({pattern}): {e}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    millis = when.microsecond // 1000 if "%f" in fmt else 0
    return int(when.replace(microsecond=0).timestamp()) * 1000 + millis


class TimestampConverter(Transform):
    config_def = (ConfigDef().define("field", default="").define(
        "target.type", choices=("string", "unix", "date", "time", "timestamp"))
        .define("format", default="").define("unix.precision", default="milliseconds",
                                             choices=("seconds", "milliseconds", "microseconds", "nanoseconds"))
        .define("replace.null.with.default", "boolean", True))
    _UNIX = {"seconds": 1000, "milliseconds": 1, "microseconds": 0.001, "nanoseconds": 0.000001}

    def configure(self) -> None:
        if self.config["target.type"] == "string" and not self.config["format"]:
            raise ConfigError(self.prefix + "format", "", "TimestampConverter requires format option to be "
                              "specified when using string timestamps")

    def _millis(self, value: Any, schema: Schema | None) -> int:
        name = (schema or {}).get("name")
        if isinstance(value, str):
            if not self.config["format"]:
                raise DataError("a string timestamp needs the format option")
            return parse_millis(value, self.config["format"])
        if isinstance(value, dt.datetime):
            return int(value.timestamp() * 1000)
        if name == DATE:
            return int(value) * 86_400_000
        if name in (TIMESTAMP, TIME):
            return int(value)
        return int(int(value) * self._UNIX[self.config["unix.precision"]])

    def _convert(self, value: Any, schema: Schema | None) -> tuple[Schema, Any]:
        optional = (schema or {}).get("optional", True)
        if value is None:
            return primitive("int64", optional), None
        ms = self._millis(value, schema)
        target = self.config["target.type"]
        if target == "string":
            return primitive("string", optional), format_millis(ms, self.config["format"])
        if target == "unix":
            return primitive("int64", optional), int(ms / self._UNIX[self.config["unix.precision"]])
        if target == "date":
            return primitive("int32", optional, DATE, version=1), ms // 86_400_000
        if target == "time":
            return primitive("int32", optional, TIME, version=1), ms % 86_400_000
        return primitive("int64", optional, TIMESTAMP, version=1), ms

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        field = self.config["field"]
        if not field:
            if value is None:
                return record
            return self.replaced(record, *self._convert(value, schema)) if schema is not None else \
                self.replaced(record, None, self._convert(value, None)[1])
        if value is None:
            return record
        data = dict(value if schema is not None else self.need_map(value, "converting timestamp formats"))
        child = fields_by_name(schema).get(field)
        new_schema, data[field] = self._convert(data.get(field), child)
        if schema is not None:
            schema = rebuilt_struct(schema, [{**new_schema, "field": field} if f["field"] == field else f
                                             for f in schema.get("fields", [])])
        return self.replaced(record, schema, data)


# -- routing -----------------------------------------------------------------------------------------
def java_replacement(text: str) -> str:
    """Java's $1 / ${name} group references as Python's."""
    return re.sub(r"\$(\d+)|\$\{(\w+)\}", lambda m: f"\\g<{m.group(1) or m.group(2)}>", text.replace("\\", "\\\\"))


class RegexRouter(Transform):
    config_def = ConfigDef().define("regex", check=regex_check).define("replacement")

    def configure(self) -> None:
        self.regex = java_regex(self.config["regex"])
        self.replacement = java_replacement(self.config["replacement"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        m = self.regex.fullmatch(record.topic)
        return record.new_record(topic=m.expand(self.replacement)) if m else record


class TimestampRouter(Transform):
    config_def = ConfigDef().define("topic.format", default="${topic}-${timestamp}") \
        .define("timestamp.format", default="yyyyMMdd")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.timestamp is None or record.timestamp < 0:
            raise DataError(f"Timestamp missing on record: {record.topic}")
        stamp = format_millis(record.timestamp, self.config["timestamp.format"])
        return record.new_record(topic=self.config["topic.format"].replace("${topic}", record.topic)
                                 .replace("${timestamp}", stamp))


class Filter(Transform):
    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return None  # every record: a predicate chooses which


# -- headers -----------------------------------------------------------------------------------------
def header_bytes(value: Any) -> bytes | None:
    """A header value as Kafka's SimpleHeaderConverter writes it: strings raw, the rest as JSON."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    from klog.connect.converters import _json_default

    return json.dumps(value, separators=(",", ":"), default=_json_default).encode()


class HeaderFrom(Transform):
    config_def = (ConfigDef().define("fields", "list").define("headers", "list")
                  .define("operation", choices=("move", "copy")).define("replace.null.with.default", "boolean", True))

    def configure(self) -> None:
        if len(self.config["fields"]) != len(self.config["headers"]):
            raise ConfigError(self.prefix + "headers", ",".join(self.config["headers"]),
                              "'fields' config must have the same number of elements as 'headers' config")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operating(record)
        if value is None:
            return record
        data = self.need_map(value, "header from field") if schema is None else value
        headers = list(record.headers)
        for f, h in zip(self.config["fields"], self.config["headers"], strict=True):
            headers.append((h, header_bytes(data.get(f))))
        out = record.new_record(headers=headers)
        if self.config["operation"] == "move":
            moved = set(self.config["fields"])
            data = {k: v for k, v in data.items() if k not in moved}
            if schema is not None:
                schema = rebuilt_struct(schema, [f for f in schema.get("fields", []) if f["field"] not in moved])
            out = self.replaced(out, schema, data)
        return out


class InsertHeader(Transform):
    config_def = ConfigDef().define("header").define("value.literal")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return record.new_record(headers=[*record.headers, (self.config["header"],
                                                            self.config["value.literal"].encode())])


class DropHeaders(Transform):
    config_def = ConfigDef().define("headers", "list")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        drop = set(self.config["headers"])
        return record.new_record(headers=[h for h in record.headers if h[0] not in drop])


# -- predicates --------------------------------------------------------------------------------------
class Predicate:
    config_def: ClassVar[ConfigDef] = ConfigDef()
    unimplemented: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, prefix: str, props: dict[str, str]) -> None:
        try:
            self.config = self.config_def.parse(props)
        except ConfigError as e:
            raise ConfigError(prefix + e.field, props.get(e.field), e.reason) from None

    def test(self, record: ConnectRecord) -> bool:
        raise NotImplementedError


class TopicNameMatches(Predicate):
    config_def = ConfigDef().define("pattern", check=regex_check)

    def __init__(self, prefix: str, props: dict[str, str]) -> None:
        super().__init__(prefix, props)
        self.pattern = java_regex(self.config["pattern"])

    def test(self, record: ConnectRecord) -> bool:
        return self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    config_def = ConfigDef().define("name")

    def test(self, record: ConnectRecord) -> bool:
        return any(h[0] == self.config["name"] for h in record.headers)


class RecordIsTombstone(Predicate):
    def test(self, record: ConnectRecord) -> bool:
        return record.value is None


# -- the registry: Kafka's class names, their simple names, klog's ----------------------------------
def _keyed(cls: type[Transform], on_key: bool) -> type[Transform]:
    name = f"{cls.__name__}${'Key' if on_key else 'Value'}"
    return type(name, (cls,), {"on_key": on_key, "java_class": KAFKA_PKG + name})


TRANSFORMS: dict[str, type[Transform]] = {}
for _cls in (InsertField, ReplaceField, MaskField, HoistField, Flatten, SetSchemaMetadata, ExtractField, Cast,
             TimestampConverter, HeaderFrom):
    for _side in ("Key", "Value"):
        _variant = _keyed(_cls, _side == "Key")
        for _name in (f"{KAFKA_PKG}{_cls.__name__}${_side}", f"{_cls.__name__}${_side}"):
            TRANSFORMS[_name] = _variant
for _cls in (ValueToKey, RegexRouter, TimestampRouter, Filter, InsertHeader, DropHeaders):
    TRANSFORMS[KAFKA_PKG + _cls.__name__] = TRANSFORMS[_cls.__name__] = _cls
    _cls.java_class = KAFKA_PKG + _cls.__name__
PREDICATES: dict[str, type[Predicate]] = {}
for _pcls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone):
    PREDICATES[KAFKA_PKG + "predicates." + _pcls.__name__] = PREDICATES[_pcls.__name__] = _pcls
DEBEZIUM = {"io.debezium.transforms.ExtractNewRecordState": "ExtractNewRecordState",
            "ExtractNewRecordState": "ExtractNewRecordState",
            "io.debezium.transforms.outbox.EventRouter": "EventRouter", "EventRouter": "EventRouter",
            "io.debezium.transforms.ToLogicalTopicRouter": "ToLogicalTopicRouter",
            "ToLogicalTopicRouter": "ToLogicalTopicRouter",
            "io.debezium.transforms.ByLogicalTableRouter": "ByLogicalTableRouter",
            "ByLogicalTableRouter": "ByLogicalTableRouter"}
_DEBEZIUM_JAVA = {f"klog.connect.debezium.{short}": full for full, short in DEBEZIUM.items() if "." in full}


def class_name(cls: type) -> str:
    """The class Kafka names for a failed transform (ErrorReporter's executing class, the DLQ's
    __connect.errors.class.name): its Java class (Kafka's, Debezium's; a subclass is not it), else the
    Python class's dotted name."""
    python = f"{cls.__module__}.{cls.__qualname__}"
    return cls.__dict__.get("java_class") or _DEBEZIUM_JAVA.get(python) or python


def _find(kind: str, registry: dict, name: str, key: str) -> type:
    if name in registry:
        return registry[name]
    if kind == "transforms" and name in DEBEZIUM:
        from klog.connect import debezium

        return getattr(debezium, DEBEZIUM[name])
    from klog.connect.api import load_class

    if ":" in name:
        try:
            return load_class(name)
        except (ImportError, AttributeError) as e:
            raise ConfigError(key, name, f"cannot load it ({e})") from None
    known = sorted({n.rsplit(".", 1)[-1].split("$")[0] for n in registry} | (set(DEBEZIUM.values())
                                                                          if kind == "transforms" else set()))
    raise ConfigError(key, name, f"klog does not implement this {kind[:-1]}; it has {', '.join(known)}")


class Chain:
    """The configured transforms in order, each behind its optional predicate."""

    def __init__(self, props: dict[str, str]) -> None:
        predicates = {}
        self.ignored: list[str] = []  # keys a transform or predicate does not implement (or know), in full
        for alias in _list(props.get("predicates")):
            prefix = f"predicates.{alias}."
            own = with_prefix(props, prefix)
            cls = _find("predicates", PREDICATES, own.pop("type", ""), prefix + "type")
            predicates[alias] = cls(prefix, own)
            self._note_ignored(cls, prefix, own)
        self.steps: list[tuple[str, Transform, Predicate | None, bool]] = []
        # each step as Kafka's TransformationStage: the class a failure names (the transform's, a failure
        # of its predicate's test too: TransformationStage.apply runs both) and the step itself
        self.stages: list[tuple[str, Callable[[ConnectRecord], ConnectRecord | None]]] = []
        for alias in _list(props.get("transforms")):
            prefix = f"transforms.{alias}."
            own = with_prefix(props, prefix)
            cls = _find("transforms", TRANSFORMS, own.pop("type", ""), prefix + "type")
            pred_name, negate = own.pop("predicate", None), own.pop("negate", "false").lower() == "true"
            if pred_name is not None and pred_name not in predicates:
                raise ConfigError(prefix + "predicate", pred_name, "no such predicate in 'predicates'")
            step = (alias, cls(prefix, own), predicates.get(pred_name) if pred_name else None, negate)
            self.steps.append(step)
            # (a step without a predicate is its transform's apply itself: one call less per record)
            apply = step[1].apply if step[2] is None else functools.partial(_apply_step, *step[1:])
            self.stages.append((class_name(cls), apply))
            self._note_ignored(cls, prefix, own)

    def _note_ignored(self, cls: type, prefix: str, own: dict[str, str]) -> None:
        known = getattr(cls, "config_def", ConfigDef()).keys
        unimplemented = getattr(cls, "unimplemented", frozenset())
        self.ignored += [prefix + k for k in own if k not in known or k in unimplemented]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        for _, apply in self.stages:
            record = apply(record)
            if record is None:
                return None
        return record

    def __bool__(self) -> bool:
        return bool(self.steps)


def _apply_step(transform: Transform, predicate: Predicate | None, negate: bool,
                record: ConnectRecord) -> ConnectRecord | None:
    """One step (Kafka's TransformationStage.apply): the transform, where its predicate (negated or not)
    says so."""
    if predicate is not None and predicate.test(record) == negate:
        return record
    return transform.apply(record)


def _list(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]

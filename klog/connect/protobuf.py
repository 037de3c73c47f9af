"""Confluent's ProtobufConverter (`io.confluent.connect.protobuf.ProtobufConverter`): Connect data as Protobuf
in Confluent's wire format (magic byte 0, the schema's 4-byte id, the message indexes, the message), the
schemas registered in and read from a Schema Registry (AvroConverter's client, subject name strategies
and caching rules: klog/connect/avro.py).

Connect schemas map to Protobuf as Confluent's ProtobufData maps them: a struct is a proto3 message named
after it (its namespace the package; unnamed ones ConnectDefault<n>), its fields numbered in order (or by
their io.confluent.connect.protobuf.Tag), nested structs nested messages (a name equal to its field's gets
"Message"), arrays repeated fields, maps repeated <Name>Entry messages of key and value, int8/int16 an int32
with a `connect.type` in the field's (confluent.field_meta), Decimal a confluent.type.Decimal (its
precision and scale in the field's meta), Date google.type.Date, Time google.type.TimeOfDay, Timestamp
google.protobuf.Timestamp, structs named io.confluent.connect.protobuf.Union.* oneofs, strings with
io.confluent.connect.protobuf.Enum parameters enums; optional fields plain proto3 fields, `optional` ones
with optional.for.nullables, google.protobuf wrappers with wrapper.for.nullables; a primitive at the top its
wrapper message. The other way reads any Protobuf schema as ProtobufData.toConnectSchema does (every field
optional but with wrapper.for.nullables or optional.for.nullables, oneofs union structs named
<oneof>_<index>, enums strings (int32 with int.for.enums), a field's number its Tag parameter). A recursive
message (google.protobuf.Struct, Value, ListValue, a message holding its own type) is a Connect schema holding
itself, as Confluent's ToConnectContext and SchemaWrapper make it: a message met again inside itself is a struct
sharing the fields list of the one being made (klog.connect.data: recursive_struct, schema_key); written back,
such a field is one of the enclosing message's type, by its name; values nest at most MESSAGE_DEPTH_MAX messages.

A Connect default is not written into the proto3 schema: Confluent's ProtobufData sets it on its descriptor,
but its ProtobufSchema prints defaults for proto2 only, so the registered text has none either (and protobuf's
own descriptor pool refuses explicit proto3 defaults). The .proto text is made with klog.protocol's
model and canonical text; the messages with the protobuf package's classes of that schema, built here from its
descriptor so a value is converted before its schema is registered (with use.latest.version, the latest's
classes, fetched), by klog.client.protobuf_codec: one parser, one framing.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct as struct_
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import quote

from klog.connect.avro import (
    MAGIC,
    AvroConverter,
    RegistryClient,
    _ordered,
    _put_bounded,
    framed_reader,
    normalize_query,
    scrub_name,
    split_name,
    subject_name,
)
from klog.connect.config import ConfigDef
from klog.connect.converters import Converter, decimal_from_bytes, from_json
from klog.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, Schema, from_epoch_days, schema_key
from klog.connect.errors import ConfigError, DataError
from klog.protocol import protobuf_schema as proto

NAMESPACE = "io.confluent.connect.protobuf"
DEFAULT_NAME = "ConnectDefault"
ENUM = NAMESPACE + ".Enum"
UNION = NAMESPACE + ".Union"
TAG = NAMESPACE + ".Tag"
TYPE = NAMESPACE + ".Type"
WRAPPER_MARK = NAMESPACE + ".Wrapper"
GENERAL_ENUM = "org.apache.kafka.connect.data.Enum"  # generalized.sum.type.support's parameters
GENERAL_UNION = "org.apache.kafka.connect.data.Union"
PRECISION_PARAM = "connect.decimal.precision"
FIELD_META = "(confluent.field_meta)"
META_FILE = "confluent/meta.proto"
MAP_ENTRY = "Entry"

DECIMAL_TYPE, DATE_TYPE, TIME_TYPE, TIMESTAMP_TYPE = (
    "confluent.type.Decimal", "google.type.Date", "google.type.TimeOfDay", "google.protobuf.Timestamp")
LOGICAL_TYPES = {DECIMAL: DECIMAL_TYPE, DATE: DATE_TYPE, TIME: TIME_TYPE, TIMESTAMP: TIMESTAMP_TYPE}
MESSAGE_DEPTH_MAX = 100  # messages nested below the root: Protobuf's parsers' recursion limit (Java's, upb's)
READERS_MAX = 4096  # structs' compiled readers (or writers) kept by a converter, shared structs' reused
CONNECT_FIELDS_MAX = 50_000  # fields of a read schema's Connect schema, nested ones counted (Debezium's widest: ~10k)
TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)  # 0001-01-01T00:00:00Z, 9999-12-31T23:59:59Z
WRAPPERS_FILE = "google/protobuf/wrappers.proto"
IMPORTS = {DECIMAL_TYPE: "confluent/type/decimal.proto", DATE_TYPE: "google/type/date.proto",
           TIME_TYPE: "google/type/timeofday.proto", TIMESTAMP_TYPE: "google/protobuf/timestamp.proto"}
# a Connect type -> its scalar, and the wrapper message of a nullable or top-level one
SCALARS = {"int8": "int32", "int16": "int32", "int32": "int32", "int64": "int64", "float32": "float",
           "float64": "double", "boolean": "bool", "string": "string", "bytes": "bytes"}
WRAPPER_OF = {"int8": "Int32Value", "int16": "Int32Value", "int32": "Int32Value", "int64": "Int64Value",
              "float32": "FloatValue", "float64": "DoubleValue", "boolean": "BoolValue", "string": "StringValue",
              "bytes": "BytesValue"}
INT64_WRAPPER_OF = {"uint32": "UInt32Value", "fixed32": "UInt32Value", "uint64": "UInt64Value",
                    "fixed64": "UInt64Value"}
UNWRAPPED = {"google.protobuf.DoubleValue": "float64", "google.protobuf.FloatValue": "float32",
             "google.protobuf.Int64Value": "int64", "google.protobuf.UInt64Value": "int64",
             "google.protobuf.Int32Value": "int32", "google.protobuf.UInt32Value": "int64",
             "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
             "google.protobuf.BytesValue": "bytes"}


def protobuf_package(field_name: str = "value.converter") -> None:
    try:
        import google.protobuf  # noqa: F401 - only whether it is there
    except ImportError:
        raise ConfigError(field_name, "io.confluent.connect.protobuf.ProtobufConverter",
                          "needs the protobuf package: pip install 'klog[connect]'") from None


@dataclass(frozen=True)
class Options:
    """ProtobufDataConfig's settings that change a schema or a value."""

    scrub: bool = False
    enhanced: bool = False  # enhanced.protobuf.schema.support: full names (package kept) in Connect schemas
    int_for_enums: bool = False
    optional_for_nullables: bool = False
    optional_for_proto2: bool = True
    wrapper_for_nullables: bool = False
    wrapper_for_raw_primitives: bool = True
    struct_for_nulls: bool = False
    index_for_unions: bool = True
    flatten_unions: bool = False
    generalized: bool = False  # generalized.sum.type.support
    ignore_default_for_nullables: bool = False

    def name(self, name: str) -> str:
        return scrub_protobuf_name(name) if self.scrub else name

    @property
    def enum_param(self) -> str:
        return GENERAL_ENUM if self.generalized else ENUM


def scrub_protobuf_name(name: str) -> str:
    """ProtobufData's doScrubName: Avro's scrubbing, and an 'x' before a leading '_' as before a digit."""
    if name and name[0] == "_":
        return scrub_name("x" + name)
    return scrub_name(name)


def _params(schema: Schema) -> dict[str, str]:
    return schema.get("parameters") or {}


def is_union(schema: Schema) -> bool:
    return schema.get("type") == "struct" and ((schema.get("name") or "").startswith(UNION)
                                                or GENERAL_UNION in _params(schema))


def _is_enum(schema: Schema) -> bool:
    params = _params(schema)
    return GENERAL_ENUM in params or ENUM in params


def _wrapped(schema: Schema, options: Options, oneof_member: bool) -> bool:
    """Whether a nullable scalar is written as its google.protobuf wrapper (wrapper.for.nullables)."""
    return options.wrapper_for_nullables and bool(schema.get("optional")) and (
        not oneof_member or _params(schema).get(WRAPPER_MARK) == "true")


# -- Connect schema -> .proto --------------------------------------------------------------------------
@dataclass
class ProtoOfConnect:
    """A Connect schema's Protobuf schema: the file, its canonical text, and the written message's full name."""

    file: proto.ProtoFile
    text: str
    message: str


def proto_schema(schema: Schema, options: Options = Options()) -> ProtoOfConnect:
    """ProtobufData.fromConnectSchema."""
    kind = schema.get("type")
    if kind in WRAPPER_OF:
        if schema.get("name") in LOGICAL_TYPES:
            raise DataError(f"a top-level {schema['name']} has no Protobuf schema (Confluent's converter fails it too)")
        wrappers = proto.well_known()[WRAPPERS_FILE]
        return ProtoOfConnect(wrappers, proto.canonical_text(wrappers), "google.protobuf." + WRAPPER_OF[kind])
    if kind != "struct":
        raise DataError(f"Unsupported root schema of type {kind}")
    try:
        return _ToProto(options).file(schema)
    except (ValueError, TypeError, KeyError) as e:  # a Tag or enum number that is no integer, a malformed schema
        raise DataError(f"Invalid protobuf schema definition: {type(e).__name__}: {e}") from None
    except RecursionError:  # a union holding itself (no message to name), or nesting no stack holds
        raise DataError("Invalid protobuf schema definition: a schema nested too deeply (or a union holding "
                        "itself)") from None


class _ToProto:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.unnamed = 0
        self.imports: list[str] = []
        self.children: dict[int, set[str]] = {}  # id of a Message -> the nested messages defined in it
        # the structs whose messages are being made: id of their fields -> the message (a struct holding itself, a
        # recursive schema, is a field of that message's type: by its name, found in the enclosing scope)
        self.open: dict[int, proto.Message] = {}
        self.scope: list[proto.Message] = []  # the messages being made (map entries too), outermost first
        # each field naming an enclosing message: (the field, the messages around it, the message it names)
        self.back: list[tuple[proto.Field, list[proto.Message], proto.Message]] = []
        # the structs whose messages are made: id of their fields -> (the fields, the messages down to theirs). A
        # struct met again elsewhere (its fields shared: a named type the Avro or Protobuf converter read once) is
        # a field of that message's type by its full name, not another copy: the schema grows with its structs,
        # not with the paths through them (Confluent's copies it into each message holding it)
        self.made: dict[int, tuple[list[Schema], list[proto.Message]]] = {}
        self.elsewhere: list[tuple[proto.Field, list[proto.Message]]] = []  # fields naming such a message

    def file(self, schema: Schema) -> ProtoOfConnect:
        namespace, name = self._split(self._name_or_default(schema.get("name")))
        out = proto.ProtoFile(syntax="proto3", package=namespace)
        out.types.append(self._message(name, schema))
        out.imports = self.imports
        self._qualify(namespace)
        for named, path in self.elsewhere:
            named.type = "." + ".".join([*([namespace] if namespace else []), *(m.name for m in path)])
        return ProtoOfConnect(out, proto.canonical_text(out), f"{namespace}.{name}" if namespace else name)

    def _name_or_default(self, name: str | None) -> str:
        if name:
            return name
        self.unnamed += 1
        return f"{DEFAULT_NAME}{self.unnamed}"

    def _split(self, full: str) -> tuple[str | None, str]:
        namespace, name = split_name(".".join(self.options.name(p) for p in full.split(".")))
        return namespace, name

    def _unqualified(self, name: str | None) -> str:
        return self.options.name(self._name_or_default(name).rpartition(".")[2])

    def _import(self, file: str) -> None:
        if file not in self.imports:
            self.imports.append(file)

    def _qualify(self, namespace: str | None) -> None:
        """A field naming an enclosing message by its name finds the nearest type of that name (protoc's
        scoping: from the field's message outward, nested types included): where that is another (a nested
        message or enum of the same name, defined before or after it), the field names it in full."""
        for back, around, target in self.back:
            at = next(i for i, m in enumerate(around) if m is target)
            if any(t.name == target.name for m in around[at:] for t in m.nested):
                back.type = "." + ".".join([*([namespace] if namespace else []), *(m.name for m in around[:at + 1])])

    def _message(self, name: str, schema: Schema) -> proto.Message:
        message = proto.Message(name)
        index = 1
        fields = schema.get("fields", [])
        self.open[id(fields)] = message
        self.scope.append(message)
        for f in fields:
            tag_param = _params(f).get(TAG)
            if tag_param is not None:
                tag = int(tag_param)
            else:
                tag, index = index, index + 1
            made = self._field(message, f, self.options.name(f["field"]), tag, False)
            if made is not None:
                message.fields.append(made)
        del self.open[id(fields)]
        self.made[id(fields)] = (fields, list(self.scope))
        self.scope.pop()
        return message

    def _label(self, schema: Schema) -> str | None:
        if schema.get("type") in ("array", "map"):
            return "repeated"
        return "optional" if self.options.optional_for_nullables and schema.get("optional") else None

    def _field(self, parent: proto.Message, schema: Schema, name: str, tag: int,
               oneof_member: bool) -> proto.Field | None:
        label = self._label(schema)
        if schema.get("type") == "array":
            schema = schema["items"]
        around = self.open.get(id(schema.get("fields"))) if schema.get("type") == "struct" else None
        if around is not None and not is_union(schema):  # a message holding its own type (or an enclosing one's)
            back = proto.Field(name, tag, around.name, label)
            self.back.append((back, list(self.scope), around))
            return back
        made = self.made.get(id(schema.get("fields"))) if schema.get("type") == "struct" else None
        if made is not None and made[0] is schema.get("fields") and not is_union(schema) \
                and (len(made[1]) < 2 or made[1][-2] is not parent):  # (in the same one: by name, as Confluent's)
            elsewhere = proto.Field(name, tag, made[1][-1].name, label)
            self.elsewhere.append((elsewhere, made[1]))
            return elsewhere
        params: dict[str, str] = {}
        kind = self._data_type(schema, name, params, oneof_member)
        if schema.get("type") == "struct" and is_union(schema):
            union = _params(schema).get(GENERAL_UNION) if self.options.generalized else \
                self._unqualified(schema["name"][len(UNION) + 1:])
            self._oneof(parent, schema, union)
            return None
        if schema.get("type") == "struct":
            defined = self.children.setdefault(id(parent), set())
            if kind not in defined:
                defined.add(kind)
                parent.nested.append(self._message(kind, schema))
        elif schema.get("type") == "map":
            parent.nested.append(self._map_entry(kind, schema))
        elif _is_enum(schema):
            enum_name = self._unqualified(schema.get("name"))
            if not any(isinstance(t, proto.Enum) and t.name == enum_name for t in parent.nested):
                parent.nested.append(self._enum(enum_name, schema))
        else:
            imported = IMPORTS.get(kind) or (WRAPPERS_FILE if kind.startswith("google.protobuf.") else None)
            if imported is not None:
                self._import(imported)
        out = proto.Field(name, tag, kind, label)
        if params:
            self._import(META_FILE)
            entries = [{"key": k, "value": v} for k, v in params.items()]
            out.options.append(proto.Option(FIELD_META, {"params": entries}))
        return out

    def _oneof(self, parent: proto.Message, schema: Schema, name: str) -> None:
        oneof = proto.OneOf(name)
        for f in schema.get("fields", []):
            tag = int(_params(f).get(TAG, 0))
            made = self._field(parent, f, self.options.name(f["field"]), tag, True)
            if made is not None:
                made.label = None
                oneof.fields.append(made)
        parent.oneofs.append(oneof)

    def _map_entry(self, name: str, schema: Schema) -> proto.Message:
        entry = proto.Message(name)
        self.scope.append(entry)
        for field_name, tag, part in (("key", 1, schema["keys"]), ("value", 2, schema["values"])):
            made = self._field(entry, part, field_name, tag, False)
            if made is not None:
                if made.label == "optional":
                    made.label = None  # added to the entry as it is: no synthetic oneof, so no proto3 `optional`
                entry.fields.append(made)
        self.scope.pop()
        return entry

    def _enum(self, name: str, schema: Schema) -> proto.Enum:
        prefix = self.options.enum_param + "."
        return proto.Enum(name, [proto.EnumConstant(k[len(prefix):], int(v)) for k, v in _params(schema).items()
                                 if k.startswith(prefix)])

    def _data_type(self, schema: Schema, field_name: str, params: dict[str, str], oneof_member: bool) -> str:
        """ProtobufData.dataTypeFromConnectSchema: the field's type name (and its meta parameters)."""
        name = schema.get("name")
        if name == DECIMAL:
            given = _params(schema)
            if PRECISION_PARAM in given:
                params["precision"] = given[PRECISION_PARAM]
            if "scale" in given:
                params["scale"] = given["scale"]
            return DECIMAL_TYPE
        if name in LOGICAL_TYPES:
            return LOGICAL_TYPES[name]
        kind = schema.get("type")
        wrapped = _wrapped(schema, self.options, oneof_member)
        if kind in ("int8", "int16"):
            params["connect.type"] = kind
        if kind in ("int8", "int16", "int32"):
            if kind == "int32" and ENUM in _params(schema):
                return _params(schema)[ENUM]
            return "google.protobuf.Int32Value" if wrapped else _params(schema).get(TYPE, "int32") \
                if kind == "int32" else "int32"
        if kind == "int64":
            scalar = _params(schema).get(TYPE, "int64")
            return "google.protobuf." + INT64_WRAPPER_OF.get(scalar, "Int64Value") if wrapped else scalar
        if kind == "string" and _is_enum(schema):
            return _params(schema).get(GENERAL_ENUM) or _params(schema)[ENUM]
        if kind in SCALARS:
            return "google.protobuf." + WRAPPER_OF[kind] if wrapped else SCALARS[kind]
        if kind == "array":
            raise DataError("Array cannot be nested")
        if kind == "map":
            return _map_entry_name(self._unqualified(name))
        if kind == "struct":
            short = self._unqualified(name)
            return short + "Message" if short == field_name else short
        raise DataError(f"Unknown schema type: {kind}")


def _map_entry_name(name: str) -> str:
    """ProtobufSchema.toMapEntry: lower_underscore made UpperCamel, then "Entry"."""
    if "_" in name:
        name = "".join(part[:1].upper() + part[1:].lower() for part in name.split("_"))
    return name + MAP_ENTRY


def _map_field_name(name: str) -> str:
    """ProtobufSchema.toMapField: the last part's "Entry" dropped, UpperCamel made lower_underscore."""
    head, _, last = name.rpartition(".")
    if last.endswith(MAP_ENTRY):
        last = last[: -len(MAP_ENTRY)]
        last = "".join(("_" + c.lower() if c.isupper() and i else c.lower()) for i, c in enumerate(last))
    return f"{head}.{last}" if head else last


# -- Connect value -> message --------------------------------------------------------------------------
Setter = Callable[[Any, Any, str], None]  # (message, a Connect value, its path for errors)
Conversion = Callable[[Any, str], Any]  # (a Connect value, its path) -> what a scalar field takes


class _ToMessage:
    """ProtobufData.fromConnectData: a Connect value into a message of the registered schema's class, as a
    function compiled once per Connect schema and message class (the schema is not walked per record)."""

    def __init__(self, options: Options, latest: bool = False) -> None:
        self.options = options
        self.latest = latest  # into use.latest.version's schema, not the value's own: it may lack a field
        # (id of a struct's fields, message) -> its setter once made: a recursive schema's struct holding itself
        # is written by the setter being made
        self._making: dict[tuple[int, str], list[Setter]] = {}
        # the same once made: a struct met again elsewhere (its fields shared) is written by the same setter
        self._made: dict[tuple[int, str], tuple[list[Schema], Setter]] = {}
        self.recursive = False  # a struct held itself: its values' depth is counted (_nested)
        self._depth = threading.local()  # the message level a thread is writing at (with `recursive`)

    def root(self, schema: Schema, descriptor: Any) -> Setter:
        if schema.get("type") != "struct":
            return self._message(schema, descriptor)  # a primitive at the top: its wrapper message
        write = self.struct(schema, descriptor)
        if not self.recursive or self._counting:
            return write
        self._counting = True  # made again, each message level counted: a value as deep as it likes is refused
        self._made.clear()
        return self.root(schema, descriptor)

    _counting = False

    def struct(self, schema: Schema, descriptor: Any) -> Setter:
        fields = schema.get("fields")
        key = (id(fields), descriptor.full_name)
        made = self._made.get(key)
        if made is not None and made[0] is fields:
            return made[1]
        making = self._making.get(key)
        if making is not None:  # the struct holds itself: what writes it is being made, and called once made
            self.recursive = True
            return lambda message, value, where: making[0](message, value, where)
        making = self._making[key] = [_skip]
        try:
            write = self._struct(schema, descriptor)
        finally:
            del self._making[key]
        making[0] = write = self._nested(write) if self._counting else write
        self._made[key] = (fields, write)
        return write

    def _nested(self, write: Setter) -> Setter:
        """`write` one message level deeper; past MESSAGE_DEPTH_MAX a DataError (Protobuf's parsers, Confluent's
        deserializer's and klog's, refuse what nests deeper)."""
        depth = self._depth

        def nested(message: Any, value: Any, where: str) -> None:
            level = getattr(depth, "level", -1) + 1
            if level > MESSAGE_DEPTH_MAX:
                shown = where if len(where) <= 160 else "..." + where[where.find(".", len(where) - 120):]
                raise DataError(f"{shown}: a value nested deeper than {MESSAGE_DEPTH_MAX} messages (Protobuf's "
                                "parsers, Confluent's deserializer's among them, read no deeper)")
            depth.level = level
            try:
                write(message, value, where)
            finally:
                depth.level = level - 1

        return nested

    def _struct(self, schema: Schema, descriptor: Any) -> Setter:
        steps = [self._step(f, descriptor) for f in schema.get("fields", [])]

        def write(message: Any, value: Any, where: str) -> None:
            if not isinstance(value, dict):
                raise DataError(f"{where or 'the value'}: a struct value must be a map, not {type(value).__name__}")
            for name, default, required, kind, setter in steps:
                v = value.get(name)
                if v is None:
                    v = default
                    if v is None:
                        if required:
                            raise DataError(f"{_path(where, name)}: null for a required {kind} (not optional in its "
                                            "schema)")
                        continue
                setter(message, v, _path(where, name))

        return write

    def _step(self, f: Schema, descriptor: Any) -> tuple[str, Any, bool, str, Setter]:
        """A struct field's (name, default, required, type, setter); Connect's default for a null (Struct.get)."""
        default = None
        if f.get("default") is not None and not (self.options.ignore_default_for_nullables and f.get("optional")):
            default = from_json(f, f["default"])
        setter = self._union(f, descriptor) if is_union(f) else self._named_field(descriptor, f)
        return f["field"], default, not f.get("optional"), str(f.get("type")), setter

    def _named_field(self, descriptor: Any, f: Schema) -> Setter:
        fd = descriptor.fields_by_name.get(self.options.name(f["field"]))
        if fd is None and self.latest:  # Confluent writes it as a field the latest's readers do not know and
            return _skip  # skip; not written here, they read the same
        if fd is None:  # (two structs of one name in a message: Confluent defines the first only)
            return _refuse(f"Cannot find field with name {f['field']} in {descriptor.full_name}")
        return self._field(fd, f)

    def _union(self, schema: Schema, descriptor: Any) -> Setter:
        """A union struct: its first non-null member set in the oneof."""
        members = [(f["field"], self._named_field(descriptor, f)) for f in schema.get("fields", [])]

        def write(message: Any, value: Any, where: str) -> None:
            if isinstance(value, dict):
                for name, setter in members:
                    x = value.get(name)
                    if x is not None:
                        setter(message, x, where)
                        return
            raise DataError(f"{where}: Cannot find non-null field")

        return write

    def _field(self, fd: Any, schema: Schema) -> Setter:
        name = fd.name
        if fd.is_repeated:
            return self._map(fd, schema) if schema.get("type") == "map" else self._repeated(fd, schema)
        if fd.message_type is not None:
            inner = self._message(schema, fd.message_type)

            def write_message(message: Any, value: Any, where: str) -> None:
                target = getattr(message, name)
                target.SetInParent()  # present even when empty
                inner(target, value, where)

            return write_message
        conv = self._scalar(fd, schema)
        return lambda message, value, where: _assign(message, name, conv, value, where)

    def _repeated(self, fd: Any, schema: Schema) -> Setter:
        name = fd.name
        if schema.get("type") != "array":
            return _refuse(f"a {schema.get('type')} value for the repeated field {fd.full_name}")
        items = schema["items"]
        if fd.message_type is not None:
            item = self._message(items, fd.message_type)

            def write_messages(message: Any, value: Any, where: str) -> None:
                _check_list(value, where)
                target = getattr(message, name)
                for x in value:
                    item(target.add(), x, f"{where}[]")

            return write_messages
        conv = self._scalar(fd, items)

        def write_scalars(message: Any, value: Any, where: str) -> None:
            _check_list(value, where)
            try:
                getattr(message, name).extend([conv(x, f"{where}[]") for x in value])
            except (TypeError, ValueError) as e:
                raise DataError(f"{where}: {e}") from None

        return write_scalars

    def _map(self, fd: Any, schema: Schema) -> Setter:
        name = fd.name
        entry = fd.message_type
        key_fd, value_fd = entry.fields_by_name.get("key"), entry.fields_by_name.get("value")
        if key_fd is None or value_fd is None:
            return _refuse(f"a map value for {fd.full_name}, whose messages are no key/value entries")
        if entry.GetOptions().map_entry:  # a proto map (use.latest.version's schema, or one not Confluent's)
            return self._proto_map(name, key_fd, value_fd, schema)
        key_set, value_set = self._field(key_fd, schema["keys"]), self._field(value_fd, schema["values"])

        def write_entries(message: Any, value: Any, where: str) -> None:
            if not isinstance(value, dict):
                raise DataError(f"{where}: a map value must be a dict, not {type(value).__name__}")
            target = getattr(message, name)
            for k, v in value.items():
                e = target.add()
                if k is not None:
                    key_set(e, k, f"{where}{{key}}")
                if v is not None:
                    value_set(e, v, f"{where}{{value}}")

        return self._nested(write_entries) if self._counting else write_entries  # (its entries: a level)

    def _proto_map(self, name: str, key_fd: Any, value_fd: Any, schema: Schema) -> Setter:
        key_conv = self._scalar(key_fd, schema["keys"])
        inner = self._message(schema["values"], value_fd.message_type) if value_fd.message_type else None
        value_conv = None if inner else self._scalar(value_fd, schema["values"])

        def write_map(message: Any, value: Any, where: str) -> None:
            if not isinstance(value, dict):
                raise DataError(f"{where}: a map value must be a dict, not {type(value).__name__}")
            target = getattr(message, name)
            for k, v in value.items():
                if k is None or v is None:
                    raise DataError(f"{where}: a Protobuf map holds no null keys or values")
                key = key_conv(k, f"{where}{{key}}")
                try:
                    if inner is not None:
                        inner(target[key], v, f"{where}{{value}}")
                    else:
                        target[key] = value_conv(v, f"{where}{{value}}")
                except (TypeError, ValueError) as e:
                    raise DataError(f"{where}: {e}") from None

        return self._nested(write_map) if self._counting else write_map  # (its entries: a level)

    def _message(self, schema: Schema, descriptor: Any) -> Setter:
        """Into a message field: a logical type's, a wrapper's, or a struct's."""
        logical = schema.get("name")
        if logical in LOGICAL_TYPES and descriptor.full_name == LOGICAL_TYPES[logical]:
            return lambda target, value, where: _logical_into(target, logical, value, where)
        if descriptor.full_name in UNWRAPPED and schema.get("type") != "struct":
            conv = self._scalar(descriptor.fields_by_name["value"], schema)
            return lambda target, value, where: _assign(target, "value", conv, value, where)
        if schema.get("type") != "struct":
            return _refuse(f"a {schema.get('type')} value for the message {descriptor.full_name}")
        return self.struct(schema, descriptor)

    def _scalar(self, fd: Any, schema: Schema) -> Conversion:
        """A Connect value of `schema` as scalar field `fd` takes it, its Java type checked (DataError)."""
        kind = schema.get("type")
        if fd.enum_type is not None:
            return self._enum(fd, schema)
        if kind in ("int8", "int16", "int32", "int64"):
            mask = {fd.TYPE_UINT32: 0xFFFFFFFF, fd.TYPE_FIXED32: 0xFFFFFFFF,  # Java's int / long bits, unsigned
                    fd.TYPE_UINT64: 2**64 - 1, fd.TYPE_FIXED64: 2**64 - 1}.get(fd.type)

            def integer(v: Any, where: str) -> Any:
                if v.__class__ is not int and (isinstance(v, bool) or not isinstance(v, int)):
                    raise DataError(f"{where}: Invalid type for {kind.upper()}: {type(v).__name__}")
                return v if mask is None else v & mask

            return integer
        checks = {"float32": (int, float, decimal.Decimal), "float64": (int, float, decimal.Decimal),
                  "boolean": (bool,), "string": (str,), "bytes": (bytes, bytearray, memoryview)}
        allowed = checks.get(str(kind))
        if allowed is None:
            return lambda v, where: _raise(f"{where}: a {kind} value for the scalar field {fd.full_name}")
        make = float if kind in ("float32", "float64") else bytes if kind == "bytes" else None

        def scalar(v: Any, where: str) -> Any:
            if not isinstance(v, allowed) or (make is float and isinstance(v, bool)):
                raise DataError(f"{where}: Invalid type for {str(kind).upper()}: {type(v).__name__}")
            return v if make is None else make(v)

        return scalar

    def _enum(self, fd: Any, schema: Schema) -> Conversion:
        if schema.get("type") != "string":
            return lambda v, where: int(v)
        prefix = self.options.enum_param + "."
        numbers = {k[len(prefix):]: int(v) for k, v in _params(schema).items() if k.startswith(prefix)}

        def symbol(v: Any, where: str) -> int:
            number = numbers.get(v)
            if number is None:
                raise DataError(f"{where}: {v!r} is no symbol of the enum {fd.enum_type.full_name}")
            return number

        return symbol


def _skip(message: Any, value: Any, where: str) -> None:
    pass


def _path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _raise(message: str) -> Any:
    raise DataError(message)


def _refuse(message: str) -> Setter:
    def refuse(target: Any, value: Any, where: str) -> None:
        raise DataError(f"{where}: {message}")

    return refuse


def _check_list(value: Any, where: str) -> None:
    if not isinstance(value, list | tuple):
        raise DataError(f"{where}: an array value must be a list, not {type(value).__name__}")
    if None in value:
        raise DataError(f"{where}[]: Protobuf's repeated fields hold no nulls")


def _assign(message: Any, name: str, conv: Conversion, value: Any, where: str) -> None:
    try:
        setattr(message, name, conv(value, where))
    except (TypeError, ValueError) as e:  # out of the field's range
        raise DataError(f"{where}: {e}") from None


def _logical_into(target: Any, name: str, value: Any, where: str) -> None:
    try:
        if name == DECIMAL:
            _decimal_into(target, value)
        elif name == DATE:
            day = value if isinstance(value, dt.date) else from_epoch_days(int(value))
            target.year, target.month, target.day = day.year, day.month, day.day
        elif name == TIME:
            millis = int(value)
            if not 0 <= millis <= 86_400_000:
                raise DataError(f"{where}: Time values must use number of millis greater than 0 and less than 86400000")
            seconds, ms = divmod(millis % 86_400_000, 1000)
            target.hours, target.minutes, target.seconds = seconds // 3600, seconds // 60 % 60, seconds % 60
            target.nanos = ms * 1_000_000
        else:
            seconds, ms = divmod(int(value), 1000)
            target.seconds, target.nanos = _valid_timestamp(seconds, ms * 1_000_000)
    except (TypeError, ValueError, OverflowError, AttributeError, decimal.InvalidOperation) as e:
        raise DataError(f"{where}: Invalid value for {name}: {e}") from None


def _valid_timestamp(seconds: int, nanos: int) -> tuple[int, int]:
    """Timestamps.checkValid, which Confluent's fromMillis and toMillis apply: years 1 to 9999 (a Java consumer
    fails a record beyond them)."""
    if not TIMESTAMP_SECONDS[0] <= seconds <= TIMESTAMP_SECONDS[1] or not 0 <= nanos < 1_000_000_000:
        raise ValueError(f"Timestamp is not valid (seconds {seconds}, nanos {nanos}): years 1 to 9999 only")
    return seconds, nanos


def _decimal_into(target: Any, value: Any) -> None:
    """DecimalUtils.fromBigDecimal: the unscaled value's two's complement bytes, its precision and scale."""
    dec = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    sign, digits, exponent = dec.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value!r} is not a finite decimal")
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    target.value = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
    target.precision = len(str(abs(unscaled)))
    target.scale = -exponent


# -- .proto -> Connect schema ----------------------------------------------------------------------------
def field_params(file: proto.ProtoFile) -> dict[tuple[str, str], dict[str, str]]:
    """(message full name, field name) -> the params of the field's (confluent.field_meta) option."""
    out: dict[tuple[str, str], dict[str, str]] = {}

    def walk(types: list, prefix: str) -> None:
        for t in types:
            if not isinstance(t, proto.Message):
                continue
            full = f"{prefix}.{t.name}" if prefix else t.name
            for f in t.all_fields():
                for option in f.options:
                    if option.name == FIELD_META and isinstance(option.value, dict):
                        entries = option.value.get("params") or []
                        entries = [entries] if isinstance(entries, dict) else entries
                        out[(full, f.name)] = {str(e.get("key")): str(e.get("value")) for e in entries
                                               if isinstance(e, dict)}
            walk(t.nested, full)

    walk(file.types, file.package or "")
    return out


class _ToConnect:
    """ProtobufData.toConnectSchema and toConnectData over the message classes' descriptors."""

    def __init__(self, options: Options, metas: dict[tuple[str, str], dict[str, str]]) -> None:
        self.options = options
        self.metas = metas
        # the messages whose structs are being made -> their fields (what a field of that message again shares: a
        # recursive schema, as Confluent's SchemaWrapper) and whether such a field made it optional
        self.open: dict[str, tuple[list[Schema], list[bool]]] = {}
        # the messages whose structs root() made already -> their fields: a message met again anywhere (not only
        # inside itself) shares them, as Confluent's ToConnectContext keeps one struct per message full name, so
        # messages holding each other cost their own fields once, not a tree of every path through them
        self.made: dict[str, list[Schema]] = {}
        self.fields_made = 0  # by the root() being made
        # a message's full name -> its _optional_names (asked for its schema and for its reader)
        self._optional: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        # (id of a struct's fields, message) -> its reader once made: a recursive schema's struct holding itself
        # is read by the reader being made (a message's depth is bounded by the parser's: MESSAGE_DEPTH_MAX)
        self._making: dict[tuple[int, str], list[Callable[[Any], Any]]] = {}
        # the same once made: a struct met again (its fields shared) is read by the same reader
        self._readers: dict[tuple[int, str], tuple[list[Schema], Callable[[Any], Any]]] = {}
        self._depth = threading.local()  # with generate.struct.for.nulls: the back references a read went through

    def optional_names(self, descriptor: Any) -> tuple[frozenset[str], frozenset[str]]:
        names = self._optional.get(descriptor.full_name)
        if names is None:
            names = self._optional[descriptor.full_name] = _optional_names(descriptor)
        return names

    def root(self, descriptor: Any, version: int | None) -> Schema:
        self.fields_made = 0
        self.open.clear()  # (what a failed root() left open)
        self.made.clear()
        unwrapped = UNWRAPPED.get(descriptor.full_name) if self.options.wrapper_for_raw_primitives else None
        out = {"type": unwrapped, "optional": False} if unwrapped else self.struct(descriptor)
        if version is not None:
            out["version"] = version
        return _ordered(out)

    def struct(self, descriptor: Any) -> Schema:
        full = descriptor.full_name
        name = full if self.options.enhanced else descriptor.name
        around = self.open.get(full)
        if around is not None:  # a message holding itself: its struct's fields, not made again (ToConnectContext)
            around[1][0] = True  # SchemaWrapper.optional() makes the struct it wraps optional
            return {"type": "struct", "fields": around[0], "optional": True, "name": name}
        made = self.made.get(full)
        if made is not None:  # made already elsewhere: its fields shared (a field's struct is optional)
            return {"type": "struct", "fields": made, "optional": True, "name": name}
        fields: list[Schema] = []
        optional = [False]
        self.open[full] = (fields, optional)
        optional_names, keyword = self.optional_names(descriptor)
        for i, oneof in enumerate(descriptor.oneofs):
            if _synthetic(oneof, optional_names):
                continue
            if self.options.flatten_unions:
                fields += [{**self.field(fd, True), "field": fd.name} for fd in oneof.fields]
            else:
                fields.append({**self.union(oneof), "field": union_field_name(oneof, i, self.options)})
        for fd in descriptor.fields:
            if fd.containing_oneof is not None and not _synthetic(fd.containing_oneof, optional_names):
                continue
            fields.append({**self.field(fd, False, fd.name in keyword), "field": fd.name})
        del self.open[full]
        self.made[full] = fields
        return _ordered({"type": "struct", "fields": fields, "optional": optional[0], "name": name})

    def union(self, oneof: Any) -> Schema:
        if self.options.generalized:
            name, params = oneof.name, {GENERAL_UNION: oneof.name}
        else:
            name, params = UNION + "." + (oneof.full_name if self.options.enhanced else oneof.name), {}
        out: Schema = {"type": "struct", "fields": [{**self.field(fd, True), "field": fd.name} for fd in oneof.fields],
                       "optional": True, "name": name}
        if params:
            out["parameters"] = params
        return _ordered(out)

    def field(self, fd: Any, oneof_member: bool, optional_keyword: bool = False) -> Schema:
        # each message's fields are made once (shared where met again): more than this is a schema too large
        self.fields_made += 1
        if self.fields_made > CONNECT_FIELDS_MAX:
            raise DataError(f"a Connect schema of more than {CONNECT_FIELDS_MAX} fields in all (nested ones "
                            f"counted; {fd.containing_type.full_name}'s among them)")
        out = self._type_of(fd)
        if fd.is_repeated and out["type"] != "map":
            out = {"type": "array", "items": _ordered({**out, "optional": True}), "optional": True}
        if oneof_member:
            out["optional"] = True
            if self.options.wrapper_for_nullables and fd.message_type is not None \
                    and fd.message_type.full_name in UNWRAPPED:
                out.setdefault("parameters", {})[WRAPPER_MARK] = "true"
        elif self.options.optional_for_nullables:
            if optional_keyword:
                out["optional"] = True
        elif not self.options.wrapper_for_nullables:
            out["optional"] = True
        out.setdefault("optional", False)
        out.setdefault("parameters", {})[TAG] = str(fd.number)
        return _ordered(out)

    def _type_of(self, fd: Any) -> Schema:
        t = fd.type
        meta = self.metas.get((fd.containing_type.full_name, fd.name), {})
        if t in (fd.TYPE_INT32, fd.TYPE_SINT32, fd.TYPE_SFIXED32):
            if meta.get("connect.type") in ("int8", "int16"):
                return {"type": meta["connect.type"]}
            return _with_type({"type": "int32"}, fd, fd.TYPE_INT32)
        if t in (fd.TYPE_UINT32, fd.TYPE_FIXED32, fd.TYPE_INT64, fd.TYPE_UINT64, fd.TYPE_SINT64, fd.TYPE_FIXED64,
                 fd.TYPE_SFIXED64):
            return _with_type({"type": "int64"}, fd, fd.TYPE_INT64)
        simple = {fd.TYPE_FLOAT: "float32", fd.TYPE_DOUBLE: "float64", fd.TYPE_BOOL: "boolean",
                  fd.TYPE_STRING: "string", fd.TYPE_BYTES: "bytes"}.get(t)
        if simple is not None:
            return {"type": simple}
        if t == fd.TYPE_ENUM:
            return self._enum(fd.enum_type)
        if t == fd.TYPE_MESSAGE:
            return {**self._message_type(fd, meta), "optional": True}
        raise DataError(f"Unknown Connect schema type: {t}")

    def _enum(self, enum: Any) -> Schema:
        param = self.options.enum_param
        params = {param: enum.name, **{f"{param}.{v.name}": str(v.number) for v in enum.values}}
        return {"type": "int32" if self.options.int_for_enums else "string", "optional": True,
                "name": enum.full_name if self.options.enhanced else enum.name, "parameters": params}

    def _message_type(self, fd: Any, meta: dict[str, str]) -> Schema:
        full = fd.message_type.full_name
        if full == DECIMAL_TYPE:
            params = {"scale": str(_int_or(meta.get("scale"), 0))}
            precision = _int_or(meta.get("precision"), None)
            if precision is not None:
                params[PRECISION_PARAM] = str(precision)
            return {"type": "bytes", "name": DECIMAL, "version": 1, "parameters": params}
        if full == DATE_TYPE:
            return {"type": "int32", "name": DATE, "version": 1}
        if full == TIME_TYPE:
            return {"type": "int32", "name": TIME, "version": 1}
        if full == TIMESTAMP_TYPE:
            return {"type": "int64", "name": TIMESTAMP, "version": 1}
        if self.options.wrapper_for_nullables and full in UNWRAPPED:
            return {"type": UNWRAPPED[full]}
        if _is_map_entry(fd):
            key, value = fd.message_type.fields
            return {"type": "map", "keys": self.field(key, False), "values": self.field(value, False),
                    "name": _map_field_name(full if self.options.enhanced else fd.message_type.name)}
        return self.struct(fd.message_type)

    # values: a function per Connect schema and message type, compiled once (not walked per record)
    def reader(self, schema: Schema, descriptor: Any) -> Callable[[Any], Any]:
        """ProtobufData.toConnectData: the root message as the Connect value of `schema` (its root())."""
        if schema.get("type") == "struct":
            return self._struct_reader(schema, descriptor)
        inner = self._scalar_reader(schema, descriptor.fields_by_name["value"])  # a wrapper as its primitive
        return (lambda m: m.value) if inner is None else (lambda m: inner(m.value))

    def _struct_reader(self, schema: Schema, descriptor: Any) -> Callable[[Any], dict[str, Any]]:
        fields = schema.get("fields")
        key = (id(fields), descriptor.full_name)
        made = self._readers.get(key)
        if made is not None and made[0] is fields:
            return made[1]
        making = self._making.get(key)
        if making is not None:  # the struct holds itself: what reads it is being made, and called once made
            return self._endless(making, descriptor.full_name) if self.options.struct_for_nulls else \
                lambda message: making[0](message)
        making = self._making[key] = [_same]
        try:
            making[0] = read = self._make_struct_reader(schema, descriptor)
        finally:
            del self._making[key]
        if len(self._readers) >= READERS_MAX:
            self._readers.clear()
        self._readers[key] = (fields, read)  # the fields kept alive: their id is not reused meanwhile
        return read

    def _endless(self, making: list[Callable[[Any], Any]], full: str) -> Callable[[Any], Any]:
        """generate.struct.for.nulls on a message holding its own type: an unset field of it is a struct of its
        defaults, whose own unset field is another, endlessly (Confluent's converter overflows its stack). No
        message parsed nests deeper than MESSAGE_DEPTH_MAX: past that, a DataError."""
        depth = self._depth

        def read(message: Any) -> Any:
            level = getattr(depth, "level", 0) + 1
            if level > MESSAGE_DEPTH_MAX:
                raise DataError(f"generate.struct.for.nulls makes an endless struct of a null {full} held by "
                                "itself (Confluent's converter overflows its stack)")
            depth.level = level
            try:
                return making[0](message)
            finally:
                depth.level = level - 1

        return read

    def _make_struct_reader(self, schema: Schema, descriptor: Any) -> Callable[[Any], dict[str, Any]]:
        by_name = {f["field"]: f for f in schema.get("fields", [])}
        names = list(by_name)
        optional_names, keyword = self.optional_names(descriptor)
        oneofs = []  # (oneof name, its Connect field, the union's member names or None when flattened, readers)
        for i, oneof in enumerate(descriptor.oneofs):
            if _synthetic(oneof, optional_names):
                continue
            if self.options.flatten_unions:
                members = {fd.name: self._field_reader(by_name[fd.name], fd) for fd in oneof.fields}
                oneofs.append((oneof.name, "", None, members))
            else:
                union = by_name[union_field_name(oneof, i, self.options)]
                member_schemas = {f["field"]: f for f in union["fields"]}
                members = {fd.name: self._field_reader(member_schemas[fd.name], fd) for fd in oneof.fields}
                oneofs.append((oneof.name, union["field"], list(member_schemas), members))
        plain = []  # (field name, reader, whether read when unset: scalars, repeated, generate.struct.for.nulls)
        for fd in descriptor.fields:
            if fd.containing_oneof is not None and not _synthetic(fd.containing_oneof, optional_names):
                continue
            optional = fd.name in (keyword if self.options.optional_for_proto2 else optional_names)
            always = ((fd.message_type is None or fd.is_repeated) and not optional) or self.options.struct_for_nulls
            plain.append((fd.name, self._field_reader(by_name[fd.name], fd), always))

        def read(message: Any) -> dict[str, Any]:
            out = dict.fromkeys(names)
            for oneof_name, union_field, member_names, members in oneofs:
                which = message.WhichOneof(oneof_name)
                if which is not None:
                    v = members[which](message)
                    if member_names is None:
                        out[which] = v
                    else:
                        union = out[union_field] = dict.fromkeys(member_names)
                        union[which] = v
            for name, get, always in plain:
                if always or message.HasField(name):
                    out[name] = get(message)
            return out

        return read

    def _field_reader(self, schema: Schema, fd: Any) -> Callable[[Any], Any]:
        name = fd.name
        if fd.is_repeated and schema.get("type") == "map":
            key_fd, value_fd = fd.message_type.fields[:2]
            key = self._value_reader(schema["keys"], key_fd) or _same
            value = self._value_reader(schema["values"], value_fd) or _same
            if fd.message_type.GetOptions().map_entry:  # a proto map
                return lambda m: {key(k): value(v) for k, v in getattr(m, name).items()}
            return lambda m: {key(e.key): value(e.value) for e in getattr(m, name)}
        if fd.is_repeated:
            item = self._value_reader(schema["items"], fd)
            return (lambda m: list(getattr(m, name))) if item is None else \
                (lambda m: [item(x) for x in getattr(m, name)])
        conv = self._value_reader(schema, fd)
        return (lambda m: getattr(m, name)) if conv is None else (lambda m: conv(getattr(m, name)))

    def _value_reader(self, schema: Schema, fd: Any) -> Callable[[Any], Any] | None:
        """One value of field `fd` (an element of a repeated one) as Connect's; None where it is the same."""
        if fd.message_type is None:
            return self._scalar_reader(schema, fd)
        full = fd.message_type.full_name
        logical = schema.get("name")
        if logical in LOGICAL_TYPES and LOGICAL_TYPES[logical] == full:
            return lambda v: _logical_value(logical, v)
        if schema.get("type") == "struct":
            return self._struct_reader(schema, fd.message_type)
        if full in UNWRAPPED:
            inner = self._scalar_reader(schema, fd.message_type.fields_by_name["value"])
            return (lambda v: v.value) if inner is None else (lambda v: inner(v.value))
        raise DataError(f"a Connect {schema.get('type')} read from the message {full}")

    def _scalar_reader(self, schema: Schema, fd: Any) -> Callable[[Any], Any] | None:
        kind = schema.get("type")
        if fd.enum_type is not None and kind == "string":
            symbols = {v.number: v.name for v in fd.enum_type.values}
            unknown = f"UNKNOWN_ENUM_VALUE_{fd.enum_type.name}_"
            return lambda n: symbols.get(n) or f"{unknown}{n}"
        if kind in ("int8", "int16"):
            bits = 8 if kind == "int8" else 16
            return lambda v: _java_int(v, bits)  # Java's byteValue() / shortValue()
        if kind == "int64" and fd.type in (fd.TYPE_UINT64, fd.TYPE_FIXED64):
            return lambda v: _java_int(v, 64)  # a Java long
        return None


def _same(v: Any) -> Any:
    return v


def union_field_name(oneof: Any, index: int, options: Options) -> str:
    return f"{oneof.name}_{index}" if options.index_for_unions else oneof.name


def _with_type(out: Schema, fd: Any, plain: int) -> Schema:
    if fd.type != plain:
        out["parameters"] = {TYPE: _TYPE_NAMES[fd.type]}
    return out


_TYPE_NAMES = {13: "uint32", 7: "fixed32", 4: "uint64", 18: "sint64", 6: "fixed64", 16: "sfixed64", 17: "sint32",
               15: "sfixed32", 3: "int64", 5: "int32"}


def _int_or(text: str | None, default: int | None) -> int | None:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _java_int(v: int, bits: int) -> int:
    """The value as Java's narrowing casts give it (an uint64 above Long.MAX_VALUE is negative there)."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _optional_names(descriptor: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The names of the message's proto3 `optional` fields (their oneofs are synthetic), and of those with the
    `optional` keyword: those and, in a proto2 file, every singular field outside a oneof
    (Descriptors.hasOptionalKeyword)."""
    from google.protobuf import descriptor_pb2

    copy = descriptor_pb2.DescriptorProto()
    descriptor.CopyToProto(copy)
    file = descriptor_pb2.FileDescriptorProto()
    descriptor.file.CopyToProto(file)
    proto2 = file.syntax in ("", "proto2")
    proto3_optional = frozenset(f.name for f in copy.field if f.proto3_optional)
    return proto3_optional, proto3_optional | {f.name for f in copy.field if proto2 and f.label == f.LABEL_OPTIONAL
                                               and not f.HasField("oneof_index")}


def _synthetic(oneof: Any, optional_names: frozenset[str]) -> bool:
    return len(oneof.fields) == 1 and oneof.fields[0].name in optional_names and oneof.fields[0].has_presence \
        and oneof.name == "_" + oneof.fields[0].name


def _is_map_entry(fd: Any) -> bool:
    if not fd.is_repeated:
        return False
    fields = fd.message_type.fields
    return fd.message_type.name.endswith(MAP_ENTRY) and len(fields) == 2 and fields[0].name == "key" \
        and fields[1].name == "value" and not fields[0].is_repeated and not fields[1].is_repeated


def _logical_value(name: str, message: Any) -> Any:
    try:
        if name == DECIMAL:  # DecimalUtils.toBigDecimal: rounded to the precision the message gives
            value = decimal_from_bytes(message.value or b"\x00", message.scale)
            return value if not message.precision else \
                decimal.Context(prec=message.precision, rounding=decimal.ROUND_HALF_UP).plus(value)
        if name == DATE:
            return (dt.date(message.year, message.month, message.day) - dt.date(1970, 1, 1)).days
        if name == TIME:
            t = dt.time(message.hours, message.minutes, message.seconds, message.nanos // 1000)
            return ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + message.nanos // 1_000_000
        seconds, nanos = _valid_timestamp(message.seconds, message.nanos)
        return seconds * 1000 + nanos // 1_000_000
    except (ValueError, decimal.InvalidOperation) as e:
        raise DataError(f"an invalid {name}: {e}") from None


# -- the converter -----------------------------------------------------------------------------------
def _options(config: dict[str, Any]) -> Options:
    return Options(scrub=config["scrub.invalid.names"], enhanced=config["enhanced.protobuf.schema.support"],
                   int_for_enums=config["int.for.enums"], optional_for_nullables=config["optional.for.nullables"],
                   optional_for_proto2=config["optional.for.proto2"],
                   wrapper_for_nullables=config["wrapper.for.nullables"],
                   wrapper_for_raw_primitives=config["wrapper.for.raw.primitives"],
                   struct_for_nulls=config["generate.struct.for.nulls"],
                   index_for_unions=config["generate.index.for.unions"], flatten_unions=config["flatten.unions"],
                   generalized=config["generalized.sum.type.support"],
                   ignore_default_for_nullables=config["ignore.default.for.nullables"])


class _Written(NamedTuple):
    """Where a writer's records go under one subject: the schema id, the record header (magic byte, id, message
    indexes), the message class, and the Connect value's conversion into it."""

    schema_id: int
    header: bytes
    message_class: Any
    write: Setter


class _Local(NamedTuple):
    """A Connect schema's message class built from its own Protobuf schema, the conversion into it, and its
    index path in that schema."""

    message_class: Any
    write: Setter
    index_path: list[int]


@dataclass
class _Writer:
    """One Connect schema's Protobuf side: its message class built here and the conversion into it (made at its
    first value), and per subject its schema id and the message class written."""

    connect: Schema
    schema: ProtoOfConnect
    ids: dict[str, _Written] = field(default_factory=dict)
    local: _Local | None = None


class _PathReader(NamedTuple):
    """What reads one message index path: its message class, its Connect schema, the reading of its values, and
    whether it has proto2 `required` fields (in it or in messages it holds) to check."""

    message_class: Any
    schema: Schema
    read: Callable[[Any], Any]
    has_required: bool


@dataclass
class _Reader:
    schema_id: int
    message_class: Any  # index path -> the message class
    convert: _ToConnect  # the schema's messages as Connect schemas and values (what it learns kept)
    version: int | None
    # index path -> its reader, or why its message has none (not found again per record)
    by_path: dict[tuple[int, ...], _PathReader | str] = field(default_factory=dict)


_NULL_CONTEXT = "io.confluent.kafka.serializers.context.NullContextNameStrategy"
_PREFIX_ID = "io.confluent.kafka.serializers.schema.id.PrefixSchemaIdSerializer"


def _only(supported: Any, why: str) -> Callable[[Any], str | None]:
    """A ConfigDef check refusing every value but the one klog supports (Confluent's default)."""
    return lambda value: None if value == supported else f"only {str(supported).lower() or 'unset'} in klog: {why}"


class ProtobufConverter(Converter):
    java_class = "io.confluent.connect.protobuf.ProtobufConverter"
    config_def = (ConfigDef(dict(AvroConverter.config_def.keys))
                  .define("enhanced.protobuf.schema.support", "boolean", False)
                  .define("int.for.enums", "boolean", False)
                  .define("optional.for.nullables", "boolean", False)
                  .define("optional.for.proto2", "boolean", True)
                  .define("wrapper.for.nullables", "boolean", False)
                  .define("wrapper.for.raw.primitives", "boolean", True)
                  .define("generate.struct.for.nulls", "boolean", False)
                  .define("generate.index.for.unions", "boolean", True)
                  .define("flatten.unions", "boolean", False)
                  .define("generalized.sum.type.support", "boolean", False)
                  .define("ignore.default.for.nullables", "boolean", False)
                  # KafkaProtobufSerializerConfig's: known types are never references here (klog's registry
                  # knows them), and references are looked up, never registered
                  .define("skip.known.types", "boolean", True,
                          check=_only(True, "known types are never registered as references here"))
                  .define("reference.lookup.only", "boolean", False)
                  .define("schemas.cache.config", "int", 1000, at_least=1)  # ProtobufData's (no bytes change)
                  # Confluent's settings that change the bytes or the registered schema, not done here: refused
                  # by name, never ignored
                  .define("use.schema.id", "int", -1, check=_only(-1, "records are written with their schema's id"))
                  .define("use.schema.guid", default="", check=_only("", "schema GUIDs are not used"))
                  .define("use.latest.with.metadata", default="", check=_only("", "schema metadata is not used"))
                  .define("latest.cache.ttl.sec", "long", -1,
                          check=_only(-1, "the latest version is kept for the converter's life"))
                  .define("schema.format", default="", check=_only("", "the schema is registered as generated"))
                  .define("schema.backup.enabled", "boolean", False,
                          check=_only(False, "Confluent's schema backup envelope is not supported"))
                  .define("context.name.strategy", default=_NULL_CONTEXT,
                          check=_only(_NULL_CONTEXT, "subjects are in the default context"))
                  .define("key.schema.id.serializer", default=_PREFIX_ID,
                          check=_only(_PREFIX_ID, "the schema id is written before the message"))
                  .define("value.schema.id.serializer", default=_PREFIX_ID,
                          check=_only(_PREFIX_ID, "the schema id is written before the message")))

    def __init__(self, props: dict[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        protobuf_package(f"{'key' if is_key else 'value'}.converter")  # refused at validation, not per record
        if not self.config["schema.registry.url"]:
            raise ConfigError("schema.registry.url", "", "ProtobufConverter needs the Schema Registry's URL")
        user_info = self.config["basic.auth.user.info"] if self.config["basic.auth.credentials.source"] == "user_info" \
            else None
        self.registry = RegistryClient(self.config["schema.registry.url"], user_info or None)
        self.strategy = self.config["key.subject.name.strategy" if is_key else "value.subject.name.strategy"]
        self.cache_size = self.config["schemas.cache.size"]
        self.options = _options(self.config)
        # as Confluent's serializer: auto.register.schemas comes first, use.latest.version applies without it
        self._latest = self.config["use.latest.version"] and not self.config["auto.register.schemas"]
        self._lock = threading.Lock()
        self._by_object: dict[int, tuple[Schema, _Writer]] = {}
        self._by_text: OrderedDict[str, _Writer] = OrderedDict()
        self._readers: OrderedDict[tuple[int, str], _Reader] = OrderedDict()

    # Connect -> bytes
    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None  # a tombstone stays one (ProtobufData gives no message, the serializer no bytes)
        if schema is None:
            raise DataError("ProtobufConverter writes records with a schema; this one has none (a schemaless value: "
                            "use JsonConverter with schemas.enable=false)")
        writer = self._writer_of(schema)
        subject = subject_name(self.strategy, topic, self.is_key, {"type": "record", "name": writer.schema.message})
        written = writer.ids.get(subject)
        if written is None and self._latest:
            written = self._registered(subject, writer)  # the latest's message class: a lookup, nothing registered
        # converted before the schema is registered (as Confluent's converter): a value that fails leaves no schema
        if written is not None:
            message_class, write = written.message_class, written.write
        else:
            message_class, write, _ = self._local(writer)
        message = message_class()
        write(message, value, "" if schema.get("type") == "struct" else "the value")
        try:
            body = message.SerializeToString()
        except Exception as e:  # noqa: BLE001 - protobuf's EncodeError (a required proto2 field unset, ...)
            raise DataError(f"the value does not fit its Protobuf schema: {e}") from None
        if written is None:
            written = self._registered(subject, writer)
        return written.header + body

    def _writer_of(self, schema: Schema) -> _Writer:
        hit = self._by_object.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        text = schema_key(schema)
        with self._lock:
            writer = self._by_text.get(text)
            if writer is None:
                writer = _Writer(schema, proto_schema(schema, self.options))
                _put_bounded(self._by_text, text, writer, self.cache_size)
            if len(self._by_object) >= self.cache_size:
                self._by_object.clear()
            self._by_object[id(schema)] = (schema, writer)  # kept alive: its id is not reused meanwhile
        return writer

    def _local(self, writer: _Writer) -> _Local:
        """The writer's message class built from its own schema (what its registration stores) and the
        conversion into it."""
        if writer.local is None:
            from google.protobuf.message import DecodeError

            from klog.client.protobuf_codec import ProtobufCodecError, local_message_class

            try:
                file = proto.to_descriptor(writer.schema.file, proto.well_known(), name="klog-connect.proto",
                                           strict=False)
                cls = local_message_class(file, writer.schema.message)
            except (proto.ProtoError, ProtobufCodecError) as e:
                raise DataError(f"the Connect schema's Protobuf schema is not one Protobuf takes: {e}") from None
            except (DecodeError, RecursionError):  # its structs nest 100 messages or more: so do their messages, and
                # protobuf's descriptors (messages themselves) nest no deeper (upb's limit)
                raise DataError(f"the Connect schema {writer.schema.message} nests its structs too deeply for a "
                                "Protobuf schema (100 nested messages or more)") from None
            try:
                write = _ToMessage(self.options).root(writer.connect, cls.DESCRIPTOR)
            except RecursionError:
                raise DataError(f"the Connect schema {writer.schema.message} nests too deeply for klog") from None
            writer.local = _Local(cls, write, _index_path(file, writer.schema.message))
        return writer.local

    def _registered(self, subject: str, writer: _Writer) -> _Written:
        found = writer.ids.get(subject)
        if found is None:
            with self._lock:
                found = writer.ids.get(subject)
                if found is None:
                    found = writer.ids[subject] = self._register(subject, writer)
        return found

    def _register(self, subject: str, writer: _Writer) -> _Written:
        """The schema id under `subject` (registered with auto.register.schemas, else looked up; the subject's
        latest with use.latest.version), the record header, the message class and the conversion into it."""
        from klog.client.protobuf_codec import write_indexes

        path = f"/subjects/{quote(subject, safe='')}"
        body = {"schemaType": "PROTOBUF", "schema": writer.schema.text}
        if self._latest:
            latest = self.registry.call("GET", f"{path}/versions/latest")
            if self.config["latest.compatibility.strict"]:
                _check_latest_reads(latest, writer.schema)
            schema_id = int(latest["id"])
            top, message_class = _message_types(self.registry, schema_id)
            index_path = _index_path(top, writer.schema.message)
            cls = message_class(index_path)
            try:
                write = _ToMessage(self.options, latest=True).root(writer.connect, cls.DESCRIPTOR)
            except RecursionError:
                raise DataError(f"the Connect schema {writer.schema.message} nests too deeply for klog") from None
        else:
            query = normalize_query(self.config)
            if self.config["auto.register.schemas"]:
                schema_id = int(self.registry.call("POST", f"{path}/versions{query}", body)["id"])
            else:
                schema_id = int(self.registry.call("POST", path + query, body)["id"])
            cls, write, index_path = self._local(writer)  # the registered schema is the writer's own
        return _Written(schema_id, MAGIC + struct_.pack(">I", schema_id) + write_indexes(index_path), cls, write)

    # bytes -> Connect
    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        schema_id, reader = framed_reader(data, topic, self._readers, self._lock, self.cache_size, self._reader,
                                          "a Protobuf record")
        from klog.client.protobuf_codec import ProtobufCodecError, read_indexes

        try:
            path, at = read_indexes(data[5:])
            message_class, schema, read, has_required = self._reader_of_path(reader, path)
            message = message_class()
            message.ParseFromString(data[5 + at:])
            if has_required and not message.IsInitialized():  # as DynamicMessage.parseFrom refuses it
                raise DataError(f"not Protobuf of schema {schema_id}: required fields missing: "
                                f"{', '.join(message.FindInitializationErrors())[:300]}")
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - ProtobufCodecError, protobuf's DecodeError
            kind = "" if isinstance(e, ProtobufCodecError) else f"{type(e).__name__}: "
            raise DataError(f"not Protobuf of schema {schema_id}: {kind}{e}") from None
        return schema, read(message)

    def _reader_of_path(self, reader: _Reader, path: list[int]) -> _PathReader:
        key = tuple(path)
        hit = reader.by_path.get(key)
        if hit is None:
            message_class = reader.message_class(path)  # (a path naming no message is not kept: any number are)
            descriptor = message_class.DESCRIPTOR
            try:
                schema = reader.convert.root(descriptor, reader.version)
                hit = _PathReader(message_class, schema, reader.convert.reader(schema, descriptor),
                                  _has_required(descriptor, set()))
            except DataError as e:
                hit = str(e)
            except RecursionError:  # a chain of messages longer than the stack holds (not a recursive one)
                hit = f"the Connect schema of {descriptor.full_name} nests too deeply for klog"
            reader.by_path[key] = hit
        if isinstance(hit, str):
            raise DataError(hit)
        return hit

    def _reader(self, topic: str, schema_id: int) -> _Reader:
        """The reader of a schema id: the message classes of its serialized form, the field meta of its text,
        and its version under the topic's subject (Confluent's converter gives it to the root schema)."""
        found = self.registry.call("GET", f"/schemas/ids/{schema_id}")
        if (found.get("schemaType") or "AVRO") != "PROTOBUF":
            raise DataError(f"schema {schema_id} is {found.get('schemaType') or 'AVRO'}, not PROTOBUF")
        try:
            metas = field_params(proto.parse_text(found["schema"], strict=False))
        except proto.ProtoError:
            metas = {}  # no field meta read: int8/int16 read as int32, decimals with scale 0
        top, message_class = _message_types(self.registry, schema_id)
        version = None
        if top.message_type:
            first = f"{top.package}.{top.message_type[0].name}" if top.package else top.message_type[0].name
            try:
                subject = subject_name(self.strategy, topic, self.is_key, {"type": "record", "name": first})
                version = self.registry.call("POST", f"/subjects/{quote(subject, safe='')}",
                                             {"schemaType": "PROTOBUF", "schema": found["schema"],
                                              "references": found.get("references") or []}).get("version")
            except DataError:  # not under that subject: no version, as for Avro
                pass
        return _Reader(schema_id, message_class, _ToConnect(self.options, metas),
                       version if isinstance(version, int) else None)


def _has_required(descriptor: Any, seen: set[str]) -> bool:
    """Whether a message or one it holds (at any depth) has a proto2 `required` field."""
    seen.add(descriptor.full_name)
    return any(fd.is_required or (fd.message_type is not None and fd.message_type.full_name not in seen
                                  and _has_required(fd.message_type, seen)) for fd in descriptor.fields)


def _message_types(registry: Any, schema_id: int) -> tuple[Any, Any]:
    """klog.client.protobuf_codec.message_types with Connect's errors."""
    from klog.client.protobuf_codec import ProtobufCodecError, message_types

    try:
        top, message_class = message_types(registry, schema_id)
    except ProtobufCodecError as e:
        raise DataError(str(e)) from None

    def checked(path: list[int]) -> Any:
        try:
            return message_class(path)
        except ProtobufCodecError as e:
            raise DataError(str(e)) from None

    return top, checked


def _index_path(top: Any, full_name: str) -> list[int]:
    """The index path of a top-level message, by its full name, in the schema's file."""
    prefix = f"{top.package}." if top.package else ""
    for i, message in enumerate(top.message_type):
        if prefix + message.name == full_name:
            return [i]
    raise DataError(f"the registered schema declares no message {full_name}")


def _check_latest_reads(latest: dict[str, Any], writer: ProtoOfConnect) -> None:
    """latest.compatibility.strict: the subject's latest schema must read what the record's schema writes
    (avro.check_latest_reads's rule and wording; a Protobuf schema is text, not JSON)."""
    kind = latest.get("schemaType") or "AVRO"
    try:
        problems = [f"a schema of type {kind}"] if kind != "PROTOBUF" else _read_problems(latest["schema"], writer.file)
    except Exception as e:  # noqa: BLE001 - a schema the parser refuses is one it cannot read with
        problems = [f"{type(e).__name__}: {e}"]
    if problems:
        raise DataError(f"Incompatible schema {latest.get('schema')} of type {kind} for schema {writer.text}: "
                        f"{'; '.join(problems)[:500]}. Set latest.compatibility.strict=false to disable this check")


def _read_problems(latest_text: str, writer: proto.ProtoFile) -> list[str]:
    """Why the subject's latest schema cannot read what the record's schema writes (Confluent's rules)."""
    from klog.protocol.protobuf_compat import Schema as CompatSchema
    from klog.protocol.protobuf_compat import read_problems

    known = proto.well_known()

    def compat(file: proto.ProtoFile) -> CompatSchema:
        return CompatSchema(file, {d: known[d] for d in file.dependencies() if d in known},
                            dict.fromkeys(file.dependencies()))

    return read_problems(compat(proto.parse_text(latest_text, strict=False)), compat(writer))

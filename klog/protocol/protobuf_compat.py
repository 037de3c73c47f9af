"""Protobuf compatibility as Confluent's registry judges it: a port of the rules of its protobuf diff package
(SchemaDiff, MessageSchemaDiff, FieldSchemaDiff, EnumSchemaDiff, Context, Difference.Type), our own code.

The original (the schema that wrote) is compared with the update (the one that reads); every difference
is listed by type with its path (`#/Order/3`), and the update reads what the original wrote when each
difference is in COMPATIBLE. Fields are matched by number across the whole message, oneofs or not; a
field's type is compared by kind (scalar, message, map), scalars by their wire group (int32, int64,
uint32, uint64 and bool together, sint32 and sint64, string and bytes, fixed32 and sfixed32, ...), an
enum as a general number; a message type by its name and, when it comes from elsewhere (a well-known
file or another reference version), by its own fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from klog.protocol.protobuf_schema import SCALARS, Enum, Field, Message, ProtoFile, TypeInfo, declared_types

COMPATIBLE = frozenset("""MESSAGE_ADDED MESSAGE_MOVED ENUM_ADDED ENUM_REMOVED ENUM_CONST_ADDED ENUM_CONST_CHANGED
ENUM_CONST_REMOVED FIELD_ADDED FIELD_REMOVED FIELD_NAME_CHANGED FIELD_STRING_OR_BYTES_LABEL_CHANGED ONEOF_ADDED
ONEOF_REMOVED ONEOF_FIELD_ADDED ONEOF_FIELD_MOVED_TO_TOP_LEVEL""".split())

# Confluent's Difference descriptions ("%s": the reader's schema, then the writer's)
DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{path}' in the reader schema does not match the package in the writer schema",
    "MESSAGE_REMOVED": "The reader schema is missing a MESSAGE type at path '{path}' in the writer schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{path}' in the reader schema does not match the writer schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{path}' in the reader schema does not match "
                                 "its kind in the writer schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{path}' in the reader schema does not match "
                                "its type in the writer schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{path}' in the reader schema does not "
                                   "match its label in the writer schema",
    "REQUIRED_FIELD_ADDED": "A required field at path '{path}' in the reader schema is missing in the writer schema",
    "REQUIRED_FIELD_REMOVED": "The reader schema is missing a required field at path: '{path}' in the writer schema",
    "ONEOF_FIELD_REMOVED": "The reader schema is missing a oneof field at path '{path}' in the writer schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{path}' in the reader schema are "
                                      "outside a oneof in the writer schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{path}' in the reader schema is outside an "
                                     "existing oneof in the writer schema",
}

_SCALAR_GROUPS = {"int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
                  "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER",
                  "sint64": "SIGNED_NUMBER", "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
                  "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
                  "float": "FLOAT", "double": "DOUBLE"}


@dataclass
class Schema:
    """A parsed schema with what its types may name: its dependencies (import name -> file) and, for each,
    the reference it came from (subject:version; None for a well-known file)."""
    proto: ProtoFile
    dependencies: dict[str, ProtoFile]
    origins: dict[str, str | None]

    def types(self) -> dict[str, TypeInfo]:
        out: dict[str, TypeInfo] = {}
        for name, dep in self.dependencies.items():
            for full, info in declared_types(dep, self.origins.get(name) or "").items():
                info.file = self.origins.get(name)
                out[full] = info
        out.update(declared_types(self.proto, ""))  # "" the schema itself (Confluent's dummy reference)
        return out


def _map_parts(kind: str) -> tuple[str, str] | None:
    if kind.startswith("map<") and kind.endswith(">"):
        key, _, value = kind[4:-1].partition(",")
        return key.strip(), value.strip()
    return None


class _Context:
    def __init__(self, original: dict[str, TypeInfo], update: dict[str, TypeInfo], packages: tuple[str, str],
                 seen: set[int] | None = None, compared: dict | None = None) -> None:
        self.types = {True: original, False: update}
        self.packages = {True: packages[0], False: packages[1]}
        self.path: list[str] = []
        self.names: list[str] = []
        self.seen: set[int] = set() if seen is None else seen  # messages being compared (recursive types)
        # (original, update) message -> their differences and whether they are compatible: each pair of
        # types from elsewhere is compared once (a chain of types each using the next twice would double
        # the work at each link: 22 links took 188 s)
        self.compared: dict[tuple[int, int], tuple[list[tuple[str, str]], bool]] = {} if compared is None \
            else compared
        self.differences: list[tuple[str, str]] = []

    def sub(self, original_package: str, update_package: str, name: str) -> _Context:
        out = _Context(self.types[True], self.types[False], (original_package, update_package), set(self.seen),
                       self.compared)
        out.path = name.split(".")
        out.names = name.split(".")
        return out

    def add(self, kind: str, *more_path: str) -> None:
        self.differences.append((kind, "#/" + "/".join(self.path + list(more_path))))

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.differences)

    def resolve(self, name: str, original: bool) -> str | None:
        """Context.resolve: a name's full name, tried in the package and the names entered, innermost first."""
        types = self.types[original]
        if not types:
            return None
        if name.startswith("."):
            return name[1:] if name[1:] in types else None
        prefix = (self.packages[original].split(".") if self.packages[original] else []) + self.names
        while prefix:
            candidate = ".".join(prefix) + "." + name
            if candidate in types:
                return candidate
            prefix.pop()
        return name if name in types else None

    def type_of(self, name: str, original: bool) -> TypeInfo | None:
        full = self.resolve(name, original)
        return self.types[original].get(full) if full is not None else None


def _map_type(info: TypeInfo | None) -> str | None:
    if info is None or not info.is_map_entry:
        return None
    fields = {f.name: f for f in info.element.fields} if isinstance(info.element, Message) else {}
    if "key" not in fields or "value" not in fields:
        return None
    return f"map<{fields['key'].type}, {fields['value'].type}>"


def _compare_types(ctx: _Context, original: list[Message | Enum], update: list[Message | Enum]) -> None:
    """SchemaDiff.compareTypeElements: messages by name (and their index among messages), enums by name."""
    def index(types: list[Message | Enum]) -> tuple[dict[str, Message], dict[str, int], dict[str, Enum]]:
        messages = [t for t in types if isinstance(t, Message)]
        return ({m.name: m for m in messages}, {m.name: i for i, m in enumerate(messages)},
                {t.name: t for t in types if isinstance(t, Enum)})
    old_messages, old_index, old_enums = index(original)
    new_messages, new_index, new_enums = index(update)
    for name in sorted(old_messages.keys() | new_messages.keys()):
        ctx.path.append(name)
        ctx.names.append(name)
        if name not in new_messages:
            info = ctx.type_of(name, True)
            if info is not None and not info.is_map_entry:
                ctx.add("MESSAGE_REMOVED")
        elif name not in old_messages:
            info = ctx.type_of(name, False)
            if info is not None and not info.is_map_entry:
                ctx.add("MESSAGE_ADDED")
        else:
            _compare_message(ctx, old_messages[name], new_messages[name])
            if old_index[name] != new_index[name]:
                ctx.add("MESSAGE_MOVED")
        ctx.path.pop()
        ctx.names.pop()
    for name in sorted(old_enums.keys() | new_enums.keys()):
        ctx.path.append(name)
        ctx.names.append(name)
        if name not in new_enums:
            ctx.add("ENUM_REMOVED")
        elif name not in old_enums:
            ctx.add("ENUM_ADDED")
        else:
            _compare_enum(ctx, old_enums[name], new_enums[name])
        ctx.path.pop()
        ctx.names.pop()


def _compare_enum(ctx: _Context, original: Enum, update: Enum) -> None:
    old = {c.number: c for c in original.constants}
    new = {c.number: c for c in update.constants}
    for number in sorted(old.keys() | new.keys()):
        if number not in new:
            ctx.add("ENUM_CONST_REMOVED", str(number))
        elif number not in old:
            ctx.add("ENUM_CONST_ADDED", str(number))
        elif old[number].name != new[number].name:
            ctx.add("ENUM_CONST_CHANGED", str(number))


def _fields_of(m: Message) -> tuple[dict[int, Field], dict[int, str], dict[str, list[Field]]]:
    by_number = {f.number: f for f in m.fields}
    oneof_of: dict[int, str] = {}
    oneofs: dict[str, list[Field]] = {}
    for o in m.oneofs:
        oneofs[o.name] = o.fields
        for f in o.fields:
            by_number[f.number] = f
            oneof_of[f.number] = o.name
    return by_number, oneof_of, oneofs


def _compare_message(ctx: _Context, original: Message, update: Message) -> None:
    """MessageSchemaDiff.compare: fields by number over the whole message, oneof membership aside."""
    if id(original) in ctx.seen:
        return
    ctx.seen.add(id(original))
    old, old_oneof, old_oneofs = _fields_of(original)
    new, new_oneof, new_oneofs = _fields_of(update)
    deleted = {name for name, fields in old_oneofs.items()
               if name not in new_oneofs and not any(f.number in new for f in fields)}
    for o in update.oneofs:  # newly mutually exclusive fields
        groups, moved_in = set(), 0
        for f in o.fields:
            if f.number in old_oneof:
                groups.add("oneof:" + old_oneof[f.number])
            elif f.number in old:
                groups.add(f"field:{f.number}")
                moved_in += 1
        if len(groups) > 1:
            ctx.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF", o.name)
    for name in sorted(old_oneofs.keys() | new_oneofs.keys()):
        if name not in new_oneofs:
            ctx.add("ONEOF_REMOVED", name)
        elif name not in old_oneofs:
            ctx.add("ONEOF_ADDED", name)
    for number in sorted(old.keys() | new.keys()):
        was, now = old.get(number), new.get(number)
        was_in, now_in = old_oneof.get(number), new_oneof.get(number)
        if now is None:
            if was_in is not None:
                if was_in not in deleted:
                    ctx.add("ONEOF_FIELD_REMOVED", was_in, str(number))
            else:
                ctx.add("REQUIRED_FIELD_REMOVED" if was.label == "required" else "FIELD_REMOVED", str(number))
        elif was is None:
            if now_in is not None:
                ctx.add("ONEOF_FIELD_ADDED", now_in, str(number))
            else:
                ctx.add("REQUIRED_FIELD_ADDED" if now.label == "required" else "FIELD_ADDED", str(number))
        else:
            if was_in is not None and now_in is None:
                ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(number))
            where = [now_in, str(number)] if now_in is not None else [str(number)]
            ctx.path += where
            _compare_field(ctx, was, now)
            del ctx.path[-len(where):]
    _compare_types(ctx, original.nested, update.nested)
    ctx.seen.discard(id(original))


def _compare_field(ctx: _Context, original: Field, update: Field) -> None:
    if original.name != update.name:
        ctx.add("FIELD_NAME_CHANGED")
    _compare_labels_and_types(ctx, original.label, update.label, original.type, update.type)


def _kind(ctx: _Context, kind: str, original: bool) -> str:
    if kind in SCALARS:
        return "SCALAR"
    if _map_parts(kind):
        return "MAP"
    info = ctx.type_of(kind, original)
    return "SCALAR" if info is not None and isinstance(info.element, Enum) else "MESSAGE"


def _scalar_group(ctx: _Context, kind: str, original: bool) -> str:
    info = ctx.type_of(kind, original)
    if info is not None and isinstance(info.element, Enum):
        return "GENERAL_NUMBER"
    return _SCALAR_GROUPS.get(kind, "ANY")


def _compare_labels_and_types(ctx: _Context, old_label: str | None, new_label: str | None, old_type: str,
                              new_type: str) -> None:
    if old_type not in SCALARS:  # a map entry message compares as the map it is
        old_type = _map_type(ctx.type_of(old_type, True)) or old_type
    if new_type not in SCALARS:
        new_type = _map_type(ctx.type_of(new_type, False)) or new_type
    old_kind, new_kind = _kind(ctx, old_type, True), _kind(ctx, new_type, False)
    if old_kind != new_kind:
        ctx.add("FIELD_KIND_CHANGED")
    elif old_kind == "SCALAR":
        old_group, new_group = _scalar_group(ctx, old_type, True), _scalar_group(ctx, new_type, False)
        if old_group != new_group:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif old_label is not None and new_label is not None and old_label != new_label:
            ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if old_group == "STRING_OR_BYTES"
                    else "FIELD_NUMERIC_LABEL_CHANGED")
    elif old_kind == "MESSAGE":
        _compare_message_types(ctx, old_type, new_type)
    elif old_kind == "MAP":
        old_parts, new_parts = _map_parts(old_type), _map_parts(new_type)
        assert old_parts is not None and new_parts is not None
        _compare_labels_and_types(ctx, None, None, old_parts[0], new_parts[0])
        _compare_labels_and_types(ctx, None, None, old_parts[1], new_parts[1])


def _compare_message_types(ctx: _Context, original: str, update: str) -> None:
    """FieldSchemaDiff.compareMessageTypes: the same name within its package; a type from elsewhere (not
    both from the schema itself, not both from one reference version) compared field by field."""
    old_full, new_full = ctx.resolve(original, True), ctx.resolve(update, False)
    if old_full is None or new_full is None:
        if original != update:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    old_info, new_info = ctx.types[True][old_full], ctx.types[False][new_full]
    old_local = old_full.removeprefix(old_info.package + ".") if old_info.package else old_full
    new_local = new_full.removeprefix(new_info.package + ".") if new_info.package else new_full
    if old_local != new_local:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    same_origin = old_info.file is not None and new_info.file is not None and old_info.file == new_info.file
    if same_origin or not isinstance(old_info.element, Message) or not isinstance(new_info.element, Message):
        return
    pair = (id(old_info.element), id(new_info.element))
    verdict = ctx.compared.get(pair)
    if verdict is None:  # its differences are listed where the pair is first compared
        sub = ctx.sub(old_info.package, new_info.package, old_local)
        _compare_message(sub, old_info.element, new_info.element)
        ctx.differences += sub.differences
        verdict = ctx.compared[pair] = (sub.differences, sub.compatible())
    if not verdict[1]:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


def differences(original: Schema, update: Schema) -> list[tuple[str, str]]:
    """Every difference (type, path) from `original` to `update` (SchemaDiff.compare)."""
    ctx = _Context(original.types(), update.types(), (original.proto.package or "", update.proto.package or ""))
    if (original.proto.package or None) != (update.proto.package or None):
        ctx.add("PACKAGE_CHANGED")
    _compare_types(ctx, original.proto.types, update.proto.types)
    return ctx.differences


def read_problems(reader: Schema, writer: Schema) -> list[str]:
    """Why `reader` cannot read what `writer` wrote, in Confluent's words (empty: it can)."""
    return [f'{{errorType:"{kind}", description:"{DESCRIPTIONS.get(kind, "").format(path=path)}"}}'
            for kind, path in differences(writer, reader) if kind not in COMPATIBLE]

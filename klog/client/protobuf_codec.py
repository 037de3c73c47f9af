"""Protobuf records in Confluent's wire format for `klog consume -s protobuf` and `klog produce -s protobuf`:
magic byte 0, the schema's 4-byte id, the message indexes (a zigzag varint count, then the index path of
the record's message type among the schema's messages; a lone 0 for the first message), then the message.

The schema comes from the registry as Confluent's serialized form (`?format=serialized`: a base64
FileDescriptorProto, what confluent-kafka's ProtobufDeserializer asks for), with its references (imports
registered as their own subjects) fetched the same way; Google's and Confluent's well-known imports are
klog's own (klog.protocol.protobuf_schema.well_known). A message prints as Protobuf's JSON mapping with
default values included and no whitespace, as Confluent's kafka-protobuf-console-consumer prints it
(JsonFormat's includingDefaultValueFields, lowerCamelCase names); produce parses the same JSON into the
schema's first message. Needs the `protobuf` package (the connect extra)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from klog.errors import KlogError

REFERENCES_MAX = 100  # imported schemas fetched for one schema
INDEXES_MAX = 32  # message nesting a record's index path may name (Protobuf itself allows 100 levels)


class ProtobufCodecError(KlogError):
    """A record, or a schema the registry gave, that Protobuf cannot take here."""


def _modules() -> tuple[Any, Any, Any, Any]:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
    except ImportError:
        raise KlogError("-s protobuf needs protobuf: pip install 'klog[connect]'") from None
    return descriptor_pb2, descriptor_pool, json_format, message_factory


def message_types(registry: Any, schema_id: int) -> tuple[Any, Callable[[list[int]], Any]]:
    """The schema's FileDescriptorProto and a function from a message index path to its message class."""
    descriptor_pb2, _, _, message_factory = _modules()
    found = registry.call("GET", f"/schemas/ids/{schema_id}?format=serialized")
    if (found.get("schemaType") or "AVRO") != "PROTOBUF":
        raise ProtobufCodecError(f"schema {schema_id} is {found.get('schemaType') or 'AVRO'}, not PROTOBUF")
    files: dict[str, Any] = {}
    pool = _pool(_with_dependencies(registry, f"schema-{schema_id}.proto", found, descriptor_pb2, files),
                 f"schema {schema_id}")
    top = files[f"schema-{schema_id}.proto"]
    package = f"{top.package}." if top.package else ""
    classes: dict[tuple[int, ...], Any] = {}

    def message_class(path: list[int]) -> Any:
        key = tuple(path)
        made = classes.get(key)
        if made is None:
            types, full = top.message_type, package.rstrip(".")
            for i in path:
                if not 0 <= i < len(types):
                    raise ProtobufCodecError(f"message index {path} names no message of schema {schema_id}")
                full = f"{full}.{types[i].name}" if full else types[i].name
                types = types[i].nested_type
            made = classes[key] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
        return made

    return top, message_class


def local_message_class(fd: Any, full_name: str) -> Any:
    """The class of message `full_name` of a FileDescriptorProto made here, not fetched (a schema before it is
    registered), its imports the well-known files."""
    descriptor_pb2, _, _, message_factory = _modules()
    files: dict[str, Any] = {fd.name: fd}
    ordered: list[tuple[str, Any]] = []
    for dep in fd.dependency:
        if dep not in files:
            ordered += _well_known(dep, fd.name, descriptor_pb2, files)
    pool = _pool([*ordered, (fd.name, fd)], fd.name)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _pool(files: list[tuple[str, Any]], what: str) -> Any:
    """A descriptor pool of (import name, FileDescriptorProto)s, each after what it imports."""
    _, descriptor_pool, _, _ = _modules()
    pool = descriptor_pool.DescriptorPool()
    for name, fd in files:
        try:
            pool.AddSerializedFile(fd.SerializeToString())
        except Exception as e:  # noqa: BLE001 - protobuf's TypeError / DescriptorError: a file it refuses
            raise ProtobufCodecError(f"{what}: {name} is not a descriptor Protobuf takes: {e}") from None
    return pool


def _with_dependencies(registry: Any, name: str, answer: dict, descriptor_pb2: Any,
                       files: dict[str, Any]) -> list[tuple[str, Any]]:
    """(import name, FileDescriptorProto) of the schema `answer` gives and of every file it imports, each
    after what it imports."""
    referenced = {str(r.get("name")): r for r in answer.get("references") or [] if isinstance(r, dict)}
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(answer["schema"], validate=True))
    fd.name = name
    files[name] = fd
    out: list[tuple[str, Any]] = []
    for dep in fd.dependency:
        if dep in files:
            continue
        if len(files) > REFERENCES_MAX:
            raise ProtobufCodecError(f"more than {REFERENCES_MAX} imported schemas")
        ref = referenced.get(dep)
        if ref is None:
            out += _well_known(dep, name, descriptor_pb2, files)
            continue
        # soft-deleted too, as Confluent's clients fetch a reference (lookupDeletedSchema): a record written
        # before its schema and the files it imports were deleted still reads
        doc = registry.call("GET", f"/subjects/{quote(str(ref['subject']), safe='')}/versions/"
                                   f"{int(ref['version'])}?format=serialized&deleted=true")
        out += _with_dependencies(registry, dep, doc, descriptor_pb2, files)
    return [*out, (name, fd)]


def _well_known(dep: str, importer: str, descriptor_pb2: Any, files: dict[str, Any]) -> list[tuple[str, Any]]:
    """A file every schema may import without a reference (and what it imports): the protobuf package's
    own descriptor where it has the module (google/protobuf/*, google/type/* with googleapis-common-protos),
    else klog's declaration of it (confluent/meta.proto, confluent/type/decimal.proto, ...)."""
    import importlib

    from klog.protocol import protobuf_schema as proto

    try:
        if not dep.startswith(("google/protobuf/", "google/type/")):  # (no module named by a registry's answer)
            raise ImportError(dep)
        module = importlib.import_module(dep.removesuffix(".proto").replace("/", ".") + "_pb2")
        fd = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    except ImportError:
        known = proto.well_known().get(dep)
        if known is None:
            raise ProtobufCodecError(f"{importer} imports {dep}, which is neither one of its references nor a "
                                     "well-known file") from None
        fd = proto.to_descriptor(known, proto.well_known(), name=dep)
    files[dep] = fd
    out: list[tuple[str, Any]] = []
    for d in fd.dependency:
        if d not in files:
            out += _well_known(d, dep, descriptor_pb2, files)
    return [*out, (dep, fd)]


def read_indexes(body: bytes) -> tuple[list[int], int]:
    """The message index path at the start of `body` (after the 5-byte header), and where the message starts."""
    count, at = _zigzag(body, 0)
    if count == 0:
        return [0], at
    if not 0 < count <= INDEXES_MAX:
        raise ProtobufCodecError(f"a message index count of {count}")
    path = []
    for _ in range(count):
        i, at = _zigzag(body, at)
        path.append(i)
    return path, at


def write_indexes(path: list[int]) -> bytes:
    """The message indexes read_indexes reads: a lone 0 for the first message, else the zigzag count and path."""
    if path == [0]:
        return b"\x00"
    out = bytearray()
    for value in [len(path), *path]:
        n = (value << 1) ^ (value >> 63)
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ProtobufCodecError("the message indexes end early")
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), at


def reader(registry: Any, schema_id: int) -> Callable[[bytes], bytes]:
    """body (what follows the 5-byte header) -> the message as one line of JSON."""
    _, _, json_format, _ = _modules()
    _, message_class = message_types(registry, schema_id)

    def read(body: bytes) -> bytes:
        path, at = read_indexes(body)
        message = message_class(path)()
        try:
            message.ParseFromString(body[at:])
            doc = _to_dict(json_format, message)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and its JSON printer's errors
            raise ProtobufCodecError(f"not Protobuf of schema {schema_id} (message {path}): {e}") from None
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()

    return read


def _to_dict(json_format: Any, message: Any) -> Any:
    try:  # (protobuf 5.26 renamed including_default_value_fields)
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    except TypeError:
        return json_format.MessageToDict(message, including_default_value_fields=True)


def encoder(registry: Any, schema_id: int, header: bytes) -> Callable[[bytes], bytes]:
    """JSON text -> the schema's first message, framed (`header`: magic byte and id; index path [0])."""
    _, _, json_format, _ = _modules()
    top, message_class = message_types(registry, schema_id)
    if not top.message_type:
        raise ProtobufCodecError(f"schema {schema_id} declares no message")
    cls = message_class([0])

    def encode(data: bytes) -> bytes:
        try:
            message = json_format.Parse(data, cls())
        except Exception as e:  # noqa: BLE001 - json_format.ParseError and the JSON decoder's errors
            raise ProtobufCodecError(f"is not {cls.DESCRIPTOR.full_name} of schema {schema_id} in Protobuf's "
                                     f"JSON mapping: {' '.join(str(e).split())[:300]}") from None
        return header + write_indexes([0]) + message.SerializeToString()

    return encode

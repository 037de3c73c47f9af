"""What one client may cost everyone else: entries per request, connections per address and in all.

Kafka has no bound on the entries of a request (its parsing runs on many threads); here requests are
parsed by kio's native reader holding the interpreter for the whole frame (0.6 s for a Produce of
1,000,000 partition entries), so a request's entries are counted first, by a walk over its schema
that stops as soon as the count passes the limit, and a request over it is refused before it is
parsed: INVALID_REQUEST, one log line, the connection keeps serving.
"""

from __future__ import annotations

import dataclasses
import struct
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from klog.errors import UsageError

MAX_REQUEST_ENTRIES_DEFAULT = 20_000  # array entries in one request, all arrays summed
UNBOUNDED = 2**31 - 1  # Kafka's default for max.connections and max.connections.per.ip
# descriptors kept for the store (segments, indexes, locks, LMDB) when max.connections follows the
# process's open-file limit: a quarter of it, at least this many
STORE_FDS_MIN = 64
REFUSAL_LOG_INTERVAL_S = 10.0  # one log line per this, with the count refused since the last one


@dataclass
class ServeLimits:
    """`klog serve`'s bounds on connections and requests (docs/serve-limits.md)."""

    max_connections: int | None = None  # None: what the open-file limit leaves (default_max_connections)
    max_connections_per_ip: int = UNBOUNDED
    per_ip_overrides: dict[str, int] = field(default_factory=dict)  # max.connections.per.ip.overrides
    max_request_entries: int = MAX_REQUEST_ENTRIES_DEFAULT

    def validate(self) -> None:
        if self.max_connections is None:
            self.max_connections = default_max_connections()
        for name, value in (("--max-connections", self.max_connections),
                            ("--max-connections-per-ip", self.max_connections_per_ip),
                            ("--max-request-entries", self.max_request_entries)):
            if value < 1:
                raise UsageError(f"{name} must be 1 or more")
        for host, value in self.per_ip_overrides.items():
            if value < 0:
                raise UsageError(f"--max-connections-per-ip-overrides: {host}:{value} must be 0 or more")

    def per_ip(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)


def default_max_connections() -> int:
    """Kafka's max.connections is unbounded, but past the process's open-file limit accepting fails
    (EMFILE) and the store cannot open its files: the limit less what the store keeps."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= UNBOUNDED:
        return UNBOUNDED
    return max(1, soft - max(STORE_FDS_MIN, soft // 4))


def parse_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: 'host:count,host:count' ('[::1]:5' for IPv6)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise UsageError(f"--max-connections-per-ip-overrides: '{item}' is not HOST:COUNT")
        out[host.strip("[]")] = int(count)
    return out


class RateLimitedLog:
    """One log line per interval for a repeated event, counting what it did not log."""

    def __init__(self, log: Any, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self._log = log
        self._interval_s = interval_s
        self._last = float("-inf")
        self._suppressed = 0

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._suppressed += 1
            return
        suffix = f" ({self._suppressed} more since the last such line)" if self._suppressed else ""
        self._log.warning(message + suffix, *args)
        self._last, self._suppressed = now, 0


# -- counting a request's entries without parsing it --------------------------------------------------
class TooManyEntries(Exception):
    pass


class _Truncated(Exception):
    pass


class ArrayPastFrame(Exception):
    """An array claims more entries than the bytes left in the frame: the frame is malformed (Kafka's
    readers refuse it the same way, before allocating). kio's native reader would first allocate
    room for every claimed entry: 2**32 of them abort the whole process."""


_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "timedelta_i32": 4, "int64": 8,
          "timedelta_i64": 8, "float64": 8, "uuid": 16}


def count_entries(frame: bytes, offset: int, schema: type, limit: int) -> int:
    """The array entries of the request body of type `schema` at frame[offset:] (every array, nested
    ones included), raising TooManyEntries as soon as they pass `limit`: the walk costs at most
    `limit` entries' worth of work whatever the frame holds; ArrayPastFrame for an array claiming
    more entries than bytes are left. A frame too short for its arrays otherwise returns what was
    counted (kio's parse then refuses it)."""
    walker = _Walker(frame, limit)
    try:
        walker.entity(schema, offset)
    except (_Truncated, struct.error, IndexError):
        pass
    return walker.count


def without_unknown_tags(frame: bytes, offset: int, schema: type) -> bytes | None:
    """`frame` without the tagged fields of its body (of type `schema`, at `offset`) that the schema
    does not know: Kafka's readers skip those (a newer client may send them), kio's reader refuses
    them. None: it has none, or cannot be walked."""
    walker = _Walker(frame, len(frame) + 1)
    walker.unknown_tags = []
    try:
        walker.entity(schema, offset)
    except (_Truncated, struct.error, IndexError, ArrayPastFrame, TooManyEntries):
        return None
    if not walker.unknown_tags:
        return None
    out, copied = bytearray(), 0
    for start, count_end, count, unknown in walker.unknown_tags:  # (in the frame's order)
        out += frame[copied:start] + uvarint_bytes(count - len(unknown))
        copied = count_end
        for field_start, field_end in unknown:
            out += frame[copied:field_start]
            copied = field_end
    return bytes(out + frame[copied:])


def uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class _Field:
    kafka_type: str | None  # primitives
    entity: type | None  # nested entities
    array: bool
    optional: bool


_layouts: dict[type, tuple[_Field, ...]] = {}


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _layout(cls: type) -> tuple[_Field, ...]:
    found = _layouts.get(cls)
    if found is not None:
        return found
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:  # tagged fields live in the tagged section, skipped whole
            continue
        hint, optional, array = hints[f.name], False, False
        if _is_optional(hint):  # a nullable array or struct
            hint, optional = next(a for a in typing.get_args(hint) if a is not type(None)), True
        if typing.get_origin(hint) is tuple:
            hint, array = typing.get_args(hint)[0], True
        if _is_optional(hint):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        entity = hint if dataclasses.is_dataclass(hint) else None
        out.append(_Field(None if entity else f.metadata.get("kafka_type"), entity, array, optional))
    _layouts[cls] = result = tuple(out)
    return result


_STRING, _BYTES = -1, -2  # the length-prefixed field kinds of _flat's ops (>0: that many fixed bytes)
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_flats: dict[type, tuple[int, ...] | None] = {}


def _flat(cls: type) -> tuple[int, ...] | None:
    """An entity of primitives only, as the sizes of its fields (adjacent fixed ones summed), else None."""
    if cls in _flats:
        return _flats[cls]
    ops: list[int] | None = []
    for f in _layout(cls):
        fixed = _FIXED.get(f.kafka_type or "")
        if f.array or f.entity is not None or (fixed is None and f.kafka_type not in ("string", "bytes", "records")):
            ops = None
            break
        if fixed is not None and ops and ops[-1] > 0:
            ops[-1] += fixed
        else:
            ops.append(fixed if fixed is not None else (_STRING if f.kafka_type == "string" else _BYTES))
    _flats[cls] = result = tuple(ops) if ops is not None else None
    return result


# a walk's program: an entity's fields as ops, each an int (>0: that many fixed bytes, adjacent ones
# summed; _STRING, _BYTES: length-prefixed; _UNKNOWN: a type the walk does not know) or a tuple:
# (_ARRAY, the entry's op or program, its entity class or None), (_STRUCT, program, nullable),
# (_TAGS, the tags the entity knows): a flexible entity's tagged fields. Built once per type: the
# walk then pays an op, not a field.
_UNKNOWN = -4
_ARRAY, _STRUCT, _TAGS = 0, 1, 2
_programs: dict[type, tuple] = {}


def _program(cls: type) -> tuple:
    found = _programs.get(cls)
    if found is not None:
        return found
    ops: list = []
    for f in _layout(cls):
        if f.array:
            item = _program(f.entity) if f.entity else _primitive_op(f.kafka_type)
            ops.append((_ARRAY, item, f.entity))
        elif f.entity is not None:
            ops.append((_STRUCT, _program(f.entity), f.optional))
        else:
            op = _primitive_op(f.kafka_type)
            if op > 0 and ops and isinstance(ops[-1], int) and ops[-1] > 0:
                ops[-1] += op
            else:
                ops.append(op)
    if getattr(cls, "__flexible__", False):
        ops.append((_TAGS, frozenset(f.metadata["tag"] for f in dataclasses.fields(cls) if "tag" in f.metadata)))
    _programs[cls] = result = tuple(ops)
    return result


def _primitive_op(kafka_type: str | None) -> int:
    fixed = _FIXED.get(kafka_type or "")
    if fixed is not None:
        return fixed
    return {"string": _STRING, "bytes": _BYTES, "records": _BYTES}.get(kafka_type or "", _UNKNOWN)


class _Walker:
    def __init__(self, frame: bytes, limit: int, flexible: bool = False) -> None:
        self.frame = frame
        self.size = len(frame)
        self.limit = limit
        self.flexible = flexible  # (every entity of one request version is, or none is)
        self.count = 0
        # (start, end of its count, count, [(start, end) of each unknown field]) per tagged section
        # holding tags its entity does not know; None: not looked for
        self.unknown_tags: list | None = None

    def _uvarint(self, pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= self.size:
                raise _Truncated
            b = self.frame[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                raise _Truncated

    def _array_length(self, pos: int) -> tuple[int, int]:
        """An array's length (-1: null) and where its entries start."""
        if self.flexible:
            if pos < self.size and self.frame[pos] < 0x80:
                return self.frame[pos] - 1, pos + 1
            n, pos = self._uvarint(pos)
            return n - 1, pos
        return _I32.unpack_from(self.frame, pos)[0], pos + 4

    def _add(self, n: int, pos: int) -> None:
        if n > self.size - pos:
            raise ArrayPastFrame(f"an array of {n} entries in the {self.size - pos} bytes left")
        if n > 0:
            self.count += n
            if self.count > self.limit:
                raise TooManyEntries

    def entity(self, cls: type, pos: int) -> int:
        self.flexible = bool(getattr(cls, "__flexible__", False))
        return self._run(_program(cls), pos)

    def _run(self, program: tuple, pos: int) -> int:
        frame, size, flexible = self.frame, self.size, self.flexible
        for op in program:
            if op.__class__ is int:
                if op > 0:
                    pos += op
                # the usual compact length: one byte, read here without a call
                elif flexible and op != _UNKNOWN and pos < size and frame[pos] < 0x80:
                    pos += frame[pos] or 1  # (length + 1, the byte included; 0: a null)
                else:
                    pos = self._sized(op, pos)
            elif op[0] == _ARRAY:
                if flexible and pos < size and frame[pos] < 0x80:
                    n, pos = frame[pos] - 1, pos + 1
                else:
                    n, pos = self._array_length(pos)
                self._add(n, pos)
                item, entity = op[1], op[2]
                if item.__class__ is int:  # primitives
                    if item > 0:
                        pos += item * max(n, 0)
                    else:
                        for _ in range(n):
                            pos = self._sized(item, pos)
                    continue
                flat = _flat(entity) if self.unknown_tags is None else None  # (its walk skips every tag)
                if flat is not None:
                    pos = self._flat_entries(n, flat, pos)
                    continue
                for _ in range(n):
                    pos = self._run(item, pos)
                    if pos > self.size:
                        raise _Truncated
            elif op[0] == _TAGS:
                if pos < size and not frame[pos]:  # (the usual: none)
                    pos += 1
                else:
                    pos = self._tags(pos, op[1])
            else:  # a struct
                if op[2]:  # a nullable struct: -1 absent, 1 present
                    if pos >= self.size:
                        raise _Truncated
                    pos += 1
                    if self.frame[pos - 1] == 0xFF:
                        continue
                pos = self._run(op[1], pos)
        if pos > self.size:
            raise _Truncated
        return pos

    def _tags(self, pos: int, known: frozenset[int]) -> int:
        """Past the tagged fields at `pos`: a count, then (tag, size, bytes) each; those whose tag
        the entity does not know are noted in `unknown_tags`, when it is a list."""
        start = pos
        n, pos = self._uvarint(pos)
        count_end, unknown = pos, []
        for _ in range(n):
            field_start = pos
            tag, pos = self._uvarint(pos)
            size, pos = self._uvarint(pos)
            pos += size
            if tag not in known:
                unknown.append((field_start, pos))
        if unknown and self.unknown_tags is not None:
            self.unknown_tags.append((start, count_end, n, unknown))
        return pos

    def _sized(self, op: int, pos: int) -> int:
        """Past a length-prefixed field at `pos`."""
        frame = self.frame
        if op == _UNKNOWN:
            raise _Truncated  # a type this walk does not know: leave the request to kio's parse
        if self.flexible:  # compact: uvarint length + 1
            if pos < self.size and frame[pos] < 0x80:
                return pos + max(frame[pos], 1)  # (0: null)
            n, pos = self._uvarint(pos)
            return pos + max(n - 1, 0)
        if op == _STRING:
            return pos + 2 + max(_I16.unpack_from(frame, pos)[0], 0)
        return pos + 4 + max(_I32.unpack_from(frame, pos)[0], 0)

    def _flat_entries(self, n: int, ops: tuple[int, ...], pos: int) -> int:
        """Past `n` entries of an entity holding no array or entity (a Produce's partition entries,
        a Metadata request's topics): one tight loop over its fields' sizes, ~4x faster than
        _run() an entry (the walk is what a request of many entries costs before it is parsed)."""
        frame, size, uvarint, flexible = self.frame, self.size, self._uvarint, self.flexible
        unpack_h, unpack_i = _I16.unpack_from, _I32.unpack_from
        for _ in range(max(n, 0)):
            for op in ops:
                if op > 0:  # fixed bytes
                    pos += op
                elif flexible:  # compact string or bytes: uvarint length + 1
                    if pos < size and frame[pos] < 0x80:
                        length, pos = frame[pos] - 1, pos + 1
                    else:
                        length, pos = uvarint(pos)
                        length -= 1
                    pos += max(length, 0)
                elif op == _STRING:
                    pos += 2 + max(unpack_h(frame, pos)[0], 0)
                else:
                    pos += 4 + max(unpack_i(frame, pos)[0], 0)
            if flexible:  # tagged fields: count, then (tag, size, bytes) each
                if pos < size and frame[pos] == 0:
                    pos += 1
                else:
                    count, pos = uvarint(pos)
                    for _ in range(count):
                        _, pos = uvarint(pos)
                        length, pos = uvarint(pos)
                        pos += length
            if pos > size:
                raise _Truncated
        return pos


# -- an answer for a request that is not parsed -------------------------------------------------------
def error_response(api_key: int, version: int, error: Any, message: str) -> Any:
    """The response of (api_key, version) saying `error` wherever it has an error code, its arrays
    empty: for a request refused before parsing (its entries are not known)."""
    from klog.protocol.kafka import response_module

    mod = response_module(api_key, version)
    cls = next(getattr(mod, n) for n in dir(mod) if n.endswith("Response")
               and getattr(getattr(mod, n), "__api_key__", None) == api_key and dataclasses.is_dataclass(
                   getattr(mod, n)) and getattr(mod, n).__name__.endswith("Response")
               and _is_top(getattr(mod, n)))
    from kio.schema.errors import ErrorCode

    return _filled(cls, ErrorCode(int(error)), message)


def _is_top(cls: type) -> bool:
    from kio.static.constants import EntityType

    return getattr(cls, "__type__", None) == EntityType.response


def _filled(cls: type, error: Any, message: str) -> Any:
    import datetime
    import uuid

    from kio.static.primitive import i32Timedelta, i64Timedelta

    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            if f.name == "error_code":
                values[f.name] = error
            continue
        hint, kafka_type = hints[f.name], f.metadata.get("kafka_type")
        optional = _is_optional(hint)
        if f.name == "error_code":
            values[f.name] = error
        elif f.name == "error_message":
            values[f.name] = message
        elif typing.get_origin(hint) is tuple:
            values[f.name] = ()
        elif optional:
            values[f.name] = None
        elif dataclasses.is_dataclass(hint):
            values[f.name] = _filled(hint, error, message)
        elif kafka_type == "timedelta_i32":
            values[f.name] = i32Timedelta.parse(datetime.timedelta(0))
        elif kafka_type == "timedelta_i64":
            values[f.name] = i64Timedelta.parse(datetime.timedelta(0))
        elif kafka_type == "uuid":
            values[f.name] = uuid.UUID(int=0)
        elif kafka_type == "string":
            values[f.name] = ""
        elif kafka_type in ("bytes", "records"):
            values[f.name] = b""
        elif kafka_type == "bool":
            values[f.name] = False
        elif kafka_type == "float64":
            values[f.name] = 0.0
        else:
            values[f.name] = -1
    return cls(**values)

"""A walk over a Kafka message's bytes by its kio schema, before kio's native reader parses them.

kio's reader reserves room for every entry an array claims before reading them: a frame claiming
2**32 - 2 entries makes it allocate 32 GiB and the process aborts (SIGABRT, no exception to catch).
Both ends of klog walk what they read first: `klog serve` every request (klog.server), the cluster
client every response (klog.client.remote.wire). An array claiming more entries than bytes are left
is refused (ArrayPastFrame), as Kafka's readers refuse it; the walk also counts entries (the
server's bound on a request's; a tagged field counts as one: 20,000 unknown ones in 64 KiB cost a
parse ~24 ms) and finds tagged fields a schema does not know. It is generic over
kio's schema classes: requests, responses and their headers, flexible or not."""

from __future__ import annotations

import dataclasses
import struct
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any


class TooManyEntries(Exception):
    pass


class Truncated(Exception):
    pass


def read_uvarint(frame: bytes, pos: int, end: int) -> tuple[int, int]:
    """(an unsigned varint at `pos`, where it ends); Truncated past `end` or past 64 bits."""
    value = shift = 0
    while True:
        if pos >= end:
            raise Truncated
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise Truncated


class ArrayPastFrame(Exception):
    """An array claims more entries than the bytes left in the frame: the frame is malformed (Kafka's
    readers refuse it the same way, before allocating). kio's native reader would first allocate
    room for every claimed entry: 2**32 of them abort the whole process."""


# (error_code and datetime_i64 appear in responses only: the cluster client walks those)
_FIXED = {"int8": 1, "bool": 1, "int16": 2, "error_code": 2, "uint16": 2, "int32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16}


def count_entries(frame: bytes | bytearray, offset: int, schema: type, limit: int) -> int:
    """The array entries of the request body of type `schema` at frame[offset:] (every array, nested
    ones included), raising TooManyEntries as soon as they pass `limit`: the walk costs at most
    `limit` entries' worth of work whatever the frame holds; ArrayPastFrame for an array claiming
    more entries than bytes are left. A frame too short for its arrays otherwise returns what was
    counted (kio's parse then refuses it)."""
    walker = _Walker(frame, limit)
    try:
        walker.entity(schema, offset)
    except (Truncated, struct.error, IndexError):
        pass
    return walker.count


def check_arrays(frame: bytes | bytearray, offset: int, *schemas: type) -> int:
    """Walk the entities of types `schemas` laid one after another from frame[offset:] (a response's
    header, then its body), raising ArrayPastFrame for an array claiming more entries than bytes are
    left, before kio's reader would reserve room for them. A frame too short otherwise passes (kio's
    parse refuses it); returns the entries counted."""
    walker = _Walker(frame, sys.maxsize)  # (no bound on the count: only the bytes bound each array)
    try:
        for schema in schemas:
            offset = walker.entity(schema, offset)
    except (Truncated, struct.error, IndexError):
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
    except (Truncated, struct.error, IndexError, ArrayPastFrame, TooManyEntries):
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


def with_valid_strings(frame: bytes, offset: int, schema: type) -> bytes | None:
    """`frame` with each string of its body (of type `schema`, at `offset`) that is not valid UTF-8
    decoded as Java's `new String(bytes, UTF_8)` decodes it, every malformed sequence replaced by
    U+FFFD, and written back with its new length: Kafka's readers parse such a request (a topic name
    then is one Kafka refuses by name), kio's reader refuses the whole of it. None: every string is
    valid, or the body cannot be walked."""
    walker = _Walker(frame, len(frame) + 1)
    walker.strings = []
    try:
        walker.entity(schema, offset)
    except (Truncated, struct.error, IndexError, ArrayPastFrame, TooManyEntries):
        return None
    if not walker.strings:
        return None
    out, copied = bytearray(), 0
    for start, data_start, data_end, compact in walker.strings:  # (in the frame's order)
        text = frame[data_start:data_end].decode("utf-8", "replace").encode()
        if not compact and len(text) > 0x7FFF:
            return None  # (no longer fits an int16 length: left to kio's refusal)
        out += frame[copied:start] + (uvarint_bytes(len(text) + 1) if compact else _I16.pack(len(text))) + text
        copied = data_end
    return bytes(out + frame[copied:])


# the milliseconds kio reads into a timedelta_i64 (its microseconds must fit an int64): it refuses more
TIMEDELTA_MS_MAX = 9_223_372_036_854_775
_I64 = struct.Struct(">q")


def with_timedeltas_in_range(frame: bytes, offset: int, schema: type) -> bytes | None:
    """`frame` with each timedelta_i64 of its body (of type `schema`, at `offset`) past what kio can
    read (+-TIMEDELTA_MS_MAX ms, ~292,000 years) written as that bound: Kafka reads any long there
    (a token's max lifetime, OffsetCommit v2-v4's retention time, none of which klog's answers depend
    on), kio's reader refuses the whole request. None: every one is in range, or the body cannot be
    walked."""
    walker = _Walker(frame, len(frame) + 1)
    walker.strings, walker.timedeltas = [], []
    try:
        walker.entity(schema, offset)
    except (Truncated, struct.error, IndexError, ArrayPastFrame, TooManyEntries):
        return None
    if not walker.timedeltas:
        return None
    out = bytearray(frame)
    for pos in walker.timedeltas:
        value = _I64.unpack_from(frame, pos)[0]
        _I64.pack_into(out, pos, TIMEDELTA_MS_MAX if value > 0 else -TIMEDELTA_MS_MAX)
    return bytes(out)


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


def is_optional(hint: Any) -> bool:
    """A nullable field's type hint (X | None)."""
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
        if is_optional(hint):  # a nullable array or struct
            hint, optional = next(a for a in typing.get_args(hint) if a is not type(None)), True
        if typing.get_origin(hint) is tuple:
            hint, array = typing.get_args(hint)[0], True
        if is_optional(hint):
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
_CHECKED_STRING = -5  # a string whose bytes the walk checks are UTF-8 (with_valid_strings' programs)
_CHECKED_TIMEDELTA = -6  # a timedelta_i64 whose value the walk checks (with_timedeltas_in_range)
_ARRAY, _STRUCT, _TAGS = 0, 1, 2
_programs: dict[tuple[type, bool], tuple] = {}


def _program(cls: type, checked: bool = False) -> tuple:
    """`checked`: its strings as _CHECKED_STRING ops (the walk looks at their bytes)."""
    found = _programs.get((cls, checked))
    if found is not None:
        return found
    ops: list = []
    for f in _layout(cls):
        if f.array:
            item = _program(f.entity, checked) if f.entity else _primitive_op(f.kafka_type, checked)
            ops.append((_ARRAY, item, f.entity))
        elif f.entity is not None:
            ops.append((_STRUCT, _program(f.entity, checked), f.optional))
        else:
            op = _primitive_op(f.kafka_type, checked)
            if op > 0 and ops and isinstance(ops[-1], int) and ops[-1] > 0:
                ops[-1] += op
            else:
                ops.append(op)
    if getattr(cls, "__flexible__", False):
        ops.append((_TAGS, frozenset(f.metadata["tag"] for f in dataclasses.fields(cls) if "tag" in f.metadata)))
    _programs[(cls, checked)] = result = tuple(ops)
    return result


def _primitive_op(kafka_type: str | None, checked: bool = False) -> int:
    if checked and kafka_type == "timedelta_i64":
        return _CHECKED_TIMEDELTA
    fixed = _FIXED.get(kafka_type or "")
    if fixed is not None:
        return fixed
    if checked and kafka_type == "string":
        return _CHECKED_STRING
    return {"string": _STRING, "bytes": _BYTES, "records": _BYTES}.get(kafka_type or "", _UNKNOWN)


class _Walker:
    def __init__(self, frame: bytes | bytearray, limit: int, flexible: bool = False) -> None:
        self.frame = frame
        self.size = len(frame)
        self.limit = limit
        self.flexible = flexible  # (every entity of one request version is, or none is)
        self.count = 0
        # (start, end of its count, count, [(start, end) of each unknown field]) per tagged section
        # holding tags its entity does not know; None: not looked for
        self.unknown_tags: list | None = None
        # (start, data start, data end, compact) of each string that is not valid UTF-8; None: not looked for
        self.strings: list | None = None
        # where each timedelta_i64 past what kio reads starts (with_timedeltas_in_range); None: not looked for
        self.timedeltas: list | None = None

    def _uvarint(self, pos: int) -> tuple[int, int]:
        return read_uvarint(self.frame, pos, self.size)

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
        return self._run(_program(cls, self.strings is not None), pos)

    def _run(self, program: tuple, pos: int) -> int:
        frame, size, flexible = self.frame, self.size, self.flexible
        for op in program:
            if op.__class__ is int:
                if op > 0:
                    pos += op
                # the usual compact length: one byte, read here without a call (a string or bytes)
                elif flexible and op > _UNKNOWN and pos < size and frame[pos] < 0x80:
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
                # (its walk skips every tag and looks into no string)
                flat = _flat(entity) if self.unknown_tags is None and self.strings is None else None
                if flat is not None:
                    pos = self._flat_entries(n, flat, pos)
                    continue
                for _ in range(n):
                    pos = self._run(item, pos)
                    if pos > self.size:
                        raise Truncated
            elif op[0] == _TAGS:
                if pos < size and not frame[pos]:  # (the usual: none)
                    pos += 1
                else:
                    pos = self._tags(pos, op[1])
            else:  # a struct
                if op[2]:  # a nullable struct: -1 absent, 1 present
                    if pos >= self.size:
                        raise Truncated
                    pos += 1
                    if self.frame[pos - 1] == 0xFF:
                        continue
                pos = self._run(op[1], pos)
        if pos > self.size:
            raise Truncated
        return pos

    def _tags(self, pos: int, known: frozenset[int]) -> int:
        """Past the tagged fields at `pos`: a count, then (tag, size, bytes) each; those whose tag
        the entity does not know are noted in `unknown_tags`, when it is a list."""
        start = pos
        n, pos = self._uvarint(pos)
        self._add(n, pos)  # (counted as entries: a tagged field costs a parse as much as an entry)
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
            raise Truncated  # a type this walk does not know: leave the request to kio's parse
        if op == _CHECKED_STRING:
            return self._checked_string(pos)
        if op == _CHECKED_TIMEDELTA:
            if pos + 8 > self.size:
                raise Truncated
            if self.timedeltas is not None and abs(_I64.unpack_from(self.frame, pos)[0]) > TIMEDELTA_MS_MAX:
                self.timedeltas.append(pos)
            return pos + 8
        if self.flexible:  # compact: uvarint length + 1
            if pos < self.size and frame[pos] < 0x80:
                return pos + max(frame[pos], 1)  # (0: null)
            n, pos = self._uvarint(pos)
            return pos + max(n - 1, 0)
        if op == _STRING:
            return pos + 2 + max(_I16.unpack_from(frame, pos)[0], 0)
        return pos + 4 + max(_I32.unpack_from(frame, pos)[0], 0)

    def _checked_string(self, pos: int) -> int:
        """Past the string at `pos`, noted in `strings` when its bytes are not UTF-8."""
        start = pos
        if self.flexible:
            n, pos = self._uvarint(pos)
            n -= 1
        else:
            n, pos = _I16.unpack_from(self.frame, pos)[0], pos + 2
        if n <= 0:
            return pos
        end = pos + n
        if end > self.size:
            raise Truncated
        try:
            bytes(self.frame[pos:end]).decode()
        except UnicodeDecodeError:
            self.strings.append((start, pos, end, self.flexible))  # type: ignore[union-attr]
        return end

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
                    self._add(count, pos)
                    for _ in range(count):
                        _, pos = uvarint(pos)
                        length, pos = uvarint(pos)
                        pos += length
            if pos > size:
                raise Truncated
        return pos

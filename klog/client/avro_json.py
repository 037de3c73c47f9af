"""One Avro datum (binary, its writer schema from a Schema Registry) as Avro's JSON encoding, exactly as
Avro's Java JsonEncoder (so Confluent's kafka-avro-console-consumer) writes it, and within bounds a
hostile record cannot break.

Exactly: a union member is named by the branch it was written with, not guessed from its value (fastavro's
json_writer guesses: a long 5 in ["int", "long"] came out as {"int": 5}, an enum symbol in ["string", E]
as a string, the second of two same-sized fixed types as the first). Each union is read as a union of
one-field wrapper records (a one-field record's binary encoding is its field's, so the bytes read are
the same), whose names fastavro returns, and the branch is looked up. A float prints as the shortest text
that is the same float32 (0.1, not 0.10000000149011612), and NaN/Infinity as the strings "NaN",
"Infinity", "-Infinity" (Jackson's default, which Avro's JsonDecoder reads back): the output stays JSON.

Within bounds: fastavro's C reader loops once per array item however many bytes an item takes, so an
array of null (or of empty records) claiming 2^62 items allocates until memory runs out; and it recurses
without a depth check, so 100 KB of a recursive type crashes the process (SIGSEGV). A schema that allows
either (an array whose items can take no bytes, a recursive named type) is walked first by a checker
that counts those items (ITEMS_MAX in a record) and the nesting (NESTING_MAX); other schemas cannot
make fastavro do more than their bytes say (nor nest deeper than they do).
"""

from __future__ import annotations

import io
import json
import math
import struct
from collections.abc import Callable
from typing import Any

# records, arrays, maps and unions within each other in one datum (a recursive type's depth): fastavro's
# reader, the conversion (a Python frame a level at most) and json's encoder (one a level) stay within
# Python's recursion limit (1000) with room for the caller's frames
NESTING_MAX = 400
ITEMS_MAX = 1_000_000  # array items that take no bytes (null, an empty record) in one datum
PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
WRAPPER_PREFIX = "klog_union_"

Convert = Callable[[Any], Any] | None  # None: the datum is its own JSON encoding
Skip = Callable[[bytes, int, int, list], int]  # (body, position, nesting, [items so far]) -> the next position
_FLOAT32 = struct.Struct("<f")


class AvroBodyError(ValueError):
    """A body that is not a datum of its schema, or one past the bounds."""


def avro_json_reader(fastavro: Any, schemas: list[Any]) -> Callable[[bytes], Any]:
    """A function from an Avro body to its JSON encoding (Python values for json.dumps). `schemas`: the
    parsed JSON of the schemas referenced (theirs first), then of the schema itself; errors of fastavro's
    parser (SchemaParseException ...) propagate."""
    named: dict[str, Any] = {}
    parsed = [fastavro.parse_schema(s, named_schemas=named) for s in schemas]
    plan = _Plan()
    wrapped_named: dict[str, Any] = {}
    for schema in parsed:
        wrapped, convert, skip, _ = plan.node(schema)
        reader_schema = fastavro.parse_schema(wrapped, named_schemas=wrapped_named)
    read_datum = fastavro.schemaless_reader
    check = skip if plan.unbounded else None

    def read(body: bytes) -> Any:
        if check is not None:
            check(body, 0, 0, [0])
        datum = read_datum(io.BytesIO(body), reader_schema, None, return_record_name=True)
        return datum if convert is None else convert(datum)

    return read


class _Plan:
    """Walks a parsed schema once: the wrapped schema fastavro reads with, the conversion of what it
    returns, and the bounds checker."""

    def __init__(self) -> None:
        self.converts: dict[str, Convert] = {}
        self.skips: dict[str, Skip] = {}
        self.zero_size: dict[str, bool] = {}
        self.compiling: list[str] = []
        self.unions = 0
        self.unbounded = False  # a recursive type, or an array of items that take no bytes

    def node(self, schema: Any) -> tuple[Any, Convert, Skip, bool]:
        """(wrapped schema, convert, skip, whether it can take no bytes)"""
        if isinstance(schema, list):
            return self._union(schema)
        if isinstance(schema, str):
            return self._named_or_primitive(schema)
        kind = schema["type"]
        if isinstance(kind, dict | list):
            return self.node(kind)
        if kind in PRIMITIVES:
            return self._named_or_primitive(kind)
        if kind == "record":
            return self._record(schema)
        if kind == "enum":
            self._define(schema["name"], None, _skip_long, False)
            return {"type": "enum", "name": schema["name"], "symbols": schema["symbols"]}, None, _skip_long, False
        if kind == "fixed":
            size = schema["size"]
            self._define(schema["name"], _latin1, _skip_fixed(size), size == 0)
            return {"type": "fixed", "name": schema["name"], "size": size}, _latin1, _skip_fixed(size), size == 0
        if kind == "array":
            items, convert, skip, zero = self.node(schema["items"])
            self.unbounded |= zero
            return {"type": "array", "items": items}, _each(convert), _skip_blocks(skip, zero, False), False
        if kind == "map":
            values, convert, skip, zero = self.node(schema["values"])
            return {"type": "map", "values": values}, _each_value(convert), _skip_blocks(skip, zero, True), False
        raise AvroBodyError(f"unknown Avro type {kind!r}")

    def _define(self, name: str, convert: Convert, skip: Skip, zero: bool) -> None:
        self.converts[name], self.skips[name], self.zero_size[name] = convert, skip, zero

    def _named_or_primitive(self, name: str) -> tuple[Any, Convert, Skip, bool]:
        if name in PRIMITIVES:
            return name, _PRIMITIVE_CONVERTS.get(name), _PRIMITIVE_SKIPS[name], name == "null"
        if name in self.compiling:  # a recursive type: bound late, and checked before reading
            self.unbounded = True
            converts, skips = self.converts, self.skips

            def late(datum: Any) -> Any:  # (one frame: the nesting a datum may have is frames here)
                convert = converts[name]
                return datum if convert is None else convert(datum)

            return name, late, lambda b, p, n, c: skips[name](b, p, n, c), False
        return name, self.converts[name], self.skips[name], self.zero_size[name]

    def _record(self, schema: dict) -> tuple[Any, Convert, Skip, bool]:
        name = schema["name"]
        self.compiling.append(name)
        fields, converts, skips, zero = [], [], [], True
        for field in schema["fields"]:
            wrapped, convert, skip, field_zero = self.node(field["type"])
            fields.append({"name": field["name"], "type": wrapped})
            if convert is not None:
                converts.append((field["name"], convert))
            skips.append(skip)
            zero &= field_zero
        self.compiling.pop()
        convert = _fields(converts) if converts else None
        skip = _skip_record(skips)
        self._define(name, convert, skip, zero)
        return {"type": "record", "name": name, "fields": fields}, convert, skip, zero

    def _union(self, branches: list) -> tuple[Any, Convert, Skip, bool]:
        self.unions += 1
        union = self.unions
        wrappers, table, skips = [], {}, []
        for i, branch in enumerate(branches):
            wrapped, convert, skip, _ = self.node(branch)
            # (in the null namespace: a named type defined in the branch keeps its name)
            wrapper = f"{WRAPPER_PREFIX}{union}_{i}"
            wrappers.append({"type": "record", "name": wrapper, "namespace": "",
                             "fields": [{"name": "v", "type": wrapped}]})
            table[wrapper] = (_branch_name(branch), convert)
            skips.append(skip)
        return wrappers, _member(table), _skip_union(skips), False


def _branch_name(branch: Any) -> str | None:
    """The union member's name in Avro's JSON encoding; None for null (written as null)."""
    kind = branch if isinstance(branch, str) else branch["type"]
    if kind == "null":
        return None
    if isinstance(branch, dict) and kind in ("record", "enum", "fixed"):
        return branch["name"]
    return kind


def _convert(convert: Convert, datum: Any) -> Any:
    return datum if convert is None else convert(datum)


def _member(table: dict[str, tuple[str | None, Convert]]) -> Callable[[Any], Any]:
    def convert(datum: tuple[str, dict]) -> Any:
        name, convert_value = table[datum[0]]
        if name is None:
            return None
        value = datum[1]["v"]
        return {name: value if convert_value is None else convert_value(value)}

    return convert


def _fields(converts: list[tuple[str, Callable[[Any], Any]]]) -> Callable[[dict], dict]:
    def convert(record: dict) -> dict:
        for name, convert_field in converts:
            record[name] = convert_field(record[name])
        return record

    return convert


# (map() calls in C: an array or a map adds no Python frame to the nesting, and it is quicker)
def _each(convert: Convert) -> Convert:
    return None if convert is None else lambda items: list(map(convert, items))


def _each_value(convert: Convert) -> Convert:
    return None if convert is None else lambda values: dict(zip(values, map(convert, values.values()), strict=True))


def _latin1(data: bytes) -> str:
    """bytes and fixed: each byte the code point of its value, as Avro's JSON encoding has them."""
    return data.decode("latin-1")


def _double(x: float) -> Any:
    if math.isfinite(x):
        return x
    return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")


def _float(x: float) -> Any:
    """The shortest decimal that is the same float32 (Java's Float.toString; 9 digits always are)."""
    if not math.isfinite(x):
        return _double(x)
    for digits in (6, 7, 8):
        shorter = float(f"{x:.{digits}g}")
        if _FLOAT32.unpack(_FLOAT32.pack(shorter))[0] == x:
            return shorter
    return float(f"{x:.9g}")


_PRIMITIVE_CONVERTS: dict[str, Callable[[Any], Any]] = {"float": _float, "double": _double, "bytes": _latin1}



# The other way (produce -s): Avro's JSON encoding as the datum fastavro writes, each union member a
# (branch, value) pair, so it is written as the branch named (fastavro's json_reader returns the bare value,
# and its writer then takes the first branch that fits: {"long": 5} went in as an int).

_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def avro_datum_from_json(fastavro: Any, schemas: list[Any]) -> tuple[Any, Callable[[Any], Any]]:
    """(the parsed schema, a function from a parsed JSON document in Avro's JSON encoding to the datum
    fastavro's schemaless_writer writes as those bytes); `schemas` as avro_json_reader's."""
    named: dict[str, Any] = {}
    from_json = _FromJson()
    for schema in schemas:
        parsed = fastavro.parse_schema(schema, named_schemas=named)
        convert = from_json.node(parsed)
    return parsed, (lambda doc: doc) if convert is None else convert


class _FromJson:
    def __init__(self) -> None:
        self.converts: dict[str, Convert] = {}

    def node(self, schema: Any) -> Convert:
        if isinstance(schema, list):
            return self._union(schema)
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return _FROM_JSON_PRIMITIVES.get(schema)
            if schema not in self.converts:  # a recursive type: bound late
                converts = self.converts
                return lambda d: _convert(converts[schema], d)
            return self.converts[schema]
        kind = schema["type"]
        if isinstance(kind, dict | list):
            return self.node(kind)
        if kind in PRIMITIVES:
            return _FROM_JSON_PRIMITIVES.get(kind)
        if kind == "enum":
            self.converts[schema["name"]] = None
        elif kind == "fixed":
            self.converts[schema["name"]] = _bytes_of
        elif kind == "array":
            items = self.node(schema["items"])
            return None if items is None else lambda d: [items(i) for i in d] if isinstance(d, list) else d
        elif kind == "map":
            values = self.node(schema["values"])
            return None if values is None else \
                lambda d: {k: values(v) for k, v in d.items()} if isinstance(d, dict) else d
        elif kind == "record":
            return self._record(schema)
        return self.converts.get(schema.get("name", ""))

    def _record(self, schema: dict) -> Convert:
        converts = [(f["name"], c) for f in schema["fields"] if (c := self.node(f["type"])) is not None]

        def convert(doc: Any) -> Any:
            if isinstance(doc, dict):
                for name, convert_field in converts:
                    if name in doc:
                        doc[name] = convert_field(doc[name])
            return doc

        self.converts[schema["name"]] = convert if converts else None
        return self.converts[schema["name"]]

    def _union(self, branches: list) -> Convert:
        table = {name: self.node(b) for b in branches if (name := _branch_name(b)) is not None}

        def convert(doc: Any) -> Any:
            if doc is None:
                return None
            if isinstance(doc, dict) and len(doc) == 1:
                [(name, value)] = doc.items()
                if name in table:
                    return name, _convert(table[name], value)
            raise ValueError(f"a union member is null or {{\"type\": value}}, the type one of {', '.join(table)}, "
                             f"not {_short_json(doc)}")

        return convert


def _bytes_of(text: Any) -> Any:
    return text.encode("latin-1") if isinstance(text, str) else text


def _number_of(x: Any) -> Any:
    return _SPECIAL_FLOATS.get(x, x) if isinstance(x, str) else x


def _short_json(doc: Any) -> str:
    text = json.dumps(doc, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


_FROM_JSON_PRIMITIVES: dict[str, Callable[[Any], Any]] = {"float": _number_of, "double": _number_of,
                                                          "bytes": _bytes_of}

# The checker: each type's bytes skipped, counting what fastavro would loop over without reading a byte.

def _long(body: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(body):
            raise AvroBodyError("truncated: it ends within a number")
        byte = body[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
        if shift > 63:
            raise AvroBodyError("a number longer than 10 bytes")


def _skip_long(body: bytes, at: int, nesting: int, items: list) -> int:
    return _long(body, at)[1]


def _skip_fixed(size: int) -> Skip:
    def skip(body: bytes, at: int, nesting: int, items: list) -> int:
        if at + size > len(body):
            raise AvroBodyError(f"truncated: {size} bytes wanted, {len(body) - at} left")
        return at + size

    return skip


def _skip_sized(body: bytes, at: int, nesting: int, items: list) -> int:
    size, at = _long(body, at)
    if size < 0:
        raise AvroBodyError(f"a negative length ({size})")
    return _skip_fixed(size)(body, at, nesting, items)


_PRIMITIVE_SKIPS: dict[str, Skip] = {
    "null": lambda body, at, nesting, items: at, "boolean": _skip_fixed(1), "int": _skip_long, "long": _skip_long,
    "float": _skip_fixed(4), "double": _skip_fixed(8), "bytes": _skip_sized, "string": _skip_sized}


def _deeper(nesting: int) -> int:
    if nesting >= NESTING_MAX:
        raise AvroBodyError(f"nested more than {NESTING_MAX} deep (records, arrays, maps and unions)")
    return nesting + 1


def _skip_record(skips: list[Skip]) -> Skip:
    def skip(body: bytes, at: int, nesting: int, items: list) -> int:
        nesting = _deeper(nesting)
        for skip_field in skips:
            at = skip_field(body, at, nesting, items)
        return at

    return skip


def _skip_union(skips: list[Skip]) -> Skip:
    def skip(body: bytes, at: int, nesting: int, items: list) -> int:
        index, at = _long(body, at)
        if not 0 <= index < len(skips):
            raise AvroBodyError(f"union member {index} of {len(skips)}")
        return skips[index](body, at, _deeper(nesting), items)

    return skip


def _skip_blocks(skip_item: Skip, zero_size: bool, keyed: bool) -> Skip:
    """An array's or a map's blocks (a count, negative when a byte size follows, then the items)."""
    def skip(body: bytes, at: int, nesting: int, items: list) -> int:
        nesting = _deeper(nesting)
        while True:
            count, at = _long(body, at)
            if count == 0:
                return at
            if count < 0:
                count = -count
                at = _long(body, at)[1]
            if zero_size and not keyed:  # items that take no bytes: counted, not looped over
                items[0] += count
                if items[0] > ITEMS_MAX:
                    raise AvroBodyError(f"more than {ITEMS_MAX:,} array items that take no bytes")
                continue
            for _ in range(count):  # each takes a byte at least: the body's end stops a false count
                if keyed:
                    at = _skip_sized(body, at, nesting, items)
                at = skip_item(body, at, nesting, items)

    return skip


def _compact_encoder() -> Callable[[Any], str]:
    """json.dumps(ensure_ascii=False, separators=(",", ":"), allow_nan=False) made once: json.dumps with
    options builds a JSONEncoder, and its encode() a C encoder, per call (a third of the time per record)."""
    from json.encoder import c_make_encoder, encode_basestring

    if c_make_encoder is None:  # (an interpreter without json's C speedups)
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    chunks = c_make_encoder(None, _unserializable, encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(chunks(value, 0))


def _unserializable(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_encode = _compact_encoder()


def dumps(value: Any) -> bytes:
    """Avro's JSON encoding as one line of UTF-8 (no NaN: those are strings by now)."""
    return _encode(value).encode()

"""Converters between Connect data and record bytes: Kafka's StringConverter, ByteArrayConverter and
JsonConverter (with or without the {"schema", "payload"} envelope), by their class names or short ones;
Confluent's AvroConverter (klog/connect/avro.py, imported only when a config names it)."""

from __future__ import annotations

import base64
import decimal
import json
import operator
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

from klog.connect.config import ConfigDef, aliases
from klog.connect.data import DECIMAL, TREE_PARTS_MAX, Schema, primitive, refuse_recursive
from klog.connect.errors import ConfigError, DataError
from klog.connect.java_numbers import java_double, java_float

ValueFn = Callable[[Any], Any]  # one value's conversion; None in its place: the value passes as is


class Converter:
    java_class = ""
    config_def = ConfigDef()

    def __init__(self, props: dict[str, str], is_key: bool) -> None:
        self.config = self.config_def.parse(props)
        self.is_key = is_key

    @property
    def class_name(self) -> str:
        """The class a failed conversion names (Kafka's executing class, the DLQ's
        __connect.errors.class.name): the Java converter's, else the Python class."""
        return self.java_class or f"{type(self).__module__}.{type(self).__qualname__}"

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        raise NotImplementedError

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        raise NotImplementedError


class StringConverter(Converter):
    java_class = "org.apache.kafka.connect.storage.StringConverter"
    config_def = ConfigDef().define("converter.encoding", default="UTF-8")

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        kind = schema.get("type") if schema else None
        if isinstance(value, float) or (type(value) is int and kind in _FLOATS):
            # Java's Double/Float.toString, as Kafka's value.toString() (a float field's 5 is 5.0)
            text = java_float(float(value)) if kind == "float32" else java_double(float(value))
            return text.encode(self.config["converter.encoding"])
        if isinstance(value, dict | list):  # Kafka's Struct.toString is not parseable; JSON is
            value = json.dumps(value, separators=(",", ":"), default=_json_default)
        return str(value).encode(self.config["converter.encoding"])

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return primitive("string"), None
        try:
            return primitive("string"), data.decode(self.config["converter.encoding"])
        except (UnicodeDecodeError, LookupError) as e:
            raise DataError(f"failed to deserialize string: {e}") from None


class ByteArrayConverter(Converter):
    java_class = "org.apache.kafka.connect.converters.ByteArrayConverter"

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None or isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise DataError(f"ByteArrayConverter is not compatible with objects of type {type(value).__name__}")

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        return primitive("bytes"), data


class JsonConverter(Converter):
    java_class = "org.apache.kafka.connect.json.JsonConverter"
    config_def = (ConfigDef().define("schemas.enable", "boolean", True)
                  .define("decimal.format", default="BASE64", choices=("base64", "numeric"))
                  .define("schemas.cache.size", "int", 1000).define("replace.null.with.default", "boolean", True))

    def __init__(self, props: dict[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        # read once, not per record (a source writes every record through here)
        self.numeric = self.config["decimal.format"] == "numeric"
        self.schemas = self.config["schemas.enable"]
        self.replace_null = self.config["replace.null.with.default"]

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None and value is None:
            return None  # a tombstone stays one
        try:
            text = _encode_as_jackson(self._payload, schema, value, schema is None).encode()
        except RecursionError:  # a value nested deeper than Python's stack (a recursive schema's, a schemaless one)
            raise DataError("JsonConverter: a value nested too deeply to write") from None
        if not self.schemas:
            return text
        # the schema's JSON once per schema object (a connector reuses them): most of an envelope's bytes
        return b'{"schema":' + _schema_json(schema, self.numeric) + b',"payload":' + text + b"}"

    def _payload(self, schema: Schema | None, value: Any) -> Any:
        if schema is None:
            return to_json(None, value, self.numeric)
        if value is None:  # Kafka's convertToJson: the default (replace.null.with.default), null if optional
            payload = _default_json(schema, self.numeric) if self.replace_null else None
            if payload is None and not schema.get("optional"):
                raise DataError(NULL_REQUIRED)
            return payload
        convert = _compiled(schema, self.numeric, self.replace_null)  # float parts' leaves give their stand-ins
        return value if convert is None else convert(value)

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        if self.schemas:
            fast = _split_envelope(data, self.replace_null)
            if fast is not None:
                return fast
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataError(f"Converting byte[] to Kafka Connect data failed due to serialization error: {e}") from None
        if not self.config["schemas.enable"]:
            return None, doc
        if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
            raise DataError('JsonConverter with schemas.enable requires "schema" and "payload" fields and may not '
                            "contain additional fields. If you are trying to deserialize plain JSON data, set "
                            "schemas.enable=false in your converter configuration.")
        schema, payload = _connect_schema(doc["schema"]), doc["payload"]
        if not isinstance(schema, dict):
            return schema, payload
        exact = _has_decimal(schema)
        if exact:  # its numbers again, each with its text (a decimal's default's too)
            doc = json.loads(data, parse_float=_exact_float)
            schema, payload = _connect_schema(doc["schema"]), doc["payload"]
        convert = _compile_from(schema, exact, self.replace_null)
        return schema, _read_payload(schema, convert, payload, self.replace_null)


# a schema's JSON → (the schema, its compiled from_json, whether it has a decimal part), by replace.null.with.default
_PARSED: tuple[dict[bytes, tuple[Schema, Any, bool]], ...] = ({}, {})


def _split_envelope(data: bytes, replace_null: bool) -> tuple[Schema | None, Any] | None:
    """An envelope as JsonConverter writes it ({"schema":...,"payload":...}) parsed without parsing its
    schema again when the same schema was seen before (every record of a table carries it); None when
    the bytes are not in that shape (then the whole document is parsed)."""
    if not data.startswith(b'{"schema":') or not data.endswith(b"}"):
        return None
    cut = data.find(b',"payload":')
    if cut < 0:
        return None
    schema_text = data[10:cut]
    parsed = _PARSED[replace_null]
    hit = parsed.get(schema_text)
    try:
        if hit is None:
            schema = _connect_schema(json.loads(schema_text))
            if not isinstance(schema, dict | type(None)):
                return None
            exact = schema is not None and _has_decimal(schema)
            if exact:  # a decimal's default with its text
                schema = _connect_schema(json.loads(schema_text, parse_float=_exact_float))
            hit = (schema, None if schema is None else _compile_from(schema, exact, replace_null), exact)
            if len(parsed) >= CACHE_MAX:
                parsed.clear()
            parsed[schema_text] = hit
        payload = _loads(data[cut + 11:-1], hit[2])
    except (ValueError, UnicodeDecodeError):
        return None  # e.g. a "payload" key inside the schema: the slow path decides
    schema, convert, _ = hit
    if schema is None:
        return None, payload
    return schema, _read_payload(schema, convert, payload, replace_null)


def _read_payload(schema: Schema, convert: ValueFn | None, payload: Any, replace_null: bool) -> Any:
    if payload is None:  # Kafka's convertToConnect: the default (replace.null.with.default), null if optional
        value = _default_value(schema) if replace_null else None
        if value is None and (refused := _null_refused(schema, True)) is not None:
            raise DataError(refused)
        return value
    return payload if convert is None else convert(payload)


class _ExactFloat(float):
    """A JSON number with a fraction or an exponent, read where a schema has decimal parts: the double
    it is, and its text, from which a numeric decimal takes every digit and its scale (Jackson reads
    Kafka's 1.5600 as a BigDecimal of scale 4, 1E+3 of scale -3, where a float keeps 1.56 and 1000.0)."""

    __slots__ = ("text",)


def _exact_float(text: str) -> _ExactFloat:
    number = _ExactFloat(text)
    number.text = text
    return number


_SCAN = json.JSONDecoder().scan_once
_EXACT_SCAN = json.JSONDecoder(parse_float=_exact_float).scan_once


def _loads(data: bytes, exact: bool = False) -> Any:
    """json.loads(data) for UTF-8 JSON without its per-call work (encoding detection, the whitespace
    checks): the C scanner over the text, json.loads itself when the value does not span all of it.
    `exact`: each number with a fraction or an exponent an _ExactFloat."""
    text = data.decode()
    try:
        value, end = (_EXACT_SCAN if exact else _SCAN)(text, 0)
    except StopIteration:
        raise ValueError("not a JSON value") from None
    if end == len(text):
        return value
    return json.loads(text, parse_float=_exact_float) if exact else json.loads(text)


def _has_decimal(schema: Schema) -> bool:
    """Whether a schema (JsonConverter's form) has a Decimal part."""
    if schema.get("name") == DECIMAL:
        return True
    parts = [*schema.get("fields", ()), schema.get("items"), schema.get("keys"), schema.get("values")]
    return any(isinstance(part, dict) and _has_decimal(part) for part in parts)


def _compile_from(schema: Schema, exact: bool, replace_null: bool) -> ValueFn | None:
    """from_json for one schema as a function (a payload → its value). A float part's value passes as
    it is, unless the payload was read `exact` (then its _ExactFloat becomes the float it is);
    `replace_null`: a null part with a default is its default (replace.null.with.default)."""
    def leaf(part: Schema) -> ValueFn | None:
        if part.get("type") in _FLOATS and part.get("name") != DECIMAL:
            return _plain_float if exact else None
        return lambda v: from_json(part, v)

    return _compile_walk(schema, leaf, lenient=True, null=_default_of(_default_value) if replace_null else None)


NullFn = Callable[[Schema], Callable[[], Any] | None]  # a part's value for its null; None: the null stays


def _default_of(value_of: Callable[[Schema], Any]) -> NullFn:
    """replace.null.with.default's NullFn: a part with a default is `value_of(part)` where it is null."""
    return lambda part: None if part.get("default") is None else lambda: value_of(part)


def _default_value(schema: Schema) -> Any:
    """A schema's default as a Connect value (Kafka's reading: schema.defaultValue())."""
    return from_json(schema, schema.get("default"))


def _default_json(schema: Schema, numeric: bool) -> Any:
    """A schema's default as Kafka writes it, in the schema and for a null: convertToJson(schema,
    defaultValue). klog's schemas hold it in JSON already (a decimal's base64, a float), but for a
    float's Java text and, under decimal.format=numeric, a decimal's number."""
    default = schema.get("default")
    kind = schema.get("type")
    if default is None or isinstance(default, bool):
        return default
    if kind in _FLOATS and isinstance(default, float | int):
        return (_float32 if kind == "float32" else _float64)(default)
    if schema.get("name") == DECIMAL and (numeric or not isinstance(default, str)):
        value = decimal_from_bytes(base64.b64decode(default), _scale(schema)) if isinstance(default, str) else default
        return to_json(schema, value, numeric)
    if kind == "bytes" and isinstance(default, bytes | bytearray):
        return to_json(schema, default, numeric)
    return default


def _plain_float(value: Any) -> Any:
    return float(value) if type(value) is _ExactFloat else value


def _compile_walk(schema: Schema, leaf: Callable[[Schema], ValueFn | None], lenient: bool,
                  null: NullFn | None = None, making: dict[int, list] | None = None) -> ValueFn | None:
    """One conversion over a schema's value as a function, None where every part passes as is (most
    fields; not a struct when writing, whose shape is checked: _struct_writer). `leaf(schema)` converts
    one decimal, bytes or float part (None: it passes as is).
    `lenient` passes a value of the wrong shape through (reading: the payload is what it is); otherwise
    a struct that is not a map is a DataError, so the record goes to the dead letter queue (writing).
    `null(part)` gives a null field's, element's or map value's replacement (None: it stays null).
    `making`: id of a struct's fields -> [the function of that struct, whether made, what was made]: a
    recursive schema's struct holding itself is converted by the one being made, once made; a struct met
    again elsewhere (its fields shared: a named type the Avro or Protobuf converter read once) by the same."""
    kind = schema.get("type")
    if schema.get("name") == DECIMAL or kind == "bytes" or kind in _FLOATS:
        return leaf(schema)
    if kind == "struct":
        fields = schema.get("fields", [])
        making = {} if making is None else making
        cell = making.get(id(fields))
        if cell is not None:
            return cell[2] if cell[1] else lambda v: cell[0](v)
        cell = making[id(fields)] = [_same, False, None]
        try:
            made = _compile_struct(fields, leaf, lenient, null, making)
        except BaseException:
            del making[id(fields)]
            raise
        cell[0], cell[1], cell[2] = made or _same, True, made
        return made
    if kind == "map" and not _string_keys(schema):
        return _compile_pairs(schema, leaf, lenient, null, making)
    if kind in ("array", "map"):
        inner = schema.get("items" if kind == "array" else "values")
        replace = null and inner is not None and null(inner)
        item = None if inner is None else _nullable(_compile_walk(inner, leaf, lenient, null, making), replace)
        refused = None if inner is None or replace else _null_refused(inner, lenient)
        keys = schema.get("keys") if kind == "map" and not lenient else None  # (read, a JSON key is no null)
        key_refused = None if not isinstance(keys, dict) else _null_refused(keys, lenient)
        if item is None and refused is None and key_refused is None:
            return None
        if kind == "array":
            def array(v: Any) -> Any:
                if lenient and not isinstance(v, list):
                    return v
                if refused is not None and None in v:
                    raise DataError(refused)
                return v if item is None else [item(x) for x in v]

            return array

        def string_map(v: Any) -> Any:
            if lenient and not isinstance(v, dict):
                return v
            if refused is not None and None in v.values():
                raise DataError(refused)
            if key_refused is not None and None in v:
                raise DataError(key_refused)
            return v if item is None else {k: item(x) for k, x in v.items()}

        return string_map
    return None


def _compile_struct(fields: list[Schema], leaf: Callable[[Schema], ValueFn | None], lenient: bool,
                    null: NullFn | None, making: dict[int, list]) -> ValueFn | None:
    """_compile_walk of a struct of `fields`."""
    parts = [(f["field"], _compile_walk(f, leaf, lenient, null, making), null and null(f)) for f in fields]
    if not lenient:
        return _struct_writer(parts, [f["field"] for f in fields if not f.get("optional")])
    todo = [(name, c, n) for name, c, n in parts if c is not None or n is not None]
    # a required field nothing replaces: its null (or absence) refused, as Kafka's convertToConnect
    must = [(f["field"], _null_refused(f, True)) for f, (_, _, n) in zip(fields, parts, strict=True)
            if n is None and not f.get("optional")]
    if not todo and not must:
        return None
    # their values in one C call, a tuple even of one (the first name twice); KeyError: one is missing
    must_values = operator.itemgetter(*(name for name, _ in must[:1] + must)) if must else None

    def struct(v: Any) -> Any:  # (reading: a writer's struct is _struct_writer's)
        if not isinstance(v, dict):
            return v
        if must_values is not None:
            try:
                held = None not in must_values(v)
            except KeyError:
                held = False
            if not held:
                raise DataError(next(refused for name, refused in must if v.get(name) is None))
        return _converted_fields(v, todo)

    return struct


def _null_refused(part: Schema, reading: bool) -> str | None:
    """Kafka's DataException message for a null where `part` is required and has no default that replaces
    it (None: the part is optional): convertToJson's when writing, convertToConnect's when reading."""
    if part.get("optional"):
        return None
    if reading:
        return f"Invalid null value for required {str(part.get('type')).upper()} field"
    return NULL_REQUIRED


NULL_REQUIRED = "Conversion error: null value for field that is required and has no default value"


def _struct_writer(parts: list[tuple[str, ValueFn | None, Callable[[], Any] | None]],
                   required: list[str]) -> ValueFn:
    """A struct's value as Kafka's JsonConverter writes it: every schema field in schema order (an extra
    key left out, a missing field null), a null field its default's JSON where `parts` gives one
    (replace.null.with.default), else null when it is optional and a DataError (Kafka's message) when
    it is required. A value already of that shape (the usual case) is copied only where a part changes."""
    names = tuple(name for name, _, _ in parts)
    todo = [(name, c, n) for name, c, n in parts if c is not None or n is not None]
    required_set = set(required)
    must = [name for name, _, n in parts if n is None and name in required_set]  # nothing replaces their null
    must_set = frozenset(must)

    def reshaped(v: dict) -> dict:
        out = {}
        for name, c, n in parts:
            x = v.get(name)
            if x is None:
                if n is not None:
                    x = n()
                elif name in must_set:
                    raise DataError(NULL_REQUIRED)
            elif c is not None:
                x = c(x)
            out[name] = x
        return out

    def struct(v: Any) -> Any:
        if not isinstance(v, dict):
            raise DataError(f"a struct value must be a map, not {type(v).__name__}")
        if len(v) != len(names) or tuple(v) != names:  # a field missing, an extra key, another order
            return reshaped(v)
        for name in must:
            if v[name] is None:
                raise DataError(NULL_REQUIRED)
        return _converted_fields(v, todo)

    return struct


def _converted_fields(v: dict, todo: list[tuple[str, ValueFn | None, NullFn | None]]) -> dict:
    """A struct value with each `todo` field converted (`c`) or its null replaced (`n`), copied only where
    a part changes (a plain float does not): the reading and the writing walks alike."""
    out = None
    for name, c, n in todo:
        x = v.get(name)
        if x is None:
            if n is None:
                continue
            y = n()
        elif c is None or (y := c(x)) is x:
            continue
        if out is None:
            out = dict(v)
        out[name] = y
    return v if out is None else out


def _nullable(convert: ValueFn | None, null: Callable[[], Any] | None) -> ValueFn | None:
    """An element's conversion with its null's: None where both leave it as it is."""
    if null is None:
        return None if convert is None else lambda x: None if x is None else convert(x)
    if convert is None:
        return lambda x: null() if x is None else x
    return lambda x: null() if x is None else convert(x)


def _string_keys(schema: Schema) -> bool:
    keys = schema.get("keys")
    return not isinstance(keys, dict) or keys.get("type") == "string"


def _compile_pairs(schema: Schema, leaf: Callable[[Schema], ValueFn | None], lenient: bool,
                   null: NullFn | None, making: dict[int, list] | None = None) -> ValueFn:
    """A map whose keys are not strings, as Kafka's JsonConverter has it: an array of [key, value]
    pairs (writing), the pairs a map again (reading; an object, as klog wrote such a map before, is
    read as it was, and a list that is not all pairs of hashable keys passes as it is)."""
    def part_of(part: Schema | None) -> ValueFn:
        if not part:
            return _same
        replace = null and null(part)
        convert = _nullable(_compile_walk(part, leaf, lenient, null, making), replace) or _same
        return _required(convert, None if replace else _null_refused(part, lenient))

    key_of, value_of = part_of(schema["keys"]), part_of(schema.get("values"))
    if not lenient:
        def pairs(v: Any) -> Any:
            if not isinstance(v, dict):
                raise DataError(f"a map value must be a map, not {type(v).__name__}")
            return [[key_of(k), value_of(x)] for k, x in v.items()]

        return pairs

    def from_pairs(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: value_of(x) for k, x in v.items()}
        if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 for p in v):
            return v
        try:
            return {key_of(k): value_of(x) for k, x in v}
        except TypeError:  # a key Python cannot hash (a struct's map)
            return v

    return from_pairs


def _same(value: Any) -> Any:
    return value


def _required(convert: ValueFn, refused: str | None) -> ValueFn:
    """A key's or value's conversion that refuses a null (Kafka's message `refused`; None: it takes one)."""
    if refused is None:
        return convert

    def checked(x: Any) -> Any:
        if x is None:
            raise DataError(refused)
        return convert(x)

    return checked


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Floats as Jackson writes them under Kafka's JsonConverter: Java's Double/Float.toString (1.0E20,
# 1.0E-4, 1.2345678E7, 0.1f as 0.1), where Python's encoder always prints float.__repr__ (1e+20,
# 0.0001, 12345678.0); NaN and the infinities quoted ("NaN", "Infinity", "-Infinity"), where Python's
# are bare, which no JSON parser takes. A float whose text differs becomes a stand-in integer while the
# payload is encoded (its schema's compiled leaf or, schemaless, a walk puts it there), then its Java
# text takes the stand-in's place.
_FLOATS = ("float32", "float64")


class _JavaTexts(threading.local):
    """The Java texts of the stand-ins of the record this thread is converting, in order, and the
    number the stand-ins count from."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.sentinel = 0


_PENDING = _JavaTexts()


def _new_sentinel() -> int:
    return 10**24 + secrets.randbelow(10**24)  # stand-ins are it plus their index: 25 digits


_SENTINEL = _new_sentinel()


def _encode_as_jackson(payload_of: Callable[[Any, Any], Any], schema: Any, value: Any, schemaless: bool) -> str:
    """The JSON of the payload `payload_of(schema, value)` builds, its floats as Jackson writes them. A walk
    finds the floats outside float parts: schemaless ones where the text may show one (Python prints
    each with a '.' or an exponent), a NaN or infinity elsewhere (rare: a numeric decimal's)."""
    global _SENTINEL
    while True:
        texts = _PENDING.texts = []
        sentinel = _PENDING.sentinel = _SENTINEL
        payload = payload_of(schema, value)
        text = _ENCODE(payload)
        if ("NaN" in text or "Infinity" in text or schemaless and ("." in text or "e+" in text or "e-" in text)) \
                and (fixed := _java_floats(payload)) is not payload:
            text = _ENCODE(fixed)
        if texts:
            text = _put_java_texts(text, texts, sentinel)
        if text is not None:
            return _jackson_escapes(text) if "\\u00" in text else text
        _SENTINEL = _new_sentinel()  # the payload holds a stand-in's digits too: other ones


# a control character's \u escape with a letter in it (U+000B, U+000E, U+000F, U+001A-U+001F; the others
# have digits only or a short escape, \n and the like), after an even number of backslashes: an escape
_LOWER_HEX_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u00(0[bef]|1[a-f])")


def _jackson_escapes(text: str) -> str:
    r"""JSON text with its \u escapes as Jackson writes them: upper-case hex digits (\u001F; Python's
    encoder writes \u001f)."""
    return _LOWER_HEX_ESCAPE.sub(lambda m: f"{m[1]}\\u00{m[2].upper()}", text)


def _put_java_texts(text: str, texts: list[str], sentinel: int) -> str | None:
    """The text with each stand-in its Java text; None where one is not there exactly once."""
    for index, java in enumerate(texts):
        stand_in = str(sentinel + index)
        if text.count(stand_in) != 1:
            return None
        text = text.replace(stand_in, java)
    return text


def _stand_in(java: str) -> Any:
    if java[-1] in "Ny":  # NaN, Infinity, -Infinity: Jackson quotes them (QUOTE_NON_NUMERIC_NUMBERS)
        return java
    pending = _PENDING
    pending.texts.append(java)
    return pending.sentinel + len(pending.texts) - 1


def _float64(value: Any) -> Any:
    """A FLOAT64 value as Jackson writes it: Python prints the plain ones alike (the shortest digits).
    A whole number given for it is the double it stands for (Java's Double prints 5 as 5.0)."""
    if type(value) is int:
        value = float(value)
    if type(value) is float and (1e-3 <= value < 1e7 or -1e7 < value <= -1e-3 or value == 0.0):
        return value
    return _stand_in(java_double(value)) if isinstance(value, float) else value


def _float32(value: Any) -> Any:
    """A FLOAT32 value as Jackson writes it: Float.toString of the float32 nearest it (a whole
    number given for it too: Java's Float prints 5 as 5.0)."""
    if type(value) is int:
        value = float(value)
    if not isinstance(value, float):
        return value
    java = java_float(value)
    return value if java == float.__repr__(value) else _stand_in(java)


def _java_floats(value: Any) -> Any:
    """A schemaless `value` with each float whose JSON Jackson writes otherwise its stand-in (a
    double's), the same object where there is none."""
    kind = type(value)
    if kind is float:
        return _float64(value)
    if kind is str or kind is int or value is None or kind is bool:
        return value
    if isinstance(value, dict):
        out = None
        for key, item in value.items():
            new = _java_floats(item)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if isinstance(value, list | tuple):
        items = [_java_floats(item) for item in value]
        return value if all(new is old for new, old in zip(items, value, strict=True)) else items
    return _float64(value)


# one encoder for every record (json.dumps with options builds a new one per call)
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default).encode


# Decimal arithmetic rounds to its context's precision (28 digits by default): a numeric(40, 9) lost
# its last digits both ways. Scaling by a power of ten is exact at the largest precision.
_EXACT = decimal.Context(prec=decimal.MAX_PREC, capitals=1)


def java_big_decimal(value: decimal.Decimal) -> str:
    """BigDecimal.toString() of the same unscaled value and scale, the text Jackson writes for Kafka's
    numeric decimals (no WRITE_BIGDECIMAL_AS_PLAIN): plain where the scale is not negative and the
    adjusted exponent is -6 or more (1.5600, 0.000001), else scientific (1E+3, 1.0E-7, 0E-10). Python's
    to_sci_string is the same rule (both are the General Decimal Arithmetic's), but a Decimal may be a
    negative zero and a BigDecimal not: -0.00 is 0.00."""
    if value.is_zero() and value.is_signed():
        value = value.copy_abs()
    return _EXACT.to_sci_string(value)


def decimal_to_bytes(value: decimal.Decimal, scale: int) -> bytes:
    unscaled = int(value.scaleb(scale, _EXACT).to_integral_value(context=_EXACT))
    return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)


# a Decimal's unscaled bytes read from a record: PostgreSQL's widest numeric (147,455 digits) takes 61 KiB;
# Python makes a Decimal of an int in quadratic time (400 KiB: 17 s a record, a hostile producer's stall)
DECIMAL_BYTES_MAX = 65_536


def decimal_from_bytes(data: bytes, scale: int) -> decimal.Decimal:
    """Connect's Decimal of its unscaled two's-complement bytes; DataError past DECIMAL_BYTES_MAX."""
    if len(data) > DECIMAL_BYTES_MAX:
        raise DataError(f"a Decimal's unscaled value of {len(data)} bytes (at most {DECIMAL_BYTES_MAX})")
    return decimal.Decimal(int.from_bytes(data, "big", signed=True)).scaleb(-scale, _EXACT)


def _scale(schema: Schema) -> int:
    return int((schema.get("parameters") or {}).get("scale", 0))


_SCHEMA_JSON: dict[tuple[int, bool], tuple[Schema | None, bytes]] = {}
_COMPILED: dict[tuple[int, bool, bool], tuple[Schema, Any]] = {}
CACHE_MAX = 4096


def _schema_json(schema: Schema | None, numeric: bool) -> bytes:
    hit = _SCHEMA_JSON.get((id(schema), numeric))
    if hit is not None and hit[0] is schema:
        return hit[1]
    try:
        data = _encode_as_jackson(lambda s, _: _kafka_schema(s, numeric, [TREE_PARTS_MAX], {}), schema, None,
                                  False).encode()
    except _TooLarge:  # structs sharing structs (named types met again, as the Avro and Protobuf converters read
        # them) written out as a tree: Kafka's envelope has no references, so it grows with the paths through them
        raise DataError(f"JsonConverter takes no schema of more than {TREE_PARTS_MAX} parts written out as a tree "
                        "(its structs share structs, as named types met again are read): write it with "
                        "schemas.enable=false") from None
    except RecursionError:  # Kafka's asJsonSchema recurses until its stack overflows (its payload follows the
        # value: a recursive schema's is written with schemas.enable=false). Named once it failed, not checked
        # before: a transform rebuilding a schema per record would pay the walk per record
        refuse_recursive(schema, "JsonConverter")
        raise DataError("JsonConverter: a schema nested too deeply to write") from None
    if len(_SCHEMA_JSON) >= CACHE_MAX:
        _SCHEMA_JSON.clear()
    _SCHEMA_JSON[(id(schema), numeric)] = (schema, data)  # the schema kept alive: its id is not reused meanwhile
    return data


# Connect's FLOAT32 and FLOAT64 as Kafka's JsonConverter names them in a schema (JsonSchema.FLOAT_TYPE_NAME,
# DOUBLE_TYPE_NAME), and back; every other type by Connect's own name
_KAFKA_TYPE_NAMES = {"float32": "float", "float64": "double"}
_CONNECT_TYPE_NAMES = {"float": "float32", "double": "float64"}
_PARTS = {"struct": ("fields",), "array": ("items",), "map": ("keys", "values")}


class _TooLarge(Exception):
    pass


def _kafka_schema(schema: Any, numeric: bool, budget: list[int], made: dict[int, Any]) -> Any:
    """A schema as Kafka's JsonConverter.asJsonSchema writes it: type (FLOAT32 "float", FLOAT64 "double");
    fields, items, or keys and values; optional (false where unsaid); name, version, doc, parameters
    where set; default (as _default_json writes it); and a struct field's name last. A key Kafka does
    not know goes before the field's name. `budget`: the parts left to write (a struct's fields met again,
    shared, are written again from `made`, their parts counted again: the text is a tree)."""
    if not isinstance(schema, dict):
        return schema
    budget[0] -= 1  # (what a schema sharing structs expands to is bounded; a tree is written as it is)
    if budget[0] < 0 and made.get(0):
        raise _TooLarge
    kind = schema.get("type")
    out = {"type": _KAFKA_TYPE_NAMES.get(kind, kind)}
    for part in _PARTS.get(kind, ()):
        if part in schema:
            inner = schema[part]
            if not isinstance(inner, list):
                out[part] = _kafka_schema(inner, numeric, budget, made)
                continue
            hit = made.get(id(inner))
            if hit is not None and hit[0] is inner:
                budget[0] -= hit[2]
                made[0] = True  # (no list has id 0) a part shared: what it expands to is bounded
                if budget[0] < 0:
                    raise _TooLarge
                out[part] = hit[1]
                continue
            before = budget[0]
            out[part] = [_kafka_schema(f, numeric, budget, made) for f in inner]
            made[id(inner)] = (inner, out[part], before - budget[0])
    out["optional"] = schema.get("optional", False)
    for key in ("name", "version", "doc", "parameters"):
        if schema.get(key) is not None:
            out[key] = schema[key]
    if schema.get("default") is not None:
        out["default"] = _default_json(schema, numeric)
    out.update((key, value) for key, value in schema.items() if key not in out and key != "field")
    if "field" in schema:
        out["field"] = schema["field"]
    return out


def _connect_schema(schema: Any) -> Any:
    """A schema as Kafka's JsonConverter writes it in klog's form: "float" and "double" are float32 and
    float64 (the same object where neither is in it)."""
    if not isinstance(schema, dict):
        return schema
    out = None
    kind = schema.get("type")
    if kind in _CONNECT_TYPE_NAMES:
        out = {**schema, "type": _CONNECT_TYPE_NAMES[kind]}
    for part in _PARTS.get(kind, ()):
        inner = schema.get(part)
        new = [_connect_schema(f) for f in inner] if isinstance(inner, list) else _connect_schema(inner)
        if new is not inner and not (isinstance(inner, list) and all(a is b for a, b in zip(new, inner, strict=True))):
            out = out or dict(schema)
            out[part] = new
    return schema if out is None else out


def _compiled(schema: Schema, numeric: bool, replace_null: bool) -> ValueFn | None:
    """_compile's function for a schema object, cached by identity (a connector reuses its schemas)."""
    key = (id(schema), numeric, replace_null)
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    fn = _compile(schema, numeric, replace_null)
    if len(_COMPILED) >= CACHE_MAX:
        _COMPILED.clear()
    _COMPILED[key] = (schema, fn)
    return fn


def _compile(schema: Schema, numeric: bool, replace_null: bool) -> ValueFn | None:
    """to_json for one schema as a function, None where the value is already its JSON (most fields);
    `replace_null`: a null part with a default is written as its default (replace.null.with.default)."""
    null = _default_of(lambda part: _default_json(part, numeric)) if replace_null else None
    return _compile_walk(schema, lambda part: _to_json_leaf(part, numeric), lenient=False, null=null)


def _to_json_leaf(part: Schema, numeric: bool) -> ValueFn:
    """to_json of one decimal, bytes or float part (a float's or numeric decimal's stand-in, see
    _encode_as_jackson); a base64 Decimal with its scale read once (a CDC source writes one per numeric
    column and row)."""
    if part.get("type") in _FLOATS:
        return _float32 if part["type"] == "float32" else _float64
    if part.get("name") == DECIMAL and not numeric:
        scale = _scale(part)
        b64 = base64.b64encode

        def base64_decimal(v: Any) -> Any:
            if type(v) is decimal.Decimal:
                return b64(decimal_to_bytes(v, scale)).decode()
            return to_json(part, v, numeric)

        return base64_decimal
    if part.get("name") == DECIMAL:
        def numeric_decimal(v: Any) -> Any:
            if type(v) is decimal.Decimal and v.is_finite():
                return _stand_in(java_big_decimal(v))
            return to_json(part, v, numeric)

        return numeric_decimal
    return lambda v: to_json(part, v, numeric)


def to_json(schema: Schema | None, value: Any, numeric_decimals: bool = False) -> Any:
    """A Connect value as JsonConverter's payload: bytes base64, decimals per decimal.format."""
    if value is None or schema is None:
        return value if not isinstance(value, bytes | bytearray | decimal.Decimal) else _json_default(value)
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        dec = value if isinstance(value, decimal.Decimal) else _read_decimal(value)
        if numeric_decimals:
            # the exact text (a float dropped digits and trailing zeros); NaN and the infinities,
            # which no BigDecimal holds, quoted as Jackson quotes a double's
            return _stand_in(java_big_decimal(dec) if dec.is_finite() else java_double(float(dec)))
        return base64.b64encode(decimal_to_bytes(dec, _scale(schema))).decode()
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode() if isinstance(value, bytes | bytearray | memoryview) else value
    if kind == "struct":
        if not isinstance(value, dict):
            raise DataError(f"a struct value must be a map, not {type(value).__name__}")
        return {f["field"]: to_json(f, value.get(f["field"]), numeric_decimals) for f in schema.get("fields", [])}
    if kind == "array":
        return [to_json(schema.get("items"), v, numeric_decimals) for v in value]
    if kind == "map" and not _string_keys(schema):
        return [[to_json(schema["keys"], k, numeric_decimals), to_json(schema.get("values"), v, numeric_decimals)]
                for k, v in value.items()]
    if kind == "map":
        return {k: to_json(schema.get("values"), v, numeric_decimals) for k, v in value.items()}
    return value


def from_json(schema: Schema | None, value: Any) -> Any:
    """JsonConverter's payload as a Connect value (the inverse of to_json)."""
    if value is None or schema is None:
        return value
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        if isinstance(value, str):
            return decimal_from_bytes(base64.b64decode(value), _scale(schema))
        return _read_decimal(value)
    if kind in _FLOATS:
        return _plain_float(value)
    if kind == "bytes" and isinstance(value, str):
        return base64.b64decode(value)
    if kind == "struct" and isinstance(value, dict):
        return {f["field"]: from_json(f, value.get(f["field"])) for f in schema.get("fields", [])}
    if kind == "array" and isinstance(value, list):
        return [from_json(schema.get("items"), v) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: from_json(schema.get("values"), v) for k, v in value.items()}
    if kind == "map" and not _string_keys(schema) and isinstance(value, list):
        return _compile_pairs(schema, lambda part: lambda v: from_json(part, v), True, None)(value)
    return value


def _read_decimal(value: Any) -> decimal.Decimal:
    """A numeric decimal's payload as the BigDecimal Jackson reads (the text's digits and scale; a whole
    number's scale 0); no negative zero, which a BigDecimal cannot be."""
    number = decimal.Decimal(value.text if type(value) is _ExactFloat else value if type(value) is int else str(value))
    return number.copy_abs() if number.is_zero() else number


CONVERTERS: dict[str, type[Converter]] = {}
for _cls, _short in ((StringConverter, "string"), (ByteArrayConverter, "bytes"), (JsonConverter, "json")):
    for _name in aliases([_cls.java_class]) | {_short}:
        CONVERTERS[_name] = _cls


AVRO_NAMES = aliases(["io.confluent.connect.avro.AvroConverter"]) | {"avro"}
JSON_SCHEMA_NAMES = aliases(["io.confluent.connect.json.JsonSchemaConverter"]) | {"jsonschema"}
PROTOBUF_NAMES = aliases(["io.confluent.connect.protobuf.ProtobufConverter"]) | {"protobuf"}


def make_converter(field_name: str, class_name: str, props: dict[str, str], is_key: bool) -> Converter:
    cls = CONVERTERS.get(class_name)
    if cls is None and class_name in AVRO_NAMES:
        from klog.connect.avro import AvroConverter  # fastavro and the registry client: only for Avro configs

        cls = AvroConverter
    if cls is None and class_name in JSON_SCHEMA_NAMES:
        from klog.connect.json_schema import JsonSchemaConverter as cls  # the registry client: only when named
    if cls is None and class_name in PROTOBUF_NAMES:
        from klog.connect.protobuf import ProtobufConverter as cls  # protobuf and the registry client: when named
    if cls is None:
        raise ConfigError(field_name, class_name, "unknown converter: use string, bytes, json, avro, jsonschema, "
                          "protobuf or their class names (org.apache.kafka.connect.storage.StringConverter, "
                          "io.confluent.connect.avro.AvroConverter, ...)")
    try:
        return cls(props, is_key)
    except ConfigError as e:  # a converter's own key, named as the connector config spells it
        if e.field == field_name:
            raise
        raise ConfigError(f"{field_name}.{e.field}", props.get(e.field), e.reason) from None

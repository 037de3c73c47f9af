"""PostgreSQL column types as Debezium's PostgreSQL connector maps them to Connect schemas, and their
text form (what pgoutput and `col::text` give) parsed into Connect values."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import json
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klog.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, Schema
from klog.connect.errors import DataError

UNAVAILABLE = "__debezium_unavailable_value"  # Debezium's placeholder for an unchanged TOASTed value

Parser = Callable[[str], Any]


def _bool(text: str) -> bool:
    return text in ("t", "true")


def _bytea(text: str) -> bytes:
    return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()


_TIMESTAMP = re.compile(r"(\d{4,})-(\d\d)-(\d\d)(?:[ T](\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,6}))?)?)?"
                        r"(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?( BC)?$")


_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _epoch_us(text: str) -> int | None:
    """A date or timestamp[tz] text (ISO, as PostgreSQL prints it with DateStyle ISO: years past 9999
    and BC ones too, which Python's datetime cannot hold) as microseconds since the epoch in UTC."""
    if text[4:5] == "-" and text[-1:] != "C":  # a four-digit year AD: the C parser, most values' way
        try:
            when = dt.datetime.fromisoformat(text + ":00" if len(text) > 19 and text[-3] in "+-" else text)
        except ValueError:
            pass
        else:
            return (when - (_EPOCH if when.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND
    m = _TIMESTAMP.match(text)
    if m is None:
        return None  # infinity is handled by the callers
    year, month, day, h, mi, sec, frac, sign, oh, om, os_, bc = m.groups()
    year = 1 - int(year) if bc else int(year)  # 1 BC is the proleptic year 0, as java.time's
    days = _java_epoch_day(year, int(month), int(day))
    micros = ((int(h or 0) * 60 + int(mi or 0)) * 60 + int(sec or 0)) * 1_000_000 + int((frac or "0").ljust(6, "0"))
    offset = (int(oh or 0) * 3600 + int(om or 0) * 60 + int(os_ or 0)) * (-1 if sign == "-" else 1)
    return days * 86_400_000_000 + micros - offset * 1_000_000


def _date(text: str) -> int | None:
    us = _epoch_us(text)
    return None if us is None else us // 86_400_000_000


def _timestamp_us(text: str) -> int | None:
    return _epoch_us(text)


def _timestamp_ms(text: str) -> int | None:
    us = _epoch_us(text)
    return None if us is None else us // 1000


def _civil(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian (year, month, day) of days since 1970-01-01, for any year."""
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    mp = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def _java_year(year: int) -> str:
    """A year as java.time's ISO formatters print it: four digits, a sign past 9999 or before year 0."""
    if year > 9999:
        return f"+{year}"
    return f"-{-year:04d}" if year < 0 else f"{year:04d}"


def _zoned(text: str, width: int = 6) -> str | None:
    """A timestamptz as Debezium's ZonedTimestamp in UTC: exactly `width` fraction digits (the column's
    precision, 6 without one, as pgjdbc reports its scale); width 0 is ISO_OFFSET_DATE_TIME's, which
    prints a fraction only when there is one."""
    us = _epoch_us(text)
    if us is None:
        return None
    days, of_day = divmod(us, 86_400_000_000)
    if -719_162 <= days <= 2_932_896:  # years 1..9999: Python's date does the arithmetic
        civil = _EPOCH + dt.timedelta(days=days)
        year, month, day = civil.year, civil.month, civil.day
    else:
        year, month, day = _civil(days)
    seconds, micro = divmod(of_day, 1_000_000)
    fraction = f".{micro:06d}"[: width + 1] if width > 0 else (f".{micro:06d}".rstrip("0") if micro else "")
    return (f"{_java_year(year)}-{month:02d}-{day:02d}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:"
            f"{seconds % 60:02d}{fraction}Z")


_TIMETZ = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?$")


_DAY_END_UTC = re.compile(r"24:00:00(?:\.0{1,6})?(?:Z|[+-]00(?::?00)?)$")


def _zoned_time(text: str) -> str | None:
    """A timetz as Debezium's ZonedTime: shifted to UTC, ISO_OFFSET_TIME (a fraction only as long as it
    needs to be); the end of the day in UTC stays 24:00:00Z (PostgresTimeBoundary)."""
    if _DAY_END_UTC.match(text):
        return "24:00:00Z"
    m = _TIMETZ.match(text)
    if m is None:
        return None
    h, mi, sec, frac, sign, oh, om, os_ = m.groups()
    offset = (int(oh) * 3600 + int(om or 0) * 60 + int(os_ or 0)) * (-1 if sign == "-" else 1)
    total = (int(h) * 3600 + int(mi) * 60 + int(sec) - offset) % 86_400
    fraction = ("." + frac.rstrip("0")) if frac and frac.strip("0") else ""
    return f"{total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d}{fraction}Z"


_CLOCK = re.compile(r"(\d+):(\d\d)(?::(\d\d)(?:\.(\d{1,6}))?)?")


def _time_us(text: str) -> int:
    """A time's microseconds past midnight (24:00:00, which PostgreSQL allows, is a whole day's, as
    Debezium's Strings.asDuration reads it)."""
    h, m, sec, frac = _CLOCK.match(text).groups()
    return ((int(h) * 60 + int(m)) * 60 + int(sec or 0)) * 1_000_000 + int((frac or "0").ljust(6, "0"))


def _time_ms(text: str) -> int:
    return _time_us(text) // 1000


_INTERVAL_UNITS = re.compile(r"([-+]?\d+) (year|mon|day)s?")
_INTERVAL_TIME = re.compile(r"([-+]?)(\d+):(\d+):(\d+(?:\.\d+)?)")
DAYS_PER_MONTH_AVG = 365.25 / 12.0


def _interval_fields(text: str) -> tuple[dict[str, int], int, int, float]:
    """An interval's text (IntervalStyle postgres) as pgjdbc's PGInterval fields: the years, months and
    days, then the signed hours, minutes and seconds of its clock part."""
    units = {"year": 0, "mon": 0, "day": 0}
    for amount, unit in _INTERVAL_UNITS.findall(text):
        units[unit] += int(amount)
    clock = _INTERVAL_TIME.search(text)
    if not clock:
        return units, 0, 0, 0.0
    sign = -1 if clock.group(1) == "-" else 1
    return units, sign * int(clock.group(2)), sign * int(clock.group(3)), sign * float(clock.group(4))


def _interval_us(text: str) -> int:
    """An interval's text (IntervalStyle postgres) as Debezium's MicroDuration.durationMicros computes it
    from pgjdbc's PGInterval: months as 365.25 / 12 days, the same double arithmetic, truncated."""
    units, hours, minutes, seconds = _interval_fields(text)
    days = (units["year"] * 12 + units["mon"]) * DAYS_PER_MONTH_AVG + units["day"]
    return int(((((days * 24 + hours) * 60) + minutes) * 60 + seconds) * 1e6)



def _array_items(text: str) -> list[str | None]:
    """The elements of an array's text form ({a,"b c",NULL}): quoted ones unescaped, an unquoted NULL a
    null. The inner arrays of a multi-dimensional one are nulls: Debezium's element converter gets a Java
    array it cannot convert, and its handleUnknownData makes that null for an optional element."""
    out: list[str | None] = []
    i, body = 0, text[text.index("{") + 1:text.rindex("}")]
    while i < len(body):
        if body[i] == "{":
            depth, j = 0, i
            while True:  # to the brace closing this inner array (quoted braces are skipped with their text)
                if body[j] == '"':
                    j += 1
                    while body[j] != '"':
                        j += 2 if body[j] == "\\" else 1
                elif body[j] in "{}":
                    depth += 1 if body[j] == "{" else -1
                    if depth == 0:
                        break
                j += 1
            out.append(None)
            i = j + 2  # the closing brace and the comma
        elif body[i] == '"':
            j, chars = i + 1, []
            while body[j] != '"':
                if body[j] == "\\":
                    j += 1
                chars.append(body[j])
                j += 1
            out.append("".join(chars))
            i = j + 2  # the closing quote and the comma
        else:
            j = body.find(",", i)
            j = len(body) if j < 0 else j
            item = body[i:j].strip()
            out.append(None if item == "NULL" else item)
            i = j + 1
    return out


def kschema(type_: str, *, optional: bool = True, name: str | None = None, version: int | None = None,
            doc: str | None = None, parameters: dict[str, str] | None = None, **nested: Any) -> Schema:
    """A Connect schema laid out as Kafka's JsonConverter writes one (type; fields, items or keys and
    values; optional, name, version, doc, parameters; a field's default and name come after), so the
    JSON of every schema the connector builds is Debezium's byte for byte."""
    schema: Schema = {"type": type_, **nested, "optional": optional}
    if name:
        schema["name"] = name
    if version is not None:
        schema["version"] = version
    if doc:
        schema["doc"] = doc
    if parameters:
        schema["parameters"] = parameters
    return schema


def named(type_: str, name: str, **extra: Any) -> Schema:
    """A Debezium logical type (version 1 unless told)."""
    return kschema(type_, name=name, version=extra.pop("version", 1), **extra)


@dataclass(frozen=True)
class PgType:
    """A column's type as Debezium resolves it: a domain is its base type (with the domain's modifier
    where the column has none), an array knows its element type, an enum its labels; `name` is
    pg_type.typname, which is how extension types (hstore, citext, ltree, isbn) are told apart."""

    oid: int
    typmod: int = -1
    name: str = ""
    labels: str | None = None
    element: PgType | None = None


@dataclass(frozen=True)
class Modes:
    """The connector keys that choose a column's Connect type."""

    decimal: str = "precise"
    time: str = "adaptive"
    binary: str = "bytes"
    interval: str = "numeric"
    hstore: str = "json"
    money_digits: int = 2
    unknown: bool = False  # include.unknown.datatypes
    placeholder: str = UNAVAILABLE  # unavailable.value.placeholder (hex:... for bytes)

    @property
    def placeholder_bytes(self) -> bytes:
        """PostgresConnectorConfig.getUnavailableValuePlaceholder: hex:<digits> is those bytes."""
        text = self.placeholder
        return bytes.fromhex(text[4:]) if text.startswith("hex:") else text.encode()


_SPECIAL_DECIMALS = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}


def _special_decimal(text: str, mode: str) -> Any:
    """numeric's NaN / Infinity as Debezium's SpecialValueDecimal.fromLogical: the enum's name in string
    mode, the double in double mode, a failure in precise mode."""
    if mode == "string":
        return _SPECIAL_DECIMALS[text]
    if mode == "double":
        return float(text)
    raise DataError("Got a special value (NaN/Infinity) for Decimal type but current mode does not handle it. "
                    "If you need to support it then set decimal handling mode to 'string'.")


def _unscaled(value: decimal.Decimal) -> int:
    """A finite decimal's digits as an integer (exact at any length, unlike a scaleb under a context)."""
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (10 ** exponent if exponent > 0 else 1)
    return -unscaled if sign else unscaled


def _variable_decimal(text: str) -> dict:
    """VariableScaleDecimal.fromLogical after Debezium's stripTrailingZeros (a negative scale set to 0)."""
    value = decimal.Decimal(text)
    if value.is_zero():
        value = decimal.Decimal(0)
    else:
        value = value.normalize(decimal.Context(prec=max(28, len(value.as_tuple().digits))))
        if value.as_tuple().exponent > 0:
            value = value.quantize(decimal.Decimal(1))
    exponent = value.as_tuple().exponent
    scale = -exponent if exponent < 0 else 0
    unscaled = _unscaled(value)
    return {"scale": scale, "value": unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)}


VARIABLE_SCALE_DECIMAL = kschema("struct", fields=[{**kschema("int32", optional=False), "field": "scale"},
                                                   {**kschema("bytes", optional=False), "field": "value"}],
                                 name="io.debezium.data.VariableScaleDecimal", version=1,
                                 doc="Variable scaled decimal")


def _numeric(typmod: int, mode: str) -> tuple[Schema, Parser]:
    special = _SPECIAL_DECIMALS
    if mode == "double":
        return kschema("float64"), float
    if mode == "string":
        return kschema("string"), lambda t: _special_decimal(t, mode) if t in special else t
    if typmod >= 4 and (typmod - 4) >> 16:  # numeric(p, s): typmod = (p << 16 | s) + 4
        precision, scale = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
        schema = named("bytes", DECIMAL, parameters={"scale": str(scale), "connect.decimal.precision": str(precision)})
        return schema, lambda t: _special_decimal(t, mode) if t in special else decimal.Decimal(t)
    # unconstrained numeric: Debezium's VariableScaleDecimal (the scale travels with each value)
    return dict(VARIABLE_SCALE_DECIMAL), lambda t: _special_decimal(t, mode) if t in special else _variable_decimal(t)


def _money_decimal(text: str) -> decimal.Decimal:
    """money's text ($1,234.56, -$1.00, ($1.00)) as PostgresMoney.parse reads it."""
    negative = text[:1] in ("-", "(")
    body = text.strip("-()")
    if body and not body[0].isdigit() and body[0] != ".":
        body = body[1:]
    value = decimal.Decimal(body.replace(",", ""))
    return -value if negative else value


def _money(modes: Modes) -> tuple[Schema, Parser]:
    if modes.decimal == "double":
        return kschema("float64"), lambda t: float(_money_decimal(t))
    if modes.decimal == "string":
        return kschema("string"), lambda t: format(_money_decimal(t), "f")
    quantum = decimal.Decimal(1).scaleb(-modes.money_digits)
    return (named("bytes", DECIMAL, parameters={"scale": str(modes.money_digits)}),
            lambda t: _money_decimal(t).quantize(quantum, rounding=decimal.ROUND_HALF_UP))


def _binary(mode: str) -> tuple[Schema, Parser]:
    """bytea per binary.handling.mode: bytes, or the bytes as base64 / URL-safe base64 / lower-case hex text."""
    if mode == "bytes":
        return kschema("bytes"), _bytea
    encode = {"base64": lambda b: base64.b64encode(b).decode(), "base64-url-safe": lambda b: base64.urlsafe_b64encode(
        b).decode(), "hex": bytes.hex}[mode]
    return kschema("string"), lambda t: encode(_bytea(t))


def binary_content(mode: str) -> tuple[Schema, Callable[[bytes], Any]]:
    """Raw bytes (a logical decoding message's content) per binary.handling.mode: the schema and encoder."""
    schema, parse = _binary(mode)
    return schema, (lambda b: b) if mode == "bytes" else (lambda b: parse("\\x" + b.hex()))


def _bits(length: int) -> tuple[Schema, Parser]:
    """bit(n) / varbit(n) as Debezium's: a boolean for one bit, else io.debezium.data.Bits, the bits as a
    little-endian number in as many bytes as its highest set bit needs (a Java BitSet's bytes)."""
    if length <= 1:
        return kschema("boolean"), lambda t: int(t, 2) != 0
    def bits(text: str) -> bytes:
        number = int(text, 2) if text else 0
        return number.to_bytes((number.bit_length() + 7) // 8, "little")

    return named("bytes", "io.debezium.data.Bits", parameters={"length": str(length)}), bits


_WKB_POINT = struct.Struct("<bIdd")


def _point(text: str) -> dict:
    """A point's text (x,y) as Debezium's io.debezium.data.geometry.Point: x, y and its WKB."""
    x, y = (float(v) for v in text.strip("()").split(","))
    return {"x": x, "y": y, "wkb": _WKB_POINT.pack(1, 1, x, y), "srid": None}


POINT = kschema("struct", fields=[{**kschema("float64", optional=False), "field": "x"},
                                  {**kschema("float64", optional=False), "field": "y"},
                                  {**kschema("bytes"), "field": "wkb"}, {**kschema("int32"), "field": "srid"}],
                name="io.debezium.data.geometry.Point", version=1, doc="Geometry (POINT)")


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?Infinity|NaN")


def _coordinates(text: str) -> list[tuple[float, float]]:
    numbers = [float(n) for n in _NUMBER.findall(text)]
    return list(zip(numbers[0::2], numbers[1::2], strict=False))


def _wkb(kind: int, rings: list[list[tuple[float, float]]]) -> bytes:
    """Debezium's WkbWriter: little-endian WKB of a line string (kind 2, one list of points) or a
    polygon (kind 3, rings)."""
    out = bytearray(struct.pack("<bI", 1, kind))
    if kind == 3:
        out += struct.pack("<I", len(rings))
    for ring in rings:
        out += struct.pack("<I", len(ring))
        for x, y in ring:
            out += struct.pack("<dd", x, y)
    return bytes(out)


def _box(text: str) -> dict:
    (x1, y1), (x2, y2) = _coordinates(text)
    ring = [(x1, y1), (x1, y2), (x2, y2), (x2, y1), (x1, y1)]
    return {"wkb": _wkb(3, [ring]), "srid": None, "extensions": {"type": "box"}}


def _lseg(text: str) -> dict:
    return {"wkb": _wkb(2, [_coordinates(text)]), "srid": None, "extensions": {"type": "lseg"}}


def _path(text: str) -> dict:
    closed = "false" if text.startswith("[") else "true"
    return {"wkb": _wkb(2, [_coordinates(text)]), "srid": None, "extensions": {"type": "path", "closed": closed}}


def _polygon(text: str) -> dict:
    ring = _coordinates(text)
    if len(ring) >= 2 and ring[0] != ring[-1]:
        ring.append(ring[0])  # closeRing
    return {"wkb": _wkb(3, [ring]), "srid": None, "extensions": {"type": "polygon"}}


def _circle(text: str) -> dict:
    x, y, radius = (float(n) for n in _NUMBER.findall(text))
    return {"center": _point(f"({x},{y})"), "radius": radius}


def _line(text: str) -> dict:
    a, b, c = (float(n) for n in _NUMBER.findall(text))
    return {"a": a, "b": b, "c": c}


GEOMETRY = kschema("struct", fields=[
    {**kschema("bytes", optional=False), "field": "wkb"}, {**kschema("int32"), "field": "srid"},
    {**kschema("map", keys=kschema("string", optional=False), values=kschema("string", optional=False)),
     "field": "extensions"}], name="io.debezium.data.geometry.Geometry", version=2, doc="Geometry")
CIRCLE = kschema("struct", fields=[{**POINT, "optional": False, "field": "center"},
                                   {**kschema("float64", optional=False), "field": "radius"}],
                 name="io.debezium.data.geometry.Circle", version=1, doc="Geometry (CIRCLE)")
LINE = kschema("struct", fields=[{**kschema("float64", optional=False), "field": f} for f in "abc"],
               name="io.debezium.data.geometry.Line", version=1, doc="Geometry (LINE)")
# box, lseg, path, polygon (Debezium's Geometry with its WKB and extensions), circle, line
_GEOMETRIC = {603: (GEOMETRY, _box), 601: (GEOMETRY, _lseg), 602: (GEOMETRY, _path), 604: (GEOMETRY, _polygon),
              718: (CIRCLE, _circle), 628: (LINE, _line)}


def java_string_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: list[str]) -> list[str]:
    """Keys in the order a java.util.HashMap they were put into (in this order) iterates them: by bucket
    (the spread String.hashCode masked by the table size, 16 doubled while over 3/4 full), then by insertion
    within a bucket. pgjdbc's HStoreConverter reads hstore into one, and Debezium writes it in this order."""
    unique = list(dict.fromkeys(keys))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(unique, key=bucket)  # sorted() is stable: insertion order within a bucket


def hstore_pairs(text: str) -> dict[str, str | None]:
    """hstore's text ("k"=>"v", "n"=>NULL) as a dict in Java HashMap order."""
    pairs: dict[str, str | None] = {}
    i = 0
    while i < len(text):
        start = text.find('"', i)
        if start < 0:
            break
        key, i = _quoted(text, start)
        i = text.index("=>", i) + 2
        while text[i] == " ":
            i += 1
        if text.startswith("NULL", i):
            value, i = None, i + 4
        else:
            value, i = _quoted(text, i)
        pairs[key] = value
    return {k: pairs[k] for k in java_hashmap_order(list(pairs))}


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The "..." string at text[i] with its backslash escapes undone, and the position after it."""
    out, i = [], i + 1
    while text[i] != '"':
        if text[i] == "\\":
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out), i + 1


def jackson_string(text: str) -> str:
    """A JSON string as Jackson writes one: control characters as \\uXXXX in upper-case hex, except the
    short escapes; nothing else escaped."""
    out = json.dumps(text, ensure_ascii=False)
    return re.sub(r"\\u00([0-9a-f]{2})", lambda m: "\\u00" + m.group(1).upper(), out)


def _hstore_json(text: str) -> str:
    pairs = hstore_pairs(text)
    return "{" + ",".join(f"{jackson_string(k)}:{'null' if v is None else jackson_string(v)}"
                          for k, v in pairs.items()) + "}"


def _hstore(mode: str) -> tuple[Schema, Parser]:
    if mode == "map":
        return kschema("map", keys=kschema("string", optional=False), values=kschema("string")), hstore_pairs
    return named("string", "io.debezium.data.Json"), _hstore_json


def _interval_iso(text: str) -> str:
    """An interval as Debezium's io.debezium.time.Interval (interval.handling.mode=string): pgjdbc's
    PGInterval fields in ISO 8601's PnYnMnDTnHnMnS, the seconds as BigDecimal.valueOf(double) stripped."""
    units, hours, minutes, seconds = _interval_fields(text)
    secs = decimal.Decimal(repr(seconds))
    if secs.as_tuple().exponent < -9:
        secs = secs.quantize(decimal.Decimal("1e-9"), rounding=decimal.ROUND_DOWN)
    secs_text = "0" if secs.is_zero() else format(secs.normalize(), "f")
    return f"P{units['year']}Y{units['mon']}M{units['day']}DT{hours}H{minutes}M{secs_text}S"


# PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY: what Debezium turns infinity into, in
# microseconds since the epoch (a timestamp) and, through LocalDate -5877611-06-21/22, in days (a date)
POSITIVE_INFINITY_US = 9223372036825200000
NEGATIVE_INFINITY_US = -9223372036832400000


def _java_epoch_day(year: int, month: int, day: int) -> int:
    """java.time.LocalDate.toEpochDay, which (unlike Python's date) takes any year."""
    def quot(a: int, b: int) -> int:  # Java's truncating division
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q

    total = 365 * year
    if year >= 0:
        total += quot(year + 3, 4) - quot(year + 99, 100) + quot(year + 399, 400)
    else:
        total -= quot(year, -4) - quot(year, -100) + quot(year, -400)
    total += quot(367 * month - 362, 12) + day - 1
    if month > 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        total -= 1 if leap else 2
    return total - 719528


POSITIVE_INFINITY_DAYS = _java_epoch_day(-5877611, 6, 21)
NEGATIVE_INFINITY_DAYS = _java_epoch_day(-5877611, 6, 22)
_INFINITE_US = {"infinity": POSITIVE_INFINITY_US, "-infinity": NEGATIVE_INFINITY_US}
_INFINITE_DAYS = {"infinity": POSITIVE_INFINITY_DAYS, "-infinity": NEGATIVE_INFINITY_DAYS}


def _infinite(parser: Parser, table: dict[str, int], divisor: int = 1) -> Parser:
    return lambda text: table[text] // divisor if text in table else parser(text)


def enum_type(labels: str) -> tuple[Schema, Parser]:
    """A PostgreSQL enum column: Debezium's io.debezium.data.Enum, its labels in their sort order."""
    return named("string", "io.debezium.data.Enum", parameters={"allowed": labels}), str


TIME_MODES = ("adaptive", "adaptive_time_microseconds", "connect")
_PLAIN_STRINGS = frozenset({
    18, 19, 25, 1042, 1043,  # "char", name, text, char(n), varchar
    869, 650, 829, 774,  # inet, cidr, macaddr, macaddr8
    3904, 3906, 3908, 3910, 3912, 3926})  # int4range, numrange, tsrange, tstzrange, daterange, int8range
_STRING_TYPE_NAMES = frozenset({"citext", "isbn"})
# element types Debezium's PostgresValueConverter makes Connect arrays of (money, name, interval, varbit,
# xml, point and refcursor arrays it leaves out)
_ARRAY_ELEMENTS = frozenset({21, 23, 20, 26, 18, 1043, 25, 1042, 1700, 700, 701, 16, 1082, 869, 650, 829, 774,
                             3908, 3910, 3912, 3904, 3906, 3926, 2950, 3802, 114, 1083, 1266, 1114, 1184, 17})


def column_type(t: PgType, modes: Modes = Modes()) -> tuple[Schema, Parser] | None:
    """The Connect schema (optional; the caller sets "optional") and the text parser of a column, as
    Debezium's PostgresValueConverter maps its type; None where Debezium leaves the column out (a type it
    does not know, without include.unknown.datatypes)."""
    if t.labels is not None:
        return enum_type(t.labels)
    if t.element is not None:
        return _array(t, modes)
    found = _scalar(t, modes)
    if found is None and modes.unknown:
        return _binary(modes.binary)[0], lambda text: _binary_of_text(text, modes.binary)
    return found


def _binary_of_text(text: str, mode: str) -> Any:
    data = text.encode()
    return data if mode == "bytes" else _binary(mode)[1]("\\x" + data.hex())


def _array(t: PgType, modes: Modes) -> tuple[Schema, Parser] | None:
    element = t.element
    if element.labels is None and element.oid not in _ARRAY_ELEMENTS and element.name not in (
            "citext", "hstore", "ltree"):
        return None
    found = column_type(PgType(element.oid, t.typmod, element.name, element.labels), modes)
    if found is None:
        return None
    item_schema, item_parser = found

    def parse(text: str) -> list:
        return [None if v is None else item_parser(v) for v in _array_items(text)]

    # the listed array types have optional elements; an enum array's come from Enum.builder unchanged: required
    return kschema("array", items={**item_schema, "optional": element.labels is None}), parse


def _scalar(t: PgType, modes: Modes) -> tuple[Schema, Parser] | None:  # noqa: C901, PLR0911, PLR0912 - a type table
    type_oid, typmod, time_mode = t.oid, t.typmod, modes.time
    if time_mode == "connect" and type_oid in (1082, 1083, 1114):
        return {1082: (named("int32", DATE), _infinite(_date, _INFINITE_DAYS)),
                1083: (named("int32", TIME), _time_ms),
                1114: (named("int64", TIMESTAMP), _infinite(_timestamp_ms, _INFINITE_US, 1000))}[type_oid]
    if type_oid == 1083 and time_mode == "adaptive" and 0 <= typmod <= 3:  # time(0..3): milliseconds
        return named("int32", "io.debezium.time.Time"), _time_ms
    if type_oid == 16:
        return kschema("boolean"), _bool
    if type_oid == 21:
        return kschema("int16"), int
    if type_oid == 23:
        return kschema("int32"), int
    if type_oid in (20, 26):
        return kschema("int64"), int
    if type_oid == 700:
        return kschema("float32"), float
    if type_oid == 701:
        return kschema("float64"), float
    if type_oid == 1700:
        return _numeric(typmod, modes.decimal)
    if type_oid == 790:
        return _money(modes)
    if type_oid == 17:
        return _binary(modes.binary)
    if type_oid == 1082:
        return named("int32", "io.debezium.time.Date"), _infinite(_date, _INFINITE_DAYS)
    if type_oid == 1114:
        if 0 <= typmod <= 3:
            return named("int64", "io.debezium.time.Timestamp"), _infinite(_timestamp_ms, _INFINITE_US, 1000)
        return named("int64", "io.debezium.time.MicroTimestamp"), _infinite(_timestamp_us, _INFINITE_US)
    if type_oid == 1184:
        width = 6 if typmod < 0 else typmod
        return named("string", "io.debezium.time.ZonedTimestamp"), \
            lambda text: text if text in ("infinity", "-infinity") else _zoned(text, width)
    if type_oid == 1083:
        return named("int64", "io.debezium.time.MicroTime"), _time_us
    if type_oid == 1266:
        return named("string", "io.debezium.time.ZonedTime"), _zoned_time
    if type_oid == 1560:  # bit(n): n bits
        return _bits(typmod)
    if type_oid == 1562:  # varbit(n); without n, pgjdbc's unknown length
        return _bits(typmod if typmod >= 0 else 2_147_483_647)
    if type_oid == 1186:
        if modes.interval == "string":
            return named("string", "io.debezium.time.Interval"), _interval_iso
        return named("int64", "io.debezium.time.MicroDuration"), _interval_us
    if type_oid == 2950:
        return named("string", "io.debezium.data.Uuid"), str
    if type_oid in (114, 3802):
        return named("string", "io.debezium.data.Json"), str
    if type_oid == 142:
        return named("string", "io.debezium.data.Xml"), str
    if type_oid == 3614:
        return named("string", "io.debezium.data.Tsvector"), str
    if type_oid == 600:
        return dict(POINT), _point
    if type_oid in _PLAIN_STRINGS or t.name in _STRING_TYPE_NAMES:
        return kschema("string"), str
    if t.name == "hstore":
        return _hstore(modes.hstore)
    if t.name == "ltree":
        return named("string", "io.debezium.data.Ltree"), str
    if type_oid in _GEOMETRIC:
        schema, parser = _GEOMETRIC[type_oid]
        return dict(schema), parser
    return None


def java_name_uuid(data: bytes) -> str:
    """java.util.UUID.nameUUIDFromBytes: a version 3 UUID of the bytes' MD5."""
    digest = bytearray(hashlib.md5(data).digest())  # noqa: S324 - the UUID's definition, not security
    digest[6] = (digest[6] & 0x0F) | 0x30
    digest[8] = (digest[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(digest)))


def toast_placeholder(t: PgType, schema: Schema, modes: Modes) -> Any:
    """What Debezium's UnchangedToastedPlaceholder puts for an unchanged TOASTed value that an update does
    not carry: the placeholder as the column's type holds it, by its type's name (text-like arrays a list
    of it, int and date arrays its bytes as numbers, hstore a one-entry map); None where it has none."""
    raw = modes.placeholder_bytes
    text = raw.decode(errors="replace")  # new String(bytes)
    if t.name == "hstore":
        return {text: text} if modes.hstore == "map" else "{" + jackson_string(text) + ":" + jackson_string(text) + "}"
    if t.element is not None:
        element = t.element.oid
        if element in (25, 1043, 1042, 114, 3802):
            return [text]
        if element == 17:
            return [raw]
        if element in (23, 1082, 20):
            return list(raw)
        return [java_name_uuid(raw)] if element == 2950 else None
    if schema["type"] == "string":
        return text
    return raw if schema["type"] == "bytes" and "name" not in schema else None


_SPECIAL_FALLBACKS: dict[str, Any] = {
    "io.debezium.time.ZonedTimestamp": "1970-01-01T00:00:00Z", "io.debezium.time.ZonedTime": "00:00:00Z",
    "io.debezium.time.Interval": "P0Y0M0DT0H0M0S", "io.debezium.data.geometry.Point": lambda: _point("(0,0)"),
    "io.debezium.data.geometry.Circle": lambda: _circle("<(0,0),0>"),
    "io.debezium.data.geometry.Line": lambda: {"a": 0.0, "b": 1.0, "c": 0.0}}  # A = B = 0 is no line
# PostgresValueConverter.geometryFallback: a unit shape of each type
_GEOMETRY_FALLBACKS: dict[int, Callable[[], dict]] = {
    603: lambda: {**_box("(0,0),(1,1)"), "wkb": _wkb(3, [[(0, 0), (0, 1), (1, 1), (1, 0), (0, 0)]])},
    601: lambda: _lseg("[(0,0),(1,0)]"), 604: lambda: _polygon("((0,0),(1,0),(0,1))"),
    602: lambda: {**_lseg("[(0,0),(1,0)]"), "extensions": {"type": "path"}}}
_FALLBACKS: dict[str, Any] = {"boolean": False, "int16": 0, "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0,
                              "string": "", "bytes": b""}


def required_fallback(schema: Schema, t: PgType | None = None, modes: Modes = Modes()) -> Any:
    """What Debezium writes for a NOT NULL column the change does not carry (the before image of a delete
    or update under REPLICA IDENTITY DEFAULT has the key only), since a required field cannot be null:
    the fallback each of its converters passes to convertValue (JdbcValueConverters' zero for plain
    types, the epoch for times, an empty array, "{}" for hstore as JSON, the geometry types' shapes)."""
    name, oid = schema.get("name"), t.oid if t is not None else 0
    if t is not None and t.element is not None:
        return []
    if name == DECIMAL:
        return decimal.Decimal(0)
    if name == "io.debezium.data.VariableScaleDecimal":
        return _variable_decimal("0")
    if oid == 1700 and modes.decimal == "string":  # BigDecimal.ZERO at the column's scale
        return "0" if t.typmod < 4 else format(decimal.Decimal(0).scaleb(-((t.typmod - 4) & 0xFFFF)), "f")
    if oid == 790 and modes.decimal == "string":
        return format(decimal.Decimal(0).scaleb(-modes.money_digits), "f")
    if t is not None and t.name == "hstore":
        return {} if modes.hstore == "map" else "{}"
    special = _SPECIAL_FALLBACKS.get(name)
    if special is not None:
        return special() if callable(special) else special
    if oid in _GEOMETRY_FALLBACKS:
        return _GEOMETRY_FALLBACKS[oid]()
    return _FALLBACKS.get(schema["type"])


# Debezium's PostgresDefaultValueConverter: a column default's text as pg_get_expr gives it, by type OID:
# a function call (nextval, now()) or CURRENT_TIMESTAMP... stands for the placeholder, a literal for its
# text; other types get no default
_DEFAULT_PLACEHOLDERS = {16: "false", 21: "0", 23: "0", 20: "0", 700: "0.0", 701: "0.0", 1700: "0.0", 25: "",
                         1043: "", 1042: "", 114: "{}", 3802: "{}", 142: "",
                         2950: "00000000-0000-0000-0000-000000000000", 1082: "1970-01-01", 1083: "00:00",
                         1114: "1970-01-01", 1184: "1970-01-01", 1560: "00", 1562: "0", 1186: None}
_FUNCTION_DEFAULT = re.compile(r"^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)")
_CURRENT = {"current_timestamp", "current_time", "current_date", "localtime", "localtimestamp"}


def default_text(type_oid: int, expression: str | None, enum: bool = False) -> str | None:
    """The text a column's DEFAULT stands for in Debezium's schema, None for no default (an enum's: the
    quoted label before its cast, PostgresDefaultValueConverter.extractEnumDefault)."""
    if expression is None:
        return None
    if enum:
        value, cast, _ = expression.rpartition("::")
        return value[1:-1] if cast and len(value) >= 2 and value[0] == value[-1] == "'" else None
    if type_oid not in _DEFAULT_PLACEHOLDERS:
        return None
    expression = expression.strip()
    if _FUNCTION_DEFAULT.match(expression) or expression.lower() in _CURRENT:
        return _DEFAULT_PLACEHOLDERS[type_oid]  # an interval's ("epoch") does not parse: none
    if "'" not in expression:
        return None if expression.startswith("NULL::") else expression
    literal = re.search(r"'([^']*(?:''[^']*)*)'", expression)
    return literal.group(1).replace("''", "'") if literal else None


def default_value(t: PgType, schema: Schema, parser: Parser, expression: str | None) -> tuple[Any, Any] | None:
    """A column's default as (the value, as rows carry it; its JSON in the schema, as Kafka's JsonConverter
    writes it), or None where Debezium gives the field no default."""
    type_oid = t.oid
    text = default_text(type_oid, expression, enum=t.labels is not None)
    if text is None or t.element is not None:
        return None
    try:
        if type_oid == 16:
            value: Any = text.lower() == "true"
        elif type_oid == 1184:
            value = parser(text if any(c in text[10:] for c in "+-Z") else text + "+00:00")
        elif schema.get("name") == "io.debezium.data.VariableScaleDecimal":
            return None  # a struct default: Debezium leaves it out (KAFKA-12694)
        else:
            value = parser(text)
    except (ValueError, decimal.InvalidOperation, ArithmeticError):
        return None  # Debezium: "Cannot parse column default value"
    if value is None:
        return None
    if isinstance(value, decimal.Decimal):
        scale = int(schema.get("parameters", {}).get("scale", 0))
        value = value.quantize(decimal.Decimal(1).scaleb(-scale))
        from klog.connect.converters import decimal_to_bytes

        return value, base64.b64encode(decimal_to_bytes(value, scale)).decode()
    if isinstance(value, bytes):  # Bits
        return value, base64.b64encode(value).decode()
    return value, value

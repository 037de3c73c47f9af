"""PostgreSQL column types as Debezium's PostgreSQL connector maps them to Connect schemas, and their
text form (what pgoutput and `col::text` give) parsed into Connect values."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from klog.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, Schema, epoch_days, epoch_micros, micros_of_day, primitive

UNAVAILABLE = "__debezium_unavailable_value"  # Debezium's placeholder for an unchanged TOASTed value

Parser = Callable[[str], Any]


def _bool(text: str) -> bool:
    return text in ("t", "true")


def _bytea(text: str) -> bytes:
    return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()


def _date(text: str) -> int | None:
    try:
        return epoch_days(dt.date.fromisoformat(text))
    except ValueError:
        return None  # infinity, BC dates


def _timestamp_us(text: str) -> int | None:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return epoch_micros(when)


def _timestamp_ms(text: str) -> int | None:
    us = _timestamp_us(text)
    return None if us is None else us // 1000


def _zoned(text: str, width: int = 6) -> str | None:
    """A timestamptz as Debezium's ZonedTimestamp in UTC: exactly `width` fraction digits (the column's
    precision, 6 without one, as pgjdbc reports its scale); width 0 is ISO_OFFSET_DATE_TIME's, which
    prints a fraction only when there is one."""
    try:
        when = dt.datetime.fromisoformat(text if len(text) < 3 or text[-3] not in "+-" else text + ":00")
    except ValueError:
        return None
    when = when.astimezone(dt.UTC)
    fraction = f".{when.microsecond:06d}"[: width + 1] if width > 0 else \
        (f".{when.microsecond:06d}".rstrip("0") if when.microsecond else "")
    return f"{when:%Y-%m-%dT%H:%M:%S}{fraction}Z"


_TIMETZ = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?$")


def _zoned_time(text: str) -> str | None:
    """A timetz as Debezium's ZonedTime: shifted to UTC, ISO_OFFSET_TIME (a fraction only as long as it
    needs to be)."""
    m = _TIMETZ.match(text)
    if m is None:
        return None
    h, mi, sec, frac, sign, oh, om, os_ = m.groups()
    offset = (int(oh) * 3600 + int(om or 0) * 60 + int(os_ or 0)) * (-1 if sign == "-" else 1)
    total = (int(h) * 3600 + int(mi) * 60 + int(sec) - offset) % 86_400
    fraction = ("." + frac.rstrip("0")) if frac and frac.strip("0") else ""
    return f"{total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d}{fraction}Z"


def _time_us(text: str) -> int:
    t = dt.time.fromisoformat(text[:15] if "+" not in text and "-" not in text else text.split("+")[0].split("-")[0])
    return micros_of_day(t)


def _time_ms(text: str) -> int:
    return _time_us(text) // 1000


_INTERVAL_UNITS = re.compile(r"([-+]?\d+) (year|mon|day)s?")
_INTERVAL_TIME = re.compile(r"([-+]?)(\d+):(\d+):(\d+(?:\.\d+)?)")
DAYS_PER_MONTH_AVG = 365.25 / 12.0


def _interval_us(text: str) -> int:
    """An interval's text (IntervalStyle postgres) as Debezium's MicroDuration.durationMicros computes it
    from pgjdbc's PGInterval: months as 365.25 / 12 days, the same double arithmetic, truncated."""
    units = {"year": 0, "mon": 0, "day": 0}
    for amount, unit in _INTERVAL_UNITS.findall(text):
        units[unit] += int(amount)
    hours = minutes = 0
    seconds = 0.0
    clock = _INTERVAL_TIME.search(text)
    if clock:
        sign = -1 if clock.group(1) == "-" else 1
        hours, minutes, seconds = sign * int(clock.group(2)), sign * int(clock.group(3)), sign * float(clock.group(4))
    days = (units["year"] * 12 + units["mon"]) * DAYS_PER_MONTH_AVG + units["day"]
    return int(((((days * 24 + hours) * 60) + minutes) * 60 + seconds) * 1e6)


# one-dimensional arrays of these element types are Connect arrays, as Debezium's PostgresValueConverter
# maps them (elements optional); the element's schema and parser
_ARRAYS: dict[int, tuple[Schema, Parser]] = {
    1000: (primitive("boolean"), lambda t: t in ("t", "true")), 1005: (primitive("int16"), int),
    1007: (primitive("int32"), int), 1016: (primitive("int64"), int), 1021: (primitive("float32"), float),
    1022: (primitive("float64"), float), 1009: (primitive("string"), str), 1015: (primitive("string"), str),
    1014: (primitive("string"), str),
    2951: (primitive("string", name="io.debezium.data.Uuid", version=1), str)}


def _array_items(text: str) -> list[str | None]:
    """The elements of a one-dimensional array's text form ({a,"b c",NULL}): quoted ones unescaped, an
    unquoted NULL a null."""
    out: list[str | None] = []
    i, body = 0, text[text.index("{") + 1:text.rindex("}")]
    while i < len(body):
        if body[i] == '"':
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


def array_type(type_oid: int) -> tuple[Schema, Parser] | None:
    if type_oid not in _ARRAYS:
        return None
    item_schema, item_parser = _ARRAYS[type_oid]

    def parse(text: str) -> list:
        return [None if v is None else item_parser(v) for v in _array_items(text)]

    return primitive("array", items=item_schema), parse


def enum_type(labels: str) -> tuple[Schema, Parser]:
    """A PostgreSQL enum column: Debezium's io.debezium.data.Enum, its labels in their sort order."""
    return primitive("string", name="io.debezium.data.Enum", version=1, parameters={"allowed": labels}), str


TIME_MODES = ("adaptive", "adaptive_time_microseconds", "connect")


def column_type(type_oid: int, typmod: int, decimal_mode: str = "precise",
                time_mode: str = "adaptive") -> tuple[Schema, Parser]:
    """The Connect schema (without "optional" set) and the text parser of a column. time_mode is
    Debezium's time.precision.mode: connect gives Kafka's Date, Time and Timestamp (millisecond)
    types; the adaptive modes Debezium's, by the column's precision."""
    if time_mode == "connect" and type_oid in (1082, 1083, 1114):
        return {1082: (primitive("int32", name=DATE, version=1), _date),
                1083: (primitive("int32", name=TIME, version=1), _time_ms),
                1114: (primitive("int64", name=TIMESTAMP, version=1), _timestamp_ms)}[type_oid]
    if type_oid == 1083 and time_mode == "adaptive" and 0 <= typmod <= 3:  # time(0..3): milliseconds
        return primitive("int32", name="io.debezium.time.Time", version=1), _time_ms
    if type_oid == 16:
        return primitive("boolean"), _bool
    if type_oid == 21:
        return primitive("int16"), int
    if type_oid == 23:
        return primitive("int32"), int
    if type_oid in (20, 26):
        return primitive("int64"), int
    if type_oid == 700:
        return primitive("float32"), float
    if type_oid == 701:
        return primitive("float64"), float
    if type_oid == 1700:
        return _numeric(typmod, decimal_mode)
    if type_oid == 17:
        return primitive("bytes"), _bytea
    if type_oid == 1082:
        return primitive("int32", name="io.debezium.time.Date", version=1), _date
    if type_oid == 1114:
        if 0 <= typmod <= 3:
            return primitive("int64", name="io.debezium.time.Timestamp", version=1), _timestamp_ms
        return primitive("int64", name="io.debezium.time.MicroTimestamp", version=1), _timestamp_us
    if type_oid == 1184:
        width = 6 if typmod < 0 else typmod
        return primitive("string", name="io.debezium.time.ZonedTimestamp", version=1), \
            lambda text: _zoned(text, width)
    if type_oid == 1083:
        return primitive("int64", name="io.debezium.time.MicroTime", version=1), _time_us
    if (array := array_type(type_oid)) is not None:
        return array
    if type_oid == 1266:
        return primitive("string", name="io.debezium.time.ZonedTime", version=1), _zoned_time
    if type_oid == 1560 and typmod == 1:  # bit(1): Debezium's boolean
        return primitive("boolean"), lambda text: text == "1"
    if type_oid == 1186:
        return primitive("int64", name="io.debezium.time.MicroDuration", version=1), _interval_us
    if type_oid == 2950:
        return primitive("string", name="io.debezium.data.Uuid", version=1), str
    if type_oid in (114, 3802):
        return primitive("string", name="io.debezium.data.Json", version=1), str
    if type_oid == 142:
        return primitive("string", name="io.debezium.data.Xml", version=1), str
    return primitive("string"), str  # text, varchar, char, name, enums, arrays, ...: their text form


def _numeric(typmod: int, mode: str) -> tuple[Schema, Parser]:
    if mode == "double":
        return primitive("float64"), float
    if mode == "string":
        return primitive("string"), str
    if typmod >= 4:  # numeric(p, s): typmod = (p << 16 | s) + 4
        precision, scale = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
        return (primitive("bytes", name=DECIMAL, version=1,
                          parameters={"scale": str(scale), "connect.decimal.precision": str(precision)}),
                decimal.Decimal)
    # unconstrained numeric: Debezium's VariableScaleDecimal (the scale travels with each value)
    schema = primitive("struct", name="io.debezium.data.VariableScaleDecimal", version=1,
                       fields=[{**primitive("int32", False), "field": "scale"},
                               {**primitive("bytes", False), "field": "value"}])
    return schema, _variable_decimal


def _variable_decimal(text: str) -> dict:
    from klog.connect.converters import decimal_to_bytes

    value = decimal.Decimal(text)
    scale = max(0, -value.as_tuple().exponent) if isinstance(value.as_tuple().exponent, int) else 0
    return {"scale": scale, "value": decimal_to_bytes(value, scale)}


_FALLBACKS: dict[str, Any] = {"boolean": False, "int16": 0, "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0,
                              "string": "", "bytes": b""}


def required_fallback(schema: Schema) -> Any:
    """What Debezium writes for a NOT NULL column the change does not carry (the before image of a delete
    or update under REPLICA IDENTITY DEFAULT has the key only): its type's zero (JdbcValueConverters'
    fallback), since a required field cannot be null."""
    name = schema.get("name")
    if name == DECIMAL:
        return decimal.Decimal(0)
    if name == "io.debezium.data.VariableScaleDecimal":
        return _variable_decimal("0")
    if name == "io.debezium.time.ZonedTimestamp":
        return "1970-01-01T00:00:00Z"
    return _FALLBACKS.get(schema["type"])


# Debezium's PostgresDefaultValueConverter: a column default's text as pg_get_expr gives it, by type OID:
# a function call (nextval, now()) or CURRENT_TIMESTAMP... stands for the placeholder, a literal for its
# text; other types get no default
_DEFAULT_PLACEHOLDERS = {16: "false", 21: "0", 23: "0", 20: "0", 700: "0.0", 701: "0.0", 1700: "0.0", 25: "",
                         1043: "", 1042: "", 114: "{}", 3802: "{}", 142: "",
                         2950: "00000000-0000-0000-0000-000000000000", 1082: "1970-01-01", 1083: "00:00",
                         1114: "1970-01-01", 1184: "1970-01-01"}
_FUNCTION_DEFAULT = re.compile(r"^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)")
_CURRENT = {"current_timestamp", "current_time", "current_date", "localtime", "localtimestamp"}


def default_text(type_oid: int, expression: str | None) -> str | None:
    """The text a column's DEFAULT stands for in Debezium's schema, None for no default."""
    if expression is None or type_oid not in _DEFAULT_PLACEHOLDERS:
        return None
    expression = expression.strip()
    if _FUNCTION_DEFAULT.match(expression) or expression.lower() in _CURRENT:
        return _DEFAULT_PLACEHOLDERS[type_oid]
    if "'" not in expression:
        return None if expression.startswith("NULL::") else expression
    literal = re.search(r"'([^']*(?:''[^']*)*)'", expression)
    return literal.group(1).replace("''", "'") if literal else None


def default_value(type_oid: int, schema: Schema, parser: Parser, expression: str | None) -> tuple[Any, Any] | None:
    """A column's default as (the value, as rows carry it; its JSON in the schema, as Kafka's JsonConverter
    writes it), or None where Debezium gives the field no default."""
    text = default_text(type_oid, expression)
    if text is None:
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
    return value, value

"""Converters between Connect data and record bytes: Kafka's StringConverter, ByteArrayConverter and
JsonConverter (with or without the {"schema", "payload"} envelope), by their class names or short ones."""

from __future__ import annotations

import base64
import decimal
import json
from typing import Any

from klog.connect.config import ConfigDef, aliases
from klog.connect.data import DECIMAL, Schema, primitive
from klog.connect.errors import ConfigError, DataError


class Converter:
    java_class = ""
    config_def = ConfigDef()

    def __init__(self, props: dict[str, str], is_key: bool) -> None:
        self.config = self.config_def.parse(props)
        self.is_key = is_key

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

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None and value is None:
            return None  # a tombstone stays one
        payload = to_json(schema, value, self.config["decimal.format"] == "numeric")
        doc = {"schema": schema, "payload": payload} if self.config["schemas.enable"] else payload
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, default=_json_default).encode()

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
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
        return doc["schema"], from_json(doc["schema"], doc["payload"])


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def decimal_to_bytes(value: decimal.Decimal, scale: int) -> bytes:
    unscaled = int(value.scaleb(scale).to_integral_value())
    return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)


def decimal_from_bytes(data: bytes, scale: int) -> decimal.Decimal:
    return decimal.Decimal(int.from_bytes(data, "big", signed=True)).scaleb(-scale)


def _scale(schema: Schema) -> int:
    return int((schema.get("parameters") or {}).get("scale", 0))


def to_json(schema: Schema | None, value: Any, numeric_decimals: bool = False) -> Any:
    """A Connect value as JsonConverter's payload: bytes base64, decimals per decimal.format."""
    if value is None or schema is None:
        return value if not isinstance(value, bytes | bytearray | decimal.Decimal) else _json_default(value)
    kind = schema.get("type")
    if schema.get("name") == DECIMAL:
        dec = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
        return float(dec) if numeric_decimals else base64.b64encode(decimal_to_bytes(dec, _scale(schema))).decode()
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode() if isinstance(value, bytes | bytearray | memoryview) else value
    if kind == "struct":
        if not isinstance(value, dict):
            raise DataError(f"a struct value must be a map, not {type(value).__name__}")
        return {f["field"]: to_json(f, value.get(f["field"]), numeric_decimals) for f in schema.get("fields", [])}
    if kind == "array":
        return [to_json(schema.get("items"), v, numeric_decimals) for v in value]
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
        return decimal.Decimal(str(value))
    if kind == "bytes" and isinstance(value, str):
        return base64.b64decode(value)
    if kind == "struct" and isinstance(value, dict):
        return {f["field"]: from_json(f, value.get(f["field"])) for f in schema.get("fields", [])}
    if kind == "array" and isinstance(value, list):
        return [from_json(schema.get("items"), v) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: from_json(schema.get("values"), v) for k, v in value.items()}
    return value


CONVERTERS: dict[str, type[Converter]] = {}
for _cls, _short in ((StringConverter, "string"), (ByteArrayConverter, "bytes"), (JsonConverter, "json")):
    for _name in aliases([_cls.java_class]) | {_short}:
        CONVERTERS[_name] = _cls


def make_converter(field_name: str, class_name: str, props: dict[str, str], is_key: bool) -> Converter:
    cls = CONVERTERS.get(class_name)
    if cls is None:
        raise ConfigError(field_name, class_name, "unknown converter: use string, bytes, json or Kafka's class names "
                          "(org.apache.kafka.connect.storage.StringConverter, ...)")
    return cls(props, is_key)

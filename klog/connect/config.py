"""Connector configs in Kafka Connect's shape: files (JSON or .properties), typed keys, validation.

A config is a flat map of strings (`name`, `connector.class`, `tasks.max`, ...), as Kafka Connect's
REST API and connect-standalone take it. ConfigDef types and checks the keys a component defines and
names the failing field on a bad value (exit 2 from the CLI).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from klog.connect.errors import ConfigError

REQUIRED = object()  # a key without a default must be given
TYPES = ("string", "int", "long", "double", "boolean", "list", "password", "class")


@dataclass
class Key:
    name: str
    type: str = "string"
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple[str, ...] | None = None  # allowed values (compared lower-case)
    check: Callable[[Any], str | None] | None = None  # returns the reason a parsed value is refused
    at_least: int | None = None


@dataclass
class ConfigDef:
    keys: dict[str, Key] = field(default_factory=dict)

    def define(self, name: str, type: str = "string", default: Any = REQUIRED, doc: str = "", **kw: Any) -> ConfigDef:
        assert type in TYPES, type
        self.keys[name] = Key(name, type, default, doc, **kw)
        return self

    def merged(self, other: ConfigDef) -> ConfigDef:
        return ConfigDef({**self.keys, **other.keys})

    def parse(self, props: dict[str, str]) -> dict[str, Any]:
        """Every defined key typed (defaults filled in); ConfigError naming the first bad one."""
        return {name: parse_value(key, props.get(name)) for name, key in self.keys.items()}

    def errors(self, props: dict[str, str]) -> dict[str, str]:
        """Each bad key's reason (the validate endpoint lists them all)."""
        out = {}
        for name, key in self.keys.items():
            try:
                parse_value(key, props.get(name))
            except ConfigError as e:
                out[name] = str(e)
        return out


def parse_value(key: Key, raw: str | None) -> Any:
    if raw is None or (raw == "" and key.type not in ("string", "password", "list")):
        if key.default is REQUIRED:
            raise ConfigError(key.name, None, key.doc or "no default value")
        return key.default
    text = str(raw).strip()
    value: Any
    try:
        if key.type in ("int", "long"):
            value = int(text)
        elif key.type == "double":
            value = float(text)
        elif key.type == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError
            value = text.lower() == "true"
        elif key.type == "list":
            value = [p.strip() for p in text.split(",") if p.strip()]
        else:
            value = text
    except ValueError:
        kind = {"int": "INT", "long": "LONG", "double": "DOUBLE", "boolean": "BOOLEAN"}[key.type]
        raise ConfigError(key.name, raw, f"not a value of type {kind}") from None
    if key.choices is not None and str(value).lower() not in key.choices:
        raise ConfigError(key.name, raw, f"must be one of {', '.join(key.choices)}")
    if key.at_least is not None and value < key.at_least:
        raise ConfigError(key.name, raw, f"must be at least {key.at_least}")
    if key.check is not None and (reason := key.check(value)) is not None:
        raise ConfigError(key.name, raw, reason)
    return value.lower() if key.choices is not None and isinstance(value, str) else value


def java_regex(pattern: str) -> re.Pattern:
    """A java.util.regex pattern compiled by Python's re: Java's named groups `(?<name>...)` and
    back references `\\k<name>` written as Python's (Debezium's outbox router defaults to one)."""
    pattern = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", pattern)
    return re.compile(re.sub(r"\\k<([A-Za-z][A-Za-z0-9]*)>", r"(?P=\1)", pattern))


def regex_check(value: str) -> str | None:
    try:
        java_regex(value)
    except re.error as e:
        return f"not a regular expression ({e})"
    return None


def regex_list_check(values: list[str]) -> str | None:
    for v in values:
        if (reason := regex_check(v)) is not None:
            return reason
    return None


# -- files ---------------------------------------------------------------------------------------
def load_config_file(path: str) -> dict[str, str]:
    """A connector config from JSON (flat, or the REST API's {"name": ..., "config": {...}}) or
    Java .properties; every value a string, as Kafka Connect keeps them. A flat JSON connector config
    without a name (the body of PUT /connectors/{name}/config) is named after its file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("CONFIG", path, e.strerror or str(e)) from None
    if path.endswith(".json") or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError("CONFIG", path, f"not JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(data, dict):
            raise ConfigError("CONFIG", path, "a JSON config is an object")
        if isinstance(data.get("config"), dict):  # the REST API's shape
            data = {**data["config"], **({"name": data["name"]} if "name" in data else {})}
        if "connector.class" in data and "name" not in data:
            # a body for PUT /connectors/{name}/config (Debezium's examples): the name is the file's
            data["name"] = os.path.splitext(os.path.basename(path))[0]
        return {str(k): config_string(v) for k, v in data.items()}
    return parse_properties_text(text)


def config_string(value: object) -> str:
    """A JSON config value as the string a connector reads (a file's and the REST API's alike)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "" if value is None else str(value)


def parse_properties_text(text: str) -> dict[str, str]:
    """Java .properties: `key=value` or `key: value`, # and ! comments, backslash line continuations."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        while line.endswith("\\") and not line.endswith("\\\\"):
            line = line[:-1] + next(lines, "").lstrip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", line)
        key, value = (m.group(1), m.group(2)) if m else (line, "")
        out[_unescape(key)] = _unescape(value)
    return out


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), text)


def substitute_env(props: dict[str, str]) -> dict[str, str]:
    """${env:NAME} in values, as Kafka's EnvVarConfigProvider spells it (passwords out of files)."""
    def sub(value: str) -> str:
        return re.sub(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), value)

    return {k: sub(v) for k, v in props.items()}


def with_prefix(props: dict[str, str], prefix: str) -> dict[str, str]:
    """The keys under `prefix` (a converter's, a transform's), the prefix stripped."""
    return {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}


def aliases(names: Iterable[str]) -> set[str]:
    """A Java class name and Kafka's aliases for it: the simple name and, for XConnector, X."""
    out = set()
    for name in names:
        simple = name.rsplit(".", 1)[-1]
        out |= {name, simple}
        for suffix in ("Connector", "Converter"):
            if simple.endswith(suffix) and simple != suffix:
                out.add(simple[: -len(suffix)])
    return out

"""Avro schema compatibility, by Avro's schema resolution rules (the specification's "Schema Resolution";
Java's SchemaCompatibility, which Confluent's AvroSchema.isBackwardCompatible calls): can a reader with
one schema read what a writer with another wrote?

Schemas are fastavro-parsed (`parse_schema(..., _write_hint=False)`): named types carry their full
names, a named type's later uses are its full name. `klog registry` judges compatibility levels with it
(klog/registry/compat.py), Connect's AvroConverter latest.compatibility.strict.
"""

from __future__ import annotations

from typing import Any

# the writer's type -> the reader types that read it (Avro's promotions)
PROMOTIONS = {"int": {"int", "long", "float", "double"}, "long": {"long", "float", "double"},
              "float": {"float", "double"}, "string": {"string", "bytes"}, "bytes": {"bytes", "string"}}
NAMED = ("record", "enum", "fixed")


def named_types(schema: Any, out: dict[str, dict] | None = None) -> dict[str, dict]:
    """Every named type a parsed schema defines, by full name."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for member in schema:
            named_types(member, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED:
            out[schema["name"]] = schema
        if kind == "record":
            for field in schema.get("fields", []):
                named_types(field["type"], out)
        elif kind == "array":
            named_types(schema["items"], out)
        elif kind == "map":
            named_types(schema["values"], out)
        elif isinstance(kind, dict | list):
            named_types(kind, out)
    return out


class _Check:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader_names = named_types(reader)
        self.writer_names = named_types(writer)
        self.assumed: set[tuple[str, str]] = set()  # recursive records: a pair being checked is taken as fine

    @staticmethod
    def resolve(schema: Any, names: dict[str, dict]) -> Any:
        """A named type's definition for its name; a primitive's name for the primitive with properties."""
        for _ in range(64):  # {"type": {"type": ...}} nests; a schema is not that deep
            if isinstance(schema, str):
                return names.get(schema, schema)
            if not isinstance(schema, dict):
                return schema  # a union
            kind = schema.get("type")
            if kind in NAMED or kind in ("array", "map"):
                return schema
            if isinstance(kind, dict | list) or kind in names:
                schema = kind
                continue
            return kind
        return schema

    def problems(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self.resolve(reader, self.reader_names)
        writer = self.resolve(writer, self.writer_names)
        if isinstance(writer, list):  # every branch the writer may have written must be readable
            out = []
            for member in writer:
                out += self.problems(reader, member, path)
            return out
        if isinstance(reader, list):
            if any(not self.problems(member, writer, path) for member in reader):
                return []
            return [f"{path or '/'}: the reader's union has no branch for the writer's {_kind(writer)}"]
        r_kind, w_kind = _kind(reader), _kind(writer)
        if r_kind != w_kind and r_kind not in PROMOTIONS.get(w_kind, ()):
            return [f"{path or '/'}: the reader's {r_kind} cannot read the writer's {w_kind}"]
        if r_kind in NAMED and _short(reader["name"]) != _short(writer["name"]) \
                and _short(writer["name"]) not in {_short(a) for a in reader.get("aliases", [])}:
            return [f"{path or '/'}: the reader's {reader['name']} is not the writer's {writer['name']}"]
        if r_kind == "record":
            return self._record(reader, writer, path)
        if r_kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and reader.get("default") is None:
                return [f"{path or '/'}: the reader's enum {reader['name']} lacks the symbols {missing}"]
            return []
        if r_kind == "fixed" and reader["size"] != writer["size"]:
            return [f"{path or '/'}: fixed {reader['name']} is {reader['size']} bytes, the writer's {writer['size']}"]
        if r_kind == "array":
            return self.problems(reader["items"], writer["items"], f"{path}/items")
        if r_kind == "map":
            return self.problems(reader["values"], writer["values"], f"{path}/values")
        return []

    def _record(self, reader: dict, writer: dict, path: str) -> list[str]:
        pair = (reader["name"], writer["name"])
        if pair in self.assumed:
            return []
        self.assumed.add(pair)
        written = {f["name"]: f for f in writer["fields"]}
        out = []
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((written[n] for n in names if n in written), None)
            if source is None:
                if "default" not in field:
                    out.append(f"{path}/fields/{field['name']}: the reader's field has no default and the writer "
                               "does not write it")
            else:
                out += self.problems(field["type"], source["type"], f"{path}/fields/{field['name']}")
        return out


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    return schema["type"] if isinstance(schema, dict) else schema


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def read_problems(reader: Any, writer: Any) -> list[str]:
    """Why a reader with schema `reader` cannot read data written with `writer` (empty: it can)."""
    return _Check(reader, writer).problems(reader, writer, "")

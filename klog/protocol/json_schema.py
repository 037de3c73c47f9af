"""JSON Schema documents as Confluent's registry and JsonSchemaConverter read them (everit's loader), for
the two faces that read them: `klog registry` (its JSON compatibility, klog.protocol.json_compat) and
Connect's JsonSchemaConverter (klog.connect.json_schema). Pure JSON: one keyword family (a type and its
keywords, enum, const, not, allOf, anyOf, oneOf, $ref) is that kind of schema, several are an allOf of
them, a list of types an anyOf, none the empty schema; local `$ref`s (`#/definitions/...`, `#/$defs/...`,
an `$id`) are followed, others refused (klog resolves no schema references)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "dependencies",
               "dependentRequired", "dependentSchemas", "minProperties", "maxProperties", "unevaluatedProperties"),
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"),
}
COMBINERS = ("allOf", "anyOf", "oneOf")


@dataclass(eq=False)
class Node:
    """One schema as everit loads it: its kind (empty, true, false, null, boolean, string, number, object,
    array, enum, const, not, combined) and its JSON; a combined one's criterion and parts."""

    kind: str
    doc: Any
    criterion: str = ""
    parts: list[Node] = field(default_factory=list)
    integer: bool = False  # a number kind's "integer"

    def get(self, key: str, default: Any = None) -> Any:
        return self.doc.get(key, default) if isinstance(self.doc, dict) else default


class SchemaProblem(ValueError):
    """A JSON schema klog cannot compare (an unresolvable $ref)."""


class Loader:
    """Nodes of one schema document, each JSON object loaded once (so $ref cycles end)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.ids: dict[str, Any] = {}
        self._collect_ids(root, 0)
        self.loaded: dict[int, Node] = {}

    def _collect_ids(self, doc: Any, depth: int) -> None:
        if depth > 200:
            raise SchemaProblem("the schema is nested too deep")
        if isinstance(doc, dict):
            for key in ("$id", "id"):
                if isinstance(doc.get(key), str):
                    self.ids.setdefault(doc[key], doc)
            for value in doc.values():
                self._collect_ids(value, depth + 1)
        elif isinstance(doc, list):
            for value in doc:
                self._collect_ids(value, depth + 1)

    def resolve(self, ref: str) -> Any:
        """The part of the document a `$ref` names: an `$id`, a JSON pointer into the document ("#/...") or
        into a part with an `$id` ("http://example.com/a.json#/definitions/x" where the root's `$id` is
        http://example.com/a.json: everit resolves it without fetching, so does klog). Nothing is fetched."""
        if ref in self.ids:
            return self.ids[ref]
        base, _, pointer = ref.partition("#")
        if base and base not in self.ids:
            raise SchemaProblem(f"$ref {ref!r} is not in the schema (klog resolves only local references)")
        doc = self.ids[base] if base else self.root
        if pointer and not pointer.startswith("/"):
            raise SchemaProblem(f"$ref {ref!r} names no $id of the schema")
        for part in pointer[1:].split("/") if pointer else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(doc, dict) and part in doc:
                doc = doc[part]
            elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
                doc = doc[int(part)]
            else:
                raise SchemaProblem(f"$ref {ref!r} points at nothing in the schema")
        return doc

    def node(self, doc: Any) -> Node:
        for _ in range(64):  # a $ref to a $ref ...: followed (everit's normalizeSchema)
            if isinstance(doc, dict) and isinstance(doc.get("$ref"), str) and len(self._families(doc)) == 1:
                doc = self.resolve(doc["$ref"])
            else:
                break
        hit = self.loaded.get(id(doc))
        if hit is not None:
            return hit
        node = self._load(doc)
        self.loaded[id(doc)] = node
        return node

    @staticmethod
    def _families(doc: dict) -> list[str]:
        out = [k for k in ("enum", "const", "not", *COMBINERS, "$ref") if k in doc]
        if "type" in doc or any(k in doc for kws in TYPE_KEYWORDS.values() for k in kws):
            out.append("type")
        return out

    def _load(self, doc: Any) -> Node:
        if doc is True:
            return Node("true", {})
        if doc is False:
            return Node("false", {})
        if not isinstance(doc, dict):
            raise SchemaProblem(f"a schema must be an object or a boolean, not {json.dumps(doc)[:80]}")
        families = self._families(doc)
        if not families:
            return Node("empty", doc)
        parts = [self._family(doc, f) for f in families]
        if len(parts) == 1:
            return parts[0]
        return Node("combined", doc, "allOf", parts)

    def _family(self, doc: dict, family: str) -> Node:
        if family in ("enum", "const"):
            return Node(family, doc)
        if family == "not":
            return Node("not", doc, parts=[self.node(doc["not"])])
        if family in COMBINERS:
            return Node("combined", doc, family, [self.node(d) for d in doc[family]])
        if family == "$ref":
            return self.node(self.resolve(doc["$ref"]))
        kind = doc.get("type")
        if isinstance(kind, list):  # everit: one schema per type, any of them
            return Node("combined", doc, "anyOf", [self._typed(doc, k) for k in kind])
        return self._typed(doc, kind)

    @staticmethod
    def _typed(doc: dict, kind: Any) -> Node:
        if kind is None:  # no "type": the kind its keywords belong to
            kind = next(k for k, kws in TYPE_KEYWORDS.items() if any(w in doc for w in kws))
        if kind == "integer":
            return Node("number", doc, integer=True)
        return Node(str(kind), doc)


def check_references(doc: Any) -> None:
    """SchemaProblem when a `$ref` of the document is not in it (klog resolves no schema references)."""
    loader = Loader(doc)
    todo = [doc]
    while todo:
        part = todo.pop()
        if isinstance(part, dict):
            if isinstance(part.get("$ref"), str):
                loader.resolve(part["$ref"])
            todo += part.values()
        elif isinstance(part, list):
            todo += part

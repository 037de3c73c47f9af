"""JSON Schema documents as Confluent's registry and JsonSchemaConverter read them (everit's loader), for
the two faces that read them: `klog registry` (its JSON compatibility, klog.protocol.json_compat) and
Connect's JsonSchemaConverter (klog.connect.json_schema). Pure JSON: one keyword family (a type and its
keywords, enum, const, not, allOf, anyOf, oneOf, $ref) is that kind of schema, several are an allOf of
them, a list of types an anyOf, none the empty schema. `$ref`s are followed within the document
(`#/definitions/...`, `#/$defs/...`, an `$id`) and into the documents its schema references name (a
Document: `"$ref": "address.json"` or `"address.json#/definitions/Zip"`, the name resolved against the
root's `$id` as Confluent's JsonSchema registers each reference with everit); nothing is fetched."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin

TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "dependencies",
               "dependentRequired", "dependentSchemas", "minProperties", "maxProperties", "unevaluatedProperties"),
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"),
}
COMBINERS = ("allOf", "anyOf", "oneOf")
# what names and $refs are relative to in a document without an $id (json-sKema's mem://input): so that
# "address.json" and "./address.json" name one reference (urljoin leaves them apart against no base)
NO_ID_BASE = "https://klog.invalid/"


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


@dataclass(frozen=True, eq=False)
class Document:
    """A JSON Schema document with the documents its schema references name (Confluent's resolvedReferences:
    reference name -> document, every reference's own references among them), which its `$ref`s may name."""

    root: Any
    referenced: Mapping[str, Any] = field(default_factory=dict)


def with_references(doc: Any, referenced: Mapping[str, Any]) -> Document:
    """`doc` with its references (name -> Document, or a bare document): theirs flattened in, a name
    the first time it is met kept, as Confluent's resolveReferences keeps it. A Document named again (one
    version under many names) adds no names: its own are in already (so the work is that of the distinct
    documents, not names times their references)."""
    flat: dict[str, Any] = {}
    merged: set[int] = set()
    for name, ref in referenced.items():
        if name in flat:
            continue
        ref = ref if isinstance(ref, Document) else Document(ref)
        if id(ref) not in merged:
            merged.add(id(ref))
            for inner, inner_doc in ref.referenced.items():
                flat.setdefault(inner, inner_doc)
        flat[name] = ref.root
    return Document(doc, flat)


def document_of(text: str | bytes, referenced: list[tuple[str, str]]) -> Document:
    """A schema's JSON text with the (name, text) of the schemas its references name (a registry client's,
    theirs among them), a name the first time it comes kept, each text parsed once (one schema may have
    many names); ValueError for a text that is no JSON."""
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    for name, ref_text in referenced:
        if name not in named:
            if ref_text not in parsed:
                parsed[ref_text] = json.loads(ref_text)
            named[name] = parsed[ref_text]
    return Document(json.loads(text), named)


def _own_id(doc: Any) -> str:
    found = doc.get("$id", doc.get("id")) if isinstance(doc, dict) else None
    return found if isinstance(found, str) else ""


class Loader:
    """Nodes of one schema document (a Document, or a bare one), each JSON object loaded once (so $ref
    cycles end, across documents too)."""

    def __init__(self, schema: Any) -> None:
        schema = schema if isinstance(schema, Document) else Document(schema)
        self.root = schema.root
        self.base = urljoin(NO_ID_BASE, _own_id(self.root))  # what names and the root's $refs resolve against
        self.ids: dict[str, Any] = {}
        self._collect_ids(self.root, 0)
        self.documents: dict[str, Any] = {}  # a reference's URI (and its bare name) -> its document
        self.home: dict[int, tuple[Any, str]] = {}  # each object of a referenced document -> (it, its base URI)
        for name, doc in schema.referenced.items():
            uri = urljoin(self.base, name)
            self.documents.setdefault(uri, doc)
            self.documents.setdefault(name, doc)
            if id(doc) not in self.home:  # each document read once, however many names it has (the first's
                # URI its base): a request naming one big schema 100,000 times is not 100,000 readings of it
                self._collect_ids(doc, 0, (doc, urljoin(uri, _own_id(doc))))
        self.loaded: dict[int, Node] = {}

    def _collect_ids(self, doc: Any, depth: int, home: tuple[Any, str] | None = None) -> None:
        if depth > 200:
            raise SchemaProblem("the schema is nested too deep")
        if isinstance(doc, dict):
            if home is not None:
                self.home[id(doc)] = home
            for key in ("$id", "id"):
                if isinstance(doc.get(key), str):
                    self.ids.setdefault(doc[key], doc)
            for value in doc.values():
                self._collect_ids(value, depth + 1, home)
        elif isinstance(doc, list):
            for value in doc:
                self._collect_ids(value, depth + 1, home)

    def _home(self, at: Any) -> tuple[Any, str]:
        """The document `at` is part of and the base URI its `$ref`s resolve against."""
        return self.home.get(id(at)) or (self.root, self.base)

    def resolve(self, ref: str, at: Any = None) -> Any:
        """The part of a document the `$ref` of `at` (an object of the root document or of a referenced
        one) names: an `$id`, a JSON pointer into `at`'s document ("#/...") or into a part with an `$id`
        ("http://example.com/a.json#/definitions/x" where the root's `$id` is http://example.com/a.json:
        everit resolves it without fetching, so does klog), or into a referenced document (its name, resolved
        against the base URI `at` is under). Nothing is fetched."""
        if ref in self.ids:
            return self.ids[ref]
        target, _, pointer = ref.partition("#")
        if not target:
            doc = self._home(at)[0]
        elif target in self.ids:
            doc = self.ids[target]
        elif (uri := urljoin(self._home(at)[1], target)) in self.ids:  # (urljoin: only for another document)
            doc = self.ids[uri]
        elif uri in self.documents or target in self.documents:
            doc = self.documents[uri if uri in self.documents else target]
        else:
            raise SchemaProblem(f"$ref {ref!r} names neither a part of the schema nor one of its references "
                                "(klog fetches no schema)")
        if pointer and not pointer.startswith("/"):
            raise SchemaProblem(f"$ref {ref!r} names no $id of the schema")
        # a fragment's pointer is percent-encoded (RFC 6901 section 6: "#/a%20b" names "a b"), as everit and
        # jsonschema decode it; ~1 and ~0 after that
        for part in unquote(pointer)[1:].split("/") if pointer else ():
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
                doc = self.resolve(doc["$ref"], doc)
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
            return self.node(self.resolve(doc["$ref"], doc))
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


def check_references(schema: Any) -> None:
    """SchemaProblem when a `$ref` of the document (a Document, or a bare one) names nothing in it or in
    the documents its references name."""
    loader = Loader(schema)
    todo = [loader.root]
    while todo:
        part = todo.pop()
        if isinstance(part, dict):
            if isinstance(part.get("$ref"), str):
                loader.resolve(part["$ref"], part)
            todo += part.values()
        elif isinstance(part, list):
            todo += part


def validator_of(schema: Any, default: Any = None) -> Any:
    """A jsonschema validator of the document (a Document, or a bare one), of the class its `$schema` names
    (else `default`, jsonschema's latest draft when None); its `$ref`s to the schemas its references name
    resolve to their documents, by name against the root's `$id` as confluent-kafka's JSON serde registers
    them. Nothing is fetched: a `$ref` to a URL is unresolvable when it is checked."""
    import jsonschema

    schema = schema if isinstance(schema, Document) else Document(schema)
    root = schema.root
    cls = jsonschema.validators.validator_for(root, **({} if default is None else {"default": default}))
    if schema.referenced and isinstance(root, dict) and not _own_id(root):
        # names and $refs relative to the Loader's base, as the registry resolved them when it took the
        # schema: against none, jsonschema kept "./zip.json" apart from the reference named "zip.json"
        old_drafts = (jsonschema.Draft3Validator, jsonschema.Draft4Validator)
        root = {**root, ("id" if cls in old_drafts else "$id"): NO_ID_BASE}
    base = urljoin(NO_ID_BASE, _own_id(root))
    documents: dict[str, Any] = {}
    for name, doc in schema.referenced.items():
        uri = urljoin(base, name)
        documents.setdefault(uri, doc)
        documents.setdefault(name, doc)
        # and relative forms of it, as Confluent's JsonSchema maps "./" + name too: up to draft 7 a root's
        # $ref hides its $id, so its $refs resolve against none
        for relative in (uri.removeprefix(NO_ID_BASE), "./" + uri.removeprefix(NO_ID_BASE)):
            if uri.startswith(NO_ID_BASE):
                documents.setdefault(relative, doc)
    try:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7
    except ImportError:  # jsonschema before 4.18: its RefResolver, the documents its store
        return cls(root, resolver=_local_resolver(root, documents))
    # a Registry of its own: one that retrieves nothing (jsonschema's default one fetches URLs)
    registry = Registry().with_resources(
        (uri, Resource.from_contents(doc, default_specification=DRAFT7)) for uri, doc in documents.items())
    return cls(root, registry=registry)


def _local_resolver(root: Any, documents: dict[str, Any]) -> Any:
    """jsonschema's RefResolver (before 4.18) over the root and `documents` that fetches nothing: its own
    resolve_remote GETs an http(s) URL and opens any other one (file:// too) that its store lacks."""
    import jsonschema

    class LocalResolver(jsonschema.RefResolver):
        def resolve_remote(self, uri: str) -> Any:
            raise jsonschema.RefResolutionError(f"{uri}: names no schema of the document or its references "
                                                "(klog fetches no schema)")

    return LocalResolver.from_schema(root, store=documents)

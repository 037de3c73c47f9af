"""JSON Schema compatibility as Confluent's registry judges it: a faithful subset of its json/diff package
(SchemaDiff, ObjectSchemaDiff, ArraySchemaDiff, CombinedSchemaDiff, ... under the default STRICT policy).

Confluent compares the previous schema (the original) with the new one (the update), lists every
difference by type (TYPE_CHANGED, OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL, ...) and calls the
update backward compatible when each difference is in its compatible set. A schema is read as everit's
loader reads it (klog.protocol.json_schema).

Not checked (Confluent does): the `contains` schema itself, `propertyNames`, `unevaluatedItems` beyond
2020-12's items after `prefixItems`, remote references (fetched by URL; schema references are followed), the
LENIENT policy. Checked against Confluent's own diff examples (json-schema-provider's diff-*.json test
resources): every one agrees.
"""

from __future__ import annotations

import decimal
import json
import re
import time
from typing import Any

from klog.protocol.json_patterns import PatternMatcher
from klog.protocol.json_schema import Loader, Node, SchemaProblem

# Confluent's SchemaDiff.COMPATIBLE_CHANGES_STRICT
COMPATIBLE = frozenset("""
ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED
MULTIPLE_OF_REMOVED REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED
DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED MAX_PROPERTIES_REMOVED
MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED
UNEVALUATED_PROPERTIES_ADDED UNEVALUATED_PROPERTIES_EXTENDED PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED UNIQUE_ITEMS_REMOVED
ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
ITEM_ADDED_TO_CLOSED_CONTENT_MODEL ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
MAX_CONTAINS_INCREASED MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED
ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split())

# Schema pairs one comparison of two schemas takes at most. Combined schemas compare every part with every
# part, so nested anyOfs (or $refs sharing one) multiply: ten levels of three parts were 0.45 s, each more
# ~3 times that. A oneOf of 50 objects of 30 properties is ~80,000 (0.8 s), a Debezium envelope ~100.
MAX_COMPARISONS = 200_000
# and the time one request's comparisons (with every version a transitive level names) may take: each
# comparison's cost grows with the schema (anyOfs of 100 enums of 1,000 values each were 28 s in 10,000
# comparisons before enums' values were kept per schema). Taken outside the registry's lock.
MAX_SECONDS = 10.0


class Budget:
    """What one request may spend comparing schemas: MAX_COMPARISONS pairs in each comparison of two
    schemas, MAX_SECONDS in all, and the patternProperties matching of klog.registry.patterns (close()
    ends its child process)."""

    def __init__(self, comparisons: int = MAX_COMPARISONS, seconds: float = MAX_SECONDS) -> None:
        self.limit = comparisons
        self.left = comparisons
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.patterns = PatternMatcher()

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise SchemaProblem(f"the schemas are too complex to compare (more than {self.limit} comparisons of "
                                "their parts)")
        if time.monotonic() > self.deadline:
            raise SchemaProblem(f"the schemas are too complex to compare (more than {self.seconds:g} s)")

    def close(self) -> None:
        self.patterns.close()


class _Diff:
    def __init__(self, original: Loader, update: Loader, budget: Budget) -> None:
        self.o = original
        self.u = update
        self.budget = budget
        self.active: set[tuple[int, int]] = set()  # pairs being compared: a cycle back to one is compatible
        self.value_sets: dict[tuple[int, str], set[str]] = {}  # an enum's (a const's) values as text, kept once

    def compare(self, o: Node | None, u: Node | None, path: str) -> list[tuple[str, str]]:
        if o is None and u is None:
            return []
        if o is None:
            return [("SCHEMA_ADDED", path)]
        if u is None:
            return [("SCHEMA_REMOVED", path)]
        pair = (id(o), id(u))
        if pair in self.active:
            return []
        self.budget.spend()
        self.active.add(pair)
        try:
            return self._types(o, u, path)
        finally:
            self.active.discard(pair)

    def compatible(self, o: Node | None, u: Node | None, path: str) -> tuple[bool, list[tuple[str, str]]]:
        found = self.compare(o, u, path)
        return all(t in COMPATIBLE for t, _ in found), found

    def _types(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        if o.kind != "combined" and u.kind == "combined":
            if len(u.parts) == 1:
                ok, found = self.compatible(o, u.parts[0], path)
                if ok:
                    return found
            elif u.criterion in ("anyOf", "oneOf"):
                for part in u.parts:
                    ok, found = self.compatible(o, part, path)
                    if ok:
                        return [*found, ("SUM_TYPE_EXTENDED", path)]
        elif o.kind == "combined" and u.kind != "combined":
            if len(o.parts) == 1:
                ok, found = self.compatible(o.parts[0], u, path)
                if ok:
                    return found
            elif o.criterion == "allOf":
                for part in o.parts:
                    ok, found = self.compatible(part, u, path)
                    if ok:
                        return [*found, ("PRODUCT_TYPE_NARROWED", path)]
        if _class(o) != _class(u):
            if o.kind == "false" or u.kind in ("empty", "true"):
                return []
            if o.get("connect.type") == "bytes" and u.get("connect.type") == "bytes":
                return []  # Confluent's exception: a decimal's string and number forms are one type
            return [("TYPE_CHANGED", path)]
        compare = getattr(self, f"_{o.kind}", None)
        return compare(o, u, path) if compare is not None else []

    # -- per kind ------------------------------------------------------------------------------------
    def _string(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        out = _bound(o, u, "maxLength", path) + _bound(o, u, "minLength", path)
        po, pu = o.get("pattern"), u.get("pattern")
        if po is None and pu is not None:
            out.append(("PATTERN_ADDED", f"{path}/pattern"))
        elif po is not None and pu is None:
            out.append(("PATTERN_REMOVED", f"{path}/pattern"))
        elif po != pu:
            out.append(("PATTERN_CHANGED", f"{path}/pattern"))
        return out

    def _number(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        out = _bound(o, u, "maximum", path) + _bound(o, u, "minimum", path)
        out += _bound(o, u, "exclusiveMaximum", path, names="EXCLUSIVE_MAXIMUM")
        out += _bound(o, u, "exclusiveMinimum", path, names="EXCLUSIVE_MINIMUM")
        out += _multiple_of(o.get("multipleOf"), u.get("multipleOf"), f"{path}/multipleOf")
        if o.integer != u.integer:
            out.append(("TYPE_EXTENDED" if o.integer else "TYPE_NARROWED", path))
        return out

    def _enum(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        before, after = self._values(o, "enum"), self._values(u, "enum")
        if before == after:
            return []
        kind = "ENUM_ARRAY_EXTENDED" if before <= after else "ENUM_ARRAY_NARROWED" if after <= before \
            else "ENUM_ARRAY_CHANGED"
        return [(kind, f"{path}/enum")]

    def _const(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        same = self._values(o, "const") == self._values(u, "const")
        return [] if same else [("ENUM_ARRAY_CHANGED", f"{path}/const")]

    def _values(self, node: Node, key: str) -> set[str]:
        """An enum's values (a const's one value) as text, each schema's once."""
        found = self.value_sets.get((id(node.doc), key))
        if found is None:
            values = node.get("enum", []) if key == "enum" else [node.get("const")]
            found = self.value_sets[(id(node.doc), key)] = _values(values if isinstance(values, list) else [])
        return found

    def _not(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        ok, _ = self.compatible(u.parts[0], o.parts[0], f"{path}/not")  # reversed, as Confluent's NotSchemaDiff
        return [("NOT_TYPE_NARROWED" if ok else "NOT_TYPE_EXTENDED", f"{path}/not")]

    def _combined(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if o.criterion != u.criterion:
            single_o, single_u = len(o.parts) == 1, len(u.parts) == 1
            if u.criterion == "anyOf" or (single_o and single_u) or (single_o and u.criterion == "oneOf") \
                    or (single_u and o.criterion == "allOf"):
                out.append(("COMBINED_TYPE_EXTENDED", path))
            else:
                return [("COMBINED_TYPE_CHANGED", path)]
        before, after = _distinct(o.parts), _distinct(u.parts)
        if len(before) < len(after):
            out.append(("PRODUCT_TYPE_EXTENDED" if u.criterion == "allOf" else "SUM_TYPE_EXTENDED", path))
        elif len(before) > len(after):
            out.append(("SUM_TYPE_NARROWED" if o.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED", path))
        edges: dict[int, dict[int, list[tuple[str, str]]]] = {}
        for i, a in enumerate(before):
            for j, b in enumerate(after):
                ok, found = self.compatible(a, b, f"{path}/{o.criterion}/{i}")
                if ok:
                    edges.setdefault(i, {})[j] = found
        matching = _max_matching(edges)
        for i, j in matching.items():
            out += edges[i][j]
        if len(matching) < min(len(before), len(after)):
            out.append(("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path))
        return out

    def _array(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        all_o, all_u = _all_items(o), _all_items(u)
        out += self.compare(None if all_o is None else self.o.node(all_o),
                            None if all_u is None else self.u.node(all_u), f"{path}/items")
        listed_o, listed_u = _listed_items(o), _listed_items(u)
        for i in range(min(len(listed_o), len(listed_u))):
            out += self.compare(self.o.node(listed_o[i]), self.u.node(listed_u[i]), f"{path}/items/{i}")
        for i in range(len(listed_u), len(listed_o)):  # items the update no longer lists
            where = f"{path}/items/{i}"
            partial = _additional_items(u)
            if _permits(partial) and not isinstance(partial, dict):
                out.append(("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", where))
            elif isinstance(partial, dict):
                ok, found = self.compatible(self.o.node(listed_o[i]), self.u.node(partial), where)
                out += found + [("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if ok else
                                 "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where)]
            else:
                out.append(("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if listed_o[i] is False
                            else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", where))
        for i in range(len(listed_o), len(listed_u)):  # items the update adds
            where = f"{path}/items/{i}"
            partial = _additional_items(o)
            added = self.u.node(listed_u[i])
            if _permits(partial) and not isinstance(partial, dict):
                out.append(("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if added.kind in ("empty", "true")
                            else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL", where))
            elif isinstance(partial, dict):
                ok, found = self.compatible(self.o.node(partial), added, where)
                out += found + [("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if ok else
                                 "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where)]
            else:
                out.append(("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", where))
        out += self._additional(_additional_items(o), _additional_items(u), f"{path}/additionalItems",
                                "ADDITIONAL_ITEMS")
        out += _bound(o, u, "maxItems", path) + _bound(o, u, "minItems", path)
        min_contains = 1 if "contains" in u.doc else None  # its default where `contains` is
        out += _bound(o, u, "maxContains", path) + _bound(o, u, "minContains", path, default=min_contains)
        if bool(o.get("uniqueItems")) != bool(u.get("uniqueItems")):
            out.append(("UNIQUE_ITEMS_REMOVED" if o.get("uniqueItems") else "UNIQUE_ITEMS_ADDED",
                        f"{path}/uniqueItems"))
        return out

    def _additional(self, before: Any, after: Any, path: str, name: str) -> list[tuple[str, str]]:
        """additionalProperties / additionalItems: allowed or not, and the schema of the extra ones."""
        if _permits(before) != _permits(after):
            return [(f"{name}_ADDED" if _permits(after) else f"{name}_REMOVED", path)]
        schema_o = before if isinstance(before, dict) else None
        schema_u = after if isinstance(after, dict) else None
        if schema_o is None and schema_u is not None:
            return [(f"{name}_NARROWED", path)]
        if schema_u is None and schema_o is not None:
            return [(f"{name}_EXTENDED", path)]
        if schema_o is None:
            return []
        return self.compare(self.o.node(schema_o), self.u.node(schema_u), path)

    def _object(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        props_o, props_u = o.get("properties") or {}, u.get("properties") or {}
        required_o, required_u = set(o.get("required") or []), set(u.get("required") or [])
        out: list[tuple[str, str]] = []
        for key in props_o:  # Confluent's compareRequired
            if key in props_u and (key in required_o) != (key in required_u):
                where = f"{path}/required/{key}"
                if key in required_o:
                    out.append(("REQUIRED_ATTRIBUTE_REMOVED", where))
                else:
                    out.append(("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if _has_default(self.u, props_u[key])
                                else "REQUIRED_ATTRIBUTE_ADDED", where))
        for key in sorted({*props_o, *props_u}):
            where = f"{path}/properties/{key}"
            if key not in props_u:
                out += self._property_removed(o, u, key, props_o[key], where)
            elif key not in props_o:
                out += self._property_added(o, u, key, props_u[key], required_u, where)
            else:
                out += self.compare(self.o.node(props_o[key]), self.u.node(props_u[key]), where)
        out += self._dependencies(o, u, f"{path}/dependencies")
        out += self._additional(o.get("additionalProperties"), u.get("additionalProperties"),
                                f"{path}/additionalProperties", "ADDITIONAL_PROPERTIES")
        out += self._unevaluated(o.get("unevaluatedProperties"), u.get("unevaluatedProperties"),
                                 f"{path}/unevaluatedProperties")
        out += _bound(o, u, "maxProperties", path)
        out += _bound(o, u, "minProperties", path)
        return out

    def _property_removed(self, o: Node, u: Node, key: str, schema: Any, where: str) -> list[tuple[str, str]]:
        if _open(u):
            return [("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", where)]
        partial = self._partial(u, key)
        if partial is not None:
            ok, found = self.compatible(self.o.node(schema), self.u.node(partial), where)
            return found + [("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if ok else
                             "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where)]
        return [("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if schema is False
                 else "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", where)]

    def _property_added(self, o: Node, u: Node, key: str, schema: Any, required: set[str],
                        where: str) -> list[tuple[str, str]]:
        added = self.u.node(schema)
        with_default = _has_default(self.u, schema)
        if _open(o):
            if added.kind in ("empty", "true"):
                return [("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", where)]
            if key in required:
                return [("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if with_default
                         else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", where)]
            return [("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", where)]
        out: list[tuple[str, str]] = []
        partial = self._partial(o, key)
        if partial is not None:
            ok, found = self.compatible(self.o.node(partial), added, where)
            out += found + [("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if ok else
                             "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where)]
        if key in required:
            out.append(("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if with_default
                        else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", where))
        else:
            out.append(("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", where))
        return out

    def _partial(self, node: Node, key: str) -> Any:
        """The schema a partially open content model gives property `key` (None: it has none for it)."""
        for pattern, schema in (node.get("patternProperties") or {}).items():
            if self.budget.patterns.search(pattern, key):
                return schema
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            return additional
        unevaluated = node.get("unevaluatedProperties")
        if additional is None and isinstance(unevaluated, dict) and unevaluated:
            return unevaluated
        return None

    def _dependencies(self, o: Node, u: Node, path: str) -> list[tuple[str, str]]:
        deps_o, deps_u = _dependencies(o), _dependencies(u)
        out: list[tuple[str, str]] = []
        for array in (True, False):
            before = {k: v for k, v in deps_o.items() if isinstance(v, list) == array}
            after = {k: v for k, v in deps_u.items() if isinstance(v, list) == array}
            kind = "DEPENDENCY_ARRAY" if array else "DEPENDENCY_SCHEMA"
            for key in sorted({*before, *after}):
                where = f"{path}/{key}"
                if key not in after:
                    out.append((f"{kind}_REMOVED", where))
                elif key not in before:
                    out.append((f"{kind}_ADDED", where))
                elif not array:
                    out += self.compare(self.o.node(before[key]), self.u.node(after[key]), where)
                elif set(before[key]) != set(after[key]):
                    out.append((f"{kind}_EXTENDED" if set(after[key]) >= set(before[key]) else
                                f"{kind}_NARROWED" if set(before[key]) >= set(after[key]) else f"{kind}_CHANGED",
                                where))
        return out

    def _unevaluated(self, before: Any, after: Any, path: str) -> list[tuple[str, str]]:
        if before is None and after is None:
            return []
        if before is None:
            return [("UNEVALUATED_PROPERTIES_REMOVED" if after is False else "UNEVALUATED_PROPERTIES_NARROWED", path)]
        if after is None:
            return [("UNEVALUATED_PROPERTIES_ADDED" if before is False else "UNEVALUATED_PROPERTIES_EXTENDED", path)]
        if before is False and after is not False:
            return [("UNEVALUATED_PROPERTIES_ADDED", path)]
        if before is not False and after is False:
            return [("UNEVALUATED_PROPERTIES_REMOVED", path)]
        empty_o, empty_u = before in (True, {}), after in (True, {})
        if empty_o != empty_u:
            return [("UNEVALUATED_PROPERTIES_NARROWED" if empty_o else "UNEVALUATED_PROPERTIES_EXTENDED", path)]
        return self.compare(self.o.node(before), self.u.node(after), path)


def _class(node: Node) -> str:
    """everit's schema class: the empty schema and `true` differ (TrueSchema extends EmptySchema)."""
    return node.kind


def _permits(additional: Any) -> bool:
    return additional is not False


def _open(node: Node) -> bool:
    """Confluent's open content model: any other property allowed, with any value."""
    additional = node.get("additionalProperties")
    if additional is False or isinstance(additional, dict) or node.get("patternProperties"):
        return False
    unevaluated = node.get("unevaluatedProperties")
    return additional is True or unevaluated in (None, True, {})


def _has_default(loader: Loader, schema: Any) -> bool:
    node = loader.node(schema)
    return isinstance(node.doc, dict) and "default" in node.doc


def _dependencies(node: Node) -> dict[str, Any]:
    out = dict(node.get("dependencies") or {})
    out.update(node.get("dependentRequired") or {})
    out.update(node.get("dependentSchemas") or {})
    return out


def _all_items(node: Node) -> Any:
    items = node.get("items")
    return items if isinstance(items, dict | bool) and "prefixItems" not in node.doc else None


def _additional_items(node: Node) -> Any:
    """The schema of the items past the listed ones: additionalItems, or 2020-12's items after prefixItems
    (its unevaluatedItems when it has no items)."""
    if "prefixItems" in node.doc:
        return node.get("items", node.get("unevaluatedItems"))
    return node.get("additionalItems")


def _listed_items(node: Node) -> list[Any]:
    if isinstance(node.get("prefixItems"), list):
        return node.get("prefixItems")
    items = node.get("items")
    return items if isinstance(items, list) else []


def _number(value: Any) -> decimal.Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return decimal.Decimal(str(value))


def _bound(o: Node, u: Node, key: str, path: str, names: str | None = None,
           default: Any = None) -> list[tuple[str, str]]:
    """A numeric keyword added, removed, increased or decreased (maxLength, minimum, ...); which of these
    are compatible is COMPATIBLE's business."""
    name = names or re.sub(r"(?<!^)([A-Z])", r"_\1", key).upper()
    before, after = _number(o.get(key, default)), _number(u.get(key, default))
    where = f"{path}/{key}"
    if before == after:
        return []
    if before is None:
        return [(f"{name}_ADDED", where)]
    if after is None:
        return [(f"{name}_REMOVED", where)]
    return [(f"{name}_INCREASED" if after > before else f"{name}_DECREASED", where)]


def _multiple_of(before: Any, after: Any, where: str) -> list[tuple[str, str]]:
    a, b = _number(before), _number(after)
    if a == b:
        return []
    if a is None:
        return [("MULTIPLE_OF_ADDED", where)]
    if b is None:
        return [("MULTIPLE_OF_REMOVED", where)]
    if a != 0 and b % a == 0:
        return [("MULTIPLE_OF_EXPANDED", where)]
    if b != 0 and a % b == 0:
        return [("MULTIPLE_OF_REDUCED", where)]
    return [("MULTIPLE_OF_CHANGED", where)]


def _values(values: list[Any]) -> set[str]:
    return {json.dumps(v, sort_keys=True) for v in values}


def _distinct(parts: list[Node]) -> list[Node]:
    """A combined schema's parts with duplicates collapsed (Confluent puts them in a set)."""
    seen: dict[str, Node] = {}
    for part in parts:
        seen.setdefault(json.dumps(part.doc, sort_keys=True, default=str) + part.kind, part)
    return list(seen.values())


def _max_matching(edges: dict[int, dict[int, Any]]) -> dict[int, int]:
    """A maximum matching of the bipartite graph `edges` (left -> rights), by augmenting paths."""
    right_of: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for right in edges.get(left, {}):
            if right in seen:
                continue
            seen.add(right)
            if right not in right_of or augment(right_of[right], seen):
                right_of[right] = left
                return True
        return False

    for left in edges:
        augment(left, set())
    return {left: right for right, left in right_of.items()}


def differences(original: Any, update: Any, budget: Budget | None = None) -> list[tuple[str, str]]:
    """Every difference from `original` to `update` (both JSON schema documents, or Documents with the
    ones their references name: `$ref`s into those are followed as local ones, within the same budget), as
    (type, path); SchemaProblem when the comparison outspends `budget` (a request's; its own when None)."""
    o, u = Loader(original), Loader(update)
    own = budget is None
    budget = Budget() if budget is None else budget
    budget.left = budget.limit  # each pair of schemas its count (a transitive level compares many)
    try:
        return _Diff(o, u, budget).compare(o.node(o.root), u.node(u.root), "#")
    finally:
        if own:
            budget.close()


def backward_problems(new: Any, old: Any, budget: Budget | None = None) -> list[str]:
    """Why a consumer with schema `new` may not read what `old` allowed (empty: it may): Confluent's
    JsonSchema.isBackwardCompatible, STRICT policy."""
    return [f'{{errorType:"{kind}", path:"{path}"}}' for kind, path in differences(old, new, budget)
            if kind not in COMPATIBLE]


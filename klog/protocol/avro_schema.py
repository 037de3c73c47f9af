"""Avro schemas as Confluent's registry and AvroConverter hand them around, for the two faces that read
them: `klog registry` (klog.registry) and Connect's AvroConverter (klog.connect.avro). Pure JSON
rewriting: fastavro is imported by the callers, not here."""

from __future__ import annotations

from typing import Any

# where a logicalType is kept while fastavro parses a schema without judging it
HIDDEN_LOGICAL = "klog.logicalType"


def without_logical_types(avro: Any, keep_as: str | None = None) -> Any:
    """The schema (parsed JSON) with every logicalType dropped, or renamed to `keep_as`. Avro's Java library
    (and so Confluent's registry and converter) takes a decimal whose scale exceeds its precision, which
    Connect writes for an unconstrained numeric (scale 127), by ignoring the logical type; fastavro refuses
    it. Anything that is not a well-formed schema is left as it is, for the parser to refuse (the registry
    gets the text from its clients)."""
    if isinstance(avro, list):
        return [without_logical_types(a, keep_as) for a in avro]
    if not isinstance(avro, dict):
        return avro
    out = {(keep_as if k == "logicalType" else k): v for k, v in avro.items() if k != "logicalType" or keep_as}
    for key in ("items", "values", "type"):
        if isinstance(out.get(key), dict | list):
            out[key] = without_logical_types(out[key], keep_as)
    if out.get("type") == "record" and isinstance(out.get("fields"), list):
        out["fields"] = [{**f, "type": without_logical_types(f.get("type"), keep_as)} if isinstance(f, dict) else f
                         for f in out["fields"]]
    return out

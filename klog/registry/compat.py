"""Compatibility levels (BACKWARD, FORWARD, FULL and their transitive forms) over a pair check: Avro's
resolution rules (klog.protocol.avro_compat, which Connect's AvroConverter shares), JSON Schema's diff rules
(klog.protocol.json_compat) or Protobuf's (klog.protocol.protobuf_compat).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from klog.protocol.avro_compat import read_problems

__all__ = ["LEVELS", "compatibility_problems", "read_problems"]

LEVELS = ("NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")


def compatibility_problems(level: str, new: Any, previous: list[Any],
                           problems: Callable[[Any, Any], list[str]] = read_problems) -> list[str]:
    """Why `new` may not follow `previous` (oldest first) under a compatibility level (empty: it may).
    BACKWARD: the new schema reads what the last one wrote; FORWARD: the last one reads what the new one
    writes; FULL: both; *_TRANSITIVE: against every previous schema, not only the last. `problems(reader,
    writer)` judges one pair: Avro's resolution rules, or json_compat's for JSON schemas."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    out = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            out += [f"BACKWARD: {p}" for p in problems(new, old)]
        if base in ("FORWARD", "FULL"):
            out += [f"FORWARD: {p}" for p in problems(old, new)]
    return out

"""`name=value` settings users type in repeatable options (--config, -X/--property, --conf): one reading."""

from __future__ import annotations

from klog.errors import UsageError


def parse_pairs(pairs: list[str] | None, option: str, usage: str = "name=value",
                strip_values: bool = True) -> dict[str, str]:
    """The pairs as a dict (a later pair wins); names are stripped, values too unless `strip_values`
    is False (a client property's value is kept as typed). A pair without '=' or without a name is a
    UsageError naming `option` and how to write one (`usage`)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        name, eq, value = pair.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"invalid {option} '{pair}': use {usage}")
        out[name.strip()] = value.strip() if strip_values else value
    return out

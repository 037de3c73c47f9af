"""The producer settings `klog produce -X` takes (Kafka's names), checked once for every face."""

from __future__ import annotations

from klog.errors import UsageError
from klog.store.limits import PRODUCER_BATCH_BYTES_DEFAULT as BATCH_SIZE_DEFAULT
from klog.store.limits import PRODUCER_BUFFER_BYTES_DEFAULT as BUFFER_MEMORY_DEFAULT

# -X name -> the Producer's keyword; their values are positive byte counts
SETTINGS = {"buffer.memory": "buffer_memory"}

__all__ = ["BATCH_SIZE_DEFAULT", "BUFFER_MEMORY_DEFAULT", "SETTINGS", "producer_settings"]


def producer_settings(props: list[str] | None) -> dict[str, int]:
    """-X name=value pairs as Producer keywords; an unknown name or a value that is not a positive
    number of bytes is a UsageError naming it."""
    from klog.client.pairs import parse_pairs

    out: dict[str, int] = {}
    for name, value in parse_pairs(props, "--property").items():
        if name not in SETTINGS:
            raise UsageError(f"unknown producer setting '{name}': -X takes {', '.join(SETTINGS)} (other Kafka "
                             "client properties need --bootstrap-server or --cluster)")
        try:
            count = int(value)
        except ValueError:
            count = 0
        if count < 1:
            raise UsageError(f"{name} must be a positive number of bytes, not '{value}'")
        out[SETTINGS[name]] = count
    return out

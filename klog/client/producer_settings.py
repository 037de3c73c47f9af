"""The producer settings `klog produce -X` takes (Kafka's names), checked once for every face."""

from __future__ import annotations

from typing import Any

from klog.errors import UsageError
from klog.store.limits import PRODUCER_BATCH_BYTES_DEFAULT as BATCH_SIZE_DEFAULT
from klog.store.limits import PRODUCER_BUFFER_BYTES_DEFAULT as BUFFER_MEMORY_DEFAULT

# -X name -> the Producer's keyword (the same settings as produce's --acks, -z, --linger-ms, --batch-size)
SETTINGS = {"buffer.memory": "buffer_memory", "batch.size": "batch_size", "linger.ms": "linger_ms",
            "acks": "acks", "compression.type": "compression_type"}
# the defaults of the settings `klog produce` also has flags for (--acks, -z, --linger-ms, --batch-size)
FLAG_DEFAULTS = {"acks": "all", "compression_type": "none", "linger_ms": 0, "batch_size": BATCH_SIZE_DEFAULT}
# kafka-console-producer's --property names (its line reader's, not the producer's), and klog's spelling of each
CONSOLE_PRODUCER = {"parse.key": "-K SEP", "key.separator": "-K SEP", "parse.headers": "-H NAME=VALUE",
                    "headers.delimiter": "-H NAME=VALUE", "headers.separator": "-H NAME=VALUE",
                    "headers.key.separator": "-H NAME=VALUE", "null.marker": "--input json with \"value\": null",
                    "ignore.error": "nothing (klog stops at a bad line, naming it)"}

__all__ = ["BATCH_SIZE_DEFAULT", "BUFFER_MEMORY_DEFAULT", "FLAG_DEFAULTS", "SETTINGS", "acks_setting",
           "producer_settings"]


def acks_setting(value: str) -> str:
    """0, 1 or all; Kafka's -1 is all."""
    text = str(value).strip()
    return "all" if text == "-1" else text


def producer_settings(props: list[str] | None) -> dict[str, Any]:
    """-X name=value pairs as Producer keywords; an unknown name or a value that does not fit it is a
    UsageError naming it."""
    from klog.client.pairs import parse_pairs

    out: dict[str, Any] = {}
    for name, value in parse_pairs(props, "--property").items():
        if name in CONSOLE_PRODUCER:
            raise UsageError(f"-X {name} is kafka-console-producer's: klog's spelling is {CONSOLE_PRODUCER[name]}")
        if name not in SETTINGS:
            raise UsageError(f"unknown producer setting '{name}': -X takes {', '.join(SETTINGS)} (other Kafka "
                             "client properties need --bootstrap-server or --cluster)")
        out[SETTINGS[name]] = _value(name, value.strip())
    return out


def _value(name: str, value: str) -> Any:
    from klog.client.producer import check_producer_options

    if name == "acks":
        acks = acks_setting(value)
        check_producer_options(acks, "none", 1)
        return acks
    if name == "compression.type":
        check_producer_options("all", value, 1)
        return value
    try:
        count = int(value)
    except ValueError:
        count = -1
    least = 0 if name == "linger.ms" else 1
    if count < least:
        what = "milliseconds (0 or more)" if name == "linger.ms" else "a positive number of bytes"
        raise UsageError(f"{name} must be {what}, not '{value}'")
    return count

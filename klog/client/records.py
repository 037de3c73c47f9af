"""The values the Python API hands out, and the checks on record fields it takes."""

from __future__ import annotations

import operator

from klog.errors import UsageError
from klog.store.format import TIMESTAMP_TYPE_NAMES
from klog.store.plain import FrozenPlain, Plain

Headers = list[tuple[str, bytes | None]]


class Record(Plain):
    __slots__ = _fields = __match_args__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key",
                                            "value", "headers")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int, timestamp_type: int,
                 key: bytes | None, value: bytes | None, headers: Headers) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp  # epoch milliseconds
        self.timestamp_type = timestamp_type  # 0 CreateTime, 1 LogAppendTime
        self.key = key
        self.value = value
        self.headers = headers

    @property
    def timestamp_type_name(self) -> str:
        return TIMESTAMP_TYPE_NAMES[self.timestamp_type]


class RecordMetadata(FrozenPlain):
    """Where an acknowledged record landed."""

    __slots__ = _fields = __match_args__ = ("topic", "partition", "offset", "timestamp")
    topic: str
    partition: int
    offset: int
    timestamp: int

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "timestamp", timestamp)


# -- what a producer accepts -------------------------------------------------------------------
TIMESTAMP_MAX = 2**63 - 1  # an int64 of epoch milliseconds
NO_TIMESTAMP = -1  # Kafka's "no timestamp", kept as it is (a copied record may carry it)


def check_timestamp(timestamp: object) -> int:
    """An explicit record timestamp: epoch milliseconds 0..2^63-1, or -1 for none (UsageError
    otherwise: Kafka's producer refuses negative timestamps too)."""
    if type(timestamp) is int and 0 <= timestamp <= TIMESTAMP_MAX:
        return timestamp  # the usual case, first
    ts = _integer(timestamp)
    if ts is None or not (ts == NO_TIMESTAMP or 0 <= ts <= TIMESTAMP_MAX):
        raise UsageError(f"invalid timestamp {timestamp!r}: use epoch milliseconds from 0 to {TIMESTAMP_MAX} "
                         "(or None for now)")
    return ts


def check_partition(partition: object, topic: str, count: int) -> int:
    p = _integer(partition)
    if p is None:
        raise UsageError(f"invalid partition {partition!r}: use an integer (or None for the partitioner)")
    if not 0 <= p < count:
        raise UsageError(f"topic '{topic}' has no partition {p} (it has {count})")
    return p


def _integer(value: object) -> int | None:
    """`value` as an int (Python or numpy integers), None for anything else (bool included)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None

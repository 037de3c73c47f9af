"""The values the Python API hands out."""

from __future__ import annotations

from dataclasses import dataclass

from klog.store.format import TIMESTAMP_TYPE_NAMES

Headers = list[tuple[str, bytes | None]]


@dataclass(slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int  # epoch milliseconds
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: Headers

    @property
    def timestamp_type_name(self) -> str:
        return TIMESTAMP_TYPE_NAMES[self.timestamp_type]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int

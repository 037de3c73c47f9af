"""Kafka's default partitioner for keyed records (kafka-log-format.md §4) and a sticky one."""

from __future__ import annotations

import random

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2, returned as Java's signed int32."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length & ~3
    for i in range(0, full, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """toPositive(murmur2(key)) % partitions: `& 0x7fffffff`, never abs()."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Keyless records stick to one partition until a batch completes, then move on."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}

    def partition(self, topic: str, partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= partitions:
            p = random.randrange(partitions)
            self._current[topic] = p
        return p

    def batch_done(self, topic: str, partitions: int) -> None:
        if partitions > 1:
            current = self._current.get(topic, 0)
            self._current[topic] = random.choice([p for p in range(partitions) if p != current])

"""Kafka's default partitioner for keyed records (kafka-log-format.md §4) and a sticky one."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import is_

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
# a key's length rounded down to 4 -> the unpacker of its little-endian words (kept for short keys only)
_WORDS: dict[int, Callable[[bytes], tuple[int, ...]]] = {}
_WORDS_KEPT_MAX = 256


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2, returned as Java's signed int32. The 4-byte words come from one
    struct unpack (not four indexings and shifts each): 1.3-1.8x faster, which counts where keys
    are mostly new (one hash per distinct key: a UUID key costs ~3 us in pure Python)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length & ~3
    words = _WORDS.get(full)
    if words is None:
        words = struct.Struct(f"<{full >> 2}I").unpack_from
        if full <= _WORDS_KEPT_MAX:
            _WORDS[full] = words
    for k in words(data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) ^ (k * _M)) & _MASK
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[full + 2] << 16
        if tail >= 2:
            h ^= data[full + 1] << 8
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """toPositive(murmur2(key)) % partitions: `& 0x7fffffff`, never abs()."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


KEY_PARTITIONS_MAX = 100_000  # keys remembered per partition count (murmur2 in Python: ~1 us a key)
_key_partitions: dict[int, dict[bytes, int]] = {}
# New keys in one call from which the compiled partitioner is loaded: confluent-kafka's murmur2
# (~0.2 us a key, against ~2 us here) costs ~3 ms to load, what ~1,500 keys cost in Python
COMPILED_MIN_KEYS = 2048
_compiled: Callable[[bytes, int], int] | None | bool = None  # its murmur2(key, partitions); False if missing


def key_partitions(partitions: int) -> dict[bytes, int]:
    """key -> partition_for_key(key, partitions), for the caller to read and fill: one memo per
    process (a key's partition depends on nothing else), so a new producer does not hash again
    the keys the last one did; emptied when it grows past KEY_PARTITIONS_MAX keys."""
    cache = _key_partitions.get(partitions)
    if cache is None or len(cache) > KEY_PARTITIONS_MAX:
        cache = _key_partitions[partitions] = {}
    return cache


def partitions_of(keys: Sequence[bytes], partitions: int) -> list[int]:
    """partition_for_key of each key, through key_partitions' memo (C-level passes; murmur2 once
    per new key, compiled when a call brings many). Raises TypeError for a key murmur2 cannot
    hash (None, a str, a bytearray), before it fills the memo with any of these keys."""
    cache = key_partitions(partitions)
    try:
        return list(map(cache.__getitem__, keys))  # (the usual call: every key seen before)
    except KeyError:
        pass
    new = set(compress(keys, map(is_, map(cache.get, keys), repeat(None))))
    hashed = _compiled_partitioner(len(new))
    if hashed is None or any(key.__class__ is not bytes for key in new):
        hashed = partition_for_key
    cache.update(zip(new, list(map(hashed, new, repeat(partitions))), strict=True))
    return list(map(cache.__getitem__, keys))


def _compiled_partitioner(new_keys: int) -> Callable[[bytes, int], int] | None:
    """confluent-kafka's murmur2 partitioner (Kafka's, compiled), loaded once a call brings
    COMPILED_MIN_KEYS new keys; None below that, or when it is missing."""
    global _compiled
    if _compiled is None and new_keys >= COMPILED_MIN_KEYS:
        _compiled = _load_compiled() or False
    return _compiled or None


def _load_compiled() -> Callable[[bytes, int], int] | None:
    """confluent_kafka.cimpl's murmur2 without running the package's __init__ (which loads its
    whole client: ~60 ms; see klog.store.bare_import)."""
    from klog.store.bare_import import import_bare

    try:
        return _checked(getattr(import_bare("confluent_kafka.cimpl"), "murmur2", None))
    except Exception:  # noqa: BLE001 - missing or changed: the Python murmur2 does the work
        return None


def _checked(murmur2_partition: Callable[[bytes, int], int] | None) -> Callable[[bytes, int], int] | None:
    """The compiled partitioner if it partitions as Kafka does (a key of the spec's vectors)."""
    try:
        if murmur2_partition is not None and murmur2_partition(b"100:48069", 12) == 9:
            return murmur2_partition
    except Exception:  # noqa: BLE001, S110 - another signature: not it
        pass
    return None


class StickyPartitioner:
    """Keyless records stick to one partition for `switch_bytes`, then move to another (KIP-794).

    Kafka's built-in partitioner switches after `batch.size` bytes (16384 by default) went to the
    current partition; klog's batches are much larger for throughput, so the switch point is its own
    setting with Kafka's figure. Big inputs spread evenly; each partition still gets large batches.
    """

    def __init__(self, switch_bytes: int = 16384) -> None:
        self.switch_bytes = switch_bytes
        self._current: dict[str, int] = {}
        self._produced: dict[str, int] = {}

    def partition(self, topic: str, partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= partitions:
            if partitions == 1:
                p = 0  # without importing random (~1 ms of a one-line `klog produce`)
            else:
                import random

                p = random.randrange(partitions)
            self._current[topic] = p
            self._produced[topic] = 0
        return p

    def remaining(self, topic: str) -> int:
        """Bytes the current partition takes before the next switch."""
        return max(1, self.switch_bytes - self._produced.get(topic, 0))

    def produced(self, topic: str, nbytes: int, partitions: int) -> None:
        """Count `nbytes` sent to the current partition; switch once the quota is used."""
        done = self._produced.get(topic, 0) + nbytes
        if done < self.switch_bytes:
            self._produced[topic] = done
            return
        self._produced[topic] = 0
        if partitions > 1:
            import random

            current = self._current.get(topic, 0)
            self._current[topic] = random.choice([p for p in range(partitions) if p != current])

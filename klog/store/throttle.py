"""Kafka's Throttler (storage/.../utils/Throttler.java): keeps a stream of I/O at a byte rate by
sleeping whenever it has run ahead of it. The log cleaner reports each chunk it reads or writes
(`log.cleaner.io.max.bytes.per.second`); the rate is checked once `check_interval_ms` has passed
(Kafka's cleaner uses 300 ms), so small chunks cost a clock read, not a sleep each — or, unlike
Kafka's, as soon as the bytes seen would take longer than that at the rate: the cleaner reads 4 MiB
at a time, and a whole small compaction could otherwise fit in one unchecked interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

KAFKA_UNLIMITED = 1.7976931348623157e308  # Kafka's default: Double.MaxValue, no throttle
CLEANER_CHECK_INTERVAL_MS = 300  # LogCleaner's


class Throttler:
    """`maybe_throttle(n)` after n bytes of I/O; sleeps (by `sleep`, seconds) when ahead of the rate.
    `observed_bytes` and `slept_s` add up what it saw and the sleeps it asked for (a stop may cut one short)."""

    def __init__(self, bytes_per_second: float, *, check_interval_ms: int = CLEANER_CHECK_INTERVAL_MS,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        if not bytes_per_second > 0:
            raise ValueError(f"a throttle's rate must be above 0 bytes per second, not {bytes_per_second}")
        self.bytes_per_second = bytes_per_second
        self.check_interval_s = check_interval_ms / 1000
        self.clock = clock
        self.sleep = sleep  # `threading.Event.wait` makes a stop end a sleep early
        self.observed_bytes = 0
        self.slept_s = 0.0
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed_in_period = 0

    def maybe_throttle(self, observed: int) -> None:
        with self._lock:
            self.observed_bytes += observed
            self._observed_in_period += observed
            now = self.clock()
            elapsed = now - self._period_start
            owed = self._observed_in_period / self.bytes_per_second  # seconds these bytes take at the rate
            if (elapsed <= self.check_interval_s and owed <= self.check_interval_s) or self._observed_in_period <= 0:
                return
            # the time the bytes of this period should have taken, less the time they did take
            nap = owed - elapsed
            if nap > 0:
                self.sleep(nap)
                self.slept_s += nap
            self._period_start = self.clock()
            self._observed_in_period = 0


def cleaner_throttler(bytes_per_second: float | None, **kwargs) -> Throttler | None:
    """A Throttler for the cleaner, or None (no throttle) for None or Kafka's unlimited default."""
    if bytes_per_second is None or bytes_per_second >= KAFKA_UNLIMITED:
        return None
    return Throttler(bytes_per_second, **kwargs)

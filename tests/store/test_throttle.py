"""Kafka's Throttler (klog/store/throttle.py), on a fake clock: it sleeps exactly as long as the bytes
it saw are ahead of the rate, checks at most every interval, and a stop can end its sleep."""

from __future__ import annotations

import threading

import pytest

from klog.store.throttle import KAFKA_UNLIMITED, Throttler, cleaner_throttler
from tests.fake_clock import FakeClock


def test_it_sleeps_until_the_bytes_seen_match_the_rate():
    clock = FakeClock()
    t = Throttler(1000, check_interval_ms=300, clock=clock, sleep=clock.sleep)
    for _ in range(30):  # 3000 bytes, 100 at a time, each taking 10 ms of I/O: 10000 B/s unthrottled
        clock.now += 0.01
        t.maybe_throttle(100)
    assert t.observed_bytes == 3000
    assert clock.now == pytest.approx(3.0, abs=0.31)  # 3000 bytes at 1000 B/s, less an unchecked tail
    assert t.slept_s == pytest.approx(clock.now - 0.3, abs=0.31)


def test_it_never_sleeps_below_the_rate_and_checks_only_after_an_interval():
    clock = FakeClock()
    t = Throttler(1000, check_interval_ms=300, clock=clock, sleep=clock.sleep)
    for _ in range(20):
        clock.now += 0.2
        t.maybe_throttle(100)  # 500 B/s
    assert t.slept_s == 0
    t.maybe_throttle(250)  # 0.25 s worth, within one interval: not checked yet
    assert t.slept_s == 0


def test_one_big_chunk_is_paid_for_at_once():
    clock = FakeClock()
    t = Throttler(1 << 20, clock=clock, sleep=clock.sleep)
    t.maybe_throttle(4 << 20)  # the cleaner's 4 MiB read, done in no time
    assert t.slept_s == pytest.approx(4.0)


def test_a_stop_ends_the_sleep():
    stop = threading.Event()
    stop.set()
    t = Throttler(1, sleep=stop.wait)
    t.maybe_throttle(3600)  # an hour's worth: returns at once
    assert t.slept_s == pytest.approx(3600, rel=0.01)  # what it was owed, though the stop cut it short


def test_kafkas_unlimited_default_means_no_throttler():
    assert cleaner_throttler(KAFKA_UNLIMITED) is None
    assert cleaner_throttler(None) is None
    assert cleaner_throttler(float("inf")) is None
    assert cleaner_throttler(1e6).bytes_per_second == 1e6
    with pytest.raises(ValueError):
        Throttler(0)

"""log.cleaner.io.max.bytes.per.second (klog/store/throttle.py): compaction's reads and writes go
through the Throttler, so compacting ~3 MB at 1 MB/s takes the cleaner at least ~3 s.

Method: the throttler runs on a fake clock that only its sleeps move, so what is asserted is the
bytes it was shown and the time it made the cleaner wait, never the test's wall time.
"""

from __future__ import annotations

import pytest

from klog.broker import lifecycle
from klog.broker.log_manager import LogManager
from klog.store.throttle import Throttler
from tests.fake_clock import FakeClock

MB = 1 << 20
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": str(512 << 10), "min.cleanable.dirty.ratio": "0.01"}


def write_3mb(store, topic: str) -> int:
    """~3 MB of 1 KiB values over 30 keys; the bytes of the sealed (cleanable) segments."""
    store.create_topic(topic, partitions=1, configs=COMPACTED)
    value = b"x" * 1024
    with store.producer() as p:
        for i in range(3 * 1024):
            p.send(topic, value, key=b"k%d" % (i % 30), partition=0)
        p.flush()
    log = store.partition(topic, 0).leader
    log.refresh_segments()
    return sum(log.segments[b].file_size() for b in log.bases[:-1])


def throttled(rate: int) -> tuple[Throttler, FakeClock]:
    clock = FakeClock()
    return Throttler(rate, clock=clock, sleep=clock.sleep), clock


def test_compacting_3mb_at_1mb_per_second_takes_the_cleaner_3_seconds(store):
    cleanable = write_3mb(store, "changelog")
    assert cleanable > 2.5 * MB
    throttler, clock = throttled(MB)
    [result] = lifecycle.compact(store, "changelog", throttler=throttler)
    assert result.compacted and result.records_removed > 2500
    # the offset map reads the dirty part, the rewrite reads every cleanable segment again
    assert throttler.observed_bytes >= 2 * cleanable
    assert clock.now >= throttler.observed_bytes / MB - 0.31  # all of it paced, less one unchecked tail
    assert clock.now >= 5.0


def test_the_serve_cleaners_pass_is_throttled_and_unthrottled_without_a_rate(store):
    write_3mb(store, "changelog")
    write_3mb(store, "other")
    throttler, clock = throttled(4 * MB)
    manager = LogManager(store, warn=pytest.fail)
    manager.throttler = throttler
    assert {r.topic for r in manager.compaction_pass()} == {"changelog", "other"}
    assert clock.now >= throttler.observed_bytes / (4 * MB) - 0.31 and throttler.observed_bytes > 10 * MB
    assert [r.compacted for r in lifecycle.compact(store, "changelog")] == [True]  # no throttler: works as before

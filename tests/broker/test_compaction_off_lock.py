"""Compaction runs without the partition's lock (klog/store/cleaner.py, Kafka's Cleaner + replaceSegments):
a produce to the partition being compacted completes while the cleaning runs, and what changes the
segments meanwhile (appends, delete-records, another cleaner) loses nothing.

Method: the cleaning is held inside its throttler's first sleep (a Throttler whose sleep waits on an
event: log.cleaner.io.max.bytes.per.second at its slowest), in a thread; the test acts on the
partition meanwhile, then releases it and reads every record back against the model
(test_compaction.expected_after). Nothing waits on a clock: the held cleaning is still running when
the produce is asserted complete.
"""

from __future__ import annotations

import os
import threading

import pytest

import klog
from klog.broker import lifecycle
from klog.broker.verify import verify_store
from klog.store.throttle import Throttler
from tests.broker.test_compaction import (
    COMPACTED,
    T0,
    active_base,
    clock_at,
    expected_after,
    read,
    strip_headers,
    write,
)

NOW = T0 + 10**6


def compacted_topic(store: klog.Store) -> tuple[list, int]:
    """Topic `c` (compacted, small segments) holding 150 records over 6 keys, in batches of two:
    what was written, and the base offset of its active segment."""
    store.create_topic("c", partitions=1, configs=COMPACTED)
    written = write(store, "c", [(b"k%d" % (i % 6), b"v%03d" % i) for i in range(150)], per_batch=2)
    return written, active_base(store, "c")


class HeldCompaction:
    """`lifecycle.compact` in a thread, held in its throttler's first sleep until release()."""

    def __init__(self, store: klog.Store, topic: str) -> None:
        self.inside, self._release = threading.Event(), threading.Event()
        self.results: list = []
        self.errors: list[BaseException] = []

        def held_sleep(_seconds: float) -> None:
            self.inside.set()
            self._release.wait(30)

        throttler = Throttler(1, check_interval_ms=0, sleep=held_sleep)  # 1 byte/s: sleeps at the first chunk
        self.thread = threading.Thread(target=self._run, args=(store, topic, throttler), daemon=True)
        self.thread.start()
        assert self.inside.wait(20), "the compaction never reached its throttle"

    def _run(self, store: klog.Store, topic: str, throttler: Throttler) -> None:
        try:
            self.results += lifecycle.compact(store, topic, clock=clock_at(NOW), throttler=throttler)
        except BaseException as e:  # noqa: BLE001 - reported by release()
            self.errors.append(e)

    def release(self):
        self._release.set()
        self.thread.join(30)
        assert not self.thread.is_alive() and not self.errors, self.errors
        [result] = self.results
        return result


def in_thread(work) -> threading.Thread:
    t = threading.Thread(target=work, daemon=True)
    t.start()
    return t


def test_a_produce_to_the_partition_being_compacted_completes_while_the_compaction_runs(store):
    written, boundary = compacted_topic(store)
    held = HeldCompaction(store, "c")
    try:
        later: list = []
        producer = in_thread(lambda: later.extend(write(store, "c", [(b"k%d" % (i % 6), b"w%03d" % i)
                                                                    for i in range(40)], per_batch=4)))
        producer.join(20)
        assert not producer.is_alive(), "the produce waited for the compaction to finish"
        assert held.thread.is_alive(), "the compaction was not running any more"
    finally:
        result = held.release()
    assert result.compacted and result.segments_rewritten > 0
    assert strip_headers(read(store, "c")) == strip_headers(expected_after(written, boundary)) + later
    assert all(r["ok"] for r in verify_store(store))


@pytest.mark.parametrize("how", ["delete-records", "retention"])
def test_log_start_moved_during_a_compaction_keeps_the_swap_above_it(store, how):
    """delete-records, or size retention (cleanup.policy=compact,delete), deletes the oldest segments
    while the cleaning reads them: what is left above the new log start is the compacted model."""
    written, boundary = compacted_topic(store)
    leader = store.partition("c", 0).leader
    cut = leader.bases[3]  # three whole segments go
    kept_bytes = sum(leader.segments[b].file_size() for b in leader.bases[3:])
    held = HeldCompaction(store, "c")
    try:
        if how == "delete-records":
            [moved] = lifecycle.delete_records(store, "c", before_offset=cut)
        else:
            store.alter_topic("c", set_configs={"cleanup.policy": "compact,delete", "retention.bytes": str(kept_bytes)})
            moved = lifecycle.retain(store, "c", 0)
        assert moved.segments_deleted == 3 and moved.log_start_after == cut
        later = write(store, "c", [(b"k0", b"after")])
    finally:
        result = held.release()
    assert result.compacted
    model = [r for r in strip_headers(expected_after(written, boundary)) if r[0] >= cut]
    assert strip_headers(read(store, "c")) == model + later
    assert all(r["ok"] for r in verify_store(store))


def test_a_compaction_whose_segments_another_cleaner_rewrote_meanwhile_is_dropped_and_redone(store):
    written, boundary = compacted_topic(store)
    held = HeldCompaction(store, "c")
    try:
        with klog.open(store.path) as other:  # another process's cleaner runs to the end meanwhile
            [first] = lifecycle.compact(other, "c", clock=clock_at(NOW))
        assert first.compacted
    finally:
        result = held.release()
    # what it read was rewritten: that cleaning was dropped and done again from the new segments
    assert result.cleanings_abandoned == 1 and result.compacted
    assert strip_headers(read(store, "c")) == strip_headers(expected_after(written, boundary))
    folder = store.partition("c", 0).leader.directory
    assert [n for n in os.listdir(folder) if n.endswith((".cleaning", ".cleaned", ".swap"))] == []

"""The temporary files of a cleaning (`<base>.<suffix>.<pid>-<n>-<token>.cleaning`, klog/store/cleaner.py)
are its own even when another cleaner has the same process id and counter: two processes in two
pid namespaces (containers sharing the data directory) both start at counter 0 with, say, pid 1.
One abandoning its cleaning must not delete, nor its rewrite overwrite, the other's files."""

from __future__ import annotations

import itertools

from klog.broker import lifecycle
from klog.store import cleaner
from tests.broker.test_compaction import COMPACTED, T0, active_base, expected_after, read, strip_headers, write

NOW = T0 + 10**6


def test_a_cleaning_with_the_same_pid_and_counter_keeps_its_own_files(store, monkeypatch):
    store.create_topic("c", partitions=1, configs=COMPACTED)
    written = write(store, "c", [(b"k%d" % (i % 6), b"v%03d" % i) for i in range(150)], per_batch=2)
    boundary = active_base(store, "c")
    part = store.partition("c", 0)
    with part.lock:
        plan = lifecycle._plan_compaction(store, "c", lifecycle._locked(store, "c", 0), NOW, True,
                                          lifecycle.PartitionCleanup("c", 0, 0, 0), walked=True)
    first = cleaner.build_cleaning(plan.replicas, plan.rng, NOW, 0)
    monkeypatch.setattr(cleaner, "_temp_counter", itertools.count())  # the other process's counter, same pid
    second = cleaner.build_cleaning(plan.replicas, plan.rng, NOW, 0)
    assert first.stats.segments_rewritten and second.stats.segments_rewritten
    second.discard()  # abandoned (its segments changed, say)
    with part.lock:
        part = lifecycle._locked(store, "c", 0)
        assert cleaner.swap_cleaned(part.replicas, first, part.log_start_offset())
    first.discard()
    assert strip_headers(read(store, "c")) == strip_headers(expected_after(written, boundary))

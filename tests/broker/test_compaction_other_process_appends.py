"""A compaction running off the partition's lock while another process (`klog produce`, a writer
with its own view of the segments) appends and rolls segments: the appends touch only segments
the cleaning did not take, so the cleaning is swapped in at its first attempt, and the partition
reads back as the compacted model followed by every produced record."""

from __future__ import annotations

import subprocess
import sys

import pytest

from klog.broker.verify import verify_store
from klog.store.faults import CRASH_ENV
from tests.broker.test_compaction import active_base, expected_after, read, strip_headers
from tests.broker.test_compaction_off_lock import HeldCompaction, compacted_topic
from tests.klog_processes import klog_env


@pytest.mark.slow
def test_a_compaction_held_off_lock_while_another_process_produces_and_rolls_is_swapped_in_once(store):
    written, boundary = compacted_topic(store)
    held = HeldCompaction(store, "c")
    try:
        lines = b"".join(b"p%d:w%03d\n" % (i, i) for i in range(60))  # keys of their own: none is cleaned away
        produced = subprocess.run([sys.executable, "-m", "klog", "produce", "c", "-K", ":", "--batch-size", "100"],
                                  input=lines, capture_output=True, timeout=60, env=klog_env(store.path))
        assert produced.returncode == 0, produced.stderr.decode()
        store.partition("c", 0).leader.refresh_segments()  # (this process's view of what the other wrote)
        assert active_base(store, "c") > boundary + 30, "the producer rolled no segment"
        assert held.thread.is_alive()
    finally:
        result = held.release()
    assert result.compacted and result.segments_rewritten > 0 and result.cleanings_abandoned == 0
    rows = strip_headers(read(store, "c"))
    model = strip_headers(expected_after(written, boundary))
    assert rows[:len(model)] == model
    assert [(r[1], r[2]) for r in rows[len(model):]] == [(b"p%d" % i, b"w%03d" % i) for i in range(60)]
    assert all(r["ok"] for r in verify_store(store))


KILLED_PRODUCER = """
import sys, klog
with klog.open(sys.argv[1]) as store, store.producer() as p:
    for i in range(200):
        sent = p.send("c", b"w%03d" % i, key=b"p%d" % i, partition=0)
        p.flush()
        print(sent.offset, i, flush=True)  # acknowledged
"""


@pytest.mark.slow
def test_a_producer_killed_at_a_roll_while_a_compaction_is_held_off_lock_loses_nothing(store):
    """The writer dies with a sealed segment's fsync pending: the compaction's swap, after the
    recovery its lock brings, keeps every acknowledged record and the compacted model."""
    written, boundary = compacted_topic(store)
    held = HeldCompaction(store, "c")
    try:
        env = {**klog_env(store.path), CRASH_ENV: "roll-flush-pending:3"}
        killed = subprocess.run([sys.executable, "-c", KILLED_PRODUCER, store.path], capture_output=True,
                                timeout=60, env=env)
        assert killed.returncode == -9, killed.stderr.decode()[-500:]
        assert held.thread.is_alive()
    finally:
        result = held.release()
    assert result.compacted
    acked = [line.split() for line in killed.stdout.splitlines()]
    assert len(acked) > 5
    rows = strip_headers(read(store, "c"))
    model = strip_headers(expected_after(written, boundary))
    assert rows[:len(model)] == model
    seen = {r[0]: (r[1], r[2]) for r in rows[len(model):]}
    assert all(seen.get(int(o)) == (b"p%d" % int(i), b"w%03d" % int(i)) for o, i in acked)
    assert all(r["ok"] for r in verify_store(store))

"""`klog topics clean` (every topic) over a compacted partition holding damage kept in the log.

What a user sees: the damaged partition is named in one line (exit 1), and retention and due
compaction still run on every other topic (Kafka's cleaner marks such a partition uncleanable and goes
on with the others): one damaged partition must not stop the store's cleaning, for good.
"""

from __future__ import annotations

import time

import pytest

from tests.cli.test_cli import assert_one_line_error
from tests.cli.test_compact_over_damage import _damaged_compacted


@pytest.mark.slow
def test_a_damaged_compacted_partition_does_not_stop_the_other_topics_cleaning(store, cli, data_dir):
    _damaged_compacted(store, data_dir)  # topic 'c': cleaned before 'x' and 'z'
    store.create_topic("x", configs={"cleanup.policy": "compact", "segment.bytes": "1000",
                                     "min.cleanable.dirty.ratio": "0.01"})
    store.create_topic("z", configs={"retention.ms": "1000", "segment.bytes": "1000"})
    with store.producer() as p:
        for i in range(40):
            p.send("x", b"v%d" % i, key=b"k%d" % (i % 2), partition=0)
            p.send("z", b"old%d" % i, partition=0)
            p.flush()
    time.sleep(1.1)  # (every record of z older than retention.ms now)
    start = store.offsets("z", -2)[0]
    r = cli("topics", "clean")
    assert_one_line_error(r, 1, "cannot compact c-0: a damaged batch at offset 3")
    assert store.offsets("z", -2)[0] > start  # z's old segments went all the same
    assert len([r for r in store.consumer("x")]) < 20  # and x was compacted

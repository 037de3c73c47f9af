"""segment.index.bytes: a segment whose offset or time index is full rolls (Kafka's isFull), also
for a writer that reopened the log."""

from __future__ import annotations

import os

import klog


def test_a_full_index_rolls_the_segment_even_across_reopens(data_dir) -> None:
    # 60 bytes: 7 offset-index entries (8 bytes) or 5 time-index entries (12 bytes); an entry per batch
    configs = {"segment.index.bytes": "60", "index.interval.bytes": "1", "retention.ms": "-1"}
    for round_ in range(3):
        with klog.open(data_dir) as store:
            if round_ == 0:
                store.create_topic("ix", configs=configs)
            with store.producer() as producer:
                for i in range(8):
                    producer.send("ix", b"v%d" % i, timestamp=1_000 * (round_ * 8 + i + 1))
                    producer.flush()  # one batch each
            folder = os.path.join(store.data_dir.log_dir_path(0), "ix-0")
    sizes = {n: os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)
             if n.endswith((".index", ".timeindex"))}
    assert len(sizes) >= 2 * 4, sizes  # 24 batches, at most 5 per segment
    assert all(size <= 60 for size in sizes.values()), sizes
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("ix")] == [b"v%d" % (i % 8) for i in range(24)]

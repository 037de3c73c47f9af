"""Compaction removes emptied batches and finished transaction markers, as Kafka's LogCleaner does
(kafka-log-format.md §5): what users see of the gaps this leaves between batches and segments.

Method: compacted topics written through the public producer (plain, idempotent, transactional),
cleaned with lifecycle.compact at chosen clocks, then read back by every reader: the store's
consumer, `klog consume`, a follower replica catching up, `klog dirs verify`, a producer going on."""

from __future__ import annotations

import os
import shutil

import klog
from klog.broker import lifecycle
from klog.broker.verify import verify_store
from klog.store.format import partition_dir_name
from klog.store.reader import PartitionReader
from tests.broker.test_compaction import T0, clock_at

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "600", "index.interval.bytes": "100",
             "retention.ms": "-1"}
NOW = T0 + 10**6


def _batches(store, topic):
    """(base offset, last offset, records) of every batch of partition 0's leader, in order."""
    leader = store.partition(topic, 0).leader
    leader.refresh_segments()
    out = []
    for base in leader.bases:
        segment = leader.segments[base]
        out += [(h.base_offset, h.last_offset, h.records_count)
                for _, h in segment.iter_headers(0, segment.file_size())]
    return out


def _write(store, topic, keys, value=b"v" * 30, start_ts=T0):
    with store.producer() as p:
        for i, key in enumerate(keys):
            p.send(topic, value, key=key, partition=0, timestamp=start_ts + i)
            p.flush()


def _latest(records):
    out = {}
    for r in records:
        out[r.key] = (r.offset, r.value)
    return out


def test_many_small_batches_shrink_to_the_surviving_records_batches(store):
    store.create_topic("c", 1, configs=COMPACTED)
    _write(store, "c", [b"k%d" % (i % 3) for i in range(60)])  # one record a batch, 5 a segment
    before = {r.offset: r for r in store.consumer("c")}
    [done] = lifecycle.compact(store, "c", clock=clock_at(NOW))
    end = done.cleanable_end
    batches = _batches(store, "c")
    cleaned = [b for b in batches if b[0] < end]
    # the three keys' latest records below the cleanable end, and nothing else (the emptied batches went),
    # but the batch ending at the cleanable end, which stays (Kafka keeps the round's last batch)
    latest = {}
    for offset, r in before.items():
        if offset < end:
            latest[r.key] = offset
    assert [b[0] for b in cleaned] == sorted(set(latest.values()) | {end - 1})
    assert all(b[2] == 1 for b in cleaned)
    got = list(store.consumer("c"))
    assert [r.offset for r in got] == sorted(set(latest.values()) | set(range(end, 60)))
    assert all(before[r.offset].value == r.value for r in got)
    assert all(r["ok"] for r in verify_store(store)), verify_store(store)
    # the log's start and end did not move; emptied segments stay as empty files
    part = store.partition("c", 0)
    assert part.log_start_offset() == 0 and part.high_watermark() == 60
    folder = part.leader.directory
    assert os.path.getsize(os.path.join(folder, "00000000000000000000.log")) == 0


def test_a_read_from_an_offset_in_a_gap_starts_at_the_next_batch(store, cli):
    store.create_topic("c", 1, configs=COMPACTED)
    _write(store, "c", [b"k%d" % (i % 3) for i in range(60)])
    [done] = lifecycle.compact(store, "c", clock=clock_at(NOW))
    offsets = [r.offset for r in store.consumer("c")]
    for start in (0, 3, 7, offsets[0], offsets[0] + 1):  # the first offsets lie in emptied segments
        want = [o for o in offsets if o >= start]
        assert [r.offset for r in store.consumer("c", start=str(start))] == want
        r = cli("consume", "c", "-o", str(start), "-F", "%o\\n")
        assert r.exit_code == 0 and r.out.split() == [str(o) for o in want], r.out
    r = cli("consume", "c", "-F", "%o\\n")
    assert r.exit_code == 0 and r.out.split() == [str(o) for o in offsets]


def test_a_follower_catches_up_across_the_gaps_and_the_replicas_agree(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        store.create_topic("c", 1, replication_factor=2, configs=COMPACTED)
        # a key of its own every 7th record, the others one key: gaps all along the cleaned log
        _write(store, "c", [b"u%d" % i if i % 7 == 0 else b"x" for i in range(60)])
        lifecycle.compact(store, "c", clock=clock_at(NOW))
        want = [(r.offset, r.key, r.value) for r in store.consumer("c")]
        assert len(want) < 30 and want[0][0] == 0  # (gaps between the survivors)
        follower = store.topic("c").partitions[0].isr[-1]
        shutil.rmtree(dirs[follower])
        os.makedirs(dirs[follower])  # a new, empty disk in its place
        warnings: list[str] = []
        with store.producer(on_warning=warnings.append) as p:
            p.send("c", b"after", key=b"k9", partition=0, timestamp=T0 + 100)
        assert any("rejoined the ISR" in w for w in warnings), warnings
        assert sorted(store.topics.get("c").partitions[0].isr) == [0, 1]
        want.append((60, b"k9", b"after"))
        assert [(r.offset, r.key, r.value) for r in store.consumer("c")] == want
        folders = [os.path.join(d, partition_dir_name("c", 0)) for d in dirs]
        # the follower holds every batch the leader holds, at the same offsets
        images = []
        for replica in store.partition("c", 0).replicas:
            assert os.path.dirname(replica.directory) in folders or replica.directory in folders
            images.append([fb.data for fetched in PartitionReader(replica, 0, 61) for fb in fetched.batches])
        assert images[0] == images[1] and len(images[0]) == len(want)
        assert all(r["ok"] for r in verify_store(store)), verify_store(store)

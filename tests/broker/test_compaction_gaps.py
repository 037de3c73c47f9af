"""Compaction removes emptied batches and finished transaction markers, as Kafka's LogCleaner does
(kafka-log-format.md §5): what users see of the gaps this leaves between batches and segments.

Method: compacted topics written through the public producer (plain, idempotent, transactional),
cleaned with lifecycle.compact at chosen clocks, then read back by every reader: the store's
consumer, `klog consume`, a follower replica catching up, `klog dirs verify`, a producer going on."""

from __future__ import annotations

import os
import shutil
import time

import pytest

import klog
from klog.broker import lifecycle
from klog.broker.verify import verify_store
from klog.store.format import partition_dir_name
from klog.store.reader import PartitionReader
from tests.broker.test_compaction import T0, clock_at
from tests.segment_files import leader_headers, poll_to_end, write_keys

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "600", "index.interval.bytes": "100",
             "retention.ms": "-1"}
NOW = T0 + 10**6


def _batches(store, topic):
    """(base offset, last offset, records) of every batch of partition 0's leader, in order."""
    return [(h.base_offset, h.last_offset, h.records_count) for h in leader_headers(store, topic)]


def test_many_small_batches_shrink_to_the_surviving_records_batches(store):
    store.create_topic("c", 1, configs=COMPACTED)
    write_keys(store, "c", [b"k%d" % (i % 3) for i in range(60)], T0)  # one record a batch, 5 a segment
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
    write_keys(store, "c", [b"k%d" % (i % 3) for i in range(60)], T0)
    [done] = lifecycle.compact(store, "c", clock=clock_at(NOW))
    offsets = [r.offset for r in store.consumer("c")]
    for start in (0, 3, 7, offsets[0], offsets[0] + 1):  # the first offsets lie in emptied segments
        want = [o for o in offsets if o >= start]
        assert [r.offset for r in store.consumer("c", start=str(start))] == want
        r = cli("consume", "c", "-o", str(start), "-F", "%o\\n")
        assert r.exit_code == 0 and r.out.split() == [str(o) for o in want], r.out
    r = cli("consume", "c", "-F", "%o\\n")
    assert r.exit_code == 0 and r.out.split() == [str(o) for o in offsets]


@pytest.mark.slow
def test_a_follower_catches_up_across_the_gaps_and_the_replicas_agree(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        store.create_topic("c", 1, replication_factor=2, configs=COMPACTED)
        # a key of its own every 7th record, the others one key: gaps all along the cleaned log
        write_keys(store, "c", [b"u%d" % i if i % 7 == 0 else b"x" for i in range(60)], T0)
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


def _kafka_python_reads(store, topic):
    """kafka-python decodes every batch of the leader's segments, CRCs valid, as the store reads them."""
    memory_records = pytest.importorskip("kafka.record.memory_records").MemoryRecords
    leader = store.partition(topic, 0).leader
    theirs = []
    for base in leader.bases:
        with open(leader.segments[base].log_path, "rb") as f:
            records = memory_records(f.read())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            if not batch.is_control_batch:
                theirs += [(r.offset, r.key, r.value) for r in batch]
    assert theirs == [(r.offset, r.key, r.value) for r in store.consumer(topic)]


@pytest.mark.slow
def test_transaction_markers_go_after_delete_retention_and_aborted_records_at_once(store, cli):
    store.create_topic("t", 1, configs={**COMPACTED, "delete.retention.ms": "1000"})
    with store.producer(transactional_id="tx") as producer:
        with producer.transaction():
            producer.send("t", b"a1", key=b"a", partition=0)
        producer.begin()
        producer.send("t", b"a-aborted", key=b"a", partition=0)
        producer.flush()
        producer.abort()
        with producer.transaction():
            producer.send("t", b"b1", key=b"b", partition=0)
        pid = producer.producer_id
    write_keys(store, "t", [b"a", b"b"] + [b"f%d" % i for i in range(12)], int(time.time() * 1000))
    active = store.partition("t", 0).leader.bases[-1]
    markers = [h.base_offset for h in leader_headers(store, "t") if h.is_control]
    assert len(markers) == 3 and markers[-1] < active
    aborted_offset = markers[0] + 1
    now = int(time.time() * 1000)

    lifecycle.compact(store, "t", clock=clock_at(now))
    headers = {h.base_offset: h for h in leader_headers(store, "t")}
    assert aborted_offset not in headers  # the aborted transaction's batch went at once
    # its batches were seen in this cleaning, so every marker stays, without a horizon yet
    assert all(m in headers and not headers[m].has_delete_horizon for m in markers)
    # the transactional producer's last batch (b1's) stays, empty: its last sequence and epoch
    last = max(h.base_offset for h in headers.values() if h.producer_id == pid and not h.is_control)
    assert headers[last].records_count == 0 and last == markers[2] - 1
    assert [h for h in headers.values() if h.producer_id == pid and not h.is_control] == [headers[last]]

    lifecycle.compact(store, "t", clock=clock_at(now + 10))  # no batch of the first two is left: their horizon
    headers = {h.base_offset: h for h in leader_headers(store, "t")}
    assert [headers[m].has_delete_horizon for m in markers] == [True, True, False]
    assert headers[markers[0]].base_timestamp == now + 10 + 1000
    assert all(r["ok"] for r in verify_store(store)), verify_store(store)  # the .txnindex without the abort
    _kafka_python_reads(store, "t")  # markers with a horizon, an empty batch: Kafka's own format

    lifecycle.compact(store, "t", clock=clock_at(now + 10 + 999))
    assert all(m in {h.base_offset for h in leader_headers(store, "t")} for m in markers)
    lifecycle.compact(store, "t", clock=clock_at(now + 10 + 1000))
    headers = {h.base_offset: h for h in leader_headers(store, "t")}
    assert [m in headers for m in markers] == [False, False, True]  # the last one's transaction keeps a batch
    want = {b"a": b"a", b"b": b"b"} | {b"f%d" % i: b"v" * 30 for i in range(12)}
    for isolation in ("read_committed", "read_uncommitted"):
        got = {r.key: r.value for r in store.consumer("t", isolation_level=isolation)}
        assert got == {k: (b"v" * 30) for k in want}, isolation
    r = cli("verify")
    assert r.exit_code == 0, r.out


def test_an_idempotent_producer_goes_on_after_its_batches_were_cleaned_with_the_next_sequence(store):
    from klog.broker.batches import RawAppender
    from klog.errors import OutOfOrderSequenceError
    from klog.store import codec

    store.create_topic("c", 1, configs=COMPACTED)
    pid, now = 4242, int(time.time() * 1000)

    def batch(seq, key):
        return codec.write_batch([(key, b"v" * 30, (), now)], base_offset=0, attributes=0, last_offset_delta=0,
                                 base_timestamp=now, max_timestamp=now, producer_id=pid, producer_epoch=0,
                                 base_sequence=seq)

    appender = RawAppender(store)
    for seq in range(12):
        appender.append("c", 0, batch(seq, b"k%d" % (seq % 3)), "all")
    write_keys(store, "c", [b"k0", b"k1", b"k2"] + [b"f%d" % i for i in range(10)], now)
    lifecycle.compact(store, "c", clock=clock_at(now))
    mine = [h for h in leader_headers(store, "c") if h.producer_id == pid]
    assert len(mine) == 1 and mine[0].base_sequence == 11 and mine[0].records_count == 0  # its last batch, empty
    fresh = RawAppender(store)  # a restart: the producer states are rebuilt from the log
    with pytest.raises(OutOfOrderSequenceError):
        fresh.append("c", 0, batch(13, b"k0"), "all")
    end = store.partition("c", 0).high_watermark()
    assert fresh.append("c", 0, batch(12, b"k0"), "all").base_offset == end


def _spread_topic(store, topic="c", every=7):
    """A compacted topic cleaned with survivors spread out: a key of its own every `every`th record."""
    store.create_topic(topic, 1, configs=COMPACTED)
    write_keys(store, topic, [b"u%d" % i if i % every == 0 else b"x" for i in range(60)], T0)
    lifecycle.compact(store, topic, clock=clock_at(NOW))
    return [(r.offset, r.key, r.value) for r in store.consumer(topic)]


@pytest.mark.slow
def test_catch_up_that_stopped_in_a_gap_goes_on_from_there(store, tmp_path):
    from klog.broker.replication import catch_up
    from klog.store.log import PartitionLog

    want = _spread_topic(store)
    leader = store.partition("c", 0).leader
    follower = PartitionLog(str(tmp_path / "c-0"), leader.config)
    os.makedirs(follower.directory)
    follower.open_for_write()
    try:
        gap = next(o for o, _, _ in want if o > 10) - 1  # an offset no batch holds
        assert gap not in {o for o, _, _ in want}
        assert catch_up(leader, follower, gap) < gap  # stops below the gap: the leader's next batch is above it
        end = catch_up(leader, follower, leader.log_end_offset)
        assert end == leader.log_end_offset
        got = [(r[0], r[2], r[3]) for fetched in PartitionReader(follower, 0, end) for fb in fetched.batches
               for r in fb.records()]
        assert got == want
    finally:
        follower.close()


def test_an_emptied_segment_is_recovered_and_the_log_goes_on(store, cli, data_dir):
    want = _spread_topic(store, every=12)
    folder = store.partition("c", 0).leader.directory
    empty = [n for n in sorted(os.listdir(folder)) if n.endswith(".log")
             and os.path.getsize(os.path.join(folder, n)) == 0][:-1]
    assert empty  # segments every batch of which went
    for name in empty:  # no index: the emptied segments are recovered from their (empty) logs
        for suffix in (".index", ".timeindex"):
            os.unlink(os.path.join(folder, name[:-len(".log")] + suffix))
    leader = store.partition("c", 0).leader
    for name in empty:  # Kafka's LogSegment.recover of an empty segment: nothing to cut, nothing wrong
        result = leader.segments[int(name[:-len(".log")])].recover()
        assert (result.valid_bytes, result.truncated_bytes, result.reason) == (0, 0, None)
    store.close()
    with klog.open(data_dir) as again:
        with again.producer() as p:
            p.send("c", b"after", key=b"k", partition=0, timestamp=T0 + 100)
        assert [(r.offset, r.key, r.value) for r in again.consumer("c")] == [*want, (60, b"k", b"after")]
        assert again.partition("c", 0).log_start_offset() == 0
    assert cli("verify").exit_code == 0
    assert sorted(n for n in os.listdir(folder) if n.endswith(".log")
                  and os.path.getsize(os.path.join(folder, n)) == 0)[:len(empty)] == empty


@pytest.mark.slow
def test_confluent_kafka_reads_the_cleaned_log_through_serve_from_anywhere(kafka_server):
    ck = pytest.importorskip("confluent_kafka")
    want = _spread_topic(kafka_server.store)
    offsets = [o for o, _, _ in want]
    for start in (0, 3, offsets[1] - 1, offsets[1]):
        consumer = ck.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": f"g{start}",
                                "enable.partition.eof": True, "enable.auto.commit": False})
        consumer.assign([ck.TopicPartition("c", 0, start)])
        got = poll_to_end(consumer, 20)
        assert got == [w for w in want if w[0] >= start], start


def test_a_cleaned_topic_set_to_delete_afterwards_still_reads_whole(store, cli):
    """Kafka lets cleanup.policy go from compact to delete; the gaps the cleaner left stay, and so
    must every reader's acceptance of them (the folder keeps a klog-cleaned marker)."""
    want = _spread_topic(store)
    store.alter_topic("c", set_configs={"cleanup.policy": "delete"})
    assert [(r.offset, r.key, r.value) for r in store.consumer("c")] == want
    with store.producer() as p:
        p.send("c", b"after", key=b"k", partition=0, timestamp=T0 + 100)
    assert [(r.offset, r.key, r.value) for r in store.consumer("c", start="1")] == [*want[1:], (60, b"k", b"after")]
    r = cli("verify")
    assert r.exit_code == 0, r.out

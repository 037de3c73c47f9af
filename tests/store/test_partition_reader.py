"""The one read cursor (klog/store/reader.py): every reader hands out exactly the records in its
range, never records below the log start, and moves past what it read."""

from __future__ import annotations

from klog.store.reader import PartitionReader


def _fill(store, topic: str, batches: int, per_batch: int) -> None:
    store.create_topic(topic, partitions=1)
    with store.producer() as producer:
        for b in range(batches):
            producer.send_values(topic, [b"v%d-%d" % (b, i) for i in range(per_batch)])
            producer.flush()


def test_a_range_that_starts_and_ends_inside_batches_holds_exactly_its_records(store):
    _fill(store, "t", 5, 10)
    part = store.partition("t", 0)
    reader = PartitionReader(part, 13, 37, max_bytes=100)  # small fetches: several reads
    offsets, values = [], []
    for fetched in reader:
        offsets += [r[0] for _, records in fetched.record_runs() for r in records]
        values += fetched.values()
    assert offsets == list(range(13, 37))
    assert values == [b"v%d-%d" % (o // 10, o % 10) for o in range(13, 37)]
    assert reader.offset == 37 and reader.fetch() is None


def test_a_replica_read_by_the_cursor_stops_at_its_bound(store):
    _fill(store, "t", 3, 4)
    leader = store.partition("t", 0).leader
    got = [fb.header.base_offset for fetched in PartitionReader(leader, 0, 8, max_bytes=1) for fb in fetched.batches]
    assert got == [0, 4]


def test_records_below_the_log_start_are_never_handed_out_even_while_their_segment_exists(store):
    _fill(store, "t", 5, 10)
    consumer = store.consumer("t")  # positioned at 0 before the log start moves
    store.delete_records("t", before_offset=25)
    assert store.partition("t", 0).leader.bases == [0]  # the segment holding 0..24 is still there
    assert [r.offset for r in consumer] == list(range(25, 50))


def test_the_values_path_gives_what_the_record_path_gives(store):
    _fill(store, "t", 4, 5)
    with store.producer() as producer:
        producer.send("t", None)  # a null value
    records = list(store.consumer("t", start="7"))
    chunks = list(store.consumer("t", start="7").value_chunks(b"NULL"))
    assert [v for chunk in chunks for v in chunk] == [b"NULL" if r.value is None else r.value for r in records]
    assert [r.offset for r in records] == list(range(7, 21))


def test_a_segment_vanishing_under_a_time_lookup_is_asked_again_then_an_error(store, monkeypatch):
    import pytest

    from klog.errors import StorageError
    from klog.store.log import PartitionLog

    _fill(store, "t", 2, 5)
    part = store.partition("t", 0)
    real = PartitionLog.offset_for_timestamp
    calls = []

    def vanishing(self, timestamp, upper, fail_times):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) <= fail_times:
            raise FileNotFoundError(2, "No such file or directory", self.directory + "/00000000000000000000.log")
        return real(self, timestamp, upper)

    monkeypatch.setattr(PartitionLog, "offset_for_timestamp", lambda self, t, u: vanishing(self, t, u, 1))
    assert part.offset_for_timestamp(0) == 0  # retention raced the lookup once: asked again
    calls.clear()
    monkeypatch.setattr(PartitionLog, "offset_for_timestamp", lambda self, t, u: vanishing(self, t, u, 99))
    with pytest.raises(StorageError, match="keeps vanishing"):  # never "no record at or after that time"
        part.offset_for_timestamp(0)


def test_spark_executor_reads_its_range_and_fails_on_data_loss_when_asked(store, data_dir):
    import pytest

    pytest.importorskip("pyarrow")
    from klog.errors import OffsetOutOfRangeError
    from klog.spark.arrow import arrow_schema, read_range

    _fill(store, "t", 5, 10)
    batches = list(read_range(data_dir, "t", 0, 13, 45, True, arrow_schema()))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(13, 45))
    store.delete_records("t", before_offset=20)
    kept = list(read_range(data_dir, "t", 0, 13, 45, False, arrow_schema()))
    assert [o for b in kept for o in b.column("offset").to_pylist()] == list(range(20, 45))
    with pytest.raises(OffsetOutOfRangeError, match="below its log start offset 20"):
        list(read_range(data_dir, "t", 0, 13, 45, True, arrow_schema()))


def test_a_consume_of_many_small_batches_lists_folders_and_reads_metadata_per_fetch_not_per_batch(
        data_dir, monkeypatch):
    import collections
    import os

    import klog
    from klog.meta.topics import TopicsMeta

    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=1, configs={"segment.bytes": "8000"})
        with store.producer() as producer:
            for i in range(600):  # 600 one-record batches over ~13 segments
                producer.send_values("t", [b"%0100d" % i])
                producer.flush()
    calls: collections.Counter = collections.Counter()

    def counted(obj, name):  # noqa: ANN001, ANN202
        real = getattr(obj, name)
        monkeypatch.setattr(obj, name, lambda *a, **k: calls.update([name]) or real(*a, **k))

    counted(os, "listdir")
    counted(TopicsMeta, "get")
    counted(TopicsMeta, "find")
    with klog.open(data_dir) as store:
        calls.clear()
        assert len(store.partition("t", 0).leader.bases) > 10  # opening it: one listing, one metadata read
        values = [v for chunk in store.consumer("t").value_chunks() for v in chunk]
        group_values = []
        with store.group_consumer("g", "t", follow=False) as group:
            for chunk in group.value_batches():
                group_values += [v for _, vs, _ in chunk for v in vs]
    assert values == group_values == [b"%0100d" % i for i in range(600)]
    assert 1 <= calls["listdir"] <= 4 and 1 <= calls["get"] + calls["find"] <= 6, calls


def _merged_values_and_records(store, start: str, max_bytes: int):
    consumer = store.consumer("m", start=start)
    for c in consumer.cursors:
        c.max_bytes = max_bytes  # small fetches: runs cross fetch boundaries
    values = [v for chunk in consumer.value_chunks(b"NULL") for v in chunk]
    return values, [b"NULL" if r.value is None else r.value for r in store.consumer("m", start=start)]


def test_several_partitions_values_come_in_the_order_of_their_merged_records(store):
    """The values-only path of a multi-partition consume (no Record objects) keeps the record
    path's heapq.merge order exactly: ties to the lower partition, a partition whose timestamps
    go back in time, null values, a start inside batches, runs across fetches."""
    import random

    rng = random.Random(18)
    store.create_topic("m", partitions=4)
    with store.producer() as producer:
        for b in range(40):
            p = rng.randrange(4)
            base = 1_000 + b // 3  # many ties across partitions
            for i in range(rng.randrange(1, 30)):
                ts = base + rng.choice([0, 0, 1, 2, -1]) if p in (0, 3) else base + i // 7  # p0, p3: not in time order
                producer.send("m", None if i % 11 == 5 else b"%d-%d-%d" % (p, b, i), partition=p, timestamp=ts)
            producer.flush()
    for start in ("beginning", "-7", "3"):
        for max_bytes in (1, 300, 1 << 20):
            values, expected = _merged_values_and_records(store, start, max_bytes)
            assert values == expected, (start, max_bytes)
    assert len(_merged_values_and_records(store, "beginning", 1 << 20)[0]) == sum(
        p.high_watermark() for p in (store.partition("m", k) for k in range(4)))

"""The producer's bulk path (send_keyed / send_values, what `klog produce` uses for lines) puts
records where the per-record `send` would, in input order per partition."""

from __future__ import annotations

import pytest

from klog.client.partitioner import partition_for_key
from klog.errors import RecordTooLargeError, UsageError


def _by_partition(store, topic: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    with store.consumer(topic, merge=False) as consumer:
        for r in consumer:
            out.setdefault(r.partition, []).append((r.key, r.value))
    return out


def test_keys_land_where_the_partitioner_puts_them_in_order(store) -> None:
    store.create_topic("t", partitions=5)
    pairs = [(b"k%d" % (i % 37), b"v%d" % i) for i in range(3000)]
    with store.producer(batch_size=2000) as producer:  # small batches: many writes per partition
        producer.send_keyed("t", pairs[:1000])
        producer.send_keyed("t", pairs[1000:])
    got = _by_partition(store, "t")
    want: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for k, v in pairs:
        want.setdefault(partition_for_key(k, 5), []).append((k, v))
    assert got == want


def test_keyless_records_among_keyed_ones_are_all_written_in_order(store) -> None:
    store.create_topic("t", partitions=3)
    pairs = [(None if i % 3 == 0 else b"k%d" % (i % 7), b"%d" % i) for i in range(2000)]
    with store.producer() as producer:
        producer.send_keyed("t", pairs)
    got = _by_partition(store, "t")
    assert sorted(v for rows in got.values() for _, v in rows) == sorted(v for _, v in pairs)
    order = {v: i for i, (_, v) in enumerate(pairs)}
    for p, rows in got.items():
        assert [order[v] for _, v in rows] == sorted(order[v] for _, v in rows), p
        assert all(k is None or partition_for_key(k, 3) == p for k, _ in rows)


def test_one_partition_and_explicit_partition(store) -> None:
    store.create_topic("one")
    store.create_topic("three", partitions=3)
    with store.producer() as producer:
        producer.send_keyed("one", [(b"a", b"1"), (b"b", b"2")])
        producer.send_keyed("three", [(b"a", b"1"), (b"b", b"2")], partition=2)
    assert _by_partition(store, "one") == {0: [(b"a", b"1"), (b"b", b"2")]}
    assert _by_partition(store, "three") == {2: [(b"a", b"1"), (b"b", b"2")]}


def test_a_record_too_large_stops_there_with_its_index(store) -> None:
    store.create_topic("big", configs={"max.message.bytes": "200"})
    pairs = [(b"k", b"a"), (b"k", b"b"), (b"k", b"x" * 300), (b"k", b"c")]
    with store.producer() as producer:
        with pytest.raises(RecordTooLargeError) as e:
            producer.send_keyed("big", pairs)
        assert e.value.index == 2
    assert _by_partition(store, "big") == {0: pairs[:2]}


def test_compacted_topic_refuses_a_keyless_record(store) -> None:
    store.create_topic("c", configs={"cleanup.policy": "compact"})
    with store.producer() as producer, pytest.raises(UsageError, match="needs a key"):
        producer.send_keyed("c", [(b"k", b"1"), (None, b"2")])


def test_send_values_checks_as_send_keyed(store) -> None:
    """send_values (the CLI's line mode) has its own loop: the same size limit, index and refusal."""
    store.create_topic("big", configs={"max.message.bytes": "200"})
    store.create_topic("c", configs={"cleanup.policy": "compact"})
    store.create_topic("three", partitions=3)
    with store.producer() as producer:
        with pytest.raises(RecordTooLargeError) as e:
            producer.send_values("big", [b"a", b"b", b"x" * 300, b"c"])
        assert e.value.index == 2
        with pytest.raises(UsageError, match="needs a key"):
            producer.send_values("c", [b"1"])
        producer.send_values("three", [b"%d" % i for i in range(500)])
    assert _by_partition(store, "big") == {0: [(None, b"a"), (None, b"b")]}
    got = _by_partition(store, "three")
    assert sorted(v for rows in got.values() for _, v in rows) == sorted(b"%d" % i for i in range(500))
    assert all([int(v) for _, v in rows] == sorted(int(v) for _, v in rows) for rows in got.values())


def test_sent_records_among_bulk_ones_learn_their_offsets(store) -> None:
    """send() and the bulk paths share a partition's batch: each PendingRecord gets its own offset."""
    store.create_topic("m")
    with store.producer() as producer:
        producer.send_values("m", [b"a"] * 3)
        first = producer.send("m", b"x")
        producer.send_keyed("m", [(b"k", b"b"), (b"k", None)])
        second = producer.send("m", b"y", key=b"k")
    assert (first.offset, second.offset) == (3, 6)
    assert _by_partition(store, "m") == {0: [(None, b"a")] * 3 + [(None, b"x"), (b"k", b"b"), (b"k", None),
                                             (b"k", b"y")]}


def test_tombstones_and_keyless_records_in_a_large_bulk_send(store) -> None:
    """None keys and values (the sizes' slower path) in a send big enough to pause the GC."""
    store.create_topic("t", partitions=4)
    pairs = [(None if i % 5 == 0 else b"k%d" % (i % 11), None if i % 7 == 0 else b"%d" % i) for i in range(3000)]
    with store.producer(batch_size=4000) as producer:
        producer.send_keyed("t", pairs)
    got = _by_partition(store, "t")
    assert sorted(map(repr, (r for rows in got.values() for r in rows))) == sorted(map(repr, pairs))
    assert all(k is None or partition_for_key(k, 4) == p for p, rows in got.items() for k, _ in rows)


def test_each_batch_header_carries_its_records_largest_timestamp(store) -> None:
    """The producer keeps each batch's largest timestamp as records are added (send() and the bulk
    paths mixed, a bulk send spread over several batches): the header says what a scan would."""
    store.create_topic("ts")
    with store.producer(batch_size=300) as producer:  # small batches: a bulk send spans several
        producer.send("ts", b"a", timestamp=5_000)
        producer.send("ts", b"b", timestamp=3_000)
        producer.send_values("ts", [b"c" * 40] * 20, timestamp=4_000)
        producer.send_keyed("ts", [(b"k", b"d")], timestamp=9_000)
        producer.send("ts", b"e", timestamp=2_000)
    batches = store.partition("ts", 0).read(0, 1 << 20)
    assert len(batches) > 3
    for fetched in batches:
        assert fetched.header.max_timestamp == max(r[1] for r in fetched.records())


def test_send_values_cuts_the_batches_send_keyed_cuts(store) -> None:
    """The one-partition values path sizes its batches from running totals of the lengths; the
    keyed path from a size per record: the same records make the same batches."""
    import random

    rng = random.Random(3)
    values = [b"v" * rng.randrange(0, 300) for _ in range(5000)]
    store.create_topic("a")
    store.create_topic("b")
    for topic in ("a", "b"):
        with store.producer(batch_size=7000) as producer:
            for start in range(0, len(values), 700):  # calls that end mid-batch
                chunk = values[start:start + 700]
                if topic == "a":
                    producer.send_values(topic, chunk, headers=[("h", b"x")], timestamp=1_000)
                else:
                    producer.send_keyed(topic, [(None, v) for v in chunk], headers=[("h", b"x")], timestamp=1_000)

    def cuts(topic: str) -> list[tuple[int, int]]:
        return [(b.header.base_offset, b.header.last_offset) for b in store.partition(topic, 0).read(0, 1 << 30)]

    assert len(cuts("a")) > 10
    assert cuts("a") == cuts("b")
    assert [r.value for r in store.consumer("a")] == values


def test_a_batch_larger_than_estimated_is_split_to_fit_max_message_bytes(store) -> None:
    """Header keys are estimated by their length in characters: two-byte ones make the encoded
    batch (taken whole from the compiled builder) larger than max.message.bytes; it is split into
    batches that fit, every record once, in order."""
    store.create_topic("t", configs={"max.message.bytes": "3000"})
    headers = [("é" * 40, b"v")]
    with store.producer() as producer:
        for i in range(100):
            producer.send("t", b"%03d" % i, key=b"k", headers=headers)
    batches = list(store.partition("t", 0).read(0, 1 << 30))
    assert len(batches) > 1 and max(fetched.header.size for fetched in batches) <= 3000
    got = [value for fetched in batches for _, _, _, value, _ in fetched.records()]
    assert got == [b"%03d" % i for i in range(100)]

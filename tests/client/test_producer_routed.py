"""send_keyed into a topic of many partitions routes each record straight into its partition's
compiled builder (Producer._send_routed): the same records at the same offsets as the general path,
batches within batch.size and max.message.bytes, and the general path wherever a record needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from klog.client.partitioner import partition_for_key
from klog.client.producer import Producer
from klog.errors import RecordTooLargeError
from klog.store import codec


def _partitions(store, topic: str, count: int) -> dict[int, list[tuple]]:
    out = {}
    for p in range(count):
        rows = []
        for fetched in store.partition(topic, p).read(0, 1 << 30):
            rows += [(offset, key, value, tuple(headers), ts) for offset, ts, key, value, headers in fetched.records()]
        out[p] = rows
    return out


def _batch_sizes(store, topic: str, count: int) -> list[int]:
    return [fetched.header.size for p in range(count) for fetched in store.partition(topic, p).read(0, 1 << 30)]


def _counted(producer: Producer) -> int:
    """What the producer's batches count against buffer.memory, and what its routes (their
    records since the batches were last brought up to date) count for them."""
    return (sum(b.charged for b in producer._batches.values())
            + sum(route.pending() for route in producer._routes.values()))


def _pairs(n: int, keys: int = 97) -> list[tuple[bytes, bytes | None]]:
    return [(b"k%d" % (i % keys), None if i % 13 == 0 else b"v%d-" % i + b"x" * (i % 70)) for i in range(n)]


@pytest.fixture
def routed_calls() -> Iterator[list[int]]:
    """How many records each send_keyed call's routed path (Producer._send_routed) took. A
    comparison of the routed path with the general one holds trivially where the routed path
    declined the records (they then took the general path twice): the tests say it took them."""
    calls: list[int] = []
    real = Producer._send_routed

    def counting(self: Producer, *args: object) -> int:
        calls.append(real(self, *args))
        return calls[-1]

    # (a context of its own: the tests' monkeypatch.undo() must not take it away)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Producer, "_send_routed", counting)
        yield calls


def _produce(store, topic: str, routed: bool, chunks: list, monkeypatch, **options) -> Producer:
    if not routed:
        monkeypatch.setattr(Producer, "_send_routed", lambda *a: False)
    with store.producer(**options) as producer:
        for chunk, headers in chunks:
            producer.send_keyed(topic, chunk, headers=headers, timestamp=1_700_000_000_000)
    monkeypatch.undo()
    return producer


def test_routed_records_land_where_the_general_path_puts_them(store, monkeypatch, routed_calls) -> None:
    pairs = _pairs(6000)
    chunks = [(pairs[i:i + 700], [("h", b"1")] if i % 1400 else None) for i in range(0, len(pairs), 700)]
    for topic, routed in (("routed", True), ("general", False)):
        store.create_topic(topic, partitions=16)
        _produce(store, topic, routed, chunks, monkeypatch, batch_size=3000)  # many batches per partition
    assert routed_calls == [len(chunk) for chunk, _ in chunks]  # every call routed, those with headers too
    got, want = _partitions(store, "routed", 16), _partitions(store, "general", 16)
    assert got == want
    assert all(partition_for_key(key, 16) == p for p, rows in got.items() for _, key, _, _, _ in rows)
    assert max(_batch_sizes(store, "routed", 16)) <= 3000


def test_routed_batches_fit_max_message_bytes(store) -> None:
    store.create_topic("small", partitions=8, configs={"max.message.bytes": "2000"})
    pairs = _pairs(5000)
    with store.producer() as producer:
        for i in range(0, len(pairs), 1000):
            producer.send_keyed("small", pairs[i:i + 1000])
    sizes = _batch_sizes(store, "small", 8)
    assert len(sizes) > 8 and max(sizes) <= 2000
    assert sum(len(rows) for rows in _partitions(store, "small", 8).values()) == 5000


def test_records_the_builder_refuses_take_the_general_path(store, monkeypatch, routed_calls) -> None:
    """A bytearray header value, a None key: not routed, still written as before."""
    pairs = _pairs(500)
    chunks = [(pairs[:200], None), (pairs[200:400], [("h", bytearray(b"x"))]), ([(None, b"n")] * 100, None),
              (pairs[400:], None)]
    for topic, routed in (("routed", True), ("general", False)):
        store.create_topic(topic, partitions=4)
        _produce(store, topic, routed, chunks, monkeypatch)
    assert routed_calls == [200, 0, 0, 100]
    got, want = _partitions(store, "routed", 4), _partitions(store, "general", 4)
    assert sum(map(len, got.values())) == sum(map(len, want.values())) == 600
    # (keyless records go where the sticky partitioner picks, at random: compared by partition
    # without them, and the keyed ones' order)
    assert ({p: [r[1:] for r in rows if r[1] is not None] for p, rows in got.items()}
            == {p: [r[1:] for r in rows if r[1] is not None] for p, rows in want.items()})


def test_per_record_sends_and_routed_ones_share_batches_in_order(store) -> None:
    store.create_topic("t", partitions=4)
    pairs = _pairs(400, keys=11)
    with store.producer() as producer:
        first = [producer.send("t", value, key=key) for key, value in pairs[:50]]
        producer.send_keyed("t", pairs[50:350])
        last = [producer.send("t", value, key=key) for key, value in pairs[350:]]
    got = _partitions(store, "t", 4)
    for p, rows in got.items():
        want = [(k, v) for k, v in pairs if partition_for_key(k, 4) == p]
        assert [(key, value) for _, key, value, _, _ in rows] == want
        assert [offset for offset, *_ in rows] == list(range(len(rows)))
    for sent, (key, value) in zip(first + last, pairs[:50] + pairs[350:], strict=True):
        assert got[sent.partition][sent.metadata.offset][1:3] == (key, value)


def test_what_the_producer_counts_against_buffer_memory_is_given_back(store) -> None:
    store.create_topic("t", partitions=32)
    producer = Producer(store, acks="0", buffer_memory=40_000)
    pairs = _pairs(20_000)
    for i in range(0, len(pairs), 1000):
        producer.send_keyed("t", pairs[i:i + 1000])
        assert producer._buffered <= 40_000 + 1000 * 150  # at most one call's records past it
        assert producer._buffered == _counted(producer)
    producer.flush()
    assert producer._buffered == 0 and not producer._batches
    assert sum(len(rows) for rows in _partitions(store, "t", 32).values()) == 20_000


def test_a_routed_batch_decodes_to_what_was_sent() -> None:
    """The section a RecordsBuilder holds after appends straight through `append` decodes back."""
    builder = codec.RecordsBuilder()
    builder.add([(b"a", b"1", (), 5)] * 64)
    assert builder.go_fast()
    for i in range(10):
        builder.append(builder.count, 7, b"k%d" % i, b"v", [])
        builder.appended(builder.count + 1)
    records = builder.records(builder.section())
    assert records[64:] == [(b"k%d" % i, b"v", [], 7) for i in range(10)]


def test_an_interrupted_routed_send_leaves_whole_batches(store, monkeypatch) -> None:
    """Ctrl-C in the middle of a routed call (here: as it starts a new batch): every batch counts
    the records its builder holds, so what a flush then writes decodes, and is the input's first
    records, in order."""
    store.create_topic("t", partitions=8)
    pairs = [(b"k%d" % (i % 29), b"%05d" % i + b"x" * 60) for i in range(3000)]
    calls = []
    real = Producer._slot

    def interrupting(self, *args):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 40:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(Producer, "_slot", interrupting)
    producer = Producer(store, batch_size=1000)  # small batches: new ones all along the call
    with pytest.raises(KeyboardInterrupt):
        producer.send_keyed("t", pairs)
    monkeypatch.undo()
    producer.flush()
    got = sorted(int(value[:5]) for rows in _partitions(store, "t", 8).values() for _, _, value, _, _ in rows)
    assert 100 < len(got) < 3000
    assert got == list(range(len(got)))


def test_bytes_like_values_are_routed_as_the_general_path_writes_them(store, monkeypatch, routed_calls) -> None:
    pairs = [(b"k%d" % (i % 7), bytearray(b"v%d" % i) if i % 2 else memoryview(b"w%d" % i)) for i in range(400)]
    for topic, routed in (("routed", True), ("general", False)):
        store.create_topic(topic, partitions=4)
        _produce(store, topic, routed, [(pairs, None)], monkeypatch)
    assert routed_calls == [400]
    assert _partitions(store, "routed", 4) == _partitions(store, "general", 4)


def test_routed_calls_between_other_sends_and_writes_keep_every_batch_whole(store) -> None:
    """A routed call reuses the slots the last one left (_routes) only while nothing else touched
    the batches: send(), a general-path call, a flush or buffer.memory writing some in between
    make it set them up again; every record lands once, in order per partition, at consecutive
    offsets, and a flush leaves no batch referenced."""
    store.create_topic("t", partitions=6)
    pairs = _pairs(6000, keys=23)
    producer = Producer(store, acks="0", buffer_memory=120_000)
    sent = []
    for i in range(0, len(pairs), 500):
        chunk = pairs[i:i + 500]
        producer.send_keyed("t", chunk)
        sent += chunk
        assert producer._buffered == _counted(producer)
        if i % 1500 == 0:
            key, value = pairs[i]
            producer.send("t", value, key=key)  # per-record: into the batch a slot holds
            sent.append((key, value))
        if i % 2000 == 500:
            producer.send_keyed("t", chunk[:10], headers=[("h", bytearray(b"x"))])  # the general path
            sent += chunk[:10]
        if i % 2500 == 1000:
            producer.flush()
            assert not producer._routes and not producer._batches
    producer.flush()
    assert not producer._routes
    got = _partitions(store, "t", 6)
    for p, rows in got.items():
        assert [(key, value) for _, key, value, _, _ in rows] == [
            (k, v) for k, v in sent if partition_for_key(k, 6) == p]
        assert [offset for offset, *_ in rows] == list(range(len(rows)))


def _interrupt_after_append(n: int):  # noqa: ANN202
    """A tracer that raises KeyboardInterrupt in _send_routed right after its n-th append through a
    batch's builder, before the batch counts it (where a Ctrl-C can land too)."""
    import inspect
    import sys

    lines, first = inspect.getsourcelines(Producer._send_routed)
    target = first + next(i for i, line in enumerate(lines) if line.strip() == "counts[p] = n + 1")
    seen = [0]

    def local(frame, event, arg):  # noqa: ANN001, ANN202
        if event == "line" and frame.f_lineno == target:
            seen[0] += 1
            if seen[0] == n:
                raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):  # noqa: ANN001, ANN202
        return local if frame.f_code is Producer._send_routed.__code__ else None

    return tracer, sys


def test_ctrl_c_between_an_append_and_its_count_loses_and_repeats_nothing(store) -> None:
    """The builder holds the record the interrupted loop had not counted yet: its batch counts it,
    so a flush writes whole batches holding exactly the input's first records, in order."""
    pairs = [(b"k%d" % (i % 29), b"%05d" % i + b"x" * 60) for i in range(3000)]
    for n in (1, 700, 2500):
        topic = f"t{n}"
        store.create_topic(topic, partitions=8)
        producer = Producer(store, batch_size=1000)
        tracer, sys = _interrupt_after_append(n)
        before = sys.gettrace()  # (a coverage tool's, say: given back after)
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                producer.send_keyed(topic, pairs)
        finally:
            sys.settrace(before)
        producer.flush()
        got = sorted(int(value[:5]) for rows in _partitions(store, topic, 8).values() for _, _, value, _, _ in rows)
        assert producer.records_sent == len(got)
        assert got == list(range(len(got)))
        assert n < len(got) < 3000  # (records that started batches are not counted in n)


def test_a_record_past_max_message_bytes_mid_input_is_named_and_those_before_it_are_written(store) -> None:
    """Its size estimate decides, as for send(): here its encoded size would fit a batch, its
    estimate (what any record is checked against) does not."""
    store.create_topic("t", partitions=4, configs={"max.message.bytes": "1000"})
    big = (b"k1", b"b" * (1000 - 61 - 31 - 2 + 1))  # estimate: key + value + 31 bytes, one too many
    with store.producer() as producer:
        with pytest.raises(RecordTooLargeError):
            producer.send("t", big[1], key=big[0])
    pairs = [(b"k%d" % (i % 5), b"%05d" % i) for i in range(300)]
    pairs[200] = big
    producer = Producer(store)
    with pytest.raises(RecordTooLargeError) as raised:
        producer.send_keyed("t", pairs)
    assert raised.value.index == 200  # type: ignore[attr-defined]
    producer.flush()
    rows = _partitions(store, "t", 4)
    assert sorted(int(value) for r in rows.values() for _, _, value, _, _ in r) == list(range(200))
    for p, got in rows.items():
        assert [(k, v) for _, k, v, _, _ in got] == [(k, v) for k, v in pairs[:200] if partition_for_key(k, 4) == p]


def test_a_value_of_the_wrong_type_mid_input_is_named_and_the_producer_goes_on(store) -> None:
    """The records before it are buffered once and written by the next flush; it and those after
    are not (buffered, it would fail its whole batch's write)."""
    store.create_topic("t", partitions=4)
    pairs = [(b"k%d" % (i % 7), b"%05d" % i) for i in range(300)]
    for bad in (150, 0):  # (0: it was to start its partition's batch)
        wrong = list(pairs)
        wrong[bad] = (b"k3", "text")  # type: ignore[assignment]
        producer = Producer(store)
        with pytest.raises(TypeError) as raised:
            producer.send_keyed("t", wrong)
        assert raised.value.index == bad and "str" in str(raised.value)  # type: ignore[attr-defined]
        assert producer._buffered == sum(b.charged for b in producer._batches.values())
        assert all(b.records.count for b in producer._batches.values())
        producer.send_keyed("t", pairs[bad + 1:])
        producer.flush()
        assert producer.records_sent == len(pairs) - 1
    rows = _partitions(store, "t", 4)
    want = [v for k, v in pairs[:150] + pairs[151:] + pairs[1:]]
    assert sorted(v for r in rows.values() for _, _, v, _, _ in r) == sorted(want)
    for p, got in rows.items():
        assert [v for _, _, v, _, _ in got] == [v for k, v in pairs[:150] + pairs[151:] + pairs[1:]
                                                if partition_for_key(k, 4) == p]


def test_routed_batches_with_tombstones_stay_within_max_message_bytes_and_hold_every_record_once(store) -> None:
    store.create_topic("t", partitions=6, configs={"max.message.bytes": "1500"})
    pairs = _pairs(4000, keys=31)
    with store.producer(batch_size=100_000) as producer:
        for i in range(0, len(pairs), 900):
            producer.send_keyed("t", pairs[i:i + 900])
    sizes = _batch_sizes(store, "t", 6)
    assert max(sizes) <= 1500
    assert sum(sizes) / len(sizes) > 1500 - 200  # (filled up to the limit, not a largest record short of it)
    rows = _partitions(store, "t", 6)
    for p, got in rows.items():
        assert [(k, v) for _, k, v, _, _ in got] == [(k, v) for k, v in pairs if partition_for_key(k, 6) == p]
        assert [offset for offset, *_ in got] == list(range(len(got)))
    assert sum(v is None for r in rows.values() for _, _, v, _, _ in r) == sum(v is None for _, v in pairs)


def test_routed_batches_spanning_calls_carry_their_records_largest_timestamp(store) -> None:
    """Routed calls leave their batches' counts, sizes and timestamps to be brought up to date
    when another path needs them (a flush, a write when one fills, send()): each batch's header
    still says what a scan of its records would, with timestamps going back and forth between
    calls, and what the producer counts against buffer.memory is its batches' own."""
    store.create_topic("t", partitions=5)
    pairs = _pairs(3000, keys=41)
    stamps = [9_000, 4_000, 12_000, 12_000, 2_000, 30_000]
    producer = Producer(store, acks="0", batch_size=4000)  # (several calls a batch, some filling mid-call)
    sent = []
    for n, i in enumerate(range(0, len(pairs), 500)):
        chunk = pairs[i:i + 500]
        producer.send_keyed("t", chunk, timestamp=stamps[n])
        sent += [(key, value, stamps[n]) for key, value in chunk]
        assert producer._buffered == _counted(producer)
        if n == 3:
            key, value = pairs[0]
            producer.send("t", value, key=key, timestamp=1_000)  # (per-record: the batches brought up to date)
            sent.append((key, value, 1_000))
            assert producer._buffered == sum(b.charged for b in producer._batches.values())
    producer.flush()
    assert producer._buffered == 0
    batches = 0
    for p in range(5):
        rows = []
        for fetched in store.partition("t", p).read(0, 1 << 30):
            records = fetched.records()
            assert fetched.header.max_timestamp == max(r[1] for r in records)
            assert fetched.header.base_timestamp == records[0][1]
            rows += [(key, value, ts) for _, ts, key, value, _ in records]
            batches += 1
        assert rows == [r for r in sent if partition_for_key(r[0], 5) == p]
    assert batches > 10


def test_a_routed_call_takes_up_batches_other_sends_left_full_or_not(store) -> None:
    """Batches send() left, some too full for the next record: the routed call appends to those
    with room and writes the full ones first; every record once, in order, at consecutive
    offsets, each batch within batch.size."""
    store.create_topic("t", partitions=3)
    pairs = [(b"k%d" % (i % 7), b"%04d" % i + b"y" * 40) for i in range(900)]
    producer = Producer(store, batch_size=1500)
    sent = []
    big = [(b"k%d" % (i % 3), b"%04d" % i + b"z" * 686) for i in range(6)]  # (two of them: 1,463 bytes of 1,500)
    for key, value in pairs[:60] + big:  # (the big ones last: the batches they fill are left)
        producer.send("t", value, key=key)
        sent.append((key, value))
    producer.send_keyed("t", pairs[60:])
    sent += pairs[60:]
    producer.flush()
    for p in range(3):
        fetched = store.partition("t", p).read(0, 1 << 30)
        rows = [(offset, key, value) for batch in fetched for offset, _, key, value, _ in batch.records()]
        assert [(k, v) for _, k, v in rows] == [(k, v) for k, v in sent if partition_for_key(k, 3) == p]
        assert [offset for offset, _, _ in rows] == list(range(len(rows)))
        assert max(batch.header.size for batch in fetched) <= 1500


def test_a_wrong_value_in_a_later_routed_call_is_named_at_its_place_in_that_call(store) -> None:
    store.create_topic("t", partitions=4)
    pairs = [(b"k%d" % (i % 7), b"%05d" % i) for i in range(600)]
    wrong = list(pairs[300:])
    wrong[100] = (b"k3", 12345)  # type: ignore[assignment]
    producer = Producer(store)
    producer.send_keyed("t", pairs[:300])  # (its route kept for the next call)
    with pytest.raises(TypeError) as raised:
        producer.send_keyed("t", wrong)
    assert raised.value.index == 100  # type: ignore[attr-defined]
    producer.flush()
    assert producer.records_sent == 400
    got = sorted(v for p in range(4) for batch in store.partition("t", p).read(0, 1 << 30)
                 for _, _, _, v, _ in batch.records())
    assert got == sorted(v for _, v in pairs[:400])

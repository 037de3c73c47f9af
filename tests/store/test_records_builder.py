"""codec.RecordsBuilder (a producer batch encoded as its records arrive) writes the bytes of
encode_records over all its records at once, in Python alone: whatever the adds, a record the
compiled builder refuses midway, or records appended straight through its `append`."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.store import codec, fastrecords
from tests.store.test_codec import TS
from tests.store.test_fastrecords import records_st


def python_bytes(records: list) -> bytes:
    with fastrecords.python_only():
        return codec.encode_records(records, records[0][3])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, data=st.data())
def test_adds_in_any_pieces_write_the_bytes_of_one_encoding(records, data) -> None:
    assert fastrecords.available()  # loaded: even a few records go through the compiled builder
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=4)))
    refused = data.draw(st.none() | st.integers(0, len(records) - 1))
    if refused is not None:  # a bytearray header value: the compiled builder refuses it
        key, value, _, ts = records[refused]
        records[refused] = (key, value, [("h", bytearray(b"x"))], ts)
    fast_from = data.draw(st.integers(0, len(cuts) + 1))  # the piece from which they are encoded as they arrive
    builder = codec.RecordsBuilder()
    for piece, (start, stop) in enumerate(zip([0, *cuts], [*cuts, len(records)], strict=True)):
        if piece == fast_from:
            builder.go_fast()
        builder.add(records[start:stop])
    assert builder.count == len(records)
    section = builder.section()
    assert section == python_bytes(records)
    assert [r[:2] for r in builder.records(section)] == [r[:2] for r in records]


def test_added_records_are_encoded_at_the_end_unless_the_compiled_builder_started() -> None:
    records = [(b"k%d" % i, b"v" * i, (), TS + i) for i in range(200)]
    builder = codec.RecordsBuilder()
    builder.add(records[:3])
    assert builder.append is None  # kept as tuples: a one-partition batch is encoded once, when written
    builder.add(records[3:100])
    assert builder.go_fast()  # the kept ones move into the compiled builder
    builder.add(records[100:])
    assert builder.section() == python_bytes(records)


def test_appending_through_the_compiled_builder_and_adding_mix() -> None:
    """The producer's keyed path appends straight through `append` (offset delta `count`)."""
    records = [(b"k%d" % i, b"v%d" % i, (), TS + i % 3) for i in range(300)]
    builder = codec.RecordsBuilder()
    builder.add(records[:100])
    assert builder.go_fast()
    for key, value, _, ts in records[100:200]:
        builder.append(builder.count, ts, key, value, [])
        builder.appended(builder.count + 1)
    builder.add(records[200:])
    assert builder.section() == python_bytes(records)


def test_a_first_timestamp_of_minus_one_is_encoded_in_python() -> None:
    records = [(b"k", b"v", (), -1)] + [(b"k", b"v", (), TS)] * 100
    builder = codec.RecordsBuilder()
    builder.add(records)
    assert not builder.go_fast()
    assert builder.section() == python_bytes(records)


def test_a_builder_with_a_limit_takes_records_up_to_it_and_the_rest_are_kept_as_tuples() -> None:
    """A routed batch's builder refuses the record that would pass its limit (leaving itself as
    it was); records added to it through add() past that point are kept and encoded in Python:
    none is lost, the bytes are one encoding's."""
    records = [(b"k%d" % i, b"v" * 40, [], TS + i) for i in range(20)]
    builder = codec.RecordsBuilder()
    builder.add(records[:1])
    assert builder.go_fast(limit=300)
    builder.add(records[1:])
    assert builder.count == 20
    assert builder.append is None  # it stopped at its limit: the rest are tuples
    section = builder.section()
    assert section == python_bytes(records)


def test_held_records_counts_what_the_builder_holds_and_it_takes_more_after() -> None:
    fast = fastrecords.new_builder(limit=1000)
    assert fastrecords.held_records(fast) == 0
    for i in range(3):
        assert fast.append(i, TS, b"k", b"v", []) is not None
    assert fastrecords.held_records(fast) == 3
    assert fast.append(3, TS, b"k", b"v" * 2000, []) is None  # past the limit: refused, left as it was
    assert fast.append(3, TS, b"k", b"v", []) is not None
    assert fastrecords.held_records(fast) == 4
    assert fastrecords.new_builder(limit=10).append(0, TS, b"k", b"v" * 100, []) is not None  # the first, always

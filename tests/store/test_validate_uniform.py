"""validate.uniform_records_ok: the one-pass check of batches whose records share one shape
(klog serve's Produce path) accepts only what the store's strict decoder accepts."""

from __future__ import annotations

import random

import pytest

from klog.errors import CorruptLogError, UnsupportedCodecError
from klog.store import codec
from klog.store.format import RECORDS_OFFSET
from klog.store.validate import record_structure_ok, records_problem, uniform_records_ok

BASE_TS = 1_700_000_000_000


def _batch(n: int, key: bytes | None, value: bytes | None, ts_step: int = 0) -> bytes:
    # timestamp deltas grow to 100 steps: one byte, then two (the bench's 5-ms linger spans some)
    return codec.encode_batch([(key, value, [], BASE_TS + ts_step * min(i, 100)) for i in range(n)], 0)


def _uniform(data: bytes, consecutive: bool = True) -> bool:
    header = codec.read_header(data)
    section, start, stop = codec.records_section(data, 0, header)
    return uniform_records_ok(section, start, stop, header.records_count, consecutive)


def _decodes_consecutive(data: bytes) -> bool:
    header = codec.read_header(data)
    try:
        records = codec.decode_batch_records(data, 0, header)
    except (CorruptLogError, UnsupportedCodecError):
        return False
    return [r[0] for r in records] == list(range(len(records)))


@pytest.mark.parametrize("n", [16, 64, 65, 8192, 9000])  # offset deltas of one, two and three bytes
@pytest.mark.parametrize(("key", "value"), [(None, b"x" * 100), (b"", b""), (b"k" * 10, None),
                                            (b"k" * 200, b"v" * 300)])
def test_batches_of_one_shape_pass_in_one_pass(n: int, key: bytes | None, value: bytes | None) -> None:
    data = _batch(n, key, value, ts_step=1)  # timestamp deltas of one and two bytes
    assert _uniform(data)
    assert records_problem(data, 0, codec.read_header(data), consecutive=True) is None


def test_other_batches_are_left_to_the_walk() -> None:
    mixed = codec.encode_batch([(None, b"x" * (100 + i % 2), [], BASE_TS) for i in range(100)], 0)
    with_headers = codec.encode_batch([(None, b"x", [("h", b"v")], BASE_TS) for _ in range(100)], 0)
    wide_ts = _batch(100, None, b"x", ts_step=100_000)  # timestamp deltas of three bytes and more
    for data in (mixed, with_headers, wide_ts):
        assert not _uniform(data)
        assert records_problem(data, 0, codec.read_header(data), consecutive=True) is None  # walk or decoder
    assert record_structure_ok(mixed, 0, codec.read_header(mixed), consecutive=True)


def test_offset_deltas_out_of_order_are_refused_for_clients_only() -> None:
    data = bytearray(_batch(100, None, b"x" * 10))
    first, second = RECORDS_OFFSET + 3, RECORDS_OFFSET + 3 + 17  # records 0 and 1: 17 bytes each
    assert (data[first], data[second]) == (0, 2)  # their offset deltas (zigzag 0 and 1)
    data[first], data[second] = 2, 0
    assert not _uniform(bytes(data))
    assert _uniform(bytes(data), consecutive=False)  # a compacted batch on disk may have any deltas


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_accepts_only_what_the_decoder_accepts(seed: int) -> None:
    """Damaged batches of one shape: whenever the one pass says valid, the strict decoder reads
    the same count of records with offsets 0, 1, 2, ...; undamaged ones all take the one pass."""
    rng = random.Random(seed)
    taken = 0
    for _ in range(150):
        key = rng.choice((None, b"", b"key-1"))
        data = bytearray(_batch(rng.randint(16, 200), key, rng.randbytes(rng.choice((0, 7, 100))),
                                ts_step=rng.choice((0, 1, 3))))
        clean = bytes(data)
        assert _uniform(clean)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(RECORDS_OFFSET, len(data))] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        damaged = bytes(data)
        if damaged != clean and _uniform(damaged):
            taken += 1
            assert _decodes_consecutive(damaged)
    assert taken < 150  # most damage is noticed (values' bytes are free: damage there stays valid)


def test_bytes_between_or_after_the_records_are_refused() -> None:
    section = _batch(20, None, b"x" * 10)[RECORDS_OFFSET:]  # 17 bytes a record
    for junk in (section + b"\0", section[:170] + b"\xff" + section[170:], section[:-1]):
        for consecutive in (True, False):
            assert not uniform_records_ok(junk, 0, len(junk), 20, consecutive)
    assert uniform_records_ok(section, 0, len(section), 20, False)
    assert not uniform_records_ok(section, 0, len(section), 19, False)  # the count must match too


def test_a_shape_changing_inside_the_batch_is_left_to_the_walk() -> None:
    # values of 100 then 101 bytes: the first record's shape, then another; and sizes that vary
    # around 100 bytes, filling about what 100-byte records would
    changing = codec.encode_batch([(None, b"x" * (100 if i < 50 else 101), [], BASE_TS) for i in range(100)], 0)
    rng = random.Random(7)
    varying = codec.encode_batch([(None, b"x" * rng.randint(80, 120), [], BASE_TS) for _ in range(500)], 0)
    for data in (changing, varying):
        header = codec.read_header(data)
        for consecutive in (True, False):
            assert not _uniform(data, consecutive)
        assert record_structure_ok(data, 0, header, consecutive=True)


def test_batches_over_the_record_cap_take_the_walk(monkeypatch) -> None:  # noqa: ANN001 - pytest fixture
    from klog.store import validate

    def refuse(*args: object) -> bool:
        raise AssertionError("the one pass was tried")

    data = _batch(validate.UNIFORM_MAX_RECORDS + 1, None, b"")
    monkeypatch.setattr(validate, "uniform_records_ok", refuse)
    assert record_structure_ok(data, 0, codec.read_header(data), consecutive=True)

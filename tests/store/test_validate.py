"""klog.store.validate: the validate-only record walk agrees with the store's decoder."""

from __future__ import annotations

import os
import random
import struct

import pytest

from klog.errors import CorruptLogError, UnsupportedCodecError
from klog.store import codec
from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET, LENGTH_OFFSET
from klog.store.validate import SegmentScan, high_attributes_record, record_structure_ok, records_problem


def _batch(rng: random.Random, n: int) -> bytes:
    records = []
    for i in range(n):
        key = None if rng.random() < 0.5 else rng.randbytes(rng.choice((0, 3, 200)))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 10, 100, 300)))
        headers = [("h", b"x"), ("", None), ("trace", rng.randbytes(20))][:rng.choice((0, 0, 1, 3))]
        records.append((key, value, headers, 1_700_000_000_000 + rng.choice((0, i, 5000 * i))))
    return codec.encode_batch(records, 0)


def _decodes(data: bytes, header) -> bool:  # noqa: ANN001 - BatchHeader
    try:
        records = codec.decode_batch_records(data, 0, header)
    except (CorruptLogError, UnsupportedCodecError):
        return False
    return [r[0] for r in records] == list(range(len(records)))


def test_plain_batches_take_the_fast_walk() -> None:
    for n in (1, 64, 65, 9000):  # offset deltas of one, two and three bytes
        data = codec.encode_batch([(None, b"v" * 100, [], 1000) for _ in range(n)], 0)
        assert record_structure_ok(data, 0, codec.read_header(data), consecutive=True)
    with_headers = codec.encode_batch([(b"k", b"v", [("trace", b"abc"), ("", None)], 1000)] * 3, 0)
    assert record_structure_ok(with_headers, 0, codec.read_header(with_headers), consecutive=True)


@pytest.mark.parametrize("seed", range(6))
def test_walk_accepts_only_what_the_decoder_accepts(seed: int) -> None:
    """Damage inside the records section: whenever the walk says valid, the decoder agrees
    (with consecutive offsets); and records_problem finds a problem exactly when the decoder does."""
    rng = random.Random(seed)
    print("seed", seed)
    for _ in range(300):
        data = bytearray(_batch(rng, rng.randint(1, 80)))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(61, len(data))] = rng.randrange(256)
        data = bytes(data)
        header = codec.read_header(data)
        ok = _decodes(data, header)
        if record_structure_ok(data, 0, header, consecutive=True):
            assert ok
        client_ok = ok and high_attributes_record(data, 0, header) is None
        assert (records_problem(data, 0, header, consecutive=True) is None) == client_ok


def test_offset_delta_problem_names_the_record() -> None:
    data = bytearray(codec.encode_batch([(None, b"v", [], 1000) for _ in range(3)], 0))
    # record layout: length, attributes, timestampDelta, offsetDelta: the second record's delta -> 0
    second = 61 + 1 + data[61] // 2
    assert data[second + 3] == 2
    data[second + 3] = 0
    problem = records_problem(bytes(data), 0, codec.read_header(bytes(data)), consecutive=True)
    assert problem is not None and problem.record_index == 1 and not problem.corrupt
    assert "record 1 has offset delta 0" in problem.text


def test_a_record_longer_than_its_fields_is_refused() -> None:
    """The first record's length one byte longer, with a byte after its fields: every later
    record still parses, but the record does not end where its fields do."""
    data = bytearray(codec.encode_batch([(None, b"v", [], 1000) for _ in range(3)], 0))
    body = data[61] // 2  # one-byte length varint (zigzag)
    data[61] += 2
    data[62 + body:62 + body] = b"\x00"
    struct.pack_into(">i", data, LENGTH_OFFSET, struct.unpack_from(">i", data, LENGTH_OFFSET)[0] + 1)
    header = codec.read_header(bytes(data))
    assert not _decodes(bytes(data), header)
    assert not record_structure_ok(bytes(data), 0, header, consecutive=True)
    problem = records_problem(bytes(data), 0, header, consecutive=True)
    assert problem is not None and "do not fill its declared length" in problem.text


def test_a_negative_header_key_length_is_refused() -> None:
    data = codec.encode_batch([(None, b"v", [("", b"x")], 1000)], 0)
    at = data.index(b"\x02\x00\x02x")  # one header: key length 0, value length 1, "x"
    bad = data[:at + 1] + b"\x01" + data[at + 2:]  # key length -1
    header = codec.read_header(bad)
    assert not _decodes(bad, header)
    assert not record_structure_ok(bad, 0, header, consecutive=True)
    problem = records_problem(bad, 0, header, consecutive=True)
    assert problem is not None and "negative header key size" in problem.text


def test_verify_names_a_crc_valid_batch_whose_records_are_malformed(klog_proc, data_dir) -> None:
    """The CRC vouches only for the bytes: `klog verify` walks the records too (the validator's
    SegmentScan) and names the batch, on one line per problem, exit 1."""
    for i in range(3):  # three one-record batches
        assert klog_proc("produce", "t", input=b"value-%d\n" % i).returncode == 0
    log = os.path.join(data_dir, "logs", "t-0", f"{0:020d}.log")
    with open(log, "rb") as f:
        data = bytearray(f.read())
    second = 12 + struct.unpack_from(">i", data, LENGTH_OFFSET)[0]
    end = second + 12 + struct.unpack_from(">i", data, second + LENGTH_OFFSET)[0]
    assert data[end - 1] == 0  # the second record's header count
    data[end - 1] = 2  # one header, which is not there
    struct.pack_into(">I", data, second + CRC_OFFSET, codec.crc32c(bytes(data[second + ATTRIBUTES_OFFSET:end])))
    with open(log, "wb") as f:
        f.write(data)
    r = klog_proc("verify")
    assert r.returncode == 1, r.stderr
    lines = [line for line in r.stdout.decode().splitlines() if "malformed records" in line]
    assert len(lines) == 1 and f"at position {second} (offset 1)" in lines[0], r.stdout


@pytest.mark.parametrize("chunk", [61, 100, 1000, 1 << 20])
def test_segment_scan_reads_in_chunks_and_stops_at_a_torn_tail(monkeypatch, chunk: int) -> None:
    """Batches of many sizes straddle the scan's read chunks (one larger than a chunk): every
    whole batch is yielded at its position, and a torn last batch is the problem named."""
    import klog.store.validate as validate_module

    monkeypatch.setattr(validate_module, "SCAN_CHUNK_BYTES", chunk)
    rng = random.Random(chunk)
    batches, offset = [], 0
    for _ in range(40):
        n = rng.randint(1, 5)
        batches.append(codec.encode_batch([(None, rng.randbytes(rng.choice((1, 50, 700))), [], 1000)] * n, offset))
        offset += n
    log = b"".join(batches)
    torn = log + batches[0][:40]
    scan = SegmentScan(lambda pos, n: torn[pos:pos + n], len(torn), 0, deep=True, gaps_ok=False)
    positions = [pos for pos, _ in scan]
    assert positions == [sum(map(len, batches[:i])) for i in range(len(batches))]
    assert scan.valid_bytes == len(log) and scan.next_offset == offset
    assert scan.problem == f"partial batch header at position {len(log)}"


def test_a_record_attributes_byte_with_the_high_bit_is_refused_from_clients_only() -> None:
    """The compiled reader reads a record's attributes byte as a varint, Kafka leaves it unused: a
    byte >= 0x80 would be read two ways, so a client's batch with one is refused (naming the
    record); a log that holds one is still valid to verify."""
    import crcmod.predefined

    from klog.broker.batches import check_batch
    from klog.errors import InvalidBatchError

    data = bytearray(codec.encode_batch([(b"k", b"v%d" % i, [], 1000 + i) for i in range(100)], 0))
    header = codec.read_header(bytes(data))
    section, start, _ = codec.records_section(bytes(data), 0, header)  # uncompressed: the batch itself
    length0, body0 = codec.decode_varint(section, start)  # record 0: its length, then its body
    body1 = codec.decode_varint(section, body0 + length0)[1]  # record 1's attributes byte
    data[body1] = 0xFF
    crc = crcmod.predefined.mkCrcFun("crc-32c")(bytes(data[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", data, CRC_OFFSET, crc)
    data = bytes(data)
    header = codec.read_header(data)
    assert high_attributes_record(data, 0, header) == 1
    assert not record_structure_ok(data, 0, header, consecutive=True)
    problem = records_problem(data, 0, header, consecutive=True)
    assert problem is not None and "record 1 has attributes byte" in problem.text
    assert records_problem(data, 0, header) is None  # on disk (verify, recovery): Kafka-valid
    with pytest.raises(InvalidBatchError, match="record 1 has attributes byte"):
        check_batch(data)

"""The compiled record reader (fast=True, klog/store/fastrecords.py) against the strict pure-Python
decoder: the same records and values on any batch, the same refusals (bar the documented leniency),
and the Python decoder taking over whenever the compiled one refuses or is missing."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog import errors
from klog.store import codec, compression, fastrecords
from klog.store.format import RECORD_BATCH_OVERHEAD
from klog.store.log import FetchedBatch
from tests.serve_helpers import broken_records_batch
from tests.store.test_codec import ALL_CODECS, BAD_RECORDS, GOLDEN, TS, V, make_batch, raw_record

# What the compiled reader accepts and the strict decoder refuses (fastrecords' docstring): varints
# of int32 fields longer than 5 bytes or wider than 32 bits.
LENIENT = {"offset-delta-wider-than-32-bits"}


@pytest.fixture(autouse=True, scope="module")
def every_batch_goes_fast() -> Iterator[None]:
    """Small test batches take the compiled path too (it normally starts at 64 records)."""
    saved = fastrecords.FAST_MIN_RECORDS
    fastrecords.FAST_MIN_RECORDS = 1
    yield
    fastrecords.FAST_MIN_RECORDS = saved


def strict_and_fast(buf, pos: int = 0) -> tuple[object, object]:
    """(strict, fast) outcomes for records, values and values with a null stand-in: the decoded
    lists, or the CorruptLogError class when refused."""
    header = codec.read_header(buf, pos)
    outcomes = []
    for fast in (False, True):
        try:
            outcomes.append((codec.decode_batch_records(buf, pos, header, fast=fast),
                             codec.decode_batch_values(buf, pos, header, fast=fast),
                             codec.decode_batch_values(buf, pos, header, b"", fast=fast)))
        except errors.CorruptLogError as e:
            outcomes.append(type(e))
    return outcomes[0], outcomes[1]


def test_the_compiled_reader_imports() -> None:
    assert fastrecords.available()  # aiokafka is a dependency: the fast path is the normal one


header_st = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=10))
# timestamps around the first record's, earlier ones too (negative deltas), and -1 (NO_TIMESTAMP)
record_st = st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=120),
                      st.lists(header_st, max_size=3), st.sampled_from([-1, 0, TS - 5000, TS, TS + 3, 2**45]))
records_st = st.lists(record_st, min_size=1, max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, codec_id=st.sampled_from(ALL_CODECS), base_offset=st.integers(0, 2**62),
       log_append=st.booleans(), where=st.sampled_from(["alone", "after", "before", "bytearray"]))
def test_random_batches_decode_alike(records, codec_id, base_offset, log_append, where) -> None:
    batch = codec.encode_batch(records, base_offset, codec=codec_id, timestamp_type=1 if log_append else 0,
                               log_append_time_ms=TS if log_append else None)
    buf, pos = {"alone": (batch, 0), "after": (GOLDEN + batch, len(GOLDEN)),
                "before": (batch + GOLDEN, 0), "bytearray": (bytearray(batch), 0)}[where]
    strict, fast = strict_and_fast(buf, pos)
    assert isinstance(strict, tuple)
    assert fast == strict
    assert [r[1] for r in strict[0]] == [TS if log_append else r[3] for r in records]


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
@pytest.mark.parametrize("codec_id", [compression.NONE, compression.GZIP], ids=["none", "gzip"])
def test_bad_records_are_refused_alike(name: str, codec_id: int) -> None:
    body, count = BAD_RECORDS[name]
    batch = make_batch(compression.compress(codec_id, body) if codec_id else body, count, attributes=codec_id)
    for buf in (batch, batch + GOLDEN):
        strict, fast = strict_and_fast(buf)
        assert strict is errors.CorruptLogError
        if name in LENIENT:
            assert isinstance(fast, tuple)  # documented: no Kafka client writes these
        else:
            assert fast is errors.CorruptLogError


def test_truncated_batch_is_refused_alike() -> None:
    batch = codec.encode_batch([(None, b"v" * 20, [], TS)] * 5)
    record = len(batch) // 5
    for cut in (1, record, 2 * record):  # mid-record and on record boundaries
        strict, fast = strict_and_fast(batch[:-cut])
        assert strict is fast is errors.CorruptLogError


def _attribute_positions(body: bytes) -> set[int]:
    """Where each record's attributes byte sits in an encoded records section (after its length).

    Walked in the section itself: a record's length varint and its deltas take more bytes there
    than in the record encoded alone, so positions summed from lone encodings drift."""
    positions, at = set(), 0
    while at < len(body):
        length, attributes_at = codec.decode_varint(body, at)
        positions.add(attributes_at)
        at = attributes_at + length
    return positions


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, data=st.data())
def test_damaged_records_are_refused_alike(records, data) -> None:
    """Bytes overwritten anywhere but a record's attributes byte (which the compiled reader reads
    as a varint: documented), the CRC made right again: both refuse, or both give the same."""
    body = bytearray(codec.encode_records(records, records[0][3]))
    skip = _attribute_positions(bytes(body))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body) - 1))
        if at not in skip:
            body[at] = data.draw(st.integers(0, 255))
    count = len(records) + data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    strict, fast = strict_and_fast(make_batch(bytes(body), count, base_ts=records[0][3]))
    if strict is errors.CorruptLogError and isinstance(fast, tuple):
        header = codec.read_header(make_batch(bytes(body), count))
        with pytest.raises(errors.CorruptLogError, match="varint"):  # the documented leniency only
            codec.decode_batch_records(make_batch(bytes(body), count), 0, header)
    else:
        assert fast == strict


def test_non_utf8_header_key_falls_back_to_python() -> None:
    """The compiled reader refuses a header key that is not UTF-8; klog keeps it (surrogateescape)."""
    body = raw_record(b"\x00", V(0), V(0), V(-1), V(1), b"v", V(1), V(2), b"\xff\xfe", V(-1))
    strict, fast = strict_and_fast(make_batch(body, 1))
    assert fast == strict
    assert strict[0][0][4] == [("\udcff\udcfe", None)]


def test_python_decodes_when_the_compiled_reader_is_missing(monkeypatch) -> None:
    batch = codec.encode_batch([(b"k", b"v", [("h", b"1")], TS), (None, None, [], TS - 1)])
    want = codec.decode_batch_records(batch, 0, codec.read_header(batch))
    monkeypatch.setattr(fastrecords, "_reader", False)
    assert codec.decode_batch_records(batch, 0, codec.read_header(batch), fast=True) == want


def test_reads_take_the_compiled_path(monkeypatch) -> None:
    calls = []
    real = fastrecords.values
    monkeypatch.setattr(fastrecords, "values", lambda *a: calls.append(1) or real(*a))
    batch = codec.encode_batch([(None, b"a", [], TS), (None, None, [], TS)])
    fetched = FetchedBatch(codec.read_header(batch), batch, 0, 0)
    assert fetched.values(b"-") == [b"a", b"-"]
    assert calls == [1]


def test_loading_the_reader_leaves_aiokafka_importable() -> None:
    """Only the extension module loads (not aiokafka's client, asyncio included), and a later
    `import aiokafka` still runs its __init__ and shares the same class."""
    script = (
        "import sys\n"
        "from klog.store import fastrecords\n"
        "assert fastrecords.available()\n"
        "assert 'asyncio' not in sys.modules and 'aiokafka.client' not in sys.modules, 'client loaded'\n"
        "import aiokafka\n"
        "from aiokafka.record._crecords import DefaultRecordBatch\n"
        "assert aiokafka.AIOKafkaConsumer and DefaultRecordBatch is fastrecords._reader\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout == "ok\n", done.stderr


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, as_list=st.booleans(), data=st.data())
def test_the_compiled_builder_writes_the_same_bytes(records, as_list, data) -> None:
    if as_list:
        records = [(k, v, list(h), ts) for k, v, h, ts in records]
    deltas = data.draw(st.none() | st.lists(st.integers(0, 2**31 - 1), min_size=len(records),
                                            max_size=len(records)).map(sorted))
    base = data.draw(st.sampled_from([records[0][3], TS]))
    fast = codec.encode_records(records, base, deltas)
    with fastrecords.python_only():
        assert fast == codec.encode_records(records, base, deltas)
    # and the common case does go through the builder
    assert (fastrecords.encode_records(records, base, deltas) is None) == (base != records[0][3] or base == -1)


def test_what_the_builder_cannot_take_is_encoded_in_python() -> None:
    for records in ([(None, b"v", [("h", bytearray(b"x"))], TS)],  # a bytearray header value
                    [(None, b"v", [("\udcff", None)], TS)],  # a key only surrogateescape encodes
                    [(b"k", b"v", [], -1), (b"k", b"v", [], 5)]):  # first timestamp -1: "none yet" to it
        assert fastrecords.encode_records(records, records[0][3], None) is None
        with fastrecords.python_only():
            want = codec.encode_batch(records)
        assert codec.encode_batch(records) == want
        header = codec.read_header(want)
        assert [r[3] for r in codec.decode_batch_records(want, 0, header)] == [b"v"] * len(records)


def test_commands_load_the_compiled_records_only_when_a_batch_is_big(data_dir) -> None:
    """`klog --help` and a consume of a few records never load aiokafka; a consume of a big batch
    loads the extension module and not aiokafka's client (asyncio)."""
    from tests.cli.test_startup import imported_modules

    assert imported_modules(["produce", "small"], data_dir, input=b"a\nb\n")[0] == 0
    for args in (["--help"], ["consume", "small"]):
        code, modules = imported_modules(args, data_dir)
        assert code == 0 and "klog.cli.session" in modules
        assert not {m for m in modules if m.startswith("aiokafka")}, args
    lines = b"".join(b"%d\n" % i for i in range(1000))  # one batch (the fixture lowered FAST_MIN_RECORDS here only)
    assert imported_modules(["produce", "big"], data_dir, input=lines)[0] == 0
    code, modules = imported_modules(["consume", "big"], data_dir)
    assert code == 0 and "<compiled-reader>" in modules
    assert "asyncio" not in modules and not {m for m in modules if m.startswith("aiokafka")}


def _records(i: int) -> tuple[bytes | None, bytes | None, list | None]:
    key = None if i % 3 == 0 else b"k%d" % i
    value = None if i % 7 == 0 else b"v%d-" % i + b"x" * (i % 50)
    headers = [("h", b"%d" % i), ("n", None)] if i % 2 else None
    return key, value, headers


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_batches_decode_the_same_fast_and_slow(kafka_server, data_dir, klog_proc, monkeypatch, compression):
    confluent = pytest.importorskip("confluent_kafka")
    monkeypatch.setattr(fastrecords, "FAST_MIN_RECORDS", 1)
    topic = f"c-{compression}"
    kafka_server.store.create_topic(topic)
    producer = confluent.Producer({"bootstrap.servers": kafka_server.bootstrap, "compression.type": compression,
                                   "linger.ms": 20, "message.timeout.ms": 20_000})
    for i in range(300):
        key, value, headers = _records(i)
        producer.produce(topic, value=value, key=key, headers=headers, partition=0)
        if i == 150:
            producer.flush(20)  # at least two batches
    assert producer.flush(20) == 0

    batches = 0
    for path in glob.glob(os.path.join(data_dir, "logs", f"{topic}-0", "*.log")):
        with open(path, "rb") as f:
            buf = f.read()
        pos = 0
        while pos < len(buf):
            header = codec.read_header(buf, pos)
            assert header.codec == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[compression]
            slow = codec.decode_batch_records(buf, pos, header, fast=False)
            assert codec.decode_batch_records(buf, pos, header, fast=True) == slow
            assert codec.decode_batch_values(buf, pos, header, fast=True) == \
                codec.decode_batch_values(buf, pos, header, fast=False)
            pos += header.size
            batches += 1
    assert batches >= 2

    out = klog_proc("consume", topic, "--json")
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert [r["offset"] for r in got] == list(range(300))
    for i, r in enumerate(got):
        key, value, headers = _records(i)
        assert r["key"] == (key.decode() if key is not None else None)
        assert r["value"] == (value.decode() if value is not None else None)
        assert len(r["headers"]) == (2 if headers else 0)


def test_consume_of_a_crc_valid_batch_with_broken_records_fails_in_one_line(klog_proc, data_dir):
    """On disk (written behind klog's back): the compiled reader must not hand out wrong records."""
    assert klog_proc("produce", "bad", input=b"".join(b"ok-%d\n" % i for i in range(100))).returncode == 0
    (path,) = glob.glob(os.path.join(data_dir, "logs", "bad-0", "*.log"))
    with open(path, "wb") as f:  # the same offsets 0..99, a CRC that checks, a record that does not
        f.write(broken_records_batch(100))
    out = klog_proc("consume", "bad")
    err = out.stderr.decode()
    assert out.returncode == 1, (out.returncode, out.stdout[:200], err)
    assert err.count("\n") == 1 and err.startswith("klog: ") and "Traceback" not in err
    assert b"value-" not in out.stdout  # no wrong records before the failure


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, routed=st.integers(0, 30))
def test_a_batch_taken_whole_from_the_builder_is_what_write_section_writes(records, routed) -> None:
    """RecordsBuilder.whole_batch (the producer's uncompressed create-time batches, with no copy):
    the bytes write_section writes around the Python encoder's section, CRC included, whether the
    records were kept as tuples or appended straight through the builder; or None where the
    builder cannot take them."""
    routed = min(routed, len(records) - 1)
    builder = codec.RecordsBuilder()
    builder.add(records[:len(records) - routed])
    if routed and builder.go_fast():
        for key, value, headers, ts in records[len(records) - routed:]:
            builder.append(builder.count, ts, key, value, list(headers))
            builder.appended(builder.count + 1)
    elif routed:
        builder.add(records[len(records) - routed:])
    max_ts = max(ts for *_, ts in records)
    with fastrecords.python_only():
        want = codec.write_section(codec.encode_records(records, records[0][3], None), len(records),
                                   base_timestamp=records[0][3], max_timestamp=max_ts)
    got = builder.whole_batch(max_ts)
    if got is None:
        assert fastrecords.encode_records(records, records[0][3], None) is None
        assert codec.write_section(builder.section(), len(records), base_timestamp=records[0][3],
                                   max_timestamp=max_ts) == want
    else:
        assert isinstance(got, bytearray) and got == want
        # the section is still there (never built again: that would rewrite the header the store
        # stamps), and decodes to the records (the producer's split of a batch past max.message.bytes)
        assert builder.section() == bytes(memoryview(want)[RECORD_BATCH_OVERHEAD:])
        assert builder.records(builder.section()) == [
            (key, value, list(headers), ts) for key, value, headers, ts in records]


def test_a_whole_batch_has_the_header_it_is_given_and_records_partly_in_python_are_not_taken_whole() -> None:
    """klog writes the header (the builder's build() and its CRC are never asked for): the max
    timestamp it is given is the batch's, as write_section writes it; records partly in Python:
    None, and the records section is still there whole."""
    records = [(b"k%d" % i, b"v" * i, [], TS + i) for i in range(70)]
    builder = codec.RecordsBuilder()
    builder.add(records)
    with fastrecords.python_only():
        section = codec.encode_records(records, TS, None)
    assert builder.whole_batch(TS + 100) == codec.write_section(section, 70, base_timestamp=TS,
                                                                max_timestamp=TS + 100)
    assert builder.section() == section
    mixed = codec.RecordsBuilder()
    mixed.add(records[:10])
    assert mixed.go_fast()
    mixed.add([(b"k", b"v", [("h", bytearray(b"x"))], TS)])  # refused by the builder: kept as a tuple
    assert mixed.whole_batch(TS + 9) is None

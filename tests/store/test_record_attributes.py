"""A record attributes byte >= 0x80 in a log imported from Kafka: Kafka reads the byte as an int8
and leaves it unused (shared/kafka-log-format.md, "Record"); aiokafka's compiled reader reads it as
a varint, which shifts the record's later fields. Every klog reader must give Kafka's answer."""

from __future__ import annotations

import gzip
import json
import os
import struct
import time

import crcmod.predefined
import pytest

from klog.store import codec
from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORDS_OFFSET
from klog.store.log import PartitionLog
from tests.kafka_files import write_segment

NOW = int(time.time() * 1000) - 60_000
COUNT = 64  # a batch the compiled reader takes (fastrecords.FAST_MIN_RECORDS)
KEY = b"\x01"  # read as the varint -1 (a null key) when the reader is one byte off


def _high_attributes_batch(base_offset: int) -> bytes:
    """COUNT records (key 0x01, value v<i>, one timestamp), every attributes byte 0x80, CRC-32C
    by an independent implementation. Read one byte off, each record still fills its length
    exactly (offset delta 1, key null, timestamp + i): a silent misreading, not a refusal."""
    data = bytearray(codec.encode_batch([(KEY, b"v%d" % i, [], NOW) for i in range(COUNT)], base_offset))
    section, at, _ = codec.records_section(bytes(data), 0, codec.read_header(bytes(data)))
    for _ in range(COUNT):
        length, body = codec.decode_varint(section, at)
        data[body] = 0x80
        at = body + length
    struct.pack_into(">I", data, CRC_OFFSET, crcmod.predefined.mkCrcFun("crc-32c")(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


def _gzipped(batch: bytes) -> bytes:
    """The same batch with its records section gzip-compressed (Python's gzip; CRC by crcmod):
    the compiled reader sees the decompressed records, so it would misread them alike."""
    body = gzip.compress(batch[RECORDS_OFFSET:])
    data = bytearray(batch[:RECORDS_OFFSET]) + body
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, 1)  # codec 1: gzip
    struct.pack_into(">i", data, 8, len(data) - 12)  # batchLength: the bytes after it
    struct.pack_into(">I", data, CRC_OFFSET, crcmod.predefined.mkCrcFun("crc-32c")(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


# Kafka's answer, (offset, timestamp, key, value) as the record's fields say
EXPECTED = [(i, NOW, KEY, b"v%d" % i) for i in range(COUNT)]


@pytest.fixture(params=["uncompressed", "gzip"])
def imported(cli, tmp_path, request):
    kafka_dir = tmp_path / "kafka-logs"
    batch = _high_attributes_batch(0)
    write_segment(str(kafka_dir / "odd-0"), 0, [batch if request.param == "uncompressed" else _gzipped(batch)])
    r = cli("dirs", "import", str(kafka_dir))
    assert r.exit_code == 0, r.stderr
    assert "offset 0 has a record attributes byte >= 0x80" in r.out + r.stderr
    return r


def test_the_batch_is_read_differently_by_the_compiled_reader_alone() -> None:
    """The premise: without the marker the compiled reader would answer differently."""
    batch = _high_attributes_batch(0)
    header = codec.read_header(batch)
    assert [r[:4] for r in codec.decode_batch_records(batch, 0, header)] == EXPECTED
    fast = codec.decode_batch_records(batch, 0, header, fast=True)
    assert [r[:4] for r in fast] != EXPECTED and fast[0][2] is None and fast[0][0] == 1
    gzipped = _gzipped(batch)
    header = codec.read_header(gzipped)
    assert [r[:4] for r in codec.decode_batch_records(gzipped, 0, header)] == EXPECTED
    assert [r[:4] for r in codec.decode_batch_records(gzipped, 0, header, fast=True)] == [r[:4] for r in fast]


def test_consume_json_dump_and_group_read_kafkas_answer(cli, imported) -> None:
    r = cli("consume", "odd", "-o", "earliest")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == [v for *_, v in EXPECTED]
    r = cli("consume", "odd", "-o", "earliest", "--json")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [(d["offset"], d["timestamp"], d["key"], d["value"]) for d in rows] == [
        (o, t, k.decode(), v.decode()) for o, t, k, v in EXPECTED]
    r = cli("consume", "odd", "-G", "g", "--json")
    assert r.exit_code == 0, r.stderr
    assert [json.loads(line)["offset"] for line in r.out.splitlines()] == list(range(COUNT))
    r = cli("dump", "odd")
    assert r.exit_code == 0, r.stderr
    assert f"| offset: 63 timestamp: {NOW} key: \\x01 headers: [] payload: v63" in r.out
    assert cli("verify").exit_code == 0


def test_the_python_api_reads_kafkas_answer(store, imported) -> None:
    with store.consumer("odd", start="earliest") as consumer:
        assert [(r.offset, r.timestamp, r.key, r.value) for r in consumer] == EXPECTED


def test_a_replica_caught_up_from_a_marked_log_is_marked_too(tmp_path) -> None:
    """Replica catch-up copies the batches as they are, so the copy needs the mark as well."""
    from klog.broker.replication import catch_up
    from klog.store.log import STRICT_RECORDS_MARKER

    leader_dir = str(tmp_path / "a" / "odd-0")
    write_segment(leader_dir, 0, [_high_attributes_batch(0)])
    leader, follower = PartitionLog(leader_dir), PartitionLog(str(tmp_path / "b" / "odd-0"))
    try:
        leader.open_for_write()
        leader.mark_strict_records()
        follower.open_for_write()
        assert catch_up(leader, follower, leader.log_end_offset) == COUNT
        assert os.path.exists(os.path.join(follower.directory, STRICT_RECORDS_MARKER))
        assert [r[:4] for fb in follower.read(0, COUNT) for r in fb.records()] == EXPECTED
        again = PartitionLog(follower.directory)  # another process: the mark is read from the folder
        assert [r[:4] for fb in again.read(0, COUNT) for r in fb.records()] == EXPECTED
        again.close()
    finally:
        leader.close()
        follower.close()


def test_sparks_arrow_reader_reads_kafkas_answer(imported, data_dir) -> None:
    pytest.importorskip("pyarrow")
    from klog.spark.arrow import arrow_schema, read_range

    batches = list(read_range(data_dir, "odd", 0, 0, COUNT, True, arrow_schema()))
    rows = [row for b in batches for row in b.to_pylist()]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(o, k, v) for o, _, k, v in EXPECTED]


def test_verify_finds_an_unmarked_log_and_repair_marks_it(cli, imported, store) -> None:
    """A log with such a record that import did not see (put in the store by another tool)."""
    from klog.store.log import STRICT_RECORDS_MARKER

    folder = store.partition("odd", 0).leader.directory
    os.unlink(os.path.join(folder, STRICT_RECORDS_MARKER))
    r = cli("verify")
    assert r.exit_code == 1 and "not marked for strict decoding (offset 0)" in r.out + r.stderr
    r = cli("verify", "--repair")
    assert "repaired: marked to be read with the strict decoder only" in r.out + r.stderr
    assert os.path.exists(os.path.join(folder, STRICT_RECORDS_MARKER))
    assert cli("verify").exit_code == 0
    r = cli("consume", "odd", "-o", "earliest", "--json")
    assert [json.loads(line)["key"] for line in r.out.splitlines()] == [KEY.decode()] * COUNT


def test_a_cluster_read_by_fetch_gives_kafkas_answer(imported, kafka_server) -> None:
    """Through a cluster klog cannot mark the log, so the Fetch reader checks each batch's
    attributes bytes before it lets the compiled reader take it: records, values and a merged
    read all give Kafka's answer (they gave offsets 1, 1, ..., null keys and shifted timestamps)."""
    from klog.client.remote.fetch_consumer import FetchConsumer
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget

    with RemoteStore(ClusterTarget(kafka_server.bootstrap, {})) as remote:
        with remote.consumer("odd", start="earliest") as consumer:
            assert isinstance(consumer, FetchConsumer)
            assert [(r.offset, r.timestamp, r.key, r.value) for r in consumer] == EXPECTED
        with remote.consumer("odd", start="earliest") as consumer:
            assert [v for chunk in consumer.value_chunks() for v in chunk] == [e[3] for e in EXPECTED]


def test_plain_attributes_walks_the_records_lengths() -> None:
    from klog.store import fastrecords

    plain = codec.encode_batch([(KEY, b"v" * size, [], NOW) for size in (1, 70, 200, 9000)])
    header = codec.read_header(plain)
    assert fastrecords.plain_attributes(plain, RECORDS_OFFSET, 3)  # 1- and 2-byte lengths
    assert not fastrecords.plain_attributes(plain, RECORDS_OFFSET, header.records_count)  # 8 KiB+: strict
    assert not fastrecords.plain_attributes(_high_attributes_batch(0), RECORDS_OFFSET, COUNT)
    assert not fastrecords.plain_attributes(plain[:RECORDS_OFFSET + 3], RECORDS_OFFSET, 3)  # cut


@pytest.mark.slow
def test_a_confluent_consumer_through_serve_reads_an_imported_high_attributes_log_as_kafka(cli, data_dir, tmp_path):
    """klog serve sends the imported segment's bytes as they are: librdkafka reads the attributes
    byte as Kafka does (int8, unused), so it gets Kafka's offsets, keys and timestamps, as local
    `consume --json` does."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from klog.server import Server
    from tests.kafka_files import write_segment
    from tests.store.test_record_attributes import EXPECTED, _high_attributes_batch

    write_segment(str(tmp_path / "kafka" / "odd-0"), 0, [_high_attributes_batch(0)])
    assert cli("dirs", "import", str(tmp_path / "kafka")).exit_code == 0
    local = [json.loads(line) for line in cli("consume", "odd", "--json").out.splitlines()]
    assert [(r["offset"], r["timestamp"], r["key"].encode(), r["value"].encode()) for r in local] == EXPECTED
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{server.port}", "group.id": "g",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["odd"])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(EXPECTED) and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    got.append((m.offset(), m.timestamp()[1], m.key(), m.value()))
        finally:
            consumer.close()
    assert got == EXPECTED

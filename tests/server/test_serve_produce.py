"""klog serve Produce edges with hand-made requests: validation, idempotence, acks=0, LogAppendTime."""

from __future__ import annotations

import struct
import time

import pytest

import klog
from klog.server import Server
from tests.serve_helpers import RawClient, batch, fixed_crc, produce, produce_request_fields

pytest.importorskip("kio")
import datetime

from kio.schema.errors import ErrorCode as E  # noqa: E402

from klog.store import codec, compression
from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORDS_OFFSET
from tests.serve_helpers import broken_records_batch


def values(data_dir: str, topic: str) -> list[bytes]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic)]


def test_corrupt_crc_and_truncated_batch_are_refused_and_nothing_is_written(kafka_server, data_dir):
    kafka_server.store.create_topic("c")
    good = batch([b"a", b"b"])
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with RawClient(kafka_server.port) as client:
        assert produce(client, "c", 0, bytes(bad))[0] == E.corrupt_message
        assert produce(client, "c", 0, good[:-3])[0] == E.corrupt_message
        assert produce(client, "c", 0, good + good)[0] == E.invalid_record
        assert produce(client, "c", 0, good) == (E.none, 0)  # the connection keeps serving
    assert values(data_dir, "c") == [b"a", b"b"]


def test_unknown_topic_and_partition(kafka_server):
    kafka_server.store.create_topic("one")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "one", 5, batch([b"x"]))[0] == E.unknown_topic_or_partition
        assert produce(client, "nope", 0, batch([b"x"]))[0] == E.unknown_topic_or_partition


def test_duplicate_batch_is_acknowledged_with_its_first_offset_and_written_once(kafka_server, data_dir):
    kafka_server.store.create_topic("idem")
    pid = 77
    with RawClient(kafka_server.port) as client:
        assert produce(client, "idem", 0, batch([b"plain"])) == (E.none, 0)
        first = batch([b"a", b"b"], producer_id=pid, epoch=0, sequence=0)
        assert produce(client, "idem", 0, first) == (E.none, 1)
        assert produce(client, "idem", 0, first) == (E.none, 1)  # a retry whose ack was lost
        nxt = batch([b"c"], producer_id=pid, epoch=0, sequence=2)
        assert produce(client, "idem", 0, nxt) == (E.none, 3)
        gap = batch([b"d"], producer_id=pid, epoch=0, sequence=9)
        assert produce(client, "idem", 0, gap)[0] == E.out_of_order_sequence_number
        assert produce(client, "idem", 0, batch([b"e"], producer_id=pid, epoch=0, sequence=3)) == (E.none, 4)
    assert values(data_dir, "idem") == [b"plain", b"a", b"b", b"c", b"e"]


def test_producer_state_survives_a_restart(data_dir):
    pid = 4242
    first = batch([b"a"], producer_id=pid, epoch=3, sequence=0)
    with Server(data_dir, listen=("127.0.0.1", 0)) as server:
        server.store.create_topic("restart")
        with RawClient(server.port) as client:
            assert produce(client, "restart", 0, first) == (E.none, 0)
    # a new server process rebuilds the state from the log's batch headers
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert produce(client, "restart", 0, first) == (E.none, 0)  # recognised as a duplicate
        old = batch([b"old"], producer_id=pid, epoch=2, sequence=1)
        assert produce(client, "restart", 0, old)[0] == E.invalid_producer_epoch
        assert produce(client, "restart", 0, batch([b"b"], producer_id=pid, epoch=3, sequence=1)) == (E.none, 1)
    assert values(data_dir, "restart") == [b"a", b"b"]


def test_acks_zero_gets_no_response_but_is_written(kafka_server, data_dir):
    kafka_server.store.create_topic("fire")
    with RawClient(kafka_server.port) as client:
        fields = produce_request_fields(9, "fire", 0, batch([b"x"]), acks=0)
        import io

        from kio.schema.produce.v9.request import ProduceRequest
        from kio.schema.request_header.v2.header import RequestHeader
        from kio.serial import entity_writer

        buf = io.BytesIO()
        entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1,
                                                        client_id="t"))
        entity_writer(ProduceRequest)(buf, ProduceRequest(**fields))
        client.send_raw(buf.getvalue())
        # the next request's answer is the first thing on the wire
        client.correlation = 1
        resp = client.send(18, 0)
        assert resp.error_code == E.none
    deadline = time.monotonic() + 5
    while values(data_dir, "fire") != [b"x"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert values(data_dir, "fire") == [b"x"]


def test_log_append_time_topic_stamps_the_batch(kafka_server, data_dir):
    kafka_server.store.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    with RawClient(kafka_server.port) as client:
        resp = client.send(0, 9, **produce_request_fields(9, "lat", 0, batch([b"x"], timestamp=1000)))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == E.none and p.log_append_time is not None
    stamped = int(p.log_append_time.timestamp() * 1000)
    assert before <= stamped <= int(time.time() * 1000)
    with klog.open(data_dir) as store:
        (record,) = list(store.consumer("lat"))
    assert record.timestamp == stamped


def test_topic_compression_type_recompresses(kafka_server, data_dir):
    kafka_server.store.create_topic("z", configs={"compression.type": "gzip"})
    with RawClient(kafka_server.port) as client:
        assert produce(client, "z", 0, batch([b"x" * 100, b"y"])) == (E.none, 0)
    with klog.open(data_dir) as store:
        (fetched,) = store.partition("z", 0).read(0)
    assert fetched.header.codec == 1  # gzip
    assert values(data_dir, "z") == [b"x" * 100, b"y"]


def test_init_producer_id_transactional_and_idempotent(kafka_server):
    from kio.static.primitive import i32Timedelta

    with RawClient(kafka_server.port) as client:
        resp = client.send(22, 4, transactional_id="tx", transaction_timeout=i32Timedelta.parse(
            datetime.timedelta(seconds=60)), producer_id=-1, producer_epoch=-1)
        assert resp.error_code == E.none and resp.producer_epoch == 0
        again = client.send(22, 4, transactional_id="tx", transaction_timeout=i32Timedelta.parse(
            datetime.timedelta(seconds=60)), producer_id=-1, producer_epoch=-1)
        assert (again.producer_id, again.producer_epoch) == (resp.producer_id, 1)  # the id kept, the epoch bumped
        resp = client.send(22, 4, transactional_id=None, transaction_timeout=i32Timedelta.parse(
            datetime.timedelta(seconds=60)), producer_id=-1, producer_epoch=-1)
        assert resp.error_code == E.none and resp.producer_id > 0 and resp.producer_epoch == 0


def test_struct_helpers_match():
    # the batch helper writes the idempotence fields where klog's header parser reads them
    from klog.store.codec import read_header

    h = read_header(batch([b"x"], producer_id=5, epoch=2, sequence=7))
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (5, 2, 7)
    assert struct.calcsize(">qhi") == 14


def test_list_offsets_max_timestamp_over_segments(kafka_server):
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsTopic

    store = kafka_server.store
    store.create_topic("mx", configs={"segment.bytes": "1024", "retention.ms": "-1"})  # many small segments
    stamps = [5_000 + (i * 37) % 61 for i in range(60)]  # the largest is in a middle segment
    with store.producer() as producer:
        for i, ts in enumerate(stamps):
            producer.send("mx", b"v%03d" % i, timestamp=1_000_000 + ts)
            producer.flush()
    assert len(store.partition("mx", 0).leader.bases) > 3
    with RawClient(kafka_server.port) as client:
        resp = client.send(2, 7, replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name="mx", partitions=(
            ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-3),)),))
    p = resp.topics[0].partitions[0]
    assert (p.error_code, p.timestamp, p.offset) == (E.none, 1_000_000 + max(stamps), stamps.index(max(stamps)))


def test_min_insync_replicas_above_the_isr_refuses_acks_all(kafka_server, data_dir):
    kafka_server.store.create_topic("isr", configs={"min.insync.replicas": "2"})  # one replica only
    with RawClient(kafka_server.port) as client:
        assert produce(client, "isr", 0, batch([b"x"]))[0] == E.not_enough_replicas
        resp = client.send(0, 9, **produce_request_fields(9, "isr", 0, batch([b"y"]), acks=1))
        assert resp.responses[0].partition_responses[0].error_code == E.none  # acks=1 does not need the ISR
    assert values(data_dir, "isr") == [b"y"]


def test_a_config_altered_by_another_process_applies_within_seconds(kafka_server, data_dir, monkeypatch):
    import klog.broker.batches

    monkeypatch.setattr(klog.broker.batches, "TOPIC_REFRESH_S", 0.2)
    kafka_server.store.create_topic("alt")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "alt", 0, batch([b"x" * 3000]))[0] == E.none
        with klog.open(data_dir) as other:
            other.alter_topic("alt", set_configs={"max.message.bytes": "1000"})
        time.sleep(0.3)
        assert produce(client, "alt", 0, batch([b"x" * 3000]))[0] == E.message_too_large


def test_topic_deleted_and_created_again_by_another_process(kafka_server, data_dir, monkeypatch):
    import klog.broker.batches

    monkeypatch.setattr(klog.broker.batches, "TOPIC_REFRESH_S", 0.1)
    kafka_server.store.create_topic("re")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "re", 0, batch([b"old"])) == (E.none, 0)
        with klog.open(data_dir) as other:
            other.delete_topic("re")
            other.create_topic("re")
        time.sleep(0.2)
        assert produce(client, "re", 0, batch([b"new"])) == (E.none, 0)  # into the new topic's files
    assert values(data_dir, "re") == [b"new"]


def test_unknown_codec_and_impossible_record_count_are_refused(kafka_server, data_dir):
    from klog.store.format import ATTRIBUTES_OFFSET, RECORDS_COUNT_OFFSET

    kafka_server.store.create_topic("bad")

    def patched(offset: int, fmt: str, value: int) -> bytes:
        data = bytearray(batch([b"a", b"b"]))
        struct.pack_into(fmt, data, offset, value)
        if offset == RECORDS_COUNT_OFFSET:  # keep count and last offset delta consistent
            struct.pack_into(">i", data, 23, value - 1)

        struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
        return bytes(data)

    with RawClient(kafka_server.port) as client:
        assert produce(client, "bad", 0, patched(ATTRIBUTES_OFFSET, ">h", 6))[0] == E.invalid_record
        assert produce(client, "bad", 0, patched(RECORDS_COUNT_OFFSET, ">i", 5000))[0] == E.corrupt_message
    assert values(data_dir, "bad") == []


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_at_every_advertised_version(kafka_server, data_dir, version):
    kafka_server.store.create_topic("pv")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "pv", 0, batch([b"a", b"b"]), version=version) == (E.none, 0)
        assert produce(client, "pv", 0, batch([b"c"]), version=version) == (E.none, 2)
    assert values(data_dir, "pv") == [b"a", b"b", b"c"]


def test_malformed_records_inside_a_crc_valid_batch_are_refused(kafka_server, data_dir):
    """The CRC only proves the bytes arrived as sent: the records themselves are parsed (as Kafka's
    LogValidator does) and a batch with a broken record is refused whole, nothing appended."""
    from klog.store.format import RECORDS_OFFSET

    kafka_server.store.create_topic("m")
    good = batch([b"a", b"bb"])
    first_len = good[RECORDS_OFFSET]  # zigzag length byte of the first record
    # the first record claims one byte more than its fields: its parse runs into the next record
    longer = bytearray(good)
    longer[RECORDS_OFFSET] = first_len + 2
    # a byte left over after the last record (batch length grown to cover it)
    trailing = bytearray(good + b"\x00")
    struct.pack_into(">i", trailing, 8, len(trailing) - 12)
    # a value length running past the end of the batch
    overrun = bytearray(good)
    assert overrun[-4:] == b"\x04bb\x00"  # the last record: value length (zigzag 2), value, no headers
    overrun[-4] = 0x7E  # a value of 63 bytes, past the end of the batch
    # the second record's offset delta set to 0 (a repeat of the first): Kafka's INVALID_RECORD
    repeated = bytearray(good)
    second = RECORDS_OFFSET + 1 + first_len // 2
    assert repeated[second + 3] == 2  # length, attributes, timestampDelta (0), offsetDelta = zigzag(1)
    repeated[second + 3] = 0
    with RawClient(kafka_server.port) as client:
        for bad in (longer, trailing, overrun):
            assert produce(client, "m", 0, fixed_crc(bad))[0] == E.corrupt_message
        resp = client.send(0, 9, **produce_request_fields(9, "m", 0, fixed_crc(repeated)))
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == E.invalid_record
        assert [e.batch_index for e in part.record_errors] == [1]
        assert "offset delta" in part.error_message
        assert produce(client, "m", 0, good) == (E.none, 0)  # the connection keeps serving
    assert values(data_dir, "m") == [b"a", b"bb"]


def test_a_compressed_batch_whose_payload_is_not_its_codec_is_refused(kafka_server, data_dir):
    from klog.store.format import ATTRIBUTES_OFFSET

    kafka_server.store.create_topic("z")
    garbage = bytearray(batch([b"x" * 40, b"y" * 40]))
    struct.pack_into(">h", garbage, ATTRIBUTES_OFFSET, 1)  # claims gzip; the records are plain
    with RawClient(kafka_server.port) as client:
        assert produce(client, "z", 0, fixed_crc(garbage))[0] == E.corrupt_message
    assert values(data_dir, "z") == []


def test_kafka_python_batch_with_a_broken_record_and_a_fixed_crc_fails_its_send(kafka_server, data_dir, monkeypatch):
    """A real client's path: kafka-python encodes the batch, then (patched) its first record's length is
    made one byte too long and the CRC recomputed, as a buggy client library would. The send fails
    with CORRUPT_MESSAGE, nothing is written, and the next, sound batch from the same producer lands."""
    kafka = pytest.importorskip("kafka")
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from klog.store.format import RECORDS_OFFSET

    kafka_server.store.create_topic("kpbad")
    real_build = DefaultRecordBatchBuilder.build
    broken = []

    def build_broken(self):  # noqa: ANN001, ANN202
        buf = real_build(self)
        if not broken:  # only the first batch
            broken.append(True)
            assert buf[RECORDS_OFFSET] < 0x7E  # a one-byte length: add one (zigzag +2)
            buf[RECORDS_OFFSET] += 2
            fixed_crc(buf)  # recomputes the CRC into buf
        return buf

    monkeypatch.setattr(DefaultRecordBatchBuilder, "build", build_broken)
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_server.bootstrap, acks="all", retries=0,
                                   enable_idempotence=False, linger_ms=0, request_timeout_ms=10_000)
    try:
        with pytest.raises(kafka.errors.CorruptRecordError):
            producer.send("kpbad", value=b"first").get(timeout=20)
        assert producer.send("kpbad", value=b"second").get(timeout=20).offset == 0
    finally:
        producer.close(timeout=5)
    assert values(data_dir, "kpbad") == [b"second"]


def test_serve_answers_corrupt_message_to_a_crc_valid_batch_with_broken_records(kafka_server, data_dir, klog_proc):
    kafka_server.store.create_topic("cm")
    with RawClient(kafka_server.port) as client:
        for count in (3, 100):  # below and above the compiled reader's threshold
            assert produce(client, "cm", 0, broken_records_batch(count))[0] == 2  # CORRUPT_MESSAGE
        assert produce(client, "cm", 0, batch([b"sound"]))[0] == 0  # the connection keeps serving
    assert klog_proc("consume", "cm").stdout == b"sound\n"


def _refit(buf: bytearray) -> bytes:
    """The batch length and CRC made to match its (altered) bytes."""
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return fixed_crc(buf)


def _malformed(kind: str) -> bytes:
    good = bytearray(batch([b"v%03d" % i for i in range(100)]))
    if kind in compression.CODEC_IDS:  # the records section compressed, one record's length off by one
        section = bytearray(good[RECORDS_OFFSET:])
        section[0] += 2
        codec_id = compression.CODEC_IDS[kind]
        out = bytearray(good[:RECORDS_OFFSET]) + compression.compress(codec_id, bytes(section))
        out[ATTRIBUTES_OFFSET + 1] |= codec_id
        return _refit(out)
    if kind == "trailing-byte":
        return _refit(good + b"\0")
    struct.pack_into(">i", good, RECORDS_OFFSET - 4, 101 if kind == "count-too-high" else 99)
    return _refit(good)


@pytest.mark.parametrize("kind", ["gzip", "snappy", "lz4", "zstd", "count-too-high", "count-too-low", "trailing-byte"])
def test_serve_refuses_other_crc_valid_malformed_batches(kafka_server, klog_proc, kind):
    kafka_server.store.create_topic("mal")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "mal", 0, _malformed(kind))[0] == 2  # CORRUPT_MESSAGE
        assert produce(client, "mal", 0, batch([b"sound"]))[0] == 0
    assert klog_proc("consume", "mal").stdout == b"sound\n"


def test_a_request_for_many_partitions_is_one_multi_partition_append(kafka_server, data_dir, monkeypatch):
    """A Produce naming 20 partitions of a topic appends them in one call (one lock acquisition
    each, one metadata check, one syncfs); each partition keeps its own answer: sequence checks
    (a retried batch is a duplicate answered with its first offset), a refused batch, an unknown
    partition, all in the same request."""
    from kio.schema.produce.v9 import request as req

    kafka_server.store.create_topic("wide", 20)
    calls: list[int] = []
    real = kafka_server.appender.append_many
    monkeypatch.setattr(kafka_server.appender, "append_many",
                        lambda topic, items, acks: calls.append(len(items)) or real(topic, items, acks))
    bad = bytearray(batch([b"x"]))
    bad[-1] ^= 0xFF

    def request(entries: list[tuple[int, bytes]]) -> list[tuple[int, object, int]]:
        fields = produce_request_fields(9, "wide", 0, b"")
        fields["topic_data"] = (req.TopicProduceData(name="wide", partition_data=tuple(
            req.PartitionProduceData(index=p, records=r) for p, r in entries)),)
        with RawClient(kafka_server.port) as client:
            resp = client.send(0, 9, **fields)
        return [(int(p.index), p.error_code, int(p.base_offset)) for p in resp.responses[0].partition_responses]

    first = [(p, batch([b"p%d-a" % p, b"p%d-b" % p], producer_id=5, epoch=0, sequence=0)) for p in range(18)]
    assert request([*first, (18, bytes(bad)), (25, batch([b"nowhere"]))]) == [
        *[(p, E.none, 0) for p in range(18)], (18, E.corrupt_message, -1), (25, E.unknown_topic_or_partition, -1)]
    second = [(p, batch([b"p%d-c" % p], producer_id=5, epoch=0, sequence=2)) for p in range(0, 18, 2)]
    retried = first[1::2]  # a retry whose answer was lost: acknowledged again, written once
    assert request(second + retried) == [*[(p, E.none, 2) for p in range(0, 18, 2)],
                                         *[(p, E.none, 0) for p in range(1, 18, 2)]]
    assert calls == [20, 18]
    with klog.open(data_dir) as store:
        for p in range(18):
            assert [r.value for r in store.consumer("wide", partitions=[p])] == (
                [b"p%d-a" % p, b"p%d-b" % p] + ([b"p%d-c" % p] if p % 2 == 0 else []))


def test_serve_keeps_only_its_recently_written_partitions_open_for_writing(kafka_server, data_dir, monkeypatch):
    """klog serve held six descriptors for every partition it ever wrote (10,000 partitions ran out
    of them and every record timed out): past its budget it closes the writer's own files of the
    least recently written partitions (lock, write descriptors, replica state), while readers'
    stay; and a walk writing Kafka's checkpoint files opens no partition."""
    store = kafka_server.store
    store.create_topic("many", 16)
    monkeypatch.setattr(kafka_server.appender.writer, "open_max", 4)
    with RawClient(kafka_server.port) as client:
        for rnd in range(2):
            for p in range(16):
                assert produce(client, "many", p, batch([b"%d-%d" % (p, rnd)])) == (E.none, rnd)
    locked = [p for p in range(16) if store.partition("many", p).lock._fd is not None]
    assert len(locked) == 4, locked
    with klog.open(data_dir) as other:
        assert sorted(r.value for r in other.consumer("many")) == sorted(
            b"%d-%d" % (p, rnd) for p in range(16) for rnd in range(2))
        other.create_topic("idle", 50)
        other.write_kafka_checkpoints()
        assert [p for p in range(50) if other.opened_partition("idle", p) is not None] == []

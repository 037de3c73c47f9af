"""Kafka's oldest clients through klog serve, as Kafka 3.9 serves them: kafka-python pinned to
api_version (0, 10) (Produce v2 with magic 1 message sets, Fetch v2 reading magic 1) and (0, 9)
(magic 0: no timestamps). What they produce is stored as v2 batches (read back by klog itself
and by a current client), and what they consume is down-converted from the stored batches."""

from __future__ import annotations

import time

import pytest

kafka = pytest.importorskip("kafka")

N = 30


def _records(magic: int) -> list[tuple[bytes | None, bytes, int]]:
    base = 1_700_000_000_000
    return [(None if i % 7 == 3 else b"k%d" % i, b"v%d-" % i + bytes(range(i % 256)), base + i * 1000 if magic else -1)
            for i in range(N)]


def _produce(bootstrap: str, topic: str, api_version: tuple, records: list, **extra) -> None:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, acks=1, **extra)
    for key, value, ts in records:
        p.send(topic, key=key, value=value, timestamp_ms=ts if ts >= 0 else None)
    p.flush(timeout=20)
    p.close(timeout=5)


def _consume(bootstrap: str, topic: str, api_version: tuple, n: int) -> list[tuple[bytes | None, bytes, int]]:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, auto_offset_reset="earliest",
                            enable_auto_commit=False, consumer_timeout_ms=1000)
    c.assign([kafka.TopicPartition(topic, 0)])
    out = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c:
                out.append((m.key, m.value, m.timestamp))
    finally:
        c.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("api_version,magic", [((0, 10), 1), ((0, 9), 0)])
@pytest.mark.parametrize("codec", [None, "gzip"])
def test_old_kafka_python_round_trips(kafka_server, store, api_version, magic, codec):
    topic = f"old-{magic}-{codec}"
    store.create_topic(topic, partitions=1)
    records = _records(magic)
    _produce(kafka_server.bootstrap, topic, api_version, records, compression_type=codec)

    got = _consume(kafka_server.bootstrap, topic, api_version, N)
    want_ts = [ts for _, _, ts in records] if magic else [-1] * N
    assert [(k, v) for k, v, _ in got] == [(k, v) for k, v, _ in records]
    assert [ts for _, _, ts in got] == (want_ts if magic else [None] * N)  # magic 0 has no timestamp

    # stored as v2 batches: klog reads the same keys, values and timestamps, offsets 0..N-1
    stored = [r for batch in store.partition(topic, 0).read(0, max_bytes=1 << 20) for r in batch.records()]
    assert [(o, k, v) for o, _, k, v, _ in stored] == [(i, k, v) for i, (k, v, _) in enumerate(records)]
    assert [ts for _, ts, *_ in stored] == want_ts


@pytest.mark.slow
def test_a_new_client_reads_what_an_old_one_wrote_and_the_other_way(kafka_server, store):
    ck = pytest.importorskip("confluent_kafka")
    store.create_topic("mixed", partitions=1)
    records = _records(1)
    _produce(kafka_server.bootstrap, "mixed", (0, 10), records[:10])
    p = ck.Producer({"bootstrap.servers": kafka_server.bootstrap})
    for key, value, ts in records[10:]:
        p.produce("mixed", key=key, value=value, timestamp=ts, partition=0)
    assert p.flush(20) == 0
    assert _consume(kafka_server.bootstrap, "mixed", (0, 10), N) == records


def test_a_damaged_message_set_is_refused_and_nothing_is_stored(kafka_server, store):
    from kio.schema.errors import ErrorCode

    from klog.store import legacy
    from tests.serve_helpers import RawClient, produce

    store.create_topic("old", partitions=1)
    good = legacy.message_bytes(0, 1_700_000_000_000, b"k", b"v", 1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the CRC no longer matches
    with RawClient(kafka_server.port) as client:
        assert produce(client, "old", 0, bytes(bad), version=2)[0] == ErrorCode.corrupt_message
        assert produce(client, "old", 0, good[:-3], version=2)[0] == ErrorCode.corrupt_message
        assert produce(client, "old", 0, good + good, version=2) == (ErrorCode.none, 0)
    assert store.offsets("old") == {0: 2}


@pytest.mark.parametrize("fetch_version,magic", [(0, 0), (2, 1)])
def test_old_fetchers_get_compressed_batches_in_their_codec(kafka_server, store, fetch_version, magic):
    """Kafka's RecordsUtil.downConvert: a compressed v2 batch becomes one wrapper message in the same
    codec (its last offset, its records inside), read here by kafka-python's own record reader; a
    zstd batch cannot be one (UNSUPPORTED_COMPRESSION_TYPE), an uncompressed one stays uncompressed,
    and so does an LZ4 one for magic 0."""
    import datetime

    from kafka.record import MemoryRecords
    from kio.schema.errors import ErrorCode
    from kio.static.constants import EntityType
    from kio.static.primitive import i32Timedelta

    from klog.protocol.kafka import make
    from klog.protocol.schemas import payload_module as load_payload_module
    from klog.store import codec as klog_codec
    from tests.serve_helpers import RawClient, produce

    req = load_payload_module(1, fetch_version, EntityType.request)
    values = [b"value-%d" % i * 5 for i in range(6)]
    with RawClient(kafka_server.port) as client:
        for name, codec_id in (("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)):
            store.create_topic(f"c-{name}", partitions=1)
            batch = klog_codec.encode_batch([(b"k", v, (), 1_700_000_000_000 + i) for i, v in enumerate(values)], 0,
                                            codec=codec_id)
            assert produce(client, f"c-{name}", 0, batch) == (ErrorCode.none, 0)
            part = req.FetchPartition(partition=0, fetch_offset=2, partition_max_bytes=1 << 20)
            answer = client.send(1, fetch_version, replica_id=-1, min_bytes=1,
                                 max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
                                 topics=(req.FetchTopic(topic=f"c-{name}", partitions=(part,)),))
            got = answer.responses[0].partitions[0]
            if name == "zstd":
                assert got.error_code == ErrorCode.unsupported_compression_type
                continue
            assert got.error_code == ErrorCode.none
            entries = MemoryRecords(got.records)
            batches = []
            while (b := entries.next_batch()) is not None:
                batches.append(b)
            assert {b.magic for b in batches} == {magic}
            records = [r for b in batches for r in b]
            if codec_id == 0 or (codec_id == 3 and magic == 0):
                # one message per record, from the fetch offset on (magic 0 LZ4 too: Kafka 0.8's
                # broken frame checksum, which Kafka would send, is refused by sarama's reader)
                assert [b.compression_type for b in batches] == [0] * 4
                assert [(r.offset, r.value) for r in records] == list(enumerate(values))[2:]
            else:  # one wrapper: the whole batch (clients skip what is below their offset)
                assert [b.compression_type for b in batches] == [codec_id]
                assert [(r.offset, r.value) for r in records] == list(enumerate(values))
            if magic:
                assert [r.timestamp for r in records][-1] == 1_700_000_000_005
        # a topic whose compression.type is zstd: no fetcher before v10 (KIP-110) gets anything
        store.create_topic("z", partitions=1, configs={"compression.type": "zstd"})
        for version in (fetch_version, 4, 9):
            mod = load_payload_module(1, version, EntityType.request)
            wanted = make(mod.FetchPartition, partition=0, fetch_offset=0, current_leader_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
            answer = client.send(1, version, replica_id=-1, min_bytes=1, max_bytes=1 << 20,
                                 max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
                                 topics=(mod.FetchTopic(topic="z", partitions=(wanted,)),),
                                 isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=())
            assert answer.responses[0].partitions[0].error_code == ErrorCode.unsupported_compression_type

"""Pipelined acks=0 Produce requests of one connection are appended in one job of the append threads
(klog.server.produce._acks0_group: one thread hop for the burst, not one per request), in request
order, stopping as Kafka stops: Kafka handles one request of a connection at a time and closes the
connection when an acks=0 one fails, so nothing queued behind the failed request is appended (its
own other partitions are), whether it failed before its append (a refused batch, an unknown
partition, an internal topic) or during it (a disk's error). Every burst is one write, so the server
reads its requests queued behind each other."""

from __future__ import annotations

import errno
import io
import logging
import socket
import struct
import time

import pytest

from tests.serve_helpers import RawClient, batch, produce, read_answer

pytest.importorskip("kio")


def _frame(correlation: int, entries: list[tuple[str, int, bytes]], acks: int = 0, version: int = 9) -> bytes:
    """A Produce request of `entries` (topic, partition, records), in that order."""
    import datetime

    from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.constants import EntityType
    from kio.static.primitive import i32Timedelta

    from klog.protocol.kafka import make
    from klog.protocol.schemas import payload_module

    mod = payload_module(0, version, EntityType.request)  # (v0-v2 too, which kio leaves out)
    topics = []
    for topic, partition, records in entries:
        part = mod.PartitionProduceData(index=partition, records=records)
        if topics and topics[-1].name == topic:
            topics[-1] = mod.TopicProduceData(name=topic, partition_data=(*topics[-1].partition_data, part))
        else:
            topics.append(mod.TopicProduceData(name=topic, partition_data=(part,)))
    buf = io.BytesIO()
    header = RequestHeader if version >= 9 else RequestHeaderV1
    entity_writer(header)(buf, header(request_api_key=0, request_api_version=version, correlation_id=correlation,
                                      client_id="acks0group"))
    entity_writer(mod.ProduceRequest)(buf, make(  # (fields the version lacks dropped: v0-v2 have no transactional id)
        mod.ProduceRequest, transactional_id=None, acks=acks, timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=tuple(topics)))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


def _api_versions(correlation: int) -> bytes:
    """An ApiVersions v0 request: its answer, read after a burst, says the burst was handled."""
    return struct.pack(">ihhih", 10, 18, 0, correlation, -1)


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` within 5 s (acks=0: nothing is answered)."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _values(data_dir: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    import klog

    with klog.open(data_dir) as store:
        return {p: [r.value for r in store.consumer(topic, partitions=[p])] for p in range(partitions)}


def _values_once(data_dir: str, topic: str, want: dict[int, list[bytes]], seconds: float = 20) -> dict:
    """The topic's values (as `_values`) once they are `want`, or as they are after `seconds` (acks=0: a
    producer's flush returns once its requests are sent, not once they are appended)."""
    deadline = time.monotonic() + seconds
    while True:
        got = _values(data_dir, topic, len(want))
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def _append_jobs(server, monkeypatch) -> list:
    """The jobs handed to the append threads from now on (server.run_append's calls)."""
    jobs: list = []
    real = server.run_append

    async def counted(fn, *args):
        jobs.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(server, "run_append", counted)
    return jobs


def test_a_burst_of_valid_acks0_requests_is_appended_in_one_job_in_request_order(kafka_server, monkeypatch):
    kafka_server.store.create_topic("wide", 8)
    # librdkafka's order (its partitions in turn from a moving start), and a partition named twice
    burst = [(p, b"v%02d" % i) for i, p in enumerate([5, 6, 7, 0, 1, 2, 3, 4, 5, 0, 3, 6])]
    jobs = _append_jobs(kafka_server, monkeypatch)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join(_frame(i + 1, [("wide", p, batch([v]))]) for i, (p, v) in enumerate(burst))
                     + _api_versions(99))
        assert struct.unpack_from(">i", read_answer(sock))[0] == 99  # (answered after every Produce)
    # one job for the burst (two where the first request came alone in a read of its own and was
    # begun as it arrived); the requests one by one made one each
    assert 1 <= len(jobs) <= 2, jobs
    got = _values(kafka_server.data_dir, "wide", 8)
    assert got == {p: [v for q, v in burst if q == p] for p in range(8)}


def test_two_connections_bursts_are_each_complete_and_in_order(kafka_server):
    kafka_server.store.create_topic("wide", 4)
    rounds = 5
    bursts = {c: [b"".join(_frame(r * 20 + i + 1, [("wide", i % 4, batch([b"%s-%d-%02d" % (c, r, i)]))])
                           for i in range(16)) + _api_versions(1000 + r) for r in range(rounds)]
              for c in (b"a", b"b")}
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as a, \
            socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as b:
        for r in range(rounds):  # both connections' bursts in flight together
            a.sendall(bursts[b"a"][r])
            b.sendall(bursts[b"b"][r])
            assert struct.unpack_from(">i", read_answer(a))[0] == 1000 + r
            assert struct.unpack_from(">i", read_answer(b))[0] == 1000 + r
    got = _values(kafka_server.data_dir, "wide", 4)
    for p in range(4):
        for c in (b"a", b"b"):
            mine = [v for v in got[p] if v.startswith(c + b"-")]
            assert mine == [b"%s-%d-%02d" % (c, r, i) for r in range(rounds) for i in range(16) if i % 4 == p]


def _bad_crc() -> bytes:
    data = bytearray(batch([b"bad"]))
    data[-1] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize("bad", [
    [("fire", 9, batch([b"bad"]))],  # a partition the topic has not
    [("fire", 1, _bad_crc())],  # refused in the append threads, before its append
    [("fire", 1, batch([b"bad" * 700_000]))],  # over max.message.bytes
    [("__consumer_offsets", 0, batch([b"bad"]))],  # refused on the event loop
    [("fire", 1, batch([b"own"])), ("fire", 9, batch([b"bad"]))],  # its own other partition appends
], ids=["unknown-partition", "bad-crc", "too-large", "internal-topic", "other-entry-of-the-failed-one"])
def test_a_failed_request_in_the_middle_stops_the_later_ones_and_closes(kafka_server, caplog, bad):
    kafka_server.store.create_topic("fire", 3)
    caplog.set_level(logging.INFO, logger="klog.serve")
    before = [_frame(1, [("fire", 0, batch([b"a"]))]), _frame(2, [("fire", 2, batch([b"b"]))])]
    after = [_frame(4, [("fire", 0, batch([b"c"]))]), _frame(5, [("fire", 2, batch([b"d"]))]),
             _frame(6, [("fire", 1, batch([b"e"]))])]
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join([*before, _frame(3, bad), *after]))
        assert _closed(sock)
    with RawClient(kafka_server.port) as client:  # (handled after the closed connection's requests)
        assert produce(client, "fire", 0, batch([b"later"]))[0] == 0
    assert _values(kafka_server.data_dir, "fire", 3) == {0: [b"a", b"later"], 1: [b"own"] if len(bad) == 2 else [],
                                                         2: [b"b"]}
    lines = [r.getMessage() for r in caplog.records if "failed Produce with acks=0" in r.getMessage()]
    topic, partition, _ = bad[-1]
    assert len(lines) == 1 and f"correlation id 3): {topic}-{partition} " in lines[0], lines


def test_message_sets_of_produce_v2_with_acks0_stop_at_the_failed_request_too(kafka_server):
    """Produce v0-v2 carry magic 0/1 message sets, up-converted in the same job (append_message_set)."""
    from tests.kafka_files import legacy_plain

    kafka_server.store.create_topic("old", 2)
    burst = [(1, b"a"), (0, b"b"), (1, b"c"), (7, b"bad"), (0, b"d"), (1, b"e")]
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join(_frame(i + 1, [("old", p, legacy_plain(1, 0, None, v, 1_700_000_000_000))], version=2)
                              for i, (p, v) in enumerate(burst)))
        assert _closed(sock)
    assert _values(kafka_server.data_dir, "old", 2) == {0: [b"b"], 1: [b"a", b"c"]}


def test_a_disk_error_during_an_append_leaves_nothing_after_it_appended(kafka_server, monkeypatch):
    """The append of partition 1 fails (EIO, after its checks): the requests before it are appended,
    none after it, though one after it is for partition 0, before partition 1 in partition order."""
    kafka_server.store.create_topic("fire", 3)
    replicas = kafka_server.appender.replicas
    real = replicas.append

    def failing(topic, partition, *args, **kwargs):
        if topic == "fire" and partition == 1:
            raise OSError(errno.EIO, "Input/output error")
        return real(topic, partition, *args, **kwargs)

    monkeypatch.setattr(replicas, "append", failing)
    burst = [(2, b"a"), (0, b"b"), (1, b"fails"), (0, b"c"), (2, b"d")]
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join(_frame(i + 1, [("fire", p, batch([v]))]) for i, (p, v) in enumerate(burst)))
        assert _closed(sock)
    monkeypatch.setattr(replicas, "append", real)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "fire", 1, batch([b"later"]))[0] == 0
    assert _values(kafka_server.data_dir, "fire", 3) == {0: [b"b"], 1: [b"later"], 2: [b"a"]}


@pytest.mark.slow
def test_confluent_kafka_acks0_into_a_wide_topic_delivers_every_record(kafka_server):
    ck = pytest.importorskip("confluent_kafka")
    partitions, count = 32, 3000
    kafka_server.store.create_topic("wide", partitions)
    producer = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "acks": 0, "linger.ms": 5,
                            "log_level": 0})
    for i in range(count):
        producer.produce("wide", b"%05d" % i, partition=i % partitions)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(20) == 0
    want = {p: [b"%05d" % i for i in range(p, count, partitions)] for p in range(partitions)}
    assert _values_once(kafka_server.data_dir, "wide", want) == want


def test_a_request_to_a_topic_the_acls_refuse_stops_the_later_ones(kafka_server):
    """Refused on the event loop before any append (TOPIC_AUTHORIZATION_FAILED): the requests behind
    it are not handed to the append threads."""
    from klog.meta.acls import AclsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    kafka_server.store.create_topic("fire", 1)
    kafka_server.store.create_topic("locked", 1)
    AclsMeta(kafka_server.store.meta).add([  # (with an ACL anywhere, what none allows is refused: Kafka's default)
        AclBinding(ResourceType.TOPIC, "fire", PatternType.LITERAL, "User:*", "*", Operation.WRITE, Permission.ALLOW),
        AclBinding(ResourceType.TOPIC, "locked", PatternType.LITERAL, "User:alice", "*", Operation.WRITE,
                   Permission.ALLOW)])
    burst = [("fire", b"a"), ("locked", b"bad"), ("fire", b"b")]
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join(_frame(i + 1, [(t, 0, batch([v]))]) for i, (t, v) in enumerate(burst)))
        assert _closed(sock)
    assert _values(kafka_server.data_dir, "fire", 1) == {0: [b"a"]}
    assert _values(kafka_server.data_dir, "locked", 1) == {0: []}

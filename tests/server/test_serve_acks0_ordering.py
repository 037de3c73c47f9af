"""Pipelined acks=0 Produce requests appended together (klog.server.produce._acks0_group): an
idempotent producer's retry inside the burst is a duplicate (acknowledged, not appended twice, the
connection stays open), a gap in its sequences stops the burst there and closes; two connections'
bursts over the same partitions in opposite orders, each in several jobs, both complete."""

from __future__ import annotations

import datetime
import socket
import struct
import time

import pytest

from tests.serve_helpers import RawClient, batch, read_answer
from tests.server.test_serve_acks0_group import _api_versions, _closed, _frame, _values, _values_once

pytest.importorskip("kio")


def _producer(port: int) -> tuple[int, int]:
    from kio.static.primitive import i32Timedelta

    with RawClient(port) as client:
        got = client.send(22, 2, transactional_id=None,
                          transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)))
    return int(got.producer_id), int(got.producer_epoch)


def _idempotent(kafka_server, sequences: list[int]) -> bytes:
    producer_id, epoch = _producer(kafka_server.port)
    stamp = int(time.time() * 1000)  # (one timestamp: a retry is the same bytes)
    return b"".join(_frame(i + 1, [("idem", 0, batch([b"s%d" % s], producer_id, epoch, s, timestamp=stamp))])
                    for i, s in enumerate(sequences))


def test_an_idempotent_retry_inside_an_acks0_burst_is_a_duplicate(kafka_server):
    kafka_server.store.create_topic("idem", 1)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_idempotent(kafka_server, [0, 1, 1, 2, 0, 3]) + _api_versions(99))
        assert struct.unpack_from(">i", read_answer(sock))[0] == 99  # (not closed)
    assert _values(kafka_server.data_dir, "idem", 1) == {0: [b"s0", b"s1", b"s2", b"s3"]}


def test_a_sequence_gap_inside_an_acks0_burst_stops_it_and_closes(kafka_server):
    kafka_server.store.create_topic("idem", 1)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_idempotent(kafka_server, [0, 1, 5, 2, 3]))
        assert _closed(sock)
    assert _values(kafka_server.data_dir, "idem", 1) == {0: [b"s0", b"s1"]}


@pytest.mark.slow
def test_two_connections_bursts_over_the_same_partitions_in_opposite_orders_both_complete(kafka_server):
    """Each burst names 2 topics x 4 partitions, 200 entries a request (several jobs, each taking its
    partitions' slots in order): one connection's in one order, the other's reversed."""
    for topic in ("x", "y"):
        kafka_server.store.create_topic(topic, 4)
    places = [(t, p) for t in ("x", "y") for p in range(4)]
    rounds = 4

    def burst(name: bytes, order: list[tuple[str, int]], r: int) -> bytes:
        return b"".join(_frame(r * 10 + i + 1, [(t, p, batch([b"%s-%d-%d-%03d" % (name, r, i, k)]))
                                               for k, (t, p) in enumerate(order * 25)])
                        for i in range(3)) + _api_versions(1000 + r)

    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=20) as a, \
            socket.create_connection(("127.0.0.1", kafka_server.port), timeout=20) as b:
        for r in range(rounds):
            a.sendall(burst(b"a", places, r))
            b.sendall(burst(b"b", places[::-1], r))
            assert struct.unpack_from(">i", read_answer(a))[0] == 1000 + r
            assert struct.unpack_from(">i", read_answer(b))[0] == 1000 + r
    for topic in ("x", "y"):
        got = _values(kafka_server.data_dir, topic, 4)
        for p in range(4):
            for name, order in ((b"a", places), (b"b", places[::-1])):
                mine = [v for v in got[p] if v.startswith(name + b"-")]
                assert mine == [b"%s-%d-%d-%03d" % (name, r, i, k) for r in range(rounds) for i in range(3)
                                for k, place in enumerate(order * 25) if place == (topic, p)]


def test_produce_v2_and_v9_acks0_requests_mixed_on_one_connection_stop_at_the_failed_one(kafka_server):
    """Requests of different versions are never appended together (a group is of one version), but
    a failed v2 one still stops the v9 ones queued behind it."""
    from tests.kafka_files import legacy_plain

    kafka_server.store.create_topic("mixed", 2)
    now = int(time.time() * 1000)  # (a timestamp older than retention.ms would roll the segment and delete it)

    def old(c: int, p: int, v: bytes) -> bytes:
        return _frame(c, [("mixed", p, legacy_plain(1, 0, None, v, now))], version=2)

    def new(c: int, p: int, v: bytes) -> bytes:
        return _frame(c, [("mixed", p, batch([v]))])

    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(old(1, 0, b"a") + old(2, 1, b"b") + new(3, 0, b"c") + new(4, 1, b"d") + old(5, 7, b"bad")
                     + new(6, 0, b"e") + old(7, 1, b"f"))
        assert _closed(sock)
    assert _values(kafka_server.data_dir, "mixed", 2) == {0: [b"a", b"c"], 1: [b"b", b"d"]}


@pytest.mark.slow
def test_kafka_python_acks0_into_a_wide_topic_delivers_every_record_in_order(kafka_server):
    """kafka-python sends one request of many partitions per broker, several in flight."""
    kafka = pytest.importorskip("kafka")
    partitions, count = 16, 3000
    kafka_server.store.create_topic("wide", partitions)
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_server.bootstrap, acks=0, linger_ms=5,
                                   max_in_flight_requests_per_connection=5, batch_size=2048)
    try:
        for i in range(count):
            producer.send("wide", b"%05d" % i, partition=i % partitions)
        producer.flush(20)
    finally:
        producer.close(5)
    want = {p: [b"%05d" % i for i in range(p, count, partitions)] for p in range(partitions)}
    assert _values_once(kafka_server.data_dir, "wide", want) == want


@pytest.mark.slow
def test_an_acks0_burst_beside_a_transaction_on_the_same_partition(kafka_server):
    """One connection's acks=0 bursts (several jobs each) and another's transactions to the same
    partition: every burst appended in order, each transaction committed, a read_committed consumer
    sees them all."""
    ck = pytest.importorskip("confluent_kafka")
    import threading

    kafka_server.store.create_topic("mix", 1)
    producer = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "beside",
                            "socket.timeout.ms": 5000, "log_level": 0})
    producer.init_transactions(20)
    stop = threading.Event()
    rounds: list[int] = []

    def bursts() -> None:
        with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=20) as sock:
            for r in range(20):
                if stop.is_set():
                    break
                sock.sendall(b"".join(_frame(r * 10 + i + 1, [("mix", 0, batch([b"b%02d-%d-%03d" % (r, i, k)]))
                                                              for k in range(100)]) for i in range(2))
                             + _api_versions(1000 + r))
                assert struct.unpack_from(">i", read_answer(sock))[0] == 1000 + r
                rounds.append(r)

    thread = threading.Thread(target=bursts)
    thread.start()
    try:
        for t in range(5):
            producer.begin_transaction()
            for k in range(20):
                producer.produce("mix", b"t%d-%02d" % (t, k), partition=0)
            producer.commit_transaction(20)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    consumer = ck.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "reader",
                            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "log_level": 0})
    consumer.subscribe(["mix"])
    want = 20 * 5 + 200 * len(rounds)
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(seen) < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    consumer.close()
    assert [v for v in seen if v.startswith(b"t")] == [b"t%d-%02d" % (t, k) for t in range(5) for k in range(20)]
    assert [v for v in seen if v.startswith(b"b")] == [b"b%02d-%d-%03d" % (r, i, k) for r in rounds
                                                       for i in range(2) for k in range(100)]

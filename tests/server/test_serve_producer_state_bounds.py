"""Idempotent producers' states in `klog serve` are bounded: any client may put any producer id in
a batch, and each id a partition keeps costs ~1 KB. Idle ones expire (Kafka's
producer.id.expiration.ms), and past a count per partition and per server the least recently used
goes; never one with an open transaction. A producer dropped past the bounds and writing again at a
sequence other than its next is answered UNKNOWN_PRODUCER_ID, and confluent-kafka's idempotent
producer recovers from it; an expired one starts anew at any sequence (Kafka 3.9)."""

from __future__ import annotations

import time

import pytest

import klog
from tests.serve_helpers import RawClient, batch, produce

pytest.importorskip("kio")
ck = pytest.importorskip("confluent_kafka")
from kio.schema.errors import ErrorCode as E  # noqa: E402

FRESH_IDS_FROM = 1_000_000


def entries(server, topic: str | None = None) -> dict[tuple[str, int], set[int]]:
    """(topic, partition) -> the producer ids the server keeps state for."""
    by_partition = server.appender.producers._by_partition
    return {key: set(states) for key, states in list(by_partition.items()) if topic in (None, key[0])}


def count(server) -> int:
    return sum(len(pids) for pids in entries(server).values())


def write_fresh_ids(server, topic: str, partitions: int, ids: int) -> None:
    """One batch (sequence 0) from each of `ids` producer ids nobody asked for, round the partitions."""
    with RawClient(server.port) as client:
        for i in range(ids):
            got = produce(client, topic, i % partitions, batch([b"x"], producer_id=FRESH_IDS_FROM + i, epoch=0,
                                                                sequence=0))
            assert got[0] == E.none


def bound(server, per_partition: int, total: int) -> None:
    server.appender.producers.per_partition_max = per_partition
    server.appender.producers.total_max = total


def values(data_dir: str, topic: str) -> list[bytes]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic)]


def test_many_fresh_producer_ids_keep_the_state_bounded(kafka_server, caplog):
    kafka_server.store.create_topic("t", partitions=3)
    bound(kafka_server, per_partition=40, total=100)
    write_fresh_ids(kafka_server, "t", partitions=3, ids=400)  # before: 400 entries kept, without end
    assert all(len(pids) <= 40 for pids in entries(kafka_server).values())
    assert count(kafka_server) <= 100
    assert len(kafka_server.appender.producers) == count(kafka_server)
    newest = FRESH_IDS_FROM + 399
    assert newest in entries(kafka_server)[("t", 399 % 3)]  # the least recently used went, not the last
    kafka_server.producer_expiration_check_s = 0.05  # the timer's pass says so, once
    deadline = time.monotonic() + 10
    while "past the bounds" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert caplog.text.count("past the bounds") == 1


def test_an_idle_producer_expires_and_then_starts_anew(kafka_server):
    kafka_server.store.create_topic("t")
    producers = kafka_server.appender.producers
    now = [int(time.time() * 1000)]
    producers.clock = lambda: now[0]
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"a"], producer_id=7, epoch=0, sequence=0))[0] == E.none
        now[0] += producers.expiration_ms // 2
        assert produce(client, "t", 0, batch([b"b"], producer_id=8, epoch=0, sequence=0))[0] == E.none
        now[0] += producers.expiration_ms // 2 + 1  # 7 idle past expiration, 8 not
        kafka_server.producer_expiration_check_s = 0.05  # the serve timer's pass, soon
        deadline = time.monotonic() + 10
        while 7 in entries(kafka_server)[("t", 0)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert entries(kafka_server)[("t", 0)] == {8}  # before: 7 kept for ever
        # forgotten, as in Kafka 3.9: no state, so any sequence starts it again
        assert produce(client, "t", 0, batch([b"c"], producer_id=7, epoch=0, sequence=1))[0] == E.none
        assert 7 in entries(kafka_server)[("t", 0)]
        assert produce(client, "t", 0, batch([b"d"], producer_id=8, epoch=0, sequence=1))[0] == E.none


def test_a_producer_with_an_open_transaction_is_never_dropped(kafka_server, data_dir):
    kafka_server.store.create_topic("t")
    producers = kafka_server.appender.producers
    now = [int(time.time() * 1000)]
    producers.clock = lambda: now[0]
    txn = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "tx", "linger.ms": 0})
    txn.init_transactions(15)
    txn.begin_transaction()
    txn.produce("t", b"in txn", partition=0)
    assert txn.flush(15) == 0
    (txn_pid,) = entries(kafka_server)[("t", 0)]
    bound(kafka_server, per_partition=10, total=10)
    write_fresh_ids(kafka_server, "t", partitions=1, ids=50)
    assert txn_pid in entries(kafka_server)[("t", 0)]
    assert count(kafka_server) <= 10  # before: all 51 kept
    now[0] += producers.expiration_ms * 2
    producers.expire()
    assert entries(kafka_server)[("t", 0)] == {txn_pid}  # the others expired, it did not
    txn.commit_transaction(15)
    now[0] += producers.expiration_ms * 2
    producers.expire()
    assert entries(kafka_server)[("t", 0)] == set()  # its transaction is over: it may go now
    assert values(data_dir, "t").count(b"in txn") == 1


def test_an_evicted_idempotent_producer_recovers_and_writes_everything_once(kafka_server, data_dir):
    kafka_server.store.create_topic("v")
    kafka_server.store.create_topic("flood")
    producer = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "enable.idempotence": True,
                            "linger.ms": 0, "message.timeout.ms": 15_000})
    acked: list[bytes] = []
    failed: list[bytes] = []

    def send(value: bytes) -> None:
        def report(err, _msg, value=value) -> None:  # noqa: ANN001
            (failed if err else acked).append(value)
        producer.produce("v", value, partition=0, on_delivery=report)
        assert producer.flush(15) == 0

    send(b"m1")
    send(b"m2")
    (victim,) = entries(kafka_server, "v")[("v", 0)]
    bound(kafka_server, per_partition=100, total=20)
    write_fresh_ids(kafka_server, "flood", partitions=1, ids=40)  # another client's ids push it out
    assert entries(kafka_server, "v")[("v", 0)] == set()  # before: kept
    with RawClient(kafka_server.port) as client:  # what its next batch is answered
        assert produce(client, "v", 0, batch([b"probe"], producer_id=victim, epoch=0, sequence=5))[0] == \
            E.unknown_producer_id
    for value in (b"m3", b"m4", b"m5"):
        send(value)
    producer.purge()
    assert failed == []
    assert acked == [b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert values(data_dir, "v") == [b"m1", b"m2", b"m3", b"m4", b"m5"]  # each once, in order


def test_a_partition_built_from_its_log_keeps_the_bound_too(kafka_server):
    kafka_server.store.create_topic("t")
    write_fresh_ids(kafka_server, "t", partitions=1, ids=60)
    kafka_server.appender.forget_producer_states("t")  # (as after a restart: rebuilt from the log)
    bound(kafka_server, per_partition=10, total=100)
    with RawClient(kafka_server.port) as client:  # the newest producer's next batch: built, then checked
        assert produce(client, "t", 0, batch([b"y"], producer_id=FRESH_IDS_FROM + 59, epoch=0, sequence=1))[0] == \
            E.none
    assert len(entries(kafka_server)[("t", 0)]) <= 10  # before: all 60
    assert len(kafka_server.appender.producers) == count(kafka_server)

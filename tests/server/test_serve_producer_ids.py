"""Idempotent producers' ids against other clients: an acknowledgement always means the batch is in
the log. The victim is confluent-kafka's idempotent producer; the attacker sends raw frames naming
the victim's producer id, which anyone can read from a fetched batch header."""

from __future__ import annotations

import datetime

import pytest

import klog
from klog.store.codec import read_header
from tests.serve_helpers import RawClient, batch, fetch_fields, produce

pytest.importorskip("kio")
ck = pytest.importorskip("confluent_kafka")
from kio.schema.errors import ErrorCode as E  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402


def values(data_dir: str, topic: str) -> list[bytes]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic)]


def init_producer_id(client: RawClient, producer_id: int, epoch: int):  # noqa: ANN201 - kio response
    return client.send(22, 4, transactional_id=None, producer_id=producer_id, producer_epoch=epoch,
                       transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)))


def victims_ids(client: RawClient, topic: str) -> tuple[int, int, int]:
    """(producer id, epoch, next sequence) of the last batch, read as any client can: by a Fetch."""
    fetched = client.send(1, 12, **fetch_fields(topic, 0, 0))
    records = bytes(fetched.responses[0].partitions[0].records)
    at, header = 0, None
    while at < len(records):
        header = read_header(records, at)
        at += header.size
    assert header is not None
    return header.producer_id, header.producer_epoch, header.base_sequence + header.last_offset_delta + 1


class Victim:
    """confluent-kafka's idempotent producer, one flushed message at a time, remembering which
    messages it was told are written."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
                                     "message.timeout.ms": 10_000})
        self.acked: list[bytes] = []
        self.failed: list[bytes] = []

    def send(self, value: bytes) -> None:
        def report(err, _msg, value=value) -> None:  # noqa: ANN001 - the message is not read: after a
            (self.failed if err else self.acked).append(value)  # fatal error its accessors raise
        try:
            self.producer.produce("v", value, partition=0, on_delivery=report)
            self.producer.flush(15)
        except Exception:  # noqa: BLE001 - a fatal idempotence error surfaces here as well: an error is fine
            self.failed.append(value)

    def close(self) -> None:
        """Drop the producer now (librdkafka would go on reconnecting to the stopped server)."""
        self.producer.purge()
        self.producer.flush(0)
        del self.producer


@pytest.mark.parametrize("attack", ["init-producer-id", "same-epoch-next-sequence", "next-epoch"])
def test_another_client_naming_a_producer_id_never_gets_its_batches_acknowledged_unwritten(
        kafka_server, data_dir, attack):
    kafka_server.store.create_topic("v")
    victim = Victim(kafka_server.bootstrap)
    victim.send(b"m1")
    with RawClient(kafka_server.port) as attacker:
        pid, epoch, next_seq = victims_ids(attacker, "v")
        if attack == "init-producer-id":  # bump the victim's epoch, then take its first sequences there
            got = init_producer_id(attacker, pid, epoch)
            assert got.error_code == E.none
            assert got.producer_id != pid and got.producer_epoch == 0  # a new id: not the victim's
            pid, epoch, next_seq = got.producer_id, got.producer_epoch, 0
        elif attack == "next-epoch":
            epoch, next_seq = epoch + 1, 0
        assert produce(attacker, "v", 0, batch([b"evil"], producer_id=pid, epoch=epoch, sequence=next_seq))[0] == E.none
    for value in (b"m2", b"m3", b"m4"):
        victim.send(value)
    victim.close()
    written = values(data_dir, "v")
    assert [v for v in victim.acked if v not in written] == []  # before: m2 or m3 acknowledged, not written
    assert sorted(written) == sorted(victim.acked + [b"evil"])  # and nothing written twice
    if attack == "init-producer-id":  # the victim did not even notice
        assert victim.acked == [b"m1", b"m2", b"m3", b"m4"]


def test_init_producer_id_without_a_transactional_id_always_answers_a_new_id(kafka_server):
    with RawClient(kafka_server.port) as client:
        first = init_producer_id(client, -1, -1)
        assert first.error_code == E.none and first.producer_id > 0 and first.producer_epoch == 0
        again = init_producer_id(client, first.producer_id, first.producer_epoch)  # KIP-360's bump request
        assert again.error_code == E.none and again.producer_epoch == 0 and again.producer_id != first.producer_id
        # Kafka's rule: a producer id and epoch are given together or not at all
        assert init_producer_id(client, -1, 3).error_code == E.invalid_request
        assert init_producer_id(client, 5, -1).error_code == E.invalid_request


def test_a_different_batch_reusing_written_sequences_is_refused_not_acknowledged(kafka_server, data_dir):
    kafka_server.store.create_topic("v")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "v", 0, batch([b"a"], producer_id=9, epoch=0, sequence=0)) == (E.none, 0)
        other = batch([b"not a"], producer_id=9, epoch=0, sequence=0)
        assert produce(client, "v", 0, other)[0] == E.out_of_order_sequence_number
    assert values(data_dir, "v") == [b"a"]


@pytest.mark.parametrize("configs", [{"compression.type": "gzip"}, {"message.timestamp.type": "LogAppendTime"}],
                         ids=["recompressed", "log-append-time"])
def test_a_retry_is_still_a_duplicate_where_the_store_rewrote_the_batch(kafka_server, data_dir, configs):
    kafka_server.store.create_topic("v", configs=configs)
    first = batch([b"a", b"b"], producer_id=9, epoch=0, sequence=0, timestamp=1_700_000_000_000)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "v", 0, first) == (E.none, 0)
        assert produce(client, "v", 0, first) == (E.none, 0)  # a retry whose ack was lost
    assert values(data_dir, "v") == [b"a", b"b"]

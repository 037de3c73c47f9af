"""The times kafka-transactions.sh shows: DescribeProducers' last timestamp, and a completed
transaction's start time (ListTransactions' duration filter counts from it, as in Kafka 3.9).

Goal: `kafka-transactions.sh describe-producers` shows each producer's last batch time (not -1);
`list --duration-ms` (KIP-994) lists only transactions started longer ago than asked, so one that
just ended is not listed as running for ever. Method: raw requests to an in-process `klog serve`.
"""

from __future__ import annotations

import time

import pytest

from tests.serve_helpers import RawClient, batch, produce

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402

HOUR_MS = 3_600_000


def test_describe_producers_names_the_last_batchs_timestamp(kafka_server):
    from kio.schema.describe_producers.v0 import request as dp

    kafka_server.store.create_topic("dp")
    sent = int(time.time() * 1000) - 5000
    with RawClient(kafka_server.port) as client:
        assert produce(client, "dp", 0, batch([b"a"], producer_id=77, epoch=0, sequence=0, timestamp=sent - 1000))[0] \
            == E.none
        assert produce(client, "dp", 0, batch([b"b"], producer_id=77, epoch=0, sequence=1, timestamp=sent))[0] == E.none
        answer = client.send(61, 0, topics=(dp.TopicRequest(name="dp", partition_indexes=(0,)),))
    (state,) = answer.topics[0].partitions[0].active_producers
    assert (int(state.producer_id), int(state.last_sequence), int(state.last_timestamp)) == (77, 1, sent)  # before: -1


def test_a_completed_transaction_keeps_its_start_time(kafka_server):
    store = kafka_server.store
    store.create_topic("lt")
    before = int(time.time() * 1000)
    with store.producer(transactional_id="done-tx") as producer, producer.transaction():
        producer.send("lt", b"x")
    after = int(time.time() * 1000)
    with RawClient(kafka_server.port) as client:
        def listed(duration_ms: int) -> list[str]:
            answer = client.send(66, 1, state_filters=(), producer_id_filters=(), duration_filter=duration_ms)
            return [str(s.transactional_id) for s in answer.transaction_states]

        assert listed(-1) == ["done-tx"]
        assert listed(HOUR_MS) == []  # before: listed (a start time of -1 is 56 years ago)
        (state,) = client.send(65, 0, transactional_ids=("done-tx",)).transaction_states
    assert state.transaction_state == "CompleteCommit"
    start = int(state.transaction_start_time.timestamp() * 1000)
    assert before - 1 <= start <= after + 1


def test_describe_producers_on_a_log_append_time_topic_names_the_append_time(kafka_server):
    from kio.schema.describe_producers.v0 import request as dp

    kafka_server.store.create_topic("la", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "la", 0, batch([b"a"], producer_id=78, epoch=0, sequence=0, timestamp=1))[0] == E.none
        answer = client.send(61, 0, topics=(dp.TopicRequest(name="la", partition_indexes=(0,)),))
    after = int(time.time() * 1000)
    (state,) = answer.topics[0].partitions[0].active_producers
    assert before <= int(state.last_timestamp) <= after  # the broker's time, not the one sent

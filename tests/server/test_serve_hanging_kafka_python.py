"""KIP-664's admin requests as another client sends them: kafka-python's admin (describe_producers,
list_transactions filtered by producer id, describe_transactions, abort_transaction) against `klog
serve`, walking kafka-transactions.sh's find-hanging and abort --start-offset.

Goal: a Kafka client's admin finds the open transaction, tells from the coordinator's answers
whether it hangs, and ends it with WriteTxnMarkers, as Kafka's tool does against Kafka (Kafka's own
jars are not reachable here). Method: `klog serve` in this process; a confluent-kafka transactional
producer left open; its transactional id then forgotten by the coordinator; confluent-kafka's
read_committed reader.
"""

from __future__ import annotations

import pytest

import klog
from klog.meta.transactions import TransactionsMeta
from tests.server.open_transactions import open_transaction
from tests.server.test_serve_transactions import _read_all

pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")


def _active(admin, tp) -> list:  # noqa: ANN001 - kafka-python's admin and TopicPartition
    return admin.describe_producers([tp])[tp].active_producers


def _listed(admin, pid: int) -> list[str]:  # noqa: ANN001
    found = admin.list_transactions(producer_id_filters=[pid])
    listings = [t for txns in found.values() for t in txns] if isinstance(found, dict) else list(found)
    return [t.transactional_id for t in listings]


@pytest.mark.slow  # a transactional producer, kafka-python's admin, two read_committed reads: ~4 s
def test_kafka_python_admin_walks_the_tools_find_hanging_and_abort(kafka_server, data_dir):
    from kafka import TopicPartition
    from kafka.admin import AbortTransactionSpec, KafkaAdminClient

    b = kafka_server.bootstrap
    with open_transaction(b, data_dir, b"open-1") as old:
        admin = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=15_000)
        tp0 = TopicPartition("h", 0)
        try:
            [state] = [p for p in _active(admin, tp0) if p.current_transaction_start_offset >= 0]
            assert (state.current_transaction_start_offset, state.last_timestamp, state.producer_epoch) == (0, old, 0)
            pid = state.producer_id
            # the tool's filter: the coordinator still names h-0 in the id's transaction: not hanging
            assert _listed(admin, pid) == ["stuck"]
            described = admin.describe_transactions(["stuck"])["stuck"]
            assert str(getattr(described.state, "value", described.state)) == "Ongoing"
            assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {("h", 0), ("h", 1)}
            with klog.open(data_dir) as s:
                TransactionsMeta(s.meta).apply("stuck", lambda meta, txn: None)  # the id forgotten: now hanging
            assert _listed(admin, pid) == []
            assert _read_all(b, "h", 2, "read_committed", limit_s=3) == []
            admin.abort_transaction(AbortTransactionSpec(tp0, pid, state.producer_epoch,
                                                         max(0, state.coordinator_epoch)))
            assert [p.current_transaction_start_offset for p in _active(admin, tp0) if p.producer_id == pid] == [-1]
            assert _read_all(b, "h", 2, "read_committed", expect=1) == [b"after"]
        finally:
            admin.close()

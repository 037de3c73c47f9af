"""transactional.id.expiration.ms: the coordinator forgets a transactional id idle that long.

Goal: as Kafka's TransactionStateManager does, an id with no transaction open or ending and no
change for transactional.id.expiration.ms (7 days by default; the store's klog.json defaults
change it) is removed with its producer id: a producer still holding the old producer id is
refused (INVALID_PRODUCER_ID_MAPPING), a new producer of the id starts with a new producer id, and
an id with a transaction open is never expired. Method: the coordinator with an injected clock;
then `klog serve` with a small value and a real librdkafka transactional producer.
"""

from __future__ import annotations

import time

import pytest

import klog
from tests.server.test_serve_offset_expiry import set_defaults


def test_idle_ids_expire_with_their_producer_ids_and_open_ones_stay(data_dir):
    from klog.broker.batches import RawAppender
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.meta import transactions as tx

    now = [1_000_000]
    with klog.open(data_dir) as store:
        store.create_topic("t")
        coord = TxnCoordinator(store, RawAppender(store), clock=lambda: now[0], id_expiration_ms=10_000)
        assert TxnCoordinator(store, RawAppender(store)).id_expiration_ms == 604_800_000  # Kafka's 7 days
        idle = coord.init_producer_id("idle", 60_000)
        coord.add_partitions("idle", idle.producer_id, idle.epoch, [("t", 0)])
        coord.end_txn("idle", idle.producer_id, idle.epoch, True)  # CompleteCommit, then nothing more
        never_used = coord.init_producer_id("empty", 60_000)  # Empty
        open_ids = coord.init_producer_id("open", 60_000)
        coord.add_partitions("open", open_ids.producer_id, open_ids.epoch, [("t", 0)])  # Ongoing
        now[0] += 10_000 - 1
        assert coord.tick() == []  # not idle long enough yet
        now[0] += 2
        lines = coord.tick()
        assert sorted(line.split("'")[1] for line in lines) == ["empty", "idle"], lines
        assert all("transactional.id.expiration.ms=10000" in line for line in lines)
        meta = tx.TransactionsMeta(store.meta)
        assert meta.get("idle") is None and meta.get("empty") is None
        assert meta.get("open").state == tx.ONGOING  # its transaction times out first; never expired mid-way
        # the old producer id is gone with the id: a zombie of it is refused, as in Kafka
        with pytest.raises(tx.TxnStateError) as caught:
            coord.add_partitions("idle", idle.producer_id, idle.epoch, [("t", 0)])
        assert caught.value.code == tx.INVALID_MAPPING
        again = coord.init_producer_id("idle", 60_000)
        assert again.producer_id not in (idle.producer_id, never_used.producer_id) and again.epoch == 0


@pytest.mark.slow  # a librdkafka transactional producer and a few coordinator passes: ~2 s
def test_serve_expires_idle_ids_per_the_store_defaults(data_dir):
    ck = pytest.importorskip("confluent_kafka")
    from klog.server import Server

    with klog.open(data_dir) as store:
        store.create_topic("t")
    set_defaults(data_dir, **{"transactional_id_expiration_ms": "2000",
                              "transaction_abort_timed_out_transaction_cleanup_interval_ms": "100"})
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "transactional.id": "short-lived"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("t", b"x")
        producer.commit_transaction(30)
        with klog.open(data_dir) as store:
            assert [m.transactional_id for m in store.list_transactions()] == ["short-lived"]
            deadline = time.monotonic() + 20
            while store.list_transactions() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.list_transactions() == []
        del producer

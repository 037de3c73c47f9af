"""What Kafka clients of `klog serve` are told about transactions still open (the exactly-once review).

Goal: a read_committed client is never handed an offset of a record it may not read yet, as Kafka
3.9 answers. Method: a transaction left open on the served store; confluent-kafka's consumers at
both isolation levels ask ListOffsets by time.
"""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")


def _offset_for_time(bootstrap: str, topic: str, ms: int, isolation: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                            "isolation.level": isolation})
    try:
        return consumer.offsets_for_times([ck.TopicPartition(topic, 0, ms)], timeout=10)[0].offset
    finally:
        consumer.close()


def test_list_offsets_by_time_names_no_offset_past_the_last_stable_offset_to_read_committed(kafka_server):
    """A lookup by time that lands in a transaction still open is answered no offset (-1) at
    read_committed, as Kafka does (its lastFetchableOffset); read_uncommitted gets the offset; once
    the transaction commits, read_committed gets it too."""
    store = kafka_server.store
    store.create_topic("lot")
    start = int(time.time() * 1000) - 60_000  # (recent: older records are retention's)
    with store.producer() as plain:
        plain.send("lot", b"committed", timestamp=start)
    producer = store.producer(transactional_id="lot-open")
    producer.begin()
    producer.send("lot", b"open", timestamp=start + 20_000)
    producer.flush()
    asked = start + 10_000
    assert _offset_for_time(kafka_server.bootstrap, "lot", asked, "read_committed") == -1
    assert _offset_for_time(kafka_server.bootstrap, "lot", asked, "read_uncommitted") == 1
    producer.commit()
    producer.close()
    assert _offset_for_time(kafka_server.bootstrap, "lot", asked, "read_committed") == 1


def test_offset_fetch_require_stable_never_answers_offsets_from_before_a_commit_completing_meanwhile(
        kafka_server, monkeypatch):
    """A consumer taking partitions over asks for the group's offsets with require_stable
    (read_committed): while a transaction has offsets staged it is told to wait, after it the
    offsets committed with it. A commit completing between the server's two reads (the committed
    offsets, then the staged ones) was neither: the offsets from before it came back as stable, and
    the consumer read again the input whose output had committed (twice the output)."""
    from klog.meta.groups import GroupsMeta

    store = kafka_server.store
    store.create_topic("src")
    producer = store.producer(transactional_id="rs-etl")
    with producer.transaction():
        producer.send("rs-out", b"first")
        producer.send_offsets("rs-group", {("src", 0): 5})
    producer.begin()
    producer.send("rs-out", b"second")
    producer.send_offsets("rs-group", {("src", 0): 9})  # staged: committed with "second"
    read = GroupsMeta.committed
    completed = []

    def committed_then_the_commit_completes(self, group):  # noqa: ANN001, ANN202
        found = read(self, group)
        if group == "rs-group" and not completed:
            producer.commit()  # lands right after the server read the committed offsets
            completed.append(True)
        return found

    monkeypatch.setattr(GroupsMeta, "committed", committed_then_the_commit_completes)
    consumer = ck.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "rs-group",
                            "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        found = consumer.committed([ck.TopicPartition("src", 0)], timeout=10)
    finally:
        consumer.close()
        producer.close()
    assert completed
    assert found[0].offset == 9


def test_add_offsets_to_txn_refuses_a_group_id_no_offset_can_be_committed_to(kafka_server):
    """AddOffsetsToTxn took any group id into the transaction's state: one of a megabyte (a request
    may be 100 MB) was kept in the transactional id's LMDB document, rewritten at every request of
    the transaction and parsed at every timer pass, for a group TxnOffsetCommit then refuses
    (INVALID_GROUP_ID). Now AddOffsetsToTxn refuses it the same way and adds nothing."""
    from klog.meta.transactions import TransactionsMeta
    from klog.protocol.kafka import E
    from tests.serve_helpers import RawClient
    from tests.server.test_serve_transactions import _end, _init

    with RawClient(kafka_server.port) as c:
        r = _init(c, "big-group")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        for group in ("g" * 1_000_000, "tab\tin-name"):
            assert c.send(25, 3, transactional_id="big-group", producer_id=pid, producer_epoch=epoch,
                          group_id=group).error_code == E.invalid_group_id
        assert c.send(25, 3, transactional_id="big-group", producer_id=pid, producer_epoch=epoch,
                      group_id="fine").error_code == E.none
        assert TransactionsMeta(kafka_server.store.meta).get("big-group").groups == ["fine"]
        assert _end(c, "big-group", pid, epoch, True) == E.none

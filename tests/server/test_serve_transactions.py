"""Kafka transactions through `klog serve`, proven with independent clients.

Goal: a transactional producer's records are seen by read_committed readers all-or-nothing, and
never when aborted; a second producer with the same transactional id fences the first; consumer
offsets sent in a transaction are committed with it (KIP-447); the server's answers follow Kafka's
state machine (wrong epochs, partitions not added, a transaction ended twice); what a crash leaves
half-done is completed at restart; an abandoned transaction is aborted after its timeout.
Method: confluent-kafka (librdkafka), aiokafka and kafka-python against an in-process server;
raw kio requests where clients never go wrong; the coordinator driven with an injected clock.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time

import pytest
from kio.static.primitive import i32Timedelta

import klog
from klog.protocol.kafka import E
from tests.segment_files import poll_to_end
from tests.serve_helpers import RawClient, produce_request_fields
from tests.serve_helpers import txn_batch as _txn_batch  # (other serve tests import it from here)

ck = pytest.importorskip("confluent_kafka")


def _txn_producer(bootstrap: str, tid: str, **extra: object):  # noqa: ANN202
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    producer.init_transactions(30)
    return producer


def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None,
              limit_s: float = 20.0) -> list[bytes]:
    """Every value of the topic from the start, through confluent-kafka at `isolation`: polls until
    each partition reports its end (or `expect` records arrived), bounded by `limit_s`."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
                            "isolation.level": isolation, "enable.partition.eof": True,
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    got = poll_to_end(consumer, limit_s, lambda got: expect is None or len(got) >= expect, partitions)
    return [value for _, _, value in got]


@pytest.mark.slow
def test_confluent_commit_and_abort_read_committed(kafka_server):
    """Committed transactions are read whole by read_committed readers, aborted ones never; a
    read_uncommitted reader sees both (the control batches themselves are never handed out)."""
    kafka_server.store.create_topic("t", 2)
    producer = _txn_producer(kafka_server.bootstrap, "tx-commit-abort")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("t", value=b"c%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(6):  # one batch each (flushed): the aborted range starts at the first, not the last
        producer.produce("t", value=b"a%d" % i, partition=i % 2)
        producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("t", value=b"last", partition=0)
    producer.commit_transaction(30)
    committed = sorted(_read_all(kafka_server.bootstrap, "t", 2, "read_committed", expect=11))
    assert committed == sorted([b"c%d" % i for i in range(10)] + [b"last"])
    everything = sorted(_read_all(kafka_server.bootstrap, "t", 2, "read_uncommitted", expect=17))
    assert everything == sorted(committed + [b"a%d" % i for i in range(6)])


@pytest.mark.slow
def test_open_transaction_holds_read_committed_readers_at_its_start(kafka_server):
    """While a transaction is open, read_committed readers stop before its first record (the last
    stable offset: the oldest open transaction's), and records after it from other producers wait
    too; its commit releases those up to the next open transaction, whose commit releases all."""
    kafka_server.store.create_topic("lso")
    producer = _txn_producer(kafka_server.bootstrap, "tx-lso")
    later = _txn_producer(kafka_server.bootstrap, "tx-lso-later")
    plain = ck.Producer({"bootstrap.servers": kafka_server.bootstrap})
    plain.produce("lso", value=b"before")
    plain.flush(30)
    producer.begin_transaction()
    for value in (b"inside-1", b"inside-2"):  # two batches: the LSO stays at the first one's offset
        producer.produce("lso", value=value)
        producer.flush(30)
    plain.produce("lso", value=b"after")
    plain.flush(30)
    later.begin_transaction()  # a second open transaction, begun after the first
    later.produce("lso", value=b"later")
    later.flush(30)
    assert _read_all(kafka_server.bootstrap, "lso", 1, "read_committed", limit_s=8) == [b"before"]
    producer.commit_transaction(30)
    assert _read_all(kafka_server.bootstrap, "lso", 1, "read_committed", limit_s=8) == [
        b"before", b"inside-1", b"inside-2", b"after"]
    later.commit_transaction(30)
    assert _read_all(kafka_server.bootstrap, "lso", 1, "read_committed", expect=5) == [
        b"before", b"inside-1", b"inside-2", b"after", b"later"]


@pytest.mark.slow
def test_second_instance_fences_the_first(kafka_server):
    """A producer started with the same transactional id aborts the first's open transaction and
    fences it: the first's commit fails fatally, its records are never read as committed."""
    kafka_server.store.create_topic("f")
    first = _txn_producer(kafka_server.bootstrap, "tx-fence")
    first.begin_transaction()
    first.produce("f", value=b"zombie")
    first.flush(30)
    second = _txn_producer(kafka_server.bootstrap, "tx-fence")
    with pytest.raises(ck.KafkaException) as caught:
        first.produce("f", value=b"zombie-2")
        first.commit_transaction(30)
    err = caught.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    second.begin_transaction()
    second.produce("f", value=b"winner")
    second.commit_transaction(30)
    assert _read_all(kafka_server.bootstrap, "f", 1, "read_committed", expect=1) == [b"winner"]


def test_consume_transform_produce_commits_offsets_with_the_output(kafka_server):
    """send_offsets_to_transaction: the group's committed offsets move with a committed
    transaction and stay where they were when it aborts (KIP-447)."""
    store = kafka_server.store
    store.create_topic("in")
    store.create_topic("out")
    with klog.open(store.path) as s:
        with s.producer() as p:
            for i in range(6):
                p.send("in", b"v%d" % i)
    consumer = ck.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "ctp",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    consumer.assign([ck.TopicPartition("in", 0, 0)])
    producer = _txn_producer(kafka_server.bootstrap, "tx-ctp")
    msgs: list = []
    deadline = time.monotonic() + 20
    while len(msgs) < 6 and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            msgs.append(m)
    assert len(msgs) == 6
    for chunk, outcome in ((msgs[:3], "commit"), (msgs[3:], "abort")):
        producer.begin_transaction()
        for m in chunk:
            producer.produce("out", value=m.value().upper())
        producer.send_offsets_to_transaction([ck.TopicPartition("in", 0, chunk[-1].offset() + 1)],
                                             consumer.consumer_group_metadata(), 30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    producer.begin_transaction()  # the abort ended its transaction: this one is read after it
    producer.produce("out", value=b"END")
    producer.commit_transaction(30)
    (tp,) = consumer.committed([ck.TopicPartition("in", 0)], timeout=10)
    assert tp.offset == 3  # the committed transaction's offset; the aborted one's was dropped
    consumer.close()
    assert _read_all(kafka_server.bootstrap, "out", 1, "read_committed", expect=4) == [b"V0", b"V1", b"V2", b"END"]


def test_aiokafka_transactional_producer_and_send_offsets(kafka_server):
    aiokafka = pytest.importorskip("aiokafka")
    store = kafka_server.store
    store.create_topic("ai", 2)

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=kafka_server.bootstrap, transactional_id="tx-aio")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send_and_wait("ai", b"ok%d" % i, partition=i % 2)
                await producer.send_offsets_to_transaction({aiokafka.TopicPartition("ai", 0): 2}, "aio-group")
            await producer.begin_transaction()
            await producer.send_and_wait("ai", b"gone", partition=1)
            await producer.abort_transaction()
            async with producer.transaction():  # the abort ended its transaction: this one is read after it
                await producer.send_and_wait("ai", b"after", partition=1)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert sorted(_read_all(kafka_server.bootstrap, "ai", 2, "read_committed", expect=5)) == [
        b"after", b"ok0", b"ok1", b"ok2", b"ok3"]
    from klog.meta.groups import GroupsMeta

    committed = GroupsMeta(store.meta).committed("aio-group")
    assert committed[("ai", 0)].offset == 2


@pytest.mark.slow
def test_kafka_python_read_committed_skips_aborted_records(kafka_server):
    """kafka-python's own read_committed logic (the aborted transactions in our Fetch answers and
    the control batches in our logs) drops the aborted records; aiokafka's does too."""
    kafka = pytest.importorskip("kafka")
    kafka_server.store.create_topic("kp")
    producer = _txn_producer(kafka_server.bootstrap, "tx-kp")
    for n, outcome in enumerate(("commit", "abort", "commit", "abort", "commit")):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("kp", value=b"%s-%d-%d" % (outcome.encode(), n, i))
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    want = [b"commit-%d-%d" % (n, i) for n in (0, 2, 4) for i in range(3)]
    consumer = kafka.KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, isolation_level="read_committed",
                                   auto_offset_reset="earliest", consumer_timeout_ms=3000)
    consumer.assign([kafka.TopicPartition("kp", 0)])
    got = [m.value for m in consumer]
    consumer.close()
    assert got == want

    aiokafka = pytest.importorskip("aiokafka")

    async def read() -> list[bytes]:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=kafka_server.bootstrap, isolation_level="read_committed",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            c.assign([aiokafka.TopicPartition("kp", 0)])
            out: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(out) < len(want) and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=300)
                out.extend(m.value for ms in batches.values() for m in ms)
            return out
        finally:
            await c.stop()

    assert asyncio.run(read()) == want


def test_aborted_ranges_go_to_the_txnindex_in_kafkas_format(kafka_server):
    from klog.store.txn import read_txn_index

    kafka_server.store.create_topic("ix")
    producer = _txn_producer(kafka_server.bootstrap, "tx-ix")
    producer.begin_transaction()
    producer.produce("ix", value=b"a")
    producer.produce("ix", value=b"b")
    producer.flush(30)
    producer.abort_transaction(30)
    part = kafka_server.store.partition("ix", 0)
    entries = read_txn_index(part.leader.directory, 0)
    assert entries is not None and len(entries) == 1
    (entry,) = entries
    assert entry.first_offset == 0 and entry.last_offset >= 1  # the marker's offset
    assert entry.last_stable_offset == entry.last_offset + 1
    with open(os.path.join(part.leader.directory, "00000000000000000000.txnindex"), "rb") as f:
        assert len(f.read()) == 34  # one AbortedTxn entry


# -- the protocol's error answers (raw requests: what clients never do wrong) -----------------------
def _init(client: RawClient, tid: str, timeout_s: float = 60, version: int = 4) -> object:
    return client.send(22, version, transactional_id=tid, transaction_timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=timeout_s)), producer_id=-1, producer_epoch=-1)


def _add(client: RawClient, tid: str, pid: int, epoch: int, topic: str, parts: tuple[int, ...], version: int = 3):
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    mod = load_payload_module(24, version, EntityType.request)
    topics = (mod.AddPartitionsToTxnTopic(name=topic, partitions=parts),)
    resp = client.send(24, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                       v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)
    return {(r.name, int(p.partition_index)): p.partition_error_code
            for r in resp.results_by_topic_v3_and_below for p in r.results_by_partition}


def _end(client: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> E:
    return client.send(26, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                       committed=commit).error_code


def _produce_txn(client: RawClient, tid: str, topic: str, partition: int, records: bytes) -> E:
    fields = produce_request_fields(9, topic, partition, records)
    fields["transactional_id"] = tid
    resp = client.send(0, 9, **fields)
    return resp.responses[0].partition_responses[0].error_code


def test_state_machine_errors_on_the_wire(kafka_server):
    kafka_server.store.create_topic("sm", 2)
    with RawClient(kafka_server.port) as c:
        assert _init(c, "sm", timeout_s=10_000).error_code == E.invalid_transaction_timeout  # > 900 s
        r = _init(c, "sm")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _end(c, "sm", pid, epoch, True) == E.invalid_txn_state  # no transaction yet
        assert _add(c, "sm", pid + 1, epoch, "sm", (0,)) == {("sm", 0): E.invalid_producer_id_mapping}
        assert _add(c, "sm", pid, epoch + 1, "sm", (0,)) == {("sm", 0): E.producer_fenced}
        assert _add(c, "sm", pid, epoch + 1, "sm", (0,), version=1) == {("sm", 0): E.invalid_producer_epoch}
        assert _add(c, "sm", pid, epoch, "sm", (0, 7)) == {("sm", 0): E.operation_not_attempted,
                                                           ("sm", 7): E.unknown_topic_or_partition}
        assert _add(c, "sm", pid, epoch, "sm", (0,)) == {("sm", 0): E.none}
        # a transactional batch for a partition not added: refused (KIP-890)
        assert _produce_txn(c, "sm", "sm", 1, _txn_batch([b"x"], pid, epoch, 0)) == E.invalid_txn_state
        assert _produce_txn(c, "sm", "sm", 0, _txn_batch([b"y"], pid, epoch, 0)) == E.none
        # a transactional batch without a transactional id in the request (Kafka: the whole request)
        refused = _produce_txn(c, None, "sm", 0, _txn_batch([b"z"], pid, epoch, 1))
        assert refused == E.transactional_id_authorization_failed
        assert _end(c, "sm", pid, epoch, False) == E.none
        assert _end(c, "sm", pid, epoch, False) == E.none  # a retry of the same outcome
        assert _end(c, "sm", pid, epoch, True) == E.invalid_txn_state  # aborted, not committed
        assert _produce_txn(c, "sm", "sm", 0, _txn_batch([b"late"], pid, epoch, 1)) == E.invalid_txn_state
        # v4: a broker's verify-only question
        from kio.schema.add_partitions_to_txn.v4 import request as v4

        resp = c.send(24, 4, transactions=(v4.AddPartitionsToTxnTransaction(
            transactional_id="sm", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=(v4.AddPartitionsToTxnTopic(name="sm", partitions=(0,)),)),))
        (result,) = resp.results_by_transaction
        assert result.topic_results[0].results_by_partition[0].partition_error_code == E.invalid_txn_state
        assert _add(c, "sm", pid, epoch, "sm", (0,)) == {("sm", 0): E.none}
        resp = c.send(24, 4, transactions=(v4.AddPartitionsToTxnTransaction(
            transactional_id="sm", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=(v4.AddPartitionsToTxnTopic(name="sm", partitions=(0, 1)),)),))
        codes = [p.partition_error_code for p in resp.results_by_transaction[0].topic_results[0].results_by_partition]
        assert codes == [E.none, E.invalid_txn_state]
        # a new incarnation while a transaction is open: it is aborted first (CONCURRENT_TRANSACTIONS)
        assert _produce_txn(c, "sm", "sm", 0, _txn_batch([b"open"], pid, epoch, 1)) == E.none
        assert _init(c, "sm").error_code == E.concurrent_transactions
        r2 = _init(c, "sm")
        assert r2.error_code == E.none and (int(r2.producer_id), int(r2.producer_epoch)) == (pid, epoch + 2)
        assert _add(c, "sm", pid, epoch, "sm", (0,)) == {("sm", 0): E.producer_fenced}
        assert _produce_txn(c, "sm", "sm", 0, _txn_batch([b"zombie"], pid, epoch, 2)) == E.invalid_producer_epoch
    assert _read_all(kafka_server.bootstrap, "sm", 2, "read_committed", limit_s=6) == []


def test_offset_fetch_require_stable_while_a_commit_is_pending(kafka_server):
    kafka_server.store.create_topic("st")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "st")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert c.send(25, 3, transactional_id="st", producer_id=pid, producer_epoch=epoch,
                      group_id="stable-g").error_code == E.none
        from kio.schema.txn_offset_commit.v3 import request as toc

        resp = c.send(28, 3, transactional_id="st", group_id="stable-g", producer_id=pid, producer_epoch=epoch,
                      generation_id=-1, member_id="", group_instance_id=None, topics=(toc.TxnOffsetCommitRequestTopic(
                          name="st", partitions=(toc.TxnOffsetCommitRequestPartition(
                              partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                              committed_metadata=""),)),))
        assert resp.topics[0].partitions[0].error_code == E.none

        def fetch(stable: bool) -> tuple[E, int]:
            from kio.schema.offset_fetch.v7 import request as of

            got = c.send(9, 7, group_id="stable-g", require_stable=stable,
                         topics=(of.OffsetFetchRequestTopic(name="st", partition_indexes=(0,)),))
            p = got.topics[0].partitions[0]
            return p.error_code, int(p.committed_offset)

        assert fetch(True) == (E.unstable_offset_commit, -1)
        assert fetch(False) == (E.none, -1)  # not committed yet
        assert _end(c, "st", pid, epoch, True) == E.none
        assert fetch(True) == (E.none, 5)


# -- restarts and timeouts (the coordinator with an injected clock) ------------------------------------
def test_restart_completes_a_prepared_commit_once(data_dir):
    """A crash after PrepareCommit was made durable, before the markers: the next server start
    writes them (once per partition), makes the staged offsets visible, and keeps fencing."""
    from klog.broker.batches import RawAppender
    from klog.broker.producer_ids import new_producer_id
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.meta import transactions as tx
    from klog.store.txn import StableView

    with klog.open(data_dir) as store:
        store.create_topic("rc", 2)
        appender = RawAppender(store)
        coord = TxnCoordinator(store, appender, new_producer_id)
        ids = coord.init_producer_id("rc", 60_000)
        coord.add_partitions("rc", ids.producer_id, ids.epoch, [("rc", 0), ("rc", 1)])
        coord.add_offsets("rc", ids.producer_id, ids.epoch, "rc-group")
        coord.txn_offset_commit("rc", ids.producer_id, ids.epoch, "rc-group", {("src", 0): (42, "m")})
        for p in (0, 1):
            check = lambda h, p=p: coord.check_append("rc", h.producer_id, h.producer_epoch, ("rc", p))  # noqa: E731
            appender.append("rc", p, _txn_batch([b"r%d" % p], ids.producer_id, ids.epoch, 0), "all", check)
        # the crash: PrepareCommit durable, one marker of two written, nothing completed
        coord.meta.apply("rc", lambda m, _t: (tx.end_transaction(m, ids.producer_id, ids.epoch, True, 0), m)[1])
        appender.write_marker("rc", 0, ids.producer_id, ids.epoch, 1, 0, lambda: True)
    with klog.open(data_dir) as store:
        from klog.server import Server

        # the start's recovery must do it: no timer pass (which completes a stale Prepare* too) comes
        # before the deadline
        with Server(store=store, listen=("127.0.0.1", 0), transactions={"cleanup_interval_ms": 600_000}) as server:
            deadline = time.monotonic() + 20
            while TxnCoordinatorState.of(store, "rc") != tx.COMPLETE_COMMIT and time.monotonic() < deadline:
                time.sleep(0.05)
            assert TxnCoordinatorState.of(store, "rc") == tx.COMPLETE_COMMIT
            from klog.meta.groups import GroupsMeta

            assert GroupsMeta(store.meta).committed("rc-group")[("src", 0)].offset == 42
            for p in (0, 1):
                view = StableView(store.partition("rc", p).leader)
                hw = store.partition("rc", p).high_watermark()
                assert view.refresh(hw) == hw == 2  # one data batch and exactly one marker each
            assert sorted(_read_all(server_bootstrap(server), "rc", 2, "read_committed", expect=2)) == [b"r0", b"r1"]
            with RawClient(server.port) as c:  # the old epoch stays fenced
                assert _add(c, "rc", ids.producer_id, ids.epoch - 1, "rc", (0,)) == {("rc", 0): E.producer_fenced}


def server_bootstrap(server) -> str:  # noqa: ANN001
    return f"127.0.0.1:{server.port}"


class TxnCoordinatorState:
    @staticmethod
    def of(store, tid: str) -> str | None:  # noqa: ANN001
        from klog.meta.transactions import TransactionsMeta

        meta = TransactionsMeta(store.meta).get(tid)
        return None if meta is None else meta.state


def test_abandoned_transaction_is_aborted_after_its_timeout(data_dir):
    """A producer that dies mid-transaction holds read_committed readers only until its
    transaction.timeout.ms: the coordinator aborts it and fences the epoch."""
    from klog.broker.batches import RawAppender
    from klog.broker.producer_ids import new_producer_id
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.errors import InvalidProducerEpochError
    from klog.meta import transactions as tx
    from klog.store.txn import StableView

    now = [1_000_000]
    with klog.open(data_dir) as store:
        store.create_topic("to")
        appender = RawAppender(store)
        coord = TxnCoordinator(store, appender, new_producer_id, clock=lambda: now[0])
        ids = coord.init_producer_id("to", 5_000)
        coord.add_partitions("to", ids.producer_id, ids.epoch, [("to", 0)])
        check = lambda h: coord.check_append("to", h.producer_id, h.producer_epoch, ("to", 0))  # noqa: E731
        appender.append("to", 0, _txn_batch([b"x"], ids.producer_id, ids.epoch, 0), "all", check)
        view = StableView(store.partition("to", 0).leader)
        assert view.refresh(store.partition("to", 0).high_watermark()) == 0  # held at the open transaction
        now[0] += 4_000
        assert coord.tick() == []
        now[0] += 2_000
        (line,) = coord.tick()
        assert "aborted after transaction.timeout.ms=5000" in line
        assert TxnCoordinatorState.of(store, "to") == tx.COMPLETE_ABORT
        hw = store.partition("to", 0).high_watermark()
        assert view.refresh(hw) == hw == 2
        assert [(a.first_offset, a.last_offset) for a in view.aborted_txns] == [(0, 1)]
        with pytest.raises(InvalidProducerEpochError):
            coord.check_append("to", ids.producer_id, ids.epoch, ("to", 0))
        with pytest.raises(tx.TxnStateError) as caught:
            coord.end_txn("to", ids.producer_id, ids.epoch, True)
        assert caught.value.code == tx.FENCED


def test_marker_appended_but_unpublished_before_a_crash_is_made_visible(data_dir):
    """Killed after a marker reached the file, before the high watermark was published: the
    completion after restart must not take the marker as done while readers stay before it (the
    transaction would hang every read_committed reader; found by the fault test)."""
    from klog.broker.batches import RawAppender
    from klog.broker.producer_ids import new_producer_id
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.meta import transactions as tx
    from klog.store.txn import ABORT, StableView, control_batch

    with klog.open(data_dir) as store:
        store.create_topic("up")
        appender = RawAppender(store)
        coord = TxnCoordinator(store, appender, new_producer_id)
        ids = coord.init_producer_id("up", 60_000)
        coord.add_partitions("up", ids.producer_id, ids.epoch, [("up", 0)])
        check = lambda h: coord.check_append("up", h.producer_id, h.producer_epoch, ("up", 0))  # noqa: E731
        appender.append("up", 0, _txn_batch([b"x"], ids.producer_id, ids.epoch, 0), "all", check)
        coord.meta.apply("up", lambda m, _t: (tx.end_transaction(m, ids.producer_id, ids.epoch, False, 0), m)[1])
        part = store.partition("up", 0)
        with part.lock:  # the marker's append, without the publish that would follow it
            part.open_for_write()
            part.append_batch(control_batch(ids.producer_id, ids.epoch, ABORT, 0, int(time.time() * 1000)))
        assert part.high_watermark() == 1
    with klog.open(data_dir) as store:
        coord = TxnCoordinator(store, RawAppender(store), new_producer_id)
        assert len(coord.recover()) == 1
        part = store.partition("up", 0)
        hw = part.high_watermark()
        assert hw == 2 and StableView(part.leader).refresh(hw) == 2  # one marker, visible; nothing open


def test_list_describe_transactions_and_producers(kafka_server):
    """What kafka-transactions.sh asks: ListTransactions, DescribeTransactions (an open transaction's
    state, producer and partitions) and DescribeProducers (where its open transaction begins)."""
    from kio.schema.describe_producers.v0 import request as dp

    kafka_server.store.create_topic("ad", 2)
    with RawClient(kafka_server.port) as c:
        r = _init(c, "admin-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add(c, "admin-tx", pid, epoch, "ad", (1,)) == {("ad", 1): E.none}
        assert _produce_txn(c, "admin-tx", "ad", 1, _txn_batch([b"a", b"b"], pid, epoch, 0)) == E.none
        listed = c.send(66, 0, state_filters=("Ongoing",), producer_id_filters=())
        assert [(s.transactional_id, int(s.producer_id), s.transaction_state) for s in listed.transaction_states] == [
            ("admin-tx", pid, "Ongoing")]
        assert c.send(66, 0, state_filters=("CompleteCommit",), producer_id_filters=()).transaction_states == ()
        assert c.send(66, 0, state_filters=(), producer_id_filters=(pid + 1,)).transaction_states == ()
        # v1's duration filter (KIP-994): only transactions running longer than it
        def running_longer_than(ms: int) -> int:
            return len(c.send(66, 1, state_filters=(), producer_id_filters=(), duration_filter=ms).transaction_states)

        assert (running_longer_than(-1), running_longer_than(3_600_000)) == (1, 0)
        found, missing = c.send(65, 0, transactional_ids=("admin-tx", "nobody")).transaction_states
        assert (found.error_code, found.transaction_state, int(found.producer_id)) == (E.none, "Ongoing", pid)
        assert [(t.topic, tuple(t.partitions)) for t in found.topics] == [("ad", (1,))]
        assert missing.error_code == E.transactional_id_not_found
        producers = c.send(61, 0, topics=(dp.TopicRequest(name="ad", partition_indexes=(0, 1)),))
        p0, p1 = producers.topics[0].partitions
        assert p0.active_producers == ()
        (state,) = p1.active_producers
        assert (int(state.producer_id), int(state.last_sequence), int(state.current_txn_start_offset)) == (pid, 1, 0)
        assert _end(c, "admin-tx", pid, epoch, True) == E.none
        producers = c.send(61, 0, topics=(dp.TopicRequest(name="ad", partition_indexes=(1,)),))
        assert int(producers.topics[0].partitions[0].active_producers[0].current_txn_start_offset) == -1


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_ends_an_open_transaction_in_the_named_partitions(kafka_server, version):
    """WriteTxnMarkers (v0 from Kafka 3.9's oldest schemas, v1 flexible): a COMMIT marker where the
    producer has records open moves the last stable offset over them; a repeat writes nothing."""
    from kio.static.constants import EntityType

    from klog.broker.offsets import last_stable_offset
    from klog.meta.transactions import TransactionsMeta
    from klog.protocol.schemas import payload_module

    req = payload_module(27, version, EntityType.request)
    store = kafka_server.store
    store.create_topic("wm", 2)
    with RawClient(kafka_server.port) as c:
        r = _init(c, "wm-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add(c, "wm-tx", pid, epoch, "wm", (0,)) == {("wm", 0): E.none}
        assert _produce_txn(c, "wm-tx", "wm", 0, _txn_batch([b"a", b"b"], pid, epoch, 0)) == E.none
        part = store.partition("wm", 0)
        assert last_stable_offset(part) == 0  # open
        # an admin's marker is for a transaction no coordinator runs (one it runs is refused:
        # test_serve_marker_refused_while_coordinated): the transactional id forgotten
        TransactionsMeta(store.meta).apply("wm-tx", lambda meta, txn: None)
        marker = req.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=True,
                                       coordinator_epoch=0, topics=(req.WritableTxnMarkerTopic(
                                           name="wm", partition_indexes=(0, 1)),))
        for _ in range(2):
            answer = c.send(27, version, markers=(marker,))
            [result] = answer.markers
            assert int(result.producer_id) == pid
            assert [(int(p.partition_index), p.error_code) for p in result.topics[0].partitions] == [
                (0, E.none), (1, E.none)]
            assert part.high_watermark() == 3 and last_stable_offset(part) == 3  # a, b and one marker
        assert store.partition("wm", 1).high_watermark() == 0  # nothing was open there


def test_kcat_transactional_producer(kafka_server):
    """kcat -P -X transactional.id=...: its whole input is one transaction, committed at the end."""
    import shutil
    import subprocess

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    kafka_server.store.create_topic("kc")
    done = subprocess.run(["kcat", "-P", "-b", kafka_server.bootstrap, "-t", "kc", "-X", "transactional.id=kc-1"],
                          input=b"a\nb\n", capture_output=True, timeout=60)
    assert done.returncode == 0 and b"Transaction successfully committed" in done.stderr, done.stderr
    read = subprocess.run(["kcat", "-C", "-b", kafka_server.bootstrap, "-t", "kc", "-e", "-o", "beginning",
                           "-X", "isolation.level=read_committed"], capture_output=True, timeout=60)
    assert read.stdout == b"a\nb\n" and b"at offset 3" in read.stderr  # two records and the COMMIT marker

"""`klog transactions list|describe|abort -b` (kafka-transactions.sh's requests) and a transactional
producer without Write on its TransactionalId, through a cluster.

Goal: through `--bootstrap-server` the verbs print what they print on the local store, and `abort`
ends a hanging transaction so read_committed readers get past it. Method: `klog serve` in this
process; the hanging transaction is confluent-kafka's transactional producer that never commits;
the reader is confluent-kafka's read_committed consumer, not ours.
"""

from __future__ import annotations

import gc
import json
import logging

import pytest

import klog
from klog.meta.credentials import CredentialsMeta
from klog.security.acl import Operation, ResourceType
from tests.cli.test_cli import assert_one_line_error
from tests.server.test_serve_acl_matrix import T, _set_acls, allow, env  # noqa: F401 - env is a fixture
from tests.server.test_serve_transactions import _read_all

ck = pytest.importorskip("confluent_kafka")
QUIET = {"log_level": 0}  # librdkafka's own lines (reconnects) would land in later tests' stderr


def _hanging(bootstrap: str, tid: str, conf: dict | None = None):  # noqa: ANN202 - a confluent Producer
    """A committed record on h-0, then a transaction left open on h-0 and h-1, then a plain record
    on h-0 behind it (a read_committed reader stops before the open transaction's first record)."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                            "transaction.timeout.ms": 60_000, **QUIET, **(conf or {})})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("h", b"committed", partition=0)
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.produce("h", b"hanging-0", partition=0)
    producer.produce("h", b"hanging-1", partition=1)
    producer.flush(10)
    plain = ck.Producer({"bootstrap.servers": bootstrap, **QUIET, **(conf or {})})
    plain.produce("h", b"after", partition=0)
    plain.flush(10)
    return producer


@pytest.mark.slow  # a transactional producer, five CLI calls through -b, two read_committed reads: ~3.5 s
def test_list_describe_abort_through_a_cluster(kafka_server, cli, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("h", 2)
    b = kafka_server.bootstrap
    done = ck.Producer({"bootstrap.servers": b, "transactional.id": "done", **QUIET})
    done.init_transactions(10)  # an id with no transaction open (Empty: no start time)
    producer = _hanging(b, "stuck")
    try:
        r = cli("transactions", "list", "-b", b, "--json")
        assert r.exit_code == 0, r.stderr
        listed = [json.loads(line) for line in r.out.splitlines()]
        local = [json.loads(line) for line in cli("transactions", "list", "--json").out.splitlines()]
        assert listed == local  # the same documents as from the store itself
        assert [(d["transactional_id"], d["state"], d["partitions"]) for d in listed] == [
            ("done", "Empty", []), ("stuck", "Ongoing", ["h-0", "h-1"])]
        table = cli("transactions", "list", "-b", b)
        assert table.out.split("\n")[0].split() == ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH",
                                                    "TIMEOUT-MS", "PARTITIONS"]
        assert "stuck" in table.out and "h-0,h-1" in table.out
        r = cli("transactions", "describe", "stuck", "-b", b, "--json")
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.out) == json.loads(cli("transactions", "describe", "stuck", "--json").out)
        assert json.loads(r.out)["timeout_ms"] == 60_000
        # the open transaction holds read_committed readers before its first record
        assert _read_all(b, "h", 2, "read_committed", limit_s=3) == [b"committed"]
        r = cli("transactions", "abort", "stuck", "-b", b)
        assert r.exit_code == 0 and "transaction aborted" in r.stderr, r.stderr
        got = _read_all(b, "h", 2, "read_committed", expect=2)
        assert sorted(got) == [b"after", b"committed"]  # past the aborted records, never showing them
        # aborted at its coordinator, its producer fenced: its commit fails (markers only left the
        # coordinator's transaction Ongoing, and this commit then succeeded with its records aborted)
        with pytest.raises(ck.KafkaException, match="(?i)fenced"):
            producer.commit_transaction(10)
        assert json.loads(cli("transactions", "describe", "stuck", "--json").out)["state"] == "CompleteAbort"
        r = cli("transactions", "abort", "stuck", "-b", b)  # nothing left open in the partitions
        assert r.exit_code == 0 and "no ongoing transaction" in r.stderr, r.stderr
        r = cli("transactions", "abort", "done", "-b", b)
        assert r.exit_code == 0 and "no ongoing transaction" in r.stderr, r.stderr
    finally:
        producer.purge()
        del producer, done
        gc.collect()  # librdkafka clients gone before the server: none reconnects and logs into later tests
    assert_one_line_error(cli("transactions", "describe", "nobody", "-b", b), 2, "no transactional id 'nobody'")


@pytest.mark.slow
def test_transactional_producer_without_write_on_its_id(env, cli):  # noqa: F811 - the env fixture
    """SASL principal alice may write topic t but not use transactional id 'tx-alice': `klog produce
    --transactional-id` through -b is one line, exit 1; with Write on the id it commits."""
    props = ["-b", env.conf["bootstrap.servers"], "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice", "-X", "sasl.password=pw"]
    _set_acls(env, [allow(T, "t", op) for op in (Operation.DESCRIBE, Operation.WRITE)])
    r = cli("produce", "t", "--transactional-id", "tx-alice", *props, input=b"refused\n")
    assert_one_line_error(r, 1, "transactional id 'tx-alice'", "not authorized")
    _set_acls(env, [allow(T, "t", op) for op in (Operation.DESCRIBE, Operation.WRITE)]
              + [allow(ResourceType.TRANSACTIONAL_ID, "tx-alice", Operation.WRITE)])
    r = cli("produce", "t", "--transactional-id", "tx-alice", *props, input=b"accepted\n")
    assert r.exit_code == 0, r.stderr


@pytest.mark.slow
def test_transactions_verbs_need_kafkas_acls(env, cli):  # noqa: F811 - the env fixture
    """Through -b the verbs are authorized as kafka-transactions.sh's requests are: an id alice may not
    Describe is not listed and not described; abort (InitProducerId at its coordinator) needs Write on it."""
    props = ["-b", env.conf["bootstrap.servers"], "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice", "-X", "sasl.password=pw"]
    topic = [allow(T, "t", op) for op in (Operation.DESCRIBE, Operation.WRITE, Operation.READ)]
    tid = allow(ResourceType.TRANSACTIONAL_ID, "tx-open", Operation.WRITE)
    _set_acls(env, [*topic, tid])
    # its log to Python's logging: once the id's ACL goes, librdkafka's background thread logs a FATAL
    # line, which on this process's stderr would land in the command's captured error output
    producer = ck.Producer({**env.conf, "transactional.id": "tx-open", "transaction.timeout.ms": 60_000},
                           logger=logging.getLogger("tx-open-producer"))
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("t", b"open", partition=0)
        producer.flush(10)
        r = cli("transactions", "describe", "tx-open", "--json", *props)  # Write on the id implies Describe
        assert r.exit_code == 0 and json.loads(r.out)["partitions"] == ["t-0"], r.stderr
        _set_acls(env, [*topic, allow(ResourceType.TRANSACTIONAL_ID, "tx-open", Operation.DESCRIBE)])
        r = cli("transactions", "abort", "tx-open", *props)
        assert_one_line_error(r, 1, "tx-open", "not authorized", "Write on the TransactionalId")
        _set_acls(env, topic)  # no ACL on the id: not listed, not described
        r = cli("transactions", "list", "--json", *props)
        assert r.exit_code == 0 and r.out == "", r.stderr
        assert_one_line_error(cli("transactions", "describe", "tx-open", *props), 1, "tx-open", "not authorized")
        _set_acls(env, [*topic, tid])
        r = cli("transactions", "abort", "tx-open", *props)
        assert r.exit_code == 0 and "transaction aborted" in r.stderr, r.stderr
    finally:
        producer.purge()
        del producer
        gc.collect()



def test_describe_asks_again_while_the_coordinator_moves(monkeypatch):
    """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS: FindCoordinator and DescribeTransactions again,
    within the cluster timeout; then one error line."""
    from types import SimpleNamespace

    from klog.client.remote import txn_admin, wire
    from klog.errors import KlogError
    from klog.meta.transactions import TxnMetadata

    answers = iter(["moved", "moved", TxnMetadata("x", 7, 0, 1000)])
    found: list[str] = []

    def describe_at(conn, ids, label):  # noqa: ANN001, ANN202
        answer = next(answers)
        if answer == "moved":
            raise txn_admin._Retriable("cannot describe transactional id 'x': NOT_COORDINATOR")
        return [answer]

    monkeypatch.setattr(wire, "find_coordinator", lambda *a: found.append("asked") or ("127.0.0.1", 1))
    monkeypatch.setattr(txn_admin, "_describe_at", describe_at)
    monkeypatch.setattr(txn_admin._Connections, "to", lambda self, host, port: None)
    monkeypatch.setattr(wire, "RETRY_PAUSE_S", 0)
    store = SimpleNamespace(target=SimpleNamespace(label="test", properties={}), timeout=5)
    assert txn_admin.describe_transaction(store, "x").producer_id == 7 and len(found) == 3
    store.timeout = 0
    answers = iter(["moved"] * 2)
    with pytest.raises(KlogError, match="did not settle"):
        txn_admin.describe_transaction(store, "x")


def test_abort_says_so_when_the_producers_commit_came_first(monkeypatch):
    """InitProducerId answers CONCURRENT_TRANSACTIONS while the coordinator completes a commit its
    producer decided just after `describe` saw it Ongoing: not 'aborted', one line saying it
    committed; an answer without error (the transaction ended meanwhile) is 'no ongoing transaction'."""
    from types import SimpleNamespace

    from klog.client.remote import txn_admin, wire
    from klog.errors import KlogError
    from klog.meta.transactions import TxnMetadata

    def doc(state: str) -> TxnMetadata:
        return TxnMetadata("x", 7, 0, 60_000, state=state, partitions=[["t", 0]])

    class Conn:
        code = 51

        def call(self, request, response_type):  # noqa: ANN001, ANN202
            return SimpleNamespace(error_code=self.code)

    states = iter([doc("Ongoing"), doc("PrepareCommit"), doc("CompleteCommit")])
    monkeypatch.setattr(txn_admin, "describe_transaction", lambda store, tid: next(states))
    monkeypatch.setattr(wire, "find_coordinator", lambda *a: ("127.0.0.1", 1))
    monkeypatch.setattr(txn_admin._Connections, "to", lambda self, host, port: Conn())
    monkeypatch.setattr(wire, "RETRY_PAUSE_S", 0)
    store = SimpleNamespace(target=SimpleNamespace(label="test", properties={}), timeout=5)
    with pytest.raises(KlogError, match="committed the transaction meanwhile: nothing aborted"):
        txn_admin.abort_transaction(store, "x")
    states = iter([doc("Ongoing"), doc("PrepareAbort"), doc("CompleteAbort")])
    assert txn_admin.abort_transaction(store, "x") is True
    Conn.code = 0
    states = iter([doc("Ongoing")])
    assert txn_admin.abort_transaction(store, "x") is False


@pytest.mark.slow
def test_abort_by_offset_of_a_transaction_the_principal_may_not_describe(env, cli):  # noqa: F811 - the env fixture
    """Without Describe on the TransactionalId, ListTransactions does not name it: its running
    transaction looks hanging to find-hanging (as to kafka-transactions.sh), and an abort by offset
    with ClusterAction reached WriteTxnMarkers, which wrote an ABORT into a transaction its producer
    could still commit elsewhere. klog serve refuses that marker (TRANSACTION_COORDINATOR_FENCED)."""
    import time

    props = ["-b", env.conf["bootstrap.servers"], "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice", "-X", "sasl.password=pw"]
    topic = [allow(T, "t", op) for op in (Operation.DESCRIBE, Operation.WRITE, Operation.READ)]
    cluster = allow(ResourceType.CLUSTER, "kafka-cluster", Operation.CLUSTER_ACTION)
    _set_acls(env, [*topic, cluster])  # alice: no ACL on the id
    # the producer is bob's (librdkafka's producer re-asks its coordinator: its own ACLs must stay)
    CredentialsMeta(env.store.meta).add("bob", "SCRAM-SHA-256", "pw")
    env.acls.add([allow(T, "t", op, "User:bob") for op in (Operation.DESCRIBE, Operation.WRITE)]
                 + [allow(ResourceType.TRANSACTIONAL_ID, "tx-hidden", Operation.WRITE, "User:bob")])
    env.security.authorizer.invalidate()
    producer = ck.Producer({**env.conf, "sasl.username": "bob", "transactional.id": "tx-hidden",
                            "transaction.timeout.ms": 60_000}, logger=logging.getLogger("tx-hidden-producer"))
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("t", b"open", partition=0, timestamp=int(time.time() * 1000) - 20 * 60_000)
        producer.flush(10)
        r = cli("transactions", "find-hanging", "--json", *props)
        assert r.exit_code == 0, r.stderr
        [doc] = [json.loads(line) for line in r.out.splitlines()]
        assert (doc["topic"], doc["partition"], doc["start_offset"]) == ("t", 0, 1)
        r = cli("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "1", *props)
        assert_one_line_error(r, 1, "t-0", "TRANSACTION_COORDINATOR_FENCED", "still runs")
        assert env.store.partition("t", 0).high_watermark() == 2  # no marker written
        producer.commit_transaction(10)
        assert env.store.partition("t", 0).high_watermark() == 3  # its own COMMIT
    finally:
        producer.purge()
        del producer
        gc.collect()

"""`klog transactions find-hanging` and `klog transactions abort --topic --partition --start-offset`
(kafka-transactions.sh's, KIP-664).

Goal: a transaction left open in a partition that no coordinator will end (its transactional id
forgotten, or its coordinator's transaction completed without that partition's marker) is listed
with its producer, epoch, start offset and age, and ended by the abort, after which read_committed
readers see what follows it; a transaction the coordinator still runs is neither listed nor
aborted by offset. Method: a transactional producer on the store, the coordinator's LMDB document
changed as the faults leave it, the CLI run in-process."""

from __future__ import annotations

import contextlib
import json
import time

import pytest

from klog.errors import ProducerFencedError
from klog.meta.transactions import TransactionsMeta

OLD = int(time.time() * 1000) - 20 * 60_000  # past the 15 minutes of transaction.max.timeout.ms (and within retention)


def _open_transaction(store, tid: str, topic: str, partitions: list[int]):
    producer = store.producer(transactional_id=tid)
    producer.begin()
    for p in partitions:
        producer.send(topic, b"txn-%d" % p, partition=p, timestamp=OLD)
    producer.flush()
    return producer


def _values(store, topic: str, partition: int) -> list[bytes]:
    return [r.value for r in store.consumer(topic, partitions=[partition], isolation_level="read_committed")]


def test_a_forgotten_transactional_ids_open_transaction_is_hanging_and_aborted_by_offset(store, cli):
    store.create_topic("t", partitions=2)
    with store.producer() as p:
        p.send("t", b"before", partition=0)
    producer = _open_transaction(store, "gone", "t", [0])
    pid = TransactionsMeta(store.meta).get("gone").producer_id
    TransactionsMeta(store.meta).apply("gone", lambda meta, txn: None)  # the id expired with its transaction open
    with store.producer() as p:
        p.send("t", b"after", partition=0)
    assert _values(store, "t", 0) == [b"before"]  # held at the open transaction

    r = cli("transactions", "find-hanging", "--json")
    assert r.exit_code == 0, r.stderr
    [doc] = [json.loads(line) for line in r.stdout.splitlines()]
    assert {k: doc[k] for k in ("topic", "partition", "producer_id", "producer_epoch", "start_offset",
                                "last_timestamp")} == {
        "topic": "t", "partition": 0, "producer_id": pid, "producer_epoch": 0, "start_offset": 1,
        "last_timestamp": OLD}
    assert doc["age_ms"] >= int(time.time() * 1000) - OLD - 1000
    r = cli("transactions", "find-hanging", "--topic", "t", "--partition", "1")
    assert (r.exit_code, r.out.splitlines()[1:]) == (0, []), r
    r = cli("transactions", "find-hanging", "--topic", "t")
    assert r.exit_code == 0 and r.out.splitlines()[0].split() == [
        "TOPIC", "PARTITION", "PRODUCER-ID", "EPOCH", "COORDINATOR-EPOCH", "START-OFFSET", "LAST-TIMESTAMP",
        "AGE-MIN"], r
    assert r.out.splitlines()[1].split()[:6] == ["t", "0", str(pid), "0", "-1", "1"]

    r = cli("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "2")
    assert (r.exit_code, r.stderr.strip()) == (
        2, "klog: error: t-0: no open transaction starts at offset 2 (`klog transactions find-hanging` lists them)"), r
    r = cli("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "1")
    assert r.exit_code == 0, r
    assert f"t-0: transaction of producer id {pid} (epoch 0) from offset 1 aborted" in r.stderr
    assert _values(store, "t", 0) == [b"before", b"after"]
    r = cli("transactions", "find-hanging", "--json")
    assert (r.exit_code, r.stdout) == (0, b""), r
    with contextlib.suppress(ProducerFencedError):  # (its id is gone)
        producer.close()


def test_a_partition_the_coordinator_completed_without_is_hanging_the_others_not(store, cli):
    store.create_topic("t", partitions=2)
    producer = _open_transaction(store, "tx", "t", [0, 1])

    def drop_partition_0(meta, _txn):  # as a marker lost on the way: the coordinator's view lacks t-0
        meta.partitions = [tp for tp in meta.partitions if tp != ["t", 0]]
        return meta

    # ongoing at the coordinator, both partitions named: nothing hangs, and the offset abort refuses
    r = cli("transactions", "find-hanging", "--max-transaction-timeout", "0", "--json")
    assert (r.exit_code, r.stdout) == (0, b""), r
    r = cli("transactions", "abort", "--topic", "t", "--partition", "1", "--start-offset", "0")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r
    assert r.stderr.startswith("klog: error: t-1: the transaction of producer id ")
    assert "is still Ongoing at the coordinator (transactional id 'tx')" in r.stderr
    TransactionsMeta(store.meta).apply("tx", drop_partition_0)
    r = cli("transactions", "find-hanging", "--json")
    assert r.exit_code == 0, r
    assert [(d["topic"], d["partition"], d["start_offset"]) for d in map(json.loads, r.stdout.splitlines())] == [
        ("t", 0, 0)]
    producer.commit()  # the coordinator writes t-1's marker only
    assert _values(store, "t", 1) == [b"txn-1"]
    assert _values(store, "t", 0) == []
    r = cli("transactions", "find-hanging", "--topic", "t", "--json")
    assert [json.loads(line)["partition"] for line in r.stdout.splitlines()] == [0]
    # younger than the limit asked for: not listed
    r = cli("transactions", "find-hanging", "--max-transaction-timeout", str(10**8), "--json")
    assert (r.exit_code, r.stdout) == (0, b""), r
    r = cli("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert r.exit_code == 0, r
    assert _values(store, "t", 0) == []  # aborted, not committed
    with store.producer() as p:
        p.send("t", b"later", partition=0)
    assert _values(store, "t", 0) == [b"later"]
    producer.close()


def test_abort_takes_an_id_or_a_partition_and_offset(cli):
    cli("topics", "create", "t")
    r = cli("transactions", "abort", "x", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert (r.exit_code, r.stderr.strip()) == (
        2, "klog: error: give TRANSACTIONAL_ID or --topic, --partition and --start-offset, not both"), r
    r = cli("transactions", "abort", "--topic", "t", "--partition", "0")
    assert (r.exit_code, r.stderr.strip()) == (
        2, "klog: error: give TRANSACTIONAL_ID, or --topic, --partition and --start-offset together"), r
    r = cli("transactions", "find-hanging", "--partition", "0")
    assert (r.exit_code, r.stderr.strip()) == (2, "klog: error: --partition needs --topic"), r
    r = cli("transactions", "find-hanging", "--topic", "t", "--partition", "3")
    assert (r.exit_code, r.stderr.strip()) == (2, "klog: error: topic 't' has no partition 3 (it has 1)"), r


_KILLED_MID_COMMIT = """
import os, signal, sys
import klog
from klog.broker.batches import RawAppender

store = klog.open(sys.argv[1])
producer = store.producer(transactional_id="k9")
producer.begin()
for p in (0, 1):
    producer.send("k", b"v%d" % p, partition=p)
producer.flush()
write_marker = RawAppender.write_marker

def first_marker_then_sigkill(self, *args, **kwargs):
    write_marker(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

RawAppender.write_marker = first_marker_then_sigkill
producer.commit()
"""


@pytest.mark.slow  # a child process killed mid-commit: ~1.3 s
def test_a_commit_killed_between_its_markers_is_not_aborted_by_offset(data_dir, cli):
    """The producer's process SIGKILLed after its coordinator decided to commit (PrepareCommit) and
    wrote k-0's COMMIT, before k-1's: k-1's transaction is open, and not hanging (the coordinator
    completes the commit at its next pass). Aborting it by offset would split the transaction
    (committed in k-0, aborted in k-1): refused, not listed; the completed commit shows both."""
    import os
    import subprocess
    import sys

    import klog
    from klog.broker.batches import RawAppender
    from klog.broker.txn_coordinator import TxnCoordinator

    with klog.open(data_dir) as s:
        s.create_topic("k", partitions=2)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _KILLED_MID_COMMIT, data_dir], env=env, timeout=60,
                          capture_output=True)
    assert done.returncode == -9, done.stderr
    with klog.open(data_dir) as s:
        assert TransactionsMeta(s.meta).get("k9").state == "PrepareCommit"
        assert _values(s, "k", 0) == [b"v0"] and _values(s, "k", 1) == []
    r = cli("transactions", "find-hanging", "--max-transaction-timeout", "0", "--json")
    assert (r.exit_code, r.stdout) == (0, b""), r
    r = cli("transactions", "abort", "--topic", "k", "--partition", "1", "--start-offset", "0")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r
    assert "is still PrepareCommit at the coordinator (transactional id 'k9'): decided" in r.stderr
    assert "a coordinator completes it" in r.stderr and "transactions abort k9" not in r.stderr  # (aborts Ongoing only)
    with klog.open(data_dir) as s:
        TxnCoordinator(s, RawAppender(s)).recover()  # (klog serve's start, or the next pass after 5 s)
        assert _values(s, "k", 0) == [b"v0"] and _values(s, "k", 1) == [b"v1"]

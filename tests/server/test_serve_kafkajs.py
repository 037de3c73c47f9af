"""kafkajs 2.2.4 against klog serve: an independent pure-JavaScript Kafka client (its own protocol
code, idempotent and transactional producer, group consumer, admin client, SASL).

Goal: what a kafkajs user sees is what Apache Kafka shows them: values, keys, headers and offsets
through gzip; an idempotent producer's dense offsets; a group of two sharing partitions and one
leaving with no record lost or read twice; the admin client's operations and their errors;
transactions (commit, abort, read_committed, the last stable offset, sendOffsets in a
consume-transform-produce loop, fencing by a second producer, the timeout abort); SASL PLAIN and
SCRAM-SHA-256, and ACLs holding for a SASL user. Method: `node tests/server/js/check.js SCENARIO`
(tests/server/js/package-lock.json pins kafkajs; `npm ci` installs it once when missing) against a
`klog serve` in this process on 127.0.0.1 and an ephemeral port; the script prints JSON lines and
exits non-zero past its time limit.
Skipped only where node or npm is not installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from typing import Any

import pytest

import klog
from klog.meta.acls import AclsMeta
from klog.meta.credentials import CredentialsMeta
from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from klog.server import Server
from klog.server.listeners import Listener, SecurityConfig

NODE, NPM = shutil.which("node"), shutil.which("npm")
JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
KAFKAJS = "2.2.4"


@pytest.fixture(scope="session")
def kafkajs() -> str:
    """check.js, with kafkajs installed under tests/server/js/node_modules (`npm ci` when missing)."""
    if NODE is None or NPM is None:
        pytest.skip("node and npm are not installed (kafkajs runs on Node.js)")
    with open(os.path.join(JS, "package-lock.json")) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two xdist workers: one installs, the other waits for it
        if _installed_version() != KAFKAJS:
            r = subprocess.run([NPM, "ci", "--prefix", JS, "--no-audit", "--no-fund", "--ignore-scripts"],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"npm ci failed: {r.stdout[-1000:]}{r.stderr[-2000:]}"
            assert _installed_version() == KAFKAJS
    return os.path.join(JS, "check.js")


def _installed_version() -> str | None:
    try:
        with open(os.path.join(JS, "node_modules", "kafkajs", "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def run(script: str, scenario: str, bootstrap: str, limit_s: float = 30, fails: bool = False,
        **options: Any) -> dict[str, Any]:
    """One scenario: its JSON lines by step (a step printed more than once: a list), checked to end
    with 'done' (with `fails`, with 'failed': an error kafkajs threw)."""
    options["limitMs"] = int(limit_s * 1000)
    r = subprocess.run([NODE, script, scenario, bootstrap, json.dumps(options)], capture_output=True, text=True,
                       timeout=limit_s + 15)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    last = "failed" if fails else "done"
    assert r.returncode == (1 if fails else 0) and lines and lines[-1]["step"] == last, \
        f"{scenario}: {r.stdout}{r.stderr}"
    steps: dict[str, Any] = {}
    for line in lines:
        step = line.pop("step")
        line.pop("ms")  # (milliseconds since the start: for reading a failure's output)
        if step not in steps:
            steps[step] = line
        elif isinstance(steps[step], list):
            steps[step].append(line)
        else:
            steps[step] = [steps[step], line]
    return steps


@contextlib.contextmanager
def serving(data_dir: str, security: SecurityConfig | None = None, **defaults: str):
    """klog serve on 127.0.0.1:0 over `data_dir`, with group joins not waiting out Kafka's 3 s
    initial rebalance delay, and klog.json `defaults`; `.bootstrap` is 'host:port'."""
    with klog.open(data_dir) as store:
        store.data_dir.defaults.update({"group.initial.rebalance.delay.ms": "0", **defaults})
        store.data_dir.save()
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, security=security) as server:
        server.bootstrap = f"127.0.0.1:{server.port}"
        yield server


def create(data_dir: str, **topics: int) -> None:
    with klog.open(data_dir) as store:
        for name, partitions in topics.items():
            store.create_topic(name, partitions=partitions)


def klog_json(cli, *args: str) -> list[dict]:  # noqa: ANN001
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    return [json.loads(line) for line in r.out.splitlines()]


def test_round_trip_with_keys_headers_and_gzip(kafkajs, data_dir, cli):
    create(data_dir, rt=1)
    with serving(data_dir) as server:
        steps = run(kafkajs, "roundtrip", server.bootstrap, topic="rt")
    assert [s["answer"] for s in steps["produced"]] == [[{"partition": 0, "errorCode": 0, "baseOffset": "0"}],
                                                        [{"partition": 0, "errorCode": 0, "baseOffset": "6"}]]
    headers = {"trace": "t%d", "multi": ["a", "b"]}  # a header sent twice comes back as both values
    assert steps["consumed"]["records"] == [
        *({"partition": 0, "offset": i, "key": f"k{i}", "value": f"v{i}",
           "headers": {"trace": f"t{i}", "multi": headers["multi"]}} for i in range(5)),
        {"partition": 0, "offset": 5, "key": None, "value": "no-key", "headers": {}},
        {"partition": 0, "offset": 6, "key": "plain", "value": "uncompressed", "headers": {}}]
    # the same records as klog itself reads them from the store
    stored = klog_json(cli, "consume", "-t", "rt", "-e", "--json")
    assert [(r["offset"], r["key"], r["value"]) for r in stored][:2] == [(0, "k0", "v0"), (1, "k1", "v1")]
    assert stored[0]["headers"] == [["trace", "t0"], ["multi", "a"], ["multi", "b"]]


def test_idempotent_producer_offsets_are_dense(kafkajs, data_dir, cli):
    create(data_dir, idem=2)
    with serving(data_dir) as server:
        steps = run(kafkajs, "idempotent", server.bootstrap, topic="idem")
    answers = steps["produced"]["answers"]
    assert all(a["errorCode"] == 0 for a in answers)
    for p in (0, 1):
        assert sorted(a["baseOffset"] for a in answers if a["partition"] == p) == [0, 1, 2, 3, 4]
    assert sorted((a["partition"], a["baseOffset"]) for a in steps["batch"]["answers"]) == [(0, 5), (1, 5)]
    consumed = steps["consumed"]["records"]
    assert sorted((r["partition"], r["offset"]) for r in consumed) == [(p, o) for p in (0, 1) for o in range(6)]
    assert sorted(r["value"] for r in consumed) == sorted([f"v{i}" for i in range(10)] + ["b0", "b1"])
    # every batch in the store carries the one producer id klog gave, epoch 0, not transactional
    stored = klog_json(cli, "consume", "-t", "idem", "-e", "--json", "--txn-fields")
    assert len(stored) == 12 and len({r["producer_id"] for r in stored}) == 1 and stored[0]["producer_id"] >= 0
    assert {(r["producer_epoch"], r["transactional"]) for r in stored} == {(0, False)}


@pytest.mark.slow
def test_group_of_two_shares_partitions_and_one_leaves(kafkajs, data_dir, cli):
    with serving(data_dir) as server:
        steps = run(kafkajs, "group", server.bootstrap, topic="jobs", groupId="workers")
    # each member's last assignment in each phase (a slow machine may add a rejoin)
    joins = {(j["phase"], j["member"]): j["partitions"] for j in steps["joined"]}
    assert joins.pop(("alone", "a")) == [0, 1, 2, 3]
    a, b = joins.pop(("b joined", "a")), joins.pop(("b joined", "b"))
    assert len(a) == len(b) == 2 and sorted(a + b) == [0, 1, 2, 3]
    assert joins == {("b left", "a"): [0, 1, 2, 3]}  # b left: a takes every partition back
    read = steps["consumed"]["a"] + steps["consumed"]["b"]
    assert steps["consumed"]["b"], "b read nothing while it was a member"
    assert sorted((r["partition"], r["offset"]) for r in read) == [(p, o) for p in range(4) for o in range(15)]
    assert sorted(r["value"] for r in read) == sorted(f"r{n}-{i}" for n in (1, 2, 3) for i in range(20))
    assert steps["committed"]["offsets"] == [{"partition": p, "offset": 15} for p in range(4)]
    assert steps["described"]["groups"] == [{"groupId": "workers", "state": "Empty", "protocolType": "consumer",
                                             "members": 0, "errorCode": 0}]
    (described,) = klog_json(cli, "groups", "describe", "workers", "--json")
    assert described["state"] == "Empty"
    assert [(p["partition"], p["committed"], p["lag"]) for p in described["partitions"]] == [
        (p, 15, 0) for p in range(4)]


@pytest.mark.slow
def test_admin_client_operations(kafkajs, data_dir):
    with serving(data_dir) as server:
        s = run(kafkajs, "admin", server.bootstrap, topic="admin-made")
    assert s["createTopics"]["created"] is True and s["createTopics again"]["created"] is False  # kafkajs: exists
    assert s["createTopics with replicaAssignment"]["error"]["errors"] == [
        {"type": "INVALID_REPLICA_ASSIGNMENT", "message": "Replica assignment is invalid"}]  # klog places replicas
    assert s["listTopics"]["topics"] == ["admin-made"]
    (topic,) = s["fetchTopicMetadata"]["topics"]
    assert topic["partitions"] == [{"partitionId": p, "leader": 0, "replicas": [0], "isr": [0],
                                    "partitionErrorCode": 0} for p in (0, 1)]
    assert s["describeCluster"] == {"brokers": 1, "controller": 0, "clusterId": "string"}
    assert s["createPartitions"]["partitions"] == 3
    assert s["createPartitions fewer"]["error"]["type"] == "INVALID_PARTITIONS"
    assert s["describeConfigs"]["resources"] == [{"errorCode": 0, "name": "admin-made", "entries": {
        "cleanup.policy": "delete", "retention.ms": "3600000"}}]
    assert s["alterConfigs"]["value"] == "7200000"
    assert s["fetchTopicOffsets"]["offsets"] == [{"partition": 0, "low": "0", "high": "10"},
                                                 {"partition": 1, "low": "0", "high": "0"},
                                                 {"partition": 2, "low": "0", "high": "0"}]
    assert [o["offset"] for o in s["fetchTopicOffsetsByTimestamp"]["past"]] == ["0", "0", "0"]
    assert [o["offset"] for o in s["fetchTopicOffsetsByTimestamp"]["future"]] == ["10", "0", "0"]
    assert s["deleteRecords"]["offsets"] == [{"low": "4", "high": "10"}]
    assert s["deleteRecords past the end"]["error"]["cause"]["partitions"] == [
        {"partition": 0, "type": "OFFSET_OUT_OF_RANGE"}]
    assert s["fetchOffsets"]["offsets"] == [{"partition": 0, "offset": "3"}, {"partition": 1, "offset": "0"},
                                            {"partition": 2, "offset": "-1"}]
    assert s["listGroups"]["groups"] == [{"groupId": "admin-made-group", "protocolType": "consumer"}]
    assert s["describeGroups"]["groups"] == [{"groupId": "admin-made-group", "state": "Empty", "members": 0,
                                              "errorCode": 0}]
    assert s["deleteGroups"]["result"] == [{"groupId": "admin-made-group", "errorCode": 0}]
    assert s["deleteTopics"]["topics"] == []
    assert s["deleteTopics again"]["error"]["cause"]["type"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_admin_client_acls(kafkajs, data_dir):
    with klog.open(data_dir) as store:
        AclsMeta(store.meta).set_config(super_users=["User:ANONYMOUS"])  # the first ACL turns the authorizer on
    with serving(data_dir) as server:
        s = run(kafkajs, "acls", server.bootstrap, topic="secret")
    assert s["describeAcls"]["resources"] == [{"resourceType": 2, "resourceName": "secret", "resourcePatternType": 3,
                                               "acls": [{"principal": "User:alice", "host": "*", "operation": 3,
                                                         "permissionType": 3}]}]
    assert s["deleteAcls"]["results"] == [{"errorCode": 0, "matching": 1}]
    assert s["describeAcls after"]["resources"] == []


@pytest.mark.slow
def test_transactions_commit_abort_and_read_committed(kafkajs, data_dir):
    create(data_dir, txn=2)
    with serving(data_dir) as server:
        s = run(kafkajs, "transactions", server.bootstrap, topic="txn")
    assert [c["label"] for c in s["committed"]] == ["c", "d"] and s["aborted"]["label"] == "a"

    def by_partition(records: list[dict]) -> dict[int, list[str]]:
        return {p: [r["value"] for r in records if r["partition"] == p] for p in (0, 1)}

    assert by_partition(s["read_committed"]["records"]) == {0: ["c0", "c2", "d0"], 1: ["c1", "d1"]}
    assert by_partition(s["read_uncommitted"]["records"]) == {0: ["c0", "c2", "a0", "a2", "d0"],
                                                              1: ["c1", "a1", "a3", "d1"]}
    # partition 0: 5 records + 3 markers, then the open transaction's record at 8: the last stable offset
    assert s["offsets while open"]["offsets"] == [{"partition": 0, "high": 8}, {"partition": 1, "high": 7}]
    assert sorted(s["read_committed while open"]["values"]) == ["c0", "c1", "c2", "d0", "d1"]
    assert s["offsets after commit"]["offsets"] == [{"partition": 0, "high": 11}, {"partition": 1, "high": 7}]
    assert s["read_committed after commit"]["values"] == ["c0", "c2", "d0", "open", "after-open"]


@pytest.mark.slow
def test_consume_transform_produce_commits_offsets_in_the_transaction(kafkajs, data_dir):
    create(data_dir, words=2, shouted=2)
    common = {"input": "words", "output": "shouted", "groupId": "shouter"}
    with serving(data_dir) as server:
        first = run(kafkajs, "transform", server.bootstrap, seed=10, count=10, outputCount=10, **common)
        # ten more, each batch's transaction aborted: neither the offsets nor the output move
        aborted = run(kafkajs, "transform", server.bootstrap, seed=10, first=10, count=10, abortFrom=5,
                      outputCount=10, **common)
        # the group reads the aborted ten again and commits them this time
        again = run(kafkajs, "transform", server.bootstrap, count=10, outputCount=20, **common)
    assert first["committed offsets"]["offsets"] == [{"partition": 0, "offset": 5}, {"partition": 1, "offset": 5}]
    assert sorted(first["output"]["values"]) == sorted(f"W{i}" for i in range(10))
    assert "committed" not in aborted and aborted["aborted"]
    assert aborted["committed offsets"] == first["committed offsets"]
    assert sorted(aborted["output"]["values"]) == sorted(f"W{i}" for i in range(10))
    assert again["committed offsets"]["offsets"] == [{"partition": 0, "offset": 10}, {"partition": 1, "offset": 10}]
    assert sorted(again["output"]["values"]) == sorted(f"W{i}" for i in range(20))  # each once


@pytest.mark.slow
def test_a_second_producer_fences_the_first(kafkajs, data_dir):
    create(data_dir, fenced=1)
    with serving(data_dir) as server:
        s = run(kafkajs, "fencing", server.bootstrap, topic="fenced")
    # InitProducerId v1 / Produce v7 / EndTxn v1 predate PRODUCER_FENCED: Kafka answers these
    # versions with INVALID_PRODUCER_EPOCH, which kafkajs treats as fatal
    for what in ("first send", "first commit"):
        assert s[what]["error"]["type"] == "INVALID_PRODUCER_EPOCH", s[what]
        assert s[what]["error"]["retriable"] is False
    assert s["read_committed"]["values"] == ["from-second"]


@pytest.mark.slow
def test_a_transaction_past_its_timeout_is_aborted(kafkajs, data_dir):
    create(data_dir, slow=1)
    with serving(data_dir, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}) as server:
        s = run(kafkajs, "expiry", server.bootstrap, topic="slow", waitMs=1800)
    assert s["send"]["error"]["type"] == "INVALID_PRODUCER_EPOCH"
    assert s["commit"]["error"]["type"] == "INVALID_PRODUCER_EPOCH"
    assert s["offsets"]["offsets"] == [{"partition": 0, "high": "2"}]  # the record and the abort marker


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-256"])
def test_sasl_logins(kafkajs, data_dir, mechanism):
    create(data_dir, private=1)
    with klog.open(data_dir) as store:
        CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "alice-pw")
    security = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)], auth_failure_delay_ms=100)
    with serving(data_dir, security=security) as server:
        good = run(kafkajs, "sasl", server.bootstrap, topic="private", count=1,
                   sasl={"mechanism": mechanism, "username": "alice", "password": "alice-pw"})
        wrong = run(kafkajs, "sasl", server.bootstrap, topic="private",
                    sasl={"mechanism": mechanism, "username": "alice", "password": "wrong"})
    assert good["produced"] == {"baseOffset": 0} and good["consumed"] == {"values": ["alice"]}
    assert wrong["connect"]["error"]["name"] == "KafkaJSSASLAuthenticationError"
    assert "invalid credentials" in wrong["connect"]["error"]["message"]
    assert "produced" not in wrong


@pytest.mark.slow
def test_acls_hold_for_a_sasl_user(kafkajs, data_dir):
    """alice may read 'words' in group 'shouter' and write 'shouted', but not use the transactional
    id 'shouter-txn' until an ACL allows Write on it (Describe implied, as in Kafka)."""
    create(data_dir, words=2, shouted=2)
    with klog.open(data_dir) as store, store.producer() as producer:
        for i in range(4):
            producer.send("words", b"w%d" % i, partition=i % 2)
    with klog.open(data_dir) as store:
        CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "alice-pw")
        AclsMeta(store.meta).add([allow(ResourceType.TOPIC, "words", Operation.READ),
                                  allow(ResourceType.TOPIC, "words", Operation.DESCRIBE),
                                  allow(ResourceType.GROUP, "shouter", Operation.READ),
                                  allow(ResourceType.TOPIC, "shouted", Operation.WRITE)])
    security = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)], auth_failure_delay_ms=100)
    alice = {"mechanism": "scram-sha-256", "username": "alice", "password": "alice-pw"}
    with serving(data_dir, security=security) as server:
        refused = run(kafkajs, "transform", server.bootstrap, fails=True, input="words", output="shouted",
                      groupId="shouter", count=4, sasl=alice)
        with klog.open(data_dir) as store:
            AclsMeta(store.meta).add([allow(ResourceType.TRANSACTIONAL_ID, "shouter-txn", Operation.WRITE)])
        server.security.authorizer.invalidate()  # (what CreateAcls does; the server rereads every second)
        allowed = run(kafkajs, "transform", server.bootstrap, input="words", output="shouted", groupId="shouter",
                      count=4, sasl=alice)
    # kafkajs reports a refused FindCoordinator (here TRANSACTIONAL_ID_AUTHORIZATION_FAILED) as not found
    assert refused["failed"]["error"]["message"] == "Failed to find group coordinator", refused
    assert "committed" not in refused
    assert allowed["committed offsets"]["offsets"] == [{"partition": 0, "offset": 2}, {"partition": 1, "offset": 2}]


def allow(resource_type: ResourceType, name: str, operation: Operation) -> AclBinding:
    return AclBinding(resource_type, name, PatternType.LITERAL, "User:alice", "*", operation, Permission.ALLOW)

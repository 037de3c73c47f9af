"""The ACL matrix through a real client: for each operation and resource type, alice with and
without the ACL that allows it, over SASL_PLAINTEXT with confluent-kafka (librdkafka).

Goal: every API checks the operation Kafka checks, and the client sees Kafka's error when it is
missing (TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED). Method: one ACL that names nobody keeps the
table non-empty (so allow.everyone.if.no.acl.found is off); each case runs its client action once
without and once with its ACLs; the server's ACL cache is refreshed after each change.
"""

from __future__ import annotations

import contextlib
import gc
import struct
import uuid

import pytest

import klog
from klog.meta.acls import AclsMeta
from klog.meta.credentials import CredentialsMeta
from klog.security.acl import CLUSTER_NAME, AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from klog.server import Server
from klog.server.listeners import Listener, SecurityConfig

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import admin as ck_admin  # noqa: E402

TIMEOUT_S = 10
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def allow(rtype: ResourceType, name: str, op: Operation, principal: str = "User:alice") -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)


@pytest.fixture
def env(data_dir):
    store = klog.open(data_dir)
    CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "pw")
    acls = AclsMeta(store.meta)
    acls.add([allow(T, "unrelated", Operation.READ, "User:nobody")])
    store.create_topic("t", partitions=1)
    from klog.meta.groups import GroupsMeta

    GroupsMeta(store.meta).store_offsets("stored", {("t", 0): (0, "")})  # a group with committed offsets
    with store.producer() as p:
        p.send("t", value=b"hello", partition=0)
    cfg = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)], auth_failure_delay_ms=100)
    with Server(store=store, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.conf = {"bootstrap.servers": f"127.0.0.1:{server.port}", "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "pw",
                       "socket.timeout.ms": 5000,
                       "log_level": 0}  # librdkafka's own log lines (reconnects) would land in later tests' stderr
        server.acls = acls
        yield server
        gc.collect()  # librdkafka clients gone before the server: none keeps reconnecting and logging
    store.close()


def _result(admin, futures: dict) -> bool:
    """Every future's outcome (`admin` kept alive until then: futures die with their client)."""
    try:
        for f in futures.values():
            f.result(timeout=TIMEOUT_S)
        return True
    except ck.KafkaException as e:
        assert "AUTHORIZATION_FAILED" in e.args[0].name(), e
        return False


def describe_topic(server) -> bool:
    md = ck_admin.AdminClient(server.conf).list_topics(topic="t", timeout=TIMEOUT_S)
    err = md.topics["t"].error
    assert err is None or err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    return err is None


def write(server) -> bool:
    outcome: list = []
    producer = ck.Producer({**server.conf, "message.timeout.ms": 8000})
    producer.produce("t", b"x", partition=0, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert outcome, "no delivery report"
    assert outcome[0] is None or outcome[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, outcome[0]
    return outcome[0] is None


def idempotent_write(server) -> bool:
    outcome: list = []
    errors: list = []
    producer = ck.Producer({**server.conf, "enable.idempotence": True, "message.timeout.ms": 5000,
                            "error_cb": errors.append})
    producer.produce("t", b"x", partition=0, on_delivery=lambda err, msg: outcome.append(err))
    try:
        producer.flush(TIMEOUT_S)
    except (ck.KafkaException, SystemError) as e:  # librdkafka's fatal error (no producer id) surfaces here
        errors.append(e.args[0] if isinstance(e, ck.KafkaException) else e.__cause__)
    if any(isinstance(e, ck.KafkaError) and e.code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED for e in errors):
        return False
    return bool(outcome) and outcome[0] is None


def read(server) -> bool:
    consumer = ck.Consumer({**server.conf, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([ck.TopicPartition("t", 0, 0)])
        for _ in range(20):  # bounded: ~10 s
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED:
                    continue  # librdkafka looks up the group.id's coordinator (Describe on the group)
                assert msg.error().code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, msg.error()
                return False
            return msg.value() == b"hello"
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()


def group_read(server) -> bool:
    consumer = ck.Consumer({**server.conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                            "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["t"])
        for _ in range(40):  # bounded: ~20 s
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED:
                    return False
                continue
            return True
        raise AssertionError("neither a record nor GROUP_AUTHORIZATION_FAILED")
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


def commit_offset(server) -> bool:
    """A simple (member-less) commit to group 'stored' for topic t: Kafka checks Read on the group
    and on the topic (TOPIC_AUTHORIZATION_FAILED for the partition without the latter)."""
    consumer = ck.Consumer({**server.conf, "group.id": "stored", "enable.auto.commit": False})
    try:
        done = consumer.commit(offsets=[ck.TopicPartition("t", 0, 1)], asynchronous=False)
        return all(tp.error is None for tp in done)
    except ck.KafkaException as e:
        if e.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return False
        raise
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


def create_topic(server) -> bool:
    return _result(admin := ck_admin.AdminClient(server.conf), admin.create_topics([ck_admin.NewTopic("made", 1)],
                                                                   request_timeout=TIMEOUT_S))


def delete_topic(server) -> bool:
    return _result(admin := ck_admin.AdminClient(server.conf), admin.delete_topics(["t"], request_timeout=TIMEOUT_S))


def alter_topic(server) -> bool:
    return _result(admin := ck_admin.AdminClient(server.conf), admin.create_partitions([ck_admin.NewPartitions("t", 2)],
                                                                       request_timeout=TIMEOUT_S))


def describe_configs(server) -> bool:
    return _result(admin := ck_admin.AdminClient(server.conf), admin.describe_configs(
        [ck_admin.ConfigResource("topic", "t")], request_timeout=TIMEOUT_S))


def alter_configs(server) -> bool:
    entry = ck_admin.ConfigEntry("retention.ms", "100000",
                                 incremental_operation=ck_admin.AlterConfigOpType.SET)
    return _result(admin := ck_admin.AdminClient(server.conf), admin.incremental_alter_configs(
        [ck_admin.ConfigResource("topic", "t", incremental_configs=[entry])], request_timeout=TIMEOUT_S))


def cluster_alter(server) -> bool:
    binding = ck_admin.AclBinding(ck_admin.ResourceType.TOPIC, "x", ck_admin.ResourcePatternType.LITERAL,
                                  "User:carol", "*", ck_admin.AclOperation.READ, ck_admin.AclPermissionType.ALLOW)
    return _result(admin := ck_admin.AdminClient(server.conf), admin.create_acls([binding], request_timeout=TIMEOUT_S))


def _groups_result(admin, futures) -> bool:
    """True unless GROUP_AUTHORIZATION_FAILED (other outcomes, e.g. GROUP_ID_NOT_FOUND, are not ACLs)."""
    for f in (futures.values() if isinstance(futures, dict) else [futures]):
        try:
            f.result(timeout=TIMEOUT_S)
        except ck.KafkaException as e:
            if e.args[0].code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED:
                return False
    return True


def describe_group(server) -> bool:
    return _groups_result(admin := ck_admin.AdminClient(server.conf),
                          admin.describe_consumer_groups(["stored"], request_timeout=TIMEOUT_S))


def delete_group(server) -> bool:
    return _groups_result(admin := ck_admin.AdminClient(server.conf),
                          admin.delete_consumer_groups(["stored"], request_timeout=TIMEOUT_S))


def list_groups(server) -> bool:
    admin = ck_admin.AdminClient(server.conf)
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    return "stored" in {g.group_id for g in listed.valid}


def transactional_write(server) -> bool:
    """A transactional producer: Write on its TransactionalId (InitProducerId, AddPartitionsToTxn, Produce,
    EndTxn); without it, init_transactions fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    producer = ck.Producer({**server.conf, "transactional.id": "tx-alice", "message.timeout.ms": 8000})
    try:
        producer.init_transactions(TIMEOUT_S)
    except ck.KafkaException as e:
        assert e.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, e
        return False
    producer.begin_transaction()
    producer.produce("t", b"in a transaction", partition=0)
    producer.commit_transaction(TIMEOUT_S)
    return True


CASES = {  # name: (client action, ACLs given to alice in both runs, ACLs that make the difference)
    "topic-describe": (describe_topic, [], [allow(T, "t", Operation.DESCRIBE)]),
    "topic-write": (write, [], [allow(T, "t", Operation.WRITE)]),
    "topic-read": (read, [allow(T, "t", Operation.DESCRIBE)], [allow(T, "t", Operation.READ)]),
    "topic-create": (create_topic, [], [allow(T, "made", Operation.CREATE)]),
    "cluster-create": (create_topic, [], [allow(C, CLUSTER_NAME, Operation.CREATE)]),
    "topic-delete": (delete_topic, [allow(T, "t", Operation.DESCRIBE)], [allow(T, "t", Operation.DELETE)]),
    "topic-alter": (alter_topic, [allow(T, "t", Operation.DESCRIBE)], [allow(T, "t", Operation.ALTER)]),
    "topic-describe-configs": (describe_configs, [], [allow(T, "t", Operation.DESCRIBE_CONFIGS)]),
    "topic-alter-configs": (alter_configs, [], [allow(T, "t", Operation.ALTER_CONFIGS)]),
    "group-read": (group_read, [allow(T, "t", Operation.READ)], [allow(G, "*", Operation.READ)]),
    "commit-topic-read": (commit_offset, [allow(G, "stored", Operation.READ), allow(T, "t", Operation.DESCRIBE)],
                          [allow(T, "t", Operation.READ)]),
    "group-describe": (describe_group, [], [allow(G, "stored", Operation.DESCRIBE)]),
    "group-delete": (delete_group, [], [allow(G, "stored", Operation.DELETE)]),
    "group-list": (list_groups, [], [allow(G, "stored", Operation.DESCRIBE)]),
    "cluster-alter": (cluster_alter, [], [allow(C, CLUSTER_NAME, Operation.ALTER)]),
    "transactional-id-write": (transactional_write, [allow(T, "t", Operation.DESCRIBE), allow(T, "t", Operation.WRITE)],
                               [allow(ResourceType.TRANSACTIONAL_ID, "tx-alice", Operation.WRITE)]),
    "cluster-idempotent-write": (idempotent_write, [allow(T, "t", Operation.DESCRIBE)],
                                 [allow(C, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE),
                                  allow(T, "t", Operation.WRITE)]),
}


def _set_acls(server, bindings: list[AclBinding]) -> None:
    server.acls.remove(AclFilter(principal="User:alice"))
    server.acls.add(bindings)
    server.security.authorizer.invalidate()


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_acl_matrix(env, case):
    action, base, granting = CASES[case]
    _set_acls(env, base)
    assert action(env) is False, f"{case}: allowed without its ACL"
    _set_acls(env, base + granting)
    assert action(env) is True, f"{case}: refused with its ACL"


def test_deny_wins_over_allow(env):
    deny = AclBinding(T, "t", PatternType.LITERAL, "User:*", "*", Operation.WRITE, Permission.DENY)
    _set_acls(env, [allow(T, "t", Operation.ALL), deny])
    assert describe_topic(env) is True and write(env) is False


# -- every API in the server's table, as a principal with no rights -------------------------------------
AUTHZ_ERRORS = {29, 30, 31, 53}  # TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# APIs Kafka answers without an ACL check, and what keeps them harmless
OPEN_APIS = {
    17: "SaslHandshake: authentication itself",
    18: "ApiVersions: what the broker speaks, asked before authenticating",
    36: "SaslAuthenticate: authentication itself",
    60: "DescribeCluster: the brokers' addresses, as Metadata gives them to anyone",
    16: "ListGroups: lists only the groups the principal may Describe (checked below)",
    66: "ListTransactions: lists only the transactional ids the principal may Describe (checked below)",
}
# APIs Kafka refuses on this PLAINTEXT listener before any ACL check: delegation tokens
# (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, 64; over SASL DELEGATION_TOKEN_AUTH_DISABLED: none is ever made)
REFUSED_BEFORE_ACLS = {38: 64, 39: 64, 40: 64, 41: 64}


def _error_codes(value) -> set[int]:
    import dataclasses

    if isinstance(value, tuple):
        return set().union(*(_error_codes(v) for v in value)) if value else set()
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return set()
    out = set()
    for f in dataclasses.fields(value):
        current = getattr(value, f.name)
        if f.name == "error_code":
            out.add(int(current))
        else:
            out |= _error_codes(current)
    return out


@pytest.fixture(scope="module")
def closed_server(tmp_path_factory):
    """A PLAINTEXT server whose ACL table names only User:nobody: ANONYMOUS may do nothing."""
    store = klog.open(str(tmp_path_factory.mktemp("acl-table") / "data"))
    AclsMeta(store.meta).add([allow(T, "unrelated", Operation.READ, "User:nobody")])
    store.create_topic("t", partitions=1)
    from klog.meta.groups import GroupsMeta

    GroupsMeta(store.meta).store_offsets("t", {("t", 0): (0, "")})
    with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.topic_uuid = uuid.UUID(store.topics.get("t").topic_id)
        yield server
    store.close()


def _api_table() -> dict:
    from klog.server import dispatch

    return dispatch.load_handlers()


@pytest.mark.parametrize("api_key", sorted(_api_table()))
def test_every_api_refuses_a_principal_without_acls(closed_server, api_key):
    """Generated from the server's own API table: an API added without its ACL check (or without an
    entry in OPEN_APIS saying why Kafka has none) fails here."""
    from tests.serve_helpers import RawClient, batch, request_class, sample_entity

    version = _api_table()[api_key].max_version
    fields = {"string": "t", "uuid": closed_server.topic_uuid, "records": batch([b"x"]), "acks": -1,
              "replica_id": -1, "transactional_id": None if api_key in (0, 22) else "t", "resource_type": 2,
              "key_type": 0,
              "resource_type_filter": 2, "pattern_type_filter": 3, "operation": 2, "permission_type": 3,
              "resource_pattern_type": 3, "mechanism": 1, "count": 2, "num_partitions": 1,
              "replication_factor": 1, "assignments": (), "group_instance_id": None}
    request = sample_entity(request_class(api_key, version), fields)
    import dataclasses

    with RawClient(closed_server.port) as client:
        if api_key in REFUSED_BEFORE_ACLS:  # (their -1 timestamps are more than kio's reader reads: the bytes)
            from tests.serve_helpers import raw_answer

            body = raw_answer(client, api_key, version, **{f.name: getattr(request, f.name)
                                                           for f in dataclasses.fields(request)})
            assert struct.unpack_from(">h", body)[0] == REFUSED_BEFORE_ACLS[api_key]
            return
        response = client.send(api_key, version, **{f.name: getattr(request, f.name)
                                                    for f in dataclasses.fields(request)})
    codes = _error_codes(response)
    if api_key in OPEN_APIS:
        assert not codes & AUTHZ_ERRORS, f"api {api_key} is listed open but refused: {codes}"
        if api_key == 16:
            assert response.groups == (), "ListGroups showed groups ANONYMOUS may not Describe"
        if api_key == 66:
            assert response.transaction_states == (), "ListTransactions showed ids ANONYMOUS may not Describe"
        return
    assert codes & AUTHZ_ERRORS, (f"api {api_key} v{version} ({type(request).__name__}) answered an unauthorised "
                                  f"principal without an authorization error: {response}")


def test_describe_log_dirs_before_v3_shows_nothing_without_describe_on_the_cluster(closed_server):
    from tests.serve_helpers import RawClient

    with RawClient(closed_server.port) as client:
        response = client.send(35, 1, topics=None)
    assert response.results == ()

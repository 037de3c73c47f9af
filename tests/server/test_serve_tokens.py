"""The rest of Kafka 3.9's broker APIs, answered as a KRaft broker with Kafka's default settings
answers them: the delegation token APIs (no `delegation.token.secret.key`: DELEGATION_TOKEN_AUTH_DISABLED,
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED outside SASL), UnregisterBroker (BROKER_ID_NOT_REGISTERED but for
this node) and AlterReplicaLogDirs (klog's move between log directories), raw and through kafka-python.

The token answers are decoded here by hand: a refusal carries Kafka's -1 timestamps, which kio's reader
refuses to read (Java's reads them)."""

from __future__ import annotations

import datetime
import logging
import os
import struct

import pytest

import klog
from klog.protocol.schemas import request_schema
from klog.server import Server
from klog.server.listeners import Listener, SecurityConfig
from tests.serve_helpers import RawClient, batch, produce, raw_answer

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402
from kio.static.primitive import i64Timedelta  # noqa: E402

NOT_ALLOWED, DISABLED, AUTH_FAILED, BAD_PRINCIPAL_TYPE = 64, 61, 65, 67


class _Reader:
    def __init__(self, data: bytes, compact: bool) -> None:
        self.data, self.pos, self.compact = data, 0, compact

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def length(self, wide: bool = False) -> int:
        if self.compact:
            n = shift = 0
            while True:
                b = self.data[self.pos]
                self.pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    return n - 1
        return self.fixed(">i" if wide else ">h")

    def string(self) -> str:
        n = self.length()
        self.pos += n
        return self.data[self.pos - n:self.pos].decode()

    def blob(self) -> bytes:
        n = self.length(wide=True)
        self.pos += n
        return self.data[self.pos - n:self.pos]


def create_answer(body: bytes, version: int) -> dict:
    """CreateDelegationTokenResponse, field by field (Kafka's JSON order)."""
    r = _Reader(body, version >= 2)
    out = {"error": r.fixed(">h"), "owner": (r.string(), r.string())}
    if version >= 3:
        out["requester"] = (r.string(), r.string())
    out.update(issue=r.fixed(">q"), expiry=r.fixed(">q"), max=r.fixed(">q"), token_id=r.string(), hmac=r.blob(),
               throttle=r.fixed(">i"))
    return out


def renewal_answer(body: bytes) -> tuple[int, int]:
    """(error, expiry timestamp) of a Renew/ExpireDelegationTokenResponse."""
    return struct.unpack_from(">hq", body)


def _create(client: RawClient, version: int, owner: tuple[str | None, str | None] = (None, None),
            renewers: tuple[tuple[str, str], ...] = ()) -> dict:
    cls = request_schema(38, version)
    import importlib

    renewer_cls = importlib.import_module(cls.__module__).CreatableRenewers
    fields = dict(owner_principal_type=owner[0], owner_principal_name=owner[1],
                  renewers=tuple(renewer_cls(principal_type=t, principal_name=n) for t, n in renewers),
                  max_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)))
    return create_answer(raw_answer(client, 38, version, **fields), version)


def _renew_expire(client: RawClient, api_key: int, version: int) -> tuple[int, int]:
    period = i64Timedelta.parse(datetime.timedelta(milliseconds=1000))
    fields = {"hmac": b"not-a-token", "renew_period": period, "expiry_time_period": period}
    return renewal_answer(raw_answer(client, api_key, version, **fields))


def test_on_plaintext_every_token_request_is_not_allowed(kafka_server):
    with RawClient(kafka_server.port) as client:
        for version in range(4):  # v0 included: Kafka 3.9 serves it
            got = _create(client, version)
            assert got["error"] == NOT_ALLOWED
            assert got["owner"] == ("User", "ANONYMOUS") and got.get("requester", got["owner"]) == got["owner"]
            assert (got["issue"], got["expiry"], got["max"], got["token_id"], got["hmac"]) == (-1, -1, -1, "", b"")
        for api_key in (39, 40):
            for version in range(3):
                assert _renew_expire(client, api_key, version) == (NOT_ALLOWED, -1)
        for version in range(4):
            answer = client.send(41, version, owners=None)
            assert (answer.error_code, answer.tokens) == (E.delegation_token_request_not_allowed, ())


@pytest.fixture
def sasl_server(data_dir):
    from klog.meta.credentials import CredentialsMeta

    store = klog.open(data_dir)
    CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "alice-pw")
    cfg = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)], sasl_mechanisms=("PLAIN",),
                         auth_failure_delay_ms=100)
    cfg.validate()
    with Server(store=store, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.store_ = store
        yield server
    store.close()


def _login(port: int, user: str = "alice", password: str = "alice-pw") -> RawClient:
    client = RawClient(port)
    assert client.send(17, 1, mechanism="PLAIN").error_code == E.none
    assert client.send(36, 2, auth_bytes=b"\0" + user.encode() + b"\0" + password.encode()).error_code == E.none
    return client


def test_over_sasl_tokens_are_disabled_as_kafka_default_broker_answers(sasl_server):
    with _login(sasl_server.port) as client:
        for version in range(4):
            got = _create(client, version)
            assert got["error"] == DISABLED and got["owner"] == ("User", "alice")
            assert got.get("requester", ("User", "alice")) == ("User", "alice")
            # the controller's answer: every other field at the schema's default
            assert (got["issue"], got["expiry"], got["max"], got["token_id"], got["hmac"]) == (0, 0, 0, "", b"")
        assert _create(client, 3, owner=("User", "bob"))["owner"] == ("User", "bob")  # no ACLs: anyone may
        assert _create(client, 3, renewers=(("Group", "ops"),))["error"] == BAD_PRINCIPAL_TYPE
        for api_key in (39, 40):
            for version in range(3):
                assert _renew_expire(client, api_key, version) == (DISABLED, 0)
        for version in range(4):
            assert client.send(41, version, owners=None).error_code == E.delegation_token_auth_disabled


def test_a_token_for_another_owner_needs_create_tokens_on_that_user(sasl_server):
    """With ACLs, no binding can name a USER resource in klog: only a super user creates tokens for
    others (Kafka's CREATE_TOKENS on User:bob, with no binding for it), anyone for themselves."""
    from klog.meta.acls import AclsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    AclsMeta(sasl_server.store_.meta).add([AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice",
                                                      "*", Operation.READ, Permission.ALLOW)])
    sasl_server.security.authorizer.invalidate()
    with _login(sasl_server.port) as client:
        got = _create(client, 3, owner=("User", "bob"))
        assert got["error"] == AUTH_FAILED and got["owner"] == ("User", "bob") and got["requester"] == ("User", "alice")
        assert got["issue"] == -1
        assert _create(client, 3, owner=("User", "alice"))["error"] == DISABLED


def test_token_apis_are_advertised_from_v0_as_kafka_39_does(kafka_server):
    from klog.server.dispatch import load_handlers

    handlers = load_handlers()
    assert {k: (handlers[k].min_version, handlers[k].max_version) for k in (34, 38, 39, 40, 41, 64)} == \
        {34: (0, 2), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 64: (0, 0)}


# -- UnregisterBroker ----------------------------------------------------------------------------------
def test_unregister_broker_of_another_id_is_not_registered_and_of_this_node_changes_nothing(kafka_server,
                                                                                             caplog):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with RawClient(kafka_server.port) as client:
        other = client.send(64, 0, broker_id=kafka_server.node_id + 1)
        assert (other.error_code, other.error_message) == (E.broker_id_not_registered, None)
        assert client.send(64, 0, broker_id=-1).error_code == E.broker_id_not_registered
        own = client.send(64, 0, broker_id=kafka_server.node_id)
        assert (own.error_code, own.error_message) == (E.none, None)  # Kafka's controller: no error
        meta = client.send(3, 9, topics=None, allow_auto_topic_creation=False,
                           include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        assert [int(b.node_id) for b in meta.brokers] == [kafka_server.node_id]  # still here
    lines = [r.getMessage() for r in caplog.records if "unregister" in r.getMessage()]
    assert len(lines) == 1 and "stays registered" in lines[0]


def test_unregister_broker_needs_alter_on_the_cluster(data_dir):
    from klog.meta.acls import AclsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    store = klog.open(data_dir)
    AclsMeta(store.meta).add([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                         "User:ANONYMOUS", "*", Operation.DESCRIBE, Permission.ALLOW)])
    store.close()
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert client.send(64, 0, broker_id=0).error_code == E.cluster_authorization_failed
        from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

        answer = client.send(34, 2, dirs=(AlterReplicaLogDir(path="/x", topics=(
            AlterReplicaLogDirTopic(name="t", partitions=(0, 1)),)),))
        assert [(t.topic_name, [(int(p.partition_index), p.error_code) for p in t.partitions])
                for t in answer.results] == [("t", [(0, E.cluster_authorization_failed),
                                                    (1, E.cluster_authorization_failed)])]


# -- AlterReplicaLogDirs --------------------------------------------------------------------------------
@pytest.fixture
def two_dirs(data_dir):
    store = klog.open(data_dir)
    second = os.path.join(data_dir, "disk2")
    store.add_dir(second)
    store.create_topic("t", 2)  # one replica each, spread over the two directories
    paths = {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}
    store.close()
    return paths


def _where(store: klog.Store, topic: str, partition: int) -> list[int]:
    return list(store.topic(topic).partitions[partition].replicas)


def _log_dirs(client: RawClient, version: int = 4) -> dict[str, list[tuple[str, int]]]:
    answer = client.send(35, version, topics=None)
    return {r.log_dir: sorted((t.name, int(p.partition_index)) for t in r.topics for p in t.partitions)
            for r in answer.results}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_replica_log_dirs_moves_a_replica_and_describe_log_dirs_shows_it(data_dir, two_dirs, version):
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module

    mod = payload_module(34, version, EntityType.request)
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        store = server.store
        p0_dir = _where(store, "t", 0)[0]
        other = next(d for d in two_dirs if d != p0_dir)
        assert produce(client, "t", 0, batch([b"a", b"b"])) == (E.none, 0)
        dir_, topic = mod.AlterReplicaLogDir, mod.AlterReplicaLogDirTopic
        answer = client.send(34, version, dirs=(
            dir_(path=two_dirs[other], topics=(topic(name="t", partitions=(0, 9)),
                                               topic(name="nope", partitions=(0,)),
                                               topic(name="b" * 220, partitions=(0,)))),  # Kafka's future folder
            dir_(path="/not/a/log/dir", topics=(topic(name="t", partitions=(1,)),)),
            dir_(path=two_dirs[_where(store, "t", 1)[0]] + "/", topics=(topic(name="t", partitions=()),)),
        ))
        got = {(t.topic_name, int(p.partition_index)): p.error_code for t in answer.results for p in t.partitions}
        assert got == {("t", 0): E.none, ("t", 9): E.unknown_topic_or_partition,
                       ("nope", 0): E.unknown_topic_or_partition, ("t", 1): E.log_dir_not_found,
                       ("b" * 220, 0): E.invalid_topic_exception}
        assert _where(store, "t", 0) == [other]
        assert ("t", 0) in _log_dirs(client)[two_dirs[other]]
        assert ("t", 0) not in _log_dirs(client)[two_dirs[p0_dir]]
        # the partition keeps its records and takes more where it now is
        assert produce(client, "t", 0, batch([b"c"])) == (E.none, 2)
        again = client.send(34, version, dirs=(mod.AlterReplicaLogDir(path=two_dirs[other], topics=(
            mod.AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
        assert again.results[0].partitions[0].error_code == E.none  # already there: nothing to do
    with klog.open(data_dir) as store:
        assert [r.value for r in store.consumer("t", partitions=[0])] == [b"a", b"b", b"c"]
        assert not [p for p in store.verify("t") if p["problems"]]


def test_kafka_python_alter_replica_log_dirs(data_dir, two_dirs):
    kafka = pytest.importorskip("kafka")
    from kafka.structs import TopicPartitionReplica

    with Server(data_dir, listen=("127.0.0.1", 0)) as server:
        target = next(d for d in two_dirs if d not in _where(server.store, "t", 1))
        admin = kafka.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=15_000)
        try:
            result = admin.alter_replica_log_dirs({TopicPartitionReplica("t", 1, server.node_id): two_dirs[target],
                                                   TopicPartitionReplica("t", 0, server.node_id): "/nowhere"})
            described = admin.describe_log_dirs()
        finally:
            admin.close()
        assert {(k.topic, k.partition): v.__name__ for k, v in result.items()} == \
            {("t", 1): "NoError", ("t", 0): "LogDirNotFoundError"}
        assert _where(server.store, "t", 1) == [target]
        dirs = {d["log_dir"]: [(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]]
                for d in described[0]["log_dirs"]}
        assert ("t", 1) in dirs[two_dirs[target]]


@pytest.mark.slow
def test_over_tls_only_a_client_certificate_may_ask_for_tokens(data_dir, tmp_path):
    """Kafka's allowTokenRequests: TLS without a client certificate (principal ANONYMOUS, "1-way SSL")
    is refused as PLAINTEXT is; with one (mutual TLS) the request goes on to the disabled feature."""
    import shutil
    import socket
    import ssl

    if not shutil.which("openssl"):
        pytest.skip("openssl CLI missing")
    from tests.tls_certs import make_certs

    certs = make_certs(str(tmp_path / "certs"))
    for client_auth, client_cert, expected in (("none", None, NOT_ALLOWED), ("required", "alice", DISABLED)):
        cfg = SecurityConfig([Listener("SSL", "127.0.0.1", 0)], certs.path("server.pem"), certs.path("server.key"),
                             ssl_cafile=certs.ca, ssl_client_auth=client_auth)
        cfg.validate()
        with Server(data_dir, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
            context = ssl.create_default_context(cafile=certs.ca)
            if client_cert:
                context.load_cert_chain(certs.path(f"{client_cert}.pem"), certs.path(f"{client_cert}.key"))
            client = RawClient.__new__(RawClient)
            client.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                                              server_hostname="localhost")
            client.correlation = 0
            with client:
                assert _create(client, 3)["error"] == expected
                assert client.send(41, 3, owners=None).error_code == expected


@pytest.mark.slow
def test_moves_back_and_forth_under_an_idempotent_producer_lose_and_repeat_nothing(data_dir, two_dirs):
    """librdkafka produces (acks=all, idempotent) while AlterReplicaLogDirs moves the partition from
    one log directory to the other six times: every record is there once, the segments verify."""
    import threading
    import time

    ck = pytest.importorskip("confluent_kafka")
    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    with Server(data_dir, listen=("127.0.0.1", 0)) as server:
        stop = threading.Event()
        sent, failed = [0], []

        def produce_until_stopped() -> None:
            producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "acks": "all",
                                    "enable.idempotence": True, "linger.ms": 2, "log_level": 0})
            n = 0
            while not stop.is_set() and n < 200_000:
                producer.produce("t", b"%d" % n, partition=0, on_delivery=lambda e, m: e and failed.append(e))
                n += 1
                if n % 50 == 0:
                    producer.poll(0.005)
            assert producer.flush(30) == 0
            sent[0] = n

        thread = threading.Thread(target=produce_until_stopped)
        thread.start()
        try:
            with RawClient(server.port) as client:
                for i in range(6):
                    time.sleep(0.2)
                    target = sorted(two_dirs)[i % 2 == 0]
                    answer = client.send(34, 2, dirs=(AlterReplicaLogDir(path=two_dirs[target], topics=(
                        AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
                    assert answer.results[0].partitions[0].error_code == E.none
                    assert _where(server.store, "t", 0) == [target]
        finally:
            stop.set()
            thread.join(60)
    assert not failed and sent[0] > 0
    with klog.open(data_dir) as store:
        got = [int(r.value) for r in store.consumer("t", partitions=[0])]
        assert sorted(got) == list(range(sent[0]))
        assert not [p for p in store.verify("t") if p["problems"]]

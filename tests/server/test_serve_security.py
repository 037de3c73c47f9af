"""klog serve's security seen by real clients: TLS, SASL (PLAIN, SCRAM-SHA-256/512), mTLS, ACLs.

Goal: right credentials work and every wrong one is refused with the client seeing Kafka's error
(wrong password, unknown user, a mechanism not offered, plaintext to a TLS port, an expired or
untrusted client certificate); ACLs decide what Metadata shows and who may administer ACLs.
Method: certificates made with `openssl` in a temporary folder; `klog serve` in this process on
127.0.0.1 ephemeral ports; confluent-kafka (librdkafka), kcat and kafka-python as clients, each
bounded by a timeout. Failed authentication is answered after a short delay here (100 ms).
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import socket
import ssl
import struct
import subprocess
import time

import pytest

import klog
from klog.meta.acls import AclsMeta
from klog.meta.credentials import CredentialsMeta
from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from klog.server import Server
from klog.server.listeners import Listener, SecurityConfig
from tests.tls_certs import make_certs

KCAT = shutil.which("kcat")
DELAY_MS = 100
TIMEOUT_S = 15


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl CLI missing")
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def secure_store(data_dir):
    store = klog.open(data_dir)
    creds = CredentialsMeta(store.meta)
    creds.add("alice", "SCRAM-SHA-256", "alice-pw")
    creds.add("alice", "SCRAM-SHA-512", "alice-pw")
    creds.add("bob", "SCRAM-SHA-512", "bob-pw")
    yield store
    store.close()


@contextlib.contextmanager
def serving(store, certs, *protocols: str, **config):
    listeners = [Listener(p, "127.0.0.1", 0) for p in protocols]
    cfg = SecurityConfig(listeners, certs.path("server.pem"), certs.path("server.key"),
                         auth_failure_delay_ms=DELAY_MS, **config)
    cfg.validate()
    with Server(store=store, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.addr = {lst.protocol: f"127.0.0.1:{server.ports[lst]}" for lst in server.listeners}
        yield server
        gc.collect()  # librdkafka clients gone before the server: none keeps reconnecting and logging


def client_conf(server, protocol: str, certs, user: str | None = None, password: str | None = None,
                mechanism: str = "SCRAM-SHA-256", **extra) -> dict:
    conf = {"bootstrap.servers": server.addr[protocol], "security.protocol": protocol,
            "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 1000,
            # librdkafka's own log lines go to fd 2: a client still reconnecting after its test would
            # write into a later in-process test's captured stderr
            "log_level": 0, **extra}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = certs.ca
    if user is not None:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def list_topics(conf: dict, timeout: float = 5) -> tuple[object | None, list[str]]:
    """(metadata or None, the client's error messages) after one bounded list_topics."""
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    admin = AdminClient({**conf, "error_cb": lambda e: errors.append(str(e))})
    try:
        return admin.list_topics(timeout=timeout), errors
    except Exception as e:  # KafkaException: transport failure after the refusal
        errors.append(str(e))
        admin.poll(0.5)  # serves error_cb: the broker's own refusal (SASL error, TLS failure)
        return None, errors


@pytest.mark.parametrize("mechanism,user,password", [
    ("SCRAM-SHA-256", "alice", "alice-pw"), ("SCRAM-SHA-512", "bob", "bob-pw"), ("PLAIN", "bob", "bob-pw")])
@pytest.mark.slow
def test_sasl_ssl_right_credentials(secure_store, certs, mechanism, user, password):
    pytest.importorskip("confluent_kafka")
    secure_store.create_topic("orders", partitions=2)
    with serving(secure_store, certs, "SASL_SSL") as server:
        md, errors = list_topics(client_conf(server, "SASL_SSL", certs, user, password, mechanism))
    assert md is not None, errors
    assert sorted(md.topics["orders"].partitions) == [0, 1]


@pytest.mark.parametrize("mechanism,user,password,expect", [
    ("SCRAM-SHA-256", "alice", "wrong", "Authentication failed"),
    # each refusal waits out the client's authentication failure (~2 s): the variants run in CI's
    # full suite, the fast lane keeps one wrong password and the unoffered mechanism
    pytest.param("SCRAM-SHA-256", "mallory", "alice-pw", "Authentication failed", marks=pytest.mark.slow),
    pytest.param("SCRAM-SHA-256", "bob", "bob-pw", "Authentication failed",  # no SCRAM-SHA-256 credential
                 marks=pytest.mark.slow),
    pytest.param("PLAIN", "alice", "wrong", "Authentication failed", marks=pytest.mark.slow),
    ("OAUTHBEARER", "alice", "alice-pw", "mechanism"),  # not offered
])
@pytest.mark.slow
def test_sasl_ssl_refused(secure_store, certs, caplog, mechanism, user, password, expect):
    pytest.importorskip("confluent_kafka")
    with serving(secure_store, certs, "SASL_SSL") as server:
        conf = client_conf(server, "SASL_SSL", certs, user, password, mechanism)
        if mechanism == "OAUTHBEARER":
            conf = {k: v for k, v in conf.items() if k not in ("sasl.username", "sasl.password")}
            conf.update({"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=alice"})
        md, errors = list_topics(conf, timeout=2)  # refused after DELAY_MS
    assert md is None
    assert any(expect.lower() in e.lower() for e in errors), errors
    if mechanism != "OAUTHBEARER":
        failures = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
        assert failures and failures[0].startswith("127.0.0.1 ")  # one line naming the client address


@pytest.mark.slow
def test_plaintext_client_on_a_tls_port_is_refused_and_others_still_served(secure_store, certs):
    pytest.importorskip("confluent_kafka")
    with serving(secure_store, certs, "SSL") as server:
        md, errors = list_topics({"bootstrap.servers": server.addr["SSL"], "security.protocol": "PLAINTEXT",
                                  "socket.timeout.ms": 2000}, timeout=2)
        assert md is None and errors
        host, port = server.addr["SSL"].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:  # raw Kafka bytes, no TLS
            sock.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
            data = b""
            for _ in range(10):  # bounded: until the server closes
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            assert data == b"" or data[0] == 0x15  # closed, perhaps after a TLS alert record: no Kafka answer
        md, errors = list_topics({"bootstrap.servers": server.addr["SSL"], "security.protocol": "SSL",
                                  "ssl.ca.location": certs.ca})
        assert md is not None, errors


def test_sasl_port_refuses_requests_before_authentication(secure_store, certs):
    with serving(secure_store, certs, "SASL_PLAINTEXT") as server:
        host, port = server.addr["SASL_PLAINTEXT"].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            header = struct.pack(">hhih", 3, 1, 7, 1) + b"x"  # Metadata v1, all topics
            frame = header + struct.pack(">i", -1)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            assert sock.recv(64) == b""  # closed without an answer, as Kafka does


def _mtls_conf(server, certs, name: str | None) -> dict:
    conf = {"bootstrap.servers": server.addr["SSL"], "security.protocol": "SSL", "ssl.ca.location": certs.ca,
            "socket.timeout.ms": 5000}
    if name is not None:
        conf.update({"ssl.certificate.location": certs.path(f"{name}.pem"),
                     "ssl.key.location": certs.path(f"{name}.key")})
    return conf


@pytest.mark.slow
def test_mtls_principal_from_certificate_and_bad_certificates_refused(secure_store, certs):
    pytest.importorskip("confluent_kafka")
    secure_store.create_topic("alices")
    secure_store.create_topic("secret")
    AclsMeta(secure_store.meta).add([AclBinding(ResourceType.TOPIC, "alices", PatternType.LITERAL,
                                                "User:CN=alice,O=acme", "*", Operation.DESCRIBE, Permission.ALLOW)])
    with serving(secure_store, certs, "SSL", ssl_cafile=certs.ca, ssl_client_auth="required") as server:
        md, errors = list_topics(_mtls_conf(server, certs, "alice"))
        assert md is not None, errors
        assert set(md.topics) == {"alices"}  # Describe only where the certificate's principal has it
        for name in ("expired", "stranger", None):
            md, errors = list_topics(_mtls_conf(server, certs, name), timeout=2)
            assert md is None and errors, name


@pytest.mark.slow
@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_sasl_ssl_scram(secure_store, certs):
    secure_store.create_topic("kcat-topic")

    def kcat(password: str) -> subprocess.CompletedProcess:
        return subprocess.run([KCAT, "-L", "-b", server.addr["SASL_SSL"], "-m", "5",
                               "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                               "-X", "sasl.username=alice", "-X", f"sasl.password={password}",
                               "-X", f"ssl.ca.location={certs.ca}"],
                              capture_output=True, text=True, timeout=TIMEOUT_S)

    with serving(secure_store, certs, "SASL_SSL") as server:
        ok, bad = kcat("alice-pw"), kcat("nope")
    assert ok.returncode == 0 and 'topic "kcat-topic"' in ok.stdout, ok.stderr
    assert bad.returncode != 0 and "Authentication failed" in bad.stderr


@pytest.mark.slow  # kafka-python retries bootstrapping for 30 s before it gives up on the wrong password
def test_kafka_python_sasl_ssl(secure_store, certs, caplog):
    kafka = pytest.importorskip("kafka")
    secure_store.create_topic("kp-topic")
    with serving(secure_store, certs, "SASL_SSL") as server:
        def consumer(mechanism: str, password: str):  # noqa: ANN202
            context = ssl.create_default_context(cafile=certs.ca)
            return kafka.KafkaConsumer(bootstrap_servers=server.addr["SASL_SSL"], security_protocol="SASL_SSL",
                                       ssl_context=context, sasl_mechanism=mechanism,
                                       sasl_plain_username="alice", sasl_plain_password=password,
                                       request_timeout_ms=10_000)

        for mechanism in ("PLAIN", "SCRAM-SHA-256"):
            c = consumer(mechanism, "alice-pw")
            try:
                assert "kp-topic" in c.topics()
            finally:
                c.close()
        with pytest.raises(kafka.errors.KafkaError):  # kafka-python gives up bootstrapping ...
            consumer("SCRAM-SHA-256", "wrong").topics()
    # ... after logging the broker's answer: Kafka's error 58
    assert any("SaslAuthenticationFailedError" in r.getMessage() for r in caplog.records if r.name.startswith("kafka"))


def test_metadata_and_acl_admin_through_the_protocol(secure_store, certs):
    """ACL administration with confluent's AdminClient as bob (a super user), then alice sees only
    what her ACLs give her and may not administer ACLs."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    from confluent_kafka.admin import AclBinding as CBinding
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as CType

    for t in ("public-a", "public-b", "private"):
        secure_store.create_topic(t)
    AclsMeta(secure_store.meta).set_config(super_users=["User:bob"])
    with serving(secure_store, certs, "SASL_SSL") as server:
        bob = admin_mod.AdminClient(client_conf(server, "SASL_SSL", certs, "bob", "bob-pw", "SCRAM-SHA-512"))
        binding = CBinding(CType.TOPIC, "public-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        for f in bob.create_acls([binding], request_timeout=10).values():
            assert f.result(timeout=TIMEOUT_S) is None
        any_filter = AclBindingFilter(CType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                      AclPermissionType.ANY)
        listed = bob.describe_acls(any_filter, request_timeout=10).result(timeout=TIMEOUT_S)
        assert [(b.name, b.principal, b.operation) for b in listed] == [("public-", "User:alice",
                                                                       AclOperation.DESCRIBE)]
        md, errors = list_topics(client_conf(server, "SASL_SSL", certs, "alice", "alice-pw"))
        assert md is not None and set(md.topics) == {"public-a", "public-b"}, errors
        alice = admin_mod.AdminClient(client_conf(server, "SASL_SSL", certs, "alice", "alice-pw"))
        with pytest.raises(Exception, match="(?i)authoriz"):
            for f in alice.create_acls([binding], request_timeout=10).values():
                f.result(timeout=TIMEOUT_S)
        _kafka_python_describe_acls_refused(server, certs)
        deleted = bob.delete_acls([any_filter], request_timeout=10)
        assert [len(f.result(timeout=TIMEOUT_S)) for f in deleted.values()] == [1]
        assert AclsMeta(secure_store.meta).list() == []
        # no ACL left at all: allow.everyone.if.no.acl.found is true again (auto), alice sees everything
        time.sleep(0.01)
        md, _ = list_topics(client_conf(server, "SASL_SSL", certs, "alice", "alice-pw"))
        assert md is not None and {"public-a", "public-b", "private"} <= set(md.topics)


def _kafka_python_describe_acls_refused(server, certs) -> None:
    """librdkafka drops DescribeAcls's top-level error (it returns an empty list); kafka-python raises it."""
    kafka_admin = pytest.importorskip("kafka.admin")
    from kafka.errors import ClusterAuthorizationFailedError

    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=server.addr["SASL_SSL"], security_protocol="SASL_SSL",
                                         ssl_context=ssl.create_default_context(cafile=certs.ca),
                                         sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                                         sasl_plain_password="alice-pw", request_timeout_ms=10_000)
    try:
        any_filter = kafka_admin.ACLFilter(
            principal=None, host="*", operation=kafka_admin.ACLOperation.ANY,
            permission_type=kafka_admin.ACLPermissionType.ANY,
            resource_pattern=kafka_admin.ResourcePatternFilter(kafka_admin.ResourceType.ANY, None,
                                                               kafka_admin.ACLResourcePatternType.ANY))
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(any_filter)
    finally:
        admin.close()


def test_non_loopback_plaintext_needs_insecure(cli):
    r = cli("serve", "--listen", "PLAINTEXT://0.0.0.0:0")
    assert r.exit_code == 2 and "without TLS or SASL" in r.stderr and "--insecure" in r.stderr
    assert "use SASL_SSL" in r.stderr and "SASL_PLAINTEXT" not in r.stderr  # never recommend clear-text passwords
    r = cli("serve", "--listen", "SASL_PLAINTEXT://0.0.0.0:0")  # before: started without a word
    assert r.exit_code == 2 and "passwords from other machines unencrypted" in r.stderr and "SASL_SSL" in r.stderr
    assert "--insecure" in r.stderr
    r = cli("serve", "--listen", "SSL://127.0.0.1:0")
    assert r.exit_code == 2 and "needs --ssl-cert and --ssl-key" in r.stderr
    r = cli("serve", "--listen", "BOGUS://127.0.0.1:0")
    assert r.exit_code == 2 and "unknown security protocol 'BOGUS'" in r.stderr


def test_produce_and_fetch_over_sasl_ssl(secure_store, certs):
    """Fetch over TLS cannot use sendfile (encryption happens in this process): the same records come
    back through the encrypted path, in order."""
    ck = pytest.importorskip("confluent_kafka")
    secure_store.create_topic("tls-t")
    with serving(secure_store, certs, "SASL_SSL") as server:
        conf = client_conf(server, "SASL_SSL", certs, "alice", "alice-pw")
        producer = ck.Producer(conf)
        for i in range(300):
            producer.produce("tls-t", f"r{i}".encode() * 50, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        consumer = ck.Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([ck.TopicPartition("tls-t", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 300 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        consumer.close()
    assert got == [f"r{i}".encode() * 50 for i in range(300)]


def test_large_frame_before_authentication_is_refused(secure_store, certs):
    """Before SASL authentication a request may be at most 512 KiB (Kafka's sasl.server.max.receive.size):
    a client cannot make the server buffer 100 MiB frames without logging in."""
    with serving(secure_store, certs, "SASL_PLAINTEXT") as server:
        host, port = server.addr["SASL_PLAINTEXT"].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(struct.pack(">i", 1 << 20) + struct.pack(">hhih", 18, 3, 1, 0))
            assert sock.recv(64) == b""  # closed at the size prefix, the body never read


def test_scram_users_through_the_protocol(secure_store, certs):
    """AlterUserScramCredentials (the client sends salt and SaltedPassword, never the password) and
    DescribeUserScramCredentials through confluent's AdminClient; the new user then logs in.
    Both need the cluster permission Kafka asks for (a non-super user is refused once ACLs exist)."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    acls = AclsMeta(secure_store.meta)
    acls.set_config(super_users=["User:bob"])
    acls.add([AclBinding(ResourceType.TOPIC, "x", PatternType.LITERAL, "User:nobody", "*", Operation.READ,
                         Permission.ALLOW)])
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"carol-pw")
    with serving(secure_store, certs, "SASL_SSL") as server:
        bob = admin_mod.AdminClient(client_conf(server, "SASL_SSL", certs, "bob", "bob-pw", "SCRAM-SHA-512"))
        for f in bob.alter_user_scram_credentials([upsert], request_timeout=10).values():
            assert f.result(timeout=TIMEOUT_S) is None
        described = bob.describe_user_scram_credentials(["carol"], request_timeout=10)
        futures = described.values() if isinstance(described, dict) else [described]
        infos = [(i.mechanism, i.iterations) for f in futures
                 for i in f.result(timeout=TIMEOUT_S).scram_credential_infos]
        assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096)]
        md, errors = list_topics(client_conf(server, "SASL_SSL", certs, "carol", "carol-pw"))
        assert md is not None, errors
        alice = admin_mod.AdminClient(client_conf(server, "SASL_SSL", certs, "alice", "alice-pw"))
        with pytest.raises(Exception, match="(?i)authoriz"):
            for f in alice.alter_user_scram_credentials([upsert], request_timeout=10).values():
                f.result(timeout=TIMEOUT_S)
        deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
        for f in bob.alter_user_scram_credentials([deletion], request_timeout=10).values():
            assert f.result(timeout=TIMEOUT_S) is None
    assert CredentialsMeta(secure_store.meta).for_user("carol") == []
    assert "hunter" not in str(CredentialsMeta(secure_store.meta).list())


def test_sasl_handshake_v0_raw_tokens_with_kafka_python(secure_store, certs, monkeypatch):
    """kafka-python told the broker is Kafka 0.10.0 sends SaslHandshake v0, then its SASL tokens raw
    (size-prefixed, no request header; KIP-152's SaslAuthenticate came in 1.0): PLAIN and SCRAM
    authenticate through them, a wrong password is refused."""
    kafka = pytest.importorskip("kafka")
    from klog.server import server as server_module

    raw = []
    real = server_module.raw_sasl_token
    monkeypatch.setattr(server_module, "raw_sasl_token", lambda frame: raw.append(len(frame)) or real(frame))
    secure_store.create_topic("v0-topic")
    with serving(secure_store, certs, "SASL_SSL") as server:
        def consumer(mechanism: str, password: str):  # noqa: ANN202
            context = ssl.create_default_context(cafile=certs.ca)
            return kafka.KafkaConsumer(bootstrap_servers=server.addr["SASL_SSL"], security_protocol="SASL_SSL",
                                       ssl_context=context, sasl_mechanism=mechanism, api_version=(0, 10, 0),
                                       sasl_plain_username="alice", sasl_plain_password=password,
                                       request_timeout_ms=10_000)

        for mechanism, tokens in (("PLAIN", 1), ("SCRAM-SHA-256", 2)):
            raw.clear()
            c = consumer(mechanism, "alice-pw")
            try:
                assert "v0-topic" in c.topics()
            finally:
                c.close()
            assert len(raw) >= tokens, (mechanism, raw)  # the tokens came raw, not in SaslAuthenticate


def test_sasl_handshake_v0_wrong_password_closes_as_kafka_does(secure_store, certs):
    """A raw token with a wrong password gets no answer but the close (v0 has no error field; Kafka
    closes too), a right one an empty token, after which requests are served."""
    import socket
    import struct

    def frame(api_key: int, version: int, body: bytes) -> bytes:
        data = struct.pack(">hhih", api_key, version, 7, 2) + b"id" + body
        return struct.pack(">i", len(data)) + data

    def read_frame(sock: socket.socket) -> bytes:
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return b""
        return sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)

    with serving(secure_store, certs, "SASL_PLAINTEXT") as server:
        host, port = server.addr["SASL_PLAINTEXT"].rsplit(":", 1)
        for password, answered in ((b"wrong", False), (b"alice-pw", True)):
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(frame(17, 0, struct.pack(">h", 5) + b"PLAIN"))  # SaslHandshake v0
                assert struct.unpack_from(">ih", read_frame(sock)) == (7, 0)
                token = b"\0alice\0" + password
                sock.sendall(struct.pack(">i", len(token)) + token)  # raw, no request header
                if not answered:
                    assert sock.recv(4) == b""  # closed, after the failure delay
                    continue
                assert sock.recv(4, socket.MSG_WAITALL) == b"\0\0\0\0"  # PLAIN's empty server token
                sock.sendall(frame(3, 0, struct.pack(">i", 0)))  # Metadata v0, no topics
                assert struct.unpack_from(">i", read_frame(sock))[0] == 7

"""-X passes Kafka client properties through: klog's commands against a SASL_SSL `klog serve`, with the
properties given on the command line or in a named cluster; wrong credentials are one line, exit 1."""

from __future__ import annotations

import json
import re
import time

import pytest

from klog.meta.groups import GroupsMeta
from tests.cli.test_cluster_cli import assert_one_line_error
from tests.server.test_serve_security import certs, secure_store, serving  # noqa: F401 - fixtures


@pytest.mark.slow
def test_sasl_ssl_through_dash_x_and_a_named_cluster(secure_store, certs, klog_proc, monkeypatch):  # noqa: F811
    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "4")
    with serving(secure_store, certs, "SASL_SSL") as server:
        props = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={certs.ca}",
                 "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice"]
        address = server.addr["SASL_SSL"]
        r = klog_proc("produce", "secured", "-b", address, *props, "-X", "sasl.password=alice-pw",
                      input=b"one\ntwo\n", timeout=60)
        assert r.returncode == 0, r.stderr
        r = klog_proc("clusters", "add", "safe", "-b", address, *props, "-X", "sasl.password=alice-pw")
        assert r.returncode == 0, r.stderr
        r = klog_proc("consume", "secured", "--cluster", "safe", timeout=60)
        assert r.returncode == 0 and r.stdout == b"one\ntwo\n", r.stderr
        started = time.monotonic()
        r = klog_proc("topics", "list", "-b", address, *props, "-X", "sasl.password=wrong", timeout=60)
        assert time.monotonic() - started < 15
        assert_one_line_error(_result(r), 1, address, "SASL authentication")  # the reason, not just "unreachable"


def _result(r):  # noqa: ANN001, ANN202 - a CompletedProcess as the cli fixture's Result
    from tests.conftest import Result

    return Result(r.returncode, r.stdout, r.stderr.decode())


MTLS = "mtls"  # an SSL listener requiring a client certificate
SECURED = [
    ("SSL", []),
    (MTLS, []),
    ("SASL_PLAINTEXT", ["-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice",
                        "-X", "sasl.password=alice-pw"]),
    ("SASL_SSL", ["-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=bob", "-X", "sasl.password=bob-pw"]),
    ("SASL_SSL", ["-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=bob", "-X", "sasl.password=bob-pw"]),
]


@pytest.mark.parametrize("protocol,sasl", SECURED, ids=["SSL", "SSL-client-certificate", "SASL_PLAINTEXT-SCRAM-256",
                                                          "SASL_SSL-PLAIN", "SASL_SSL-SCRAM-512"])
@pytest.mark.slow
def test_delete_offsets_and_partition_sizes_over_tls_and_sasl(secure_store, certs, klog_proc, monkeypatch,  # noqa: F811
                                                              protocol, sasl):
    """OffsetDelete and DescribeLogDirs (klog's own socket, not librdkafka) honour the same -X settings."""
    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "8")
    secure_store.create_topic("t", partitions=2)
    with secure_store.producer() as p:
        for i in range(10):
            p.send("t", b"v%d" % i, partition=i % 2)
    groups = GroupsMeta(secure_store.meta)
    groups.set_offsets("g", {("t", 0): 3, ("t", 1): 4})
    config, mtls = {}, protocol == MTLS
    if mtls:
        protocol, config = "SSL", {"ssl_cafile": certs.ca, "ssl_client_auth": "required"}
        sasl = ["-X", f"ssl.certificate.location={certs.path('alice.pem')}",
                "-X", f"ssl.key.location={certs.path('alice.key')}"]
    with serving(secure_store, certs, protocol, **config) as server:
        props = ["-X", f"security.protocol={protocol}", *sasl]
        if "SSL" in protocol:
            props += ["-X", f"ssl.ca.location={certs.ca}"]
        address = server.addr[protocol]
        r = klog_proc("topics", "describe", "t", "--json", "-b", address, *props, timeout=60)
        assert r.returncode == 0, r.stderr
        sizes = [p["size_bytes"] for p in json.loads(r.stdout)["partitions"]]
        assert all(isinstance(s, int) and s > 0 for s in sizes), sizes  # not '-' (None): DescribeLogDirs answered
        r = klog_proc("groups", "delete-offsets", "g", "--topic", "t:1", "-b", address, *props, timeout=60)
        assert (r.returncode, r.stdout) == (0, b"Deleted 1 committed offset(s) of group g\n"), r.stderr
    assert sorted(groups.committed("g")) == [("t", 0)]


def test_socket_path_refusals_are_one_line(secure_store, certs):  # noqa: F811
    """Wrong password, an untrusted server certificate, a mechanism the broker does not offer: one
    error naming the broker and the reason, at once (not retried until the timeout)."""
    from klog.client.remote.target import ClusterTarget
    from klog.client.remote.wire import offset_delete
    from klog.errors import SecurityError

    with serving(secure_store, certs, "SASL_SSL", sasl_mechanisms=("PLAIN",)) as server:
        address = server.addr["SASL_SSL"]
        base = {"security.protocol": "SASL_SSL", "ssl.ca.location": certs.ca, "sasl.username": "alice"}
        for props, text in (({**base, "sasl.mechanism": "PLAIN", "sasl.password": "wrong"},
                             "SASL authentication failed at Kafka broker 127.0.0.1:"),
                            ({**base, "sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "alice-pw"},
                             "does not offer SASL mechanism SCRAM-SHA-256 (it offers PLAIN)"),
                            ({**base, "ssl.ca.location": certs.path("other-ca.pem"), "sasl.mechanism": "PLAIN",
                              "sasl.password": "alice-pw"}, "TLS handshake with Kafka broker 127.0.0.1:")):
            started = time.monotonic()
            with pytest.raises(SecurityError, match=re.escape(text)) as caught:
                offset_delete(ClusterTarget(address, props), "g", "t", [0], timeout=8)
            assert time.monotonic() - started < 5 and "\n" not in str(caught.value)


@pytest.mark.slow
def test_an_encrypted_client_key_and_an_inline_ca(secure_store, certs, klog_proc, monkeypatch, tmp_path):  # noqa: F811
    """-X ssl.key.password opens an encrypted client key and -X ssl.ca.pem gives the CA inline, for
    librdkafka (produce) and klog's own socket alike (consume by Fetch requests, DescribeLogDirs);
    a wrong key password is one line."""
    import subprocess

    from klog.client.remote.fetch_consumer import FetchConsumer
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget

    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "6")
    encrypted = str(tmp_path / "alice-encrypted.key")
    subprocess.run(["openssl", "pkey", "-in", certs.path("alice.key"), "-aes256", "-passout", "pass:s3cret",
                    "-out", encrypted], check=True, capture_output=True, timeout=60)
    with open(encrypted) as f:
        assert "ENCRYPTED" in f.read()
    with open(certs.ca) as f:
        ca_pem = f.read()
    props = {"security.protocol": "SSL", "ssl.ca.pem": ca_pem, "ssl.certificate.location": certs.path("alice.pem"),
             "ssl.key.location": encrypted, "ssl.key.password": "s3cret"}
    with serving(secure_store, certs, "SSL", ssl_cafile=certs.ca, ssl_client_auth="required") as server:
        address = server.addr["SSL"]
        dash_x = [arg for k, v in props.items() for arg in ("-X", f"{k}={v}")]
        r = klog_proc("produce", "enc", "-b", address, *dash_x, input=b"one\ntwo\n", timeout=60)
        assert r.returncode == 0, r.stderr
        r = klog_proc("consume", "enc", "-b", address, *dash_x, timeout=60)
        assert (r.returncode, r.stdout) == (0, b"one\ntwo\n"), r.stderr
        r = klog_proc("topics", "describe", "enc", "--json", "-b", address, *dash_x, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)["partitions"][0]["size_bytes"] > 0, r.stderr
        with RemoteStore(ClusterTarget(address, props)) as store, store.consumer("enc") as c:
            assert isinstance(c, FetchConsumer)  # klog's socket, not librdkafka
            assert [r.value for r in c] == [b"one", b"two"]
        wrong = [a.replace("ssl.key.password=s3cret", "ssl.key.password=wrong") for a in dash_x]
        r = klog_proc("consume", "enc", "-b", address, *wrong, timeout=60)
        text = r.stderr.decode()
        assert r.returncode in (1, 2) and text.count("\n") == 1 and "Traceback" not in text, text
        assert "ssl.key" in text, text  # librdkafka names the key it could not open

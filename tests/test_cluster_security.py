"""-X passes Kafka client properties through: klog's commands against a SASL_SSL `klog serve`, with the
properties given on the command line or in a named cluster; wrong credentials are one line, exit 1."""

from __future__ import annotations

import time

from tests.test_cluster_cli import assert_one_line_error
from tests.test_serve_security import certs, secure_store, serving  # noqa: F401 - fixtures


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

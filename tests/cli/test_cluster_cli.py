"""Cluster targets without a cluster: bad addresses, bad -X, named clusters, and klog mirror between
local stores (the same code path a cluster side uses)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import klog
from tests.cli.test_cli import assert_one_line_error
from tests.conftest import REPO


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_timeout(monkeypatch):
    # A closed port refuses at once, so klog's wait for the cluster ends at its bound: keep the bound short.
    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "0.5")


@pytest.mark.parametrize("args", [("consume", "t"), ("topics", "list"), ("offsets", "t"), ("produce", "t")])
def test_a_refused_connection_fails_at_once_not_after_the_timeout(cli, args):
    address = f"127.0.0.1:{closed_port()}"  # the default 10 s bound: a refusal must not wait for it
    started = time.monotonic()
    r = cli(*args, "--bootstrap-server", address, input=b"x\n")
    assert time.monotonic() - started < 5  # well under the 10 s bound, on a loaded machine
    assert_one_line_error(r, 1, "cannot reach Kafka cluster", address, "connection refused")


def test_a_silent_cluster_fails_after_the_timeout(cli, short_timeout):
    with socket.socket() as silent:  # the kernel accepts connections; nobody ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        r = cli("topics", "list", "--bootstrap-server", address)
    assert_one_line_error(r, 1, "cannot reach Kafka cluster", address, "within 0.5 s")


def test_bootstrap_from_the_environment(cli, short_timeout, monkeypatch):
    address = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("KLOG_BOOTSTRAP_SERVERS", address)
    assert_one_line_error(cli("topics", "list"), 1, address)


def test_bad_client_property_is_a_usage_error(cli, short_timeout):
    r = cli("topics", "list", "-b", f"127.0.0.1:{closed_port()}", "-X", "no.such.property=1")
    assert_one_line_error(r, 2, "invalid Kafka client property", "no.such.property")
    r = cli("consume", "t", "-b", f"127.0.0.1:{closed_port()}", "-X", "fetch.wait.max.ms=oops")
    assert_one_line_error(r, 2, "invalid Kafka client property", "fetch.wait.max.ms")
    assert_one_line_error(cli("topics", "list", "-b", "127.0.0.1:1", "-X", "novalue"), 2, "name=value")


def test_bad_bootstrap_and_property_without_cluster(cli):
    assert_one_line_error(cli("topics", "list", "-b", "localhost"), 2, "--bootstrap-server", "HOST:PORT")
    assert_one_line_error(cli("topics", "list", "-X", "client.id=x"), 2, "needs --bootstrap-server or --cluster")
    assert_one_line_error(cli("topics", "list", "-b", "h:1", "--cluster", "c"), 2, "not both")


def test_named_clusters(cli, short_timeout):
    address = f"127.0.0.1:{closed_port()}"
    r = cli("clusters", "add", "prod", "-b", address, "-X", "client.id=me", "-X", "sasl.password=hunter2")
    assert r.exit_code == 0, r
    listed = cli("clusters", "list", "--json")
    doc = json.loads(listed.out)
    assert doc == {"cluster": "prod", "bootstrap.servers": address, "client.id": "me", "sasl.password": "***"}
    assert "hunter2" not in cli("clusters", "list").out
    # the named cluster is what --cluster talks to
    assert_one_line_error(cli("topics", "list", "--cluster", "prod"), 1, "cluster 'prod'", address)
    assert_one_line_error(cli("topics", "list", "--cluster", "nope"), 2, "unknown cluster 'nope'", "prod")
    assert cli("clusters", "remove", "prod").exit_code == 0
    assert cli("clusters", "list", "--json").out == ""
    assert_one_line_error(cli("clusters", "remove", "prod"), 2, "unknown cluster")


def envelopes(path: str, topic: str) -> list[tuple]:
    """Every record of `topic` as (partition, offset, timestamp, key, value, headers)."""
    with klog.open(path, create=False) as s, s.consumer(topic) as c:
        return sorted((r.partition, r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in c)


def fill(path: str, topic: str, n: int, partitions: int = 3, start: int = 0) -> None:
    with klog.open(path) as s:
        if not s.has_topic(topic):
            s.create_topic(topic, partitions, configs={"retention.ms": "86400000"})
        with s.producer() as p:
            for i in range(start, start + n):
                p.send(topic, f"v{i}".encode() if i % 7 else None, key=f"k{i}".encode(),
                       headers=[("h", str(i).encode()), ("n", None)], timestamp=1_700_000_000_000 + i)


def _copied_count(path: str, topic: str) -> int:
    try:
        return len(envelopes(path, topic))
    except klog.KlogError:  # no store or no topic there yet
        return 0


def test_a_following_mirror_stops_on_sigterm_as_every_command_does(tmp_path):
    """SIGTERM: exit 143 and `klog: terminated` (the mirror had its own handler: 130, `interrupted`)."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    fill(src, "orders", 5, partitions=1)
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "mirror", src, dst, "orders", "--follow"], env=env,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _copied_count(dst, "orders") < 5:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and b"mirrored 5 records" in err and err.endswith(b"klog: terminated\n"), err


@pytest.mark.slow
def test_mirror_between_local_stores_keeps_everything_and_resumes(klog_proc, tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    fill(src, "orders", 500)
    fill(src, "other", 10, partitions=1)
    r = klog_proc("mirror", src, dst, "orders")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().count("\n") == 1 and "mirrored 500 records of 1 topics (3 partitions)" in r.stderr.decode()
    assert envelopes(dst, "orders") == envelopes(src, "orders")
    with klog.open(dst, create=False) as s:
        assert s.topic("orders").configs == {"retention.ms": "86400000"}
        assert not s.has_topic("other")
    fill(src, "orders", 100, start=500)
    r = klog_proc("mirror", src, dst, "orders")
    assert "mirrored 100 records" in r.stderr.decode() and "resumed 3 partitions" in r.stderr.decode()
    assert envelopes(dst, "orders") == envelopes(src, "orders")  # no duplicate, nothing missing


def test_mirror_into_existing_topics_keeps_partitions_only_when_dest_has_them_all(klog_proc, tmp_path):
    """DEST with more partitions: each record keeps its own. With fewer: the partitioner places every
    record by its key (not partitions 0-1 kept and the rest squeezed), as a producer would."""
    from klog.client.partitioner import partition_for_key

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    fill(src, "orders", 60)
    with klog.open(dst) as s:
        s.create_topic("wide.orders", 5)
        s.create_topic("narrow.orders", 2)
    for target in ("wide", "narrow"):
        r = klog_proc("mirror", src, dst, "orders", "--rename", target + ".{topic}")
        assert r.returncode == 0, r.stderr
    with klog.open(src, create=False) as s, s.consumer("orders") as c:
        placed = {r.key: r.partition for r in c}
    with klog.open(dst, create=False) as s:
        with s.consumer("wide.orders") as c:
            assert {r.key: r.partition for r in c} == placed
        with s.consumer("narrow.orders") as c:
            assert {r.key: r.partition for r in c} == {k: partition_for_key(k, 2) for k in placed}


@pytest.mark.slow
def test_mirror_pattern_and_rename(klog_proc, tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    fill(src, "logs.a", 5, partitions=1)
    fill(src, "logs.b", 5, partitions=2)
    fill(src, "metrics", 5, partitions=1)
    r = klog_proc("mirror", src, dst, "--pattern", r"logs\..*", "--rename", "copy.{topic}")
    assert r.returncode == 0, r.stderr
    with klog.open(dst, create=False) as s:
        assert sorted(t for t in s.topic_names() if not t.startswith("__")) == ["copy.logs.a", "copy.logs.b"]
    assert [e[1:] for e in envelopes(dst, "copy.logs.b")] == [e[1:] for e in envelopes(src, "logs.b")]
    r = klog_proc("mirror", src, dst, "--rename", "nope")
    assert r.returncode == 2 and "{topic}" in r.stderr.decode()
    r = klog_proc("mirror", src, dst, "missing")
    assert r.returncode == 1 and "unknown topic 'missing'" in r.stderr.decode()

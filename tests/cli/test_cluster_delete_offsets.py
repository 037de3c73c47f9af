"""`klog groups delete-offsets` through --bootstrap-server (Kafka's OffsetDelete, framed with kio)
against `klog serve`: the same output, exit codes and effect as on the store directly."""

from __future__ import annotations

import json

import pytest

from klog.errors import UsageError
from tests.cli.test_cluster_cli import fill
from tests.cli.test_cluster_serve import GROUP_APIS, needs_apis, remote

OFFSET_DELETE = 47


def committed(klog_proc, group: str) -> list[tuple[str, int]]:  # noqa: ANN001 - the klog_proc fixture
    r = klog_proc("groups", "describe", group, "--json")
    assert r.returncode == 0, r.stderr
    return sorted((p["topic"], p["partition"]) for p in json.loads(r.stdout)["partitions"]
                  if p.get("committed") is not None)


@pytest.mark.slow  # group joins wait out the coordinator's initial rebalance delay
def test_delete_offsets_through_the_cluster(kafka_server, klog_proc, data_dir):
    needs_apis(*GROUP_APIS, OFFSET_DELETE)
    fill(data_dir, "t", 40, partitions=2)
    fill(data_dir, "u", 10, partitions=1)
    for topic in ("t", "u"):
        r = remote(kafka_server, klog_proc, "consume", topic, "--group", "g")
        assert r.returncode == 0, r.stderr
    assert committed(klog_proc, "g") == [("t", 0), ("t", 1), ("u", 0)]
    r = remote(kafka_server, klog_proc, "groups", "delete-offsets", "g", "--topic", "t:1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"Deleted 1 committed offset(s) of group g\n"
    assert committed(klog_proc, "g") == [("t", 0), ("u", 0)]
    r = remote(kafka_server, klog_proc, "groups", "delete-offsets", "g", "--topic", "u", "--json")
    assert json.loads(r.stdout) == {"group": "g", "deleted": [["u", 0]]}, r.stderr
    assert committed(klog_proc, "g") == [("t", 0)]


@pytest.mark.slow  # a group join
def test_delete_offsets_errors_are_the_local_ones(kafka_server, klog_proc, data_dir):
    needs_apis(*GROUP_APIS, OFFSET_DELETE)
    fill(data_dir, "t", 10, partitions=2)
    assert remote(kafka_server, klog_proc, "consume", "t", "--group", "g").returncode == 0
    for args in (("nope", "--topic", "t"), ("g", "--topic", "missing"), ("g", "--topic", "t:7")):
        through = remote(kafka_server, klog_proc, "groups", "delete-offsets", *args)
        local = klog_proc("groups", "delete-offsets", *args)
        assert (through.returncode, through.stderr) == (local.returncode, local.stderr), args
        assert through.returncode in (1, 2) and through.stderr.count(b"\n") == 1
    assert committed(klog_proc, "g") == [("t", 0), ("t", 1)]


def test_what_the_socket_path_cannot_speak_is_one_usage_line():
    """OffsetDelete/DescribeLogDirs go over klog's own socket: settings it cannot honour are refused by name."""
    from klog.client.remote.target import ClusterTarget
    from klog.client.remote.wire import security

    assert security(ClusterTarget("h:9092", {"security.protocol": "plaintext"})).tls is None
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"}
    for props, text in (({"security.protocol": "QUIC"}, "unknown security.protocol 'QUIC'"),
                        (sasl, "sasl.mechanism GSSAPI is not supported"),  # librdkafka's default mechanism
                        ({**sasl, "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism OAUTHBEARER is not supported"),
                        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs -X sasl.username"),
                        ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
                         "cannot load the TLS files"),
                        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
                         "invalid ssl.endpoint.identification.algorithm")):
        with pytest.raises(UsageError, match=text):
            security(ClusterTarget("h:9092", props))

"""DescribeCluster's cluster_authorized_operations, as Kafka's computeDescribeClusterResponse answers
it: what the caller may do to the cluster when the request asks (include_cluster_authorized_operations),
0 without DESCRIBE on it, the schema's "not asked" default otherwise. librdkafka's
describe_cluster(include_authorized_operations=True) got None whatever the ACLs (klog always left the
default)."""

from __future__ import annotations

import pytest

from tests.serve_helpers import RawClient

ck = pytest.importorskip("confluent_kafka")
NOT_ASKED = -(2**31)


def _described_operations(port: int) -> set | None:
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    described = client.describe_cluster(include_authorized_operations=True, request_timeout=15).result(15)
    return None if described.authorized_operations is None else set(described.authorized_operations)


def _raw_operations(port: int, include: bool) -> int:
    with RawClient(port) as raw:
        return raw.send(60, 1, include_cluster_authorized_operations=include, endpoint_type=1) \
            .cluster_authorized_operations


def _allow(operation: object, resource_type: object, name: str) -> object:
    from klog.security.acl import AclBinding, PatternType, Permission

    return AclBinding(resource_type, name, PatternType.LITERAL, "User:ANONYMOUS", "*", operation, Permission.ALLOW)


def test_describe_cluster_answers_the_callers_cluster_operations_when_asked(data_dir):
    from confluent_kafka.admin import AclOperation

    import klog
    from klog.meta.acls import AclsMeta
    from klog.security.acl import Operation, ResourceType
    from klog.server import Server

    store = klog.open(data_dir)
    acls = AclsMeta(store.meta)
    acls.add([_allow(Operation.READ, ResourceType.TOPIC, "t")])  # ACLs in force, nothing on the cluster
    try:
        with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
            assert _raw_operations(server.port, include=True) == 0  # no DESCRIBE on the cluster
            assert _raw_operations(server.port, include=False) == NOT_ASKED
            acls.add([_allow(Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
                      _allow(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, "kafka-cluster")])
            server.security.authorizer.invalidate()
            # ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's rule)
            assert _described_operations(server.port) == {
                AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}
            assert _raw_operations(server.port, include=False) == NOT_ASKED
    finally:
        store.close()

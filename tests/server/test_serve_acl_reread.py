"""A hostile re-read of klog serve's authorization against Kafka 3.9's controller (ControllerApis): cases
where klog decided otherwise than Kafka. PLAINTEXT: every client is User:ANONYMOUS (the fixture of
test_serve_acl_review.py)."""

from __future__ import annotations

import uuid

import pytest

from klog.protocol.kafka import E
from klog.security.acl import Operation, ResourceType
from tests.server.test_serve_acl_review import _delete, allow, deny, grant, server  # noqa: F401 - the fixture

T, C = ResourceType.TOPIC, ResourceType.CLUSTER


def _admin_delete(bootstrap: str, name: str) -> str | None:
    """confluent-kafka's AdminClient.delete_topics of one topic: None, or its error's name."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([name], operation_timeout=10, request_timeout=10)[name].result(timeout=15)
        return None
    except KafkaException as e:
        return e.args[0].name()


def test_delete_on_the_cluster_deletes_any_topic_as_kafkas_controller(server):  # noqa: F811
    """ControllerApis.handleDeleteTopics: Delete on the cluster (hasClusterAuth: granted by All, the one
    binding of the cluster that holds Delete) lets the caller delete any topic, by name or by id, without
    Delete nor Describe on it (klog answered TOPIC_AUTHORIZATION_FAILED)."""
    pytest.importorskip("confluent_kafka")
    server.store.create_topic("other", partitions=1)
    grant(server, allow(C, "kafka-cluster", Operation.ALL))
    assert _admin_delete(server.bootstrap, "secret") is None
    assert not server.store.has_topic("secret")
    topic_id = uuid.UUID(server.store.topics.get("other").topic_id)
    assert _delete(server.port, None, topic_id) == (E.none, "other")
    assert not server.store.has_topic("other")
    assert _delete(server.port, "not-there", None) == (E.unknown_topic_or_partition, "not-there")


def test_a_topic_the_caller_may_delete_but_not_describe_is_not_deleted_by_name(server):  # noqa: F811
    """ControllerApis.deleteTopics: a topic named by name that the caller may not Describe (a DENY of
    Describe) is TOPIC_AUTHORIZATION_FAILED before Delete is looked at (klog deleted it); named by id,
    Delete alone decides."""
    grant(server, allow(T, "secret", Operation.DELETE), deny(T, "secret", Operation.DESCRIBE))
    assert _delete(server.port, "secret", None) == (E.topic_authorization_failed, "secret")
    assert server.store.has_topic("secret")
    topic_id = uuid.UUID(server.store.topics.get("secret").topic_id)
    assert _delete(server.port, None, topic_id)[0] == E.none
    assert not server.store.has_topic("secret")


def _add_partitions(port: int, topics: dict[str, int]) -> dict[str, int]:
    """A transactional producer's AddPartitionsToTxn v3 of partition 0 of each topic: {topic: error code}."""
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module
    from tests.serve_helpers import RawClient
    from tests.server.test_serve_acl_review import _init_txn

    mod = payload_module(24, 3, EntityType.request)
    with RawClient(port) as c:
        error, pid, epoch = _init_txn(c, "t1")
        assert error == 0
        r = c.send(24, 3, v3_and_below_transactional_id="t1", v3_and_below_producer_id=pid,
                   v3_and_below_producer_epoch=epoch,
                   v3_and_below_topics=tuple(mod.AddPartitionsToTxnTopic(name=t, partitions=(p,))
                                             for t, p in topics.items()))
    return {t.name: t.results_by_partition[0].partition_error_code for t in r.results_by_topic_v3_and_below}


@pytest.mark.parametrize("internal", ["__consumer_offsets", "__transaction_state"])
def test_a_client_cannot_add_an_internal_topic_to_its_transaction(server, internal):  # noqa: F811
    """KafkaApis.handleAddPartitionsToTxnRequest (v0-v3, a client's): internal topics are left out of the
    topics it may write, whatever its ACLs: TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED
    (klog added __consumer_offsets' partition to the transaction, its coordinator to end it there)."""
    from klog.broker.group_records import OFFSETS_TOPIC

    if internal == OFFSETS_TOPIC:  # (klog serve makes it at the first commit of a group)
        server.store.create_topic(OFFSETS_TOPIC, partitions=1, exist_ok=True)
    grant(server, allow(T, "*", Operation.ALL), allow(ResourceType.TRANSACTIONAL_ID, "*", Operation.ALL))
    assert _add_partitions(server.port, {internal: 0, "secret": 0}) == \
        {internal: E.topic_authorization_failed, "secret": E.operation_not_attempted}
    assert _add_partitions(server.port, {"secret": 0}) == {"secret": E.none}

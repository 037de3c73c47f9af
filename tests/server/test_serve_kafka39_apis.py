"""The Kafka 3.9 broker APIs `klog serve` added for the tools that send them (docs/compatibility.md):
DescribeTopicPartitions (the Java admin client's describeTopics, so kafka-topics --describe),
ElectLeaders (kafka-leader-election) and List/AlterPartitionReassignments (kafka-reassign-partitions),
through kafka-python's admin client, which sends each of them as Kafka's tools do."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.static.primitive import i32Timedelta

from klog.server.dispatch import load_handlers
from tests.serve_helpers import RawClient

kafka = pytest.importorskip("kafka")
Errors = pytest.importorskip("kafka.errors")

NO_ELECTION, UNKNOWN, NO_REASSIGNMENT, BAD_ASSIGNMENT = 84, 3, 85, 39


@pytest.fixture
def admin(kafka_server):
    client = kafka.KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=15_000)
    yield client
    client.close()


@pytest.fixture
def topics(store):
    store.create_topic("t2", 2)
    store.create_topic("t5", 5)
    return store



def _t2_and_t5_with_acl(data_dir, operation: str):  # noqa: ANN202 - klog.Store
    """A store with topics t2 (2 partitions) and t5 (5), and one ACL: `operation` on t2 for User:ANONYMOUS."""
    import klog
    from klog.meta.acls import AclsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    store = klog.open(data_dir)
    store.create_topic("t2", 2)
    store.create_topic("t5", 5)
    AclsMeta(store.meta).add([AclBinding(ResourceType.TOPIC, "t2", PatternType.LITERAL, "User:ANONYMOUS", "*",
                                         Operation[operation], Permission.ALLOW)])
    return store


def test_advertised_as_kafka_39_broker_advertises_them():
    handlers = load_handlers()
    for key, top in ((43, 2), (45, 0), (46, 0), (75, 0)):
        assert (handlers[key].min_version, handlers[key].max_version) == (0, top)


def test_describe_topic_partitions_pages_by_the_partition_limit(admin, topics, kafka_server):
    first = admin.describe_topic_partitions(["t5", "t2", "nope"], response_partition_limit=3)
    # name order; t2's two partitions, then t5's first one, and a cursor to the rest of t5
    assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] \
        == [("nope", UNKNOWN, []), ("t2", 0, [0, 1]), ("t5", 0, [0])]
    assert first["next_cursor"] == {"topic_name": "t5", "partition_index": 1}
    part = first["topics"][1]["partitions"][0]
    assert part["leader_id"] == kafka_server.node_id and part["replica_nodes"] == [kafka_server.node_id]
    assert part["isr_nodes"] == [kafka_server.node_id] and part["error_code"] == 0
    assert str(first["topics"][1]["topic_id"]).replace("-", "") == topics.topic("t2").topic_id.replace("-", "")
    assert first["topics"][1]["topic_authorized_operations"] == sum(1 << b for b in (3, 4, 5, 6, 7, 8, 10, 11))

    rest = admin.describe_topic_partitions(["t5", "t2", "nope"], cursor=first["next_cursor"])
    assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]]) for t in rest["topics"]] \
        == [("t5", 0, [1, 2, 3, 4])]  # from the cursor's topic on
    assert rest["next_cursor"] is None


def test_describe_topic_partitions_of_every_topic_and_a_bad_cursor(admin, topics):
    every = admin.describe_topic_partitions([])
    assert [t["name"] for t in every["topics"]] == ["t2", "t5"]
    # Kafka: the cursor's topic must be among those named
    bad = admin.describe_topic_partitions(["t2"], cursor={"topic_name": "t5", "partition_index": 0})
    assert [(t["name"], t["error_code"]) for t in bad["topics"]] == [("t2", 42)]


def test_elect_leaders_is_never_needed(admin, topics):
    response = admin.elect_leaders(0, {"t2": [0, 1], "t5": [9], "nope": [0]}, raise_errors=False)
    assert response.error_code == 0
    got = {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
           for p in r.partition_result}
    assert got == {("t2", 0): NO_ELECTION, ("t2", 1): NO_ELECTION, ("t5", 9): UNKNOWN, ("nope", 0): UNKNOWN}
    unclean = admin.elect_leaders(1, {"t5": [0, 4]}, raise_errors=False)  # every partition has a leader
    assert [p.error_code for r in unclean.replica_election_results for p in r.partition_result] == [NO_ELECTION] * 2


def test_elect_leaders_of_every_partition_lists_none(topics, kafka_server):
    """No partitions named (kafka-leader-election --all-topic-partitions): those led by their preferred
    leader, here all of them, are left out, as Kafka's controller does."""
    with RawClient(kafka_server.port) as raw:
        response = raw.send(43, 2, election_type=0, topic_partitions=None, timeout=i32Timedelta.parse(
            datetime.timedelta(seconds=5)))
    assert response.error_code == 0
    assert {r.topic: r.partition_result for r in response.replica_election_results} == {"t2": (), "t5": ()}


def test_reassignments_to_this_node_change_nothing_and_others_are_refused(admin, topics, kafka_server):
    TP = kafka.TopicPartition
    node = kafka_server.node_id
    assert admin.list_partition_reassignments() == {}
    result = admin.alter_partition_reassignments({
        TP("t2", 0): [node],  # where it is: accepted, nothing changes
        TP("t2", 1): [node + 1],  # no such broker
        TP("t5", 0): None,  # a cancellation: nothing to cancel
        TP("t5", 9): [node],  # no such partition
        TP("nope", 0): [node],
    })
    assert result == {TP("t2", 0): None, TP("t2", 1): Errors.InvalidReplicationAssignmentError,
                      TP("t5", 0): Errors.NoReassignmentInProgressError,
                      TP("t5", 9): Errors.UnknownTopicOrPartitionError,
                      TP("nope", 0): Errors.UnknownTopicOrPartitionError}
    assert topics.partition_count("t2") == 2


def test_under_acls_each_answers_as_kafka_does(data_dir):
    """With ACLs, ANONYMOUS allowed only to Describe topic t2: DescribeTopicPartitions answers t2 (its
    authorized operations: Describe alone) and t5 TOPIC_AUTHORIZATION_FAILED, last and without its id,
    and leaves t5 out when every topic is asked for; ElectLeaders and the reassignment APIs need the
    cluster operation (CLUSTER_AUTHORIZATION_FAILED)."""
    from klog.server import Server

    store = _t2_and_t5_with_acl(data_dir, "DESCRIBE")
    try:
        with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
            client = kafka.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=15_000)
            try:
                named = client.describe_topic_partitions(["t5", "t2"])["topics"]
                assert [(t["name"], t["error_code"], len(t["partitions"])) for t in named] == [
                    ("t2", 0, 2), ("t5", 29, 0)]
                assert named[0]["topic_authorized_operations"] == 1 << 8
                assert named[1]["topic_id"] in (None, uuid.UUID(int=0))  # (kafka-python reads the zero id as None)
                assert [t["name"] for t in client.describe_topic_partitions([])["topics"]] == ["t2"]
                refused = client.elect_leaders(0, {"t2": [0]}, raise_errors=False)
                assert refused.error_code == 31
                assert [p.error_code for r in refused.replica_election_results for p in r.partition_result] == [31]
                with pytest.raises(Errors.ClusterAuthorizationFailedError):
                    client.list_partition_reassignments()
                with pytest.raises(Errors.ClusterAuthorizationFailedError):
                    client.alter_partition_reassignments({kafka.TopicPartition("t2", 0): [server.node_id]})
            finally:
                client.close()
    finally:
        store.close()


def test_confluent_kafka_admin_describes_topics_and_elects_leaders(topics, kafka_server):
    """librdkafka's AdminClient (confluent-kafka) reads the answers as Kafka's: describe_topics (with
    the caller's operations), elect_leaders of named partitions (preferred and unclean: not needed,
    unknown ones refused) and of every partition (none listed)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": kafka_server.bootstrap, "log_level": 0})
    described = client.describe_topics(ck.TopicCollection(["t2", "nope"]), include_authorized_operations=True,
                                       request_timeout=15)
    t2 = described["t2"].result(15)
    assert [(p.id, p.leader.id, [r.id for r in p.replicas]) for p in t2.partitions] == [
        (0, kafka_server.node_id, [kafka_server.node_id]), (1, kafka_server.node_id, [kafka_server.node_id])]
    assert ck.admin.AclOperation.DESCRIBE in t2.authorized_operations
    with pytest.raises(ck.KafkaException) as refused:
        described["nope"].result(15)
    assert refused.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    for election in (ck.ElectionType.PREFERRED, ck.ElectionType.UNCLEAN):
        got = client.elect_leaders(election, [ck.TopicPartition("t2", 1), ck.TopicPartition("t5", 9)]).result(15)
        assert {(tp.topic, tp.partition): error.code() for tp, error in got.items()} == {
            ("t2", 1): ck.KafkaError.ELECTION_NOT_NEEDED, ("t5", 9): ck.KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert client.elect_leaders(ck.ElectionType.PREFERRED, None).result(15) == {}


def test_metadata_answers_the_authorized_operations_asked_for(data_dir):
    """Metadata v8+ with include_topic_authorized_operations (how librdkafka's describe_topics asks,
    as Kafka answers it): each topic answered gets what the caller may do to it; v8-v10's cluster
    operations are 0 without DESCRIBE on the cluster. Not asked: the schema's default."""
    from klog.server import Server

    store = _t2_and_t5_with_acl(data_dir, "READ")
    from kio.schema.metadata.v10.request import MetadataRequestTopic

    try:
        with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as raw:
            def ask(include: bool) -> tuple:
                answer = raw.send(3, 10, topics=(MetadataRequestTopic(name="t2", topic_id=None),
                                                 MetadataRequestTopic(name="t5", topic_id=None)),
                                  allow_auto_topic_creation=False, include_cluster_authorized_operations=include,
                                  include_topic_authorized_operations=include)
                return {t.name: (int(t.error_code), t.topic_authorized_operations) for t in answer.topics}, \
                    answer.cluster_authorized_operations

            none = -(2**31)
            assert ask(True) == ({"t2": (0, 1 << 3 | 1 << 8), "t5": (29, none)}, 0)  # READ implies DESCRIBE
            assert ask(False) == ({"t2": (0, none), "t5": (29, none)}, none)
    finally:
        store.close()

"""klog serve admin APIs through confluent-kafka's AdminClient, checked against the store."""

from __future__ import annotations

import pytest

import klog

admin_mod = pytest.importorskip("confluent_kafka.admin")
ck = pytest.importorskip("confluent_kafka")


@pytest.fixture
def admin(kafka_server):
    return admin_mod.AdminClient({"bootstrap.servers": kafka_server.bootstrap})


def result(futures: dict, timeout: float = 15) -> dict:
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=timeout)
        except ck.KafkaException as e:
            out[key] = e.args[0]
    return out


def test_create_describe_alter_delete_topics(admin, data_dir):
    new = [admin_mod.NewTopic("a1", num_partitions=3, replication_factor=1, config={"retention.ms": "60000"}),
           admin_mod.NewTopic("bad name!", num_partitions=1)]
    got = result(admin.create_topics(new))
    assert got["a1"] is None
    assert got["bad name!"].code() == ck.KafkaError.TOPIC_EXCEPTION
    with klog.open(data_dir) as store:
        assert store.partition_count("a1") == 3
        assert store.topic("a1").configs["retention.ms"] == "60000"
    again = result(admin.create_topics([admin_mod.NewTopic("a1", num_partitions=1)]))
    assert again["a1"].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS

    dry = result(admin.create_topics([admin_mod.NewTopic("dry", num_partitions=2)], validate_only=True))
    assert dry["dry"] is None
    with klog.open(data_dir) as store:
        assert not store.has_topic("dry")

    res = admin_mod.ConfigResource(admin_mod.ResourceType.TOPIC, "a1")
    (described,) = result(admin.describe_configs([res])).values()
    assert described["retention.ms"].value == "60000"
    assert described["cleanup.policy"].value == "delete" and described["cleanup.policy"].is_default

    change = admin_mod.ConfigResource(admin_mod.ResourceType.TOPIC, "a1", incremental_configs=[
        admin_mod.ConfigEntry("cleanup.policy", "compact",
                              incremental_operation=admin_mod.AlterConfigOpType.SET)])
    assert list(result(admin.incremental_alter_configs([change])).values()) == [None]
    bad = admin_mod.ConfigResource(admin_mod.ResourceType.TOPIC, "a1", incremental_configs=[
        admin_mod.ConfigEntry("no.such.config", "1", incremental_operation=admin_mod.AlterConfigOpType.SET)])
    (err,) = result(admin.incremental_alter_configs([bad])).values()
    assert err.code() == ck.KafkaError.INVALID_CONFIG
    with klog.open(data_dir) as store:
        assert store.topic("a1").configs == {"retention.ms": "60000", "cleanup.policy": "compact"}

    grown = result(admin.create_partitions([admin_mod.NewPartitions("a1", 5)]))
    assert grown["a1"] is None
    shrink = result(admin.create_partitions([admin_mod.NewPartitions("a1", 2)]))
    assert shrink["a1"].code() == ck.KafkaError.INVALID_PARTITIONS
    md = admin.list_topics(timeout=10)
    assert len(md.topics["a1"].partitions) == 5

    assert result(admin.delete_topics(["a1"]))["a1"] is None
    assert result(admin.delete_topics(["a1"]))["a1"].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    with klog.open(data_dir) as store:
        assert not store.has_topic("a1")


def test_manual_replica_assignments_are_refused_as_kafka_refuses_them(admin, data_dir):
    """klog places replicas itself: a CreateTopics or CreatePartitions naming replicas gets Kafka's
    INVALID_REPLICA_ASSIGNMENT (not INVALID_PARTITIONS, which says the count is wrong), and changes
    nothing; an unknown topic is still UNKNOWN_TOPIC_OR_PART."""
    got = result(admin.create_topics([admin_mod.NewTopic("placed", num_partitions=2, replica_assignment=[[0], [0]])]))
    assert got["placed"].code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "klog places replicas itself" in got["placed"].str()
    assert result(admin.create_topics([admin_mod.NewTopic("placed", num_partitions=1)]))["placed"] is None
    grow = result(admin.create_partitions([admin_mod.NewPartitions("placed", 2, replica_assignment=[[0]])]))
    assert grow["placed"].code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
    with klog.open(data_dir) as store:
        assert store.partition_count("placed") == 1
    unknown = result(admin.create_partitions([admin_mod.NewPartitions("nowhere", 2, replica_assignment=[[0]])]))
    assert unknown["nowhere"].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster_and_log_dirs(admin, kafka_server):
    kafka_server.store.create_topic("ld", partitions=2)
    with kafka_server.store.producer() as producer:
        producer.send("ld", b"x" * 100, partition=1)
    cluster = admin.describe_cluster().result(timeout=10)
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0
    from tests.serve_helpers import RawClient

    with RawClient(kafka_server.port) as client:
        resp = client.send(35, 4, topics=None)
        (result_,) = resp.results
        assert result_.log_dir == kafka_server.store.data_dir.log_dir_path(0)
        assert result_.total_bytes > 0 and result_.usable_bytes > 0
        (topic,) = [t for t in result_.topics if t.name == "ld"]
        sizes = {p.partition_index: p.partition_size for p in topic.partitions}
        assert sizes[1] > sizes[0] >= 0 and sizes[1] >= 100

        from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderPartition, OffsetForLeaderTopic

        resp = client.send(23, 4, replica_id=-1, topics=(OffsetForLeaderTopic(topic="ld", partitions=(
            OffsetForLeaderPartition(partition=1, current_leader_epoch=-1, leader_epoch=0),)),))
        (end,) = resp.topics[0].partitions
        assert (end.error_code, end.leader_epoch, end.end_offset) == (0, 0, 1)


def test_delete_records_moves_the_log_start(admin, kafka_server):
    store = kafka_server.store
    store.create_topic("dr")
    with store.producer() as producer:
        for i in range(10):
            producer.send("dr", b"v%d" % i)
    futures = admin.delete_records([ck.TopicPartition("dr", 0, 4)])
    (done,) = result(futures).values()
    assert done.low_watermark == 4
    assert store.partition("dr", 0).log_start_offset() == 4
    past = result(admin.delete_records([ck.TopicPartition("dr", 0, 99)]))
    assert list(past.values())[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE

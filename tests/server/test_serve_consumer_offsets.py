"""`__consumer_offsets` in Kafka's own format, as tools that read Kafka's topic expect it.

Goal: every group's committed offsets (Kafka clients' commits through `klog serve` and klog's own
`klog consume -G`) are in `__consumer_offsets` as Kafka 3.9 writes them, in the partition Kafka
would choose, and a deleted group leaves tombstones.
Method: a plain kafka-python consumer reads the topic through `klog serve`; the test decodes the
records with its own reader written from Kafka's schemas (group-coordinator's OffsetCommitKey/Value
and GroupMetadataKey/Value JSON at 3.9), never klog's encoder, and compares with LMDB's offsets.
"""

from __future__ import annotations

import struct
import time

import pytest

from klog.meta.groups import GroupsMeta
from tests.klog_processes import run_klog
from tests.serve_helpers import kafka_python_commit

kafka = pytest.importorskip("kafka")
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")

TOPIC = "__consumer_offsets"


# -- Kafka's schemas, read independently of klog ------------------------------------------------
def java_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h > 2**31 - 1 else h


def kafka_partition(group: str, n: int) -> int:
    h = java_hash(group)
    return (0 if h == -(2**31) else abs(h)) % n  # Utils.abs(groupId.hashCode()) % numPartitions


class Buf:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def fixed(self, fmt: str) -> int:
        (v,) = struct.unpack_from(">" + fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.fixed("h")
        if n == -1:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def bytes_(self) -> bytes:
        n = self.fixed("i")
        b = self.data[self.at:self.at + n]
        self.at += n
        return b


def decode(key: bytes, value: bytes | None) -> tuple:
    """('offset', group, topic, partition, value) or ('group', group, value); value None = tombstone."""
    k = Buf(key)
    key_version = k.fixed("h")
    if key_version in (0, 1):  # OffsetCommitKey: group, topic, partition
        group, topic, partition = k.string(), k.string(), k.fixed("i")
        assert k.at == len(key)
        if value is None:
            return ("offset", group, topic, partition, None)
        v = Buf(value)
        version = v.fixed("h")
        assert version in (1, 3), f"Kafka 3.9 writes value version 3 (1 with an expire timestamp), not {version}"
        offset = v.fixed("q")
        epoch = v.fixed("i") if version >= 3 else -1
        metadata, commit = v.string(), v.fixed("q")
        if version == 1:
            v.fixed("q")
        assert v.at == len(value)
        return ("offset", group, topic, partition, (offset, metadata, commit, epoch))
    assert key_version == 2, key_version  # GroupMetadataKey
    group = k.string()
    if value is None:
        return ("group", group, None)
    v = Buf(value)
    version = v.fixed("h")
    assert version == 3, version
    protocol_type, generation, protocol, leader = v.string(), v.fixed("i"), v.string(), v.string()
    state_ms = v.fixed("q")
    members = []
    for _ in range(v.fixed("i")):
        member_id, instance_id, client_id, host = v.string(), v.string(), v.string(), v.string()
        rebalance_timeout, session_timeout = v.fixed("i"), v.fixed("i")
        subscription, assignment = v.bytes_(), v.bytes_()
        members.append((member_id, instance_id, client_id, host, rebalance_timeout, session_timeout,
                        subscription, assignment))
    assert v.at == len(value)
    return ("group", group, (protocol_type, generation, protocol, leader, state_ms, members))


def read_topic(bootstrap: str) -> list[tuple[int, tuple]]:
    """Every record of __consumer_offsets through a plain kafka-python consumer: (partition, decoded)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
    try:
        deadline = time.monotonic() + 20
        parts: set[int] = set()
        while not parts and time.monotonic() < deadline:  # (kafka-python says set() for an unknown topic, not None)
            parts = consumer.partitions_for_topic(TOPIC)
            if not parts:
                time.sleep(0.1)
        assert parts, "__consumer_offsets is not in the metadata"
        tps = [TopicPartition(TOPIC, p) for p in sorted(parts)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        out = []
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                out += [(tp.partition, decode(m.key, m.value)) for m in msgs]
        assert all(consumer.position(tp) >= ends[tp] for tp in tps), "did not read to the end"
        return out
    finally:
        consumer.close()


def latest_offsets(records: list[tuple[int, tuple]], partitions: int) -> dict:
    state = {}
    for partition, rec in records:
        assert partition == kafka_partition(rec[1], partitions), rec
        key = rec[:-1]
        if rec[-1] is None:
            state.pop(key, None)
        else:
            state[key] = rec[-1]
    return state


def lmdb_offsets(store, groups) -> dict:
    meta = GroupsMeta(store.meta)
    return {("offset", g, t, p): (c.offset, c.metadata, c.commit_ms)
            for g in groups for (t, p), c in meta.committed(g).items()}


@pytest.mark.slow
def test_consumer_offsets_hold_every_groups_commits_in_kafkas_format(kafka_server, data_dir):
    from kafka import KafkaProducer

    import klog

    store = klog.open(data_dir)
    store.create_topic("orders", partitions=3)
    producer = KafkaProducer(bootstrap_servers=kafka_server.bootstrap)
    for i in range(12):
        producer.send("orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
    producer.flush()
    producer.close()
    # a Kafka client's commits, one with metadata
    kafka_python_commit(kafka_server.bootstrap, "kafka-group",
                        {("orders", 0): (3, "from kafka-python"), ("orders", 2): (4, "")})
    # klog's own consumer group, committing through LMDB without the server
    done = run_klog(data_dir, "consume", "orders", "-G", "cli-group", "-n", "5", "-e")
    assert done.returncode == 0, done.stderr
    records = read_topic(kafka_server.bootstrap)
    partitions = 50  # Kafka's offsets.topic.num.partitions
    assert len(store.topic(TOPIC).partitions) == partitions
    state = latest_offsets(records, partitions)
    offsets = {k: v[:3] for k, v in state.items() if k[0] == "offset"}
    expected = lmdb_offsets(store, ["kafka-group", "cli-group"])
    assert offsets == expected
    assert offsets[("offset", "kafka-group", "orders", 0)][:2] == (3, "from kafka-python")
    assert sum(v[0] for k, v in offsets.items() if k[1] == "cli-group") == 5
    groups = {k[1]: v for k, v in state.items() if k[0] == "group"}
    assert groups["cli-group"][0] == "consumer" and groups["cli-group"][3] is None  # Empty: no leader, members
    assert groups["cli-group"][5] == []

    # a deleted group leaves tombstones: a reader applying the topic no longer has it
    deleted = run_klog(data_dir, "groups", "delete", "cli-group")
    assert deleted.returncode == 0, deleted.stderr
    state = latest_offsets(read_topic(kafka_server.bootstrap), partitions)
    assert {k for k in state if k[1] == "cli-group"} == set()
    assert {k: v[:3] for k, v in state.items() if k[0] == "offset"} == lmdb_offsets(store, ["kafka-group"])

    # clients cannot write into it (Kafka: "Cannot append to internal topic")
    from kio.schema.errors import ErrorCode

    from klog.store.codec import encode_batch
    from tests.serve_helpers import RawClient, produce

    with RawClient(kafka_server.port) as raw:
        forged = encode_batch([(b"\x00\x01forged", b"x", (), 0)], 0)
        assert produce(raw, TOPIC, 0, forged)[0] == ErrorCode.invalid_topic_exception
    store.close()


def test_java_hash_vectors():
    """The test's own String.hashCode against values Java prints."""
    assert java_hash("") == 0
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(2**31)  # Utils.abs maps it to 0
    assert kafka_partition("polygenelubricants", 50) == 0


def subscription_topics(data: bytes) -> list[str]:
    """ConsumerProtocolSubscription (any version 0-3): version, then the topics come first."""
    b = Buf(data)
    assert 0 <= b.fixed("h") <= 3
    return [b.string() for _ in range(b.fixed("i"))]


def assignment_partitions(data: bytes) -> set[tuple[str, int]]:
    """ConsumerProtocolAssignment (any version 0-3): version, then [topic, [partition]]."""
    b = Buf(data)
    assert 0 <= b.fixed("h") <= 3
    out = set()
    for _ in range(b.fixed("i")):
        topic = b.string()
        out |= {(topic, b.fixed("i")) for _ in range(b.fixed("i"))}
    return out


@pytest.mark.slow
def test_group_records_carry_each_members_subscription_and_assignment(data_dir):
    """A confluent-kafka group of two: GroupMetadataValue v3 names both members with their client ids,
    the subscription each sent (its topic) and the assignment its leader gave it, as Kafka writes them."""
    import confluent_kafka as ck

    import klog
    from klog.server import Server

    with klog.open(data_dir) as store:
        store.create_topic("orders", partitions=4)
        store.data_dir.defaults["group.initial.rebalance.delay.ms"] = "0"
        store.data_dir.save()
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        consumers = [ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "pair", "client.id": name,
                                  "enable.auto.commit": False}) for name in ("alpha", "beta")]
        try:
            for c in consumers:
                c.subscribe(["orders"])
            got: dict[str, set] = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for c in consumers:
                    c.poll(0.1)
                got = {c.memberid(): {(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers}
                members = []
                if all(got.values()) and len(got) == 2:
                    state = latest_offsets(read_topic(bootstrap), 50)
                    group = state.get(("group", "pair"))
                    members = [] if group is None else group[5]
                    if {m[0] for m in members} == set(got) and all(m[7] for m in members):
                        break
            assert group is not None and group[0] == "consumer" and group[2] in ("range", "roundrobin")
            live = server.coordinator.machine.groups["pair"]  # what the clients sent, as the server got it
            assert group[3] == live.leader  # the member the coordinator made leader
            by_id = {m[0]: m for m in members}
            assert set(by_id) == set(got)
            assert sorted(by_id[c.memberid()][2] for c in consumers) == ["alpha", "beta"]
            for member_id, assigned in got.items():
                member = by_id[member_id]
                assert subscription_topics(member[6]) == ["orders"]
                assert assignment_partitions(member[7]) == assigned
                sent = live.members[member_id]  # byte for byte, user data and all, as Kafka stores them
                assert (member[6], member[7]) == (sent.metadata(group[2]), sent.assignment)
                assert member[4] == 300_000  # rebalance timeout: librdkafka's max.poll.interval.ms
            assert set().union(*got.values()) == {("orders", p) for p in range(4)}
        finally:
            for c in consumers:
                c.close()

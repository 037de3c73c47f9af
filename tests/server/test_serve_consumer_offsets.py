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
        parts = None
        while parts is None and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(TOPIC)
            if parts is None:
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

"""Every client reads what every other client wrote through klog serve: confluent-kafka, kafka-python,
aiokafka and kcat produce one topic each (keys, headers, a null value), and each of them, plus klog's
own consumer, reads every topic back exactly once and in order per partition. kafka-python's admin
client manages topics too."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections import Counter

import pytest

import klog

KCAT = shutil.which("kcat")
ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

N = 60
PARTITIONS = 2


def expected(name: str) -> list[tuple[bytes, bytes | None]]:
    """(key, value) pairs a producer writes; every 10th value is null (kcat writes no nulls)."""
    return [(b"k%d" % (i % 6), None if i % 10 == 3 and name != "kcat" else b"%s-%d" % (name.encode(), i))
            for i in range(N)]


def produce_confluent(bootstrap: str, topic: str) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "partitioner": "murmur2_random"})
    for key, value in expected("confluent"):
        p.produce(topic, value=value, key=key, headers=[("src", b"confluent")])
    assert p.flush(20) == 0


def produce_kafka_python(bootstrap: str, topic: str) -> None:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for key, value in expected("kafka-python"):
        p.send(topic, value=value, key=key, headers=[("src", b"kafka-python")])
    p.flush(timeout=20)
    p.close(timeout=5)


def produce_aiokafka(bootstrap: str, topic: str) -> None:
    async def main() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await p.start()
        try:
            for key, value in expected("aiokafka"):
                await p.send(topic, value=value, key=key, headers=[("src", b"aiokafka")])
            await p.flush()
        finally:
            await p.stop()

    asyncio.run(main())


def produce_kcat(bootstrap: str, topic: str) -> None:
    lines = "".join(f"{k.decode()}:{v.decode()}\n" for k, v in expected("kcat"))
    out = subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-K", ":"], input=lines, text=True,
                         capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr


def read_confluent(bootstrap: str, topic: str) -> dict[int, list]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "m", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list] = {}
    deadline = time.monotonic() + 20
    try:
        while sum(map(len, out.values())) < N and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert m.error() is None
                out.setdefault(m.partition(), []).append((m.key(), m.value()))
    finally:
        c.close()
    return out


def read_kafka_python(bootstrap: str, topic: str) -> dict[int, list]:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
    out: dict[int, list] = {}
    deadline = time.monotonic() + 20
    try:
        while sum(map(len, out.values())) < N and time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=500).items():
                out.setdefault(tp.partition, []).extend((r.key, r.value) for r in records)
    finally:
        c.close()
    return out


def read_aiokafka(bootstrap: str, topic: str) -> dict[int, list]:
    async def main() -> dict[int, list]:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      auto_offset_reset="earliest")
        await c.start()
        out: dict[int, list] = {}
        try:
            c.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            async with asyncio.timeout(20):
                while sum(map(len, out.values())) < N:
                    for tp, records in (await c.getmany(timeout_ms=500)).items():
                        out.setdefault(tp.partition, []).extend((r.key, r.value) for r in records)
        finally:
            await c.stop()
        return out

    return asyncio.run(main())


def read_kcat(bootstrap: str, topic: str) -> dict[int, list]:
    out: dict[int, list] = {}
    r = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%p\t%k\t%S\t%s\n"],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.decode().splitlines():
        p, k, size, v = line.split("\t", 3)
        out.setdefault(int(p), []).append((k.encode(), None if size == "-1" else v.encode()))
    return out


def read_klog(data_dir: str, topic: str) -> dict[int, list]:
    out: dict[int, list] = {}
    with klog.open(data_dir) as store:
        for r in store.consumer(topic):
            out.setdefault(r.partition, []).append((r.key, r.value))
    return out


@pytest.mark.slow  # ~7 s: five clients' start-ups, four times
def test_every_client_reads_every_clients_records(kafka_server, data_dir):
    bootstrap = kafka_server.bootstrap
    producers = {"confluent": produce_confluent, "kafka-python": produce_kafka_python, "aiokafka": produce_aiokafka}
    if KCAT:
        producers["kcat"] = produce_kcat
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([kafka.admin.NewTopic(f"m-{name}", PARTITIONS, 1) for name in producers])
        assert {f"m-{name}" for name in producers} <= set(admin.list_topics())
    finally:
        admin.close()
    for name, produce in producers.items():
        produce(bootstrap, f"m-{name}")
    readers = {"confluent": read_confluent, "kafka-python": read_kafka_python, "aiokafka": read_aiokafka,
               "klog": lambda _b, t: read_klog(data_dir, t)}
    if KCAT:
        readers["kcat"] = read_kcat
    for name in producers:
        sent = expected(name)
        for reader_name, read in readers.items():
            got = read(bootstrap, f"m-{name}")
            # exactly once: the same multiset of records ...
            assert Counter(r for rs in got.values() for r in rs) == Counter(sent), (name, reader_name)
            # ... and in order per partition (each key's records in one partition, in send order)
            for records in got.values():
                for key in {k for k, _ in records}:
                    assert [v for k, v in records if k == key] == [v for k, v in sent if k == key], \
                        (name, reader_name, key)


def test_kafka_python_admin_describe_and_delete(kafka_server, data_dir):
    admin = kafka.KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        admin.create_topics([kafka.admin.NewTopic("kpa", 3, 1, topic_configs={"cleanup.policy": "compact"})])
        (desc,) = admin.describe_topics(["kpa"])
        assert len(desc["partitions"]) == 3
        configs = admin.describe_configs([kafka.admin.ConfigResource(kafka.admin.ConfigResourceType.TOPIC, "kpa")])
        assert "compact" in repr(configs)
        admin.delete_topics(["kpa"])
    finally:
        admin.close()
    with klog.open(data_dir) as store:
        assert not store.has_topic("kpa")


def test_aiokafka_admin(kafka_server, data_dir):
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def main() -> tuple:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aka", 2, 1, topic_configs={"retention.ms": "120000"})])
            await admin.create_partitions({"aka": NewPartitions(4)})
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "aka",
                                                      {"cleanup.policy": "compact"})])
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aka")])
            cluster = await admin.describe_cluster()
            names = await admin.list_topics()
            await admin.delete_topics(["aka"])
            return described, cluster, names
        finally:
            await admin.close()

    described, cluster, names = asyncio.run(main())
    assert "aka" in names
    assert "compact" in repr(described)
    assert [b["node_id"] for b in cluster["brokers"]] == [0]
    with klog.open(data_dir) as store:
        assert not store.has_topic("aka")

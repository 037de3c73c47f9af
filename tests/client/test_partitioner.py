"""Keyed records land where Kafka's default partitioner puts them (spec §4 vectors)."""

import pytest

from klog.client.partitioner import murmur2, partition_for_key

VECTORS = [
    (b"21", -973932308, 0, 0, 0, 0),
    (b"foobar", -790332482, 0, 0, 0, 6),
    (b"abc", 479470107, 1, 0, 3, 3),
    (b"a-little-bit-longer-string", -1486304829, 1, 2, 5, 11),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 1, 2, 5, 5),
    (b"", 275646681, 1, 0, 3, 9),
    (b"user-42", 1459644460, 0, 1, 4, 4),
    (b"100:48069", 1009543857, 1, 0, 3, 9),
]


@pytest.mark.parametrize("key,hash_,p2,p3,p6,p12", VECTORS)
def test_murmur2_and_partition_match_kafka(key, hash_, p2, p3, p6, p12):
    assert murmur2(key) == hash_
    assert [partition_for_key(key, n) for n in (2, 3, 6, 12)] == [p2, p3, p6, p12]


def test_matches_kafka_python_on_random_keys():
    import random

    from kafka.partitioner.default import murmur2 as kp_murmur2

    rng = random.Random(7)
    for i in range(500):  # one key in five long (past the kept unpackers' 256 bytes)
        key = rng.randbytes(rng.randrange(40, 300) if i % 5 == 0 else rng.randrange(0, 40))
        assert murmur2(key) & 0x7FFFFFFF == kp_murmur2(key) & 0x7FFFFFFF


def test_keyless_records_stick_then_spread_like_kip_794(cli, store):
    """Kafka's built-in partitioner keeps keyless records on one partition for batch.size (16 KiB)
    bytes, then switches: a big input spreads over every partition in long runs."""
    store.create_topic("spread", partitions=3)
    lines = b"".join(b"%099d\n" % i for i in range(10_000))  # ~1 MiB
    assert cli("produce", "spread", input=lines).exit_code == 0
    store.forget_topic_metadata("spread")
    per_partition = {p: [int(r.value) for r in store.consumer("spread", partitions=[p])] for p in range(3)}
    assert sorted(v for vs in per_partition.values() for v in vs) == list(range(10_000))
    for p, vs in per_partition.items():
        assert len(vs) > 1_000, f"partition {p} got {len(vs)} of 10,000 keyless records"
        runs = 1 + sum(1 for a, b in zip(vs, vs[1:], strict=False) if b != a + 1)
        assert len(vs) / runs > 100, f"partition {p}: runs of {len(vs) / runs:.0f} records, not sticky"


def test_python_send_keyless_spreads_too(store):
    store.create_topic("spread2", partitions=4)
    with store.producer() as producer:
        sent = [producer.send("spread2", b"v" * 100) for _ in range(5_000)]
    assert {s.get().partition for s in sent} == {0, 1, 2, 3}


def test_partitions_of_many_new_keys_matches_partition_for_key_compiled_or_not(monkeypatch):
    """partitions_of hashes a call's new keys once each, through confluent-kafka's compiled murmur2
    when they are many: the same partitions as the Python one (spec vectors and random keys),
    and sys.modules left as it was (a later `import confluent_kafka` runs its __init__)."""
    import random
    import sys

    from klog.client import partitioner

    rng = random.Random(11)
    keys = [rng.randbytes(rng.randrange(0, 60)) for _ in range(3000)] + [v[0] for v in VECTORS]
    keys += keys[:500]  # (repeated keys: hashed once)
    for compiled in (False, True):
        monkeypatch.setattr(partitioner, "_key_partitions", {})
        monkeypatch.setattr(partitioner, "_compiled", None if compiled else False)
        before = {name for name in sys.modules if name.startswith("confluent_kafka")}
        for count in (1, 7, 1000):
            assert partitioner.partitions_of(keys, count) == [partition_for_key(k, count) for k in keys]
        assert {name for name in sys.modules if name.startswith("confluent_kafka")} == before
        assert bool(partitioner._compiled) == compiled


def test_partitions_of_refuses_a_key_murmur2_cannot_hash_and_remembers_nothing_of_its_call(monkeypatch):
    from klog.client import partitioner

    monkeypatch.setattr(partitioner, "_key_partitions", {})
    for bad in (None, "text", bytearray(b"b")):
        with pytest.raises(TypeError):
            partitioner.partitions_of([b"a", bad, b"c"], 5)
        assert partitioner.key_partitions(5) == {}
    assert partitioner.partitions_of([memoryview(b"abc"), b"abc"], 6) == [3, 3]  # (bytes-like: hashed in Python)

"""`klog dirs import` brings a Kafka broker's committed offsets along.

Goal: the offsets a broker's `__consumer_offsets` holds last (Kafka's record format, tombstones,
transactional commits committed or aborted) become klog's groups' committed offsets, and
`klog groups describe` shows them.
Method: a log directory whose `__consumer_offsets` segments are written by this test's own encoder
of Kafka's schemas (group-coordinator's OffsetCommitKey/Value and GroupMetadataKey/Value JSON at
3.9) inside batches built by kafka-python's record builder, never by klog.
"""

from __future__ import annotations

import json
import struct
import time

import pytest

from klog.meta.groups import GroupsMeta
from tests.kafka_files import control_batch, v2_batch, write_segment

NOW = int(time.time() * 1000) - 60_000
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def offset_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return struct.pack(">h", version) + s16(group) + s16(topic) + struct.pack(">i", partition)


def offset_value(offset: int, metadata: str, commit_ms: int, version: int = 3) -> bytes:
    if version == 3:  # offset, leaderEpoch, metadata, commitTimestamp
        return struct.pack(">hqi", 3, offset, 7) + s16(metadata) + struct.pack(">q", commit_ms)
    if version == 1:  # offset, metadata, commitTimestamp, expireTimestamp
        return struct.pack(">hq", 1, offset) + s16(metadata) + struct.pack(">qq", commit_ms, commit_ms + 86_400_000)
    return struct.pack(">hq", 0, offset) + s16(metadata) + struct.pack(">q", commit_ms)


def group_key(group: str) -> bytes:
    return struct.pack(">h", 2) + s16(group)


def group_value(generation: int) -> bytes:  # v3, no members (an Empty group)
    return struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", generation) + s16(None) + s16(None) + \
        struct.pack(">qi", NOW, 0)


@pytest.mark.slow
def test_import_brings_the_brokers_committed_offsets(cli, store, tmp_path):
    kafka_dir = tmp_path / "kafka-logs"
    write_segment(str(kafka_dir / "orders-0"), 0, [v2_batch(0, [(None, b"o%d" % i, NOW) for i in range(10)])])
    write_segment(str(kafka_dir / "orders-1"), 0, [v2_batch(0, [(None, b"p%d" % i, NOW) for i in range(6)])])
    # partition 12 of the broker's 50: the groups' hashes do not matter to a reader, every one is read
    write_segment(str(kafka_dir / "__consumer_offsets-12"), 0, [
        v2_batch(0, [(group_key("shop"), group_value(4), NOW),
                     (offset_key("shop", "orders", 0), offset_value(3, "old", NOW), NOW),
                     (offset_key("shop", "orders", 0), offset_value(8, "meta-8", NOW + 1), NOW),
                     (offset_key("shop", "orders", 1, version=0), offset_value(2, "", NOW, version=1), NOW),
                     (offset_key("gone", "orders", 0), offset_value(5, "", NOW), NOW),
                     (offset_key("gone", "orders", 0), None, NOW),  # a tombstone: offset deleted
                     (offset_key("shop", "elsewhere", 0), offset_value(1, "", NOW), NOW)]),
        # a transactional commit (TxnOffsetCommit) aborted, then one committed
        v2_batch(7, [(offset_key("txn", "orders", 1), offset_value(1, "", NOW), NOW)],
                 producer_id=42, producer_epoch=0, transactional=True),
        control_batch(8, 42, 0, commit=False, ts=NOW),
        v2_batch(9, [(offset_key("txn", "orders", 1), offset_value(5, "", NOW, version=0), NOW)],
                 producer_id=42, producer_epoch=0, transactional=True),
        control_batch(10, 42, 0, commit=True, ts=NOW),
        v2_batch(11, [(offset_key("txn", "orders", 0), offset_value(-1, "reset", NOW), NOW)]),
    ])
    write_segment(str(kafka_dir / "__consumer_offsets-40"), 0, [
        v2_batch(0, [(offset_key("solo", "orders", 1), offset_value(6, "", NOW + 5), NOW)]),
    ])
    r = cli("dirs", "import", str(kafka_dir))
    assert r.exit_code == 0, r.stderr
    assert "Imported 5 committed offsets of 3 groups from __consumer_offsets (1 of topics not imported left out)" \
        in r.out
    assert not store.has_topic("__consumer_offsets")  # klog serve writes its own, from the groups
    meta = GroupsMeta(store.meta)
    got = {g: {tp: (c.offset, c.metadata) for tp, c in meta.committed(g).items()} for g in meta.group_ids()}
    assert got == {"shop": {("orders", 0): (8, "meta-8"), ("orders", 1): (2, "")},
                   "txn": {("orders", 0): (-1, "reset"), ("orders", 1): (5, "")},
                   "solo": {("orders", 1): (6, "")}}
    assert meta.committed("shop")[("orders", 0)].commit_ms == NOW + 1
    r = cli("groups", "describe", "shop", "--json")
    assert r.exit_code == 0, r.stderr
    lag = {(p["topic"], p["partition"]): p["lag"] for p in json.loads(r.out)["partitions"]}
    assert lag == {("orders", 0): 2, ("orders", 1): 4}


def test_import_leaves_out_records_not_in_kafkas_format(cli, store, tmp_path):
    kafka_dir = tmp_path / "kafka-logs"
    write_segment(str(kafka_dir / "t-0"), 0, [v2_batch(0, [(None, b"v", NOW)])])
    write_segment(str(kafka_dir / "__consumer_offsets-3"), 0, [
        v2_batch(0, [(b"g", b"offsets", NOW), (offset_key("g", "t", 0), offset_value(1, "", NOW), NOW)])])
    r = cli("dirs", "import", str(kafka_dir))
    assert r.exit_code == 0, r.stderr
    assert "Imported 1 committed offsets of 1 groups" in r.out and "1 records of __consumer_offsets" in r.out
    assert GroupsMeta(store.meta).committed("g")[("t", 0)].offset == 1

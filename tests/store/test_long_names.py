"""Topic names up to Kafka's limit (249 characters) work end to end: every file klog names after a
partition fits in a file name (255 bytes), and short names keep their plain `<topic>-<p>` form."""

from __future__ import annotations

import json
import os

import klog
from klog.store.names import (
    FILE_NAME_BYTES_MAX,
    PARTITION_FILE_SUFFIXES,
    TOPIC_NAME_LENGTH_MAX,
    partition_file_stem,
)
from klog.store.state import PartitionSnapshot, PartitionState

LONG = ("orders." + "x" * 300)[:TOPIC_NAME_LENGTH_MAX]
PARTITIONS = 12


def all_names(root: str) -> list[str]:
    return [name for _, dirs, files in os.walk(root) for name in dirs + files]


def test_a_249_character_topic_through_the_cli(cli, data_dir):
    assert len(LONG) == 249
    assert cli("topics", "create", LONG, "-p", str(PARTITIONS), "-c", "cleanup.policy=compact",
               "-c", "segment.bytes=300").exit_code == 0
    for start in range(0, 300, 30):  # ten runs: ten batches per partition, rolled into segments
        lines = b"".join(b"user-%d:v%d\n" % (i % 30, i) for i in range(start, start + 30))
        r = cli("produce", LONG, "-K", ":", input=lines)
        assert r.exit_code == 0, r.stderr
    with klog.open(data_dir) as s:
        used = {rec.partition for rec in s.consumer(LONG)}
    assert len(used) > 6  # most of the 12 partitions hold records, so most state files exist

    out = cli("consume", LONG)
    assert out.exit_code == 0 and sorted(out.out.split()) == sorted(f"v{i}" for i in range(300))
    listed = [json.loads(x) for x in cli("topics", "list", "--json").stdout.splitlines()]
    assert listed[0]["topic"] == LONG and listed[0]["partitions"] == PARTITIONS and listed[0]["offsets"] == 300
    desc = json.loads(cli("topics", "describe", LONG, "--json").stdout)
    assert sum(p["high_watermark"] for p in desc["partitions"]) == 300

    compacted = [json.loads(x) for x in cli("topics", "compact", LONG, "--json").stdout.splitlines()]
    assert len(compacted) == PARTITIONS and sum(c["records_removed"] for c in compacted) > 0
    assert cli("topics", "clean", LONG).exit_code == 0
    left = cli("consume", LONG, "--format", r"%k %s\n").out.splitlines()
    assert len(left) < 300 and {f"user-{i % 30} v{i}" for i in range(270, 300)} <= set(left)  # latest per key
    names = all_names(data_dir)
    assert max(len(n.encode()) for n in names) <= FILE_NAME_BYTES_MAX
    # Kafka's partition folders are unchanged; the data dir's own files use the short stem
    assert f"{LONG}-11" in names
    stems = {partition_file_stem(LONG, p) for p in range(PARTITIONS)}
    assert any(n.endswith(".cleaner") and n.removesuffix(".cleaner") in stems for n in names)
    assert any(n.endswith(".state") and n.removesuffix(".state") in stems for n in names)

    r = cli("topics", "delete", LONG, "--yes")
    assert r.exit_code == 0 and r.stderr.startswith("Deleted topic"), r.stderr
    assert not [n for n in all_names(data_dir) if n.startswith(LONG[:50])]  # folders, state, locks: all gone
    assert cli("topics", "list", "--json").stdout == b""


def test_file_stems_are_plain_when_they_fit_and_short_deterministic_and_distinct_otherwise():
    assert partition_file_stem("orders", 3) == "orders-3"
    longest_plain = "t" * (FILE_NAME_BYTES_MAX - max(map(len, PARTITION_FILE_SUFFIXES)) - 2)
    assert partition_file_stem(longest_plain, 7) == f"{longest_plain}-7"
    assert partition_file_stem(longest_plain, 10) != f"{longest_plain}-10"
    short = {partition_file_stem(LONG, p) for p in range(1000)}
    assert len(short) == 1000  # distinct per partition
    other = partition_file_stem(LONG[:-1] + "y", 0)
    assert other not in short  # distinct per topic, even with the same 200-character prefix
    assert partition_file_stem(LONG, 0) == partition_file_stem(LONG, 0)
    assert all(len((s + suffix).encode()) <= FILE_NAME_BYTES_MAX for s in short for suffix in PARTITION_FILE_SUFFIXES)


def test_a_state_file_under_its_full_name_is_adopted(tmp_path):
    """A store written before names were shortened: the state file fit, only its siblings did not."""
    topic = "s" * 243
    full = tmp_path / f"{topic}-0.state"  # 251 bytes: it fit, but `.cleaner.tmp` beside it would not
    scratch = PartitionState(str(tmp_path / "scratch.state"))  # the bytes the old version wrote
    scratch.write(PartitionSnapshot(42, 7, 3))
    scratch.close()
    os.rename(tmp_path / "scratch.state", full)
    state = PartitionState(str(full))
    assert state.read() == PartitionSnapshot(42, 7, 3)
    assert not full.exists() and os.path.basename(state.path) == partition_file_stem(topic, 0) + ".state"
    state.close()


def test_a_249_character_topic_moves_between_log_directories_and_replays_under_a_long_group(cli, tmp_path):
    data = str(tmp_path / "data")
    disks = [str(tmp_path / f"disk{i}") for i in range(2)]
    with klog.Store(data, log_dirs=disks) as s:
        s.create_topic(LONG, partitions=1, replication_factor=1)
        with s.producer() as p:
            for i in range(20):
                p.send(LONG, b"v%d" % i, partition=0)
        source = s.topic(LONG).partitions[0].replicas[0]
    r = cli("topics", "reassign", LONG, "--from", str(source), "--to", str(1 - source), "--data-dir", data)
    assert r.exit_code == 0, r.stderr
    with klog.open(data) as s:
        assert s.topic(LONG).partitions[0].replicas == [1 - source]
        assert [rec.value for rec in s.consumer(LONG)] == [b"v%d" % i for i in range(20)]
    assert max(len(n.encode()) for n in all_names(str(tmp_path))) <= FILE_NAME_BYTES_MAX
    group = "g/" * 127  # 254 characters that quote to 508 bytes: the progress file name must still fit
    r = cli("replay", LONG, "--to", "copy", "--group", group, "--data-dir", data)
    assert r.exit_code == 0, r.stderr
    with klog.open(data) as s:
        assert [rec.value for rec in s.consumer("copy")] == [b"v%d" % i for i in range(20)]
    assert max(len(n.encode()) for n in all_names(str(tmp_path))) <= FILE_NAME_BYTES_MAX


def test_a_replay_group_name_that_fits_keeps_its_progress_file_name(tmp_path):
    import urllib.parse

    from klog.client.replay import ReplayProgress

    group = "r" * 246  # the longest whose '<group>.json.tmp' fits in 255 bytes: named as it always was
    progress = ReplayProgress.open(str(tmp_path), group, "a", "b")
    assert os.path.basename(progress.path) == urllib.parse.quote(group, safe="") + ".json"
    longer = ReplayProgress.open(str(tmp_path), "r" * 247, "a", "b")
    assert len(os.path.basename(longer.path).encode()) + len(".tmp") <= FILE_NAME_BYTES_MAX

"""Lost `.index` / `.timeindex` files are rebuilt byte for byte as klog wrote them.

Method: a log of unevenly sized batches whose timestamps go up and down (so the time index skips
entries and a segment's largest timestamp lies inside it) is written by the append path over
several segments and closed; its index files are kept aside. Each case deletes some of them
(a backup restored without indexes, a Kafka folder copied without them), reopens the log as the
next writer (its replica state kept, lost, or from another boot), and compares every index file
with the kept one: sealed segments end with their final time entry (seal()), the active one has
none (the append path writes none until it rolls). `klog verify` must pass, and a writer going
on must write what it would have written to the untouched log. The same for a compacted log,
whose cleaned segments have gaps and emptied files, and for `klog verify --repair`.
"""

from __future__ import annotations

import glob
import os
import random
import shutil

import pytest

from klog.broker import lifecycle
from klog.broker.verify import verify_store
from klog.store import codec
from klog.store.config import LogConfig
from klog.store.format import partition_dir_name
from klog.store.inspect import check_segment
from klog.store.log import PartitionLog
from tests.broker.test_compaction import T0, clock_at

CONFIG = LogConfig(segment_bytes=3_000, index_interval_bytes=250)
REBOOT_ID = b"\x98" * 16
INDEX_GLOBS = ("*.index", "*.timeindex")
LATE = 1_700_000_900_000


def _batch(base: int, seed: int) -> bytes:
    rng = random.Random(seed)
    count = 1 + seed * 5 % 9
    # timestamps wander: the largest of a segment is often not in its last batch
    records = [(b"k%d" % rng.randrange(50), b"v" * rng.randrange(0, 90), [],
                1_700_000_000_000 + rng.randrange(-400, 400) + seed * 20) for _ in range(count)]
    return codec.encode_batch(records, base)


def _append(log: PartitionLog, n: int, seed0: int) -> None:
    for i in range(n):
        batch = _batch(log.log_end_offset, seed0 + i)
        log.append(batch, codec.read_header(batch))
        log.flush()


def _written(folder: str) -> PartitionLog:
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    _append(log, 70, 0)
    # the active segment's largest timestamp in a batch no index entry names: a rebuild must not
    # add the final entry a sealed segment has
    late = codec.encode_batch([(None, b"late", [], LATE)], log.log_end_offset)
    log.append(late, codec.read_header(late))
    log.close()
    assert len(log.bases) >= 4, "the log must span several segments"
    return log


def _indexes(folder: str) -> dict[str, bytes]:
    out = {}
    for pattern in INDEX_GLOBS:
        for path in glob.glob(os.path.join(folder, pattern)):
            with open(path, "rb") as f:
                out[os.path.basename(path)] = f.read()
    return out


def _verified(folder: str) -> None:
    """klog verify's check of every segment: no problem with the log or an index."""
    log = PartitionLog(folder, CONFIG)
    log.refresh_segments()
    for base in log.bases:
        check = check_segment(log.segments[base], gaps_ok=True, sealed=base != log.bases[-1])
        assert check.log_problem is None and check.index_problems == [], (base, check)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("golden") / "t-0")
    _written(folder)
    kept = _indexes(folder)
    # the sealed segments' time indexes end with an entry the rebuild must also write
    assert sum(1 for name in kept if name.endswith(".timeindex")) >= 4
    assert LATE.to_bytes(8, "big") not in sorted(kept.items())[-1][1]  # the active's time index
    return folder, kept


LOSSES = {
    "every index": lambda names, active: names,
    "the time indexes": lambda names, active: [n for n in names if n.endswith(".timeindex")],
    "the offset indexes": lambda names, active: [n for n in names if n.endswith(".index")],
    "the sealed segments' indexes": lambda names, active: [n for n in names if not n.startswith(active)],
    "the active segment's indexes": lambda names, active: [n for n in names if n.startswith(active)],
}


@pytest.mark.parametrize("state", ["kept", "lost", "another boot"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_the_next_writer_rebuilds_lost_indexes_byte_for_byte(golden, tmp_path, monkeypatch, loss, state):
    golden_folder, kept = golden
    folder = str(tmp_path / "t-0")
    twin = str(tmp_path / "twin" / "t-0")  # the untouched log, for what a writer goes on to write
    shutil.copytree(golden_folder, folder)
    shutil.copytree(golden_folder, twin)
    active = sorted(n for n in os.listdir(folder) if n.endswith(".log"))[-1][:-4]
    lost = LOSSES[loss](sorted(kept), active)
    assert lost
    for name in lost:
        os.unlink(os.path.join(folder, name))
    if state == "lost":
        os.unlink(os.path.join(folder, "klog-replica.state"))  # every segment is recovered
    elif state == "another boot":  # the segments from the recovery point on are recovered
        monkeypatch.setattr("klog.store.log.current_boot_id", lambda: REBOOT_ID)
        monkeypatch.setattr("klog.store.loader.current_boot_id", lambda: REBOOT_ID)
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    log.close()
    assert _indexes(folder) == kept
    _verified(folder)

    # a writer goes on (past a roll) as it would have on the untouched log
    for path in (folder, twin):
        log = PartitionLog(path, CONFIG)
        log.open_for_write()
        _append(log, 15, 500)
        log.close()
    assert _indexes(folder) == _indexes(twin)
    _verified(folder)


def test_klog_verify_passes_once_a_writer_opened_the_partition(cli, data_dir):
    """The user's report: indexes deleted, the partition written again, `klog verify` damaged."""
    assert cli("topics", "create", "t", "-c", "segment.bytes=500", "-c", "index.interval.bytes=100").exit_code == 0
    for i in range(10):
        assert cli("produce", "t", input=b"".join(b"v-%d-%d\n" % (i, j) for j in range(15))).exit_code == 0
    folder = os.path.join(data_dir, "logs", "t-0")
    kept = _indexes(folder)
    assert len(kept) >= 6
    for name in kept:
        os.unlink(os.path.join(folder, name))
    assert cli("produce", "t", input=b"more\n").exit_code == 0
    r = cli("verify", "t")
    assert r.exit_code == 0 and "ok" in r.out, r
    now = _indexes(folder)
    sealed = sorted(n for n in kept if n.endswith(".timeindex"))[:-1]
    assert {n: now[n] for n in sealed} == {n: kept[n] for n in sealed}


COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "700", "index.interval.bytes": "120",
             "retention.ms": "-1"}


@pytest.mark.slow
def test_a_compacted_logs_rebuilt_indexes_are_the_cleaners(store, data_dir, tmp_path):
    """Cleaned segments have gaps, emptied batches gone and emptied files: the rebuild writes
    what the cleaner wrote (the same builder), and verify --repair rebuilds them the same way."""
    store.create_topic("c", 1, configs=COMPACTED)
    rng = random.Random(7)
    with store.producer() as p:
        for i in range(150):
            p.send("c", b"v" * rng.randrange(10, 60), key=b"k%d" % (i % 7), partition=0,
                   timestamp=T0 + i * 10 + rng.randrange(-300, 300))
            if i % 3 == 0:
                p.flush()
    [done] = lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
    assert done.cleanable_end > 0
    folder = store.partition("c", 0).leader.directory
    assert folder.endswith(partition_dir_name("c", 0))
    store.close()
    kept = _indexes(folder)
    assert any(os.path.getsize(p) == 0 for p in glob.glob(os.path.join(folder, "*.log")))  # an emptied one
    config = LogConfig(segment_bytes=700, index_interval_bytes=120)
    backup = str(tmp_path / "backup")
    shutil.copytree(folder, backup)

    for name in kept:  # the next writer rebuilds them
        os.unlink(os.path.join(folder, name))
    log = PartitionLog(folder, config)
    log.open_for_write()
    log.close()
    assert _indexes(folder) == kept
    _verified_store(data_dir)

    # verify --repair rebuilds the sealed ones (from a folder no writer opened since)
    shutil.rmtree(folder)
    shutil.copytree(backup, folder)
    active = sorted(n for n in os.listdir(folder) if n.endswith(".log"))[-1][:-4]
    for name in kept:
        if not name.startswith(active):
            with open(os.path.join(folder, name), "wb"):
                pass  # emptied (Kafka's loader leaves a missing .timeindex so)
    import klog

    with klog.open(data_dir) as again:
        [result] = [r for r in verify_store(again, repair=True) if r.get("topic") == "c"]
        assert result["repaired"] and "repaired: rebuilt indexes" in result["problems"], result
    now = _indexes(folder)
    assert {n: now[n] for n in kept if not n.startswith(active)} == {n: kept[n] for n in kept
                                                                       if not n.startswith(active)}
    _verified_store(data_dir)


def _verified_store(data_dir: str) -> None:
    import klog

    with klog.open(data_dir) as s:
        results = verify_store(s)
        assert all(r["ok"] for r in results), results


def test_a_segment_a_truncation_makes_active_is_indexed_as_the_append_path_did(golden, tmp_path):
    """A follower's truncation cuts into a sealed segment, which becomes the active one: its
    indexes are those a log that ended there has (no final time entry), as they were written."""
    golden_folder, _ = golden
    folder = str(tmp_path / "t-0")
    shutil.copytree(golden_folder, folder)
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    segment, cut = _cut_after_an_unindexed_largest_timestamp(log)
    log.truncate_to(cut)
    assert log.log_end_offset == cut and log.active is segment
    log.close()

    twin = str(tmp_path / "twin" / "t-0")  # the same batches, written up to the cut
    written = PartitionLog(twin, CONFIG)
    written.open_for_write()
    seed = 0
    while written.log_end_offset < cut:
        _append(written, 1, seed)
        seed += 1
    assert written.log_end_offset == cut
    written.close()
    assert _indexes(folder) == _indexes(twin)
    _verified(folder)


def _cut_after_an_unindexed_largest_timestamp(log: PartitionLog):  # noqa: ANN202 - (segment, offset)
    """A sealed segment and the offset after one of its batches that holds the largest timestamp
    so far, named by no index entry: cut there, the segment's final time entry would be new."""
    for base in log.bases[:-1]:
        segment = log.segments[base]
        segment.offset_index.refresh()
        indexed = {base + segment.offset_index.entry_at(i)[0] for i in range(segment.offset_index.entries)}
        largest = -1
        for _, header in segment.iter_headers(0, segment.file_size()):
            if header.max_timestamp > largest and header.last_offset not in indexed and largest >= 0:
                return segment, header.next_offset
            largest = max(largest, header.max_timestamp)
    raise AssertionError("no such batch in the log")


def test_a_follower_dropping_its_empty_segment_gets_back_the_active_segments_indexes(golden, tmp_path):
    """drop_empty_active: the segment before the empty one is active again, indexed as it was."""
    golden_folder, kept = golden
    folder = str(tmp_path / "t-0")
    shutil.copytree(golden_folder, folder)
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    end = log.log_end_offset
    log.roll(end)  # sealed: its final time entry (the late batch's timestamp) appended
    assert _indexes(folder) != kept
    assert log.drop_empty_active(end)
    log.close()
    assert _indexes(folder) == kept
    _verified(folder)


def test_dirs_import_of_a_folder_without_indexes_rebuilds_them_as_written(cli, data_dir, tmp_path):
    """`klog dirs import` of a partition folder copied without its index files (the topic's
    default index.interval.bytes, as the folder was written with)."""
    source = str(tmp_path / "kafka-logs" / "imp-0")
    log = PartitionLog(source, LogConfig(segment_bytes=20_000))
    log.open_for_write()
    _append(log, 200, 0)
    late = codec.encode_batch([(None, b"late", [], LATE)], log.log_end_offset)
    log.append(late, codec.read_header(late))
    log.close()
    kept = _indexes(source)
    assert len(kept) >= 6 and all(kept.values())
    for name in kept:
        os.unlink(os.path.join(source, name))
    os.unlink(os.path.join(source, "klog-replica.state"))
    r = cli("dirs", "import", os.path.dirname(source))
    assert r.exit_code == 0, r.stderr
    assert _indexes(os.path.join(data_dir, "logs", "imp-0")) == kept
    r = cli("verify", "imp")
    assert r.exit_code == 0 and "ok" in r.out, r


@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_rebuild_never_changes_a_damaged_log(golden, tmp_path, where):
    """Damage inside a segment whose indexes are lost: the rebuild indexes the batches before it
    and leaves every byte of the `.log` (and a writer appends after its end, as before)."""
    golden_folder, kept = golden
    folder = str(tmp_path / "t-0")
    shutil.copytree(golden_folder, folder)
    logs = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    name = logs[1] if where == "sealed" else logs[-1]
    path = os.path.join(folder, name)
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF  # inside a batch past the first: its CRC fails
        f.seek(0)
        f.write(data)
    for suffix in (".index", ".timeindex"):
        os.unlink(path[:-4] + suffix)
    log = PartitionLog(folder, CONFIG)
    report = log.open_for_write()
    assert any(path in r and "rebuilt" in r and "crc" in r.lower() for r in report.reasons), report.reasons
    with open(path, "rb") as f:
        assert f.read() == data
    assert os.path.getsize(path[:-4] + ".index") < len(kept[name[:-4] + ".index"])
    if where == "active":
        before = log.log_end_offset
        _append(log, 1, 900)
        assert os.path.getsize(path) > len(data) and log.log_end_offset > before
    log.close()

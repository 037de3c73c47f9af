"""Tail recovery on real segment files: exactly the intact prefix survives, never a garbage record.

Method: one log of small, unevenly sized batches over several segments (small segment.bytes and
index.interval.bytes, so every segment has index entries) is written once by the append path;
each case copies it, damages the active segment the way a crash does (a cut tail, a zero-filled
tail from a power cut, flipped bytes in the last batch), reopens it through
PartitionLog.open_for_write and checks the survivors batch by batch against the undamaged
original, the indexes against the ones the append path wrote, every offset and timestamp
lookup against brute force, and that appends continue at the next offset. Damage before the
tail must be reported (reads, `klog consume`, `klog verify`) with file, position and offset.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import klog
from klog.errors import CorruptLogError
from klog.store import codec, compression
from klog.store.config import LogConfig
from klog.store.format import ATTRIBUTES_OFFSET, MAGIC_OFFSET, PARTITION_LEADER_EPOCH_OFFSET
from klog.store.log import PartitionLog
from klog.store.segment import LogSegment

CONFIG = LogConfig(segment_bytes=6_000, index_interval_bytes=300)
BATCHES = 60
REBOOT_ID = b"\x99" * 16  # another boot id: what the next writer sees after a power cut


def make_batch(base: int, count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    records = [(b"k%d" % (base + i) if rng.random() < 0.5 else None,
                b"v%d-" % (base + i) + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60))),
                [("h", b"%d" % i)] if rng.random() < 0.3 else [],
                1_700_000_000_000 + base * 10 + rng.randrange(-5, 50)) for i in range(count)]
    return codec.encode_batch(records, base)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """A closed-by-crash log (no seal of the active segment) and its batches in order."""
    folder = str(tmp_path_factory.mktemp("golden") / "t-0")
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    batches = []
    for i in range(BATCHES):
        batch = make_batch(log.log_end_offset, 1 + (i * 7) % 13, i)
        header = codec.read_header(batch)
        log.append(batch, header)
        log.flush()
        batches.append(batch)
    log.close()
    assert len(log.bases) >= 4, "the fixture must span several segments"
    return folder, batches


def copy_log(golden_folder: str, tmp_path, name: str = "t-0") -> str:
    target = str(tmp_path / name)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(golden_folder, target)
    return target


def active_log_path(folder: str) -> str:
    return os.path.join(folder, sorted(n for n in os.listdir(folder) if n.endswith(".log"))[-1])


def batches_in(path: str) -> list[tuple[int, bytes]]:
    """(position, bytes) of each batch of an undamaged segment file."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        size = codec.read_header(data, pos).size
        out.append((pos, data[pos:pos + size]))
        pos += size
    return out


def reboot(monkeypatch) -> None:
    monkeypatch.setattr("klog.store.log.current_boot_id", lambda: REBOOT_ID)


def all_batches(log: PartitionLog) -> list[bytes]:
    return [fb.data for fb in log.read(0, 1 << 62, 1 << 30)]


def check_intact_prefix(folder: str, golden_folder: str, expected: list[bytes]) -> PartitionLog:
    """Reopen as the next writer; the log must be exactly `expected`, indexes and lookups right."""
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    assert all_batches(log) == expected
    end = codec.read_header(expected[-1]).next_offset if expected else 0
    assert log.log_end_offset == end
    for base in log.bases:  # indexes: what the append path wrote for the surviving bytes
        segment = log.segments[base]
        size = segment.file_size()
        original = LogSegment(golden_folder, base, CONFIG.index_interval_bytes)
        original.offset_index.refresh()
        segment.offset_index.refresh()
        want = [original.offset_index.entry_at(i) for i in range(original.offset_index.entries)]
        assert [segment.offset_index.entry_at(i) for i in range(segment.offset_index.entries)] == \
            [e for e in want if e[1] < size]
    records = [r for b in expected for r in codec.decode_batch_records(b, 0, codec.read_header(b))]
    assert [r[0] for r in records] == list(range(end))
    for offset in range(0, end, 3):  # offset lookups through the rebuilt index
        got = log.read(offset, end, 1)
        assert got and got[0].header.base_offset <= offset <= got[0].header.last_offset
    for ts in sorted({r[1] for r in records})[::5] + [0, 1 << 60]:  # time lookups vs brute force
        want_offset = next((o for o, t, *_ in records if t >= ts), None)
        assert log.offset_for_timestamp(ts, end) == want_offset, ts
    return log


def append_continues(log: PartitionLog) -> None:
    before = log.log_end_offset
    batch = make_batch(before, 5, 999)
    log.append(batch, codec.read_header(batch))
    log.flush()
    log.close()
    fresh = PartitionLog(log.directory, CONFIG)
    fresh.open_for_write()
    offsets = [r[0] for fb in fresh.read(0, 1 << 62, 1 << 30) for r in fb.records()]
    assert offsets == list(range(before + 5))
    fresh.close()


@pytest.mark.slow
def test_every_truncation_of_the_tail_keeps_exactly_the_whole_batches(golden, tmp_path, monkeypatch):
    golden_folder, batches = golden
    tail = batches_in(active_log_path(golden_folder))
    head = batches[:len(batches) - len(tail)]
    size = tail[-1][0] + len(tail[-1][1])
    cuts = sorted(set(range(0, size, 7)) | {p for p, _ in tail} | {p + 1 for p, _ in tail} | {size - 1})
    for n, cut in enumerate(cuts):
        if n % 2:
            reboot(monkeypatch)  # half the cases as a power cut (new boot id), half as kill -9
        folder = copy_log(golden_folder, tmp_path)
        os.truncate(active_log_path(folder), cut)
        kept = head + [b for p, b in tail if p + len(b) <= cut]
        log = check_intact_prefix(folder, golden_folder, kept)
        if n % 10 == 0:
            append_continues(log)
        log.close()
        monkeypatch.undo()


def test_a_torn_tail_in_an_older_segment_after_a_lost_roll_is_cut_and_later_segments_go(golden, tmp_path,
                                                                                          monkeypatch):
    """A power cut lost the end of the segment before the active one: the log ends there."""
    golden_folder, batches = golden
    folder = copy_log(golden_folder, tmp_path)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    previous = os.path.join(folder, names[-2])
    tail = batches_in(previous)
    cut = tail[-2][0] + 10
    os.truncate(previous, cut)
    with open(os.path.join(folder, "klog-replica.state"), "r+b") as f:  # torn too: recover from the start
        f.write(b"\0" * 8)
    reboot(monkeypatch)
    lost = len(batches_in(active_log_path(golden_folder))) + 2
    log = check_intact_prefix(folder, golden_folder, batches[:-lost])
    assert len(log.bases) == len(names) - 1
    append_continues(log)


@pytest.mark.parametrize("where", ["appended", "overwrites-last-batch", "overwrites-last-3-batches", "page"])
def test_zero_filled_tail_after_a_power_cut(golden, tmp_path, monkeypatch, where):
    golden_folder, batches = golden
    folder = copy_log(golden_folder, tmp_path)
    path = active_log_path(folder)
    tail = batches_in(path)
    size = os.path.getsize(path)
    if where == "appended":  # the file grew (metadata reached disk) but its data did not
        start, length, keep = size, 8192, len(tail)
    elif where == "overwrites-last-batch":
        start, length, keep = tail[-1][0], size - tail[-1][0], len(tail) - 1
    elif where == "overwrites-last-3-batches":
        start, length, keep = tail[-3][0] + 5, size - tail[-3][0] - 5, len(tail) - 3
    else:  # a 4 KiB page of zeros in the middle of the last batch, file size unchanged
        start, length = tail[-1][0] + 30, 40
        keep = len(tail) - 1
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\0" * length)
    reboot(monkeypatch)
    expected = batches[:len(batches) - len(tail) + keep]
    log = check_intact_prefix(folder, golden_folder, expected)
    append_continues(log)


@pytest.mark.slow
def test_flipped_byte_anywhere_in_the_crc_covered_part_of_the_last_batch_drops_only_it(golden, tmp_path,
                                                                                      monkeypatch):
    golden_folder, batches = golden
    path = active_log_path(golden_folder)
    last_pos, last = batches_in(path)[-1]
    positions = [8, 9, 10, 11, MAGIC_OFFSET] + list(range(MAGIC_OFFSET + 1, len(last)))
    reboot(monkeypatch)
    for i, at in enumerate(positions):
        folder = copy_log(golden_folder, tmp_path)
        with open(active_log_path(folder), "r+b") as f:
            f.seek(last_pos + at)
            f.write(bytes([last[at] ^ (1 << (i % 8))]))
        log = check_intact_prefix(folder, golden_folder, batches[:-1])
        if i % 25 == 0:
            append_continues(log)
        log.close()


def test_flipped_leader_epoch_is_outside_the_crc_and_keeps_the_records(golden, tmp_path, monkeypatch):
    """Kafka's rule: partitionLeaderEpoch is not covered by the CRC, so the batch survives intact."""
    golden_folder, batches = golden
    folder = copy_log(golden_folder, tmp_path)
    path = active_log_path(folder)
    last_pos, last = batches_in(path)[-1]
    with open(path, "r+b") as f:
        f.seek(last_pos + PARTITION_LEADER_EPOCH_OFFSET + 3)
        f.write(b"\x07")
    reboot(monkeypatch)
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    got = all_batches(log)
    assert len(got) == len(batches) and got[-1][ATTRIBUTES_OFFSET:] == last[ATTRIBUTES_OFFSET:]
    assert codec.read_header(got[-1]).leader_epoch == 7
    log.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_damage_of_the_tail_never_yields_a_garbage_record(golden, tmp_path, data):
    """Any mix of cut, zeros and flips in the active segment: a prefix of whole original batches.
    Flips hit the CRC-covered bytes, the length and the magic (baseOffset and partitionLeaderEpoch
    lie outside the CRC by Kafka's design; see the leader-epoch test)."""
    golden_folder, batches = golden
    folder = copy_log(golden_folder, tmp_path)
    path = active_log_path(folder)
    tail = batches_in(path)
    size = os.path.getsize(path)
    checked = [p + i for p, b in tail for i in range(8, len(b)) if not 12 <= i < MAGIC_OFFSET]
    with open(path, "r+b") as f:
        for _ in range(data.draw(st.integers(0, 4))):
            at = data.draw(st.sampled_from(checked))
            f.seek(at)
            f.write(bytes([data.draw(st.integers(0, 255))]))
    if data.draw(st.booleans()):
        os.truncate(path, data.draw(st.integers(0, size)))
    if data.draw(st.booleans()):
        with open(path, "ab") as f:
            f.write(b"\0" * data.draw(st.integers(1, 5000)))
    log = PartitionLog(folder, CONFIG)
    import klog.store.log as log_module

    real = log_module.current_boot_id
    log_module.current_boot_id = lambda: REBOOT_ID
    try:
        log.open_for_write()
    finally:
        log_module.current_boot_id = real
    got = all_batches(log)
    assert got == batches[:len(got)]
    assert log.log_end_offset == (codec.read_header(got[-1]).next_offset if got else 0)
    log.close()


# -- damage before the tail: reported, never skipped ------------------------------------------------

@pytest.fixture
def damaged_store(data_dir):
    """A topic whose first segment has one flipped byte in a batch well before the log's tail."""
    with klog.open(data_dir) as store:
        store.create_topic("d", configs={"segment.bytes": "20000"})
        with store.producer(batch_size=2000) as p:
            for i in range(3000):
                p.send("d", b"value-%06d" % i, partition=0)
        folder = store.partition("d", 0).leader.directory
    first = os.path.join(folder, sorted(n for n in os.listdir(folder) if n.endswith(".log"))[0])
    batch_positions = [p for p, _ in batches_in(first)]
    position = batch_positions[3]
    with open(first, "rb") as f:
        f.seek(position)
        base_offset = codec.read_header(f.read(61)).base_offset
    with open(first, "r+b") as f:
        f.seek(position + 100)
        b = f.read(1)
        f.seek(position + 100)
        f.write(bytes([b[0] ^ 0x10]))
    return data_dir, first, position, base_offset


def test_corruption_before_the_tail_is_reported_by_reads_with_file_position_offset(damaged_store):
    data_dir, path, position, offset = damaged_store
    with klog.open(data_dir) as store:
        with pytest.raises(CorruptLogError) as info:
            list(store.consumer("d"))
        assert (info.value.path, info.value.position, info.value.offset) == (path, position, offset)
        # records before the damage are still served; the ones after it are never silently skipped
        got = [r.offset for r in store.consumer("d", count=offset)]
        assert got == list(range(offset))


def test_corruption_before_the_tail_is_not_skipped_by_the_next_writer(damaged_store, monkeypatch):
    data_dir, path, position, offset = damaged_store
    reboot(monkeypatch)
    with klog.open(data_dir) as store, store.producer() as p:
        p.send("d", b"after", partition=0)
    with klog.open(data_dir) as store:
        with pytest.raises(CorruptLogError, match="CRC mismatch"):
            list(store.consumer("d"))


def test_cli_consume_and_verify_report_it_in_one_line_with_exit_1(damaged_store, klog_proc):
    data_dir, path, position, offset = damaged_store
    for args in (("consume", "d"), ("verify", "d"), ("verify",)):
        r = klog_proc(*args)
        err = r.stderr.decode()
        assert r.returncode == 1, (args, err)
        assert "Traceback" not in err
        text = err if args[0] == "consume" else r.stdout.decode()
        lines = [x for x in text.splitlines() if "CRC mismatch" in x]
        assert len(lines) == 1, text
        assert path in lines[0] and f"position {position}" in lines[0] and f"offset {offset}" in lines[0]


# -- a CRC-valid batch whose compressed payload is garbage ----------------------------------------

@pytest.mark.parametrize("codec_name", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_compressed_payload_is_a_corrupt_log_error_with_location(data_dir, klog_proc, codec_name):
    with klog.open(data_dir) as store:
        store.create_topic("z")
        with store.producer(compression_type=codec_name) as p:
            for i in range(50):
                p.send("z", b"value-%d" % i, partition=0)
        with store.producer(compression_type=codec_name) as p:
            for i in range(50, 60):
                p.send("z", b"value-%d" % i, partition=0)
        folder = store.partition("z", 0).leader.directory
    path = active_log_path(folder)
    (_, first), (position, second) = batches_in(path)
    header = codec.read_header(second)
    garbage = bytes(random.Random(1).randrange(256) for _ in range(len(second) - 61))
    covered = second[ATTRIBUTES_OFFSET:61] + garbage
    crc = codec.crc_of(covered, b"")
    forged = second[:17] + crc.to_bytes(4, "big") + covered
    assert codec.read_header(forged).codec == compression.CODEC_IDS[codec_name]
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(forged)
    with klog.open(data_dir) as store:
        with pytest.raises(CorruptLogError) as info:
            list(store.consumer("z"))
        assert (info.value.path, info.value.position, info.value.offset) == (path, position, header.base_offset)
    r = klog_proc("consume", "z")
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert path in err and f"position {position}" in err
    r = klog_proc("verify", "z")
    assert r.returncode == 1 and "Traceback" not in r.stderr.decode(), r.stderr
    assert path in r.stdout.decode() and f"position {position}" in r.stdout.decode()


def test_rf1_recovery_cutting_committed_records_says_so(data_dir, monkeypatch):
    """With one replica, a damaged last batch in the active segment found after a reboot (nothing
    valid after it: a torn tail) costs the records from there on (Kafka's rule); the writer must
    say so, with file, position and offset. (Damage that valid batches follow stays in place:
    test_recovery_keeps_damage.py.)"""
    with klog.open(data_dir) as store:
        store.create_topic("one")
        with store.producer(batch_size=2000) as p:
            for i in range(3000):
                p.send("one", b"value-%08d" % i, partition=0)
        folder = store.partition("one", 0).leader.directory
    path = active_log_path(folder)
    position, batch = batches_in(path)[-1]
    offset = codec.read_header(batch).base_offset
    with open(path, "r+b") as f:
        f.seek(position + 70)
        f.write(bytes([batch[70] ^ 0x01]))
    reboot(monkeypatch)
    warnings: list[str] = []
    with klog.open(data_dir) as store:
        # and writes nothing at the lost offsets until the loss is acknowledged (klog.broker.data_loss)
        with pytest.raises(klog.KlogError, match="one-0 takes no writes: committed records"):
            with store.producer(on_warning=warnings.append) as p:
                p.send("one", b"after", partition=0)
        assert [r.value for r in store.consumer("one")] == [b"value-%08d" % i for i in range(offset)]
        (report,) = store.verify("one", repair=True)
        assert f"the loss is acknowledged; writes go on from offset {offset}" in "; ".join(report["problems"])
        with store.producer() as p:
            p.send("one", b"after", partition=0)
        values = [r.value for r in store.consumer("one")]
    assert values == [b"value-%08d" % i for i in range(offset)] + [b"after"]
    assert len(warnings) == 2, warnings
    assert f"from offset {offset}" in warnings[0] and path in warnings[0] and f"position {position}" in warnings[0]
    assert warnings[1].startswith(f"data loss: committed records {offset}..2999 of one-0 are gone")
    assert os.path.exists(f"{path}.{position}.corrupt")  # the cut bytes, kept for inspection


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), forget_state=st.booleans())
def test_truncate_to_matches_brute_force_then_appends_continue(golden, tmp_path, data, forget_state):
    """PartitionLog.truncate_to(offset) keeps exactly the batches whose last offset is below
    `offset` (Kafka truncates whole batches), across segments, with indexes trimmed to match;
    the next writer (with or without the state the truncating one left) continues at its end."""
    from klog.store.state import ReplicaState

    golden_folder, batches = golden
    end = codec.read_header(batches[-1]).next_offset
    bases = [codec.read_header(b).base_offset for b in batches]
    # segment starts and batch starts are the interesting places; any offset will do
    offset = data.draw(st.one_of(st.sampled_from(bases), st.integers(0, end + 2)), label="offset")
    folder = copy_log(golden_folder, tmp_path, "trunc-0")
    log = PartitionLog(folder, CONFIG)
    log.open_for_write()
    segments_before = list(log.bases)
    log.truncate_to(offset)
    kept = [b for b in batches if codec.read_header(b).last_offset < offset]
    assert all_batches(log) == kept
    assert log.log_end_offset == (codec.read_header(kept[-1]).next_offset if kept else 0)
    assert set(log.bases) <= set(segments_before) and log.bases[0] == segments_before[0]
    log.close()
    if forget_state:
        os.unlink(os.path.join(folder, ReplicaState.FILE_NAME))
    append_continues(check_intact_prefix(folder, golden_folder, kept))

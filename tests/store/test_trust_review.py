"""Review of the writer's trusted open (ReplicaTrust, issue 29): states in which the record still
matches the files' inode/size/mtime while their contents differ, and what a user then sees.

A change that keeps a file's size and lands within the same timestamp tick as the record's write
keeps its times too: os.utime puts the mtimes back here as such a fast change would leave them (and
the check reads mtimes: change times cannot be put back)."""

from __future__ import annotations

import os
import shutil
import struct
import zlib

import pytest

from klog.store import codec
from klog.store import log as log_module
from klog.store.config import LogConfig
from klog.store.log import PartitionLog
from klog.store.state import ReplicaState
from tests.store.test_trusted_open import (
    BASE_TS,
    CONFIG,
    LOG,
    _age,
    _append,
    _batch,
    _keep_mtimes,
    _offsets_and_values,
    _open,
    _state,
    folder,  # noqa: F401 (a fixture)
    listings,  # noqa: F401 (a fixture)
)


def _offsets(path: str) -> list[int]:
    return [o for o, _ in _offsets_and_values(path)]


def _same_size_batch(base: int, size: int) -> bytes:
    """A batch of 4 records (one more than _batch's 3) of exactly `size` bytes."""
    for value_len in range(1, 200):
        for extra in range(10):
            batch = codec.encode_batch([(b"k%d" % i, b"w" * (value_len + (extra if i == 0 else 0)), [],
                                         BASE_TS + base + i) for i in range(4)], base)
            if len(batch) == size:
                return batch
    raise AssertionError(f"no 4-record batch of {size} bytes")


@pytest.mark.xfail(strict=True, reason="a same-size rewrite of the tail within the record's mtime tick is adopted "
                   "(inode, size, mtime match): the log end comes from the record, the next batch repeats offset "
                   "24 and readers stop silently before it. main's open (size + state file) does the same")
def test_a_tail_rewritten_to_the_same_size_within_the_records_tick_is_not_adopted(folder, listings, monkeypatch):  # noqa: F811
    """The last batch (3 records) cut and a 4-record batch of the same size appended in its place
    (a truncation and an append by a writer that did not write the state after, or a foreign
    tool), within the tick of the record's write: the file says the log ends at 25, the record 24."""
    snap = _state(folder)
    path = os.path.join(folder, LOG)
    last = _batch(21)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - len(last))
        assert f.read() == last
        f.truncate(size - len(last))
        f.seek(size - len(last))
        f.write(_same_size_batch(21, len(last)))
    assert os.path.getsize(path) == size
    _keep_mtimes(folder, snap, monkeypatch)
    log, _ = _open(folder)
    _append(log, 1)
    log.close()
    assert _offsets(folder) == list(range(28))  # (with the hole: ... 23, 24, then nothing: 24-26 unread)


def test_a_power_cut_tail_of_zeros_with_the_same_size_and_mtimes_is_cut(folder, listings, monkeypatch):  # noqa: F811
    """Unsynced appends a power cut turned into zeros (the size kept, as ext4/XFS may leave it):
    another boot id, so the record is not trusted and the recovery cuts them."""
    log, _ = _open(folder)
    _append(log, 2)  # (after the recovery point: not fsynced)
    snap = _state(folder)
    assert snap.trust is not None and snap.recovery_point < snap.log_end_offset == 30
    path = os.path.join(folder, LOG)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # the last batch lost
        f.seek(size - len(_batch(27)))
        f.write(bytes(len(_batch(27))))
    _keep_mtimes(folder, snap, monkeypatch)
    monkeypatch.setattr(log_module, "current_boot_id", lambda: b"\x01" * 16)
    reopened, report = _open(folder)
    assert folder in listings and reopened.log_end_offset == 27
    _append(reopened, 1)
    reopened.close()
    assert _offsets(folder) == list(range(30))


def test_an_older_klog_reads_the_first_68_bytes_of_a_version_2_state_file(folder):  # noqa: F811
    """Older klog: one pread of 68 bytes, their CRC, the seven fields."""
    snap = _state(folder)
    with open(os.path.join(folder, ReplicaState.FILE_NAME), "rb") as f:
        data = f.read(68)
    fields = struct.unpack(">16sqqqqqq", data[:64])
    assert zlib.crc32(data[:64]) == int.from_bytes(data[64:], "big")
    assert fields == (snap.boot_id, snap.active_base, snap.valid_size, snap.log_end_offset, snap.recovery_point,
                      snap.max_timestamp, snap.offset_of_max_timestamp)


def test_a_trusted_open_reads_every_segment_through_the_same_object(tmp_path, listings):  # noqa: F811
    """The trusted open knows the active segment only: the same object's reads from offset 0 and
    its retention's look at the segments list the folder for the others."""
    config = LogConfig(index_interval_bytes=300, segment_bytes=1200)  # a roll every few batches
    where = str(tmp_path / "t-0")
    for _ in range(2):
        log = PartitionLog(where, config, listed=False)
        log.open_for_write()
        _append(log, 5)
        log.flush()
        log.close()
        _age(where)
    log = PartitionLog(where, config, listed=False)
    log.open_for_write()
    _append(log, 1)  # (no roll: the settled folder is recorded)
    log.close()
    assert _state(where).trust.folder_ino
    listings.clear()
    log = PartitionLog(where, config, listed=False)
    log.open_for_write()
    assert where not in listings  # (trusted)
    _append(log, 1)
    seen = [r[0] for fb in log.read(0, 1 << 60, 1 << 30) for r in fb.records()]
    assert seen == list(range(36)) and len(log.bases) > 2
    log.close()



def test_a_backup_restored_over_the_folder_with_its_mtimes_is_not_trusted(folder, listings, tmp_path):  # noqa: F811
    """The folder backed up with its times (cp -a, shutil.copytree), the log written on and rolled,
    then the backup copied back over it in place (cp -a backup/. folder/: same inodes, the times
    put back, the newer segment left there). The record restored with it names the old active
    segment: the next writer must still find the newer one (main's open lists the folder and
    continues after it); what it appends must read back at its offsets, whatever the restore lost."""
    backup = str(tmp_path / "backup")
    shutil.copytree(folder, backup)  # (copy2: the files' and the folder's mtimes kept)
    log, _ = _open(folder)
    _append(log, 2)
    log.roll(log.log_end_offset)  # a segment from offset 30
    _append(log, 2)
    log.flush()
    log.close()
    assert len(log.bases) == 2
    shutil.copytree(backup, folder, dirs_exist_ok=True)  # in place: copyfile truncates and rewrites
    log, _ = _open(folder)
    start = log.log_end_offset
    _append(log, 3, seed=7)
    log.close()
    reader = PartitionLog(folder, CONFIG)
    try:  # (a consumer resuming at each of them: the first record it gets)
        read = [next((r[0], r[3]) for fb in reader.read(o, 1 << 60, 1 << 30) for r in fb.records() if r[0] >= o)
                for o in range(start, start + 9)]
    finally:
        reader.close()
    # every record just acknowledged reads back at its offset (main: from 36, after the newer segment)
    assert read == [(o, b"v%d-7-" % o + b"x" * 90) for o in range(start, start + 9)]



def test_a_folder_changed_during_a_writers_hold_is_listed_by_the_next_open(folder, listings):  # noqa: F811
    """Another process's close renames a Kafka checkpoint file into the folder (no partition lock:
    see kafka_checkpoints) while this writer holds the log, within the same clock tick as the
    writer's state write: the record names the folder as the writer's open found it (settled,
    older than any change since), so the next open lists the folder."""
    from klog.store import checkpoints

    log, _ = _open(folder)
    assert folder not in listings  # (trusted)
    checkpoints.write_atomically(os.path.join(folder, "leader-epoch-checkpoint"), checkpoints.checkpoint_text(["0 0"]))
    _append(log, 1)  # (its state write records the trust)
    log.close()
    reopened, _ = _open(folder)
    assert folder in listings and reopened.log_end_offset == 27
    reopened.close()

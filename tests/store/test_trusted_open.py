"""A writer's open adopts the log from the replica state file's trust record (ReplicaTrust) without
listing the folder or reading the indexes, only while the files are provably as the last writer
left them; anything changed behind the record (a cut or grown tail, a replaced or rewritten
segment, an index entry more, a new segment file, an older klog's state write) sends the open to
the full check, which finds and recovers it as before."""

from __future__ import annotations

import os
import shutil
import time
import zlib

import pytest

from klog.store import codec
from klog.store import log as log_module
from klog.store.config import LogConfig
from klog.store.log import PartitionLog
from klog.store.state import ReplicaState

CONFIG = LogConfig(index_interval_bytes=300)  # index entries after every few batches
BASE_TS = 1_700_000_000_000
LOG = "0" * 20 + ".log"


def _batch(base: int, seed: int = 0) -> bytes:
    return codec.encode_batch([(b"k%d" % i, b"v%d-%d-" % (base + i, seed) + b"x" * 90, [], BASE_TS + base + i)
                               for i in range(3)], base)


def _append(log: PartitionLog, n: int, seed: int = 0) -> None:
    for _ in range(n):
        batch = _batch(log.log_end_offset, seed)
        log.append(batch, codec.read_header(batch))


def _write(folder: str, n: int = 4) -> None:
    log = PartitionLog(folder, CONFIG, listed=False)
    log.open_for_write()
    _append(log, n)
    log.flush()
    log.close()


def _state(folder: str):
    state = ReplicaState(os.path.join(folder, ReplicaState.FILE_NAME))
    try:
        return state.read()
    finally:
        state.close()


def _age(folder: str) -> None:
    """Wait until the folder's last change is settled (see FOLDER_SETTLED_NS): its change time
    cannot be set back, as an mtime can."""
    time.sleep(log_module.FOLDER_SETTLED_NS / 1e9 + 0.02)


@pytest.fixture
def folder(tmp_path) -> str:
    """A replica whose state file carries a trust record."""
    folder = str(tmp_path / "t-0")
    _write(folder)  # creates it
    _age(folder)
    _write(folder)  # lists the settled folder, then records it
    snap = _state(folder)
    assert snap.trust is not None and snap.trust.folder_ino == os.stat(folder).st_ino
    return folder


@pytest.fixture
def listings(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": seen.append(str(path)) or real(path))
    return seen


def _open(folder: str) -> tuple[PartitionLog, object]:
    log = PartitionLog(folder, CONFIG, listed=False)
    return log, log.open_for_write()


def _offsets_and_values(folder: str) -> list[tuple[int, bytes]]:
    log = PartitionLog(folder, CONFIG)
    try:
        out = []
        for fb in log.read(0, 1 << 60, 1 << 30):
            out += [(r[0], r[3]) for r in fb.records()]
        return out
    finally:
        log.close()


def _keep_mtimes(folder: str, snap, monkeypatch) -> None:
    """As if the change just made had come within the record's clock tick, which leaves a file's
    times as they were: only the check under test is left to notice it. (The record's times are
    change times, which nothing can set back: here the check reads mtimes, put back to the
    record's.)"""
    monkeypatch.setattr(log_module, "_change_ns", lambda st: st.st_mtime_ns)
    os.utime(folder, ns=(snap.trust.folder_changed_ns, snap.trust.folder_changed_ns))
    os.utime(os.path.join(folder, LOG), ns=(snap.trust.log_changed_ns, snap.trust.log_changed_ns))


def test_a_trusted_open_lists_nothing_and_appends_what_a_full_check_would(folder, listings, tmp_path):
    twin = str(tmp_path / "twin" / "t-0")
    shutil.copytree(folder, twin)
    os.unlink(os.path.join(twin, ReplicaState.FILE_NAME))  # the twin's open checks every file
    for path in (folder, twin):
        log, report = _open(path)
        assert not report.reasons and not report.bytes_truncated
        _append(log, 12, seed=1)
        log.flush()
        log.close()
    assert folder not in listings and twin in listings
    for name in (LOG, "0" * 20 + ".index", "0" * 20 + ".timeindex"):  # Kafka's index rule, byte for byte
        with open(os.path.join(folder, name), "rb") as a, open(os.path.join(twin, name), "rb") as b:
            assert a.read() == b.read(), name
    assert _offsets_and_values(folder) == _offsets_and_values(twin)
    assert [o for o, _ in _offsets_and_values(folder)] == list(range(3 * (4 + 4 + 12)))


def test_a_cut_tail_is_recovered(folder, listings, monkeypatch):
    snap = _state(folder)
    path = os.path.join(folder, LOG)
    os.truncate(path, os.path.getsize(path) - 7)
    _keep_mtimes(folder, snap, monkeypatch)
    log, report = _open(folder)
    assert report.bytes_truncated > 0 and folder in listings
    assert log.log_end_offset == 3 * 7  # the last batch was cut: the one before ends the log
    log.close()


def test_foreign_bytes_after_the_tail_are_cut(folder, listings, monkeypatch):
    snap = _state(folder)
    path = os.path.join(folder, LOG)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(os.urandom(4096))
    _keep_mtimes(folder, snap, monkeypatch)
    log, report = _open(folder)
    assert report.bytes_truncated == 4096 and os.path.getsize(path) == size
    _append(log, 1)
    log.close()
    assert [o for o, _ in _offsets_and_values(folder)] == list(range(3 * 9))


def test_a_batch_appended_after_the_record_is_kept(folder, listings, monkeypatch):
    """A writer killed after its append, before its state write: the batch is whole, and kept."""
    snap = _state(folder)
    with open(os.path.join(folder, LOG), "ab") as f:
        f.write(_batch(24, seed=3))
    _keep_mtimes(folder, snap, monkeypatch)
    log, report = _open(folder)
    assert not report.bytes_truncated and log.log_end_offset == 27
    _append(log, 1)
    log.close()
    assert [o for o, _ in _offsets_and_values(folder)] == list(range(30))


@pytest.mark.parametrize("change", ["replaced", "rewritten-in-place", "time-index-entry", "offset-index-entry"])
def test_a_file_changed_behind_the_record_sends_the_open_to_the_full_check(folder, listings, change, monkeypatch):
    snap = _state(folder)
    path = os.path.join(folder, LOG)
    if change == "replaced":  # same bytes, another file (a copy renamed over it)
        shutil.copyfile(path, path + ".new")
        os.replace(path + ".new", path)
    elif change == "rewritten-in-place":  # same size and file, other bytes
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 5)
            f.write(b"\xff" * 5)
    elif change == "time-index-entry":  # a roll's seal written, the roll itself killed
        with open(os.path.join(folder, "0" * 20 + ".timeindex"), "ab") as f:
            f.write((BASE_TS + 10**6).to_bytes(8, "big") + (20).to_bytes(4, "big"))
    else:
        with open(os.path.join(folder, "0" * 20 + ".index"), "ab") as f:
            f.write((20).to_bytes(4, "big") + (0).to_bytes(4, "big"))
    if change == "rewritten-in-place":  # (the log's mtime moved: the folder's as the record says)
        monkeypatch.setattr(log_module, "_change_ns", lambda st: st.st_mtime_ns)
        os.utime(folder, ns=(snap.trust.folder_changed_ns, snap.trust.folder_changed_ns))
    else:
        _keep_mtimes(folder, snap, monkeypatch)
    log, _ = _open(folder)
    assert folder in listings
    log.close()


def test_a_segment_file_added_behind_the_record_becomes_the_active_one(folder, listings):
    """A writer killed in the middle of a roll: the new segment is there, the record names the old."""
    for suffix in (".log", ".index", ".timeindex"):
        open(os.path.join(folder, f"{24:020d}{suffix}"), "wb").close()
    log, _ = _open(folder)
    assert folder in listings and log.active.base_offset == 24
    _append(log, 1)
    log.close()
    assert [o for o, _ in _offsets_and_values(folder)] == list(range(27))
    assert os.path.getsize(os.path.join(folder, f"{24:020d}.log")) > 0


def test_an_older_klogs_state_write_drops_the_record(folder, listings):
    """Older klog writes the first 68 bytes only: the record after them no longer matches."""
    state = os.path.join(folder, ReplicaState.FILE_NAME)
    with open(state, "r+b") as f:
        data = bytearray(f.read(68))
        data[16 + 8 * 3:16 + 8 * 4] = (5).to_bytes(8, "big")  # another recovery point
        data[64:68] = zlib.crc32(bytes(data[:64])).to_bytes(4, "big")
        f.seek(0)
        f.write(data)
    snap = _state(folder)
    assert snap is not None and snap.recovery_point == 5 and snap.trust is None
    log, _ = _open(folder)
    assert folder in listings
    log.close()


def test_a_folder_changed_just_before_is_not_recorded(tmp_path):
    """Its mtime may not change again within the file system's clock tick: nothing to trust yet."""
    folder = str(tmp_path / "t-0")
    _write(folder)
    recent = time.time_ns() + 60 * 10**9  # (never settled however slow the machine: a clock a minute ahead)
    os.utime(folder, ns=(recent, recent))
    _write(folder)
    snap = _state(folder)
    assert snap.trust is not None and snap.trust.folder_ino == 0
    _age(folder)  # once settled, the next writer records it
    _write(folder)
    assert _state(folder).trust.folder_ino == os.stat(folder).st_ino

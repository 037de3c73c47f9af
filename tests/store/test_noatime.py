"""A partition's lock and state files are read without writing their access times (O_NOATIME):
under relatime, the first read of a file written since its last read would write its inode again,
three or four times per partition a producer writes."""

from __future__ import annotations

import errno
import os
import time

import pytest

from klog.store import names
from klog.store.locks import FileLock
from klog.store.state import PartitionSnapshot, PartitionState

pytestmark = pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="O_NOATIME is Linux's")


def _atime_moves_on_read(path: str) -> bool:
    """Does a plain read of `path`, written after its last read, move its access time here?"""
    with open(path, "rb") as f:
        f.read()
    time.sleep(0.02)
    with open(path, "r+b") as f:
        f.write(f.read())
    before = os.stat(path).st_atime_ns
    time.sleep(0.02)
    with open(path, "rb") as f:
        f.read()
    return os.stat(path).st_atime_ns != before


def test_reading_the_state_and_lock_files_leaves_their_access_times(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(names, "_noatime", os.O_NOATIME)
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    if not _atime_moves_on_read(str(probe)):
        pytest.skip("this file system does not update access times on read (noatime)")
    state = PartitionState(str(tmp_path / "t-0.state"))
    lock = FileLock(str(tmp_path / "t-0.lock"))
    with lock:
        state.write(PartitionSnapshot(5, 0, 0))
    state.close()
    lock.close_file()
    times = {p: os.stat(p).st_atime_ns for p in (state.path, lock.path)}
    time.sleep(0.02)
    assert state.read().high_watermark == 5  # (a reader's open and read)
    with lock:  # (its open and the read of the count written last time)
        pass
    assert {p: os.stat(p).st_atime_ns for p in times} == times


def test_a_file_that_is_not_the_users_is_opened_as_before(tmp_path, monkeypatch) -> None:
    """O_NOATIME is the owner's: EPERM for anyone else's file (a group-shared store) opens it
    without, and the process does not ask again."""
    monkeypatch.setattr(names, "_noatime", os.O_NOATIME)
    real_open = os.open
    asked = []

    def not_the_owner(path, flags, mode=0o777, *args, **kwargs):  # noqa: ANN001, ANN202
        asked.append(bool(flags & os.O_NOATIME))
        if flags & os.O_NOATIME:
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", not_the_owner)
    state = PartitionState(str(tmp_path / "t-0.state"))
    state.write(PartitionSnapshot(7, 0, 0))
    state.close()
    assert state.read().high_watermark == 7
    state.close()
    assert asked == [True, False, False]  # refused once, then never asked again
    assert names._noatime == 0


def test_other_permission_errors_are_raised_as_before(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(names, "_noatime", os.O_NOATIME)

    def denied(path, flags, mode=0o777, *args, **kwargs):  # noqa: ANN001, ANN202
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(PermissionError):
        names.open_nofollow(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT, noatime=True)
    assert names._noatime == os.O_NOATIME

"""One syncfs(2) for the files of many partitions, instead of one fsync each.

Linux's syncfs writes back and commits everything dirty on one filesystem, with the guarantee of
an fsync of each of its files (syncfs(2): "sync() or syncfs() provide the same guarantees as
fsync() called on every file in the system or filesystem respectively"); since Linux 5.8 it
reports a writeback error that happened since the descriptor it is given was opened, so that
descriptor is opened before the writes it must cover (SyncedTogether). An fsync per file costs a
journal commit each (~150 µs of CPU, ~1 ms of wall on the project machine; 1,000 partitions were
1,000 commits): one syncfs after writing them all costs one.
"""

from __future__ import annotations

import os
import sys

KERNEL_MIN = (5, 8)  # syncfs reports writeback errors from this version on
_syncfs = None  # libc's syncfs, once looked up; False when unavailable


def available() -> bool:
    """syncfs is there and reports errors (Linux 5.8 or later)."""
    global _syncfs
    if _syncfs is None:
        _syncfs = False
        if sys.platform.startswith("linux") and _kernel_version() >= KERNEL_MIN:
            import ctypes

            try:
                libc = ctypes.CDLL(None, use_errno=True)
                _syncfs = libc.syncfs
                _syncfs.argtypes = [ctypes.c_int]
            except (OSError, AttributeError):
                _syncfs = False
    return _syncfs is not False


def _kernel_version() -> tuple[int, int]:
    try:
        major, minor = os.uname().release.split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


class SyncedTogether:
    """Descriptors on the folders `paths` (log directories), opened before the writes one syncfs
    per filesystem must cover; close() releases them."""

    def __init__(self, paths: list[str]) -> None:
        assert available()
        self.fds: dict[str, int] = {}  # path -> descriptor
        self.devices: dict[str, int] = {}  # path -> its filesystem (st_dev)
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue  # a lost directory: its replicas fail their appends, which says so
            self.fds[path] = fd
            self.devices[path] = os.fstat(fd).st_dev

    def sync(self, paths: set[str]) -> set[int]:
        """syncfs once per filesystem holding one of `paths` (folders opened above); returns the
        filesystems synced. Raises OSError (with the path) if one reports a writeback error."""
        import ctypes

        done: set[int] = set()
        for path in sorted(paths):
            device = self.devices[path]
            if device in done:
                continue
            if _syncfs(self.fds[path]) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), path)
            done.add(device)
        return done

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

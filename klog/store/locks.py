"""OS file locks that serialize writers of one partition across processes."""

from __future__ import annotations

import _thread
import fcntl
import os
import struct
import threading
from collections.abc import Callable

from klog.errors import PartitionClosedError
from klog.store.names import fit_partition_file, open_nofollow

GENERATION = struct.Struct(">Q")
_get_ident = threading.get_ident
# (threading.RLock's C type itself: threading.RLock is a Python function that returns one, a
# frame more at each of the 1,000 partitions a producer may open)
_RLock = _thread.RLock
GENERATION_MASK = (1 << 64) - 1


class FileLock:
    """An exclusive flock(2) on a lock file; re-entrant within one object and thread, released on exit or crash."""

    def __init__(self, path: str, fitted: bool = False) -> None:
        """`path` ends in `.lock`; `<topic>-<partition>.lock` too long for a file name becomes its
        short form (names.fit_partition_file, the stem the partition's state file has too;
        fitted: the caller found it fits)."""
        self.path = path if fitted else fit_partition_file(path, ".lock")
        self._fd: int | None = None
        self._depth = 0
        # Every change of hands (by any process, or another FileLock object) counts itself in the
        # lock file's first 8 bytes. A holder that finds the count it wrote last time knows nobody
        # else held the lock since, and leaves it as it is (one pread, no write: each count is
        # written by one acquisition, so every other holder finds a count not its own and writes
        # the next). `generation` names this hold: (the count, this object's hold number; its
        # own holds in between, the cleaner's say, count too); `previous_generation` the last
        # hold's, when no one else held the lock since (else the count found is not this one's).
        self._count = -1
        self._holds = 0
        self.generation: tuple[int, int] = (-1, 0)
        self.previous_generation: tuple[int, int] = (-1, -1)
        self._threads = _RLock()
        self._owner: int | None = None  # the thread holding it (readers in other threads must not count as holders)
        self._closed = False

    def acquire(self, blocking: bool = True, wait_threads: bool = True) -> bool:
        """blocking=False: only if no other process holds the file lock now (returns whether it
        took the lock; other threads of this process are still waited for, unless wait_threads
        is False too: an event loop that must not wait at all)."""
        # flock excludes processes; this, the threads of one (the idle flusher)
        if not self._threads.acquire(wait_threads or blocking):  # (blocking, positional: no keyword parsing)
            return False
        if self._closed:
            self._threads.release()
            raise PartitionClosedError(f"partition closed meanwhile ({os.path.basename(self.path)[:-5]}): "
                                       "its topic was deleted or re-created")
        if self._depth == 0:
            found = self._lock_the_file_at_path(blocking)
            if found is None:
                self._threads.release()
                return False
            self.previous_generation = (found, self._holds)
            if found != self._count:
                # a new lock file's count starts anywhere, not at 1: a topic deleted and created
                # again (by any process) gets a new file, and a holder of the old one (whose
                # descriptor was closed meanwhile: PartitionWriter's least recently written)
                # must not find its own count there again and trust its view of the old files
                self._count = (found + 1) & GENERATION_MASK if found else GENERATION.unpack(os.urandom(8))[0]
                os.pwrite(self._fd, GENERATION.pack(self._count), 0)
            self._holds += 1
            self.generation = (self._count, self._holds)
            self._owner = _get_ident()
        self._depth += 1
        return True

    def _lock_the_file_at_path(self, blocking: bool = True) -> int | None:
        """flock the file now at self.path; the count found in it. A topic delete (in any process)
        unlinks the lock files while holding them, so a writer that waited on the old file locks
        the one at the path instead (two holders of two files would be two writers of one
        partition). That delete's acquisition wrote a new count, so a file still holding the count
        this object wrote was not unlinked since: then no fstat is needed. None: blocking=False and
        another process holds it."""
        try:
            while True:
                if self._fd is None:
                    self._fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT, noatime=True)
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return None  # (blocking=False: another process holds it)
                try:
                    found = GENERATION.unpack(os.pread(self._fd, GENERATION.size, 0))[0]
                except struct.error:  # a new (empty) lock file
                    found = 0
                if found == self._count:  # nobody held it since this object did
                    return found
                # still linked: the file at the path (klog unlinks lock files, never renames
                # them), so one fstat says it (no stat of the path beside it)
                if os.fstat(self._fd).st_nlink > 0:
                    return found
                os.close(self._fd)  # unlinked meanwhile: open it again (closing releases the flock)
                self._fd = None
                # the new file's counts start again and can reach the one this object wrote in the
                # old file (a topic deleted and created again, another process's writes since):
                # that must not read as "nobody held it since" (an append trusting its open files
                # would go to the deleted ones, acknowledged and lost), and this hold must write a
                # count of its own, so that the other writer does not trust its files either
                self._count = -1
                self._holds += 1  # (previous_generation then names no hold of this object's)
        except BaseException:
            self._threads.release()
            raise

    def unchanged_since_held(self) -> bool:
        """Not held now, by anyone in this process: has nobody (in any process) taken the lock
        since this object last held it? One pread of the lock file's count, no lock taken: the
        answer can be overtaken at once, as any look without the lock."""
        fd = self._fd
        if fd is None or self._depth or self._closed:
            return False
        try:
            found = GENERATION.unpack(os.pread(fd, GENERATION.size, 0))[0]
        except (OSError, struct.error):
            return False
        return found == self._count

    @property
    def held(self) -> bool:
        """By the calling thread, through this object."""
        return self._depth > 0 and self._owner == _get_ident()

    def held_generation(self) -> tuple[int, int] | None:
        """This hold's generation when the calling thread holds the lock through this object, else
        None (a partition's state file serves what the holder read or wrote from memory)."""
        return self.generation if self._depth > 0 and self._owner == _get_ident() else None

    def release(self) -> None:
        if self._closed:  # closed by this thread while it held it (close waits for the others)
            self._threads.release()
            return
        assert self._depth > 0, self.path
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def run_if_idle(self, action: Callable[[], None]) -> bool:
        """Run `action` unless a thread of this process holds the lock or is taking it (no thread
        can take it meanwhile); returns whether it ran."""
        if not self._threads.acquire(blocking=False):
            return False
        try:
            if self._depth:
                return False
            action()
            return True
        finally:
            self._threads.release()

    def close_file(self) -> None:
        """Close the lock file while nobody holds the lock (run_if_idle); unlike close(), the next
        acquire() opens it again."""
        assert self._depth == 0, self.path
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Close the lock file once no other thread holds the lock: a partition's files are closed
        only when nobody is writing them; later acquire() calls raise PartitionClosedError."""
        with self._threads:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                self._depth = 0
                self._owner = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

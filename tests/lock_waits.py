"""Which processes hold or wait for a file lock (Linux's /proc/locks): tests that make two processes
race for a partition's lock use it to know the one meant to go first is waiting, or holds it."""

from __future__ import annotations

import time
from collections.abc import Callable


def lockers(inode: int) -> tuple[set[int], set[int]]:
    """The processes holding, and those waiting for, a flock of the file `inode`."""
    held, waiting = set(), set()
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()[1:]
            blocked = fields[0] == "->"
            fields = fields[1:] if blocked else fields
            if fields[0] == "FLOCK" and int(fields[4].rsplit(":", 1)[1]) == inode:
                (waiting if blocked else held).add(int(fields[3]))
    return held, waiting


def until(check: Callable[[], object], what: str, seconds: float = 30) -> None:
    """Polls `check` until it is true; fails naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)

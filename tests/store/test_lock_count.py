"""The partition lock's count of holders: taken again by its last holder it costs a pread and no
write, yet every other holder (another process, another lock object, this object's own holds in
between) is still seen, and a lock file a topic delete unlinked is still left for the one at
the path.

Method: FileLock on a file in tmp_path; another process takes it with a one-line Python child.
"""

from __future__ import annotations

import os
import subprocess
import sys

from klog.store.locks import FileLock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _hold_in_another_process(path: str) -> None:
    code = "import sys; from klog.store.locks import FileLock\nwith FileLock(sys.argv[1]): pass"
    subprocess.run([sys.executable, "-c", code, path], check=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO})


def _counting_pwrites(monkeypatch) -> list[bytes]:
    writes: list[bytes] = []
    real = os.pwrite

    def counting(fd: int, data: bytes, offset: int) -> int:
        writes.append(bytes(data))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", counting)
    return writes


def test_the_last_holder_retaking_the_lock_writes_nothing_and_sees_that_nobody_held_it(tmp_path, monkeypatch):
    lock = FileLock(str(tmp_path / "t-0.lock"))
    with lock:
        held_before = lock.generation
    writes = _counting_pwrites(monkeypatch)
    with lock:
        assert lock.previous_generation == held_before  # nobody else: what a writer trusts
    assert writes == []


def test_a_hold_by_another_process_in_between_is_seen(tmp_path):
    path = str(tmp_path / "t-0.lock")
    lock = FileLock(path)
    with lock:
        held_before = lock.generation
    _hold_in_another_process(path)
    with lock:
        assert lock.previous_generation != held_before
    again = lock.generation
    with lock:  # and the count this hold wrote is its own again
        assert lock.previous_generation == again


def test_holds_by_another_lock_object_or_by_this_one_in_between_are_seen(tmp_path):
    path = str(tmp_path / "t-0.lock")
    lock, other = FileLock(path), FileLock(path)
    with lock:
        appended = lock.generation  # say, the last append's
    with other:
        pass
    with lock:
        assert lock.previous_generation != appended
        appended = lock.generation
    with lock:  # this object's own hold in between (the cleaner's, retention's)
        pass
    with lock:
        assert lock.previous_generation != appended


def test_a_lock_file_unlinked_by_its_holder_is_left_for_the_one_at_the_path(tmp_path):
    path = str(tmp_path / "t-0.lock")
    lock, deleter = FileLock(path), FileLock(path)
    with lock:
        pass  # keeps its descriptor open
    with deleter:
        os.unlink(path)  # as a topic delete does
    with open(path, "wb"):
        pass  # the topic created again
    with lock:
        held, there = os.fstat(lock._fd), os.stat(path)
        assert (held.st_ino, held.st_dev) == (there.st_ino, there.st_dev)


def _new_file_holding(path: str, count: int) -> None:
    """The topic created again, its lock file already counting (another process's holds)."""
    with open(path, "wb") as f:
        f.write(count.to_bytes(8, "big"))


def test_a_new_lock_file_at_the_path_never_reads_as_unchanged(tmp_path):
    """Whatever count the new file holds (one equal to this object's own, written by other holds
    of the new file), the first hold after the old file was unlinked sees that others held the
    lock, and writes a count of its own (the other writer then sees this hold too)."""
    path = str(tmp_path / "t-0.lock")
    lock, deleter = FileLock(path), FileLock(path)
    with lock:
        appended = lock.generation  # keeps its descriptor open
    with deleter:
        os.unlink(path)
    _new_file_holding(path, appended[0])
    with lock:
        assert lock.previous_generation != appended
        written = lock.generation[0]
    assert written != appended[0] and int.from_bytes(open(path, "rb").read(8), "big") == written


def test_a_new_lock_file_never_starts_at_a_count_a_closed_holder_wrote(tmp_path):
    """A holder that closed its descriptor (a writer's least recently written partition) and
    opens the file at the path again cannot tell a new file from its own: the counts of each new
    file start anywhere, so a new file's holds never give it back its own count."""
    path = str(tmp_path / "t-0.lock")
    lock, deleter = FileLock(path), FileLock(path)
    with lock:
        appended = lock.generation
    lock.close_file()
    with deleter:
        os.unlink(path)
    another = FileLock(path)  # the topic created again, written once by another process
    with another:
        pass
    another.close()
    with lock:
        assert lock.previous_generation != appended

"""klog.store.uring: the io_uring klog serve's event loop fsyncs through (where the kernel has one)."""

from __future__ import annotations

import os
import select

import pytest

from klog.store import uring


@pytest.fixture
def ring():
    ring = uring.Ring.open(4)
    if ring is None:
        pytest.skip("no io_uring on this kernel (or forbidden): klog serve appends in threads")
    yield ring
    ring.close()


def _wait(ring: uring.Ring, count: int) -> list[tuple[int, int]]:
    poller = select.poll()
    poller.register(ring.fileno(), select.POLLIN)
    done: list[tuple[int, int]] = []
    for _ in range(100):  # (bounded: each poll waits at most 100 ms)
        if len(done) >= count:
            break
        poller.poll(100)
        done += ring.completions()
    return done


def test_an_fsync_completes_with_its_token_and_the_descriptor_polls_readable(ring, tmp_path):
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR)
    try:
        os.write(fd, b"x" * 100)
        ring.fsync(fd, 7)
        assert ring.in_flight == 1
        assert _wait(ring, 1) == [(7, 0)]
        assert ring.in_flight == 0 and ring.completions() == []
    finally:
        os.close(fd)


def test_a_failed_fsync_says_its_errno(ring):
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)  # (a closed descriptor: EBADF)
    ring.fsync(fd, 1)
    assert _wait(ring, 1) == [(1, -9)]


def test_a_full_ring_refuses_before_queueing(ring, tmp_path):
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR)
    try:
        for token in range(ring.entries):
            ring.fsync(fd, token)
        with pytest.raises(OSError, match="full"):
            ring.fsync(fd, 99)
        assert sorted(t for t, _ in _wait(ring, ring.entries)) == list(range(ring.entries))
        ring.fsync(fd, 100)  # room again
        assert _wait(ring, 1) == [(100, 0)]
    finally:
        os.close(fd)

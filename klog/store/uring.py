"""fsync without a thread: a small io_uring (Linux 5.1+) that queues fsyncs and reports them done.

klog serve's event loop appends a produced batch and must then wait for its fsync (klog fsyncs
every acknowledged batch by default) without blocking the other connections. A worker thread costs
a wake-up, the GIL handed over and back, and a second wake-up of the loop (~100-140 us of CPU per
request on the machines measured); here the kernel runs the fsync in its own worker and the ring's
descriptor becomes readable when it is done, which the loop already polls for.

The standard library has no io_uring, so the ring is driven with the raw system calls through
ctypes and its queues are read and written through mmap, as liburing does (without its helpers).
Only IORING_OP_FSYNC is used. Where the kernel lacks io_uring or forbids it (seccomp, the
io_uring_disabled sysctl), Ring.open() returns None and callers keep their thread.

Memory order: the submission tail is stored before io_uring_enter, a system call; completions are
read after the descriptor polled readable, and on x86-64 (the only architecture the ring is opened
on) loads are not reordered with other loads, so an entry is never read before the tail that
publishes it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct

SYS_IO_URING_SETUP = 425  # the same number on every architecture but alpha (Linux's unified table)
SYS_IO_URING_ENTER = 426
IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_FEAT_SINGLE_MMAP = 1
IORING_OP_FSYNC = 3
SQE_SIZE = 64
CQE_SIZE = 16

_PARAMS = struct.Struct("<7I12x" "7IIQ" "8IQ")  # io_uring_params: fields, sq_off, cq_off
_SQE = struct.Struct("<BBHiQQIIQHHiQQ")
_CQE = struct.Struct("<QiI")
_U32 = struct.Struct("<I")

_libc: ctypes.CDLL | None = None


def _syscall() -> ctypes._CFuncPtr:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fn = _libc.syscall
    fn.restype = ctypes.c_long
    return fn


class Ring:
    """An io_uring for fsyncs: fsync(fd, token) queues one and submits it; completions() returns
    the (token, result) of those done (result 0, or -errno). At most `entries` in flight."""

    def __init__(self, fd: int, params: tuple, entries: int) -> None:
        self.fd = fd
        self.entries = entries
        (sq_entries, cq_entries, _flags, _cpu, _idle, features, _wq,
         sq_head, sq_tail, sq_mask, _sq_ring_entries, _sq_flags, _dropped, sq_array, _r1, _ua1,
         cq_head, cq_tail, cq_mask, _cq_ring_entries, _overflow, cqes, _cq_flags, _r2, _ua2) = params
        sq_size = sq_array + sq_entries * 4
        cq_size = cqes + cq_entries * CQE_SIZE
        prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        self._maps: list[mmap.mmap] = []
        if features & IORING_FEAT_SINGLE_MMAP:
            sq = cq = self._map(max(sq_size, cq_size), IORING_OFF_SQ_RING, flags, prot)
        else:
            sq = self._map(sq_size, IORING_OFF_SQ_RING, flags, prot)
            cq = self._map(cq_size, IORING_OFF_CQ_RING, flags, prot)
        self._sqes = self._map(sq_entries * SQE_SIZE, IORING_OFF_SQES, flags, prot)
        self._sq, self._cq = sq, cq
        self._sq_head, self._sq_tail, self._sq_mask, self._sq_array = sq_head, sq_tail, sq_mask, sq_array
        self._cq_head, self._cq_tail, self._cq_mask, self._cqes = cq_head, cq_tail, cq_mask, cqes
        self._mask = _U32.unpack_from(sq, sq_mask)[0]
        self._cmask = _U32.unpack_from(cq, cq_mask)[0]
        self._enter = _syscall()
        self.in_flight = 0

    def _map(self, size: int, offset: int, flags: int, prot: int) -> mmap.mmap:
        m = mmap.mmap(self.fd, size, flags=flags, prot=prot, offset=offset)
        self._maps.append(m)
        return m

    @classmethod
    def open(cls, entries: int = 64) -> Ring | None:
        """A ring of `entries` submissions, or None where this kernel or its policy has none."""
        # x86-64 only: its stores and loads are ordered as the ring's protocol needs without the
        # barriers Python cannot issue (elsewhere a completion could be read before its entry)
        if os.uname().sysname != "Linux" or os.uname().machine not in ("x86_64", "amd64"):
            return None
        try:
            syscall = _syscall()
        except (OSError, AttributeError):
            return None
        raw = ctypes.create_string_buffer(_PARAMS.size)
        fd = syscall(SYS_IO_URING_SETUP, ctypes.c_uint(entries), raw)
        if fd < 0:
            return None  # ENOSYS (no io_uring), EPERM (forbidden), ENOMEM (locked-memory limit)
        try:
            return cls(fd, _PARAMS.unpack(raw.raw), entries)
        except (OSError, ValueError):
            os.close(fd)
            return None

    def fileno(self) -> int:
        return self.fd

    def fsync(self, fd: int, token: int) -> None:
        """Queue an fsync(2) of `fd` and submit it; raises OSError when it could not be submitted
        (the ring is full, or io_uring_enter failed: the caller fsyncs another way)."""
        if self.in_flight >= self.entries:
            raise OSError(11, "io_uring full")  # EAGAIN
        sq = self._sq
        tail = _U32.unpack_from(sq, self._sq_tail)[0]
        index = tail & self._mask
        _SQE.pack_into(self._sqes, index * SQE_SIZE, IORING_OP_FSYNC, 0, 0, fd, 0, 0, 0, 0, token, 0, 0, 0, 0, 0)
        _U32.pack_into(sq, self._sq_array + index * 4, index)
        _U32.pack_into(sq, self._sq_tail, (tail + 1) & 0xFFFFFFFF)
        got = self._enter(SYS_IO_URING_ENTER, self.fd, 1, 0, 0, None, 0)
        if got != 1:
            # not taken: take it back out of the queue (nobody else submits on this ring)
            _U32.pack_into(sq, self._sq_tail, tail)
            err = ctypes.get_errno() if got < 0 else 11
            raise OSError(err, f"io_uring_enter: {os.strerror(err)}")
        self.in_flight += 1

    def completions(self) -> list[tuple[int, int]]:
        """The (token, result) of every fsync done since the last call: result 0 or -errno."""
        cq = self._cq
        head = _U32.unpack_from(cq, self._cq_head)[0]
        tail = _U32.unpack_from(cq, self._cq_tail)[0]
        done = []
        while head != tail:
            token, res, _flags = _CQE.unpack_from(cq, self._cqes + (head & self._cmask) * CQE_SIZE)
            done.append((token, res))
            head = (head + 1) & 0xFFFFFFFF
        if done:
            _U32.pack_into(cq, self._cq_head, head)
            self.in_flight -= len(done)
        return done

    def close(self) -> None:
        """Close the ring (the kernel finishes or cancels what is in flight)."""
        for m in self._maps:
            m.close()
        self._maps = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

"""fsyncs the event loop awaits without a thread hop (klog.store.uring's ring, polled by the loop).

`fsyncs.sync_then(fds, then)` calls `then` once every descriptor is fsynced (with the OSError of
the first that failed). The ring's descriptor is one more reader of the loop's selector: the kernel's worker
runs each fsync, and the loop wakes once when it is done (a thread pool wakes a thread, hands it
the GIL, and wakes the loop again).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import logging
import os
from collections.abc import Callable

from klog.store.uring import Ring

log = logging.getLogger("klog.serve")

DISABLE_ENV = "KLOG_SERVE_NO_IO_URING"  # set (to anything): appends keep their thread (tests, odd kernels)


class LoopFsync:
    """One io_uring for a server's event loop; `available` False where there is none."""

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: int = 64) -> None:
        self.loop = loop
        self.ring = None if os.environ.get(DISABLE_ENV) else Ring.open(entries)
        self._waiting: dict[int, Callable[[int], None]] = {}
        self._tokens = itertools.count(1)
        if self.ring is not None:
            loop.add_reader(self.ring.fileno(), self._reaped)

    @property
    def available(self) -> bool:
        return self.ring is not None

    def room(self, count: int) -> bool:
        """Can `count` more fsyncs be queued now?"""
        return self.ring is not None and self.ring.in_flight + count <= self.ring.entries

    def sync_then(self, fds: list[int], then: Callable[[OSError | None], None]) -> None:
        """fsync each of `fds` (in the kernel's worker, side by side), then call `then(None)`, or
        `then(OSError)` of the first that failed, on the loop, from the completion itself: no task
        and no future between them (each is another turn of the loop). Raises OSError, with
        nothing queued, when they cannot be submitted; call after room(len(fds))."""
        assert self.ring is not None
        left = [len(fds)]
        failed: list[OSError] = []

        def one_done(fd: int, res: int) -> None:
            if res < 0 and not failed:
                failed.append(OSError(-res, f"fsync: {os.strerror(-res)}", f"descriptor {fd}"))
            left[0] -= 1
            if left[0] == 0:
                then(failed[0] if failed else None)

        for i, fd in enumerate(fds):
            token = next(self._tokens)
            try:
                self.ring.fsync(fd, token)
            except OSError:
                if i == 0:
                    raise
                # some are queued: the rest count as failed, `then` runs once those complete
                failed.append(OSError(errno.EIO, "fsync: could not be submitted", f"descriptor {fd}"))
                left[0] -= len(fds) - i
                return
            self._waiting[token] = functools.partial(one_done, fd)

    def _reaped(self) -> None:
        assert self.ring is not None
        for token, res in self.ring.completions():
            done = self._waiting.pop(token, None)
            if done is not None:
                try:
                    done(res)
                except Exception:  # noqa: BLE001 - one append's bookkeeping must not stop the others'
                    log.exception("after an fsync")

    async def close(self, timeout: float = 10.0) -> None:
        """Once the fsyncs in flight are done (each awaiting append finishes its bookkeeping),
        close the ring."""
        if self.ring is None:
            return
        deadline = self.loop.time() + timeout
        while self._waiting and self.loop.time() < deadline:
            await asyncio.sleep(0.001)
        if self._waiting:
            log.warning("closing with %d fsyncs still in flight", len(self._waiting))
        self.loop.remove_reader(self.ring.fileno())
        self.ring.close()
        self.ring = None
        waiting, self._waiting = self._waiting, {}
        for done in waiting.values():
            done(-errno.EIO)  # never acknowledged

"""One high-watermark watcher per server for every long-polling Fetch.

A fetch that has less than min_bytes registers the high watermarks it answered with and waits.
An append through this server wakes the waiters of that partition at once; appends by other
processes (a `klog produce` in a shell) are seen by ONE poll task that re-reads each watched
partition's high watermark every `poll_s` (a pread of its state file) and wakes the waiters
whose partition moved. The cost is per watched partition and tick, not per waiting connection:
200 consumers long-polling one partition cost one read per tick, and nothing runs while no fetch
waits. A tick waits at least POLL_WAIT_PER_READ times what the last tick's reads took (at most
POLL_WAIT_MAX): the reads of thousands of watched partitions take a bounded share of the thread
pool and the GIL, not most of it (this server's own appends still wake their waiters at once;
other processes' are seen a little later).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Key = tuple[str, int]  # (topic, partition)
# reads the current high watermarks of these partitions (None: unreadable, which wakes its waiters)
ReadMarks = Callable[[list[Key]], Awaitable[dict[Key, int | None]]]
# a tick's wait after reads that took t seconds: at least 9 t (the reads: at most a tenth of the
# time), at most POLL_WAIT_MAX (another process's append is seen within about that)
POLL_WAIT_PER_READ = 9.0
POLL_WAIT_MAX = 0.5


class _Waiter:
    __slots__ = ("marks", "future")

    def __init__(self, marks: dict[Key, int], future: asyncio.Future) -> None:
        self.marks = marks
        self.future = future

    def wake(self, moved: bool = True) -> None:
        if not self.future.done():
            self.future.set_result(moved)

    def time_out(self) -> None:
        self.wake(False)


class HighWatermarkWatcher:
    """Runs on the server's event loop (not thread-safe: call it from the loop only)."""

    def __init__(self, read_marks: ReadMarks, poll_s: float) -> None:
        self._read_marks = read_marks
        self.poll_s = poll_s
        self._by_key: dict[Key, set[_Waiter]] = {}
        self._everyone: set[_Waiter] = set()
        self._poller: asyncio.Task | None = None
        self.polls = 0  # ticks run (tests: nothing polls while no fetch waits)

    @property
    def waiting(self) -> int:
        return len(self._everyone)

    async def wait(self, marks: dict[Key, int], timeout_s: float) -> bool:
        """Until one of these partitions' high watermark differs from its mark, notify() names it
        (or names nothing): True; or `timeout_s` passes: False (as of the last poll, at most
        `poll_s` ago, nothing moved)."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter = _Waiter(marks, loop.create_future())
        self._everyone.add(waiter)
        for key in marks:
            self._by_key.setdefault(key, set()).add(waiter)
        if marks and (self._poller is None or self._poller.done()):
            self._poller = asyncio.create_task(self._poll())
        timer = loop.call_later(timeout_s, waiter.time_out)
        try:
            return await waiter.future
        finally:
            timer.cancel()
            self._everyone.discard(waiter)
            for key in marks:
                found = self._by_key.get(key)
                if found is not None:
                    found.discard(waiter)
                    if not found:
                        del self._by_key[key]

    def notify(self, key: Key | None = None) -> None:
        """An append through this server to `key`; None wakes every waiter (shutdown)."""
        targets = self._everyone if key is None else self._by_key.get(key, ())
        for waiter in list(targets):
            waiter.wake()

    async def _poll(self) -> None:
        wait = self.poll_s
        while self._by_key:
            await asyncio.sleep(wait)
            keys = list(self._by_key)
            if not keys:
                break
            self.polls += 1
            started = time.monotonic()
            try:
                seen = await self._read_marks(keys)
            except Exception:  # noqa: BLE001 - cannot tell: let the fetches look for themselves
                seen = {}
            took = time.monotonic() - started
            wait = max(self.poll_s, min(took * POLL_WAIT_PER_READ, POLL_WAIT_MAX))
            for key in keys:
                hw = seen.get(key)
                for waiter in list(self._by_key.get(key, ())):
                    if hw is None or waiter.marks.get(key) != hw:
                        waiter.wake()

    def close(self) -> None:
        self.notify()
        if self._poller is not None:
            self._poller.cancel()

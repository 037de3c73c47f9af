"""The one high-watermark watcher behind every long-polling Fetch (klog/server/watcher.py): its
polling costs per watched partition, not per waiting fetch, and it wakes only the right waiters."""

from __future__ import annotations

import asyncio
import time

from klog.server.watcher import HighWatermarkWatcher


class FakeStore:
    def __init__(self) -> None:
        self.marks: dict[tuple[str, int], int] = {}
        self.reads: list[int] = []  # partitions read per poll

    async def read(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        self.reads.append(len(keys))
        return {k: self.marks.get(k, 0) for k in keys}


def test_two_hundred_waiters_on_one_partition_cost_one_read_per_tick() -> None:
    store = FakeStore()

    async def main() -> float:
        watcher = HighWatermarkWatcher(store.read, 0.01)
        started = time.monotonic()
        await asyncio.gather(*(watcher.wait({("t", 0): 0}, 0.2) for _ in range(200)))
        assert watcher.waiting == 0
        return time.monotonic() - started

    took = asyncio.run(main())
    assert 0.15 < took < 2.0  # nobody woke early: the mark never moved
    assert store.reads and max(store.reads) == 1  # one partition read per tick, however many wait
    assert len(store.reads) <= took / 0.01 + 1  # one read per tick, not one per waiter


def test_another_process_append_wakes_only_the_waiters_of_its_partition() -> None:
    store = FakeStore()

    async def main() -> tuple[list[float], int]:
        watcher = HighWatermarkWatcher(store.read, 0.01)
        started = time.monotonic()

        async def waiter(partition: int) -> float:
            await watcher.wait({("t", partition): 0}, 1.0)
            return time.monotonic() - started

        tasks = [asyncio.create_task(waiter(p)) for p in (0, 0, 1)]
        await asyncio.sleep(0.05)
        store.marks[("t", 0)] = 5  # written by another process: seen at the next poll
        done = await asyncio.gather(*tasks)
        polls_while_waiting = watcher.polls
        await asyncio.sleep(0.1)  # nobody waits: nothing polls
        assert watcher.polls == polls_while_waiting
        return done, watcher.polls

    done, _ = asyncio.run(main())
    assert done[0] < 0.5 and done[1] < 0.5  # woken by the poll
    assert done[2] >= 0.9  # partition 1 never moved: its fetch waited its whole max_wait


def test_an_append_through_the_server_wakes_its_partition_at_once() -> None:
    store = FakeStore()

    async def main() -> tuple[float, bool]:
        watcher = HighWatermarkWatcher(store.read, 10.0)  # no poll within the test: only notify
        started = time.monotonic()
        mine = asyncio.create_task(watcher.wait({("t", 3): 0}, 5.0))
        other = asyncio.create_task(watcher.wait({("u", 3): 0}, 5.0))
        await asyncio.sleep(0.02)
        watcher.notify(("t", 3))
        await mine
        took = time.monotonic() - started
        other_done = other.done()
        watcher.close()  # shutdown: every waiter answers now
        await asyncio.wait_for(other, 1.0)
        return took, other_done

    took, other_done = asyncio.run(main())
    assert took < 1.0
    assert not other_done

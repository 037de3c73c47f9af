"""klog serve's thread pool (klog.server.hop.HopPool): a call awaited from the event loop gets its
result or its exception, run_in_executor works on it as on any Executor, the threads stay within
their bound, and shutdown runs what was queued before the threads end."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from klog.server.hop import HopPool, in_thread


def test_a_call_in_the_pool_answers_the_awaiting_task():
    pool = HopPool(2, thread_name_prefix="test-hop")

    def fail() -> None:
        raise OSError("disk gone")

    async def main() -> None:
        assert await in_thread(pool, lambda a, b: (a + b, threading.current_thread().name), 2, 3) == \
            (5, "test-hop_0")
        with pytest.raises(OSError, match="disk gone"):
            await in_thread(pool, fail)
        assert await asyncio.get_running_loop().run_in_executor(pool, divmod, 7, 2) == (3, 1)
        with pytest.raises(ZeroDivisionError):
            await asyncio.get_running_loop().run_in_executor(pool, divmod, 7, 0)

    try:
        asyncio.run(main())
    finally:
        pool.shutdown(wait=True)


def test_the_pool_stays_within_its_threads_and_shutdown_finishes_the_queue():
    pool = HopPool(2, thread_name_prefix="test-hop")
    release = threading.Event()
    names: set[str] = set()
    done: list[int] = []

    def work(i: int) -> None:
        names.add(threading.current_thread().name)
        release.wait(5)
        done.append(i)

    futures = [pool.submit(work, i) for i in range(6)]
    time.sleep(0.05)
    assert len(pool._threads) == 2  # six calls, two threads: the rest wait in the queue
    release.set()
    pool.shutdown(wait=True)
    assert sorted(done) == list(range(6)) and all(f.done() for f in futures)
    assert names <= {"test-hop_0", "test-hop_1"}
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int)


def test_calls_one_after_another_stay_on_one_warm_thread():
    """The thread idle for the shortest time takes the next call: a connection's hops, one after
    another, run on one thread (round-robin over the idle ones would wake a cold one each time)."""
    pool = HopPool(4, thread_name_prefix="test-hop")
    started = threading.Barrier(4, timeout=5)
    try:
        for f in [pool.submit(started.wait) for _ in range(4)]:  # four threads, all busy at once
            f.result(5)
        assert len(pool._threads) == 4

        async def main() -> set[str]:
            return {await in_thread(pool, lambda: threading.current_thread().name) for _ in range(20)}

        assert len(asyncio.run(main())) == 1
    finally:
        pool.shutdown(wait=True)


def test_an_answer_to_a_closed_loop_does_not_lose_the_thread():
    """A call still running when its server's loop closes: its answer is dropped, and the thread
    takes the next call (it is not left on the idle stack dead)."""
    pool = HopPool(1, thread_name_prefix="test-hop")
    release = threading.Event()

    async def start() -> None:
        in_thread(pool, release.wait, 5)  # not awaited: the loop closes with it running

    try:
        asyncio.run(start())
        release.set()
        assert pool.submit(lambda: 42).result(5) == 42
    finally:
        pool.shutdown(wait=True)

"""A call in a thread pool, awaited from the event loop, for less than `loop.run_in_executor`.

run_in_executor chains two futures (a concurrent.futures.Future with its Condition, then an asyncio
future copied from it by a callback the loop runs): ~20 us of the loop's CPU per request on top of
the wake-ups themselves. Here the worker hands its result straight to an asyncio future through one
call_soon_threadsafe. Cancelling the awaiting task abandons the call's result, as with run_in_executor
once its call has started.

HopPool is the thread pool these calls go to: ThreadPoolExecutor's submit makes a
concurrent.futures.Future (a Condition and its lock), a work item, takes two locks and a semaphore,
and its worker notifies the Condition and releases the semaphore after each call; here a call is one
closure on a SimpleQueue (~10 us of CPU less per hop on this machine's 2 cores). It is still an
Executor (submit, shutdown) for loop.run_in_executor and the rest of the server.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")


def _settle(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.done():  # the awaiting task was cancelled meanwhile
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


def in_thread(executor: Executor | None, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`fn(*args)` in `executor`'s threads; the returned future (of the running loop) gets its result."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, as run_in_executor does
            loop.call_soon_threadsafe(_settle, fut, None, e)
            return
        loop.call_soon_threadsafe(_settle, fut, result, None)

    if executor is None:
        return loop.run_in_executor(None, fn, *args)  # the loop's default pool
    if type(executor) is HopPool:
        executor.dispatch(work)
    else:
        executor.submit(work)
    return fut


class HopPool(Executor):
    """Up to `max_workers` threads (started as calls need them) taking calls from one queue, in order."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "klog-hop") -> None:
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting on the queue, not yet promised a call
        self._lock = threading.Lock()
        self._shutdown = False

    def dispatch(self, call: Callable[[], None]) -> None:
        """Run `call()` in a thread (it must not raise: in_thread's and submit's calls catch everything)."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
        self._queue.put(call)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - the future's holder sees it
                future.set_exception(e)
            else:
                future.set_result(result)

        self.dispatch(call)
        return future

    def _work(self) -> None:
        take = self._queue.get
        while True:
            call = take()
            if call is None:
                return
            call()
            del call  # (its closure holds the call's arguments and result: not until the next call)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The calls queued so far still run; then the threads end (joined when `wait`)."""
        with self._lock:
            if self._shutdown:
                threads = []
            else:
                self._shutdown = True
                threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

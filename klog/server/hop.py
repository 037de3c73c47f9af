"""A call in a thread pool, awaited from the event loop, for less than `loop.run_in_executor`.

run_in_executor chains two futures (a concurrent.futures.Future with its Condition, then an asyncio
future copied from it by a callback the loop runs): ~20 us of the loop's CPU per request on top of
the wake-ups themselves. Here the worker hands its result straight to an asyncio future through one
call_soon_threadsafe. Cancelling the awaiting task abandons the call's result, as with run_in_executor
once its call has started.

HopPool is the thread pool these calls go to: ThreadPoolExecutor's submit makes a
concurrent.futures.Future (a Condition and its lock), a work item, takes two locks and a semaphore,
and its worker notifies the Condition and releases the semaphore after each call; here a call is one
closure handed to the thread idle for the shortest time (see HopPool). It is still an
Executor (submit, shutdown) for loop.run_in_executor and the rest of the server.
"""

from __future__ import annotations

import asyncio
import collections
import functools
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

    def work() -> Callable[[], Any]:
        """The call; what it returns hands its result to the loop (a HopPool calls that once the
        thread is ready for the next call)."""
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, as run_in_executor does
            return functools.partial(loop.call_soon_threadsafe, _settle, fut, None, e)
        return functools.partial(loop.call_soon_threadsafe, _settle, fut, result, None)

    if executor is None:
        return loop.run_in_executor(None, fn, *args)  # the loop's default pool
    if type(executor) is HopPool:
        executor.dispatch(work)
    else:
        executor.submit(lambda: work()())
    return fut


class _Worker:
    """One thread of a HopPool: `wake` is released to hand it `call` (None: end)."""

    __slots__ = ("wake", "call", "thread")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.call: Callable[[], None] | None = None
        self.thread: threading.Thread | None = None


class HopPool(Executor):
    """Up to `max_workers` threads (started as calls need them) running calls in order of arrival.
    A call's answer to the loop (what it returns) is sent once its thread is back among the idle
    ones, its last Python before it blocks: the loop, woken by that answer, seldom finds the GIL
    still held (sending it from inside the call left the woken loop waiting on the GIL, two more
    context switches per hop). The thread idle for the shortest time takes the next call (a
    stack, not a queue): after a burst has started many threads, hops keep to one warm thread."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "klog-hop") -> None:
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._threads: list[threading.Thread] = []
        self._idle: list[_Worker] = []  # the most recently idle last
        self._pending: collections.deque[Callable[[], None]] = collections.deque()  # no thread free for them yet
        self._lock = threading.Lock()
        self._shutdown = False

    def dispatch(self, call: Callable[[], Callable[[], Any] | None]) -> None:
        """Run `call()` in a thread (it must not raise: in_thread's and submit's calls catch
        everything); what it returns, if not None, is called once the thread is ready for another
        call (in_thread's answer to the loop: the next hop finds this thread idle and warm)."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if self._idle:
                worker = self._idle.pop()
                worker.call = call
                worker.wake.release()
                return
            if len(self._threads) >= self._max_workers:
                self._pending.append(call)
                return
            worker = _Worker()
            worker.call = call
            worker.thread = threading.Thread(target=self._work, args=(worker,),
                                             name=f"{self._prefix}_{len(self._threads)}", daemon=True)
            self._threads.append(worker.thread)
        worker.thread.start()

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

    def _work(self, worker: _Worker) -> None:
        call = worker.call
        while call is not None:
            after = call()
            idle = False
            with self._lock:
                if self._pending:
                    call = self._pending.popleft()
                elif self._shutdown:
                    call = None
                else:
                    call = worker.call = None  # (its closure holds the call's arguments: not until the next call)
                    self._idle.append(worker)
                    idle = True
            if after is not None:
                try:
                    after()
                except RuntimeError:  # the loop closed meanwhile (a server stopped): nobody awaits the answer
                    pass
                del after
            if idle:  # until dispatch (or shutdown: None) hands it the next call
                worker.wake.acquire()
                call = worker.call

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The calls dispatched so far still run; then the threads end (joined when `wait`)."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            threads = list(self._threads)
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.call = None
            worker.wake.release()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

"""A call in a thread pool, awaited from the event loop, for less than `loop.run_in_executor`.

run_in_executor chains two futures (a concurrent.futures.Future with its Condition, then an asyncio
future copied from it by a callback the loop runs): ~20 us of the loop's CPU per request on top of
the wake-ups themselves. Here the worker hands its result straight to an asyncio future through one
call_soon_threadsafe. Cancelling the awaiting task abandons the call's result, as with run_in_executor
once its call has started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
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
    executor.submit(work)
    return fut

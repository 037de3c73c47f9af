"""One client connection as an asyncio Protocol: bytes in, whole size-prefixed frames out.

`data_received` cuts the incoming bytes into frames as they arrive (no reader task, no queue, no
StreamReader `readexactly` per frame with a timeout around each): the connection's request loop
(klog/server/server.py) takes a frame already there without suspending, so a small request costs
one turn of the event loop to arrive and one to be answered, instead of three. Frames are answered
in order, one at a time; up to READ_AHEAD whole frames (or more small ones, up to READ_AHEAD_FRAMES
within READ_AHEAD_BYTES) wait here (pipelining), then reading pauses until the request loop catches
up, so memory per connection stays bounded by the request size.

A request arriving while the request loop is parked with nothing else queued is begun right in
`data_received` (`start_eagerly`), and carried on from the completion of what it waits for (a
future's callback, or right where an fsync's completion completes it: `complete`), as Python
3.12's eager tasks would: the request loop is not woken at all, a turn of the event loop (~5 us of
CPU here) saved per request. The loop takes such a request over (a `Begun`, awaited as if the loop
had started it) when it has something else to do: frames queued behind it, the connection's end, a
cancellation; or when the request ends the connection or fails.

Writing goes through an ordinary asyncio.StreamWriter (flow control: FlowControlMixin), so
handlers, sendfile and TLS see the same writer as before.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from klog.protocol import framing

READ_AHEAD = 2  # whole frames held per connection before reading pauses...
# ...unless they are small: then up to READ_AHEAD_FRAMES of them within READ_AHEAD_BYTES (librdkafka
# sends one partition per Produce request: a wide topic's burst is read ahead and appended together)
READ_AHEAD_FRAMES = 64
READ_AHEAD_BYTES = 1 << 20


# Futures completed by `complete()`, on the loop, from a completion callback (an append's fsync
# through io_uring): a request begun in data_received that waits for one goes on right there, in
# that turn of the event loop, instead of in the next from the future's callback (the turn costs a
# select and a callback handle, ~10 us of CPU). The value: whom to resume (None: nobody, or the
# request loop's task, which waits through the future's callbacks as usual).
_direct: dict[asyncio.Future, Callable[[asyncio.Future], None] | None] = {}


def direct_future(loop: asyncio.AbstractEventLoop) -> asyncio.Future:
    """A future of `loop` that its maker completes with complete() (and must, exactly once)."""
    fut = loop.create_future()
    _direct[fut] = None
    return fut


def complete(fut: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Set the outcome of a direct_future (unless it was cancelled meanwhile) and resume the
    begun request waiting for it, now."""
    resume = _direct.pop(fut, None)
    if not fut.done():
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)
    if resume is not None:
        resume(fut)


class FrameProtocol(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """Cuts a connection's bytes into frames. `size_problem(size)` names why an announced frame
    size is refused (None: fine), checked as soon as the 4-byte prefix is in; `on_connection(self)`
    is started as the connection's task once the transport is ready (after a TLS handshake)."""

    def __init__(self, on_connection: Callable[[FrameProtocol], Coroutine[Any, Any, None]],
                 size_problem: Callable[[int], str | None]) -> None:
        super().__init__()
        self._on_connection = on_connection
        self._size_problem = size_problem
        self._buffer = bytearray()
        self._frames: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0  # of the frames held
        self._waiter: asyncio.Future | None = None
        # a request begun in data_received: waiting for a future (driven from its callback)...
        self._driven: tuple[Coroutine[Any, Any, Any], asyncio.Future] | None = None
        self._begun: Begun | None = None  # ...or for the request loop to take over
        # the request loop's: the coroutine handling a frame, begun in data_received; None where the loop
        # must take the frame itself. It returns True when the connection carries on
        self.start_eagerly: Callable[[bytes], Coroutine[Any, Any, bool] | None] | None = None
        self._closed: asyncio.Future = self._loop.create_future()
        self._paused_reading = False
        self.ended = False  # no frame will follow those queued
        self.end_reason: str | None = None  # why (logged by the request loop at warning level), None: a clean end
        self.transport: asyncio.Transport | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task | None = None
        self.security: Any = None  # the connection's klog.server.security.ConnectionSecurity, once its task runs
        self.last_active = self._loop.time()
        self.busy = False  # a request is being handled: not idle, whatever the time since its bytes came
        self.idled = False  # ended by connections.max.idle.ms
        self._idle_s = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None

    def close_when_idle(self, idle_s: float) -> None:
        """End the connection after `idle_s` with no bytes in and no request being handled: one
        timer per connection, re-armed when it fires early, never a timer per request."""
        self._idle_s = idle_s
        self._idle_timer = self._loop.call_at(self.last_active + idle_s, self._idle_check)

    def _idle_check(self) -> None:
        self._idle_timer = None
        if self.ended:
            return
        due = self.last_active + self._idle_s
        if self.busy or due > self._loop.time():
            self._idle_timer = self._loop.call_at(max(due, self._loop.time() + 0.001) if not self.busy
                                                  else self._loop.time() + self._idle_s, self._idle_check)
            return
        self.idled = True
        self._end(self.idle_problem() or None)

    # -- asyncio's side ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.writer = asyncio.StreamWriter(transport, self, None, self._loop)
        self.task = self._loop.create_task(self._on_connection(self))

    def data_received(self, data: bytes) -> None:
        if self.ended:
            return
        self.last_active = self._loop.time()
        buf = self._buffer
        if not buf and len(data) >= 4 and len(data) - 4 == framing.SIZE.unpack_from(data)[0]:
            # the usual read: one whole frame, nothing held before it (taken as it is, not copied
            # into the buffer and out again)
            size = len(data) - 4
            problem = self._size_problem(size)
            if problem is not None:
                self._end(problem)
            else:
                self._frames.append(bytes(data[4:]))  # (bytes of bytes: the slice itself)
                self._queued_bytes += size
        else:
            buf += data
            start, have = 0, len(buf)
            while have - start >= 4:
                (size,) = framing.SIZE.unpack_from(buf, start)
                problem = self._size_problem(size)
                if problem is not None:
                    self._end(problem)
                    break
                if have - start - 4 < size:
                    break
                with memoryview(buf) as view:  # one copy of the frame (a bytearray slice would make two)
                    self._frames.append(bytes(view[start + 4:start + 4 + size]))
                self._queued_bytes += size
                start += 4 + size
            if start:
                del buf[:start]
        if self._frames:
            if (len(self._frames) == 1 and self.start_eagerly is not None and self._waiter is not None
                    and not self._waiter.done() and self._driven is None and not self.ended
                    and self._begin(self._frames[0])):
                return
            if self._read_ahead_full() and not self._paused_reading:
                self._paused_reading = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            self._wake()

    def eof_received(self) -> bool:
        if self._buffer and not self.ended:
            self._end("truncated frame size" if len(self._buffer) < 4 else
                      f"truncated request ({framing.SIZE.unpack_from(self._buffer)[0]} bytes announced)")
        self._end(None)
        # half-closed: the queued requests are still answered (over TLS asyncio closes anyway)
        return self.transport is None or self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._end(None)
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future:
        return self._closed

    def _begin(self, frame: bytes) -> bool:
        """Start the request in `frame`, the only one here, while the request loop is parked (nothing
        in flight on this connection). False: the loop takes the frame as usual."""
        coro = self.start_eagerly(frame)  # type: ignore[misc]
        if coro is None:
            return False
        self._take()
        self._step(coro)
        return True

    def _step(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a begun request until it waits, as Task.__step runs a task: when it waits for a
        future of this loop, it goes on from that future's callback (_resume); when it ends the
        connection, fails, or waits for anything else, the request loop takes it over (a Begun)."""
        try:
            yielded = coro.send(None)
        except StopIteration as done:
            if done.value is True:
                return  # answered: the loop stays parked
            self._begun = Begun(result=done.value)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:  # noqa: BLE001 - raised where the loop awaits it, as if the loop had run it
            self._begun = Begun(error=e)
        else:
            # (an asyncio future of this loop, awaited: what Task.__step would wait for; not a Task)
            if type(yielded) is asyncio.Future and yielded._asyncio_future_blocking and yielded._loop is self._loop:
                yielded._asyncio_future_blocking = False
                self._driven = (coro, yielded)
                if yielded in _direct:
                    _direct[yielded] = self._resume
                else:
                    yielded.add_done_callback(self._resume)
                return
            self._begun = Begun(coro, yielded)  # (a bare yield, or something the task has to judge)
        self._wake()

    def _resume(self, fut: asyncio.Future) -> None:
        if self._driven is None or self._driven[1] is not fut:
            return  # taken over by the loop meanwhile
        coro, self._driven = self._driven[0], None
        self._step(coro)

    def _take_over(self) -> Begun | None:
        """The begun request, for the request loop to await, if there is one."""
        if self._driven is not None:
            (coro, fut), self._driven = self._driven, None
            if fut in _direct:
                _direct[fut] = None  # (the task waits through the future's callbacks)
            else:
                fut.remove_done_callback(self._resume)
            fut._asyncio_future_blocking = True  # (yielded to the task as the coroutine yielded it)
            return Begun(coro, fut)
        begun, self._begun = self._begun, None
        return begun

    # -- the request loop's side ---------------------------------------------------------------
    async def next_frame(self) -> bytes | Begun | None:
        """The next whole frame (without suspending when one is there), the request begun when it
        arrived (to await: its outcome), or None once the connection ended (end_reason says why)."""
        while True:
            begun = self._take_over()  # (before the frames: they came after it)
            if begun is not None:
                return begun
            if self._frames:
                return self._take()
            if self.ended:
                return None
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            except GeneratorExit:  # (the task destroyed while it waits: the request ends with it)
                begun = self._take_over()
                if begun is not None:
                    begun.close()
                raise
            except asyncio.CancelledError as e:
                # cancelled while a request begun here is in flight: the request gets the cancellation
                begun = self._take_over()
                if begun is None or not begun.interrupted(e):
                    raise
                return begun
            finally:
                self._waiter = None

    def has_frames(self) -> bool:
        """Whether a whole frame is already here, waiting."""
        return bool(self._frames)

    def queued_frame(self, api_key: int, api_version: int) -> bytes | None:
        """The next frame, taken only when it is already here and is a request of `api_key` v`api_version`
        (the request loop's lookahead: pipelined Produce requests appended together)."""
        if not self._frames or len(self._frames[0]) < framing.PREFIX.size:
            return None
        prefix = framing.read_prefix(self._frames[0])
        if prefix.api_key != api_key or prefix.api_version != api_version:
            return None
        return self._take()

    def _take(self) -> bytes:
        """The first held frame, resuming reading once there is room again."""
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if self._paused_reading and not self._read_ahead_full() and not self.ended:
            self._paused_reading = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        return frame

    def _read_ahead_full(self) -> bool:
        held = len(self._frames)
        return held >= READ_AHEAD and (held >= READ_AHEAD_FRAMES or self._queued_bytes >= READ_AHEAD_BYTES)

    def idle_problem(self) -> str:
        """What an idle close interrupts: nothing, or a request still arriving."""
        if len(self._buffer) >= 4:
            return f"truncated request ({framing.SIZE.unpack_from(self._buffer)[0]} bytes announced)"
        return ""

    def drop_queued(self) -> None:
        self._frames.clear()
        self._queued_bytes = 0

    def _end(self, reason: str | None) -> None:
        if self.ended:
            return
        self.ended = True
        self.end_reason = reason
        self._buffer = bytearray()
        if reason is not None and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()  # nothing more is read from a connection about to close
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Begun:
    """A request begun in `data_received` (FrameProtocol.start_eagerly), taken over by the request
    loop: awaiting it is awaiting its coroutine from where it stopped (the value it yielded goes to
    the loop's task first, then what the task sends or throws goes to the coroutine: `yield from`),
    or gives the result it already returned, or raises what it already raised."""

    __slots__ = ("_coro", "_yielded", "_thrown", "_result", "_error")

    def __init__(self, coro: Coroutine[Any, Any, Any] | None = None, yielded: Any = None, *,
                 result: Any = None, error: BaseException | None = None) -> None:
        self._coro = coro
        self._yielded = yielded
        self._thrown: BaseException | None = None
        self._result = result
        self._error = error

    def interrupted(self, error: BaseException) -> bool:
        """Throw `error` (the loop's task cancelled before it took the request over) into the
        request first, as a task's cancellation reaches the request it is running. A request that
        already failed keeps its failure (raised instead: logged, not swallowed by a cancellation
        that came after it). False: the request already ended otherwise (nothing to throw it into)."""
        if self._coro is None:
            return self._error is not None
        if not (isinstance(error, asyncio.CancelledError) and asyncio.isfuture(self._yielded)
                and self._yielded.cancel()):  # (as Task.cancel: what it waits on is cancelled, if it can be)
            self._thrown = error
        return True

    def close(self) -> None:
        """Close the request's coroutine, never to be awaited (its cleanup runs)."""
        coro, self._coro = self._coro, None
        if coro is not None:
            coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, self._coro = self._coro, None
        if coro is None:
            error, self._error = self._error, None
            if error is not None:
                raise error
            return self._result
        yielded, thrown = self._yielded, self._thrown
        self._yielded = self._thrown = None
        sent = None
        while True:
            if thrown is None:
                try:
                    sent = yield yielded
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as e:  # noqa: BLE001 - thrown in by the task (a cancellation): the request's
                    thrown = e
            try:
                if thrown is None:
                    yielded = coro.send(sent)
                else:
                    error, thrown = thrown, None
                    yielded = coro.throw(error)
            except StopIteration as done:
                return done.value

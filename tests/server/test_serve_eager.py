"""A request arriving while its connection's request loop waits is begun in data_received and goes on
from its future's callbacks (klog/server/connection.py): no turn of the event loop to wake the loop.
Requests stay answered in order, failures and closes behave as when the loop ran them, and a
cancellation (shutdown) reaches a begun request."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading

import pytest

from klog.protocol.apis import API_VERSIONS, FETCH, PRODUCE
from klog.server import Server
from klog.server import connection as connection_module
from klog.server import server as server_module
from klog.server.connection import Begun, FrameProtocol, complete, direct_future
from klog.server.listeners import Listener, SecurityConfig
from tests.serve_helpers import RawClient, batch, fetch_fields, produce, produce_request_fields, read_answer

pytest.importorskip("kio")


# -- the protocol alone: a fake transport, requests that record what they do ----------------------
class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def _frame(n: int) -> bytes:
    body = struct.pack(">hhi", 18, 0, n) + b"\x00\x00"  # an ApiVersions v0 header: correlation id n
    return struct.pack(">i", len(body)) + body


class _Connection:
    """A FrameProtocol with a request loop like the server's: `waits[n]` is the future request n
    awaits (none: it completes at once), `outcome[n]` what it returns or raises."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.taken: list[object] = []  # what the request loop itself took: frames, Begun requests
        self.waits: dict[int, asyncio.Future] = {}
        self.outcome: dict[int, object] = {}
        self.ended: BaseException | bool | None = None
        self.proto = FrameProtocol(self._loop_body, lambda size: None)
        self.proto.connection_made(_Transport())

    async def _request(self, frame: bytes) -> bool:
        n = struct.unpack_from(">i", frame, 4)[0]
        self.events.append(f"start {n}")
        try:
            if n in self.waits:
                self.events.append(f"got {await self.waits[n]}")
        except BaseException as e:
            self.events.append(f"{n}: {type(e).__name__}")
            raise
        outcome = self.outcome.get(n, True)
        if isinstance(outcome, BaseException):
            raise outcome
        self.events.append(f"done {n}")
        return outcome

    async def _loop_body(self, proto: FrameProtocol) -> None:
        proto.start_eagerly = self._request
        try:
            while True:
                item = await proto.next_frame()
                if item is None:
                    return
                self.taken.append(item)
                if not await (item if isinstance(item, Begun) else self._request(item)):
                    self.ended = False
                    return
        except BaseException as e:
            self.ended = e
            raise

    async def parked(self) -> None:
        for _ in range(5):  # the loop's task started and waits for a frame
            await asyncio.sleep(0)


def test_a_request_waiting_for_nothing_is_answered_in_data_received_and_the_loop_never_wakes():
    async def main() -> None:
        c = _Connection()
        await c.parked()
        c.proto.data_received(_frame(1))
        assert c.events == ["start 1", "done 1"]  # before any turn of the loop
        c.proto.data_received(_frame(2) + _frame(3)[:3])  # (a partial frame behind it changes nothing)
        assert c.events[2:] == ["start 2", "done 2"]
        await c.parked()
        assert c.taken == [] and c.proto.task is not None and not c.proto.task.done()
        c.proto.task.cancel()

    asyncio.run(main())


def test_a_waiting_request_goes_on_from_its_future_without_the_loop():
    async def main() -> None:
        c = _Connection()
        await c.parked()
        c.waits[1] = asyncio.get_running_loop().create_future()
        c.proto.data_received(_frame(1))
        assert c.events == ["start 1"]
        await c.parked()
        c.waits[1].set_result("x")
        await c.parked()
        assert c.events == ["start 1", "got x", "done 1"]
        assert c.taken == []  # the loop never woke
        c.proto.task.cancel()

    asyncio.run(main())


def test_frames_behind_a_waiting_request_wait_for_it_and_the_loop_takes_it_over():
    async def main() -> None:
        c = _Connection()
        await c.parked()
        c.waits[1] = asyncio.get_running_loop().create_future()
        c.proto.data_received(_frame(1))
        c.proto.data_received(_frame(2))  # not begun: request 1 is in flight
        c.proto.data_received(_frame(3))
        await c.parked()
        assert c.events == ["start 1"]
        c.waits[1].set_result("x")
        await c.parked()
        assert c.events == ["start 1", "got x", "done 1", "start 2", "done 2", "start 3", "done 3"]
        assert isinstance(c.taken[0], Begun) and c.taken[1:] == [_frame(2)[4:], _frame(3)[4:]]
        c.proto.data_received(_frame(4))  # idle again: begun as it arrives
        assert c.events[-2:] == ["start 4", "done 4"] and len(c.taken) == 3
        c.proto.task.cancel()

    asyncio.run(main())


@pytest.mark.parametrize("taken_over", [False, True])
def test_cancelling_the_loop_reaches_the_begun_request(taken_over):
    async def main() -> None:
        c = _Connection()
        await c.parked()
        waits = c.waits[1] = asyncio.get_running_loop().create_future()
        c.proto.data_received(_frame(1))
        if taken_over:  # a frame behind it: the loop awaits the begun request itself
            c.proto.data_received(_frame(2))
            await c.parked()
            assert isinstance(c.taken[0], Begun)
        c.proto.task.cancel()
        await c.parked()
        assert c.events == ["start 1", "1: CancelledError"]
        assert waits.cancelled() and c.proto.task.cancelled()
        assert isinstance(c.ended, asyncio.CancelledError)

    asyncio.run(main())


@pytest.mark.parametrize("waits", [False, True])
def test_a_begun_request_that_fails_or_ends_the_connection_hands_that_to_the_loop(waits):
    async def main() -> None:
        for outcome in (RuntimeError("boom"), False):
            c = _Connection()
            await c.parked()
            c.outcome[1] = outcome
            if waits:
                c.waits[1] = asyncio.get_running_loop().create_future()
            c.proto.data_received(_frame(1))
            if waits:
                await c.parked()
                c.waits[1].set_result("x")
            await c.parked()
            assert c.proto.task.done() and len(c.taken) == 1 and isinstance(c.taken[0], Begun)
            if outcome is False:
                assert c.ended is False and c.proto.task.result() is None
            else:
                assert c.ended is outcome and c.proto.task.exception() is outcome

    asyncio.run(main())


# -- a server: the same through real connections ------------------------------------------------
@pytest.fixture
def loop_takes(monkeypatch):
    """What the connections' request loops took themselves (frames, Begun requests)."""
    taken: list[object] = []
    original = FrameProtocol.next_frame

    async def counting(self):  # noqa: ANN001, ANN202
        item = await original(self)
        if item is not None:
            taken.append(item)
        return item

    monkeypatch.setattr(FrameProtocol, "next_frame", counting)
    return taken


def _api_versions(correlation: int) -> bytes:
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation, 1) + b"t"
    return struct.pack(">i", len(body)) + body


def test_produce_and_fetch_rounds_never_wake_the_request_loop(kafka_server, loop_takes):
    kafka_server.store.create_topic("rounds")
    with RawClient(kafka_server.port) as client:
        for i in range(5):
            assert produce(client, "rounds", 0, batch([b"v%d" % i])) == (0, i)
            resp = client.send(FETCH, 12, **fetch_fields("rounds", 0, i))
            assert resp.responses[0].partitions[0].error_code == 0
        client.sock.sendall(_api_versions(99))
        assert struct.unpack_from(">i", read_answer(client.sock))[0] == 99
    assert loop_takes == []  # without the eager start: 11 frames


def test_requests_behind_a_slow_produce_are_answered_after_it_in_order(kafka_server, loop_takes, monkeypatch):
    """The produce, begun as it arrives, waits until the requests sent behind it have arrived (held
    for their turn, not begun)."""
    protos: list[FrameProtocol] = []
    made = FrameProtocol.connection_made
    monkeypatch.setattr(FrameProtocol, "connection_made", lambda self, t: (protos.append(self), made(self, t))[1])
    handler = kafka_server.handlers[PRODUCE]
    started = threading.Event()

    async def slow(ctx, request):  # noqa: ANN001, ANN202
        started.set()
        for _ in range(500):  # (bounded: 5 s)
            if protos[0].has_frames():
                break
            await asyncio.sleep(0.01)
        return await handler.fn(ctx, request)

    monkeypatch.setitem(kafka_server.handlers, PRODUCE, handler._replace(fn=slow))
    kafka_server.store.create_topic("slow")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_kio_frame(PRODUCE, 9, 1, produce_request_fields(9, "slow", 0, batch([b"a"]))))
        assert started.wait(10)
        sock.sendall(_api_versions(2))  # alone: begun at once, it would be answered first
        correlations = [struct.unpack_from(">i", read_answer(sock))[0]]
        sock.sendall(_api_versions(3) + _api_versions(4))
        correlations += [struct.unpack_from(">i", read_answer(sock))[0] for _ in range(3)]
    assert correlations == [1, 2, 3, 4]
    assert isinstance(loop_takes[0], Begun)  # the loop took the produce over, then the others
    assert len(loop_takes) == 4


def _kio_frame(api_key: int, version: int, correlation: int, fields: dict) -> bytes:
    import io

    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    from klog.protocol.kafka import make
    from tests.serve_helpers import request_class

    cls = request_class(api_key, version)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=api_key, request_api_version=version,
                                                    correlation_id=correlation, client_id="t"))
    entity_writer(cls)(buf, make(cls, **fields))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    return sock.recv(64) == b""


def test_begun_requests_that_fail_or_close_do_as_before(kafka_server, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="klog.serve")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        body = struct.pack(">hhih", PRODUCE, 99, 5, 1) + b"t"  # a version klog does not speak
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert _closed(sock)
    handler = kafka_server.handlers[API_VERSIONS]

    async def broken(ctx, request):  # noqa: ANN001, ANN202
        raise RuntimeError("a bug")

    monkeypatch.setitem(kafka_server.handlers, API_VERSIONS, handler._replace(fn=broken))
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_api_versions(6))
        assert _closed(sock)
    for _ in range(100):  # (the close is logged by the connection's task)
        if caplog.text.count("closed") >= 2:
            break
        threading.Event().wait(0.02)
    assert "Produce v99 is not supported" in caplog.text
    assert "closing connection after an internal error: RuntimeError: a bug" in caplog.text


def test_a_request_before_sasl_authentication_closes_the_connection(data_dir, caplog):
    import klog

    store = klog.open(data_dir)
    cfg = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)])
    try:
        with Server(store=store, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server, \
                socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            body = struct.pack(">hhih", 3, 1, 7, 1) + b"x" + struct.pack(">i", -1)  # Metadata v1
            sock.sendall(struct.pack(">i", len(body)) + body)
            assert _closed(sock)
    finally:
        store.close()
    assert "api key 3 before SASL authentication, closing" in caplog.text


def test_stopping_cancels_a_begun_request_still_waiting(data_dir, monkeypatch):
    monkeypatch.setattr(server_module, "SHUTDOWN_GRACE_S", 0.2)
    seen: list[str] = []
    server = Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000)
    handler = server.handlers[API_VERSIONS]

    async def forever(ctx, request):  # noqa: ANN001, ANN202
        seen.append("started")
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    monkeypatch.setitem(server.handlers, API_VERSIONS, handler._replace(fn=forever))
    with server, socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_api_versions(1))
        for _ in range(500):
            if seen:
                break
            threading.Event().wait(0.01)
        server.close()
        assert _closed(sock)
    assert seen == ["started", "cancelled"]


def test_stopping_answers_a_long_polling_fetch_and_closes_its_connection(kafka_server, monkeypatch):
    """The fetch, begun as it arrived, ends the connection once answered: the server does not wait
    out its shutdown grace for a connection task that would never end by itself."""
    import datetime

    from kio.static.primitive import i32Timedelta

    kafka_server.store.create_topic("poll")
    with RawClient(kafka_server.port) as client:
        fields = fetch_fields("poll", 0, 0) | {"max_wait": i32Timedelta.parse(datetime.timedelta(seconds=60))}
        client.correlation += 1
        client.sock.sendall(_kio_frame(FETCH, 12, client.correlation, fields))
        for _ in range(500):  # the fetch is waiting (registered with the watcher)
            if kafka_server.watcher is not None and kafka_server.watcher.waiting:
                break
            threading.Event().wait(0.01)
        monkeypatch.setattr(server_module, "SHUTDOWN_GRACE_S", 30.0)
        stopped = threading.Thread(target=kafka_server.close)
        stopped.start()
        assert struct.unpack_from(">i", read_answer(client.sock))[0] == client.correlation
        assert _closed(client.sock)
        stopped.join(timeout=15)
        assert not stopped.is_alive()


def test_nothing_a_request_runs_needs_the_current_task_or_a_context_variable():
    """A begun request runs outside any task (in data_received, then in its futures' callbacks):
    asyncio.timeout, TaskGroup and current_task() fail there (and asyncio.wait_for from Python 3.12 on:
    it is asyncio.timeout there), and a context variable set there lands in the transport's reader
    context, shared by every request. Only tasks of their own may use them: the connection's
    (Server._connection) and the group coordinator's timer."""
    import re
    from pathlib import Path

    import klog

    root = Path(klog.__file__).parent
    found = [(str(path.relative_to(root)), line.strip())
             for package in ("server", "protocol", "broker", "security")
             for path in sorted((root / package).rglob("*.py")) for line in path.read_text().splitlines()
             if re.search(r"current_task\(|asyncio\.timeout|timeout_at\(|TaskGroup|ContextVar|asyncio\.wait_for\(",
                          line)]
    assert found == [("server/group_runtime.py", "await asyncio.wait_for(self._wake.wait(), timeout)"),  # (_run_timer)
                     ("server/server.py", "task = asyncio.current_task()"),  # (in Server._connection)
                     ("server/server.py", "await asyncio.wait_for(writer.wait_closed(), 1.0)")]


def test_a_begun_request_that_failed_is_reported_even_when_the_loop_is_cancelled_before_it_looks():
    """The request failed (a handler's bug) and its connection's loop is cancelled (the server
    stopping: the loop is not busy any more) before the loop took the failure over: the failure
    still reaches the loop (logged as an internal error), it is not swallowed by the cancellation."""
    async def main() -> None:
        c = _Connection()
        await c.parked()
        bug = RuntimeError("a bug")
        c.outcome[1] = bug
        c.proto.data_received(_frame(1))  # fails at once: handed to the loop, which has not run yet
        c.proto.task.cancel()
        await c.parked()
        assert c.events == ["start 1"]
        assert c.ended is bug and c.proto.task.exception() is bug

    asyncio.run(main())


def test_closing_the_loop_s_coroutine_closes_the_begun_request_too():
    """The request loop destroyed while it waits (its coroutine closed, as the garbage collector
    closes a pending task's): the request begun meanwhile is closed with it (its cleanup runs), not
    left waiting on its future nor answered with "coroutine ignored GeneratorExit"."""
    async def main() -> None:
        c = _Connection()
        await c.parked()
        c.proto.task.cancel()  # (this test drives the protocol's side by hand)
        await c.parked()
        proto = c.proto
        proto.start_eagerly = c._request
        waiting = proto.next_frame()
        assert waiting.send(None) is proto._waiter  # parked, as the loop's task would be
        waits = c.waits[1] = asyncio.get_running_loop().create_future()
        proto.data_received(_frame(1))
        waiting.close()  # (raises RuntimeError if next_frame ignores GeneratorExit)
        assert c.events == ["start 1", "1: GeneratorExit"]
        waits.set_result("late")
        await c.parked()
        assert c.events == ["start 1", "1: GeneratorExit"]  # nothing resumed it

    asyncio.run(main())


# -- futures completed directly (an fsync's completion): the request goes on inside complete() ----
def test_a_request_waiting_for_a_direct_future_goes_on_inside_complete():
    async def main() -> None:
        c = _Connection()
        await c.parked()
        fut = c.waits[1] = direct_future(asyncio.get_running_loop())
        c.proto.data_received(_frame(1))
        assert c.events == ["start 1"]
        complete(fut, "x")
        assert c.events == ["start 1", "got x", "done 1"]  # before any turn of the loop
        assert fut not in connection_module._direct
        await c.parked()
        assert c.taken == []
        c.proto.task.cancel()

    asyncio.run(main())


def test_a_direct_future_s_error_reaches_the_request_and_the_loop_judges_it():
    async def main() -> None:
        c = _Connection()
        await c.parked()
        fut = c.waits[1] = direct_future(asyncio.get_running_loop())
        c.proto.data_received(_frame(1))
        complete(fut, error=OSError("fsync failed"))
        assert c.events == ["start 1", "1: OSError"]
        await c.parked()
        assert isinstance(c.taken[0], Begun) and isinstance(c.ended, OSError)
        assert isinstance(c.proto.task.exception(), OSError)

    asyncio.run(main())


def test_a_request_taken_over_by_the_loop_waits_for_its_direct_future_as_for_any():
    async def main() -> None:
        c = _Connection()
        await c.parked()
        fut = c.waits[1] = direct_future(asyncio.get_running_loop())
        c.proto.data_received(_frame(1))
        c.proto.data_received(_frame(2))  # the loop takes request 1 over
        await c.parked()
        assert isinstance(c.taken[0], Begun) and connection_module._direct[fut] is None
        complete(fut, "x")
        assert c.events == ["start 1"]  # the task goes on from the future's callback, as a task does
        await c.parked()
        assert c.events == ["start 1", "got x", "done 1", "start 2", "done 2"]
        assert fut not in connection_module._direct
        c.proto.task.cancel()

    asyncio.run(main())


@pytest.mark.parametrize("taken_over", [False, True])
def test_a_cancelled_request_s_direct_future_completes_later_without_effect(taken_over):
    async def main() -> None:
        c = _Connection()
        await c.parked()
        fut = c.waits[1] = direct_future(asyncio.get_running_loop())
        c.proto.data_received(_frame(1))
        if taken_over:
            c.proto.data_received(_frame(2))
            await c.parked()
        c.proto.task.cancel()
        await c.parked()
        assert c.events == ["start 1", "1: CancelledError"] and fut.cancelled()
        complete(fut, "late")  # (the fsync completes after the cancellation: nothing to resume)
        await c.parked()
        assert c.events == ["start 1", "1: CancelledError"] and fut not in connection_module._direct

    asyncio.run(main())


def test_a_produce_is_answered_from_its_fsync_s_completion(kafka_server, monkeypatch):
    """The answer is written inside the completion's callback (Server._appended_on_loop, called by
    LoopFsync's reader), not a turn of the event loop later from the future's callbacks."""
    if not kafka_server.loop_fsync.available:
        pytest.skip("no io_uring here: appends fsync in a thread")
    written_inside: list[bool] = []
    writes = [0]
    original_write = asyncio.selector_events._SelectorSocketTransport.write
    original_appended = Server._appended_on_loop

    def write(self, data):  # noqa: ANN001, ANN202
        writes[0] += 1
        return original_write(self, data)

    def appended(self, *args):  # noqa: ANN001, ANN202
        before = writes[0]
        original_appended(self, *args)
        written_inside.append(writes[0] > before)

    monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", write)
    monkeypatch.setattr(Server, "_appended_on_loop", appended)
    kafka_server.store.create_topic("direct")
    with RawClient(kafka_server.port) as client:
        for i in range(6):  # (the first opens the partition, a replica check due takes another: threads)
            assert produce(client, "direct", 0, batch([b"v%d" % i])) == (0, i)
    assert written_inside and all(written_inside)


def test_an_append_published_on_the_loop_is_answered_when_its_follow_up_cannot_be_scheduled():
    """The batch is published, but the thread pool that would run retention after its roll refuses
    the work (shut down: a server stopping): the producer still gets its answer and the future
    leaves connection._direct (was: the answer never came, the entry and its request stayed)."""
    class Pending:
        rolled, to_release, topic, partition = True, None, "t", 0

        def done(self, error):  # noqa: ANN001, ANN202
            return "published"

    class Pool:
        def submit(self, *args):  # noqa: ANN002, ANN202
            raise RuntimeError("cannot schedule new calls after shutdown")

    class Fake:
        append_executor = Pool()
        appender = type("A", (), {"writer": type("W", (), {"after_roll": None})()})()

    async def main() -> None:
        fut = direct_future(asyncio.get_running_loop())
        with pytest.raises(RuntimeError):
            Server._appended_on_loop(Fake(), Pending(), fut, None)  # type: ignore[arg-type]
        assert fut.done() and fut.result() == "published"
        assert fut not in connection_module._direct

    asyncio.run(main())


def test_produces_answered_from_their_fsyncs_leave_no_direct_future_behind(kafka_server, monkeypatch):
    """Every produce appended on the loop makes a direct future (connection._direct); each leaves
    that table when its fsync completes, whether its request was begun eagerly or taken over by
    the connection's task (confluent-kafka pipelines several produces per connection)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    if not kafka_server.loop_fsync.available:
        pytest.skip("no io_uring here: appends fsync in a thread")
    kafka_server.store.create_topic("direct-many")  # (one partition a request: appended on the loop)
    made: list = []
    monkeypatch.setattr(server_module, "direct_future", lambda loop: made.append(direct_future(loop)) or made[-1])
    errors: list = []
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_server.bootstrap, "acks": "all",
                                         "linger.ms": 0, "max.in.flight.requests.per.connection": 5})
    for i in range(60):
        producer.produce("direct-many", b"v%d" % i,
                         on_delivery=lambda err, msg: err is not None and errors.append(err))
        if i < 10:  # one at a time (each request begun eagerly), then pipelined (taken over)
            assert producer.flush(30) == 0
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors
    loop = kafka_server._loop
    assert made and all(f.done() for f in made)
    assert not [f for f in list(connection_module._direct) if f.get_loop() is loop]
    assert kafka_server.store.partition("direct-many", 0).high_watermark() == 60

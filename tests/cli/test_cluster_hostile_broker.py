"""A broker whose answer's array claims more entries than the answer holds: the cluster client refuses
it in one line naming the broker and the API (exit 1), before kio's reader would reserve room for
every claimed entry (2**32 - 2 of them: 32 GiB, and the process aborted with SIGABRT).

Method: `klog serve` in this process behind a relay on 127.0.0.1 (an ephemeral port, advertised as
the broker's address, so every connection of the CLI goes through it). The relay passes each request
to the server and its answer back (ApiVersions, librdkafka's Metadata, ListOffsets...), except the
request of the API under test, answered with the hostile frame. The CLI runs as a subprocess: an
abort is its exit status, not this process's.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

import klog
from klog.protocol.apis import FETCH
from klog.server import Server
from tests.klog_processes import run_klog

RELAY_TIMEOUT_S = 30.0  # a relay thread gives up on a silent peer after this
LIST_TRANSACTIONS = 66  # (an API klog serve answers by kio's key table, no constant)
NEGATIVE_SIZE = b"negative size"  # an answer the relay sends as the 4 bytes of size -1 alone
HUGE_SIZE = b"huge size"  # an answer the relay sends as the 4 bytes of size 2**31 - 1 alone
COMPACT_COUNT_2_32_MINUS_2 = b"\xff\xff\xff\xff\x0f"  # uvarint 2**32 - 1: a compact array of 2**32 - 2


def _fetch_answer(correlation: int) -> bytes:
    """Fetch v7-v11 (not flexible: header v0): throttle, error, session, then `responses` claiming
    the most entries an int32 count can (2**31 - 1), in 4 bytes."""
    return struct.pack(">iihi", correlation, 0, 0, 0) + struct.pack(">i", 2**31 - 1)


def _list_transactions_answer(correlation: int) -> bytes:
    """ListTransactions v0 (flexible: header v1): throttle, error, then `unknown_state_filters` as a
    compact array claiming 2**32 - 2 entries, in 5 bytes."""
    return struct.pack(">ibih", correlation, 0, 0, 0) + COMPACT_COUNT_2_32_MINUS_2 + b"\0\0"


def _fetch_frame_of_minus_one_bytes(correlation: int) -> bytes:
    """A size that is no size (the relay sends what this returns after the size it counts)."""
    return NEGATIVE_SIZE


def _fetch_frame_of_2_gib(correlation: int) -> bytes:
    """A size no answer of klog's asking has (read as claimed: 2 GiB allocated, then a wait for them)."""
    return HUGE_SIZE


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _exactly(sock, 4)
    return None if head is None else _exactly(sock, struct.unpack(">i", head)[0])


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


class HostileRelay:
    """Relays frames between its clients and `upstream`; a request of `api_key` gets `answer(correlation)`."""

    def __init__(self, api_key: int, answer: Callable[[int], bytes]) -> None:
        self.api_key, self.answer = api_key, answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.hostile_sent = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def start(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._spawn(self._accept)

    def _spawn(self, target: Callable, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._sockets.append(client)
            self._spawn(self._relay, client)

    def _relay(self, client: socket.socket) -> None:
        assert self.upstream is not None
        client.settimeout(RELAY_TIMEOUT_S)
        with contextlib.suppress(OSError), socket.create_connection(self.upstream, timeout=RELAY_TIMEOUT_S) as up:
            self._sockets.append(up)
            while not self._stop.is_set():
                request = _read_frame(client)
                if request is None:
                    return
                api_key, _, correlation = struct.unpack_from(">hhi", request)
                if api_key == self.api_key:
                    answer = self.answer(correlation)
                    self.hostile_sent += 1
                else:
                    up.sendall(struct.pack(">i", len(request)) + request)
                    answer = _read_frame(up)
                    if answer is None:
                        return
                sizes_alone = {NEGATIVE_SIZE: -1, HUGE_SIZE: 2**31 - 1}
                framed = (struct.pack(">i", sizes_alone[answer]) if answer in sizes_alone
                          else struct.pack(">i", len(answer)) + answer)
                client.sendall(framed)

    def stop(self) -> None:
        self._stop.set()
        for s in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for thread in self._threads:
            thread.join(timeout=5)


@contextlib.contextmanager
def behind_relay(data_dir: str, relay: HostileRelay) -> Iterator[str]:
    """`klog serve` on data_dir advertising the relay's address; the bootstrap to give the CLI."""
    try:
        with Server(data_dir, listen=("127.0.0.1", 0), advertised=("127.0.0.1", relay.port),
                    idle_ms=30_000) as server:
            relay.start(("127.0.0.1", server.port))
            yield f"127.0.0.1:{relay.port}"
    finally:
        relay.stop()


@pytest.mark.parametrize(("api", "api_key", "answer", "command"), [
    ("Fetch", FETCH, _fetch_answer, ("consume", "t", "-e")),
    ("ListTransactions", LIST_TRANSACTIONS, _list_transactions_answer, ("transactions", "list")),
    ("Fetch", FETCH, _fetch_frame_of_minus_one_bytes, ("consume", "t", "-e")),
    ("Fetch", FETCH, _fetch_frame_of_2_gib, ("consume", "t", "-e")),
])
def test_an_array_past_the_answer_is_one_line_exit_1(data_dir, api, api_key, answer, command):
    with klog.open(data_dir) as s:
        s.create_topic("t", 1)
        with s.producer() as p:
            p.send("t", b"v")
    relay = HostileRelay(api_key, answer)
    with behind_relay(data_dir, relay) as bootstrap:
        r = run_klog(data_dir, *command, "-b", bootstrap, timeout=60)
    assert r.returncode != -signal.SIGABRT, r.stderr[-2000:]  # kio's reader asked for 32 GiB
    assert relay.hostile_sent >= 1, r.stderr  # the hostile answer was what the CLI read
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert bootstrap in lines[0] and f"malformed {api} answer" in lines[0], lines[0]
    assert "Traceback" not in r.stderr

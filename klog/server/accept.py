"""Listening sockets and the accept loop, with Kafka's connection limits.

asyncio's own accept loop, on EMFILE (no file descriptor left), logs a traceback and schedules a retry
for each of its 100 accept attempts per wake-up: tens of thousands of tracebacks a minute while the
process is out of descriptors. Here accepting backs off instead (one log line, then a pause doubling
up to ACCEPT_BACKOFF_MAX_S), and a connection beyond max.connections or max.connections.per.ip is
closed as soon as it is accepted, with one rate-limited log line (Kafka closes it the same way).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

from klog.server.limits import RateLimitedLog, ServeLimits

log = logging.getLogger("klog.serve")

ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 1.0
LISTEN_BACKLOG = 128
TLS_HANDSHAKE_TIMEOUT_S = 30.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for host:port (every address the name has, as asyncio's
    start_server binds them); OSError (address in use, unknown host) closes what was opened."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    out: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
            if port == 0:  # the other addresses of the name on the same picked port
                port = sock.getsockname()[1]
    except OSError:
        for sock in out:
            sock.close()
        raise
    return out


class ConnectionGate:
    """Open connections per client address and in all, against the limits."""

    def __init__(self, limits: ServeLimits) -> None:
        self.limits = limits
        self.total = 0
        self.by_host: dict[str, int] = {}
        self._refusals = RateLimitedLog(log)

    def admit(self, host: str) -> bool:
        """Count a new connection from `host`, or refuse it (False, one log line now and then)."""
        n = self.by_host.get(host, 0)
        if self.total >= self.limits.max_connections:
            self._refusals.warning("refusing a connection from %s: %d connections open (max.connections)", host,
                                   self.total)
            return False
        if n >= self.limits.per_ip(host):
            self._refusals.warning("refusing a connection from %s: it has %d open (max.connections.per.ip)", host, n)
            return False
        self.by_host[host] = n + 1
        self.total += 1
        return True

    def release(self, host: str) -> None:
        n = self.by_host.get(host, 0) - 1
        if n > 0:
            self.by_host[host] = n
        else:
            self.by_host.pop(host, None)
        self.total -= 1


class Acceptor:
    """Accepts on one listening socket until closed; each admitted connection gets a protocol from
    `protocol_factory()` (whose connection must call gate.release when it ends)."""

    def __init__(self, sock: socket.socket, gate: ConnectionGate, protocol_factory: Callable[[], asyncio.Protocol],
                 tls: Any = None) -> None:
        self.sock = sock
        self.gate = gate
        self.protocol_factory = protocol_factory
        self.tls = tls
        self._task: asyncio.Task | None = None
        self._closed = False
        self._out_of_resources = RateLimitedLog(log)
        self._handoffs: set[asyncio.Task] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._accept_loop())

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self.sock.close()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = ACCEPT_BACKOFF_MIN_S
        while not self._closed:
            try:
                conn, address = await loop.sock_accept(self.sock)
            except asyncio.CancelledError:
                return
            except OSError as e:
                if self._closed:
                    return
                if e.errno in _OUT_OF_RESOURCES:
                    self._out_of_resources.warning("cannot accept connections: %s (%d open); accepting again "
                                                   "in %.2f s", e.strerror or e, self.gate.total, backoff)
                else:  # ECONNABORTED and the like: that one connection, never a loop
                    log.info("accept failed: %s", e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX_S)
                continue
            backoff = ACCEPT_BACKOFF_MIN_S
            host = address[0] if isinstance(address, tuple) else str(address)
            if not self.gate.admit(host):
                conn.close()
                continue
            task = loop.create_task(self._hand_off(conn, host))
            self._handoffs.add(task)
            task.add_done_callback(self._handoffs.discard)

    async def _hand_off(self, conn: socket.socket, host: str) -> None:
        """The accepted socket with its protocol; TLS is negotiated here, not in the accept loop."""
        loop = asyncio.get_running_loop()
        try:
            conn.setblocking(False)
            await loop.connect_accepted_socket(self.protocol_factory, conn, ssl=self.tls,
                                               ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self.tls else None)
        except (OSError, asyncio.CancelledError, Exception) as e:  # noqa: BLE001 - a failed handshake: that client only
            log.info("connection from %s failed before its first request: %s", host, e)
            conn.close()
            self.gate.release(host)

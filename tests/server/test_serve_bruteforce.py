"""Password guessing against `klog serve`: 1,000 wrong SASL/PLAIN passwords.

Goal: every failed attempt is answered only after the configured delay (so guessing is slow),
refused with SASL_AUTHENTICATION_FAILED and the connection closed, while another client on the
same server keeps its usual latency. Method: 1,000 attempts from 50 concurrent raw connections
(asyncio, bounded by a timeout); meanwhile a client on a second (PLAINTEXT, loopback) listener
times Metadata requests; its median latency during the attack is compared with before it.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import struct
import time

import pytest

import klog
from klog.meta.credentials import CredentialsMeta
from klog.server import Server
from klog.server.listeners import Listener, SecurityConfig

DELAY_MS = 200
ATTEMPTS = 1000
CONCURRENCY = 50


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _frame(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    payload = struct.pack(">hhi", api_key, version, corr) + _string("guesser") + body
    return struct.pack(">i", len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def guess(port: int, password: str) -> tuple[int, float, bool]:
    """One attempt: (error code, seconds from the password to the answer, closed afterwards)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_frame(17, 1, 1, _string("PLAIN")))  # SaslHandshake v1
        handshake = await _read_frame(reader)
        assert struct.unpack_from(">ih", handshake) == (1, 0)
        token = b"\0alice\0" + password.encode()
        sent = time.monotonic()
        writer.write(_frame(36, 0, 2, struct.pack(">i", len(token)) + token))  # SaslAuthenticate v0
        answer = await _read_frame(reader)
        took = time.monotonic() - sent
        error = struct.unpack_from(">h", answer, 4)[0]
        closed = await reader.read(1) == b""
        return error, took, closed
    finally:
        writer.close()


async def attack(port: int) -> list[tuple[int, float, bool]]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> tuple[int, float, bool]:
        async with gate:
            return await guess(port, f"guess-{i}")

    return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(ATTEMPTS))), 120)


def metadata_latencies(port: int, seconds: float, out: list[float] | None = None) -> list[float]:
    """Metadata v1 round trips (all topics) on one connection for `seconds` (bounded), appended to
    `out` as they come (a probe thread's results stay visible if a later round trip fails)."""
    out = [] if out is None else out
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        end = time.monotonic() + seconds
        corr = 0
        while (time.monotonic() < end or not out) and corr < 100_000:  # at least one, however loaded
            corr += 1
            frame = _frame(3, 1, corr, struct.pack(">i", -1))
            start = time.monotonic()
            sock.sendall(frame)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            data = b""
            while len(data) < size:
                data += sock.recv(size - len(data))
            out.append(time.monotonic() - start)
            time.sleep(0.01)
    return out


@pytest.mark.slow
def test_thousand_wrong_passwords_are_slow_and_do_not_slow_others(data_dir):
    with klog.open(data_dir) as store:
        CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "the-right-one")
        store.create_topic("t")
    cfg = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0), Listener("PLAINTEXT", "127.0.0.1", 0)],
                         auth_failure_delay_ms=DELAY_MS)
    with Server(data_dir, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        sasl_port, plain_port = (server.ports[lst] for lst in server.listeners)
        before = metadata_latencies(plain_port, 1.0)
        import threading

        during: list[float] = []
        probe = threading.Thread(target=metadata_latencies, args=(plain_port, 3.0, during))
        started = time.monotonic()
        probe.start()
        results = asyncio.run(attack(sasl_port))
        elapsed = time.monotonic() - started
        probe.join(30)
    assert len(results) == ATTEMPTS
    assert all(error == 58 for error, _, _ in results)  # SASL_AUTHENTICATION_FAILED, every one
    assert all(closed for _, _, closed in results)
    assert min(took for _, took, _ in results) >= DELAY_MS / 1000
    assert elapsed >= ATTEMPTS / CONCURRENCY * DELAY_MS / 1000
    assert before and during, f"the Metadata probe got no answers ({len(before)} before, {len(during)} during)"
    p50_before, p50_during = statistics.median(before), statistics.median(during)
    print(f"1000 guesses in {elapsed:.1f} s; metadata p50 {p50_before * 1000:.1f} ms before, "
          f"{p50_during * 1000:.1f} ms during (p95 {sorted(during)[int(len(during) * 0.95)] * 1000:.1f} ms)")
    assert p50_during <= max(5 * p50_before, 0.05)


def _connect_from(local_port: int, server_port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.settimeout(10)
    sock.bind(("127.0.0.1", local_port))
    sock.connect(("127.0.0.1", server_port))
    return sock


def _round_trip(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    head = sock.recv(4, socket.MSG_WAITALL)
    assert len(head) == 4, "the server closed the connection instead of answering"
    return sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)


def test_one_client_port_on_two_listeners_keeps_two_identities(data_dir):
    """Linux lets one local port hold connections to two listeners at once (the brute-force test
    above met it by chance): a failed login on the SASL listener must not close, or authenticate,
    the same port's PLAINTEXT connection, and neither may take the other's identity."""
    with klog.open(data_dir) as store:
        CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "the-right-one")
        store.create_topic("t")
    cfg = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0), Listener("PLAINTEXT", "127.0.0.1", 0)],
                         auth_failure_delay_ms=10)
    with Server(data_dir, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        sasl_port, plain_port = (server.ports[lst] for lst in server.listeners)
        with socket.socket() as probe:  # a free local port to share
            probe.bind(("127.0.0.1", 0))
            local_port = probe.getsockname()[1]
        plain = _connect_from(local_port, plain_port)
        sasl = _connect_from(local_port, sasl_port)
        with plain, sasl:
            metadata = _frame(3, 1, 1, struct.pack(">i", -1))
            assert struct.unpack_from(">i", _round_trip(plain, metadata))[0] == 1
            handshake = _round_trip(sasl, _frame(17, 1, 1, _string("PLAIN")))
            assert struct.unpack_from(">ih", handshake) == (1, 0)
            token = b"\0alice\0wrong"
            answer = _round_trip(sasl, _frame(36, 0, 2, struct.pack(">i", len(token)) + token))
            assert struct.unpack_from(">h", answer, 4)[0] == 58  # SASL_AUTHENTICATION_FAILED
            assert sasl.recv(1) == b""  # and closed
            # the PLAINTEXT connection on the same client port still answers
            assert struct.unpack_from(">i", _round_trip(plain, _frame(3, 1, 2, struct.pack(">i", -1))))[0] == 2

"""klog serve cuts a connection's bytes into frames however they arrive (klog/server/connection.py):
many requests in one write, one request over many writes, a client that half-closes after sending,
a frame cut short by the client's close or by connections.max.idle.ms. Answers come in request order."""

from __future__ import annotations

import io
import logging
import socket
import struct
import time

import pytest

from klog.server import Server
from tests.serve_helpers import batch, produce_request_fields, request_class

pytest.importorskip("kio")

PIPELINED = 100  # more than the frames a connection holds before it stops reading (READ_AHEAD_FRAMES)


def api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (header v1: key, version, correlation id, client id; empty body)."""
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def produce_v9(correlation_id: int, topic: str) -> bytes:
    """A one-record Produce v9 request frame (acks=all): handled in the append threads, so the
    connection's request loop suspends while it is in progress."""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    from klog.protocol.kafka import make

    cls = request_class(0, 9)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=9,
                                                    correlation_id=correlation_id, client_id="test"))
    entity_writer(cls)(buf, make(cls, **produce_request_fields(9, topic, 0, batch([b"v"]))))
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


def read_answers(sock: socket.socket, count: int) -> list[int]:
    """The correlation ids of the next `count` answers (bounded by the socket's timeout)."""
    buf = b""
    out = []
    while len(out) < count:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(out)} of {count} answers"
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            size = struct.unpack_from(">i", buf)[0]
            out.append(struct.unpack_from(">i", buf, 4)[0])
            buf = buf[4 + size:]
    return out


def closed(sock: socket.socket) -> bool:
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


def test_many_requests_in_one_write_are_all_answered_in_order(kafka_server):
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join(api_versions_v0(i) for i in range(PIPELINED)))
        assert read_answers(sock, PIPELINED) == list(range(PIPELINED))
        sock.sendall(api_versions_v0(PIPELINED))  # reading resumed once the held frames were answered
        assert read_answers(sock, 1) == [PIPELINED]


def test_a_request_sent_a_byte_at_a_time_and_one_split_mid_header(kafka_server):
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in api_versions_v0(7):
            sock.sendall(bytes([byte]))
        two = api_versions_v0(8) + api_versions_v0(9)
        sock.sendall(two[:2])  # the second frame's size prefix cut in half
        time.sleep(0.05)
        sock.sendall(two[2:len(two) - 3])
        time.sleep(0.05)
        sock.sendall(two[len(two) - 3:])
        assert read_answers(sock, 3) == [7, 8, 9]


def test_requests_before_a_half_close_are_answered(kafka_server):
    kafka_server.store.create_topic("t", partitions=1)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        # the client's end of sending reaches the server while the Produce is being appended
        sock.sendall(api_versions_v0(1) + produce_v9(2, "t") + api_versions_v0(3))
        sock.shutdown(socket.SHUT_WR)  # `printf ... | nc`: done sending, still reading
        assert read_answers(sock, 3) == [1, 2, 3]
        assert closed(sock)
    assert kafka_server.store.partition("t", 0).snapshot().high_watermark == 1


def test_a_frame_cut_short_by_the_client_is_logged_and_the_rest_answered(kafka_server, caplog):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(api_versions_v0(1) + struct.pack(">i", 100) + b"\0\x12\0\0")
        sock.shutdown(socket.SHUT_WR)
        assert read_answers(sock, 1) == [1]
        assert closed(sock)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any("truncated request (100 bytes announced)" in r.getMessage()
                                                  for r in caplog.records):
        time.sleep(0.02)
    assert any("truncated request (100 bytes announced)" in r.getMessage() for r in caplog.records)


def test_an_oversized_frame_is_refused_before_its_bytes_arrive(kafka_server, caplog):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(api_versions_v0(1) + struct.pack(">i", kafka_server.request_bytes_max + 1))
        assert read_answers(sock, 1) == [1]  # what came before it is answered
        assert closed(sock)  # without the announced 100 MiB ever being sent
    assert any("invalid request size" in r.getMessage() for r in caplog.records)


def test_a_whole_frame_read_at_once_is_sized_checked_as_any(kafka_server, caplog):
    """One read holding exactly one whole frame (the usual request, taken without the buffer): a
    request after one answered, then a frame too short for a request header, refused and closed."""
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        for i in range(3):
            sock.sendall(api_versions_v0(i))
            assert read_answers(sock, 1) == [i]
        sock.sendall(struct.pack(">i", 2) + b"\0\x12")
        assert closed(sock)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any("invalid request size 2" in r.getMessage() for r in caplog.records):
        time.sleep(0.02)
    assert any("invalid request size 2" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_a_request_left_half_sent_is_closed_by_the_idle_timeout(data_dir, caplog):
    caplog.set_level(logging.INFO, logger="klog.serve")
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=300) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(api_versions_v0(1))
            assert read_answers(sock, 1) == [1]
            sock.sendall(struct.pack(">i", 50) + b"\0\x12")
            started = time.monotonic()
            assert closed(sock)
            assert time.monotonic() - started < 9
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as busy:
            # a connection whose requests keep coming is not idle, whatever its age
            for i in range(8):
                busy.sendall(api_versions_v0(i))
                assert read_answers(busy, 1) == [i]
                time.sleep(0.1)
    messages = [r.getMessage() for r in caplog.records]
    assert any("truncated request (50 bytes announced)" in m for m in messages)

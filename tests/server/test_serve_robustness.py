"""klog serve under bad input: broken frames, garbage, idle and many connections, a fuzz run.
The server must answer or close the one connection, log one line, and keep serving the others."""

from __future__ import annotations

import logging
import random
import socket
import struct
import time

import pytest

from klog.server import Server
from tests.serve_helpers import RawClient, batch, produce

pytest.importorskip("kio")


def healthy(server) -> bool:
    """A fresh connection still gets an ApiVersions answer."""
    with RawClient(server.port) as client:
        return client.send(18, 0).error_code == 0


def closed_by_server(sock: socket.socket, timeout: float = 5) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("size", [0, 3, -5, 100 * 1024 * 1024 + 1])
def test_bad_frame_sizes_close_the_connection_with_one_log_line(kafka_server, caplog, size):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with socket.create_connection(("127.0.0.1", kafka_server.port)) as sock:
        sock.sendall(struct.pack(">i", size) + b"\0" * 8)
        assert closed_by_server(sock)
    assert any("invalid request size" in r.getMessage() for r in caplog.records)
    assert healthy(kafka_server)


def test_truncated_frame_then_hang_up(kafka_server):
    with socket.create_connection(("127.0.0.1", kafka_server.port)) as sock:
        sock.sendall(struct.pack(">i", 100) + b"\0\x12\0\0" + b"x" * 10)
    assert healthy(kafka_server)


def test_unparseable_body_closes_only_that_connection(kafka_server, caplog):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with RawClient(kafka_server.port) as client:
        # Metadata v12 whose topic array claims 1000 entries that are not there
        client.send_raw(struct.pack(">hhih", 3, 12, 1, 1) + b"c" + b"\0" + b"\xe9\x07")
        assert closed_by_server(client.sock)
    assert any("cannot parse MetadataRequest v12" in r.getMessage() for r in caplog.records)
    assert healthy(kafka_server)


def test_idle_connection_is_closed_after_connections_max_idle(data_dir):
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=300) as server:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            started = time.monotonic()
            assert closed_by_server(sock, timeout=5)
            assert 0.2 < time.monotonic() - started < 3
        assert healthy(server)


@pytest.mark.slow
def test_many_idle_connections_do_not_stop_others(kafka_server):
    socks = []
    try:
        for _ in range(500):
            socks.append(socket.create_connection(("127.0.0.1", kafka_server.port)))
        kafka_server.store.create_topic("busy")
        with RawClient(kafka_server.port) as client:
            assert produce(client, "busy", 0, batch([b"x"])) == (0, 0)
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while len(kafka_server._connections) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(kafka_server._connections) == 0  # every closed client's task is gone


def _valid_frames() -> list[bytes]:
    """Well-formed requests of several APIs, to mutate."""
    import io

    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    from tests.serve_helpers import produce_request_fields

    frames = [struct.pack(">hhih", 18, 0, 1, 1) + b"c",
              struct.pack(">hhih", 3, 4, 2, 1) + b"c" + struct.pack(">i", -1) + b"\1"]
    from kio.schema.produce.v9.request import ProduceRequest

    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=9, correlation_id=3,
                                                    client_id="fuzz"))
    entity_writer(ProduceRequest)(buf, ProduceRequest(**produce_request_fields(9, "fz", 0, batch([b"a", b"b"]))))
    frames.append(buf.getvalue())
    # Fetch v4: replica -1, max wait 10 ms, min bytes 1, max bytes, isolation 0, one topic, one partition
    frames.append(struct.pack(">hhih", 1, 4, 4, 1) + b"c" + struct.pack(">iiiib", -1, 10, 1, 1 << 20, 0)
                  + struct.pack(">ih", 1, 2) + b"fz" + struct.pack(">iiqi", 1, 0, 0, 1 << 20))
    return frames


@pytest.mark.slow
def test_fuzz_random_and_mutated_frames(kafka_server):
    kafka_server.store.create_topic("fz")
    rng = random.Random(1234)
    frames = _valid_frames()
    deadline = time.monotonic() + 30
    sent = 0
    for i in range(400):
        if time.monotonic() > deadline:
            break
        if i % 4 == 0:
            frame = rng.randbytes(rng.randint(0, 200))
        else:
            frame = bytearray(rng.choice(frames))
            for _ in range(rng.randint(1, 6)):
                if not frame:
                    frame = bytearray(b"\0")
                op = rng.random()
                pos = rng.randrange(max(1, len(frame)))
                if op < 0.6:
                    frame[pos] = rng.randrange(256)
                elif op < 0.8:
                    del frame[pos:pos + rng.randint(1, 8)]
                else:
                    frame[pos:pos] = rng.randbytes(rng.randint(1, 8))
            frame = bytes(frame)
        with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=5) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            sock.settimeout(0.5)
            try:
                sock.recv(65536)  # an answer or a close, either is fine
            except (TimeoutError, ConnectionResetError):
                pass
        sent += 1
    assert sent >= 100
    assert healthy(kafka_server)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "fz", 0, batch([b"after"]))[0] == 0


def test_pipelined_requests_then_half_close_get_every_answer_then_a_close(kafka_server):
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=5) as sock:
        frames = b"".join(struct.pack(">i", 11) + struct.pack(">hhih", 18, 0, i, 1) + b"c" for i in range(5))
        sock.sendall(frames)
        sock.shutdown(socket.SHUT_WR)  # nothing more is coming
        answers = []
        data = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        while len(data) >= 4:
            (size,) = struct.unpack_from(">i", data)
            answers.append(struct.unpack_from(">i", data, 4)[0])
            data = data[4 + size:]
        assert answers == [0, 1, 2, 3, 4]  # in order, then the server closed its side
    deadline = time.monotonic() + 5
    while kafka_server._connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not kafka_server._connections

"""Kafka Connect's REST API against malformed and hostile requests: every refusal is Connect's JSON
{"error_code": N, "message": ...} with Kafka's status (400 bad body, 404 unknown path or connector, 405 method,
413 too large), no traceback reaches the worker's log, slow or many clients stall nobody, and a running
connector keeps running. A seeded campaign mixes them all (a longer one against a distributed worker is slow)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

import klog


@pytest.fixture
def port(data_dir):
    from klog.connect.rest import RestServer
    from klog.connect.worker import Worker

    store = klog.open(data_dir)
    worker = Worker(store, {"offset.flush.interval.ms": "200"})
    server = RestServer(worker, "127.0.0.1", 0).start()
    yield server.port
    server.close()
    worker.stop()
    store.close()


def exchange(port: int, data: bytes, timeout: float = 10.0) -> tuple[int | None, object]:
    """Send raw bytes, half-close, read the answer: (status or None, its JSON body or raw bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # answered and closed before all was sent (a refused method): read the answer
            pass
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    found = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    body = answer.partition(b"\r\n\r\n")[2]
    try:
        return (int(found.group(1)) if found else None), json.loads(body) if body else None
    except ValueError:
        return (int(found.group(1)) if found else None), body


def request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            timeout: float = 10.0) -> tuple[int | None, object]:
    headers = {"Host": "x", "Connection": "close", **(headers or {})}
    if body is not None and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
        headers["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return exchange(port, head.encode() + (body or b""), timeout)


def assert_error(answer: tuple[int | None, object], code: int) -> None:
    assert answer[0] == code and isinstance(answer[1], dict) and answer[1]["error_code"] == code \
        and isinstance(answer[1]["message"], str), answer


def source(tmp_path) -> dict:
    (tmp_path / "in.txt").write_text("a\n")
    return {"connector.class": "FileStreamSource", "file": str(tmp_path / "in.txt"), "topic": "lines",
            "value.converter": "string"}


def test_malformed_bodies_and_framing_are_refused_in_json(port, capfd):
    for length in ("abc", "-5", "1_0", " "):
        assert_error(request(port, "POST", "/connectors", b"{}", {"Content-Length": length}), 400)
    dup = b"POST /connectors HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}"
    assert_error(exchange(port, dup), 400)
    assert_error(request(port, "POST", "/connectors", b"[" * 100_000 + b"]" * 100_000), 400)  # RecursionError
    assert_error(request(port, "POST", "/connectors", b"{\xff"), 400)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as held:  # a claimed 1 GB, never sent
        held.sendall(b"PUT /connectors/x/config HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n{")
        assert held.recv(65536).startswith(b"HTTP/1.0 413 ")
    assert_error(request(port, "PUT", "/connectors/x/config", b"{}", {"Content-Length": str((16 << 20) + 1)}), 413)
    assert_error(request(port, "PUT", "/connectors/x/config", b"x" * (10 << 20)), 400)  # read, then refused
    assert "Traceback" not in capfd.readouterr().err


def test_a_chunked_body_is_read_as_http_1_1_sends_it(port, tmp_path):
    body = json.dumps({"name": "fs", "config": source(tmp_path)}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:])) + b"0\r\n\r\n"
    code, info = request(port, "POST", "/connectors", chunked, {"Transfer-Encoding": "chunked"})
    assert code == 201 and info["name"] == "fs"
    assert_error(request(port, "POST", "/connectors", b"zz\r\n{}\r\n0\r\n\r\n", {"Transfer-Encoding": "chunked"}),
                 400)
    assert_error(request(port, "POST", "/connectors", b"{}", {"Transfer-Encoding": "gzip"}), 501)


def test_methods_and_paths_answer_405_and_404_as_jersey_does(port, tmp_path, capfd):
    assert request(port, "POST", "/connectors", json.dumps({"name": "fs", "config": source(tmp_path)}).encode()
                   )[0] == 201
    for method in ("OPTIONS", "TRACE", "FOO", "POST"):
        assert_error(request(port, method, "/connectors/fs/status"), 405)
    assert_error(request(port, "PUT", "/connectors/fs"), 405)  # a known path, a method it does not answer
    assert_error(request(port, "PUT", "/connectors/nobody"), 405)  # the method is checked first, as in Jersey
    assert_error(request(port, "POST", "/"), 405)
    assert_error(request(port, "DELETE", "/connector-plugins"), 405)
    assert request(port, "HEAD", "/connectors")[0] == 405
    assert_error(request(port, "GET", "/connectors/fs/nope"), 404)
    assert_error(request(port, "GET", "/connector-plugins/config/validate"), 404)
    assert_error(request(port, "GET", "/connectors/nobody/status"), 404)
    for task in ("-1", "1", "x", "٣"):  # "-1" indexed the last task from the end
        assert_error(request(port, "GET", f"/connectors/fs/tasks/{task}/status"), 404)
    assert_error(exchange(port, b"\x01\x02 garbage\r\n\r\n"), 400)
    assert "Traceback" not in capfd.readouterr().err


def test_json_of_the_wrong_type_is_a_400(port):
    for body in (b"[1, 2]", b'"s"', b"1", b"null"):
        assert_error(request(port, "PUT", "/connector-plugins/FileStreamSource/config/validate", body), 400)
        assert_error(request(port, "PUT", "/connectors/x/config", body), 400)
        assert_error(request(port, "POST", "/connectors", body), 400)
    for name in (b"1", b'["x"]', b"null", b'""', b'"a/b"'):
        assert_error(request(port, "POST", "/connectors", b'{"name": %s, "config": {"connector.class": '
                                                          b'"FileStreamSource", "topic": "t"}}' % name), 400)


def test_slow_clients_are_cut_off_and_a_burst_of_clients_is_served(monkeypatch, data_dir):
    from klog.connect import rest
    from klog.connect.rest import RestServer
    from klog.connect.worker import Worker

    monkeypatch.setattr(rest, "IDLE_TIMEOUT_S", 1.0)
    with klog.open(data_dir) as store:
        worker = Worker(store, {})
        server = RestServer(worker, "127.0.0.1", 0).start()
        try:
            held = []
            for _ in range(20):  # slowloris: headers promise a body that never comes
                s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                s.sendall(b"POST /connectors HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
                held.append(s)
            assert request(server.port, "GET", "/connectors", timeout=5) == (200, [])
            started = time.monotonic()
            assert all(s.recv(100) == b"" for s in held) and time.monotonic() - started < 5  # closed, not held
            for s in held:
                s.close()
            answers = []
            threads = [threading.Thread(target=lambda: answers.append(request(server.port, "GET", "/connectors",
                                                                              timeout=20)[0])) for _ in range(150)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert answers == [200] * 150
        finally:
            server.close()
            worker.stop()

"""klog registry against hostile requests: a seeded campaign of bad methods, paths, headers and bodies.
Every answer is an HTTP status with Confluent's JSON error shape (no 5xx), each refusal one log line
without a traceback, and the registry keeps answering."""

from __future__ import annotations

import json
import random
import socket

import pytest

import klog

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from klog.registry.schemas import Registry  # noqa: E402
from klog.registry.server import RegistryServer  # noqa: E402

PATHS = ["/subjects", "/subjects/s", "/subjects/s/versions", "/subjects/s/versions/1", "/subjects/s/versions/latest",
         "/subjects/s/versions/1/schema", "/schemas/ids/1", "/schemas/ids/1/versions", "/schemas/types", "/config",
         "/config/s", "/compatibility/subjects/s/versions/latest", "/subjects/%00/versions", "/subjects/%ZZ",
         "/subjects/" + "a" * 5000, "/schemas/ids/-1", "/schemas/ids/99999999999", "/subjects/s/versions/1e3",
         "/subjects/s/versions/%20", "/../../etc/passwd", "//", "/subjects/s/versions/1/schema/extra", "/?x=1&&&",
         "/subjects/s/versions/1/referencedby", "/schemas/ids/1?format=serialized",
         "/subjects/s/versions/latest?format=serialized", "/mode", "/mode/s", "/mode/s?force=true",
         "/mode?defaultToGlobal=true", "/subjects/s/versions?normalize=true", "/config/s?defaultToGlobal=true"]
BODIES = [b"", b"{", b"null", b"[]", b"{}", b'{"schema": 5}', b'{"schema": ""}', b'{"schema": "{}"}',
          b'{"schema": "\\"string\\"", "schemaType": "JSON"}', b'{"schema": "\\"int\\"", "references": [{"a": 1}]}',
          b'{"compatibility": 7}', b'{"compatibility": "full"}', b"\xff\xfe\x00", b"[" * 50_000 + b"]" * 50_000,
          json.dumps({"schema": json.dumps({"type": "array", "items": {"type": "array", "items": "int"}})}).encode(),
          json.dumps({"schema": "[" * 400 + '"int"' + "]" * 400}).encode(),
          json.dumps({"schema": json.dumps({"type": "record", "name": "R", "fields": [
              {"name": "a", "type": "int", "default": "not an int"}]})}).encode(),
          json.dumps({"schema": json.dumps({"type": "record", "name": "1bad", "fields": []})}).encode(),
          json.dumps({"schemaType": "PROTOBUF", "schema": 'syntax = "proto3"; message M { int32 a = 1; }'}).encode(),
          json.dumps({"schemaType": "PROTOBUF", "schema": "message M { " * 5000}).encode(),
          json.dumps({"schemaType": "PROTOBUF", "schema": "////", "references": [{"name": "x", "subject": "s",
                                                                                  "version": 1}]}).encode(),
          json.dumps({"schemaType": "PROTOBUF", "schema": 'import "x.proto"; message M { X a = 1; }',
                      "references": [{"name": "x.proto", "subject": "s", "version": 1}]}).encode(),
          b'{"mode": "IMPORT"}', b'{"mode": "READONLY"}', b'{"mode": "READWRITE"}', b'{"mode": 5}', b'{"mode": null}',
          b'{"normalize": "x"}', b'{"normalize": true}', b'{"schema": "\\"int\\"", "id": -5, "version": 99999999999}',
          b'{"schema": "\\"int\\"", "id": 1e400}', b'{"schema": "\\"long\\"", "id": 3, "version": 1}']
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS", "BREW", "G\x00T"]


def raw_request(port: int, data: bytes) -> bytes:
    """The whole answer to `data` (the registry may answer and close before it has read all of it)."""
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass  # closed with unread bytes: what it answered first is in chunks
    return b"".join(chunks)


def test_a_hostile_campaign_gets_json_refusals_and_the_registry_stays_up(data_dir, replay_seed):
    rng = random.Random(replay_seed(20261128))
    lines: list[str] = []
    store = klog.open(data_dir)
    registry = Registry(store)
    server = RegistryServer(registry, "127.0.0.1", 0, log=lines.append).start()
    try:
        for _ in range(150):
            body = rng.choice(BODIES)
            length = rng.choice([str(len(body)), str(len(body)), "-1", "abc", str(2**70), "99999999", ""])
            head = f"{rng.choice(METHODS)} {rng.choice(PATHS)} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
            if rng.random() < 0.1:
                head += "Transfer-Encoding: chunked\r\n"
            answer = raw_request(server.port, head.encode("latin-1") + b"\r\n" + body)
            status_line, _, rest = answer.partition(b"\r\n")
            assert status_line.startswith(b"HTTP/1."), answer[:200]
            status = int(status_line.split()[1])
            assert status < 500, answer[:500]
            if status >= 400 and not answer.startswith(b"HTTP/1.0 400") and b"\r\n\r\n" in rest:
                payload = json.loads(rest.split(b"\r\n\r\n", 1)[1] or b"{}")
                assert payload == {} or {"error_code", "message"} <= set(payload), payload
        status_line = raw_request(server.port, b"GET /subjects HTTP/1.0\r\n\r\n").split(b"\r\n")[0]
        assert status_line.endswith(b"200 OK")
    finally:
        server.close()
        registry.close()
        store.close()
    assert all("\n" not in line and "Traceback" not in line for line in lines)

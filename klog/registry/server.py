"""Confluent Schema Registry's REST API (the subset Connect's AvroConverter and JsonSchemaConverter,
confluent-kafka's SchemaRegistryClient and their serializers call) over a Registry, on 127.0.0.1:8081 by
default; Avro, JSON Schema and Protobuf schemas (schemaType AVRO, the default, JSON or PROTOBUF), each with
references.

GET /subjects, GET|DELETE /subjects/{s}, POST /subjects/{s} (lookup), GET|POST /subjects/{s}/versions,
GET|DELETE /subjects/{s}/versions/{v}, GET /subjects/{s}/versions/{v}/schema,
GET /subjects/{s}/versions/{v}/referencedby, GET /schemas/ids/{id}[/schema|/subjects|/versions]
(`?format=serialized`: a Protobuf schema as its base64 FileDescriptorProto), GET /schemas/types,
GET|PUT|DELETE /config[/{s}], GET|PUT|DELETE /mode[/{s}], POST /compatibility/subjects/{s}/versions[/{v}];
`normalize=true` (or the `normalize` config) on a register, lookup or compatibility request.
Errors answer {"error_code": N, "message": ...} with Confluent's codes; a bad request is one log line.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from klog.protocol.http_server import IDLE_TIMEOUT_S, QuietHTTPServer
from klog.registry.schemas import TYPES, Registry, RegistryError, Version, request_references

MAX_BODY = 8 << 20  # a schema is kilobytes: a larger body is refused before it is read
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

Route = Callable[[Registry, list[str], dict[str, list[str]], Any], Any]


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or ["false"])[-1].lower() == "true"


def _schema_id(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", text) or int(text) > 2**31 - 1:
        raise RegistryError(404, 40403, f"Schema {text} not found")
    return int(text)


def _schema_of(body: Any, query: dict[str, list[str]]) -> tuple[Any, str, list[dict[str, Any]]]:
    """The schema, its type (schemaType, AVRO when absent) and references of a register, lookup or
    compatibility body (normalize=true is the registry's: klog.registry.normalize)."""
    if not isinstance(body, dict):
        raise RegistryError(422, 42201, "Empty schema")
    kind = body.get("schemaType") or "AVRO"
    if kind not in TYPES:
        raise RegistryError(422, 42201, f"Invalid schema type {kind!s:.40}: klog's registry supports "
                            "AVRO, JSON and PROTOBUF")
    references = request_references(body.get("references"))
    return body.get("schema"), kind, references


def _import_of(body: Any) -> tuple[int | None, int | None]:
    """A register body's `id` and `version` (an import's, IMPORT mode); absent, null, or below 1 / 0: none."""
    out = []
    for name in ("id", "version"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value > 2**31 - 1):
            raise RegistryError(422, 42201 if name == "id" else 42202,
                                f"Invalid schema: {name} is a whole number, not {json.dumps(value)[:40]}")
        out.append(value if value is not None and value >= (0 if name == "id" else 1) else None)
    return out[0], out[1]


def _answer(r: Registry, v: Version, query: dict[str, list[str]]) -> dict[str, Any]:
    """A version's answer; `format=serialized` gives a Protobuf schema as its base64 FileDescriptorProto."""
    serialized = (query.get("format") or [""])[-1] == "serialized" and v.schema_type == "PROTOBUF"
    return v.answer(r.serialized(v) if serialized else None)


def _subjects(r: Registry, path: list[str], query: dict, body: Any) -> Any:
    return r.subjects(_flag(query, "deleted"))


def _subject(method: str) -> Route:
    def route(r: Registry, path: list[str], query: dict, body: Any) -> Any:
        subject = path[1]
        if method == "DELETE":
            return r.delete_subject(subject, _flag(query, "permanent"))
        if method == "POST":
            text, kind, references = _schema_of(body, query)
            return r.lookup(subject, text, _flag(query, "deleted"), kind, references,
                            _flag(query, "normalize")).answer()
        return [v.version for v in r.live(subject, _flag(query, "deleted"))]  # GET /subjects/{s}: its versions
    return route


def _versions(method: str) -> Route:
    def route(r: Registry, path: list[str], query: dict, body: Any) -> Any:
        subject = path[1]
        if method == "POST":
            schema_id, version = _import_of(body) if isinstance(body, dict) else (None, None)
            return {"id": r.register(subject, *_schema_of(body, query), _flag(query, "normalize"), schema_id,
                                     version)}
        return [v.version for v in r.live(subject, _flag(query, "deleted"))]
    return route


def _version(method: str) -> Route:
    def route(r: Registry, path: list[str], query: dict, body: Any) -> Any:
        subject, version = path[1], path[3]
        if method == "DELETE":
            return r.delete_version(subject, version, _flag(query, "permanent"))
        return _answer(r, r.version(subject, version, _flag(query, "deleted")), query)
    return route


def _version_schema(r: Registry, path: list[str], query: dict, body: Any) -> Any:
    return RawSchema(r.version(path[1], path[3], _flag(query, "deleted")).schema)


def _referenced_by(r: Registry, path: list[str], query: dict, body: Any) -> Any:
    return r.referenced_by(path[1], path[3], _flag(query, "deleted"))


def _by_id(part: str | None) -> Route:
    def route(r: Registry, path: list[str], query: dict, body: Any) -> Any:
        schema_id = _schema_id(path[2])
        found = r.schema_of(schema_id)
        if part is None:
            answer = _answer(r, found, query)
            return {k: answer[k] for k in ("schemaType", "references", "schema") if k in answer}
        if part == "schema":
            return RawSchema(found.schema)
        deleted = _flag(query, "deleted")
        found = [v for v in r.by_id(schema_id) if deleted or not v.deleted]
        if part == "subjects":
            return sorted({v.subject for v in found})
        return [{"subject": v.subject, "version": v.version} for v in found]
    return route


def _types(r: Registry, path: list[str], query: dict, body: Any) -> Any:
    return list(TYPES)


def _associations(r: Registry, path: list[str], query: dict, body: Any) -> Any:
    return []  # none: confluent-kafka's serializers (2.13+) ask, then use the subject name strategy


def _config(method: str) -> Route:
    def route(r: Registry, path: list[str], query: dict, body: Any) -> Any:
        subject = path[1] if len(path) > 1 else None
        if method == "PUT":
            body = body if isinstance(body, dict) else {}
            return r.set_config(subject, body.get("compatibility"), body.get("normalize"))
        if method == "DELETE":
            return r.delete_config(subject)
        if subject is not None and subject not in r.configs and not _flag(query, "defaultToGlobal"):
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility "
                                "configured")
        return r.config(subject, _flag(query, "defaultToGlobal"))
    return route


def _mode(method: str) -> Route:
    def route(r: Registry, path: list[str], query: dict, body: Any) -> Any:
        subject = path[1] if len(path) > 1 else None
        if method == "PUT":
            mode = body.get("mode") if isinstance(body, dict) else "?"
            r.set_mode(subject, mode, _flag(query, "force"))
            return {"mode": mode}  # Confluent echoes the request
        if method == "DELETE":
            return {"mode": r.delete_mode(subject)}
        mode = r.mode(subject, in_scope=_flag(query, "defaultToGlobal"))
        if mode is None:
            raise RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return {"mode": mode}
    return route


def _compatibility(r: Registry, path: list[str], query: dict, body: Any) -> Any:
    version = path[4] if len(path) > 4 else None
    text, kind, references = _schema_of(body, query)
    problems = r.check(path[2], text, version, kind, references, _flag(query, "normalize"))
    out: dict[str, Any] = {"is_compatible": not problems}
    if _flag(query, "verbose"):
        out["messages"] = problems
    return out


class RawSchema(str):
    """An answer that is the schema's own text (…/schema), not a JSON document around it."""


# (path shape, method) -> route; a shape's {} is any one segment
ROUTES: dict[tuple[str, str], Route] = {
    ("subjects", "GET"): _subjects,
    ("subjects/{}", "GET"): _subject("GET"),
    ("subjects/{}", "POST"): _subject("POST"),
    ("subjects/{}", "DELETE"): _subject("DELETE"),
    ("subjects/{}/versions", "GET"): _versions("GET"),
    ("subjects/{}/versions", "POST"): _versions("POST"),
    ("subjects/{}/versions/{}", "GET"): _version("GET"),
    ("subjects/{}/versions/{}", "DELETE"): _version("DELETE"),
    ("subjects/{}/versions/{}/schema", "GET"): _version_schema,
    ("subjects/{}/versions/{}/referencedby", "GET"): _referenced_by,
    ("schemas/ids/{}", "GET"): _by_id(None),
    ("schemas/ids/{}/schema", "GET"): _by_id("schema"),
    ("schemas/ids/{}/subjects", "GET"): _by_id("subjects"),
    ("schemas/ids/{}/versions", "GET"): _by_id("versions"),
    ("schemas/types", "GET"): _types,
    ("associations/resources/{}/{}", "GET"): _associations,
    ("config", "GET"): _config("GET"),
    ("config", "PUT"): _config("PUT"),
    ("config", "DELETE"): _config("DELETE"),
    ("config/{}", "GET"): _config("GET"),
    ("config/{}", "PUT"): _config("PUT"),
    ("config/{}", "DELETE"): _config("DELETE"),
    ("mode", "GET"): _mode("GET"),
    ("mode", "PUT"): _mode("PUT"),
    ("mode", "DELETE"): _mode("DELETE"),
    ("mode/{}", "GET"): _mode("GET"),
    ("mode/{}", "PUT"): _mode("PUT"),
    ("mode/{}", "DELETE"): _mode("DELETE"),
    ("compatibility/subjects/{}/versions", "POST"): _compatibility,
    ("compatibility/subjects/{}/versions/{}", "POST"): _compatibility,
}


# routes whose work is parsing and comparing a schema: the registry's methods take its lock around the
# tables they read or write, not around the parsing and comparing (a megabyte schema's metaschema check
# is seconds, a hostile comparison up to its bounds: other requests do not wait for them)
PARSE_FIRST = {("subjects/{}", "POST"), ("subjects/{}/versions", "POST"),
               ("compatibility/subjects/{}/versions", "POST"), ("compatibility/subjects/{}/versions/{}", "POST")}


def _prepare_serialized(registry: Registry, shape: str, path: list[str]) -> None:
    """A serialized form's versions parsed before the lock is taken (the first GET of each after a start parsed
    it holding the lock every request waits for)."""
    if shape == "schemas/ids/{}" and re.fullmatch(r"[0-9]{1,10}", path[2]):
        registry.prepare_serialized(schema_id=int(path[2]))
    elif shape == "subjects/{}/versions/{}":
        registry.prepare_serialized(subject=path[1])


def shape_of(path: list[str]) -> str:
    """The route shape of a path: its fixed words kept where a route has them, other segments {}."""
    for shape in {s for s, _ in ROUTES}:
        words = shape.split("/")
        if len(words) == len(path) and all(w == "{}" or w == p for w, p in zip(words, path, strict=True)):
            return shape
    return ""




class RegistryServer:
    def __init__(self, registry: Registry, host: str = "127.0.0.1", port: int = 8081,
                 log: Callable[[str], None] | None = None) -> None:
        self.registry = registry
        say = log or (lambda line: print(line, file=sys.stderr))

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S  # a client that stops sending loses its socket and thread
            default_request_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:  # quiet: refusals are logged in one line by _answer
                pass

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                self.close_connection = True
                self._send(code, {"error_code": code, "message": message or HTTPStatus(code).phrase})

            def __getattr__(self, name: str) -> Any:
                if name.startswith("do_"):  # HEAD, PATCH, made-up methods
                    return lambda: self._answer(name[3:])
                raise AttributeError(name)

            def do_GET(self) -> None:  # noqa: N802 - http.server's names
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def do_PUT(self) -> None:  # noqa: N802
                self._answer("PUT")

            def do_DELETE(self) -> None:  # noqa: N802
                self._answer("DELETE")

            def _answer(self, method: str) -> None:
                url = urlsplit(self.path)
                path = [unquote(p) for p in url.path.strip("/").split("/") if p]
                try:
                    body = self._body()
                    shape = shape_of(path)
                    route = ROUTES.get((shape, method))
                    if route is None:
                        raise RegistryError(405, 405, "HTTP 405 Method Not Allowed") if shape else \
                            RegistryError(404, 404, "HTTP 404 Not Found")
                    query = parse_qs(url.query)
                    if (query.get("format") or [""])[-1] == "serialized" and method == "GET":
                        _prepare_serialized(registry, shape, path)
                    with contextlib.nullcontext() if (shape, method) in PARSE_FIRST else registry.lock:
                        status, out = 200, route(registry, path, query, body)
                except RegistryError as e:
                    status, out = e.status, {"error_code": e.code, "message": str(e)}
                except Exception as e:  # noqa: BLE001 - one bad request must not take the registry down
                    status, out = 500, {"error_code": 50001, "message": f"{type(e).__name__}: {e}"}
                if status >= 400:
                    say(f"klog registry: {method} {url.path[:200]}: {status} {out['message'][:300]}")
                self._send(status, out)

            def _body(self) -> Any:
                if self.headers.get("Transfer-Encoding"):
                    self.close_connection = True
                    raise RegistryError(411, 411, "a request body needs a Content-Length (no Transfer-Encoding)")
                text = (self.headers.get("Content-Length") or "0").strip()
                if not re.fullmatch(r"[0-9]{1,19}", text):
                    self.close_connection = True
                    raise RegistryError(400, 400, "the request's Content-Length is not a whole number")
                if int(text) > MAX_BODY:
                    self.close_connection = True
                    raise RegistryError(413, 413, f"the request body exceeds {MAX_BODY} bytes")
                data = self.rfile.read(int(text)) if int(text) else b""
                if len(data) < int(text):
                    self.close_connection = True
                    raise RegistryError(400, 400, "the request body ended before its Content-Length")
                try:
                    body = json.loads(data) if data else None
                    if b"\\u" in data:  # an escaped lone surrogate ("\ud800") is no character: stored, it
                        json.dumps(body, ensure_ascii=False).encode()  # could not be written as UTF-8
                    return body
                except UnicodeEncodeError:
                    raise RegistryError(400, 400, "the request body has half a UTF-16 surrogate pair") from None
                except (ValueError, RecursionError):
                    raise RegistryError(400, 400, "the request body is not JSON") from None

            def _send(self, status: int, out: Any) -> None:
                data = out.encode() if isinstance(out, RawSchema) else json.dumps(out).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", CONTENT_TYPE)
                    self.send_header("Content-Length", str(len(data)))
                    if self.close_connection:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except OSError:
                    self.close_connection = True

        self.httpd = QuietHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="klog-registry", daemon=True)

    def start(self) -> RegistryServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

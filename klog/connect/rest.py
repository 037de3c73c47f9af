"""Kafka Connect's REST API over a Worker (127.0.0.1:8083 by default), so existing Connect tooling works.

GET/POST /connectors (?expand=status|info), GET/DELETE /connectors/{n}, GET/PUT /connectors/{n}/config,
GET /connectors/{n}/status, GET /connectors/{n}/tasks, GET /connectors/{n}/tasks/{id}/status,
POST /connectors/{n}/restart, POST /connectors/{n}/tasks/{id}/restart, PUT /connectors/{n}/pause|resume|stop,
GET/PATCH/DELETE /connectors/{n}/offsets (KIP-875), GET /connector-plugins,
PUT /connector-plugins/{plugin}/config/validate.
Errors answer {"error_code": N, "message": ...} as Kafka Connect's do.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from klog.connect.config import config_string
from klog.connect.errors import ConfigError
from klog.errors import KlogError
from klog.protocol.http_server import IDLE_TIMEOUT_S, QuietHTTPServer

MAX_BODY = 16 << 20  # a connector config is kilobytes: a larger body is refused before it is read


class HttpError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# The methods each resource answers (Kafka's Jersey resources): another method is 405, another path 404.
_TOP_METHODS = {(): {"GET"}, ("connectors",): {"GET", "POST"}, ("connector-plugins",): {"GET"}}
_CONNECTOR_METHODS = {(): {"GET", "DELETE"}, ("config",): {"GET", "PUT"}, ("status",): {"GET"}, ("tasks",): {"GET"},
                      ("restart",): {"POST"}, ("pause",): {"PUT"}, ("resume",): {"PUT"}, ("stop",): {"PUT"},
                      ("offsets",): {"GET", "PATCH", "DELETE"}}
_TASK_METHODS = {"status": {"GET"}, "restart": {"POST"}}  # /connectors/{name}/tasks/{id}/...


def _allowed_methods(parts: list[str]) -> set[str] | None:
    """The methods the path answers; None when it names no resource."""
    if parts[:1] == ["connectors"] and len(parts) > 1:
        rest = parts[2:]
        return _TASK_METHODS.get(rest[2]) if len(rest) == 3 and rest[0] == "tasks" else \
            _CONNECTOR_METHODS.get(tuple(rest))
    if len(parts) == 4 and parts[0] == "connector-plugins" and parts[2:] == ["config", "validate"]:
        return {"PUT"}
    return _TOP_METHODS.get(tuple(parts))


class RestServer:
    def __init__(self, worker, host: str = "127.0.0.1", port: int = 8083) -> None:  # noqa: ANN001
        """`worker`: a Worker (standalone) or a GroupApi (a distributed worker's view of its group)."""
        self.worker = worker
        # one management call at a time; a worker's own lock when it has one (a Worker: its connectors'
        # reconfigurations take it too)
        self.lock = getattr(worker, "lock", None) or threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S  # a client that stops sending loses its socket and thread
            default_request_version = "HTTP/1.0"  # an unparsable request line still gets a status line

            def log_message(self, *args: Any) -> None:  # quiet: the worker prints what matters
                pass

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                """http.server's own refusals (bad request line, headers too long) in Connect's JSON shape."""
                self.close_connection = True
                self._send(code, {"error_code": code, "message": message or HTTPStatus(code).phrase})

            def __getattr__(self, name: str) -> Any:
                if name.startswith("do_"):  # HEAD, OPTIONS, TRACE, made-up methods: 405 as Jersey answers
                    return self._method_not_allowed
                raise AttributeError(name)

            def _method_not_allowed(self) -> None:
                try:
                    self._body()  # read and dropped: the client gets the answer, not a reset of unread bytes
                except (HttpError, OSError):
                    self.close_connection = True
                self._send(405, {"error_code": 405, "message": f"HTTP method {self.command} is not allowed"})

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                try:
                    payload = self._payload()
                except HttpError as e:
                    self.close_connection = True  # what is left of the body cannot be told from a next request
                    self._send(e.code, {"error_code": e.code, "message": str(e)})
                    return
                except OSError:  # the client went quiet or away mid-body: nobody to answer
                    self.close_connection = True
                    return
                try:
                    with api.lock:
                        code, out, *settle = api.route(method, [unquote(p) for p in url.path.strip("/").split("/")
                                                                if p], parse_qs(url.query), payload)
                    for wait in settle:  # a change's wait for the workers to act on it holds no other request
                        wait()
                except HttpError as e:
                    code, out = e.code, {"error_code": e.code, "message": str(e)}
                except ConfigError as e:
                    code, out = 400, {"error_code": 400, "message": str(e)}
                except KlogError as e:
                    code, out = 500, {"error_code": 500, "message": str(e)}
                except Exception as e:  # noqa: BLE001 - one bad request must not take the API down
                    code, out = 500, {"error_code": 500, "message": f"{type(e).__name__}: {e}"}
                self._send(code, out)

            def _payload(self) -> Any:
                body = self._body()
                try:
                    return json.loads(body) if body else None
                except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
                    raise HttpError(400, "the request body is not JSON") from None

            def _body(self) -> bytes:
                """The request body, refused (HttpError) when its framing is malformed or it exceeds MAX_BODY."""
                if self.headers.get("Transfer-Encoding", "").strip().lower() == "chunked":
                    return self._chunked_body()
                if self.headers.get("Transfer-Encoding"):
                    raise HttpError(501, f"Transfer-Encoding {self.headers['Transfer-Encoding']} is not supported")
                lengths = set(self.headers.get_all("Content-Length") or [])
                if not lengths:
                    return b""
                text = lengths.pop().strip()
                if lengths or not re.fullmatch(r"[0-9]{1,19}", text):
                    raise HttpError(400, "the request's Content-Length is not one whole number")
                return self._read(int(text))

            def _chunked_body(self) -> bytes:
                body = b""
                while True:
                    line = self.rfile.readline(100)
                    size = line.split(b";", 1)[0].strip()
                    if not re.fullmatch(rb"[0-9a-fA-F]{1,16}", size):
                        raise HttpError(400, "the request's chunked body is malformed")
                    if int(size, 16) == 0:
                        while self.rfile.readline(8192).strip():  # trailers, up to the closing empty line
                            pass
                        return body
                    body += self._read(int(size, 16), len(body))
                    if self.rfile.readline(3).strip():  # each chunk ends with CRLF
                        raise HttpError(400, "the request's chunked body is malformed")

            def _read(self, length: int, already: int = 0) -> bytes:
                if already + length > MAX_BODY:
                    raise HttpError(413, f"the request body exceeds {MAX_BODY} bytes")
                data = self.rfile.read(length)
                if len(data) < length:
                    raise HttpError(400, "the request body ended before its announced length")
                return data

            def _send(self, code: int, out: Any) -> None:
                data = b"" if out is None else json.dumps(out).encode()
                self.send_response(code)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's names
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def do_PUT(self) -> None:  # noqa: N802
                self._handle("PUT")

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle("DELETE")

            def do_PATCH(self) -> None:  # noqa: N802
                self._handle("PATCH")

        self.httpd = QuietHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="klog-connect-rest", daemon=True)

    def start(self) -> RestServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- routes ------------------------------------------------------------------------------------
    def route(self, method: str, parts: list[str], query: dict[str, list[str]],
              body: Any) -> tuple[int, Any] | tuple[int, Any, Callable[[], None]]:
        """(status, answer), and for a change the worker applies elsewhere (a distributed stop) what to wait
        for before answering, run once the lock is released."""
        w = self.worker
        allowed = _allowed_methods(parts)
        if allowed is None:
            raise HttpError(404, f"unknown resource /{'/'.join(parts)}")
        if method not in allowed:
            raise HttpError(405, f"HTTP method {method} is not allowed on /{'/'.join(parts)}")
        # a distributed worker in a rebalance (or with stale configs) answers 409, as Kafka's herder; the
        # status reads come from connect-status, which Kafka answers any time
        reads_status = method == "GET" and len(parts) >= 3 and parts[-1] == "status"
        if parts[:1] == ["connectors"] and not reads_status and (why := w.conflict()) is not None:
            raise HttpError(409, why)
        if not parts:
            from klog import __version__

            return 200, {"version": __version__, "commit": "", "kafka_cluster_id": "klog"}
        if parts == ["connector-plugins"]:
            from klog.connect.api import load_class, plugin_names

            return 200, [{"class": java, "type": load_class(spec).kind, "version": load_class(spec).version()}
                         for java, spec in sorted(plugin_names().items())]
        if parts[0] == "connector-plugins":
            if not isinstance(body, dict):
                raise HttpError(400, "the config to validate is a JSON object")
            return 200, self.validate(parts[1], body)
        if len(parts) == 1:
            if method == "GET":
                names = w.names()
                return 200, (self.expanded(names, query["expand"]) if "expand" in query else names)
            if method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("name"), str) \
                        or not isinstance(body.get("config"), dict):
                    raise HttpError(400, 'a connector is {"name": ..., "config": {...}}')
                name = body["name"].strip()  # as Kafka's createConnector
                if name in w.names():
                    raise HttpError(409, f"Connector {name} already exists")
                w.put({**{k: config_string(v) for k, v in body["config"].items()}, "name": name})
                return 201, self.info(name)
        name = parts[1]
        rest = parts[2:]
        if name not in w.names() and not (len(parts) == 3 and parts[2] == "config" and method == "PUT"):
            raise HttpError(404, f"Connector {name} not found")
        if not rest:
            if method == "GET":
                return 200, self.info(name)
            if method == "DELETE":
                w.delete(name)
                return 204, None
        elif rest == ["config"]:
            if method == "GET":
                return 200, w.validated(name).props
            if method == "PUT":
                if not isinstance(body, dict):
                    raise HttpError(400, "the config is a JSON object")
                if name != name.strip():  # configs are read stripped: " a " would run as "a", out of reach
                    raise HttpError(400, f"Connector name {name!r} has leading or trailing whitespace")
                props = {k: config_string(v) for k, v in body.items()}
                if props.get("name", name) != name:
                    raise HttpError(400, "Connector name configuration (" + props["name"] + ") doesn't match "
                                    "connector name in the URL (" + name + ")")
                created = w.put({**props, "name": name})
                return (201 if created else 200), self.info(name)
        elif rest == ["status"] and method == "GET":
            return 200, w.describe_status(name)
        elif rest == ["tasks"] and method == "GET":
            return 200, [{"id": {"connector": name, "task": i}, "config": c}
                         for i, c in enumerate(w.task_configs(name))]
        elif len(rest) == 3 and rest[0] == "tasks" and rest[2] in ("status", "restart"):
            tasks = w.describe_status(name)["tasks"]
            task_id = int(rest[1]) if rest[1].isascii() and rest[1].isdigit() else -1  # "-1" is no task id
            if not 0 <= task_id < len(tasks):
                raise HttpError(404, f"Task {name}-{rest[1]} not found")
            task = tasks[task_id]
            if rest[2] == "status" and method == "GET":
                return 200, task
            if rest[2] == "restart" and method == "POST":
                w.restart_task(name, task["id"])
                return 204, None
        elif rest == ["restart"] and method == "POST":
            include_tasks, only_failed = (query.get(k, [""])[0] == "true" for k in ("includeTasks", "onlyFailed"))
            planned = w.restart(name, include_tasks=include_tasks, only_failed=only_failed)
            if include_tasks or only_failed:  # KIP-745: the plan, RESTARTING on what restarts
                return 202, planned
            return 204, None  # the connector instance only, as before KIP-745
        elif rest in (["pause"], ["resume"], ["stop"]) and method == "PUT":
            settle = {"pause": w.pause, "resume": w.resume, "stop": w.stop_only}[rest[0]](name)
            return (202, None) if settle is None else (202, None, settle)
        elif rest == ["offsets"]:
            return self.offsets(method, name, body)
        raise AssertionError(f"{method} /{'/'.join(parts)} passed _allowed_methods but has no route")

    def offsets(self, method: str, name: str, body: Any) -> tuple[int, Any]:
        """KIP-875: GET any time; PATCH and DELETE only once the connector is STOPPED."""
        from klog.connect import offsets

        w = self.worker
        if method == "GET":
            return 200, {"offsets": w.connector_offsets(name)}
        if w.target_state(name) != "STOPPED":
            raise HttpError(400, offsets.NOT_STOPPED.replace("{name}", name))
        try:
            if method == "PATCH":
                w.alter_offsets(name, body)
                return 200, {"message": offsets.ALTERED}
            w.reset_offsets(name)
            return 200, {"message": offsets.RESET}
        except offsets.OffsetsError as e:
            raise HttpError(400, str(e)) from None
        except offsets.TasksStillRunning as e:
            raise HttpError(409, str(e)) from None

    def expanded(self, names: list[str], expansions: list[str]) -> dict[str, dict]:
        """?expand=status&expand=info, as Kafka's listConnectors: each expansion asked for (unknown ones
        ignored); a connector deleted meanwhile (by another worker of the group) is left out."""
        out = {}
        for name in names:
            try:
                out[name] = {e: self.worker.describe_status(name) if e == "status" else self.info(name)
                             for e in expansions if e in ("status", "info")}
            except KeyError:
                continue
        return out

    def info(self, name: str) -> dict:
        v = self.worker.validated(name)
        tasks = self.worker.task_configs(name)
        return {"name": name, "config": v.props, "tasks": [{"connector": name, "task": i} for i in range(len(tasks))],
                "type": v.cls.kind}

    def validate(self, plugin: str, config: dict) -> dict:
        """Kafka's ConfigInfos: every key of the connector and the runtime with its errors."""
        from klog.connect.api import find_connector
        from klog.connect.worker import SINK, SOURCE, validate

        props = {k: config_string(v) for k, v in config.items()}
        props.setdefault("connector.class", plugin)
        cls = find_connector(props["connector.class"])
        runtime = SOURCE if cls.kind == "source" else SINK
        errors = {**runtime.errors(props), **cls.config_def.errors(props)}
        if not errors:
            try:
                validate(props, self.worker.config)
            except ConfigError as e:
                errors[e.field] = str(e)
        keys = {**runtime.keys, **cls.config_def.keys}
        configs = [{"definition": {"name": k, "type": key.type.upper(), "required": key.default is not None
                                   and key.default.__class__ is object, "default_value": None
                                   if key.default.__class__ is object else key.default, "documentation": key.doc,
                                   "group": None, "order": i},
                    "value": {"name": k, "value": props.get(k), "recommended_values": list(key.choices or []),
                              "errors": [errors[k]] if k in errors else [], "visible": True}}
                   for i, (k, key) in enumerate(keys.items())]
        for k in errors.keys() - keys.keys():
            configs.append({"definition": {"name": k}, "value": {"name": k, "value": props.get(k),
                                                                  "errors": [errors[k]], "visible": True}})
        return {"name": cls.java_classes[0] if cls.java_classes else plugin, "error_count": len(errors),
                "groups": ["Common"], "configs": configs}

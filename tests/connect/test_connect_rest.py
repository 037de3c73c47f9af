"""Kafka Connect's REST API, driven with plain HTTP requests and with `klog connect list|status|...`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

import klog
from tests.connect.helpers import values, wait_for


def call(base: str, method: str, path: str, body: object = None) -> tuple[int, object]:
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def api(data_dir):
    from klog.connect.rest import RestServer
    from klog.connect.worker import Worker

    store = klog.open(data_dir)
    worker = Worker(store, {"offset.flush.interval.ms": "200"})
    server = RestServer(worker, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{server.port}"
    server.close()
    worker.stop()
    store.close()


def test_connector_lifecycle_over_http(api, tmp_path, data_dir, cli):
    (tmp_path / "in.txt").write_text("a\n")
    config = {"connector.class": "FileStreamSource", "file": str(tmp_path / "in.txt"), "topic": "lines",
              "value.converter": "string"}
    code, body = call(api, "POST", "/connectors", {"name": "fs", "config": config})
    assert code == 201 and body["name"] == "fs" and body["type"] == "source" and body["tasks"] == [
        {"connector": "fs", "task": 0}]
    assert call(api, "POST", "/connectors", {"name": "fs", "config": config})[0] == 409
    assert call(api, "GET", "/connectors") == (200, ["fs"])
    wait_for(lambda: values(data_dir, "lines") == [b"a"])
    code, status = call(api, "GET", "/connectors/fs/status")
    assert code == 200 and status["connector"]["state"] == "RUNNING" and status["tasks"][0]["state"] == "RUNNING"
    assert call(api, "GET", "/connectors/fs/config")[1]["topic"] == "lines"
    assert call(api, "GET", "/connectors/fs/tasks")[1][0]["id"] == {"connector": "fs", "task": 0}
    assert call(api, "PUT", "/connectors/fs/pause")[0] == 202
    wait_for(lambda: call(api, "GET", "/connectors/fs/tasks/0/status")[1]["state"] == "PAUSED")
    r = cli("connect", "list", "--url", api)
    assert r.exit_code == 0 and r.out.split("\t")[:3] == ["fs", "source", "PAUSED"]
    r = cli("connect", "resume", "fs", "--url", api)
    assert r.exit_code == 0 and "Resumed connector fs" in r.stderr
    with open(tmp_path / "in.txt", "a") as f:
        f.write("b\n")
    wait_for(lambda: values(data_dir, "lines") == [b"a", b"b"], what="the line after resume")
    def stored():  # noqa: ANN202
        found = call(api, "GET", "/connectors/fs/offsets")[1]["offsets"]
        return found if found and found[0]["offset"]["position"] == 4 else None

    offsets = wait_for(stored, what="the offset after both lines")
    assert offsets[0]["partition"] == {"filename": str(tmp_path / "in.txt")}
    assert cli("connect", "restart", "fs", "--url", api).exit_code == 0
    code, _ = call(api, "PUT", "/connectors/fs/config", {**config, "topic": "lines2"})
    assert code == 200 and call(api, "GET", "/connectors/fs/config")[1]["topic"] == "lines2"
    assert call(api, "DELETE", "/connectors/fs")[0] == 204
    assert call(api, "GET", "/connectors/fs") == (404, {"error_code": 404, "message": "Connector fs not found"})
    r = cli("connect", "status", "fs", "--url", api)
    assert r.exit_code == 2 and r.stderr.strip() == "klog: error: Connector fs not found"


def test_plugins_and_validate(api):
    code, plugins = call(api, "GET", "/connector-plugins")
    classes = {p["class"]: p["type"] for p in plugins}
    assert classes["io.debezium.connector.postgresql.PostgresConnector"] == "source"
    assert classes["io.confluent.connect.jdbc.JdbcSinkConnector"] == "sink"
    code, result = call(api, "PUT", "/connector-plugins/FileStreamSource/config/validate",
                        {"connector.class": "FileStreamSource", "name": "x", "tasks.max": "zero"})
    assert code == 200 and result["error_count"] == 2
    errors = {c["value"]["name"]: c["value"]["errors"] for c in result["configs"] if c["value"]["errors"]}
    assert set(errors) == {"tasks.max", "topic"}
    code, body = call(api, "POST", "/connectors", {"name": "bad", "config": {"connector.class": "FileStreamSource"}})
    assert code == 400 and "topic" in body["message"]


def test_the_cli_without_a_worker_says_so(cli):
    r = cli("connect", "list", "--url", "http://127.0.0.1:9")
    assert r.exit_code == 1 and "no Connect worker answers at http://127.0.0.1:9" in r.stderr

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_source_offsets_are_read_altered_and_reset_on_a_stopped_connector(api, tmp_path, data_dir):
    """KIP-875 over HTTP: PATCH/DELETE refused while running; once stopped, PATCH moves the file position
    (the resumed task reads from there again) and DELETE forgets it (read from the start)."""
    (tmp_path / "in.txt").write_text("a\nb\n")
    config = {"connector.class": "FileStreamSource", "file": str(tmp_path / "in.txt"), "topic": "lines",
              "value.converter": "string"}
    assert call(api, "POST", "/connectors", {"name": "fs", "config": config})[0] == 201
    wait_for(lambda: call(api, "GET", "/connectors/fs/offsets")[1]["offsets"], what="an offset stored")
    partition = {"filename": str(tmp_path / "in.txt")}
    def stored() -> list:
        return [(o["partition"], o["offset"]["position"]) for o in call(api, "GET", "/connectors/fs/offsets")[1][
            "offsets"]]

    wait_for(lambda: stored() == [(partition, 4)], what="both lines' offset")
    code, body = call(api, "PATCH", "/connectors/fs/offsets", {"offsets": [{"partition": partition,
                                                                            "offset": {"position": 2}}]})
    assert code == 400 and "STOPPED" in body["message"]
    assert call(api, "PUT", "/connectors/fs/stop")[0] == 202
    assert call(api, "GET", "/connectors/fs/status")[1]["connector"]["state"] == "STOPPED"
    assert call(api, "PATCH", "/connectors/fs/offsets", {"offsets": "all"})[0] == 400
    assert call(api, "PATCH", "/connectors/fs/offsets", {"offsets": [{"partition": partition,
                                                                      "offset": {"position": 2}}]}) == (
        200, {"message": "The offsets for this connector have been altered successfully"})
    assert stored() == [(partition, 2)]
    assert call(api, "PUT", "/connectors/fs/resume")[0] == 202
    wait_for(lambda: values(data_dir, "lines") == [b"a", b"b", b"b"], what="the line after the altered offset")
    assert call(api, "PUT", "/connectors/fs/stop")[0] == 202
    assert call(api, "DELETE", "/connectors/fs/offsets") == (
        200, {"message": "The offsets for this connector have been reset successfully"})
    assert call(api, "GET", "/connectors/fs/offsets") == (200, {"offsets": []})
    assert call(api, "PUT", "/connectors/fs/resume")[0] == 202
    wait_for(lambda: values(data_dir, "lines") == [b"a", b"b", b"b", b"a", b"b"], what="the file read again")


@pytest.mark.slow
def test_sink_offsets_are_the_consumer_groups(api, tmp_path, data_dir):
    with klog.open(data_dir) as s, s.producer() as p:
        for line in (b"x", b"y", b"z"):
            p.send("words", line)
    out = tmp_path / "out.txt"
    config = {"connector.class": "FileStreamSink", "file": str(out), "topics": "words", "value.converter": "string"}
    assert call(api, "POST", "/connectors", {"name": "sink", "config": config})[0] == 201
    tp = {"kafka_topic": "words", "kafka_partition": 0}
    wait_for(lambda: call(api, "GET", "/connectors/sink/offsets")[1] == {
        "offsets": [{"partition": tp, "offset": {"kafka_offset": 3}}]}, what="the group's committed offset")
    assert call(api, "PUT", "/connectors/sink/stop")[0] == 202
    bad = {"offsets": [{"partition": {"kafka_topic": "words"}, "offset": {"kafka_offset": 1}}]}
    assert call(api, "PATCH", "/connectors/sink/offsets", bad)[0] == 400
    assert call(api, "PATCH", "/connectors/sink/offsets",
                {"offsets": [{"partition": tp, "offset": {"kafka_offset": 1}}]})[0] == 200
    assert call(api, "PUT", "/connectors/sink/resume")[0] == 202
    wait_for(lambda: out.read_text().split() == ["x", "y", "z", "y", "z"], what="the records after offset 1 again")
    assert call(api, "PUT", "/connectors/sink/stop")[0] == 202
    assert call(api, "DELETE", "/connectors/sink/offsets")[0] == 200
    assert call(api, "GET", "/connectors/sink/offsets") == (200, {"offsets": []})


def _scripted_worker(answers: list[tuple[int, dict]]):
    """An HTTP server on 127.0.0.1 answering GET requests with `answers` in turn (the last one
    repeated); returns (url, requests seen, stop)."""
    import http.server
    import threading

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.path)
            code, body = answers[min(len(seen), len(answers)) - 1]
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)
    return f"http://127.0.0.1:{server.server_address[1]}", seen, stop


@pytest.mark.slow
def test_the_cli_asks_again_while_a_distributed_worker_rebalances(cli):
    """A worker joining or leaving makes the others answer Kafka's 409 'Cannot complete request ...'
    for a moment: the CLI asks again, as Connect's clients do, and prints the answer that follows."""
    from klog.connect.group_api import REBALANCING

    busy = (409, {"error_code": 409, "message": REBALANCING})
    status = {"status": {"type": "source", "connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}}
    url, seen, stop = _scripted_worker([busy, busy, (200, {"fs": status})])
    try:
        r = cli("connect", "list", "--url", url)
    finally:
        stop()
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == b"fs\tsource\tRUNNING\t0:RUNNING"
    assert len(seen) == 3


def test_the_cli_reports_other_conflicts_at_once(cli):
    """A 409 that is not a rebalance (a connector that exists already) is the answer: said once, exit 1."""
    url, seen, stop = _scripted_worker([(409, {"error_code": 409, "message": "Connector fs already exists"})])
    try:
        r = cli("connect", "list", "--url", url)
    finally:
        stop()
    assert r.exit_code == 1 and "Connector fs already exists" in r.stderr
    assert len(seen) == 1

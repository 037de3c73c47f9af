"""The HTTP sink: records POSTed as JSON to a local endpoint, a 4xx answer into the DLQ, 5xx retried."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import klog
from tests.connect.helpers import records, running, wait_for


def test_http_sink_posts_batches_retries_5xx_and_dead_letters_4xx(data_dir):
    received: list = []
    fail_once = {"id": 2}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if any(v.get("poison") for v in body):
                code = 400
            elif fail_once and any(v["id"] == fail_once["id"] for v in body):
                fail_once.clear()
                code = 503
            else:
                received.extend(body)
                code = 200
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with klog.open(data_dir) as s:
            s.create_topic("events", partitions=1)
            with s.producer() as p:
                for v in ({"id": 1}, {"id": 2}, {"id": 3, "poison": True}, {"id": 4}):
                    p.send("events", json.dumps(v).encode(), key=str(v["id"]).encode())
        config = {"name": "web", "connector.class": "io.confluent.connect.http.HttpSinkConnector",
                  "topics": "events", "http.api.url": f"http://127.0.0.1:{server.server_port}/in",
                  "key.converter": "string", "value.converter": "json", "value.converter.schemas.enable": "false",
                  "batch.json.as.array": "true",
                  "retry.backoff.ms": "10", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
                  "errors.deadletterqueue.topic.replication.factor": "1"}
        with running(data_dir, config):
            wait_for(lambda: len(received) == 3 and records(data_dir, "dlq"), what="three delivered, one dead")
    finally:
        server.shutdown()
        server.server_close()
    assert [v["id"] for v in received] == [1, 2, 4]
    assert [r.key for r in records(data_dir, "dlq")] == [b"3"]

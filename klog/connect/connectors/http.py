"""An HTTP sink with the keys of Confluent's HttpSinkConnector: records POSTed (or PUT) to a URL as JSON,
batch.max.size at a time (a JSON array when batch.json.as.array, else one record's value per request).
A 5xx answer or a connection failure is retried max.retries times with retry.backoff.ms, doubling; a 4xx
answer sends the batch's records to the dead letter queue (or fails the task when there is none)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from klog.connect.api import SinkConnector, SinkTask
from klog.connect.config import ConfigDef
from klog.connect.converters import _json_default
from klog.connect.data import ConnectRecord
from klog.connect.errors import ConnectError, RetriableError


class HttpSinkTask(SinkTask):
    def start(self, props: dict[str, str]) -> None:
        self.c = HttpSinkConnector.config_def.parse(props)
        self.c["request.method"] = self.c["request.method"].upper()
        self.headers = {"Content-Type": "application/json"}
        for item in self.c["headers"].split(self.c["header.separator"]) if self.c["headers"] else []:
            name, _, value = item.partition(":")
            self.headers[name.strip()] = value.strip()

    def put(self, records: list[ConnectRecord]) -> None:
        size = self.c["batch.max.size"]
        for i in range(0, len(records), size):
            self._send(records[i:i + size])

    def _body(self, batch: list[ConnectRecord]) -> bytes:
        values = [r.value for r in batch]
        doc: Any = values if self.c["batch.json.as.array"] or len(values) > 1 else values[0]
        return json.dumps(doc, separators=(",", ":"), default=_json_default).encode()

    def _send(self, batch: list[ConnectRecord]) -> None:
        body = self._body(batch)
        delay = self.c["retry.backoff.ms"] / 1000
        for attempt in range(self.c["max.retries"] + 1):
            req = urllib.request.Request(self.c["http.api.url"], data=body, method=self.c["request.method"],
                                         headers=self.headers)
            try:
                with urllib.request.urlopen(req, timeout=self.c["http.connect.timeout.ms"] / 1000) as resp:
                    resp.read()
                return
            except urllib.error.HTTPError as e:
                if 400 <= e.code < 500:  # the records are at fault: retrying will not help
                    error = ConnectError(f"HTTP {e.code} {e.reason} from {self.c['http.api.url']}")
                    reporter = self.context.errant_record_reporter
                    for r in batch:
                        if reporter is None:
                            raise error from None
                        reporter(r, error)
                    return
                failure = f"HTTP {e.code} {e.reason}"
            except (urllib.error.URLError, OSError) as e:
                failure = str(getattr(e, "reason", e))
            if attempt < self.c["max.retries"]:
                time.sleep(delay)
                delay *= 2
        raise RetriableError(f"{self.c['http.api.url']} failed after {self.c['max.retries']} retries: {failure}")


class HttpSinkConnector(SinkConnector):
    java_classes = ("io.confluent.connect.http.HttpSinkConnector",)
    short_names = ("http-sink",)
    config_def = (ConfigDef().define("http.api.url", check=lambda v: None if v.startswith(("http://", "https://"))
                                     else "an http:// or https:// URL")
                  .define("request.method", default="POST", choices=("post", "put"))
                  .define("headers", default="").define("header.separator", default="|")
                  .define("batch.max.size", "int", 1, at_least=1)
                  .define("batch.json.as.array", "boolean", False)
                  .define("max.retries", "int", 10, at_least=0).define("retry.backoff.ms", "long", 3000, at_least=0)
                  .define("http.connect.timeout.ms", "long", 30_000, at_least=1))
    task_class = HttpSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]

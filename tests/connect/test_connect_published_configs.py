"""Published Kafka Connect configs, run as their authors wrote them (tests/connect/configs/, where each
came from is in configs/SOURCES.md): only the database's address is pointed at the test server; the
records they produce are checked against what Kafka, Debezium and Confluent document for them."""

from __future__ import annotations

import json
import os

from klog.connect.config import load_config_file
from tests.connect.helpers import records, running, wait_for

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def published(name: str) -> dict[str, str]:
    return load_config_file(os.path.join(CONFIGS, name))


def envelopes(data_dir: str, topic: str) -> list[tuple]:
    """(key, value) of each record as JSON (None for a null)."""
    return [(json.loads(r.key) if r.key is not None else None, json.loads(r.value) if r.value is not None else None)
            for r in records(data_dir, topic)]


def test_kafka_docs_file_source_with_hoistfield_and_insertfield(data_dir, tmp_path, monkeypatch):
    """Kafka's documented example: each line hoisted into a struct's `line`, then `data_source` added; the
    docs show exactly these records."""
    monkeypatch.chdir(tmp_path)  # the config's file=test.txt is relative, as in Kafka's quickstart
    (tmp_path / "test.txt").write_text("foo\nbar\n")
    warnings: list[str] = []
    with running(data_dir, published("kafka-docs-file-source-smt.properties"), warnings=warnings):
        wait_for(lambda: len(records(data_dir, "connect-test")) == 2, what="the two lines")
    schema = {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "line"},
                                           {"type": "string", "optional": True, "field": "data_source"}],
              "optional": False}
    assert envelopes(data_dir, "connect-test") == [
        (None, {"schema": schema, "payload": {"line": "foo", "data_source": "test-file-source"}}),
        (None, {"schema": schema, "payload": {"line": "bar", "data_source": "test-file-source"}})]
    assert warnings == []

"""`klog registry`: Confluent Schema Registry's REST API over the store's `_schemas` topic. Checked with
plain HTTP (status codes and Confluent's error codes), with confluent-kafka's own SchemaRegistryClient,
across restarts (ids and versions kept), and as the CLI command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest

import klog

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from tests.registry.helpers import serving  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))




@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def call(base: str, method: str, path: str, body: object = None, raw: bytes | None = None) -> tuple[int, object]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            status = response.status
    except urllib.error.HTTPError as e:
        text, status = e.read(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode()


def record(name: str, *fields: dict) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


V1 = record("User", {"name": "name", "type": "string"})
V2 = record("User", {"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"], "default": None})
NO_DEFAULT = record("User", {"name": "name", "type": "string"}, {"name": "email", "type": "string"})


def test_register_read_and_look_up_as_confluent_answers(url):
    assert call(url, "GET", "/subjects") == (200, [])
    assert call(url, "POST", "/subjects/users-value/versions", {"schema": V1}) == (200, {"id": 1})
    assert call(url, "POST", "/subjects/users-value/versions", {"schema": V1}) == (200, {"id": 1})  # no new version
    assert call(url, "POST", "/subjects/users-value/versions", {"schema": V2}) == (200, {"id": 2})
    assert call(url, "POST", "/subjects/other-value/versions", {"schema": V1}) == (200, {"id": 1})  # one id per schema
    assert call(url, "GET", "/subjects") == (200, ["other-value", "users-value"])
    assert call(url, "GET", "/subjects/users-value/versions") == (200, [1, 2])
    assert call(url, "GET", "/subjects/users-value/versions/1") == (200, {"subject": "users-value", "version": 1,
                                                                         "id": 1, "schema": V1})
    assert call(url, "GET", "/subjects/users-value/versions/latest")[1]["version"] == 2
    assert call(url, "GET", "/subjects/users-value/versions/-1")[1]["id"] == 2
    assert call(url, "GET", "/subjects/users-value/versions/2/schema") == (200, json.loads(V2))
    # the same schema spelt differently (namespace split, key order) is found by lookup
    same = json.dumps({"fields": [{"type": "string", "name": "name"}], "name": "User", "type": "record"})
    assert call(url, "POST", "/subjects/users-value", {"schema": same}) == (200, {"subject": "users-value",
                                                                                   "version": 1, "id": 1, "schema": V1})
    assert call(url, "GET", "/schemas/ids/2") == (200, {"schema": V2})
    assert call(url, "GET", "/schemas/ids/1/schema") == (200, json.loads(V1))
    assert call(url, "GET", "/schemas/ids/1/subjects") == (200, ["other-value", "users-value"])
    assert call(url, "GET", "/schemas/ids/1/versions") == (200, [{"subject": "other-value", "version": 1},
                                                                 {"subject": "users-value", "version": 1}])
    assert call(url, "GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    assert call(url, "POST", "/subjects/a%2Fb/versions", {"schema": '"string"'}) == (200, {"id": 3})
    assert call(url, "GET", "/subjects/a%2Fb/versions/1")[1]["subject"] == "a/b"


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("GET", "/subjects/nope/versions", None, 404, 40401),
    ("GET", "/subjects/users-value/versions/7", None, 404, 40402),
    ("GET", "/schemas/ids/99", None, 404, 40403),
    ("GET", "/schemas/ids/x", None, 404, 40403),
    ("POST", "/subjects/users-value", {"schema": '"int"'}, 404, 40403),
    ("POST", "/subjects/nope", {"schema": '"int"'}, 404, 40401),
    ("POST", "/subjects/users-value/versions", {"schema": '{"type": "record"}'}, 422, 42201),
    ("POST", "/subjects/users-value/versions", {"schema": "not json"}, 422, 42201),
    ("POST", "/subjects/users-value/versions", {}, 422, 42201),
    ("POST", "/subjects/users-value/versions", {"schema": record("my-server.Value")}, 422, 42201),
    ("POST", "/subjects/users-value/versions", {"schema": record("R", {"name": "a", "type": "int"},
                                                                  {"name": "a", "type": "long"})}, 422, 42201),
    ("POST", "/subjects/users-value/versions", {"schema": record("R", {"name": "my-field", "type": "int"})}, 422,
     42201),
    ("POST", "/subjects/users-value/versions", {"schema": "{}", "schemaType": "PROTOBUF"}, 422, 42201),
    ("GET", "/subjects/users-value/versions/0", None, 422, 42202),
    ("GET", "/subjects/users-value/versions/abc", None, 422, 42202),
    ("GET", "/subjects/users-value/versions/2147483648", None, 422, 42202),
    ("PUT", "/config", {"compatibility": "SIDEWAYS"}, 422, 42203),
    ("GET", "/config/users-value", None, 404, 40408),
    ("GET", "/nowhere", None, 404, 404),
    ("PATCH", "/subjects", None, 405, 405),
])
def test_errors_carry_confluents_codes(url, method, path, body, status, code):
    call(url, "POST", "/subjects/users-value/versions", {"schema": V1})
    got_status, got = call(url, method, path, body)
    assert (got_status, got["error_code"]) == (status, code), got
    assert isinstance(got["message"], str) and got["message"]


def test_bad_requests_are_answered_without_taking_the_registry_down(url):
    assert call(url, "POST", "/subjects/s/versions", raw=b"{not json")[0] == 400
    assert call(url, "POST", "/subjects/s/versions", raw=b"[" * 100_000 + b"]" * 100_000)[0] in (400, 422)
    big = b'{"schema": "' + b"x" * (9 << 20) + b'"}'
    try:
        assert call(url, "POST", "/subjects/s/versions", raw=big)[0] == 413
    except (ConnectionError, urllib.error.URLError):
        pass  # the registry answered 413 and closed while the client was still sending: refused either way
    assert call(url, "POST", "/subjects/s/versions", {"schema": '"string"'}) == (200, {"id": 1})


@pytest.mark.slow
def test_concurrent_clients_get_distinct_ids_and_no_errors(url):
    """Eight clients registering and listing at once: every answer 200, one id per distinct schema."""
    import threading

    answers: list[tuple[int, object]] = []

    def client(n: int) -> None:
        for i in range(10):
            answers.append(call(url, "POST", f"/subjects/s{n}/versions",
                                {"schema": json.dumps({"type": "enum", "name": "E", "symbols": [f"S{n}_{i}"]})}))
            answers.append(call(url, "GET", "/subjects"))
            answers.append(call(url, "PUT", f"/config/s{n}", {"compatibility": "NONE"}))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 240 and {status for status, _ in answers} == {200}
    ids = [body["id"] for status, body in answers if isinstance(body, dict) and "id" in body]
    assert sorted(ids) == list(range(1, 81))


def test_compatibility_levels_refuse_and_allow(url):
    assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    call(url, "POST", "/subjects/u/versions", {"schema": V1})
    refused = call(url, "POST", "/subjects/u/versions", {"schema": NO_DEFAULT})
    assert refused[0] == 409 and refused[1]["error_code"] == 409 and "email" in refused[1]["message"]
    assert call(url, "POST", "/compatibility/subjects/u/versions/latest", {"schema": NO_DEFAULT}) == \
        (200, {"is_compatible": False})
    verbose = call(url, "POST", "/compatibility/subjects/u/versions/latest?verbose=true", {"schema": NO_DEFAULT})[1]
    assert verbose["is_compatible"] is False and "email" in verbose["messages"][0]
    assert call(url, "POST", "/compatibility/subjects/u/versions", {"schema": V2}) == (200, {"is_compatible": True})
    assert call(url, "POST", "/compatibility/subjects/nope/versions/1", {"schema": V2})[1]["error_code"] == 40401
    assert call(url, "POST", "/compatibility/subjects/u/versions/9", {"schema": V2})[1]["error_code"] == 40402
    # FORWARD: the old schema must read the new one's data: a field dropped without a default is refused
    assert call(url, "PUT", "/config/u", {"compatibility": "forward"}) == (200, {"compatibility": "FORWARD"})
    assert call(url, "GET", "/config/u") == (200, {"compatibilityLevel": "FORWARD"})
    assert call(url, "POST", "/subjects/u/versions", {"schema": NO_DEFAULT}) == (200, {"id": 2})  # adds a field
    only_email = record("User", {"name": "email", "type": "string"})
    assert call(url, "POST", "/subjects/u/versions", {"schema": only_email})[0] == 409  # drops name: the old needs it
    assert call(url, "PUT", "/config/u", {"compatibility": "NONE"})[0] == 200
    assert call(url, "POST", "/subjects/u/versions", {"schema": '"string"'}) == (200, {"id": 3})
    assert call(url, "DELETE", "/config/u") == (200, {"compatibilityLevel": "NONE"})
    assert call(url, "GET", "/config/u?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})


def test_transitive_levels_check_every_version():
    from klog.registry.compat import compatibility_problems

    def parsed(text: str) -> object:
        import fastavro

        return fastavro.parse_schema(json.loads(text), _write_hint=False)

    a = parsed(record("R", {"name": "x", "type": "int"}))
    b = parsed(record("R", {"name": "x", "type": "int", "default": 0}, {"name": "y", "type": "int", "default": 0}))
    c = parsed(record("R", {"name": "y", "type": "int", "default": 0}))
    # c reads b (x dropped is fine for a reader) and a (y has a default); FORWARD_TRANSITIVE: a cannot read c
    # (a needs x, which c does not write and a has no default for), while b can
    assert compatibility_problems("FORWARD", c, [a, b]) == []
    assert compatibility_problems("FORWARD_TRANSITIVE", c, [a, b]) != []
    assert compatibility_problems("BACKWARD_TRANSITIVE", c, [a, b]) == []
    assert compatibility_problems("FULL_TRANSITIVE", c, [a, b]) != []


@pytest.mark.parametrize(("writer", "reader", "readable"), [
    ('"int"', '"long"', True), ('"long"', '"int"', False), ('"int"', '"double"', True), ('"string"', '"bytes"', True),
    ('"float"', '"double"', True), ('"double"', '"float"', False),
    ('["null", "int"]', '"int"', False), ('"int"', '["null", "int"]', True), ('"int"', '["null", "long"]', True),
    ('{"type": "enum", "name": "E", "symbols": ["A", "B"]}', '{"type": "enum", "name": "E", "symbols": ["A"]}', False),
    ('{"type": "enum", "name": "E", "symbols": ["A", "B"]}',
     '{"type": "enum", "name": "E", "symbols": ["A"], "default": "A"}', True),
    ('{"type": "fixed", "name": "F", "size": 4}', '{"type": "fixed", "name": "F", "size": 8}', False),
    ('{"type": "array", "items": "int"}', '{"type": "array", "items": "long"}', True),
    ('{"type": "map", "values": "long"}', '{"type": "map", "values": "int"}', False),
    (record("A", {"name": "x", "type": "int"}), record("B", {"name": "x", "type": "int"}), False),
    (record("a.A", {"name": "x", "type": "int"}), record("b.A", {"name": "x", "type": "int"}), True),
    ('{"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}', '"bytes"', True),
])
def test_avro_schema_resolution_rules(writer, reader, readable):
    import fastavro

    from klog.registry.compat import read_problems

    def parsed(text: str) -> object:
        return fastavro.parse_schema(json.loads(text), _write_hint=False)

    assert (read_problems(parsed(reader), parsed(writer)) == []) is readable


def test_deletes_soft_then_permanent_as_confluent(url):
    call(url, "POST", "/subjects/d/versions", {"schema": V1})
    call(url, "POST", "/subjects/d/versions", {"schema": V2})
    assert call(url, "DELETE", "/subjects/d/versions/1?permanent=true")[1]["error_code"] == 40407
    assert call(url, "DELETE", "/subjects/d/versions/1") == (200, 1)
    assert call(url, "DELETE", "/subjects/d/versions/1")[1]["error_code"] == 40406
    assert call(url, "GET", "/subjects/d/versions/1")[1]["error_code"] == 40402
    assert call(url, "GET", "/subjects/d/versions") == (200, [2])
    assert call(url, "GET", "/subjects/d/versions?deleted=true") == (200, [1, 2])
    assert call(url, "GET", "/schemas/ids/1") == (200, {"schema": V1})  # a soft-deleted schema keeps its id
    assert call(url, "DELETE", "/subjects/d?permanent=true")[1]["error_code"] == 40405
    assert call(url, "DELETE", "/subjects/d") == (200, [2])
    assert call(url, "GET", "/subjects") == (200, [])
    assert call(url, "GET", "/subjects?deleted=true") == (200, ["d"])
    assert call(url, "DELETE", "/subjects/d")[1]["error_code"] == 40404
    # registering again after a soft delete continues the version numbers, with the schema's id
    assert call(url, "POST", "/subjects/d/versions", {"schema": V1}) == (200, {"id": 1})
    assert call(url, "GET", "/subjects/d/versions") == (200, [3])
    assert call(url, "DELETE", "/subjects/d") == (200, [3])
    assert call(url, "DELETE", "/subjects/d?permanent=true") == (200, [1, 2, 3])
    assert call(url, "GET", "/schemas/ids/1")[1]["error_code"] == 40403
    assert call(url, "DELETE", "/subjects/d")[1]["error_code"] == 40401


@pytest.mark.slow
def test_ids_versions_and_levels_survive_a_restart(data_dir):
    with serving(data_dir) as url:
        assert call(url, "POST", "/subjects/a/versions", {"schema": V1}) == (200, {"id": 1})
        assert call(url, "POST", "/subjects/a/versions", {"schema": V2}) == (200, {"id": 2})
        assert call(url, "POST", "/subjects/b/versions", {"schema": '"string"'}) == (200, {"id": 3})
        call(url, "DELETE", "/subjects/b")
        call(url, "PUT", "/config", {"compatibility": "FULL"})
    with serving(data_dir) as url:
        assert call(url, "GET", "/subjects") == (200, ["a"])
        assert call(url, "GET", "/subjects/a/versions/2")[1] == {"subject": "a", "version": 2, "id": 2, "schema": V2}
        assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "FULL"})
        assert call(url, "POST", "/subjects/c/versions", {"schema": '"long"'}) == (200, {"id": 4})  # 3 stays b's
        assert call(url, "POST", "/subjects/b/versions", {"schema": '"string"'}) == (200, {"id": 3})
    # Confluent's record formats in the compacted topic
    with klog.open(data_dir) as s:
        first = next(iter(s.consumer("_schemas")))
        assert s.describe_topic("_schemas").configs.get("cleanup.policy") in ("compact", None)
    assert json.loads(first.key) == {"keytype": "SCHEMA", "subject": "a", "version": 1, "magic": 1}
    assert json.loads(first.value) == {"subject": "a", "version": 1, "id": 1, "schema": V1, "deleted": False}


def test_a_schemas_topic_confluents_registry_wrote_is_served(data_dir):
    """_schemas as a Confluent registry leaves it (its NOOP and DELETE_SUBJECT records, a Protobuf schema):
    the Avro versions are served, the Protobuf one shown with its type (an Avro schema after it is
    Confluent's "different schema type" 409 under FULL), and new ids continue after the highest."""
    def key(**k: object) -> bytes:
        return json.dumps(k, separators=(",", ":")).encode()

    proto = 'syntax = "proto3"; message M { int32 a = 1; }'
    with klog.open(data_dir) as s:
        s.create_topic("_schemas", partitions=1, configs={"cleanup.policy": "compact"})
        with s.producer() as p:
            p.send("_schemas", None, key=key(keytype="NOOP", magic=0))
            p.send("_schemas", json.dumps({"subject": "a-value", "version": 1, "id": 1, "schema": V1,
                                           "deleted": False}).encode(),
                   key=key(keytype="SCHEMA", subject="a-value", version=1, magic=1))
            p.send("_schemas", json.dumps({"subject": "p-value", "version": 1, "id": 5, "schemaType": "PROTOBUF",
                                           "schema": proto, "deleted": False}).encode(),
                   key=key(keytype="SCHEMA", subject="p-value", version=1, magic=1))
            p.send("_schemas", json.dumps({"subject": "a-value", "version": 1}).encode(),
                   key=key(keytype="DELETE_SUBJECT", subject="a-value", magic=0))
            p.send("_schemas", json.dumps({"compatibilityLevel": "FULL"}).encode(),
                   key=key(keytype="CONFIG", subject=None, magic=0))
    with serving(data_dir) as url:
        assert call(url, "GET", "/subjects") == (200, ["a-value", "p-value"])
        assert call(url, "GET", "/schemas/ids/5") == (200, {"schemaType": "PROTOBUF", "schema": proto})
        assert call(url, "GET", "/subjects/p-value/versions/1")[1]["schemaType"] == "PROTOBUF"
        assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "FULL"})
        status, answer = call(url, "POST", "/subjects/p-value/versions", {"schema": '"string"'})
        assert (status, answer["error_code"]) == (409, 409)
        assert "Incompatible because of different schema type" in answer["message"]
        assert call(url, "POST", "/subjects/a-value/versions", {"schema": V2}) == (200, {"id": 6})


def test_confluent_kafkas_schema_registry_client_round_trips(url):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient({"url": url})
    schema_id = client.register_schema("orders-value", Schema(V1, "AVRO"))
    assert client.get_schema(schema_id).schema_str == V1
    assert client.lookup_schema("orders-value", Schema(V1, "AVRO")).version == 1
    assert client.register_schema("orders-value", Schema(V2, "AVRO")) == schema_id + 1
    assert client.get_subjects() == ["orders-value"]
    assert client.get_versions("orders-value") == [1, 2]
    latest = client.get_latest_version("orders-value")
    assert (latest.version, latest.schema_id, latest.schema.schema_str) == (2, schema_id + 1, V2)
    assert client.test_compatibility("orders-value", Schema(NO_DEFAULT, "AVRO")) is False
    client.set_compatibility("orders-value", "NONE")
    assert client.get_compatibility("orders-value") == "NONE"
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_version("orders-value", 9)
    assert missing.value.error_code == 40402
    assert client.delete_subject("orders-value") == [1, 2]
    assert client.delete_subject("orders-value", permanent=True) == [1, 2]


@contextmanager
def cli_registry(data_dir: str, *args: str):
    """`klog registry` as a process on an ephemeral port: (its base URL, the process)."""
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "registry", "--listen", "127.0.0.1:0", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline().decode()
        assert line.startswith("klog registry: serving on http://127.0.0.1:"), line + proc.stderr.read().decode()
        yield line.split()[4], proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_cli_command_serves_and_stops_on_sigterm(data_dir):
    with cli_registry(data_dir) as (base, proc):
        assert call(base, "POST", "/subjects/s/versions", {"schema": '"string"'}) == (200, {"id": 1})
        assert call(base, "GET", "/subjects/zz/versions")[0] == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        refused = proc.stderr.read().decode()
        assert refused.count("\n") == 1 and "GET /subjects/zz/versions: 404" in refused and "Traceback" not in refused
    with serving(data_dir) as url:
        assert call(url, "GET", "/subjects") == (200, ["s"])


@pytest.mark.slow
def test_the_registry_keeps_its_schemas_in_a_cluster(kafka_server, data_dir, tmp_path):
    """`klog registry -b`: the schemas go to the cluster's `_schemas` (here klog serve's store), and a new
    registry over the same cluster finds them."""
    elsewhere = str(tmp_path / "unused-store")
    with cli_registry(elsewhere, "-b", kafka_server.bootstrap) as (base, proc):
        assert call(base, "POST", "/subjects/s/versions", {"schema": V1}) == (200, {"id": 1})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    with cli_registry(elsewhere, "-b", kafka_server.bootstrap) as (base, proc):
        assert call(base, "GET", "/subjects/s/versions/1")[1] == {"subject": "s", "version": 1, "id": 1, "schema": V1}
        assert call(base, "POST", "/subjects/t/versions", {"schema": '"int"'}) == (200, {"id": 2})
    with klog.open(data_dir) as s:
        keys = [json.loads(r.key) for r in s.consumer("_schemas")]
    assert keys == [{"keytype": "SCHEMA", "subject": "s", "version": 1, "magic": 1},
                    {"keytype": "SCHEMA", "subject": "t", "version": 1, "magic": 1}]

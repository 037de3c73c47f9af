"""`klog registry` with JSON Schema (schemaType JSON): Confluent's REST shapes, the metaschema check (42201),
one id per schema, Confluent's JSON compatibility rules (its STRICT policy), and confluent-kafka's own
JSONSerializer / JSONDeserializer against it."""

from __future__ import annotations

import json

import pytest

import klog

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")
pytest.importorskip("jsonschema", reason="the JSON Schema metaschema check needs jsonschema")

from klog.protocol.json_compat import backward_problems, differences  # noqa: E402
from tests.registry.helpers import serving  # noqa: E402
from tests.registry.test_registry_rest import V1, call  # noqa: E402


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def js(**doc: object) -> str:
    return json.dumps(doc)


CLOSED = js(type="object", properties={"id": {"type": "integer"}}, additionalProperties=False)
CLOSED_PLUS = js(type="object", properties={"id": {"type": "integer"}, "note": {"type": "string"}},
                 additionalProperties=False)
OPEN = js(type="object", properties={"id": {"type": "integer"}})


def register(url: str, subject: str, schema: str, kind: str = "JSON") -> tuple[int, object]:
    return call(url, "POST", f"/subjects/{subject}/versions", {"schemaType": kind, "schema": schema})


def test_json_schemas_register_look_up_and_answer_with_their_type(url):
    assert register(url, "j-value", CLOSED) == (200, {"id": 1})
    # the same schema spelt with other whitespace: the same id, no new version
    same = json.dumps(json.loads(CLOSED), indent=2)
    assert register(url, "j-value", same) == (200, {"id": 1})
    assert register(url, "other-value", CLOSED) == (200, {"id": 1})
    assert call(url, "GET", "/subjects/j-value/versions") == (200, [1])
    assert call(url, "GET", "/subjects/j-value/versions/1") == (200, {"subject": "j-value", "version": 1, "id": 1,
                                                                     "schemaType": "JSON", "schema": CLOSED})
    assert call(url, "GET", "/schemas/ids/1") == (200, {"schemaType": "JSON", "schema": CLOSED})
    assert call(url, "POST", "/subjects/j-value", {"schemaType": "JSON", "schema": same})[1]["id"] == 1
    # looked up as Avro, a JSON schema's text is not found (a schema is its type and its text)
    assert call(url, "POST", "/subjects/j-value", {"schema": '"string"'})[0] == 404
    # keys in another order are another schema, as Confluent's canonical JSON keeps their order
    reordered = json.dumps({"additionalProperties": False, "properties": {"id": {"type": "integer"}}, "type": "object"})
    assert call(url, "POST", "/subjects/j-value", {"schemaType": "JSON", "schema": reordered})[0] == 404
    # an Avro schema keeps Confluent's shape: no schemaType
    assert register(url, "a-value", V1, "AVRO") == (200, {"id": 2})
    assert call(url, "GET", "/schemas/ids/2") == (200, {"schema": V1})
    assert call(url, "GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])


@pytest.mark.slow
def test_json_versions_survive_a_restart_as_confluent_writes_them(data_dir):
    with serving(data_dir) as url:
        assert register(url, "j-value", CLOSED) == (200, {"id": 1})
    with klog.open(data_dir) as s, s.consumer("_schemas") as c:
        values = [json.loads(r.value) for r in c if r.value]
    assert values == [{"subject": "j-value", "version": 1, "id": 1, "schemaType": "JSON", "schema": CLOSED,
                       "deleted": False}]
    with serving(data_dir) as url:
        assert register(url, "j-value", CLOSED) == (200, {"id": 1})
        assert register(url, "j-value", CLOSED_PLUS) == (200, {"id": 2})


@pytest.mark.parametrize("schema", [
    "not json", "[1, 2]", '"string"', js(type=5), js(type="object", properties=[]), js(minLength=-1),
    js(type="object", properties={"a": {"$ref": "#/definitions/missing"}}),
    js(type="object", properties={"a": {"$ref": "https://example.com/other.json"}}),
])
def test_a_bad_json_schema_is_42201(url, schema):
    status, answer = register(url, "j-value", schema)
    assert (status, answer["error_code"]) == (422, 42201), answer


def test_an_unknown_schema_type_is_refused_naming_what_klog_keeps(url):
    status, answer = register(url, "p-value", 'syntax = "proto3"; message M { int32 a = 1; }', "XML")
    assert (status, answer["error_code"]) == (422, 42201)
    assert "AVRO" in answer["message"] and "JSON" in answer["message"] and "PROTOBUF" in answer["message"]


def test_backward_compatibility_follows_confluents_rules(url):
    """Confluent's STRICT policy: an optional property may be added to a closed content model
    (additionalProperties false), not to an open one; a type may not change; integer may become number."""
    assert register(url, "closed-value", CLOSED) == (200, {"id": 1})
    assert register(url, "closed-value", CLOSED_PLUS) == (200, {"id": 2})  # optional property added: fine
    id_removed = js(type="object", properties={"note": {"type": "string"}}, additionalProperties=False)
    status, answer = register(url, "closed-value", id_removed)  # a property removed from a closed model
    assert (status, answer["error_code"]) == (409, 409)
    assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in answer["message"]

    assert register(url, "open-value", OPEN) == (200, {"id": 3})
    status, answer = register(url, "open-value", js(type="object", properties={"id": {"type": "integer"},
                                                                              "note": {"type": "string"}}))
    assert status == 409 and "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in answer["message"]
    changed = js(type="object", properties={"id": {"type": "string"}})
    verdict = call(url, "POST", "/compatibility/subjects/open-value/versions/latest?verbose=true",
                   {"schemaType": "JSON", "schema": changed})
    assert verdict[1]["is_compatible"] is False and "TYPE_CHANGED" in verdict[1]["messages"][0]
    widened = js(type="object", properties={"id": {"type": "number"}})
    assert call(url, "POST", "/compatibility/subjects/open-value/versions/latest",
                {"schemaType": "JSON", "schema": widened}) == (200, {"is_compatible": True})
    # a property removed from an open model is fine (the new reader takes any other property)
    assert register(url, "open-value", js(type="object", properties={})) == (200, {"id": 4})
    # FORWARD: the old schema must read what the new one allows
    assert call(url, "PUT", "/config/closed-value", {"compatibility": "FORWARD"})[0] == 200
    status, _ = register(url, "closed-value", js(type="object", properties={"id": {"type": "integer"},
                                                                         "note": {"type": "string"},
                                                                         "more": {"type": "string"}},
                                               additionalProperties=False))
    assert status == 409


@pytest.mark.parametrize(("old", "new", "compatible"), [
    ({"type": "string"}, {"type": "string", "maxLength": 3}, False),
    ({"type": "string", "maxLength": 3}, {"type": "string"}, True),
    ({"type": "integer"}, {"type": "number"}, True),
    ({"type": "number"}, {"type": "integer"}, False),
    ({"type": "string"}, {"oneOf": [{"type": "null"}, {"type": "string"}]}, True),  # made optional
    ({"oneOf": [{"type": "null"}, {"type": "string"}]}, {"type": "string"}, False),  # made required
    ({"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a", "b"]}, True),
    ({"type": "string", "enum": ["a", "b"]}, {"type": "string", "enum": ["a"]}, False),
    ({"properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"a": {"type": "string"}}}, True),
    ({"properties": {"a": {"type": "string"}}}, {"properties": {"a": {"type": "string"}}, "required": ["a"]}, False),
    ({"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "boolean"}}, False),
    ({"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}, "definitions": {"A": {"type": "integer"}}},
     {"type": "object", "properties": {"a": {"type": "integer"}}}, True),
    ({"type": "string", "connect.type": "bytes"}, {"type": "number", "connect.type": "bytes"}, True),
])
def test_json_compatibility_cases(old, new, compatible):
    assert (not backward_problems(new, old)) is compatible, differences(old, new)


def test_confluent_kafkas_json_serializer_and_deserializer_use_the_registry(url):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = js(title="User", type="object", properties={"name": {"type": "string"}, "age": {"type": "integer"}},
                required=["name"])
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext("users", MessageField.VALUE)
    data = JSONSerializer(schema, client)({"name": "ada", "age": 36}, ctx)
    assert data[:1] == b"\x00" and int.from_bytes(data[1:5], "big") == 1
    assert call(url, "GET", "/subjects/users-value/versions/1")[1]["schemaType"] == "JSON"
    assert JSONDeserializer(None, schema_registry_client=client)(data, ctx) == {"name": "ada", "age": 36}
    registered = client.get_latest_version("users-value")
    assert registered.schema.schema_type == "JSON" and json.loads(registered.schema.schema_str) == json.loads(schema)


# -- hostile schemas: every request bounded, the registry answering others meanwhile ----------------------
EVIL_PATTERN = "^(a+)+$"  # backtracks exponentially on a's that end in something else
EVIL_NAME = "a" * 30 + "!"  # Python's re: ~1 minute (28 a's: 14 s), holding the GIL


@pytest.mark.slow
def test_a_backtracking_pattern_is_refused_in_bounded_time_while_others_are_answered(url):
    """patternProperties' patterns are matched against property names when a property is added or removed
    under a partially open content model: both come from the request. The matching runs in a child process
    with a deadline (42201 past it), and a compatibility check holds no lock meanwhile."""
    import threading
    import time

    old = js(type="object", properties={EVIL_NAME: {"type": "string"}})
    new = js(type="object", properties={}, patternProperties={EVIL_PATTERN: {"type": "string"}},
             additionalProperties=False)
    assert register(url, "evil-value", old) == (200, {"id": 1})
    verdict: list[object] = []
    started = time.monotonic()
    checker = threading.Thread(target=lambda: verdict.append(call(
        url, "POST", "/compatibility/subjects/evil-value/versions/latest", {"schemaType": "JSON", "schema": new})))
    checker.start()
    time.sleep(0.3)
    asked = time.monotonic()
    assert call(url, "GET", "/subjects") == (200, ["evil-value"])
    assert time.monotonic() - asked < 1.5  # not behind the check
    checker.join(timeout=15)
    status, answer = verdict[0]
    assert (status, answer["error_code"]) == (422, 42201) and "takes too long to match" in answer["message"]
    assert time.monotonic() - started < 10
    registered: list[object] = []  # registering: the same deadline, and no lock held while comparing
    registrar = threading.Thread(target=lambda: registered.append(register(url, "evil-value", new)))
    registrar.start()
    time.sleep(0.3)
    asked = time.monotonic()
    assert call(url, "GET", "/subjects/evil-value/versions") == (200, [1])
    assert time.monotonic() - asked < 1.5
    registrar.join(timeout=15)
    status, answer = registered[0]
    assert (status, answer["error_code"]) == (422, 42201)
    # an ordinary pattern still covers a removed property (PROPERTY_REMOVED_IS_COVERED_BY_...)
    assert register(url, "fine-value", js(type="object", properties={"x_1": {"type": "string"}})) == (200, {"id": 2})
    covered = js(type="object", properties={}, patternProperties={"^x_": {"type": "string"}},
                 additionalProperties=False)
    assert call(url, "POST", "/compatibility/subjects/fine-value/versions/latest?verbose=true",
                {"schemaType": "JSON", "schema": covered})[1]["messages"] == \
        ['BACKWARD: {errorType:"ADDITIONAL_PROPERTIES_REMOVED", path:"#/additionalProperties"}']


def nested_any_of(depth: int, leaf: str) -> str:
    """anyOfs whose parts share the next level by $ref: a small document whose comparison multiplies."""
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/definitions/d{i + 1}"}, {"allOf": [{"$ref": f"#/definitions/d{i + 1}"}]},
                                {"type": "string", "maxLength": i}]} for i in range(depth)}
    defs[f"d{depth}"] = {"type": leaf}
    return js(definitions=defs, **{"$ref": "#/definitions/d0"})


@pytest.mark.slow
def test_schemas_too_complex_to_compare_are_refused_in_bounded_time(url):
    import time

    from klog.protocol.json_schema import SchemaProblem

    with pytest.raises(SchemaProblem, match="too complex to compare"):  # was ~3^30 comparisons
        backward_problems(json.loads(nested_any_of(30, "number")), json.loads(nested_any_of(30, "integer")))
    assert backward_problems(json.loads(nested_any_of(6, "number")), json.loads(nested_any_of(6, "integer"))) == []
    assert register(url, "deep-value", nested_any_of(30, "integer")) == (200, {"id": 1})
    started = time.monotonic()
    status, answer = register(url, "deep-value", nested_any_of(30, "number"))
    assert (status, answer["error_code"]) == (422, 42201) and "too complex" in answer["message"]
    assert time.monotonic() - started < 8


def test_avro_and_json_under_one_subject_are_confluents_different_schema_type(url):
    """Confluent compares a schema with the subject's latest (or every one, transitive) whatever its
    type: one of another type is incompatible, unless the level is NONE."""
    assert register(url, "mixed-value", '"string"', "AVRO") == (200, {"id": 1})
    status, answer = register(url, "mixed-value", CLOSED)
    assert status == 409 and "Incompatible because of different schema type" in answer["message"]
    assert call(url, "POST", "/compatibility/subjects/mixed-value/versions/latest?verbose=true",
                {"schemaType": "JSON", "schema": CLOSED})[1] == \
        {"is_compatible": False, "messages": ["Incompatible because of different schema type"]}
    assert call(url, "PUT", "/config/mixed-value", {"compatibility": "NONE"})[0] == 200
    assert register(url, "mixed-value", CLOSED) == (200, {"id": 2})
    assert call(url, "GET", "/subjects/mixed-value/versions/2")[1]["schemaType"] == "JSON"
    # a JSON schema is not found as Avro, nor an Avro one as JSON
    assert call(url, "POST", "/subjects/mixed-value", {"schema": CLOSED})[0] in (404, 422)
    assert call(url, "POST", "/subjects/mixed-value", {"schemaType": "JSON", "schema": '"string"'})[0] in (404, 422)


def test_normalize_registers_and_looks_up_confluents_normalized_form(url):
    """normalize=true: a JSON schema's keys sorted, no whitespace (Confluent's JsonSchema.normalize), so
    one spelt with its keys in another order is the same schema; without it key order counts."""
    first = js(type="object", properties={"b": {"type": "string"}, "a": {"type": "integer"}})
    reordered = json.dumps({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"})
    assert call(url, "POST", "/subjects/n-value/versions?normalize=true",
                {"schemaType": "JSON", "schema": first}) == (200, {"id": 1})
    assert call(url, "GET", "/subjects/n-value/versions/1")[1]["schema"] == \
        '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}'
    assert call(url, "POST", "/subjects/n-value/versions?normalize=true",
                {"schemaType": "JSON", "schema": reordered}) == (200, {"id": 1})
    assert call(url, "POST", "/subjects/n-value?normalize=true", {"schemaType": "JSON", "schema": first})[1]["id"] == 1
    assert call(url, "POST", "/subjects/n-value", {"schemaType": "JSON", "schema": first})[0] == 404
    assert call(url, "POST", "/compatibility/subjects/n-value/versions/latest?normalize=true",
                {"schemaType": "JSON", "schema": reordered}) == (200, {"is_compatible": True})


def test_a_ref_to_the_own_id_resolves_and_nothing_is_fetched(url):
    """Confluent resolves, with everit, a `$ref` to the schema's own `$id`: klog too, locally; a `$ref` to
    anything else that is not one of the schema's references is refused (42201, no network)."""
    own = js(**{"$id": "http://127.0.0.1:9/a.json"}, definitions={"y": {"type": "string"}},
             type="object", properties={"x": {"$ref": "http://127.0.0.1:9/a.json#/definitions/y"}})
    assert register(url, "ref-value", own) == (200, {"id": 1})
    for remote in ("http://127.0.0.1:9/b.json#/definitions/y", "b.json", "#anchor"):
        status, answer = register(url, "ref-value", js(type="object", properties={"x": {"$ref": remote}}))
        assert (status, answer["error_code"]) == (422, 42201), remote


@pytest.mark.slow
def test_at_most_two_request_schemas_are_parsed_at_once(url, monkeypatch):
    """Parsing runs without the registry's lock (a large schema's metaschema check is seconds): two at
    once bound the memory many large requests at a time would take."""
    import threading
    import time

    from klog.registry import schemas

    at_once, most, seen = [0], [0], set()
    count = threading.Lock()
    check = schemas._check_metaschema

    def slow_check(doc: dict) -> None:
        with count:  # a request's schema is parsed before it is stored (then parsed again as a version)
            first = doc["title"] not in seen
            seen.add(doc["title"])
            at_once[0] += first
            most[0] = max(most[0], at_once[0])
        if first:
            time.sleep(0.3)
            with count:
                at_once[0] -= 1
        check(doc)

    monkeypatch.setattr(schemas, "_check_metaschema", slow_check)
    workers = [threading.Thread(target=register, args=(url, f"p{i}-value", js(title=f"p{i}", type="string")))
               for i in range(5)]
    for w in workers:
        w.start()
    time.sleep(0.1)
    assert call(url, "GET", "/subjects")[0] == 200  # answered meanwhile
    for w in workers:
        w.join(timeout=10)
    assert call(url, "GET", "/subjects")[1] == [f"p{i}-value" for i in range(5)]
    assert most[0] == 2


def test_a_comparison_is_bounded_in_time_too():
    """Enums' values are kept per schema (anyOfs of 100 enums of 1,000 values: 28 s, now a fraction of a
    second), and a request's comparisons stop at json_compat.MAX_SECONDS whatever each one costs."""
    import time

    from klog.protocol.json_compat import Budget
    from klog.protocol.json_schema import SchemaProblem

    old = {"anyOf": [{"enum": [f"v{i}_{j}" for j in range(1000)]} for i in range(100)]}
    new = {"anyOf": [*old["anyOf"], {"type": "null"}]}
    started = time.monotonic()
    assert backward_problems(new, old) == []
    assert time.monotonic() - started < 5
    both = {"enum": ["a", "b"], "const": "a"}  # one document, two kinds: each its own values
    assert backward_problems(both, both) == []
    # the count is each pair of schemas' (a transitive level compares with many), the time the request's
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20)}}
    budget = Budget(comparisons=30)
    try:
        assert backward_problems(wide, wide, budget) == [] and backward_problems(wide, wide, budget) == []
    finally:
        budget.close()
    budget = Budget(seconds=0.0)
    try:
        with pytest.raises(SchemaProblem, match="more than 0 s"):
            backward_problems(new, old, budget)
    finally:
        budget.close()


def test_a_version_registered_while_another_is_compared_is_compared_with_too(data_dir):
    """register compares without the lock: a version another request registered meanwhile sends the
    comparison round again, against it (here the new one is compatible with v1, not with v2)."""
    from klog.registry.schemas import Registry, RegistryError

    note_as_number = js(type="object", properties={"id": {"type": "integer"}, "note": {"type": "integer"}},
                        additionalProperties=False)
    with klog.open(data_dir) as store:
        registry = Registry(store)
        try:
            assert registry.register("race-value", CLOSED, "JSON") == 1
            compare = registry._problems
            meanwhile: list[int] = []

            def compare_while_another_registers(*args: object) -> list[str]:
                if not meanwhile:
                    registry._problems = compare  # the other request compares as usual
                    meanwhile.append(registry.register("race-value", CLOSED_PLUS, "JSON"))
                return compare(*args)

            registry._problems = compare_while_another_registers
            with pytest.raises(RegistryError, match="TYPE_CHANGED"):
                registry.register("race-value", note_as_number, "JSON")
            assert meanwhile == [2] and [v.version for v in registry.live("race-value")] == [1, 2]
        finally:
            registry.close()


@pytest.mark.slow
def test_at_most_two_requests_compare_at_once(url, monkeypatch):
    """Comparing runs without the registry's lock too, within the same two places (a hostile comparison
    takes its bounds: seconds of a core, a child process matching patterns)."""
    import threading
    import time

    from klog.protocol import json_compat

    assert register(url, "cmp-value", OPEN) == (200, {"id": 1})
    at_once, most = [0], [0]
    count = threading.Lock()
    compare = json_compat.backward_problems

    def slow_compare(*args: object, **kwargs: object) -> list[str]:
        with count:
            at_once[0] += 1
            most[0] = max(most[0], at_once[0])
        time.sleep(0.3)
        with count:
            at_once[0] -= 1
        return compare(*args, **kwargs)

    monkeypatch.setattr(json_compat, "backward_problems", slow_compare)
    answers: list[object] = []
    workers = [threading.Thread(target=lambda: answers.append(call(
        url, "POST", "/compatibility/subjects/cmp-value/versions/latest", {"schemaType": "JSON", "schema": OPEN})))
        for _ in range(5)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=10)
    assert answers == [(200, {"is_compatible": True})] * 5 and most[0] == 2


def test_patterns_are_matched_when_the_process_has_many_descriptors():
    """A busy registry's descriptors pass 1024, which select() cannot wait on: the child is polled."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) < 1200:
        pytest.skip("cannot open 1,200 descriptors here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        old = {"type": "object", "properties": {"x_1": {"type": "string"}}}
        new = {"type": "object", "properties": {}, "patternProperties": {"^x_": {"type": "string"}},
               "additionalProperties": False}
        assert backward_problems(new, old) == \
            ['{errorType:"ADDITIONAL_PROPERTIES_REMOVED", path:"#/additionalProperties"}']
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_no_child_for_the_patterns_is_a_refusal_not_a_500(monkeypatch):
    import errno

    from klog.protocol import json_patterns as patterns
    from klog.protocol.json_schema import SchemaProblem

    def no_process(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(patterns.subprocess, "Popen", no_process)
    old = {"type": "object", "properties": {"x_1": {"type": "string"}}}
    new = {"type": "object", "properties": {}, "patternProperties": {"^x_": {"type": "string"}},
           "additionalProperties": False}
    with pytest.raises(SchemaProblem, match="could not be matched.*Too many open files"):
        backward_problems(new, old)

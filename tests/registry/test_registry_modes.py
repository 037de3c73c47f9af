"""`klog registry`'s modes (Confluent's /mode API): READWRITE, READONLY (and READONLY_OVERRIDE) refusing
writes with 42205, IMPORT taking a schema with its id and version (how an exporter copies a registry), only on
an empty registry or subject unless forced; kept in `_schemas` across restarts; with plain HTTP and with
confluent-kafka's SchemaRegistryClient (its get/update/delete mode calls, its Avro serde over imported ids)."""

from __future__ import annotations

import json

import pytest

import klog

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from tests.registry.helpers import serving  # noqa: E402
from tests.registry.test_registry_rest import V1, V2, call  # noqa: E402


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def test_modes_are_read_set_and_deleted_as_confluent_answers(url):
    assert call(url, "GET", "/mode") == (200, {"mode": "READWRITE"})
    status, answer = call(url, "GET", "/mode/users-value")
    assert (status, answer["error_code"]) == (404, 40409)
    assert answer["message"] == "Subject 'users-value' does not have subject-level mode configured"
    assert call(url, "GET", "/mode/users-value?defaultToGlobal=true") == (200, {"mode": "READWRITE"})
    assert call(url, "PUT", "/mode/users-value", {"mode": "readonly"}) == (200, {"mode": "readonly"})  # echoed
    assert call(url, "GET", "/mode/users-value") == (200, {"mode": "READONLY"})
    assert call(url, "PUT", "/mode", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})  # an empty registry
    assert call(url, "GET", "/mode/other?defaultToGlobal=true") == (200, {"mode": "IMPORT"})
    assert call(url, "GET", "/mode/users-value?defaultToGlobal=true") == (200, {"mode": "READONLY"})
    assert call(url, "DELETE", "/mode/users-value") == (200, {"mode": "READONLY"})
    status, answer = call(url, "DELETE", "/mode/users-value")
    assert (status, answer["error_code"]) == (404, 40401)
    assert call(url, "DELETE", "/mode") == (200, {"mode": "IMPORT"})
    assert call(url, "GET", "/mode") == (200, {"mode": "READWRITE"})
    for body in ({"mode": "SIDEWAYS"}, {"mode": 3}, None, {"mode": "FORWARD"}):
        status, answer = call(url, "PUT", "/mode", body)
        assert (status, answer["error_code"]) == (422, 42204), body
    assert call(url, "PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert call(url, "PUT", "/mode", {"mode": None}) == (200, {"mode": None})  # a null mode: unset
    assert call(url, "GET", "/mode") == (200, {"mode": "READWRITE"})


@pytest.mark.parametrize("mode", ["READONLY", "READONLY_OVERRIDE"])
def test_read_only_refuses_every_write_but_answers_what_is_there(url, mode):
    assert call(url, "POST", "/subjects/u/versions", {"schema": V1}) == (200, {"id": 1})
    assert call(url, "PUT", "/config/u", {"compatibility": "FULL"})[0] == 200  # (else DELETE /config/u is 40401)
    assert call(url, "PUT", "/mode", {"mode": mode})[0] == 200
    refused = [("POST", "/subjects/u/versions", {"schema": V2}), ("DELETE", "/subjects/u", None),
               ("DELETE", "/subjects/u/versions/1", None), ("PUT", "/config/u", {"compatibility": "NONE"}),
               ("DELETE", "/config/u", None), ("POST", "/subjects/new/versions", {"schema": V1})]
    for method, path, body in refused:
        status, answer = call(url, method, path, body)
        assert (status, answer["error_code"]) == (422, 42205), (method, path, answer)
        assert "is in read-only mode" in answer["message"]
    assert call(url, "POST", "/subjects/u/versions", {"schema": V2})[1]["message"] == \
        "Subject u in context  is in read-only mode"  # Confluent's words (its default context is "")
    # a schema the subject has is answered: auto-registering clients keep working
    assert call(url, "POST", "/subjects/u/versions", {"schema": V1}) == (200, {"id": 1})
    assert call(url, "GET", "/subjects/u/versions") == (200, [1])
    # a subject's own mode comes first, but for a global READONLY_OVERRIDE (what the mode is for)
    assert call(url, "PUT", "/mode/u", {"mode": "READWRITE"})[0] == 200
    if mode == "READONLY_OVERRIDE":
        assert call(url, "POST", "/subjects/u/versions", {"schema": V2})[1]["error_code"] == 42205
        assert call(url, "GET", "/mode/u") == (200, {"mode": "READONLY_OVERRIDE"})
        assert call(url, "PUT", "/mode", {"mode": "READONLY"})[0] == 200
    assert call(url, "POST", "/subjects/u/versions", {"schema": V2}) == (200, {"id": 2})
    assert call(url, "PUT", "/mode/u", {"mode": "READONLY"})[0] == 200
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert call(url, "DELETE", "/subjects/u")[1]["error_code"] == 42205
    assert call(url, "POST", "/subjects/v/versions", {"schema": V1}) == (200, {"id": 1})


def test_import_keeps_the_ids_and_versions_it_is_given(url):
    assert call(url, "PUT", "/mode", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert call(url, "POST", "/subjects/u/versions", {"schema": V1, "id": 100, "version": 3}) == (200, {"id": 100})
    assert call(url, "POST", "/subjects/u/versions", {"schema": V2, "id": 7, "version": 5}) == (200, {"id": 7})
    assert call(url, "POST", "/subjects/other/versions", {"schema": V1, "id": 100}) == (200, {"id": 100})
    assert call(url, "POST", "/subjects/u/versions", {"schema": V1, "id": 100, "version": 3}) == (200, {"id": 100})
    assert call(url, "GET", "/subjects/u/versions") == (200, [3, 5])
    assert call(url, "GET", "/subjects/u/versions/5") == (200, {"subject": "u", "version": 5, "id": 7, "schema": V2})
    assert call(url, "GET", "/schemas/ids/100/versions") == (200, [{"subject": "other", "version": 1},
                                                                   {"subject": "u", "version": 3}])
    # no compatibility check in IMPORT: an incompatible schema is taken as it was in the source registry
    incompatible = json.dumps({"type": "record", "name": "User", "fields": [{"name": "n", "type": "int"}]})
    assert call(url, "POST", "/subjects/u/versions", {"schema": incompatible, "id": 8}) == (200, {"id": 8})
    # an id another schema has is refused; a schema without its id is refused (it is not read-write)
    status, answer = call(url, "POST", "/subjects/u/versions", {"schema": '"string"', "id": 7})
    assert (status, answer) == (422, {"error_code": 42205,
                                      "message": "Overwrite new schema with id 7 in context  is not permitted."})
    status, answer = call(url, "POST", "/subjects/u/versions", {"schema": '"string"'})
    assert (status, answer) == (422, {"error_code": 42205,
                                      "message": "Subject u in context  is not in read-write mode"})
    assert call(url, "POST", "/subjects/u/versions", {"schema": V2}) == (200, {"id": 7})  # what is there: answered
    # back to READWRITE: new ids continue after the highest imported, versions after the subject's last
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert call(url, "PUT", "/config", {"compatibility": "NONE"})[0] == 200
    assert call(url, "POST", "/subjects/u/versions", {"schema": '"string"'}) == (200, {"id": 101})
    assert call(url, "GET", "/subjects/u/versions") == (200, [3, 5, 6, 7])
    status, answer = call(url, "POST", "/subjects/u/versions", {"schema": '"long"', "id": 5})
    assert (status, answer) == (422, {"error_code": 42205, "message": "Subject u in context  is not in import mode"})
    status, answer = call(url, "POST", "/subjects/u/versions", {"schema": '"long"', "version": 3})
    assert (status, answer["error_code"]) == (422, 42201)  # Confluent's "Version is not one more than previous"
    for bad in ({"id": "7"}, {"id": 1.5}, {"version": "x"}):
        assert call(url, "POST", "/subjects/u/versions", {"schema": '"long"', **bad})[0] == 422


def test_import_needs_an_empty_registry_or_subject_unless_forced(url):
    assert call(url, "POST", "/subjects/a/versions", {"schema": V1}) == (200, {"id": 1})
    assert call(url, "POST", "/subjects/b/versions", {"schema": '"string"'}) == (200, {"id": 2})
    for path in ("/mode", "/mode/a"):
        status, answer = call(url, "PUT", path, {"mode": "IMPORT"})
        assert (status, answer) == (422, {"error_code": 42205,
                                          "message": "Cannot import since found existing subjects"})
    assert call(url, "GET", "/mode") == (200, {"mode": "READWRITE"})
    assert call(url, "PUT", "/mode/c", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})  # c has no versions
    # a soft-deleted subject counts as empty: its versions are deleted for good as the mode is set
    call(url, "DELETE", "/subjects/a")
    assert call(url, "PUT", "/mode/a", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert call(url, "GET", "/subjects?deleted=true") == (200, ["b"])
    assert call(url, "POST", "/subjects/a/versions", {"schema": V2, "id": 2, "version": 1})[1]["error_code"] == 42205
    assert call(url, "POST", "/subjects/a/versions", {"schema": V1, "id": 1, "version": 1}) == (200, {"id": 1})
    # force: on a registry with subjects, nothing deleted
    assert call(url, "PUT", "/mode?force=true", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert call(url, "GET", "/subjects") == (200, ["a", "b"])
    # a subject deleted for good takes its mode with it, as Confluent's permanent delete does
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    call(url, "DELETE", "/subjects/a")
    call(url, "DELETE", "/subjects/a?permanent=true")
    assert call(url, "GET", "/mode/a")[1]["error_code"] == 40409


@pytest.mark.slow
def test_modes_survive_a_restart_in_confluents_records(data_dir):
    with serving(data_dir) as url:
        assert call(url, "PUT", "/mode/u", {"mode": "READONLY"})[0] == 200
        assert call(url, "PUT", "/mode", {"mode": "IMPORT"})[0] == 200
    with serving(data_dir) as url:
        assert call(url, "GET", "/mode") == (200, {"mode": "IMPORT"})
        assert call(url, "GET", "/mode/u") == (200, {"mode": "READONLY"})
        assert call(url, "DELETE", "/mode/u")[0] == 200
    with serving(data_dir) as url:
        assert call(url, "GET", "/mode/u")[1]["error_code"] == 40409
    with klog.open(data_dir) as s:
        records = [(json.loads(r.key), r.value and json.loads(r.value)) for r in s.consumer("_schemas")]
    assert records[:2] == [({"keytype": "MODE", "subject": "u", "magic": 0}, {"subject": "u", "mode": "READONLY"}),
                           ({"keytype": "MODE", "magic": 0}, {"mode": "IMPORT"})]


@pytest.mark.slow
def test_confluent_kafkas_client_sets_modes_and_reads_an_imported_registry(data_dir, tmp_path):
    """A schema exporter's copy: records written against one registry read against another that imported its
    schemas with their ids (confluent-kafka's own mode calls and Avro serde)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext("users", MessageField.VALUE)
    with serving(data_dir) as source_url:
        source = SchemaRegistryClient({"url": source_url})
        source.register_schema("filler", Schema('"string"', "AVRO"))  # users-value's id is 2, not the copy's first
        data = AvroSerializer(source, V2)({"name": "ada", "age": 36}, context)
        exported = [call(source_url, "GET", f"/subjects/{s}/versions/{v}")[1]
                    for v in source.get_versions("users-value") for s in ["users-value"]]
    with serving(str(tmp_path / "copy")) as target_url:
        target = SchemaRegistryClient({"url": target_url})
        assert target.get_global_mode() == "READWRITE"
        assert target.update_global_mode("IMPORT") == "IMPORT"
        for v in exported:
            body = {"schema": v["schema"], "id": v["id"], "version": v["version"]}
            assert call(target_url, "POST", f"/subjects/{v['subject']}/versions", body) == (200, {"id": 2})
        assert target.update_global_mode("READONLY") == "READONLY"
        assert target.get_global_mode() == "READONLY"
        assert AvroDeserializer(target)(data, context) == {"name": "ada", "age": 36}
        with pytest.raises(SchemaRegistryError) as refused:
            AvroSerializer(target, V1)({"name": "bob"}, context)
        assert refused.value.error_code == 42205
        assert target.update_mode("users-value", "READWRITE") == "READWRITE"
        assert target.get_mode("users-value") == "READWRITE"
        assert target.delete_mode("users-value") == "READWRITE"
        with pytest.raises(SchemaRegistryError) as unset:
            target.get_mode("users-value")
        assert unset.value.error_code == 40409


def test_import_takes_what_confluents_registry_took(url):
    """An import is held to the grammar, not to what protoc refuses past it (Confluent's registry skips its
    validation for an import, and its _schemas may hold such a schema)."""
    pytest.importorskip("google.protobuf")
    lenient = 'syntax = "proto3";\nenum E { A = 1; }\nmessage M { E e = 1; }'
    body = {"schemaType": "PROTOBUF", "schema": lenient}
    assert call(url, "POST", "/subjects/p/versions", body)[1]["error_code"] == 42201  # read-write: refused
    assert call(url, "PUT", "/mode", {"mode": "IMPORT"})[0] == 200
    assert call(url, "POST", "/subjects/p/versions", {**body, "id": 12}) == (200, {"id": 12})
    assert call(url, "POST", "/subjects/q/versions", {"schemaType": "PROTOBUF", "schema": "message {", "id": 13})[1][
        "error_code"] == 42201

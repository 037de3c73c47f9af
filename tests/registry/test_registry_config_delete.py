"""`klog registry`'s DELETE /config (the global config), as Confluent's deleteTopLevelConfig answers it: the
global compatibility level and `normalize` back to their defaults, the answer the config that was."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from tests.registry.helpers import serving  # noqa: E402
from tests.registry.test_registry_rest import call  # noqa: E402
from tests.registry.test_registry_review_modes import _compacted_copy  # noqa: E402


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def test_deleting_the_global_config_answers_it_and_restores_the_defaults(url):
    assert call(url, "DELETE", "/config") == (200, {"compatibilityLevel": "BACKWARD"})  # none set: the default's
    assert call(url, "PUT", "/config", {"compatibility": "FULL", "normalize": True})[0] == 200
    assert call(url, "PUT", "/config/s", {"compatibility": "NONE"})[0] == 200
    assert call(url, "DELETE", "/config") == (200, {"compatibilityLevel": "FULL", "normalize": True})
    assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(url, "GET", "/config/s") == (200, {"compatibilityLevel": "NONE"})  # a subject's own stays
    assert call(url, "DELETE", "/config") == (200, {"compatibilityLevel": "BACKWARD"})


@pytest.mark.slow
def test_the_global_config_deleted_stays_deleted_after_a_restart(data_dir):
    with serving(data_dir) as url:
        assert call(url, "PUT", "/config", {"compatibility": "FORWARD"})[0] == 200
        assert call(url, "DELETE", "/config") == (200, {"compatibilityLevel": "FORWARD"})
    with serving(data_dir) as url:
        assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})


def test_read_only_refuses_to_delete_the_global_config(url):
    assert call(url, "PUT", "/config", {"compatibility": "NONE"})[0] == 200
    assert call(url, "PUT", "/mode", {"mode": "READONLY"})[0] == 200
    status, answer = call(url, "DELETE", "/config")
    assert (status, answer["error_code"]) == (422, 42205)
    assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "NONE"})


@pytest.mark.slow
def test_a_global_config_deleted_stays_deleted_after_compaction_whatever_key_spelling_wrote_it(data_dir, tmp_path):
    """Confluent since 6.2 writes the global CONFIG key without "subject" (klog, as Confluent until 6.1, with
    "subject":null): the delete tombstones both, or compaction would bring the older spelling's config back."""
    import klog
    with klog.open(data_dir) as s:
        s.create_topic("_schemas", partitions=1, configs={"cleanup.policy": "compact"})
        with s.producer() as p:
            p.send("_schemas", json.dumps({"compatibilityLevel": "FULL_TRANSITIVE"}).encode(),
                   key=json.dumps({"keytype": "CONFIG", "magic": 0}).encode())
    with serving(data_dir) as url:
        assert call(url, "DELETE", "/config") == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
    copy = str(tmp_path / "compacted")
    _compacted_copy(data_dir, copy)
    with serving(copy) as url:
        assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})


def test_confluent_kafkas_client_deletes_the_global_config(url):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    client = SchemaRegistryClient({"url": url})
    client.set_compatibility(level="FULL")
    assert client.delete_config().compatibility_level.value == "FULL"
    assert client.get_compatibility() == "BACKWARD"


def test_deleting_a_subjects_config_answers_its_own_config_or_40401(url):
    """As Confluent's deleteSubjectConfig: what counts is the subject's own config, not its versions."""
    assert call(url, "PUT", "/config/planned", {"compatibility": "FULL"})[0] == 200  # no versions yet
    assert call(url, "DELETE", "/config/planned") == (200, {"compatibilityLevel": "FULL"})
    assert call(url, "GET", "/config/planned")[1]["error_code"] == 40408
    assert call(url, "PUT", "/config", {"compatibility": "NONE"})[0] == 200
    assert call(url, "POST", "/subjects/s/versions", {"schema": '"string"'}) == (200, {"id": 1})
    assert call(url, "DELETE", "/config/s") == (404, {"error_code": 40401, "message": "Subject 's' not found."})
    assert call(url, "PUT", "/config/s", {"normalize": True})[0] == 200  # its level: the default's, not the global
    assert call(url, "DELETE", "/config/s") == (200, {"compatibilityLevel": "BACKWARD", "normalize": True})
    assert call(url, "DELETE", "/config/nobody")[1]["error_code"] == 40401

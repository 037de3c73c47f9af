"""A hostile review of `klog registry`'s modes and ids: what an import, a delete for good and a restart must not
do (give an id again that records in Kafka may still carry), as Confluent's registry behaves."""

from __future__ import annotations

import pytest

pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from tests.registry.helpers import serving  # noqa: E402
from tests.registry.test_registry_rest import call  # noqa: E402


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def _register(url: str, subject: str, schema: str, **extra: object) -> tuple[int, object]:
    return call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema, **extra})


def test_an_id_deleted_for_good_is_not_given_to_another_schema(url):
    """Records written with id 2 may still be in topics: a new schema must not take it (Confluent's ids only
    grow), or a consumer would decode them with the wrong schema."""
    assert _register(url, "a", '"string"') == (200, {"id": 1})
    assert _register(url, "b", '"int"') == (200, {"id": 2})
    assert call(url, "DELETE", "/subjects/b")[0] == 200
    assert call(url, "DELETE", "/subjects/b?permanent=true")[0] == 200
    assert _register(url, "c", '"long"') == (200, {"id": 3})
    assert call(url, "GET", "/schemas/ids/2")[1]["error_code"] == 40403


def test_after_an_import_deleted_for_good_new_ids_still_come_after_it(url):
    assert call(url, "PUT", "/mode", {"mode": "IMPORT"})[0] == 200
    assert _register(url, "imp", '"bytes"', id=50, version=1) == (200, {"id": 50})
    assert call(url, "DELETE", "/subjects/imp")[0] == 200
    assert call(url, "DELETE", "/subjects/imp?permanent=true")[0] == 200
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert _register(url, "d", '"double"') == (200, {"id": 51})


@pytest.mark.slow
def test_ids_deleted_for_good_stay_given_across_a_restart(data_dir):
    with serving(data_dir) as url:
        assert _register(url, "a", '"string"') == (200, {"id": 1})
        assert _register(url, "b", '"int"') == (200, {"id": 2})
        call(url, "DELETE", "/subjects/b")
        assert call(url, "DELETE", "/subjects/b?permanent=true")[0] == 200
    with serving(data_dir) as url:  # the tombstone follows the record: the id is read before it goes
        assert _register(url, "c", '"long"') == (200, {"id": 3})

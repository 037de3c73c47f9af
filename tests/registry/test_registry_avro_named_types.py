"""`klog registry` and klog's Avro JSON codec on a schema whose named types are used twice at each of 40 levels
(record R0 holds two R1s, R1 two R2s, ... R40; each defined once, then used by name): registered, normalized,
looked up and checked for compatibility, and its records read and written as Avro's JSON encoding, in time
linear in its definitions (the tree of its uses has 2^40 records). These paths were linear already (a named
type's later uses are its name: fastavro's parse, the normalizer's `defined` set, the compatibility check's
pairs seen); the tests keep them so. The time bounds guard an exponential, not a benchmark."""

from __future__ import annotations

import io
import json
import time

import pytest

fastavro = pytest.importorskip("fastavro", reason="klog registry needs fastavro (pip install 'klog[connect]')")

from klog.client.avro_json import avro_datum_from_json, avro_json_reader  # noqa: E402
from tests.connect.test_connect_avro_named_types import LEVELS, VALUE, doubling  # noqa: E402
from tests.registry.helpers import serving  # noqa: E402
from tests.registry.test_registry_rest import call  # noqa: E402

BOUND_S = 30.0  # each path here takes milliseconds


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def test_a_schema_using_named_types_twice_at_each_level_is_registered_and_checked_in_bounded_time(url):
    started = time.monotonic()
    text = json.dumps(doubling())
    assert call(url, "POST", "/subjects/dbl/versions", {"schema": text}) == (200, {"id": 1})
    status, answer = call(url, "POST", "/subjects/dbl-norm/versions?normalize=true", {"schema": text})
    assert status == 200
    stored = json.loads(call(url, "GET", f"/schemas/ids/{answer['id']}")[1]["schema"])
    assert json.dumps(stored).count('"type": "record"') == LEVELS + 1  # normalized: each type defined once
    assert call(url, "POST", "/subjects/dbl", {"schema": text})[1]["version"] == 1  # looked up
    # a new field with a default at the deepest level: compatible; the leaf's type changed: not, in one reason
    # (the pair of types checked once, not once per path to it)
    leaf_added = doubling()
    deepest = leaf_added
    for _ in range(LEVELS):
        deepest = deepest["fields"][0]["type"][1]
    deepest["fields"].append({"name": "w", "type": "int", "default": 0})
    for subject, query in (("dbl", ""), ("dbl-norm", "?normalize=true")):
        assert call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest{query}",
                    {"schema": json.dumps(leaf_added)}) == (200, {"is_compatible": True})
        status, answer = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true"
                              + query.replace("?", "&"), {"schema": json.dumps(doubling(leaf="string"))})
        assert status == 200 and answer["is_compatible"] is False and len(answer["messages"]) == 1
    status, answer = call(url, "POST", "/subjects/dbl/versions", {"schema": json.dumps(leaf_added)})
    assert status == 200 and answer["id"] != 1
    assert call(url, "PUT", "/config/dbl", {"compatibility": "FULL_TRANSITIVE"})[0] == 200
    status, answer = call(url, "POST", "/subjects/dbl/versions", {"schema": json.dumps(doubling(leaf="long"))})
    assert status == 409
    assert time.monotonic() - started < BOUND_S


def test_avro_json_reads_and_writes_such_a_record_in_bounded_time():
    """klog's Avro JSON encoding (consume and produce with -s avro): each named type's conversion made once."""
    started = time.monotonic()
    schema = doubling()
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), VALUE)
    encoded = {"a": {"dbl.R1": {"a": None, "b": {"dbl.R2": {"a": None, "b": None}}}},
               "b": {"dbl.R1": {"a": {"dbl.R2": {"a": None, "b": None}}, "b": None}}}
    assert avro_json_reader(fastavro, [schema])(body.getvalue()) == encoded
    parsed, from_json = avro_datum_from_json(fastavro, [schema])
    again = io.BytesIO()
    fastavro.schemaless_writer(again, parsed, from_json(json.loads(json.dumps(encoded))))
    assert again.getvalue() == body.getvalue()
    assert time.monotonic() - started < BOUND_S


def test_protobuf_messages_holding_each_other_are_registered_and_checked_in_bounded_time(url):
    """The same for Protobuf: 30 messages each holding the 29 others, registered (normalized too) and compared."""
    pytest.importorskip("google.protobuf")
    from tests.connect.test_connect_schema_sharing import MESSAGES, _mutual_proto

    started = time.monotonic()
    text = _mutual_proto(MESSAGES)
    for subject, query in (("mutual", ""), ("mutual-norm", "?normalize=true")):
        body = {"schemaType": "PROTOBUF", "schema": text}
        assert call(url, "POST", f"/subjects/{subject}/versions{query}", body)[0] == 200
        bad = text.replace("string label = 1;", "int64 label = 1;")
        status, answer = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest{query}",
                              {"schemaType": "PROTOBUF", "schema": bad})
        assert (status, answer) == (200, {"is_compatible": False})
    assert time.monotonic() - started < BOUND_S

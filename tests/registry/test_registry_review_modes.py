"""A hostile review of `klog registry`'s modes and ids: what an import, a delete for good and a restart must not
do (give an id again that records in Kafka may still carry), as Confluent's registry behaves."""

from __future__ import annotations

import json

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


# -- normalization: never a schema the original is not, never a refusal of one it is ---------------------------

def _normalized(url: str, subject: str, schema: str, kind: str = "AVRO") -> tuple[int, object]:
    return call(url, "POST", f"/subjects/{subject}/versions?normalize=true", {"schemaType": kind, "schema": schema})


@pytest.mark.parametrize("schema", [
    {"type": "record", "fields": [{"name": "a", "type": "int"}]},  # no name: made "None" by normalization
    {"type": "record", "name": "R", "fields": [  # R defined twice: the second definition made a use of the first
        {"name": "a", "type": {"type": "enum", "name": "R", "symbols": ["A"]}}]},
    {"type": "record", "name": "R", "fields": [  # E twice, with other symbols
        {"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
        {"name": "b", "type": {"type": "enum", "name": "E", "symbols": ["B"]}}]},
])
def test_normalization_does_not_make_a_refused_avro_schema_valid(url, schema):
    text = json.dumps(schema)
    refused = _register(url, "s", text)
    assert refused[0] == 422 and refused[1]["error_code"] == 42201
    assert _normalized(url, "s", text) == refused
    assert call(url, "GET", "/subjects")[1] == []


def test_normalization_leaves_aliases_that_are_no_list_as_written(url):
    text = json.dumps({"type": "record", "name": "R", "aliases": "abc", "fields": []})
    assert _normalized(url, "s", text) == (200, {"id": 1})
    assert json.loads(call(url, "GET", "/subjects/s/versions/1")[1]["schema"])["aliases"] == "abc"  # not a, b, c


HOSTILE_AVRO = {"type": "record", "name": "com.x.Top", "aliases": ["Q", "a.P"], "doc": "top", "fields": [
    {"name": "b", "type": "bytes", "default": "\u00ff\u0000\u0080"},
    {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 2}, "default": "\u00ff\u0001"},
    {"name": "s", "type": "string", "default": "\u2028 \U0001f600 \u00e9 \u0000"},
    {"name": "l", "type": "long", "default": 9007199254740993},
    {"name": "d", "type": "double", "default": 1e308},
    {"name": "n", "type": ["null", "int"], "default": None},
    {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "F"}},
     "default": {"k": ["\u00ff\u0001"]}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "B"}, "default": "A"},
    {"name": "r", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int", "default": 3}]},
     "default": {"x": 1}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 0}},
    {"name": "dec2", "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 10,
                              "scale": 2}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "uu", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "o", "type": {"type": "int"}, "order": "descending", "aliases": ["z", "y"], "doc": "d"},
    {"name": "ns", "type": {"type": "record", "name": "X", "namespace": "", "fields": [{"name": "q", "type": "int"}]}},
    {"name": "ns2", "type": {"type": "record", "name": "a.b.X", "fields": [{"name": "self", "type": ["null", "X"]}]}},
    {"name": "u", "type": ["null", "a.b.X", "Inner", "E", "F"]},
]}


def _datum() -> dict:
    import datetime
    import decimal
    import uuid
    return {"b": b"\xff", "fx": b"\xff\x01", "s": "x\u00e9", "l": 2**62, "d": 1.5, "n": 7, "m": {"k": [b"ab"]},
            "e": "B", "r": {"x": 2}, "dec": decimal.Decimal("12"), "dec2": decimal.Decimal("1.25"),
            "ts": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), "uu": uuid.UUID(int=5), "o": -3,
            "ns": {"q": 1}, "ns2": {"self": {"self": None}}, "u": {"x": 9}}


def test_a_normalized_avro_schema_writes_and_reads_the_same_bytes_and_normalizes_to_itself(url):
    import io

    import fastavro
    text = json.dumps(HOSTILE_AVRO)
    assert _normalized(url, "s", text) == (200, {"id": 1})
    stored = call(url, "GET", "/subjects/s/versions/1")[1]["schema"]
    assert _normalized(url, "t", stored) == (200, {"id": 1})  # idempotent: the stored text is its own normal form
    assert call(url, "GET", "/subjects/t/versions/1")[1]["schema"] == stored
    original, normalized = (fastavro.parse_schema(json.loads(t)) for t in (text, stored))
    written = []
    for schema in (original, normalized):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, _datum())
        written.append(out.getvalue())
    assert written[0] == written[1]
    assert fastavro.schemaless_reader(io.BytesIO(written[0]), original, normalized) == _datum()
    # every default read the same: a record written with no fields, read with each
    empty = fastavro.parse_schema({"type": "record", "name": "com.x.Top", "fields": []})
    with_defaults = [f for f in HOSTILE_AVRO["fields"] if "default" in f]
    readers = [fastavro.parse_schema({**HOSTILE_AVRO, "fields": with_defaults}),
               fastavro.parse_schema({**json.loads(stored), "fields": [f for f in json.loads(stored)["fields"]
                                                                      if "default" in f]})]
    assert len({json.dumps(fastavro.schemaless_reader(io.BytesIO(b""), empty, r), default=repr) for r in readers}) == 1


@pytest.mark.slow
def test_registering_twenty_thousand_fields_normalized_is_linear(url):
    import time
    fields = [{"name": f"f{i}", "type": {"type": "int"}} for i in range(20000)]
    start = time.monotonic()
    assert _normalized(url, "big", json.dumps({"type": "record", "name": "R", "fields": fields})) == (200, {"id": 1})
    assert time.monotonic() - start < 12  # (each field's name counted among all the others': over 15 s)
    pytest.importorskip("google.protobuf")
    text = 'syntax = "proto3"; message M {' + " ".join(f"int32 f{i} = {30000 - i};" for i in range(10000)) + "}"
    start = time.monotonic()
    assert _normalized(url, "bigp", text, "PROTOBUF") == (200, {"id": 2})
    assert time.monotonic() - start < 20


PROTO3_NEGATIVE = """syntax = "proto3";
package shop;
message Order {
  enum Status { option allow_alias = true; UNKNOWN = 0; ON = 1; ALSO_ON = 1; BACK = -1; }
  Status status = 1;
  oneof kind { string a = 5; int32 b = 2; }
  map<string, Line> lines = 3;
  optional int64 opt = 4;
  message Line { map<int32, Line> kids = 1; Status s = 2; }
}
"""


def test_a_proto3_enum_with_a_negative_number_is_registered_normalized(url):
    """Confluent's normalization sorts enum constants by number: a negative one first would be proto3's first
    constant, which must be zero (protoc refuses it; it is the fields' default): the zero stays first."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from klog.registry.schemas import parse_protobuf
    assert _normalized(url, "p", PROTO3_NEGATIVE, "PROTOBUF") == (200, {"id": 1})
    stored = call(url, "GET", "/subjects/p/versions/1")[1]["schema"]
    assert stored.index("UNKNOWN = 0") < stored.index("BACK = -1") < stored.index("ON = 1")
    assert _normalized(url, "q", stored, "PROTOBUF") == (200, {"id": 1})  # idempotent
    classes = []
    for text in (PROTO3_NEGATIVE, stored):
        file = descriptor_pb2.FileDescriptorProto()
        file.CopyFrom(parse_protobuf(text, {}).descriptor)
        file.name = "order.proto"
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file)
        classes.append(message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order")))
    first = classes[0](status=-1, b=7, opt=0)
    first.lines["x"].kids[3].s = 1
    data = first.SerializeToString()
    again = classes[1].FromString(data)
    assert again.SerializeToString() == data and again.WhichOneof("kind") == "b" and again.HasField("opt")
    assert classes[1]().status == 0  # the default: UNKNOWN, as in the original


def test_a_schema_larger_than_a_schemas_record_may_be_is_confluents_42209_not_a_500(url):
    text = json.dumps({"type": "record", "name": "R", "doc": "x" * (1 << 20), "fields": []})
    assert _register(url, "big", text) == (422, {"error_code": 42209,
                                                 "message": "Register operation failed because schema is too large"})
    assert _register(url, "small", '"string"') == (200, {"id": 1})
    assert call(url, "GET", "/subjects")[1] == ["small"]


def _compacted_copy(data_dir: str, copy_dir: str) -> None:
    """_schemas as Kafka's compaction leaves it once tombstones are past delete.retention.ms: each key's last
    record, in offset order, no tombstones."""
    import klog
    with klog.open(data_dir) as source:
        records = [(r.offset, r.key, r.value) for r in source.consumer("_schemas")]
    last = {key: (offset, value) for offset, key, value in records}
    with klog.open(copy_dir) as target:
        target.create_topic("_schemas", partitions=1, configs={"cleanup.policy": "compact"})
        with target.producer() as p:
            for key, (_, value) in sorted(last.items(), key=lambda item: item[1][0]):
                if value is not None:
                    p.send("_schemas", value, key=key)


@pytest.mark.slow
def test_a_mode_removed_stays_removed_after_compaction_whatever_key_spelling_wrote_it(data_dir, tmp_path):
    """Confluent until 6.1 (and Karapace) wrote the global MODE (and CONFIG) key with "subject":null, Confluent since
    without it: klog's tombstone under its own spelling left the other's record, which compaction keeps (its key's
    last record) after it removes the tombstone: the mode came back at the next start."""
    import klog
    old = [({"keytype": "MODE", "subject": None, "magic": 0}, {"subject": None, "mode": "READONLY"}),
           ({"keytype": "MODE", "subject": "s", "magic": 0}, {"subject": "s", "mode": "IMPORT"})]
    with klog.open(data_dir) as s:
        s.create_topic("_schemas", partitions=1, configs={"cleanup.policy": "compact"})
        with s.producer() as p:
            for key, value in old:
                p.send("_schemas", json.dumps(value).encode(), key=json.dumps(key).encode())
    with serving(data_dir) as url:
        assert call(url, "GET", "/mode") == (200, {"mode": "READONLY"})
        assert call(url, "DELETE", "/mode") == (200, {"mode": "READONLY"})
        assert call(url, "PUT", "/mode/s", {"mode": "READWRITE"})[0] == 200
    copy = str(tmp_path / "compacted")
    _compacted_copy(data_dir, copy)
    with serving(copy) as url:
        assert call(url, "GET", "/mode") == (200, {"mode": "READWRITE"})
        assert call(url, "GET", "/mode/s") == (200, {"mode": "READWRITE"})


@pytest.mark.slow
def test_no_registration_lands_after_read_only_is_answered(url):
    """Two clients: one registering new versions as fast as it can, one setting READONLY. Once the mode is
    answered, the subject's versions are what they stay: a registration compared before the mode changed is
    judged again under the lock, and refused."""
    import threading
    import time
    assert call(url, "PUT", "/config", {"compatibility": "NONE"})[0] == 200
    answers: list[tuple[int, object]] = []
    stop = threading.Event()

    def register_many() -> None:
        for i in range(400):
            if stop.is_set():
                return
            schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": f"f{i}", "type": "int"}]})
            answers.append(_register(url, "s", schema))

    writer = threading.Thread(target=register_many)
    writer.start()
    deadline = time.monotonic() + 10
    while not any(status == 200 for status, _ in answers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert call(url, "PUT", "/mode", {"mode": "READONLY"})[0] == 200
    then = call(url, "GET", "/subjects/s/versions")[1]
    time.sleep(0.3)
    stop.set()
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert call(url, "GET", "/subjects/s/versions")[1] == then
    refused = [a for status, a in answers if status != 200]
    assert refused and all(a["error_code"] == 42205 for a in refused)


def test_a_normalized_json_schema_keeps_its_numbers_as_written(url):
    """Read as floats, 1e400 was stored as `Infinity` (no JSON: a strict parser refuses the answer) and 1e-400 as
    0.0 (another bound)."""
    text = '{"type": "object", "properties": {"x": {"type": "number", "maximum": 1e400, "minimum": 1e-400,' \
           ' "multipleOf": 0.10000000000000000555}}}'
    assert _normalized(url, "j", text, "JSON") == (200, {"id": 1})
    stored = call(url, "GET", "/subjects/j/versions/1")[1]["schema"]

    def refuse(constant: str) -> None:
        raise ValueError(constant)
    json.loads(stored, parse_constant=refuse)  # strict JSON
    assert stored == ('{"properties":{"x":{"maximum":1e400,"minimum":1e-400,"multipleOf":0.10000000000000000555,'
                      '"type":"number"}},"type":"object"}')
    assert _normalized(url, "k", stored, "JSON") == (200, {"id": 1})

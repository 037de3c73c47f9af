"""`klog produce -s ... -r URL`: keys and values written in Confluent's Schema Registry framing.

Goal: what `klog produce -s value=avro` writes, confluent-kafka's own AvroDeserializer reads as the
rows typed in (and JSONDeserializer for -s json); the schema given is registered under the topic's
subject, or the latest is used; `consume -s` output goes back in unchanged; an input line that does
not fit its schema is one line naming it, after the lines before it were written.
"""

from __future__ import annotations

import json

import pytest

import klog
from tests.cli.test_consume_serdes import BRANCHY, BRANCHY_DATUM, EXPECTED, ORDER, ROWS, framed, produce, stub_registry
from tests.registry.helpers import serving as registry_at

pytest.importorskip("fastavro", reason="-s avro needs fastavro (pip install 'klog[connect]')")


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir + "-registry") as url:
        yield url


def values(data_dir: str, topic: str) -> list[bytes | None]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic)]


def confluent_reads(url: str, topic: str, data: list[bytes | None], kind: str = "avro") -> list:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url})
    deserialize = AvroDeserializer(client) if kind == "avro" else JSONDeserializer(None, schema_registry_client=client)
    return [deserialize(v, SerializationContext(topic, MessageField.VALUE)) for v in data]


def test_avro_lines_go_in_as_confluents_deserializer_reads_them(cli, data_dir, registry_url, tmp_path):
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps(ORDER))
    lines = "".join(json.dumps(e) + "\n" for e in EXPECTED).encode()  # Avro's JSON encoding, as consume -s prints
    done = cli("produce", "orders", "-s", "value=avro", "--schema", f"value={schema}", "-r", registry_url, input=lines)
    assert done.exit_code == 0, done.stderr
    got = confluent_reads(registry_url, "orders", values(data_dir, "orders"))
    assert [{**g, "at": int(g["at"].timestamp() * 1000)} for g in got] == ROWS  # (its timestamp-millis: a datetime)
    # the subject's latest is the default; consume -s prints what went in
    again = cli("produce", "orders", "-s", "value=avro", "-r", registry_url, input=lines[:lines.index(b"\n") + 1])
    assert again.exit_code == 0, again.stderr
    out = cli("consume", "orders", "-s", "value=avro", "-r", registry_url)
    assert [json.loads(line) for line in out.out.splitlines()] == [*EXPECTED, EXPECTED[0]]


def test_keys_and_values_with_a_separator_and_schema_ids(cli, data_dir, registry_url, tmp_path):
    (tmp_path / "k.avsc").write_text('"long"')
    (tmp_path / "v.avsc").write_text(json.dumps(ORDER))
    cli("produce", "orders", "-s", "avro", "--schema", f"key={tmp_path / 'k.avsc'}",
        "--schema", f"value={tmp_path / 'v.avsc'}", "-r", registry_url, input=b"")
    import urllib.request

    with urllib.request.urlopen(f"{registry_url}/subjects/orders-value/versions/latest") as answer:
        value_id = json.loads(answer.read())["id"]
    done = cli("produce", "orders", "-s", "avro", "--schema", "key=latest", "--schema", f"value=id:{value_id}",
               "-r", registry_url, "-K", "|", input=("7|" + json.dumps(EXPECTED[1]) + "\n").encode())
    assert done.exit_code == 0, done.stderr
    out = cli("consume", "orders", "-s", "avro", "-r", registry_url, "--json")
    doc = json.loads(out.out)
    assert doc["key"] == 7 and doc["value"] == EXPECTED[1] and doc["value_schema_id"] == value_id


def test_json_schema_values_are_checked_and_the_bad_line_named(cli, data_dir, registry_url, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"id": {"type": "integer"}},
                                  "required": ["id"]}))
    done = cli("produce", "people", "-s", "value=json", "--schema", str(schema), "-r", registry_url,
               input=b'{"id": 1}\n{"id": "two"}\n{"id": 3}\n')
    assert done.exit_code == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "klog: error: line 2: the value does not match schema 1 at id: 'two' is not of type 'integer'; 1 records "
        "before it were written")
    assert confluent_reads(registry_url, "people", values(data_dir, "people"), "json") == [{"id": 1}]


def test_an_avro_line_that_does_not_fit_is_named(cli, data_dir, registry_url, tmp_path):
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps(ORDER))
    good = json.dumps(EXPECTED[0])
    done = cli("produce", "orders", "-s", "value=avro", "--schema", f"value={schema}", "-r", registry_url,
               input=f'{good}\n{{"id": "x"}}\n'.encode())
    assert done.exit_code == 2
    assert "klog: error: line 2: the value is not Avro's JSON encoding of schema 1:" in done.stderr
    assert done.stderr.strip().endswith("1 records before it were written")
    assert len(values(data_dir, "orders")) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["-s", "avro"], "-s avro needs the Schema Registry's URL: give -r URL"),
    (["-s", "value=>q", "-r", "http://127.0.0.1:1"], "produce encodes avro, json or protobuf"),
    (["--schema", "x.avsc"], "--schema says which schema -s encodes with: give -s too"),
    (["-s", "value=avro", "--schema", "key=latest", "-r", "http://127.0.0.1:1"], "give -s key=avro|json for the key"),
    (["-s", "avro", "--schema", "/no/such.avsc", "-r", "http://127.0.0.1:1"], "cannot read /no/such.avsc"),
])
def test_bad_options_are_one_line_and_exit_2(cli, args, message):
    done = cli("produce", "t", *args, input=b"{}\n")
    assert done.exit_code == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_subject_without_a_schema_writes_nothing(cli, data_dir, registry_url):
    done = cli("produce", "fresh", "-s", "value=avro", "-r", registry_url, input=b'{"a": 1}\n')
    assert done.exit_code == 1
    assert "the value schema for fresh-value: Schema Registry: Subject 'fresh-value' not found" in done.stderr
    with klog.open(data_dir) as store:
        assert "fresh" not in [t.name for t in store.list_topics()]


def test_a_decoded_json_copy_goes_back_in_encoded(cli, data_dir, registry_url, tmp_path):
    """consume -s --json | produce -s --input json: a topic copied through its decoded form."""
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps(ORDER))
    lines = "".join(json.dumps(e) + "\n" for e in EXPECTED).encode()
    assert cli("produce", "orders", "-s", "value=avro", "--schema", str(schema), "-r", registry_url,
               "-k", "k", input=lines).exit_code == 0
    copied = cli("consume", "orders", "-s", "value=avro", "-r", registry_url, "--json").stdout
    done = cli("produce", "copy", "-s", "value=avro", "--schema", "value=id:1", "-r", registry_url, "--input", "json",
               input=copied)
    assert done.exit_code == 0, done.stderr
    assert values(data_dir, "copy") == values(data_dir, "orders")  # the same bytes, schema id included


def test_union_members_and_special_floats_go_back_in_as_the_same_bytes(cli, data_dir):
    """consume -s --json | produce -s --input json: each union member written as the branch it names (fastavro's
    json_reader took the first that fit: {"long": 5} went in as an int), NaN and Infinity from their strings."""
    key = framed(8, ["int", "long"], ("long", 7))
    produce(data_dir, "t", [(key, framed(4, BRANCHY, BRANCHY_DATUM))])
    answers = {"/schemas/ids/4": {"schema": json.dumps(BRANCHY)}, "/schemas/ids/8": {"schema": '["int", "long"]'}}
    assert_a_json_copy_keeps_the_bytes(cli, data_dir, answers, 8, 4)


def assert_a_json_copy_keeps_the_bytes(cli, data_dir: str, answers: dict, key_id: int, value_id: int) -> None:  # noqa: ANN001
    """consume -s --json of topic t, produce -s --input json of that into `copy` (schema ids given): the
    same keys and values, byte for byte."""
    with stub_registry(answers) as url:
        copied = cli("consume", "t", "-s", "avro", "-r", url, "--json").stdout
        done = cli("produce", "copy", "-s", "avro", "--schema", f"key=id:{key_id}", "--schema",
                   f"value=id:{value_id}", "-r", url, "--input", "json", input=copied)
    assert done.exit_code == 0, done.stderr
    with klog.open(data_dir) as store:
        assert [(r.key, r.value) for r in store.consumer("copy")] == [(r.key, r.value) for r in store.consumer("t")]


def test_a_transaction_with_a_line_that_does_not_fit_is_aborted_and_says_so(cli, data_dir, registry_url, tmp_path):
    schema = tmp_path / "a.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]}))
    done = cli("produce", "a", "-s", "value=avro", "--schema", str(schema), "-r", registry_url, "--transactional-id",
               "tx", "--transaction-records", "2", input=b'{"x": 1}\n{"x": 2}\n{"x": 3}\n{"x": "bad"}\n{"x": 5}\n')
    assert done.exit_code == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        "3 records before it were written, 1 of them in the transaction now aborted: read_committed readers see 2")
    seen = cli("consume", "a", "-X", "isolation.level=read_committed", "-s", "avro", "-r", registry_url)
    assert seen.exit_code == 0 and seen.out == '{"x":1}\n{"x":2}\n'


def test_a_json_schema_line_with_nan_or_deep_nesting_is_named(cli, data_dir):
    with stub_registry({"/schemas/ids/2": {"schema": "{}", "schemaType": "JSON"}}) as url:
        done = cli("produce", "t", "-s", "value=json", "--schema", "id:2", "-r", url,
                   input=b'{"a": 1}\n{"a": NaN}\n')
        deep = cli("produce", "t", "-s", "value=json", "--schema", "id:2", "-r", url,
                   input=b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert done.exit_code == 2 and done.stderr.strip().splitlines()[-1] == (
        "klog: error: line 2: the value is not JSON: NaN is not a JSON value; 1 records before it were written")
    assert deep.exit_code == 2 and "line 1: the value is not JSON klog reads: nested too deep" in deep.stderr
    assert values(data_dir, "t") == [b"\x00\x00\x00\x00\x02" + b'{"a":1}']


def test_a_schema_with_references_encodes_and_round_trips(cli, data_dir):
    """--schema id:N of a schema naming types of other subjects: they were not fetched ('Unknown type')."""
    line = {"type": "record", "name": "Line", "namespace": "shop",
            "fields": [{"name": "sku", "type": ["null", "string"]}]}
    order = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "lines", "type": {"type": "array", "items": "shop.Line"}}]}
    answers = {"/schemas/ids/9": {"schema": json.dumps(order), "references": [
                   {"name": "shop.Line", "subject": "line-value", "version": 3}]},
               "/subjects/line-value/versions/3": {"subject": "line-value", "version": 3, "id": 8,
                                                   "schema": json.dumps(line)}}
    text = b'{"lines":[{"sku":{"string":"x"}},{"sku":null}]}\n'
    with stub_registry(answers) as url:
        done = cli("produce", "t", "-s", "value=avro", "--schema", "id:9", "-r", url, input=text)
        assert done.exit_code == 0, done.stderr
        out = cli("consume", "t", "-s", "avro", "-r", url)
    assert out.exit_code == 0 and out.out.encode() == text


def test_a_json_schema_with_references_checks_values_through_them(cli, data_dir):
    """-s json with a schema whose `$ref`s name its references' schemas: fetched and resolved by name
    (before, jsonschema could not resolve `address.json`: no value was checked against it)."""
    address = {"type": "object", "properties": {"zip": {"$ref": "#/definitions/Zip"}},
               "definitions": {"Zip": {"type": "string", "maxLength": 5}}}
    customer = {"type": "object", "properties": {"address": {"$ref": "address.json"}}}
    answers = {"/schemas/ids/9": {"schemaType": "JSON", "schema": json.dumps(customer), "references": [
                   {"name": "address.json", "subject": "address", "version": 1}]},
               "/subjects/address/versions/1": {"subject": "address", "version": 1, "id": 8, "schemaType": "JSON",
                                                "schema": json.dumps(address)}}
    with stub_registry(answers) as url:
        done = cli("produce", "t", "-s", "value=json", "--schema", "id:9", "-r", url,
                   input=b'{"address": {"zip": "12345"}}\n{"address": {"zip": "123456"}}\n')
    assert done.exit_code == 2 and "line 2: the value does not match schema 9 at address/zip" in done.stderr
    assert values(data_dir, "t") == [b"\x00\x00\x00\x00\x09" + b'{"address":{"zip":"12345"}}']


def test_a_json_copy_keeps_string_values_avro_nulls_and_tombstones(cli, data_dir):
    """--input json took an embedded JSON string as the record's text (hello, not "hello": not JSON to the
    encoder) and an Avro null as a tombstone; the envelope's value_schema_id tells the null apart."""
    schema = ["null", "string"]
    produce(data_dir, "t", [(None, framed(5, schema, "hello")), (None, framed(5, schema, None)), (None, None),
                            (framed(6, "string", "k"), framed(5, schema, "é"))])
    answers = {"/schemas/ids/5": {"schema": json.dumps(schema)}, "/schemas/ids/6": {"schema": '"string"'}}
    assert_a_json_copy_keeps_the_bytes(cli, data_dir, answers, 6, 5)


def test_an_unknown_field_is_refused_and_a_missing_one_takes_its_default(cli, data_dir):
    """As Avro's Java JsonDecoder ("Unknown fields: [extra]"); fastavro's json_reader dropped it silently."""
    schema = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"},
                                                        {"name": "y", "type": ["null", "string"], "default": None}]}
    with stub_registry({"/schemas/ids/3": {"schema": json.dumps(schema)}}) as url:
        done = cli("produce", "t", "-s", "value=avro", "--schema", "id:3", "-r", url,
                   input=b'{"x": 1}\n{"x": 2, "extra": 3}\n')
    assert done.exit_code == 2
    assert "line 2: the value is not Avro's JSON encoding of schema 3: record contains more fields than the schema " \
           "specifies: extra; 1 records before it were written" in done.stderr
    assert values(data_dir, "t") == [b"\x00\x00\x00\x00\x03\x02\x00"]

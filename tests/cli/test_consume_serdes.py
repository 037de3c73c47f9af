"""`klog consume -s ... -r URL`: keys and values decoded for printing, as kcat's -s does.

Goal: records that confluent-kafka's own AvroSerializer and JSONSerializer wrote (through klog's
registry) print as Avro's JSON encoding / their JSON, in every output (pipe, --format, --json with the
schema ids, a group); kcat's pack-formats print numbers; a record that is not what -s says stops the
read with one line naming it, after the records before it; bad options are one line and exit 2.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Iterator

import pytest

import klog
from tests.registry.helpers import serving as registry_at

pytest.importorskip("fastavro", reason="-s avro needs fastavro (pip install 'klog[connect]')")

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "blob", "type": "bytes"},
    {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
ROWS = [{"id": 1, "note": "café", "blob": b"\x00\xff", "state": "NEW", "lines": [{"sku": "a", "qty": 2}],
         "at": 1700000000123},
        {"id": 2, "note": None, "blob": b"", "state": "PAID", "lines": [], "at": 0}]
# Avro's JSON encoding (what kcat and kafka-avro-console-consumer print): the union member named, bytes
# as \u00XX code points, the logical type's underlying long
EXPECTED = [{"id": 1, "note": {"string": "café"}, "blob": "\u0000\u00ff", "state": "NEW",
             "lines": [{"sku": "a", "qty": 2}], "at": 1700000000123},
            {"id": 2, "note": None, "blob": "", "state": "PAID", "lines": [], "at": 0}]


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir + "-registry") as url:
        yield url


def avro_records(url: str, topic: str = "orders") -> list[bytes]:
    """The rows as confluent-kafka's AvroSerializer writes them (its own registry client)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ORDER))
    return [serializer(row, SerializationContext(topic, MessageField.VALUE)) for row in ROWS]


def produce(data_dir: str, topic: str, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    with klog.open(data_dir) as store:
        if topic not in store.list_topics():
            store.create_topic(topic, partitions=1)
        with store.producer() as producer:
            for key, value in pairs:
                producer.send(topic, value, key=key)


def test_avro_values_print_as_avros_json_encoding_in_a_pipe_and_a_format(cli, data_dir, registry_url):
    produce(data_dir, "orders", [(struct.pack(">q", i), v) for i, v in enumerate(avro_records(registry_url), 7)])
    done = cli("consume", "orders", "-s", "value=avro", "-r", registry_url)
    assert done.exit_code == 0, done.stderr
    assert [json.loads(line) for line in done.out.splitlines()] == EXPECTED
    assert "café" in done.out  # UTF-8 as it is, not \u escapes
    done = cli("consume", "orders", "-s", "key=>q", "-s", "value=avro", "-r", registry_url, "-F", "%o %k %s\\n")
    assert done.exit_code == 0, done.stderr
    lines = done.out.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [["0", "7"], ["1", "8"]]
    assert json.loads(lines[1].split(" ", 2)[2]) == EXPECTED[1]


def test_json_envelope_embeds_the_decoded_value_and_names_its_schema_id(cli, data_dir, registry_url):
    values = avro_records(registry_url)
    produce(data_dir, "orders", [(b"k", v) for v in values] + [(b"gone", None)])
    done = cli("consume", "orders", "-s", "value=avro", "-r", registry_url, "--json")
    assert done.exit_code == 0, done.stderr
    docs = [json.loads(line) for line in done.out.splitlines()]
    schema_id = struct.unpack(">I", values[0][1:5])[0]
    assert [d["value"] for d in docs[:2]] == EXPECTED
    assert [d.get("value_schema_id") for d in docs] == [schema_id, schema_id, None]  # a tombstone stays null
    assert docs[2]["value"] is None and docs[0]["key"] == "k" and "key_schema_id" not in docs[0]


def test_json_schema_values_print_as_their_json(cli, data_dir, registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": registry_url}))
    value = serialize({"id": 3, "name": "é"}, SerializationContext("people", MessageField.VALUE))
    produce(data_dir, "people", [(None, value)])
    done = cli("consume", "people", "-s", "json", "-r", registry_url)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.out) == {"id": 3, "name": "é"}
    wrong = cli("consume", "people", "-s", "avro", "-r", registry_url)
    assert wrong.exit_code == 1
    assert "a JSON schema: use -s json" in wrong.stderr and "Traceback" not in wrong.stderr


def test_grep_matches_the_decoded_text(cli, data_dir, registry_url):
    produce(data_dir, "orders", [(None, v) for v in avro_records(registry_url)])
    done = cli("consume", "orders", "-s", "value=avro", "-r", registry_url, "--grep", '"state":"PAID"')
    assert done.exit_code == 0, done.stderr
    assert [json.loads(line)["id"] for line in done.out.splitlines()] == [2]


def test_a_record_not_in_registry_framing_stops_the_read_after_those_before_it(cli, data_dir, registry_url):
    good = avro_records(registry_url)
    produce(data_dir, "orders", [(None, good[0]), (None, b'{"plain": "json"}'), (None, good[1])])
    done = cli("consume", "orders", "-s", "value=avro", "-r", registry_url)
    assert done.exit_code == 1
    assert [json.loads(line) for line in done.out.splitlines()] == EXPECTED[:1]
    assert done.stderr.strip().splitlines() == [
        "klog: error: cannot decode the value of orders-0 offset 1 as avro: not in Schema Registry framing (magic byte "
        "0x7b, not 0) (read past it with -p 0 -o 2, or without -s value=...)"]
    past = cli("consume", "orders", "-s", "value=avro", "-r", registry_url, "-p", "0", "-o", "2")
    assert past.exit_code == 0 and [json.loads(line) for line in past.out.splitlines()] == EXPECTED[1:]


def test_an_unknown_schema_id_names_it(cli, data_dir, registry_url):
    produce(data_dir, "orders", [(None, b"\x00\x00\x00\x30\x39rest")])
    done = cli("consume", "orders", "-s", "avro", "-r", registry_url)
    assert done.exit_code == 1
    assert "offset 0 as avro: schema 12345: Schema Registry:" in done.stderr and "40403" in done.stderr


def test_pack_formats_print_as_kcat_prints_them(cli, data_dir):
    produce(data_dir, "nums", [(struct.pack("<i", -2), struct.pack(">hQ", -1, 2**64 - 1) + b"tail"),
                               (None, struct.pack(">B", 200))])
    done = cli("consume", "nums", "-s", "key=<i", "-s", "value=>hQ s", "-K", "|", "-n", "1")
    assert done.exit_code == 0, done.stderr
    assert done.out == "-2|-118446744073709551615 tail\n"
    strict = cli("consume", "nums", "-s", "value=>h$", "-n", "1")
    assert strict.exit_code == 1 and "expected value end-of-input, but 12 bytes remaining" in strict.stderr
    short = cli("consume", "nums", "-s", "value=>q", "-o", "1")
    assert short.exit_code == 1
    assert "value truncated, expected 8 bytes to unpack q but only 1 bytes remaining" in short.stderr


def test_a_group_member_decodes_and_a_bad_record_stays_uncommitted(cli, data_dir, registry_url):
    good = avro_records(registry_url)
    produce(data_dir, "orders", [(None, good[0]), (None, b"junk"), (None, good[1])])
    done = cli("consume", "orders", "-G", "g", "-s", "value=avro", "-r", registry_url, "--json")
    assert done.exit_code == 1 and "offset 1 as avro" in done.stderr
    assert [json.loads(line)["value"] for line in done.out.splitlines()] == EXPECTED[:1]
    rerun = cli("consume", "orders", "-G", "g", "-F", "%o\\n")  # starts at the bad record: it was not committed
    assert rerun.exit_code == 0 and rerun.out == "1\n2\n"


@pytest.mark.parametrize(("args", "message"), [
    (["-s", "avro"], "-s avro needs the Schema Registry's URL: give -r URL"),
    (["-s", "value=xml"], "-s 'value=xml': 'l', 'm', 'x' is not avro, json, protobuf or a pack-format token"),
    (["-s", "key="], "-s 'key=': give a format"),
    (["-r", "http://127.0.0.1:1"], "-r names the Schema Registry for -s avro/json: give -s too"),
    (["-s", "avro", "-r", "http://127.0.0.1:1", "--json", "--txn-fields"], "--txn-fields prints records as stored"),
])
def test_bad_options_are_one_line_and_exit_2(cli, data_dir, args, message):
    produce(data_dir, "t", [(None, b"x")])
    done = cli("consume", "t", *args)
    assert done.exit_code == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_unreachable_registry_is_one_line_and_exit_1(cli, data_dir):
    produce(data_dir, "t", [(None, b"\x00\x00\x00\x00\x01x")])
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (closed again: nothing listens there)
    done = cli("consume", "t", "-s", "avro", "-r", f"http://127.0.0.1:{port}")
    assert done.exit_code == 1
    assert done.stderr.startswith("klog: error: no Schema Registry answered") and "Traceback" not in done.stderr


def test_the_hot_path_takes_the_options_too(klog_proc, data_dir):
    produce(data_dir, "nums", [(None, struct.pack(">i", 42))])
    done = klog_proc("consume", "nums", "-s", ">i")
    assert done.returncode == 0 and done.stdout == b"42\n", done.stderr


@contextlib.contextmanager
def stub_registry(answers: dict[str, object]) -> Iterator[str]:
    """A Schema Registry of fixed answers (path -> JSON, or a function of the request handler), on an
    ephemeral port; its URL."""
    import http.server
    import threading

    class Stub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.path = self.path.removesuffix("?deleted=true")  # (a reference's version: soft-deleted ones too)
            if callable(answers.get(self.path)):  # an answer of its own making
                answers[self.path](self)
                return
            found = self.path in answers
            body = json.dumps(answers[self.path] if found else {"error_code": 40403,
                                                                 "message": "Schema not found"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # (shutdown waits a poll)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_avro_named_types_referenced_from_other_subjects_are_resolved(cli, data_dir):
    """Confluent's schema references ({name, subject, version}): the referenced schema is fetched and
    its named types known to the referencing one (a registry of Confluent's own, served here by a stub)."""
    import io

    import fastavro

    line = {"type": "record", "name": "Line", "namespace": "shop", "fields": [{"name": "sku", "type": "string"}]}
    order = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "lines", "type": {"type": "array", "items": "shop.Line"}}]}
    answers = {"/schemas/ids/9": {"schema": json.dumps(order), "references": [
                   {"name": "shop.Line", "subject": "line-value", "version": 3}]},
               "/subjects/line-value/versions/3": {"subject": "line-value", "version": 3, "id": 8,
                                                   "schema": json.dumps(line)}}
    named: dict = {}
    fastavro.parse_schema(line, named_schemas=named)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(order, named_schemas=named), {"lines": [{"sku": "x"}]})
    produce(data_dir, "orders", [(None, b"\x00" + struct.pack(">I", 9) + buf.getvalue())])
    with stub_registry(answers) as url:
        done = cli("consume", "orders", "-s", "avro", "-r", url)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.out) == {"lines": [{"sku": "x"}]}


def test_a_registry_answer_of_the_wrong_shape_is_one_line(cli, data_dir):
    produce(data_dir, "orders", [(None, b"\x00\x00\x00\x00\x05x")])
    with stub_registry({"/schemas/ids/5": ["not", "an", "object"]}) as url:
        done = cli("consume", "orders", "-s", "avro", "-r", url)
    assert done.exit_code == 1
    assert "the Schema Registry's answer for schema 5 is not one its API gives" in done.stderr
    assert "Traceback" not in done.stderr


def test_exec_gets_the_decoded_value(cli, data_dir, tmp_path):
    produce(data_dir, "nums", [(None, struct.pack(">i", 7)), (None, struct.pack(">i", -7))])
    seen = tmp_path / "seen"
    done = cli("consume", "nums", "-s", ">i", "--exec", f"cat >> {seen}; echo >> {seen}")
    assert done.exit_code == 0, done.stderr
    assert seen.read_text() == "7\n-7\n"


def framed(schema_id: int, schema: object, datum: object) -> bytes:
    """`datum` written by fastavro in `schema` (a union member as a (branch, value) pair), framed."""
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return b"\x00" + struct.pack(">I", schema_id) + buf.getvalue()


def varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


# unions whose member fastavro's json_writer guessed from the value (int for a long, the string for an
# enum symbol, the first of two enums or same-sized fixed types, the map for a record), and the floats
# Java's JsonEncoder prints otherwise (float32 text, NaN and Infinity as strings: the output stays JSON)
BRANCHY = {"type": "record", "name": "T", "namespace": "ns", "fields": [
    {"name": "il", "type": ["int", "long"]},
    {"name": "fd", "type": ["double", "float"]},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "se", "type": ["string", {"type": "enum", "name": "E", "symbols": ["A", "B"]}]},
    {"name": "ee", "type": [{"type": "enum", "name": "E1", "symbols": ["X"]},
                            {"type": "enum", "name": "E2", "symbols": ["X"]}]},
    {"name": "ff", "type": [{"type": "fixed", "name": "F1", "size": 2}, {"type": "fixed", "name": "F2", "size": 2}]},
    {"name": "mr", "type": [{"type": "map", "values": "int"},
                            {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}]},
    {"name": "m", "type": {"type": "map", "values": ["null", "double"]}},
    {"name": "fx", "type": {"type": "fixed", "name": "FX", "size": 3}}]}
BRANCHY_DATUM = {"il": ("long", 5), "fd": ("float", 0.1), "f": 0.1, "d": float("nan"), "se": ("ns.E", "A"),
                 "ee": ("ns.E2", "X"), "ff": ("ns.F2", b"\x01\x02"), "mr": ("ns.R", {"a": 1}),
                 "m": {"k": float("inf"), "n": None, "z": float("-inf")}, "fx": b"\x00\x7f\xff"}
BRANCHY_LINE = ('{"il":{"long":5},"fd":{"float":0.1},"f":0.1,"d":"NaN","se":{"ns.E":"A"},"ee":{"ns.E2":"X"},'
                '"ff":{"ns.F2":"\\u0001\\u0002"},"mr":{"ns.R":{"a":1}},'
                '"m":{"k":{"double":"Infinity"},"n":null,"z":{"double":"-Infinity"}},"fx":"\\u0000\x7f\u00ff"}')


def test_union_members_and_floats_print_as_avros_java_json_encoder_does(cli, data_dir):
    produce(data_dir, "t", [(None, framed(4, BRANCHY, BRANCHY_DATUM))])
    with stub_registry({"/schemas/ids/4": {"schema": json.dumps(BRANCHY)}}) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
        assert done.exit_code == 0, done.stderr
        assert done.out == BRANCHY_LINE + "\n"
        envelope = cli("consume", "t", "-s", "avro", "-r", url, "--json").out

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    assert json.loads(envelope, parse_constant=no_constants)["value"]["d"] == "NaN"


RECURSIVE = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}


TREE = {"type": "record", "name": "Tree", "fields": [{"name": "kids", "type": {"type": "array", "items": [
    "null", {"type": "map", "values": ["null", "Tree"]}]}}]}


def tree(levels: int) -> dict:
    node: dict = {"kids": []}
    for _ in range(levels):
        node = {"kids": [{"k": node}]}
    return node


def linked(levels: int) -> dict:
    node: dict = {"next": None}
    for _ in range(levels):
        node = {"next": node}
    return node


@pytest.mark.parametrize(("schema", "body", "why"), [
    # fastavro's reader loops once per item, bytes or not: 2^62 nulls allocated until memory ran out
    ({"type": "array", "items": "null"}, varint(2**62) + varint(0),
     "more than 1,000,000 array items that take no bytes"),
    ({"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}},
     varint(-(2**62)) + varint(0) + varint(0), "more than 1,000,000 array items that take no bytes"),
    # and recurses without a check: 100 KB of a recursive type crashed the process (SIGSEGV)
    (RECURSIVE, b"\x02" * 100_000 + b"\x00", "nested more than 400 deep (records, arrays, maps and unions)"),
    # 150 levels of five containers: the conversion ran out of Python's recursion limit, a bare RecursionError
    (TREE, framed(0, TREE, tree(150))[5:], "nested more than 400 deep (records, arrays, maps and unions)"),
    (RECURSIVE, b"\x02" * 20, "truncated"),
    ({"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}, varint(2**62), "truncated"),
])
def test_a_hostile_avro_body_stops_the_read_in_one_line(cli, data_dir, schema, body, why):
    produce(data_dir, "t", [(None, framed(6, RECURSIVE, {"next": {"next": None}})),
                            (None, b"\x00" + struct.pack(">I", 7) + body)])
    answers = {"/schemas/ids/6": {"schema": json.dumps(RECURSIVE)}, "/schemas/ids/7": {"schema": json.dumps(schema)}}
    with stub_registry(answers) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
    assert done.exit_code == 1
    assert done.out == '{"next":{"Node":{"next":null}}}\n'
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("klog: error: cannot decode the value of t-0 offset 1 as avro: not Avro of schema 7: ")
    assert why in line


@pytest.mark.parametrize(("schema", "datum", "levels"), [
    (RECURSIVE, linked(199), 199),  # two containers a level (the record, the union): within the bound of 400
    (TREE, tree(79), 79),  # five a level (record, array, union, map, union)
])
def test_a_recursive_type_nested_within_the_bound_prints(cli, data_dir, schema, datum, levels):
    produce(data_dir, "t", [(None, framed(6, schema, datum))])
    with stub_registry({"/schemas/ids/6": {"schema": json.dumps(schema)}}) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
    assert done.exit_code == 0, done.stderr
    assert done.out.count(f'{{"{schema["name"]}":') == levels
    assert json.loads(done.out) is not None


def test_a_registry_redirect_is_not_followed_with_the_credentials(cli, data_dir):
    """urllib followed a redirect to any host, the Authorization header with it."""
    produce(data_dir, "t", [(None, b"\x00\x00\x00\x00\x05x")])
    asked: list[object] = []
    with stub_registry({"/schemas/ids/5": lambda h: asked.append(h.headers.get("Authorization"))}) as elsewhere:
        def redirect(h: object) -> None:
            h.send_response(307)
            h.send_header("Location", elsewhere + "/schemas/ids/5")
            h.send_header("Content-Length", "0")
            h.end_headers()

        with stub_registry({"/schemas/ids/5": redirect}) as url:
            done = cli("consume", "t", "-s", "avro", "-r", url.replace("http://", "http://me:secret@"))
    assert done.exit_code == 1 and asked == []
    [line] = done.stderr.strip().splitlines()
    assert "secret" not in line  # (the URL it names has no password)
    assert "307 Temporary Redirect, to http://127.0.0.1:" in line and "does not follow a Schema Registry's redirects" \
        in line


def test_a_registry_that_drips_its_answer_is_given_up_on(cli, data_dir, monkeypatch):
    """urllib's timeout bounds each read: an answer a byte at a time never timed out."""
    import time

    monkeypatch.setattr("klog.client.deserializers.REGISTRY_TIMEOUT_S", 0.3)
    produce(data_dir, "t", [(None, b"\x00\x00\x00\x00\x05x")])
    body = json.dumps({"schema": '"string"'}).encode()

    def drip(h: object) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        with contextlib.suppress(OSError):
            for i in range(len(body)):
                h.wfile.write(body[i:i + 1])
                h.wfile.flush()
                time.sleep(0.1)

    with stub_registry({"/schemas/ids/5": drip}) as url:
        started = time.monotonic()
        done = cli("consume", "t", "-s", "avro", "-r", url)
        assert time.monotonic() - started < 2
    assert done.exit_code == 1
    assert "no whole answer within 0.3 s" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_huge_registry_answer_is_refused(cli, data_dir, monkeypatch):
    monkeypatch.setattr("klog.protocol.registry_client.ANSWER_MAX_BYTES", 1000)
    produce(data_dir, "t", [(None, b"\x00\x00\x00\x00\x05\x02x")])
    schema = {"type": "string", "doc": "x" * 2000}
    with stub_registry({"/schemas/ids/5": {"schema": json.dumps(schema)}}) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
    assert done.exit_code == 1
    assert "an answer larger than" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_json_on_a_terminal_escapes_c1_controls_in_decoded_values_too(cli, data_dir):
    """A decoded string's U+009B (CSI) reached the terminal raw: --json with -s skipped record_output's escaping."""
    from klog.cli.env import Env, substitute_env

    produce(data_dir, "t", [(None, framed(3, "string", "a\u009b[2Jb\x7f"))])
    with stub_registry({"/schemas/ids/3": {"schema": '"string"'}}) as url, substitute_env(Env(stdout_tty=True)):
        done = cli("consume", "t", "-s", "avro", "-r", url, "--json")
        grouped = cli("consume", "t", "-s", "avro", "-r", url, "--json", "-G", "g")
    for shown in (done, grouped):
        assert shown.exit_code == 0, shown.stderr
        assert b"\\u009b[2Jb\\u007f" in shown.stdout and "\u009b".encode() not in shown.stdout
        assert json.loads(shown.stdout)["value"] == "a\u009b[2Jb\x7f"


def test_schema_references_that_cycle_are_followed_once_and_a_fan_out_is_bounded(cli, data_dir):
    line = {"type": "record", "name": "Line", "namespace": "shop", "fields": [{"name": "sku", "type": "string"}]}
    order = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "line", "type": "shop.Line"}]}
    cycle = [{"name": "shop.Line", "subject": "line", "version": 1}]
    answers = {"/schemas/ids/9": {"schema": json.dumps(order), "references": cycle},
               "/subjects/line/versions/1": {"schema": json.dumps(line), "references": [
                   {"name": "shop.Order", "subject": "order", "version": 1}]},
               "/subjects/order/versions/1": {"schema": '"string"', "references": cycle},
               "/schemas/ids/10": {"schema": '"string"', "references": [
                   {"name": f"n{i}", "subject": f"s{i}", "version": 1} for i in range(150)]},
               **{f"/subjects/s{i}/versions/1": {"schema": '"string"'} for i in range(150)}}
    inline = {**order, "fields": [{"name": "line", "type": line}]}
    produce(data_dir, "t", [(None, framed(9, inline, {"line": {"sku": "x"}})), (None, framed(10, "string", "y"))])
    with stub_registry(answers) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
    assert done.out == '{"line":{"sku":"x"}}\n' and done.exit_code == 1
    assert "offset 1 as avro: more than 100 schema references" in done.stderr


def test_reference_lists_walked_for_one_schema_are_bounded(cli, data_dir):
    """One referenced version named again and again (a hostile registry's long lists): the walk stops at
    REFERENCE_ENTRIES_MAX entries with one line, instead of holding every record's read for seconds."""
    again = [{"name": "shop.Line", "subject": "line", "version": 1}] * 20_000
    answers = {"/schemas/ids/11": {"schema": '"string"', "references": again},
               "/subjects/line/versions/1": {"schema": '"string"', "references": again}}
    produce(data_dir, "t", [(None, framed(11, "string", "y"))])
    with stub_registry(answers) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
    assert done.exit_code == 1 and "more than 10000 schema reference entries" in done.stderr


def test_schema_references_share_one_deadline(cli, data_dir, monkeypatch):
    """Each answer within the timeout, but REFERENCES_MAX of them would hold the read that many times over."""
    import time

    monkeypatch.setattr("klog.client.deserializers.REFERENCES_TIMEOUT_S", 0.3)

    def slowly(h: object) -> None:
        time.sleep(0.2)
        body = json.dumps({"schema": '"string"'}).encode()
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    answers = {"/schemas/ids/10": {"schema": '"string"', "references": [
                   {"name": f"n{i}", "subject": f"s{i}", "version": 1} for i in range(5)]},
               **{f"/subjects/s{i}/versions/1": slowly for i in range(5)}}
    produce(data_dir, "t", [(None, framed(10, "string", "y"))])
    with stub_registry(answers) as url:
        done = cli("consume", "t", "-s", "avro", "-r", url)
    assert done.exit_code == 1 and "its schema references took the registry more than 0.3 s" in done.stderr


@pytest.mark.parametrize(("body", "why"), [
    (b"[" * 100_000 + b"]" * 100_000, "not JSON klog reads: nested too deep"),  # was a traceback (RecursionError)
    (b'{"a": NaN}', "not JSON: NaN is not a JSON value"),  # was printed as NaN: --json not JSON
])
def test_a_json_schema_body_that_is_not_json_proper_is_one_line(cli, data_dir, body, why):
    produce(data_dir, "t", [(None, b"\x00\x00\x00\x00\x02" + body)])
    with stub_registry({"/schemas/ids/2": {"schema": "{}", "schemaType": "JSON"}}) as url:
        done = cli("consume", "t", "-s", "json", "-r", url)
    assert done.exit_code == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("klog: error: cannot decode the value of t-0 offset 0 as json: " + why)

"""`klog registry` with Protobuf schemas (schemaType PROTOBUF): .proto text parsed and written back as
Confluent's canonical text, the serialized form (base64 FileDescriptorProto) confluent-kafka registers and
reads, malformed text refused naming its line, schema references, and Confluent's compatibility rules
(its protobuf diff package). Ends with confluent-kafka's ProtobufSerializer and ProtobufDeserializer
against the registry, with a message class built from a FileDescriptorProto at test time (no protoc)."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("google.protobuf", reason="Protobuf schemas need the protobuf package (klog[connect])")

from google.protobuf import descriptor_pb2  # noqa: E402

import klog  # noqa: E402
from klog.protocol import protobuf_compat  # noqa: E402
from klog.protocol.protobuf_schema import (  # noqa: E402
    ProtoError,
    canonical_text,
    from_descriptor,
    identity,
    parse_text,
    well_known,
)
from klog.registry import schemas  # noqa: E402
from klog.registry.schemas import Registry, RegistryError, parse_protobuf  # noqa: E402
from klog.registry.server import RegistryServer  # noqa: E402
from tests.registry.helpers import serving  # noqa: E402


@pytest.fixture
def url(data_dir):
    with serving(data_dir) as base:
        yield base


def call(base: str, method: str, path: str, body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def register(base: str, subject: str, schema: str, references: list | None = None) -> tuple[int, object]:
    body: dict = {"schemaType": "PROTOBUF", "schema": schema}
    if references is not None:
        body["references"] = references
    return call(base, "POST", f"/subjects/{subject}/versions", body)


ORDER = """// an order
syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";
option java_package = "com.shop.v1";
option java_multiple_files = true;

message Order {
  reserved 7, 9 to 11, 20 to max;
  reserved "legacy";
  string id = 1 [json_name = "orderId", deprecated = true];
  google.protobuf.Timestamp placed_at = 2;
  /* lines, by sku */ map<string, Line> lines = 3;
  optional int64 total_cents = 4;
  repeated Status history = 5 [packed = true];
  oneof payment { string card = 12; Line.Kind voucher = 13; }
  message Line { string sku = 1; uint32 quantity = 2; enum Kind { KIND_UNSPECIFIED = 0; GIFT = 1; } }
  int32 priority = 6 [(confluent.field_meta) = { doc: "1 is highest", params: [{key: "a" value: "b"}] }];
}
enum Status { option allow_alias = true; NEW = 0; PAID = 1; SETTLED = 1 [deprecated = true]; }
service Orders { rpc Watch (Order) returns (stream Order); }
"""

# Confluent's canonical text of ORDER (ProtobufSchemaUtils.toString): comments gone, messages before enums,
# reserved then options then fields then oneofs then nested types, json_name and default as options
ORDER_CANONICAL = '''syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";

option java_package = "com.shop.v1";
option java_multiple_files = true;

message Order {
  reserved 7, 9 to 11, 20 to max;
  reserved "legacy";

  string id = 1 [
    deprecated = true,
    json_name = "orderId"
  ];
  google.protobuf.Timestamp placed_at = 2;
  map<string, Line> lines = 3;
  optional int64 total_cents = 4;
  repeated Status history = 5 [packed = true];
  int32 priority = 6 [(confluent.field_meta) = {
    doc: "1 is highest",
    params: [
      {
        key: "a",
        value: "b"
      }
    ]
  }];

  oneof payment {
    string card = 12;
    Line.Kind voucher = 13;
  }

  message Line {
    string sku = 1;
    uint32 quantity = 2;
\x20\x20
    enum Kind {
      KIND_UNSPECIFIED = 0;
      GIFT = 1;
    }
  }
}
enum Status {
  option allow_alias = true;
  NEW = 0;
  PAID = 1;
  SETTLED = 1 [deprecated = true];
}

service Orders {
  rpc Watch (Order) returns (stream Order);
}
'''

PROTO2 = """syntax = "proto2";
package legacy;
message Account {
  required string id = 1;
  optional int32 level = 2 [default = 3];
  optional string name = 3 [default = "a \\"b\\""];
  repeated bytes blobs = 4;
  extensions 100 to 199;
}
"""

PROTO2_CANONICAL = '''syntax = "proto2";
package legacy;

message Account {
  required string id = 1;
  optional int32 level = 2 [default = 3];
  optional string name = 3 [default = "a \\"b\\""];
  repeated bytes blobs = 4;

  extensions 100 to 199;
}
'''


def test_proto3_text_becomes_confluents_canonical_text():
    assert canonical_text(parse_text(ORDER)) == ORDER_CANONICAL
    assert canonical_text(parse_text(ORDER_CANONICAL)) == ORDER_CANONICAL  # a fixed point


def test_proto2_labels_defaults_and_extension_ranges_are_kept():
    assert canonical_text(parse_text(PROTO2)) == PROTO2_CANONICAL
    descriptor = parse_protobuf(PROTO2, {}).descriptor
    fields = {f.name: f for f in descriptor.message_type[0].field}
    assert fields["id"].label == fields["id"].LABEL_REQUIRED and fields["level"].default_value == "3"
    assert fields["name"].default_value == 'a "b"'
    assert (descriptor.message_type[0].extension_range[0].start, descriptor.message_type[0].extension_range[0].end) \
        == (100, 200)


def test_a_bytes_default_is_quoted_when_it_would_not_read_back_as_one_word():
    """Confluent writes a bytes default unquoted (as a number): `default = a b` did not parse again."""
    for default, written in (("ab", "[default = ab]"), ("a b\\x00\\377", '[default = "a b\x00\u00ff"]')):
        text = f'syntax = "proto2";\nmessage M {{ optional bytes b = 1 [default = "{default}"]; }}'
        parsed = parse_protobuf(text, {})
        assert f"  optional bytes b = 1 {written};\n" in parsed.text
        again = parse_protobuf(parsed.text, {})
        assert identity(again.descriptor, again.schema.proto) == identity(parsed.descriptor, parsed.schema.proto)


def test_extend_blocks_declare_custom_options():
    text = """syntax = "proto3";
package shop.options;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions {
  string pii_kind = 50001;
}
message Tagged {
  extend google.protobuf.MessageOptions { bool audited = 50002; }
  string email = 1 [(shop.options.pii_kind) = "email"];
}
"""
    parsed = parse_protobuf(text, {})
    assert parsed.text == """syntax = "proto3";
package shop.options;

import "google/protobuf/descriptor.proto";

message Tagged {
  string email = 1 [(shop.options.pii_kind) = "email"];

  extend google.protobuf.MessageOptions {
    bool audited = 50002;
  }
}

extend google.protobuf.FieldOptions {
  string pii_kind = 50001;
}
"""
    top, nested = parsed.descriptor.extension[0], parsed.descriptor.message_type[0].extension[0]
    assert (top.extendee, top.name, nested.extendee) == (".google.protobuf.FieldOptions", "pii_kind",
                                                         ".google.protobuf.MessageOptions")
    again = from_descriptor(parsed.descriptor)
    assert [(e.name, [f.name for f in e.fields]) for e in again.extends] == [(".google.protobuf.FieldOptions",
                                                                              ["pii_kind"])]


def test_strings_take_protocs_escapes_and_concatenation():
    text = r'''syntax = "proto3";
option java_package = "\x41\101" 'b'
  "\u00e9\U0001F600\uD83D\uDE00";
'''
    parsed = parse_protobuf(text, {})
    assert parsed.descriptor.options.java_package == "AAb\u00e9\U0001F600\U0001F600"
    assert parsed.text == 'syntax = "proto3";\n\noption java_package = "AAb\u00e9\U0001F600\U0001F600";\n'
    for bad, says in ((r'"\uD83D"', "line 2: a string has half a UTF-16 surrogate pair"),
                      (r'"\U00110000"', r"line 2: \\U00110000 is not a Unicode character"),
                      (r'"\u12"', r"line 2: unknown escape \\u")):
        with pytest.raises(RegistryError, match=says):
            parse_protobuf(f'syntax = "proto3";\noption java_package = {bad};', {})


def test_aggregate_option_values_take_angle_brackets_as_protoc_does():
    text = """syntax = "proto3";
import "google/protobuf/descriptor.proto";
extend google.protobuf.FileOptions { M opt = 50000; }
message M { M b = 1; repeated M c = 2; int32 a = 3; }
option (opt) = { b <a: 5> c: [<a: 7;>, {a: -8}] };
"""
    assert 'option (opt) = {\n  b: {\n    a: 5\n  },\n  c: [\n    {\n      a: 7\n    },\n    {\n      a: -8\n' \
        '    }\n  ]\n};\n' in parse_protobuf(text, {}).text
    with pytest.raises(RegistryError, match="line 5: expected a field name, found '}'"):
        parse_protobuf(text.replace("<a: 5>", "<a: 5}"), {})


def test_the_descriptor_resolves_types_maps_and_proto3_optional_as_protoc_writes_them():
    descriptor = parse_protobuf(ORDER, {}).descriptor
    order = descriptor.message_type[0]
    fields = {f.name: f for f in order.field}
    assert fields["placed_at"].type_name == ".google.protobuf.Timestamp"
    assert fields["voucher"].type_name == ".shop.v1.Order.Line.Kind" and fields["voucher"].oneof_index == 0
    assert fields["lines"].label == fields["lines"].LABEL_REPEATED
    assert fields["lines"].type_name == ".shop.v1.Order.LinesEntry"
    entry = next(n for n in order.nested_type if n.name == "LinesEntry")
    assert entry.options.map_entry and [f.type_name for f in entry.field] == ["", ".shop.v1.Order.Line"]
    assert [n.name for n in order.nested_type] == ["Line", "LinesEntry"]  # declared ones first: their indexes
    assert fields["total_cents"].proto3_optional and order.oneof_decl[fields["total_cents"].oneof_index].name == \
        "_total_cents"
    assert fields["id"].json_name == "orderId" and fields["id"].options.deprecated
    assert descriptor.options.java_package == "com.shop.v1"
    assert descriptor.service[0].method[0].server_streaming


def test_the_serialized_form_and_the_text_are_one_schema():
    text = parse_protobuf(ORDER, {})
    serialized = base64.b64encode(text.descriptor.SerializeToString()).decode()
    again = parse_protobuf(serialized, {})
    # the descriptor has no custom options: the same as the text without its (confluent.field_meta)
    assert identity(again.descriptor, again.schema.proto) != identity(text.descriptor, text.schema.proto)
    plain = ORDER.replace(' [(confluent.field_meta) = { doc: "1 is highest", params: [{key: "a" value: "b"}] }]', "")
    plain_parsed = parse_protobuf(plain, {})
    assert identity(again.descriptor, again.schema.proto) == identity(plain_parsed.descriptor,
                                                                       plain_parsed.schema.proto)
    # its canonical text is Confluent's for a descriptor: full type names, the map's entry message
    assert "  .google.protobuf.Timestamp placed_at = 2;\n" in again.text
    assert "  repeated .shop.v1.Order.LinesEntry lines = 3;\n" in again.text
    assert "    option map_entry = true;\n" in again.text
    stored = parse_protobuf(again.text, {})  # the stored text parses back to the same schema
    assert identity(stored.descriptor, stored.schema.proto) == identity(again.descriptor, again.schema.proto)


def test_nested_messages_keep_their_places_in_a_schemas_identity():
    """A nested message's place is its message index: two schemas that order nested messages apart are two
    schemas (a consumer resolving index [0, 1] against the other would read the wrong type); the map entries
    protoc puts among them (a text declares none) do not count."""
    text = 'syntax = "proto3";\nmessage O {\n  map<string, int32> m = 1;\n  message X {}\n  message Y {}\n}\n'
    swapped = parse_protobuf(text.replace("message X {}\n  message Y {}", "message Y {}\n  message X {}"), {})
    parsed = parse_protobuf(text, {})
    assert identity(swapped.descriptor, swapped.schema.proto) != identity(parsed.descriptor, parsed.schema.proto)
    as_protoc = descriptor_pb2.FileDescriptorProto()
    as_protoc.CopyFrom(parsed.descriptor)
    nested = as_protoc.message_type[0].nested_type
    protoc_order = [descriptor_pb2.DescriptorProto.FromString(n.SerializeToString()) for n in (nested[2], nested[0],
                                                                                            nested[1])]
    del nested[:]
    nested.extend(protoc_order)  # protoc writes MEntry where its field is, before X and Y
    assert [n.name for n in nested] == ["MEntry", "X", "Y"]
    again = parse_protobuf(base64.b64encode(as_protoc.SerializeToString()).decode(), {})
    assert identity(again.descriptor, again.schema.proto) == identity(parsed.descriptor, parsed.schema.proto)


def test_a_descriptors_options_are_written_in_confluents_order():
    """ProtobufSchema.toProtoFile writes file options java_multiple_files before optimize_for and field options
    jstype before deprecated (not in field-number order): the stored text of a serialized schema is its."""
    file = descriptor_pb2.FileDescriptorProto(name="x", syntax="proto3")
    file.options.optimize_for = file.options.SPEED
    file.options.java_multiple_files = True
    file.options.java_package = "com.x"
    field = file.message_type.add(name="M").field.add(name="a", number=1, type=3, label=1)
    field.options.deprecated = True
    field.options.jstype = field.options.JS_STRING
    text = parse_protobuf(base64.b64encode(file.SerializeToString()).decode(), {}).text
    assert 'option java_package = "com.x";\noption java_multiple_files = true;\noption optimize_for = SPEED;\n' in text
    assert "  int64 a = 1 [\n    jstype = JS_STRING,\n    deprecated = true\n  ];\n" in text


def test_the_well_known_files_are_read_once_when_two_requests_start_together(monkeypatch):
    """The second reader's objects replaced the first's, which a parse in flight held: check_in_pool took a
    well-known import that is not the one now known for a reference, and built it again."""
    from klog.protocol import protobuf_schema

    monkeypatch.setattr(protobuf_schema, "_WELL_KNOWN", {})
    monkeypatch.setattr(protobuf_schema, "_WELL_KNOWN_DESCRIPTORS", {})
    real_parse_text = protobuf_schema.parse_text

    def slow_parse_text(text: str, strict: bool = True):
        time.sleep(0.01)  # both readers inside at once
        return real_parse_text(text, strict)
    monkeypatch.setattr(protobuf_schema, "parse_text", slow_parse_text)
    seen: list[dict] = []
    readers = [threading.Thread(target=lambda: seen.append(dict(protobuf_schema.well_known()))) for _ in range(2)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert seen[0]["google/protobuf/any.proto"] is seen[1]["google/protobuf/any.proto"]


def test_well_known_files_resolve_without_references():
    files = well_known()
    for name in ("google/protobuf/timestamp.proto", "google/protobuf/any.proto", "google/protobuf/wrappers.proto",
                 "google/protobuf/struct.proto", "confluent/meta.proto", "confluent/type/decimal.proto"):
        assert name in files
    text = """syntax = "proto3"; import "google/protobuf/wrappers.proto"; import "confluent/type/decimal.proto";
    message M { google.protobuf.StringValue a = 1; confluent.type.Decimal b = 2; }"""
    fields = parse_protobuf(text, {}).descriptor.message_type[0].field
    assert [f.type_name for f in fields] == [".google.protobuf.StringValue", ".confluent.type.Decimal"]


@pytest.mark.parametrize(("text", "says"), [
    ('syntax = "proto3";\nmessage M {\n  int32 a = 1\n}', "line 4: expected ';', found '}'"),
    ('syntax = "proto4";', "line 1: syntax 'proto4' is not proto2 or proto3"),
    ('syntax = "proto3";\n\nmessage M { int32 a = 0; }', "line 3: field number 0 of a is out of range"),
    ('syntax = "proto3";\nmessage M { required int32 a = 1; }', "line 2: proto3 has no required fields"),
    ('syntax = "proto2";\nmessage M {\n int32 a = 1; }', "line 3: a proto2 field needs a label"),
    ('syntax = "proto3";\nmessage M { int32 a = 1; int64 b = 1; }', "fields a and b of M have the same number 1"),
    ('syntax = "proto3";\nmessage M { Missing a = 1; }', "type Missing (in M) is not defined"),
    ('syntax = "proto3";\nmessage M { int32 a = 1; }\nenum M { X = 0; }', "M is declared twice"),
    ('syntax = "proto3";\nmessage M { message N {} message N {} }', "M.N is declared twice"),
    ('syntax = "proto3";\nimport "other.proto";\nmessage M { int32 a = 1; }', "import 'other.proto' is neither"),
    ('syntax = "proto3";\nmessage M { map<float, int32> a = 1; }', "line 2: 'float' cannot be a map's key type"),
    ('syntax = "proto3";\nmessage M { string a = 1 [default = "x"; }', "line 2: expected ','"),
    ('syntax = "proto3";\nmessage M {\n  string a = "1";\n}', "line 3: expected the field's number"),
    ('syntax = "proto3";\nmessage M { string a = 1; /* open', "line 2: a comment /* is not closed"),
    ('syntax = "proto3";\nmessage M { string a = 1; }\n\nmessage', "line 4: the text ends where a message name"),
    ('syntax = "proto3";\nmessage M {\n  string a = 1;\n', "message M is not closed"),
    ('syntax = "proto3";\nenum E { }', "line 2: enum E has no constants"),
    ('syntax = "proto3";\nmessage M { option no_such = true; int32 a = 1; }', "option no_such of message M"),
    ('syntax = "proto2";\nmessage M { optional group G = 1 { optional int32 a = 2; } }', "groups are not supported"),
    ('syntax = "proto3";\nextend google.protobuf.FieldOptions { string x = 5000; }',
     "extend google.protobuf.FieldOptions (in the file): the message is not defined"),
    ('syntax = "proto3";\nmessage M { google.protobuf.Timestamp t = 1; }', "type google.protobuf.Timestamp (in M)"),
    ('syntax = "proto3";\nmessage M { int32 a = 1; } @', "line 2: unexpected character '@'"),
    ("message " * 10 + "{" * 10, "line 1: expected"),
    ('syntax = "proto3";\n' + "message M { " * 100 + "}" * 100, "nested deeper than 32 levels"),
    ('syntax = "proto3";\noption (x) = ' + "{a: " * 100 + "1" + "}" * 100 + ";", "nested deeper than 32 levels"),
    ("////", "not a .proto text nor a base64 FileDescriptorProto"),
    (";", "Empty schema"),  # its canonical text is empty: stored so, it did not parse again
    ("CgA=", "Empty schema"),  # a descriptor declaring nothing
    # numbers a descriptor cannot hold: 42201 naming them, not a 500 from protobuf's setters
    ('syntax = "proto2";\nenum E {\n  A = 2147483648; }', "line 3: enum value number 2147483648 is out of range"),
    ('syntax = "proto3";\nmessage M { reserved 99999999999; }', "line 2: reserved number 99999999999 is out of"),
    ('syntax = "proto2";\nmessage M { extensions 0 to 5; }', "line 2: extensions number 0 is out of range"),
    ('syntax = "proto3";\nenum E { A = 0; reserved -2147483649; }', "reserved number -2147483649 is out of range"),
    # what protoc and confluent-kafka's descriptor pool refuse past the grammar (its deserializer could not
    # load the serialized form)
    ('syntax = "proto3";\nenum E { X = 0; }\nenum F { X = 0; }', "descriptor pool refuses it: duplicate symbol 'X'"),
    ('syntax = "proto3";\nenum E { A = 1; }', "refuses it: for open enums, the first value must be zero (E)"),
    ('syntax = "proto3";\nmessage M { oneof o {} }', "refuses it: Error building mini table: Empty oneof"),
    ('syntax = "proto3";\nmessage M { int32 a = 1 [default = 2]; }', "cannot have explicit defaults (M.a)"),
    ('syntax = "proto3";\nmessage M { int32 a_b = 1; int32 aB = 2; }', "refuses it: duplicate json_name (aB)"),
    ('syntax = "proto3";\nmessage M { map<string, int32> f = 1; message FEntry {} }', "duplicate symbol 'M.FEntry'"),
    ('syntax = "proto2";\nmessage M { optional int32 a = 1 [default = abc]; }', "Invalid default 'abc' for field M.a"),
    ('syntax = "proto3";\nmessage M {\n reserved "a", "b\\nc"; }', "line 3: reserved name 'b\\nc' is not a name"),
    ('syntax = "proto3";\nimport "google/protobuf/any.proto";\nimport public "google/protobuf/any.proto";',
     "line 3: 'google/protobuf/any.proto' is imported twice"),
    ('syntax = "proto3";\nmessage M {\n  extensions 100 to 200; }', "line 3: message M: proto3 has no extensions"),
    # what protoc refuses past the pool's checks
    ('syntax = "proto3";\nmessage M { message a {} int32 a = 1; }', "M.a is declared twice (fields, oneofs"),
    ('syntax = "proto3";\nmessage M { enum E { B = 0; } string B = 1; }', "M.B is declared twice"),
    ('syntax = "proto3";\nmessage M { oneof a { int32 b = 1; } int32 a = 2; }', "M.a is declared twice"),
    ('syntax = "proto3";\nmessage M { reserved 2 to 4; int32 a = 3; }', "field a of M: its number 3 is reserved"),
    ('syntax = "proto3";\nmessage M { reserved "a"; int32 a = 3; }', "field a of M: its name is reserved"),
    ('syntax = "proto2";\nmessage M { extensions 10 to max; optional int32 a = 30; }', "30 is in an extensions range"),
    ('syntax = "proto3";\nenum E { A = 0; B = 0; }', "enum E: B has the number of A (0) and the enum has no option "
                                                     "allow_alias = true"),
    ('syntax = "proto3";\nenum E { A = 0; B = 1; reserved 1; }', "enum value B of E: its number 1 is reserved"),
])
def test_malformed_text_is_42201_naming_its_line_and_what_was_wrong(text, says):
    with pytest.raises(RegistryError) as refused:
        parse_protobuf(text, {})
    assert refused.value.code == 42201 and says in str(refused.value), str(refused.value)


def test_a_large_file_parses_without_recursion_or_delay():
    text = 'syntax = "proto3";\n' + "".join(f"message M{i} {{ int32 a = 1; string b = 2; M{i} self = 3; }}\n"
                                            for i in range(3000))
    assert len(parse_protobuf(text, {}).descriptor.message_type) == 3000
    with pytest.raises(ProtoError):
        parse_text("message M { " + "x" * 200_000)


def test_whitespace_before_a_bad_character_is_read_once():
    """The tokenizer's whitespace-and-comments group is atomic: it was split again every way before a character
    no token starts with (26 spaces took ~15 s, each more doubled it: one request pinned a worker)."""
    for tail in ("@", "/* open", "'open\n", "// a // b // c\n@"):
        started = time.perf_counter()
        with pytest.raises(ProtoError):
            parse_text("message M {" + " " * 26 + tail)
        assert time.perf_counter() - started < 0.5, tail
    with pytest.raises(ProtoError, match="line 3001: unexpected character '@'"):
        parse_text("message M {" + " // a // b\n" * 3000 + "@")


@pytest.mark.slow
def test_long_strings_and_aggregates_are_read_in_linear_time():
    """Each escape matched in place (a slice of the rest at each was quadratic: 160,000 escapes took 3.7 s, an
    8 MB body ~15 min); adjacent pieces joined once at the end (joined one by one: 320,000 took 6 s); an
    aggregate's repeated key extended in place (copied at each repeat: 40,000 took 9 s)."""
    started = time.perf_counter()
    escapes, pieces = "\\x41" * 200_000, '"b" ' * 150_000
    parsed = parse_text(f'syntax = "proto3";\noption java_package = "{escapes}" {pieces};')
    assert parsed.options[0].value == "A" * 200_000 + "b" * 150_000
    assert time.perf_counter() - started < 3
    started = time.perf_counter()
    parsed = parse_text('syntax = "proto3";\noption (x) = {' + " a: 1" * 40_000 + " a: [2, 3] };")
    assert parsed.options[0].value["a"] == ["1"] * 40_000 + ["2", "3"]
    assert time.perf_counter() - started < 3


def test_long_texts_and_descriptors_are_refused_past_their_bounds(monkeypatch):
    from klog.protocol import protobuf_schema

    monkeypatch.setattr(protobuf_schema, "MAX_TOKENS", 50)
    with pytest.raises(RegistryError, match="line 8: the schema is longer than 50 tokens"):
        parse_protobuf('syntax = "proto3";\n\n' + "message M { int32 a = 1; }\n" * 10, {})
    with pytest.raises(RegistryError, match="line 3: the schema is longer than 50 tokens"):  # each piece counts
        parse_protobuf('syntax = "proto3";\n\noption java_package = ' + '"a" ' * 100 + ";", {})
    monkeypatch.setattr(protobuf_schema, "MAX_ELEMENTS", 20)
    file = descriptor_pb2.FileDescriptorProto(name="x", syntax="proto3")
    for i in range(11):
        file.message_type.add(name=f"M{i}").field.add(name="a", number=1, type=5, label=1)
    with pytest.raises(RegistryError, match="more than 20 messages, fields and enum values"):
        parse_protobuf(base64.b64encode(file.SerializeToString()).decode(), {})


def test_a_descriptor_whose_strings_are_not_utf8_is_refused():
    """protobuf gives a proto2 string that is not UTF-8 as bytes: each place a name was used raised (a 500)."""
    file = descriptor_pb2.FileDescriptorProto(name="x", syntax="proto3")
    file.message_type.add(name="Zz").field.add(name="a", number=1, type=5, label=1)
    file.service.add(name="S").method.add(name="Get", input_type=".Zz", output_type=".Zz")
    data = file.SerializeToString()
    for spoiled in (data.replace(b"Zz", b"\xff\xfe", 1), data.replace(b"Get", b"G\xc3\x28")):
        with pytest.raises(RegistryError, match="is not UTF-8 text"):
            parse_protobuf(base64.b64encode(spoiled).decode(), {})


def schema(text: str) -> protobuf_compat.Schema:
    return parse_protobuf(text, {}).schema


def diffs(old: str, new: str) -> list[str]:
    head = 'syntax = "proto3";\npackage p;\n'
    return sorted({kind for kind, _ in protobuf_compat.differences(schema(head + old), schema(head + new))
                   if kind not in protobuf_compat.COMPATIBLE})


@pytest.mark.parametrize(("old", "new", "incompatible"), [
    # compatible: fields added or removed, renamed, an enum constant added, a message added or moved
    ("message M { int32 a = 1; }", "message M { int32 a = 1; string b = 2; }", []),
    ("message M { int32 a = 1; string b = 2; }", "message M { int32 a = 1; }", []),
    ("message M { int32 a = 1; }", "message M { int32 renamed = 1; }", []),
    ("message M { int32 a = 1; }", "message M { int64 a = 1; }", []),  # one varint group
    ("message M { int32 a = 1; }", "message M { bool a = 1; }", []),
    ("message M { string a = 1; }", "message M { bytes a = 1; }", []),
    ("message M { string a = 1; }", "message M { repeated string a = 1; }", []),  # string/bytes label: fine
    ("message M { E a = 1; } enum E { X = 0; }", "message M { E a = 1; } enum E { X = 0; Y = 1; }", []),
    ("message M { E a = 1; } enum E { X = 0; }", "message M { int32 a = 1; } enum E { X = 0; }", []),
    ("message M { int32 a = 1; }", "message N { int32 b = 1; } message M { int32 a = 1; }", []),
    ("message M { int32 a = 1; oneof o { string b = 2; } }", "message M { int32 a = 1; string b = 2; }", []),
    ("message M { oneof o { string b = 2; } }", "message M { oneof o { string b = 2; int32 c = 3; } }", []),
    ("message M { map<string, int32> m = 1; }", "message M { map<string, int64> m = 1; }", []),
    # incompatible
    ("message M { int32 a = 1; }", "message M { string a = 1; }", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("message M { int32 a = 1; }", "message M { N a = 1; } message N { int32 a = 1; }", ["FIELD_KIND_CHANGED"]),
    ("message M { int32 a = 1; }", "message M { sint32 a = 1; }", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("message M { fixed32 a = 1; }", "message M { fixed64 a = 1; }", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("message M { int32 a = 1; }", "message M { repeated int32 a = 1; }", []),  # proto3: no label to compare
    ("message M { N a = 1; } message N { int32 x = 1; } message O { int32 x = 1; }",
     "message M { O a = 1; } message N { int32 x = 1; } message O { int32 x = 1; }", ["FIELD_NAMED_TYPE_CHANGED"]),
    ("message M { int32 a = 1; } message N { int32 b = 1; }", "message M { int32 a = 1; }", ["MESSAGE_REMOVED"]),
    ("message M { oneof o { string b = 2; int32 c = 3; } }", "message M { oneof o { string b = 2; } }",
     ["ONEOF_FIELD_REMOVED"]),
    ("message M { int32 a = 1; int32 b = 2; }", "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"]),
    ("message M { int32 a = 1; oneof o { int32 b = 2; } }", "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     ["FIELD_MOVED_TO_EXISTING_ONEOF"]),
    ("message M { map<string, int32> m = 1; }", "message M { map<string, string> m = 1; }",
     ["FIELD_SCALAR_KIND_CHANGED"]),
    ("message M { map<string, int32> m = 1; }", "message M { repeated int32 m = 1; }", ["FIELD_KIND_CHANGED"]),
    ("message M { message N { int32 x = 1; } N n = 1; }", "message M { message N { string x = 1; } N n = 1; }",
     ["FIELD_SCALAR_KIND_CHANGED"]),
])
def test_compatibility_follows_confluents_protobuf_diff(old, new, incompatible):
    assert diffs(old, new) == incompatible


def test_proto2_required_fields_added_or_removed_are_incompatible():
    head = 'syntax = "proto2";\n'
    old = schema(head + "message M { required int32 a = 1; }")
    new = schema(head + "message M { optional int32 a = 1; required int32 b = 2; }")
    kinds = {kind for kind, _ in protobuf_compat.differences(old, new)}
    assert "REQUIRED_FIELD_ADDED" in kinds
    kinds = {kind for kind, _ in protobuf_compat.differences(
        schema(head + "message M { required int32 a = 1; }"), schema(head + "message M { optional int32 b = 2; }"))}
    assert "REQUIRED_FIELD_REMOVED" in kinds
    assert any(p.startswith('{errorType:"REQUIRED_FIELD_ADDED"') for p in protobuf_compat.read_problems(new, old))
    labelled = {kind for kind, _ in protobuf_compat.differences(
        schema(head + "message M { optional int32 a = 1; }"), schema(head + "message M { repeated int32 a = 1; }"))}
    assert labelled == {"FIELD_NUMERIC_LABEL_CHANGED"}
    moved = protobuf_compat.differences(schema('syntax = "proto3";\npackage p;\nmessage M { int32 a = 1; }'),
                                        schema('syntax = "proto3";\npackage q;\nmessage M { int32 a = 1; }'))
    assert moved == [("PACKAGE_CHANGED", "#/")]


def test_well_known_types_compare_by_their_content_as_confluents_diff_does():
    head = 'syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\n'
    old = schema(head + "message M { google.protobuf.Timestamp t = 1; }")
    new = schema(head + "message M { .google.protobuf.Timestamp t = 1; }")
    assert protobuf_compat.read_problems(new, old) == []


def test_types_from_other_reference_versions_are_compared_once_a_pair():
    """A chain of types each using the next twice, from two versions of a reference: compared field by field
    (their origins differ), each pair once: 30 links, not 2**30 comparisons."""
    chain = 'syntax = "proto3";\npackage c;\n' + "".join(f"message T{i} {{ T{i + 1} a = 1; T{i + 1} b = 2; }}\n"
                                                       for i in range(30)) + "message T30 { int32 x = 1; }\n"
    changed = chain.replace("int32 x", "string x")
    main = 'syntax = "proto3";\nimport "c.proto";\nmessage M { c.T0 t = 1; }\n'
    old = parse_protobuf(main, {"c.proto": (parse_protobuf(chain, {}), "c:1")})
    new = parse_protobuf(main, {"c.proto": (parse_protobuf(chain, {}), "c:2")})
    assert protobuf_compat.read_problems(new.schema, old.schema) == []
    new = parse_protobuf(main, {"c.proto": (parse_protobuf(changed, {}), "c:3")})
    kinds = [kind for kind, _ in protobuf_compat.differences(old.schema, new.schema)]
    assert kinds.count("FIELD_SCALAR_KIND_CHANGED") == 1 and kinds.count("FIELD_NAMED_TYPE_CHANGED") == 61


def test_a_weak_import_is_kept_in_the_stored_text(data_dir):
    """Confluent's canonical text drops `import weak`: stored so, the text no longer resolved its types, so the
    version matched no lookup and no comparison could parse it."""
    store = klog.open(data_dir)
    registry = Registry(store)
    try:
        text = 'syntax = "proto3";\nimport weak "google/protobuf/any.proto";\nmessage M { google.protobuf.Any a = 1; }'
        assert registry.register("s", text, "PROTOBUF") == 1
        assert 'import weak "google/protobuf/any.proto";\n' in registry.version("s", "1").schema
        assert registry.lookup("s", text, schema_type="PROTOBUF").id == 1
        assert registry.register("s", text.replace("a = 1;", "a = 1; int32 b = 2;"), "PROTOBUF") == 2
    finally:
        registry.close()
        store.close()


def test_a_stored_version_protoc_would_refuse_is_still_served_and_compared(data_dir):
    """What Confluent's registry took (its own tests reserve 1 and use it) is read from _schemas as it is: a
    new version is compared with it (it was 'a version it is compared with cannot be parsed'); a request's
    schema is checked as protoc checks it."""
    store = klog.open(data_dir)
    registry = Registry(store)
    try:
        taken = 'syntax = "proto3";\n\nmessage M {\n  reserved 1;\n\n  string id = 1;\n}\n'
        registry._write_version(schemas.Version("s", 1, 1, taken, schema_type="PROTOBUF"))
        assert registry.canonical_of(registry.version("s", "1")) is not None
        assert registry.register("s", taken.replace("reserved 1;", "reserved 3;"), "PROTOBUF") == 2
        with pytest.raises(RegistryError, match="field id of M: its number 1 is reserved"):
            registry.register("t", taken, "PROTOBUF")
    finally:
        registry.close()
        store.close()


def test_stored_versions_are_parsed_outside_the_registry_lock(data_dir, monkeypatch):
    """After a start no stored version is parsed: the first register or lookup parses them before it takes the
    lock, which every other request (a GET of a schema by id) waits for."""
    store = klog.open(data_dir)
    registry = Registry(store)
    try:
        for subject in ("a", "b"):
            registry.register(subject, f'syntax = "proto3";\nmessage {subject.upper()} {{ int32 x = 1; }}', "PROTOBUF")
        registry._stored.clear()  # as after a start
        under_lock = []

        def parse_spy(*args, **kwargs):
            under_lock.append(registry.lock._is_owned())
            return real_parse(*args, **kwargs)
        real_parse = schemas.parse
        monkeypatch.setattr(schemas, "parse", parse_spy)
        registry.register("c", 'syntax = "proto3";\nmessage C { int32 x = 1; }', "PROTOBUF")
        registry._stored.clear()
        registry.lookup("a", 'syntax = "proto3";\nmessage A { int32 x = 1; }', schema_type="PROTOBUF")
        assert len(under_lock) >= 5 and not any(under_lock)
    finally:
        registry.close()
        store.close()


# -- over HTTP ---------------------------------------------------------------------------------------------
def test_a_get_of_the_serialized_form_parses_outside_the_registry_lock(data_dir, monkeypatch):
    """The first GET of a version's serialized form after a start parsed it holding the lock every other request
    waits for (a consumer fetching each schema id once)."""
    store = klog.open(data_dir)
    registry = Registry(store)
    server = RegistryServer(registry, "127.0.0.1", 0, log=lambda line: None).start()
    try:
        registry.register("s", 'syntax = "proto3";\nmessage M { int32 x = 1; }', "PROTOBUF")
        under_lock: list[bool] = []
        real_parse = schemas.parse

        def parse_spy(*args, **kwargs):
            under_lock.append(registry.lock._is_owned())
            return real_parse(*args, **kwargs)
        monkeypatch.setattr(schemas, "parse", parse_spy)
        base = f"http://127.0.0.1:{server.port}"
        for path in ("/schemas/ids/1?format=serialized", "/subjects/s/versions/1?format=serialized"):
            registry._stored.clear()  # as after a start
            status, answer = call(base, "GET", path)
            assert status == 200 and not answer["schema"].startswith("syntax")
        assert under_lock == [False, False]
    finally:
        server.close()
        registry.close()
        store.close()



def test_register_text_and_serialized_forms_get_one_id_and_answer_confluents_forms(url):
    assert register(url, "orders-value", ORDER) == (200, {"id": 1})
    assert register(url, "orders-value", ORDER_CANONICAL) == (200, {"id": 1})  # the same schema, no new version
    status, version = call(url, "GET", "/subjects/orders-value/versions/1")
    assert status == 200 and version == {"subject": "orders-value", "version": 1, "id": 1,
                                         "schemaType": "PROTOBUF", "schema": ORDER_CANONICAL}
    assert call(url, "GET", "/schemas/ids/1") == (200, {"schemaType": "PROTOBUF", "schema": ORDER_CANONICAL})
    status, answer = call(url, "GET", "/schemas/ids/1?format=serialized")
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(answer["schema"]))
    assert [m.name for m in descriptor.message_type] == ["Order"] and descriptor.package == "shop.v1"
    assert call(url, "GET", "/subjects/orders-value/versions/1?format=serialized")[1]["schema"] == answer["schema"]
    plain = ORDER.replace(' [(confluent.field_meta) = { doc: "1 is highest", params: [{key: "a" value: "b"}] }]', "")
    assert register(url, "plain-value", plain) == (200, {"id": 2})
    # the serialized form of the same schema: its id, in lookup and in register
    serialized = call(url, "GET", "/schemas/ids/2?format=serialized")[1]["schema"]
    status, found = call(url, "POST", "/subjects/plain-value", {"schemaType": "PROTOBUF", "schema": serialized})
    assert (status, found["id"], found["version"]) == (200, 2, 1)
    assert register(url, "other-value", serialized) == (200, {"id": 2})
    status, refused = register(url, "bad-value", 'syntax = "proto3";\nmessage M {\n  int32 a = 1\n}')
    assert (status, refused["error_code"]) == (422, 42201) and "line 4" in refused["message"]


def test_a_body_with_half_a_surrogate_pair_is_a_400_not_a_500(url):
    """json reads "\\ud800" as a lone surrogate, which cannot be written to _schemas as UTF-8 (it was a 500)."""
    for schema_type, text in (("AVRO", '{"type": "record", "name": "R", "doc": "\\ud800", "fields": []}'),
                              ("PROTOBUF", 'syntax = "proto3";\noption java_package = "\\ud800";')):
        escaped = json.dumps(text).replace("\\\\ud800", "\\ud800")  # the schema's text has the half pair itself
        body = f'{{"schemaType": "{schema_type}", "schema": {escaped}}}'
        request = urllib.request.Request(url + "/subjects/s/versions", data=body.encode(), method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
        assert json.loads(refused.value.read())["message"] == "the request body has half a UTF-16 surrogate pair"
    assert call(url, "GET", "/subjects") == (200, [])


def test_references_resolve_are_answered_and_guard_deletion(url):
    money = 'syntax = "proto3";\npackage shop.common;\nmessage Money { int64 units = 1; string currency = 2; }\n'
    assert register(url, "money", money) == (200, {"id": 1})
    order = ('syntax = "proto3";\npackage shop;\nimport "shop/money.proto";\n'
             "message Order { string id = 1; shop.common.Money price = 2; }\n")
    refs = [{"name": "shop/money.proto", "subject": "money", "version": 1}]
    status, missing = register(url, "orders-value", order)  # no reference: the import is nowhere
    assert (status, missing["error_code"]) == (422, 42201) and "shop/money.proto" in missing["message"]
    status, missing = register(url, "orders-value", order, [{**refs[0], "version": 7}])
    assert (status, missing["error_code"]) == (422, 42201) and "subject 'money' version 7" in missing["message"]
    assert register(url, "orders-value", order, refs) == (200, {"id": 2})
    assert call(url, "GET", "/subjects/orders-value/versions/1")[1]["references"] == refs
    assert call(url, "GET", "/schemas/ids/2")[1]["references"] == refs
    status, found = call(url, "POST", "/subjects/orders-value", {"schemaType": "PROTOBUF", "schema": order,
                                                                   "references": refs})
    assert (status, found["id"]) == (200, 2)
    assert call(url, "GET", "/subjects/money/versions/1/referencedby") == (200, [2])
    # a referenced version is not deleted (Confluent's 42206), softly or for good
    status, refused = call(url, "DELETE", "/subjects/money/versions/1")
    assert (status, refused["error_code"]) == (422, 42206)
    assert "subject=money,version=1" in refused["message"]
    assert call(url, "DELETE", "/subjects/money")[1]["error_code"] == 42206
    # the referring version soft-deleted: the soft delete may go, the permanent one not yet
    assert call(url, "DELETE", "/subjects/orders-value/versions/1") == (200, 1)
    assert call(url, "GET", "/subjects/money/versions/1/referencedby") == (200, [])
    assert call(url, "GET", "/subjects/money/versions/1/referencedby?deleted=true") == (200, [2])
    assert call(url, "DELETE", "/subjects/money/versions/1") == (200, 1)
    assert call(url, "DELETE", "/subjects/money/versions/1?permanent=true")[1]["error_code"] == 42206
    assert call(url, "DELETE", "/subjects/orders-value/versions/1?permanent=true") == (200, 1)
    assert call(url, "DELETE", "/subjects/money/versions/1?permanent=true") == (200, 1)


@pytest.mark.slow
def test_protobuf_versions_and_references_survive_a_restart_as_confluent_writes_them(data_dir):
    import klog

    money = 'syntax = "proto3";\npackage shop.common;\nmessage Money { int64 units = 1; }\n'
    order = 'syntax = "proto3";\npackage shop;\nimport "m.proto";\nmessage Order { shop.common.Money price = 1; }\n'
    refs = [{"name": "m.proto", "subject": "money", "version": 1}]
    with serving(data_dir) as url:
        assert register(url, "money", money) == (200, {"id": 1})
        assert register(url, "orders-value", order, refs) == (200, {"id": 2})
    with klog.open(data_dir) as store, store.consumer("_schemas") as records:
        values = [json.loads(r.value) for r in records if r.value]
    assert values[1] == {"subject": "orders-value", "version": 1, "id": 2, "schemaType": "PROTOBUF",
                         "references": refs, "schema": order.replace(";\nimport", ";\n\nimport")
                         .replace(";\nmessage", ";\n\nmessage").replace("{ ", "{\n  ").replace("; }", ";\n}"),
                         "deleted": False}
    with serving(data_dir) as url:
        assert register(url, "orders-value", order, refs) == (200, {"id": 2})
        assert call(url, "GET", "/subjects/money/versions/1/referencedby") == (200, [2])
        assert call(url, "DELETE", "/subjects/money/versions/1")[1]["error_code"] == 42206


def test_avro_references_define_named_types_and_compare_through_them(url):
    money = json.dumps({"type": "record", "name": "Money", "namespace": "shop",
                        "fields": [{"name": "units", "type": "long"}, {"name": "currency", "type": "string"}]})
    assert call(url, "POST", "/subjects/money/versions", {"schema": money}) == (200, {"id": 1})
    order = {"type": "record", "name": "Order", "namespace": "shop",
             "fields": [{"name": "id", "type": "string"}, {"name": "price", "type": "Money"},
                        {"name": "tip", "type": ["null", "shop.Money"], "default": None}]}
    refs = [{"name": "shop.Money", "subject": "money", "version": 1}]
    status, refused = call(url, "POST", "/subjects/orders/versions", {"schema": json.dumps(order)})
    assert (status, refused["error_code"]) == (422, 42201) and "Money" in refused["message"]
    assert call(url, "POST", "/subjects/orders/versions", {"schema": json.dumps(order), "references": refs}) == \
        (200, {"id": 2})
    assert call(url, "GET", "/subjects/orders/versions/1")[1]["references"] == refs
    assert call(url, "GET", "/subjects/orders/versions/1")[1]["schema"] == json.dumps(order)  # kept as sent
    # Confluent's "several event types in one topic": a union of references
    both = [{"name": "shop.Money", "subject": "money", "version": 1},
            {"name": "shop.Order", "subject": "orders", "version": 1}]
    assert call(url, "POST", "/subjects/events/versions", {"schema": '["shop.Money", "shop.Order"]',
                                                           "references": both}) == (200, {"id": 3})
    # compared through the references: Money's units made a string under version 2 is refused for orders
    assert call(url, "PUT", "/config/money", {"compatibility": "NONE"})[0] == 200
    changed = json.loads(money)
    changed["fields"][0]["type"] = "string"
    assert call(url, "POST", "/subjects/money/versions", {"schema": json.dumps(changed)}) == (200, {"id": 4})
    status, refused = call(url, "POST", "/subjects/orders/versions", {
        "schema": json.dumps(order), "references": [{**refs[0], "version": 2}]})
    assert status == 409 and "units" in refused["message"]
    assert call(url, "GET", "/subjects/money/versions/1/referencedby") == (200, [2, 3])


def test_references_of_another_type_and_malformed_ones_are_refused_naming_why(url):
    assert call(url, "POST", "/subjects/a/versions", {"schema": '{"type": "string"}', "schemaType": "JSON"}) == \
        (200, {"id": 1})
    status, refused = call(url, "POST", "/subjects/b/versions", {
        "schema": '"string"', "references": [{"name": "A", "subject": "a", "version": 1}]})
    assert (status, refused["error_code"]) == (422, 42201)
    assert "is a JSON schema and this one AVRO" in refused["message"]
    status, refused = call(url, "POST", "/subjects/b/versions", {
        "schema": '"string"', "references": [{"name": "A", "subject": "a", "version": "1"}]})
    assert (status, refused["error_code"]) == (422, 42201) and "{name, subject, version}" in refused["message"]


def test_compatibility_levels_apply_protobuf_rules(url):
    v1 = 'syntax = "proto3";\nmessage M { int32 a = 1; string b = 2; }\n'
    assert register(url, "m-value", v1) == (200, {"id": 1})
    changed = v1.replace("int32 a", "string a")
    status, refused = register(url, "m-value", changed)
    assert status == 409 and "FIELD_SCALAR_KIND_CHANGED" in refused["message"] and "#/M/1" in refused["message"]
    verdict = call(url, "POST", "/compatibility/subjects/m-value/versions/latest?verbose=true",
                   {"schemaType": "PROTOBUF", "schema": changed})[1]
    assert verdict["is_compatible"] is False and "FIELD_SCALAR_KIND_CHANGED" in verdict["messages"][0]
    assert register(url, "m-value", v1.replace("string b = 2;", "")) == (200, {"id": 2})  # a field removed
    assert call(url, "PUT", "/config/m-value", {"compatibility": "FULL_TRANSITIVE"})[0] == 200
    grown = 'syntax = "proto3";\nmessage M { int32 a = 1; sint64 b = 2; }\n'  # b's kind differs from version 1's
    status, refused = register(url, "m-value", grown)
    assert status == 409 and "FIELD_SCALAR_KIND_CHANGED" in refused["message"]
    assert call(url, "PUT", "/config/m-value", {"compatibility": "FULL"})[0] == 200
    assert register(url, "m-value", grown) == (200, {"id": 3})  # only the latest (no b) is compared
    status, refused = call(url, "POST", "/subjects/m-value/versions", {"schema": '"string"'})
    assert status == 409 and "different schema type" in refused["message"]


# -- confluent-kafka's own serializer and deserializer -----------------------------------------------------
def _order_classes() -> tuple[type, type]:
    """Order (with a google.protobuf.Timestamp and a nested Line) built from a FileDescriptorProto."""
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2

    file = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3",
                                              dependency=["google/protobuf/timestamp.proto"])
    order = file.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=9, label=1)
    line.field.add(name="quantity", number=2, type=13, label=1)
    order.field.add(name="id", number=1, type=9, label=1)
    order.field.add(name="placed_at", number=2, type=11, label=1, type_name=".google.protobuf.Timestamp")
    order.field.add(name="lines", number=3, type=11, label=3, type_name=".shop.Order.Line")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Line")))


def test_confluent_kafkas_protobuf_serializer_and_deserializer_use_the_registry(url):
    protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    order_class, line_class = _order_classes()
    client = SchemaRegistryClient({"url": url})
    context = SerializationContext("orders", MessageField.VALUE)
    order = order_class(id="o-1", lines=[line_class(sku="s-1", quantity=2)])
    order.placed_at.seconds = 1_700_000_000
    data = protobuf.ProtobufSerializer(order_class, client)(order, context)
    assert data[:5] == b"\x00\x00\x00\x00\x01" and data[5] == 0  # schema id 1, message index [0] (one 0 byte)
    status, version = call(url, "GET", "/subjects/orders-value/versions/latest")
    assert version["schemaType"] == "PROTOBUF" and "import \"google/protobuf/timestamp.proto\";" in version["schema"]
    decoded = protobuf.ProtobufDeserializer(order_class, {"use.deprecated.format": False})(data, context)
    assert decoded == order
    # the nested message: its index path [0, 0] in the same schema (the same id)
    lines = SerializationContext("lines", MessageField.VALUE)
    data = protobuf.ProtobufSerializer(line_class, client)(line_class(sku="s-2", quantity=5), lines)
    assert data[1:5] == b"\x00\x00\x00\x01" and data[5:8] == b"\x04\x00\x00"  # 2 indexes: 0, 0 (zigzag varints)
    reader = protobuf.ProtobufDeserializer(line_class, {"use.deprecated.format": False}, client)
    assert reader(data, lines) == line_class(sku="s-2", quantity=5)
    assert call(url, "GET", "/subjects/lines-value/versions/1")[1]["id"] == 1


def test_confluent_kafkas_avro_serde_resolves_references_against_the_registry(url):
    pytest.importorskip("fastavro")
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url})
    money = json.dumps({"type": "record", "name": "Money", "namespace": "shop",
                        "fields": [{"name": "units", "type": "long"}]})
    assert client.register_schema("money", Schema(money, "AVRO")) == 1
    order = json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                        "fields": [{"name": "price", "type": "Money"}]})
    assert client.register_schema("orders-value", Schema(order, "AVRO", [SchemaReference("shop.Money", "money", 1)])) \
        == 2
    context = SerializationContext("orders", MessageField.VALUE)
    write = AvroSerializer(client, None, conf={"auto.register.schemas": False, "use.latest.version": True})
    data = write({"price": {"units": 5}}, context)
    assert data[:5] == b"\x00\x00\x00\x00\x02"
    assert AvroDeserializer(client)(data, context) == {"price": {"units": 5}}


def test_confluent_kafkas_protobuf_serde_with_maps_enums_oneofs_and_proto3_optional(url):
    """A descriptor as protoc writes one (json_name on every field, the map's entry message, proto3 optional's
    synthetic oneof): registered as sent, read back, its second nested message at index [0, 1]; its stored
    text registered again is the same schema."""
    protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="rich.proto", package="r", syntax="proto3")
    rich = file.message_type.add(name="R")
    kind = rich.enum_type.add(name="Kind")
    kind.value.add(name="A", number=0)
    kind.value.add(name="B", number=1)
    entry = rich.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=9, label=1, json_name="key")
    entry.field.add(name="value", number=2, type=5, label=1, json_name="value")
    rich.nested_type.add(name="Inner").field.add(name="x", number=1, type=9, label=1, json_name="x")
    rich.field.add(name="tags", number=1, type=11, label=3, type_name=".r.R.TagsEntry", json_name="tags")
    rich.field.add(name="kind", number=2, type=14, label=1, type_name=".r.R.Kind", json_name="kind")
    rich.oneof_decl.add(name="choice")
    rich.oneof_decl.add(name="_opt_count")
    rich.field.add(name="s", number=3, type=9, label=1, oneof_index=0, json_name="s")
    rich.field.add(name="inner", number=4, type=11, label=1, type_name=".r.R.Inner", oneof_index=0, json_name="inner")
    rich.field.add(name="opt_count", number=5, type=5, label=1, oneof_index=1, proto3_optional=True,
                   json_name="optCount")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    rich_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("r.R"))
    inner_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("r.R.Inner"))
    client = SchemaRegistryClient({"url": url})
    context = SerializationContext("rich", MessageField.VALUE)
    message = rich_class(kind=1, inner=inner_class(x="q"), opt_count=0)
    message.tags["a"] = 3
    data = protobuf.ProtobufSerializer(rich_class, client)(message, context)
    assert protobuf.ProtobufDeserializer(rich_class, {"use.deprecated.format": False})(data, context) == message
    inner_context = SerializationContext("inner", MessageField.VALUE)
    data = protobuf.ProtobufSerializer(inner_class, client)(inner_class(x="z"), inner_context)
    assert data[:8] == b"\x00\x00\x00\x00\x01\x04\x00\x02"  # schema 1, indexes [0, 1] (TagsEntry is [0, 0])
    reader = protobuf.ProtobufDeserializer(inner_class, {"use.deprecated.format": False}, client)
    assert reader(data, inner_context) == inner_class(x="z")
    text = call(url, "GET", "/subjects/rich-value/versions/1")[1]["schema"]
    assert "  optional int32 opt_count = 5 [json_name = \"optCount\"];\n" in text
    assert register(url, "rich-text", text) == (200, {"id": 1})


def test_confluent_kafkas_protobuf_serializer_registers_an_import_as_a_reference(url):
    """An import that is no well-known file: the serializer registers it under its own subject first and
    the schema with a reference to it; the deserializer fetches both (serialized) to read the record."""
    protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pool, message_factory

    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop.common", syntax="proto3")
    money.message_type.add(name="Money").field.add(name="units", number=1, type=3, label=1)
    order = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3",
                                               dependency=["shop/money.proto"])
    order.message_type.add(name="Order").field.add(name="price", number=1, type=11, label=1,
                                                   type_name=".shop.common.Money")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(order)
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    money_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.common.Money"))
    client = SchemaRegistryClient({"url": url})
    context = SerializationContext("orders", MessageField.VALUE)
    data = protobuf.ProtobufSerializer(order_class, client)(order_class(price=money_class(units=7)), context)
    assert data[:6] == b"\x00\x00\x00\x00\x02\x00"
    assert call(url, "GET", "/subjects") == (200, ["orders-value", "shop/money.proto"])
    assert call(url, "GET", "/subjects/orders-value/versions/1")[1]["references"] == [
        {"name": "shop/money.proto", "subject": "shop/money.proto", "version": 1}]
    reader = protobuf.ProtobufDeserializer(order_class, {"use.deprecated.format": False}, client)
    assert reader(data, context) == order_class(price=money_class(units=7))

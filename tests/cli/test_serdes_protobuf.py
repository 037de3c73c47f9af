"""`klog consume -s protobuf` and `klog produce -s protobuf`: Protobuf in Confluent's framing.

Goal: what confluent-kafka's ProtobufSerializer writes (a message importing google/protobuf/timestamp.proto,
a nested message at index path [0, 0]) prints as Protobuf's JSON mapping with defaults, as Confluent's
kafka-protobuf-console-consumer prints it; what `klog produce -s protobuf` writes from that JSON,
ProtobufDeserializer reads back as the same message; a record or line that does not fit is one line.
"""

from __future__ import annotations

import json

import pytest

import klog
from tests.registry.helpers import serving as registry_at

pytest.importorskip("google.protobuf", reason="-s protobuf needs protobuf (pip install 'klog[connect]')")
protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")

ORDER_PROTO = '''syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  message Line { string sku = 1; uint32 quantity = 2; }
  string id = 1;
  google.protobuf.Timestamp placed_at = 2;
  repeated Line lines = 3;
  int64 total_cents = 4;
  bool paid = 5;
}
'''


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir + "-registry") as url:
        yield url


def order_classes() -> tuple[type, type]:
    from tests.registry.test_registry_protobuf import _order_classes

    return _order_classes()


def produce(data_dir: str, topic: str, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    with klog.open(data_dir) as store:
        store.create_topic(topic, partitions=1, exist_ok=True)
        with store.producer() as producer:
            for key, value in pairs:
                producer.send(topic, value, key=key)


def values(data_dir: str, topic: str) -> list[bytes]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic)]


def test_confluents_protobuf_records_print_as_protobufs_json_mapping(cli, data_dir, registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    order_class, line_class = order_classes()
    client = SchemaRegistryClient({"url": registry_url})
    order = order_class(id="o-1", lines=[line_class(sku="s-1", quantity=2)])
    order.placed_at.seconds = 1_700_000_000
    write = protobuf.ProtobufSerializer(order_class, client)
    produce(data_dir, "orders", [(None, write(order, SerializationContext("orders", MessageField.VALUE))),
                                 (None, write(order_class(), SerializationContext("orders", MessageField.VALUE)))])
    line = protobuf.ProtobufSerializer(line_class, client)(line_class(sku="s-2"),
                                                           SerializationContext("lines", MessageField.VALUE))
    produce(data_dir, "lines", [(None, line)])
    done = cli("consume", "orders", "-s", "value=protobuf", "-r", registry_url)
    assert done.exit_code == 0, done.stderr
    assert [json.loads(x) for x in done.out.splitlines()] == [
        {"id": "o-1", "placedAt": "2023-11-14T22:13:20Z", "lines": [{"sku": "s-1", "quantity": 2}]},
        {"id": "", "lines": []}]  # defaults printed (an unset message field is absent, as in Java's JsonFormat)
    nested = cli("consume", "lines", "-s", "protobuf", "-r", registry_url, "--json")
    assert nested.exit_code == 0, nested.stderr
    assert json.loads(nested.out)["value"] == {"sku": "s-2", "quantity": 0}


def test_produce_writes_what_confluents_deserializer_reads(cli, data_dir, registry_url, tmp_path):
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = tmp_path / "order.proto"
    schema.write_text(ORDER_PROTO)
    lines = (b'{"id": "o-7", "placedAt": "2023-11-14T22:13:20Z", "lines": [{"sku": "a", "quantity": 3}], '
             b'"totalCents": "1250", "paid": true}\n')
    done = cli("produce", "orders", "-s", "value=protobuf", "--schema", str(schema), "-r", registry_url, input=lines)
    assert done.exit_code == 0, done.stderr
    [data] = values(data_dir, "orders")
    assert data[5] == 0  # message index [0]: one 0 byte
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2

    from klog.protocol import protobuf_schema as proto

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto.to_descriptor(proto.parse_text(ORDER_PROTO), proto.well_known(), name="order.proto"))
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    got = protobuf.ProtobufDeserializer(order_class, {"use.deprecated.format": False})(
        data, SerializationContext("orders", MessageField.VALUE))
    assert (got.id, got.placed_at.seconds, got.lines[0].sku, got.total_cents, got.paid) == \
        ("o-7", 1_700_000_000, "a", 1250, True)
    back = cli("consume", "orders", "-s", "protobuf", "-r", registry_url)
    assert json.loads(back.out) == {**json.loads(lines), "lines": [{"sku": "a", "quantity": 3}]}


def test_a_line_that_is_not_the_message_is_named(cli, data_dir, registry_url, tmp_path):
    schema = tmp_path / "order.proto"
    schema.write_text(ORDER_PROTO)
    done = cli("produce", "orders", "-s", "protobuf", "--schema", f"value={schema}", "-r", registry_url,
               input=b'{"id": "ok"}\n{"nope": 1}\n')
    assert done.exit_code == 2
    assert 'line 2: the value is not shop.Order of schema 1 in Protobuf\'s JSON mapping' in done.stderr
    assert len(values(data_dir, "orders")) == 1


def test_a_record_with_a_bad_message_index_is_one_line(cli, data_dir, registry_url, tmp_path):
    schema = tmp_path / "order.proto"
    schema.write_text(ORDER_PROTO)
    assert cli("produce", "orders", "-s", "protobuf", "--schema", str(schema), "-r", registry_url,
               input=b'{"id": "ok"}\n').exit_code == 0
    produce(data_dir, "orders", [(None, b"\x00\x00\x00\x00\x01\x02\x0e")])  # index path [7]: no such message
    done = cli("consume", "orders", "-s", "protobuf", "-r", registry_url)
    assert done.exit_code == 1
    assert json.loads(done.out.splitlines()[0])["id"] == "ok"
    assert "offset 1 as protobuf: message index [7] names no message of schema 1" in done.stderr


def test_a_record_reads_after_its_schema_and_the_one_it_imports_were_soft_deleted(cli, data_dir, registry_url):
    """As Confluent's clients (lookupDeletedSchema), a reference's version is fetched with deleted=true: a
    record written before its schema and the file it imports were soft-deleted still reads."""
    import urllib.request

    def call(method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(registry_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(request) as answer:
            return json.loads(answer.read())

    call("POST", "/subjects/money/versions", {"schemaType": "PROTOBUF", "schema":
         'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; }\n'})
    call("POST", "/subjects/paid-value/versions", {
        "schemaType": "PROTOBUF", "references": [{"name": "shop/money.proto", "subject": "money", "version": 1}],
        "schema": 'syntax = "proto3";\npackage shop;\nimport "shop/money.proto";\n'
                  'message Paid { string id = 1; Money amount = 2; }\n'})
    done = cli("produce", "paid", "-s", "value=protobuf", "--schema", "latest", "-r", registry_url,
               input=b'{"id": "p-1", "amount": {"cents": "250"}}\n')
    assert done.exit_code == 0, done.stderr
    call("DELETE", "/subjects/paid-value/versions/1")
    call("DELETE", "/subjects/money/versions/1")
    back = cli("consume", "paid", "-s", "value=protobuf", "-r", registry_url)
    assert back.exit_code == 0, back.stderr
    assert json.loads(back.out) == {"id": "p-1", "amount": {"cents": "250"}}

"""The AvroConverter on a schema whose named types are used twice at each level (record R0 holds two R1s, R1 two
R2s, ... R40): each named type is made once into a Connect struct and met again shares its fields, so the schema
is read, keyed, written back (each type defined once, then used by name, Avro's rule) and registered in time
linear in its definitions, where the tree of its uses has 2^40 records. Checked with confluent-kafka's
AvroSerializer and AvroDeserializer. What writes a schema out as a tree (JsonConverter's envelope, JSON Schema,
Flatten) refuses such a one in one line. The time bounds guard an exponential, not a benchmark."""

from __future__ import annotations

import json
import time
from urllib.request import urlopen

import pytest

pytest.importorskip("fastavro", reason="the AvroConverter needs fastavro (pip install 'klog[connect]')")
avro_serdes = pytest.importorskip("confluent_kafka.schema_registry.avro")

from klog.connect.converters import make_converter  # noqa: E402
from klog.connect.data import ConnectRecord, schema_key  # noqa: E402
from klog.connect.errors import DataError  # noqa: E402
from klog.connect.transforms import Chain  # noqa: E402
from tests.connect.test_connect_avro import ctx  # noqa: E402
from tests.registry.helpers import serving as registry_at  # noqa: E402

LEVELS = 40
BOUND_S = 30.0  # linear: under a second here; expanding the uses did not finish (killed at 60 s)


def doubling(levels: int = LEVELS, leaf: str = "int") -> dict:
    """R0 .. R<levels>: each record but the last holds the next twice, defined in `a` and named in `b`."""
    schema: dict = {"type": "record", "name": f"R{levels}", "namespace": "dbl",
                    "fields": [{"name": "v", "type": leaf, "doc": "the leaf"}]}
    for i in range(levels - 1, -1, -1):
        schema = {"type": "record", "name": f"R{i}", "namespace": "dbl", "doc": f"level {i}", "fields": [
            {"name": "a", "type": ["null", schema], "default": None},
            {"name": "b", "type": ["null", f"R{i + 1}"], "default": None}]}
    return schema


VALUE = {"a": {"a": None, "b": {"a": None, "b": None}}, "b": {"a": {"a": None, "b": None}, "b": None}}


@pytest.fixture
def registry_url(data_dir):
    with registry_at(data_dir) as url:
        yield url


def _read(registry_url: str) -> tuple[dict, dict]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    data = avro_serdes.AvroSerializer(client, json.dumps(doubling()))(VALUE, ctx("dbl"))
    return make_converter("value.converter", "avro", {"schema.registry.url": registry_url}, False).to_connect(
        "dbl", data)


@pytest.mark.slow
def test_a_named_type_used_twice_at_each_of_40_levels_is_read_and_written_back_in_linear_time(registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    started = time.monotonic()
    c = make_converter("value.converter", "avro", {"schema.registry.url": registry_url}, False)
    schema, value = _read(registry_url)
    assert value == VALUE
    a, b = schema["fields"]
    assert a["fields"] is b["fields"] and (a["name"], b["name"], a["optional"]) == ("dbl.R1", "dbl.R1", True)
    assert schema["parameters"]["io.confluent.connect.avro.record.doc"] == "level 0"
    assert a["parameters"]["io.confluent.connect.avro.record.doc"] == "level 1"
    assert len(schema_key(schema)) < 100_000

    written = c.from_connect("dbl-copy", schema, value)
    assert time.monotonic() - started < BOUND_S
    client = SchemaRegistryClient({"url": registry_url})
    assert avro_serdes.AvroDeserializer(client)(written, ctx("dbl-copy")) == VALUE
    with urlopen(f"{registry_url}/subjects/dbl-copy-value/versions/latest") as answer:
        text = json.loads(answer.read())["schema"]
    assert text.count('"type":"record"') == LEVELS + 1 and len(text) < 100_000  # each type defined once
    assert c.to_connect("dbl-copy", written)[1] == VALUE  # and read back
    # a value missing a required field fails in one line (the struct's conversion made once, at its first use)
    with pytest.raises(DataError, match=r"^a(\.a)+\.v: null for a required int32"):
        deep: dict = {"v": None}
        for _ in range(LEVELS):
            deep = {"a": deep, "b": None}
        c.from_connect("dbl-copy", schema, deep)


@pytest.mark.slow
def test_writers_that_expand_a_schema_as_a_tree_refuse_one_sharing_named_types_in_one_line(registry_url):
    """JsonConverter's envelope (schemas.enable), the JsonSchemaConverter and Flatten write a struct once per path
    through it: past 200,000 parts the record fails in one line (errors.tolerance decides), not hours later.
    JsonConverter without the schema writes the payload."""
    schema, value = _read(registry_url)
    started = time.monotonic()
    json_converter = make_converter("value.converter", "json", {}, False)
    with pytest.raises(DataError, match="^JsonConverter takes no schema of more than 200000 parts"):
        json_converter.from_connect("out", schema, value)
    plain = make_converter("value.converter", "json", {"schemas.enable": "false"}, False)
    assert json.loads(plain.from_connect("out", schema, value)) == VALUE
    json_schema = make_converter("value.converter", "jsonschema", {"schema.registry.url": registry_url}, False)
    with pytest.raises(DataError, match="^JsonSchemaConverter takes no schema of more than 200000 parts"):
        json_schema.from_connect("out", schema, value)
    flatten = Chain({"transforms": "flat", "transforms.flat.type": "Flatten$Value"})
    with pytest.raises(DataError, match="^Flatten takes no schema of more than 200000 fields flattened"):
        flatten.apply(ConnectRecord("dbl", 0, None, None, schema, value))
    assert time.monotonic() - started < BOUND_S

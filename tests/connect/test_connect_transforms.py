"""Single message transforms configured as Kafka's docs write them, with the results Kafka gives."""

from __future__ import annotations

import pytest

from klog.connect.data import ConnectRecord, primitive, struct
from klog.connect.errors import ConfigError, DataError
from klog.connect.transforms import Chain

K = "org.apache.kafka.connect.transforms."
SCHEMA = struct([{**primitive("int32", False), "field": "id"}, {**primitive("string"), "field": "name"},
                 {**primitive("string"), "field": "ssn"}], name="row")


def rec(value=None, schema=None, key=None, topic="orders", headers=None, ts=1_700_000_000_123) -> ConnectRecord:
    return ConnectRecord(topic, 0, None, key, schema, value, ts, list(headers or []), kafka_offset=42)


def chain(**transforms) -> Chain:
    props = {"transforms": ",".join(transforms)}
    for alias, conf in transforms.items():
        props.update({f"transforms.{alias}.{k}": v for k, v in conf.items()})
    return Chain(props)


def test_insert_field_with_and_without_schema():
    c = chain(ins={"type": K + "InsertField$Value", "topic.field": "t", "offset.field": "o!",
                   "static.field": "src", "static.value": "klog"})
    out = c.apply(rec({"id": 1, "name": "a", "ssn": "x"}, SCHEMA))
    assert out.value == {"id": 1, "name": "a", "ssn": "x", "t": "orders", "o": 42, "src": "klog"}
    assert [f["field"] for f in out.value_schema["fields"]][-3:] == ["t", "o", "src"]
    assert out.value_schema["fields"][-2]["optional"] is False
    assert c.apply(rec({"a": 1})).value == {"a": 1, "t": "orders", "o": 42, "src": "klog"}
    assert c.apply(rec(None)).value is None  # a tombstone passes
    with pytest.raises(DataError, match="Only Map objects supported"):
        c.apply(rec("a string"))


def test_replace_field_include_exclude_renames():
    c = chain(r={"type": K + "ReplaceField$Value", "exclude": "ssn", "renames": "name:full_name"})
    out = c.apply(rec({"id": 1, "name": "a", "ssn": "x"}, SCHEMA))
    assert out.value == {"id": 1, "full_name": "a"}
    assert [f["field"] for f in out.value_schema["fields"]] == ["id", "full_name"]
    c = chain(r={"type": "ReplaceField$Value", "include": "id"})
    assert c.apply(rec({"id": 1, "name": "a"})).value == {"id": 1}
    with pytest.raises(ConfigError, match="transforms.r.renames"):
        chain(r={"type": "ReplaceField$Value", "renames": "nocolon"})


def test_mask_field_uses_the_types_null_or_a_replacement():
    c = chain(m={"type": K + "MaskField$Value", "fields": "ssn,id"})
    assert c.apply(rec({"id": 7, "name": "a", "ssn": "x"}, SCHEMA)).value == {"id": 0, "name": "a", "ssn": ""}
    c = chain(m={"type": K + "MaskField$Value", "fields": "ssn", "replacement": "***"})
    assert c.apply(rec({"ssn": "123"})).value == {"ssn": "***"}


def test_value_to_key_then_extract_field_on_the_key():
    c = chain(v2k={"type": K + "ValueToKey", "fields": "id"}, ex={"type": K + "ExtractField$Key", "field": "id"})
    out = c.apply(rec({"id": 5, "name": "a", "ssn": "x"}, SCHEMA))
    assert out.key == 5 and out.key_schema == {"type": "int32", "optional": False}
    c = chain(ex={"type": K + "ExtractField$Value", "field": "name"})
    assert c.apply(rec({"id": 5, "name": "a"})).value == "a"


def test_cast_fields_and_whole_values():
    c = chain(c={"type": K + "Cast$Value", "spec": "id:string,score:float64"})
    out = c.apply(rec({"id": 5, "score": "2.5"}))
    assert out.value == {"id": "5", "score": 2.5}
    out = chain(c={"type": K + "Cast$Value", "spec": "id:int64"}).apply(rec({"id": 5, "name": "n", "ssn": "s"},
                                                                             SCHEMA))
    assert out.value_schema["fields"][0] == {"type": "int64", "optional": False, "field": "id"}
    assert chain(c={"type": K + "Cast$Key", "spec": "int32"}).apply(rec({}, key="17")).key == 17
    with pytest.raises(ConfigError, match="transforms.c.spec"):
        chain(c={"type": K + "Cast$Value", "spec": "id:decimal"})


def test_timestamp_converter_between_unix_and_string():
    c = chain(ts={"type": K + "TimestampConverter$Value", "field": "at", "target.type": "string",
                  "format": "yyyy-MM-dd'T'HH:mm:ss.SSS"})
    assert c.apply(rec({"at": 1_700_000_000_123})).value == {"at": "2023-11-14T22:13:20.123"}
    back = chain(ts={"type": K + "TimestampConverter$Value", "field": "at", "target.type": "unix",
                     "format": "yyyy-MM-dd'T'HH:mm:ss.SSS"})
    assert back.apply(rec({"at": "2023-11-14T22:13:20.123"})).value == {"at": 1_700_000_000_123}
    with pytest.raises(ConfigError, match="transforms.ts.format"):
        chain(ts={"type": K + "TimestampConverter$Value", "target.type": "string"})


def test_routers():
    c = chain(r={"type": K + "RegexRouter", "regex": "db\\.public\\.(.*)", "replacement": "table-$1"})
    assert c.apply(rec({}, topic="db.public.users")).topic == "table-users"
    assert c.apply(rec({}, topic="other")).topic == "other"
    c = chain(r={"type": K + "TimestampRouter", "topic.format": "${topic}_${timestamp}",
                 "timestamp.format": "yyyy-MM"})
    assert c.apply(rec({})).topic == "orders_2023-11"


def test_filter_with_predicates_and_negate():
    props = {"transforms": "drop", "transforms.drop.type": K + "Filter", "transforms.drop.predicate": "isTomb",
             "predicates": "isTomb", "predicates.isTomb.type": K + "predicates.RecordIsTombstone"}
    c = Chain(props)
    assert c.apply(rec(None)) is None and c.apply(rec({"a": 1})) is not None
    c = Chain({**props, "transforms.drop.negate": "true"})
    assert c.apply(rec(None)) is not None and c.apply(rec({"a": 1})) is None
    c = Chain({"transforms": "f", "transforms.f.type": "Filter", "transforms.f.predicate": "t",
               "predicates": "t", "predicates.t.type": "TopicNameMatches", "predicates.t.pattern": "ord.*"})
    assert c.apply(rec({})) is None and c.apply(rec({}, topic="x")) is not None
    c = Chain({"transforms": "f", "transforms.f.type": "Filter", "transforms.f.predicate": "h",
               "predicates": "h", "predicates.h.type": "HasHeaderKey", "predicates.h.name": "skip"})
    assert c.apply(rec({}, headers=[("skip", b"1")])) is None and c.apply(rec({})) is not None
    with pytest.raises(ConfigError, match="transforms.f.predicate"):
        Chain({"transforms": "f", "transforms.f.type": "Filter", "transforms.f.predicate": "nope"})


def test_header_transforms():
    c = chain(hf={"type": K + "HeaderFrom$Value", "fields": "id,name", "headers": "h_id,h_name", "operation": "move"},
              ins={"type": K + "InsertHeader", "header": "source", "value.literal": "klog"},
              drop={"type": K + "DropHeaders", "headers": "old"})
    out = c.apply(rec({"id": 1, "name": "a", "ssn": "x"}, SCHEMA, headers=[("old", b"1")]))
    assert out.headers == [("h_id", b"1"), ("h_name", b"a"), ("source", b"klog")]
    assert out.value == {"ssn": "x"} and [f["field"] for f in out.value_schema["fields"]] == ["ssn"]


def _envelope(op, before, after):
    row = struct([{**primitive("int32", False), "field": "id"}, {**primitive("string"), "field": "v"}],
                 name="p.public.t.Value", optional=True)
    schema = struct([{**row, "field": "before"}, {**row, "field": "after"},
                     {**struct([{**primitive("string", False), "field": "table"}], name="source"),
                      "field": "source"},
                     {**primitive("string", False), "field": "op"}, {**primitive("int64"), "field": "ts_ms"}],
                    name="p.public.t.Envelope")
    return rec({"before": before, "after": after, "source": {"table": "t"}, "op": op, "ts_ms": 1}, schema)


DBZ = "io.debezium.transforms.ExtractNewRecordState"


def test_extract_new_record_state_modes():
    c = chain(unwrap={"type": DBZ})  # the newer default: a delete becomes one tombstone
    out = c.apply(_envelope("u", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}))
    assert out.value == {"id": 1, "v": "b"} and out.value_schema["name"] == "p.public.t.Value"
    assert c.apply(_envelope("d", {"id": 1, "v": "b"}, None)) is None
    assert c.apply(rec(None)).value is None  # Debezium's tombstone kept
    old = chain(unwrap={"type": DBZ, "drop.tombstones": "false", "delete.handling.mode": "rewrite",
                        "add.fields": "op,table"})
    out = old.apply(_envelope("d", {"id": 1, "v": "b"}, None))
    assert out.value == {"id": 1, "v": "b", "__deleted": "true", "__op": "d", "__table": "t"}
    assert old.apply(rec(None)) is not None
    drop = chain(unwrap={"type": DBZ, "delete.tombstone.handling.mode": "drop"})
    assert drop.apply(rec(None)) is None and drop.apply(_envelope("d", {"id": 1}, None)) is None
    assert c.apply(_envelope("t", None, None)) is None  # a truncate has no row


def test_extract_new_record_state_delete_to_tombstone_leaves_one_tombstone_per_delete():
    """Debezium's delete-to-tombstone turns the delete into a tombstone and drops the one that follows it
    (one tombstone per delete); the older delete.handling.mode=none with drop.tombstones=false keeps both."""
    new = chain(unwrap={"type": DBZ, "delete.tombstone.handling.mode": "delete-to-tombstone"})
    assert [r.value if r else "dropped" for r in (new.apply(_envelope("d", {"id": 1}, None)), new.apply(rec(None)))] \
        == [None, "dropped"]
    old = chain(unwrap={"type": DBZ, "delete.handling.mode": "none", "drop.tombstones": "false"})
    assert [r.value for r in (old.apply(_envelope("d", {"id": 1}, None)), old.apply(rec(None)))] == [None, None]
    # delete.handling.mode=none with drop.tombstones' default (true): the delete as a null value, no tombstone
    old = chain(unwrap={"type": DBZ, "delete.handling.mode": "none"})
    assert [r.value if r else "dropped" for r in (old.apply(_envelope("d", {"id": 1}, None)), old.apply(rec(None)))] \
        == [None, "dropped"]


def test_extract_new_record_state_route_by_field():
    """route.by.field: the row's column is the topic (a delete's before image's), as Debezium routes."""
    c = chain(unwrap={"type": DBZ, "route.by.field": "v", "delete.tombstone.handling.mode": "rewrite"})
    assert c.apply(_envelope("c", None, {"id": 1, "v": "north"})).topic == "north"
    assert c.apply(_envelope("d", {"id": 1, "v": "south"}, None)).topic == "south"


def test_transform_and_predicate_keys_klog_does_not_implement_are_named():
    """A transform's or predicate's key that changes the output and klog ignores (or a misspelt one) is named
    in the connector's one warning, in full."""
    from klog.connect.worker import ignored_warning, validate

    v = validate({"name": "f", "connector.class": "FileStreamSource", "file": "/dev/null", "topic": "t",
                  "transforms": "unwrap,route",
                  "transforms.unwrap.type": DBZ, "transforms.unwrap.drop.fields.header.name": "h",
                  "transforms.unwrap.add.field": "op",
                  "transforms.route.type": "RegexRouter", "transforms.route.regex": "(.*)",
                  "transforms.route.replacement": "$1", "transforms.route.predicate": "p",
                  "predicates": "p", "predicates.p.type": "TopicNameMatches", "predicates.p.pattern": "t",
                  "predicates.p.patern": "x"})
    assert v.ignored == ["predicates.p.patern", "transforms.unwrap.add.field",
                         "transforms.unwrap.drop.fields.header.name"]
    assert "transforms.unwrap.add.field" in ignored_warning(v)
    clean = validate({"name": "f", "connector.class": "FileStreamSource", "file": "/dev/null", "topic": "t",
                      "transforms": "unwrap", "transforms.unwrap.type": DBZ,
                      "transforms.unwrap.add.fields": "op", "transforms.unwrap.route.by.field": "v"})
    assert clean.ignored == []


def test_java_named_groups_in_regex_router_and_topic_name_matches():
    """Java's `(?<name>...)` (Python's re spells it `(?P<name>...)`) and `${name}` as Kafka users write them."""
    c = chain(route={"type": "RegexRouter", "regex": r"dbserver1\.(?<schema>[^.]+)\.(?<table>[^.]+)",
                     "replacement": "${table}-of-${schema}"})
    assert c.apply(rec({"a": 1}, topic="dbserver1.inventory.customers")).topic == "customers-of-inventory"
    f = Chain({"transforms": "drop", "transforms.drop.type": "Filter", "transforms.drop.predicate": "p",
               "predicates": "p", "predicates.p.type": "TopicNameMatches", "predicates.p.pattern": r"(?<x>a)\k<x>"})
    assert f.apply(rec({"a": 1}, topic="aa")) is None and f.apply(rec({"a": 1}, topic="ab")) is not None


def _outbox(op, row):
    cols = [{**primitive("string", False), "field": n} for n in ("id", "aggregatetype", "aggregateid", "type")]
    cols += [{**primitive("string"), "field": "payload"}, {**primitive("int32"), "field": "part"}]
    value = struct(cols, name="db.inventory.outboxevent.Value", optional=True)
    schema = struct([{**value, "field": "before"}, {**value, "field": "after"},
                     {**primitive("string", False), "field": "op"}, {**primitive("int64"), "field": "ts_ms"}],
                    name="db.inventory.outboxevent.Envelope")
    return rec({"before": None if op != "d" else row, "after": row if op != "d" else None, "op": op, "ts_ms": 5},
               schema, topic="db.inventory.outboxevent")


def test_outbox_event_router_placements_and_operations():
    """Envelope placements make the value a struct (payload and the columns) named after the routed value,
    a partition placement sets the partition; updates are skipped (or fail with invalid.behavior=fatal),
    deletes and tombstones dropped; keys that change the output and klog lacks are named."""
    from klog.connect.worker import validate

    row = {"id": "e1", "aggregatetype": "Order", "aggregateid": "7", "type": "Created", "payload": "{}", "part": 2}
    c = chain(outbox={"type": "io.debezium.transforms.outbox.EventRouter",
                      "table.fields.additional.placement": "type:envelope:eventType,part:partition"})
    out = c.apply(_outbox("c", row))
    assert (out.topic, out.kafka_partition, out.key, out.timestamp) == ("outbox.event.Order", 2, "7", 5)
    assert out.value == {"payload": "{}", "eventType": "Created"} and out.headers == [("id", b"e1")]
    assert out.value_schema["name"] == "db.inventory.outboxevent.Order.Envelope"
    assert [f["field"] for f in out.value_schema["fields"]] == ["payload", "eventType"]
    assert c.apply(_outbox("u", row)) is None and c.apply(_outbox("d", row)) is None and c.apply(rec(None)) is None
    # route.tombstone.on.empty.payload: a null or blank payload (Debezium's toString().trim().isEmpty()) a tombstone
    tombstones = chain(outbox={"type": "EventRouter", "route.tombstone.on.empty.payload": "true"})
    for payload in (None, "  "):
        out = tombstones.apply(_outbox("c", {**row, "payload": payload}))
        assert (out.key, out.value, out.value_schema) == ("7", None, None)
    assert tombstones.apply(_outbox("c", row)).value == "{}"
    fatal = chain(outbox={"type": "EventRouter", "table.op.invalid.behavior": "fatal"})
    with pytest.raises(DataError):
        fatal.apply(_outbox("u", row))
    v = validate({"name": "f", "connector.class": "FileStreamSource", "file": "/dev/null", "topic": "t",
                  "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
                  "transforms.outbox.table.expand.json.payload": "true"})
    assert v.ignored == ["transforms.outbox.table.expand.json.payload"]


def test_flatten_with_and_without_schema():
    """Confluent's documented Flatten example (schemaless), and a Debezium envelope flattened with its
    schema: a field under an optional struct (`before`, `after`) is optional, one under a required struct
    (`source`) keeps its own optionality; the struct rebuilt is required, its name kept."""
    c = chain(flatten={"type": K + "Flatten$Value", "delimiter": "."})
    value = {"content": {"id": 42, "name": {"first": "David", "middle": None, "last": "Wong"}}}
    assert c.apply(rec(value)).value == {"content.id": 42, "content.name.first": "David", "content.name.middle": None,
                                         "content.name.last": "Wong"}
    out = chain(flatten={"type": "Flatten$Value", "delimiter": "_"}).apply(_envelope("c", None, {"id": 1, "v": "a"}))
    assert out.value == {"before_id": None, "before_v": None, "after_id": 1, "after_v": "a", "source_table": "t",
                         "op": "c", "ts_ms": 1}
    optional = {f["field"]: f["optional"] for f in out.value_schema["fields"]}
    assert optional == {"before_id": True, "before_v": True, "after_id": True, "after_v": True, "source_table": False,
                        "op": False, "ts_ms": True}
    assert out.value_schema["name"] == "p.public.t.Envelope" and out.value_schema["optional"] is False


def test_to_logical_topic_router_key_field_regex_and_uniqueness_off():
    """key.field.regex/replacement make the key field from the physical topic; with key.enforce.uniqueness
    false the key only has its schema renamed; a tombstone is rerouted with its key."""
    key_schema = struct([{**primitive("int32", False), "field": "id"}], name="db.shard1.t.Key")
    r = _envelope("c", None, {"id": 1, "v": "a"}).new_record(topic="db.shard1.t", key_schema=key_schema,
                                                              key={"id": 1})
    c = chain(route={"type": "io.debezium.transforms.ToLogicalTopicRouter", "topic.regex": r"db\.shard\d+\.(.*)",
                     "topic.replacement": "all.$1", "key.field.regex": r"db\.(shard\d+)\..*",
                     "key.field.replacement": "$1"})
    out = c.apply(r)
    assert (out.topic, out.key, out.key_schema["name"]) == ("all.t", {"id": 1, "__dbz__sourceIdentifier": "shard1"},
                                                           "all.t.Key")
    tombstone = c.apply(r.new_record(value_schema=None, value=None))
    assert tombstone.topic == "all.t" and tombstone.value is None and "__dbz__sourceIdentifier" in tombstone.key
    plain = chain(route={"type": "ToLogicalTopicRouter", "topic.regex": r"db\.shard\d+\.(.*)",
                         "topic.replacement": "$1", "key.enforce.uniqueness": "false"}).apply(r)
    assert plain.key == {"id": 1} and plain.key_schema["name"] == "t.Key" and plain.value_schema["name"] == "t.Envelope"


def test_set_schema_metadata():
    """Confluent's documented example: the value schema named `order-value`, version 2; the data unchanged."""
    schema = struct([{**primitive("int32", False), "field": "id"}], name="old")
    c = chain(meta={"type": K + "SetSchemaMetadata$Value", "schema.name": "order-value", "schema.version": "2"})
    out = c.apply(rec({"id": 1}, schema))
    assert (out.value, out.value_schema["name"], out.value_schema["version"]) == ({"id": 1}, "order-value", 2)
    with pytest.raises(DataError):
        c.apply(rec({"id": 1}))
    assert c.apply(rec(None)).value is None  # a tombstone passes, as newer Kafka's


def test_hoist_field_with_a_schema_makes_a_required_unnamed_struct():
    """Kafka's HoistField: SchemaBuilder.struct().field(field, schema), a required struct without a name."""
    c = chain(hoist={"type": K + "HoistField$Value", "field": "line"})
    out = c.apply(rec("a", primitive("string")))
    assert out.value == {"line": "a"}
    assert out.value_schema == {"type": "struct", "optional": False,
                                "fields": [{"type": "string", "optional": True, "field": "line"}]}

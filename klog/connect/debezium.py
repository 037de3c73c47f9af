"""Debezium's transforms: ExtractNewRecordState (a change event's envelope replaced by its row state),
the outbox EventRouter and ToLogicalTopicRouter / ByLogicalTableRouter (below).

Both generations of its delete keys are accepted: `delete.tombstone.handling.mode` (Debezium 2.5+:
tombstone | drop | rewrite | rewrite-with-tombstone | delete-to-tombstone) and the older
`drop.tombstones` + `delete.handling.mode` (drop | rewrite | none). Without either, the newer default
(tombstone: a delete becomes one tombstone) applies. The older `delete.handling.mode=none` with
`drop.tombstones=false` is the internal mode delete-and-tombstone: the delete as a null value, then
Debezium's tombstone (delete-to-tombstone drops that one, as Debezium's DefaultDeleteHandlingStrategy).
"""

from __future__ import annotations

from typing import ClassVar

from klog.connect.config import ConfigDef, java_regex, regex_check
from klog.connect.data import ConnectRecord, fields_by_name, primitive, struct
from klog.connect.errors import ConfigError, DataError
from klog.connect.transforms import Transform, header_bytes, java_replacement, rebuilt_struct

MODES = ("tombstone", "drop", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone")


class ExtractNewRecordState(Transform):
    config_def = (ConfigDef().define("delete.tombstone.handling.mode", default=None, choices=MODES)
                  .define("drop.tombstones", "boolean", None).define("delete.handling.mode", default=None,
                                                                    choices=("drop", "rewrite", "none"))
                  .define("add.fields", "list", []).define("add.headers", "list", [])
                  .define("add.fields.prefix", default="__").define("add.headers.prefix", default="__")
                  .define("route.by.field", default="")
                  .define("replace.null.with.default", "boolean", True))
    # they drop the fields a header names (Debezium's schema-change helpers): named in the warning
    unimplemented = frozenset({"drop.fields.header.name", "drop.fields.from.key", "drop.fields.keep.schema.compatible"})

    def configure(self) -> None:
        c = self.config
        if c["delete.tombstone.handling.mode"] is not None:
            mode = c["delete.tombstone.handling.mode"]
        elif c["drop.tombstones"] is not None or c["delete.handling.mode"] is not None:
            old = c["delete.handling.mode"] or "drop"
            keep_tombstones = c["drop.tombstones"] is False
            mode = {("drop", False): "drop", ("drop", True): "tombstone",  # the delete dropped, its tombstone kept
                    ("rewrite", False): "rewrite", ("rewrite", True): "rewrite-with-tombstone",
                    ("none", False): "delete-to-tombstone", ("none", True): "delete-and-tombstone"}[
                (old, keep_tombstones)]
        else:
            mode = "tombstone"
        self.mode = mode
        self._row_schemas: dict[tuple[int, str], tuple[dict | None, dict | None]] = {}

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        out = self._extract(record)
        field = self.config["route.by.field"]
        if not field or out is None or out is record or not isinstance(record.value, dict):
            return out
        # the row's column names the topic (the before image's for a delete), as Debezium's
        row = record.value.get("before") if record.value.get("op") == "d" else record.value.get("after")
        return out.new_record(topic=str((row or {}).get(field)))

    def _extract(self, record: ConnectRecord) -> ConnectRecord | None:
        value = record.value
        if value is None:  # Debezium's own tombstone after a delete
            return record if self.mode in ("tombstone", "rewrite-with-tombstone", "delete-and-tombstone") else None
        if not isinstance(value, dict) or "op" not in value or "after" not in value:
            return record  # not a change event (a heartbeat, a schema change): untouched
        op = value.get("op")
        if op == "t" or op == "m":
            return None  # truncates and messages have no row state
        if op == "d":
            if self.mode in ("drop", "tombstone"):
                return None  # tombstone: Debezium's following tombstone carries the delete
            if self.mode in ("delete-to-tombstone", "delete-and-tombstone"):
                return record.new_record(value_schema=None, value=None)
            row, side = value.get("before"), "before"
        else:
            row, side = value.get("after"), "after"
        if not self.config["add.fields"] and not self.mode.startswith("rewrite"):
            # the common case: the row as it is, with its schema taken once per envelope schema (one
            # object for every record of a table), so the sink sees one schema object per layout
            return record.new_record(value_schema=self._row_schema(record.value_schema, side),
                                     value=row if type(row) is dict else dict(row or {}),
                                     headers=self._headers(value, record))
        row_schema = fields_by_name(record.value_schema).get(side)
        schema = None if row_schema is None else {k: v for k, v in row_schema.items() if k != "field"}
        out = dict(row or {})
        extra_fields = []
        if self.mode.startswith("rewrite"):
            out[self.config["add.fields.prefix"] + "deleted"] = "true" if op == "d" else "false"
            extra_fields.append({**primitive("string"), "field": self.config["add.fields.prefix"] + "deleted"})
        for name in self.config["add.fields"]:
            v, s = self._meta(value, record, name)
            if s is None and record.value_schema is not None:
                continue  # Debezium adds only the fields the envelope has
            field = self._meta_name(self.config["add.fields.prefix"], name)
            out[field] = v
            extra_fields.append({**(s or primitive("string")), "field": field})  # with the envelope's schema
        if schema is not None:
            schema = rebuilt_struct(schema, [*schema.get("fields", []), *extra_fields])
        return record.new_record(value_schema=schema, value=out, headers=self._headers(value, record))

    def _headers(self, value: dict, record: ConnectRecord) -> list:
        if not self.config["add.headers"]:
            return list(record.headers)
        headers = list(record.headers)
        for name in self.config["add.headers"]:
            headers.append((self._meta_name(self.config["add.headers.prefix"], name),
                            header_bytes(self._meta(value, record, name)[0])))
        return headers

    def _row_schema(self, envelope: dict | None, side: str) -> dict | None:
        """The schema of the envelope's `before` or `after` as a value schema, one object per envelope
        schema object (kept with it, so its id is never reused for another)."""
        hit = self._row_schemas.get((id(envelope), side))
        if hit is not None and hit[0] is envelope:
            return hit[1]
        row_schema = fields_by_name(envelope).get(side)
        schema = None if row_schema is None else {k: v for k, v in row_schema.items() if k != "field"}
        if len(self._row_schemas) >= 1024:
            self._row_schemas.clear()
        self._row_schemas[(id(envelope), side)] = (envelope, schema)
        return schema

    @staticmethod
    def _meta_name(prefix: str, name: str) -> str:
        return prefix + name.replace(".", "_")

    @staticmethod
    def _meta(value: dict, record: ConnectRecord, name: str) -> tuple[object, dict | None]:
        """`op`, `ts_ms`, `source.<field>`, ... of the envelope, with the schema it has there (without
        its "field"; None where the envelope has no such field)."""
        if name.startswith("source.") or (name not in value and name in (value.get("source") or {})):
            inner = name.removeprefix("source.")
            schema = fields_by_name(fields_by_name(record.value_schema).get("source")).get(inner)
            found = (value.get("source") or {}).get(inner)
        else:
            schema, found = fields_by_name(record.value_schema).get(name), value.get(name)
        return found, None if schema is None else {k: v for k, v in schema.items() if k != "field"}


class EventRouter(Transform):
    """Debezium's outbox event router (io.debezium.transforms.outbox.EventRouter): each row inserted into
    an outbox table becomes an event on the topic its `aggregatetype` names (through route.topic.regex and
    route.topic.replacement), keyed by `aggregateid`, its value the `payload` column, its `id` a header;
    deletes and tombstones are dropped, updates skipped (or fatal)."""

    config_def = (ConfigDef().define("table.field.event.id", default="id")
                  .define("table.field.event.key", default="aggregateid")
                  .define("table.field.event.type", default="type")
                  .define("table.field.event.timestamp", default="")
                  .define("table.field.event.payload", default="payload")
                  .define("table.fields.additional.placement", "list", [])
                  .define("table.field.additional.missing", default="error", choices=("error", "ignore"))
                  .define("route.by.field", default="aggregatetype")
                  .define("route.topic.regex", default="(?<routedByValue>.*)", check=regex_check)
                  .define("route.topic.replacement", default="outbox.event.${routedByValue}")
                  .define("route.tombstone.on.empty.payload", "boolean", False)
                  .define("table.op.invalid.behavior", default="warn", choices=("warn", "error", "fatal")))
    # each changes what the events hold: named in the warning rather than ignored
    unimplemented = frozenset({"table.expand.json.payload", "table.json.payload.null.behavior",
                               "table.json.payload.empty.array.behavior", "table.field.event.schema.version"})

    def configure(self) -> None:
        self.placements: list[tuple[str, str, str]] = []  # (column, header|envelope|partition, alias)
        for spec in self.config["table.fields.additional.placement"]:
            parts = [p.strip() for p in spec.split(":")]
            if len(parts) not in (2, 3) or parts[1].lower() not in ("header", "envelope", "partition"):
                raise ConfigError(self.prefix + "table.fields.additional.placement", spec,
                                  "each entry is column:header|envelope|partition[:alias]")
            self.placements.append((parts[0], parts[1].lower(), parts[2] if len(parts) == 3 else parts[0]))
        self.topic_regex = java_regex(self.config["route.topic.regex"])
        self.replacement = java_replacement(self.config["route.topic.replacement"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = record.value
        if value is None:
            return None  # tombstones are ignored
        if not isinstance(value, dict) or "op" not in value or "after" not in value:
            return record  # a heartbeat, a schema change: untouched
        if value["op"] == "d":
            return None
        if value["op"] == "u":
            if self.config["table.op.invalid.behavior"] == "fatal":
                raise DataError(f"Unexpected update message received {record.key}, fail.")
            return None
        c = self.config
        event, schemas = value.get("after") or {}, fields_by_name(fields_by_name(record.value_schema).get("after"))
        for column in (c["table.field.event.id"], c["table.field.event.payload"]):
            if column not in event:
                raise DataError(f"Unable to find field {column} in event")
        payload = event[c["table.field.event.payload"]]
        payload_schema = _unnamed(schemas.get(c["table.field.event.payload"]))
        headers = [*record.headers, ("id", header_bytes(event[c["table.field.event.id"]]))]
        envelope, envelope_fields = {"payload": payload}, [{**(payload_schema or {}), "field": "payload"}]
        partition = self._place(event, schemas, headers, envelope, envelope_fields)
        routed = str(event.get(c["route.by.field"]))
        if (payload is None or not str(payload).strip()) and c["route.tombstone.on.empty.payload"]:
            out_schema, out_value = None, None
        elif len(envelope) == 1:  # only headers placed: the payload is the value
            out_schema, out_value = payload_schema, payload
        else:
            out_schema = struct(envelope_fields, name=_routed_schema_name(record.value_schema, routed))
            out_value = envelope
        stamp_column = c["table.field.event.timestamp"]
        timestamp = event.get(stamp_column) if stamp_column else None
        key_column = c["table.field.event.key"]
        m = self.topic_regex.fullmatch(routed)
        return record.new_record(topic=m.expand(self.replacement) if m else routed, kafka_partition=partition,
                                 key_schema=_unnamed(schemas.get(key_column)) if record.value_schema else None,
                                 key=event.get(key_column) if key_column else None,
                                 value_schema=out_schema if record.value_schema else None, value=out_value,
                                 timestamp=timestamp if timestamp is not None else value.get("ts_ms"), headers=headers)


    def _place(self, event: dict, schemas: dict, headers: list, envelope: dict, envelope_fields: list) -> int | None:
        """table.fields.additional.placement: columns into headers or the envelope (both extended in
        place); the partition a `partition` placement names."""
        partition = None
        for column, place, alias in self.placements:
            if column not in event:
                if self.config["table.field.additional.missing"] == "ignore":
                    continue
                raise DataError(f"Unable to find field {column} in event")
            if place == "header":
                headers.append((alias, header_bytes(event[column])))
            elif place == "envelope":
                envelope[alias] = event[column]
                envelope_fields.append({**(_unnamed(schemas.get(column)) or {}), "field": alias})
            else:
                partition = event[column]
        return partition


def _unnamed(field: dict | None) -> dict | None:
    """A struct field's schema without its "field" entry."""
    return None if field is None else {k: v for k, v in field.items() if k != "field"}


def _routed_schema_name(envelope: dict | None, routed: str) -> str:
    """Debezium's name for an outbox event's value struct: the routed value before the envelope name's
    last part (`dbserver1.inventory.outboxevent.Order.Envelope`)."""
    name = (envelope or {}).get("name")
    if not name:
        return routed
    head, dot, last = name.rpartition(".")
    return f"{head}.{routed}.{last}" if dot else f"{routed}.{name}"


class ToLogicalTopicRouter(Transform):
    """Debezium's ToLogicalTopicRouter (and its older name ByLogicalTableRouter): the records of several
    physical tables (shards) onto one logical topic, `topic.regex` matched against the topic and
    replaced by `topic.replacement`; the key gains `key.field.name` (the physical topic, or what
    `key.field.regex` / `key.field.replacement` make of it) so rows of different shards stay apart;
    the key, envelope and row schemas are renamed after the new topic."""

    key_field_default: ClassVar[str] = "__dbz__sourceIdentifier"
    config_def = (ConfigDef().define("topic.regex", check=regex_check).define("topic.replacement")
                  .define("key.enforce.uniqueness", "boolean", True)
                  .define("key.field.name", default=None)
                  .define("key.field.regex", default=None, check=lambda v: regex_check(v) if v else None)
                  .define("key.field.replacement", default=None)
                  .define("logical.destination.cache.size", "int", 16)
                  .define("logical.table.cache.size", "int", 16))
    unimplemented = frozenset({"schema.name.adjustment.mode"})

    def configure(self) -> None:
        c = self.config
        self.topic_regex = java_regex(c["topic.regex"])
        self.replacement = java_replacement(c["topic.replacement"])
        self.key_field = c["key.field.name"] or self.key_field_default
        self.key_regex = java_regex(c["key.field.regex"]) if c["key.field.regex"] else None
        if self.key_regex is not None and not c["key.field.replacement"]:
            raise ConfigError(self.prefix + "key.field.replacement", None, "key.field.regex needs it")
        self.key_replacement = java_replacement(c["key.field.replacement"] or "")
        self._schemas: dict[tuple[int, str], tuple[dict, dict]] = {}

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        m = self.topic_regex.fullmatch(record.topic)
        topic = m.expand(self.replacement) if m else ""
        if not topic:
            return record
        key_schema, key = record.key_schema, record.key
        if isinstance(key, dict):
            key_schema, key = self._key(record.topic, topic, key_schema, key)
        value = record.value
        if not isinstance(value, dict) or "op" not in value or record.value_schema is None:
            return record.new_record(topic=topic, key_schema=key_schema, key=key)
        return record.new_record(topic=topic, key_schema=key_schema, key=key,
                                 value_schema=self._envelope(record.value_schema, topic))

    def _key(self, old_topic: str, topic: str, schema: dict | None, key: dict) -> tuple[dict | None, dict]:
        fields = list((schema or {}).get("fields", []))
        if not self.config["key.enforce.uniqueness"]:
            return (None if schema is None else {**schema, "name": f"{topic}.Key"}), key
        identifier = old_topic
        if self.key_regex is not None and (km := self.key_regex.fullmatch(old_topic)):
            identifier = km.expand(self.key_replacement)
        new_schema = None if schema is None else {**schema, "name": f"{topic}.Key", "fields": [
            *fields, {**primitive("string", False), "field": self.key_field}]}
        return new_schema, {**key, self.key_field: identifier}

    def _envelope(self, envelope: dict, topic: str) -> dict:
        """The envelope schema renamed after the logical topic (its before/after rows too), built once per
        envelope schema object and topic."""
        hit = self._schemas.get((id(envelope), topic))
        if hit is not None and hit[0] is envelope:
            return hit[1]
        fields = envelope.get("fields", [])
        row = next((f for f in fields if f["field"] == "before"), None) or \
            next((f for f in fields if f["field"] == "after"), None)
        renamed_row = None if row is None else {**_unnamed(row), "name": f"{topic}.Value"}
        new = {**envelope, "name": f"{topic}.Envelope", "fields": [
            {**renamed_row, "field": f["field"]} if renamed_row is not None and f["field"] in ("before", "after")
            else f for f in fields]}
        if len(self._schemas) >= 1024:
            self._schemas.clear()
        self._schemas[(id(envelope), topic)] = (envelope, new)
        return new


class ByLogicalTableRouter(ToLogicalTopicRouter):
    """The deprecated name, whose key field defaults to __dbz__physicalTableIdentifier."""

    key_field_default = "__dbz__physicalTableIdentifier"

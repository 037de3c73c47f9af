"""Debezium's ExtractNewRecordState: a change event's envelope replaced by its row state.

Both generations of its delete keys are accepted: `delete.tombstone.handling.mode` (Debezium 2.5+:
tombstone | drop | rewrite | rewrite-with-tombstone | delete-to-tombstone) and the older
`drop.tombstones` + `delete.handling.mode` (drop | rewrite | none). Without either, the newer default
(tombstone: a delete becomes one tombstone) applies. The older `delete.handling.mode=none` with
`drop.tombstones=false` is the internal mode delete-and-tombstone: the delete as a null value, then
Debezium's tombstone (delete-to-tombstone drops that one, as Debezium's DefaultDeleteHandlingStrategy).
"""

from __future__ import annotations

from klog.connect.config import ConfigDef
from klog.connect.data import ConnectRecord, fields_by_name, primitive
from klog.connect.transforms import Transform, rebuilt_struct

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
        from klog.connect.transforms import header_bytes

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

"""The lossless JSON-lines envelope of a record (what `consume --json` writes and `produce
--input json` reads), both directions, for the CLI and any Python caller.

{"topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"}:
UTF-8 key, value and header values are JSON strings; other bytes are {"base64": "..."}; a null
stays null.
"""

from __future__ import annotations

import base64
import json
import json.encoder
from typing import Any, NamedTuple

from klog.client.records import NO_TIMESTAMP, TIMESTAMP_MAX, Record
from klog.store.format import TIMESTAMP_TYPE_NAMES

# json.dumps with any option builds a new JSONEncoder per call: build it once
_ENCODE_COMPACT = json.JSONEncoder(separators=(",", ":")).encode
# a str as a JSON string, non-ASCII kept (ensure_ascii=False's escaping; C in CPython)
_string = json.encoder.encode_basestring


def bytes_to_json(data: bytes | None) -> Any:
    """UTF-8 text stays a string; anything else becomes {"base64": "..."}; None stays null."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def json_to_bytes(value: Any, what: str) -> bytes | None:
    """bytes_to_json's inverse; any other JSON value is stored as its compact JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return value.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:  # a \\uD800-style escape of half a character: no bytes stand for it
            raise ValueError(f"{what} has a lone surrogate escape (\\uD800-\\uDFFF), which is not text") from None
    if isinstance(value, dict) and set(value) == {"base64"}:
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (ValueError, TypeError):
            raise ValueError(f"{what} has invalid base64") from None
    return _ENCODE_COMPACT(value).encode()


def record_to_json(r: Record, key_json: str | None = None, value_json: str | None = None, more: str = "") -> str:
    """One record as its JSON envelope (one line, no newline): the text json.dumps(...,
    ensure_ascii=False) gives for the envelope's dict, written out directly (json.dumps built a
    C encoder per call, which was most of `consume --json`'s time). `key_json` / `value_json`: JSON
    text standing for the key / value (a decoded one, klog.client.deserializers); `more`: members
    added at the end (', "name": value')."""
    headers = r.headers
    key = _bytes_text(r.key) if key_json is None else key_json
    value = _bytes_text(r.value) if value_json is None else value_json
    return (f'{{"topic": {_string(r.topic)}, "partition": {r.partition}, "offset": {r.offset}, '
            f'"timestamp": {r.timestamp}, "timestamp_type": "{TIMESTAMP_TYPE_NAMES[r.timestamp_type]}", '
            f'"key": {key}, "value": {value}, "headers": '
            + (f'[{", ".join(f"[{_name(k)}, {_bytes_text(v)}]" for k, v in headers)}]' if headers else '[]')
            + more + "}")


def _name(name: str) -> str:
    """A header name as a JSON string. One that is not UTF-8 (the record decoder gives its bytes as
    surrogateescape's \\udcXX, as a Kafka client may write them) gets \\u escapes, which JSON
    text can hold: the line stays UTF-8 and produce --input json gives back the same bytes."""
    if name.isascii():
        return _string(name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return json.encoder.encode_basestring_ascii(name)
    return _string(name)


def _bytes_text(data: bytes | None) -> str:
    """bytes_to_json(data) as JSON text."""
    if data is None:
        return "null"
    try:
        return _string(data.decode("utf-8"))
    except UnicodeDecodeError:
        return f'{{"base64": "{base64.b64encode(data).decode("ascii")}"}}'


def json_lines(topic: str, partition: int, timestamp_type: int, records: list, more: str = "") -> bytes:
    """record_json_line of each (offset, timestamp, key, value, headers) tuple of one partition's
    run, joined: the same bytes, without a Record per record (`consume --json` of one partition).
    `more`: JSON members added to every line (', "name": value', ...)."""
    head = f'{{"topic": {_string(topic)}, "partition": {partition}, "offset": '
    ts_name = TIMESTAMP_TYPE_NAMES[timestamp_type]
    bt = _bytes_text
    end = more + "}\n"
    return "".join([
        f'{head}{offset}, "timestamp": {ts}, "timestamp_type": "{ts_name}", "key": {bt(key)}, '
        f'"value": {bt(value)}, "headers": '
        + (f'[{", ".join(f"[{_name(k)}, {bt(v)}]" for k, v in headers)}]{end}' if headers else '[]' + end)
        for offset, ts, key, value, headers in records]).encode()


def txn_json_lines(topic: str, partition: int, header, records: list) -> bytes:  # noqa: ANN001 - BatchHeader
    """json_lines with the batch's producer fields, named as `klog dump --json` names them
    (producer_id, producer_epoch, transactional, control); a transaction marker's line has
    end_txn_marker and coordinator_epoch in place of key, value and headers."""
    from klog.store.txn import control_marker, is_transactional

    more = (f', "producer_id": {header.producer_id}, "producer_epoch": {header.producer_epoch}, '
            f'"transactional": {"true" if is_transactional(header.attributes) else "false"}, ')
    if not header.is_control:
        return json_lines(topic, partition, header.timestamp_type, records, more + '"control": false')
    ts_name = TIMESTAMP_TYPE_NAMES[header.timestamp_type]
    lines = []
    for offset, ts, key, value, _ in records:
        marker, coordinator_epoch = control_marker(key, value)
        lines.append(f'{{"topic": {_string(topic)}, "partition": {partition}, "offset": {offset}, "timestamp": {ts}, '
                     f'"timestamp_type": "{ts_name}"{more}"control": true, "end_txn_marker": "{marker}", '
                     f'"coordinator_epoch": {coordinator_epoch}}}\n')
    return "".join(lines).encode()


def record_json_line(r: Record) -> bytes:
    """record_to_json as a UTF-8 line."""
    return (record_to_json(r) + "\n").encode()


# A record read from its JSON envelope: what a producer needs (offset and topic are ignored);
# timestamp None: now, partition None: the partitioner's choice. Types as values, not class
# annotations, which NamedTuple would compile (see codec.BatchHeader).
EnvelopeIn = NamedTuple("EnvelopeIn", [("key", bytes | None), ("value", bytes | None),  # noqa: UP014
                                       ("headers", list[tuple[str, bytes | None]]), ("timestamp", int | None),
                                       ("partition", int | None)])


# the fields a line may have: klog's envelope (with consume -s --json's schema ids and --txn-fields' producer
# fields), and kcat -J's, whose payload and ts are klog's value and timestamp; the others are read, not written
_KLOG_FIELDS = frozenset({"topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
                          "key_schema_id", "value_schema_id", "producer_id", "producer_epoch", "transactional",
                          "control", "end_txn_marker", "coordinator_epoch"})
_KCAT_FIELDS = {"payload": "value", "ts": "timestamp", "tstype": None, "broker": None}
_FIELDS = _KLOG_FIELDS | _KCAT_FIELDS.keys()
_KCAT_RENAMED = [(kcat, ours) for kcat, ours in _KCAT_FIELDS.items() if ours is not None]


def parse_envelope(line: bytes | str, embedded: tuple[str, ...] = ()) -> EnvelopeIn | None:
    """One JSON envelope line; ValueError saying what is wrong with it. `embedded`: the
    fields ("key", "value") whose JSON is the record's as a document (a produce -s encoder's input), given
    as its JSON text: a string stays quoted, and null is the document null when the line names the
    schema it was read with (consume -s --json's `value_schema_id`), else no key / a tombstone.

    kcat -J's envelope is read too: `payload` is the value, `ts` the timestamp, `headers` a flat list
    [name, value, name, value, ...], and a value that is not UTF-8 (kcat writes its bytes as they are)
    comes back byte for byte. A line with neither value nor payload, or with a field neither envelope
    has, is refused naming it. A transaction marker's line (consume --json --txn-fields' "control": true)
    is no record: None, to skip (a Kafka consumer never sees markers; the producer writes its own)."""
    if isinstance(line, bytes):  # kcat -J writes binary keys and values as raw bytes: keep them
        # (a file's UTF-8 byte order mark is no part of its first line, as json.loads(bytes) took it)
        line = line.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")
    try:
        doc = json.loads(line)  # no options: json's shared decoder
    except ValueError as e:  # json's message, without its "line 1" (the input's line is named by the caller)
        raise ValueError(f"not JSON ({e.msg} at column {e.colno})" if isinstance(e, json.JSONDecodeError)
                         else "not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if not doc.keys() <= _FIELDS:
        if doc.get("type") in ("segment", "batch", "record"):
            raise ValueError(f"a `klog dump --json` {doc['type']} line, not a record's envelope: copy records "
                             "with `klog consume --json`")
        unknown = ", ".join(sorted(doc.keys() - _FIELDS))
        raise ValueError(f"unknown field(s) {unknown}: the envelope has key, value (or kcat's payload), headers, "
                         "timestamp (or kcat's ts) and partition")
    if doc.get("control") is True:
        return None
    for kcat, ours in _KCAT_RENAMED if ("payload" in doc or "ts" in doc) else ():
        if kcat in doc:
            if ours in doc:
                raise ValueError(f"both {ours} and {kcat} (kcat's name for {ours}): give one")
            doc[ours] = doc.pop(kcat)
    if "value" not in doc:
        raise ValueError('no "value" (or kcat\'s "payload"): a tombstone is "value": null')
    key, value = (_embedded(doc, f) if f in embedded else json_to_bytes(doc.get(f), f) for f in ("key", "value"))
    return EnvelopeIn(key, value, _headers(doc.get("headers")), _timestamp(doc.get("timestamp")),
                      _partition(doc.get("partition")))


def _headers(raw: object) -> list[tuple[str, bytes | None]]:
    """klog's [[name, value], ...], an object {name: value}, or kcat's flat [name, value, name, value, ...]."""
    if not raw:
        return []
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list) and all(isinstance(h, list) for h in raw):
        if any(len(h) != 2 for h in raw):
            raise ValueError("each header is [name, value]")
        pairs = raw
    elif isinstance(raw, list) and not any(isinstance(h, list) for h in raw):  # kcat -J's flat list
        if len(raw) % 2:
            raise ValueError("headers as a flat list (kcat's) take name, value pairs: the last name has no value")
        pairs = list(zip(raw[::2], raw[1::2], strict=True))
    else:
        raise ValueError("headers is [[name, value], ...], {name: value, ...} or kcat's [name, value, ...]")
    out = []
    for name, value in pairs:
        if not isinstance(name, str):
            raise ValueError(f"header name {json.dumps(name)} is not a string")
        out.append((name, json_to_bytes(value, f"header {name}")))
    return out


def _embedded(doc: dict, field: str) -> bytes | None:
    value = doc.get(field)
    if value is None and f"{field}_schema_id" not in doc:
        return None
    return _ENCODE_COMPACT(value).encode()


def _timestamp(ts: object) -> int | None:
    """Epoch milliseconds 0..2^63-1, or -1 (Kafka's "no timestamp") as it was read; null: now."""
    if ts is None:
        return None
    if not isinstance(ts, int) or isinstance(ts, bool) or not (ts == NO_TIMESTAMP or 0 <= ts <= TIMESTAMP_MAX):
        raise ValueError(f"timestamp {json.dumps(ts)} is not epoch milliseconds (an integer 0..{TIMESTAMP_MAX}, "
                         "-1 or null)")
    return ts


def _partition(p: object) -> int | None:
    if p is None:
        return None
    if not isinstance(p, int) or isinstance(p, bool) or p < 0:
        raise ValueError(f"partition {json.dumps(p)} is not a partition number (an integer 0 or more, or null)")
    return p

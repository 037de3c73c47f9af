"""Record keys and values decoded for reading, as kcat's `-s` does: Avro and JSON Schema in Confluent's
wire format (magic byte 0, a 4-byte schema id, then the encoding), their schemas fetched from a Schema
Registry, or a kcat pack-format (`>iq s`) for fixed binary layouts. What `klog consume -s ... -r URL`
prints; a Python caller wraps any Record the same way:

    decoder = RecordDecoder({"value": "avro"}, "http://127.0.0.1:8081")
    for r in store.consumer("shop.public.orders"):
        print(decoder.decode(r).value.decode())   # Avro's JSON encoding, one line

Avro values become Avro's JSON encoding (a union member as {"type": value} named by the branch it was
written with, bytes as \\u00XX code points, NaN and Infinity as strings), as Avro's Java JsonEncoder and
so Confluent's kafka-avro-console-consumer print them (klog.client.avro_json); logical types stay their
underlying number or bytes, as there. A field that cannot be decoded raises DecodeError naming
the record; nothing is guessed.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from typing import Any

from klog.client.protobuf_codec import ProtobufCodecError
from klog.client.records import Record
from klog.errors import KlogError, UsageError

FIELDS = ("key", "value")
REGISTRY_FORMATS = ("avro", "json", "protobuf")
PACK_TOKENS = " <>bBhHiIqQcs$"
_PACK_INTS = {"b": (1, True), "B": (1, False), "h": (2, True), "H": (2, False), "i": (4, True), "I": (4, False),
              "q": (8, True), "Q": (8, False)}
MAGIC = 0
SCHEMAS_KEPT = 1000  # schema ids whose readers are kept (a topic holds a few; a hostile one cannot grow this)
REFERENCES_MAX = 100  # referenced schemas followed for one schema (Avro named types across subjects)
# entries of the reference lists walked for one schema (each may name an already fetched version again): a
# hostile registry's 100 lists of 100,000 entries each held every record's read ~3 s
REFERENCE_ENTRIES_MAX = 10_000
REGISTRY_TIMEOUT_S = 10.0  # for each answer of the registry, in all
REFERENCES_TIMEOUT_S = 10.0  # for all the references of one schema


class DecodeError(KlogError):
    """A record's key or value is not what -s said it is."""


class DecodedRecord(Record):
    """A Record whose key and/or value were decoded: `*_json` when the bytes are JSON text (Avro,
    JSON Schema), `*_schema_id` the registry id they were written with."""

    __slots__ = ("key_json", "value_json", "key_schema_id", "value_schema_id")
    _fields = Record._fields

    def __init__(self, r: Record, key: bytes | None, value: bytes | None) -> None:
        super().__init__(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value, r.headers)
        self.key_json = self.value_json = False
        self.key_schema_id = self.value_schema_id = None


def parse_serdes(specs: list[str], check: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """kcat's -s arguments ([key=|value=]FORMAT, later ones win; no field: both) as {field: format};
    `check(format, spec)` raises UsageError for a format the command does not take (by default a
    registry format or a kcat pack-format)."""
    out: dict[str, str] = {}
    for spec in specs:
        field, sep, fmt = spec.partition("=")
        fields: tuple[str, ...] = (field,) if sep and field in FIELDS else FIELDS
        if not sep or field not in FIELDS:
            fmt = spec
        (check or _check_format)(fmt, spec)
        for f in fields:
            out[f] = fmt
    return out


def _check_format(fmt: str, spec: str) -> None:
    if fmt not in REGISTRY_FORMATS:
        _check_pack(fmt, spec)


def _check_pack(fmt: str, spec: str) -> None:
    if not fmt:
        raise UsageError(f"-s '{spec}': give a format (avro, json or a pack-format)")
    bad = sorted({c for c in fmt if c not in PACK_TOKENS})
    if bad:
        raise UsageError(f"-s '{spec}': {', '.join(repr(c) for c in bad)} is not avro, json, protobuf or a "
                         f"pack-format token ({PACK_TOKENS.strip()} and space)")


def unpack(fmt: str, data: bytes, what: str) -> bytes:
    """kcat's unpack: each token's value printed in turn (big-endian unless '<'); trailing bytes are
    ignored unless the format ends in '$'. ValueError naming what ran short."""
    out: list[str] = []
    at, big = 0, True
    for token in fmt:
        if token == " ":
            out.append(" ")
        elif token in "<>":
            big = token == ">"
        elif token in _PACK_INTS:
            size, signed = _PACK_INTS[token]
            if len(data) - at < size:
                raise ValueError(f"{what} truncated, expected {size} bytes to unpack {token} but only "
                                 f"{len(data) - at} bytes remaining")
            out.append(str(int.from_bytes(data[at:at + size], "big" if big else "little", signed=signed)))
            at += size
        elif token == "c":
            if at >= len(data):
                raise ValueError(f"{what} truncated, expected 1 byte to unpack c but none remaining")
            out.append(chr(data[at]))
            at += 1
        elif token == "s":
            out.append(data[at:].decode("utf-8", "backslashreplace"))
            at = len(data)
        elif token == "$" and at < len(data):
            raise ValueError(f"expected {what} end-of-input, but {len(data) - at} bytes remaining")
    return "".join(out).encode()


class RecordDecoder:
    """Decodes the fields `serdes` names ({"key"|"value": "avro"|"json"|pack-format}); the registry
    (`registry_url`: one URL or a comma-separated list; user:password@ in a URL is sent as basic auth)
    is asked once per schema id."""

    def __init__(self, serdes: dict[str, str], registry_url: str | None = None) -> None:
        self.serdes = serdes
        self._readers: dict[int, Callable[[bytes], bytes]] = {}
        self._last: tuple[Record | None, Any] = (None, None)
        wanted = {f for f in serdes.values() if f in REGISTRY_FORMATS}
        self.registry = open_registry(wanted, registry_url) if wanted else None

    def decode(self, r: Record) -> DecodedRecord:
        if isinstance(r, DecodedRecord):
            return r
        if r is self._last[0]:  # (a --grep filter decodes a record, then its output does)
            return self._last[1]
        out = DecodedRecord(r, r.key, r.value)
        for field, fmt in self.serdes.items():
            data = r.key if field == "key" else r.value
            if data is None:  # a null key or a tombstone stays null, as in kcat
                continue
            try:
                if fmt in REGISTRY_FORMATS:
                    schema_id, text = self._framed(fmt, data)
                    setattr(out, f"{field}_schema_id", schema_id)
                    setattr(out, f"{field}_json", True)
                else:
                    text = unpack(fmt, data, field)
            except (ValueError, DecodeError, ProtobufCodecError) as e:
                raise DecodeError(f"cannot decode the {field} of {r.topic}-{r.partition} offset {r.offset} as "
                                  f"{fmt}: {e} (read past it with -p {r.partition} -o {r.offset + 1}, or without "
                                  f"-s {field}=...)") from None
            setattr(out, field, text)
        self._last = (r, out)
        return out

    def filtering(self, record_filter: Callable[[Record], bool] | None) -> Callable[[Record], bool] | None:
        """`record_filter` (--grep ...) tested on the decoded record."""
        if record_filter is None:
            return None
        return lambda r: record_filter(self.decode(r))

    def line(self, inner: Callable[[Record], bytes]) -> Callable[[Record], bytes]:
        """`inner` rendering the decoded record."""
        return lambda r: inner(self.decode(r))

    def json_line(self, r: Record) -> bytes:
        """The JSON envelope (consume --json) of the decoded record: decoded JSON embedded as JSON, not
        as a string, and its schema ids as key_schema_id / value_schema_id, as kcat's -J writes them."""
        from klog.client.envelope import record_to_json

        d = self.decode(r)
        more = "".join(f', "{f}_schema_id": {getattr(d, f + "_schema_id")}' for f in FIELDS
                       if getattr(d, f + "_schema_id") is not None)
        return (record_to_json(d, d.key.decode() if d.key_json else None,
                               d.value.decode() if d.value_json else None, more) + "\n").encode()

    def _framed(self, fmt: str, data: bytes) -> tuple[int, bytes]:
        if len(data) < 5 or data[0] != MAGIC:
            raise DecodeError("not in Schema Registry framing (" + (f"magic byte {data[0]:#04x}, not 0"
                                                                     if data else "no bytes") + ")"
                              if not data or data[0] != MAGIC else "shorter than its 5-byte framing")
        schema_id = struct.unpack_from(">I", data, 1)[0]
        reader = self._readers.get(schema_id)
        if reader is None:
            try:
                reader = self._reader(fmt, schema_id)
            except (KeyError, TypeError, AttributeError, ValueError) as e:  # an answer not shaped as the API's
                raise DecodeError(f"the Schema Registry's answer for schema {schema_id} is not one its API gives "
                                  f"({type(e).__name__}: {e})") from None
            if len(self._readers) >= SCHEMAS_KEPT:
                self._readers.pop(next(iter(self._readers)))
            self._readers[schema_id] = reader
        return schema_id, reader(data[5:])

    def _reader(self, fmt: str, schema_id: int) -> Callable[[bytes], bytes]:
        from klog.protocol.registry_client import RegistryAnswerError

        assert self.registry is not None
        try:
            found = self.registry.call("GET", f"/schemas/ids/{schema_id}")
        except RegistryAnswerError as e:
            raise DecodeError(f"schema {schema_id}: {e}") from None
        kind = (found.get("schemaType") or "AVRO").lower()
        if kind != fmt:
            raise DecodeError(f"written with schema {schema_id}, a {kind.upper()} schema: use -s {kind}")
        if fmt == "json":
            return _json_text
        if fmt == "protobuf":
            from klog.client.protobuf_codec import reader

            return reader(self.registry, schema_id)
        return self._avro_reader(schema_id, found)

    def _avro_reader(self, schema_id: int, found: dict) -> Callable[[bytes], bytes]:
        from klog.client.avro_json import avro_json_reader, dumps
        from klog.protocol.avro_schema import without_logical_types

        fastavro = _fastavro()
        try:
            texts = [*avro_texts(referenced_schemas(self.registry, found.get("references") or [], DecodeError)),
                     found["schema"]]
            read_json = avro_json_reader(fastavro, [without_logical_types(json.loads(t)) for t in texts])
        except DecodeError:
            raise
        except Exception as e:  # noqa: BLE001 - fastavro's SchemaParseException and others
            raise DecodeError(f"schema {schema_id} is not an Avro schema fastavro reads: {e}") from None

        def read(body: bytes) -> bytes:
            try:
                return dumps(read_json(body))
            except Exception as e:  # noqa: BLE001 - whatever fastavro raises for bytes that are not the schema's
                raise DecodeError(f"not Avro of schema {schema_id}: {_why(e)}") from None

        return read


def referenced_schemas(registry: Any, references: Any, error: type[KlogError]) -> list[tuple[str, str]]:
    """(name, text) of the schemas `references` name (Confluent's {name, subject, version}), theirs first;
    each fetched once (references may cycle), at most REFERENCES_MAX (and REFERENCE_ENTRIES_MAX entries of
    their lists walked), all within REFERENCES_TIMEOUT_S (a
    registry that answers each just within its timeout does not hold the caller for REFERENCES_MAX of them).
    Avro takes the texts (named types), JSON Schema the names too (its `$ref`s name them)."""
    from urllib.parse import quote

    from klog.protocol.registry_client import RegistryAnswerError

    deadline = time.monotonic() + REFERENCES_TIMEOUT_S
    fetched: dict[tuple[str, str], str | None] = {}
    out: list[tuple[str, str]] = []
    names: set[str] = set()
    walked = [0]

    def follow(refs: Any) -> None:
        walked[0] += len(refs) if isinstance(refs, list) else 0
        if walked[0] > REFERENCE_ENTRIES_MAX:
            raise error(f"more than {REFERENCE_ENTRIES_MAX} schema reference entries")
        for ref in refs:
            if not isinstance(ref, dict) or "subject" not in ref:
                raise error(f"a schema reference the registry gave is not {{name, subject, version}}: {ref}")
            where = (str(ref["subject"]), str(ref.get("version", "latest")))
            name = str(ref.get("name", ""))
            first = where not in fetched
            if first:
                fetched[where] = None  # being fetched: a cycle back to it ends here
                if len(fetched) > REFERENCES_MAX:
                    raise error(f"more than {REFERENCES_MAX} schema references")
                if time.monotonic() > deadline:
                    raise error(f"its schema references took the registry more than {REFERENCES_TIMEOUT_S:g} s")
                # soft-deleted too, as Confluent's clients fetch a reference (lookupDeletedSchema): a record
                # written before its schema and the ones it references were deleted still reads
                path = f"/subjects/{quote(where[0], safe='')}/versions/{quote(where[1], safe='')}?deleted=true"
                try:
                    doc = registry.call("GET", path)
                except RegistryAnswerError as e:
                    raise error(f"referenced schema {where[0]} version {where[1]}: {e}") from None
                follow(doc.get("references") or [])
                fetched[where] = doc["schema"]
            text = fetched[where]
            if text is not None and (first or name not in names):  # each text once, and each name
                out.append((name, text))
                names.add(name)

    follow(references)
    return out


def avro_texts(named: list[tuple[str, str]]) -> list[str]:
    """The texts of referenced_schemas an Avro schema's named types come from: each reference name's first
    only, as Confluent's resolveReferences follows a name once (another version of it reached through
    another path is not parsed: a diamond over two versions of one type reads with the first, where both
    would define it twice), and each text once (Avro defines each named type once)."""
    seen: set[str] = set()
    texts = []
    for name, text in named:
        if name and name in seen:
            continue
        seen.add(name)
        texts.append(text)
    return list(dict.fromkeys(texts))


def open_registry(formats: set[str], registry_url: str | None) -> Any:
    """The Schema Registry `-r` names (one URL or a comma-separated list; user:password@ in a URL is
    sent as basic auth) for `-s` of `formats`: UsageError without one, and a missing package those
    formats need named now, not at the first record."""
    if not registry_url:
        raise UsageError(f"-s {'/'.join(sorted(formats))} needs the Schema Registry's URL: give -r URL")
    from klog.protocol.registry_client import RegistryClient

    if "avro" in formats:
        _fastavro()
    if "protobuf" in formats:
        from klog.client.protobuf_codec import _modules

        _modules()
    return RegistryClient([u.strip() for u in registry_url.split(",") if u.strip()], None,
                          timeout_s=REGISTRY_TIMEOUT_S)


def _json_text(body: bytes) -> bytes:
    """A JSON Schema record's JSON, as one line (its text may span lines)."""
    return json.dumps(strict_json(body, DecodeError, "not"), ensure_ascii=False, separators=(",", ":")).encode()


def strict_json(data: bytes, error: type[KlogError], verb: str) -> Any:
    """`data` parsed as JSON proper: NaN and Infinity (which Python's json takes, and Jackson refuses) and
    nesting deeper than the interpreter's recursion are `error`s, not values or a traceback."""
    try:
        return json.loads(data, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError) as e:
        raise error(f"{verb} JSON: {e}") from None
    except RecursionError:
        raise error(f"{verb} JSON klog reads: nested too deep") from None


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not a JSON value")


def _why(e: Exception) -> str:
    """What fastavro's error says, in words (its EOFError and IndexError often say nothing)."""
    if isinstance(e, EOFError):
        return f"truncated ({e})" if str(e) else "truncated"
    if isinstance(e, IndexError):
        return "truncated, or a union member or enum symbol past the schema's"
    return str(e) or type(e).__name__


def _fastavro():  # noqa: ANN202 - the module
    try:
        import fastavro
    except ImportError:
        raise KlogError("-s avro needs fastavro: pip install 'klog[connect]'") from None
    return fastavro

"""Record keys and values encoded for writing in Confluent's Schema Registry framing (magic byte 0, the
schema's 4-byte id, then Avro's binary encoding or the JSON text), as confluent-kafka's AvroSerializer
and JSONSerializer (and Confluent's kafka-avro-console-producer) write them. What `klog produce -s
value=avro -r URL` writes; the input is what `klog consume -s` prints, so records round-trip:

    encoder = RecordEncoder({"value": "avro"}, "http://127.0.0.1:8081", "orders", {"value": order_avsc})
    producer.send("orders", encoder.encode("value", b'{"id": 1, "note": {"string": "hi"}}'))

Avro input is Avro's JSON encoding (a union member as {"type": value}); JSON Schema input is JSON,
checked against its schema as Confluent's serializer does. The schema is the one given (registered
under the topic's subject, `<topic>-key` / `<topic>-value`, as the serializers' auto.register.schemas
does), or the subject's latest version.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from klog.client.deserializers import (
    FIELDS,
    MAGIC,
    REGISTRY_FORMATS,
    _fastavro,
    avro_texts,
    open_registry,
    parse_serdes,
    referenced_schemas,
    strict_json,
)
from klog.client.protobuf_codec import ProtobufCodecError
from klog.errors import KlogError, UsageError


class EncodeError(KlogError):
    """An input key or value that does not fit its schema."""


def parse_encodings(specs: list[str]) -> dict[str, str]:
    """produce's -s ([key=|value=]avro|json|protobuf) as {field: format}; UsageError naming a bad one."""
    def registry_only(fmt: str, spec: str) -> None:
        if fmt not in REGISTRY_FORMATS:
            raise UsageError(f"-s '{spec}': produce encodes avro, json or protobuf (Schema Registry framing)")

    return parse_serdes(specs, registry_only)


def parse_schema_options(specs: list[str], encodings: dict[str, str]) -> dict[str, str]:
    """--schema [key=|value=]FILE|id:N|latest as {field: what}; the schema FILE's text is read here."""
    out: dict[str, str] = {}
    for spec in specs:
        field, sep, what = spec.partition("=")
        if not sep or field not in FIELDS:
            field, what = "value", spec
        if field not in encodings:
            raise UsageError(f"--schema {spec}: give -s {field}=avro|json for the {field} too")
        if what != "latest" and not what.startswith("id:"):
            try:
                with open(what, encoding="utf-8") as f:
                    what = "text:" + f.read()
            except OSError as e:
                raise UsageError(f"--schema {spec}: cannot read {what}: {e.strerror or e}") from None
        out[field] = what
    return out


class RecordEncoder:
    """Encodes the fields `encodings` names ({"key"|"value": "avro"|"json"}) of records for `topic`;
    `schemas` ({field: "text:<schema>" | "id:<N>" | "latest"}, latest when absent) says which schema."""

    def __init__(self, encodings: dict[str, str], registry_url: str | None, topic: str,
                 schemas: dict[str, str] | None = None) -> None:
        self.registry = open_registry(set(encodings.values()), registry_url)
        self.encodings = encodings
        self.fields = tuple(encodings)  # (an --input json envelope's members taken as JSON documents)
        self.topic = topic
        # a schema per field, settled before the first record (a bad schema: nothing written); but a bare
        # `-s avro` names keys too, and input without keys needs no key schema: the key's latest is asked for
        # at the first key
        self._schemas = schemas or {}
        self._encode: dict[str, Callable[[bytes], bytes]] = {
            field: self._encoder(field, fmt, self._schemas.get(field, "latest")) for field, fmt in encodings.items()
            if field == "value" or field in self._schemas}

    def encode(self, field: str, data: bytes | None) -> bytes | None:
        """`data` (JSON text) in the field's schema, framed; None (a null key, a tombstone) stays None."""
        if data is None or field not in self.encodings:
            return data
        encode = self._encode.get(field)
        if encode is None:
            try:
                encode = self._encode[field] = self._encoder(field, self.encodings[field], "latest")
            except KlogError as e:
                raise EncodeError(f"has no schema: {e}") from None
        try:
            return encode(data)
        except ProtobufCodecError as e:
            raise EncodeError(str(e)) from None

    def _encoder(self, field: str, fmt: str, what: str) -> Callable[[bytes], bytes]:
        from klog.protocol.registry_client import RegistryAnswerError

        subject = f"{self.topic}-{field}"
        path = f"/subjects/{quote(subject, safe='')}"
        try:
            if what.startswith("text:"):
                body: dict[str, Any] = {"schema": what[5:]}
                if fmt != "avro":
                    body["schemaType"] = fmt.upper()
                schema_id = int(self.registry.call("POST", f"{path}/versions", body)["id"])
                found = {"schema": what[5:]}  # (registered without references)
            elif what.startswith("id:"):
                try:
                    schema_id = int(what[3:])
                except ValueError:
                    raise UsageError(f"--schema {field}={what}: id:N takes a schema id") from None
                found = self.registry.call("GET", f"/schemas/ids/{schema_id}")
                self._check_type(found, fmt, f"schema {schema_id}")
            else:
                found = self.registry.call("GET", f"{path}/versions/latest")
                self._check_type(found, fmt, f"the latest schema of {subject}")
                schema_id = int(found["id"])
            # the schemas its references name: Avro's named types of other subjects (theirs first), JSON
            # Schema's documents its $refs name
            referenced = referenced_schemas(self.registry, found.get("references") or [], KlogError) \
                if fmt != "protobuf" else []
            texts = [*avro_texts(referenced), found["schema"]]
        except RegistryAnswerError as e:
            raise KlogError(f"the {field} schema for {subject}: {e}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as e:  # an answer not shaped as the API's
            raise KlogError(f"the {field} schema for {subject}: the Schema Registry's answer is not one its API "
                            f"gives ({type(e).__name__}: {e})") from None
        header = bytes([MAGIC]) + struct.pack(">I", schema_id)
        if fmt == "protobuf":
            from klog.client.protobuf_codec import encoder

            return encoder(self.registry, schema_id, header)
        if fmt == "avro":
            return _avro_encoder(texts, header, schema_id)
        return _json_encoder(found["schema"], referenced, header, schema_id)

    @staticmethod
    def _check_type(found: dict, fmt: str, what: str) -> None:
        kind = (found.get("schemaType") or "AVRO").lower()
        if kind != fmt:
            raise KlogError(f"{what} is {kind.upper()}, not {fmt.upper()}")


def _avro_encoder(texts: list[str], header: bytes, schema_id: int) -> Callable[[bytes], bytes]:
    """`texts`: the schemas referenced (theirs first), then the schema."""
    from klog.client.avro_json import avro_datum_from_json
    from klog.protocol.avro_schema import without_logical_types

    fastavro = _fastavro()
    try:
        parsed, datum_of = avro_datum_from_json(fastavro, [without_logical_types(json.loads(t)) for t in texts])
    except Exception as e:  # noqa: BLE001 - fastavro's SchemaParseException, json's ValueError
        raise KlogError(f"schema {schema_id} is not an Avro schema fastavro reads: {e}") from None
    write = fastavro.schemaless_writer

    def encode(data: bytes) -> bytes:
        try:
            datum = datum_of(json.loads(data))
            out = io.BytesIO()
            out.write(header)
            write(out, parsed, datum, strict_allow_default=True)
        except Exception as e:  # noqa: BLE001 - fastavro's own and json's errors: the input does not fit
            raise EncodeError(f"is not Avro's JSON encoding of schema {schema_id}: {_short(e)}") from None
        return out.getvalue()

    return encode


def _json_encoder(text: str, referenced: list[tuple[str, str]], header: bytes,
                  schema_id: int) -> Callable[[bytes], bytes]:
    """`referenced`: (name, text) of the schemas its references name, which its `$ref`s may name."""
    from klog.protocol.json_schema import document_of, validator_of

    try:
        import jsonschema  # noqa: F401 - named now, not at the first record
    except ImportError:
        raise KlogError("-s json needs jsonschema: pip install 'klog[connect]'") from None
    try:
        validator = validator_of(document_of(text, referenced))
    except Exception as e:  # noqa: BLE001 - a schema jsonschema cannot use
        raise KlogError(f"schema {schema_id} is not a JSON Schema jsonschema reads: {_short(e)}") from None

    def encode(data: bytes) -> bytes:
        doc = strict_json(data, EncodeError, "is not")
        try:
            error = next(validator.iter_errors(doc), None)
        except RecursionError:
            raise EncodeError(f"is nested too deep to check against schema {schema_id}") from None
        except Exception as e:  # noqa: BLE001 - jsonschema's Unresolvable (a $ref nothing names) and kin
            raise EncodeError(f"cannot be checked against schema {schema_id}: {_short(e)}") from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the document"
            raise EncodeError(f"does not match schema {schema_id} at {where}: {_short(error.message)}")
        return header + json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()

    return encode


def _short(e: object) -> str:
    return " ".join(str(e).split())[:300]

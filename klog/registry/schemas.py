"""The registry's state: subjects, their versions, schema ids and compatibility levels, kept as Confluent's
Schema Registry keeps them, in the compacted topic `_schemas` (one partition):

- `{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}` -> `{"subject":S,"version":V,"id":ID,
  "schemaType":T,"references":[{"name":N,"subject":S2,"version":V2}],"schema":TEXT,"deleted":false}`
  (schemaType absent for AVRO, references when there are some; a soft delete writes it again with
  `"deleted":true`; a permanent one a tombstone);
- `{"keytype":"CONFIG","subject":S|null,"magic":0}` -> `{"compatibilityLevel":LEVEL,"normalize":BOOL}` (either may
  be absent; null: the global one);
- `{"keytype":"MODE","subject":S,"magic":0}` (no subject: the global one) -> `{"subject":S,"mode":MODE}`.

Written and read through klog's client API, so the registry runs on a store directory or a cluster. The
topic is read to its end at start; every change is written (acknowledged, durable) before it is answered,
so ids and versions survive restarts. One registry process per store or cluster (Confluent elects one
leader to write; klog's registry does not elect).
"""

from __future__ import annotations

import collections
import functools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from klog.errors import RecordTooLargeError
from klog.protocol import json_compat, protobuf_compat
from klog.protocol import protobuf_schema as proto
from klog.protocol.avro_compat import named_types, read_problems
from klog.protocol.avro_schema import HIDDEN_LOGICAL, without_logical_types
from klog.protocol.json_schema import Document, SchemaProblem, check_references, with_references
from klog.registry.compat import LEVELS, compatibility_problems
from klog.registry.normalize import avro_normalized, json_normalized, protobuf_normalized

TOPIC = "_schemas"
DEFAULT_LEVEL = "BACKWARD"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"
TYPES = ("AVRO", "JSON", "PROTOBUF")  # what klog's registry parses, compares and registers
MAX_REFERENCE_DEPTH = 16  # references of references: deeper is refused (a _schemas topic could loop them)
_REQUEST = (None, None)  # a request's schema in a chain of references (outermost; no reference names it)
MAX_VERSION = 2**31 - 1
T = TypeVar("T")
DIFFERENT_SCHEMA_TYPE = "Incompatible because of different schema type"  # Confluent's SchemaValidatorBuilder


class RegistryError(Exception):
    """An answer other than 200: the HTTP status and Confluent's error code."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: Any) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


@dataclass
class Version:
    subject: str
    version: int
    id: int
    schema: str
    deleted: bool = False
    schema_type: str = "AVRO"
    references: list[dict[str, Any]] = field(default_factory=list)  # [{name, subject, version}], as registered

    def answer(self, schema: str | None = None) -> dict[str, Any]:
        """The version as Confluent answers it (`schema`: another form of its text, the serialized one)."""
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        out["schema"] = self.schema if schema is None else schema
        return out

    def refers_to(self, subject: str, version: int) -> bool:
        return any(r.get("subject") == subject and r.get("version") == version for r in self.references)


def _cache_key(v: Version) -> tuple[str, str, str]:
    """What a stored version's parsed form depends on: its type, text and references."""
    return v.schema_type, v.schema, json.dumps(v.references)


def _compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _compact({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _compact({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    """As Confluent's ModeKey (its null subject left out)."""
    return _compact({"keytype": "MODE", **({} if subject is None else {"subject": subject}), "magic": 0})


def _our_key(k: dict[str, Any]) -> bytes | None:
    """The key klog writes for the record a _schemas key (parsed) names: SCHEMA, CONFIG and MODE ones."""
    subject = k.get("subject")
    if k.get("keytype") == "SCHEMA" and isinstance(subject, str) and isinstance(k.get("version"), int):
        return schema_key(subject, k["version"])
    if k.get("keytype") in ("CONFIG", "MODE") and (subject is None or isinstance(subject, str)):
        return config_key(subject) if k["keytype"] == "CONFIG" else mode_key(subject)
    return None


def not_permitted(message: str) -> RegistryError:
    """Confluent's OperationNotPermittedException: 42205."""
    return RegistryError(422, 42205, message)


def read_only(subject: str | None) -> RegistryError:
    # Confluent's words: its default context is "" ("in context  is")
    return not_permitted(f"Subject {'null' if subject is None else subject} in context  is in read-only mode")


def record_of(v: Version, deleted: bool | None = None) -> dict[str, Any]:
    """A version's value in _schemas, as Confluent's registry writes it."""
    out: dict[str, Any] = {"subject": v.subject, "version": v.version, "id": v.id}
    if v.schema_type != "AVRO":
        out["schemaType"] = v.schema_type
    if v.references:
        out["references"] = v.references
    out["schema"] = v.schema
    out["deleted"] = v.deleted if deleted is None else deleted
    return out


def parse_avro(text: Any, referenced: dict[str, tuple[Any, str]] | None = None) -> Any:
    """A schema's text parsed by fastavro (names made full): RegistryError 42201 when it is no Avro schema.
    Named types its references define (each reference's schema, parsed) may be used by name, as Avro's
    parser takes them when Confluent's registry parses the references first; the parsed form has each one's
    definition where it is first used (so it compares as one schema)."""
    import fastavro

    if not isinstance(text, str) or not text.strip():
        raise RegistryError(422, 42201, "Empty schema")
    try:
        external: dict[str, Any] = {}
        for ref in {id(ref): ref for ref, _ in (referenced or {}).values()}.values():  # one schema, many names:
            external.update(named_types(ref))  # its types once
        hidden = without_logical_types(json.loads(text), keep_as=HIDDEN_LOGICAL)
        parsed = fastavro.parse_schema(hidden, dict(external), _write_hint=False)
        if external:
            parsed = _inline(parsed, external, set())
        problem = _name_problem(parsed)
        if problem is not None:
            raise RegistryError(422, 42201, f"Invalid schema {text[:200]!r}: {problem}")
        return parsed
    except RegistryError:
        raise
    except RecursionError:
        raise RegistryError(422, 42201, "Invalid schema: nested too deep") from None
    except Exception as e:  # noqa: BLE001 - fastavro raises several kinds for a bad schema: each is a 42201
        raise RegistryError(422, 42201, f"Invalid schema {text[:200]!r}: {type(e).__name__}: {e}") from None


def _inline(schema: Any, external: dict[str, Any], defined: set[str]) -> Any:
    """A parsed Avro schema with the definition of each named type from a reference (`external`) in place of
    its first use; `defined`: the names defined so far, in Avro's order (depth first, fields in order)."""
    if isinstance(schema, str):
        if schema in external and schema not in defined:
            definition = external[schema]
            defined.update(named_types(definition))
            return _inline(definition, external, defined)
        return schema
    if isinstance(schema, list):
        return [_inline(member, external, defined) for member in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        defined.add(str(schema.get("name")))
    if kind in ("record", "error"):
        out["fields"] = [{**f, "type": _inline(f.get("type"), external, defined)} for f in schema.get("fields", [])]
    elif kind == "array":
        out["items"] = _inline(schema.get("items"), external, defined)
    elif kind == "map":
        out["values"] = _inline(schema.get("values"), external, defined)
    elif isinstance(kind, dict | list | str):
        out["type"] = _inline(kind, external, defined)
    return out


def parse_json(text: Any, referenced: dict[str, tuple[Document, str]] | None = None) -> Document:
    """A JSON Schema's text parsed, with the documents its references name (name -> (the referenced schema
    parsed, "subject:version")): RegistryError 42201 when it is no JSON document, not a schema by its
    metaschema (jsonschema's check_schema, draft 7 unless `$schema` names another), or has a `$ref` that
    names nothing in it or in those documents (nothing is fetched)."""
    if not isinstance(text, str) or not text.strip():
        raise RegistryError(422, 42201, "Empty schema")
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict | bool):
            raise ValueError(f"a JSON Schema is an object or a boolean, not {type(doc).__name__}")
        _check_metaschema(doc)
        parsed = with_references(doc, {name: ref for name, (ref, _) in (referenced or {}).items()})
        check_references(parsed)
        return parsed
    except RecursionError:
        raise RegistryError(422, 42201, "Invalid schema: nested too deep") from None
    except Exception as e:  # noqa: BLE001 - json's, jsonschema's and json_compat's refusals: each is a 42201
        message = getattr(e, "message", None) or str(e)
        raise RegistryError(422, 42201, f"Invalid schema {text[:200]!r}: {type(e).__name__}: {message}") from None


def _check_metaschema(doc: Any) -> None:
    try:
        import jsonschema
    except ImportError:  # the connect extra brings it; without it the document is only checked as JSON
        return
    validator = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator)
    validator.check_schema(doc)


@dataclass
class ParsedProto:
    """A Protobuf schema parsed, its imports resolved: its model (for the comparison, with what its types
    may name), its descriptor (the serialized form) and its canonical text (what is stored)."""
    schema: protobuf_compat.Schema
    descriptor: Any
    text: str


def parse_protobuf(text: Any, referenced: dict[str, tuple[ParsedProto, str]], strict: bool = True) -> ParsedProto:
    """A Protobuf schema, as .proto text or base64 FileDescriptorProto, parsed against its references (import
    name -> (the referenced schema parsed, "subject:version")) and the well-known files: 42201 naming the
    line and what was wrong, the import or the type nothing declares. `strict` (a request's schema): what
    protoc refuses past that too; a stored version is parsed as Confluent's registry took it."""
    if not isinstance(text, str) or not text.strip():
        raise RegistryError(422, 42201, "Empty schema")
    try:
        model = proto.from_descriptor(proto.decode_serialized(text)) if proto.looks_serialized(text) else \
            proto.parse_text(text, strict)
        dependencies = dict(proto.well_known())
        origins: dict[str, str | None] = {}
        for name, (ref, origin) in referenced.items():  # a reference's own dependencies come with it
            dependencies.update(ref.schema.dependencies)
            origins.update(ref.schema.origins)
            dependencies[name], origins[name] = ref.schema.proto, origin
        descriptor = proto.to_descriptor(model, dependencies, strict=strict)
        text = proto.canonical_text(model)
        if not text.strip():  # (`;`, an empty descriptor): stored so, it would not parse again
            raise RegistryError(422, 42201, "Empty schema")
        return ParsedProto(protobuf_compat.Schema(model, dependencies, origins), descriptor, text)
    except proto.ProtoError as e:
        raise RegistryError(422, 42201, f"Invalid schema: {e}") from None
    except RecursionError:
        raise RegistryError(422, 42201, "Invalid schema: nested too deep") from None


def parse(text: Any, schema_type: str, referenced: dict[str, tuple[Any, str]] | None = None,
          strict: bool = True) -> Any:
    """A schema's text parsed by its type's rules (42201 when it breaks them), with its references, parsed."""
    if schema_type == "PROTOBUF":
        return parse_protobuf(text, referenced or {}, strict)
    return parse_json(text, referenced) if schema_type == "JSON" else parse_avro(text, referenced)


# requests parsing and comparing a schema at once, without the registry's lock: a 10 MB JSON schema's
# metaschema check took 19 s and ~60 MiB, a hostile comparison takes its bounds (json_compat.Budget)
_WORK = threading.BoundedSemaphore(2)


def _two_at_once(method: Callable[..., T]) -> Callable[..., T]:
    """A request's parsing and comparing, at most two at once (stored versions, parsed under the
    registry's lock, do not wait for these)."""
    @functools.wraps(method)
    def bounded(*args: Any, **kwargs: Any) -> T:
        with _WORK:
            return method(*args, **kwargs)
    return bounded


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _name_problem(schema: Any, seen: set[int] | None = None) -> str | None:
    """What Avro's Java library (and so Confluent's registry) refuses and fastavro takes: a name that is no
    Avro name, a field named twice in a record."""
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        return next((p for m in schema if (p := _name_problem(m, seen)) is not None), None)
    if not isinstance(schema, dict) or id(schema) in seen:
        return None
    seen.add(id(schema))
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed"):
        bad = [part for part in str(schema.get("name", "")).split(".") if not _NAME.fullmatch(part)]
        if bad:
            return f"{schema.get('name')!r} is not an Avro name"
    if kind == "enum":
        bad = [symbol for symbol in schema.get("symbols", []) if not _NAME.fullmatch(str(symbol))]
        return f"enum symbol {bad[0]!r} is not an Avro name" if bad else None
    if kind == "record":
        names = [f.get("name") for f in schema.get("fields", [])]
        counts = collections.Counter(str(name) for name in names)  # (count() per name: 10,000 fields were 4 s)
        for name in names:
            if not _NAME.fullmatch(str(name)):
                return f"field {name!r} of {schema['name']} is not an Avro name"
            if counts[str(name)] > 1:
                return f"field {name!r} is twice in {schema['name']}"
        return next((p for f in schema.get("fields", []) if (p := _name_problem(f.get("type"), seen)) is not None),
                    None)
    for key in ("items", "values", "type"):
        if isinstance(schema.get(key), dict | list):
            return _name_problem(schema[key], seen)
    return None


def canonical(parsed: Any, schema_type: str = "AVRO", references: list[dict[str, Any]] | None = None) -> str:
    """What makes two registrations the same schema: its type, parsed form (whitespace aside) and references.
    Avro's with full names, key order ignored; JSON's keeps its key order, as Confluent's canonical JSON does
    (a struct's fields without connect.index are its properties in order); Protobuf's its resolved
    descriptor (proto.identity: the .proto text and the serialized form of one schema are the same)."""
    if schema_type == "PROTOBUF":
        form = proto.identity(parsed.descriptor, parsed.schema.proto).hex()
    elif schema_type == "JSON":
        form = json.dumps(parsed.root, separators=(",", ":"))
    else:
        form = json.dumps(parsed, sort_keys=schema_type == "AVRO", separators=(",", ":"))
    return schema_type + ":" + form + (":" + json.dumps(references) if references else "")


def request_references(references: Any) -> list[dict[str, Any]]:
    """A request's `references`: a list of {name, subject, version} (42201 otherwise)."""
    if references is None:
        return []
    if not isinstance(references, list):
        raise RegistryError(422, 42201, "Invalid schema: references must be a list")
    out = []
    for ref in references:
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref["name"] or \
                not isinstance(ref.get("subject"), str) or not isinstance(ref.get("version"), int) or \
                isinstance(ref.get("version"), bool):
            raise RegistryError(422, 42201, f"Invalid schema: a reference is {{name, subject, version}}, not "
                                f"{json.dumps(ref)[:200]}")
        out.append({"name": ref["name"], "subject": ref["subject"], "version": ref["version"]})
    if len({r["name"] for r in out}) != len(out):
        raise RegistryError(422, 42201, "Invalid schema: two references have the same name")
    return out


class Registry:
    def __init__(self, store, topic: str = TOPIC) -> None:  # noqa: ANN001 - a klog Store or RemoteStore
        self.store = store
        self.topic = topic
        # writes hold it; the HTTP face holds it around every request but the ones with a schema, so a read
        # never iterates the tables while a write changes them (re-entrant: a request's write takes it
        # again). Those parse and compare their schema without it (server.PARSE_FIRST).
        self.lock = threading.RLock()
        self.versions: dict[tuple[str, int], Version] = {}
        self.configs: dict[str | None, dict[str, Any]] = {}  # subject (None: global) -> compatibilityLevel, normalize
        self.modes: dict[str | None, str] = {}  # subject (None: global) -> its mode
        # the highest id any SCHEMA record read or written held, deleted ones too: a new id comes after it, as
        # Confluent's IncrementalIdGenerator counts (an id deleted for good, or imported, is never given again)
        self.max_id = 0
        # a stored schema's (type, text, refs) -> parsed, its canonical() and how deep its references nest
        self._stored: dict[tuple[str, str, str], tuple[Any, str, int]] = {}
        self._unparsable: dict[tuple[str, str, str], str] = {}  # ... -> why klog could not parse it (the last time)
        self._generation = 0  # what _forget_referrers counts
        self._with_references: set[tuple[str, str, str]] = set()  # the keys of _stored with references
        self._forgetting = threading.Lock()  # a parsed form kept, or those with references forgotten: not both
        self._changes = 0  # versions added, changed or removed (what a failure to parse references holds for)
        # a stored schema's key -> _changes when it failed to parse (-1: it has no references, so for good)
        self._failed: dict[tuple[str, str, str], int] = {}
        # klog's key of a record -> the other spellings of that key in _schemas holding a value (Confluent until 6.1
        # and Karapace write a global CONFIG or MODE key with "subject":null, Confluent since 6.2 without it):
        # a change writes tombstones for them, or compaction would keep the other spelling's older value and
        # bring it back at the next start once the change's own tombstone is compacted away
        self._spellings: dict[bytes, set[bytes]] = {}
        self._load()
        self._producer = store.producer()

    def close(self) -> None:
        self._producer.close()

    # -- the topic ---------------------------------------------------------------------------------------
    def _load(self) -> None:
        if not self.store.has_topic(self.topic):
            self.store.create_topic(self.topic, partitions=1, configs={"cleanup.policy": "compact"}, exist_ok=True)
        with self.store.consumer(self.topic) as consumer:
            for record in consumer:
                self._apply(record.key, record.value)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value is not None else None
        except ValueError:
            return  # not ours (Confluent's NOOP and others are JSON too, and skipped below)
        if not isinstance(k, dict):
            return
        ours = _our_key(k)
        if ours is not None and key != ours:
            if value is None:
                self._spellings.get(ours, set()).discard(key)
            else:
                self._spellings.setdefault(ours, set()).add(key)
        if k.get("keytype") == "SCHEMA" and isinstance(k.get("subject"), str) and isinstance(k.get("version"), int):
            where = (k["subject"], k["version"])
            was = self.versions.get(where)
            self._changes += 1
            if v is None:
                self.versions.pop(where, None)
            elif isinstance(v, dict) and isinstance(v.get("id"), int) and isinstance(v.get("schema"), str):
                if not isinstance(v["id"], bool) and v["id"] <= MAX_VERSION:
                    self.max_id = max(self.max_id, v["id"])
                refs = v.get("references")
                self.versions[where] = Version(where[0], where[1], v["id"], v["schema"], bool(v.get("deleted")),
                                               str(v.get("schemaType") or "AVRO"),
                                               [r for r in refs if isinstance(r, dict)] if isinstance(refs, list)
                                               else [])
            if was is not None and (where not in self.versions or _cache_key(self.versions[where]) != _cache_key(was)):
                self._forget_referrers()
        elif k.get("keytype") == "CONFIG":
            config = {} if not isinstance(v, dict) else \
                {**({"compatibilityLevel": v["compatibilityLevel"]} if v.get("compatibilityLevel") in LEVELS else {}),
                 **({"normalize": v["normalize"]} if isinstance(v.get("normalize"), bool) else {})}
            if config:
                self.configs[k.get("subject")] = config
            else:  # a tombstone, or a config of nothing klog keeps (only Confluent's alias, rules, ...): replaced
                self.configs.pop(k.get("subject"), None)
        elif k.get("keytype") == "MODE":
            if isinstance(v, dict) and v.get("mode") in MODES:
                self.modes[k.get("subject")] = v["mode"]
            elif v is None:
                self.modes.pop(k.get("subject"), None)

    def _forget_referrers(self) -> None:
        """A version gone (deleted for good) or rewritten: the parsed forms of schemas with references are
        forgotten, as a reference (subject, version) may name other content from now (a version deleted for good
        is numbered again), and what was being parsed meanwhile is not kept (the generation)."""
        with self._forgetting:
            self._generation += 1
            for key in self._with_references:  # (not every kept form: a subject's versions go one tombstone each)
                self._stored.pop(key, None)
            self._with_references = set()

    def _write(self, items: list[tuple[bytes, Any]]) -> None:
        """Each change written and acknowledged (durable) before it is applied and answered. A record larger than
        the topic's max.message.bytes is Confluent's 42209 (what was written before it is applied)."""
        items = [(other, None) for key, _ in items for other in sorted(self._spellings.get(key, ()))] + items
        sent = 0
        try:
            for key, doc in items:
                self._producer.send(self.topic, None if doc is None else _compact(doc), key=key)
                sent += 1
        except RecordTooLargeError:
            raise RegistryError(422, 42209, "Register operation failed because schema is too large") from None
        finally:
            self._producer.flush()
            for key, doc in items[:sent]:
                self._apply(key, None if doc is None else _compact(doc))

    def _write_version(self, v: Version) -> None:
        self._write([(schema_key(v.subject, v.version), record_of(v))])

    def canonical_of(self, v: Version) -> str | None:
        """A stored version's canonical() (parsed once); None for a version klog cannot parse."""
        stored = self._parsed_of(v)
        return None if stored is None else stored[1]

    def _parsed_of(self, v: Version, chain: tuple[tuple[Any, Any], ...] = ()) -> tuple[Any, str, int] | None:
        """A stored version's parsed form, canonical() and reference depth (0: it has none), kept: a
        compatibility check compares with stored versions without parsing them again (a JSON schema's
        metaschema check is milliseconds). `chain`: the versions whose references led here (outermost first)."""
        if v.schema_type not in TYPES:
            return None
        where = _cache_key(v)
        hit = self._stored.get(where)
        if hit is None:
            failed = self._failed.get(where)
            if failed == -1 or (failed == self._changes and not chain):
                return None  # failed with the versions as they are: a hostile _schemas' megabytes not parsed
                # again at every request (under the registry's lock, for an id)
            generation, changes = self._generation, self._changes
            try:
                referenced, depth = self._referenced(v.references, v.schema_type, (*chain, (v.subject, v.version)))
                # not strict: what Confluent's registry took, as klog refuses no stored version
                parsed = parse(v.schema, v.schema_type, referenced, strict=False)
            except RegistryError as e:  # a stored schema klog cannot parse (another registry wrote it): matches none
                self._unparsable[where] = str(e)
                if not chain:  # (in a chain it may fail for the chain's depth, or the stack's, not its own)
                    self._failed[where] = changes if v.references else -1  # (-1: its own text's failure)
                return None
            hit = (parsed, canonical(parsed, v.schema_type, v.references), depth)
            with self._forgetting:
                if generation == self._generation:  # (else parsed with what a reference named before)
                    self._stored[where] = hit
                    if v.references:
                        self._with_references.add(where)
        return hit

    def _referenced(self, references: list[dict[str, Any]], schema_type: str,
                    chain: tuple[tuple[Any, Any], ...] = ()) -> tuple[dict[str, tuple[Any, str]], int]:
        """Each reference's schema, parsed with its own (import name, a JSON Schema's `$ref` name -> (parsed,
        "subject:version")), and how deep they nest (0: no references): 42201 naming one that is not
        registered or cannot be parsed, references nested deeper than MAX_REFERENCE_DEPTH below the outermost
        schema or leading back to a version they started from (`chain`: the versions whose references led here,
        a request's schema as _REQUEST; a _schemas topic another registry wrote could loop them). Each parsed
        version's depth is kept: one parsed before counts as deep as one parsed now (counting the chain alone,
        a registry took a deeper chain, one version at a time, than it could parse after a restart)."""
        if not references:
            return {}, 0
        if len(chain) > MAX_REFERENCE_DEPTH:
            raise RegistryError(422, 42201, "Invalid schema: references nested too deep")
        out = {}
        depth = 0
        for ref in references:
            where = (ref.get("subject"), ref.get("version"))
            if where in chain:
                raise RegistryError(422, 42201, f"Invalid schema: reference {ref.get('name')!r} leads back to "
                                    f"subject {where[0]!r} version {where[1]} (references in a cycle)")
            target = self.versions.get(where)  # a dict read: no lock needed
            # a stored version's references may be soft-deleted (after it), as Confluent's registry resolves
            # them (lookupDeletedSchema unless validateAsNew): it stays what it was after a restart
            if target is None or (target.deleted and chain[:1] == (_REQUEST,)):
                raise RegistryError(422, 42201, f"Invalid schema: reference {ref.get('name')!r} names subject "
                                    f"{ref.get('subject')!r} version {ref.get('version')}, which is not registered")
            if target.schema_type != schema_type:
                raise RegistryError(422, 42201, f"Invalid schema: reference {ref.get('name')!r} is a "
                                    f"{target.schema_type} schema and this one {schema_type}")
            parsed = self._parsed_of(target, chain)
            if parsed is None:
                why = self._unparsable.get(_cache_key(target))
                raise RegistryError(422, 42201, f"Invalid schema: reference {ref.get('name')!r} cannot be parsed"
                                    + (f" ({why})" if why else ""))
            if len(chain) + parsed[2] > MAX_REFERENCE_DEPTH:  # the outermost's depth, were this one taken
                raise RegistryError(422, 42201, "Invalid schema: references nested too deep")
            out[str(ref.get("name"))] = (parsed[0], f"{target.subject}:{target.version}")
            depth = max(depth, parsed[2] + 1)
        return out, depth

    def serialized(self, v: Version) -> str:
        """A Protobuf version's serialized form (base64 FileDescriptorProto); other types' text."""
        parsed = self._parsed_of(v) if v.schema_type == "PROTOBUF" else None
        return v.schema if parsed is None else proto.serialized(parsed[0].descriptor)

    def referenced_by(self, subject: str, version: str, deleted: bool = False) -> list[int]:
        """The ids of the versions whose references name this one (deleted ones too when `deleted`)."""
        v = self.version(subject, version, deleted=True)
        return sorted({r.id for r in self.versions.values() if r.refers_to(v.subject, v.version)
                       and (deleted or not r.deleted)})

    def _refuse_if_referenced(self, doomed: list[Version], permanent: bool, other_subjects_only: bool = False) -> None:
        """Confluent's 42206, naming the first of `doomed` other versions refer to: a version they refer to is
        not deleted (soft: by live ones; for good: by any, soft-deleted too; `other_subjects_only`: by versions
        of other subjects). One pass over the versions, however many are doomed (a subject of 10,000 versions
        was 10,000 passes, 30 s under the lock)."""
        wanted = {(v.subject, v.version) for v in doomed}
        referred = {(ref.get("subject"), ref.get("version")) for r in self.versions.values()
                    if permanent or not r.deleted for ref in r.references
                    if (ref.get("subject"), ref.get("version")) in wanted
                    and not (other_subjects_only and r.subject == ref.get("subject"))}
        for v in doomed:
            if (v.subject, v.version) in referred:
                raise RegistryError(422, 42206, "One or more references exist to the schema "
                                    f"{{magic=1,keytype=SCHEMA,subject={v.subject},version={v.version}}}.")

    # -- reading --------------------------------------------------------------------------------------
    def subjects(self, deleted: bool = False) -> list[str]:
        return sorted({v.subject for v in self.versions.values() if deleted or not v.deleted})

    def _of(self, subject: str, deleted: bool = False) -> list[Version]:
        return sorted((v for v in self.versions.values() if v.subject == subject and (deleted or not v.deleted)),
                      key=lambda v: v.version)

    def live(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first; 40401 when it has none."""
        found = self._of(subject, deleted)
        if not found:
            raise subject_not_found(subject)
        return found

    def version(self, subject: str, version: str, deleted: bool = False) -> Version:
        number = parse_version(version)
        found = self.live(subject, deleted)
        if number == -1:
            return found[-1]
        for v in found:
            if v.version == number:
                return v
        raise version_not_found(number)

    def by_id(self, schema_id: int) -> list[Version]:
        return sorted((v for v in self.versions.values() if v.id == schema_id), key=lambda v: (v.subject, v.version))

    def schema_of(self, schema_id: int) -> Version:
        found = self.by_id(schema_id)
        if not found:
            raise RegistryError(404, 40403, f"Schema {schema_id} not found")
        return found[0]

    def level(self, subject: str | None) -> str:
        return self.configs.get(subject, {}).get("compatibilityLevel") or \
            self.configs.get(None, {}).get("compatibilityLevel") or DEFAULT_LEVEL

    def normalize(self, subject: str | None) -> bool:
        """The `normalize` config in scope: the subject's, else the global one's (false when neither sets it)."""
        for scope in (subject, None):
            if "normalize" in self.configs.get(scope, {}):
                return self.configs[scope]["normalize"]
        return False

    def config(self, subject: str | None, default_to_global: bool = False) -> dict[str, Any]:
        """GET /config's answer: the subject's own config (the global one's when `subject` is None, with the
        level in force), or merged over the global one (`default_to_global`)."""
        own = dict(self.configs.get(subject, {}))
        if subject is None or default_to_global:
            own = {**self.configs.get(None, {}), **own, "compatibilityLevel": self.level(subject)}
            if "normalize" in own:
                own["normalize"] = self.normalize(subject)
        return {k: own[k] for k in ("compatibilityLevel", "normalize") if k in own}

    def mode(self, subject: str | None, in_scope: bool = True) -> str | None:
        """The subject's mode; `in_scope`: else the global one, else READWRITE (the global one is READWRITE when
        unset; a subject's own is None when unset). A global READONLY_OVERRIDE is every subject's, over its own,
        as in Confluent's registries until 8.1 (its latest code, which deprecates the mode, reads it as READONLY
        and lets a subject's own mode come first)."""
        if self.modes.get(None) == "READONLY_OVERRIDE":
            return "READONLY_OVERRIDE"
        if subject in self.modes:
            return self.modes[subject]
        if subject is None or in_scope:
            return self.modes.get(None, DEFAULT_MODE)
        return None

    def _writable(self, subject: str | None) -> None:
        """Confluent's refusal of a write (a delete, a config change) in READONLY (or READONLY_OVERRIDE) mode."""
        if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise read_only(subject)

    def _parse_stored(self, subject: str | None = None, schema_id: int | None = None) -> None:
        """The stored versions (of `subject`, with `schema_id`, or all) parsed before the lock is taken, so that
        requests that need only the tables do not wait while the first request after a start parses stored
        schemas (kept: later requests find them parsed)."""
        for v in list(self.versions.values()):
            if (subject is None or v.subject == subject) and (schema_id is None or v.id == schema_id):
                self._parsed_of(v)

    def prepare_serialized(self, subject: str | None = None, schema_id: int | None = None) -> None:
        """Before a GET of a version's serialized form takes the lock: the Protobuf versions it may answer (of
        `subject`, or with `schema_id`) parsed."""
        if subject is not None or schema_id is not None:
            self._parse_stored(subject, schema_id)

    def _pinned(self, references: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A request's references with version -1 (the latest) as the subject's latest version now, as
        Confluent's resolveReferences pins it (so stored and compared so); one that names a subject without
        versions is left as it is (refused, not registered)."""
        if not any(ref.get("version") == -1 for ref in references):
            return references
        latest: dict[str, int] = {}
        for v in list(self.versions.values()):  # (one pass, however many references name the latest)
            if not v.deleted and v.version > latest.get(v.subject, 0):
                latest[v.subject] = v.version
        return [{**ref, "version": latest.get(ref.get("subject"), -1)} if ref.get("version") == -1 else ref
                for ref in references]

    def _parse(self, text: Any, schema_type: str, references: list[dict[str, Any]], strict: bool = True) -> Any:
        return parse(text, schema_type, self._referenced(references, schema_type, (_REQUEST,))[0], strict)

    def _normalized(self, text: Any, schema_type: str, references: list[dict[str, Any]]) -> Any:
        """A request's schema text in Confluent's normalized form (klog.registry.normalize). An Avro schema is
        parsed as it was sent first: one Avro refuses (a record without a name, a name defined twice) is refused
        with its own reason, not made a valid schema by normalization (a second definition made a use)."""
        if schema_type == "JSON":
            return json_normalized(text)
        if schema_type == "AVRO":
            referenced = self._referenced(references, schema_type, (_REQUEST,))[0]
            parse_avro(text, referenced)
            known: set[str] = set()
            for ref, _ in referenced.values():
                known.update(named_types(ref))
            return avro_normalized(text, known)
        parsed = self._parse(text, schema_type, references)
        return proto.canonical_text(protobuf_normalized(parsed.schema.proto, parsed.descriptor,
                                                        parsed.schema.dependencies))

    def _request(self, subject: str, text: Any, schema_type: str, references: list[dict[str, Any]] | None,
                 normalize: bool) -> tuple[Any, Any, list[dict[str, Any]]]:
        """A request's schema text (normalized with `normalize`, or the `normalize` config in scope), parsed, and
        its references pinned. In IMPORT mode the text is neither normalized nor held to what protoc refuses
        past the grammar: it is what the source registry took, as Confluent's maybeValidateAndNormalizeSchema
        skips both for an import."""
        references = self._pinned(references or [])
        importing = self.mode(subject) == "IMPORT"
        if (normalize or self.normalize(subject)) and not importing:
            references = sorted(references, key=lambda r: (r["subject"], r["version"]))  # as Confluent's normalize()
            text = self._normalized(text, schema_type, references)
        return text, self._parse(text, schema_type, references, strict=not importing), references

    @_two_at_once
    def lookup(self, subject: str, text: Any, deleted: bool = False, schema_type: str = "AVRO",
               references: list[dict[str, Any]] | None = None, normalize: bool = False) -> Version:
        _, parsed, references = self._request(subject, text, schema_type, references, normalize)
        key = canonical(parsed, schema_type, references)
        self._parse_stored(subject)
        with self.lock:
            found = self.live(subject, deleted)
            for v in found:
                if self.canonical_of(v) == key:
                    return v
        raise RegistryError(404, 40403, "Schema not found")

    @_two_at_once
    def check(self, subject: str, text: Any, version: str | None, schema_type: str = "AVRO",
              references: list[dict[str, Any]] | None = None, normalize: bool = False) -> list[str]:
        """Why `text` may not be registered under `subject` (against one version, or as the subject's level
        says when `version` is None or latest); compared outside the lock (stored versions do not change)."""
        parsed = self._request(subject, text, schema_type, references, normalize)[1]
        with self.lock:
            found = self.live(subject)
            level = self.level(subject)
            if version is not None and parse_version(version) != -1:
                found, level = [self.version(subject, version)], level.removesuffix("_TRANSITIVE")
        return self._problems(level, parsed, found, schema_type)

    def _problems(self, level: str, parsed: Any, previous: list[Version], schema_type: str) -> list[str]:
        """compatibility_problems against the versions the level names (the latest, or all when transitive);
        one of another type is Confluent's "different schema type" refusal. A JSON comparison spends one
        budget over all of them (json_compat.Budget): a request cannot hold the registry for long."""
        if level == "NONE" or not previous:
            return []
        against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
        if any(v.schema_type != schema_type for v in against):
            return [DIFFERENT_SCHEMA_TYPE]
        stored = [self._parsed_of(v) for v in against]  # (its cache is no table the lock guards)
        if any(s is None for s in stored):
            raise RegistryError(422, 42201, "Invalid schema: a version it is compared with cannot be parsed")
        budget = json_compat.Budget()
        problems = functools.partial(json_compat.backward_problems, budget=budget) if schema_type == "JSON" else \
            _protobuf_problems if schema_type == "PROTOBUF" else read_problems
        try:
            return compatibility_problems(level, parsed, [s[0] for s in stored], problems)
        except RecursionError:
            raise RegistryError(422, 42201, "Invalid schema: nested too deep to compare") from None
        except SchemaProblem as e:  # too complex to compare, a pattern too slow to match: refused, not a 500
            raise RegistryError(422, 42201, f"Invalid schema: {e}") from None
        finally:
            budget.close()

    # -- writing --------------------------------------------------------------------------------------
    @_two_at_once
    def register(self, subject: str, text: Any, schema_type: str = "AVRO",
                 references: list[dict[str, Any]] | None = None, normalize: bool = False,
                 schema_id: int | None = None, version: int | None = None) -> int:
        """The schema's id under `subject`: the version that has it already, or a new version (409 when
        the subject's compatibility level refuses it). A schema (its type and text) has one id in every
        subject. The comparison runs without the lock (seconds, for a hostile schema), against the subject
        as it was; the version is written only if the subject, its level and mode are still so, else it is
        judged again (the last time under the lock). A Protobuf schema is stored as its canonical text.
        The subject's mode (Confluent's checkRegisterMode): READONLY refuses a new version (42205), IMPORT takes
        one only with its `schema_id` (and keeps `version` when given), and compares with no earlier version;
        a `schema_id` is refused out of IMPORT. A schema the subject has already is answered in every mode."""
        text, parsed, references = self._request(subject, text, schema_type, references, normalize)
        key = canonical(parsed, schema_type, references)
        if schema_type == "PROTOBUF":
            text = parsed.text
        self._parse_stored()  # its id is the one any subject's version of this schema has
        new = Version(subject, version or 0, 0, text, schema_type=schema_type, references=references)
        for _ in range(2):
            with self.lock:
                live, level, mode, found = self._existing(subject, key, schema_id, version)
                if found is not None:
                    return found
            problems = [] if mode == "IMPORT" else self._problems(level, parsed, live, schema_type)
            with self.lock:
                if self._of(subject) == live and self.level(subject) == level and self.mode(subject) == mode:
                    return self._register(new, key, problems, mode, schema_id)
        with self.lock:  # changed under two comparisons: the last one holds the lock
            live, level, mode, found = self._existing(subject, key, schema_id, version)
            if found is not None:
                return found
            problems = [] if mode == "IMPORT" else self._problems(level, parsed, live, schema_type)
            return self._register(new, key, problems, mode, schema_id)

    def _existing(self, subject: str, key: str, schema_id: int | None = None,
                  version: int | None = None) -> tuple[list[Version], str, str, int | None]:
        """The subject's live versions, its level, its mode, and the id of the one with the schema `key` (None
        when there is none, or when the request's id or version names another: an import of it)."""
        live = self._of(subject)
        found = next((v.id for v in live if self.canonical_of(v) == key and (
            (schema_id is None and version is None) or
            (schema_id == v.id and version in (None, v.version)))), None)
        if found is not None:
            return live, self.level(subject), self.mode(subject), found
        mode = self.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise read_only(subject)
        if schema_id is not None and mode != "IMPORT":
            raise not_permitted(f"Subject {subject} in context  is not in import mode")
        if schema_id is None and mode != "READWRITE":
            raise not_permitted(f"Subject {subject} in context  is not in read-write mode")
        return live, self.level(subject), mode, None

    def _register(self, new: Version, key: str, problems: list[str], mode: str = DEFAULT_MODE,
                  schema_id: int | None = None) -> int:
        """`new` as the next version of its subject (the lock held), or 409 with the problems the comparison
        found. In IMPORT mode its id and version are the request's (an id another schema has is refused)."""
        if problems:
            raise RegistryError(409, 409, f"Schema being registered is incompatible with an earlier schema for "
                                f"subject \"{new.subject}\", details: {problems}")
        if schema_id is not None:
            if any(v.id == schema_id and self.canonical_of(v) != key for v in self.versions.values()):
                raise not_permitted(f"Overwrite new schema with id {schema_id} in context  is not permitted.")
            new.id = schema_id
        else:
            new.id = self._id_of(key)
        everything = self._of(new.subject, deleted=True)
        next_version = everything[-1].version + 1 if everything else 1
        if not new.version:
            new.version = next_version
        elif new.version != next_version and mode != "IMPORT":
            raise RegistryError(422, 42201, "Invalid schema: Version is not one more than previous version")
        self._write_version(new)
        return new.id

    def _id_of(self, key: str) -> int:
        for v in self.versions.values():
            if self.canonical_of(v) == key:
                return v.id
        return self.max_id + 1

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self.lock:
            self._writable(subject)
            everything = self._of(subject, deleted=True)
            if not everything:
                raise subject_not_found(subject)
            live = [v for v in everything if not v.deleted]
            self._refuse_if_referenced(everything if permanent else live, permanent, other_subjects_only=True)
            if permanent:
                if live:
                    raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                        "deleted permanently")
                self._write([(schema_key(v.subject, v.version), None) for v in everything]
                            + self._settings_gone(subject))
                return [v.version for v in everything]
            if not live:
                raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to "
                                    "delete permanently")
            self._write([(schema_key(v.subject, v.version), record_of(v, deleted=True)) for v in live])
            return [v.version for v in live]

    def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        with self.lock:
            self._writable(subject)
            gone = self.versions.get((subject, parse_version(version)))
            if not permanent and gone is not None and gone.deleted:
                raise RegistryError(404, 40406, f"Subject '{subject}' Version {gone.version} was soft deleted. "
                                    "Set permanent=true to delete permanently")
            v = self.version(subject, version, deleted=permanent)
            self._refuse_if_referenced([v], permanent)
            if permanent:
                if not v.deleted:
                    raise RegistryError(404, 40407, f"Subject '{subject}' Version {v.version} was not deleted first "
                                        "before being permanently deleted")
                last = [w for w in self._of(subject, deleted=True) if w.version != v.version] == []
                self._write([(schema_key(subject, v.version), None)] + (self._settings_gone(subject) if last else []))
            else:
                self._write([(schema_key(subject, v.version), record_of(v, deleted=True))])
            return v.version

    def _settings_gone(self, subject: str) -> list[tuple[bytes, Any]]:
        """A subject's mode and config, removed with its last version (as Confluent's permanent deletes do)."""
        return [(key, None) for key, there in ((mode_key(subject), subject in self.modes),
                                               (config_key(subject), subject in self.configs)) if there]

    def set_config(self, subject: str | None, level: Any, normalize: Any = None) -> dict[str, Any]:
        """PUT /config: the level and/or `normalize` set (what the request leaves out stays as it was), as
        Confluent answers it ({"compatibility", "normalize"})."""
        if (level is not None or normalize is None) and (not isinstance(level, str) or level.upper() not in LEVELS):
            raise RegistryError(422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, "
                                "full, backward_transitive, forward_transitive, and full_transitive")
        if normalize is not None and not isinstance(normalize, bool):
            raise RegistryError(422, 42203, f"Invalid config: normalize is true or false, not {json.dumps(normalize)}")
        with self.lock:
            self._writable(subject)
            config = dict(self.configs.get(subject, {}))
            if level is not None:
                config["compatibilityLevel"] = level.upper()
            if normalize is not None:
                config["normalize"] = normalize
            self._write([(config_key(subject), config)])
        return {("compatibility" if k == "compatibilityLevel" else k): v for k, v in config.items()}

    def delete_config(self, subject: str | None = None) -> dict[str, Any]:
        """DELETE /config[/{s}]: the config removed (the global one's under every spelling of its key: back to
        BACKWARD, normalize false; a subject's: back to the global one); the config it was, as Confluent's
        ConfigResource answers it: the global one as GET /config did, a subject's own with the default level when
        it set only `normalize`, and 40401 for a subject without its own config (whether or not it has versions)."""
        with self.lock:
            if subject is not None and subject not in self.configs:
                raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
            self._writable(subject)
            was = self.config(None) if subject is None else \
                {"compatibilityLevel": DEFAULT_LEVEL, **self.configs[subject]}
            self._write([(config_key(subject), None)])
            return was

    def set_mode(self, subject: str | None, mode: Any, force: bool = False) -> None:
        """PUT /mode: a subject's mode (None: the global one); a null mode removes it. IMPORT on a subject (or the
        registry) with live versions is refused unless `force`; without them, its soft-deleted versions are deleted
        for good first (as Confluent's setMode: an import brings its own ids and versions)."""
        if mode is not None and (not isinstance(mode, str) or mode.upper() not in MODES):
            raise RegistryError(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE "
                                "and IMPORT.")
        mode = None if mode is None else mode.upper()
        with self.lock:
            doomed: list[Version] = []
            if mode == "IMPORT" and self.mode(subject) != "IMPORT" and not force:
                mine = [v for v in self.versions.values() if subject is None or v.subject == subject]
                if any(not v.deleted for v in mine):
                    raise not_permitted("Cannot import since found existing subjects")
                doomed = sorted(mine, key=lambda v: (v.subject, -v.version))
                self._refuse_if_referenced(doomed, permanent=True)
            self._write([*((schema_key(v.subject, v.version), None) for v in doomed),
                         (mode_key(subject), None if mode is None else
                          {**({} if subject is None else {"subject": subject}), "mode": mode})])

    def delete_mode(self, subject: str | None) -> str:
        """DELETE /mode: the mode removed (40401 for a subject without one); the mode it was."""
        with self.lock:
            was = self.mode(subject, in_scope=False)
            if was is None:
                raise subject_not_found(subject or "")
            self._write([(mode_key(subject), None)])
            return was


def _protobuf_problems(reader: ParsedProto, writer: ParsedProto) -> list[str]:
    return protobuf_compat.read_problems(reader.schema, writer.schema)


def parse_version(text: str) -> int:
    """A version in a path: 1..2^31-1, or latest / -1 (the latest, as -1); 42202 otherwise."""
    if text == "latest":
        return -1
    number = int(text) if re.fullmatch(r"-?[0-9]{1,12}", text) else 0
    if number == -1 or 1 <= number <= MAX_VERSION:
        return number
    raise RegistryError(422, 42202, f"The specified version '{text}' is not a valid version id. Allowed values are "
                        "between [1, 2^31-1] and the string \"latest\"")

"""Debezium's column mappers (io.debezium.relational.mapping), as its relational connectors build them
from the keys `column.truncate.to.<N>.chars`, `column.mask.with.<N>.chars` and
`column.mask.hash[.v2].<algorithm>.with.salt.<salt>` (ColumnMappers.create), each a comma-separated list of
regular expressions over `<schema>.<table>.<column>`, matched whole and case-insensitively.

A column takes the first rule that matches it, truncations first, then masks, then hashes (v1, then v2),
each kind in java.util.HashMap order of the config's keys, as Debezium walks them. A rule changes the
field's schema (a `truncateLength` or `masked` parameter) and its values after the type's own conversion,
nulls and the unavailable-value placeholder included, as TableSchemaBuilder wraps the converter.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klog.connect.config import java_regex
from klog.connect.connectors.pgtypes import PgType, java_hashmap_order
from klog.connect.errors import ConfigError

_TRUNCATE = re.compile(r"column\.truncate\.to\.(\d+)\.chars")
_MASK = re.compile(r"column\.mask\.with\.(\d+)\.chars")
_HASH = re.compile(r"column\.mask\.hash\.([^.]+)\.with\.salt\.(.+)", re.DOTALL)
_HASH_V2 = re.compile(r"column\.mask\.hash\.v2\.([^.]+)\.with\.salt\.(.+)", re.DOTALL)
KEY = re.compile("|".join(p.pattern for p in (_TRUNCATE, _MASK, _HASH, _HASH_V2)), re.DOTALL)

# java.security.MessageDigest's names (case-insensitive) and the SUN provider's aliases → hashlib's
_DIGESTS = {"md2": None, "md5": "md5", "sha": "sha1", "sha1": "sha1", "sha-1": "sha1", "sha-224": "sha224",
            "sha-256": "sha256", "sha-384": "sha384", "sha-512": "sha512", "sha-512/224": "sha512_224",
            "sha-512/256": "sha512_256", "sha3-224": "sha3_224", "sha3-256": "sha3_256", "sha3-384": "sha3_384",
            "sha3-512": "sha3_512"}

# the types whose JDBC type is CHAR or VARCHAR (pgjdbc's TypeInfoCache; an enum is VARCHAR too), the only
# ones MaskStrings changes the values of
_CHARACTER_OIDS = {18, 19, 25, 1042, 1043}  # "char", name, text, bpchar, varchar
_UNKNOWN_LENGTH = 2**31 - 1  # pgjdbc's unknownLength


Converter = Callable[[Any], Any]


@dataclass(frozen=True)
class Rule:
    kind: str  # truncate, mask, hash
    patterns: tuple[re.Pattern, ...]
    length: int = 0  # truncate: the characters kept; mask: the asterisks
    digest: str = ""  # hash: hashlib's name
    salt: bytes = b""
    v2: bool = False  # hash: the value's UTF-8 bytes (v1: Java's serialized String)

    def matches(self, column_id: str) -> bool:
        return any(p.fullmatch(column_id) for p in self.patterns)

    def apply(self, schema: dict, pg_type: PgType) -> tuple[dict, Converter | None]:
        """The field's schema with the rule's parameter, and its value converter (None: values unchanged)."""
        length = column_length(pg_type)
        if self.kind == "truncate":
            if not (length < 0 or length > self.length):  # TruncateColumn.isTruncationPossible
                return schema, None
            return _with_parameter(schema, "truncateLength", str(self.length)), _truncator(self.length)
        schema = _with_parameter(schema, "masked", "true")  # MaskStrings.alterFieldSchema: whatever the type
        if not _is_character(pg_type):
            return schema, None
        if self.kind == "mask":
            mask = "*" * self.length
            return schema, lambda _value: mask
        return schema, self._hasher(length)

    def _hasher(self, length: int) -> Converter:
        """MaskStrings.HashValueConverter: the hex digest of salt + the value, cut to the column's length."""
        digest, salt, v2 = self.digest, self.salt, self.v2
        cut = _truncator(length) if length > 0 else None

        def convert(value: Any) -> Any:
            if value is None:
                return None
            data = str(value).encode() if v2 else java_serialized_string(str(value))
            hashed = hashlib.new(digest, salt + data).hexdigest()
            return cut(hashed) if cut is not None else hashed

        return convert


def column_mappers(props: dict[str, str]) -> list[Rule]:
    """The rules the config's keys make, in the order Debezium tries them; ConfigError for a hash algorithm
    Java's MessageDigest does not have (Debezium's task fails on it)."""
    keys = java_hashmap_order(list(props))
    rules: list[Rule] = []
    for pattern in (_TRUNCATE, _MASK, _HASH, _HASH_V2):
        for key in keys:
            found = pattern.fullmatch(key)
            if found is None:
                continue
            patterns = tuple(re.compile(java_regex(p.strip()).pattern, re.IGNORECASE)
                             for p in props[key].split(",") if p.strip())
            if pattern in (_TRUNCATE, _MASK):
                kind = "truncate" if pattern is _TRUNCATE else "mask"
                rules.append(Rule(kind, patterns, length=int(found.group(1))))
                continue
            algorithm, salt = found.group(1), found.group(2)
            digest = _DIGESTS.get(algorithm.lower())
            if digest is None:
                raise ConfigError(key, props[key], f"{algorithm} is not a MessageDigest algorithm klog has "
                                  f"({', '.join(sorted(k.upper() for k, v in _DIGESTS.items() if v))})")
            rules.append(Rule("hash", patterns, digest=digest, salt=salt.encode(), v2=pattern is _HASH_V2))
    return rules


def check_mapper_keys(props: dict[str, str]) -> None:
    """ConfigError for a mapper key whose regular expressions do not compile, or a bad algorithm."""
    for key in props:
        if KEY.fullmatch(key):
            for p in props[key].split(","):
                try:
                    java_regex(p.strip())
                except re.error as e:
                    raise ConfigError(key, props[key], f"not a regular expression ({e})") from None
    column_mappers(props)


def rule_for(rules: list[Rule], schema: str, table: str, column: str) -> Rule | None:
    column_id = f"{schema}.{table}.{column}"
    return next((r for r in rules if r.matches(column_id)), None)


def column_length(t: PgType) -> int:
    """The column's length as Debezium's Column.length() has it: pgjdbc's TypeInfoCache.getPrecision for
    the type (an array's: its element's), its display size where that is 0, except for numeric
    (PgDatabaseMetaData.getColumns)."""
    oid, typmod = (t.element.oid if t.element is not None else t.oid), t.typmod
    fixed = {21: 5, 23: 10, 26: 10, 20: 19, 700: 8, 701: 17, 18: 1, 16: 1}
    if oid in fixed:
        return fixed[oid]
    if oid == 1700:  # numeric
        return 0 if typmod == -1 else ((typmod - 4) & 0xFFFF0000) >> 16
    if oid in (1042, 1043):  # bpchar, varchar
        return _UNKNOWN_LENGTH if typmod == -1 else typmod - 4
    if oid == 1082:  # date
        return 13
    if oid in (1083, 1266, 1114, 1184):  # time, timetz, timestamp, timestamptz: their text's longest
        seconds = {-1: 7, 0: 0, 1: 3}.get(typmod, typmod + 1)
        return {1083: 8, 1266: 14, 1114: 22, 1184: 28}[oid] + seconds
    if oid == 1186:  # interval
        return 49
    if oid == 1560:  # bit
        return typmod
    if oid == 1562:  # varbit
        return _UNKNOWN_LENGTH if typmod == -1 else typmod
    return _UNKNOWN_LENGTH


def _is_character(t: PgType) -> bool:
    return t.element is None and (t.labels is not None or t.oid in _CHARACTER_OIDS)


def _with_parameter(schema: dict, name: str, value: str) -> dict:
    """Kafka's SchemaBuilder.parameter: added after the schema's own parameters (an enum's `allowed`)."""
    return {**schema, "parameters": {**schema.get("parameters", {}), name: value}}


def _truncator(length: int) -> Converter:
    """TruncateColumn.TruncatingValueConverter: a string cut to `length` Java chars (UTF-16 units; a pair
    it would split is dropped whole), bytes to `length` bytes; other values unchanged."""

    def convert(value: Any) -> Any:
        if isinstance(value, str) and len(value) > length:
            if value.isascii():
                return value[:length]
            units = value.encode("utf-16-le")[:2 * length]
            return units.decode("utf-16-le", errors="ignore")
        if isinstance(value, bytes) and len(value) > length:
            return value[:length]
        return value

    return convert


def java_serialized_string(text: str) -> bytes:
    """A String as java.io.ObjectOutputStream writes it alone (MaskStrings' v1 hashing input): the stream
    header, TC_STRING and a 2-byte length (TC_LONGSTRING and an 8-byte one past 65535 bytes), then the
    text in Java's modified UTF-8 (NUL as two bytes, each UTF-16 unit of a pair as three)."""
    if text.isascii() and "\0" not in text:
        data = text.encode()
    else:
        out = bytearray()
        units = text.encode("utf-16-be")
        for i in range(0, len(units), 2):
            unit = (units[i] << 8) | units[i + 1]
            if 0 < unit < 0x80:
                out.append(unit)
            elif unit < 0x800:
                out += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
            else:
                out += bytes((0xE0 | unit >> 12, 0x80 | (unit >> 6) & 0x3F, 0x80 | unit & 0x3F))
        data = bytes(out)
    head = b"\xac\xed\x00\x05" + (b"\x74" + len(data).to_bytes(2, "big") if len(data) <= 0xFFFF
                                  else b"\x7c" + len(data).to_bytes(8, "big"))
    return head + data

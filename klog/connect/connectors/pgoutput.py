"""PostgreSQL's pgoutput logical replication messages (protocol version 1), decoded.

The format is PostgreSQL's "Logical Replication Message Formats": Begin, Commit, Relation, Insert,
Update, Delete, Truncate, Message (Origin and Type are skipped). Column values arrive in their text output form,
the same form a `SELECT col::text` gives, so the snapshot and the stream share one value parser.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds: pgoutput's timestamps count from it
UNCHANGED_TOAST = object()  # a TOASTed value the update did not change (not sent)


@dataclass
class Column:
    name: str
    type_oid: int
    typmod: int
    key: bool


@dataclass
class Relation:
    oid: int
    schema: str
    table: str
    replica_identity: str  # d default, n nothing, f full, i index
    columns: list[Column]


@dataclass
class Begin:
    final_lsn: int
    commit_ts_us: int  # Unix microseconds
    xid: int


@dataclass
class Commit:
    lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass
class Change:
    kind: str  # I, U, D
    relation_oid: int
    old: list | None  # the key ('K') or whole old row ('O'), when sent
    new: list | None
    old_is_key: bool = False


@dataclass
class Truncate:
    relation_oids: list[int]


@dataclass
class Message:
    """A logical decoding message (pg_logical_emit_message; sent with the `messages` option, PostgreSQL 14+)."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> str:
        b = self.data[self.pos:self.pos + 1].decode()
        self.pos += 1
        return b

    def int(self, size: int) -> int:
        fmt = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}[size]
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def uint(self, size: int) -> int:
        fmt = {4: ">I", 8: ">Q"}[size]
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        s = self.data[self.pos:end].decode()
        self.pos = end + 1
        return s

    def tuple(self) -> list:
        out, self.pos = read_tuple(self.data, self.pos)
        return out


_U16 = struct.Struct(">H").unpack_from
_I32 = struct.Struct(">i").unpack_from
_CHANGE_HEAD = struct.Struct(">IcH").unpack_from  # relation oid, 'N'/'K'/'O', the tuple's column count


def read_tuple(data: bytes, pos: int, count: int | None = None) -> tuple[list, int]:
    """TupleData at `pos` (its column count read there unless given): the text values (None for NULL,
    UNCHANGED_TOAST for an unchanged TOASTed one) and the position after it. The hot loop of the
    stream: one slice and decode per value, no per-field method calls."""
    if count is None:
        (count,) = _U16(data, pos)
        pos += 2
    out: list = []
    append = out.append
    for _ in range(count):
        kind = data[pos]
        if kind == 116:  # 't' text (and 'b' binary, not asked for)
            (length,) = _I32(data, pos + 1)
            pos += 5
            append(data[pos:pos + length].decode())
            pos += length
        elif kind == 110:  # 'n'
            append(None)
            pos += 1
        elif kind == 117:  # 'u'
            append(UNCHANGED_TOAST)
            pos += 1
        else:
            (length,) = _I32(data, pos + 1)
            pos += 5
            append(data[pos:pos + length].decode())
            pos += length
    return out, pos


INSERT_TUPLE_AT = 8  # 'I', the relation oid, 'N', the column count: the values start here


def insert_head(payload: bytes) -> tuple[int, int]:
    """An Insert message's relation oid and column count."""
    oid, _, count = _CHANGE_HEAD(payload, 1)
    return oid, count


def decode(payload: bytes) -> object | None:
    kind = payload[:1]
    if kind == b"I":  # the commonest message, without the Reader
        oid, count = insert_head(payload)
        return Change("I", oid, None, read_tuple(payload, INSERT_TUPLE_AT, count)[0])
    r = Reader(payload)
    kind = r.byte()
    if kind == "B":
        return Begin(r.uint(8), r.int(8) + PG_EPOCH_US, r.uint(4))
    if kind == "C":
        r.int(1)
        return Commit(r.uint(8), r.uint(8), r.int(8) + PG_EPOCH_US)
    if kind == "R":
        oid, schema, table, identity = r.uint(4), r.string(), r.string(), r.byte()
        columns = []
        for _ in range(r.int(2)):
            flags = r.int(1)
            columns.append(Column(r.string(), r.uint(4), r.int(4), bool(flags & 1)))
        return Relation(oid, schema, table, identity, columns)
    if kind == "I":
        oid = r.uint(4)
        r.byte()  # 'N'
        return Change("I", oid, None, r.tuple())
    if kind == "U":
        oid = r.uint(4)
        marker = r.byte()
        old = None
        old_is_key = marker == "K"
        if marker in ("K", "O"):
            old = r.tuple()
            r.byte()  # 'N'
        return Change("U", oid, old, r.tuple(), old_is_key)
    if kind == "D":
        oid = r.uint(4)
        marker = r.byte()
        return Change("D", oid, r.tuple(), None, marker == "K")
    if kind == "T":
        count = r.int(4)
        r.int(1)
        return Truncate([r.uint(4) for _ in range(count)])
    if kind == "M":
        transactional, lsn, prefix = r.int(1) == 1, r.uint(8), r.string()
        length = r.int(4)
        return Message(transactional, lsn, prefix, r.data[r.pos:r.pos + length])
    return None  # Origin, Type: nothing to emit


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)

"""The Fetch answer, laid out by hand (the one place klog writes a Kafka body itself besides the
Produce answer): each partition's records go from the segment file to the socket with os.sendfile,
so only their length must be known up front. The layout is Kafka's FetchResponse v0-v17 as kio
writes it (tests/server/test_serve_fetch_versions.py decodes it with kio's reader at every
version; tests/server/test_serve_fetch_response.py checks the one-partition answer byte for byte
against the general one); the fields klog leaves out are the tagged ones (v12+: diverging epoch,
current leader, snapshot id; v16: node endpoints), absent as in kio's default encoding.

`encode_one`: the answer of one partition of one topic with no aborted transactions and its bytes
read (or none), the usual answer to a consumer's Fetch, whose topic part is laid out once per
(version, topic) and whose partition part is one pack.
"""

from __future__ import annotations

import struct
from typing import Any

from klog.protocol.framing import FileRange, RawBody
from klog.store.codec import encode_uvarint as _uvarint

FIRST_FLEXIBLE = 12
_PARTITION_V5 = struct.Struct(">ihqqq")  # partition index, error code, high watermark, last stable offset, log start
_PARTITION_V4 = struct.Struct(">ihqq")  # partition index, error code, high watermark, last stable offset


def encode(response_type: type, version: int, answers: list[Any], error: int = 0, session_id: int = 0) -> RawBody:
    """The answer of `answers` (fetch.TopicAnswer: each topic's name or id and its partitions' answers);
    v7+: the top-level `error` and fetch `session_id` (0: none)."""
    flexible = version >= FIRST_FLEXIBLE
    parts: list[bytes | FileRange] = []
    head = bytearray(struct.pack(">i", 0) if version >= 1 else b"")  # throttle_time_ms (v1+)
    if version >= 7:
        head += struct.pack(">hi", error, session_id)
    head += _uvarint(len(answers) + 1) if flexible else struct.pack(">i", len(answers))
    buf = head
    replica = struct.pack(">i", -1) if version >= 11 else b""  # preferred read replica (v11+): none
    no_aborted = (b"\1" if flexible else b"\0\0\0\0") + replica  # an empty aborted list (compact: n + 1)
    for t in answers:
        if version >= 13:
            buf += t.topic_id.bytes
        else:
            name = t.name.encode()
            buf += (_uvarint(len(name) + 1) if flexible else struct.pack(">h", len(name))) + name
        buf += _uvarint(len(t.partitions) + 1) if flexible else struct.pack(">i", len(t.partitions))
        for p in t.partitions:
            if version >= 5:  # (index, error, high watermark, last stable offset, log start: one pack)
                buf += _PARTITION_V5.pack(p.partition, int(p.error), p.high_watermark, p.upper,  # (the LSO)
                                          p.log_start_offset)
            elif version == 4:
                buf += _PARTITION_V4.pack(p.partition, int(p.error), p.high_watermark, p.upper)  # (the LSO)
            else:
                buf += struct.pack(">ihq", p.partition, int(p.error), p.high_watermark)
            if version >= 4 and not p.aborted:
                buf += no_aborted  # (and the preferred read replica, v11+)
            elif version >= 4:  # transactions' fields
                buf += _uvarint(len(p.aborted) + 1) if flexible else struct.pack(">i", len(p.aborted))
                for producer_id, first_offset in p.aborted:
                    buf += struct.pack(">qq", producer_id, first_offset)
                    if flexible:
                        buf += b"\0"  # the aborted transaction's tagged fields
                buf += replica
            data = p.data  # (PartitionAnswer.size, without a call for the usual answer)
            size = len(data) if data is not None else p.size
            if not flexible:
                buf += struct.pack(">i", size)
            elif size < 0x3FFF:  # (the usual: a two-byte varint, without a call)
                buf += bytes((size + 1,)) if size < 0x7F else bytes(((size + 1) & 0x7F | 0x80, (size + 1) >> 7))
            else:
                buf += _uvarint(size + 1)
            if size and data is not None:
                buf += data
            elif size and p.converted is not None:
                buf += p.converted
            elif size:
                parts.append(bytes(buf))
                parts.append(FileRange(p.range.fd, p.range.position, size, owner=p.range))
                buf = bytearray()
            if flexible:
                buf += b"\0"  # the partition's tagged fields
        if flexible:
            buf += b"\0"  # the topic's tagged fields
    if flexible:
        buf += b"\0"  # the response's tagged fields
    parts.append(bytes(buf))
    return RawBody(response_type, parts)


_I32 = struct.Struct(">i")
_one_heads: dict[tuple[int, Any], bytes] = {}  # (version, topic name or id) -> the answer's bytes before its partition
_ONE_HEADS_MAX = 4096
# per version: what follows a partition's offsets when it has no aborted transactions (an empty
# list, then the preferred read replica, v11+: none)
_NO_ABORTED = {v: (b"\1" if v >= FIRST_FLEXIBLE else b"\0\0\0\0") + (_I32.pack(-1) if v >= 11 else b"")
               for v in range(4, 18)}


def encode_one(response_type: type, version: int, topic: Any, p: Any, session_id: int = 0) -> RawBody:
    """encode()'s answer for one topic (fetch.TopicAnswer) of one partition `p` (a
    fetch.PartitionAnswer, Fetch v4+) with no aborted transactions and no byte range to send:
    its bytes read (`data`), or none; v7+: in fetch session `session_id` (0: none)."""
    key = topic.topic_id if version >= 13 else topic.name
    head = _one_heads.get((version, key))
    if head is None:
        if len(_one_heads) >= _ONE_HEADS_MAX:  # (topics named by clients: bounded)
            _one_heads.clear()
        whole = encode(response_type, version, [_Empty(topic)]).parts[0]
        # (the empty topic's bytes: its partition count says 0, then its tags and the response's)
        head = whole[:len(whole) - (3 if version >= FIRST_FLEXIBLE else 4)]
        head = _one_heads[(version, key)] = head + (b"\2" if version >= FIRST_FLEXIBLE else b"\0\0\0\1")
    if session_id:  # (v7+: throttle time, error code, then the session id)
        head = head[:6] + _I32.pack(session_id) + head[10:]
    data = p.data
    if version >= 5:
        entry = _PARTITION_V5.pack(p.partition, p.error, p.high_watermark, p.upper, p.log_start_offset)
    else:
        entry = _PARTITION_V4.pack(p.partition, p.error, p.high_watermark, p.upper)
    entry += _NO_ABORTED[version]
    size = len(data) if data is not None else 0
    if version < FIRST_FLEXIBLE:
        entry += _I32.pack(size)
        return RawBody(response_type, [head + entry + data if size else head + entry])
    # the records' size (compact: n + 1), then the partition's, the topic's and the response's tags
    entry += bytes((size + 1,)) if size < 0x7F else _uvarint(size + 1)
    return RawBody(response_type, [head + entry + data + b"\0\0\0" if size else head + entry + b"\0\0\0"])


class _Empty:
    """A topic with no partitions: encode()'s bytes of it are encode_one's head."""

    __slots__ = ("name", "topic_id", "partitions")

    def __init__(self, topic: Any) -> None:
        self.name, self.topic_id, self.partitions = topic.name, topic.topic_id, ()

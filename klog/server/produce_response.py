"""The Produce answer, laid out by hand as Fetch's is: kio's generated writer takes ~20 us per
partition entry (a type check per field), which made the answer to one Produce of 19,000 entries
cost the server ~0.4 s of CPU, most of what a hostile client could make it spend per request. The
layout is Kafka's ProduceResponse v0-v11 (tests/server/test_serve_produce_response.py checks it
byte for byte against kio's writer at every version); the fields klog leaves out are the tagged
ones (v10+ leader hints), absent as in kio's default encoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from klog.protocol.framing import RawBody
from klog.server.answer_bytes import I32, count_bytes, string_bytes

FIRST_FLEXIBLE = 9
_ENTRY = struct.Struct(">ihq")  # index, error code, base offset
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class PartitionResult:
    index: int
    error: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (batch index, message): v8+
    error_message: str | None = None  # v8+




class ProduceAnswer:
    """The response body of one `version`, written entry by entry (the handler yields to the other
    connections between slices of entries); throttle time 0 (v1+), patched by
    throttle.with_throttle where `throttle_at` says."""

    def __init__(self, version: int, topics: int) -> None:
        self.version = version
        self.flexible = flexible = version >= FIRST_FLEXIBLE
        self.buf = bytearray(count_bytes(topics, flexible))
        # an entry without record errors or a message ends in the same bytes whatever its offsets:
        # built once per answer (the common case, and every entry of a hostile request's answer)
        self._plain_tail = ((count_bytes(0, flexible) + string_bytes(None, flexible)) if version >= 8 else b"") + \
            (b"\0" if flexible else b"")
        self._open_topic = False

    def topic(self, name: str, partitions: int) -> None:
        self._end_topic()
        self.buf += string_bytes(name, self.flexible) + count_bytes(partitions, self.flexible)
        self._open_topic = True

    def _end_topic(self) -> None:
        if self._open_topic and self.flexible:
            self.buf += b"\0"  # the topic's tagged fields
        self._open_topic = False

    def partition(self, p: PartitionResult) -> None:
        buf, version, flexible = self.buf, self.version, self.flexible
        buf += _ENTRY.pack(p.index, p.error, p.base_offset)
        if version >= 2:
            buf += _I64.pack(p.log_append_time_ms)
        if version >= 5:
            buf += _I64.pack(p.log_start_offset)
        if not p.record_errors and p.error_message is None:
            buf += self._plain_tail
            return
        if version >= 8:
            buf += count_bytes(len(p.record_errors), flexible)
            for batch_index, message in p.record_errors:
                buf += I32.pack(batch_index) + string_bytes(message, flexible) + (b"\0" if flexible else b"")
            buf += string_bytes(p.error_message, flexible)
        if flexible:
            buf += b"\0"  # the partition's tagged fields

    def finish(self, response_type: type) -> RawBody:
        self._end_topic()
        buf = self.buf
        throttle_at = None
        if self.version >= 1:
            throttle_at = len(buf)
            buf += b"\0\0\0\0"
        if self.flexible:
            buf += b"\0"  # the response's tagged fields
        return RawBody(response_type, [bytes(buf)], throttle_at=throttle_at)


_single_heads: dict[tuple[int, str], bytes] = {}  # (version, topic) -> an answer's bytes before its entry
_SINGLE_HEADS_MAX = 4096


def single_answer(version: int, topic: str, index: int, base_offset: int, log_append_time_ms: int,
                  log_start_offset: int, response_type: type) -> RawBody:
    """The answer of a Produce of one partition that appended (no error, no message): the bytes
    ProduceAnswer writes for it, its topic's part laid out once per (version, topic)."""
    head = _single_heads.get((version, topic))
    if head is None:
        if len(_single_heads) >= _SINGLE_HEADS_MAX:  # (topics named by clients: bounded)
            _single_heads.clear()
        answer = ProduceAnswer(version, 1)
        answer.topic(topic, 1)
        head = _single_heads[(version, topic)] = bytes(answer.buf)
    flexible = version >= FIRST_FLEXIBLE
    entry = _ENTRY.pack(index, 0, base_offset)
    if version >= 2:
        entry += _I64.pack(log_append_time_ms)
    if version >= 5:
        entry += _I64.pack(log_start_offset)
    if version >= 8:
        entry += b"\1\0" if flexible else b"\0\0\0\0\xff\xff"  # no record errors, no message
    if flexible:
        entry += b"\0\0"  # the partition's and the topic's tagged fields
    if version < 1:
        return RawBody(response_type, [head + entry])
    # throttle time 0 (patched by throttle.with_throttle at throttle_at), then the response's tagged fields
    return RawBody(response_type, [head + entry + (b"\0\0\0\0\0" if flexible else b"\0\0\0\0")],
                   throttle_at=len(head) + len(entry))

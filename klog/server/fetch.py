"""Fetch: long polling, and zero-copy answers.

The response is laid out by hand (the one place klog writes a Kafka body itself) because each
partition's records go from the segment file to the socket with os.sendfile: only their length
must be known up front. Everything else in the request is read with kio.

Waiting: a fetch that has less than min_bytes waits up to max_wait_ms, woken at once by appends
made through this server and, for appends by other processes (`klog produce`), by re-reading the
partitions' high watermarks every POLL_S (a state-file read each: no busy loop).

Fetch sessions (KIP-227) are declined as Kafka does when its cache is full: session id 0 in the
answer, so clients send full fetch requests.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any

from klog.errors import CorruptLogError, KlogError, UnknownPartitionError, UnknownTopicError
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.server.framing import FileRange, RawBody
from klog.server.kafka import E, response_for

FETCH = 1
POLL_S = 0.02
MAX_VERSION = 12


@dataclass
class PartitionAnswer:
    partition: int
    error: E = E.none
    high_watermark: int = -1
    log_start_offset: int = -1
    range: Any = None  # klog.store.log.ByteRange

    @property
    def size(self) -> int:
        return self.range.length if self.range is not None else 0


@dataclass
class TopicAnswer:
    name: str
    partitions: list[PartitionAnswer] = field(default_factory=list)


def _read_partition(ctx: RequestContext, topic: str, p: Any, budget: int) -> PartitionAnswer:
    """One partition's answer: its offsets and where its bytes are (lock-free, any process)."""
    index = int(p.partition)
    answer = PartitionAnswer(index)
    if not ctx.authorize("READ", "TOPIC", topic):
        answer.error = E.topic_authorization_failed
        return answer
    try:
        part = ctx.server.appender.partition(topic, index)
        snap = part.snapshot()
        hw = snap.high_watermark
        start = part.log_start_offset()
    except (UnknownTopicError, UnknownPartitionError):
        ctx.store.forget_topic_cache(topic)
        answer.error = E.unknown_topic_or_partition
        return answer
    except (KlogError, OSError) as e:
        ctx.log.warning("fetch %s-%d: %s", topic, index, e)
        answer.error = E.kafka_storage_error
        return answer
    answer.high_watermark, answer.log_start_offset = hw, start
    offset = int(p.fetch_offset)
    if offset < start or offset > hw:
        answer.error = E.offset_out_of_range
        return answer
    if offset == hw or budget <= 0:
        return answer
    try:
        answer.range = part.byte_range(offset, min(int(p.partition_max_bytes), budget), hw)
    except CorruptLogError as e:
        ctx.log.warning("fetch %s-%d at %d: %s", topic, index, offset, e)
        answer.error = E.corrupt_message
    except OSError as e:
        ctx.log.warning("fetch %s-%d at %d: %s", topic, index, offset, e)
        answer.error = E.kafka_storage_error
    return answer


def _collect(ctx: RequestContext, request: Any) -> list[TopicAnswer]:
    budget = int(request.max_bytes) if hasattr(request, "max_bytes") else 1 << 30
    out = []
    for t in request.topics:
        answer = TopicAnswer(str(t.topic))
        for p in t.partitions:
            pa = _read_partition(ctx, answer.name, p, budget)
            budget -= pa.size
            answer.partitions.append(pa)
        out.append(answer)
    return out


def _moved(ctx: RequestContext, marks: list[tuple[str, int, int]]) -> bool:
    """Has any of these partitions' high watermark changed (or become unreadable)?"""
    for topic, index, hw in marks:
        try:
            if ctx.server.appender.partition(topic, index).snapshot().high_watermark != hw:
                return True
        except (KlogError, OSError):
            return True
    return False


def _close(answers: list[TopicAnswer]) -> None:
    for t in answers:
        for p in t.partitions:
            if p.range is not None:
                p.range.close()


@register(FETCH, 4, MAX_VERSION)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    mod = response_for(request)
    if version >= 7 and int(request.session_id) != 0:
        # we never hand out a session, so a client naming one is out of date with us
        return _encode(mod, version, [], E.fetch_session_id_not_found)
    wait_s = max(0, request.max_wait.total_seconds())
    deadline = time.monotonic() + wait_s
    min_bytes = max(1, int(request.min_bytes))
    while True:
        answers = await ctx.run_blocking(_collect, ctx, request)
        total = sum(p.size for t in answers for p in t.partitions)
        errors = any(p.error != E.none for t in answers for p in t.partitions)
        if total >= min_bytes or errors or deadline <= time.monotonic() or ctx.server.stopping:
            break
        _close(answers)
        # wait for a high watermark to move: woken by this server's appends, and a state-file read
        # per partition every POLL_S for other processes' (the full answer is rebuilt only then)
        marks = [(t.name, p.partition, p.high_watermark) for t in answers for p in t.partitions]
        while not ctx.server.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await ctx.server.wait_appended(min(left, POLL_S))
            if _moved(ctx, marks):
                break
    return _encode(mod, version, answers, E.none)


# -- the response, by hand -------------------------------------------------------------------
def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode(mod: Any, version: int, answers: list[TopicAnswer], error: E) -> RawBody:
    flexible = version >= 12
    parts: list[bytes | FileRange] = []
    head = bytearray(struct.pack(">i", 0))  # throttle_time_ms
    if version >= 7:
        head += struct.pack(">hi", int(error), 0)  # error code, session id 0: no session
    head += _uvarint(len(answers) + 1) if flexible else struct.pack(">i", len(answers))
    buf = head
    for t in answers:
        name = t.name.encode()
        buf += (_uvarint(len(name) + 1) if flexible else struct.pack(">h", len(name))) + name
        buf += _uvarint(len(t.partitions) + 1) if flexible else struct.pack(">i", len(t.partitions))
        for p in t.partitions:
            buf += struct.pack(">ihq", p.partition, int(p.error), p.high_watermark)
            buf += struct.pack(">q", p.high_watermark)  # last stable offset: no transactions
            if version >= 5:
                buf += struct.pack(">q", p.log_start_offset)
            buf += _uvarint(1) if flexible else struct.pack(">i", 0)  # aborted transactions: none
            if version >= 11:
                buf += struct.pack(">i", -1)  # preferred read replica: none
            size = p.size
            buf += _uvarint(size + 1) if flexible else struct.pack(">i", size)
            if size:
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
    return RawBody(mod.FetchResponse, parts)

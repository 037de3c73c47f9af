"""Kafka's framing: a 4-byte big-endian size, then a request header and body (kio types).

Only the framing is hand-written; headers and bodies are kio's generated readers and writers.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import typing
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import InvalidUnicode

from klog.errors import FrameError
from klog.protocol.schemas import request_schema as load_request_schema
from klog.protocol.walk import TooManyEntries, Truncated, is_optional, read_uvarint

SIZE = struct.Struct(">i")
PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: the same in every header version
_HEADER = struct.Struct(">i")  # a response header's correlation id

_read_v1 = entity_reader(RequestHeaderV1)
_read_v2 = entity_reader(RequestHeaderV2)
_readers: dict[type, Any] = {}
_writers: dict[type, Any] = {}


class InvalidUtf8(FrameError):
    """A string of the request is not valid UTF-8 (kio refuses it; Kafka's readers replace what is
    malformed: with_valid_strings, with_valid_client_id)."""


class RequestPrefix(NamedTuple):  # (a tuple: read once per request, ~4x cheaper than a frozen dataclass)
    api_key: int
    api_version: int
    correlation_id: int


_make_prefix = RequestPrefix._make


def read_prefix(frame: bytes) -> RequestPrefix:
    if len(frame) < PREFIX.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    return _make_prefix(PREFIX.unpack_from(frame))


def parse_header(frame: bytes, prefix: RequestPrefix, tags_max: int | None = None) -> tuple[str | None, int, type]:
    """(client id, where the body starts, the body's kio type) of a supported request's frame;
    TooManyEntries for a header of more than `tags_max` tagged fields (given)."""
    schema = load_request_schema(prefix.api_key, prefix.api_version)
    header_reader = _read_v2 if schema.__flexible__ else _read_v1
    try:
        header, used = header_reader(frame, 0)
    except InvalidUnicode:
        raise InvalidUtf8(f"the client id of api key {prefix.api_key} v{prefix.api_version} is not UTF-8") from None
    except Exception as e:  # kio's DecodeError family
        # tagged fields a header v2 does not know (none are known) are skipped, as Kafka skips them
        without = _without_header_tags(frame, tags_max) if schema.__flexible__ and "tagged field" in str(e) else None
        if without is None:
            raise FrameError(f"cannot parse the header of api key {prefix.api_key} v{prefix.api_version}: {e}") \
                from None
        header, used = header_reader(without, 0)
        used += len(frame) - len(without)  # (where the body starts in `frame`)
    return header.client_id, used, schema


def _without_header_tags(frame: bytes, tags_max: int | None) -> bytes | None:
    """A v2 request header's frame with its tagged fields dropped; None if they cannot be read;
    TooManyEntries past `tags_max` of them (a walk of ~0.4 us each: 20,000 fit in 64 KiB)."""
    try:
        (n,) = struct.unpack_from(">h", frame, PREFIX.size)  # the client id: a non-compact string
        pos = start = PREFIX.size + 2 + max(n, 0)
        end = len(frame)
        count, pos = read_uvarint(frame, pos, end)
        if tags_max is not None and count > tags_max:
            raise TooManyEntries
        for _ in range(count):
            _, pos = read_uvarint(frame, pos, end)
            size, pos = read_uvarint(frame, pos, end)
            pos += size
    except (struct.error, IndexError, Truncated):
        return None
    return frame[:start] + b"\0" + frame[pos:] if pos <= len(frame) else None


def parse_request(frame: bytes, prefix: RequestPrefix) -> tuple[str | None, Any]:
    """(client id, request body) of a frame whose (api key, version) is known to be supported."""
    client_id, used, schema = parse_header(frame, prefix)
    return client_id, parse_body(frame, used, schema, prefix.api_version)


def parse_body(frame: bytes, used: int, schema: type, api_version: int) -> Any:
    """The request body of `frame` from `used` on, as parse_header found it (header read once)."""
    try:
        reader = _readers.get(schema)
        if reader is None:
            reader = _readers[schema] = entity_reader(schema)
        body, _ = reader(frame, used)
    except InvalidUnicode as e:
        raise InvalidUtf8(f"cannot parse {schema.__name__} v{api_version}: {e}") from None
    except Exception as e:  # kio raises its DecodeError family, and ValueError on bad enums/utf-8
        raise FrameError(f"cannot parse {schema.__name__} v{api_version}: {e}") from None
    # trailing bytes are ignored, as Kafka's generated readers do (librdkafka's Metadata v12 has some)
    return body


def with_valid_client_id(frame: bytes) -> bytes | None:
    """`frame` with its header's client id (a non-compact string in every header version) decoded as
    Java decodes it, malformed sequences replaced by U+FFFD (Kafka's header reader); None if it
    cannot be read or was valid."""
    try:
        (n,) = struct.unpack_from(">h", frame, PREFIX.size)
    except struct.error:
        return None
    start = PREFIX.size + 2
    if n <= 0 or start + n > len(frame):
        return None
    raw = frame[start:start + n]
    text = bytes(raw).decode("utf-8", "replace").encode()
    if text == raw or len(text) > 0x7FFF:
        return None
    return frame[:PREFIX.size] + struct.pack(">h", len(text)) + text + frame[start + n:]


def client_id_of(frame: bytes) -> str | None:
    """The client id of a frame we cannot parse further (it sits at the same place in v1 and v2),
    printable and short enough for a log line."""
    try:
        (n,) = struct.unpack_from(">h", frame, PREFIX.size)
    except struct.error:
        return None
    if n < 0:
        return None
    return printable(frame[PREFIX.size + 2:PREFIX.size + 2 + min(n, 64)].decode("utf-8", "replace"))


def printable(text: str | None) -> str | None:
    """Text from a client, safe for one log line: control characters escaped, at most 64 chars."""
    if text is None:
        return None
    text = text[:64]
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def header_bytes(correlation_id: int, response_type: type) -> bytes:
    """The response header: v1 (tagged fields) for flexible responses, except ApiVersions (always v0).
    Packed here, not by kio's writer: it is a correlation id and, in v1, an empty tagged-field count
    (the same bytes, ~15 us less per response)."""
    if response_type.__header_schema__ is ResponseHeaderV1:
        return _HEADER.pack(correlation_id) + b"\0"
    return _HEADER.pack(correlation_id)


def _writer(schema: type) -> Any:
    writer = _writers.get(schema)
    if writer is None:
        writer = _writers[schema] = entity_writer(schema)
    return writer


def encode_body(response: Any) -> bytes:
    """A response body alone (no size, no header): for an answer encoded once and sent many times."""
    buf = io.BytesIO()
    _writer(type(response))(buf, response)
    return buf.getvalue()


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A whole frame: size, response header, body."""
    schema = type(response)
    writer = _writer(schema)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(header_bytes(correlation_id, schema))
    writer(buf, response)
    frame = buf.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - 4)
    out = bytes(frame)
    del frame
    return out


# an entity class's fields that hold arrays or entities, as (name, kind): _LEAVES an array whose
# items hold no array (primitives, or entities of primitives: counted, not looked into), _NESTED an
# array of entities holding arrays, _STRUCT an entity
_LEAVES, _NESTED, _STRUCT = 0, 1, 2
_nested: dict[type, tuple[tuple[str, int], ...]] = {}


def _nested_fields(cls: type) -> tuple[tuple[str, int], ...]:
    found = _nested.get(cls)
    if found is not None:
        return found
    _nested[cls] = ()  # (a schema's entities nest no cycle; this only ends one)
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = _not_none(hints[f.name])
        if typing.get_origin(hint) is tuple:
            item = _not_none(typing.get_args(hint)[0])
            nested = dataclasses.is_dataclass(item) and bool(_nested_fields(item))
            out.append((f.name, _NESTED if nested else _LEAVES))
        elif dataclasses.is_dataclass(hint):
            out.append((f.name, _STRUCT))
    _nested[cls] = result = tuple(out)
    return result


def _not_none(hint: Any) -> Any:
    return next(a for a in typing.get_args(hint) if a is not type(None)) if is_optional(hint) else hint


def entries_past(response: Any, limit: int) -> bool:
    """Whether the kio entity `response` holds more than `limit` array entries (every array, nested
    ones included); counts no further. kio's writer takes ~1-20 us an entry: a few bytes of request
    (DescribeLogDirs of all topics, a group's every offset) may ask for an answer of many."""
    count, stack = 0, [response]
    while stack:
        entity = stack.pop()
        for name, kind in _nested_fields(entity.__class__):
            value = getattr(entity, name)
            if value is None:
                continue
            if kind == _STRUCT:
                stack.append(value)
                continue
            count += len(value)
            if count > limit:
                return True
            if kind == _NESTED:
                stack.extend(value)
    return False


class _FdView:
    """What loop.sendfile needs of a file: its descriptor (the segment's shared read fd: sendfile
    takes an explicit offset, and the seek asyncio does afterwards is harmless to pread users)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, *args: object) -> int:
        return 0


@dataclass
class FileRange:
    fd: int
    offset: int
    count: int
    owner: Any = None  # closed once sent (or not): a klog.store.log.ByteRange pinning the segment's fd


@dataclass
class RawBody:
    """A response body already laid out as bytes and file ranges (the zero-copy fetch path):
    the ranges go from the segment files to the socket with os.sendfile."""

    response_type: type
    parts: list[bytes | FileRange]
    throttle_at: int | None = None  # where in parts[0] the int32 throttle time is, if not at its start

    def size(self) -> int:
        return sum(len(p) if isinstance(p, bytes) else p.count for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileRange) and part.owner is not None:
                part.owner.close()

    async def send(self, writer: Any, correlation_id: int) -> None:
        import asyncio

        parts = self.parts
        # bytes only (Produce, small fetches; usually one piece): one write, a drain only when the
        # transport could not send it all (as write_frame, without its coroutine)
        if len(parts) == 1 and parts[0].__class__ is bytes or not any(isinstance(p, FileRange) for p in parts):
            header = header_bytes(correlation_id, self.response_type)
            writer.write(b"".join([SIZE.pack(len(header) + sum(map(len, parts))), header, *parts]))
            if writer.transport.get_write_buffer_size():
                await writer.drain()
            return
        try:
            header = header_bytes(correlation_id, self.response_type)
            # bytes between two file ranges go out in one write (one send call, not one per part)
            pending = [SIZE.pack(len(header) + self.size()), header]
            loop = asyncio.get_running_loop()
            for part in self.parts:
                if isinstance(part, bytes):
                    pending.append(part)
                    continue
                if not part.count:
                    continue
                writer.write(b"".join(pending))
                pending = []
                if writer.get_extra_info("ssl_object") is not None:
                    await _send_through_tls(writer, part)  # TLS encrypts in this process: no sendfile
                else:
                    await writer.drain()
                    sent = await loop.sendfile(writer.transport, _FdView(part.fd), part.offset, part.count)
                    if sent != part.count:  # the file shrank under us (retention): the frame is broken
                        raise ConnectionError(f"sendfile sent {sent} of {part.count} bytes")
            writer.write(b"".join(pending))
            await writer.drain()
        finally:
            self.close()


async def write_frame(writer: Any, data: bytes) -> None:
    """`data` to the connection, waiting (drain) only when the transport could not send it all at
    once: the usual small answer leaves nothing buffered, and a drain costs two coroutines for nothing
    (a connection lost meanwhile ends at the request loop's next read, as after a drain)."""
    writer.write(data)
    if writer.transport.get_write_buffer_size():
        await writer.drain()


TLS_CHUNK_BYTES = 1 << 20


async def _send_through_tls(writer: Any, part: FileRange) -> None:
    """A file range to a TLS connection: read and write in bounded chunks. The reads run in a
    thread: a range no longer in the page cache would otherwise stop the event loop, and every
    other connection with it, for the disk's time."""
    import asyncio
    import os

    loop = asyncio.get_running_loop()
    done = 0
    while done < part.count:
        chunk = await loop.run_in_executor(None, os.pread, part.fd, min(TLS_CHUNK_BYTES, part.count - done),
                                           part.offset + done)
        if not chunk:  # the file shrank under us (retention): the frame is broken
            raise ConnectionError(f"read {done} of {part.count} bytes")
        writer.write(chunk)
        done += len(chunk)
        await writer.drain()

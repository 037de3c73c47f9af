"""A structure-aware fuzzer for `klog serve` (tests/server/test_serve_fuzz.py runs it).

Requests are built from klog's own schema types (klog/protocol) for every API key and version the
server advertises, with field values drawn from plausible ones or from hostile ones (lengths and
counts at -1, 0, INT32_MAX; names with odd characters; nulls where the schema has none; duplicate
entries; negative timeouts), then mutated as bytes (truncated, bytes flipped or replaced, lengths
and counts overwritten). Each goes to a live `klog serve` subprocess (`ServeProcess`) on its own
connection; the server must answer it or close that connection, log at most one line for it, and
keep serving: a fresh connection gets ApiVersions and Metadata answered promptly, its memory stays
bounded, stderr holds no traceback, the process does not exit."""

from __future__ import annotations

import dataclasses
import datetime
import io
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer
from kio.static.primitive import Records, f64, i8, i16, i32, i32Timedelta, i64, i64Timedelta

from klog.protocol.schemas import request_schema
from tests.serve_helpers import batch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NULL_MARK = "\x01klog-null\x01"  # a string replaced by a null in the encoded frame (nulls where not nullable)
TOPIC = "fz"  # created with two partitions before the server starts

_HOSTILE_INTS = {
    i8: [-128, -1, 0, 1, 127],
    i16: [-32768, -1, 0, 1, 2, 32767],
    i32: [-2**31, -1, 0, 1, 2, 1000, 1 << 20, 2**31 - 1],
    i64: [-2**63, -1, 0, 1, 2**62, 2**63 - 1],
}
_PLAIN_INTS = {i8: [0, 1], i16: [0, 1, -1], i32: [0, 1, -1], i64: [0, -1, 1]}
_HOSTILE_STRINGS = ["", TOPIC, "g", "a" * 249, "b" * 300, "x/../y", "\u00e9\u00e9", "\x00", "fz\nklog: forged line",
                    " ", ".", "..", "__consumer_offsets", "__transaction_state", "fz" * 2000, NULL_MARK, "*",
                    "User:*", "t"]
_PLAIN_STRINGS = [TOPIC, "g", "t", "c", "consumer", "range"]


# -- building requests ----------------------------------------------------------------------------
class RequestMaker:
    """Requests of a type with every field filled; `hostile` is the chance a value is a hostile one."""

    def __init__(self, rng: random.Random, hostile: float) -> None:
        self.rng = rng
        self.hostile = hostile

    def _bad(self) -> bool:
        return self.rng.random() < self.hostile

    def entity(self, cls: type) -> Any:
        hints = _hints(cls)
        return cls(**{f.name: self.value(hints[f.name], f.metadata.get("kafka_type")) for f in dataclasses.fields(cls)})

    def value(self, hint: Any, kafka_type: str | None) -> Any:  # noqa: C901 - one branch per kind of field
        rng = self.rng
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            if rng.random() < (0.5 if self._bad() else 0.1):
                return None
            return self.value(next(a for a in typing.get_args(hint) if a is not type(None)), kafka_type)
        if typing.get_origin(hint) is tuple:
            item = typing.get_args(hint)[0]
            items = [self.value(item, kafka_type) for _ in range(rng.choice([0, 1, 1, 2, 3]) if self._bad() else 1)]
            if items and self._bad():  # the same topic, partition, member... named again
                items += [items[0]] * rng.randint(1, 3)
            return tuple(items)
        if dataclasses.is_dataclass(hint):
            return self.entity(hint)
        if hint is bool:
            return rng.random() < 0.5
        for base in (i8, i16, i32, i64):
            if isinstance(hint, type) and issubclass(hint, base):
                return hint(rng.choice(_HOSTILE_INTS[base] if self._bad() else _PLAIN_INTS[base]))
        if hint is i32Timedelta:
            ms = rng.choice([-2**31, -1, 0, 2**31 - 1, 1]) if self._bad() else rng.choice([100, 1000, 30000])
            return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))
        if hint is i64Timedelta:
            ms = rng.choice([-1, 0, 2**40, -2**40]) if self._bad() else 1000
            return i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
        if hint is f64:
            return f64(rng.choice([0.0, -1.0, 1e308]) if self._bad() else 1.0)
        if hint is uuid.UUID:
            return uuid.UUID(int=rng.getrandbits(128)) if self._bad() else uuid.UUID(int=0)
        if hint is Records or kafka_type == "records":
            records = batch([b"v%d" % i for i in range(rng.randint(1, 3))], timestamp=1_700_000_000_000)
            if self._bad():
                return Records(rng.choice([b"", rng.randbytes(rng.randint(1, 80)), records[:30]]))
            return Records(records)
        if hint is bytes:
            return rng.randbytes(rng.randint(0, 40)) if self._bad() else b""
        if isinstance(hint, type) and issubclass(hint, str):
            return hint(rng.choice(_HOSTILE_STRINGS if self._bad() else _PLAIN_STRINGS))
        if isinstance(hint, type) and issubclass(hint, int):
            return hint(0)
        raise TypeError(f"no values for {hint!r}")


_hint_cache: dict[type, dict[str, Any]] = {}
_writers: dict[type, Any] = {}


def _hints(cls: type) -> dict[str, Any]:
    found = _hint_cache.get(cls)
    if found is None:
        found = _hint_cache[cls] = typing.get_type_hints(cls)
    return found


def _writer(cls: type) -> Any:
    found = _writers.get(cls)
    if found is None:
        found = _writers[cls] = entity_writer(cls)
    return found


def encode(body: Any, correlation_id: int = 1, client_id: str | None = "fuzz", version: int | None = None) -> bytes:
    """A request frame (without its size): header and `body`; `version` overrides the header's."""
    schema = type(body)
    header = HeaderV2 if schema.__flexible__ else HeaderV1
    buf = io.BytesIO()
    _writer(header)(buf, header(request_api_key=schema.__api_key__,
                                request_api_version=i16(schema.__version__ if version is None else version),
                                correlation_id=i32(correlation_id), client_id=client_id))
    _writer(schema)(buf, body)
    mark = NULL_MARK.encode()
    if schema.__flexible__:
        return buf.getvalue().replace(bytes([len(mark) + 1]) + mark, b"\x00")
    return buf.getvalue().replace(struct.pack(">h", len(mark)) + mark, b"\xff\xff")


def make_request(api_key: int, version: int, rng: random.Random, hostile: float) -> Any:
    return RequestMaker(rng, hostile).entity(request_schema(api_key, version))


# -- mutating frames ------------------------------------------------------------------------------
_INT32S = [struct.pack(">i", v) for v in (-1, 0, 2**31 - 1, -2**31, 1 << 24, 0x7FFF)]
_INT16S = [struct.pack(">h", v) for v in (-1, 0, 32767, -32768, 0x7FF)]
_UVARINTS = [b"\x00", b"\x01", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07",
             b"\x80\x80\x80\x80\x01", b"\xff\x01", b"\xe9\x07"]


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """`frame` with 1-3 byte-level mutations after its api key, version and correlation id."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        if len(data) <= 8:
            break
        pos = rng.randrange(8, len(data))
        op = rng.random()
        if op < 0.2:
            data[pos] = rng.randrange(256)
        elif op < 0.35:
            data[pos] ^= 1 << rng.randrange(8)
        elif op < 0.55:
            data[pos:pos + 4] = rng.choice(_INT32S)
        elif op < 0.7:
            data[pos:pos + 2] = rng.choice(_INT16S)
        elif op < 0.8:
            data[pos:pos + rng.randint(1, 2)] = rng.choice(_UVARINTS)
        elif op < 0.9:
            del data[pos:pos + rng.randint(1, 8)]
        else:
            data[pos:pos] = rng.randbytes(rng.randint(1, 8))
    return bytes(data)


def fuzz_frames(apis: list[tuple[int, int]], rng: random.Random, rounds: int):
    """(api key, version, frame, expects an answer) for `rounds` passes over `apis`: each pass sends
    every (key, version) once, as built, truncated or mutated, with plain or hostile values."""
    for _ in range(rounds):
        for key, version in apis:
            body = make_request(key, version, rng, rng.choice([0.0, 0.3, 0.7]))
            frame = encode(body, correlation_id=rng.randrange(1 << 31))
            kind = rng.random()
            if kind < 0.25:
                frame = frame[:rng.randrange(8, len(frame))]
            elif kind < 0.6:
                frame = mutate(frame, rng)
            # acks=0 Produce expects no answer: it must not be taken for a stalled server
            silent = key == 0 and getattr(body, "acks", -1) == 0
            yield key, version, frame, not silent


# -- a live server --------------------------------------------------------------------------------
@dataclass
class Exchange:
    outcome: str  # answered, closed, silent (no answer within the wait)
    answer: bytes | None = None


@dataclass
class ServeProcess:
    """`klog serve` on 127.0.0.1 and an ephemeral port, its stderr kept line by line."""

    data_dir: str
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    port: int = 0
    lines: list[str] = field(default_factory=list)

    def __enter__(self) -> ServeProcess:
        env = {**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": self.data_dir}
        self.proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "-l", "127.0.0.1:0", *self.args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True,
                                     errors="replace")
        first = self.proc.stderr.readline()
        found = re.search(r"listening on (?:\S+://)?127\.0\.0\.1:(\d+)", first)
        if found is None:
            self.proc.kill()
            raise AssertionError(f"klog serve did not start: {first}{self.proc.stderr.read()}")
        self.port = int(found.group(1))
        threading.Thread(target=self._keep_lines, daemon=True).start()
        return self

    def _keep_lines(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:  # type: ignore[union-attr]
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def exchange(self, frame: bytes, wait_s: float) -> Exchange:
        """`frame` on a new connection: its answer, or the server's close, or silence for `wait_s`."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            sock.settimeout(wait_s)
            try:
                answer = read_frame(sock)
            except TimeoutError:
                return Exchange("silent")
            except ConnectionResetError:
                return Exchange("closed")
        return Exchange("closed") if answer is None else Exchange("answered", answer)

    def health_s(self) -> float:
        """Seconds a fresh connection takes to get ApiVersions and Metadata answered (raises if not)."""
        from kio.schema.api_versions.v3.request import ApiVersionsRequest
        from kio.schema.metadata.v9.request import MetadataRequest

        versions = encode(ApiVersionsRequest(client_software_name="health", client_software_version="1"), 1)
        metadata = encode(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False), 2)
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.settimeout(5)
            sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in (versions, metadata)))
            for correlation_id in (1, 2):
                answer = read_frame(sock)
                assert answer is not None and struct.unpack_from(">i", answer)[0] == correlation_id, answer
        return time.monotonic() - started


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame, None when the connection closed first."""
    def exactly(n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    head = exactly(4)
    return None if head is None else exactly(struct.unpack(">i", head)[0])


def log_problems(lines: list[str]) -> list[str]:
    """Lines that break the promise of one plain line per bad request: tracebacks, internal errors,
    a native crash's report."""
    return [line for line in lines if "Traceback" in line or "internal error" in line
            or "memory allocation" in line or line.startswith(("  File ", "stack backtrace"))]

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
            ms = rng.choice([-2**31, -1, 0, 2**31 - 1, 1]) if self._bad() else rng.choice([0, 100])
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


_FIXED_SIZES = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "timedelta_i32": 4, "int64": 8,
                "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16, "uint32": 4, "uint8": 1}


def field_marks(frame: bytes) -> list[tuple[int, str, int]]:
    """Where a well-formed request frame's fields are, read along its schema (independently of the
    server's own walk): (position, what, width) for every array count ("count"), string or bytes
    length ("length"; width 0: a uvarint) and the end of every field ("end")."""
    from klog.protocol import framing

    prefix = framing.read_prefix(frame)
    _, at, schema = framing.parse_header(frame, prefix)
    marks: list[tuple[int, str, int]] = []
    _marks(frame, at, schema, bool(schema.__flexible__), marks)
    return marks


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _length_at(frame: bytes, pos: int, flexible: bool, wide: bool) -> tuple[int, int, int]:
    """(length, where its content starts, the prefix's width: 0 for a uvarint)."""
    if flexible:
        n, end = _uvarint(frame, pos)
        return n - 1, end, 0
    size = 4 if wide else 2
    return int.from_bytes(frame[pos:pos + size], "big", signed=True), pos + size, size


def _marks(frame: bytes, pos: int, cls: type, flexible: bool, out: list) -> int:  # noqa: C901
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue
        hint, kafka_type = hints[f.name], f.metadata.get("kafka_type")
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is tuple:
            out.append((pos, "count", 0 if flexible else 4))
            n, pos, _ = _length_at(frame, pos, flexible, wide=True)
            item = typing.get_args(hint)[0]
            for _ in range(max(n, 0)):
                pos = _marks(frame, pos, item, flexible, out) if dataclasses.is_dataclass(item) else \
                    _primitive(frame, pos, kafka_type, flexible, out)
        elif dataclasses.is_dataclass(hint):
            pos = _marks(frame, pos, hint, flexible, out)
        else:
            pos = _primitive(frame, pos, kafka_type, flexible, out)
        out.append((pos, "end", 0))
    if flexible:  # tagged fields (kio writes those set away from their defaults)
        n, pos = _uvarint(frame, pos)
        for _ in range(n):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    return pos


def _primitive(frame: bytes, pos: int, kafka_type: str | None, flexible: bool, out: list) -> int:
    fixed = _FIXED_SIZES.get(kafka_type or "")
    if fixed is not None:
        return pos + fixed
    out.append((pos, "length", 0 if flexible else (2 if kafka_type == "string" else 4)))
    n, pos, _ = _length_at(frame, pos, flexible, wide=kafka_type != "string")
    return pos + max(n, 0)


_HOSTILE_LENGTHS = [-1, 0, 1, 2**31 - 1, 2**32 - 2, 1 << 24]


def structural_mutation(frame: bytes, rng: random.Random) -> bytes:
    """`frame` cut at a field boundary, or with one array count or length set to a hostile value
    (-1, 0, INT32_MAX, 2**32-2, ...) in the width it has."""
    try:
        marks = field_marks(frame)
    except (IndexError, ValueError):
        return mutate(frame, rng)
    kinds = sorted({what for _, what, _ in marks})
    if not kinds:
        return frame[:rng.randrange(8, len(frame))]
    wanted = rng.choice(kinds)  # (each kind as likely: a frame has more field ends than counts)
    pos, what, width = rng.choice([mark for mark in marks if mark[1] == wanted])
    if what == "end":
        return frame[:pos]
    value = rng.choice(_HOSTILE_LENGTHS)
    if width == 0:  # a uvarint of length + 1 (0: null)
        _, end = _uvarint(frame, pos)
        return frame[:pos] + _encode_uvarint(max(value + 1, 0) % (1 << 32)) + frame[end:]
    bits = 8 * width
    value = max(min(value, (1 << (bits - 1)) - 1), -(1 << (bits - 1)))
    return frame[:pos] + value.to_bytes(width, "big", signed=True) + frame[pos + width:]


def _encode_uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append(n & 0x7F | 0x80)
        n >>= 7


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


@dataclass(frozen=True)
class FuzzCase:
    api_key: int
    version: int
    frame: bytes
    kind: str  # plain (built with plain values), hostile (hostile values), truncated, mutated

    def expects_answer(self) -> bool:
        """A well-formed request of plain values is answered, as Kafka answers it (not the SASL
        APIs on a listener without SASL: the connection is closed, nor an acks=0 Produce)."""
        return self.kind == "plain" and self.api_key not in (17, 36) and not (
            self.api_key == 0 and _produce_acks_zero(self.frame))


def frame_correlation(frame: bytes) -> int:
    return struct.unpack_from(">i", frame, 4)[0]


def _produce_acks_zero(frame: bytes) -> bool:
    from klog.protocol import framing
    from klog.server.server import _produce_acks

    prefix = framing.read_prefix(frame)
    _, at, schema = framing.parse_header(frame, prefix)
    return _produce_acks(frame, at, schema) == 0


def fuzz_cases(apis: list[tuple[int, int]], rng: random.Random, rounds: int):
    """`rounds` passes over `apis`, each (key, version) once a pass: as built (plain or hostile
    values), truncated, mutated, or under a header naming another version."""
    versions: dict[int, list[int]] = {}
    for key, version in apis:
        versions.setdefault(key, []).append(version)
    for _ in range(rounds):
        for key, version in apis:
            hostile = rng.choice([0.0, 0.0, 0.3, 0.7])
            body = make_request(key, version, rng, hostile)
            frame = encode(body, correlation_id=rng.randrange(1 << 31))
            kind = rng.random()
            if kind < 0.05:  # the header names another version: one not served, or another's layout
                claimed = rng.choice([max(versions[key]) + 1, -1, 0x7FFF, *versions[key]])
                yield FuzzCase(key, version, encode(body, frame_correlation(frame), version=claimed), "mismatched")
            elif kind < 0.1:
                yield FuzzCase(key, version, frame[:rng.randrange(8, len(frame))], "truncated")
            elif kind < 0.35:
                yield FuzzCase(key, version, structural_mutation(frame, rng), "mutated")
            elif kind < 0.6:
                yield FuzzCase(key, version, mutate(frame, rng), "mutated")
            else:
                yield FuzzCase(key, version, frame, "plain" if hostile == 0 else "hostile")


@dataclass
class Campaign:
    """What a fuzz run saw: the promises broken (`problems`) and counts of outcomes."""

    problems: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    rss_kb: list[int] = field(default_factory=list)


def run_campaign(server: ServeProcess, cases, wait_s: float = 0.5, health_every: int = 25) -> Campaign:
    """Each case on its own connection, then the checks: at most one log line for it, none a
    traceback; plain requests answered; every `health_every` cases a fresh connection gets
    ApiVersions and Metadata answered within 2 s and the process is alive (its RSS noted)."""
    seen = Campaign()
    server.new_lines()
    for n, case in enumerate(cases, 1):
        what = f"{case.kind} api key {case.api_key} v{case.version} frame {case.frame.hex()}"
        try:
            result = server.exchange(case.frame, wait_s)
        except OSError as e:
            seen.problems.append(f"{what}: cannot connect ({e}); server exited {server.proc.poll()}")
            break
        seen.outcomes[result.outcome] = seen.outcomes.get(result.outcome, 0) + 1
        if result.outcome == "answered" and struct.unpack_from(">i", result.answer)[0] != struct.unpack_from(
                ">i", case.frame, 4)[0]:
            seen.problems.append(f"{what}: answered under another correlation id")
        if case.expects_answer() and result.outcome != "answered":
            seen.problems.append(f"{what}: {result.outcome}, not answered")
        lines = server.new_lines()
        if len(lines) > 1 or log_problems(lines):
            seen.problems.append(f"{what}: logged {lines[:4]}")
        if n % health_every == 0:
            if not _healthy(server, seen, what):
                break
    _healthy(server, seen, "the end")
    return seen


def _healthy(server: ServeProcess, seen: Campaign, after: str) -> bool:
    if not server.alive():
        seen.problems.append(f"after {after}: klog serve exited {server.proc.poll()}: {server.new_lines()[-5:]}")
        return False
    try:
        took = server.health_s()
    except (OSError, AssertionError) as e:
        seen.problems.append(f"after {after}: ApiVersions and Metadata not answered ({e!r})")
        return False
    if took > 2:
        seen.problems.append(f"after {after}: ApiVersions and Metadata took {took:.1f} s")
    seen.rss_kb.append(server.rss_kb())
    server.new_lines()  # (a health check logs nothing; a line here is a late one, already judged)
    return True


def rss_growth_kb(seen: Campaign) -> int:
    return max(seen.rss_kb) - seen.rss_kb[0] if seen.rss_kb else 0


# -- a live server --------------------------------------------------------------------------------
@dataclass
class Exchange:
    outcome: str  # answered, closed, silent (no answer within the wait)
    answer: bytes | None = None


@dataclass
class ServeProcess:
    """`klog serve` on 127.0.0.1 and an ephemeral port, its stderr in a file (`new_lines`: what it
    wrote since the last call; the server writes a request's line before it answers or closes)."""

    data_dir: str
    stderr_path: str
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    port: int = 0
    lines: list[str] = field(default_factory=list)
    _read_to: int = 0

    def __enter__(self) -> ServeProcess:
        env = {**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": self.data_dir}
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "-l", "127.0.0.1:0", *self.args],
                                         stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + 30
        while not self.lines:
            self.new_lines()
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise AssertionError(f"klog serve did not start: {self.lines}")
            time.sleep(0.05)
        found = re.search(r"listening on (?:\S+://)?127\.0\.0\.1:(\d+)", self.lines[0])
        assert found is not None, self.lines
        self.port = int(found.group(1))
        return self

    def new_lines(self) -> list[str]:
        with open(self.stderr_path, "rb") as f:
            f.seek(self._read_to)
            data = f.read()
        whole = data[:data.rfind(b"\n") + 1]  # (a line still being written: next time)
        self._read_to += len(whole)
        lines = whole.decode("utf-8", "replace").splitlines(keepends=True)
        self.lines += lines
        return lines

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.new_lines()

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

"""Helpers for the klog serve tests: raw requests written with kio, batches with klog's codec."""

from __future__ import annotations

import io
import socket
import struct
import time
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from klog.protocol.kafka import make
from klog.protocol.schemas import payload_module as load_payload_module
from klog.store import codec
from klog.store.format import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)


def batch(values: list[bytes], producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          timestamp: int | None = None) -> bytes:
    """An encoded batch (base offset 0) with the given idempotence fields and a valid CRC."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    data = bytearray(codec.encode_batch([(None, v, [], ts) for v in values], 0))
    struct.pack_into(">qhi", data, PRODUCER_ID_OFFSET, producer_id, epoch, sequence)
    struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def txn_batch(values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    """`batch` with its transactional flag set (CRC recomputed)."""
    data = bytearray(batch(values, producer_id=pid, epoch=epoch, sequence=seq))
    (attrs,) = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, attrs | TRANSACTIONAL_FLAG_MASK)
    struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


class RawClient:
    """One connection speaking kio-encoded requests (for what real clients never send)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, **fields: Any) -> Any:
        req_mod = load_payload_module(api_key, version, EntityType.request)
        resp_mod = load_payload_module(api_key, version, EntityType.response)
        req_cls = next(getattr(req_mod, n) for n in dir(req_mod) if n.endswith("Request")
                       and getattr(getattr(req_mod, n), "__type__", None) == EntityType.request)
        resp_cls = next(getattr(resp_mod, n) for n in dir(resp_mod) if n.endswith("Response")
                        and getattr(getattr(resp_mod, n), "__type__", None) == EntityType.response)
        self.correlation += 1
        buf = io.BytesIO()
        header_cls = HeaderV2 if req_cls.__flexible__ else HeaderV1
        entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                                  correlation_id=self.correlation, client_id="raw-test"))
        entity_writer(req_cls)(buf, make(req_cls, **fields))  # fields this version lacks are dropped
        frame = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        return self.read(resp_cls)

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def read(self, resp_cls: type) -> Any:
        size = struct.unpack(">i", self._exactly(4))[0]
        frame = self._exactly(size)
        (corr,) = struct.unpack_from(">i", frame)
        assert corr == self.correlation
        pos = 4 + (1 if resp_cls.__flexible__ and resp_cls.__api_key__ != 18 else 0)
        body, _ = entity_reader(resp_cls)(frame, pos)
        return body

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return out


def fixed_crc(data: bytearray) -> bytes:
    """`data` with its CRC recomputed in place (and returned as bytes)."""
    struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def broken_records_batch(count: int = 100) -> bytes:
    """A CRC-valid batch whose first record claims one byte more than it has."""
    buf = bytearray(batch([b"value-%03d" % i for i in range(count)]))
    assert buf[RECORDS_OFFSET] < 0x7E
    buf[RECORDS_OFFSET] += 2  # zigzag: length + 1
    return fixed_crc(buf)


def produce_request_fields(version: int, topic: str, partition: int, records: bytes, acks: int = -1) -> dict:
    mod = load_payload_module(0, version, EntityType.request)
    import datetime

    from kio.static.primitive import i32Timedelta

    part = mod.PartitionProduceData(index=partition, records=records)
    return {"transactional_id": None, "acks": acks, "timeout": i32Timedelta.parse(datetime.timedelta(seconds=5)),
            "topic_data": (mod.TopicProduceData(name=topic, partition_data=(part,)),)}


def produce(client: RawClient, topic: str, partition: int, records: bytes, version: int = 9) -> Any:
    """(error code, base offset) of one raw Produce."""
    resp = client.send(0, version, **produce_request_fields(version, topic, partition, records))
    p = resp.responses[0].partition_responses[0]
    return p.error_code, int(p.base_offset)


def fetch_fields(topic: str, partition: int, offset: int) -> dict:
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    part = FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    return {"replica_id": -1, "max_wait": i32Timedelta.parse(datetime.timedelta(milliseconds=100)), "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": (FetchTopic(topic=topic, partitions=(part,)),), "forgotten_topics_data": (), "rack_id": ""}


def another_client_answered(port: int) -> tuple[Any, Any, float]:
    """Metadata (all topics) and a Fetch of topic 'free' partition 0 by a new client while the
    server is busy with something stuck: (metadata, fetch answer, seconds both took)."""
    import time

    with RawClient(port) as other:
        other.sock.settimeout(5)
        started = time.monotonic()
        meta = other.send(3, 9, topics=None, allow_auto_topic_creation=False,
                          include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        fetched = other.send(1, 12, **fetch_fields("free", 0, 0))
        return meta, fetched, time.monotonic() - started


def sample_entity(cls: type, values: dict[str, Any]) -> Any:
    """An instance of kio request type `cls` with every field filled: a field named in `values`
    takes that value (in any nested entity), arrays hold one sample element, numbers are 0, strings
    'x', ids `values['uuid']`, byte fields `values['records']`. Requests for APIs a test has never
    seen, built from the schema alone (the ACL matrix over the server's whole API table)."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        default = _sample_value(hints[f.name], f.metadata.get("kafka_type"), values)
        given = values.get(f.name, default)
        # a name shared by fields of different types (SaslHandshake's mechanism is a string, the SCRAM
        # APIs' an int) takes the value only where its type fits
        fits = given is None or isinstance(given, type(default)) or isinstance(default, type(given))
        out[f.name] = given if fits else default
    return cls(**out)


def _sample_value(hint: Any, kafka_type: str | None, values: dict[str, Any]) -> Any:
    import dataclasses
    import datetime
    import types
    import typing
    import uuid

    from kio.static.primitive import i32Timedelta, i64Timedelta

    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # nullable: give it a value anyway
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
    if origin is tuple:
        (inner, _) = typing.get_args(hint)
        return (_sample_value(inner, kafka_type, values),)
    if dataclasses.is_dataclass(hint):
        return sample_entity(hint, values)
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(milliseconds=100))
    if kafka_type == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(milliseconds=100))
    if kafka_type == "uuid":
        return values.get("uuid", uuid.UUID(int=0))
    if kafka_type in ("bytes", "records"):
        return values.get("records", b"")
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return values.get("string", "x")
    if kafka_type in ("float64",):
        return 0.0
    if kafka_type and kafka_type.startswith(("int", "uint")):
        return 0
    if isinstance(hint, type) and issubclass(hint, str):
        return values.get("string", "x")
    if isinstance(hint, type) and issubclass(hint, int):
        return 0
    raise TypeError(f"no sample for {hint} ({kafka_type})")


def request_class(api_key: int, version: int) -> type:
    from klog.protocol.schemas import request_schema  # Kafka 3.9's oldest versions included

    return request_schema(api_key, version)


def _varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))  # zigzag


def gzip_bomb_batch(records: int, value_bytes: int) -> bytes:
    """A valid gzip RecordBatch v2 (base offset 0) of `records` records whose values are
    `value_bytes` zero bytes each: kilobytes on the wire, records * value_bytes decompressed. Written
    by streaming the zeros through zlib, never holding them."""
    import zlib

    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip stream
    chunk = bytes(1 << 20)
    parts = []
    for i in range(records):
        body_head = b"\0" + _varint(0) + _varint(i) + _varint(-1) + _varint(value_bytes)
        length = len(body_head) + value_bytes + 1  # + the headers count
        parts.append(squeeze.compress(_varint(length) + body_head))
        left = value_bytes
        while left:
            n = min(left, len(chunk))
            parts.append(squeeze.compress(chunk[:n]))
            left -= n
        parts.append(squeeze.compress(_varint(0)))
    parts.append(squeeze.flush())
    packed = b"".join(parts)
    head = bytearray(batch([b"x"])[:RECORDS_OFFSET])
    struct.pack_into(">i", head, LENGTH_OFFSET, len(head) + len(packed) - LOG_OVERHEAD)
    (attributes,) = struct.unpack_from(">h", head, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", head, ATTRIBUTES_OFFSET, attributes & ~0x07 | 1)
    struct.pack_into(">i", head, LAST_OFFSET_DELTA_OFFSET, records - 1)
    struct.pack_into(">i", head, RECORDS_COUNT_OFFSET, records)
    data = head + packed
    struct.pack_into(">I", data, CRC_OFFSET, codec.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


# -- hostile requests, written by hand (kio's writer takes ~20 us per entry) ---------------------------
uvarint = codec.encode_uvarint


def _flexible_frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, 7) + b"hostile" + b"\0"  # request header v2
    return struct.pack(">i", len(header) + len(body)) + header + body


def kafka_python_commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
    """Commit `offsets` ((topic, partition) -> (offset, metadata)) as kafka-python's consumer of `group`."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    client = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        client.commit({TopicPartition(t, p): OffsetAndMetadata(o, m, -1) for (t, p), (o, m) in offsets.items()})
    finally:
        client.close()


def huge_produce(entries: int, acks: int = 1) -> bytes:
    """Produce v9 to topic 'free' naming `entries` partition entries (partition 0, no records; 6 bytes
    each), written by hand: kio's writer takes ~20 us per entry."""
    entry = struct.pack(">i", 0) + uvarint(1) + b"\0"
    topic = uvarint(5) + b"free" + uvarint(entries + 1) + entry * entries + b"\0"
    return _flexible_frame(0, 9, b"\0" + struct.pack(">hi", acks, 1000) + uvarint(2) + topic + b"\0")


def repeated_metadata(times: int) -> bytes:
    """Metadata v9 naming topic 'free' `times` times."""
    entry = uvarint(5) + b"free" + b"\0"
    return _flexible_frame(3, 9, uvarint(times + 1) + entry * times + b"\0\0\0" + b"\0")


def read_answer(sock: Any) -> bytes:
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    return _exactly(sock, size)


def _exactly(sock: Any, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the server")
        out += chunk
    return bytes(out)


def record_fetch_ways(server: Any, monkeypatch: Any, one: str = "one") -> list[str]:
    """Which way each Fetch to `server` is collected, in order: 'pool' (the thread pool), 'loop' (the
    general way on the event loop) or `one` (the one-partition way, also on the loop). The periodic
    re-reads of the ACLs (every second) and of a topic's metadata (every 5 s) each send one Fetch to
    the pool: pushed out of the test's way, so a slow machine does not see one land between two asserts."""
    from klog.broker import batches
    from klog.server import fetch as fetch_module

    monkeypatch.setattr(server.security.authorizer, "reload_ms", 3_600_000)
    monkeypatch.setattr(batches, "TOPIC_REFRESH_S", 3600.0)
    seen: list[str] = []
    real, real_one = fetch_module._collect, fetch_module._collect_one

    def collect(ctx: Any, request: Any, loop_names: Any = None) -> Any:
        answer = real(ctx, request, loop_names)
        seen.append("loop" if loop_names is not None else "pool")
        return answer

    def collect_one(ctx: Any, request: Any, t: Any) -> Any:
        answer = real_one(ctx, request, t)
        if answer is not None:
            seen.append(one)
        return answer

    monkeypatch.setattr(fetch_module, "_collect", collect)
    monkeypatch.setattr(fetch_module, "_collect_one", collect_one)
    return seen


def raw_answer(client: RawClient, api_key: int, version: int, **fields: Any) -> bytes:
    """The body of the answer to a request written with kio (its header skipped), undecoded: for
    answers kio's reader refuses (Kafka's -1 timestamps of a refused token request)."""
    from klog.protocol.kafka import make
    from klog.protocol.schemas import request_schema

    cls = request_schema(api_key, version)
    header = HeaderV2 if cls.__flexible__ else HeaderV1
    client.correlation += 1
    buf = io.BytesIO()
    entity_writer(header)(buf, header(request_api_key=api_key, request_api_version=version,
                                      correlation_id=client.correlation, client_id="raw-test"))
    entity_writer(cls)(buf, make(cls, **fields))
    client.send_raw(buf.getvalue())
    (size,) = struct.unpack(">i", client._exactly(4))
    frame = client._exactly(size)
    assert struct.unpack_from(">i", frame)[0] == client.correlation
    return frame[4 + (1 if cls.__flexible__ else 0):]

"""Where klog serve parses a request: a frame past PARSE_INLINE_BYTES that holds few entries (one
partition's batch, as librdkafka sends it) on the event loop, where the hop to a parse thread
would cost more than the parse; one of many entries in the parse threads (kio's reader takes
~0.4 us an entry: the loop keeps answering the others meanwhile)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from klog.server import server as server_module
from tests.serve_helpers import batch, huge_produce, produce_request_fields, read_answer, uvarint

pytest.importorskip("kio")
from kio.schema.request_header.v1.header import RequestHeader  # noqa: E402
from kio.serial import entity_writer  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

from klog.protocol.kafka import make  # noqa: E402
from klog.protocol.schemas import payload_module  # noqa: E402


@pytest.fixture
def parsed_in(monkeypatch):
    """The thread of each parse that gave a request (not one handed on to a parse thread)."""
    threads: list[str] = []
    real = server_module.Server._parse

    def recording(self, *args):  # noqa: ANN001, ANN202
        got = real(self, *args)
        if got is not server_module._IN_THREAD:
            threads.append(threading.current_thread().name)
        return got

    monkeypatch.setattr(server_module.Server, "_parse", recording)
    return threads


def _produce_frame(correlation: int, topic: str, records: bytes) -> bytes:
    import io

    mod = payload_module(0, 7, EntityType.request)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=7,
                                                    correlation_id=correlation, client_id="inline"))
    entity_writer(mod.ProduceRequest)(buf, make(mod.ProduceRequest, **produce_request_fields(7, topic, 0, records)))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


def test_big_produces_of_one_partition_are_parsed_on_the_loop(kafka_server, parsed_in):
    kafka_server.store.create_topic("wide")
    frames = [_produce_frame(i + 1, "wide", batch([b"v%d-" % i + b"x" * 100] * 200)) for i in range(3)]
    assert all(len(f) > server_module.PARSE_INLINE_BYTES for f in frames)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(b"".join(frames))  # (pipelined: grouped, or one at a time: parsed alike)
        answers = [read_answer(sock) for _ in frames]
    # (v7: correlation id, topics, name, partitions, then index, error code, base offset)
    at = 4 + 4 + 2 + len("wide") + 4
    assert [struct.unpack_from(">ihq", a, at) for a in answers] == [(0, 0, 0), (0, 0, 200), (0, 0, 400)]
    assert parsed_in == ["klog-serve-loop"] * 3


def test_a_big_request_of_many_entries_is_parsed_in_a_thread(kafka_server, parsed_in):
    frame = huge_produce(1000)  # (6 bytes an entry, no records: each refused)
    assert len(frame) > server_module.PARSE_INLINE_BYTES + 4
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(frame)
        assert read_answer(sock)[:4] == frame[8:12]  # answered (its correlation id)
    assert len(parsed_in) == 1 and parsed_in[0].startswith("klog-serve-parse")


def _tags(n: int) -> bytes:
    """`n` tagged fields no schema knows (tags 100 up, empty): Kafka's readers skip them."""
    return uvarint(n) + b"".join(uvarint(100 + i) + b"\0" for i in range(n))


def _metadata_v12(body_tags: bytes = b"\0", header_tags: bytes = b"\0") -> bytes:
    """Metadata v12 naming topic 'free' (by name), with these tagged sections."""
    header = struct.pack(">hhih", 3, 12, 9, 7) + b"hostile" + header_tags
    body = uvarint(2) + bytes(16) + uvarint(5) + b"free" + b"\0" + b"\0\0" + body_tags
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.mark.parametrize("where", ["body", "header"])
def test_a_big_request_of_many_tagged_fields_is_parsed_in_a_thread(kafka_server, parsed_in, where):
    # 2,000 unknown tagged fields walked and dropped cost a parse ~2 ms (64 KiB of them ~24 ms):
    # counted as entries, such a request goes to the parse threads, not the event loop
    tags = _tags(2000)
    frame = _metadata_v12(body_tags=tags) if where == "body" else _metadata_v12(header_tags=tags)
    assert len(frame) > server_module.PARSE_INLINE_BYTES + 4
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(frame)
        answer = read_answer(sock)
    assert answer[:4] == struct.pack(">i", 9)  # answered (its correlation id)
    assert b"free" in answer
    assert len(parsed_in) == 1 and parsed_in[0].startswith("klog-serve-parse")


def test_a_big_answer_to_a_small_request_is_encoded_in_a_thread(kafka_server, monkeypatch):
    # DescribeLogDirs of all topics: a request of a few bytes, an answer of an entry per partition
    # (kio's writer: 13,000 partitions took the event loop ~17 ms)
    from klog.protocol import framing
    from tests.serve_helpers import RawClient

    threads: list[str] = []
    real = framing.encode_response

    def recording(*args):  # noqa: ANN002, ANN202
        threads.append(threading.current_thread().name)
        return real(*args)

    kafka_server.store.create_topic("wide", server_module.ENCODE_INLINE_ENTRIES + 1)
    monkeypatch.setattr(framing, "encode_response", recording)
    with RawClient(kafka_server.port) as client:
        answer = client.send(35, 1, topics=None)
    [result] = answer.results
    assert sum(len(t.partitions) for t in result.topics) == server_module.ENCODE_INLINE_ENTRIES + 1
    assert len(threads) == 1 and threads[0].startswith("klog-serve-parse")


def test_tagged_fields_past_the_entries_limit_are_refused_in_the_body_and_close_in_the_header(data_dir):
    # 9 MB of header tags took a parse thread ~1.1 s (100 MB may come): no client sends any
    from klog.server import Server
    from klog.server.limits import ServeLimits

    with Server(data_dir, listen=("127.0.0.1", 0), limits=ServeLimits(max_request_entries=10)) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_metadata_v12(body_tags=_tags(9)))  # (with its topic entry, within the limit: answered)
        assert b"free" in read_answer(sock)
        sock.sendall(_metadata_v12(body_tags=_tags(11)))  # INVALID_REQUEST (42): the answer's error code
        refused = read_answer(sock)
        assert refused[:4] == struct.pack(">i", 9) and b"free" not in refused
        sock.sendall(_metadata_v12(header_tags=_tags(11)))
        with pytest.raises(ConnectionError):
            read_answer(sock)


def test_entries_past_counts_every_array_of_an_answer_nested_ones_included():
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i32Timedelta

    from klog.protocol.framing import entries_past

    mod = payload_module(35, 1, EntityType.response)

    def topic(name: str, partitions: int):  # noqa: ANN202
        return make(mod.DescribeLogDirsTopic, name=name, partitions=tuple(make(
            mod.DescribeLogDirsPartition, partition_index=i, partition_size=0, offset_lag=0, is_future_key=False)
            for i in range(partitions)))

    answer = make(mod.DescribeLogDirsResponse, throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                  error_code=ErrorCode.none, results=(make(
                      mod.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir="/d", total_bytes=0,
                      usable_bytes=0, topics=(topic("a", 3), topic("b", 0), topic("c", 5))),))
    assert [entries_past(answer, limit) for limit in (11, 12)] == [True, False]  # 1 + 3 + 8 entries

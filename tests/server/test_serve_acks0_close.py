"""A Produce with acks=0 that fails closes its connection, as Kafka's broker closes it (KafkaApis
handleProduceRequest: the client expects no answer, so the close is how it learns; librdkafka then
refreshes its metadata). Other connections go on; a successful acks=0 Produce keeps its connection."""

from __future__ import annotations

import io
import logging
import socket
import struct
import time

import pytest

from tests.serve_helpers import RawClient, batch, produce_request_fields
from tests.server.test_serve_acks0_group import _closed

pytest.importorskip("kio")


def _frame(correlation: int, topic: str, partition: int, records: bytes, acks: int = 0, version: int = 9) -> bytes:
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    from klog.protocol.schemas import request_schema

    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=version,
                                                    correlation_id=correlation, client_id="acks0"))
    cls = request_schema(0, version)
    entity_writer(cls)(buf, cls(**produce_request_fields(version, topic, partition, records, acks)))
    frame = buf.getvalue()
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize("partition,records", [(7, batch([b"x"])),  # a partition the topic has not
                                               (0, batch([b"x" * 2_000_000]))],  # over max.message.bytes
                         ids=["unknown-partition", "too-large"])
def test_a_failed_acks0_produce_closes_its_connection_only(kafka_server, caplog, partition, records):
    kafka_server.store.create_topic("fire", 1)
    caplog.set_level(logging.INFO, logger="klog.serve")
    with RawClient(kafka_server.port) as other, \
            socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        assert other.send(18, 0).error_code == 0
        sock.sendall(_frame(1, "fire", partition, records))
        assert _closed(sock)
        assert other.send(18, 0).error_code == 0  # the other connection is still served
    lines = [r.getMessage() for r in caplog.records if "acks=0" in r.getMessage()]
    assert len(lines) == 1 and f"fire-{partition}" in lines[0] and "acks0" in lines[0], lines


def test_a_successful_acks0_produce_keeps_its_connection(kafka_server):
    kafka_server.store.create_topic("fire", 1)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_frame(1, "fire", 0, batch([b"x"])))
        assert not _closed_within(sock, 0.3)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_pipelined_acks0_produces_close_at_the_failed_one(kafka_server, data_dir):
    """acks=0 Produce requests queued behind each other are handled together, in request order
    (produce_group); the first that failed closes the connection (nothing is answered to any of
    them: acks=0; that none after it is appended: test_serve_acks0_pipelined.py,
    test_serve_acks0_group.py)."""
    kafka_server.store.create_topic("fire", 2)
    burst = b"".join([_frame(1, "fire", 0, batch([b"a"])), _frame(2, "fire", 9, batch([b"b"])),
                      _frame(3, "fire", 1, batch([b"c"]))])
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(burst)
        assert _closed(sock)
    import klog

    deadline = time.monotonic() + 5
    while True:
        with klog.open(data_dir) as store:
            got = sorted(r.value for r in store.consumer("fire"))
        if got or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert b"a" in got  # (the request before the failed one was appended)


@pytest.mark.slow
def test_confluent_kafka_acks0_into_a_too_large_record_sees_the_disconnect(kafka_server):
    """librdkafka with acks=0 sends a record over the topic's max.message.bytes (its own
    message.max.bytes is higher): the server closes the connection, which librdkafka reports, and
    the producer goes on producing on a new connection."""
    ck = pytest.importorskip("confluent_kafka")
    kafka_server.store.create_topic("fire", 1, configs={"max.message.bytes": "1000"})
    errors: list[str] = []
    producer = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "acks": 0, "linger.ms": 0,
                            "error_cb": lambda e: errors.append(str(e)), "log_level": 0})
    producer.produce("fire", b"x" * 5000)
    producer.flush(10)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    # (librdkafka reports the close as a transport error, or with every connection down as this one)
    assert any("_TRANSPORT" in e or "_ALL_BROKERS_DOWN" in e for e in errors), errors
    producer.produce("fire", b"small")
    assert producer.flush(10) == 0
    import klog

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with klog.open(kafka_server.data_dir) as store:
            got = [r.value for r in store.consumer("fire")]
        if got:
            break
        time.sleep(0.1)
    assert got == [b"small"]

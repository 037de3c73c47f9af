"""A hostile re-read of klog serve's pipelined acks=0 grouping (klog.server.produce._acks0_group): what
one connection's burst may hold while it waits."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

import pytest

from tests.serve_helpers import RawClient, batch, produce_request_fields, read_answer
from tests.server.test_serve_acks0_group import _api_versions, _frame, _values

pytest.importorskip("kio")


def _produce_acks1(client: RawClient, topic: str, partition: int, value: bytes) -> tuple[int | None, float]:
    """(error code, or None when unanswered within 8 s; seconds waited) of an acks=1 produce (no fsync
    to wait for on a loaded machine: what it waits for is the partition's slot)."""
    client.sock.settimeout(8)
    started = time.monotonic()
    try:
        resp = client.send(0, 9, **produce_request_fields(9, topic, partition, batch([value]), acks=1))
        code = resp.responses[0].partition_responses[0].error_code
    except TimeoutError:
        code = None
    return code, time.monotonic() - started


def _partition_1_stuck(kafka_server, monkeypatch, calls: list | None = None):  # noqa: ANN001, ANN202
    """Partition 1's acks=all appends stuck on a "slow disk" until the returned gate is set: (stuck, gate,
    partition 0's slot); `calls` collects every append's (partition, acks)."""
    kafka_server.store.create_topic("t", 2)
    monkeypatch.setattr(kafka_server, "begin_append_on_loop", lambda *args: None)  # (every append in a thread)
    appender = kafka_server.appender
    real = appender.append
    stuck, gate = threading.Event(), threading.Event()

    def slow_disk(topic, partition, records, acks, *args):  # noqa: ANN001, ANN002, ANN202
        if calls is not None:
            calls.append((partition, acks))
        if partition == 1 and acks == "all":
            stuck.set()
            gate.wait(20)  # (released by the test, bounded anyway)
        return real(topic, partition, records, acks, *args)

    monkeypatch.setattr(appender, "append", slow_disk)
    return stuck, gate, kafka_server.append_slot("t", 0)


@contextlib.contextmanager
def _slow_burst_other(kafka_server, stuck: threading.Event):  # noqa: ANN001, ANN202
    """Three connections: `slow`, whose acks=all produce of partition 1 is stuck once this yields;
    `burst` (a raw socket) and `other` (a RawClient), for the test's own requests."""
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as slow, \
            socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as burst, \
            RawClient(kafka_server.port) as other:
        slow.sendall(_frame(1, [("t", 1, batch([b"slow"]))], acks=-1))
        assert stuck.wait(10)
        yield slow, burst, other


@pytest.mark.slow
def test_an_acks0_burst_waiting_for_a_slow_partition_holds_no_other_partition(kafka_server, monkeypatch):
    """A burst of acks=0 requests for partitions 0 and 1, while partition 1's append is stuck (a slow disk
    under another producer's acks=all append): another connection's produce to partition 0 is answered at
    once. The burst's job took partition 0's slot first and held it while it waited for partition 1's,
    so the other produce waited for the slow disk of a partition it never named (as a lone acks=0
    request of partition 0, then one of partition 1, never did)."""
    calls: list[tuple[int, str]] = []
    stuck, gate, slot0 = _partition_1_stuck(kafka_server, monkeypatch, calls)
    try:
        with _slow_burst_other(kafka_server, stuck) as (slow, burst, other):
            # two pipelined acks=0 requests in one write: handled as one group (an ApiVersions after them,
            # answered once they are handled)
            burst.sendall(_frame(1, [("t", 0, batch([b"x0"]))]) + _frame(2, [("t", 1, batch([b"x1"]))])
                          + _api_versions(3))
            deadline = time.monotonic() + 10
            while not ((0, "0") in calls or slot0.locked()) and time.monotonic() < deadline:
                time.sleep(0.01)  # the burst reached partition 0 (appended there, or waiting holding it)
            time.sleep(0.2)
            code, waited = _produce_acks1(other, "t", 0, b"other")
            assert not gate.is_set()
            assert code == 0, f"a produce to partition 0 waited {waited:.1f} s for partition 1's slow disk"
            gate.set()
            slow.settimeout(10)
            assert len(slow.recv(4)) == 4  # the slow acks=all produce answered
            burst.settimeout(10)
            assert struct.unpack_from(">i", read_answer(burst))[0] == 3  # the burst handled
    finally:
        gate.set()
    got = _values(kafka_server.data_dir, "t", 2)
    assert got[0] == [b"x0", b"other"]
    assert got[1] == [b"slow", b"x1"]


@pytest.mark.slow
@pytest.mark.parametrize("pipelined", [False, True], ids=["one-request", "pipelined"])
def test_a_multi_partition_append_waiting_for_a_slow_partition_holds_no_other_partition(kafka_server, monkeypatch,
                                                                                        pipelined):
    """The same with acks=1: one request naming partitions 0 and 1 (a Java producer's), or two pipelined
    requests of one partition each (librdkafka's, appended together): partition 0's slot was taken, then
    held while partition 1's was waited for. Kafka appends a request's partitions one after another, each
    under its own lock: it never holds one while it waits for another."""
    stuck, gate, slot0 = _partition_1_stuck(kafka_server, monkeypatch)
    try:
        with _slow_burst_other(kafka_server, stuck) as (slow, burst, other):
            if pipelined:
                burst.sendall(_frame(1, [("t", 0, batch([b"x0"]))], acks=1)
                              + _frame(2, [("t", 1, batch([b"x1"]))], acks=1))
            else:
                burst.sendall(_frame(1, [("t", 0, batch([b"x0"])), ("t", 1, batch([b"x1"]))], acks=1))
            deadline = time.monotonic() + 10
            while not slot0.locked() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # (the fix: partition 0 appended and released by now)
            code, waited = _produce_acks1(other, "t", 0, b"other")
            assert not gate.is_set()
            assert code == 0, f"a produce to partition 0 waited {waited:.1f} s for partition 1's slow disk"
            gate.set()
            for sock in (slow, burst):
                sock.settimeout(10)
                assert len(sock.recv(4)) == 4  # answered
    finally:
        gate.set()
    got = _values(kafka_server.data_dir, "t", 2)
    assert got[0] == [b"x0", b"other"]
    assert got[1] == [b"slow", b"x1"]

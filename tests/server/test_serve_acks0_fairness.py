"""A connection's pipelined acks=0 Produce requests (klog.server.produce._acks0_group) are appended in
jobs of at most 64 entries and about 1 MiB, each holding the append slots of its own partitions
only while it runs: another connection's produce to one of those partitions waits for one job, not
for the whole burst (a hostile client's 7 requests of 19,000 entries for one partition, all in one
job, held it 15 s)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tests.serve_helpers import RawClient, batch, produce, read_answer
from tests.server.test_serve_acks0_group import _api_versions, _frame, _values

pytest.importorskip("kio")


@pytest.mark.slow
def test_another_connections_produce_waits_for_one_job_not_the_whole_acks0_burst(kafka_server, monkeypatch):
    kafka_server.store.create_topic("shared", 1)
    appender = kafka_server.appender
    real = appender.append
    first = threading.Event()

    def slow(topic, partition, records, acks, *args):  # the burst's appends made slow: 4 ms each
        if acks == "0":
            first.set()
            time.sleep(0.004)
        return real(topic, partition, records, acks, *args)

    monkeypatch.setattr(appender, "append", slow)
    requests, entries = 2, 500  # 1,000 appends of 4 ms for one partition: 4 s in all
    burst = b"".join(_frame(r + 1, [("shared", 0, batch([b"h%d-%03d" % (r, i)])) for i in range(entries)])
                     for r in range(requests))
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=30) as hostile, \
            RawClient(kafka_server.port) as other:
        hostile.sendall(burst + _api_versions(99))
        assert first.wait(10)
        code, offset = produce(other, "shared", 0, batch([b"other"]))[:2]
        hostile.settimeout(30)
        assert struct.unpack_from(">i", read_answer(hostile))[0] == 99
    assert code == 0
    got = _values(kafka_server.data_dir, "shared", 1)[0]
    # appended between two jobs of the burst, not after all of it (the whole burst in one job: 1000)
    assert 0 < got.index(b"other") < requests * entries, got.index(b"other")
    # (no bound on the wait in seconds: a loaded machine moves it; where it landed is the proof)
    # the burst itself in request order
    assert [v for v in got if v != b"other"] == [b"h%d-%03d" % (r, i) for r in range(requests) for i in range(entries)]


def test_a_failure_in_a_later_job_still_stops_at_its_request(kafka_server, monkeypatch):
    """Request 1 spans the first two jobs and fails in the second: its other entries are appended
    (those of the first job and those after the failed one), request 2's are not, and every job
    holds at most 64 entries and about 1 MiB."""
    kafka_server.store.create_topic("spread", 3)
    jobs: list[int] = []
    real = kafka_server.run_append

    async def counted(fn, *args):
        jobs.append(len(args[0]) if args and isinstance(args[0], list) else -1)
        return await real(fn, *args)

    monkeypatch.setattr(kafka_server, "run_append", counted)
    big = b"b" * 300_000
    requests = [
        [("spread", 0, batch([b"a%02d" % i])) for i in range(50)],
        [*(("spread", 1, batch([b"b%02d" % i])) for i in range(30)), ("spread", 9, batch([b"bad"])),
         *(("spread", 2, batch([b"c%02d" % i])) for i in range(30))],
        [("spread", 0, batch([b"late"])), ("spread", 1, batch([b"late"]))],
    ]
    heavy = [("spread", 2, batch([big])) for _ in range(5)]  # ~1.5 MiB: in two jobs
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_frame(1, heavy) + b"".join(_frame(i + 2, entries) for i, entries in enumerate(requests)))
        sock.settimeout(10)
        try:
            assert sock.recv(1) == b""  # closed: nothing is answered with acks=0
        except ConnectionResetError:
            pass
    got = _values(kafka_server.data_dir, "spread", 3)
    assert got[0] == [b"a%02d" % i for i in range(50)]
    assert got[1] == [b"b%02d" % i for i in range(30)]
    assert got[2] == [big] * 5 + [b"c%02d" % i for i in range(30)]
    assert len(jobs) >= 3 and all(0 < n <= 64 for n in jobs), jobs

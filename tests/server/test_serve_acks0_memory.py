"""Pipelined Produce requests appended together (klog serve's request loop, klog.server.produce
.produce_group) are held all at once, parsed, until the group is handled: a group takes requests
only while it holds less than 8 MiB of them, so what one connection makes the server hold is at
most that and one request (up to socket.request.max.bytes), however fast its requests arrive while
the group is being read (64 requests of up to 100 MiB each were 6 GiB)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.serve_helpers import batch, read_answer
from tests.server.test_serve_acks0_group import _api_versions, _frame, _values

pytest.importorskip("kio")


@pytest.mark.slow
def test_a_group_of_pipelined_produce_requests_holds_about_8_mib(kafka_server, monkeypatch):
    import klog.server.produce as produce_module

    kafka_server.store.create_topic("big", 2)
    groups: list[int] = []
    real_group = produce_module.produce_group

    async def spied(context_of, requests):
        groups.append(len(requests))
        return await real_group(context_of, requests)

    monkeypatch.setattr(produce_module, "produce_group", spied)
    real_parse = kafka_server._parse

    def slow_parse(frame, peer, *args):  # parsed slowly (a loaded machine): the next ones arrive meanwhile
        if len(frame) > 100_000:
            time.sleep(0.05)
        return real_parse(frame, peer, *args)

    monkeypatch.setattr(kafka_server, "_parse", slow_parse)
    value = b"v" * 700_000  # requests of 3 batches, ~2.1 MB: at most 4 in a group (8.4 MB)
    requests = 12
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=30) as sock:
        sock.sendall(b"".join(_frame(i + 1, [("big", i % 2, batch([value]))] * 3) for i in range(requests))
                     + _api_versions(99))
        sock.settimeout(30)
        assert struct.unpack_from(">i", read_answer(sock))[0] == 99
    assert sum(groups) <= requests and max(groups) <= 4, groups
    got = _values(kafka_server.data_dir, "big", 2)
    assert [len(got[p]) for p in range(2)] == [requests // 2 * 3] * 2

"""Requests pipelined behind a failed acks=0 Produce on one connection are not handled: Kafka mutes
a connection while it handles a request and closes it on the failed acks=0 Produce, so nothing
queued behind it is appended (klog serve used to append the acks=0 requests queued with it)."""

from __future__ import annotations

import socket

import pytest

from tests.serve_helpers import RawClient, batch, produce

pytest.importorskip("kio")

from tests.server.test_serve_acks0_close import _closed, _frame  # noqa: E402


@pytest.mark.parametrize("burst", [
    # (partition, value, acks): 9 is a partition the topic has not
    [(9, b"bad", 0), (0, b"after-0", 0), (1, b"after-1", 1)],
    [(0, b"before", 0), (9, b"bad", 0), (1, b"after-0", 0), (0, b"after-0b", 0)],
    [(0, b"before", 0), (1, b"bad" * 700_000, 0), (1, b"after-0", 0), (0, b"after-0b", 0)],  # over max.message.bytes
], ids=["bad-first", "acks0-behind", "too-large"])
def test_nothing_pipelined_behind_a_failed_acks0_produce_is_appended(kafka_server, burst):
    kafka_server.store.create_topic("fire", 2)
    frames = b"".join(_frame(i + 1, "fire", p, batch([v]), acks) for i, (p, v, acks) in enumerate(burst))
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(frames)  # (one write: the server reads them queued behind each other)
        assert _closed(sock)
    with RawClient(kafka_server.port) as client:  # handled after the closed connection's requests
        assert produce(client, "fire", 0, batch([b"later"]))[0] == 0
    import klog

    with klog.open(kafka_server.data_dir) as store:
        got = sorted(r.value for r in store.consumer("fire"))
    bad_at = next(i for i, (_, v, _) in enumerate(burst) if v.startswith(b"bad"))
    assert got == sorted([*(v for _, v, _ in burst[:bad_at]), b"later"])

"""A hostile review of klog serve's incremental fetch sessions (KIP-227, klog/server/fetch_sessions.py):
what another client can do with a session id it did not make, how a session's Fetch costs with its
partitions in Kafka's moving order, how answers group topics, the epoch's wrap, and two
connections racing on one session."""

from __future__ import annotations

import socket

import pytest

from klog.server import fetch_sessions
from tests.serve_helpers import RawClient, batch, produce
from tests.server.test_serve_fetch_sessions import NOT_FOUND, _answered, _fetch

B = "127.0.0.2"  # a second client address (Linux routes all of 127/8 to loopback)


class _From(RawClient):
    """A RawClient connecting from `source`: another client, as the server tells them apart."""

    def __init__(self, port: int, source: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        self.correlation = 0


def _second_address() -> None:
    with socket.socket() as s:
        try:
            s.bind((B, 0))
        except OSError as e:
            pytest.skip(f"cannot bind {B}: {e}")


def test_another_client_cannot_use_probe_nor_close_a_session_it_did_not_make(kafka_server, store):
    _second_address()
    store.create_topic("mine", partitions=2)
    with RawClient(kafka_server.port) as owner, _From(kafka_server.port, B) as other:
        assert produce(owner, "mine", 0, batch([b"private"]))[0] == 0
        sid = _fetch(owner, 0, 0, {("mine", 0): 1, ("mine", 1): 0}).session_id
        assert sid
        # the other client naming the id: as if it did not exist, whatever the epoch (no 71 that tells
        # it the id is live), and it reads nothing of the session (nor learns its topics' names)
        for epoch in (1, 2, 7):
            answer = _fetch(other, sid, epoch, {("mine", 0): 0} if epoch == 7 else None)
            assert (answer.error_code, answer.session_id, _answered(answer)) == (NOT_FOUND, 0, {}), epoch
        # a full fetch naming it does not close it (nor does epoch -1)
        assert _fetch(other, sid, 0, {("mine", 1): 0}).error_code == 0
        assert _fetch(other, sid, -1, {("mine", 1): 0}).error_code == 0
        # the owner's session is untouched: its epoch 1 is still the next one
        assert produce(owner, "mine", 1, batch([b"new"]))[0] == 0
        mine = _fetch(owner, sid, 1)
        assert (mine.error_code, mine.session_id, set(_answered(mine))) == (0, sid, {("mine", 1)})
        # and the owner still closes its own
        assert _fetch(owner, sid, -1, {("mine", 0): 1}).session_id == 0
        assert _fetch(owner, sid, 2).error_code == NOT_FOUND
    assert fetch_sessions.cache_of(kafka_server).get(sid) is None

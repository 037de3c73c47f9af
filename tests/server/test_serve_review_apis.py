"""Review of klog serve's newest pieces (one server per store, AlterReplicaLogDirs, delegation
tokens, acks=0 failures, strings not UTF-8): what a hostile client or a long-lived embedding sees."""

from __future__ import annotations

import socket

import pytest

from klog.errors import UsageError
from klog.server.listeners import Listener, SecurityConfig
from klog.server.server import Server


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_failed_start_leaves_the_store_free_and_nothing_listening(data_dir, tmp_path):
    """A start that fails after the store is claimed (here: a TLS key that does not load, after a
    PLAINTEXT listener already bound) frees the store: the embedding process that fixes its
    configuration starts a server on the same store, not 'another klog serve already serves it'."""
    with socket.socket() as probe:  # a port free now, for the PLAINTEXT listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bad = SecurityConfig(listeners=[Listener("PLAINTEXT", "127.0.0.1", port), Listener("SSL", "127.0.0.1", 0)],
                         ssl_certfile=str(tmp_path / "missing.pem"), ssl_keyfile=str(tmp_path / "missing.key"))
    with pytest.raises(UsageError, match="cannot load TLS certificate"):
        with Server(data_dir, security=bad):
            pass
    assert not _listening(port)  # the PLAINTEXT socket bound before the failure is closed
    with Server(data_dir, listen=("127.0.0.1", 0)) as again:
        assert again.port


def test_a_failed_acks0_produce_stops_the_requests_queued_behind_it(kafka_server):
    """Pipelined Produce requests of differing acks on one connection, the first (acks=0) failing:
    the connection closes on it, and, as on Kafka (which reads nothing more from a connection it
    closes), the acks=1 request queued behind it is not appended: its producer, unanswered, sends it
    again, and a record appended here would then be there twice."""
    from tests.serve_helpers import batch
    from tests.server.test_serve_acks0_close import _closed, _frame

    kafka_server.store.create_topic("mixed", 1)
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        sock.sendall(_frame(1, "mixed", 5, batch([b"lost"]), acks=0)  # no partition 5: fails, closes
                     + _frame(2, "mixed", 0, batch([b"once"]), acks=1))
        assert _closed(sock)
    assert kafka_server.store.offsets("mixed") == {0: 0}

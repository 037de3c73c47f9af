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

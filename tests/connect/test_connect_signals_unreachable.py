"""Debezium's kafka signal channel (klog/connect/signals.py) whose cluster's address answers nothing (a dead or
firewalled host: no refusal, the connection never made): the change stream is not held by it."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

from tests.connect.helpers import running, wait_for
from tests.connect.test_connect_signals import _ops, _setup, _slot_made
from tests.connect.test_connect_signals_kafka import _committed, _kafka_config, _send


def _silent_address() -> tuple[socket.socket, list[socket.socket], int]:
    """A listening socket whose backlog is full (the kernel drops further SYNs: a connect hangs, as to a host
    that drops packets): (the listener, the connections filling it, its port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    for _ in range(8):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
        if not select.select([], [s], [], 0.3)[1]:
            return listener, fillers, port  # this one hangs: the address answers nothing now
    for s in [listener, *fillers]:
        s.close()
    pytest.skip("could not make a TCP address that answers nothing")


@pytest.mark.slow
def test_a_signal_cluster_that_answers_nothing_does_not_hold_the_stream(pg_db, data_dir):
    """signal.kafka.bootstrap.servers a host that drops packets: each reconnect held the streaming loop for
    KLOG_CLUSTER_TIMEOUT (10 s) every signal.poll.interval.ms, so changes crawled to their topic. Now they
    flow as without the channel; it is named in one warning, and once the cluster is up its signal is acted
    on once and committed, and no thread is left after the stop."""
    from klog.server import Server

    _setup(pg_db)
    _send(data_dir, ("shop", {"id": "s1", "type": "log", "data": {"message": "hello"}}))
    listener, fillers, port = _silent_address()
    config = _kafka_config(pg_db, data_dir, **{"signal.kafka.bootstrap.servers": f"127.0.0.1:{port}"})
    warnings: list[str] = []
    threads = set(threading.enumerate())
    try:
        with running(data_dir, config, warnings=warnings):
            _slot_made(pg_db)
            started = time.monotonic()
            for n in range(5):  # five transactions, a little apart: several polls of the stream
                pg_db.execute(f"INSERT INTO items SELECT g, 'x' FROM generate_series({10 + 4 * n}, {13 + 4 * n}) g")
                time.sleep(0.2)
            wait_for(lambda: len([o for o in _ops(data_dir, "shop.public.items") if o[1] == "c"]) == 20,
                     timeout=15, what="the 20 changes")
            took = time.monotonic() - started
            assert took < 5, f"the changes took {took:.1f} s to reach their topic"
            for s in [listener, *fillers]:
                s.close()
            with Server(data_dir, listen=("127.0.0.1", port), idle_ms=30_000):
                wait_for(lambda: any("signal 's1' (log): hello" in w for w in warnings), timeout=20,
                         what="the signal acted on")
                wait_for(lambda: _committed(data_dir) == 1, timeout=20, what="the signal's offset committed")
                pg_db.execute("INSERT INTO items VALUES (99, 'after')")
                wait_for(lambda: (99, "c") in [o[:2] for o in _ops(data_dir, "shop.public.items")],
                         what="a change after")
    finally:
        for s in [listener, *fillers]:
            s.close()
    assert sum("signal 's1'" in w for w in warnings) == 1, warnings
    unreached = [w for w in warnings if "kafka signal channel" in w and f"127.0.0.1:{port}" in w]
    assert len(unreached) == 1, unreached
    assert set(threading.enumerate()) <= threads


def test_a_read_waits_a_short_bound_for_a_silent_cluster_and_bad_properties_still_fail_the_start():
    """The channel itself: its start and each read wait at most a fraction of a second for an address that
    answers nothing (they waited KLOG_CLUSTER_TIMEOUT, 10 s); a client property librdkafka refuses is still a
    ConfigError at the start, though the cluster is not reached."""
    from klog.connect import signals
    from klog.connect.errors import ConfigError

    listener, fillers, port = _silent_address()
    warnings: list[str] = []
    try:
        started = time.monotonic()
        channel = signals.KafkaChannel({"signal.kafka.bootstrap.servers": f"127.0.0.1:{port}"}, "shop", "pg",
                                       warnings.append)
        try:
            for _ in range(2):
                with pytest.raises(Exception, match="no answer within"):
                    channel.read()
            assert time.monotonic() - started < 3
        finally:
            channel.close()
        assert len(warnings) == 1 and "cannot reach signal.kafka.bootstrap.servers" in warnings[0], warnings
        with pytest.raises(ConfigError, match="no.such.property"):
            signals.KafkaChannel({"signal.kafka.bootstrap.servers": f"127.0.0.1:{port}",
                                  "signal.consumer.no.such.property": "1"}, "shop", "pg", print)
    finally:
        for s in [listener, *fillers]:
            s.close()


@pytest.mark.slow
def test_an_address_that_takes_connections_but_never_answers_is_tried_again_after_a_wait(monkeypatch):
    """An address that takes the TCP connection and answers nothing on it (a port that is not Kafka's, a
    handshake that hangs): the client's first contact fails after KLOG_CLUSTER_TIMEOUT; it is not made again
    at each read (each read held the stream that long), but after a wait, the reads meanwhile failing at once
    with the same message (the task names it once)."""
    from klog.connect import signals

    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "1")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # (never accepted: the kernel takes the connections, nothing answers on them)
    port = listener.getsockname()[1]
    warnings: list[str] = []
    try:
        channel = signals.KafkaChannel({"signal.kafka.bootstrap.servers": f"127.0.0.1:{port}"}, "shop", "pg",
                                       warnings.append)
        try:
            assert len(warnings) == 1 and "within 1 s" in warnings[0], warnings
            started = time.monotonic()
            messages = set()
            for _ in range(5):
                with pytest.raises(Exception, match="cannot reach") as e:
                    channel.read()
                messages.add(str(e.value))
            assert time.monotonic() - started < 2.5
            assert len(messages) == 1 and channel.unreached in messages, messages
        finally:
            channel.close()
    finally:
        listener.close()

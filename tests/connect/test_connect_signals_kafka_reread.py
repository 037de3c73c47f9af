"""A hostile re-read of Debezium's kafka signal channel (klog/connect/signals.py): a connector started while
the signal cluster is not up yet."""

from __future__ import annotations

import socket
import time

import pytest

from klog.connect import signals
from klog.connect.errors import ConfigError
from tests.connect.test_connect_signals_kafka import _committed, _send


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_channel_started_before_its_cluster_reads_it_once_it_is_up(data_dir):
    """signal.kafka.bootstrap.servers a klog serve not up yet when the connector starts (a machine's boot
    starting the worker first): the channel starts (Debezium's KafkaConsumer connects at its first poll),
    names it in one warning, and reads the signals once the cluster is up. It raised a ConfigError, and
    the connector's task failed for good."""
    from klog.server import Server

    _send(data_dir, ("shop", {"id": "a", "type": "log", "data": {}}))
    port = _free_port()
    warnings: list[str] = []
    channel = signals.KafkaChannel({"signal.kafka.bootstrap.servers": f"127.0.0.1:{port}",
                                    "signal.kafka.groupId": "shop-signals"}, "shop", "pg", warnings.append)
    try:
        assert sum("cannot reach signal.kafka.bootstrap.servers" in w for w in warnings) == 1, warnings
        started = time.monotonic()
        with pytest.raises(Exception, match="connection refused"):  # (the task names it, reads again later)
            channel.read()
        assert time.monotonic() - started < 5
        with Server(data_dir, listen=("127.0.0.1", port), idle_ms=30_000):
            ids: list[str] = []
            deadline = time.monotonic() + 20
            while "a" not in ids and time.monotonic() < deadline:
                try:
                    ids += [s[0] for s in channel.read()]
                except Exception:  # noqa: BLE001, S110 - not reached yet
                    pass
                time.sleep(0.1)
            assert ids == ["a"]
            channel.commit()
    finally:
        channel.close(commit=False)
    assert _committed(data_dir) == 1


def test_what_no_retry_mends_still_fails_the_start(data_dir):
    """A local path with no store, or a client property librdkafka refuses: still a ConfigError at the start."""
    with pytest.raises(ConfigError, match="no klog store"):
        signals.KafkaChannel({"signal.kafka.bootstrap.servers": data_dir + "/nothing"}, "shop", "pg", print)
    with pytest.raises(ConfigError, match="signal.kafka.bootstrap.servers"):
        signals.KafkaChannel({"signal.kafka.bootstrap.servers": f"127.0.0.1:{_free_port()}",
                              "signal.consumer.no.such.property": "1"}, "shop", "pg", print)

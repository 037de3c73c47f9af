"""kill -9 of `klog serve` while a Kafka producer writes: every acknowledged record survives, the
producer reconnects to the restarted server and goes on, the log passes `klog verify`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import klog
from tests.conftest import REPO

ck = pytest.importorskip("confluent_kafka")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", f"127.0.0.1:{port}"],
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    assert line.startswith("klog serve: listening"), line
    return proc


@pytest.mark.slow
def test_kill_9_during_produce_keeps_every_acknowledged_record(data_dir):
    port = free_port()
    with klog.open(data_dir) as store:
        store.create_topic("crash", partitions=2)
    server = start_server(data_dir, port)
    acked: list[bytes] = []
    failed: list[bytes] = []

    def on_delivery(err, msg) -> None:
        (failed if err else acked).append(msg.value())

    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "enable.idempotence": True,
                            "linger.ms": 2, "message.timeout.ms": 30000, "reconnect.backoff.ms": 50,
                            "reconnect.backoff.max.ms": 200})
    try:
        sent = 0
        deadline = time.monotonic() + 60
        killed = restarted = False
        while time.monotonic() < deadline:
            producer.produce("crash", value=b"r-%06d" % sent, key=b"%d" % (sent % 4), on_delivery=on_delivery)
            sent += 1
            producer.poll(0)
            if sent % 100 == 0:
                time.sleep(0.005)
            if not killed and len(acked) >= 2000:
                server.send_signal(signal.SIGKILL)  # mid-stream: batches in flight
                server.wait(10)
                killed = True
                acked_at_kill = len(acked)
            elif killed and not restarted:
                server = start_server(data_dir, port)
                restarted = True
            elif restarted and len(acked) >= acked_at_kill + 2000:
                break
        assert producer.flush(30) == 0
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            assert server.wait(15) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    assert killed and restarted
    assert len(acked) >= acked_at_kill + 2000  # the producer reconnected and went on
    with klog.open(data_dir) as store:
        stored = [r.value for r in store.consumer("crash")]
    assert set(acked) <= set(stored)  # nothing acknowledged is lost
    assert len(stored) == len(set(stored))  # idempotence: retries after the restart did not duplicate
    env = {**os.environ, "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-m", "klog", "verify", "-d", data_dir], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr

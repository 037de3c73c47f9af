"""klog serve: framing, ApiVersions, Metadata, start-up and clean stop, seen by real clients."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.serve_helpers import read_answer

KCAT = shutil.which("kcat")


def request(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: bytes = b"",
            flexible: bool = False) -> bytes:
    """Send one raw request (header v1, or v2 when flexible) and return the response frame."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    if flexible:
        header += b"\0"
    frame = header + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    return read_frame(sock)


read_frame = read_answer  # one response frame, read whole


def connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return sock


def test_api_versions_v0_lists_what_the_server_implements(kafka_server):
    with connect(kafka_server) as sock:
        frame = request(sock, 18, 0, 42)
    corr, error, count = struct.unpack_from(">ihi", frame)
    assert corr == 42 and error == 0
    ranges = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0]: struct.unpack_from(">hhh", frame, 10 + 6 * i)[1:]
              for i in range(count)}
    assert ranges[18] == (0, 4)
    assert 3 in ranges  # Metadata


def test_too_new_api_versions_is_answered_in_v0_with_unsupported_version(kafka_server):
    with connect(kafka_server) as sock:
        frame = request(sock, 18, 99, 7, flexible=True)
        corr, error, count = struct.unpack_from(">ihi", frame)
        assert (corr, error) == (7, 35) and count > 0
        frame = request(sock, 18, 0, 8)  # the connection stays usable: the client retries lower
        assert struct.unpack_from(">ih", frame) == (8, 0)


def test_unknown_api_key_closes_only_that_connection(kafka_server):
    with connect(kafka_server) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 999, 0, 1, -1))
        assert sock.recv(10) == b""  # closed
    with connect(kafka_server) as sock:
        assert struct.unpack_from(">ih", request(sock, 18, 0, 9)) == (9, 0)


@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_metadata_auto_creates_and_lists_topics(kafka_server, store):
    out = subprocess.run([KCAT, "-b", kafka_server.bootstrap, "-L", "-t", "orders", "-m", "5"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert 'topic "orders" with 1 partitions' in out.stdout
    assert f"broker 0 at {kafka_server.bootstrap}" in out.stdout
    assert "orders" in store.topic_names()


def test_confluent_admin_lists_topics_created_by_klog(kafka_server, store):
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    store.create_topic("made-locally", partitions=3)
    admin = admin_mod.AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    md = admin.list_topics(timeout=10)
    assert sorted(md.topics["made-locally"].partitions) == [0, 1, 2]
    assert md.cluster_id and len(md.cluster_id) == 22


def test_serve_command_starts_with_one_line_and_stops_on_sigterm(data_dir):
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        assert line.startswith("klog serve: listening on 127.0.0.1:"), line
        assert data_dir in line
        port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            assert struct.unpack_from(">ih", request(sock, 18, 0, 1)) == (1, 0)
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_rejects_a_bad_listen_address(klog_proc):
    out = klog_proc("serve", "--listen", "127.0.0.1:notaport")
    assert out.returncode == 2
    assert out.stderr.decode().startswith("klog: error: --listen: invalid port")


def test_systemd_sample_uses_only_real_options(klog_proc):
    unit = open(os.path.join(REPO, "samples", "klog-serve.service")).read()
    help_text = klog_proc("serve", "--help").stdout.decode()
    starts = [line.split("klog serve", 1)[1] for line in unit.splitlines() if "ExecStart=" in line]
    assert len(starts) == 2
    for args in starts:
        for word in args.split():
            if word.startswith("--"):
                assert word in help_text, word


def test_serve_on_a_port_in_use_is_one_line_exit_1(kafka_server, klog_proc, tmp_path):
    # (another store: a second server on the same store is refused before it listens, test_serve_one_per_store.py)
    out = klog_proc("serve", "--data-dir", str(tmp_path / "other"), "--listen", kafka_server.bootstrap, timeout=30)
    assert out.returncode == 1
    err = out.stderr.decode()
    assert err.startswith(f"klog: error: cannot listen on {kafka_server.bootstrap}") and err.count("\n") == 1


@pytest.mark.slow
def test_sigterm_answers_a_long_polling_fetch_and_exits_0(data_dir):
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    import klog
    from tests.serve_helpers import RawClient

    with klog.open(data_dir) as store:
        store.create_topic("lp")
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        port = int(proc.stderr.readline().split("listening on 127.0.0.1:")[1].split()[0])
        with RawClient(port) as client:
            part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                  log_start_offset=-1, partition_max_bytes=1 << 20)
            fields = dict(replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(seconds=20)), min_bytes=1,
                          max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                          topics=(FetchTopic(topic="lp", partitions=(part,)),), forgotten_topics_data=(), rack_id="")
            import threading

            answers = []
            waiter = threading.Thread(target=lambda: answers.append(client.send(1, 12, **fields)))
            waiter.start()
            time.sleep(0.5)  # the fetch is now waiting for data (up to 20 s)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            waiter.join(10)
            assert answers and answers[0].responses[0].partitions[0].error_code == 0  # answered, empty
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_metadata_names_the_advertised_listener(data_dir):
    from klog.server import Server
    from tests.serve_helpers import RawClient

    with Server(data_dir, listen=("127.0.0.1", 0), advertised=("kafka.example.com", 19092), node_id=7) as server, \
            RawClient(server.port) as client:
        resp = client.send(3, 12, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(7, "kafka.example.com", 19092)]
    assert resp.controller_id == 7


def test_python_api_names(data_dir):
    import klog
    from klog.server import server

    assert klog.Server is server.Server and klog.serve is server.serve
    with klog.Server(data_dir, listen=("127.0.0.1", 0)) as s, socket.create_connection(("127.0.0.1", s.port)) as sock:
        assert struct.unpack_from(">ih", request(sock, 18, 0, 5)) == (5, 0)

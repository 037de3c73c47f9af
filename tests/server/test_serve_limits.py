"""No single client can hurt the others: entries per request (refused unread), duplicate names folded,
connection limits (max.connections, max.connections.per.ip and its overrides), and accepting that backs
off when the process is out of file descriptors instead of logging a traceback loop."""

from __future__ import annotations

import io
import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from klog.server import Server
from klog.server.limits import ServeLimits
from tests.conftest import REPO
from tests.serve_helpers import RawClient, batch, huge_produce, produce, read_answer, repeated_metadata


def metadata_of_free(client: RawClient):  # noqa: ANN201 - a kio response
    return client.send(3, 9, topics=(_topic("free"),), allow_auto_topic_creation=False,
                       include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def _topic(name: str):  # noqa: ANN202
    from kio.schema.metadata.v9.request import MetadataRequestTopic

    return MetadataRequestTopic(name=name)


# -- entries per request ---------------------------------------------------------------------------
def test_a_produce_of_a_million_partition_entries_is_refused_unread(kafka_server, store, caplog):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    store.create_topic("free")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=20) as sock:
        sock.sendall(huge_produce(1_000_000))
        answer = read_answer(sock)
    from kio.schema.produce.v9.response import ProduceResponse
    from kio.serial import entity_reader

    response, _ = entity_reader(ProduceResponse)(answer, 5)  # v9: a flexible header
    assert response.responses == ()  # nothing was appended, nothing answered per partition
    refused = [r.getMessage() for r in caplog.records if "entries" in r.getMessage()]
    assert len(refused) == 1 and "more than 20000 entries" in refused[0], refused
    with RawClient(kafka_server.port) as client:  # the server and that topic are fine
        assert produce(client, "free", 0, batch([b"after"])) == (0, 0)


def test_an_acks0_produce_over_the_limit_closes_its_connection(kafka_server, store):
    store.create_topic("free")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=20) as sock:
        sock.sendall(huge_produce(30_000, acks=0))
        with pytest.raises(ConnectionError):
            read_answer(sock)


def test_a_request_over_the_limit_is_answered_invalid_request_and_the_connection_serves_on(data_dir):
    with Server(data_dir, listen=("127.0.0.1", 0), limits=ServeLimits(max_request_entries=10)) as server, \
            RawClient(server.port) as client:
        answer = client.send(42, 2, groups_names=tuple(f"g{i}" for i in range(11)))  # DeleteGroups: no top error
        assert answer.results == ()
        ok = client.send(42, 2, groups_names=tuple(f"g{i}" for i in range(10)))
        assert len(ok.results) == 10
        from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic

        topics = tuple(DescribableLogDirTopic(topic=f"t{i}", partitions=()) for i in range(11))
        refused = client.send(35, 4, topics=topics)
        assert refused.error_code == ErrorCode.invalid_request


def test_metadata_naming_one_topic_many_times_answers_it_once(kafka_server, store):
    store.create_topic("free")
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=20) as sock:
        sock.sendall(repeated_metadata(5_000))
        answer = read_answer(sock)
    from kio.schema.metadata.v9.response import MetadataResponse
    from kio.serial import entity_reader

    response, _ = entity_reader(MetadataResponse)(answer, 5)
    assert [t.name for t in response.topics] == ["free"]


# -- one hostile client at full speed, another's Metadata ------------------------------------------
HOSTILE_S = 6.0


@pytest.mark.slow
def test_a_hostile_client_at_full_speed_leaves_another_clients_metadata_prompt(kafka_server, store):
    """One client sends, as fast as the server reads them, Produce requests of 1,000,000 partition
    entries, Metadata naming one topic 500,000 times and Produce requests just under the entry
    limit; meanwhile another client's Metadata answers are timed. Before the bound each hostile
    request held the event loop for seconds. The bound asserted is generous (a shared 2-core
    machine); benchmarks/serve_fairness.py records the figure."""
    store.create_topic("free")
    frames = [huge_produce(1_000_000), repeated_metadata(500_000), huge_produce(19_000)]
    stop = threading.Event()
    sent: list[int] = []

    def hostile() -> None:
        with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=30) as sock:
            i = 0
            while not stop.is_set() and i < 1000:  # bounded in count and (by HOSTILE_S) in time
                sock.sendall(frames[i % len(frames)])
                read_answer(sock)
                i += 1
            sent.append(i)

    attacker = threading.Thread(target=hostile, daemon=True)
    attacker.start()
    latencies = []
    with RawClient(kafka_server.port) as client:
        time.sleep(0.3)  # the attack is under way
        deadline = time.monotonic() + HOSTILE_S
        while time.monotonic() < deadline:
            started = time.monotonic()
            answer = metadata_of_free(client)
            latencies.append(time.monotonic() - started)
            assert [t.name for t in answer.topics] == ["free"]
    stop.set()
    attacker.join(30)
    assert sent and sent[0] >= 3, "the hostile client did not get its answers"
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(f"\nhostile requests answered: {sent[0]}; other client's Metadata: {len(latencies)} answers, "
          f"median {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {latencies[-1] * 1000:.1f} ms")
    assert p99 < 1.0, f"p99 {p99 * 1000:.0f} ms"


# -- connections -----------------------------------------------------------------------------------
def _open(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def _answered(port: int) -> bool:
    """ApiVersions on a new connection, or False when the server closes it."""
    try:
        with RawClient(port) as client:
            client.sock.settimeout(5)
            return client.send(18, 0).error_code == 0
    except (ConnectionError, OSError):
        return False


def _settled(server: Server, open_count: int) -> None:
    """Wait (bounded) until the server has counted `open_count` connections."""
    for _ in range(200):
        if server.gate.total == open_count:
            return
        time.sleep(0.01)


def test_max_connections_refuses_beyond_the_limit_with_one_log_line(data_dir, caplog):
    caplog.set_level(logging.WARNING, logger="klog.serve")
    with Server(data_dir, listen=("127.0.0.1", 0), limits=ServeLimits(max_connections=3)) as server:
        held = _open(server.port, 3)
        try:
            _settled(server, 3)
            assert not any(_answered(server.port) for _ in range(20))
        finally:
            for sock in held:
                sock.close()
        _settled(server, 0)
        assert _answered(server.port)  # slots free again
    refusals = [r for r in caplog.records if "max.connections" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]


def test_max_connections_per_ip_and_its_overrides(data_dir):
    limits = ServeLimits(max_connections_per_ip=2)
    with Server(data_dir, listen=("127.0.0.1", 0), limits=limits) as server:
        held = _open(server.port, 2)
        _settled(server, 2)
        assert not _answered(server.port)
        limits.per_ip_overrides["127.0.0.1"] = 4  # Kafka's max.connections.per.ip.overrides
        assert _answered(server.port)
        for sock in held:
            sock.close()


@pytest.mark.slow
def test_serve_options_for_the_limits(klog_proc):
    bad = klog_proc("serve", "--max-connections-per-ip-overrides", "localhost", "-l", "127.0.0.1:0")
    assert bad.returncode == 2 and b"HOST:COUNT" in bad.stderr, bad.stderr
    bad = klog_proc("serve", "--max-request-entries", "0", "-l", "127.0.0.1:0")
    assert bad.returncode == 2 and b"--max-request-entries must be 1 or more" in bad.stderr, bad.stderr


_LOW_FD_SERVER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
from klog.cli.app import run
sys.exit(run(["serve", "-l", "127.0.0.1:" + sys.argv[2], "--max-connections", "100000", "-d", sys.argv[3]]))
"""


@pytest.mark.slow
def test_out_of_file_descriptors_backs_off_accepting_without_a_traceback_loop(data_dir, tmp_path):
    """With the process at 120 open files and max.connections set far above it, 200 idle connections
    exhaust the descriptors: the server logs a few lines (not a traceback per attempt), and once the
    idle connections go, a client is served again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    err_path = tmp_path / "serve.err"
    env = {**os.environ, "PYTHONPATH": REPO}
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", _LOW_FD_SERVER, "120", str(port), data_dir],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        for _ in range(300):  # bounded: ~30 s for start-up
            if b"listening on" in err_path.read_bytes():
                break
            assert proc.poll() is None, err_path.read_text()
            time.sleep(0.1)
        held = []
        try:
            for _ in range(200):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))  # the backlog takes them
            time.sleep(3)  # the server tries to accept for a while
            assert proc.poll() is None
        finally:
            for sock in held:
                sock.close()
        ok = False
        for _ in range(50):  # bounded: ~10 s
            if _answered(port):
                ok = True
                break
            time.sleep(0.2)
        assert ok, "no answer after the idle connections closed"
    finally:
        proc.terminate()
        proc.wait(20)
    text = err_path.read_text()
    assert "Traceback" not in text, text[:2000]
    lines = [line for line in text.splitlines() if "cannot accept" in line]
    assert 1 <= len(lines) <= 3, text[:2000]


# -- JoinGroup storms --------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_join_group_storm_stops_at_group_max_size_and_others_are_answered(kafka_server, store):
    """One client joins one group 150 times with 26 KB subscriptions (group.max.size lowered to 100
    for the test): the 50 beyond it are answered GROUP_MAX_SIZE_REACHED at once, another client's
    Metadata is answered meanwhile, and the 100 members get their rebalance."""
    import datetime as dt

    from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.join_group.v3.response import JoinGroupResponse
    from kio.static.primitive import i32Timedelta

    store.create_topic("free")
    kafka_server.coordinator.machine.max_size = 100
    request = JoinGroupRequest(group_id="storm", session_timeout=i32Timedelta.parse(dt.timedelta(seconds=30)),
                               rebalance_timeout=i32Timedelta.parse(dt.timedelta(seconds=5)), member_id="",
                               protocol_type="consumer",
                               protocols=(JoinGroupRequestProtocol(name="range", metadata=bytes(26_000)),))
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_writer

    clients = [RawClient(kafka_server.port) for _ in range(150)]
    try:
        for c in clients:  # sent, not yet read: the joins wait for the rebalance
            c.correlation += 1
            buf = io.BytesIO()
            entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=11, request_api_version=3,
                                                            correlation_id=c.correlation, client_id="storm"))
            entity_writer(JoinGroupRequest)(buf, request)
            c.send_raw(buf.getvalue())
        with RawClient(kafka_server.port) as other:
            started = time.monotonic()
            assert [t.name for t in metadata_of_free(other).topics] == ["free"]
            print(f"\nMetadata during the storm: {(time.monotonic() - started) * 1000:.1f} ms")
        codes = []
        for c in clients:
            c.sock.settimeout(30)
            codes.append(int(c.read(JoinGroupResponse).error_code))
    finally:
        for c in clients:
            c.close()
    assert codes.count(ErrorCode.group_max_size_reached.value) == 50, codes
    assert codes.count(0) == 100, codes

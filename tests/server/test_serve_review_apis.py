"""Review of klog serve's newest pieces (one server per store, AlterReplicaLogDirs, delegation
tokens, acks=0 failures, strings not UTF-8): what a hostile client or a long-lived embedding sees."""

from __future__ import annotations

import os
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


# -- AlterReplicaLogDirs --------------------------------------------------------------------------------
@pytest.fixture
def two_dirs(data_dir):
    """The store's two log directories by id; topic t's two partitions one in each."""
    import klog

    with klog.open(data_dir) as store:
        store.add_dir(os.path.join(data_dir, "disk2"))
        store.create_topic("t", 2)
        return {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}


def _move(port: int, path: str, topic: str, partitions: tuple[int, ...], version: int = 2) -> dict[int, int]:
    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    from tests.serve_helpers import RawClient

    with RawClient(port) as client:
        client.sock.settimeout(60)
        answer = client.send(34, version, dirs=(AlterReplicaLogDir(path=path, topics=(
            AlterReplicaLogDirTopic(name=topic, partitions=partitions),)),))
    return {int(p.partition_index): int(p.error_code) for t in answer.results for p in t.partitions}


@pytest.mark.slow
def test_concurrent_moves_of_one_partition_each_answer_as_kafka(data_dir, two_dirs):
    """Two connections move one partition at once, to the same directory and then each to another:
    each answer is Kafka's (no error: the partition is, or goes, there), never UNKNOWN_SERVER_ERROR from a
    move that read the partition's replicas before the other one changed them; no record lost."""
    import threading

    import klog
    from tests.serve_helpers import RawClient, batch, produce

    with Server(data_dir, listen=("127.0.0.1", 0)) as server:
        home = list(server.store.topic("t").partitions[0].replicas)[0]
        other = next(d for d in two_dirs if d != home)
        with RawClient(server.port) as client:
            for i in range(40):  # a partition whose copy takes a moment
                assert produce(client, "t", 0, batch([bytes([i]) * 50_000] * 4))[0] == 0
        for targets in ([other, other], [home, other], [other, home]):
            barrier = threading.Barrier(len(targets))
            answers: list[dict[int, int]] = [{} for _ in targets]

            def move(i: int, target: int, barrier: threading.Barrier) -> None:
                barrier.wait(10)
                answers[i] = _move(server.port, two_dirs[target], "t", (0,))  # noqa: B023 - joined below

            threads = [threading.Thread(target=move, args=(i, t, barrier)) for i, t in enumerate(targets)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert answers == [{0: 0}] * len(targets), (targets, answers)
    with klog.open(data_dir) as store:
        assert store.offsets("t")[0] == 160
        assert not [p for p in store.verify("t") if p["problems"]]


def test_a_long_move_holds_no_thread_other_clients_need(data_dir, two_dirs, monkeypatch):
    """A move copies the partition (Kafka moves in the background, klog answers once moved): while it
    copies, another client's Metadata (answered in the server's threads) is answered, not queued behind
    it, even with one worker thread (moves have their own)."""
    import threading
    import time

    from klog.broker import replication

    copying, go_on = threading.Event(), threading.Event()
    real = replication.move_replica

    def slow_move(*args, **kwargs):  # a big partition's copy: until the Metadata below is answered
        copying.set()
        go_on.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(replication, "move_replica", slow_move)
    from tests.serve_helpers import RawClient

    with Server(data_dir, listen=("127.0.0.1", 0), workers=1) as server:
        home = list(server.store.topic("t").partitions[0].replicas)[0]
        other = next(d for d in two_dirs if d != home)
        moved: list[dict[int, int]] = []
        mover = threading.Thread(target=lambda: moved.append(_move(server.port, two_dirs[other], "t", (0,))))
        mover.start()
        try:
            assert copying.wait(10)
            started = time.monotonic()
            with RawClient(server.port) as client:
                assert client.send(3, 9, topics=None, allow_auto_topic_creation=False,
                                   include_cluster_authorized_operations=False,
                                   include_topic_authorized_operations=False).topics
            assert not go_on.is_set() and time.monotonic() - started < 5  # answered while the move waits
        finally:
            go_on.set()
            mover.join(30)
        assert moved == [{0: 0}]
        assert list(server.store.topic("t").partitions[0].replicas) == [other]


# -- delegation tokens, OffsetCommit: a long past what a Python timedelta holds ----------------------------
MARK_MS = 0x0123456789AB  # a period written by kio, then its 8 bytes replaced by a hostile long


def _with_long(api_key: int, version: int, correlation: int, value: int, **fields: object) -> bytes:
    """A request frame whose timedelta_i64 field (given as MARK_MS) holds `value` instead."""
    import io
    import struct

    from kio.schema.request_header.v1.header import RequestHeader as H1
    from kio.schema.request_header.v2.header import RequestHeader as H2
    from kio.serial import entity_writer

    from klog.protocol.kafka import make
    from klog.protocol.schemas import request_schema

    cls = request_schema(api_key, version)
    header = H2 if cls.__flexible__ else H1
    buf = io.BytesIO()
    entity_writer(header)(buf, header(request_api_key=api_key, request_api_version=version,
                                      correlation_id=correlation, client_id="longs"))
    entity_writer(cls)(buf, make(cls, **fields))
    frame = buf.getvalue()
    mark = struct.pack(">q", MARK_MS)
    assert frame.count(mark) == 1
    return frame.replace(mark, struct.pack(">q", value))


def _period():  # noqa: ANN202 - kio's i64Timedelta
    import datetime

    from kio.static.primitive import i64Timedelta

    return i64Timedelta.parse(datetime.timedelta(milliseconds=MARK_MS))


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63)], ids=["max", "min"])
def test_token_requests_holding_any_long_are_answered_not_closed(kafka_server, value):
    """Kafka reads any long as a token's max lifetime, renew or expiry period (kafka-delegation-tokens
    passes what it is given); kio's reader refused one past a timedelta's range and the connection
    closed. Each version is answered as any other value is: not allowed on PLAINTEXT."""
    import importlib
    import struct

    from klog.protocol.schemas import request_schema
    from tests.serve_helpers import RawClient
    from tests.server.test_serve_tokens import NOT_ALLOWED, create_answer, renewal_answer

    with RawClient(kafka_server.port) as client:
        correlation = 0

        def answer(frame: bytes, flexible: bool) -> bytes:
            nonlocal correlation
            client.send_raw(frame)
            (size,) = struct.unpack(">i", client._exactly(4))
            got = client._exactly(size)
            assert struct.unpack_from(">i", got)[0] == correlation
            return got[4 + (1 if flexible else 0):]

        for version in range(4):
            correlation += 1
            cls = request_schema(38, version)
            renewers = (importlib.import_module(cls.__module__).CreatableRenewers(principal_type="User",
                                                                               principal_name="bob"),)
            frame = _with_long(38, version, correlation, value, owner_principal_type=None, owner_principal_name=None,
                               renewers=renewers, max_lifetime=_period())
            assert create_answer(answer(frame, cls.__flexible__), version)["error"] == NOT_ALLOWED
        for api_key, field in ((39, "renew_period"), (40, "expiry_time_period")):
            for version in range(3):
                correlation += 1
                frame = _with_long(api_key, version, correlation, value, hmac=b"h", **{field: _period()})
                flexible = request_schema(api_key, version).__flexible__
                assert renewal_answer(answer(frame, flexible)) == (NOT_ALLOWED, -1)
        assert client.send(18, 0).error_code == 0  # the same connection, still served


def test_offset_commit_v2_with_a_huge_retention_time_commits(kafka_server):
    """OffsetCommit v2-v4's retention time (a long; clients send -1) past a timedelta's range: Kafka
    commits (the broker's retention applies since Kafka 2.1), klog closed the connection."""
    from kio.schema.offset_commit.v2.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic
    from kio.schema.offset_commit.v2.response import OffsetCommitResponse

    from tests.serve_helpers import RawClient

    kafka_server.store.create_topic("kept", 1)
    with RawClient(kafka_server.port) as client:
        client.correlation = 9
        client.send_raw(_with_long(8, 2, 9, 2**63 - 1, group_id="keeper", generation_id_or_member_epoch=-1,
                                   member_id="", retention_time=_period(), topics=(OffsetCommitRequestTopic(
                                       name="kept", partitions=(OffsetCommitRequestPartition(
                                           partition_index=0, committed_offset=0, committed_metadata=None),)),)))
        answer = client.read(OffsetCommitResponse)
        assert [[p.error_code for p in t.partitions] for t in answer.topics] == [[0]]


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.2])
def test_a_server_killed_mid_move_keeps_every_record(data_dir, two_dirs, delay_s):
    """`klog serve` killed with -9 while AlterReplicaLogDirs copies a partition (at once, a little
    later, near the end): every record written before is still there, once, the segments verify, and
    the next server appends to the partition."""
    import signal
    import subprocess
    import sys
    import threading
    import time

    import klog
    from tests.conftest import REPO

    with klog.open(data_dir) as store:
        home = list(store.topic("t").partitions[0].replicas)[0]
        with store.producer() as producer:
            for i in range(3000):
                producer.send("t", bytes([i % 256]) * 10_000, partition=0)
    other = next(d for d in two_dirs if d != home)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
        threading.Thread(target=lambda: _move_quietly(port, two_dirs[other]), daemon=True).start()
        deadline = time.monotonic() + 20
        while not os.path.isdir(os.path.join(two_dirs[other], "t-0")) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay_s)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
        proc.wait(10)
    with klog.open(data_dir) as store:
        values = [r.value for r in store.consumer("t", partitions=[0])]
        assert len(values) == 3000 and all(v == bytes([i % 256]) * 10_000 for i, v in enumerate(values))
        assert not [p for p in store.verify("t") if p["problems"]]
    # (a move cut short is settled by the next write, this produce: test_serve_move_pending.py checks it)
    from tests.serve_helpers import RawClient, batch, produce

    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert produce(client, "t", 0, batch([b"after"])) == (0, 3000)
    with klog.open(data_dir) as store:
        assert store.offsets("t")[0] == 3001
        assert not [p for p in store.verify("t") if p["problems"]]


def _move_quietly(port: int, path: str) -> None:
    try:
        _move(port, path, "t", (0,))
    except (OSError, ConnectionError):
        pass  # (the server is killed under it)


def test_token_requests_past_the_entry_bound_are_refused_in_an_answer(data_dir):
    """A CreateDelegationToken naming more renewers than --max-request-entries (or a Describe more
    owners) is refused as every such request is, INVALID_REQUEST with Kafka's -1 error timestamps: the
    refusal's answer could not be written (its timestamps were ints) and the connection closed on an
    internal error."""
    import importlib
    import struct

    from klog.protocol.schemas import request_schema
    from klog.server.limits import ServeLimits
    from tests.serve_helpers import RawClient
    from tests.server.test_serve_tokens import create_answer

    with Server(data_dir, listen=("127.0.0.1", 0), limits=ServeLimits(max_request_entries=100)) as server, \
            RawClient(server.port) as client:
        for version in range(4):
            cls = request_schema(38, version)
            renewer = importlib.import_module(cls.__module__).CreatableRenewers
            client.send_raw(_with_long(38, version, version, -1, owner_principal_type=None, owner_principal_name=None,
                                       max_lifetime=_period(), renewers=tuple(
                                           renewer(principal_type="User", principal_name=f"u{i}") for i in range(500))))
            (size,) = struct.unpack(">i", client._exactly(4))
            got = create_answer(client._exactly(size)[4 + (1 if cls.__flexible__ else 0):], version)
            assert (got["error"], got["issue"], got["expiry"], got["max"]) == (42, -1, -1, -1)
        for version in range(4):
            cls = request_schema(41, version)
            owner = importlib.import_module(cls.__module__).DescribeDelegationTokenOwner
            answer = client.send(41, version, owners=tuple(owner(principal_type="User", principal_name=f"u{i}")
                                                           for i in range(500)))
            assert (answer.error_code, answer.tokens) == (42, ())


@pytest.mark.slow
def test_moves_while_another_process_produces_and_the_server_serves(data_dir, two_dirs):
    """`klog produce` in another process writes t-0 line by line while AlterReplicaLogDirs moves t-0
    back and forth and a client of the server produces to it and fetches: every record of both is there
    once, in each writer's order, and the segments verify."""
    import subprocess
    import sys
    import threading

    import klog
    from tests.conftest import REPO
    from tests.serve_helpers import RawClient, batch, produce

    lines = 4000
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    with Server(data_dir, listen=("127.0.0.1", 0)) as server:
        writer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "-p", "0", "--linger-ms", "0",
                                   "--batch-size", "200"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        stop = threading.Event()
        served: list[int] = []

        def serve_side() -> None:
            with RawClient(server.port) as client:
                client.sock.settimeout(60)
                i = 0
                while not stop.is_set() and i < 2000:
                    error, _ = produce(client, "t", 0, batch([b"s%d" % i]))
                    assert error == 0
                    served.append(i)
                    i += 1

        side = threading.Thread(target=serve_side)
        side.start()
        try:
            feeder = threading.Thread(target=lambda: (writer.stdin.write(b"".join(b"p%d\n" % i for i in range(lines))),
                                                      writer.stdin.close()))
            feeder.start()
            moves = 0
            while moves < 4 or (writer.poll() is None and moves < 40):  # (moves while it writes)
                where = list(server.store.topic("t").partitions[0].replicas)[0]
                target = next(d for d in two_dirs if d != where)
                assert _move(server.port, two_dirs[target], "t", (0,)) == {0: 0}
                moves += 1
            feeder.join(60)
            writer.wait(120)
            err = writer.stderr.read()
            assert writer.returncode == 0, err
        finally:
            stop.set()
            side.join(60)
            writer.kill()
    with klog.open(data_dir) as store:
        values = [r.value for r in store.consumer("t", partitions=[0])]
        assert [v for v in values if v.startswith(b"p")] == [b"p%d" % i for i in range(lines)]
        assert [v for v in values if v.startswith(b"s")] == [b"s%d" % i for i in served]
        assert not [p for p in store.verify("t") if p["problems"]]

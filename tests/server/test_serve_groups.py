"""Consumer groups over the Kafka protocol: real clients (confluent-kafka, kafka-python, aiokafka,
kcat) in groups coordinated by `klog serve`, their offsets in the same LMDB as `klog groups`.
Every loop is bounded in count and time; every process and client started here is stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import typing
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from klog import open as klog_open
from tests.conftest import REPO

KCAT = shutil.which("kcat")
# kafka-python reads its schemas with importlib.resources' deprecated helpers
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: the shortest session a client may ask for
FAST = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000}


def klog_cli(data_dir: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, text=True, env=env, timeout=60,
                          input=stdin)


def produce(server, topic: str, values: list[bytes], partitions: int | None = None) -> None:
    from confluent_kafka import Producer

    if partitions is not None:
        server.store.create_topic(topic, partitions=partitions)
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=b"k%d" % i)
    assert p.flush(20) == 0


def confluent_consumer(server, group: str, **extra):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, **FAST, **extra})


class Tracker:
    """One in-process confluent consumer: what it read, what it holds."""

    def __init__(self, consumer, topic: str, cooperative: bool = False) -> None:
        self.consumer = consumer
        self.cooperative = cooperative
        self.values: list[bytes] = []
        self.assigned: set[int] = set()
        self.failed_commits = 0  # refused during a rebalance (Kafka does too): the record may be read again
        consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions) -> None:
        if self.cooperative:
            self.assigned |= {p.partition for p in partitions}
            consumer.incremental_assign(partitions)
        else:
            self.assigned = {p.partition for p in partitions}
            consumer.assign(partitions)

    def _on_revoke(self, consumer, partitions) -> None:
        # nothing to commit here: every record read is committed at once (poll)
        if self.cooperative:
            self.assigned -= {p.partition for p in partitions}
            consumer.incremental_unassign(partitions)
        else:
            self.assigned = set()
            consumer.unassign()

    def poll(self, timeout: float = 0.1) -> None:
        msg = self.consumer.poll(timeout)
        if msg is not None and msg.error() is None:
            from confluent_kafka import KafkaError, KafkaException

            self.values.append(msg.value())
            try:
                self.consumer.commit(msg, asynchronous=False)
            except KafkaException as e:
                # a cooperative member keeps reading while the group completes a rebalance; Kafka refuses
                # its commits then with REBALANCE_IN_PROGRESS, as here
                if e.args[0].code() != KafkaError.REBALANCE_IN_PROGRESS:
                    raise
                self.failed_commits += 1


def close_all(trackers: tuple[Tracker | None, ...]) -> None:
    """Close each tracker's consumer (None: never made; one closed already is skipped)."""
    for t in trackers:
        if t is not None:
            try:
                t.consumer.close()
            except RuntimeError:
                pass  # already closed


def poll_until(trackers: list[Tracker], done, seconds: float, what: str, extra=lambda: None) -> None:
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds * 50)):
        for t in trackers:
            t.poll(0.05)
        extra()
        if done():
            return
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"timed out waiting for {what}: " + "; ".join(
        f"assigned {sorted(t.assigned)}, read {len(t.values)}" for t in trackers))


CHILD = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 300, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
def on_assign(consumer, parts):
    consumer.assign(parts)
    print("assigned", ",".join(str(p.partition) for p in parts), flush=True)
c.subscribe([sys.argv[3]], on_assign=on_assign)
while True:
    m = c.poll(0.1)
    if m is not None and m.error() is None:
        c.commit(m, asynchronous=False)
        print("value", m.value().decode(), flush=True)
"""


class Child:
    """A confluent consumer in a subprocess (so it can be SIGKILLed); reads its lines without blocking."""

    def __init__(self, server, group: str, topic: str) -> None:
        env = {**os.environ, "PYTHONPATH": REPO}
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, server.bootstrap, group, topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""
        self.values: list[bytes] = []
        self.assigned: set[int] = set()

    def read(self) -> None:
        chunk = self.proc.stdout.read() or b""
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            kind, _, rest = line.partition(b" ")
            if kind == b"value":
                self.values.append(rest)
            elif kind == b"assigned":
                self.assigned = {int(p) for p in rest.split(b",") if p}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


@pytest.mark.slow
def test_confluent_group_of_three_rebalances_on_leave_and_on_sigkill(kafka_server, data_dir):
    produce(kafka_server, "orders", values(300), partitions=6)
    child = Child(kafka_server, "three", "orders")
    a = Tracker(confluent_consumer(kafka_server, "three", **{"client.id": "a"}), "orders")
    b = Tracker(confluent_consumer(kafka_server, "three", **{"client.id": "b"}), "orders")
    try:
        everyone = lambda: a.assigned | b.assigned | child.assigned  # noqa: E731
        poll_until([a, b], lambda: len(a.values) + len(b.values) + len(child.values) >= 300
                   and a.assigned and b.assigned and child.assigned, 60, "three members to read 300 records",
                   child.read)
        assert everyone() == set(range(6))
        assert not a.assigned & b.assigned and not (a.assigned | b.assigned) & child.assigned
        assert sorted(a.values + b.values + child.values) == sorted(values(300))  # each once
        listed = klog_cli(data_dir, "groups", "list")
        row = next(line.split() for line in listed.stdout.splitlines() if line.startswith("three "))
        assert row[1:3] == ["Stable", "3"] and row[-1] == "orders", listed.stdout
        described = klog_cli(data_dir, "groups", "describe", "three", "--json")
        assert described.returncode == 0 and "\"lag\": 0" in described.stdout, described

        # b leaves cleanly: a and the child share its partitions at once
        b.consumer.close()
        poll_until([a], lambda: a.assigned and child.assigned and (a.assigned | child.assigned) == set(range(6))
                   and not a.assigned & child.assigned, 30, "a and the child to take over b's partitions",
                   child.read)

        # the child is SIGKILLed: after its session times out, a holds everything
        child.kill()
        started = time.monotonic()
        poll_until([a], lambda: a.assigned == set(range(6)), 40, "a to take over the killed member's partitions")
        assert time.monotonic() - started >= SESSION_MS / 1000 - 1  # expelled by the session timeout
        produce(kafka_server, "orders", values(60, "w"))
        poll_until([a], lambda: set(values(60, "w")) <= set(a.values), 30, "a to read the new records")
        assert set(a.values) | set(b.values) | set(child.values) == set(values(300)) | set(values(60, "w"))
    finally:
        child.kill()
        close_all((a, b))
    described = klog_cli(data_dir, "groups", "describe", "three", "--json")
    assert described.returncode == 0 and '"lag": 0' in described.stdout and '"lag": 1' not in described.stdout


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["roundrobin", "cooperative-sticky"])
def test_confluent_assignors_share_partitions(kafka_server, strategy):
    produce(kafka_server, "jobs", values(120), partitions=4)
    extra = {"partition.assignment.strategy": strategy}
    coop = strategy == "cooperative-sticky"
    a = Tracker(confluent_consumer(kafka_server, "assign-" + strategy, **extra), "jobs", coop)
    b = None
    try:
        poll_until([a], lambda: len(a.values) >= 40 and a.assigned == set(range(4)), 30, "a to start reading")
        b = Tracker(confluent_consumer(kafka_server, "assign-" + strategy, **extra), "jobs", coop)
        poll_until([a, b], lambda: len(a.values) + len(b.values) >= 120 and a.assigned and b.assigned
                   and a.assigned | b.assigned == set(range(4)) and not a.assigned & b.assigned, 40,
                   "a and b to share the partitions")
        assert set(a.values + b.values) == set(values(120))
        assert len(a.values + b.values) <= 120 + a.failed_commits + b.failed_commits
        b.consumer.close()  # a clean leave: a takes b's partitions (incrementally with cooperative-sticky)
        poll_until([a], lambda: a.assigned == set(range(4)), 30, "a to take b's partitions")
    finally:
        close_all((a, b))


@pytest.mark.slow
def test_group_offsets_are_klogs_lag_and_reset_moves_where_a_client_resumes(kafka_server, data_dir):
    produce(kafka_server, "events", values(50), partitions=1)
    a = Tracker(confluent_consumer(kafka_server, "resets"), "events")
    try:
        poll_until([a], lambda: len(a.values) == 50, 30, "50 records")
        produce(kafka_server, "events", values(5, "late"))
        described = klog_cli(data_dir, "groups", "describe", "resets")
        assert described.returncode == 0
        row = [line.split() for line in described.stdout.splitlines() if line.startswith("events")][0]
        assert row[2] == "50" and row[5] in ("0", "5"), described.stdout  # the late ones may be read already
        refused = klog_cli(data_dir, "groups", "reset-offsets", "resets", "--topic", "events", "--to-earliest",
                           "--execute")
        assert refused.returncode == 1 and "live member" in refused.stderr and "Kafka client" in refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr  # one line
    finally:
        a.consumer.close()
    ok = klog_cli(data_dir, "groups", "reset-offsets", "resets", "--topic", "events", "--to-offset", "45",
                  "--execute")
    assert ok.returncode == 0, ok.stderr
    again = Tracker(confluent_consumer(kafka_server, "resets"), "events")
    try:
        poll_until([again], lambda: len(again.values) >= 10, 30, "the reset offsets")
        assert again.values[:10] == values(50)[45:] + values(5, "late")
    finally:
        again.consumer.close()


@pytest.mark.slow  # ~3 s of a real client's group join; CI's full suite runs it
def test_kafka_python_group_consumer(kafka_server, data_dir):
    from kafka import KafkaConsumer, TopicPartition

    produce(kafka_server, "kp", values(40), partitions=2)
    consumer = KafkaConsumer("kp", bootstrap_servers=kafka_server.bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=500, consumer_timeout_ms=20_000)
    try:
        got = []
        for msg in consumer:
            got.append(msg.value)
            if len(got) == 40:
                break
        consumer.commit()
        assert sorted(got) == sorted(values(40))
        assert consumer.committed(TopicPartition("kp", 0)) + consumer.committed(TopicPartition("kp", 1)) == 40
    finally:
        consumer.close()
    committed = klog_cli(data_dir, "groups", "describe", "kp-group", "--json")
    assert committed.returncode == 0 and committed.stdout.count('"lag": 0') == 2, committed.stdout


@pytest.mark.slow  # ~3 s of a real client's group join; CI's full suite runs it
def test_aiokafka_group_consumer(kafka_server):
    from aiokafka import AIOKafkaConsumer

    produce(kafka_server, "aio", values(30), partitions=3)

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer("aio", bootstrap_servers=kafka_server.bootstrap, group_id="aio-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(30):
                while len(got) < 30:
                    batches = await consumer.getmany(timeout_ms=500)
                    got.extend(m.value for msgs in batches.values() for m in msgs)
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(consume())
    assert sorted(got) == sorted(values(30))
    from klog.meta.groups import GroupsMeta

    committed = GroupsMeta(kafka_server.store.meta).committed("aio-group")
    assert sum(c.offset for c in committed.values()) == 30


@pytest.mark.slow
@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_balanced_consumer(kafka_server):
    produce(kafka_server, "kc", values(25), partitions=2)
    out = subprocess.run([KCAT, "-b", kafka_server.bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest",
                          "-X", "session.timeout.ms=6000", "-e", "-q", "-f", "%s\n", "kc"],
                         capture_output=True, timeout=60)
    assert sorted(out.stdout.split()) == sorted(values(25)), out.stderr[-500:]


@pytest.mark.slow
def test_confluent_admin_lists_describes_and_deletes_groups_and_offsets(kafka_server, data_dir):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    produce(kafka_server, "adm", values(10), partitions=2)
    a = Tracker(confluent_consumer(kafka_server, "adm-group", **{"client.id": "admin-test"}), "adm")
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    kp_admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        poll_until([a], lambda: len(a.values) == 10, 30, "10 records")
        listed = admin.list_consumer_groups().result(10)
        assert {g.group_id: g.state.name for g in listed.valid}["adm-group"] == "STABLE"
        desc = admin.describe_consumer_groups(["adm-group"])["adm-group"].result(10)
        assert desc.state.name == "STABLE" and desc.partition_assignor == "range"
        (member,) = desc.members
        assert member.client_id == "admin-test"
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("adm-group")])["adm-group"]
        assert sum(tp.offset for tp in offsets.result(10).topic_partitions) == 10
        busy = admin.delete_consumer_groups(["adm-group"])["adm-group"]
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            busy.result(10)
        # OffsetDelete (confluent-kafka's Python AdminClient lacks it; kafka-python has it)
        errors = kp_admin.delete_group_offsets("adm-group", [KpTopicPartition("adm", 0)])
        assert [e.__name__ for e in errors.values()] == ["GroupSubscribedToTopicError"]
    finally:
        a.consumer.close()
    errors = kp_admin.delete_group_offsets("adm-group", [KpTopicPartition("adm", 0)])
    assert [e.__name__ for e in errors.values()] == ["NoError"]
    kp_admin.close()
    from klog.meta.groups import GroupsMeta

    assert [tp[1] for tp in GroupsMeta(kafka_server.store.meta).committed("adm-group")] == [1]
    admin.delete_consumer_groups(["adm-group"])["adm-group"].result(10)
    assert GroupsMeta(kafka_server.store.meta).committed("adm-group") == {}
    assert "adm-group" not in klog_cli(data_dir, "groups", "list").stdout
    # klog's own groups are listed over the protocol too
    with kafka_server.store.group_consumer("klog-own", "adm", follow=False) as own:
        next(iter(own))
        listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        assert "klog-own" in listed


@pytest.mark.slow
def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(kafka_server):
    produce(kafka_server, "st", values(40), partitions=4)
    a = Tracker(confluent_consumer(kafka_server, "static", **{"group.instance.id": "inst-a"}), "st")
    b = Tracker(confluent_consumer(kafka_server, "static", **{"group.instance.id": "inst-b"}), "st")
    again = None
    try:
        poll_until([a, b], lambda: len(a.values) + len(b.values) == 40 and a.assigned and b.assigned, 30,
                   "two static members to read 40 records")
        group = kafka_server.coordinator.machine.groups["static"]
        generation, held_by_a = group.generation, set(a.assigned)
        a.consumer.close()  # a static member does not leave on close: its partitions wait for it
        b_before = set(b.assigned)
        again = Tracker(confluent_consumer(kafka_server, "static", **{"group.instance.id": "inst-a"}), "st")
        poll_until([again, b], lambda: again.assigned == held_by_a, 20, "the restarted member's partitions")
        assert group.generation == generation and b.assigned == b_before
    finally:
        close_all((a, b, again))


@pytest.mark.slow
def test_klog_consumers_and_kafka_clients_do_not_share_a_live_group(kafka_server):
    from confluent_kafka import KafkaError

    from klog.errors import GroupError

    produce(kafka_server, "mix", values(5), partitions=1)
    a = Tracker(confluent_consumer(kafka_server, "kafka-side"), "mix")
    try:
        poll_until([a], lambda: len(a.values) == 5, 30, "5 records")
        with pytest.raises(GroupError, match="Kafka client member"):
            kafka_server.store.group_consumer("kafka-side", "mix", follow=False).__enter__()
    finally:
        a.consumer.close()
    with kafka_server.store.group_consumer("klog-side", "mix", follow=False) as own:
        next(iter(own))
        c = confluent_consumer(kafka_server, "klog-side")
        try:
            c.subscribe(["mix"])
            errors = []
            for _ in range(100):
                msg = c.poll(0.1)
                if msg is not None:
                    errors.append(msg.error() and msg.error().code())
                    break
            assert errors == [KafkaError.INCONSISTENT_GROUP_PROTOCOL]
        finally:
            c.close()


@pytest.mark.slow
def test_a_killed_server_frees_its_groups_for_klog_admin(data_dir):
    """kill -9 of klog serve: its Kafka clients' members are dead at once for `klog groups` (they lived in
    the server's process), so the group can be reset without waiting for a session timeout."""
    from confluent_kafka import Consumer

    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    consumer = None
    try:
        line = proc.stderr.readline()
        port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
        assert klog_cli(data_dir, "topics", "create", "k9", "--partitions", "1").returncode == 0
        assert klog_cli(data_dir, "produce", "k9", stdin="one\n").returncode == 0
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "orphan", **FAST,
                             "session.timeout.ms": 60_000})
        consumer.subscribe(["k9"])
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                consumer.commit(msg, asynchronous=False)
                break
        live = klog_cli(data_dir, "groups", "describe", "orphan")
        assert "1 live member" in live.stderr, live
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        after = klog_cli(data_dir, "groups", "describe", "orphan")
        assert "Empty" in after.stderr and "0 live member" in after.stderr, after
        reset = klog_cli(data_dir, "groups", "reset-offsets", "orphan", "--topic", "k9", "--to-earliest", "--execute")
        assert reset.returncode == 0, reset.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        if consumer is not None:
            consumer.close()


def kio_call(sock, request, correlation_id: int = 1):
    """Send a kio request on a raw socket and read its kio response (one round trip)."""
    import io
    import struct

    from kio.schema.request_header.v1.header import RequestHeader as V1
    from kio.schema.request_header.v2.header import RequestHeader as V2
    from kio.serial import entity_reader, entity_writer
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module as load_payload_module

    header_type = V2 if request.__flexible__ else V1
    header = header_type(request_api_key=request.__api_key__, request_api_version=request.__version__,
                         correlation_id=correlation_id, client_id="raw-test")
    buf = io.BytesIO()
    entity_writer(header_type)(buf, header)
    entity_writer(type(request))(buf, request)
    sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    frame = sock.recv(size, socket.MSG_WAITALL)
    module = load_payload_module(int(request.__api_key__), int(request.__version__), EntityType.response)
    response_type = getattr(module, type(request).__name__.replace("Request", "Response"))
    header_reader = entity_reader(response_type.__header_schema__)
    _, used = header_reader(frame, 0)
    response, _ = entity_reader(response_type)(frame, used)
    return response


def test_bad_group_requests_get_kafka_error_codes_on_a_connection_that_stays_usable(kafka_server):
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.errors import ErrorCode as E
    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest
    from kio.static.primitive import i32Timedelta

    long_id, bad_id = "g" * 300, "bad\x01id"
    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        res = kio_call(sock, DescribeGroupsRequest(groups=(long_id, bad_id, "never-seen"),
                                                   include_authorized_operations=False))
        assert [(g.error_code, g.group_state) for g in res.groups] == [
            (E.invalid_group_id, ""), (E.invalid_group_id, ""), (E.none, "Dead")]
        assert {g.authorized_operations for g in res.groups} == {-2147483648}  # not asked for
        res = kio_call(sock, DescribeGroupsRequest(groups=("never-seen",), include_authorized_operations=True))
        assert res.groups[0].authorized_operations == 1 << 3 | 1 << 6 | 1 << 8  # READ, DELETE, DESCRIBE
        assert kio_call(sock, OffsetFetchRequest(group_id="", topics=None, require_stable=False)).error_code \
            == E.invalid_group_id
        protocol = JoinGroupRequestProtocol(name="range", metadata=b"")
        join = JoinGroupRequest(group_id=bad_id, session_timeout=i32Timedelta.parse(timedelta(seconds=10)),
                                rebalance_timeout=i32Timedelta.parse(timedelta(seconds=10)), member_id="",
                                group_instance_id=None, protocol_type="consumer", protocols=(protocol,))
        assert kio_call(sock, join).error_code == E.invalid_group_id
        short = replace(join, group_id="ok", session_timeout=i32Timedelta.parse(timedelta(milliseconds=10)))
        assert kio_call(sock, short).error_code == E.invalid_session_timeout
        assert kio_call(sock, HeartbeatRequest(group_id="ok", generation_id=1, member_id="nobody",
                                               group_instance_id=None)).error_code == E.unknown_member_id
        commit = OffsetCommitRequest(group_id="ok", generation_id_or_member_epoch=3, member_id="nobody",
                                     group_instance_id=None, topics=(OffsetCommitRequestTopic(name="nope", partitions=(
                                         OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                      committed_leader_epoch=-1,
                                                                      committed_metadata=None),)),))
        res = kio_call(sock, commit)  # a generation of a group this node does not know: Kafka's answer
        assert res.topics[0].partitions[0].error_code == E.illegal_generation
        simple = replace(commit, generation_id_or_member_epoch=-1, member_id="")  # no group membership
        res = kio_call(sock, simple)
        assert res.topics[0].partitions[0].error_code == E.unknown_topic_or_partition
        assert kafka_server.coordinator.machine.groups == {}  # nothing kept for any of these


@pytest.mark.slow
def test_a_clean_stop_of_the_server_frees_its_groups(data_dir):
    from klog.meta.groups import GroupsMeta
    from klog.server import Server

    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.bootstrap = f"127.0.0.1:{server.port}"
        produce(server, "stop", values(3), partitions=1)
        a = Tracker(confluent_consumer(server, "stopping"), "stop")
        try:
            poll_until([a], lambda: len(a.values) == 3, 30, "3 records")
            live = GroupsMeta(server.store.meta).snapshot("stopping").live
            assert [m.member_id for m in live] == [a.consumer.memberid()]
            server.close()  # while the consumer is still a member
            with klog_open(data_dir) as store:
                after = GroupsMeta(store.meta).snapshot("stopping")
        finally:
            a.consumer.close()
    assert after.members == [] and after.state == "Empty"
    assert after.offsets[("stop", 0)].offset == 3


def test_group_settings_come_from_the_store_defaults(data_dir):
    import json

    from kio.schema.errors import ErrorCode as E
    from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.static.primitive import i32Timedelta

    from klog.server import Server

    with klog_open(data_dir):
        pass  # makes the store and its klog.json
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc["defaults"] = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                       "group.max.session.timeout.ms": "soon"}
    with open(path, "w") as f:
        json.dump(doc, f)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        machine = server.coordinator.machine
        assert (machine.initial_rebalance_delay_ms, machine.min_session_timeout_ms,
                machine.max_session_timeout_ms) == (0, 1000, 1_800_000)  # a bad value: Kafka's default
        join = JoinGroupRequest(group_id="quick", session_timeout=i32Timedelta.parse(timedelta(seconds=2)),
                                rebalance_timeout=i32Timedelta.parse(timedelta(seconds=2)), member_id="",
                                protocol_type="consumer",
                                protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            started = time.monotonic()
            res = kio_call(sock, join)
            assert (res.error_code, res.generation_id, res.leader) == (E.none, 1, res.member_id)
            assert time.monotonic() - started < 2.5  # no initial delay (3 s by default)


@pytest.mark.slow
def test_kafka_python_and_aiokafka_members_share_and_hand_over_partitions(kafka_server):
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    produce(kafka_server, "two", values(60), partitions=4)
    settings = dict(bootstrap_servers=kafka_server.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200)

    # each kafka-python consumer polls in its own thread: one thread polling both made the first
    # block in JoinGroup while the second, not polled, could only be dropped by the session timeout
    # (8-45 s a run, close to the bound)
    def poll_until(consumer, got: list, lock: threading.Lock, stop: threading.Event) -> None:
        while not stop.is_set():
            for msgs in consumer.poll(timeout_ms=50).values():
                with lock:
                    got.extend(m.value for m in msgs)

    def wait_for(done, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds  # bounded in time: a loaded machine
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)

    parts = lambda c: {tp.partition for tp in c.assignment()}  # noqa: E731
    got: list[bytes] = []
    lock = threading.Lock()
    a = KafkaConsumer("two", group_id="kp-two", **settings)
    b = KafkaConsumer("two", group_id="kp-two", **settings)
    stop_a, stop_b = threading.Event(), threading.Event()
    threads = [threading.Thread(target=poll_until, args=(c, got, lock, stop), daemon=True)
               for c, stop in ((a, stop_a), (b, stop_b))]
    try:
        for t in threads:
            t.start()
        wait_for(lambda: len(got) >= 60 and parts(a) and parts(b) and len(parts(a) | parts(b)) == 4)
        assert parts(a) | parts(b) == set(range(4)) and not parts(a) & parts(b)
        with lock:
            assert sorted(got) == sorted(values(60))
        stop_b.set()
        threads[1].join(10)
        b.commit()
        b.close()
        wait_for(lambda: parts(a) == set(range(4)))
        assert parts(a) == set(range(4))
    finally:
        stop_a.set()
        stop_b.set()
        for t in threads:
            t.join(10)
        a.close()
        b.close()

    async def aio() -> tuple[set, set, set]:
        x = AIOKafkaConsumer("two", group_id="aio-two", **settings)
        y = AIOKafkaConsumer("two", group_id="aio-two", **settings)
        await x.start()
        await y.start()
        try:
            async with asyncio.timeout(30):
                while not (x.assignment() and y.assignment()
                           and len(x.assignment()) + len(y.assignment()) == 4):
                    await asyncio.sleep(0.05)
            shared = ({tp.partition for tp in x.assignment()}, {tp.partition for tp in y.assignment()})
            await y.stop()
            async with asyncio.timeout(30):
                while len(x.assignment()) != 4:
                    await asyncio.sleep(0.05)
            return *shared, {tp.partition for tp in x.assignment()}
        finally:
            await x.stop()
            await y.stop()

    x_parts, y_parts, after = asyncio.run(aio())
    assert x_parts | y_parts == set(range(4)) and not x_parts & y_parts and after == set(range(4))


def sample(cls):
    """A request of kio type `cls` with a plausible value in every field (one element per array)."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _sample_value(hints[f.name], f.metadata.get("kafka_type"))
                  for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING})


def _sample_value(hint, kafka_type):
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # nullable: give a value anyway
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        inner = typing.get_args(hint)[0]
        return (sample(inner) if dataclasses.is_dataclass(inner) else _sample_value(inner, kafka_type),)
    kind = kafka_type or ""
    if kind.startswith("timedelta"):
        return hint.parse(timedelta(seconds=10))
    if kind == "string" or (isinstance(hint, type) and issubclass(hint, str)):
        return "g"
    if kind == "bytes" or hint is bytes:
        return b""
    if kind == "bool" or hint is bool:
        return False
    if kind == "uuid":
        return uuid.UUID(int=0)
    return hint(0)


def test_every_advertised_group_api_version_answers(kafka_server):
    """Each version in GROUP_HANDLERS parses a request and writes a response a client can read."""
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module as load_payload_module
    from klog.server.groups import GROUP_HANDLERS

    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        answered = 0
        for key, (_, lo, hi) in sorted(GROUP_HANDLERS.items()):
            for version in range(lo, hi + 1):
                module = load_payload_module(key, version, EntityType.request)
                cls = next(v for k, v in vars(module).items()
                           if isinstance(v, type) and getattr(v, "__type__", None) == EntityType.request)
                response = kio_call(sock, sample(cls), correlation_id=answered)
                assert type(response).__name__.endswith("Response"), (key, version)
                answered += 1
    assert answered == sum(hi - lo + 1 for _, lo, hi in GROUP_HANDLERS.values())


@pytest.mark.slow
def test_klog_consumers_and_kafka_clients_resume_from_each_others_commits(kafka_server):
    """One group used in turn by klog's own consumer and a Kafka client: each resumes where the other
    committed (the offsets are the same LMDB records)."""
    produce(kafka_server, "turns", values(12), partitions=1)
    with kafka_server.store.group_consumer("turns-group", "turns", follow=False) as own:
        first = []
        for record in own:
            first.append(record.value)
            if len(first) == 4:
                break
        own.commit()
    assert first == values(12)[:4]
    a = Tracker(confluent_consumer(kafka_server, "turns-group"), "turns")
    try:
        poll_until([a], lambda: len(a.values) >= 4, 30, "the Kafka client to resume")
        assert a.values[:4] == values(12)[4:8]  # from klog's commit, committing each record it reads
    finally:
        a.consumer.close()
    seen = len(a.values)
    with kafka_server.store.group_consumer("turns-group", "turns", follow=False) as own:
        rest = [record.value for record in own]
    assert rest == values(12)[4 + seen:]


@pytest.mark.slow
def test_members_rejoin_after_a_server_restart_and_resume_from_their_commits(data_dir):
    from klog.server import Server

    first = Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000).__enter__()
    port = first.port
    first.bootstrap = f"127.0.0.1:{port}"
    produce(first, "rs", values(5), partitions=1)
    a = Tracker(confluent_consumer(first, "restart"), "rs")
    second = None
    try:
        poll_until([a], lambda: len(a.values) == 5, 30, "5 records")
        first.close()
        second = Server(data_dir, listen=("127.0.0.1", port), idle_ms=30_000).__enter__()
        second.bootstrap = first.bootstrap
        produce(second, "rs", values(5, "after"))
        poll_until([a], lambda: len(a.values) >= 10, 60, "the records produced after the restart")
        assert a.values == values(5) + values(5, "after")  # nothing twice, nothing lost
        group = second.coordinator.machine.groups["restart"]
        assert group.state == "Stable" and group.generation == 2  # on from the generation before the restart
    finally:
        a.consumer.close()
        first.close()
        if second is not None:
            second.close()

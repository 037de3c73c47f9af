"""Committed offsets expire as on a Kafka broker (KIP-211, offsets.retention.minutes).

Goal: an Empty group's offsets go together `retention` after it became Empty, and then the group
itself (no longer listed); offsets without a group each go `retention` after their commit; a live
group keeps the offsets of what it reads; `klog serve` runs the expiry every
offsets.retention.check.interval.ms and `klog groups clean` runs it on demand.
Method: GroupsMeta with a clock the test moves (no sleeping for days); real clients (confluent-kafka,
kafka-python) against `klog serve` given a wall clock the test moves and a 50 ms check interval.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog.client import assignors
from klog.meta.groups import GroupsMeta, Member, now_ms
from tests.conftest import REPO
from tests.klog_processes import klog_env, run_klog, wait_for

RETENTION_MS = 60_000
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")


class Clock:
    """Epoch milliseconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def join_stable(meta: GroupsMeta, group: str, topics: list[str]) -> Member:
    """A klog consumer member holding its whole assignment (the group is Stable)."""
    member = Member.local(f"m-{group}", "test", topics, "range", 45_000)
    member.heartbeat_ms = member.joined_ms = meta.clock()
    view = meta.join(group, member, assignors.assign)
    meta.sync(group, member.member_id, view.generation, assignors.assign, acquire=view.target)
    assert meta.snapshot(group).state == "Stable"
    return member


# -- the mechanism ---------------------------------------------------------------------------------
def test_an_empty_groups_offsets_expire_together_retention_after_it_became_empty(store):
    store.create_topic("t", partitions=2)
    clock = Clock()
    meta = GroupsMeta(store.meta, clock=clock)
    member = join_stable(meta, "g", ["t"])
    view = meta.heartbeat("g", member.member_id, assignors.assign)
    meta.commit("g", member.member_id, view.generation, {("t", 0): (5, ""), ("t", 1): (7, "")})
    clock.advance(2 * RETENTION_MS)  # the commits are old, but the group was not Empty
    meta.heartbeat("g", member.member_id, assignors.assign)
    assert meta.expire_offsets(RETENTION_MS) == []
    meta.leave("g", member.member_id, assignors.assign)  # Empty from now
    clock.advance(RETENTION_MS - 1)
    assert meta.expire_offsets(RETENTION_MS) == []
    assert set(meta.committed("g")) == {("t", 0), ("t", 1)}
    clock.advance(1)
    [result] = meta.expire_offsets(RETENTION_MS)
    assert (result.group, result.partitions, result.group_removed) == ("g", [("t", 0), ("t", 1)], True)
    assert meta.committed("g") == {} and meta.group_ids() == [] and meta.snapshot("g").state == "Dead"


def test_offsets_without_a_group_expire_each_retention_after_its_commit(store):
    store.create_topic("t", partitions=2)
    clock = Clock()
    meta = GroupsMeta(store.meta, clock=clock)
    meta.store_offsets("solo", {("t", 0): (3, "")})
    clock.advance(RETENTION_MS // 2)
    meta.store_offsets("solo", {("t", 1): (4, "")})
    clock.advance(RETENTION_MS // 2)
    [result] = meta.expire_offsets(RETENTION_MS)
    assert (result.partitions, result.group_removed) == ([("t", 0)], False)
    assert list(meta.committed("solo")) == [("t", 1)] and meta.group_ids() == ["solo"]
    clock.advance(RETENTION_MS // 2)
    assert [r.partitions for r in meta.expire_offsets(RETENTION_MS)] == [[("t", 1)]]
    assert meta.group_ids() == []


def test_a_stable_group_keeps_what_it_reads_and_loses_old_offsets_of_other_topics(store):
    store.create_topic("t")
    store.create_topic("old")
    clock = Clock()
    meta = GroupsMeta(store.meta, clock=clock)
    meta.store_offsets("g", {("old", 0): (1, ""), ("t", 0): (2, "")})  # committed before the member came
    member = join_stable(meta, "g", ["t"])
    clock.advance(RETENTION_MS)
    meta.heartbeat("g", member.member_id, assignors.assign)
    [result] = meta.expire_offsets(RETENTION_MS)
    assert (result.partitions, result.group_removed) == ([("old", 0)], False)
    assert list(meta.committed("g")) == [("t", 0)]
    # a server's group (held: its subscription only that server knows, None while rebalancing) keeps all
    meta.leave("g", member.member_id, assignors.assign)
    clock.advance(RETENTION_MS)
    assert meta.expire_offsets(RETENTION_MS, held={"g": None}) == []
    assert meta.expire_offsets(RETENTION_MS, held={"g": ["t"]}) == []


def test_a_group_whose_empty_time_is_unknown_counts_from_the_first_pass(store):
    """A killed last member, or a group document from a klog before expiry: never expired early."""
    store.create_topic("t")
    clock = Clock()
    meta = GroupsMeta(store.meta, clock=clock)
    meta.store_offsets("g", {("t", 0): (9, "")})
    with store.meta.txn(write=True) as txn:  # what an older klog wrote: no empty_ms
        store.meta.put_json(txn, "groups", "g", {"group": "g", "generation": 3, "assignor": "range", "targets": {},
                                                 "owners": {}, "partition_counts": {}, "created_ms": 0,
                                                 "rebalance_ms": 0, "served_by": None})
    clock.advance(10 * RETENTION_MS)
    assert meta.expire_offsets(RETENTION_MS) == []  # starts the count
    assert meta.snapshot("g").doc.empty_ms == clock.now
    clock.advance(RETENTION_MS)
    assert [(r.partitions, r.group_removed) for r in meta.expire_offsets(RETENTION_MS)] == [([("t", 0)], True)]


def test_an_empty_group_without_offsets_is_removed_at_the_next_pass(store):
    store.create_topic("t")
    meta = GroupsMeta(store.meta)
    member = join_stable(meta, "idle", ["t"])
    meta.leave("idle", member.member_id, assignors.assign)
    assert meta.group_ids() == ["idle"]
    assert [(r.group, r.partitions, r.group_removed) for r in meta.expire_offsets(RETENTION_MS)] == \
        [("idle", [], True)]
    assert meta.group_ids() == []


# -- klog groups clean ---------------------------------------------------------------------------------
def klog_cli(data_dir: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, text=True, env=env, timeout=60)


def set_defaults(data_dir: str, **defaults: str) -> None:
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc["defaults"] = {k.replace("_", "."): v for k, v in defaults.items()}  # a_b_c=... is a.b.c
    with open(path, "w") as f:
        json.dump(doc, f)


@pytest.mark.slow
def test_klog_groups_clean_expires_per_the_stores_retention(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=2)
        meta = GroupsMeta(store.meta)
        meta.store_offsets("old", {("t", 0): (1, ""), ("t", 1): (2, "")}, commit_ms=now_ms() - 61_000)
        meta.store_offsets("new", {("t", 0): (3, "")})
    set_defaults(data_dir, offsets_retention_minutes="1")
    out = klog_cli(data_dir, "groups", "clean")
    assert out.returncode == 0, out.stderr
    assert "Expired 2 committed offset(s) of group old (t-0, t-1)" in out.stderr
    assert "1 group(s) changed" in out.stderr
    listed = klog_cli(data_dir, "groups", "list", "--json")
    assert [json.loads(line)["group"] for line in listed.stdout.splitlines()] == ["new"]
    gone = klog_cli(data_dir, "groups", "describe", "old")
    assert gone.returncode == 1 and "unknown group 'old'" in gone.stderr
    set_defaults(data_dir, offsets_retention_minutes="a week")
    bad = klog_cli(data_dir, "groups", "clean")
    assert bad.returncode == 2 and "offsets.retention.minutes" in bad.stderr and "Traceback" not in bad.stderr


# -- klog serve, real clients ----------------------------------------------------------------------------
until = wait_for  # (condition, seconds, what)


@pytest.fixture
def expiring_server(data_dir):
    """klog serve with a wall clock the test moves, a 60 s retention and a 50 ms check interval."""
    from klog.server import Server

    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=2)
        store.create_topic("other")
    set_defaults(data_dir, group_initial_rebalance_delay_ms="0")
    clock = Clock()
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, offsets_retention_ms=RETENTION_MS,
                offsets_retention_check_ms=50, wall_clock=clock) as server:
        server.bootstrap = f"127.0.0.1:{server.port}"
        server.clock = clock
        yield server


def committed(server, group: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)]
    finally:
        c.close()


def listed_groups(server) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    return {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result(timeout=15).valid}


@pytest.mark.slow
def test_a_confluent_groups_offsets_expire_after_it_left_and_the_group_goes(expiring_server, data_dir):
    from confluent_kafka import Consumer, Producer

    server = expiring_server
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(20):
        p.produce("t", value=b"%d" % i, partition=i % 2)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "leaving", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    c.subscribe(["t"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 20 and time.monotonic() < deadline:
        for m in c.consume(20, timeout=0.5):
            assert m.error() is None
            got += 1
            c.commit(message=m, asynchronous=False)
    assert got == 20
    server.clock.advance(2 * RETENTION_MS)  # old commits, but the group has a member: kept
    time.sleep(0.3)  # several check intervals
    c.close()  # LeaveGroup: the group is Empty from now
    assert committed(server, "leaving", "t", 2) == [10, 10]
    assert "leaving" in listed_groups(server)
    server.clock.advance(RETENTION_MS - 1000)
    time.sleep(0.3)
    assert committed(server, "leaving", "t", 2) == [10, 10]
    server.clock.advance(1000)
    until(lambda: committed(server, "leaving", "t", 2) == [-1001, -1001], 10, "offsets expired")
    until(lambda: "leaving" not in listed_groups(server), 10, "the group left ListGroups")
    out = klog_cli(data_dir, "groups", "describe", "leaving")
    assert out.returncode == 1 and "unknown group" in out.stderr


def test_standalone_commits_expire_one_by_one_and_a_live_group_keeps_what_it_reads(expiring_server):
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    server = expiring_server
    solo = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="solo", enable_auto_commit=False)
    other = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="live", enable_auto_commit=False)
    try:
        solo.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        solo.commit({TopicPartition("t", 0): OffsetAndMetadata(4, "", -1)})
        # the group "live" gets a member reading t below; it has an offset of a topic it will not read
        other.assign([TopicPartition("other", 0), TopicPartition("t", 0)])
        other.commit({TopicPartition("other", 0): OffsetAndMetadata(1, "", -1),
                      TopicPartition("t", 0): OffsetAndMetadata(2, "", -1)})
        server.clock.advance(RETENTION_MS // 2)
        solo.commit({TopicPartition("t", 1): OffsetAndMetadata(6, "", -1)})
    finally:
        solo.close(autocommit=False)
        other.close(autocommit=False)
    live = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "live", "enable.auto.commit": False,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
    try:
        live.subscribe(["t"])
        until(lambda: live.poll(0.1) is None and len(live.assignment()) == 2, 20, "the live member's assignment")
        server.clock.advance(RETENTION_MS // 2)
        until(lambda: committed(server, "solo", "t", 2) == [-1001, 6], 10, "the first standalone offset expired")
        until(lambda: committed(server, "live", "other", 1) == [-1001], 10, "the unread topic's offset expired")
        assert committed(server, "live", "t", 1) == [2]  # read by the live member: kept
        server.clock.advance(RETENTION_MS // 2)
        until(lambda: committed(server, "solo", "t", 2) == [-1001, -1001], 10, "the second one expired")
        for _ in range(5):
            live.poll(0.05)
        assert committed(server, "live", "t", 1) == [2]
    finally:
        live.close()


def test_the_server_takes_its_retention_settings_from_the_store_defaults(data_dir):
    from klog.server import Server

    with klog.open(data_dir):
        pass  # makes the store and its klog.json
    set_defaults(data_dir, offsets_retention_minutes="2", offsets_retention_check_interval_ms="soon")
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        coordinator = server.coordinator
        # a bad value: Kafka's default (a warning says so), as for the group.* settings
        assert (coordinator.retention_ms, coordinator.retention_check_ms) == (120_000, 600_000)


@pytest.mark.parametrize(("value", "code"), [("0", 2), ("-5", 2), ("abc", 2), ("1.5", 2), ("\u00b2", 2),
                                             ("\u0663", 2), ("3", 0)])
def test_groups_clean_with_a_bad_retention_in_klog_json_is_one_line_and_exit_2(data_dir, value, code):
    assert run_klog(data_dir, "topics", "create", "t").returncode == 0
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc["defaults"]["offsets.retention.minutes"] = value
    with open(path, "w") as f:
        json.dump(doc, f)
    r = run_klog(data_dir, "groups", "clean")
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    if code:
        assert r.stderr.count("\n") == 1 and "offsets.retention.minutes" in r.stderr, r.stderr
    else:
        assert r.stderr == "0 group(s) changed\n"


def test_groups_clean_keeps_an_active_cli_groups_offsets_and_an_empty_one_within_retention(data_dir):
    """A klog consumer group that is reading (a live member) keeps its offsets at the shortest
    retention (1 minute) even when they are older; once Empty it keeps them for that minute."""
    with klog.open(data_dir) as store:
        store.create_topic("t", 1)
        with store.producer() as p:
            for i in range(5):
                p.send("t", b"v%d" % i)
        path = os.path.join(data_dir, "klog.json")
        with open(path) as f:
            doc = json.load(f)
        doc["defaults"]["offsets.retention.minutes"] = "1"
        with open(path, "w") as f:
            json.dump(doc, f)
        with store.group_consumer("g", "t", enable_auto_commit=False) as c:
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                got += c.poll(timeout_ms=100)
            c.commit({("t", 0): 3})
            live = run_klog(data_dir, "groups", "clean", "--json")
            assert live.returncode == 0 and live.stdout == "", live.stdout + live.stderr
    after = run_klog(data_dir, "groups", "clean")  # just became Empty: kept for the minute
    assert after.returncode == 0 and after.stderr == "0 group(s) changed\n", after.stderr
    described = run_klog(data_dir, "groups", "describe", "g", "--json")
    assert described.returncode == 0, described.stderr
    assert '"committed_offset": 3' in described.stdout.replace(" ", " ") or "3" in described.stdout, described.stdout


@pytest.mark.slow
def test_serves_expiry_keeps_a_reading_cli_groups_offsets_and_drops_them_once_it_is_gone(data_dir):
    """klog serve expires every 50 ms with a 300 ms retention: a `klog consume --group -f`
    that committed seconds ago keeps its offsets while it runs; once it stopped and the
    retention passed, the group is gone and a new member starts from the beginning."""
    from klog.server import Server

    with klog.open(data_dir) as s:
        s.create_topic("t", 2)
        with s.producer() as p:
            for i in range(20):
                p.send("t", b"a%d" % i, key=b"%d" % i)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, offsets_retention_ms=300,
                offsets_retention_check_ms=50):
        consumer = subprocess.Popen([sys.executable, "-m", "klog", "consume", "t", "--group", "g", "-f"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=klog_env(data_dir))
        try:
            assert len([consumer.stdout.readline() for _ in range(20)]) == 20  # type: ignore[union-attr]
            deadline = time.monotonic() + 20
            first: dict = {}
            while not first and time.monotonic() < deadline:  # its first commit (auto-commit)
                described = json.loads(run_klog(data_dir, "groups", "describe", "g", "--json").stdout)
                if [p.get("committed") for p in described["partitions"]] == [10, 10]:
                    first = {p["partition"]: p["commit_ms"] for p in described["partitions"]}
            assert first, described
            time.sleep(1.5)  # 30 expiry passes, past the 300 ms retention of that commit
            described = json.loads(run_klog(data_dir, "groups", "describe", "g", "--json").stdout)
            assert described["state"] == "Stable"
            assert [p["committed"] for p in described["partitions"]] == [10, 10], described
        finally:
            consumer.send_signal(signal.SIGINT)
            consumer.communicate(timeout=30)
        time.sleep(1.0)
        listed = run_klog(data_dir, "groups", "list")
        assert listed.returncode == 0 and "\ng " not in listed.stdout and not any(
            line.split()[:1] == ["g"] for line in listed.stdout.splitlines()), listed.stdout
        again = run_klog(data_dir, "consume", "t", "--group", "g", "-n", "20")
        assert again.returncode == 0 and len(again.stdout.splitlines()) == 20

"""Consumer groups through the Python API: assignors, rebalances, ownership, fencing, offsets, admin.

Goal: the group rules a user relies on (a partition read by one member at a time, commits from a
fenced member refused, restart at the committed offset, reset variants) hold in one process with
several members; tests/test_groups_cli.py repeats the key ones across real processes.
Method: several GroupConsumers share one store in this process (their liveness is then their
heartbeat, since the pid is shared); `settle` polls every member until a condition holds.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from klog.client import assignors
from klog.client import groups_admin as admin
from klog.errors import GroupError, GroupFencedError, UsageError
from klog.meta.groups import GroupsMeta, Member, now_ms
from tests.fake_clock import FakeClock

SETTLE_ROUNDS_MAX = 300  # x 10 ms: a rebalance in one process needs a few polls


def fill(store, topic: str, partitions: int, per_partition: int) -> None:
    store.create_topic(topic, partitions=partitions)
    with store.producer() as p:
        for i in range(per_partition):
            for part in range(partitions):
                p.send(topic, b"%d-%d" % (part, i), partition=part, timestamp=1000 * (i + 1))


class MsClock:
    """GroupsMeta's clock (epoch milliseconds) that moves only when a test says so."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def settle(consumers, done, seen=None) -> None:
    """Poll every member until `done()`; after each round no partition may be held by two members."""
    for _ in range(SETTLE_ROUNDS_MAX):
        for c in consumers:
            records = c.poll()
            if seen is not None:
                seen.extend((r.topic, r.partition, r.offset) for r in records)
        held = [tp for c in consumers for tp in c.assignment()]
        assert len(held) == len(set(held)), f"a partition is held twice: {sorted(held)}"
        if done():
            return
        time.sleep(0.01)
    raise AssertionError(f"never settled: {[c.assignment() for c in consumers]}")


def sizes(consumers) -> list[int]:
    return sorted(len(c.assignment()) for c in consumers)


# -- assignors (pure) --------------------------------------------------------------------------------
def test_range_roundrobin_and_sticky_match_hand_computed_assignments() -> None:
    subs = {"a": ["t"], "b": ["t"], "c": ["t"]}
    assert assignors.range_assign(subs, {"t": 7}) == {
        "a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)], "c": [("t", 5), ("t", 6)]}
    two = {"a": ["t", "u"], "b": ["t", "u"]}
    assert assignors.range_assign(two, {"t": 3, "u": 3}) == {
        "a": [("t", 0), ("t", 1), ("u", 0), ("u", 1)], "b": [("t", 2), ("u", 2)]}
    assert assignors.roundrobin_assign(two, {"t": 3, "u": 3}) == {
        "a": [("t", 0), ("t", 2), ("u", 1)], "b": [("t", 1), ("u", 0), ("u", 2)]}
    # only subscribers of a topic get its partitions
    assert assignors.roundrobin_assign({"a": ["t"], "b": ["u"]}, {"t": 2, "u": 1}) == {
        "a": [("t", 0), ("t", 1)], "b": [("u", 0)]}
    before = assignors.range_assign(subs, {"t": 6})
    after = assignors.sticky_assign({**subs, "d": ["t"]}, {"t": 6}, before)
    assert sorted(len(v) for v in after.values()) == [1, 1, 2, 2]
    moved = [tp for m in subs for tp in before[m] if tp not in after[m]]
    assert len(moved) == 1 and after["d"] == moved  # the newcomer gets the only partition that moved
    with pytest.raises(UsageError, match="unknown assignor 'sticky'"):
        assignors.validate("sticky")


# -- membership and rebalances -------------------------------------------------------------------------
@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_members_split_partitions_and_rebalance_on_join_and_leave(store, assignor) -> None:
    fill(store, "t", 6, 5)
    seen: list = []
    a = store.group_consumer("g", "t", assignor=assignor)
    settle([a], lambda: len(a.assignment()) == 6, seen)
    b = store.group_consumer("g", "t", assignor=assignor)
    c = store.group_consumer("g", "t", assignor=assignor)
    settle([a, b, c], lambda: sizes([a, b, c]) == [2, 2, 2], seen)
    a.close()
    settle([b, c], lambda: sizes([b, c]) == [3, 3], seen)
    for m in (b, c):
        m.close()
    # clean leaves with auto-commit on close: every record once
    assert sorted(seen) == sorted(("t", p, o) for p in range(6) for o in range(5))
    assert GroupsMeta(store.meta).snapshot("g").state == "Empty"


@pytest.mark.parametrize("seed", range(6))
def test_random_joins_leaves_and_writes_lose_nothing_and_repeat_nothing(store, seed, replay_seed) -> None:
    """Seeded walk: members join (subscribing to t, u or both) and leave cleanly while records arrive;
    after each step no partition is held twice; at the end every record was seen exactly once."""
    import random

    seed = replay_seed(seed)
    rng = random.Random(seed)
    assignor = assignors.NAMES[seed % len(assignors.NAMES)]
    store.create_topic("t", partitions=4)
    store.create_topic("u", partitions=3)
    seen: list = []
    members: list = []
    written = 0
    for _ in range(25):
        action = rng.random()
        if action < 0.3 or not members:
            topics = rng.choice([("t",), ("u",), ("t", "u")])
            members.append(store.group_consumer("g", *topics, assignor=assignor))
        elif action < 0.5 and len(members) > 1:
            members.pop(rng.randrange(len(members))).close()
        with store.producer() as p:
            for _ in range(rng.randrange(1, 20)):
                topic = rng.choice(["t", "u"])
                p.send(topic, b"%d" % written, partition=rng.randrange(4 if topic == "t" else 3))
                written += 1
        settle(members, lambda: True, seen)
    # every partition of a topic someone reads gets read: keep polling until all is consumed
    subscribed = {t for m in members for t in m.topics}
    ends = {(t, p): e for t in subscribed for p, e in store.offsets(t).items()}
    settle(members, lambda: all(sum(1 for r in seen if r[:2] == tp) >= e for tp, e in ends.items()), seen)
    for m in members:
        m.close()
    counts: dict = {}
    for rec in seen:
        counts[rec] = counts.get(rec, 0) + 1
    assert [rec for rec, n in counts.items() if n > 1] == [], f"seed {seed}: records seen twice"
    for (topic, partition), end in ends.items():
        assert sorted(o for t, p, o in seen if (t, p) == (topic, partition)) == list(range(end)), f"seed {seed}"


def test_cooperative_sticky_revokes_only_moved_partitions_eager_revokes_all(store) -> None:
    fill(store, "t", 6, 1)
    for assignor, expect_first_revoke in (("cooperative-sticky", 3), ("range", 6)):
        revoked: list[list] = []
        assigned: list[list] = []
        a = store.group_consumer("g-" + assignor, "t", assignor=assignor, on_revoke=revoked.append,
                                 on_assign=assigned.append)
        settle([a], lambda a=a: len(a.assignment()) == 6)
        b = store.group_consumer("g-" + assignor, "t", assignor=assignor)
        settle([a, b], lambda a=a, b=b: sizes([a, b]) == [3, 3])
        assert len(revoked[0]) == expect_first_revoke
        assert assigned[0] == [("t", p) for p in range(6)]
        # eager: everything comes back through on_assign; cooperative: nothing new was assigned to a
        assert assigned[1:] == ([a.assignment()] if assignor == "range" else [])
        a.close()
        b.close()


def test_adding_partitions_to_a_topic_rebalances_the_group(store) -> None:
    fill(store, "t", 2, 1)
    a = store.group_consumer("g", "t", heartbeat_interval_ms=50)
    b = store.group_consumer("g", "t", heartbeat_interval_ms=50)
    settle([a, b], lambda: sizes([a, b]) == [1, 1])
    store.alter_topic("t", partitions=4)  # noticed by the next heartbeat, which bumps the generation
    settle([a, b], lambda: sizes([a, b]) == [2, 2])
    a.close()
    b.close()


def test_a_mixed_assignor_is_refused(store) -> None:
    fill(store, "t", 2, 1)
    with store.group_consumer("g", "t", assignor="range"):
        with pytest.raises(GroupError, match="uses assignor 'range' but this consumer asked for 'roundrobin'"):
            store.group_consumer("g", "t", assignor="roundrobin")


# -- fencing and liveness ---------------------------------------------------------------------------------
def test_commit_from_an_old_generation_is_rejected(store) -> None:
    fill(store, "t", 2, 3)
    a = store.group_consumer("g", "t", enable_auto_commit=False)
    settle([a], lambda: len(a.assignment()) == 2)
    old = a.generation
    b = store.group_consumer("g", "t", enable_auto_commit=False)
    meta = GroupsMeta(store.meta)
    with pytest.raises(GroupFencedError, match=f"generation {old} of group 'g' is fenced"):
        meta.commit("g", a.member_id, old, {("t", 0): (1, "")})
    settle([a, b], lambda: sizes([a, b]) == [1, 1])
    # current generation, but a partition the member does not hold
    theirs = b.assignment()[0]
    with pytest.raises(GroupFencedError, match="not held by member"):
        meta.commit("g", a.member_id, a.generation, {theirs: (1, "")})
    a.close()
    b.close()


def test_a_silent_member_is_expelled_and_its_commits_fenced(store) -> None:
    fill(store, "t", 2, 3)
    meta = GroupsMeta(store.meta)
    silent = Member.local("silent-1", "test", ["t"], "range", session_timeout_ms=200)
    silent.heartbeat_ms = now_ms() - 300  # its last heartbeat was one session timeout and more ago
    GroupsMeta(store.meta, clock=lambda: silent.heartbeat_ms).join("g", silent, assignors.assign)  # then silence
    live = store.group_consumer("g", "t", session_timeout_ms=3000)
    settle([live], lambda: len(live.assignment()) == 2)
    with pytest.raises(GroupFencedError, match="member silent-1 is no longer in group 'g'"):
        meta.commit("g", "silent-1", live.generation, {("t", 0): (1, "")})
    live.close()


def test_heartbeats_keep_a_busy_member_in_the_group_and_stop_on_close(store) -> None:
    """The group's clock moves only when the test says, by less than a session each time, and
    only once the heartbeat thread has proved the member alive at the new time: a heartbeat
    thread delayed on a loaded machine cannot make the member expire, a missing one fails."""
    import threading

    fill(store, "t", 2, 3)
    clock = MsClock(now_ms())
    c = store.group_consumer("g", "t", session_timeout_ms=300, heartbeat_interval_ms=50, enable_auto_commit=False,
                             groups_clock=clock)
    settle([c], lambda: len(c.assignment()) == 2)
    meta = GroupsMeta(store.meta, clock=clock)
    for _ in range(9):  # user code busy for 3 session timeouts; the background thread heartbeats meanwhile
        clock.advance(100)
        for _ in range(500):  # bounded: 5 s of real time for one heartbeat (50 ms apart)
            heard = {m.member_id: m.heartbeat_ms for m in meta.snapshot("g").members}
            if heard.get(c.member_id, 0) >= clock.now:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the heartbeat thread did not heartbeat within 5 s")
    other = store.group_consumer("g", "t", groups_clock=clock)  # joining expires silent members: c must not be one
    assert c.member_id in [m.member_id for m in meta.snapshot("g").members]
    assert c.commit({("t", 0): 2}) == {("t", 0): 2}
    c.close()
    other.close()
    assert [t for t in threading.enumerate() if t.name.startswith("klog-heartbeat")] == []


def test_a_member_that_stops_polling_leaves_after_max_poll_interval(store) -> None:
    fill(store, "t", 2, 3)
    clock = FakeClock(1000.0)
    slow = store.group_consumer("g", "t", max_poll_interval_ms=300, heartbeat_interval_ms=50, clock=clock)
    busy = store.group_consumer("g", "t")
    settle([slow, busy], lambda: sizes([slow, busy]) == [1, 1])
    kept = slow.assignment()
    clock.advance(0.6)  # "user code" that does not poll; its heartbeats alone do not keep it in the group
    settle([busy], lambda: len(busy.assignment()) == 2)
    with pytest.raises(GroupFencedError, match="is no longer in group 'g'"):
        slow.commit({kept[0]: 1})
    settle([slow, busy], lambda: sizes([slow, busy]) == [1, 1])  # its next poll rejoins
    slow.close()
    busy.close()


@pytest.mark.slow
def test_a_member_whose_process_is_gone_is_expired_at_once(store) -> None:
    fill(store, "t", 4, 1)
    proc = subprocess.Popen(["sleep", "30"])
    dead = Member.local("dead-1", "test", ["t"], "range", session_timeout_ms=600_000)
    dead.pid = proc.pid
    from klog.meta.groups import process_start_time

    dead.pid_start = process_start_time(proc.pid)
    meta = GroupsMeta(store.meta)
    meta.join("g", dead, assignors.assign)
    live = store.group_consumer("g", "t")
    settle([live], lambda: len(meta.snapshot("g").doc.target(live.member_id)) == 2)
    assert meta.snapshot("g").doc.owned_by("dead-1") == []  # never synced: holds nothing
    proc.kill()
    proc.wait()
    settle([live], lambda: len(live.assignment()) == 4)  # no session timeout (10 min) needed
    assert [m.member_id for m in meta.snapshot("g").members] == [live.member_id]
    live.close()


def test_liveness_rules_pid_start_time_and_other_hosts() -> None:
    me = Member.local("m", "test", ["t"], "range", session_timeout_ms=60_000)
    assert me.alive(now_ms())
    reused = Member(**{**vars(me), "pid_start": (me.pid_start or 0) + 1})  # same pid, another process
    assert not reused.alive(now_ms())
    proc = subprocess.Popen(["true"])
    proc.wait()
    elsewhere = Member(**{**vars(me), "host": "another-machine", "pid": proc.pid, "pid_start": None})
    assert elsewhere.alive(now_ms())  # a pid on another machine says nothing here: only the session counts
    assert not elsewhere.alive(now_ms() + 60_001)


# -- offsets ----------------------------------------------------------------------------------------
def test_restart_resumes_at_the_committed_offset(store) -> None:
    fill(store, "t", 1, 10)
    with store.group_consumer("g", "t", enable_auto_commit=False) as c:
        got = []
        while len(got) < 4:
            got += c.poll(timeout_ms=100)
        c.commit({("t", 0): 4}, metadata="batch-1")
    assert GroupsMeta(store.meta).committed("g")[("t", 0)].metadata == "batch-1"
    with store.group_consumer("g", "t", follow=False) as c:
        assert [r.offset for r in c] == list(range(4, 10))
    with store.group_consumer("g", "t", follow=False) as c:  # iteration auto-committed on close
        assert list(c) == []


def test_auto_offset_reset_and_log_start(store) -> None:
    fill(store, "t", 1, 10)
    with store.group_consumer("late", "t", auto_offset_reset="latest", follow=False) as c:
        assert list(c) == []
    with pytest.raises(GroupError, match="no committed offset in group 'strict' and auto.offset.reset is none"):
        with store.group_consumer("strict", "t", auto_offset_reset="none"):
            pass
    assert admin.describe_group(store, "strict").members == []  # it did not stay behind, holding partitions
    GroupsMeta(store.meta).set_offsets("old", {("t", 0): 2})
    store.partition("t", 0).set_log_start_offset(5)  # records below 5 are gone (retention)
    with store.group_consumer("old", "t", follow=False) as c:
        assert [r.offset for r in c] == list(range(5, 10))
    GroupsMeta(store.meta).set_offsets("held", {("t", 0): 6})
    with store.group_consumer("held", "t", follow=False) as c:
        assert c.position("t", 0) == 6
        store.partition("t", 0).set_log_start_offset(8)  # moves while the member holds the partition
        assert [r.offset for r in c] == [8, 9]


def test_two_groups_each_see_every_record(store) -> None:
    fill(store, "t", 3, 4)
    for group in ("g1", "g2"):
        with store.group_consumer(group, "t", follow=False) as c:
            assert sorted((r.partition, r.offset) for r in c) == [(p, o) for p in range(3) for o in range(4)]


def test_auto_commit_commits_what_poll_returned_while_the_member_stays(store) -> None:
    fill(store, "t", 1, 10)
    meta = GroupsMeta(store.meta)
    with store.group_consumer("g", "t", auto_commit_interval_ms=20) as c:
        got = []
        while len(got) < 10:
            got += c.poll(timeout_ms=100)
        for _ in range(SETTLE_ROUNDS_MAX):  # later polls commit what earlier ones returned, once due
            committed = meta.committed("g").get(("t", 0))
            if committed is not None and committed.offset == 10:  # (0 first: where the member started)
                break
            assert c.poll(timeout_ms=10) == []
        assert meta.committed("g")[("t", 0)].offset == 10
        assert c.assignment() == [("t", 0)]  # still a member: no close() did it


def test_a_compacted_topic_with_offset_gaps_is_read_once_in_order(store) -> None:
    store.create_topic("kv", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "600",
                                                    "retention.ms": "-1"})
    with store.producer() as p:
        for i in range(200):
            p.send("kv", b"v%d" % i, key=b"k%d" % (i % 7), partition=0)
            if i % 5 == 4:
                p.flush()  # small batches over many segments
    store.compact("kv")
    survivors = [(r.offset, r.key, r.value) for r in store.consumer("kv")]
    offsets = [o for o, _, _ in survivors]
    gaps = sorted(set(range(offsets[-1])) - set(offsets))
    assert len(survivors) < 100 and gaps  # compaction removed records below the active segment
    with store.group_consumer("g", "kv", follow=False) as c:
        assert [(r.offset, r.key, r.value) for r in c] == survivors
    assert GroupsMeta(store.meta).committed("g")[("kv", 0)].offset == 200
    with store.group_consumer("g", "kv", follow=False) as c:
        assert list(c) == []
    # a committed offset that compaction removed: the next surviving record comes first
    GroupsMeta(store.meta).set_offsets("h", {("kv", 0): gaps[0]})
    with store.group_consumer("h", "kv", follow=False) as c:
        assert [(r.offset, r.key, r.value) for r in c] == [s for s in survivors if s[0] > gaps[0]]


def test_commit_inside_iteration_counts_the_record_in_hand(store) -> None:
    fill(store, "t", 1, 5)
    with store.group_consumer("g", "t", enable_auto_commit=False, follow=False) as c:
        for r in c:
            if r.offset == 2:
                assert c.commit() == {("t", 0): 3}
                break
    assert GroupsMeta(store.meta).committed("g")[("t", 0)].offset == 3


# -- admin ------------------------------------------------------------------------------------------
@pytest.fixture
def reset_store(store):
    """Partition 0: offsets 0-9 at timestamps 1000-10000, log start 2, committed 6; partition 1: 0-4, none."""
    store.create_topic("t", partitions=2)
    with store.producer() as p:
        for i in range(10):
            p.send("t", b"a", partition=0, timestamp=1000 * (i + 1))
        for i in range(5):
            p.send("t", b"b", partition=1, timestamp=1000 * (i + 1))
    store.partition("t", 0).set_log_start_offset(2)
    GroupsMeta(store.meta).set_offsets("g", {("t", 0): 6})
    return store


@pytest.mark.parametrize(("spec", "scope", "expected"), [
    (admin.ResetSpec("earliest"), ["t"], [2, 0]),
    (admin.ResetSpec("latest"), ["t"], [10, 5]),
    (admin.ResetSpec("offset", 7), ["t"], [7, 5]),  # past the end: the end
    (admin.ResetSpec("offset", 1), ["t"], [2, 1]),  # below the log start: the log start
    (admin.ResetSpec("datetime", 3500), ["t"], [3, 3]),  # first record at or after 3500 ms: ts 4000
    (admin.ResetSpec("datetime", 1500), ["t"], [2, 1]),
    (admin.ResetSpec("datetime", 99_999), ["t"], [10, 5]),  # nothing that late: the end
    (admin.ResetSpec("duration", 2000), ["t"], [6, 5]),  # now 8500 - 2000 = 6500 -> ts 7000
    (admin.ResetSpec("shift", -3), ["t:0"], [3]),
    (admin.ResetSpec("shift", -5), ["t:0"], [2]),
    (admin.ResetSpec("shift", 10), ["t:0"], [10]),
    (admin.ResetSpec("current"), ["t"], [6, 5]),  # none committed on 1: the log end
])
def test_every_reset_variant_matches_hand_computed_offsets(reset_store, spec, scope, expected) -> None:
    plan = admin.plan_reset(reset_store, "g", spec, scope, now=8500)
    assert [r.new_offset for r in plan] == expected
    assert [(r.partition, r.current, r.log_start, r.log_end) for r in plan][:1] == [(0, 6, 2, 10)]
    admin.execute_reset(reset_store, "g", plan)
    assert [GroupsMeta(reset_store.meta).committed("g")[("t", r.partition)].offset for r in plan] == expected


def test_shift_without_a_committed_offset_and_bad_scopes_are_errors(reset_store) -> None:
    with pytest.raises(GroupError, match="cannot shift t-1: the group has no committed offset"):
        admin.plan_reset(reset_store, "g", admin.ResetSpec("shift", 1), ["t"])
    with pytest.raises(UsageError, match="topic 't' has no partition 7"):
        admin.plan_reset(reset_store, "g", admin.ResetSpec("earliest"), ["t:7"])
    with pytest.raises(UsageError, match="--topic"):
        admin.plan_reset(reset_store, "g", admin.ResetSpec("earliest"), [])


def test_reset_delete_and_delete_offsets_are_refused_while_members_live(reset_store) -> None:
    store = reset_store
    plan = admin.plan_reset(store, "g", admin.ResetSpec("earliest"), ["t"])
    with store.group_consumer("g", "t", enable_auto_commit=False):
        with pytest.raises(GroupError, match=r"cannot reset offsets: group 'g' has 1 live member\(s\): klog-"):
            admin.execute_reset(store, "g", plan)
        with pytest.raises(GroupError, match="cannot delete it"):
            admin.delete_group(store, "g")
        with pytest.raises(GroupError, match="cannot delete offsets of topic 't'"):
            admin.delete_offsets(store, "g", "t")
        assert GroupsMeta(store.meta).committed("g")[("t", 0)].offset == 6  # untouched
    admin.execute_reset(store, "g", plan)
    assert admin.delete_offsets(store, "g", "t:0") == [("t", 0)]
    assert admin.delete_group(store, "g") == 1
    assert admin.list_groups(store) == []
    with pytest.raises(GroupError, match="unknown group 'g'"):
        admin.describe_group(store, "g")


def test_describe_shows_lag_and_the_member_reading_each_partition(store) -> None:
    fill(store, "t", 2, 10)
    with store.group_consumer("g", "t", enable_auto_commit=False) as c:
        settle([c], lambda: len(c.assignment()) == 2)
        before = int(time.time() * 1000)
        c.commit({("t", 0): 7}, metadata="run-42")
        d = admin.describe_group(store, "g")
        assert d.partitions[0].metadata == "run-42" and d.partitions[0].commit_ms >= before
        assert d.state == "Stable" and len(d.members) == 1
        rows = {p.partition: p for p in d.partitions}
        assert (rows[0].committed, rows[0].log_end, rows[0].lag) == (7, 10, 3)
        assert (rows[1].committed, rows[1].lag) == (None, None)
        assert rows[0].member_id == c.member_id and rows[0].pid == os.getpid()
        [listing] = admin.list_groups(store)
        assert (listing.group, listing.state, listing.members, listing.topics) == ("g", "Stable", 1, ["t"])
    d = admin.describe_group(store, "g")
    assert d.state == "Empty" and d.members == [] and d.partitions[0].member_id is None

"""The classic group coordinator's state machine, driven by an injected clock (no sleeping), and the
LMDB record of the groups it serves."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from klog.errors import GroupError
from klog.meta.groups import GroupsMeta, Member, now_ms, process_start_time
from klog.server import consumer_protocol as cp
from klog.server.coordinator import COMPLETING, EMPTY, PREPARING, STABLE, GroupStateMachine
from klog.store.state import current_boot_id

SESSION = 10_000
REBALANCE = 20_000
DELAY = 3_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Replies:
    """Collects the delayed replies of one request."""

    def __init__(self) -> None:
        self.got: list = []

    def __call__(self, result) -> None:
        self.got.append(result)

    @property
    def one(self):
        assert len(self.got) == 1, self.got
        return self.got[0]


def make(delay: int = DELAY) -> tuple[GroupStateMachine, Clock]:
    clock = Clock()
    return GroupStateMachine(clock, initial_rebalance_delay_ms=delay), clock


def join(c: GroupStateMachine, member_id: str = "", protocols=(("range", b"m"),), instance: str | None = None,
         require: bool = False, group: str = "g", session: int = SESSION) -> Replies:
    r = Replies()
    c.join(group, member_id, instance, client_id="c", client_host="127.0.0.1", session_timeout_ms=session,
           rebalance_timeout_ms=REBALANCE, protocol_type="consumer", protocols=list(protocols),
           require_known_member_id=require, respond=r)
    return r


def sync(c: GroupStateMachine, gen: int, member_id: str, assignments=None, instance: str | None = None) -> Replies:
    r = Replies()
    c.sync("g", gen, member_id, instance, protocol_type="consumer", protocol_name=None,
           assignments=assignments or {}, respond=r)
    return r


def stable_group(c: GroupStateMachine, clock: Clock, n: int) -> list[str]:
    """n members joined and synced (leader first); returns the member ids."""
    joins = [join(c) for _ in range(n)]
    assert all(not j.got for j in joins)  # a new group waits for more members first
    clock.now += DELAY
    c.tick()
    ids = [j.one.member_id for j in joins]
    leader = joins[0].one.leader
    assert leader in ids and sorted(m for m, _, _ in next(j.one for j in joins if j.one.member_id == leader).members) \
        == sorted(ids)
    gen = joins[0].one.generation
    followers = [sync(c, gen, m) for m in ids if m != leader]
    assert all(not f.got for f in followers)  # they wait for the leader's assignment
    lead = sync(c, gen, leader, {m: m.encode() for m in ids})
    assert lead.one.error == E.none and lead.one.assignment == leader.encode()
    for f, m in zip(followers, [m for m in ids if m != leader], strict=True):
        assert f.one.error == E.none and f.one.assignment == m.encode()
    assert c.groups["g"].state == STABLE
    return ids


def test_member_id_required_then_join_and_sync() -> None:
    c, clock = make()
    first = join(c, require=True)
    assert first.one.error == E.member_id_required and first.one.member_id
    second = join(c, first.one.member_id, require=True)
    assert not second.got and c.groups["g"].state == PREPARING
    assert c.next_deadline() == clock.now + DELAY
    clock.now += DELAY
    c.tick()
    res = second.one
    assert (res.error, res.generation, res.leader, res.protocol_name) == (E.none, 1, res.member_id, "range")
    assert res.members == [(res.member_id, None, b"m")]
    assert c.groups["g"].state == COMPLETING
    s = sync(c, 1, res.member_id, {res.member_id: b"a"})
    assert s.one.assignment == b"a" and s.one.protocol_name == "range"


def test_group_of_three_rebalances_when_one_leaves() -> None:
    c, clock = make()
    a, b, d = stable_group(c, clock, 3)
    gen = c.groups["g"].generation
    assert c.leave("g", [(d, None)]) == (E.none, [E.none])
    assert c.groups["g"].state == PREPARING
    assert c.heartbeat("g", gen, a, None) == E.rebalance_in_progress
    # an eager member commits before giving its partitions up: the old generation may still commit
    assert c.check_commit("g", gen, a, None) == E.none
    ja = join(c, a)
    assert not ja.got
    jb = join(c, b)
    assert ja.one.generation == jb.one.generation == gen + 1  # everyone re-joined: no waiting
    assert c.check_commit("g", gen, a, None) == E.rebalance_in_progress  # CompletingRebalance
    assert c.heartbeat("g", gen, a, None) == E.illegal_generation
    assert c.leave("g", [(d, None)]) == (E.none, [E.unknown_member_id])


def test_silent_member_is_expelled_after_its_session_timeout() -> None:
    c, clock = make()
    lines: list[str] = []
    c.log = lines.append
    a, b = stable_group(c, clock, 2)
    gen = c.groups["g"].generation
    clock.now += SESSION - 1
    assert c.heartbeat("g", gen, a, None) == E.none
    c.tick()
    assert set(c.groups["g"].members) == {a, b}
    clock.now += 1
    assert c.next_deadline() <= clock.now
    c.tick()
    assert set(c.groups["g"].members) == {a}
    assert lines[0].startswith("group 'g' generation 1: 2 member(s), protocol range, leader ")
    assert lines[1:] == [f"member {b} of group 'g' sent no heartbeat for {SESSION} ms: removed"]
    assert c.heartbeat("g", gen, a, None) == E.rebalance_in_progress
    assert c.heartbeat("g", gen, b, None) == E.unknown_member_id
    j = join(c, a)
    assert j.one.generation == gen + 1 and j.one.leader == a


def test_member_not_rejoining_is_dropped_at_the_rebalance_timeout() -> None:
    c, clock = make()
    a, b = stable_group(c, clock, 2)
    j = join(c, a, protocols=(("range", b"new"),))  # changed metadata: rebalance
    assert not j.got
    # b keeps heartbeating but never re-joins (a stuck poll loop)
    clock.now += REBALANCE - 1
    assert c.heartbeat("g", 1, b, None) == E.rebalance_in_progress
    c.tick()
    assert not j.got
    clock.now += 1
    c.tick()
    assert j.one.generation == 2 and j.one.members == [(a, None, b"new")]
    assert c.heartbeat("g", 1, b, None) == E.unknown_member_id


def test_all_members_leaving_empties_the_group_and_a_simple_commit_is_then_allowed() -> None:
    c, clock = make()
    (a,) = stable_group(c, clock, 1)
    assert c.check_commit("g", -1, "", None) == E.unknown_member_id  # the group has a member
    c.leave("g", [(a, None)])
    g = c.groups["g"]
    assert (g.state, g.members, g.generation) == (EMPTY, {}, 2)
    assert c.check_commit("g", -1, "", None) == E.none
    assert c.check_commit("other", -1, "", None) == E.none
    assert c.delete("g") == E.none and "g" not in c.groups


def test_stale_generation_and_unknown_members_are_refused() -> None:
    c, clock = make()
    (a,) = stable_group(c, clock, 1)
    assert c.check_commit("g", 7, a, None) == E.illegal_generation
    assert c.check_commit("g", 1, "nobody", None) == E.unknown_member_id
    assert sync(c, 7, a).one.error == E.illegal_generation
    assert sync(c, 1, "nobody").one.error == E.unknown_member_id
    assert join(c, "nobody").one.error == E.unknown_member_id
    assert c.heartbeat("missing", 1, a, None) == E.unknown_member_id
    assert c.delete("g") == E.non_empty_group


def test_bad_join_requests() -> None:
    c, _ = make()
    assert join(c, group="").one.error == E.invalid_group_id
    assert join(c, session=10).one.error == E.invalid_session_timeout
    assert join(c, protocols=()).one.error == E.inconsistent_group_protocol
    join(c, protocols=(("range", b""),))
    assert join(c, protocols=(("roundrobin", b""),)).one.error == E.inconsistent_group_protocol


def test_protocol_is_chosen_by_vote_among_those_all_support() -> None:
    c, clock = make()
    j1 = join(c, protocols=(("cooperative-sticky", b"x"), ("range", b"r")))
    j2 = join(c, protocols=(("range", b"r"), ("cooperative-sticky", b"y")))
    j3 = join(c, protocols=(("cooperative-sticky", b"z"), ("range", b"r")))
    clock.now += DELAY
    c.tick()
    assert {j.one.protocol_name for j in (j1, j2, j3)} == {"cooperative-sticky"}


def test_sync_waiters_get_rebalance_in_progress_when_a_member_joins_mid_sync() -> None:
    c, clock = make()
    j1, j2 = join(c), join(c)
    clock.now += DELAY
    c.tick()
    follower = j1.one if j1.one.member_id != j1.one.leader else j2.one
    waiting = sync(c, 1, follower.member_id)
    join(c)  # a third member: the assignment being computed is void
    assert waiting.one.error == E.rebalance_in_progress


def two_static_members(other: str) -> tuple[GroupStateMachine, Any, Any]:
    """Group "g" of two static members ("i-lead" joined first, then `other`), past the rebalance delay."""
    c, clock = make()
    lead = join(c, instance="i-lead")
    second = join(c, instance=other)
    clock.now += DELAY
    c.tick()
    return c, lead, second


def test_static_member_restart_keeps_its_assignment_without_rebalance() -> None:
    c, lead, st = two_static_members("i-1")
    gen = st.one.generation
    sync(c, gen, st.one.member_id)
    sync(c, gen, lead.one.member_id, {st.one.member_id: b"p0", lead.one.member_id: b"p1"})
    old = st.one.member_id
    again = join(c, instance="i-1")  # restarted process: same instance id, no member id
    assert again.one.error == E.none and again.one.generation == gen and again.one.member_id != old
    assert c.groups["g"].state == STABLE
    assert sync(c, gen, again.one.member_id, instance="i-1").one.assignment == b"p0"
    assert c.heartbeat("g", gen, old, "i-1") == E.fenced_instance_id
    # leaving by instance id
    assert c.leave("g", [("", "i-1")]) == (E.none, [E.none])
    assert c.groups["g"].state == PREPARING


def test_pending_member_id_expires() -> None:
    c, clock = make()
    first = join(c, require=True)
    assert c.groups["g"].pending
    clock.now += SESSION
    c.tick()
    assert "g" not in c.groups  # nothing but a handed-out id: forgotten (no memory kept per bogus join)
    assert join(c, first.one.member_id, require=True).one.error == E.unknown_member_id


def test_join_while_stable_returns_current_generation_for_an_unchanged_follower() -> None:
    c, clock = make()
    a, b = stable_group(c, clock, 2)
    leader = c.groups["g"].leader
    follower = b if leader == a else a
    j = join(c, follower)
    assert j.one.error == E.none and j.one.generation == 1 and c.groups["g"].state == STABLE
    j = join(c, leader)  # the leader re-joining means it wants a new assignment
    assert not j.got and c.groups["g"].state == PREPARING


def test_consumer_protocol_round_trip_and_garbage() -> None:
    assert cp.subscription_topics(cp.encode_subscription(["b", "a"])) == ["a", "b"]
    parts = [("a", 1), ("a", 0), ("b", 3)]
    assert cp.assignment_partitions(cp.encode_assignment(parts)) == sorted(parts)
    for garbage in (b"", b"\x00", b"\x00\x00\x7f\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x09ab"):
        assert cp.subscription_topics(garbage) == [] and cp.assignment_partitions(garbage) == []


def test_served_members_live_with_the_server_process(store) -> None:
    """A Kafka client's member recorded by klog serve counts as live while that process runs: klog's
    reset and join are refused; once the process is gone they go ahead."""
    store.create_topic("t", partitions=1)
    meta = GroupsMeta(store.meta)
    child = subprocess.Popen(["sleep", "30"])
    try:
        pid = child.pid
        member = Member("kafka-1", "rdkafka", "127.0.0.1", pid, process_start_time(pid), current_boot_id().hex(),
                        ["t"], "range", 45_000, now_ms(), now_ms() - 3_600_000, 1, f"klog serve pid {pid}")
        meta.publish_served("g", f"klog serve pid {pid}", 1, "range", [member], {"kafka-1": [("t", 0)]})
        snap = meta.snapshot("g")
        assert snap.state == "Stable" and [m.member_id for m in snap.live] == ["kafka-1"]
        with pytest.raises(GroupError, match="Kafka client rdkafka at 127.0.0.1 via klog serve"):
            meta.set_offsets("g", {("t", 0): 0})
        with pytest.raises(GroupError, match="Kafka client member"):
            store.group_consumer("g", "t", follow=False).__enter__()
    finally:
        child.kill()
        child.wait()
    assert meta.snapshot("g").state == "Empty"
    meta.set_offsets("g", {("t", 0): 0})
    assert meta.committed("g")[("t", 0)].offset == 0
    with store.group_consumer("g", "t", follow=False):  # klog's consumers take the group over
        assert meta.snapshot("g").doc.served_by is None


def test_requests_naming_unknown_groups_leave_nothing_behind() -> None:
    c, _ = make()
    assert join(c, "someone", group="ghost").one.error == E.unknown_member_id
    assert c.heartbeat("ghost", 1, "someone", None) == E.unknown_member_id
    assert sync(c, 1, "someone").one.error == E.unknown_member_id
    assert c.leave("ghost", [("someone", None)]) == (E.unknown_member_id, [E.unknown_member_id])
    assert c.groups == {} and c.next_deadline() is None


def test_static_leader_restart_keeps_the_generation_and_is_not_told_to_assign() -> None:
    c, lead, other = two_static_members("i-2")
    leader_id = lead.one.leader
    restarting = "i-lead" if leader_id == lead.one.member_id else "i-2"
    gen = lead.one.generation
    sync(c, gen, other.one.member_id)
    sync(c, gen, lead.one.member_id, {lead.one.member_id: b"L", other.one.member_id: b"O"})
    old_assignment = b"L" if restarting == "i-lead" else b"O"
    again = join(c, instance=restarting)
    res = again.one
    assert res.error == E.none and res.generation == gen and res.members == []
    assert res.leader != res.member_id  # the old leader id: the client does not compute an assignment
    assert c.groups["g"].state == STABLE and c.groups["g"].leader == res.member_id
    assert sync(c, gen, res.member_id, instance=restarting).one.assignment == old_assignment


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_keep_the_invariants(seed: int, replay_seed) -> None:
    """Seeded random joins, syncs, heartbeats, leaves and clock jumps: every delayed reply is given
    exactly once (all of them once the clock has run past every timeout), and the group stays sane."""
    import random

    seed = replay_seed(seed)
    rng = random.Random(seed)
    c, clock = make(delay=rng.choice([0, DELAY]))
    replies: list[Replies] = []
    known: list[str] = []  # member ids handed out
    instances = ["s1", "s2", None, None, None]

    def check() -> None:
        for g in c.groups.values():
            assert g.leader is None or g.leader in g.members
            assert (g.state == EMPTY) <= (not g.members)
            assert all(g.members[mid].instance_id == iid for iid, mid in g.static.items())
            if g.state in (COMPLETING, STABLE):
                assert g.protocol_name in g.protocols()
        assert all(len(r.got) <= 1 for r in replies)

    for _ in range(300):
        op = rng.random()
        g = c.groups.get("g")
        gen = g.generation if g else 0
        member = rng.choice(known) if known and rng.random() < 0.8 else ""
        if op < 0.3:
            protocols = rng.choice([(("range", b"a"),), (("range", b"b"), ("roundrobin", b"")), (("roundrobin", b""),)])
            r = join(c, member, protocols=protocols, instance=rng.choice(instances), require=rng.random() < 0.5)
            replies.append(r)
            if r.got and r.got[0].member_id:
                known.append(r.got[0].member_id)
        elif op < 0.5 and member:
            leader = g.leader if g else None
            r = sync(c, gen if rng.random() < 0.9 else gen - 1, member,
                     {m: m.encode() for m in known} if member == leader else {})
            replies.append(r)
        elif op < 0.7 and member:
            c.heartbeat("g", gen, member, None)
        elif op < 0.8 and member:
            c.leave("g", [(member, None)])
        elif op < 0.85 and member:
            c.check_commit("g", gen, member, None)
        else:
            clock.now += rng.choice([1, 100, 1000, 5000, SESSION, REBALANCE])
            c.tick()
        for r in replies:  # ids learned from delayed join replies
            if r.got and getattr(r.got[0], "member_id", "") and r.got[0].member_id not in known:
                known.append(r.got[0].member_id)
        check()
    for _ in range(10):  # no more requests: every timeout fires, every reply is given
        clock.now += REBALANCE + SESSION
        c.tick()
    check()
    assert all(len(r.got) == 1 for r in replies), [r.got for r in replies if len(r.got) != 1][:3]
    assert c.next_deadline() is None


def test_a_group_at_group_max_size_refuses_new_members_and_new_member_ids():
    """Kafka's group.max.size: a client joining over and over (each join's subscription goes back to the
    leader in every rebalance) gets GROUP_MAX_SIZE_REACHED instead of growing the group without end."""
    c, _ = make()
    c.max_size = 3
    first = [join(c) for _ in range(2)]  # members (waiting for the rebalance)
    handed_out = join(c, require=True)  # KIP-394: a member id handed out counts too
    assert handed_out.one.error == E.member_id_required
    refused = join(c)
    assert refused.one.error == E.group_max_size_reached
    assert join(c, require=True).one.error == E.group_max_size_reached
    assert len(c.groups["g"].members) + len(c.groups["g"].pending) == 3
    assert all(not r.got for r in first)
    # the member id handed out still joins: it is already counted
    joined = join(c, member_id=handed_out.one.member_id)
    assert not joined.got or joined.one.error != E.group_max_size_reached

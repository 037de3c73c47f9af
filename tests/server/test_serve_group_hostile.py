"""klog serve's group coordinator against hostile protocol *sequences* (byte-level fuzzing is
test_serve_fuzz.py): JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/OffsetFetch out of order,
with forged or stale member ids and generations, static-member collisions, absurd sizes and counts,
rebalances held open, connections dropped mid-rebalance, admin calls in every state. After each
sequence a fresh client is served promptly, memory stays bounded, the log has no traceback, and each
error is the one Kafka's GroupCoordinator answers. Every loop is bounded in count and time; the
server listens on 127.0.0.1 and an ephemeral port and is stopped at the end."""

from __future__ import annotations

import time

import pytest

from klog.protocol.kafka import E
from klog.server.coordinator import GroupStateMachine

pytest.importorskip("kio")


# -- the timer: only due groups are looked at ------------------------------------------------------
def test_the_timer_of_many_groups_costs_what_is_due_not_every_group():
    """Each change woke the timer, which scanned every group (next_deadline, tick): one client
    handing out member ids in 6,000 groups cost 43 s of CPU on the event loop, and every other
    client's JoinGroup paid a scan. Now the timer keeps a heap of deadlines."""
    now = [0]
    machine = GroupStateMachine(lambda: now[0])
    answers: list = []
    started = time.process_time()
    for i in range(20_000):
        machine.join(f"g{i}", "", None, client_id="c", client_host="h", session_timeout_ms=6000 + i,
                     rebalance_timeout_ms=1000, protocol_type="consumer", protocols=[("range", b"")],
                     require_known_member_id=True, respond=answers.append)
        machine.next_deadline()
        machine.tick()
    assert time.process_time() - started < 5  # (was quadratic: minutes)
    assert {a.error for a in answers} == {E.member_id_required}
    assert machine.next_deadline() == 6000
    now[0] = 6000 + 9_999  # half of the handed-out ids expire; their groups are forgotten
    machine.tick()
    assert len(machine.groups) == 10_000 and machine.next_deadline() == 16_000
    now[0] = 10**9
    machine.tick()
    assert machine.groups == {} and machine.next_deadline() is None


# -- error codes in the order Kafka's GroupCoordinator checks -----------------------------------------
def _stable_pair(machine: GroupStateMachine) -> tuple[str, str, int]:
    """Two dynamic members a (the leader) and b in a Stable group 'g'; (a, b, generation)."""
    from tests.server.test_group_coordinator import join, sync

    ra, rb = join(machine), join(machine)
    machine.clock.now += 3_000
    machine.tick()
    a, b, gen = ra.one.member_id, rb.one.member_id, ra.one.generation
    sync(machine, gen, a, {a: b"A", b: b"B"})
    assert machine.groups["g"].state == "Stable"
    return a, b, gen


def test_stale_generations_forged_instance_ids_and_simple_commits_get_kafkas_errors():
    from tests.server.test_group_coordinator import join, make

    machine, clock = make()
    a, b, gen = _stable_pair(machine)
    # a dynamic member naming a group.instance.id the group does not know (Kafka's validateCurrentMember)
    assert machine.heartbeat("g", gen, a, "forged") == E.unknown_member_id
    assert machine.check_commit("g", gen, a, "forged") == E.unknown_member_id
    join(machine, b, protocols=(("range", b"changed"),))  # PreparingRebalance, generation still `gen`
    assert machine.groups["g"].state == "PreparingRebalance"
    # a stale generation is ILLEGAL_GENERATION in a rebalance too, and keeps nobody alive
    deadline = machine.groups["g"].members[a].deadline
    clock.now += 100
    assert machine.heartbeat("g", gen - 1, a, None) == E.illegal_generation
    assert machine.groups["g"].members[a].deadline == deadline
    assert machine.heartbeat("g", gen, a, None) == E.rebalance_in_progress
    # commits outside group management: accepted while the group is Empty or unknown
    assert machine.check_commit("never-seen", -1, "", None) == E.none
    assert machine.check_commit("never-seen", -1, "someone", None) == E.none
    assert machine.check_commit("never-seen", 3, "someone", None) == E.illegal_generation
    assert machine.check_commit("g", -1, "", None) == E.unknown_member_id  # the group has members

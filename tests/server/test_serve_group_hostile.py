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

"""What one principal (one authenticated user, over any number of connections) may hold of the
server's shared pools, so it cannot stall the others: the group coordinator's member data, members
and groups, the transactional ids it creates, and what its offset commits add to the store.

The node bounds every group's member data together (128 MiB); one user filling it with its own groups
had every other user's JoinGroup refused. Now a principal's members hold at most its share of it
(PRINCIPAL_METADATA_MAX_BYTES, a quarter); past it, its JoinGroup is answered COORDINATOR_NOT_AVAILABLE
(the code of the node's bound: clients retry), one line is logged, and the other principals join.
The tests lower the bounds (the machine's attributes) so a few 300 KB joins fill them.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kio.schema.errors import ErrorCode as E

from klog.server.coordinator import GroupStateMachine
from tests.server import group_client as gc
from tests.server.test_group_coordinator import Clock, Replies

SUBSCRIPTION = 300_000  # bytes of one hostile member's subscription
POOL = 4_000_000  # the node's bound in these tests (128 MiB by default)
SHARE = 1_000_000  # a principal's share of it (a quarter by default)
JOINS_MAX = 20  # past the node's bound on the old code: the loops stop by then whatever happens


TXN_IDS = 5  # a principal's transactional ids in these tests (PRINCIPAL_TRANSACTIONAL_IDS_MAX: 10,000)
OFFSET_BYTES = 50_000  # what a principal's commits may add to the store in these tests (256 MiB by default)
METADATA = "m" * 4000  # an offset's metadata: 4,000 bytes (Kafka's offset.metadata.max.bytes is 4,096)


# -- over the wire: two SASL users ------------------------------------------------------------------------
@pytest.fixture
def sasl_server(data_dir):
    import klog
    from klog.meta.credentials import CredentialsMeta
    from klog.server import Server
    from klog.server.listeners import Listener, SecurityConfig

    store = klog.open(data_dir)
    for user in ("alice", "bob"):
        CredentialsMeta(store.meta).add(user, "SCRAM-SHA-256", "pw")
    store.create_topic("t", partitions=1)
    with store.producer() as p:
        for i in range(5):
            p.send("t", value=b"v%d" % i, partition=0)
    cfg = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)], auth_failure_delay_ms=100)
    with Server(store=store, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.transactions.principal_ids_max = TXN_IDS
        if hasattr(server.coordinator, "offset_growth"):  # (absent before these bounds: the tests then fail)
            server.coordinator.offset_growth.max_bytes = OFFSET_BYTES
        machine = server.coordinator.machine
        machine.metadata_max_bytes = POOL
        machine.principal_metadata_max_bytes = SHARE
        machine.initial_rebalance_delay_ms = 0  # a join is answered at once (no 3 s wait for more members)
        yield server
    store.close()


async def _sasl_conn(port: int, user: str) -> gc.Conn:
    """A raw connection authenticated as `user` (SASL PLAIN, checked against the SCRAM credential)."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    conn = await gc.Conn.open(port)
    shake = await conn.call(SaslHandshakeRequest(mechanism="PLAIN"))
    assert shake.error_code == E.none, shake
    auth = await conn.call(SaslAuthenticateRequest(auth_bytes=b"\0" + user.encode() + b"\0pw"))
    assert auth.error_code == E.none, auth
    return conn


def _big_join(group: str) -> object:
    # v3: no member id handed out first; sessions long enough to hold the bytes through the test
    return gc.join(group, protocols=(("range", b"x" * SUBSCRIPTION),), session_ms=60_000, rebalance_ms=60_000,
                   version=3)


async def _fill(port: int) -> list[int]:
    """alice joins new groups from two connections in turn until refused: the error codes."""
    conns = [await _sasl_conn(port, "alice") for _ in range(2)]
    try:
        codes = []
        for i in range(JOINS_MAX):
            answer = await conns[i % 2].call(_big_join(f"alice-{i}"), timeout=10)
            codes.append(int(answer.error_code))
            if answer.error_code != E.none:
                break
        return codes
    finally:
        for c in conns:
            c.close()


async def _bob_joins(port: int) -> int:
    conn = await _sasl_conn(port, "bob")
    try:
        return int((await conn.call(_big_join("bob-big"), timeout=10)).error_code)
    finally:
        conn.close()


def _consume_as_bob(server, group: str, timeout_s: float = 30) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.port}", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "pw",
                         "group.id": group, "auto.offset.reset": "earliest", "socket.timeout.ms": 5000,
                         "log_level": 0})
    got: list[bytes] = []
    try:
        consumer.subscribe(["t"])
        deadline = time.monotonic() + timeout_s
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_a_principal_past_its_share_is_refused_and_another_still_joins_and_consumes(sasl_server, caplog):
    """alice fills her share from two connections: her next JoinGroup is COORDINATOR_NOT_AVAILABLE
    (before, she went on to the node's bound, and bob's JoinGroup was refused: he could not consume);
    bob still joins a group with as much data, and consumes with a real client."""
    caplog.set_level(logging.INFO, logger="klog.serve")
    codes = asyncio.run(_fill(sasl_server.port))
    accepted = SHARE // (SUBSCRIPTION + 100)
    assert codes == [E.none] * accepted + [E.coordinator_not_available], codes
    machine = sasl_server.coordinator.machine
    assert machine.principal_bytes["User:alice"] <= SHARE
    assert any("User:alice's members hold" in r.getMessage() and "its share is" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records][-5:]
    assert asyncio.run(_bob_joins(sasl_server.port)) == E.none
    assert _consume_as_bob(sasl_server, "bob-consumers") == [b"v%d" % i for i in range(5)]


def test_a_principals_room_comes_back_when_its_members_leave(sasl_server):
    """The share is what alice holds now, not what she ever took: once her members leave she joins
    again."""
    async def main() -> tuple[list[int], int, int]:
        conn = await _sasl_conn(sasl_server.port, "alice")
        try:
            joined = []
            for i in range(JOINS_MAX):
                answer = await conn.call(_big_join(f"a-{i}"), timeout=10)
                if answer.error_code != E.none:
                    break
                joined.append((f"a-{i}", answer.member_id))
            refused = int(answer.error_code)
            for group, member in joined:
                left = await conn.call(gc.leave(group, [(member, None)]), timeout=10)
                assert left.error_code == E.none
            again = int((await conn.call(_big_join("a-again"), timeout=10)).error_code)
            return [g for g, _ in joined], refused, again
        finally:
            conn.close()

    joined, refused, again = asyncio.run(main())
    assert len(joined) == SHARE // (SUBSCRIPTION + 100) and refused == E.coordinator_not_available
    assert again == E.none


def _init_producer(tid: str) -> object:
    import datetime

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.static.primitive import i32Timedelta

    return InitProducerIdRequest(transactional_id=tid, producer_id=-1, producer_epoch=-1,
                                 transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)))


def _bob_commits_a_transaction(server) -> None:
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": f"127.0.0.1:{server.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "pw",
            "transactional.id": "bob-app", "socket.timeout.ms": 5000, "log_level": 0}
    producer = Producer(conf)
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("t", value=b"bob", partition=0)
    producer.commit_transaction(20)


def test_a_principal_past_its_transactional_ids_is_refused_and_another_still_commits(sasl_server, caplog):
    """Every transactional id is an LMDB document kept 7 days once idle and read by every timer pass:
    alice, creating new ones as fast as answered (~450 a second), would have filled the store's LMDB
    in about an hour and made each timer pass take longer than its interval. Past her share her
    InitProducerId of a new id is COORDINATOR_NOT_AVAILABLE (one log line); ids she has keep working,
    bob's transactions go on, and when her ids are gone she has room again."""
    from klog.meta.transactions import TransactionsMeta

    caplog.set_level(logging.INFO, logger="klog.serve")

    async def alice(tids: list[str]) -> list[int]:
        conn = await _sasl_conn(sasl_server.port, "alice")
        try:
            return [int((await conn.call(_init_producer(tid), timeout=10)).error_code) for tid in tids]
        finally:
            conn.close()

    mine = [f"alice-{i}" for i in range(TXN_IDS)]
    assert asyncio.run(alice(mine + ["alice-more", mine[0]])) == [E.none] * TXN_IDS + [
        E.coordinator_not_available, E.none]
    assert any("User:alice created 5 transactional ids" in r.getMessage() for r in caplog.records)
    _bob_commits_a_transaction(sasl_server)
    TransactionsMeta(sasl_server.store.meta).apply(mine[1], lambda meta, txn: None)  # gone (as if expired)
    assert asyncio.run(alice(["alice-more"])) == [E.none]


def _offset_errors(answer: object) -> set[int]:
    return {int(p.error_code) for t in answer.topics for p in t.partitions}


def test_a_principals_offset_commits_add_at_most_its_share_to_the_store(sasl_server, caplog):
    """Committed offsets are kept in the store's LMDB (4 GiB for everything: once full, every
    client's commits, group changes and transactions fail) for 7 days: alice, committing with
    4,000-byte metadata to a new group each time, added 40 MiB a second. Past her share her commits
    that add to the store are COORDINATOR_NOT_AVAILABLE (one log line each); commits of what she has
    stored already go on, and so do bob's."""
    caplog.set_level(logging.INFO, logger="klog.serve")

    async def main() -> tuple[list[set[int]], set[int], set[int]]:
        alice, bob = await _sasl_conn(sasl_server.port, "alice"), await _sasl_conn(sasl_server.port, "bob")
        try:
            answers = []
            for i in range(JOINS_MAX):
                answers.append(_offset_errors(await alice.call(gc.commit(f"alice-g{i}", -1, "", {("t", 0): i},
                                                                         metadata=METADATA), timeout=10)))
                if answers[-1] != {E.none}:
                    break
            again = _offset_errors(await alice.call(gc.commit("alice-g0", -1, "", {("t", 0): 99}, metadata=METADATA),
                                                    timeout=10))
            theirs = _offset_errors(await bob.call(gc.commit("bob-g", -1, "", {("t", 0): 3}, metadata=METADATA),
                                                   timeout=10))
            return answers, again, theirs
        finally:
            alice.close()
            bob.close()

    answers, again, theirs = asyncio.run(main())
    stored = OFFSET_BYTES // (len("alice-gN") + 1 + len(METADATA) + 150)
    assert answers == [{E.none}] * stored + [{E.coordinator_not_available}], answers
    assert again == {E.none} and theirs == {E.none}
    assert any("User:alice added" in r.getMessage() for r in caplog.records)


def test_a_principals_transactional_offset_commits_count_in_its_share(sasl_server):
    """TxnOffsetCommit stages offsets that the transaction's commit stores: they count when staged."""
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
    from kio.schema.txn_offset_commit.v3.request import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )

    async def main() -> list[set[int]]:
        conn = await _sasl_conn(sasl_server.port, "alice")
        try:
            init = await conn.call(_init_producer("alice-txn"), timeout=10)
            pid, epoch = int(init.producer_id), int(init.producer_epoch)
            answers = []
            for i in range(JOINS_MAX):
                group = f"alice-t{i}"
                added = await conn.call(AddOffsetsToTxnRequest(transactional_id="alice-txn", producer_id=pid,
                                                               producer_epoch=epoch, group_id=group), timeout=10)
                assert added.error_code == E.none, added
                answer = await conn.call(TxnOffsetCommitRequest(
                    transactional_id="alice-txn", group_id=group, producer_id=pid, producer_epoch=epoch,
                    generation_id=-1, member_id="", group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(
                        name="t", partitions=(TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=i, committed_leader_epoch=-1,
                            committed_metadata=METADATA),)),)), timeout=10)
                answers.append({int(p.error_code) for t in answer.topics for p in t.partitions})
                if answers[-1] != {E.none}:
                    break
            return answers
        finally:
            conn.close()

    answers = asyncio.run(main())
    stored = OFFSET_BYTES // (len("alice-tN") + 1 + len(METADATA) + 150)
    assert answers == [{E.none}] * stored + [{E.coordinator_not_available}], answers


# -- the state machine ---------------------------------------------------------------------------------
def _join(machine: GroupStateMachine, group: str, principal: str, *, member_id: str = "", client_id: str = "c",
          protocols=(("range", b"m"),), require: bool = False) -> Replies:
    r = Replies()
    machine.join(group, member_id, None, client_id=client_id, client_host="h", session_timeout_ms=10_000,
                 rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=list(protocols),
                 require_known_member_id=require, respond=r, principal=principal)
    return r


def test_member_ids_handed_out_count_in_the_principals_share():
    """A member id handed out (MEMBER_ID_REQUIRED) is the client id and a UUID, held up to 60 s:
    with 32 KB client ids, one client handing out ids in new groups held ~2 GB a minute at 1,000
    JoinGroups a second, counted nowhere. They count now, in the group's, the node's and the
    principal's bytes; past alice's share she is refused, bob is not."""
    machine = GroupStateMachine(Clock(), initial_rebalance_delay_ms=0)
    machine.principal_metadata_max_bytes = 20_000
    long_id = "c" * 1_000
    codes = [_join(machine, f"g{i}", "User:alice", client_id=long_id, require=True).one.error
             for i in range(JOINS_MAX + 10)]
    handed_out = codes.index(E.coordinator_not_available)
    assert handed_out < 20 and set(codes[:handed_out]) == {E.member_id_required}, codes
    assert machine.principal_bytes["User:alice"] == handed_out * (len(long_id) + 37)
    assert _join(machine, "bob", "User:bob", client_id=long_id, require=True).one.error == E.member_id_required


def test_a_leaders_assignments_count_in_the_leaders_share_not_its_members():
    """The leader chooses the assignments' size: they count in its principal's share, so a leader
    cannot spend a member's principal's share (nor hold more than its own)."""
    clock = Clock()
    machine = GroupStateMachine(clock, initial_rebalance_delay_ms=0)
    machine.principal_metadata_max_bytes = 50_000
    lead = _join(machine, "g", "User:alice")
    leader = lead.one.member_id
    follow = _join(machine, "g", "User:bob")  # bob joins: alice re-joins for the new generation
    _join(machine, "g", "User:alice", member_id=leader)
    follower = follow.one.member_id
    generation = follow.one.generation
    bob_before = machine.principal_bytes["User:bob"]
    synced = Replies()
    machine.sync("g", generation, follower, None, protocol_type=None, protocol_name=None, assignments={},
                 respond=synced, principal="User:bob")
    done = Replies()
    machine.sync("g", generation, leader, None, protocol_type=None, protocol_name=None,
                 assignments={leader: b"a" * 10_000, follower: b"b" * 30_000}, respond=done, principal="User:alice")
    assert done.one.error == E.none and synced.one.error == E.none
    assert machine.principal_bytes["User:bob"] == bob_before  # bob's share untouched
    assert machine.principal_bytes["User:alice"] > 40_000
    # past alice's share: the sync is refused, the group rebalances, nothing is kept
    _join(machine, "g", "User:alice", member_id=leader)
    again = _join(machine, "g", "User:bob", member_id=follower)
    generation = again.one.generation
    held = dict(machine.principal_bytes)
    refused = Replies()
    machine.sync("g", generation, leader, None, protocol_type=None, protocol_name=None,
                 assignments={leader: b"a" * 10_000, follower: b"b" * 45_000}, respond=refused, principal="User:alice")
    assert refused.one.error == E.coordinator_not_available
    assert machine.principal_bytes == held


def test_a_principals_members_and_ids_handed_out_are_counted():
    """A member costs the server ~600 B of its own besides the bytes its client sent (44 B for an
    empty subscription), so the bytes alone let one principal hold 760,000 members (445 MB): a
    principal has at most PRINCIPAL_MEMBERS_MAX members and ids handed out, in all its groups."""
    machine = GroupStateMachine(Clock(), initial_rebalance_delay_ms=0)
    machine.principal_members_max = 30
    # members (alone in their group: answered at once) and ids handed out, in turn
    codes = [_join(machine, f"g{i}", "User:alice", require=i % 2 == 0).one.error for i in range(JOINS_MAX * 2)]
    assert codes[:30] == [E.member_id_required, E.none] * 15, codes
    assert codes[30:] == [E.coordinator_not_available] * 10, codes
    assert machine.principal_members == {"User:alice": 30}
    assert _join(machine, "g0", "User:bob").got == []  # bob joins (his reply waits for the rebalance)
    assert machine.principal_members == {"User:alice": 30, "User:bob": 1}


def test_a_principal_brings_at_most_so_many_groups_into_being():
    """A group its members left stays in memory (~1.3 KB) until the offset expiry pass finds it
    without offsets (7 days if a commit gave it some): joining, committing to and leaving new groups
    grew the server for good. A principal has at most PRINCIPAL_GROUPS_MAX groups it brought into
    being; past it, a JoinGroup of a new group is COORDINATOR_NOT_AVAILABLE, and room comes back as
    they go. Joining groups that exist is not limited, nor are other principals."""
    clock = Clock()
    machine = GroupStateMachine(clock, initial_rebalance_delay_ms=0)
    machine.principal_groups_max = 3

    def join_and_leave(group: str, principal: str) -> E:
        reply = _join(machine, group, principal)
        if reply.got and reply.one.error == E.none:
            machine.leave(group, [(reply.one.member_id, None)])
        return reply.one.error if reply.got else None

    assert [join_and_leave(f"a{i}", "User:alice") for i in range(5)] == [E.none] * 3 + [
        E.coordinator_not_available] * 2
    assert sorted(machine.groups) == ["a0", "a1", "a2"]  # Empty, kept (generation 1)
    machine.seed_generation("a-stored", 7, "User:alice")  # a stored group: not brought back past the bound
    assert "a-stored" not in machine.groups
    assert join_and_leave("a1", "User:bob") == E.none  # an existing group: bob joins
    assert join_and_leave("b0", "User:bob") == E.none  # a new one: bob has his own count
    assert machine.principal_groups == {"User:alice": 3, "User:bob": 1}
    assert machine.delete("a0") == E.none  # gone (DeleteGroups, or the offset expiry pass): room again
    assert join_and_leave("a3", "User:alice") == E.none


def test_a_principals_offset_share_comes_back_over_the_retention_period():
    """What a principal added is given back at its share per offsets.retention.minutes: a server
    running for months never shuts out a tool that commits under a new group id each run."""
    from klog.server.group_runtime import OffsetGrowth

    now = [0.0]
    growth = OffsetGrowth(10_000, lambda group: {}, period_ms=60_000, clock=lambda: now[0])
    offsets = {("t", p): (0, "m" * 900) for p in range(4)}  # ~4.3 KB each time, in a new group
    assert growth.admit("User:alice", "g1", offsets) is None
    assert growth.admit("User:alice", "g2", offsets) is None
    refused = growth.admit("User:alice", "g3", offsets)
    assert refused is not None and "per 1 minutes" in refused
    assert growth.admit("User:bob", "g4", offsets) is None  # (another principal's own share)
    now[0] += 30.0  # half the period: half the share back
    assert growth.admit("User:alice", "g3", offsets) is None
    assert growth.admit("User:alice", "g5", offsets) is not None

"""Each client's share of the server's pools where clients do not authenticate (docs/serve-limits.md).

Every client of a listener without authentication is User:ANONYMOUS; when the shares were keyed by
principal they all drew on one quarter, so one client filling it (new groups with large
subscriptions, new transactional ids, commits to new groups) had every other client's JoinGroup,
InitProducerId and OffsetCommit refused. The share is now keyed by the client's address there, as
Kafka's max.connections.per.ip tells clients apart; authenticated clients keep one share per
principal (test_serve_principal_budgets.py). The share itself is `klog serve --client-share`.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from kio.schema.errors import ErrorCode as E

from klog.server.limits import ServeLimits
from tests.server import group_client as gc
from tests.server.test_serve_principal_budgets import (
    JOINS_MAX,
    METADATA,
    POOL,
    SHARE,
    SUBSCRIPTION,
    _big_join,
    _init_producer,
    _offset_errors,
)

A, B = "127.0.0.1", "127.0.0.2"
TXN_IDS = 5
OFFSET_BYTES = 50_000


def _second_loopback_address() -> None:
    """Skip unless this machine lets a socket bind 127.0.0.2 (Linux routes all of 127/8 to loopback)."""
    with socket.socket() as s:
        try:
            s.bind((B, 0))
        except OSError as e:
            pytest.skip(f"cannot bind {B} to connect from a second address: {e}")


@pytest.fixture
def plain_server(store):
    from klog.server import Server

    _second_loopback_address()
    store.create_topic("t", partitions=1)
    with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.transactions.principal_ids_max = TXN_IDS
        server.coordinator.offset_growth.max_bytes = OFFSET_BYTES
        machine = server.coordinator.machine
        machine.metadata_max_bytes = POOL
        machine.principal_metadata_max_bytes = SHARE
        machine.initial_rebalance_delay_ms = 0
        yield server


async def _joins_until_refused(port: int, source: str, prefix: str) -> list[int]:
    conn = await gc.Conn.open(port, source)
    try:
        codes = []
        for i in range(JOINS_MAX):
            codes.append(int((await conn.call(_big_join(f"{prefix}-{i}"), timeout=10)).error_code))
            if codes[-1] != E.none:
                break
        return codes
    finally:
        conn.close()


async def _new_transactional_ids(port: int, source: str, tids: list[str]) -> list[int]:
    conn = await gc.Conn.open(port, source)
    try:
        return [int((await conn.call(_init_producer(tid), timeout=10)).error_code) for tid in tids]
    finally:
        conn.close()


async def _commits_until_refused(port: int, source: str, prefix: str) -> list[set[int]]:
    conn = await gc.Conn.open(port, source)
    try:
        answers = []
        for i in range(JOINS_MAX):
            answers.append(_offset_errors(await conn.call(
                gc.commit(f"{prefix}-{i}", -1, "", {("t", 0): i}, metadata=METADATA), timeout=10)))
            if answers[-1] != {E.none}:
                break
        return answers
    finally:
        conn.close()


def test_an_unauthenticated_client_cannot_use_up_another_addresses_share(plain_server, caplog):
    """The client at 127.0.0.1 fills its share of member data, transactional ids and offset growth, and
    is refused past each; the client at 127.0.0.2 (User:ANONYMOUS too) still has a whole share of each.
    On the old code the second client's first JoinGroup, InitProducerId and OffsetCommit were refused."""
    caplog.set_level(logging.INFO, logger="klog.serve")
    port = plain_server.port
    accepted = SHARE // (SUBSCRIPTION + 100)
    refused_join = [E.none] * accepted + [E.coordinator_not_available]
    assert asyncio.run(_joins_until_refused(port, A, "a")) == refused_join
    assert asyncio.run(_joins_until_refused(port, B, "b")) == refused_join  # its own share, as large

    tids = [f"a-{i}" for i in range(TXN_IDS)] + ["a-more"]
    assert asyncio.run(_new_transactional_ids(port, A, tids)) == [E.none] * TXN_IDS + [E.coordinator_not_available]
    assert asyncio.run(_new_transactional_ids(port, B, ["b-0", "b-1"])) == [E.none, E.none]

    stored = OFFSET_BYTES // (len("ac-N") + 1 + len(METADATA) + 150)
    refused_commit = [{E.none}] * stored + [{E.coordinator_not_available}]
    assert asyncio.run(_commits_until_refused(port, A, "ac")) == refused_commit
    assert asyncio.run(_commits_until_refused(port, B, "bc")) == refused_commit

    machine = plain_server.coordinator.machine
    assert set(machine.principal_bytes) == {f"User:ANONYMOUS at {A}", f"User:ANONYMOUS at {B}"}
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"User:ANONYMOUS at {A}'s members hold" in line for line in lines), lines[-5:]
    assert any(f"User:ANONYMOUS at {A} created {TXN_IDS} transactional ids" in line for line in lines)


def test_the_client_share_setting_sizes_every_share(store):
    """--client-share 0.5: each client may hold half of each pool; 0.0001 (four transactional ids of
    the pool's 40,000) refuses a client's fifth new id."""
    from klog.server import Server

    with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000,
                limits=ServeLimits(client_share=0.5)) as server:
        machine = server.coordinator.machine
        assert (machine.principal_metadata_max_bytes, machine.principal_members_max, machine.principal_groups_max) \
            == (64 << 20, 40_000, 40_000)
        assert server.coordinator.offset_growth.max_bytes == 512 << 20
        assert server.transactions.principal_ids_max == 20_000
    with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000,
                limits=ServeLimits(client_share=0.0001)) as server:
        codes = asyncio.run(_new_transactional_ids(server.port, A, [f"x-{i}" for i in range(5)]))
        assert codes == [E.none] * 4 + [E.coordinator_not_available]


@pytest.mark.parametrize("value", ["1.5", "0", "-0.25", "nan", "a quarter"])
def test_a_bad_client_share_exits_2_with_one_line(klog_proc, value):
    done = klog_proc("serve", "-l", "127.0.0.1:0", "--client-share", value, timeout=30)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("klog: error: --client-share") and value in lines[0]


def test_the_share_key_is_the_principal_once_authenticated_else_the_address():
    """PLAINTEXT and SSL without a client certificate: the address. SASL (whatever the user's name) and
    a TLS client certificate: the principal, from any address."""
    import concurrent.futures

    from klog.server.context import BrokerInfo, RequestContext
    from klog.server.listeners import Listener
    from klog.server.security import ConnectionSecurity

    def key(protocol: str, principal: str, host: str) -> str:
        conn = ConnectionSecurity(Listener(protocol, "127.0.0.1", 0), host, principal=principal)
        return RequestContext(store=None, broker=BrokerInfo(0, "h", 1, "c"), client_id="x", client_host=host,
                              api_version=0, executor=concurrent.futures.Executor(), log=logging.getLogger(),
                              principal=principal, security=conn).share_key

    assert key("PLAINTEXT", "User:ANONYMOUS", A) == f"User:ANONYMOUS at {A}"
    assert key("SSL", "User:ANONYMOUS", "10.0.0.5") == "User:ANONYMOUS at 10.0.0.5"
    assert key("SSL", "User:CN=app", A) == key("SSL", "User:CN=app", B) == "User:CN=app"
    assert key("SASL_PLAINTEXT", "User:alice", A) == key("SASL_PLAINTEXT", "User:alice", B) == "User:alice"
    assert key("SASL_SSL", "User:ANONYMOUS", A) == "User:ANONYMOUS"  # a SASL user named ANONYMOUS is a user


# -- the pools bound the whole server: clients from ever new addresses do not each bring a share ----------
def test_every_address_together_creates_at_most_the_pool_of_transactional_ids(plain_server, caplog):
    """Where each address has a share, a client with many addresses (an IPv6 prefix) would otherwise
    bring a share per address: the pool (40,000 ids by default) bounds every client's together."""
    caplog.set_level(logging.INFO, logger="klog.serve")
    plain_server.transactions.ids_max = TXN_IDS + 2
    port = plain_server.port
    assert asyncio.run(_new_transactional_ids(port, A, [f"a-{i}" for i in range(TXN_IDS)])) == [E.none] * TXN_IDS
    assert asyncio.run(_new_transactional_ids(port, B, ["b-0", "b-1", "b-2"])) == [
        E.none, E.none, E.coordinator_not_available]
    assert any(f"every client created {TXN_IDS + 2} transactional ids" in r.getMessage() for r in caplog.records)
    assert asyncio.run(_new_transactional_ids(port, B, ["b-0"])) == [E.none]  # an id it has: still works


def test_every_principal_together_holds_at_most_the_pools_of_members_and_groups():
    from klog.server.coordinator import GroupStateMachine
    from tests.server.test_group_coordinator import Clock
    from tests.server.test_serve_principal_budgets import _join

    machine = GroupStateMachine(Clock(), initial_rebalance_delay_ms=0, members_max=5, groups_max=100)
    codes = [_join(machine, f"g{i}", f"User:ANONYMOUS at 10.0.0.{i}").one.error for i in range(7)]
    assert codes == [E.none] * 5 + [E.coordinator_not_available] * 2, codes
    assert machine.members == 5 and sum(machine.principal_members.values()) == 5

    machine = GroupStateMachine(Clock(), initial_rebalance_delay_ms=0, groups_max=3)
    for i in range(5):
        reply = _join(machine, f"g{i}", f"User:ANONYMOUS at 10.0.0.{i}")
        if i < 3:
            assert reply.one.error == E.none
            machine.leave(f"g{i}", [(reply.one.member_id, None)])
        else:
            assert reply.one.error == E.coordinator_not_available and "at most 3" in reply.one.reason
    assert sorted(machine.groups) == ["g0", "g1", "g2"]
    assert machine.delete("g0") == E.none  # room again
    assert _join(machine, "g9", "User:ANONYMOUS at 10.0.0.9").one.error == E.none


def test_every_principal_together_adds_at_most_the_pool_of_committed_offsets():
    from klog.server.group_runtime import OffsetGrowth

    now = [0.0]
    growth = OffsetGrowth(10_000, lambda group: {}, period_ms=60_000, clock=lambda: now[0], pool_bytes=20_000)
    offsets = {("t", p): (0, "m" * 900) for p in range(4)}  # ~4.3 KB each time, in a new group
    got = [growth.admit(f"User:ANONYMOUS at 10.0.0.{i}", f"g{i}", offsets) for i in range(6)]
    assert got[:4] == [None] * 4 and all("every client's commits added" in r for r in got[4:]), got
    now[0] += 30.0  # half the period: half the pool back
    assert growth.admit("User:ANONYMOUS at 10.0.0.9", "g9", offsets) is None
    now[0] += 600.0  # all of it back: nobody is remembered
    assert growth.admit("User:ANONYMOUS at 10.0.0.8", "g8", offsets) is None
    assert set(growth.added) == {"User:ANONYMOUS at 10.0.0.8", "*"}

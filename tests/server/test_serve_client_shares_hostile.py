"""The per-client shares under attack (docs/serve-limits.md, "Each client's share"): who a client is
(IPv6, a new port, authenticated beside unauthenticated on one server), what a client gets once
every address together has filled a pool, and that shares given back are forgotten, so a flood of
addresses does not grow the server."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from kio.schema.errors import ErrorCode as E

from tests.server import group_client as gc
from tests.server.test_serve_client_shares import _second_loopback_address
from tests.server.test_serve_principal_budgets import _init_producer, _join, _sasl_conn

A = "127.0.0.1"


async def _conn(host: str, port: int, source: str | None = None) -> gc.Conn:
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None)
    return gc.Conn(reader, writer)


async def _init_ids(host: str, port: int, tids: list[str], source: str | None = None) -> list[int]:
    """InitProducerId of each of `tids` on one new connection (a new client port each call)."""
    conn = await _conn(host, port, source)
    try:
        return [int((await conn.call(_init_producer(tid), timeout=10)).error_code) for tid in tids]
    finally:
        conn.close()


def _ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError as e:
            pytest.skip(f"cannot bind ::1: {e}")


def test_an_ipv6_client_has_one_share_over_any_number_of_connections(store):
    """A client at ::1 is 'User:ANONYMOUS at ::1'; reconnecting (a new port each time) it is the
    same client, so its share does not grow with its connections."""
    from klog.server import Server

    _ipv6_loopback()
    with Server(store=store, listen=("::1", 0), idle_ms=30_000) as server:
        server.transactions.principal_ids_max = 2
        port = server.port
        assert asyncio.run(_init_ids("::1", port, ["a"])) == [E.none]
        assert asyncio.run(_init_ids("::1", port, ["b"])) == [E.none]
        assert asyncio.run(_init_ids("::1", port, ["c"])) == [E.coordinator_not_available]  # a third connection
        assert set(server.transactions.created) == {"User:ANONYMOUS at ::1"}


@pytest.fixture
def mixed_server(data_dir):
    """One server with a PLAINTEXT and a SASL_PLAINTEXT listener, both on 127.0.0.1."""
    import klog
    from klog.meta.credentials import CredentialsMeta
    from klog.server import Server
    from klog.server.listeners import Listener, SecurityConfig

    store = klog.open(data_dir)
    CredentialsMeta(store.meta).add("alice", "SCRAM-SHA-256", "pw")
    plain, sasl = Listener("PLAINTEXT", A, 0), Listener("SASL_PLAINTEXT", A, 0)
    try:
        with Server(store=store, security=SecurityConfig([plain, sasl], auth_failure_delay_ms=100),
                    listen=(A, 0), idle_ms=30_000) as server:
            server.transactions.principal_ids_max = 2
            yield server, server.ports[plain], server.ports[sasl]
    finally:
        store.close()


def test_authenticated_and_unauthenticated_clients_from_one_address_have_a_share_each(mixed_server):
    """alice (SASL) and an unauthenticated client, both from 127.0.0.1: alice's share is hers from
    any address, the other client's is its address's; neither uses up the other's."""
    server, plain_port, sasl_port = mixed_server

    async def alice(tids: list[str]) -> list[int]:
        conn = await _sasl_conn(sasl_port, "alice")
        try:
            return [int((await conn.call(_init_producer(tid), timeout=10)).error_code) for tid in tids]
        finally:
            conn.close()

    assert asyncio.run(alice(["a-0", "a-1", "a-2"])) == [E.none, E.none, E.coordinator_not_available]
    assert asyncio.run(_init_ids(A, plain_port, ["p-0", "p-1", "p-2"])) == [
        E.none, E.none, E.coordinator_not_available]
    assert set(server.transactions.created) == {"User:alice", f"User:ANONYMOUS at {A}"}


# -- the pool of every client together ------------------------------------------------------------------
ADDRESSES = [f"127.0.0.{i}" for i in range(1, 7)]


def test_past_the_pool_a_new_client_is_refused_cheaply_and_the_others_keep_working(store, caplog):
    """Six addresses each create one transactional id and fill the pool (6). The seventh id is
    refused COORDINATOR_NOT_AVAILABLE with one log line, and ids the clients have keep working. The
    check for ids gone reads every address's ids in one pass, and a full pool is checked at most
    every POOL_CHECK_S: on the old code each refused InitProducerId read the store once per address
    (0.2 s of the server's time per request with 5,000 addresses, 1 ms now)."""
    from klog.meta.transactions import TransactionsMeta
    from klog.server import Server

    _second_loopback_address()
    caplog.set_level(logging.INFO, logger="klog.serve")
    with Server(store=store, listen=(A, 0), idle_ms=30_000) as server:
        service = server.transactions
        service.ids_max = len(ADDRESSES)
        for i, source in enumerate(ADDRESSES):
            assert asyncio.run(_init_ids(A, server.port, [f"id-{i}"], source)) == [E.none]
        reads: list[int] = []
        read = service._gone
        service._gone = lambda tids: reads.append(len(tids)) or read(tids)

        assert asyncio.run(_init_ids(A, server.port, ["new-0", "new-1", "id-0"], ADDRESSES[0])) == [
            E.coordinator_not_available, E.coordinator_not_available, E.none]
        assert reads == [len(ADDRESSES)]  # one pass over every address's ids, then none until POOL_CHECK_S
        lines = [r.getMessage() for r in caplog.records if "every client created" in r.getMessage()]
        assert len(lines) == 2 and "at most 6" in lines[0]

        TransactionsMeta(store.meta).apply("id-3", lambda meta, txn: None)  # gone (as if expired)
        service._pool_checked -= 3600  # the check interval passed
        assert asyncio.run(_init_ids(A, server.port, ["new-0"], ADDRESSES[0])) == [E.none]
        assert f"User:ANONYMOUS at {ADDRESSES[3]}" not in service.created  # nothing left: forgotten
        assert service.created_total == sum(map(len, service.created.values())) == len(ADDRESSES)


def test_shares_given_back_are_forgotten_after_a_flood_of_addresses():
    """2,000 addresses each join a group and leave, and the groups are deleted: the state machine
    keeps no entry for any of them (its tables do not grow with the addresses ever seen)."""
    from klog.server.coordinator import GroupStateMachine
    from tests.server.test_group_coordinator import Clock

    machine = GroupStateMachine(Clock(), initial_rebalance_delay_ms=0)
    for i in range(2000):
        reply = _join(machine, f"g{i}", f"User:ANONYMOUS at 2001:db8::{i:x}")
        assert reply.one.error == E.none
        machine.leave(f"g{i}", [(reply.one.member_id, None)])
        assert machine.delete(f"g{i}") == E.none
    assert (machine.principal_bytes, machine.principal_members, machine.principal_groups) == ({}, {}, {})
    assert machine.members == 0 and machine.metadata_bytes == 0 and not machine.groups


def test_the_same_new_transactional_id_admitted_twice_at_once_counts_once(kafka_server):
    """Two InitProducerIds of one new id from one client, each waiting on the store at once: both
    admitted, the id counted once in the pool (a count that only grew would refuse an empty pool)."""
    import types

    service = kafka_server.transactions

    async def run_blocking(fn, *args):
        await asyncio.sleep(0)  # the other request runs meanwhile, as in the thread pool
        return fn(*args)

    ctx = types.SimpleNamespace(share_key=f"User:ANONYMOUS at {A}", run_blocking=run_blocking)

    async def both() -> list:
        return await asyncio.gather(service.admit(ctx, "same"), service.admit(ctx, "same"))

    assert asyncio.run(both()) == [None, None]
    assert service.created == {f"User:ANONYMOUS at {A}": {"same"}} and service.created_total == 1


# -- unauthenticated clients together, beside authenticated ones ----------------------------------------
async def _plain_joins_and_ids(port: int, source: str, count: int) -> tuple[list[int], list[int]]:
    """From `source`, unauthenticated: JoinGroup of `count` new groups and InitProducerId of `count`
    new transactional ids, the error codes of each."""
    conn = await _conn(A, port, source)
    try:
        joins = [int((await conn.call(gc.join(f"{source}-g{i}", session_ms=60_000, version=3), timeout=10)).error_code)
                 for i in range(count)]
        ids = [int((await conn.call(_init_producer(f"{source}-t{i}"), timeout=10)).error_code) for i in range(count)]
        return joins, ids
    finally:
        conn.close()


def test_unauthenticated_addresses_together_leave_an_authenticated_principal_its_share(mixed_server, caplog):
    """A PLAINTEXT and a SASL listener; pools of 8 members and 8 transactional ids, a share of 2. Six
    unauthenticated addresses (127.0.0.1..6) each join 2 new groups and create 2 ids: together they
    get the pool less one share (3 addresses' worth, 6), the others are refused with one log line each
    naming every unauthenticated client; alice (SASL) then still joins a group and gets her 2 ids. On
    the old code the first four addresses filled both pools and alice was refused."""
    server, plain_port, sasl_port = mixed_server
    _second_loopback_address()
    caplog.set_level(logging.INFO, logger="klog.serve")
    server.transactions.ids_max = 8  # principal_ids_max 2 (mixed_server)
    machine = server.coordinator.machine
    machine.members_max, machine.principal_members_max = 8, 2
    machine.initial_rebalance_delay_ms = 0
    got = [asyncio.run(_plain_joins_and_ids(plain_port, source, 2)) for source in ADDRESSES]
    ok, refused = [E.none] * 2, [E.coordinator_not_available] * 2
    assert got == [(ok, ok)] * 3 + [(refused, refused)] * 3, got
    lines = [r.getMessage() for r in caplog.records if "every unauthenticated client together" in r.getMessage()]
    assert any("holds 6 members and member ids handed out, at most 6" in line for line in lines), lines
    assert any("holds 6 transactional ids, at most 6" in line for line in lines), lines

    async def alice() -> tuple[int, list[int]]:
        conn = await _sasl_conn(sasl_port, "alice")
        try:
            joined = int((await conn.call(gc.join("alice-g", session_ms=60_000, version=3), timeout=10)).error_code)
            return joined, [int((await conn.call(_init_producer(t), timeout=10)).error_code) for t in ("a0", "a1")]
        finally:
            conn.close()

    assert asyncio.run(alice()) == (E.none, [E.none, E.none])
    held = server.address_shares.held
    assert (held["members and member ids handed out"], held["groups held"], held["transactional ids"]) == (6, 6, 6)


def test_on_a_server_without_authentication_addresses_may_fill_the_whole_pool(store):
    """Only PLAINTEXT: nobody to keep room for, so four addresses at the default quarter take the
    whole pool (8 ids, 2 each), as before."""
    from klog.server import Server

    _second_loopback_address()
    with Server(store=store, listen=(A, 0), idle_ms=30_000) as server:
        assert not server.address_shares.bounded
        server.transactions.ids_max, server.transactions.principal_ids_max = 8, 2
        got = [asyncio.run(_init_ids(A, server.port, [f"{source}-x", f"{source}-y"], source))
               for source in ADDRESSES[:5]]
        assert got == [[E.none, E.none]] * 4 + [[E.coordinator_not_available] * 2]


def test_every_pool_bounds_unauthenticated_clients_together_where_some_authenticate():
    """The state machine's member data, members and groups, and the growth of committed offsets: in
    each, addresses together stop at the pool less one share (and a member moving between addresses
    or an assignment moving between them counts once); a principal still takes its share; with the
    bound off (no listener authenticates), the pool alone bounds the addresses."""
    from klog.server.coordinator import GroupStateMachine
    from klog.server.group_runtime import OffsetGrowth
    from klog.server.limits import AddressShares
    from tests.server.test_group_coordinator import Clock

    def machine(bounded: bool, **bounds: int) -> GroupStateMachine:
        return GroupStateMachine(Clock(), initial_rebalance_delay_ms=0, addresses=AddressShares(bounded), **bounds)

    def addresses_then_alice(m: GroupStateMachine, **join: object) -> list:
        codes = [_join(m, f"g{i}", f"User:ANONYMOUS at 10.0.0.{i}", **join).one.error for i in range(6)]
        return codes + [_join(m, "alice-g", "User:alice", **join).one.error]

    ok, no = E.none, E.coordinator_not_available
    data = {"metadata_max_bytes": 4000, "principal_metadata_max_bytes": 1000}  # 3 joins of ~900 bytes
    big = {"protocols": (("range", b"x" * 850),)}
    assert addresses_then_alice(machine(True, **data), **big) == [ok] * 3 + [no] * 3 + [ok]
    assert addresses_then_alice(machine(False, **data), **big) == [ok] * 4 + [no] * 3
    members = {"members_max": 4, "principal_members_max": 1}
    assert addresses_then_alice(machine(True, **members)) == [ok] * 3 + [no] * 3 + [ok]
    assert addresses_then_alice(machine(False, **members)) == [ok] * 4 + [no] * 3
    groups = {"groups_max": 4, "principal_groups_max": 1}
    assert addresses_then_alice(machine(True, **groups)) == [ok] * 3 + [no] * 3 + [ok]
    assert addresses_then_alice(machine(False, **groups)) == [ok] * 4 + [no] * 3

    # a member id handed out to one address, joined from another: it moves, the together is unchanged
    m = machine(True, members_max=4, principal_members_max=1)
    handed = [_join(m, f"g{i}", f"User:ANONYMOUS at 10.0.0.{i}", require=True).one for i in range(3)]
    assert [h.error for h in handed] == [E.member_id_required] * 3
    moved = _join(m, "g0", "User:ANONYMOUS at 10.0.0.9", member_id=handed[0].member_id)
    assert moved.one.error == ok and m.addresses.held["members and member ids handed out"] == 3
    m.leave("g0", [(handed[0].member_id, None)])
    for i in (1, 2):
        m.leave(f"g{i}", [(handed[i].member_id, None)])
        m.delete(f"g{i}")
    m.delete("g0")
    assert m.addresses.held == {}  # everything given back

    offsets = {("t", p): (0, "m" * 900) for p in range(4)}  # ~4.3 KB each time, in a new group
    for bounded, expected in ((True, [None] * 3 + ["every unauthenticated client together"]),
                              (False, [None] * 4)):  # (then the pool of 20,000 is full: alice refused)
        growth = OffsetGrowth(5_000, lambda group: {}, period_ms=60_000, clock=lambda: 0.0, pool_bytes=20_000,
                              addresses=AddressShares(bounded))
        got = [growth.admit(f"User:ANONYMOUS at 10.0.0.{i}", f"g{i}", offsets) for i in range(4)]
        assert [r if r is None else r[:len(expected[3] or "")] for r in got] == expected, got
        assert (growth.admit("User:alice", "ga", offsets) is None) == bounded


def test_addresses_together_keep_at_least_one_share_when_a_client_may_take_the_whole_pool() -> None:
    """--client-share 1 on a server with an authenticating listener: the pool less one share would be
    nothing, refusing every unauthenticated client; they keep one share (the whole pool) instead."""
    from klog.server.limits import AddressShares
    shares = AddressShares(bounded=True)
    key = "User:ANONYMOUS at 127.0.0.1"
    assert shares.refusal("groups", key, 1, pool_max=8, share_max=8) is None
    shares.add("groups", key, 8)
    assert "together" in (shares.refusal("groups", key, 1, pool_max=8, share_max=8) or "")
    # the usual quarter: the pool less one share
    quarter = AddressShares(bounded=True)
    quarter.add("groups", key, 6)
    assert "at most 6" in (quarter.refusal("groups", key, 1, pool_max=8, share_max=2) or "")

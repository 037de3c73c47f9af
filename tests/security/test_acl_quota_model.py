"""The pure authorization and quota logic, against Kafka's documented rules: deny wins, implied
Describe, prefixed and wildcard patterns, super users, allow-everyone only on an empty ACL table;
quota precedence and the throttle time that brings the client's credit back to zero."""

from __future__ import annotations

import pytest

from klog.security.acl import (
    AclBinding,
    AclError,
    AclFilter,
    AuthorizerConfig,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
    parse_operation,
)
from klog.security.quota import (
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaManager,
    TokenBucket,
    entity,
    resolve,
    throttle_ms,
)

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(name, op, perm=ALLOW, principal="User:alice", host="*", rtype=T, pattern=LIT):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def can(acls, op, name, principal="User:alice", host="10.0.0.1", rtype=T, config=AuthorizerConfig()):
    return authorize(acls, config, principal, host, op, rtype, name)


def test_empty_table_is_open_until_an_acl_exists():
    assert can([], Operation.WRITE, "t")
    acls = [acl("other", Operation.READ)]
    assert not can(acls, Operation.WRITE, "t")  # any ACL at all closes resources without ACLs
    assert can(acls, Operation.WRITE, "t", config=AuthorizerConfig(allow_everyone_if_no_acl_found=True))
    assert not can([], Operation.WRITE, "t", config=AuthorizerConfig(allow_everyone_if_no_acl_found=False))


def test_literal_prefixed_wildcard_and_principal_host():
    acls = [acl("orders", Operation.READ), acl("logs-", Operation.WRITE, pattern=PRE),
            acl("*", Operation.DESCRIBE, principal="User:*"), acl("h", Operation.READ, host="10.0.0.9")]
    assert can(acls, Operation.READ, "orders")
    assert not can(acls, Operation.READ, "orders2")
    assert can(acls, Operation.WRITE, "logs-app") and not can(acls, Operation.WRITE, "log")
    assert can(acls, Operation.DESCRIBE, "anything", principal="User:bob")
    assert not can(acls, Operation.READ, "orders", principal="User:bob")
    assert not can(acls, Operation.READ, "h") and can(acls, Operation.READ, "h", host="10.0.0.9")
    assert not can(acls, Operation.READ, "orders", rtype=G)  # resource types are separate


def test_deny_wins_and_implied_describe():
    acls = [acl("t", Operation.ALL), acl("t", Operation.WRITE, DENY)]
    assert can(acls, Operation.READ, "t") and not can(acls, Operation.WRITE, "t")
    assert can([acl("t", Operation.WRITE)], Operation.DESCRIBE, "t")
    assert can([acl("t", Operation.ALTER_CONFIGS)], Operation.DESCRIBE_CONFIGS, "t")
    assert not can([acl("t", Operation.DESCRIBE)], Operation.READ, "t")
    # a DENY of Read does not deny Describe, a DENY of All denies everything
    assert can([acl("t", Operation.READ), acl("t", Operation.READ, DENY)], Operation.DESCRIBE, "t")  # as in Kafka
    assert not can([acl("t", Operation.ALL), acl("t", Operation.ALL, DENY, principal="User:*")],
                   Operation.DESCRIBE, "t")


def test_super_user_passes_everything():
    config = AuthorizerConfig(super_users=frozenset({"User:admin"}))
    acls = [acl("t", Operation.ALL, DENY, principal="User:*")]
    assert can(acls, Operation.WRITE, "t", principal="User:admin", config=config)
    assert not can(acls, Operation.WRITE, "t", config=config)


@pytest.mark.parametrize("binding", [
    acl("t", Operation.IDEMPOTENT_WRITE),  # not a topic operation
    acl("g", Operation.WRITE, rtype=G),
    acl("*", Operation.READ, pattern=PRE),
    acl("t", Operation.READ, principal="alice"),
    acl("", Operation.READ),
    acl("t", Operation.READ, pattern=PatternType.MATCH),
])
def test_invalid_bindings(binding):
    with pytest.raises(AclError):
        binding.validate()


def test_filters():
    acls = [acl("orders", Operation.READ), acl("ord", Operation.WRITE, pattern=PRE), acl("*", Operation.READ),
            acl("other", Operation.READ, principal="User:bob")]
    match = AclFilter(T, "orders", PatternType.MATCH)
    assert [b.resource_name for b in acls if match.matches(b)] == ["orders", "ord", "*"]
    assert [b.resource_name for b in acls if AclFilter(principal="User:bob").matches(b)] == ["other"]
    assert [b.resource_name for b in acls if AclFilter(pattern_type=PRE).matches(b)] == ["ord"]
    assert [b for b in acls if AclFilter(T, "ord").matches(b)] == [acls[1]]


def test_parse_operation():
    assert parse_operation("Read") is Operation.READ
    assert parse_operation("describe-configs") is Operation.DESCRIBE_CONFIGS
    assert parse_operation("IdempotentWrite") is Operation.IDEMPOTENT_WRITE
    with pytest.raises(AclError, match="unknown operation 'Fly'"):
        parse_operation("Fly")


def test_quota_precedence():
    quotas = {entity(client_id=None): {PRODUCER_BYTE_RATE: 1}, entity(None): {PRODUCER_BYTE_RATE: 2},
              entity("alice"): {PRODUCER_BYTE_RATE: 3}, entity("alice", "app"): {PRODUCER_BYTE_RATE: 4}}
    assert resolve(quotas, "alice", "app", PRODUCER_BYTE_RATE)[0] == 4
    assert resolve(quotas, "alice", "other", PRODUCER_BYTE_RATE)[0] == 3
    assert resolve(quotas, "bob", "app", PRODUCER_BYTE_RATE)[0] == 2
    del quotas[entity(None)]
    assert resolve(quotas, "bob", "app", PRODUCER_BYTE_RATE)[0] == 1
    assert resolve({}, "bob", "app", PRODUCER_BYTE_RATE) is None


def test_throttle_brings_the_credit_back_to_zero():
    bucket = TokenBucket(window_ms=1000, samples=11)  # holds 11 s of the quota
    now = 100_000.0
    bucket.record(30_000, 3000, now)  # 30 kB of a 33 kB burst at 3 kB/s
    assert throttle_ms(bucket, 3000, now) == 0
    bucket.record(30_000, 3000, now)  # 27 kB overdrawn: 9 s at 3 kB/s
    delay = throttle_ms(bucket, 3000, now)
    assert delay == 9000
    assert throttle_ms(bucket, 3000, now + delay) == 0
    assert bucket.credit_at(3000, now + 60_000) == 33_000  # refilled to the burst, no further


def test_manager_simulated_producer_held_to_quota():
    """A producer that sends whenever it is not throttled averages its quota (simulated clock)."""
    clock = [0.0]
    manager = QuotaManager(lambda: {entity("alice"): {PRODUCER_BYTE_RATE: 100_000}}, clock_ms=lambda: clock[0])
    sent = 0
    for _ in range(10_000):  # bounded
        delay = manager.record(PRODUCER_BYTE_RATE, "alice", "c1", 10_000)
        sent += 10_000
        clock[0] += 5 + delay
        if clock[0] > 60_000:
            break
    assert sent / (clock[0] / 1000) == pytest.approx(100_000, rel=0.2)
    assert manager.record(PRODUCER_BYTE_RATE, "bob", "c1", 10**9) == 0  # no quota for bob


def test_request_percentage():
    clock = [0.0]
    manager = QuotaManager(lambda: {entity(client_id=None): {REQUEST_PERCENTAGE: 10}}, clock_ms=lambda: clock[0])
    assert manager.record(REQUEST_PERCENTAGE, "u", "c", 500) == 0  # 500 ms over an assumed 10 s: 5 %
    assert manager.record(REQUEST_PERCENTAGE, "u", "c", 1500) > 0  # 2 s of work in 10 s: 20 %

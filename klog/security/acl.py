"""Kafka's ACL model and its authorization decision (as kafka.security.authorizer.AclAuthorizer).

An ACL binding: a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal, host,
operation, ALLOW/DENY). A request is allowed when:
  1. the principal is a super user; or
  2. no ACL applies to the resource at all and allow.everyone.if.no.acl.found holds; or
  3. no matching DENY (deny wins) and a matching ALLOW for the operation or one implying it
     (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies all).
"Matching" means: the pattern names the resource (literal name, literal '*', or a prefix of it), the
principal is the caller or 'User:*', the host is the caller's address or '*'.

The enum values are Kafka's wire codes (AclOperation, ResourceType, PatternType, AclPermissionType).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from klog.errors import AclError

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name, as Kafka names it

# operation -> the operations whose ALLOW also allows it
IMPLIED_BY = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}

# Which operations make sense on which resource (Kafka's ResourceType docs); others are refused on add.
VALID_OPERATIONS = {
    ResourceType.TOPIC: {Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                         Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS},
    ResourceType.GROUP: {Operation.READ, Operation.DESCRIBE, Operation.DELETE},
    ResourceType.CLUSTER: {Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE},
    ResourceType.TRANSACTIONAL_ID: {Operation.WRITE, Operation.DESCRIBE},
}


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        if self.resource_type not in VALID_OPERATIONS:
            raise AclError(f"resource type {self.resource_type.name} cannot have ACLs")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"pattern type {self.pattern_type.name} is for filters; use LITERAL or PREFIXED")
        if not self.resource_name:
            raise AclError("resource name must not be empty")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise AclError("a PREFIXED pattern cannot be '*' (use LITERAL '*')")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise AclError(f"principal {self.principal!r} must be TYPE:NAME (User:alice)")
        if not self.host:
            raise AclError("host must not be empty (use '*')")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError("permission must be ALLOW or DENY")
        if self.operation != Operation.ALL and self.operation not in VALID_OPERATIONS[self.resource_type]:
            raise AclError(f"operation {self.operation.name} does not apply to a {self.resource_type.name}")

    def to_json(self) -> dict:
        return {"resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permission": self.permission.name}

    @classmethod
    def from_json(cls, doc: dict) -> AclBinding:
        return cls(ResourceType[doc["resource_type"]], doc["resource_name"], PatternType[doc["pattern_type"]],
                   doc["principal"], doc["host"], Operation[doc["operation"]], Permission[doc["permission"]])


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls/DeleteAcls's filter: None or ANY matches everything in that field. MATCH as
    pattern type selects every pattern that applies to `resource_name` (literal, '*', prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not pattern_applies(b, b.resource_type, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == Operation.ANY or b.operation == self.operation)
                and (self.permission == Permission.ANY or b.permission == self.permission))


def pattern_applies(b: AclBinding, resource_type: ResourceType, name: str) -> bool:
    if b.resource_type != resource_type:
        return False
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name in (name, WILDCARD)
    return b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name)


def _entry_applies(b: AclBinding, principal: str, host: str, operation: Operation) -> bool:
    if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
        return False
    if b.operation in (Operation.ALL, operation):
        return True
    return b.permission == Permission.ALLOW and b.operation in IMPLIED_BY.get(operation, ())


@dataclass(frozen=True)
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    # None: true while no ACL exists at all (an unconfigured store stays open), false once any does
    allow_everyone_if_no_acl_found: bool | None = None


def authorize(acls: Iterable[AclBinding], config: AuthorizerConfig, principal: str, host: str,
              operation: Operation, resource_type: ResourceType, name: str) -> bool:
    """Kafka's decision for one (principal, host) doing `operation` on one resource."""
    if principal in config.super_users:
        return True
    acls = list(acls)
    relevant = [b for b in acls if pattern_applies(b, resource_type, name)]
    if not relevant:
        allow = config.allow_everyone_if_no_acl_found
        return (not acls) if allow is None else allow
    applying = [b for b in relevant if _entry_applies(b, principal, host, operation)]
    if any(b.permission == Permission.DENY for b in applying):
        return False
    return any(b.permission == Permission.ALLOW for b in applying)


def parse_operation(text: str) -> Operation:
    """'Read', 'describe-configs', 'IdempotentWrite', 'ALL' -> Operation (kafka-acls.sh spellings)."""
    key = text.replace("-", "").replace("_", "").upper()
    for op in Operation:
        if op.name.replace("_", "") == key and op not in (Operation.UNKNOWN, Operation.ANY):
            return op
    valid = ", ".join(o.name for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY))
    raise AclError(f"unknown operation {text!r} (one of {valid})")

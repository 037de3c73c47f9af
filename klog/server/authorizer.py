"""ACL authorization for `klog serve`'s handlers: the store's ACLs and authorizer settings, cached and
reloaded at most every ACL_RELOAD_MS, decided by klog.security.acl (Kafka's AclAuthorizer rules)."""

from __future__ import annotations

import time
from typing import Any

from klog.security.acl import AclBinding, AuthorizerConfig, Operation, ResourceType, authorize

ACL_RELOAD_MS = 1000  # ACLs, credentials and quotas changed by another process apply within this
ANSWERS_MAX = 4096  # decisions remembered between reloads (principals, hosts and names come from clients: bounded)


class Authorizer:
    """The store's ACLs and settings, cached and reloaded at most every ACL_RELOAD_MS."""

    def __init__(self, store: Any, reload_ms: int = ACL_RELOAD_MS) -> None:
        from klog.meta.acls import AclsMeta

        self.meta = AclsMeta(store.meta)
        self.reload_ms = reload_ms
        self._acls: list[AclBinding] = []
        self._config = AuthorizerConfig()
        self._loaded = float("-inf")
        # the decisions made with these ACLs: every request asks again (a consumer's Fetch, a
        # Produce), and the answer only changes with the ACLs, which a reload replaces with it
        self._answers: dict[tuple, bool] = {}

    def invalidate(self) -> None:
        self._loaded = float("-inf")

    @property
    def reload_due(self) -> bool:
        """Whether the next check reads the ACLs again (a read the event loop leaves to a thread)."""
        return time.monotonic() * 1000 - self._loaded >= self.reload_ms

    def _fresh(self) -> None:
        now = time.monotonic() * 1000
        if now - self._loaded >= self.reload_ms:
            acls, config = self.meta.list(), self.meta.config()
            # (the decisions last: a thread that took the old ones stores its answer there, unused)
            self._acls, self._config, self._answers = acls, config, {}
            self._loaded = now

    def allows(self, principal: str, host: str, operation: Operation | str, resource_type: ResourceType | str,
               name: str) -> bool:
        self._fresh()
        answers = self._answers  # (before the ACLs: see _fresh)
        key = (principal, host, operation, resource_type, name)
        found = answers.get(key)
        if found is None:
            op = operation if isinstance(operation, Operation) else Operation[operation.upper()]
            rt = resource_type if isinstance(resource_type, ResourceType) else ResourceType[resource_type.upper()]
            found = authorize(self._acls, self._config, principal, host, op, rt, name)
            if len(answers) >= ANSWERS_MAX:  # (read at call time: tests lower it)
                answers.clear()
            answers[key] = found
        return found

    def allows_unlisted(self, principal: str) -> bool:
        """The decision on a resource no binding can name (a USER's CREATE_TOKENS: klog's ACLs have no
        such resource type): a super user, or allow.everyone.if.no.acl.found (by default: while no ACL
        exists at all), as Kafka decides a resource without bindings."""
        self._fresh()
        if principal in self._config.super_users:
            return True
        allow = self._config.allow_everyone_if_no_acl_found
        return not self._acls if allow is None else allow

    def allows_any(self, principal: str, host: str, operation: Operation | str,
                   resource_type: ResourceType | str) -> bool:
        """Some resource of the type allows it, as Kafka's Authorizer.authorizeByResourceType decides
        (KIP-679: an idempotent producer needs Write on some topic): the decision on a made-up name
        ("hardcode": super users, an open table, a wildcard ALLOW); else a DENY of the wildcard
        resource refuses, a wildcard ALLOW allows, and some other ALLOW (the operation or All, for the
        principal or User:*, from its host or *) allows unless a DENY of the same literal name, or of a
        prefix of it, dominates it."""
        self._fresh()
        op = operation if isinstance(operation, Operation) else Operation[operation.upper()]
        rt = resource_type if isinstance(resource_type, ResourceType) else ResourceType[resource_type.upper()]
        if authorize(self._acls, self._config, principal, host, op, rt, "hardcode"):
            return True
        from klog.security.acl import WILDCARD, PatternType, Permission

        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allow = False
        for b in self._acls:
            if (b.resource_type != rt or b.host not in (host, "*") or b.principal not in (principal, "User:*")
                    or b.operation not in (op, Operation.ALL) or b.pattern_type not in denied):
                continue
            if b.permission == Permission.DENY:
                if b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
                    return False
                denied[b.pattern_type].add(b.resource_name)
            elif b.permission == Permission.ALLOW:
                if b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
                    wildcard_allow = True
                else:
                    allowed[b.pattern_type].add(b.resource_name)
        if wildcard_allow:
            return True
        for kind, names in allowed.items():
            for name in names:
                if kind == PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                    continue
                if not any(name[:i] in denied[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                    return True
        return False

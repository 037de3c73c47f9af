"""What every request handler receives: the store, this broker, the caller, and a thread pool."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from klog.server.hop import in_thread

T = TypeVar("T")

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class BrokerInfo:
    """This node as clients must reach it (the advertised listener, not the bind address)."""

    node_id: int
    host: str
    port: int
    cluster_id: str
    rack: str | None = None


@dataclass
class RequestContext:
    """One request's view of the server. Handlers run on the event loop: anything that may block
    (store calls fsync, LMDB writes, file reads) goes through `run_blocking`."""

    store: Any  # klog.client.store.Store
    broker: BrokerInfo
    client_id: str | None
    client_host: str
    api_version: int
    executor: Executor
    log: logging.Logger
    coordinator: Any = None  # klog.server.group_runtime.GroupCoordinator, shared by every connection
    principal: str = ANONYMOUS
    correlation_id: int = 0
    server: Any = field(default=None, repr=False)  # klog.server.server.Server (shared state: producers, waiters)
    security: Any = None  # klog.server.security.ConnectionSecurity: listener, principal, SASL state

    @property
    def share_key(self) -> str:
        """Whose share of the server's pools this request draws on (ServeLimits.client_share: group member
        data, members, groups, transactional ids, offset growth): the principal of a client that
        authenticated (SASL, or a TLS client certificate); for one that did not, all such clients being
        User:ANONYMOUS, its address, as Kafka's max.connections.per.ip tells them apart. So one
        unauthenticated client cannot use up the share of every other."""
        if self.principal != ANONYMOUS or (self.security is not None and self.security.listener.sasl):
            return self.principal
        host = self.security.peer_host if self.security is not None else self.client_host
        return f"{ANONYMOUS} at {host}"

    def authorize(self, operation: Any, resource_type: Any, name: str) -> bool:
        """Whether the caller may do `operation` ('WRITE' or klog.security.acl.Operation) on the
        resource ('TOPIC', 'GROUP', 'CLUSTER', 'TRANSACTIONAL_ID'), by the store's ACLs (the
        Authorizer decides each question once per load of the ACLs)."""
        security = getattr(self.server, "security", None)
        if security is None:
            return True
        return security.authorizer.allows(self.principal, self.client_host, operation, resource_type, name)

    def authorize_unlisted(self) -> bool:
        """Kafka's decision on a resource of a type no klog ACL can name (CREATE_TOKENS on a USER):
        no binding applies, so super users, or anyone while no ACL found allows it."""
        security = getattr(self.server, "security", None)
        return security is None or security.authorizer.allows_unlisted(self.principal)

    def authorize_any(self, operation: Any, resource_type: Any) -> bool:
        """Whether the caller may do `operation` on some resource of the type (an idempotent producer
        needs Write on any topic, Kafka's KIP-679)."""
        security = getattr(self.server, "security", None)
        if security is None:
            return True
        return security.authorizer.allows_any(self.principal, self.client_host, operation, resource_type)

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in the server's thread pool, awaited."""
        return await in_thread(self.executor, functools.partial(fn, *args, **kwargs) if kwargs else fn, *args)

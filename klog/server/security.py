"""Security of `klog serve`: listeners with Kafka's security protocols, TLS (optionally mutual),
SASL (PLAIN, SCRAM-SHA-256/512), ACL authorization and client quotas.

The server calls four things from here:
  - `ServerSecurity.listeners()` and `.ssl_context(listener)` when it starts;
  - `.connection(listener, transport)` for each accepted connection: its `ConnectionSecurity`
    (principal from the TLS certificate, SASL state);
  - `.gate(conn, api_key)` before each request: on a SASL listener only ApiVersions and the SASL
    APIs pass until the client has authenticated (Kafka closes the connection otherwise);
  - `.throttle_ms(...)` after each response: the quota throttle to put in the response and to mute
    the connection for.
Handlers ask `ctx.authorize(operation, resource_type, name)` (klog.server.context).
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from klog.errors import UsageError
from klog.protocol.apis import API_VERSIONS, FETCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE
from klog.security.acl import AclBinding, AuthorizerConfig, Operation, ResourceType, authorize
from klog.security.quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, QuotaManager
from klog.security.scram import MECHANISMS as SCRAM_MECHANISMS

log = logging.getLogger("klog.serve")

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
AUTH_FAILURE_DELAY_MS_DEFAULT = 1000  # Kafka's connection.failed.authentication.delay.ms is 100
ACL_RELOAD_MS = 1000  # ACLs, credentials and quotas changed by another process apply within this
CLOSE_LINGER_MS = 300  # after a refusal, before the close: some clients (kafka-python) drop unread data on FIN
SASL_FRAME_BYTES_MAX = 512 * 1024  # Kafka's sasl.server.max.receive.size: no 100 MiB frames before login
SASL_AUTH_ATTEMPTS_MAX = 4  # SaslAuthenticate rounds per connection (SCRAM needs 2)
AUTH_THREADS = 1  # PBKDF2 for PLAIN and unknown SCRAM users: at most one core, whatever the guessing rate

PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


@dataclass(frozen=True)
class Listener:
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listener(text: str) -> Listener:
    """'SASL_SSL://0.0.0.0:9093', 'PLAINTEXT://:9092' or 'HOST:PORT' (PLAINTEXT) -> Listener."""
    from klog.server.server import parse_hostport

    protocol, sep, address = text.partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", text
    protocol = protocol.upper()
    if protocol not in PROTOCOLS:
        raise UsageError(f"--listen: unknown security protocol {protocol!r} in '{text}' "
                         f"(one of {', '.join(PROTOCOLS)})")
    try:
        host, port = parse_hostport(address)
    except ValueError as e:
        raise UsageError(f"--listen: {e}") from None
    return Listener(protocol, host, port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class SecurityConfig:
    """What `klog serve`'s security options say (the defaults: one PLAINTEXT loopback listener)."""

    listeners: list[Listener] = field(default_factory=list)
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None  # CAs trusted for client certificates
    ssl_client_auth: str = "none"  # none | requested | required (Kafka's ssl.client.auth)
    sasl_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    insecure: bool = False  # allow a non-loopback listener without TLS or SASL
    auth_failure_delay_ms: int = AUTH_FAILURE_DELAY_MS_DEFAULT
    quota_window_ms: int = 1000
    quota_samples: int = 11

    def validate(self) -> None:
        """Refuse a configuration that would serve less safely than it looks (exit 2)."""
        for lst in self.listeners:
            if lst.tls and not (self.ssl_certfile and self.ssl_keyfile):
                raise UsageError(f"listener {lst} needs --ssl-cert and --ssl-key")
            if not lst.tls and not lst.sasl and not is_loopback(lst.host) and not self.insecure:
                raise UsageError(f"listener {lst} is reachable from other machines without TLS or SASL; "
                                 "use SSL/SASL_SSL/SASL_PLAINTEXT, or --insecure to allow it")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise UsageError("--ssl-client-auth must be none, requested or required")
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise UsageError("--ssl-client-auth needs --ssl-ca (the CA that signs client certificates)")
        for m in self.sasl_mechanisms:
            if m not in SASL_MECHANISMS:
                raise UsageError(f"unknown SASL mechanism {m!r} (one of {', '.join(SASL_MECHANISMS)})")
        if len({(lst.host, lst.port) for lst in self.listeners if lst.port}) < len([x for x in self.listeners
                                                                                   if x.port]):
            raise UsageError("two listeners on the same address")

    def warnings(self) -> list[str]:
        return [f"listener {lst} accepts unauthenticated, unencrypted connections from other machines (--insecure)"
                for lst in self.listeners if not lst.tls and not lst.sasl and not is_loopback(lst.host)]


def principal_from_cert(cert: dict | None) -> str | None:
    """Kafka's default SSL principal: 'User:' + the subject's distinguished name (RFC 2253 order,
    most specific first: 'User:CN=alice,OU=eng,O=acme')."""
    if not cert or "subject" not in cert:
        return None
    names = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
             "stateOrProvinceName": "ST", "countryName": "C", "emailAddress": "EMAILADDRESS",
             "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID"}
    parts = []
    for rdn in reversed(cert["subject"]):
        parts.append("+".join(f"{names.get(k, k)}={_escape_dn(v)}" for k, v in rdn))
    return "User:" + ",".join(parts) if parts else None


def _escape_dn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out


@dataclass
class ConnectionSecurity:
    """One connection's identity: its listener, principal, and SASL progress."""

    listener: Listener
    peer_host: str
    principal: str = "User:ANONYMOUS"
    authenticated: bool = False
    mechanism: str | None = None
    sasl_state: Any = None  # a ScramServer while a SCRAM exchange runs
    sasl_rounds: int = 0
    close_after_response: bool = False


class Authorizer:
    """The store's ACLs and settings, cached and reloaded at most every ACL_RELOAD_MS."""

    def __init__(self, store: Any, reload_ms: int = ACL_RELOAD_MS) -> None:
        from klog.meta.acls import AclsMeta

        self.meta = AclsMeta(store.meta)
        self.reload_ms = reload_ms
        self._acls: list[AclBinding] = []
        self._config = AuthorizerConfig()
        self._loaded = float("-inf")

    def invalidate(self) -> None:
        self._loaded = float("-inf")

    def _fresh(self) -> None:
        now = time.monotonic() * 1000
        if now - self._loaded >= self.reload_ms:
            self._acls, self._config = self.meta.list(), self.meta.config()
            self._loaded = now

    def allows(self, principal: str, host: str, operation: Operation | str, resource_type: ResourceType | str,
               name: str) -> bool:
        self._fresh()
        op = operation if isinstance(operation, Operation) else Operation[operation.upper()]
        rt = resource_type if isinstance(resource_type, ResourceType) else ResourceType[resource_type.upper()]
        return authorize(self._acls, self._config, principal, host, op, rt, name)

    def allows_any(self, principal: str, host: str, operation: Operation | str,
                   resource_type: ResourceType | str) -> bool:
        """Some resource of the type allows it: a super user, an open table, or an ALLOW binding of the
        operation (or All) for the principal (DENY bindings on narrower patterns are not subtracted)."""
        self._fresh()
        op = operation if isinstance(operation, Operation) else Operation[operation.upper()]
        rt = resource_type if isinstance(resource_type, ResourceType) else ResourceType[resource_type.upper()]
        if principal in self._config.super_users:
            return True
        if not self._acls and self._config.allow_everyone_if_no_acl_found is not False:
            return True
        return any(b.resource_type == rt and b.permission.name == "ALLOW" and b.operation in (op, Operation.ALL)
                   and b.principal in (principal, "User:*") and b.host in (host, "*") for b in self._acls)


class ServerSecurity:
    """Everything the server needs for security, made once at start-up."""

    def __init__(self, config: SecurityConfig, store: Any) -> None:
        from klog.meta.credentials import CredentialsMeta
        from klog.meta.quotas import QuotasMeta

        self.config = config
        self.credentials = CredentialsMeta(store.meta)
        self.authorizer = Authorizer(store)
        self.quotas = QuotaManager(QuotasMeta(store.meta).all, config.quota_window_ms, config.quota_samples,
                                   reload_ms=ACL_RELOAD_MS)
        self._ssl: ssl.SSLContext | None = None
        # password checks (PBKDF2) get their own threads: guessing cannot starve request handling
        from concurrent.futures import ThreadPoolExecutor

        self.auth_executor = ThreadPoolExecutor(AUTH_THREADS, thread_name_prefix="klog-serve-auth")

    async def run_auth(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self.auth_executor, fn, *args)

    def close(self) -> None:
        self.auth_executor.shutdown(wait=True, cancel_futures=True)

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            c = self.config
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                ctx.load_cert_chain(c.ssl_certfile, c.ssl_keyfile)
                if c.ssl_cafile:
                    ctx.load_verify_locations(c.ssl_cafile)
            except (OSError, ssl.SSLError) as e:
                raise UsageError(f"cannot load TLS certificate/key/CA: {e}") from None
            ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                               "required": ssl.CERT_REQUIRED}[c.ssl_client_auth]
            self._ssl = ctx
        return self._ssl

    def connection(self, listener: Listener, peer_host: str, transport: Any) -> ConnectionSecurity:
        conn = ConnectionSecurity(listener, peer_host)
        if listener.tls and transport is not None:
            obj = transport.get_extra_info("ssl_object")
            principal = principal_from_cert(obj.getpeercert() if obj is not None else None)
            if principal is not None:
                conn.principal = principal  # mTLS; SASL, when the listener has it, replaces it
        conn.authenticated = not listener.sasl
        return conn

    def gate(self, conn: ConnectionSecurity, api_key: int) -> bool:
        """Whether a request of `api_key` may run now (False: log and close, as Kafka does)."""
        return conn.authenticated or api_key in PRE_AUTH_APIS

    def throttle_ms(self, conn: ConnectionSecurity, client_id: str | None, api_key: int, request_bytes: int,
                    response: Any, handling_ms: float) -> int:
        """Record this request's use against the quotas that apply; the longest throttle in ms.
        Fetch is left out of request_percentage: its time is mostly the long-poll wait, not work."""
        user = conn.principal.partition(":")[2]
        client = client_id or ""
        q = self.quotas
        delay = 0 if api_key == FETCH else q.record(REQUEST_PERCENTAGE, user, client, handling_ms)
        if api_key == PRODUCE:
            delay = max(delay, q.record(PRODUCER_BYTE_RATE, user, client, request_bytes))
        elif api_key == FETCH and response is not None:
            delay = max(delay, q.record(CONSUMER_BYTE_RATE, user, client, _response_bytes(response)))
        return delay


def _response_bytes(response: Any) -> int:
    size = getattr(response, "size", None)
    if callable(size):  # framing.RawBody (zero-copy fetch)
        return int(size())
    return sum(len(r.records or b"") for t in getattr(response, "responses", ()) for r in t.partitions
               if hasattr(r, "records"))


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """`response` with throttle_time set (kio dataclass), or the raw fetch body's first field patched."""
    if throttle_ms <= 0:
        return response
    import dataclasses
    import datetime

    if dataclasses.is_dataclass(response):
        if not any(f.name == "throttle_time" for f in dataclasses.fields(response)):
            return response
        from kio.static.primitive import i32Timedelta

        return dataclasses.replace(response, throttle_time=i32Timedelta.parse(
            datetime.timedelta(milliseconds=min(throttle_ms, 2**31 - 1))))
    parts = getattr(response, "parts", None)
    rtype = getattr(response, "response_type", None)
    if parts and isinstance(parts[0], bytes) and len(parts[0]) >= 4 and rtype is not None \
            and dataclasses.fields(rtype)[0].name == "throttle_time":  # Fetch v1+: the body's first int32
        parts[0] = min(throttle_ms, 2**31 - 1).to_bytes(4, "big") + parts[0][4:]
    return response


# -- group APIs under ACLs -------------------------------------------------------------------------
# api key -> the operation on the group Kafka checks (JoinGroup, Heartbeat, LeaveGroup, OffsetCommit,
# SyncGroup: Read; OffsetFetch: Describe; OffsetDelete: Delete)
GROUP_OPERATIONS = {11: Operation.READ, 12: Operation.READ, 13: Operation.READ, 8: Operation.READ,
                    14: Operation.READ, 9: Operation.DESCRIBE, 47: Operation.DELETE}


def guard_group_apis(handlers: dict) -> None:
    """Wrap the group handlers so a principal without the operation on the group gets
    GROUP_AUTHORIZATION_FAILED. The refusal is the handler's own answer without a coordinator, with
    COORDINATOR_NOT_AVAILABLE turned into GROUP_AUTHORIZATION_FAILED: every shape and version of the
    response stays the handler's, and groups.py needs no ACL code."""
    for key, operation in GROUP_OPERATIONS.items():
        handler = handlers.get(key)
        if handler is None or getattr(handler.fn, "klog_group_guard", False):
            continue
        handlers[key] = type(handler)(_group_guard(handler.fn, operation), handler.min_version,
                                      handler.max_version)


def guard_group_lists(handlers: dict) -> None:
    """DescribeGroups (Describe) and DeleteGroups (Delete) answer GROUP_AUTHORIZATION_FAILED for each
    group the principal lacks the operation on; ListGroups lists only groups it may Describe
    (all of them with Describe on the cluster), as Kafka does."""
    for key, wrap in ((15, _describe_groups_guard), (42, _delete_groups_guard), (16, _list_groups_guard)):
        handler = handlers.get(key)
        if handler is not None and not getattr(handler.fn, "klog_group_guard", False):
            guarded = wrap(handler.fn)
            guarded.klog_group_guard = True
            handlers[key] = type(handler)(guarded, handler.min_version, handler.max_version)


def _split_groups(ctx: Any, names: Any, operation: Operation) -> tuple[list, set]:
    denied = {str(g) for g in names if not ctx.authorize(operation, ResourceType.GROUP, str(g))}
    return [g for g in names if str(g) not in denied], denied


def _per_group_guard(fn: Any, operation: Operation, names_field: str, answers_field: str,
                     refusal: Callable[[Any, Any, Any], Any]) -> Any:
    """A handler taking a list of groups (request.<names_field>) and answering one entry per group
    (response.<answers_field>): it runs on the allowed groups only, and each denied group gets
    refusal(response module, group, error code) in its place, in the request's order."""
    import dataclasses

    from kio.schema.errors import ErrorCode

    from klog.protocol.kafka import response_for

    async def guarded(ctx: Any, request: Any) -> Any:
        names = getattr(request, names_field)
        allowed, denied = _split_groups(ctx, names, operation)
        if not denied:
            return await fn(ctx, request)
        response = await fn(ctx, dataclasses.replace(request, **{names_field: tuple(allowed)}))
        mod = response_for(request)
        answers = {str(a.group_id): a for a in getattr(response, answers_field)}
        out = tuple(answers.get(str(g)) or refusal(mod, g, ErrorCode.group_authorization_failed) for g in names)
        return dataclasses.replace(response, **{answers_field: out})

    return guarded


def _describe_groups_guard(fn: Any) -> Any:
    from klog.protocol.kafka import make

    return _per_group_guard(fn, Operation.DESCRIBE, "groups", "groups", lambda mod, g, error: make(
        mod.DescribedGroup, error_code=error, group_id=g, group_state="", protocol_type="", protocol_data="",
        members=(), authorized_operations=-2147483648))


def _delete_groups_guard(fn: Any) -> Any:
    from klog.protocol.kafka import make

    return _per_group_guard(fn, Operation.DELETE, "groups_names", "results", lambda mod, g, error: make(
        mod.DeletableGroupResult, group_id=g, error_code=error))


def _list_groups_guard(fn: Any) -> Any:
    import dataclasses

    async def guarded(ctx: Any, request: Any) -> Any:
        response = await fn(ctx, request)
        if ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"):
            return response
        visible = tuple(g for g in response.groups
                        if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, str(g.group_id)))
        return dataclasses.replace(response, groups=visible)

    return guarded


def _group_guard(fn: Any, operation: Operation) -> Any:
    import dataclasses

    from kio.schema.errors import ErrorCode

    async def guarded(ctx: Any, request: Any) -> Any:
        groups = ([request.group_id] if hasattr(request, "group_id")
                  else [g.group_id for g in getattr(request, "groups", ())])
        if all(ctx.authorize(operation, ResourceType.GROUP, str(g)) for g in groups):
            return await fn(ctx, request)
        ctx.log.info("%s (client %s): %s may not %s group(s) %s", ctx.client_host, ctx.client_id, ctx.principal,
                     operation.name, ", ".join(map(str, groups))[:200])
        response = await fn(dataclasses.replace(ctx, coordinator=None), request)
        return _swap_error(response, ErrorCode.coordinator_not_available, ErrorCode.group_authorization_failed)

    guarded.klog_group_guard = True  # type: ignore[attr-defined]
    return guarded


def _swap_error(value: Any, old: Any, new: Any) -> Any:
    """`value` (a kio dataclass, nested in tuples) with every error_code `old` replaced by `new`."""
    import dataclasses

    if isinstance(value, tuple):
        return tuple(_swap_error(v, old, new) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes = {}
    for f in dataclasses.fields(value):
        current = getattr(value, f.name)
        if f.name == "error_code" and current == old:
            changes[f.name] = new
        elif isinstance(current, tuple) or dataclasses.is_dataclass(current):
            swapped = _swap_error(current, old, new)
            if swapped is not current:
                changes[f.name] = swapped
    return dataclasses.replace(value, **changes) if changes else value

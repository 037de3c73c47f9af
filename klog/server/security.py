"""Security of `klog serve`: listeners with Kafka's security protocols, TLS (optionally mutual),
SASL (PLAIN, SCRAM-SHA-256/512), ACL authorization and client quotas, tied together for the server.
The parts live beside it: listeners.py (listeners, options, certificate principals),
authorizer.py (ACLs), throttle.py (quota throttling in responses), group_guards.py (group APIs
under ACLs); sasl.py answers the SASL APIs.

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

import logging
import ssl
from dataclasses import dataclass
from typing import Any

from klog.errors import UsageError
from klog.protocol.apis import API_VERSIONS, FETCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE
from klog.security.quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, QuotaManager
from klog.server.authorizer import ACL_RELOAD_MS, Authorizer
from klog.server.listeners import Listener, SecurityConfig, principal_from_cert
from klog.server.throttle import response_bytes

log = logging.getLogger("klog.serve")

CLOSE_LINGER_MS = 300  # after a refusal, before the close: some clients (kafka-python) drop unread data on FIN
SASL_FRAME_BYTES_MAX = 512 * 1024  # Kafka's sasl.server.max.receive.size: no 100 MiB frames before login
SASL_AUTH_ATTEMPTS_MAX = 4  # SaslAuthenticate rounds per connection (SCRAM needs 2)
AUTH_THREADS = 1  # PBKDF2 for PLAIN and unknown SCRAM users: at most one core, whatever the guessing rate

PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


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
    raw_sasl: bool = False  # SaslHandshake v0 succeeded: SASL tokens follow without Kafka's framing


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
        q = self.quotas
        if not q.quotas():  # none set (the common case): nothing to record, no lookups per request
            return 0
        user = conn.principal.partition(":")[2]
        client = client_id or ""
        delay = 0 if api_key == FETCH else q.record(REQUEST_PERCENTAGE, user, client, handling_ms)
        if api_key == PRODUCE:
            delay = max(delay, q.record(PRODUCER_BYTE_RATE, user, client, request_bytes))
        elif api_key == FETCH and response is not None:
            delay = max(delay, q.record(CONSUMER_BYTE_RATE, user, client, response_bytes(response)))
        return delay



"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2): PLAIN and SCRAM-SHA-256/512.

A failed authentication is answered with SASL_AUTHENTICATION_FAILED after the configured delay
(so guessing is slow; other connections are not held up, the delay is an asyncio sleep), logged in
one line with the client's address, and the connection is closed after the answer, as Kafka does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from klog.errors import ScramError
from klog.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from klog.protocol.kafka import E, make, response_for
from klog.security.scram import MECHANISMS, ScramServer, check_password, decoy_credential
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.server.security import SASL_AUTH_ATTEMPTS_MAX

PLAIN_BYTES_MAX = 1024


# v0 (Kafka 0.10.0-0.10.2 clients, and kafka-python configured with such an api_version): the SASL
# tokens that follow go without Kafka's framing, each a size-prefixed frame both ways
# (server.raw_sasl_token); v1 wraps them in SaslAuthenticate requests (KIP-152).
@register(SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    security = ctx.server.security
    enabled = tuple(security.config.sasl_mechanisms)
    conn = ctx.security
    if conn is None or not conn.listener.sasl or conn.authenticated or conn.mechanism is not None:
        ctx.log.warning("%s (client %s): SaslHandshake not expected here, closing", ctx.client_host, ctx.client_id)
        conn.close_after_response = True
        return make(mod.SaslHandshakeResponse, error_code=E.illegal_sasl_state, mechanisms=enabled)
    if request.mechanism not in enabled:
        ctx.log.warning("%s (client %s): SASL mechanism %r is not enabled, closing", ctx.client_host,
                        ctx.client_id, request.mechanism)
        conn.close_after_response = True
        return make(mod.SaslHandshakeResponse, error_code=E.unsupported_sasl_mechanism, mechanisms=enabled)
    conn.mechanism = request.mechanism
    conn.raw_sasl = ctx.api_version == 0
    return make(mod.SaslHandshakeResponse, error_code=E.none, mechanisms=enabled)


def _plain(credentials: Any, token: bytes) -> str | None:
    """The user name if `token` ('authzid NUL user NUL password') holds a right password."""
    if len(token) > PLAIN_BYTES_MAX:
        return None
    parts = token.split(b"\0")
    if len(parts) != 3:
        return None
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        return None
    if not user or (authzid and authzid != user):
        return None
    # one password check per mechanism, against the user's credential or a decoy: a user who does
    # not exist (or has one mechanism only) costs the same PBKDF2 work as one who does
    stored = {c.mechanism: c for c in credentials.for_user(user)}
    secret = credentials.decoy_secret()
    matches = [check_password(stored.get(m) or decoy_credential(secret, m, user), password) for m in MECHANISMS]
    return user if any(matches) and stored else None


@register(SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    conn = ctx.security
    security = ctx.server.security
    if conn is None or conn.mechanism is None or conn.authenticated:
        conn.close_after_response = True
        return make(mod.SaslAuthenticateResponse, error_code=E.illegal_sasl_state,
                    error_message="SaslAuthenticate before SaslHandshake", auth_bytes=b"")
    conn.sasl_rounds += 1
    user: str | None = None
    reply = b""
    done = False
    try:
        if conn.sasl_rounds > SASL_AUTH_ATTEMPTS_MAX:
            raise ScramError("too many SASL rounds")
        if conn.mechanism == "PLAIN":
            user = await security.run_auth(_plain, security.credentials, request.auth_bytes)
            if user is None:
                raise ScramError("invalid credentials")
            done = True
        elif conn.sasl_state is None:
            mechanism = conn.mechanism
            conn.sasl_state = ScramServer(mechanism, lambda u: security.credentials.get(u, mechanism),
                                          decoy_secret=security.credentials.decoy_secret())
            reply = await security.run_auth(conn.sasl_state.first, request.auth_bytes)
        else:
            reply = await security.run_auth(conn.sasl_state.final, request.auth_bytes)
            user, done = conn.sasl_state.username, True
    except ScramError:
        return await _failed(ctx, mod, conn)
    if done:
        assert user is not None
        conn.principal, conn.authenticated, conn.sasl_state = f"User:{user}", True, None
        ctx.principal = conn.principal
        ctx.log.info("%s (client %s): authenticated as User:%s (%s)", ctx.client_host, ctx.client_id, user,
                     conn.mechanism)
    return make(mod.SaslAuthenticateResponse, error_code=E.none, error_message=None, auth_bytes=reply)


async def _failed(ctx: RequestContext, mod: Any, conn: Any) -> Any:
    user = _claimed_user(conn)
    ctx.log.warning("%s (client %s): authentication failed (%s%s), closing", ctx.client_host, ctx.client_id,
                    conn.mechanism, f", user {user!r}" if user else "")
    conn.close_after_response = True
    await asyncio.sleep(ctx.server.security.config.auth_failure_delay_ms / 1000)
    message = f"Authentication failed during authentication due to invalid credentials with SASL mechanism " \
              f"{conn.mechanism}"
    return make(mod.SaslAuthenticateResponse, error_code=E.sasl_authentication_failed, error_message=message,
                auth_bytes=b"")


def _claimed_user(conn: Any) -> str | None:
    state = conn.sasl_state
    return getattr(state, "claimed_user", None)

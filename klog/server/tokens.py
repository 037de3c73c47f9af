"""Delegation tokens (CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken,
DescribeDelegationToken: `kafka-delegation-tokens`, Spark and Flink on secured clusters), answered as
a Kafka 3.9 KRaft broker without `delegation.token.secret.key` (the default) answers them.

Kafka's broker first asks whether the connection may ask for tokens at all (KafkaApis
allowTokenRequests): not on a PLAINTEXT listener, not over TLS without a client certificate (the
principal is ANONYMOUS), not on a connection authenticated by a token (klog never authenticates one):
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, with -1 timestamps. A creation for another owner then needs
CREATE_TOKENS on that user (DELEGATION_TOKEN_AUTHORIZATION_FAILED), and its renewers must be users
(INVALID_PRINCIPAL_TYPE). What passes goes to the controller (Describe is answered by the broker),
whose DelegationTokenControlManager answers DELEGATION_TOKEN_AUTH_DISABLED: the owner and requester
named, every other field at its default (0 timestamps, empty token id and HMAC). Real tokens would need
a token store in klog/meta and SCRAM's `tokenauth` extension (KIP-48).
"""

from __future__ import annotations

from typing import Any

from klog.protocol.kafka import NO_THROTTLE, E, make, response_for
from klog.server.context import ANONYMOUS, RequestContext
from klog.server.dispatch import register

CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN, EXPIRE_DELEGATION_TOKEN, DESCRIBE_DELEGATION_TOKEN = 38, 39, 40, 41
ERROR_TIMESTAMP = -1  # Kafka's DelegationTokenManager.ErrorTimestamp: the broker's own refusals
DEFAULT_TIMESTAMP = 0  # the controller's answers leave the fields at the schema's default


def _datetime(ms: int) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC) + datetime.timedelta(milliseconds=ms % 1000)


def tokens_allowed(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests: a SASL connection, or TLS with a client certificate (klog never
    authenticates a connection by a token, which Kafka also refuses)."""
    security = ctx.security
    if security is None:
        return False
    protocol = security.listener.protocol
    return not (protocol == "PLAINTEXT" or (protocol == "SSL" and ctx.principal == ANONYMOUS))


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def _create_answer(request: Any, error: E, owner: tuple[str, str], requester: tuple[str, str], stamp: int) -> Any:
    mod = response_for(request)
    when = _datetime(stamp)
    return make(mod.CreateDelegationTokenResponse, error_code=error, principal_type=owner[0], principal_name=owner[1],
                token_requester_principal_type=requester[0], token_requester_principal_name=requester[1],
                issue_timestamp=when, expiry_timestamp=when, max_timestamp=when, token_id="", hmac=b"",
                throttle_time=NO_THROTTLE)


@register(CREATE_DELEGATION_TOKEN, 0, 3)
async def create_delegation_token(ctx: RequestContext, request: Any) -> Any:
    requester = _split(ctx.principal)
    name = getattr(request, "owner_principal_name", None)  # v3+
    kind = getattr(request, "owner_principal_type", None)
    if name and kind is None:  # Kafka's KafkaPrincipal refuses a null type: its error answer
        anonymous = _split(ANONYMOUS)
        return _create_answer(request, E.unknown_server_error, anonymous, anonymous, ERROR_TIMESTAMP)
    owner = (str(kind), str(name)) if name else requester
    if not tokens_allowed(ctx):
        return _create_answer(request, E.delegation_token_request_not_allowed, owner, requester, ERROR_TIMESTAMP)
    if owner != requester and not ctx.authorize_unlisted():  # CREATE_TOKENS on the owner (a USER resource)
        return _create_answer(request, E.delegation_token_authorization_failed, owner, requester, ERROR_TIMESTAMP)
    if any(str(r.principal_type) != "User" for r in request.renewers):
        return _create_answer(request, E.invalid_principal_type, owner, requester, ERROR_TIMESTAMP)
    return _create_answer(request, E.delegation_token_auth_disabled, owner, requester, DEFAULT_TIMESTAMP)


def _renewal_answer(ctx: RequestContext, request: Any, cls_name: str) -> Any:
    cls = getattr(response_for(request), cls_name)
    if not tokens_allowed(ctx):
        return make(cls, error_code=E.delegation_token_request_not_allowed,
                    expiry_timestamp=_datetime(ERROR_TIMESTAMP), throttle_time=NO_THROTTLE)
    return make(cls, error_code=E.delegation_token_auth_disabled, expiry_timestamp=_datetime(DEFAULT_TIMESTAMP),
                throttle_time=NO_THROTTLE)


@register(RENEW_DELEGATION_TOKEN, 0, 2)
async def renew_delegation_token(ctx: RequestContext, request: Any) -> Any:
    return _renewal_answer(ctx, request, "RenewDelegationTokenResponse")


@register(EXPIRE_DELEGATION_TOKEN, 0, 2)
async def expire_delegation_token(ctx: RequestContext, request: Any) -> Any:
    return _renewal_answer(ctx, request, "ExpireDelegationTokenResponse")


@register(DESCRIBE_DELEGATION_TOKEN, 0, 3)
async def describe_delegation_token(ctx: RequestContext, request: Any) -> Any:
    error = E.delegation_token_auth_disabled if tokens_allowed(ctx) else E.delegation_token_request_not_allowed
    return make(response_for(request).DescribeDelegationTokenResponse, error_code=error, tokens=(),
                throttle_time=NO_THROTTLE)

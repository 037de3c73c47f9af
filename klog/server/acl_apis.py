"""CreateAcls, DescribeAcls, DeleteAcls (v1-3), DescribeClientQuotas, AlterClientQuotas (v0-1) and
DescribeUserScramCredentials, AlterUserScramCredentials (v0).

Each needs the cluster permission Kafka asks for (Alter to change ACLs, Describe to list them,
DescribeConfigs / AlterConfigs for quotas); the changes land in the store's LMDB metadata, shared
with `klog acls` / `klog quotas`, and this server's caches are refreshed at once.
"""

from __future__ import annotations

from typing import Any

from klog.errors import KlogError
from klog.protocol.apis import (
    ALTER_CLIENT_QUOTAS,
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
)
from klog.protocol.kafka import NO_THROTTLE, E, make, response_for
from klog.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from klog.server.context import RequestContext
from klog.server.dispatch import register


def _cluster_allowed(ctx: RequestContext, op: Operation) -> bool:
    return ctx.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME)


def _enum(cls: type, value: int) -> Any:
    try:
        return cls(int(value))
    except ValueError:
        raise AclError(f"unknown {cls.__name__} {value}") from None


def _filter(f: Any) -> AclFilter:
    return AclFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                     _enum(PatternType, getattr(f, "pattern_type_filter", PatternType.LITERAL)),
                     f.principal_filter, f.host_filter, _enum(Operation, f.operation),
                     _enum(Permission, f.permission_type))


def _invalidate(ctx: RequestContext) -> None:
    ctx.server.security.authorizer.invalidate()


@register(CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    allowed = _cluster_allowed(ctx, Operation.ALTER)
    results = []
    acls = ctx.server.security.authorizer.meta
    for c in request.creations:
        error, message = E.none, None
        if not allowed:
            error = E.cluster_authorization_failed
        else:
            try:
                binding = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                                     _enum(PatternType, getattr(c, "resource_pattern_type", PatternType.LITERAL)),
                                     c.principal, c.host, _enum(Operation, c.operation),
                                     _enum(Permission, c.permission_type))
                await ctx.run_blocking(acls.add, [binding])
            except (AclError, KlogError) as e:
                error, message = E.invalid_request, str(e)
        results.append(make(mod.AclCreationResult, error_code=error, error_message=message))
    _invalidate(ctx)
    return make(mod.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


@register(DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if not _cluster_allowed(ctx, Operation.DESCRIBE):
        return make(mod.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=E.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", resources=())
    try:
        found = await ctx.run_blocking(ctx.server.security.authorizer.meta.list, _filter(request))
    except AclError as e:
        return make(mod.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=E.invalid_request,
                    error_message=str(e), resources=())
    by_resource: dict[tuple, list[AclBinding]] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = tuple(
        make(mod.DescribeAclsResource, resource_type=int(rt), resource_name=name, pattern_type=int(pt),
             acls=tuple(make(mod.AclDescription, principal=b.principal, host=b.host, operation=int(b.operation),
                             permission_type=int(b.permission)) for b in bindings))
        for (rt, name, pt), bindings in by_resource.items())
    return make(mod.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=E.none, error_message=None,
                resources=resources)


@register(DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    allowed = _cluster_allowed(ctx, Operation.ALTER)
    results = []
    for f in request.filters:
        if not allowed:
            results.append(make(mod.DeleteAclsFilterResult, error_code=E.cluster_authorization_failed,
                                error_message=None, matching_acls=()))
            continue
        try:
            gone = await ctx.run_blocking(ctx.server.security.authorizer.meta.remove, _filter(f))
        except AclError as e:
            results.append(make(mod.DeleteAclsFilterResult, error_code=E.invalid_request, error_message=str(e),
                                matching_acls=()))
            continue
        matching = tuple(make(mod.DeleteAclsMatchingAcl, error_code=E.none, error_message=None,
                              resource_type=int(b.resource_type), resource_name=b.resource_name,
                              pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                              operation=int(b.operation), permission_type=int(b.permission)) for b in gone)
        results.append(make(mod.DeleteAclsFilterResult, error_code=E.none, error_message=None,
                            matching_acls=matching))
    _invalidate(ctx)
    return make(mod.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(results))


# -- quotas ----------------------------------------------------------------------------------------
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def _component_matches(entity: dict, c: Any) -> bool:
    if c.entity_type not in entity:
        return False
    name = entity[c.entity_type]
    if c.match_type == MATCH_EXACT:
        return name is not None and name == c.match
    if c.match_type == MATCH_DEFAULT:
        return name is None
    return True


@register(DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    from klog.meta.quotas import QuotasMeta

    mod = response_for(request)
    if not _cluster_allowed(ctx, Operation.DESCRIBE_CONFIGS):
        return make(mod.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE,
                    error_code=E.cluster_authorization_failed, error_message=None, entries=None)
    quotas = await ctx.run_blocking(QuotasMeta(ctx.store.meta).all)
    entries = []
    for e, values in sorted(quotas.items(), key=repr):
        entity = dict(e)
        if not all(_component_matches(entity, c) for c in request.components):
            continue
        if request.strict and set(entity) != {c.entity_type for c in request.components}:
            continue
        entries.append(make(mod.EntryData,
                            entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n) for t, n in e),
                            values=tuple(make(mod.ValueData, key=k, value=float(v))
                                         for k, v in sorted(values.items()))))
    return make(mod.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE, error_code=E.none, error_message=None,
                entries=tuple(entries))


@register(ALTER_CLIENT_QUOTAS, 0, 1)
async def alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    from klog.meta.quotas import QuotasMeta
    from klog.security.quota import entity as make_entity

    mod = response_for(request)
    allowed = _cluster_allowed(ctx, Operation.ALTER_CONFIGS)
    meta = QuotasMeta(ctx.store.meta)
    results = []
    for entry in request.entries:
        error, message = E.none, None
        if not allowed:
            error = E.cluster_authorization_failed
        else:
            try:
                parts = {d.entity_type: d.entity_name for d in entry.entity}
                if len(parts) != len(entry.entity) or set(parts) - {"user", "client-id"}:
                    raise KlogError("quota entities are user and/or client-id, each once")
                e = make_entity(parts.get("user", False), parts.get("client-id", False))
                set_ = {op.key: float(op.value) for op in entry.ops if not op.remove}
                remove = [op.key for op in entry.ops if op.remove]
                await ctx.run_blocking(meta.alter, e, set_, remove, request.validate_only)
            except (KlogError, ValueError) as exc:
                error, message = E.invalid_request, str(exc)
        results.append(make(mod.EntryData, error_code=error, error_message=message,
                            entity=tuple(make(mod.EntityData, entity_type=d.entity_type, entity_name=d.entity_name)
                                         for d in entry.entity)))
    ctx.server.security.quotas.invalidate()
    return make(mod.AlterClientQuotasResponse, throttle_time=NO_THROTTLE, entries=tuple(results))


# -- SCRAM users -------------------------------------------------------------------------------------
SCRAM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism types
SCRAM_TYPES = {name: code for code, name in SCRAM_CODES.items()}


@register(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if not _cluster_allowed(ctx, Operation.DESCRIBE):
        return make(mod.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    error_code=E.cluster_authorization_failed, error_message=None, results=())
    rows = await ctx.run_blocking(ctx.server.security.credentials.list)
    by_user: dict[str, list[tuple[str, int]]] = {}
    for user, mechanism, iterations in rows:
        by_user.setdefault(user, []).append((mechanism, iterations))
    wanted = sorted(by_user) if request.users is None else [u.name for u in request.users]
    results = tuple(make(mod.DescribeUserScramCredentialsResult, user=u,
                         error_code=E.none if u in by_user else E.resource_not_found,
                         error_message=None if u in by_user else f"no credentials for user {u}",
                         credential_infos=tuple(make(mod.CredentialInfo, mechanism=SCRAM_TYPES[m], iterations=i)
                                                for m, i in by_user.get(u, ())))
                    for u in wanted)
    return make(mod.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE, error_code=E.none,
                error_message=None, results=results)


def _alter_scram(credentials: Any, deletions: Any, upsertions: Any) -> dict[str, tuple[E, str | None]]:
    from klog.errors import UnknownUserError
    from klog.security.scram import credential_from_salted

    out: dict[str, tuple[E, str | None]] = {}
    for d in deletions:
        try:
            if int(d.mechanism) not in SCRAM_CODES:
                out[d.name] = (E.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {d.mechanism}")
                continue
            credentials.delete(d.name, SCRAM_CODES[int(d.mechanism)])
            out.setdefault(d.name, (E.none, None))
        except UnknownUserError as e:
            out[d.name] = (E.resource_not_found, str(e))
    for u in upsertions:
        if int(u.mechanism) not in SCRAM_CODES:
            out[u.name] = (E.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {u.mechanism}")
            continue
        try:
            cred = credential_from_salted(SCRAM_CODES[int(u.mechanism)], bytes(u.salt), int(u.iterations),
                                          bytes(u.salted_password))
            credentials.put(u.name, cred)
            out.setdefault(u.name, (E.none, None))
        except KlogError as e:
            out[u.name] = (E.unacceptable_credential, str(e))
    return out


@register(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not _cluster_allowed(ctx, Operation.ALTER):
        outcome = dict.fromkeys(names, (E.cluster_authorization_failed, None))
    else:
        outcome = await ctx.run_blocking(_alter_scram, ctx.server.security.credentials, request.deletions,
                                         request.upsertions)
    results = tuple(make(mod.AlterUserScramCredentialsResult, user=n, error_code=outcome[n][0],
                         error_message=outcome[n][1]) for n in dict.fromkeys(names))
    return make(mod.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE, results=results)

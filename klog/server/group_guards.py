"""The group APIs under ACLs: each group handler wrapped so a principal without Kafka's operation on
the group gets GROUP_AUTHORIZATION_FAILED in the handler's own answer (groups.py needs no ACL code)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from klog.protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from klog.security.acl import Operation, ResourceType

# api key -> the operation on the group Kafka checks (JoinGroup, Heartbeat, LeaveGroup, OffsetCommit,
# SyncGroup: Read; OffsetFetch: Describe; OffsetDelete: Delete)
GROUP_OPERATIONS = {JOIN_GROUP: Operation.READ, HEARTBEAT: Operation.READ, LEAVE_GROUP: Operation.READ,
                    OFFSET_COMMIT: Operation.READ, SYNC_GROUP: Operation.READ, OFFSET_FETCH: Operation.DESCRIBE,
                    OFFSET_DELETE: Operation.DELETE}


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
    for key, wrap in ((DESCRIBE_GROUPS, _describe_groups_guard), (DELETE_GROUPS, _delete_groups_guard),
                      (LIST_GROUPS, _list_groups_guard)):
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
        allowed = [ctx.authorize(operation, ResourceType.GROUP, str(g)) for g in groups]
        if all(allowed):
            return await fn(ctx, request)
        if any(allowed):  # OffsetFetch v8+: the groups it may see answered, the others refused (Kafka)
            return await _some_groups(fn, ctx, request, allowed)
        ctx.log.info("%s (client %s): %s may not %s group(s) %s", ctx.client_host, ctx.client_id, ctx.principal,
                     operation.name, ", ".join(map(str, groups))[:200])
        response = await fn(dataclasses.replace(ctx, coordinator=None), request)
        return _swap_error(response, ErrorCode.coordinator_not_available, ErrorCode.group_authorization_failed)

    guarded.klog_group_guard = True  # type: ignore[attr-defined]
    return guarded


async def _some_groups(fn: Any, ctx: Any, request: Any, allowed: list[bool]) -> Any:
    """A request of several groups (request.groups, answered in response.groups in its order) run on
    the allowed ones; each other one answered GROUP_AUTHORIZATION_FAILED, with nothing of its own."""
    import dataclasses

    from kio.schema.errors import ErrorCode

    from klog.protocol.kafka import make

    kept = tuple(g for g, ok in zip(request.groups, allowed, strict=True) if ok)
    response = await fn(ctx, dataclasses.replace(request, groups=kept))
    answers = iter(response.groups)
    group_cls = type(response.groups[0])
    out = tuple(next(answers) if ok else make(group_cls, group_id=g.group_id, topics=(),
                                              error_code=ErrorCode.group_authorization_failed)
                for g, ok in zip(request.groups, allowed, strict=True))
    ctx.log.info("%s (client %s): %s may not see %d of the groups asked", ctx.client_host, ctx.client_id,
                 ctx.principal, allowed.count(False))
    return dataclasses.replace(response, groups=out)


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

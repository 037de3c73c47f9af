"""The group APIs of `klog serve`: FindCoordinator (always this node), JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete: each request checked and answered here, membership kept by the server's one
GroupCoordinator (group_runtime.py: the state machine, its timer, offset expiry, LMDB publishing).

Committed offsets are klog's LMDB offsets (klog.meta.groups), the ones `klog groups` and klog's own
group consumers use, so `klog groups list/describe` show Kafka-client groups and `klog groups
reset-offsets --execute` is refused while their members are live. A group is either klog consumers'
or Kafka clients' while it has live members: each side refuses to join the other's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from klog.errors import GroupError, KlogError, UsageError
from klog.meta.groups import (
    GroupsMeta,
    Member,
    validate_group_id,
)
from klog.protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from klog.protocol.framing import printable
from klog.protocol.kafka import NO_THROTTLE, E, has_field, make, response_for
from klog.server import consumer_protocol
from klog.server.context import RequestContext
from klog.server.coordinator import COMPLETING, EMPTY, STABLE, JoinResult
from klog.server.dispatch import Handler
from klog.server.group_runtime import CONSUMER, GroupCoordinator, escaped

NOT_ASKED = -2147483648  # DescribeGroups' authorized_operations when the client did not ask
GROUP_OPERATION_BITS = (("READ", 3), ("DELETE", 6), ("DESCRIBE", 8))  # Kafka's AclOperation codes
OFFSET_METADATA_MAX = 4096  # Kafka's offset.metadata.max.bytes

def _coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    coord = ctx.coordinator
    if isinstance(coord, GroupCoordinator):
        coord.started()
        return coord
    return None


def _valid_group(group_id: str) -> bool:
    """klog's rule for group ids (1-255 printable characters), which its LMDB keys rely on."""
    try:
        validate_group_id(group_id)
    except UsageError:
        return False
    return True


def _ms(value: Any) -> int:
    """kio's i32Timedelta (or a plain int) as milliseconds."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


# -- FindCoordinator --------------------------------------------------------------------------------
async def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    b = ctx.broker
    key_type = int(getattr(request, "key_type", 0))

    def answer(key: str) -> tuple[E, str | None]:
        # Kafka's checks: Describe on the group, or on the transactional id
        if key_type == 0:
            if not ctx.authorize("DESCRIBE", "GROUP", key):
                return E.group_authorization_failed, None
        elif key_type == 1:
            if not ctx.authorize("DESCRIBE", "TRANSACTIONAL_ID", key):
                return E.transactional_id_authorization_failed, None
        else:
            return E.invalid_request, f"unknown key type {key_type}"
        return E.none, None

    if has_field(request, "coordinator_keys"):  # v4+: a batch of keys
        coords = []
        for k in request.coordinator_keys:
            error, message = answer(str(k))
            ok = error is E.none
            coords.append(make(mod.Coordinator, key=k, node_id=b.node_id if ok else -1, host=b.host if ok else "",
                               port=b.port if ok else -1, error_code=error, error_message=message))
        return make(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(coords))
    error, message = answer(str(request.key))
    ok = error is E.none
    return make(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                node_id=b.node_id if ok else -1, host=b.host if ok else "", port=b.port if ok else -1)


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------------------
def _stored_group(meta: GroupsMeta, group_id: str) -> tuple[list[Member], int]:
    """klog's own live members of the group, and its last generation, from LMDB."""
    return meta.local_live_members(group_id), meta.peek_generation(group_id)


async def join_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)

    def answer(res: JoinResult) -> Any:
        members = tuple(make(mod.JoinGroupResponseMember, member_id=mid, group_instance_id=iid, metadata=meta)
                        for mid, iid, meta in res.members)
        nullable = has_field(mod.JoinGroupResponse, "protocol_type")  # v7+: null protocol name on errors
        return make(mod.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=res.error,
                    generation_id=res.generation, protocol_type=res.protocol_type,
                    protocol_name=res.protocol_name if nullable else res.protocol_name or "",
                    leader=res.leader, skip_assignment=False, member_id=res.member_id, members=members)

    if coord is None:
        return answer(JoinResult(E.coordinator_not_available, member_id=request.member_id))
    group_id = str(request.group_id)
    if not _valid_group(group_id):
        return answer(JoinResult(E.invalid_group_id, member_id=request.member_id))
    if not coord.machine.is_live(group_id):
        try:
            local, generation = await ctx.run_blocking(_stored_group, coord.meta, group_id)
        except KlogError:
            local, generation = [], 0
        # generations go on from the stored one (as Kafka's do from __consumer_offsets), also after a restart
        coord.machine.seed_generation(group_id, generation, ctx.share_key)
        if local:
            ctx.log.info("join of group '%s' by %s refused: %d klog consumer(s) are live in it", group_id,
                         printable(ctx.client_id), len(local))
            return answer(JoinResult(E.inconsistent_group_protocol, member_id=request.member_id))
    future: asyncio.Future = asyncio.get_running_loop().create_future()

    def respond(res: JoinResult) -> None:
        if not future.done():
            future.set_result(res)

    coord.machine.join(group_id, request.member_id, getattr(request, "group_instance_id", None),
                       client_id=ctx.client_id or "", client_host=ctx.client_host,
                       session_timeout_ms=_ms(request.session_timeout),
                       rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", -1)),
                       protocol_type=request.protocol_type,
                       protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
                       require_known_member_id=int(request.__version__) >= 4, respond=respond,
                       principal=ctx.share_key)
    res = await future
    if res.error not in (E.none, E.member_id_required):
        ctx.log.info("JoinGroup '%s' from %s: %s%s", printable(group_id), printable(ctx.client_id), res.error.name,
                     f" ({escaped(res.reason)})" if res.reason else "")
    return answer(res)


async def sync_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    if coord is None:
        return make(mod.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=E.coordinator_not_available,
                    assignment=b"")
    future: asyncio.Future = asyncio.get_running_loop().create_future()

    def respond(res: Any) -> None:
        if not future.done():
            future.set_result(res)

    coord.machine.sync(str(request.group_id), int(request.generation_id), request.member_id,
                       getattr(request, "group_instance_id", None),
                       protocol_type=getattr(request, "protocol_type", None),
                       protocol_name=getattr(request, "protocol_name", None),
                       assignments={a.member_id: bytes(a.assignment) for a in request.assignments}, respond=respond,
                       principal=ctx.share_key)
    res = await future
    await coord.flush()  # a member that has its assignment is seen by `klog groups` with it
    return make(mod.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=res.error,
                protocol_type=res.protocol_type, protocol_name=res.protocol_name, assignment=res.assignment)


async def heartbeat(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    error = E.coordinator_not_available if coord is None else coord.machine.heartbeat(
        str(request.group_id), int(request.generation_id), request.member_id,
        getattr(request, "group_instance_id", None))
    return make(mod.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)


async def leave_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    if has_field(request, "members"):  # v3+: a batch, static members by instance id
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        for m in request.members:
            if getattr(m, "reason", None):
                ctx.log.info("member %s leaves group '%s': %s", printable(m.member_id or m.group_instance_id),
                             printable(str(request.group_id)), printable(m.reason))
    else:
        leaving = [(request.member_id, None)]
    if coord is None:
        error, errors = E.coordinator_not_available, [E.coordinator_not_available] * len(leaving)
    else:
        error, errors = coord.machine.leave(str(request.group_id), leaving)
        await coord.flush()  # when the client has left, klog's side sees it gone (its consumers may join)
    if not has_field(request, "members"):
        return make(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=errors[0])
    members = tuple(make(mod.MemberResponse, member_id=mid, group_instance_id=iid, error_code=err)
                    for (mid, iid), err in zip(leaving, errors, strict=True))
    return make(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=members)


# -- OffsetCommit / OffsetFetch / OffsetDelete ----------------------------------------------------------
async def offset_commit(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    group_id = str(request.group_id)
    generation = int(getattr(request, "generation_id_or_member_epoch", -1))
    if coord is None:
        error = E.coordinator_not_available
    elif not _valid_group(group_id):
        error = E.invalid_group_id
    else:
        error = coord.machine.check_commit(group_id, generation, getattr(request, "member_id", ""),  # v0: none
                                           getattr(request, "group_instance_id", None), offset_commit=True)
    results = await ctx.run_blocking(_commit, ctx, coord, group_id, request.topics, error)
    return make(mod.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=_topic_results(
        mod.OffsetCommitResponseTopic, mod.OffsetCommitResponsePartition, results))


def _commit(ctx: RequestContext, coord: GroupCoordinator | None, group_id: str, topics: Any,
            error: E) -> dict[tuple[str, int], E]:
    """Check each partition and store the good ones in LMDB (in the thread pool)."""
    results: dict[tuple[str, int], E] = {}
    offsets: dict[tuple[str, int], tuple[int, str]] = {}
    store = ctx.store
    for t in topics:
        topic = str(t.name)
        readable = ctx.authorize("READ", "TOPIC", topic)  # Kafka: Read on the group (the guard) and the topic
        count = store.partition_count(topic) if error is E.none and readable and store.has_topic(topic) else 0
        for p in t.partitions:
            tp = (topic, int(p.partition_index))
            metadata = p.committed_metadata or ""
            if error is not E.none:
                results[tp] = error
            elif not readable:
                results[tp] = E.topic_authorization_failed
            elif not 0 <= tp[1] < count:
                results[tp] = E.unknown_topic_or_partition
            elif len(metadata.encode()) > OFFSET_METADATA_MAX:
                results[tp] = E.offset_metadata_too_large
            else:
                offsets[tp] = (int(p.committed_offset), metadata)
                results[tp] = E.none
    if error is not E.none:
        ctx.log.info("OffsetCommit to group '%s' from %s: %s", printable(group_id), printable(ctx.client_id),
                     error.name)
    if offsets:
        assert coord is not None
        try:
            refusal = coord.admit_offsets(ctx.share_key, group_id, offsets)
            if refusal is not None:
                ctx.log.info("OffsetCommit to group '%s' from %s: COORDINATOR_NOT_AVAILABLE (%s)", printable(group_id),
                             printable(ctx.client_id), escaped(refusal))
                results.update({tp: E.coordinator_not_available for tp in offsets})
                return results
            coord.meta.store_offsets(group_id, offsets, negative_ok=True)  # Kafka stores negative offsets
        except GroupError as e:
            ctx.log.info("OffsetCommit to group '%s' from %s refused: %s", group_id, printable(ctx.client_id), e)
            results.update({tp: E.unknown_member_id for tp in offsets})
        except (KlogError, OSError) as e:
            ctx.log.warning("OffsetCommit to group '%s' failed: %s", group_id, e)
            results.update({tp: E.coordinator_not_available for tp in offsets})
    return results


def _topic_results(topic_cls: type, part_cls: type, results: dict[tuple[str, int], E]) -> tuple:
    by_topic: dict[str, list] = {}
    for (topic, p), err in results.items():
        by_topic.setdefault(topic, []).append(make(part_cls, partition_index=p, error_code=err))
    return tuple(make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def _fetch_group(ctx: RequestContext, coord: GroupCoordinator | None, group_id: str, wanted: Any,
                 topic_cls: type, part_cls: type, require_stable: bool = False) -> tuple[E, tuple]:
    """One group's committed offsets, for the topics/partitions asked (None: all it has). With
    `require_stable` (KIP-447), a partition whose offset a transaction has staged but not yet
    completed answers UNSTABLE_OFFSET_COMMIT (the client retries)."""
    if coord is None:
        return E.coordinator_not_available, ()
    if not _valid_group(group_id):
        return E.invalid_group_id, ()
    # the staged offsets first, then the committed ones: the other way round, a transaction that
    # completed between the two reads was neither (its offsets read from before it, none pending),
    # and a consumer taking the partitions over resumed before the offsets it committed with its
    # output, reading that output's input again (twice the output for read_committed readers)
    unstable: set[tuple[str, int]] = set()
    try:
        if require_stable:
            from klog.meta.transactions import TransactionsMeta

            unstable = TransactionsMeta(ctx.store.meta).pending_offsets(group_id)
        committed = coord.meta.committed(group_id)
    except (KlogError, OSError) as e:
        ctx.log.warning("OffsetFetch of group '%s' failed: %s", group_id, e)
        return E.coordinator_not_available, ()
    if wanted is None:
        asked: dict[str, list[int]] = {}
        for topic, p in sorted(committed):
            asked.setdefault(topic, []).append(p)
    else:
        asked = {str(t.name): [int(p) for p in t.partition_indexes] for t in wanted}
    topics = []
    for topic, parts in asked.items():
        if wanted is None and not ctx.authorize("DESCRIBE", "TOPIC", topic):
            continue  # all of the group's offsets: only topics the principal may Describe, as Kafka
        entries = []
        visible = ctx.authorize("DESCRIBE", "TOPIC", topic)
        for p in parts:
            c = committed.get((topic, p)) if visible else None
            error = E.none if visible else E.topic_authorization_failed
            if visible and (topic, p) in unstable:
                c, error = None, E.unstable_offset_commit
            entries.append(make(part_cls, partition_index=p, committed_offset=c.offset if c else -1,
                                committed_leader_epoch=-1, metadata=c.metadata if c else "", error_code=error))
        topics.append(make(topic_cls, name=topic, partitions=tuple(entries)))
    return E.none, tuple(topics)


async def offset_fetch(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    if coord is not None:
        await coord.flush()
    stable = bool(getattr(request, "require_stable", False))  # v7+
    if has_field(request, "groups"):  # v8+: several groups at once
        groups = []
        for g in request.groups:
            error, topics = await ctx.run_blocking(_fetch_group, ctx, coord, str(g.group_id), g.topics,
                                                   mod.OffsetFetchResponseTopics, mod.OffsetFetchResponsePartitions,
                                                   stable)
            groups.append(make(mod.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=error))
        return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error, topics = await ctx.run_blocking(_fetch_group, ctx, coord, str(request.group_id), request.topics,
                                           mod.OffsetFetchResponseTopic, mod.OffsetFetchResponsePartition, stable)
    return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


async def offset_delete(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    group_id = str(request.group_id)

    def reply(error: E, results: dict[tuple[str, int], E]) -> Any:
        return make(mod.OffsetDeleteResponse, error_code=error, throttle_time=NO_THROTTLE, topics=_topic_results(
            mod.OffsetDeleteResponseTopic, mod.OffsetDeleteResponsePartition, results))

    if coord is None:
        return reply(E.coordinator_not_available, {})
    if not _valid_group(group_id):
        return reply(E.invalid_group_id, {})
    await coord.flush()
    if coord.machine.is_live(group_id) and coord.machine.groups[group_id].protocol_type != CONSUMER:
        return reply(E.non_empty_group, {})  # Kafka: only a consumer group's subscriptions are known
    subscribed = coord.machine.subscribed_topics(group_id, consumer_protocol.subscription_topics)
    try:
        committed = await ctx.run_blocking(coord.meta.committed, group_id)
    except (KlogError, OSError):
        return reply(E.coordinator_not_available, {})
    if not committed and coord.state(group_id) in (None, EMPTY):
        return reply(E.group_id_not_found, {})
    results: dict[tuple[str, int], E] = {}
    for t in request.topics:
        topic = str(t.name)
        parts = [int(p.partition_index) for p in t.partitions]
        if not ctx.authorize("READ", "TOPIC", topic):  # Kafka: Delete on the group and Read on the topic
            results.update({(topic, p): E.topic_authorization_failed for p in parts})
            continue
        if topic in subscribed:
            results.update({(topic, p): E.group_subscribed_to_topic for p in parts})
            continue
        try:
            await ctx.run_blocking(coord.meta.delete_offsets, group_id, topic, parts)
            results.update({(topic, p): E.none for p in parts})
        except GroupError:  # klog consumers live in the group read the topic
            results.update({(topic, p): E.group_subscribed_to_topic for p in parts})
    return reply(E.none, results)


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------------------------
def _stored_groups(store: Any) -> dict[str, str]:
    """Groups in LMDB (klog consumers' and served ones') -> state."""
    from klog.client.groups_admin import list_groups

    return {g.group: g.state for g in list_groups(store)}


async def list_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    if coord is not None:
        await coord.flush()
    try:
        states = await ctx.run_blocking(_stored_groups, ctx.store)
    except (KlogError, OSError) as e:
        ctx.log.warning("ListGroups failed: %s", e)
        return make(mod.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=E.coordinator_not_available,
                    groups=())
    types = {g: CONSUMER for g in states}
    if coord is not None:
        for gid, group in coord.machine.groups.items():
            states[gid] = group.state
            types[gid] = group.protocol_type or CONSUMER
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    # v5: a types filter; every group here is a classic one (KIP-848's consumer groups are not served)
    kinds = {t.lower() for t in getattr(request, "types_filter", ())}
    if kinds and "classic" not in kinds:
        states = {}
    listed = tuple(make(mod.ListedGroup, group_id=g, protocol_type=types[g], group_state=s, group_type="classic")
                   for g, s in sorted(states.items()) if s != "Dead" and (not wanted or s.lower() in wanted))
    return make(mod.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=E.none, groups=listed)


def _describe_stored(store: Any, group_id: str) -> tuple[str, str | None, list[tuple]]:
    """(state, assignor, [(member id, client id, host, metadata, assignment)]) of a klog consumers' group."""
    from klog.client.groups_admin import describe_group

    try:
        d = describe_group(store, group_id)
    except GroupError:
        return "Dead", None, []
    members = [(m.member_id, m.client_id, m.host, consumer_protocol.encode_subscription(m.topics),
                consumer_protocol.encode_assignment(m.partitions)) for m in d.members]
    return d.state, d.assignor, members


async def describe_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    out = []
    asked = getattr(request, "include_authorized_operations", False)
    for gid in request.groups:
        # what the principal may do to the group (without ACLs: all of READ, DELETE, DESCRIBE)
        ops = sum(1 << bit for op, bit in GROUP_OPERATION_BITS if ctx.authorize(op, "GROUP", str(gid))) \
            if asked else NOT_ASKED
        if not _valid_group(str(gid)):
            out.append(make(mod.DescribedGroup, error_code=E.invalid_group_id, group_id=gid, group_state="",
                            protocol_type="", protocol_data="", members=(), authorized_operations=ops))
            continue
        group = coord.machine.groups.get(str(gid)) if coord is not None else None
        if group is not None and group.state != EMPTY:
            protocol = group.protocol_name if group.state in (COMPLETING, STABLE) else ""
            members = tuple(make(mod.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.instance_id,
                                 client_id=m.client_id, client_host=m.client_host,
                                 member_metadata=m.metadata(protocol) if protocol else b"",
                                 member_assignment=m.assignment if group.state == STABLE else b"")
                            for m in group.members.values())
            out.append(make(mod.DescribedGroup, error_code=E.none, group_id=gid, group_state=group.state,
                            protocol_type=group.protocol_type or "", protocol_data=protocol or "", members=members,
                            authorized_operations=ops))
            continue
        try:
            state, assignor, stored = await ctx.run_blocking(_describe_stored, ctx.store, str(gid))
        except (KlogError, OSError):
            out.append(make(mod.DescribedGroup, error_code=E.coordinator_not_available, group_id=gid,
                            group_state="", protocol_type="", protocol_data="", members=(),
                            authorized_operations=ops))
            continue
        members = tuple(make(mod.DescribedGroupMember, member_id=mid, group_instance_id=None, client_id=cid,
                             client_host=host, member_metadata=meta, member_assignment=assign)
                        for mid, cid, host, meta, assign in stored)
        out.append(make(mod.DescribedGroup, error_code=E.none, group_id=gid, group_state=state,
                        protocol_type=CONSUMER if state != "Dead" else "", protocol_data=assignor or "",
                        members=members, authorized_operations=ops))
    return make(mod.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(out))


async def delete_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    results = []
    for gid in request.groups_names:
        if coord is None:
            error = E.coordinator_not_available
        else:
            held = str(gid) in coord.machine.groups  # (an Empty group that only handed out member ids)
            error = coord.machine.delete(str(gid))
        if error is E.none:
            await coord.flush()
            try:
                await ctx.run_blocking(coord.meta.delete_group, str(gid))
            except UsageError:
                error = E.invalid_group_id
            except GroupError as e:
                if "unknown group" not in str(e):
                    error = E.non_empty_group
                elif not held:  # nowhere: Kafka's Dead group
                    error = E.group_id_not_found
            except (KlogError, OSError):
                error = E.coordinator_not_available
        results.append(make(mod.DeletableGroupResult, group_id=gid, error_code=error))
    return make(mod.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# Versions advertised: each one's fields are honoured (JoinGroup v4+ MEMBER_ID_REQUIRED, v5+ static
# members, LeaveGroup v3+ batches, OffsetFetch v2+ all partitions and v8+ several groups, ...).
GROUP_HANDLERS: dict[int, Handler] = {
    FIND_COORDINATOR: Handler(find_coordinator, 0, 6),
    JOIN_GROUP: Handler(join_group, 0, 9),
    SYNC_GROUP: Handler(sync_group, 0, 5),
    HEARTBEAT: Handler(heartbeat, 0, 4),
    LEAVE_GROUP: Handler(leave_group, 0, 5),
    OFFSET_COMMIT: Handler(offset_commit, 0, 9),
    OFFSET_FETCH: Handler(offset_fetch, 0, 9),
    LIST_GROUPS: Handler(list_groups, 0, 5),
    DESCRIBE_GROUPS: Handler(describe_groups, 0, 5),
    DELETE_GROUPS: Handler(delete_groups, 0, 2),
    OFFSET_DELETE: Handler(offset_delete, 0, 0),
}

__all__ = ["GROUP_HANDLERS"]

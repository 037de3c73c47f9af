"""klog.client.groups_admin over a cluster's admin APIs (ListGroups, DescribeGroups, OffsetFetch,
OffsetCommit, DeleteGroups): the same results, so `klog groups` prints the same tables.

What a cluster does not say is None: a member's pid, the group's generation, when an offset was
committed."""

from __future__ import annotations

from klog.client.groups_admin import (
    GroupDescription,
    GroupListing,
    MemberInfo,
    PartitionLag,
    ResetRow,
    ResetSpec,
    check_reset_scope,
    parse_scope,
    reset_offset,
    scoped_partitions,
)
from klog.errors import GroupError, UsageError

TP = tuple[str, int]
STATES = {"PREPARING_REBALANCING": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance",
          "STABLE": "Stable", "DEAD": "Dead", "EMPTY": "Empty", "UNKNOWN": "Unknown"}


def _describe(store, groups: list[str]) -> dict:
    if not groups:
        return {}
    return store._wait(store.admin.describe_consumer_groups(groups, request_timeout=store.timeout),
                       "cannot describe groups")


def _committed(store, group: str) -> dict[TP, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    found = store._wait(store.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                                request_timeout=store.timeout),
                        f"cannot read the offsets of group '{group}'")
    out = {}
    for result in found.values():
        for tp in result.topic_partitions or []:
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
    return out


def _state(desc) -> str:  # noqa: ANN001 - ConsumerGroupDescription
    state = getattr(desc.state, "name", str(desc.state))
    return STATES.get(state, state)


def _members(desc) -> list[MemberInfo]:  # noqa: ANN001
    out = []
    for m in desc.members:
        parts = sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))
        out.append(MemberInfo(m.member_id, m.client_id, m.host, None, sorted({t for t, _ in parts}), parts,  # type: ignore[arg-type]
                              None, None))  # type: ignore[arg-type]
    return out


def _exists(store, group: str, desc, committed: dict) -> None:  # noqa: ANN001
    if _state(desc) in ("Dead", "Unknown") and not desc.members and not committed:
        raise GroupError(f"unknown group '{group}'")


def list_groups(store) -> list[GroupListing]:
    listed = store.admin.list_consumer_groups(request_timeout=store.timeout)
    try:
        result = listed.result(timeout=store.timeout)
    except Exception as e:  # noqa: BLE001 - librdkafka's KafkaException
        from klog.client.remote.errors import klog_error

        raise klog_error(e, "cannot list groups") from None
    ids = sorted(g.group_id for g in result.valid)
    descs = _describe(store, ids)
    out = []
    for group in ids:
        desc = descs[group]
        members = _members(desc)
        topics = {t for m in members for t in m.topics} | {t for t, _ in _committed(store, group)}
        out.append(GroupListing(group, _state(desc), len(members), sorted(topics), None,  # type: ignore[arg-type]
                                desc.partition_assignor or None))
    return out


def describe_group(store, group: str) -> GroupDescription:
    desc = _describe(store, [group])[group]
    committed = _committed(store, group)
    _exists(store, group, desc, committed)
    members = _members(desc)
    owners = {tp: m for m in members for tp in m.partitions}
    topics = sorted(t for t in {t for m in members for t in m.topics} | {t for t, _ in committed}
                    if store.has_topic(t))
    rows = []
    for topic in topics:
        starts, ends = store.offsets(topic, -2), store.offsets(topic, -1)
        for p in sorted(ends):
            c = committed.get((topic, p))
            owner = owners.get((topic, p))
            rows.append(PartitionLag(topic, p, c, starts[p] or 0, ends[p] or 0,
                                     None if c is None else max(0, (ends[p] or 0) - c),
                                     owner.member_id if owner else None, owner.host if owner else None, None))
    return GroupDescription(group, _state(desc), None, desc.partition_assignor or None,  # type: ignore[arg-type]
                            members, rows)


def live_members(store, group: str) -> list[MemberInfo]:
    return _members(_describe(store, [group])[group])


def plan_reset(store, group: str, spec: ResetSpec, scopes: list[str] = (), all_topics: bool = False,
               now: int | None = None) -> list[ResetRow]:
    from klog.meta.groups import now_ms

    committed = _committed(store, group)
    now = now_ms() if now is None else now
    check_reset_scope(scopes, all_topics)
    wanted: list[TP] = []
    if all_topics:
        members = {t for m in live_members(store, group) for t in m.topics}
        for t in sorted(members | {t for t, _ in committed}):
            if store.has_topic(t):
                wanted += [(t, p) for p in range(store.partition_count(t))]
    wanted += scoped_partitions(store, scopes)
    rows = []
    cache: dict[tuple[str, int | None], dict] = {}

    def offsets(topic: str, ts: int | None) -> dict:
        if (topic, ts) not in cache:
            cache[(topic, ts)] = store.offsets(topic, ts)
        return cache[(topic, ts)]

    for topic, p in sorted(set(wanted)):
        start, end = offsets(topic, -2)[p] or 0, offsets(topic, -1)[p] or 0
        current = committed.get((topic, p))
        new = reset_offset(spec, current, start, end, now, lambda ts, t=topic, p=p: offsets(t, ts)[p], f"{topic}-{p}")
        rows.append(ResetRow(topic, p, current, start, end, new))
    return rows


def execute_reset(store, group: str, plan: list[ResetRow]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    if live_members(store, group):
        raise GroupError(f"group '{group}' has live members: stop them before resetting its offsets")
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(r.topic, r.partition, r.new_offset) for r in plan])
    store._wait(store.admin.alter_consumer_group_offsets([request], request_timeout=store.timeout),
                f"cannot reset the offsets of group '{group}'")


def delete_group(store, group: str) -> int:
    committed = _committed(store, group)
    desc = _describe(store, [group])[group]
    _exists(store, group, desc, committed)
    store._wait(store.admin.delete_consumer_groups([group], request_timeout=store.timeout),
                f"cannot delete group '{group}'")
    return len(committed)


def delete_offsets(store, group: str, scope: str) -> list[TP]:
    """As the local delete_offsets, through Kafka's OffsetDelete (a kio request: confluent-kafka lacks it)."""
    from klog.client.remote import wire

    wire.security(store.target)  # a setting this request cannot speak: refused before any change
    topic, partitions = parse_scope(scope)
    committed = _committed(store, group)
    held = {p for t, p in committed if t == topic}
    exists = store.has_topic(topic)
    if not exists and not held:
        store.topic(topic)  # raises the unknown-topic error
    count = store.partition_count(topic) if exists else 0
    for p in partitions or []:
        if not 0 <= p < count and p not in held:
            raise UsageError(f"topic '{topic}' has no partition {p} (it has {count})")
    if not committed:
        _exists(store, group, _describe(store, [group])[group], committed)
    wanted = sorted(partitions) if partitions is not None else sorted(set(range(count)) | held)
    code, results = wire.offset_delete(store.target, group, topic, wanted, store.timeout)
    failed = {c for c in results.values() if c} | ({code} if code else set())
    if failed:
        raise _offset_delete_error(group, topic, min(failed))
    return [(topic, p) for p in wanted if p in held]


GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, INVALID_GROUP_ID, UNKNOWN_TOPIC_OR_PARTITION = 69, 86, 24, 3


def _offset_delete_error(group: str, topic: str, code: int) -> Exception:
    from klog.errors import KlogError, UnknownTopicError
    from klog.protocol.errors import error_name

    if code == GROUP_ID_NOT_FOUND:
        return GroupError(f"unknown group '{group}'")
    if code == GROUP_SUBSCRIBED_TO_TOPIC:
        return GroupError(f"cannot delete offsets of topic '{topic}': group '{group}' has live members "
                          "reading it; stop them first")
    if code == INVALID_GROUP_ID:
        return UsageError(f"invalid group id '{group}'")
    if code == UNKNOWN_TOPIC_OR_PARTITION:
        return UnknownTopicError(f"unknown topic '{topic}'")
    return KlogError(f"cannot delete offsets of group '{group}' on topic '{topic}': {error_name(code)}")

"""Consumer-group administration, like kafka-consumer-groups: list, describe (lag), reset offsets,
delete a group or some of its offsets. Every function takes an open Store; none prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from klog.broker.resolve import resolve_partitions
from klog.errors import GroupError, UsageError
from klog.meta.groups import (
    TP,
    ExpiredOffsets,
    GroupsMeta,
    GroupSnapshot,
    now_ms,
    offsets_retention_setting,
    tp_key,
    validate_group_id,
)


def _remote():  # noqa: ANN202 - the same functions over a cluster's admin APIs
    from klog.client.remote import groups_admin

    return groups_admin


RESET_KINDS = ("earliest", "latest", "offset", "datetime", "duration", "shift", "current")


@dataclass(frozen=True)
class GroupListing:
    group: str
    state: str
    members: int  # live ones
    topics: list[str]
    generation: int
    assignor: str | None


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    pid: int
    topics: list[str]
    partitions: list[TP]  # held now
    heartbeat_ms: int
    generation: int


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int  # the high watermark: what a consumer can read up to
    lag: int | None  # log_end - committed (None without a committed offset)
    member_id: str | None
    host: str | None
    pid: int | None
    commit_ms: int | None = None  # when the offset was committed
    metadata: str = ""  # what the committer attached


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str
    generation: int
    assignor: str | None
    members: list[MemberInfo]
    partitions: list[PartitionLag]


def _snapshot(store, group: str, must_exist: bool = True) -> GroupSnapshot:
    validate_group_id(group)  # an empty id reached LMDB as a key it refuses (MDB_BAD_VALSIZE)
    snap = GroupsMeta(store.meta).snapshot(group)
    if must_exist and snap.doc is None and not snap.offsets:
        raise GroupError(f"unknown group '{group}'")
    return snap


def _group_topics(store, snap: GroupSnapshot) -> list[str]:
    """Topics the group reads or has offsets for (that still exist)."""
    names = {t for m in snap.live for t in m.topics} | {tp[0] for tp in snap.offsets}
    return sorted(t for t in names if store.has_topic(t))


def _member_infos(snap: GroupSnapshot) -> list[MemberInfo]:
    doc = snap.doc
    return [MemberInfo(m.member_id, m.client_id, m.host, m.pid, m.topics, doc.owned_by(m.member_id) if doc else [],
                       m.heartbeat_ms, m.generation) for m in snap.live]


def list_groups(store) -> list[GroupListing]:
    if not getattr(store, "is_local", True):
        return _remote().list_groups(store)
    out = []
    for group in GroupsMeta(store.meta).group_ids():
        snap = _snapshot(store, group, must_exist=False)
        doc = snap.doc
        out.append(GroupListing(group, snap.state, len(snap.live), _group_topics(store, snap),
                                doc.generation if doc else 0, doc.assignor if doc else None))
    return out


def describe_group(store, group: str) -> GroupDescription:
    if not getattr(store, "is_local", True):
        return _remote().describe_group(store, group)
    snap = _snapshot(store, group)
    doc = snap.doc
    live = {m.member_id: m for m in snap.live}
    owners = {k: m for k, m in (doc.owners.items() if doc else []) if m in live}
    members = _member_infos(snap)
    rows = []
    for topic in _group_topics(store, snap):
        for p in range(store.partition_count(topic)):
            part = store.partition(topic, p)
            start, end = part.log_start_offset(), part.high_watermark()
            c = snap.offsets.get((topic, p))
            owner = live.get(owners.get(tp_key((topic, p)), ""))
            rows.append(PartitionLag(topic, p, c.offset if c else None, start, end,
                                     None if c is None else max(0, end - c.offset),
                                     owner.member_id if owner else None, owner.host if owner else None,
                                     owner.pid if owner else None, c.commit_ms if c else None,
                                     c.metadata if c else ""))
    return GroupDescription(group, snap.state, doc.generation if doc else 0, doc.assignor if doc else None,
                            members, rows)


# -- reset-offsets -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResetSpec:
    """--to-earliest | --to-latest | --to-offset N | --to-datetime T | --by-duration D | --shift-by N |
    --to-current; `value` is N, epoch ms, milliseconds back, or the shift."""

    kind: str
    value: int = 0

    def __post_init__(self) -> None:
        assert self.kind in RESET_KINDS, self.kind


@dataclass(frozen=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None
    log_start: int
    log_end: int
    new_offset: int


def parse_scope(text: str) -> tuple[str, list[int] | None]:
    """`TOPIC` or `TOPIC:P[,P...]` (kafka-consumer-groups' --topic syntax)."""
    topic, colon, parts = text.partition(":")
    if not colon:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise UsageError(f"invalid --topic '{text}': use TOPIC or TOPIC:P[,P...]") from None
    return topic, partitions


def check_reset_scope(scopes: list[str], all_topics: bool) -> None:
    if all_topics == bool(scopes):
        raise UsageError("name the partitions to reset: --topic TOPIC[:P,...] (repeatable) or --all-topics")


def scoped_partitions(store, scopes: list[str]) -> list[TP]:
    """The partitions --topic TOPIC[:P,...] names (local or remote store), each checked to exist."""
    return [(topic, p) for text in scopes
            for topic, partitions in [parse_scope(text)] for p in resolve_partitions(store, topic, partitions)]


def _scope_partitions(store, snap: GroupSnapshot, scopes: list[str], all_topics: bool) -> list[TP]:
    check_reset_scope(scopes, all_topics)
    if all_topics:
        return [(t, p) for t in _group_topics(store, snap) for p in range(store.partition_count(t))]
    return sorted(set(scoped_partitions(store, scopes)))


def reset_offset(spec: ResetSpec, current: int | None, start: int, end: int, now: int,
                 offset_at: Callable[[int], int | None], where: str) -> int:
    """Where a reset moves a committed offset (`current`, None if none) of partition `where` holding
    start..end, kept within them; `offset_at(ts)` is its first offset at or after a timestamp."""
    return min(max(_reset_target(spec, current, start, end, now, offset_at, where), start), end)


def _reset_target(spec: ResetSpec, current: int | None, start: int, end: int, now: int,
                  offset_at: Callable[[int], int | None], where: str) -> int:
    if spec.kind == "earliest":
        return start
    if spec.kind == "latest":
        return end
    if spec.kind == "offset":
        return spec.value
    if spec.kind in ("datetime", "duration"):
        found = offset_at(spec.value if spec.kind == "datetime" else now - spec.value)
        return end if found is None else found
    if spec.kind == "shift":
        if current is None:
            raise GroupError(f"cannot shift {where}: the group has no committed offset there")
        return current + spec.value
    return end if current is None else current  # current: unchanged (the log end where none is committed)


def plan_reset(store, group: str, spec: ResetSpec, scopes: list[str] = (), all_topics: bool = False,
               now: int | None = None) -> list[ResetRow]:
    """Where each partition's committed offset would go; offsets are kept within [log start, log end]."""
    if not getattr(store, "is_local", True):
        return _remote().plan_reset(store, group, spec, scopes, all_topics, now)
    snap = _snapshot(store, group, must_exist=False)
    now = now_ms() if now is None else now
    rows = []
    for tp in _scope_partitions(store, snap, list(scopes), all_topics):
        part = store.partition(*tp)
        start, end = part.log_start_offset(), part.high_watermark()
        c = snap.offsets.get(tp)
        current = c.offset if c else None
        new = reset_offset(spec, current, start, end, now, part.offset_for_timestamp, f"{tp[0]}-{tp[1]}")
        rows.append(ResetRow(tp[0], tp[1], current, start, end, new))
    return rows


def execute_reset(store, group: str, plan: list[ResetRow]) -> None:
    """Apply a plan; refused (GroupError) while the group has live members."""
    if not getattr(store, "is_local", True):
        return _remote().execute_reset(store, group, plan)
    GroupsMeta(store.meta).set_offsets(group, {(r.topic, r.partition): r.new_offset for r in plan})


def delete_group(store, group: str) -> int:
    """Delete a group without live members; returns the number of committed offsets deleted."""
    if not getattr(store, "is_local", True):
        return _remote().delete_group(store, group)
    validate_group_id(group)
    return GroupsMeta(store.meta).delete_group(group)


def delete_offsets(store, group: str, scope: str) -> list[TP]:
    """Delete the committed offsets of TOPIC or TOPIC:P,...; refused while a live member reads the topic.
    An unknown topic (UnknownTopicError) or partition (UsageError) is an error, unless the group still
    has an offset there (a deleted topic's offsets stay until deleted)."""
    if not getattr(store, "is_local", True):
        return _remote().delete_offsets(store, group, scope)
    snap = _snapshot(store, group)
    topic, partitions = parse_scope(scope)
    held = {p for t, p in snap.offsets if t == topic}
    if not store.has_topic(topic) and not held:
        store.topic(topic)  # raises the unknown-topic error
    count = store.partition_count(topic) if store.has_topic(topic) else 0
    for p in partitions or []:
        if not 0 <= p < count and p not in held:
            raise UsageError(f"topic '{topic}' has no partition {p} (it has {count})")
    return GroupsMeta(store.meta).delete_offsets(group, topic, partitions)


def expire_offsets(store) -> list[ExpiredOffsets]:
    """Kafka's offset expiry, now: what `klog serve` runs every offsets.retention.check.interval.ms
    (offsets.retention.minutes from the store's klog.json); Empty groups left without offsets go."""
    if not getattr(store, "is_local", True):
        raise UsageError("a Kafka cluster expires committed offsets itself (its offsets.retention.minutes)")
    name = "offsets.retention.minutes"
    retention_ms = offsets_retention_setting(name, store.data_dir.default(name))
    return GroupsMeta(store.meta).expire_offsets(retention_ms)


def live_members(store, group: str) -> list[MemberInfo]:
    """The group's live members (none for an unknown group)."""
    if not getattr(store, "is_local", True):
        return _remote().live_members(store, group)
    return _member_infos(_snapshot(store, group, must_exist=False))

"""Consumer groups in LMDB: members, generations, assignments, partition ownership, committed offsets.

Every membership change happens in one LMDB write transaction, so any number of processes see one
consistent group (LMDB serializes writers across processes). There is no coordinator process: each
member's heartbeat runs the coordinator's bookkeeping itself (expire dead members, rebalance).

Keys (the dbs MetaDB opens):
- groups:  `<group>` -> GroupDoc: generation, assignor, target assignment per member, owners
- members: `<group>\\0<member id>` -> Member: host, pid, boot id, topics, heartbeat time, ...
- offsets: `<group>\\0<topic>\\0<partition, 10 digits>` -> committed offset, metadata, commit time

Committed offsets expire as Kafka's do (KIP-211, `offsets.retention.minutes`): GroupsMeta.expire_offsets,
run by `klog serve` every `offsets.retention.check.interval.ms` and by `klog groups clean`.

Safety rests on `owners`: a member fetches a partition only while the group names it the owner.
A rebalance only changes the *targets*; a partition moves when its owner releases it (after
committing) and the new target member acquires it, or when its owner is expired as dead. So no
partition is ever read by two members at once, whatever the assignor.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

from klog.errors import GroupError, GroupFencedError, UnknownMemberError, UsageError
from klog.meta.change_log import drop_through, read_changes
from klog.meta.db import MetaDB
from klog.store.state import current_boot_id

# Subclasses of klog.errors.GroupError (kept here, beside the only code that raises them).
TP = tuple[str, int]
# (assignor name, member -> subscribed topics, topic -> partition count, member -> current target) -> targets
AssignFn = Callable[[str, dict[str, list[str]], dict[str, int], dict[str, list[TP]]], dict[str, list[TP]]]

GROUP_ID_BYTES_MAX = 399  # its metadata keys' prefix must survive LMDB key shortening (meta/db.py)
GROUP_ID_CHARS_MAX = 255
SESSION_TIMEOUT_MS_DEFAULT = 45_000  # Kafka's session.timeout.ms default
OFFSETS_RETENTION_MINUTES_DEFAULT = 10_080  # Kafka's offsets.retention.minutes (7 days, since 2.0)
OFFSETS_RETENTION_CHECK_MS_DEFAULT = 600_000  # Kafka's offsets.retention.check.interval.ms


def offsets_retention_setting(name: str, text: str) -> int:
    """`offsets.retention.minutes` as milliseconds, or `offsets.retention.check.interval.ms`, from
    klog.json's text; at least 1, as Kafka requires (UsageError naming the setting otherwise)."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or int(digits) < 1:  # isdigit alone takes '²', int() does not
        raise UsageError(f"klog.json default '{name}' must be a whole number of at least 1, not {text!r}")
    return int(text) * (60_000 if name == "offsets.retention.minutes" else 1)


def now_ms() -> int:
    return int(time.time() * 1000)


def validate_group_id(group: str) -> None:
    if (not group or len(group) > GROUP_ID_CHARS_MAX or not group.isprintable() or "\0" in group
            or len(group.encode()) > GROUP_ID_BYTES_MAX):
        raise UsageError(f"invalid group id {group!r}: use 1-{GROUP_ID_CHARS_MAX} printable characters "
                         f"(at most {GROUP_ID_BYTES_MAX} bytes in UTF-8)")


def tp_key(tp: TP) -> str:
    return f"{tp[0]}:{tp[1]}"  # ':' cannot occur in a Kafka topic name


def key_tp(key: str) -> TP:
    topic, _, p = key.rpartition(":")
    return topic, int(p)


def _offset_key(group: str, tp: TP) -> str:
    return f"{group}\0{tp[0]}\0{tp[1]:010d}"


# -- process liveness ----------------------------------------------------------------------------
def process_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (field 22 of /proc/PID/stat): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[19])


def process_alive(pid: int, start_time: int | None) -> bool:
    """Is the process that registered as (pid, start_time) still running on this machine?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel directly
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X"):  # a killed child its parent has not reaped yet
        return False
    return start_time is None or int(fields[19]) == start_time


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    pid: int
    pid_start: int | None
    boot_id: str
    topics: list[str]
    assignor: str
    session_timeout_ms: int
    joined_ms: int
    heartbeat_ms: int
    generation: int = 0  # the last generation this member synced to
    served_by: str | None = None  # "klog serve pid N": a Kafka client the server coordinates in memory
    # a Kafka client's own bytes, base64 (what __consumer_offsets' GroupMetadataValue carries): its
    # protocol metadata for the group's protocol (a consumer's ConsumerProtocolSubscription, user data
    # and all) and the assignment its leader gave it; None for klog's own consumers
    metadata_b64: str | None = None
    assignment_b64: str | None = None
    rebalance_timeout_ms: int = -1
    instance_id: str | None = None  # group.instance.id (static membership)

    @classmethod
    def local(cls, member_id: str, client_id: str, topics: list[str], assignor: str,
              session_timeout_ms: int) -> Member:
        pid = os.getpid()
        now = now_ms()
        return cls(member_id, client_id, socket.gethostname(), pid, process_start_time(pid),
                   current_boot_id().hex(), sorted(set(topics)), assignor, session_timeout_ms, now, now)

    def is_local(self) -> bool:
        return self.host == socket.gethostname() and self.boot_id == current_boot_id().hex()

    def alive(self, now: int) -> bool:
        """Dead if its process is gone (checked at once on this machine) or its session timed out."""
        if self.served_by is not None:
            # a Kafka client's member lives as long as the klog serve holding it: the server expels it
            # itself on session timeout and rewrites this record, and a killed server frees the group
            return self.boot_id == current_boot_id().hex() and process_alive(self.pid, self.pid_start)
        if self.is_local() and not process_alive(self.pid, self.pid_start):
            return False
        return now - self.heartbeat_ms <= self.session_timeout_ms


@dataclass
class GroupDoc:
    group: str
    generation: int = 0
    assignor: str | None = None
    targets: dict[str, list[list]] = field(default_factory=dict)  # member id -> [[topic, partition], ...]
    owners: dict[str, str] = field(default_factory=dict)  # "topic:partition" -> member id fetching it
    partition_counts: dict[str, int] = field(default_factory=dict)  # what the assignment was computed for
    created_ms: int = 0
    rebalance_ms: int = 0
    served_by: str | None = None  # set while klog serve coordinates the group for Kafka clients
    # when the group was last seen losing its last member (offset expiry counts from it); None while it
    # has members, and in docs written before expiry existed (the first expiry pass then starts the count)
    empty_ms: int | None = None
    # a group klog serve coordinates: its protocol type ("consumer", "connect", ...) and leader member
    protocol_type: str | None = None
    leader: str | None = None

    def target(self, member_id: str) -> list[TP]:
        return [(t, p) for t, p in self.targets.get(member_id, [])]

    def owned_by(self, member_id: str) -> list[TP]:
        return sorted(key_tp(k) for k, m in self.owners.items() if m == member_id)


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_ms: int


@dataclass(frozen=True)
class ExpiredOffsets:
    """What one expiry pass did to a group."""

    group: str
    partitions: list[TP]  # whose committed offsets expired
    group_removed: bool  # Empty and left without offsets: deleted (Kafka: Dead)


@dataclass(frozen=True)
class GroupView:
    """What a member learns from a heartbeat or sync."""

    generation: int
    target: list[TP]  # its assignment in this generation
    owned: list[TP]  # what the group says it holds now
    acquired: list[TP] = field(default_factory=list)  # taken in this call (sync only)
    committed: dict[TP, CommittedOffset] = field(default_factory=dict)  # for `acquired`


@dataclass(frozen=True)
class GroupSnapshot:
    """A read-only picture for admin commands; `live` applies the same liveness rule as heartbeats."""

    doc: GroupDoc | None
    members: list[Member]
    live: list[Member]
    offsets: dict[TP, CommittedOffset]

    @property
    def state(self) -> str:
        """Kafka's names: Empty, PreparingRebalance (targets not all taken yet), Stable, Dead (unknown)."""
        if self.doc is None and not self.offsets:
            return "Dead"
        if not self.live:
            return "Empty"
        live_ids = {m.member_id for m in self.live}
        if set(self.doc.targets) != live_ids or any(m.generation != self.doc.generation for m in self.live):
            return "PreparingRebalance"
        for mid in live_ids:
            for tp in self.doc.target(mid):
                if self.doc.owners.get(tp_key(tp)) != mid:
                    return "PreparingRebalance"
        return "Stable"


@dataclass
class GroupChanges:
    """GroupsMeta.changes_since: as of LMDB transaction `upto`; `complete` False when the change log no
    longer reaches back (read everything instead)."""

    upto: int
    complete: bool
    offsets: dict[tuple[str, str, int], bytes | None] = field(default_factory=dict)  # stored JSON; None: deleted
    groups: dict[str, tuple[GroupDoc, list[Member]] | None] = field(default_factory=dict)  # None: deleted


class GroupsMeta:
    """`clock` gives epoch ms (heartbeats, session expiry, commit times); tests pass one that is
    ahead or behind instead of sleeping past a session timeout."""

    def __init__(self, db: MetaDB, clock: Callable[[], int] = now_ms) -> None:
        self.db = db
        self.clock = clock

    # -- loading and saving inside a transaction ---------------------------------------------
    def _doc(self, txn, group: str) -> GroupDoc | None:
        raw = self.db.get_json(txn, "groups", group)
        return None if raw is None else GroupDoc(**raw)

    def _members(self, txn, group: str) -> dict[str, Member]:
        return {doc["member_id"]: Member(**doc) for _, doc in self.db.items(txn, "members", group + "\0")}

    def _put_member(self, txn, group: str, member: Member) -> None:
        self.db.put_json(txn, "members", f"{group}\0{member.member_id}", asdict(member))

    def _partition_count(self, txn, topic: str) -> int:
        doc = self.db.get_json(txn, "topics", topic)
        return 0 if doc is None else len(doc["partitions"])

    def _expire_and_rebalance(self, txn, doc: GroupDoc, members: dict[str, Member], assign: AssignFn | None) -> bool:
        """Expire dead members and rebalance if membership or partition counts changed; True if it did."""
        now = self.clock()
        for mid in [mid for mid, m in members.items() if not m.alive(now)]:
            self._remove_member(txn, doc, members, mid)
        counts = {t: self._partition_count(txn, t) for m in members.values() for t in m.topics}
        if set(doc.targets) == set(members) and counts == doc.partition_counts:
            return False
        doc.generation += 1
        doc.rebalance_ms = now
        doc.partition_counts = counts
        if not members:
            doc.targets = {}
            doc.empty_ms = now
            return True
        assert assign is not None and doc.assignor is not None
        subs = {mid: m.topics for mid, m in members.items()}
        current = {mid: doc.target(mid) for mid in members}
        targets = assign(doc.assignor, subs, counts, current)
        doc.targets = {mid: [list(tp) for tp in sorted(targets.get(mid, []))] for mid in members}
        # a partition that no longer exists (topic deleted) has no owner to wait for
        doc.owners = {k: m for k, m in doc.owners.items() if key_tp(k)[1] < counts.get(key_tp(k)[0], 0)}
        return True

    def _remove_member(self, txn, doc: GroupDoc, members: dict[str, Member], member_id: str) -> None:
        members.pop(member_id, None)
        self.db.delete(txn, "members", f"{doc.group}\0{member_id}")
        doc.owners = {k: m for k, m in doc.owners.items() if m != member_id}

    def _save(self, txn, doc: GroupDoc, members: dict[str, Member]) -> None:
        # what everything else rests on: owners are members, and a member synced to this generation
        # holds only its own targets (one that has not synced yet still holds what it had)
        assert all(m in members for m in doc.owners.values()), (doc.owners, list(members))
        assert all(key_tp(k) in doc.target(m) for k, m in doc.owners.items()
                   if members[m].generation == doc.generation), doc
        self.db.put_json(txn, "groups", doc.group, asdict(doc))

    def _member_or_raise(self, doc: GroupDoc | None, members: dict[str, Member], group: str,
                         member_id: str) -> Member:
        member = members.get(member_id) if doc is not None else None
        if member is None:
            raise UnknownMemberError(f"member {member_id} is no longer in group '{group}' (its session expired "
                                     "or it left); it must rejoin")
        return member

    def _write_offsets(self, txn, group: str, offsets: dict[TP, tuple[int, str]], now: int,
                       negative_ok: bool = False) -> None:
        for tp, (offset, metadata) in offsets.items():
            if offset < 0 and not negative_ok:
                raise UsageError(f"cannot commit negative offset {offset} for {tp[0]}-{tp[1]}")
            self.db.put_json(txn, "offsets", _offset_key(group, tp),
                             {"offset": offset, "metadata": metadata, "commit_ms": now})

    def write_offsets(self, txn, group: str, offsets: dict[TP, tuple[int, str]], now: int) -> None:
        """Commit offsets inside the caller's LMDB write: a transaction's commit makes the offsets it
        staged visible in the same write that completes it (klog.broker.txn_coordinator). Negative
        offsets too, as OffsetCommit stores them: staged, then refused here, one left the
        transaction PrepareCommit for good."""
        self._write_offsets(txn, group, offsets, now, negative_ok=True)

    # -- a member's life ------------------------------------------------------------------------
    def join(self, group: str, member: Member, assign: AssignFn) -> GroupView:
        validate_group_id(group)
        with self.db.txn(write=True) as txn:
            doc = self._doc(txn, group) or GroupDoc(group, created_ms=self.clock())
            members = self._members(txn, group)
            now = self.clock()
            live = {mid: m for mid, m in members.items() if m.alive(now)}
            served = [m for m in live.values() if m.served_by is not None]
            if served:
                raise GroupError(f"group '{group}' has {len(served)} Kafka client member(s) coordinated by "
                                 f"{served[0].served_by}; a klog consumer cannot join it while they are live")
            if live and doc.assignor is not None and doc.assignor != member.assignor:
                raise GroupError(f"group '{group}' uses assignor '{doc.assignor}' but this consumer asked for "
                                 f"'{member.assignor}' (Kafka: inconsistent group protocol)")
            if not live:
                doc.assignor = member.assignor
                doc.served_by = None
            members[member.member_id] = member
            doc.empty_ms = None
            self._put_member(txn, group, member)
            self._expire_and_rebalance(txn, doc, members, assign)
            self._save(txn, doc, members)
            return GroupView(doc.generation, doc.target(member.member_id), doc.owned_by(member.member_id))

    def heartbeat(self, group: str, member_id: str, assign: AssignFn) -> GroupView:
        """Prove this member alive; expire dead ones and rebalance as needed. Raises UnknownMemberError."""
        with self.db.txn(write=True) as txn:
            doc = self._doc(txn, group)
            members = self._members(txn, group)
            member = self._member_or_raise(doc, members, group, member_id)
            member.heartbeat_ms = self.clock()
            self._put_member(txn, group, member)
            self._expire_and_rebalance(txn, doc, members, assign)
            self._member_or_raise(doc, members, group, member_id)
            self._save(txn, doc, members)
            return GroupView(doc.generation, doc.target(member_id), doc.owned_by(member_id))

    def peek(self, group: str) -> GroupDoc | None:
        """The group's state, read-only (cheap enough to check on every poll)."""
        with self.db.txn() as txn:
            return self._doc(txn, group)

    def peek_generation(self, group: str) -> int:
        doc = self.peek(group)
        return 0 if doc is None else doc.generation

    def sync(self, group: str, member_id: str, generation: int, assign: AssignFn,
             commits: dict[TP, tuple[int, str]] | None = None, release: list[TP] = (),
             acquire: list[TP] = ()) -> GroupView:
        """One step of a rebalance: commit and release what the member gives up, take what is free.

        Commits here come from a live member for partitions it still owns, so they are accepted even
        though the generation moved on (this is how a member commits before handing partitions over).
        `acquire` is honoured only if `generation` is still current.
        """
        with self.db.txn(write=True) as txn:
            doc = self._doc(txn, group)
            members = self._members(txn, group)
            member = self._member_or_raise(doc, members, group, member_id)
            member.heartbeat_ms = self.clock()
            self._expire_and_rebalance(txn, doc, members, assign)
            self._member_or_raise(doc, members, group, member_id)
            if commits:
                self._check_owner(doc, member_id, list(commits))
                self._write_offsets(txn, group, commits, self.clock())
            for tp in release:
                if doc.owners.get(tp_key(tp)) == member_id:
                    del doc.owners[tp_key(tp)]
            acquired = []
            if generation == doc.generation:
                member.generation = generation
                target = set(doc.target(member_id))
                for tp in acquire:
                    if tp in target and doc.owners.get(tp_key(tp)) in (None, member_id):
                        doc.owners[tp_key(tp)] = member_id
                        acquired.append(tp)
            self._put_member(txn, group, member)
            self._save(txn, doc, members)
            committed = {tp: c for tp in acquired if (c := self._committed(txn, group, tp)) is not None}
            return GroupView(doc.generation, doc.target(member_id), doc.owned_by(member_id), acquired, committed)

    def _check_owner(self, doc: GroupDoc, member_id: str, tps: list[TP]) -> None:
        for tp in tps:
            if doc.owners.get(tp_key(tp)) != member_id:
                raise GroupFencedError(f"commit rejected: {tp[0]}-{tp[1]} is not held by member {member_id} "
                                       f"of group '{doc.group}' (it was reassigned)")

    def commit(self, group: str, member_id: str, generation: int, offsets: dict[TP, tuple[int, str]]) -> None:
        """Store offsets; refused (GroupFencedError) from an old generation or for a partition not held."""
        with self.db.txn(write=True) as txn:
            doc = self._doc(txn, group)
            members = self._members(txn, group)
            member = members.get(member_id) if doc is not None else None
            if member is None:
                raise GroupFencedError(f"commit rejected: member {member_id} is no longer in group '{group}' "
                                       "(its session expired or it left)")
            if generation != doc.generation:
                raise GroupFencedError(f"commit rejected: generation {generation} of group '{group}' is fenced "
                                       f"(the group is at generation {doc.generation} after a rebalance)")
            self._check_owner(doc, member_id, list(offsets))
            now = self.clock()
            member.heartbeat_ms = now
            self._put_member(txn, group, member)
            self._write_offsets(txn, group, offsets, now)

    def leave(self, group: str, member_id: str, assign: AssignFn,
              commits: dict[TP, tuple[int, str]] | None = None) -> None:
        """Clean leave: commit (if given), give up every partition, rebalance the rest at once."""
        with self.db.txn(write=True) as txn:
            doc = self._doc(txn, group)
            members = self._members(txn, group)
            if doc is None or member_id not in members:
                return  # already expired: nothing to give back, and its commits would be fenced
            if commits:
                self._check_owner(doc, member_id, list(commits))
                self._write_offsets(txn, group, commits, self.clock())
            self._remove_member(txn, doc, members, member_id)
            self._expire_and_rebalance(txn, doc, members, assign)
            self._save(txn, doc, members)

    # -- offsets ----------------------------------------------------------------------------------
    def _committed(self, txn, group: str, tp: TP) -> CommittedOffset | None:
        raw = self.db.get_json(txn, "offsets", _offset_key(group, tp))
        return None if raw is None else CommittedOffset(raw["offset"], raw.get("metadata", ""), raw["commit_ms"])

    def committed(self, group: str) -> dict[TP, CommittedOffset]:
        with self.db.txn() as txn:
            return self._all_offsets(txn, group)

    def _all_offsets(self, txn, group: str) -> dict[TP, CommittedOffset]:
        out = {}
        for key, raw in self.db.items(txn, "offsets", group + "\0"):
            _, topic, p = key.split("\0")
            out[(topic, int(p))] = CommittedOffset(raw["offset"], raw.get("metadata", ""), raw["commit_ms"])
        return out

    # -- expiry (Kafka's offsets.retention.minutes, KIP-211) ------------------------------------------
    def expire_offsets(self, retention_ms: int, *, held: Mapping[str, Iterable[str] | None] | None = None,
                       groups: Iterable[str] | None = None) -> list[ExpiredOffsets]:
        """Delete the committed offsets that Kafka's offset expiry would delete now (self.clock()):

        - a group with members in this store (klog consumers, or a server's Kafka clients), or in `held`
          (a server's in-memory groups: group -> its Stable subscription, None while unknown): only
          offsets of topics the Stable group does not subscribe to, `retention_ms` after their commit;
        - an Empty group (it had members: a group document) loses all its offsets together,
          `retention_ms` after it became Empty (or after its last commit, if that came later);
        - offsets alone (standalone commits, `klog groups reset-offsets` of a new group, Kafka
          clients with manual assignment): each `retention_ms` after its commit.

        An Empty group left without offsets is removed (Kafka: Dead), so it is no longer listed.
        One LMDB write transaction per group; returns the groups changed."""
        if retention_ms < 0:
            raise UsageError(f"offsets.retention.minutes must not be negative ({retention_ms} ms)")
        held = {} if held is None else {g: None if t is None else set(t) for g, t in held.items()}
        out = []
        for group in sorted(set(self.group_ids() if groups is None else groups)):
            with self.db.txn(write=True) as txn:
                result = self._expire_group(txn, group, retention_ms, held)
            if result is not None:
                out.append(result)
        return out

    def _expire_group(self, txn, group: str, retention_ms: int,
                      held: dict[str, set[str] | None]) -> ExpiredOffsets | None:
        now = self.clock()
        doc = self._doc(txn, group)
        members = self._members(txn, group)
        offsets = self._all_offsets(txn, group)
        live = [m for m in members.values() if m.alive(now)]
        in_use = bool(live) or group in held
        if in_use:
            subscribed = held[group] if group in held else self._stable_subscription(doc, members, live)
            if subscribed is None:
                return None
            due = [tp for tp, c in offsets.items() if tp[0] not in subscribed and c.commit_ms + retention_ms <= now]
        elif doc is not None:
            if doc.empty_ms is None:  # first seen Empty (its last member was killed, or an older store): from now
                doc.empty_ms = now
                self.db.put_json(txn, "groups", group, asdict(doc))
            since = max([doc.empty_ms, *(c.commit_ms for c in offsets.values())])
            due = list(offsets) if since + retention_ms <= now else []
        else:
            due = [tp for tp, c in offsets.items() if c.commit_ms + retention_ms <= now]
        for tp in due:
            self.db.delete(txn, "offsets", _offset_key(group, tp))
        removed = not in_use and doc is not None and len(due) == len(offsets)
        if removed:
            for mid in members:  # dead ones: the group is gone with them
                self.db.delete(txn, "members", f"{group}\0{mid}")
            self.db.delete(txn, "groups", group)
        if not due and not removed:
            return None
        return ExpiredOffsets(group, sorted(due), removed)

    def _stable_subscription(self, doc: GroupDoc | None, members: dict[str, Member],
                             live: list[Member]) -> set[str] | None:
        """Topics a Stable group of klog consumers reads; None when unknown (rebalancing, or a server's
        Kafka clients, whose subscription only that server knows)."""
        if doc is None or any(m.served_by is not None for m in live):
            return None
        snap = GroupSnapshot(doc, list(members.values()), live, {})
        if snap.state != "Stable":
            return None
        return {t for m in live for t in m.topics}

    # -- Kafka-client groups coordinated by klog serve ----------------------------------------------
    def local_live_members(self, group: str) -> list[Member]:
        """Live members of klog's own group consumers (not Kafka clients of a server)."""
        with self.db.txn() as txn:
            now = self.clock()
            return [m for m in self._members(txn, group).values() if m.served_by is None and m.alive(now)]

    def publish_served(self, group: str, served_by: str, generation: int, protocol: str | None,
                       members: list[Member], targets: dict[str, list[TP]] | None, *,
                       protocol_type: str | None = None, leader: str | None = None) -> None:
        """klog serve's record of a group it coordinates in memory, where `klog groups` reads groups:
        its members (live while the server process is) and, once stable (`targets` not None), who
        holds which partition. Members of klog's own consumers are left alone."""
        with self.db.txn(write=True) as txn:
            doc = self._doc(txn, group)
            if doc is None:
                if not members:
                    return  # nothing to show, and no group to create
                doc = GroupDoc(group, created_ms=self.clock())
            now = self.clock()
            for mid, m in self._members(txn, group).items():
                if m.served_by is not None or not m.alive(now):
                    self.db.delete(txn, "members", f"{group}\0{mid}")
            for m in members:
                self._put_member(txn, group, m)
            if doc.generation != generation:
                doc.rebalance_ms = now
            doc.generation = generation
            doc.assignor = protocol
            doc.protocol_type, doc.leader = protocol_type, leader
            doc.served_by = served_by if members else None
            if members:
                doc.empty_ms = None
            elif doc.empty_ms is None:
                doc.empty_ms = now
            stable = targets or {}
            doc.targets = {mid: [list(tp) for tp in sorted(stable.get(mid, []))] for mid in stable}
            doc.owners = {tp_key(tp): mid for mid, tps in stable.items() for tp in tps}
            doc.partition_counts = {}
            self.db.put_json(txn, "groups", group, asdict(doc))

    def store_offsets(self, group: str, offsets: dict[TP, tuple[int, str]], commit_ms: int | None = None,
                      negative_ok: bool = False) -> None:
        """Offsets committed by a Kafka client (the server has checked its member and generation);
        refused (GroupError) while klog's own consumers are live in the group."""
        validate_group_id(group)
        with self.db.txn(write=True) as txn:
            now = self.clock()
            live = [m for m in self._members(txn, group).values() if m.served_by is None and m.alive(now)]
            if live:
                raise GroupError(f"group '{group}' has {len(live)} live klog consumer(s)")
            # negative_ok: a Kafka client's commit, stored as Kafka stores it (-1 "no position", or a
            # client's reset marker); klog's own consumers read a negative one as no committed offset
            self._write_offsets(txn, group, offsets, now if commit_ms is None else commit_ms, negative_ok)

    # -- admin ------------------------------------------------------------------------------------
    def snapshot(self, group: str) -> GroupSnapshot:
        with self.db.txn() as txn:
            doc = self._doc(txn, group)
            members = list(self._members(txn, group).values())
            offsets = self._all_offsets(txn, group)
        now = self.clock()
        return GroupSnapshot(doc, members, [m for m in members if m.alive(now)], offsets)

    def raw_offsets(self) -> list[tuple[str, str, int, bytes]]:
        """Every committed offset as (group, topic, partition, its stored JSON), in one read: for a
        caller that caches what it derives per stored value (klog.broker.offsets_topic)."""
        with self.db.txn() as txn:
            out = []
            for key, raw in self.db.items_raw(txn, "offsets"):
                group, topic, p = key.split("\0")
                out.append((group, topic, int(p), raw))
            return out

    def changes_since(self, after: int) -> GroupChanges:
        """What changed in groups and offsets after LMDB transaction `after` (klog.meta.change_log),
        with the changed offsets' stored JSON and the changed groups, in one read."""
        with self.db.txn() as txn:
            changes = read_changes(self.db, txn, after)
            out = GroupChanges(changes.upto, changes.complete)
            if not changes.complete:
                return out
            for key in changes.keys["offsets"]:
                group, topic, p = key.split("\0")
                out.offsets[(group, topic, int(p))] = self.db.get_raw(txn, "offsets", key)
            for group in changes.keys["groups"] | {k.split("\0", 1)[0] for k in changes.keys["members"]}:
                doc = self._doc(txn, group)
                out.groups[group] = None if doc is None else (doc, list(self._members(txn, group).values()))
            return out

    def forget_changes(self, upto: int) -> None:
        """Drop the change log's entries up to LMDB transaction `upto`, applied by its reader."""
        with self.db.txn(write=True) as txn:
            drop_through(self.db, txn, upto)

    def groups_with_members(self) -> list[tuple[GroupDoc, list[Member]]]:
        """Every group document with its members (live or not), in one read."""
        with self.db.txn() as txn:
            docs = [GroupDoc(**raw) for _, raw in self.db.items(txn, "groups")]
            return [(doc, list(self._members(txn, doc.group).values())) for doc in docs]

    def group_ids(self) -> list[str]:
        with self.db.txn() as txn:
            names = {k for k, _ in self.db.items(txn, "groups")}
            names |= {k.split("\0", 1)[0] for k, _ in self.db.items(txn, "offsets")}
        return sorted(names)

    def _refuse_if_live(self, txn, group: str, what: str, topic: str | None = None) -> None:
        now = self.clock()
        live = [m for m in self._members(txn, group).values() if m.alive(now) and (topic is None or topic in m.topics)]
        if live:
            who = ", ".join(f"{m.member_id} (Kafka client {m.client_id} at {m.host} via {m.served_by})"
                            if m.served_by else f"{m.member_id} (pid {m.pid} on {m.host})" for m in live[:3])
            raise GroupError(f"cannot {what}: group '{group}' has {len(live)} live member(s): {who}; "
                             "stop them first")

    def set_offsets(self, group: str, offsets: dict[TP, int]) -> None:
        """Admin write of committed offsets (reset-offsets --execute); refused while members are live."""
        validate_group_id(group)
        with self.db.txn(write=True) as txn:
            self._refuse_if_live(txn, group, "reset offsets")
            self._write_offsets(txn, group, {tp: (o, "") for tp, o in offsets.items()}, self.clock())

    def delete_group(self, group: str) -> int:
        """Delete the group, its (dead) members and its offsets; returns how many offsets went."""
        with self.db.txn(write=True) as txn:
            self._refuse_if_live(txn, group, "delete it")
            offsets = [k for k, _ in self.db.items(txn, "offsets", group + "\0")]
            found = self.db.get_json(txn, "groups", group) is not None or bool(offsets)
            if not found:
                raise GroupError(f"unknown group '{group}'")
            for k in offsets:
                self.db.delete(txn, "offsets", k)
            for k in [k for k, _ in self.db.items(txn, "members", group + "\0")]:
                self.db.delete(txn, "members", k)
            self.db.delete(txn, "groups", group)
        return len(offsets)

    def delete_offsets(self, group: str, topic: str, partitions: list[int] | None) -> list[TP]:
        """Delete a topic's committed offsets (some partitions or all); refused while a live member reads it."""
        with self.db.txn(write=True) as txn:
            self._refuse_if_live(txn, group, f"delete offsets of topic '{topic}'", topic)
            gone = []
            for tp in self._all_offsets(txn, group):
                if tp[0] == topic and (partitions is None or tp[1] in partitions):
                    self.db.delete(txn, "offsets", _offset_key(group, tp))
                    gone.append(tp)
        return gone

"""Kafka's classic group coordinator as a pure state machine: no sockets, no threads, no sleeping.

Time comes from an injected clock (milliseconds); the server calls `tick()` when `next_deadline()`
is due. Replies to JoinGroup and SyncGroup are delayed until the rebalance gets there, so they are
given as callbacks (`respond(result)`), called exactly once each.

States (Kafka's names): Empty -> PreparingRebalance (members (re-)join; ends when every known member
has, or at the rebalance timeout) -> CompletingRebalance (the leader computes the assignment
client-side and sends it in SyncGroup) -> Stable. Heartbeats answer REBALANCE_IN_PROGRESS while a
rebalance is under way, which makes clients re-join; a member silent past its session timeout is
expelled and the others rebalance. Offsets are not kept here (the server stores them in LMDB): the
coordinator only says whether a commit from (member, generation) is acceptable.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from klog.protocol.kafka import E
from klog.server.limits import CLIENT_SHARE_DEFAULT, AddressShares, is_address_key, share_of

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"

# Kafka's broker defaults (group.min/max.session.timeout.ms, group.initial.rebalance.delay.ms)
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
INITIAL_REBALANCE_DELAY_MS = 3_000
GROUP_ID_CHARS_MAX = 255
# Kafka's group.max.size (unbounded there for classic groups): members and member ids handed out but
# not yet joined, per group. A bound: each member's subscription goes back to the leader in every
# rebalance, so one client joining thousands of times makes every JoinGroup answer huge
GROUP_MAX_SIZE = 1000
# The member data (JoinGroup's protocols, SyncGroup's assignments) a group, and all groups of the
# node, may hold: what clients send stays in memory (and in LMDB, and in each JoinGroup answer to the
# leader) while they are members. Kafka's bound is its group record's (message.max.bytes, 1 MiB, of
# the protocol chosen: a larger group cannot be stored, its SyncGroup fails); here every protocol
# counts. Without it 200 members of 500 KB made the server 1 GB and stalled every client 1.8 s.
GROUP_METADATA_MAX_BYTES = 4 << 20
# A member id handed out (MEMBER_ID_REQUIRED) is forgotten after the member's session timeout, as in
# Kafka, or this if sooner: a client sends its JoinGroup again at once, and one client handing out ids
# in new groups with 30-minute sessions held 800 B per group for 30 minutes (1 GB per ~1,000 joins/s)
PENDING_MEMBER_MAX_MS = 60_000
METADATA_MAX_BYTES = 128 << 20
# What one principal's members (and member ids handed out to it) may hold of METADATA_MAX_BYTES: one
# user filling the node's 128 MiB with its own groups had every other user's JoinGroup refused. Its
# share (klog serve --client-share, a quarter by default): a principal over it is refused as the
# node's bound refuses (COORDINATOR_NOT_AVAILABLE: clients retry), and three others can each still
# take as much. (Kafka has no such bound: its group metadata goes to __consumer_offsets, on disk.)
# "Principal" here is the share key (RequestContext.share_key): an unauthenticated client's address.
PRINCIPAL_METADATA_MAX_BYTES = share_of(METADATA_MAX_BYTES, CLIENT_SHARE_DEFAULT)
# The members and member ids handed out one principal may have, in all its groups, its share of this:
# the bytes above count what clients send, but each member costs the server ~600 B more of its own
# (~220 B an id handed out), so 32 MiB of empty subscriptions held 760,000 members (445 MB). 20,000
# (a quarter) is 12 MB.
MEMBERS_POOL = 80_000
PRINCIPAL_MEMBERS_MAX = share_of(MEMBERS_POOL, CLIENT_SHARE_DEFAULT)
# The groups one principal may bring into being on this node (a JoinGroup of a group it does not
# hold) that it still holds, its share of this: a group its members left stays in memory (~1.3 KB)
# until the offset expiry pass finds it without offsets, for offsets.retention.minutes (7 days) if it
# has some, so a client joining, committing to and leaving new groups grew the server for good.
# 20,000 (a quarter) is 26 MB.
GROUPS_POOL = 80_000
PRINCIPAL_GROUPS_MAX = share_of(GROUPS_POOL, CLIENT_SHARE_DEFAULT)
# the pools' names in AddressShares (and its refusals' log lines)
MEMBER_DATA, MEMBERS, GROUPS = "bytes of member data", "members and member ids handed out", "groups held"


def principal_bounds(share: float) -> dict[str, int]:
    """GroupStateMachine's bounds of one principal (share key) at `share` of each pool."""
    return {"principal_metadata_max_bytes": share_of(METADATA_MAX_BYTES, share),
            "principal_members_max": share_of(MEMBERS_POOL, share),
            "principal_groups_max": share_of(GROUPS_POOL, share)}


@dataclass(frozen=True)
class JoinResult:
    error: E
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only
    reason: str = ""  # why it was refused, for the server's log line (JoinGroup answers carry no message)


@dataclass(frozen=True)
class SyncResult:
    error: E
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass
class GroupMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # in the member's order of preference
    assignment: bytes = b""
    joined: int = 0  # clock time it joined
    deadline: int = 0  # expelled when the clock passes this (unless awaiting a join or sync reply)
    join_cb: JoinCallback | None = None
    sync_cb: SyncCallback | None = None
    # whose budget the member's bytes count in (PRINCIPAL_METADATA_MAX_BYTES): its protocols and ids
    # the principal that last sent its JoinGroup, its assignment the principal of the leader that sent it
    principal: str = ""
    assignment_principal: str = ""

    def metadata(self, protocol: str) -> bytes:
        return next(m for n, m in self.protocols if n == protocol)

    def names(self) -> list[str]:
        return [n for n, _ in self.protocols]


class PendingMember(NamedTuple):
    """A member id handed out (MEMBER_ID_REQUIRED) and not yet joined."""

    deadline: int  # forgotten then
    principal: str  # whose budget its bytes count in


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, GroupMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending: dict[str, PendingMember] = field(default_factory=dict)  # member ids handed out, not yet joined
    join_deadline: int | None = None  # when PreparingRebalance ends whoever has re-joined
    # members of the generation that have not sent SyncGroup yet, and when they are removed for it
    # (Kafka's pending sync: a member that joins and never syncs would hold the group in
    # CompletingRebalance for ever, heartbeating, while the others wait in SyncGroup)
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline: int | None = None
    initial_delay: bool = False  # a new group waits a little for more members before its first generation
    scheduled: int | None = None  # the time of its live entry in GroupStateMachine's timer heap
    metadata_bytes: int = 0  # the members' protocols, assignments and ids (GROUP_METADATA_MAX_BYTES)
    # protocol name -> members offering it: a join's check is then the joiner's protocols, not every
    # member's (1,000 members joining cost 1.2 s of the event loop in set intersections)
    supporters: dict[str, int] = field(default_factory=dict)
    creator: str = ""  # the principal whose JoinGroup brought it into being (PRINCIPAL_GROUPS_MAX)

    def protocols(self) -> set[str]:
        """Protocols every member supports."""
        return {n for n, count in self.supporters.items() if count == len(self.members)} if self.members else set()

    def supports_any(self, names: list[str]) -> bool:
        return any(self.supporters.get(n) == len(self.members) for n in names)

    def count_protocols(self, protocols: list[tuple[str, bytes]], sign: int) -> None:
        for name in {n for n, _ in protocols}:
            count = self.supporters.get(name, 0) + sign
            if count:
                self.supporters[name] = count
            else:
                del self.supporters[name]

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol among those all support."""
        candidates = self.protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n in m.names() if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    def all_joined(self) -> bool:
        """Every member re-joined and no member id handed out is still to come back (Kafka's rule)."""
        return not self.pending and all(m.join_cb is not None for m in self.members.values())


class GroupStateMachine:
    """Every classic group of this node, in memory. Not thread-safe: call from one thread (the loop)."""

    def __init__(self, clock: Callable[[], int], *, min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS,
                 initial_rebalance_delay_ms: int = INITIAL_REBALANCE_DELAY_MS,
                 on_change: Callable[[Group], None] | None = None,
                 log: Callable[[str], None] | None = None, max_size: int = GROUP_MAX_SIZE,
                 group_metadata_max_bytes: int = GROUP_METADATA_MAX_BYTES,
                 metadata_max_bytes: int = METADATA_MAX_BYTES,
                 principal_metadata_max_bytes: int = PRINCIPAL_METADATA_MAX_BYTES,
                 principal_members_max: int = PRINCIPAL_MEMBERS_MAX,
                 principal_groups_max: int = PRINCIPAL_GROUPS_MAX, members_max: int = MEMBERS_POOL,
                 groups_max: int = GROUPS_POOL, addresses: AddressShares | None = None) -> None:
        self.clock = clock
        self.max_size = max_size
        self.group_metadata_max_bytes = group_metadata_max_bytes
        self.metadata_max_bytes = metadata_max_bytes
        self.principal_metadata_max_bytes = principal_metadata_max_bytes
        self.principal_members_max = principal_members_max
        self.principal_groups_max = principal_groups_max
        # the pools themselves bound the node: without them clients from ever new addresses (each a
        # share key where clients do not authenticate) would each bring a share
        self.members_max = members_max
        self.groups_max = groups_max
        # every unauthenticated client's together: at most the pools less one share where some
        # listener authenticates (shared with the server's other pools)
        self.addresses = addresses or AddressShares()
        self.members = 0  # every group's members and member ids handed out
        self.metadata_bytes = 0  # every group's
        self.principal_bytes: dict[str, int] = {}  # principal -> what its members hold (absent: nothing)
        self.principal_members: dict[str, int] = {}  # principal -> its members and ids handed out (absent: none)
        self.principal_groups: dict[str, int] = {}  # principal -> the groups held that it brought into being
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.on_change = on_change or (lambda group: None)
        self.log = log or (lambda text: None)  # one line per rebalance and per expelled member
        self.groups: dict[str, Group] = {}
        # (time, group id): when each group next has a deadline; entries whose time is no longer the
        # group's `scheduled` are stale and skipped. The timer looks at due groups only: a scan of
        # every group on each change made 6,000 groups cost 40 s of CPU to create
        self._due: list[tuple[int, str]] = []

    # -- JoinGroup ---------------------------------------------------------------------------------
    def join(self, group_id: str, member_id: str, instance_id: str | None, *, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool, respond: JoinCallback,
             principal: str = "") -> None:
        """`principal`: the caller's (its members' bytes count in its share, PRINCIPAL_METADATA_MAX_BYTES)."""
        if not group_id or len(group_id) > GROUP_ID_CHARS_MAX:
            return respond(JoinResult(E.invalid_group_id, member_id=member_id))
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return respond(JoinResult(E.invalid_session_timeout, member_id=member_id))
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms
        if not protocol_type or not protocols:
            return respond(JoinResult(E.inconsistent_group_protocol, member_id=member_id))
        group = self.groups.get(group_id)
        if group is None and member_id:  # a member id from a group this node does not know (e.g. a restart)
            return respond(JoinResult(E.unknown_member_id, member_id=member_id))
        refusal = self._metadata_refusal(group, member_id, instance_id, client_id, protocols, principal)
        if refusal is not None:  # (Kafka answers GROUP_MAX_SIZE_REACHED without a member id)
            error, reason = refusal
            respond(JoinResult(error, member_id="" if error is E.group_max_size_reached else member_id,
                               reason=reason))
            if group is not None and self._drop_pending(group, member_id):
                self._maybe_complete_join(group)  # Kafka removes the member: nobody waits for it
                self._changed(group)
            return None
        if group is None:
            refused = self._groups_refusal(principal)
            if refused is not None:
                return respond(JoinResult(E.coordinator_not_available, member_id=member_id, reason=refused))
            group = self._create(group_id, principal)
        if group.members and (group.protocol_type != protocol_type
                              or not group.supports_any([n for n, _ in protocols])):
            return respond(JoinResult(E.inconsistent_group_protocol, member_id=member_id))
        now = self.clock()
        # the join as a member not yet in the group (no callbacks, not joined)
        new = GroupMember(member_id, instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                          protocol_type, list(protocols), principal=principal)
        if not member_id:
            self._join_unknown(group, new, require_known_member_id, respond, now)
        else:
            self._join_known(group, new, respond, now)
        self._changed(group)

    def _metadata_refusal(self, group: Group | None, member_id: str, instance_id: str | None, client_id: str,
                          protocols: list[tuple[str, bytes]], principal: str) -> tuple[E, str] | None:
        """GROUP_MAX_SIZE_REACHED (the client gives up, as for a full group) for a join that would take
        the group past its metadata bytes; COORDINATOR_NOT_AVAILABLE (the client retries) past the node's,
        or past the principal's share of them. (The handler logs the refusal, with its reason: one line.)"""
        held = None
        if group is not None:
            held = group.members.get(member_id) if member_id else \
                group.members.get(group.static.get(instance_id, "")) if instance_id is not None else None
        if held is not None:  # its bytes move to this principal's share if another one sent them
            grows = _protocols_size(protocols) - _protocols_size(held.protocols)
            if held.principal == principal:
                return self._bytes_refusal(group, grows, principal)
            return self._bytes_refusal(group, grows, principal, _own_size(held) + grows, members=1,
                                       moved_from=(held.principal, _own_size(held)))
        # a new member: its ids too (a member id is the client id and a UUID: 32 KB client ids made
        # 1,000 members hold 64 MB of ids)
        ids = (len(member_id) if member_id else len(client_id or "member") + 37) + len(client_id) + \
            len(instance_id or "")
        grows = _protocols_size(protocols) + ids
        pending = group.pending.get(member_id) if group is not None and member_id else None
        if pending is None:
            return self._bytes_refusal(group, grows, principal, members=1)
        # a member id handed out comes back: its bytes are held already
        if pending.principal == principal:
            return self._bytes_refusal(group, grows - len(member_id), principal)
        return self._bytes_refusal(group, grows - len(member_id), principal, grows, members=1,
                                   moved_from=(pending.principal, len(member_id)))

    def _bytes_refusal(self, group: Group | None, grows: int, principal: str, charged: int | None = None,
                       members: int = 0, moved_from: tuple[str, int] | None = None,
                       released: int = 0) -> tuple[E, str] | None:
        """The error and its reason if the group's, the node's or the principal's bytes would pass their
        bound: `grows` for the group and the node, `charged` (default: the same) for the principal; or
        if the principal's `members` more would pass its count; or every unauthenticated client's
        together (AddressShares). `moved_from`: the principal and bytes of the one member whose bytes
        (and count) move to this principal; `released`: bytes moving to it from other principals'
        assignments that unauthenticated clients held (what they give back, for their together)."""
        if grows > 0:
            if (group.metadata_bytes if group is not None else 0) + grows > self.group_metadata_max_bytes:
                return E.group_max_size_reached, f"the group's member data would pass its " \
                    f"{self.group_metadata_max_bytes} bytes"
            if self.metadata_bytes + grows > self.metadata_max_bytes:
                return E.coordinator_not_available, f"the member data of every group would pass the node's " \
                    f"{self.metadata_max_bytes} bytes"
        charged = grows if charged is None else charged
        held = self.principal_bytes.get(principal, 0)
        if charged > 0 and held + charged > self.principal_metadata_max_bytes:
            return E.coordinator_not_available, f"{principal or 'the caller'}'s members hold {held} bytes of " \
                f"member data, its share is {self.principal_metadata_max_bytes}"
        count = self.principal_members.get(principal, 0)
        if members > 0 and count + members > self.principal_members_max:
            return E.coordinator_not_available, f"{principal or 'the caller'} has {count} members and member " \
                f"ids handed out, at most {self.principal_members_max}"
        if members > 0 and self.members + members > self.members_max:
            return E.coordinator_not_available, f"every group's members and member ids handed out would pass " \
                f"the node's {self.members_max}"
        if moved_from is not None and is_address_key(moved_from[0]):
            released, members_released = released + moved_from[1], members
        else:
            members_released = 0
        together = self.addresses.refusal(MEMBER_DATA, principal, charged, self.metadata_max_bytes,
                                          self.principal_metadata_max_bytes, released) or \
            self.addresses.refusal(MEMBERS, principal, members, self.members_max, self.principal_members_max,
                                   members_released)
        return None if together is None else (E.coordinator_not_available, together)

    def _refuse_assignment(self, group: Group, refusal: tuple[E, str]) -> None:
        """A leader's assignment past the bytes: as Kafka when its group record is too large to store,
        every member waiting in SyncGroup gets the error (UNKNOWN_SERVER_ERROR for the group's bound)
        and the group rebalances."""
        error = E.unknown_server_error if refusal[0] is E.group_max_size_reached else refusal[0]
        self.log(f"group '{group.group_id}' generation {group.generation}: the leader's assignment refused "
                 f"({refusal[1]}): {error.name}, rebalancing")
        for m in group.members.values():
            if m.sync_cb is not None:
                cb, m.sync_cb = m.sync_cb, None
                cb(SyncResult(error))
        self._prepare_rebalance(group, self.clock())
        self._changed(group)

    def _account(self, group: Group, principal: str, size: int) -> None:
        group.metadata_bytes += size
        self.metadata_bytes += size
        self.addresses.add(MEMBER_DATA, principal, size)
        held = self.principal_bytes.get(principal, 0) + size
        if held:
            self.principal_bytes[principal] = held
        else:  # (a principal holding nothing is forgotten: the map is as large as the principals holding)
            self.principal_bytes.pop(principal, None)

    def _count(self, principal: str, members: int) -> None:
        self.members += members
        self.addresses.add(MEMBERS, principal, members)
        count = self.principal_members.get(principal, 0) + members
        if count:
            self.principal_members[principal] = count
        else:
            self.principal_members.pop(principal, None)

    def _hold(self, group: Group, member: GroupMember, sign: int) -> None:
        """Count a member in (sign 1) or out (-1): itself and its own bytes in its principal's, its
        assignment in the principal's that sent it."""
        self._count(member.principal, sign)
        self._account(group, member.principal, sign * _own_size(member))
        self._account(group, member.assignment_principal, sign * len(member.assignment))

    def _set_assignment(self, group: Group, member: GroupMember, assignment: bytes, principal: str) -> None:
        self._account(group, member.assignment_principal, -len(member.assignment))
        self._account(group, principal, len(assignment))
        member.assignment, member.assignment_principal = assignment, principal

    def _add_pending(self, group: Group, member_id: str, deadline: int, principal: str) -> None:
        group.pending[member_id] = PendingMember(deadline, principal)
        self._count(principal, 1)
        self._account(group, principal, len(member_id))

    def _drop_pending(self, group: Group, member_id: str) -> bool:
        """Forget a member id handed out; False if it was not one."""
        pending = group.pending.pop(member_id, None)
        if pending is None:
            return False
        self._count(pending.principal, -1)
        self._account(group, pending.principal, -len(member_id))
        return True

    def _join_unknown(self, group: Group, new: GroupMember, require_known: bool, respond: JoinCallback,
                      now: int) -> None:
        member_id = f"{new.client_id or 'member'}-{uuid.uuid4()}"
        if new.instance_id is not None and new.instance_id in group.static:
            return self._replace_static(group, new, member_id, respond, now)
        if len(group.members) + len(group.pending) >= self.max_size:
            self.log(f"group {group.group_id}: {self.max_size} members (group.max.size), refusing a new one")
            return respond(JoinResult(E.group_max_size_reached, member_id=""))
        if require_known and new.instance_id is None:
            # KIP-394: hand out the id first, so a client that retries after a timeout is not two members
            self._add_pending(group, member_id, now + min(new.session_timeout_ms, PENDING_MEMBER_MAX_MS),
                              new.principal)
            return respond(JoinResult(E.member_id_required, member_id=member_id))
        self._add_member(group, new, member_id, respond, now)

    def _join_known(self, group: Group, new: GroupMember, respond: JoinCallback, now: int) -> None:
        member_id = new.member_id
        if new.instance_id is not None and group.static.get(new.instance_id, member_id) != member_id:
            return respond(JoinResult(E.fenced_instance_id, member_id=member_id))
        if self._drop_pending(group, member_id):
            return self._add_member(group, new, member_id, respond, now)
        member = group.members.get(member_id)
        if member is None:
            return respond(JoinResult(E.unknown_member_id, member_id=member_id))
        changed = member.protocols != new.protocols
        self._count(member.principal, -1)
        self._account(group, member.principal, -_own_size(member))
        group.count_protocols(member.protocols, -1)
        group.count_protocols(new.protocols, 1)
        member.protocols, member.principal = new.protocols, new.principal
        self._count(member.principal, 1)
        self._account(group, member.principal, _own_size(member))
        member.session_timeout_ms, member.rebalance_timeout_ms = new.session_timeout_ms, new.rebalance_timeout_ms
        if group.state == PREPARING:
            self._replace_join_cb(member, respond)
            self._maybe_complete_join(group)
        elif group.state == COMPLETING and not changed:
            respond(self._join_result(group, member, with_members=member_id == group.leader))
        elif group.state == STABLE and not changed and member_id != group.leader:
            # a follower re-joining without change gets the current generation back (no rebalance)
            member.deadline = now + member.session_timeout_ms
            respond(self._join_result(group, member, with_members=False))
        else:
            member.join_cb = respond
            self._prepare_rebalance(group, now)

    def _replace_join_cb(self, member: GroupMember, respond: JoinCallback) -> None:
        if member.join_cb is not None:  # an earlier join of the same member: it gave up on that one
            member.join_cb(JoinResult(E.unknown_member_id, member_id=member.member_id))
        member.join_cb = respond

    def _add_member(self, group: Group, new: GroupMember, member_id: str, respond: JoinCallback, now: int) -> None:
        if not group.members:
            group.protocol_type = new.protocol_type
        member = replace(new, member_id=member_id, join_cb=respond, joined=now,
                         deadline=now + new.session_timeout_ms)
        group.members[member_id] = member
        self._hold(group, member, 1)
        group.count_protocols(member.protocols, 1)
        if new.instance_id is not None:
            group.static[new.instance_id] = member_id
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, now)

    def _replace_static(self, group: Group, new: GroupMember, member_id: str, respond: JoinCallback,
                        now: int) -> None:
        """A static member (group.instance.id) came back under a new member id: the old id is fenced;
        if nothing else changed the group keeps its assignment (KIP-345: no rebalance on restart)."""
        old = group.members.pop(group.static[new.instance_id])
        self._hold(group, old, -1)
        group.count_protocols(old.protocols, -1)
        group.pending_sync.discard(old.member_id)
        if old.join_cb is not None:
            old.join_cb(JoinResult(E.fenced_instance_id, member_id=old.member_id))
        if old.sync_cb is not None:
            old.sync_cb(SyncResult(E.fenced_instance_id))
        member = replace(new, member_id=member_id, assignment=old.assignment,
                         assignment_principal=old.assignment_principal, joined=now,
                         deadline=now + new.session_timeout_ms)
        group.members[member_id] = member
        self._hold(group, member, 1)
        group.count_protocols(member.protocols, 1)
        group.static[new.instance_id] = member_id
        if group.leader == old.member_id:
            group.leader = member_id
        if group.state == STABLE and old.protocols == new.protocols:
            # As Kafka does, the reply names the old leader id even if this member replaced the leader: a
            # client that believed itself leader would compute an assignment a stable group never sends.
            result = self._join_result(group, member, with_members=False)
            respond(replace(result, leader=old.member_id) if group.leader == member_id else result)
            return
        member.join_cb = respond
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, now)

    def _prepare_rebalance(self, group: Group, now: int) -> None:
        if group.state == COMPLETING:  # the assignment being computed is void: members must re-join
            for m in group.members.values():
                if m.sync_cb is not None:
                    cb, m.sync_cb = m.sync_cb, None
                    cb(SyncResult(E.rebalance_in_progress))
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.initial_delay = group.state == EMPTY and self.initial_rebalance_delay_ms > 0
        if group.initial_delay:
            timeout = min(timeout, self.initial_rebalance_delay_ms)
        group.state = PREPARING
        group.join_deadline = now + timeout
        self._clear_pending_sync(group)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == PREPARING and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End PreparingRebalance: drop members that did not re-join, start the next generation."""
        now = self.clock()
        for m in [m for m in group.members.values() if m.join_cb is None]:
            self.log(f"member {m.member_id} of group '{group.group_id}' did not re-join in time: removed")
            self._remove(group, m.member_id)
        group.join_deadline = None
        group.initial_delay = False
        group.generation += 1
        if not group.members:
            self._to_empty(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        self.log(f"group '{group.group_id}' generation {group.generation}: {len(group.members)} member(s), "
                 f"protocol {group.protocol_name}, leader {group.leader}")
        group.pending_sync = set(group.members)
        group.sync_deadline = now + max(m.rebalance_timeout_ms for m in group.members.values())
        for m in group.members.values():
            self._set_assignment(group, m, b"", m.assignment_principal)
            m.deadline = now + m.session_timeout_ms
            cb, m.join_cb = m.join_cb, None
            cb(self._join_result(group, m, with_members=m.member_id == group.leader))

    @staticmethod
    def _clear_pending_sync(group: Group) -> None:
        group.pending_sync.clear()
        group.sync_deadline = None

    def _expire_pending_sync(self, group: Group) -> None:
        """The rebalance timeout passed since the generation began: members that never sent SyncGroup
        are removed and the others rebalance (Kafka's onExpirePendingSync)."""
        late = sorted(group.pending_sync & group.members.keys())
        self._clear_pending_sync(group)
        self.log(f"member(s) {', '.join(late)} of group '{group.group_id}' sent no SyncGroup within the "
                 f"rebalance timeout: removed")
        for member_id in late:
            self._remove(group, member_id)
        if group.members:
            self._prepare_rebalance(group, self.clock())
        else:
            group.generation += 1
            self._to_empty(group)

    def _join_result(self, group: Group, member: GroupMember, with_members: bool) -> JoinResult:
        # only the leader's answer lists the members (built for every member, a rebalance of 1,000
        # members cost a million entries on the event loop)
        members = [(m.member_id, m.instance_id, m.metadata(group.protocol_name))
                   for m in group.members.values()] if with_members else []
        return JoinResult(E.none, group.generation, group.protocol_type, group.protocol_name, group.leader or "",
                          member.member_id, members)

    def _to_empty(self, group: Group) -> None:
        group.state = EMPTY
        group.leader = None
        group.protocol_name = None
        group.protocol_type = None
        group.join_deadline = None
        self._clear_pending_sync(group)

    # -- SyncGroup -----------------------------------------------------------------------------------
    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None, *,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             respond: SyncCallback, principal: str = "") -> None:
        """`principal`: the caller's (a leader's assignments count in its share)."""
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, instance_id)
        if error is not E.none:
            return respond(SyncResult(error))
        if generation != group.generation:
            return respond(SyncResult(E.illegal_generation))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return respond(SyncResult(E.inconsistent_group_protocol))
        member = group.members[member_id]
        if group.state == PREPARING:
            return respond(SyncResult(E.rebalance_in_progress))
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None
        if group.state == STABLE:
            member.deadline = self.clock() + member.session_timeout_ms
            return respond(self._sync_result(group, member))
        # CompletingRebalance: wait for the leader's assignment
        if member.sync_cb is not None:
            member.sync_cb(SyncResult(E.rebalance_in_progress))
        member.sync_cb = respond
        if member_id == group.leader:
            given = sum(len(assignments.get(mid, b"")) for mid in group.members)
            grows = given - sum(len(m.assignment) for m in group.members.values())
            charged = given - sum(len(m.assignment) for m in group.members.values()
                                  if m.assignment_principal == principal)
            released = sum(len(m.assignment) for m in group.members.values()
                           if m.assignment_principal != principal and is_address_key(m.assignment_principal))
            refusal = self._bytes_refusal(group, grows, principal, charged, released=released)
            if refusal is not None:
                return self._refuse_assignment(group, refusal)
            for mid, m in group.members.items():
                self._set_assignment(group, m, assignments.get(mid, b""), principal)
            group.state = STABLE
            now = self.clock()
            for m in group.members.values():
                if m.sync_cb is not None:
                    cb, m.sync_cb = m.sync_cb, None
                    m.deadline = now + m.session_timeout_ms
                    cb(self._sync_result(group, m))
            self._changed(group)

    def _sync_result(self, group: Group, member: GroupMember) -> SyncResult:
        return SyncResult(E.none, group.protocol_type, group.protocol_name, member.assignment)

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None) -> E:
        """Kafka's validateCurrentMember: a group.instance.id must be the static member's own (another
        member's: FENCED_INSTANCE_ID; one the group does not know: UNKNOWN_MEMBER_ID), and the member
        id one of the group's."""
        if group is None or group.state in (EMPTY, DEAD):
            return E.unknown_member_id
        if instance_id is not None and group.static.get(instance_id) != member_id:
            return E.fenced_instance_id if instance_id in group.static else E.unknown_member_id
        if member_id not in group.members:
            return E.unknown_member_id
        return E.none

    # -- Heartbeat, LeaveGroup, OffsetCommit checks ----------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> E:
        """Kafka's order: the member, then its generation, then the state (a stale generation is
        ILLEGAL_GENERATION in a rebalance too, and does not keep the member alive)."""
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, instance_id)
        if error is not E.none:
            return error
        if generation != group.generation:
            return E.illegal_generation
        member = group.members[member_id]
        member.deadline = self.clock() + member.session_timeout_ms
        return E.rebalance_in_progress if group.state == PREPARING else E.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[E, list[E]]:
        """Remove members (member id, or group.instance.id alone for a static member); the others
        rebalance. Kafka's handleLeaveGroup: a member id handed out and not yet joined leaves too
        (the rebalance no longer waits for it), and a group.instance.id is checked as in every request."""
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return E.unknown_member_id, [E.unknown_member_id] * len(members)
        errors = []
        for member_id, instance_id in members:
            if not member_id:
                member_id = group.static.get(instance_id, "") if instance_id is not None else ""
                instance_id = None
            if self._drop_pending(group, member_id):
                self._maybe_complete_join(group)
                errors.append(E.none)
                continue
            error = self._check_member(group, member_id, instance_id)
            if error is E.none:
                self._expel(group, member_id)
            errors.append(error)
        self._changed(group)
        return E.none, errors

    def check_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                     offset_commit: bool = False) -> E:
        """May (member, generation) commit offsets? Kafka's validateOffsetCommit: generation -1 (a
        consumer with manual assignment, or an admin client) may commit while the group is Empty or
        unknown; in an OffsetCommit (`offset_commit`), a generation for a group this node does not know
        is ILLEGAL_GENERATION (in a TxnOffsetCommit, UNKNOWN_MEMBER_ID: Kafka creates the group first);
        otherwise the member is checked, then the state and the generation (eager consumers commit
        before they give partitions up)."""
        group = self.groups.get(group_id)
        if group is None or group.state == EMPTY:
            if generation < 0:
                return E.none
            if group is None:  # (a TxnOffsetCommit makes the group first: then the member is unknown)
                return E.illegal_generation if offset_commit else E.unknown_member_id
        if generation < 0 and not member_id and instance_id is None:
            return E.unknown_member_id  # Kafka: only members commit to a group that has some
        error = self._check_member(group, member_id, instance_id)
        if error is not E.none:
            return error
        # the member has not got its new assignment yet (Kafka checks the generation first, and its
        # ILLEGAL_GENERATION fails a cooperative consumer's commit of the partitions it keeps)
        if group.state == COMPLETING:
            return E.rebalance_in_progress
        if generation != group.generation:  # in PreparingRebalance the old generation may still commit
            return E.illegal_generation
        member = group.members[member_id]
        member.deadline = self.clock() + member.session_timeout_ms  # a commit proves it alive too
        return E.none

    # -- timers --------------------------------------------------------------------------------------
    def _changed(self, group: Group) -> None:
        self._schedule(group)
        self.on_change(group)

    def _schedule(self, group: Group) -> None:
        """Put the group's next deadline in the timer heap if it is earlier than the one there (a later
        one, after a heartbeat, is found when the earlier entry comes due and the group is looked at)."""
        deadline = self._group_deadline(group)
        if deadline is not None and (group.scheduled is None or deadline < group.scheduled):
            group.scheduled = deadline
            heapq.heappush(self._due, (deadline, group.group_id))

    def _group_deadline(self, group: Group) -> int | None:
        times = [p.deadline for p in group.pending.values()]
        times.extend(t for t in (group.join_deadline, group.sync_deadline) if t is not None)
        times.extend(m.deadline for m in group.members.values() if not self._kept_alive(group, m))
        return min(times, default=None)

    def _live_entry(self, entry: tuple[int, str]) -> Group | None:
        group = self.groups.get(entry[1])
        return group if group is not None and group.scheduled == entry[0] else None

    def next_deadline(self) -> int | None:
        """The earliest time `tick()` has something to do (None: nothing scheduled)."""
        while self._due and self._live_entry(self._due[0]) is None:
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else None

    @staticmethod
    def _kept_alive(group: Group, member: GroupMember) -> bool:
        """A member waiting for our reply cannot heartbeat (Kafka does not expire it meanwhile)."""
        return member.join_cb is not None or member.sync_cb is not None

    def tick(self) -> None:
        """Act on the groups whose deadline has come (pending ids, sessions, rebalance timeouts)."""
        now = self.clock()
        due: list[Group] = []
        while self._due and self._due[0][0] <= now:
            group = self._live_entry(heapq.heappop(self._due))
            if group is not None:
                group.scheduled = None
                due.append(group)
        for group in due:
            self._tick_group(group, now)

    def _tick_group(self, group: Group, now: int) -> None:
        changed = False
        for mid in [mid for mid, p in group.pending.items() if p.deadline <= now]:
            self._drop_pending(group, mid)
            changed = True
        for m in [m for m in group.members.values() if m.deadline <= now and not self._kept_alive(group, m)]:
            self.log(f"member {m.member_id} of group '{group.group_id}' sent no heartbeat for "
                     f"{m.session_timeout_ms} ms: removed")
            self._expel(group, m.member_id)
            changed = True
        if group.sync_deadline is not None and group.sync_deadline <= now:
            if group.pending_sync & group.members.keys() and group.state in (COMPLETING, STABLE):
                self._expire_pending_sync(group)
                changed = True
            self._clear_pending_sync(group)
        if group.state == PREPARING and group.join_deadline is not None and group.join_deadline <= now:
            if group.initial_delay and not group.all_joined():
                # members still joining (a new group's first round): wait up to the rebalance timeout
                group.initial_delay = False
                timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
                group.join_deadline = now + max(0, timeout - self.initial_rebalance_delay_ms)
            else:
                self._complete_join(group)
            changed = True
        self._maybe_complete_join(group)
        if changed:
            self.on_change(group)
        self._schedule(group)
        if group.generation == 0 and group.state == EMPTY and not group.members and not group.pending:
            self.forget(group.group_id)  # only ever handed out member ids: nothing to remember

    def _expel(self, group: Group, member_id: str) -> None:
        """A member leaves (LeaveGroup or session expiry): the rest rebalance."""
        self._remove(group, member_id)
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        elif group.members:
            self._prepare_rebalance(group, self.clock())
        elif group.state != EMPTY:
            group.generation += 1
            self._to_empty(group)

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        group.pending_sync.discard(member_id)
        self._hold(group, member, -1)
        group.count_protocols(member.protocols, -1)
        if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        if member.join_cb is not None:
            member.join_cb(JoinResult(E.unknown_member_id, member_id=member_id))
        if member.sync_cb is not None:
            member.sync_cb(SyncResult(E.unknown_member_id))
        if group.leader == member_id:
            group.leader = next(iter(group.members), None)

    def seed_generation(self, group_id: str, generation: int, principal: str = "") -> None:
        """Start a group this node does not hold yet at a generation stored earlier (for `principal`'s
        JoinGroup: not past its PRINCIPAL_GROUPS_MAX, which the join then answers)."""
        if generation > 0 and group_id not in self.groups and self._groups_refusal(principal) is None:
            self._create(group_id, principal, generation)

    def _create(self, group_id: str, principal: str, generation: int = 0) -> Group:
        group = self.groups[group_id] = Group(group_id, generation=generation, creator=principal)
        self.principal_groups[principal] = self.principal_groups.get(principal, 0) + 1
        self.addresses.add(GROUPS, principal, 1)
        return group

    def _groups_refusal(self, principal: str) -> str | None:
        held = self.principal_groups.get(principal, 0)
        if held >= self.principal_groups_max:
            return f"{principal or 'the caller'} brought {held} of the groups held into being, at most " \
                f"{self.principal_groups_max}"
        if len(self.groups) >= self.groups_max:  # (every group held was brought into being by a JoinGroup)
            return f"the node holds {len(self.groups)} groups, at most {self.groups_max}"
        return self.addresses.refusal(GROUPS, principal, 1, self.groups_max, self.principal_groups_max)

    def forget(self, group_id: str) -> None:
        """Drop a group without members from memory (its ids handed out too)."""
        group = self.groups.pop(group_id)
        for member_id in list(group.pending):
            self._drop_pending(group, member_id)
        left = self.principal_groups.get(group.creator, 0) - 1
        self.addresses.add(GROUPS, group.creator, -1)
        if left > 0:
            self.principal_groups[group.creator] = left
        else:
            self.principal_groups.pop(group.creator, None)

    # -- admin ---------------------------------------------------------------------------------------
    def delete(self, group_id: str) -> E:
        """DeleteGroups: only a group without members (its offsets are the caller's to delete)."""
        group = self.groups.get(group_id)
        if group is not None and (group.members or group.state != EMPTY):  # Kafka: only an Empty group
            return E.non_empty_group
        if group is not None:
            self.forget(group_id)  # (an Empty group's ids handed out go too)
        return E.none

    def is_live(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def subscribed_topics(self, group_id: str, topics_of: Callable[[bytes], list[str]]) -> set[str]:
        """Topics the members subscribe to, read from their metadata for the group's protocol."""
        group = self.groups.get(group_id)
        if group is None or not group.members or group.protocol_type != "consumer":
            return set()
        out: set[str] = set()
        for m in group.members.values():
            name = group.protocol_name or m.names()[0]
            out.update(topics_of(m.metadata(name)) if name in m.names() else [])
        return out


def _protocols_size(protocols: list[tuple[str, bytes]]) -> int:
    return sum(len(name) + len(metadata) for name, metadata in protocols)


def _own_size(member: GroupMember) -> int:
    """What a member holds that its client chose the size of: its protocols and ids (its assignment is
    the leader's)."""
    return _protocols_size(member.protocols) + len(member.member_id) + len(member.client_id) + \
        len(member.instance_id or "")

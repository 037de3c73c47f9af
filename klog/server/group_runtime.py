"""The group coordinator's runtime in `klog serve`: the one GroupCoordinator the connections share.
It holds the membership state machine (coordinator.GroupStateMachine) and its timer task, runs
committed-offset expiry every offsets.retention.check.interval.ms (GroupsMeta.expire_offsets), and
publishes each group's members and assignment to LMDB (off the event loop, coalesced), so `klog
groups` sees Kafka-client groups. The protocol handlers that drive it are in groups.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from klog.errors import KlogError, UsageError
from klog.meta.groups import (
    OFFSETS_RETENTION_CHECK_MS_DEFAULT,
    OFFSETS_RETENTION_MINUTES_DEFAULT,
    ExpiredOffsets,
    GroupsMeta,
    Member,
    now_ms,
    offsets_retention_setting,
    process_start_time,
    validate_group_id,
)
from klog.server import consumer_protocol
from klog.server.coordinator import STABLE, Group, GroupStateMachine, principal_bounds
from klog.server.limits import CLIENT_SHARE_DEFAULT, AddressShares, share_of
from klog.store.state import current_boot_id

CONSUMER = "consumer"  # the protocol type of Kafka's consumer groups (the only one whose topics klog reads)
# What one principal's offset commits (OffsetCommit, TxnOffsetCommit) may add to the store's LMDB per
# offsets.retention.minutes (given back as time passes, see OffsetGrowth): new (group, partition)
# entries and longer metadata. The LMDB is 4 GiB for the whole store, and once full every client's
# commits, group changes and transactions fail: one client committing 1,000 partitions with 4,000-byte
# metadata to a new group each time added 40 MiB a second (full in under two minutes), and kept for
# offsets.retention.minutes (7 days). A principal's share of 1 GiB: 256 MiB at the default quarter,
# 1.6 million entries without metadata; commits of entries already stored add nothing.
OFFSET_BYTES_POOL = 1 << 30
PRINCIPAL_OFFSET_BYTES_MAX = share_of(OFFSET_BYTES_POOL, CLIENT_SHARE_DEFAULT)
OFFSET_GROWTH = "bytes of committed offsets added lately"  # the pool's name in AddressShares
EVERY_PRINCIPAL = "*"  # OffsetGrowth's entry for every principal's together (no share key is "*")
OFFSET_SWEEP_S = 60.0  # how often OffsetGrowth forgets the principals it gave everything back
OFFSET_ENTRY_BYTES = 150  # LMDB's own cost of a committed offset besides its names and metadata (measured)
# committed offsets whose metadata size OffsetGrowth remembers (~100 B each): reading a group's
# offsets back on each commit made a commit of 1,000 partitions cost 4 ms more (10.7 ms)
OFFSET_SIZES_KNOWN_MAX = 100_000


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class _Summary(NamedTuple):
    """What LMDB is told about a group (taken on the event loop, written in the thread pool)."""

    group_id: str
    generation: int
    protocol: str | None
    members: list[Member]
    targets: dict[str, list[tuple[str, int]]] | None  # None: not stable (no assignment to show)
    protocol_type: str | None = None
    leader: str | None = None


def escaped(text: str) -> str:
    """Text naming what clients chose (member ids, protocol names, principals), safe for one log line:
    control characters escaped, nothing cut short."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


class OffsetGrowth:
    """What each principal's offset commits have added to the store lately, at most `max_bytes` each;
    and the metadata sizes known stored for the groups committed to lately, so that a group committing
    again (every few seconds) is not read back. Thread-safe: commits are stored in the thread pool.

    What was added is given back at `max_bytes` per `period_ms` (offsets.retention.minutes: an
    offset not committed again is expired after it), so the store holds at most about `max_bytes` of
    a principal's idle offsets, and a long-running server never shuts a principal out for good (a
    tool that commits under a new group id each run, as kafka-console-consumer does, reached the bound
    after ~100,000 runs and was refused until a restart).

    A size remembered after its offset expired only lets the offset come back as large as it was: the
    store never holds more than it held plus what was counted.

    Every principal's together is bounded too, at `pool_bytes` (given back at that pace): principals
    are share keys, and where clients do not authenticate each address is one, so without it clients
    from ever new addresses would each add their share. And every unauthenticated client's together
    where some listener authenticates (`addresses`): their additions as given back so far (each
    address's is brought up to date when it commits, and all at least every OFFSET_SWEEP_S)."""

    def __init__(self, max_bytes: int, read: Callable[[str], dict], period_ms: int,
                 clock: Callable[[], float] = time.monotonic, pool_bytes: int = OFFSET_BYTES_POOL,
                 addresses: AddressShares | None = None) -> None:
        self.max_bytes = max_bytes
        self.pool_bytes = pool_bytes
        self.addresses = addresses or AddressShares()
        self.period_ms = max(1, period_ms)
        self.added: dict[str, float] = {}
        self._added_at: dict[str, float] = {}  # principal -> when its `added` was last brought up to date
        self._clock = clock
        self._read = read  # group -> its committed offsets (GroupsMeta.committed)
        self._known: OrderedDict[str, dict[tuple[str, int], int]] = OrderedDict()  # least recent first
        self._entries = 0
        self._lock = threading.Lock()
        self._swept = clock()  # when the principals with nothing left were last forgotten

    def admit(self, principal: str, group_id: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> str | None:
        """None if `principal` may store `offsets` in the group (what they add counted); else why not.
        Blocking (may read the group's offsets)."""
        known = self._sizes(group_id)
        sizes = {tp: len(metadata.encode()) for tp, (_, metadata) in offsets.items()}
        with self._lock:
            grows = sum(_offset_growth(group_id, tp[0], size, known.get(tp)) for tp, size in sizes.items())
            self._sweep()
            added = self._added_now(principal, self.max_bytes)
            everyone = self._added_now(EVERY_PRINCIPAL, self.pool_bytes)
            per = f"per {self.period_ms / 60_000:g} minutes (offsets.retention.minutes)"
            if grows > 0 and added + grows > self.max_bytes:
                return f"{principal} added {added:.0f} bytes of committed offsets to the store lately, at most " \
                       f"{self.max_bytes} {per}"
            if grows > 0 and everyone + grows > self.pool_bytes:
                return f"every client's commits added {everyone:.0f} bytes of committed offsets to the store " \
                       f"lately, at most {self.pool_bytes} {per}"
            together = self.addresses.refusal(OFFSET_GROWTH, principal, grows, self.pool_bytes, self.max_bytes)
            if together is not None:
                return together
            if grows > 0:
                self._set(principal, added + grows)
                self._set(EVERY_PRINCIPAL, everyone + grows)
            if self._known.get(group_id) is known:  # (else forgotten meanwhile: nothing to remember)
                self._entries += sum(1 for tp in sizes if tp not in known)
                for tp, size in sizes.items():
                    known[tp] = max(size, known.get(tp, 0))
                self._evict()
        return None

    def _added_now(self, principal: str, bound: int) -> float:
        """The principal's `added`, less what the time since its last commit gave back (`bound` per
        period). Lock held. A principal that has nothing left is forgotten (share keys come and go)."""
        added = self.added.get(principal, 0.0)
        if added > 0:
            now = self._clock()
            elapsed_ms = (now - self._added_at.get(principal, now)) * 1000
            added = max(0.0, added - elapsed_ms * bound / self.period_ms)
            self._set(principal, added, now)
        return added

    def _sweep(self) -> None:
        """Forget, once a minute, the principals whose additions were all given back (an address
        commits once and never again: its entry would stay). Lock held."""
        if self._clock() - self._swept >= OFFSET_SWEEP_S:
            for principal in list(self.added):
                self._added_now(principal, self.pool_bytes if principal == EVERY_PRINCIPAL else self.max_bytes)
            self._swept = self._clock()

    def _set(self, principal: str, added: float, now: float | None = None) -> None:
        self.addresses.add(OFFSET_GROWTH, principal, added - self.added.get(principal, 0.0))
        if added > 0:
            self.added[principal] = added
            self._added_at[principal] = self._clock() if now is None else now
        else:
            self.added.pop(principal, None)
            self._added_at.pop(principal, None)

    def _sizes(self, group_id: str) -> dict[tuple[str, int], int]:
        with self._lock:
            known = self._known.get(group_id)
            if known is not None:
                self._known.move_to_end(group_id)
                return known
        read = {tp: len(c.metadata.encode()) for tp, c in self._read(group_id).items()}
        with self._lock:
            known = self._known.setdefault(group_id, read)
            if known is read:
                self._entries += len(read)
            self._known.move_to_end(group_id)
        return known

    def _evict(self) -> None:
        """Forget the least recently committed groups past OFFSET_SIZES_KNOWN_MAX entries. Lock held."""
        while self._entries > OFFSET_SIZES_KNOWN_MAX and self._known:
            _, sizes = self._known.popitem(last=False)
            self._entries -= len(sizes)


def _offset_growth(group_id: str, topic: str, size: int, stored: int | None) -> int:
    """What storing an offset with `size` bytes of metadata adds to LMDB: a new entry, or longer
    metadata than the stored one's (`stored`: its size; None: no such entry)."""
    if stored is None:
        return len(group_id.encode()) + len(topic.encode()) + size + OFFSET_ENTRY_BYTES
    return max(0, size - stored)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class GroupCoordinator:
    """The server's one coordinator: the state machine, its timer, and the LMDB side."""

    def __init__(self, store: Any, broker: Any, executor: Any, *, offsets_retention_ms: int | None = None,
                 offsets_retention_check_ms: int | None = None, wall_clock: Any = None,
                 client_share: float = CLIENT_SHARE_DEFAULT, addresses: AddressShares | None = None) -> None:
        """`offsets_retention_ms`/`offsets_retention_check_ms` override klog.json's
        offsets.retention.minutes/offsets.retention.check.interval.ms; `wall_clock` (epoch ms) dates
        commits and expiry (tests move it forward instead of waiting days); `client_share`: what one
        principal (share key) may hold of each pool (klog serve --client-share); `addresses`: what
        every unauthenticated client holds of them together, the server's (limits.AddressShares)."""
        self.store = store
        self.broker = broker
        self.executor = executor
        self._log = logging.getLogger("klog.serve")
        self.meta = GroupsMeta(store.meta) if wall_clock is None else GroupsMeta(store.meta, clock=wall_clock)
        self.retention_ms = offsets_retention_ms if offsets_retention_ms is not None else self._retention_setting(
            "offsets.retention.minutes", OFFSETS_RETENTION_MINUTES_DEFAULT * 60_000)
        self.retention_check_ms = offsets_retention_check_ms if offsets_retention_check_ms is not None else \
            self._retention_setting("offsets.retention.check.interval.ms", OFFSETS_RETENTION_CHECK_MS_DEFAULT)
        self._expiry: asyncio.Task | None = None
        self.machine = GroupStateMachine(_monotonic_ms, on_change=self._changed, log=self._log_event,
                                         addresses=addresses, **self._settings(), **principal_bounds(client_share))
        pid = os.getpid()
        self.served_by = f"klog serve pid {pid}"
        self._pid_start = process_start_time(pid)
        self._boot_id = current_boot_id().hex()
        self._timer: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._dirty: set[str] = set()
        self._writer: asyncio.Task | None = None
        self.offset_growth = OffsetGrowth(share_of(OFFSET_BYTES_POOL, client_share), self.meta.committed,
                                          self.retention_ms, addresses=addresses)

    def _log_event(self, text: str) -> None:
        """The state machine's lines (member ids and protocol names come from clients: escaped)."""
        self._log.info("%s", escaped(text))

    def _settings(self) -> dict[str, int]:
        """Kafka's broker settings for groups, from the store defaults (klog.json)."""
        out = {}
        for name, attr in (("group.initial.rebalance.delay.ms", "initial_rebalance_delay_ms"),
                           ("group.min.session.timeout.ms", "min_session_timeout_ms"),
                           ("group.max.session.timeout.ms", "max_session_timeout_ms")):
            text = self.store.data_dir.default(name)
            try:
                value = int(text)
                if value < 0:
                    raise ValueError
                out[attr] = value
            except ValueError:
                self._log.warning("klog.json: %s must be a whole number of milliseconds, not %r; using Kafka's "
                                  "default", name, text)
        return out

    def _retention_setting(self, name: str, default_ms: int) -> int:
        text = self.store.data_dir.default(name)
        try:
            return offsets_retention_setting(name, text)
        except UsageError as e:
            self._log.warning("%s; using Kafka's default", e)
            return default_ms

    def admit_offsets(self, principal: str, group_id: str, offsets: dict[tuple[str, int], tuple[int, str]]
                      ) -> str | None:
        """None if `principal` may store `offsets` in the group (what they add to the store counted in its
        PRINCIPAL_OFFSET_BYTES_MAX); else why not. Blocking (may read the group's offsets): in the thread pool."""
        try:
            validate_group_id(group_id)
        except UsageError:
            return None  # (refused where it is stored: nothing added, nothing to count)
        return self.offset_growth.admit(principal, group_id, offsets)

    # -- offset expiry ------------------------------------------------------------------------------
    def start_expiry(self) -> None:
        """Expire committed offsets every offsets.retention.check.interval.ms, as a Kafka broker does."""
        if self._expiry is None:
            self._expiry = asyncio.get_running_loop().create_task(self._run_expiry())

    async def _run_expiry(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            try:
                await self.expire_offsets()
            except Exception as e:  # noqa: BLE001 - the next check tries again; serving goes on
                self._log.warning("offset expiry failed: %s: %s", type(e).__name__, e)

    async def expire_offsets(self) -> list[ExpiredOffsets]:
        """One expiry pass over the store's groups; the groups this server holds members of are passed
        as held (with their subscription once Stable), and groups it removed are forgotten here too."""
        await self.flush()
        held = {gid: self._stable_subscription(g) for gid, g in self.machine.groups.items() if g.members}
        expire = functools.partial(self.meta.expire_offsets, self.retention_ms, held=held)
        results = await asyncio.get_running_loop().run_in_executor(self.executor, expire)
        for r in results:
            self._log_event(f"group '{r.group}': {len(r.partitions)} committed offset(s) expired "
                            f"(offsets.retention.minutes={self.retention_ms / 60_000:g})"
                            + ("; the group is Empty without offsets: removed" if r.group_removed else ""))
        # Empty groups gone from the store (expired now, or by `klog groups clean`/`delete` elsewhere) are
        # forgotten here too (Kafka: Dead), so ListGroups stops naming them and a new group starts afresh
        stored = set(await asyncio.get_running_loop().run_in_executor(self.executor, self.meta.group_ids))
        for gid in [gid for gid, g in self.machine.groups.items()
                    if gid not in stored and not g.members and not g.pending]:
            self.machine.forget(gid)
        return results

    def _stable_subscription(self, group: Group) -> set[str] | None:
        if group.state != STABLE or group.protocol_type != CONSUMER:
            return None
        return self.machine.subscribed_topics(group.group_id, consumer_protocol.subscription_topics)

    # -- timer ------------------------------------------------------------------------------------
    def started(self) -> None:
        """Start the timer task on first use (the coordinator is made before requests arrive)."""
        if self._timer is None:
            self._wake = asyncio.Event()
            self._timer = asyncio.get_running_loop().create_task(self._run_timer())

    async def _run_timer(self) -> None:
        """Sleeps until the next session/rebalance deadline or a change, then lets the machine act."""
        assert self._wake is not None
        while True:
            self._wake.clear()
            deadline = self.machine.next_deadline()
            timeout = None if deadline is None else max(0, deadline - _monotonic_ms()) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            try:
                self.machine.tick()
            except Exception:  # a bug must not stop every group's timeouts for good
                self._log.exception("group coordinator timer")

    async def close(self) -> None:
        """Stop the timers and mark every member gone in LMDB (a clean stop frees the groups at once)."""
        for task in (self._timer, self._expiry):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for group in self.machine.groups.values():
            group.members.clear()
            self._dirty.add(group.group_id)
        if self._dirty:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing more to write
                await self._write_dirty()

    # -- publishing to LMDB ---------------------------------------------------------------------------
    def _changed(self, group: Group) -> None:
        self._dirty.add(group.group_id)
        if self._wake is not None:
            self._wake.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_dirty())

    async def _write_dirty(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty:
            ids = sorted(self._dirty)
            self._dirty.clear()
            summaries = [self._summary(gid) for gid in ids]  # taken on the loop: consistent
            try:
                await loop.run_in_executor(self.executor, self._publish, summaries)
            except (KlogError, OSError) as e:
                self._log.warning("could not record groups %s in the store: %s", ", ".join(ids), e)

    async def flush(self) -> None:
        """Until every change so far is in LMDB (before admin actions that read it back)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def _summary(self, group_id: str) -> _Summary:
        group = self.machine.groups.get(group_id)
        if group is None:
            return _Summary(group_id, 0, None, [], None)
        members = []
        wall, clock = now_ms(), _monotonic_ms()
        for m in group.members.values():
            metadata = m.metadata(group.protocol_name) if group.protocol_name in m.names() else \
                m.protocols[0][1] if m.protocols else b""
            topics = consumer_protocol.subscription_topics(metadata) if group.protocol_type == CONSUMER and \
                m.protocols else []
            # the member's own bytes go to LMDB too: __consumer_offsets' group record carries them
            members.append(Member(m.member_id, m.client_id, m.client_host, os.getpid(), self._pid_start,
                                  self._boot_id, topics, group.protocol_name or m.names()[0],
                                  m.session_timeout_ms, wall - (clock - m.joined), wall, group.generation,
                                  self.served_by, metadata_b64=_b64(metadata), assignment_b64=_b64(m.assignment),
                                  rebalance_timeout_ms=m.rebalance_timeout_ms, instance_id=m.instance_id))
        targets = None
        if group.state == STABLE and group.protocol_type == CONSUMER:
            targets = {m.member_id: consumer_protocol.assignment_partitions(m.assignment)
                       for m in group.members.values()}
        return _Summary(group_id, group.generation, group.protocol_name, members, targets, group.protocol_type,
                        group.leader)

    def _publish(self, summaries: list[_Summary]) -> None:
        for s in summaries:
            self.meta.publish_served(s.group_id, self.served_by, s.generation, s.protocol, s.members, s.targets,
                                     protocol_type=s.protocol_type, leader=s.leader)

    def state(self, group_id: str) -> str | None:
        group = self.machine.groups.get(group_id)
        return None if group is None else group.state

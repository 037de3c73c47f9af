"""`__consumer_offsets` kept in step with the committed offsets and groups in LMDB.

LMDB stays the source of truth: klog's own consumers (`klog consume -g`, any number of processes,
no server needed), `klog groups reset-offsets|delete`, offset expiry and the server's Kafka clients
all commit there in one LMDB write transaction with their group's membership checks, and that is
what makes a commit durable and fenced. The topic is a projection of it, in Kafka's record format
(klog.broker.group_records), for the tools that read Kafka's topic instead of asking the broker
(Burrow, kafka-consumer-groups' offset dumps, stream processors' lag exporters): `klog serve`
brings it in step whenever LMDB has changed (OffsetsTopicMirror.sync), writing one record per new
or changed offset or group and a tombstone per deleted one, so a reader that applies the topic in
order ends with LMDB's offsets. It finds what changed in LMDB's change log (klog.meta.change_log),
which every writer of groups and offsets feeds in the same transaction, so a pass reads only those
keys; everything is compared only at start-up. Making the topic the truth would have put a log append (and a
topic replay at every start) under every local commit and still needed LMDB for membership.

Between two syncs several commits of one partition coalesce into the last one, as compaction
would make of them anyway; without a running server the topic waits for the next one.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.broker import group_records as gr
from klog.store.codec import encode_batch

if TYPE_CHECKING:
    from klog.broker.store_protocol import BrokerStore
    from klog.broker.writer import PartitionWriter
    from klog.meta.groups import GroupDoc, Member

log = logging.getLogger("klog.serve")

OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}  # Kafka's
LIVENESS_CHECK_S = 5.0  # how often a pass also looks at groups nothing was written to
FORGET_AFTER_KEYS, FORGET_AFTER_S = 1000, 30.0  # when applied change log entries are dropped from it


@dataclass(frozen=True)
class _Wanted:
    partition: int
    value: bytes


def group_record(doc: GroupDoc, members: list[Member], now: int) -> gr.GroupRecord:
    """The GroupMetadataValue of a group as LMDB has it: its live members, each with the protocol
    metadata and assignment its client sent (klog serve's Kafka clients), or those klog's own consumers
    amount to (their topics, the assignment of the current generation); the leader the server chose,
    else the first member to join (Kafka's choice)."""
    live = sorted((m for m in members if m.alive(now)), key=lambda m: (m.joined_ms, m.member_id))
    records = [gr.MemberRecord(
        m.member_id, m.client_id, m.host, m.session_timeout_ms,
        base64.b64decode(m.metadata_b64) if m.metadata_b64 is not None else gr.consumer_subscription(m.topics),
        base64.b64decode(m.assignment_b64) if m.assignment_b64 is not None else
        gr.consumer_assignment(doc.target(m.member_id)),
        m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0 else m.session_timeout_ms, m.instance_id)
        for m in live]
    leader = doc.leader if doc.leader in {m.member_id for m in live} else live[0].member_id if live else None
    state_ms = doc.empty_ms if not live and doc.empty_ms is not None else doc.rebalance_ms or doc.created_ms
    return gr.GroupRecord(doc.protocol_type or "consumer", doc.generation, (doc.assignor or None) if live else None,
                          leader, state_ms, records)


class OffsetsTopicMirror:
    """Writes `__consumer_offsets` through `writer` (klog.broker.writer.PartitionWriter) from
    `store`'s LMDB groups. `partitions`: offsets.topic.num.partitions for a topic created here
    (an existing topic keeps its own count, as Kafka's does).

    The first pass reconciles the whole topic with LMDB (what the topic ends with, read from its
    log, against every offset and group); the passes after it read only the keys LMDB's change log
    (klog.meta.change_log) names since the last one, so a pass costs what changed, not what is stored."""

    def __init__(self, store: BrokerStore, writer: PartitionWriter,
                 partitions: int = gr.OFFSETS_TOPIC_PARTITIONS_DEFAULT) -> None:
        from klog.meta.groups import GroupsMeta

        self.store = store
        self.writer = writer
        self.partitions = partitions
        self.groups = GroupsMeta(store.meta)
        self._written: dict[bytes, bytes] | None = None  # key -> the value the topic ends with
        self._count = 0
        self._seen_txn: int | None = None
        self._applied_txn: int | None = None  # LMDB's changes up to this transaction are in the topic
        self._groups_checked = 0.0  # time.monotonic() of the last look at every group's liveness
        self._unforgotten = 0  # change log entries applied and not yet dropped from it
        self._forgotten_at = time.monotonic()
        self._lock = threading.Lock()
        self.on_append: Callable[[int], None] | None = None  # called with each partition written
        self.full_passes = 0  # reconciliations with everything in LMDB (start-up, a change log cut short)

    def _lmdb_txn(self) -> int:
        return self.store.meta.last_write()  # (what the reads after it see at least: see last_write)

    def _wanted(self, partitions: int) -> dict[bytes, _Wanted]:
        """Every record the topic should end with, by key."""
        from klog.meta.groups import now_ms

        out: dict[bytes, _Wanted] = {}
        for group, topic, index, raw in self.groups.raw_offsets():
            out[gr.offset_commit_key(group, topic, index)] = _Wanted(gr.partition_for(group, partitions),
                                                                     _offset_value(raw))
        now = now_ms()
        for doc, members in self.groups.groups_with_members():
            value = gr.group_metadata_value(group_record(doc, members, now))
            out[gr.group_metadata_key(doc.group)] = _Wanted(gr.partition_for(doc.group, partitions), value)
        return out

    def _open(self, wanted_any: bool) -> bool:
        """The topic's state read once (creating the topic when there is something to write)."""
        if self._written is not None:
            return True
        found = self.store.topics.find(gr.OFFSETS_TOPIC)
        if found is None:
            if not wanted_any:
                return False
            found = self.store.create_topic(gr.OFFSETS_TOPIC, self.partitions, configs=OFFSETS_TOPIC_CONFIGS,
                                            exist_ok=True)
        self._count = len(found.partitions)
        self._written = read_latest(self.store, self._count)
        return True

    def sync(self, force: bool = False) -> int:
        """Append what changed in LMDB since the topic was last brought in step; returns how many
        records were written. Cheap when nothing changed (one LMDB environment read); `force`
        reconciles everything."""
        with self._lock:
            seen = self._lmdb_txn()
            if seen == self._seen_txn and not force:
                return 0
            try:
                if force or self._written is None or self._applied_txn is None:
                    return self._sync_all(seen)
                return self._sync_changes(seen)
            except BaseException:
                self._written, self._count, self._applied_txn = None, 0, None  # read afresh next time
                raise

    def _sync_all(self, seen: int) -> int:
        """The full reconciliation (sync holds the lock): every key LMDB and the topic hold."""
        self.full_passes += 1
        self._groups_checked = time.monotonic()
        count = self._count or self.partitions
        wanted = self._wanted(count)  # read after `seen`: changes up to it are in
        if not self._open(bool(wanted)):
            self._seen_txn = seen
            return 0
        if count != self._count:
            wanted = self._wanted(self._count)
        written = self._written
        changes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for key, w in wanted.items():
            if written.get(key) != w.value:
                changes.setdefault(w.partition, []).append((key, w.value))
        for key in [k for k in written if k not in wanted]:
            group = _group_of(key)
            if group is not None:
                changes.setdefault(gr.partition_for(group, self._count), []).append((key, None))
        total = self._append(changes)
        self._seen_txn = self._applied_txn = seen
        return total

    def _sync_changes(self, seen: int) -> int:
        """One pass over what the change log names since the last (sync holds the lock)."""
        from klog.meta.groups import now_ms

        found = self.groups.changes_since(self._applied_txn)
        if not found.complete:
            return self._sync_all(seen)
        updates: dict[bytes, tuple[str, bytes | None]] = {}  # key -> (group, value; None: deleted)
        for (group, topic, index), raw in found.offsets.items():
            updates[gr.offset_commit_key(group, topic, index)] = (group, None if raw is None else _offset_value(raw))
        groups = found.groups
        if time.monotonic() - self._groups_checked >= LIVENESS_CHECK_S:
            # members die without a write (a killed consumer, a session that ran out): look at every group now and then
            self._groups_checked = time.monotonic()
            groups = {doc.group: (doc, members) for doc, members in self.groups.groups_with_members()} | groups
        now = now_ms()
        for group, entry in groups.items():
            value = None if entry is None else gr.group_metadata_value(group_record(*entry, now))
            updates[gr.group_metadata_key(group)] = (group, value)
        written = self._written
        changes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for key, (group, value) in updates.items():
            if written.get(key) != value:
                changes.setdefault(gr.partition_for(group, self._count), []).append((key, value))
        total = self._append(changes)
        self._seen_txn = seen
        self._applied_txn = found.upto
        self._unforgotten += len(found.offsets) + len(found.groups)
        if self._unforgotten and (self._unforgotten >= FORGET_AFTER_KEYS
                                  or time.monotonic() - self._forgotten_at >= FORGET_AFTER_S):
            # applied: the log stays short while a server runs (not at every pass: a write costs an fsync)
            self.groups.forget_changes(found.upto)
            self._unforgotten, self._forgotten_at = 0, time.monotonic()
        return total

    def _append(self, changes: dict[int, list[tuple[bytes, bytes | None]]]) -> int:
        written = self._written
        now = int(time.time() * 1000)
        total = 0
        for partition, records in sorted(changes.items()):
            batch = encode_batch([(k, v, (), now) for k, v in records], 0)
            self.writer.append_batch(gr.OFFSETS_TOPIC, partition, batch, "1")
            if self.on_append is not None:
                self.on_append(partition)
            for k, v in records:
                if v is None:
                    written.pop(k, None)
                else:
                    written[k] = v
            total += len(records)
        return total


def _offset_value(raw: bytes) -> bytes:
    """OffsetCommitValue of an offset's stored JSON."""
    import json

    c = json.loads(raw)
    return gr.offset_commit_value(c["offset"], c.get("metadata", ""), c["commit_ms"])


def _group_of(key: bytes) -> str | None:
    try:
        decoded = gr.decode_key(key)
    except Exception:  # noqa: BLE001 - a key another writer put there: left alone
        return None
    return None if decoded is None else decoded.group


def read_latest(store: BrokerStore, partitions: int) -> dict[bytes, bytes]:
    """The topic's latest value per key (tombstoned keys dropped), read from its log start."""
    out: dict[bytes, bytes] = {}
    for index in range(partitions):
        part = store.partition(gr.OFFSETS_TOPIC, index)
        offset, hw = part.log_start_offset(), part.high_watermark()
        while offset < hw:
            batches = part.read(offset)
            if not batches:
                break
            for batch in batches:
                for record_offset, _, key, value, _ in batch.records():
                    if key is None or record_offset < offset:
                        continue
                    if value is None:
                        out.pop(key, None)
                    else:
                        out[key] = value
                offset = max(offset, batch.header.last_offset + 1)
    return out

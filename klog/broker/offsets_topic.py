"""`__consumer_offsets` kept in step with the committed offsets and groups in LMDB.

LMDB stays the source of truth: klog's own consumers (`klog consume -g`, any number of processes,
no server needed), `klog groups reset-offsets|delete`, offset expiry and the server's Kafka clients
all commit there in one LMDB write transaction with their group's membership checks, and that is
what makes a commit durable and fenced. The topic is a projection of it, in Kafka's record format
(klog.broker.group_records), for the tools that read Kafka's topic instead of asking the broker
(Burrow, kafka-consumer-groups' offset dumps, stream processors' lag exporters): `klog serve`
brings it in step whenever LMDB has changed (OffsetsTopicMirror.sync), writing one record per new
or changed offset or group and a tombstone per deleted one, so a reader that applies the topic in
order ends with LMDB's offsets. Making the topic the truth would have put a log append (and a
topic replay at every start) under every local commit and still needed LMDB for membership.

Between two syncs several commits of one partition coalesce into the last one, as compaction
would make of them anyway; without a running server the topic waits for the next one.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class _Wanted:
    partition: int
    value: bytes


def group_record(doc: GroupDoc, members: list[Member], now: int) -> gr.GroupRecord:
    """The GroupMetadataValue of a group as LMDB has it: its live members (Kafka's leader is the
    first to join), their subscriptions and the assignment of the current generation."""
    live = sorted((m for m in members if m.alive(now)), key=lambda m: (m.joined_ms, m.member_id))
    records = [gr.MemberRecord(m.member_id, m.client_id, m.host, m.session_timeout_ms,
                               gr.consumer_subscription(m.topics), gr.consumer_assignment(doc.target(m.member_id)),
                               m.session_timeout_ms)
               for m in live]
    state_ms = doc.empty_ms if not live and doc.empty_ms is not None else doc.rebalance_ms or doc.created_ms
    return gr.GroupRecord("consumer", doc.generation, (doc.assignor or None) if live else None,
                          live[0].member_id if live else None, state_ms, records)


class OffsetsTopicMirror:
    """Writes `__consumer_offsets` through `writer` (klog.broker.writer.PartitionWriter) from
    `store`'s LMDB groups. `partitions`: offsets.topic.num.partitions for a topic created here
    (an existing topic keeps its own count, as Kafka's does)."""

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
        self._lock = threading.Lock()
        self._encoded: dict[tuple[str, str, int], tuple[bytes, bytes, _Wanted]] = {}  # by LMDB key
        self._encoded_for = 0  # the partition count _encoded was computed for
        self.on_append: Callable[[int], None] | None = None  # called with each partition written

    def _lmdb_txn(self) -> int:
        return int(self.store.meta.env.info()["last_txnid"])

    def _wanted(self, partitions: int) -> dict[bytes, _Wanted]:
        """Every record the topic should end with, by key. An offset's record is encoded again only
        when its stored JSON changed (a pass over 10,000 unchanged offsets stays cheap)."""
        import json

        from klog.meta.groups import now_ms

        out: dict[bytes, _Wanted] = {}
        cache = self._encoded if self._encoded_for == partitions else {}
        fresh: dict[tuple[str, str, int], tuple[bytes, bytes, _Wanted]] = {}
        for group, topic, index, raw in self.groups.raw_offsets():
            hit = cache.get((group, topic, index))
            if hit is None or hit[0] != raw:
                c = json.loads(raw)
                hit = (raw, gr.offset_commit_key(group, topic, index), _Wanted(
                    gr.partition_for(group, partitions),
                    gr.offset_commit_value(c["offset"], c.get("metadata", ""), c["commit_ms"])))
            fresh[(group, topic, index)] = hit
            out[hit[1]] = hit[2]
        self._encoded, self._encoded_for = fresh, partitions
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
        records were written. Cheap when nothing changed (one LMDB environment read)."""
        with self._lock:
            seen = self._lmdb_txn()
            if seen == self._seen_txn and not force:
                return 0
            try:
                return self._sync(seen)
            except BaseException:
                self._written, self._count = None, 0  # read the topic afresh next time
                raise

    def _sync(self, seen: int) -> int:
        """One pass (sync holds the lock): what changed, appended per partition."""
        count = self._count or self.partitions
        wanted = self._wanted(count)
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
        self._seen_txn = seen
        return total


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

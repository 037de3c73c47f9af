"""`klog mirror SRC DEST` (Kafka's MirrorMaker): copy topics between stores and clusters.

SRC and DEST are each a local Store or a RemoteStore; the copy only uses the interfaces both have
(consumer.poll_chunks/seek/positions, the producers' bulk sends and flush, topic admin). Keys, values, headers and
timestamps are kept, and the partition too when DEST has it (it does when the mirror created the
topic: with SRC's partition count and the configs set on SRC's topic).

Progress is checkpointed in DEST, in the compacted topic __klog_mirror_checkpoints (one record per
mirrored partition: the next source offset), written only after DEST acknowledged the records
before it. A stopped mirror resumes where it stopped, with no duplicate after a clean stop; a killed
one copies again at most the records of one checkpoint interval (at-least-once).

With `exactly_once` (DEST a local store or a cluster), the records copied since the last checkpoint and the checkpoint
itself are one transaction (KIP-618's idea, as MirrorMaker 2 does it): after any kill, DEST's
read_committed readers hold each source record exactly once, and the mirror resumes from the last
committed checkpoint. A second mirror of the same name fences the first.

The source is read at read_committed by default (either mode): records of aborted transactions are
never copied, and a transaction still open is copied once it commits. A plain copy of them, written
outside any transaction, would show DEST's read_committed readers what the source's never see.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING

from klog.broker.resolve import resolve_topic_names
from klog.errors import KlogError, UsageError

if TYPE_CHECKING:
    from klog.client.consumer import ConsumerBase
    from klog.client.producer import Producer, ProducerBase

CHECKPOINT_TOPIC = "__klog_mirror_checkpoints"
# the checkpoint topic's segments: small, so compaction (which never touches the active segment) keeps
# what a mirror's start reads to ~the latest checkpoint of each partition, not every one ever written
CHECKPOINT_SEGMENT_BYTES = 1 << 20
CHECKPOINT_CLEAN_INTERVAL_S = 60.0  # a local DEST: how often a following mirror compacts it (when due)
CHECKPOINT_INTERVAL_S = 1.0  # the at-least-once window: a kill re-copies at most this much ...
CHECKPOINT_RECORDS = 200_000  # ... or this many records
# without --follow, a local source: no progress for this long while not at the end is an error (a
# cluster source: its timeout, KLOG_CLUSTER_TIMEOUT); never a copy ending short with exit 0
IDLE_DONE_S = 2.0
NEW_TOPICS_INTERVAL_S = 5.0  # with --follow and a pattern: how often to look for new source topics
FOLLOW_SLEEP_S = 0.05
SOURCE_CHECK_INTERVAL_S = 5.0  # with --follow, idle: how often to check no source partition ends below the position
SOURCE_CHECK_BUDGET_S = 0.2  # ... for at most this long a check (topics in turn)


@dataclass
class MirrorStats:
    records: int = 0
    topics: list[str] = field(default_factory=list)
    partitions: int = 0
    seconds: float = 0.0
    resumed: int = 0  # partitions that started from a checkpoint
    total: int | None = None  # records to copy when it started (without --follow)


def source_topics(src, topics: list[str], pattern: str | None) -> list[str]:
    """Named topics plus those matching `pattern`; all the user's topics when neither is given."""
    if not topics and not pattern:
        return [t for t in src.topic_names() if not t.startswith("__")]
    return resolve_topic_names(src, topics, pattern, exclude=(CHECKPOINT_TOPIC,))


def renamer(template: str) -> Callable[[str], str]:
    if "{topic}" not in template:
        raise UsageError(f"invalid --rename '{template}': it must contain {{topic}}")
    return lambda t: template.replace("{topic}", t)


def checked_isolation(level: str, exactly_once: bool) -> str:
    """`level` when a mirror can read its source so (UsageError otherwise)."""
    if level not in ("read_committed", "read_uncommitted"):
        raise UsageError(f"invalid isolation level '{level}' (read_committed or read_uncommitted)")
    if exactly_once and level != "read_committed":
        raise UsageError("--exactly-once copies committed records only: it reads the source at read_committed")
    return level


class Mirror:
    def __init__(self, src, dest, topics: list[str], *, mirror_id: str, pattern: str | None = None,
                 rename: str = "{topic}", follow: bool = False, exactly_once: bool = False,
                 isolation_level: str = "read_committed",
                 on_progress: Callable[[MirrorStats], None] | None = None,
                 on_warning: Callable[[str], None] | None = None) -> None:
        checked_isolation(isolation_level, exactly_once)
        self.src, self.dest = src, dest
        self.wanted, self.pattern = topics, pattern
        self.mirror_id = mirror_id
        self.rename = renamer(rename)
        self.follow = follow
        self.exactly_once = exactly_once
        self.isolation_level = isolation_level
        self.on_progress = on_progress
        self.on_warning = on_warning or (lambda _m: None)
        self.stats = MirrorStats()
        self._keep_partition: dict[str, bool] = {}  # source topic -> copies keep their partition
        self._saved: dict[tuple[str, int], int] = {}  # the checkpoints DEST holds
        self._check_next = 0  # the source topic _check_source looks at first
        self._clean_failed = False  # a compaction of the checkpoint topic failed (said once)

    # -- setup ---------------------------------------------------------------------------------
    def _ensure_dest(self, topic: str) -> None:
        target = self.rename(topic)
        if target == topic and self.src is self.dest:
            raise UsageError("source and destination are the same: pass --rename")
        if not self.dest.has_topic(target):
            count = self.src.partition_count(topic)
            configs = _set_configs(self.src, topic)
            self.dest.create_topic(target, count, configs=configs, exist_ok=True)
        self.dest.forget_topic_metadata(target)
        # DEST has every source partition: each record keeps its own; else DEST's partitioner places all
        self._keep_partition[topic] = self.src.partition_count(topic) <= self.dest.partition_count(target)

    def _checkpoint_key(self, topic: str, partition: int) -> bytes:
        return json.dumps([self.mirror_id, topic, partition, self.rename(topic)]).encode()

    def _load_checkpoints(self) -> dict[tuple[str, int], int]:
        if not self.dest.has_topic(CHECKPOINT_TOPIC):
            self.dest.create_topic(CHECKPOINT_TOPIC, 1, configs={
                "cleanup.policy": "compact", "segment.bytes": str(CHECKPOINT_SEGMENT_BYTES)}, exist_ok=True)
            return {}
        self._compact_checkpoints()
        out: dict[tuple[str, int], int] = {}
        isolation = {"isolation_level": "read_committed"} if self.exactly_once else {}
        with self.dest.consumer(CHECKPOINT_TOPIC, merge=False, **isolation) as consumer:
            for r in consumer:
                try:
                    mirror_id, topic, partition, target = json.loads(r.key or b"null")
                except (TypeError, ValueError):
                    continue  # not ours
                if mirror_id == self.mirror_id and target == self.rename(topic) and r.value is not None:
                    out[(topic, int(partition))] = int(json.loads(r.value)["next_offset"])
        return out

    def _compact_checkpoints(self) -> None:
        """A local DEST: compact the checkpoint topic when due (a cluster's broker does it itself). A
        following mirror writes a checkpoint per partition a second, and every start reads the topic
        whole: uncompacted (no klog serve, no `topics clean`; and with one 1 GiB active segment,
        never), 1,000,000 of them made each start take ~11 s. A topic an earlier klog created
        gets the small segments first (its next write rolls)."""
        dest = self.dest
        if not getattr(dest, "is_local", True):
            return
        try:
            if "segment.bytes" not in dest.topic(CHECKPOINT_TOPIC).configs:
                dest.alter_topic(CHECKPOINT_TOPIC, set_configs={"segment.bytes": str(CHECKPOINT_SEGMENT_BYTES)})
            dest.clean(CHECKPOINT_TOPIC)
        except KlogError as e:  # (housekeeping: it never stops the copy)
            if not self._clean_failed:
                self._clean_failed = True
                self.on_warning(f"{CHECKPOINT_TOPIC} not compacted: {e}")

    # -- running -------------------------------------------------------------------------------
    def run(self) -> MirrorStats:
        started = time.monotonic()
        names = source_topics(self.src, self.wanted, self.pattern)
        for t in names:
            self._ensure_dest(t)
        self._saved = self._load_checkpoints()
        self.stats.topics = list(names)
        if self.exactly_once:
            # opening it fences an earlier mirror of this name and aborts what it left open, before
            # the checkpoints are read (so they are the last committed ones)
            producer = self.dest.producer(transactional_id=self._transactional_id(), auto_create=False)
            self._saved = self._load_checkpoints()
            producer.begin()
        else:
            producer = self.dest.producer(acks="all", auto_create=False)
        try:
            self._copy(names, producer, started)
        finally:
            self.stats.seconds = time.monotonic() - started
            if self.exactly_once:
                producer.close()  # aborts the transaction begun after the last checkpoint (empty on a clean stop)
        return self.stats

    def _transactional_id(self) -> str:
        name = f"klog-mirror:{self.mirror_id}:{self.rename('{topic}')}"
        if len(name.encode()) > 400:
            import hashlib

            name = "klog-mirror:" + hashlib.sha256(name.encode()).hexdigest()
        return name

    def _drop_checkpoints_past_the_end(self, names: list[str]) -> None:
        """A checkpoint past its source partition's end (the topic was deleted and recreated, or
        truncated, since it was written) would skip every record of the new log up to that offset, so
        that partition is copied from its start (as Kafka's auto.offset.reset=earliest), said once."""
        for t in names:
            for p, end in self.src.offsets(t, -1).items():
                saved = self._saved.get((t, p))
                if saved is not None and saved > (end or 0):
                    self.on_warning(f"{t}-{p}: the mirror's checkpoint (offset {saved}) is past the source's end "
                                    f"({end or 0}): the topic was recreated or truncated; copying it from its start")
                    del self._saved[(t, p)]

    def _check_source(self, names: list[str], positions: dict[tuple[str, int], int],
                      budget_s: float | None = None) -> None:
        """Raise when a source partition now ends below the mirror's position: its topic was deleted and
        recreated (or truncated) under a following mirror, whose reader would wait for that offset forever.
        With `budget_s`, topics in turn for that long at most (a cluster answers each in a round trip:
        a wide mirror's idle check must not hold up the copy); the next call goes on from there."""
        started = time.monotonic()
        turn = names[self._check_next % len(names):] + names[:self._check_next % len(names)] if names else []
        for t in turn:
            if budget_s is not None and time.monotonic() - started > budget_s:
                break
            self._check_next += 1
            try:
                ends = self.src.offsets(t, -1)
            except KlogError:  # deleted, not (yet) recreated (a cluster may say it as 'no leader'): no end to compare
                continue
            for p, end in ends.items():
                at = positions.get((t, p), 0)
                if at > (end or 0):
                    raise KlogError(f"source partition {t}-{p} now ends at offset {end or 0}, below the mirror's "
                                    f"position {at}: the topic was deleted and recreated (or truncated); run the "
                                    "mirror again to copy it from its start")

    def _open(self, names: list[str]) -> ConsumerBase:
        self._drop_checkpoints_past_the_end(names)
        consumer = self.src.consumer(*names, start="beginning", follow=self.follow, merge=False,
                                     isolation_level=self.isolation_level)
        resumed = 0
        for (t, p), offset in self._saved.items():
            if t in names:
                consumer.seek(t, p, offset)
                resumed += 1
        self.stats.resumed += resumed
        self.stats.partitions = len(consumer.positions())
        return consumer

    def _remaining(self, consumer: ConsumerBase) -> dict[tuple[str, int], int]:
        """The partitions with records left to copy, and where a bounded copy of each ends: the
        consumer's own end (the last stable offset at read_committed). Not Store.offsets(committed=True):
        on a local store that walks every batch header of the partition once more in each run (the
        consumer's read_committed view has walked them already), a cost growing with the history."""
        positions = consumer.positions()
        return {tp: end for tp, (_, end) in consumer.spans().items() if positions.get(tp, 0) < end}

    def _copy(self, names: list[str], producer: ProducerBase, started: float) -> None:
        consumer = self._open(names)
        ends = None if self.follow else self._remaining(consumer)
        if ends is not None:
            positions = consumer.positions()
            self.stats.total = sum(end - positions[tp] for tp, end in ends.items())
        last_checkpoint = time.monotonic()
        last_discovery = time.monotonic()
        last_progress = time.monotonic()  # (without --follow) when a position last moved
        last_positions = consumer.positions()
        stall_s = getattr(self.src, "timeout", None) or IDLE_DONE_S
        last_check = last_clean = time.monotonic()
        unsaved = 0
        # where each partition's records were all handed to DEST's producer: what a checkpoint may say.
        # The consumer's positions pass a poll's records before they are sent; a stop (Ctrl-C, SIGTERM,
        # an error) in the middle of sending them must not checkpoint those positions (records lost)
        sent = consumer.positions()
        sending = False  # a stop came in the middle of _send
        try:
            while True:
                try:
                    chunks = _poll(consumer)
                except KlogError:
                    if self.follow:  # a recreated source topic said plainly, not as the reader's trouble
                        self._check_source(names, consumer.positions())
                    raise
                records = sum(len(c[2]) for c in chunks)
                now = time.monotonic()
                if records:
                    sending = True
                    self._send(producer, chunks, sent)
                    sending = False
                    unsaved += records
                    self.stats.records += records
                sent = consumer.positions()  # (past offsets holding no record for the mirror, too)
                if ((unsaved and (unsaved >= CHECKPOINT_RECORDS or now - last_checkpoint >= CHECKPOINT_INTERVAL_S
                                  or not records))
                        or (not records and self._moved(sent))):
                    self._checkpoint(producer, sent)
                    unsaved, last_checkpoint = 0, now
                    if self.on_progress is not None:
                        self.on_progress(self.stats)
                if ends is not None:
                    positions = consumer.positions()
                    if all(positions.get(tp, 0) >= end for tp, end in ends.items()):
                        break
                    if positions != last_positions:
                        last_progress, last_positions = now, positions
                    elif now - last_progress > stall_s:
                        # (it ended the copy with exit 0 and a summary as if complete: a source cluster
                        # pausing for 2 s made `klog mirror` copy 62,137 of 200,010 records and say so)
                        left = sum(max(0, end - positions.get(tp, 0)) for tp, end in ends.items())
                        raise KlogError(f"no records came from the source for {stall_s:g} s while {left:,} were "
                                        f"left to copy: stopped after {self.stats.records:,} (checkpointed); run "
                                        "the mirror again to go on")
                if not records and self.follow:
                    if now - last_clean > CHECKPOINT_CLEAN_INTERVAL_S:
                        last_clean = now
                        self._compact_checkpoints()
                    if now - last_check > SOURCE_CHECK_INTERVAL_S:
                        last_check = now
                        self._check_source(names, consumer.positions(), SOURCE_CHECK_BUDGET_S)
                    if self.pattern and now - last_discovery > NEW_TOPICS_INTERVAL_S:
                        last_discovery = now
                        new = [t for t in source_topics(self.src, self.wanted, self.pattern) if t not in names]
                        if new:
                            self._checkpoint(producer, sent)
                            consumer.close()
                            for t in new:
                                self._ensure_dest(t)
                            names = names + new
                            self.stats.topics = list(names)
                            self._saved = self._load_checkpoints()
                            consumer = self._open(names)
                            sent = consumer.positions()
                    time.sleep(FOLLOW_SLEEP_S)
        finally:
            # a clean stop (end of input, Ctrl-C, SIGTERM) saves what was copied: no duplicate on resume.
            # Stopped in the middle of a send, exactly once saves nothing: the transaction holds part of
            # a poll's records, which only the transaction's abort (Producer.close) keeps from being
            # copied twice; the rerun copies them again from the last committed checkpoint
            try:
                if not (sending and self.exactly_once) and (unsaved or self._moved(sent)):
                    self._checkpoint(producer, sent)
            finally:
                consumer.close()
        if self.on_progress is not None:
            self.on_progress(self.stats)

    def _moved(self, positions: dict[tuple[str, int], int]) -> bool:
        """Did a position pass offsets holding no record for the mirror since its checkpoint (a
        transaction's marker, an aborted transaction's records, a compacted gap)? A checkpoint then
        lands past them: a rerun does not read them again (an aborted transaction may be large)."""
        saved = self._saved
        return any(off > saved.get(tp, 0) for tp, off in positions.items())

    def _send(self, producer: ProducerBase, chunks: list[tuple[str, int, list]],
              sent: dict[tuple[str, int], int] | None = None) -> None:
        """Each chunk's (offset, timestamp, key, value, headers) tuples to the renamed topic; `sent`
        (partition -> next offset) follows each chunk handed over."""
        bulk = getattr(producer, "send_tuples", None)  # the remote producer: one librdkafka call a record
        for topic, partition, records in chunks:
            target = self.rename(topic)
            keep = self._keep_partition[topic]
            if bulk is not None:
                bulk(target, partition if keep else -1, records)
            else:
                _send_local(producer, target, partition if keep else None, records)
            if sent is not None and records:
                sent[(topic, partition)] = records[-1][0] + 1

    def _checkpoint(self, producer, positions: dict[tuple[str, int], int]) -> None:  # noqa: ANN001
        """Wait for DEST to acknowledge what was sent, then record where each partition is
        (exactly once: both in one transaction, committed here)."""
        producer.flush()
        changed = {tp: off for tp, off in positions.items() if self._saved.get(tp) != off}
        for (t, p), offset in changed.items():
            producer.send(CHECKPOINT_TOPIC, json.dumps({"next_offset": offset}).encode(),
                          key=self._checkpoint_key(t, p), partition=0)
        if self.exactly_once:
            producer.commit()
            producer.begin()
        elif changed:
            producer.flush()
        self._saved.update(changed)


def _send_local(producer: Producer, topic: str, partition: int | None, records: list) -> None:
    """(offset, timestamp, key, value, headers) tuples through the local producer's bulk path
    (send_keyed: no PendingRecord, no batch check per record), one call per run of records sharing
    a timestamp and headers (a busy source's records come ~a thousand to a millisecond)."""
    pairs = itemgetter(2, 3)
    for (ts, headers), run in groupby(records, key=itemgetter(1, 4)):
        producer.send_keyed(topic, list(map(pairs, run)), headers=headers or None, partition=partition,
                            timestamp=ts)


def _poll(consumer: ConsumerBase) -> list[tuple[str, int, list]]:
    """(topic, partition, (offset, timestamp, key, value, headers) tuples) of one poll: both kinds
    of consumer give them without building a Record per record."""
    return consumer.poll_chunks()


def _set_configs(store, topic: str) -> dict[str, str]:
    """The configs set on a source topic (not the defaults), to create its copy with."""
    if getattr(store, "is_local", True):
        return dict(store.topic(topic).configs)
    return store.topic_configs(topic)

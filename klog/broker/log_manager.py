"""The broker keeping its own logs, as Kafka's LogManager and LogCleaner do: one retention pass every
`log.retention.check.interval.ms`, and compaction of compacted topics whose
`min.cleanable.dirty.ratio` (or `max.compaction.lag.ms`) says so, one pass every `log.cleaner.backoff.ms`.

Both passes go one partition at a time through klog.broker.lifecycle (the code `klog topics clean`
runs): retention under the partition's lock, compaction taking it only to plan and to swap in. They
are meant for one dedicated thread (klog/server/log_cleaner.py runs them for `klog serve`); `stop`
is checked between partitions. A partition is looked at cheaply first (its state file's high
watermark, its segments' sizes) and left alone unless something is due, so a pass over a store
where nothing changed costs a few stat calls per partition, however much data it holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from klog.broker import lifecycle
from klog.errors import KlogError, UnknownPartitionError, UnknownTopicError
from klog.store.config import LONG_MAX
from klog.store.throttle import Throttler

LOG_RETENTION_CHECK_MS_DEFAULT = 300_000  # Kafka's log.retention.check.interval.ms
LOG_CLEANER_BACKOFF_MS_DEFAULT = 15_000  # Kafka's log.cleaner.backoff.ms

Warn = Callable[[str], None]


@dataclass
class LogManager:
    """What the passes remember between ticks, so that a partition nothing was appended to since
    is not looked at again: the high watermark and configs of compacted partitions found not due
    (without a time-based rule), and of partitions found with their active segment alone."""

    store: object
    warn: Warn
    stop: threading.Event = field(default_factory=threading.Event)
    # notices a topic deleted and created again by another process (RawAppender.check_topic in serve)
    check_topic: Callable[[str], None] | None = None
    # paces compaction's I/O (log.cleaner.io.max.bytes.per.second); None: as fast as it goes
    throttler: Throttler | None = None
    _not_due: dict[tuple[str, int], tuple[int, object]] = field(default_factory=dict)
    # partitions found with only their active segment, by their high watermark then
    _one_segment: dict[tuple[str, int], int] = field(default_factory=dict)

    def _partitions(self) -> list[tuple[str, int]]:
        out = []
        for topic in self.store.topic_names():
            self.store.forget_topic_metadata(topic)  # configs altered by another process count too
            try:
                if self.check_topic is not None:
                    self.check_topic(topic)
                out += [(topic, p) for p in range(self.store.partition_count(topic))]
            except (UnknownTopicError, UnknownPartitionError):
                continue  # deleted meanwhile
            except (KlogError, OSError) as e:
                self.warn(f"log cleaner: cannot read topic {topic}: {e}")
        return out

    def retention_pass(self) -> int:
        """Time, size and log-start retention on every partition where it is due (the hint the
        writer's roll keeps makes 'not due' cheap); the number of segments deleted."""
        deleted = 0
        for topic, partition in self._partitions():
            if self.stop.is_set():
                break
            try:
                deleted += self._retain_if_due(topic, partition)
            except (UnknownTopicError, UnknownPartitionError):
                continue
            except (KlogError, OSError) as e:  # the next pass tries again; the others go on
                self.warn(f"retention of {topic}-{partition} failed: {e}")
        return deleted

    def _retain_if_due(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        part = self.store.partition(topic, partition)
        hw = part.high_watermark()
        if self._one_segment.get(key) == hw:
            return 0  # only the active segment, which retention never deletes, and nothing appended
        if not lifecycle.retention_due(self.store, topic, partition):
            return 0
        deleted = lifecycle.retain(self.store, topic, partition).segments_deleted
        if part.retention_hint is None:  # no sealed segment left
            self._one_segment[key] = hw
        else:
            self._one_segment.pop(key, None)
        return deleted

    def compaction_pass(self) -> list[lifecycle.PartitionCleanup]:
        """Compact each compacted partition that is due (min.cleanable.dirty.ratio reached, or a
        dirty record older than max.compaction.lag.ms); what was compacted."""
        done = []
        for topic, partition in self._partitions():
            if self.stop.is_set():
                break
            try:
                result = self._compact_if_due(topic, partition)
            except (UnknownTopicError, UnknownPartitionError):
                continue
            except (KlogError, OSError) as e:
                self.warn(f"compaction of {topic}-{partition} failed: {e}")
                continue
            if result is not None:
                done.append(result)
        return done

    def _compact_if_due(self, topic: str, partition: int) -> lifecycle.PartitionCleanup | None:
        config = self.store.log_config(topic)
        if not config.compacted:
            return None
        key = (topic, partition)
        hw = self.store.partition(topic, partition).high_watermark()
        timeless = config.min_compaction_lag_ms == 0 and config.max_compaction_lag_ms >= LONG_MAX
        if timeless and self._not_due.get(key) == (hw, config):
            return None  # nothing appended (nor configs altered) since it was found not due
        if not lifecycle.compaction_due(self.store, topic, partition):
            self._not_due[key] = (hw, config)
            return None
        self._not_due.pop(key, None)
        result = lifecycle.clean_partition(self.store, topic, partition, retain=False, throttler=self.throttler)
        return result if result.compacted else None

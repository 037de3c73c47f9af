"""`klog serve` keeps its logs itself, as a Kafka broker's LogManager and LogCleaner do: retention
every `log.retention.check.interval.ms`, compaction of compacted topics that are due every
`log.cleaner.backoff.ms` (`log.cleaner.enable=false` turns compaction off), compaction's reads and
writes paced to `log.cleaner.io.max.bytes.per.second` (Kafka's Throttler), klog.json's defaults.

Both passes (klog.broker.log_manager) run in one thread of their own, never in the threads that
answer requests, one partition at a time. Compaction holds a partition's lock only to plan and to
swap the cleaned segments in (klog.store.cleaner), so a produce to the partition being compacted
waits for the swap at most, and Metadata or other partitions not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from klog.broker.log_manager import LOG_CLEANER_BACKOFF_MS_DEFAULT, LOG_RETENTION_CHECK_MS_DEFAULT, LogManager
from klog.store.throttle import KAFKA_UNLIMITED, cleaner_throttler

log = logging.getLogger("klog.serve")


def interval_setting(store: Any, name: str, default_ms: int) -> int:
    """klog.json's `name` in milliseconds (at least 1, as Kafka requires); Kafka's default, with one
    warning line, when it is not a whole number."""
    text = store.data_dir.default(name)
    digits = text.strip()
    if digits.isascii() and digits.isdigit() and int(digits) >= 1:
        return int(digits)
    log.warning("klog.json default '%s' must be a whole number of at least 1, not %r; using Kafka's default %d",
                name, text, default_ms)
    return default_ms


def rate_setting(store: Any, name: str) -> float:
    """klog.json's `name` in bytes per second (a number above 0); Kafka's unlimited default, with one
    warning line, when it is not one."""
    text = store.data_dir.default(name)
    try:
        rate = float(text)
    except ValueError:
        rate = 0.0
    if rate > 0:  # NaN and negatives fail too
        return rate
    log.warning("klog.json default '%s' must be a number of bytes per second above 0, not %r; using "
                "Kafka's default (no throttle)", name, text)
    return KAFKA_UNLIMITED


class LogCleanerService:
    """The two timers and the thread they run the passes in."""

    def __init__(self, store: Any, *, check_topic: Any = None, retention_check_ms: int | None = None,
                 backoff_ms: int | None = None, compaction: bool | None = None,
                 io_max_bytes_per_second: float | None = None) -> None:
        """Arguments override klog.json's log.retention.check.interval.ms, log.cleaner.backoff.ms,
        log.cleaner.enable and log.cleaner.io.max.bytes.per.second (tests); `check_topic(name)`
        notices a topic re-created by another process."""
        self.store = store
        self.retention_check_ms = retention_check_ms or interval_setting(
            store, "log.retention.check.interval.ms", LOG_RETENTION_CHECK_MS_DEFAULT)
        self.backoff_ms = backoff_ms or interval_setting(
            store, "log.cleaner.backoff.ms", LOG_CLEANER_BACKOFF_MS_DEFAULT)
        self.compaction = compaction if compaction is not None else \
            store.data_dir.default("log.cleaner.enable").strip().lower() != "false"
        self.manager = LogManager(store, warn=lambda m: log.warning("%s", m), check_topic=check_topic)
        rate = io_max_bytes_per_second or rate_setting(store, "log.cleaner.io.max.bytes.per.second")
        # a stop ends a throttled sleep at once: close() need not wait out the rate
        self.manager.throttler = cleaner_throttler(rate, sleep=self.manager.stop.wait)
        self._thread: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="klog-serve-cleaner")
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._every(self.retention_check_ms, self._retain, "retention")))
        if self.compaction:
            self._tasks.append(loop.create_task(self._every(self.backoff_ms, self._compact, "compaction")))

    async def _every(self, interval_ms: int, work: Any, what: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await loop.run_in_executor(self._thread, work)
            except Exception as e:  # noqa: BLE001 - the next pass tries again; serving goes on
                log.warning("log %s pass failed: %s: %s", what, type(e).__name__, e)

    def _retain(self) -> None:
        if self.manager.retention_pass():
            self.store.kafka_checkpoints_due = True  # log starts moved

    def _compact(self) -> None:
        for r in self.manager.compaction_pass():
            log.info("log cleaner: compacted %s-%d (dirty ratio %.2f): %d of %d record(s) removed, "
                     "%d segment(s) rewritten", r.topic, r.partition, r.dirty_ratio or 0.0, r.records_removed,
                     r.records_read, r.segments_rewritten)

    async def close(self) -> None:
        """Stop between partitions; a partition being cleaned is finished (a throttled sleep cut short)."""
        self.manager.stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown, True)

"""klog serve keeps `__consumer_offsets` in step with LMDB's groups (klog/broker/offsets_topic.py):
every SYNC_INTERVAL_S it looks whether LMDB changed (one environment read) and, if so, writes what
changed (LMDB's change log names the keys), in a thread of its own; a ListOffsets of the topic
brings it in step first, so a reader that starts after a commit sees it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from klog.broker.group_records import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS_DEFAULT
from klog.broker.offsets_topic import OffsetsTopicMirror

log = logging.getLogger("klog.serve")

SYNC_INTERVAL_S = 0.25
PASS_SHARE_INVERSE = 5  # the pause after a pass: at least five times what the pass took


class OffsetsTopicService:
    def __init__(self, store: Any, writer: Any, interval_s: float = SYNC_INTERVAL_S, notify: Any = None) -> None:
        """`notify(topic, partition)`: wakes the fetches waiting on a partition (run on the loop)."""
        from klog.server.log_cleaner import interval_setting

        partitions = interval_setting(store, "offsets.topic.num.partitions", OFFSETS_TOPIC_PARTITIONS_DEFAULT)
        self.mirror = OffsetsTopicMirror(store, writer, partitions)
        self.interval_s = interval_s
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="klog-serve-offsets-topic")
        self._task: asyncio.Task | None = None
        self._failing = False
        self._notify = notify

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._notify is not None:  # readers tailing the topic (Burrow) see a commit at once
            notify = self._notify
            self.mirror.on_append = lambda p: loop.call_soon_threadsafe(notify, OFFSETS_TOPIC, p)
        self._task = asyncio.create_task(self._run())

    def sync(self) -> None:
        """Bring the topic in step now (from a request's thread); a failure is logged, never raised."""
        try:
            self.mirror.sync()
            self._failing = False
        except Exception as e:  # noqa: BLE001 - the topic is a copy: LMDB keeps the offsets either way
            if not self._failing:
                log.warning("cannot bring __consumer_offsets in step with the committed offsets: %s", e)
            self._failing = True

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await loop.run_in_executor(self._thread, self.sync)
            # a pass reads only what changed (~0.7 ms of CPU for one changed offset among 10,000), but the
            # first compares everything (~0.6 s for 10,000): whatever a pass costs, at most a sixth of a core
            await asyncio.sleep(max(self.interval_s, PASS_SHARE_INVERSE * (loop.time() - started)))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown, True)

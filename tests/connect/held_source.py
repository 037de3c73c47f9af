"""A source connector for in-process tests, loaded by its dotted path: a task that polls nothing, and
once HOLD is set its poll waits for RELEASE (so its stop, and whatever waits for it, is held open)."""

from __future__ import annotations

import threading
import time

from klog.connect.api import SourceConnector, SourceTask

HOLD = threading.Event()
HELD = threading.Event()  # a poll is waiting for RELEASE
RELEASE = threading.Event()


class HeldSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        pass

    def poll(self) -> list:
        if HOLD.is_set() and not RELEASE.is_set():
            HELD.set()
            RELEASE.wait(60)
        time.sleep(0.05)
        return []


class HeldSource(SourceConnector):
    task_class = HeldSourceTask


def reset() -> None:
    for event in (HOLD, HELD, RELEASE):
        event.clear()

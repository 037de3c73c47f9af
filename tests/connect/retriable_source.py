"""A source connector for the tests, loaded by its dotted path: its poll() raises RetriableError the first
`fail.polls` times, then returns one record, then nothing."""

from __future__ import annotations

import time

from klog.connect.api import SourceConnector, SourceTask
from klog.connect.data import ConnectRecord
from klog.connect.errors import RetriableError


class RetriableSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        self.failures_left = int(props.get("fail.polls", "2"))
        self.topic = props["topic"]
        self.sent = False

    def poll(self) -> list:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise RetriableError(f"the source is not ready ({self.failures_left} more)")
        if self.sent:
            time.sleep(0.05)
            return []
        self.sent = True
        return [ConnectRecord(self.topic, None, None, None, None, "hello", None,
                              source_partition={"p": 0}, source_offset={"n": 1})]


class RetriableSource(SourceConnector):
    task_class = RetriableSourceTask

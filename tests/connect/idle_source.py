"""A source connector for the tests, loaded by its dotted path: `tasks.max` tasks that poll nothing."""

from __future__ import annotations

import time

from klog.connect.api import SourceConnector, SourceTask


class IdleSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        pass

    def poll(self) -> list:
        time.sleep(0.05)
        return []


class IdleSource(SourceConnector):
    task_class = IdleSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]

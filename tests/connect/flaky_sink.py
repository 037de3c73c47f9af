"""A sink connector for the tests, loaded by its dotted path: put() fails with RetriableError
`fail.times` times (every time with -1), then keeps what it gets in STORED."""

from __future__ import annotations

from klog.connect.api import SinkConnector, SinkTask
from klog.connect.config import ConfigDef
from klog.connect.errors import RetriableError

STORED: list = []
ATTEMPTS: list = []


class FlakySinkTask(SinkTask):
    def start(self, props: dict[str, str]) -> None:
        self.fail_times = FlakySink.config_def.parse(props)["fail.times"]

    def put(self, records: list) -> None:
        ATTEMPTS.append(len(records))
        if self.fail_times == -1 or len(ATTEMPTS) <= self.fail_times:
            raise RetriableError("the database went away")
        STORED.extend(r.value for r in records)


class FlakySink(SinkConnector):
    config_def = ConfigDef().define("fail.times", "int", 0)
    task_class = FlakySinkTask

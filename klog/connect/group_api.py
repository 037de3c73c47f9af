"""Kafka Connect's REST API on each distributed worker: what klog.connect.rest asks of a worker, answered
from the group's shared topics.

Every worker serves the whole group's view: connectors from connect-configs, task states and the worker
running each from connect-status. Changes (create, reconfigure, delete, pause, resume, stop, restart) are
applied through connect-configs, which every worker re-reads every second and acts on for the tasks it
runs, so a request may go to any worker (Kafka forwards them to its leader, which writes the same topic).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from klog.connect.distributed import REFRESH_S, DistributedWorker
from klog.connect.rest import HttpError
from klog.connect.worker import Validated, ignored_warning, restart_plan
from klog.errors import KlogError

STOP_WAIT_S = 10.0  # how long a stop waits for every worker to report the connector's tasks gone
# Kafka's answers (HerderRequestHandler) to a request a worker cannot serve now: 409 Conflict
REBALANCING = "Cannot complete request because of a conflicting operation (e.g. worker rebalance)"
STALE_CONFIG = ("Cannot complete request momentarily due to stale configuration (typically caused by a concurrent "
                "config change)")


class GroupApi:
    def __init__(self, dw: DistributedWorker) -> None:
        self.dw = dw
        self.worker = dw.worker
        self.config = dw.worker.config  # the worker settings /config/validate checks against
        self.offsets = dw.worker.offsets

    def conflict(self) -> str | None:
        """Why this worker cannot serve a connector request now (Kafka answers 409): the group is
        rebalancing it, or it could not read connect-configs; None when it can."""
        if not self.dw.settled.is_set():
            return REBALANCING
        if self.dw.configs_unread:
            return STALE_CONFIG
        return None

    # -- reading -------------------------------------------------------------------------------------
    def _configs(self):  # noqa: ANN202 - the ConfigStore, read again (another worker may have written)
        try:
            self.worker.configs.reload()
        except KlogError:
            raise HttpError(409, STALE_CONFIG) from None  # this worker's view of the configs is stale
        return self.worker.configs

    def names(self) -> list[str]:
        return sorted(self._configs().connectors())

    def validated(self, name: str) -> Validated:
        props = self._configs().connectors().get(name)
        if props is None:
            raise KeyError(name)
        return self.worker.validate(props)

    def target_state(self, name: str) -> str:
        self.validated(name)
        return self.worker.configs.target_state(name)

    def task_configs(self, name: str) -> list[dict[str, str]]:
        configs = self._configs()
        return [] if configs.target_state(name) == "STOPPED" else configs.tasks(name)

    def describe_status(self, name: str) -> dict:
        """Kafka's ConnectorStateInfo: each task's state and the worker running it (connect-status)."""
        v = self.validated(name)
        status = self.worker.status
        status.reload()
        target = self.worker.configs.target_state(name)
        tasks = []
        for i in range(len(self.task_configs(name))):
            doc = status.get(name, i) or {}
            state = doc.get("state") or "UNASSIGNED"
            task = {"id": i, "state": state, "worker_id": doc.get("worker_id") or self.worker.status.worker_id}
            if state == "FAILED" and doc.get("trace"):
                task["trace"] = doc["trace"]
            tasks.append(task)
        if target in ("STOPPED", "PAUSED"):
            state = target
        else:
            state = "FAILED" if tasks and all(t["state"] == "FAILED" for t in tasks) else "RUNNING"
        owner = tasks[0]["worker_id"] if tasks else self.worker.status.worker_id
        return {"name": name, "connector": {"state": state, "worker_id": owner}, "tasks": tasks, "type": v.cls.kind}

    # -- changing (through connect-configs) ----------------------------------------------------------
    def put(self, props: dict[str, str]) -> bool:
        v = self.worker.validate(props)
        if (message := ignored_warning(v)) is not None:  # the keys klog ignores, named on this worker
            self.worker.warn(message)
        new = v.name not in self.names()
        self.dw.submit(v)
        return new

    def delete(self, name: str) -> None:
        self.validated(name)
        self.worker.configs.delete_connector(name)

    def pause(self, name: str) -> None:
        self.worker.configs.put_target_state(name, "PAUSED")

    def resume(self, name: str) -> None:
        if self.target_state(name) == "STOPPED":
            self.dw.submit(self.validated(name))  # its tasks written again, as Kafka's leader does
        else:
            self.worker.configs.put_target_state(name, "STARTED")

    def stop_only(self, name: str) -> Callable[[], None]:
        """Target state STOPPED; returns the wait until no worker reports one of its tasks RUNNING (bounded),
        which the REST API runs without holding other requests."""
        count = len(self.task_configs(name))
        self.worker.configs.put_target_state(name, "STOPPED")

        def stopped() -> None:
            self.dw.refresh()  # this worker's own tasks stop now
            deadline = time.monotonic() + STOP_WAIT_S
            while time.monotonic() < deadline and self._running(name, count):
                time.sleep(min(0.1, REFRESH_S))

        return stopped

    def _running(self, name: str, count: int) -> bool:
        status = self.worker.status
        status.reload()
        return any((status.get(name, i) or {}).get("state") in ("RUNNING", "PAUSED") for i in range(count))

    def restart(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> dict:
        """Written to connect-configs; each worker restarts what it runs of the plan (KIP-745)."""
        connector_too, _, planned = restart_plan(self.describe_status(name), include_tasks, only_failed)
        if connector_too and self.worker.configs.target_state(name) != "STOPPED":
            # the connector instance lives only while it splits the work: a new one may split it anew
            v = self.validated(name)
            connector = v.cls()
            connector.start(v.props)
            tasks = connector.task_configs(v.config["tasks.max"])[: v.config["tasks.max"]]
            connector.stop()
            if [{**v.props, **t} for t in tasks] != self.worker.configs.tasks(name):
                self.dw.submit(v)
        self.worker.configs.put_restart(name, include_tasks, only_failed)
        return planned

    def restart_task(self, name: str, task_id: int) -> None:
        self.worker.configs.put_restart(name, True, False, task_id)

    # -- offsets (KIP-875) --------------------------------------------------------------------------
    def connector_offsets(self, name: str) -> list[dict]:
        from klog.connect.offsets import list_offsets

        return list_offsets(self.worker.store, self.offsets, name, self.validated(name).cls.kind)

    def _tasks_gone(self, name: str) -> None:
        from klog.connect.offsets import TasksStillRunning

        if self._running(name, len(self._configs().tasks(name))):
            raise TasksStillRunning(f"a task of connector {name} is still running on a worker: try again shortly")

    def alter_offsets(self, name: str, body: Any) -> None:
        from klog.connect.offsets import alter_offsets

        self._tasks_gone(name)
        v = self.validated(name)
        alter_offsets(self.worker.store, self.offsets, name, v.cls.kind, body, v)

    def reset_offsets(self, name: str) -> None:
        from klog.connect.offsets import reset_offsets

        self._tasks_gone(name)
        v = self.validated(name)
        reset_offsets(self.worker.store, self.offsets, name, v.cls.kind, v)

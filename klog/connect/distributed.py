"""Distributed workers: `klog connect worker --group-id G` processes, on one machine or many, share the
connectors' tasks and take over those of a worker that dies.

Kafka Connect's workers coordinate through Kafka's group protocol with an assignor of their own. klog
reuses the consumer group protocol as it is, so the same membership, session timeouts and rebalances
work on the local store and on any Kafka cluster: every task is a partition of the (never written)
topic `connect-tasks-<group>`, and the partitions the group assigns to a worker are the tasks it runs.
The tasks themselves come from connect-configs (every worker reads it; a config submitted to any worker
is written there), so slot i is the i-th task of the connectors in name order; a stopped connector keeps
its slots (idle), so stopping one moves no other connector's task. The worker running a connector's
task 0 also runs its connector instance, which may ask for new task configs (the JDBC source when its
tables change): they are written to connect-configs, and every worker restarts what changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from klog.connect.api import Connector
from klog.connect.storage import ensure_topic
from klog.connect.worker import ConnectorContext, SinkRunner, SourceRunner, TaskRunner, Validated, Worker
from klog.errors import KlogError

SLOTS = 256  # tasks one group can run (partitions of connect-tasks-<group>)
REFRESH_S = 1.0  # how often a worker re-reads connect-configs for connectors added, changed or deleted


class DistributedWorker:
    def __init__(self, store, group_id: str, worker_props: dict[str, str] | None = None,  # noqa: ANN001
                 warn: Callable[[str], None] | None = None, worker_id: str = "klog") -> None:
        from klog.client.group import GroupConfig

        props = {"offset.flush.interval.ms": "1000", **(worker_props or {})}
        self.worker = Worker(store, props, warn, worker_id)
        self.store = store
        self.group_id = group_id
        self.slots_topic = f"connect-tasks-{group_id}"
        ensure_topic(store, self.slots_topic, SLOTS, compacted=False)
        # slot → (connector, task id, task config, whether it runs: not when the connector is stopped)
        self.table: list[tuple[str, int, dict[str, str], bool]] = []
        self.validated: dict[str, Validated] = {}
        self.owned: set[int] = set()
        self.runners: dict[int, TaskRunner] = {}
        self.hosted: dict[int, Connector] = {}  # slot of a connector's task 0 run here → the connector instance
        # clear while the group rebalances this worker (from the revocation of its slots, or its start,
        # until slots are assigned to it): the REST API answers 409 meanwhile, as Kafka's herder
        self.settled = threading.Event()
        self.configs_unread = False  # the last re-read of connect-configs failed: this worker's view is stale
        self.lock = threading.RLock()
        # restart requests already in connect-configs at start are old news: only later ones restart tasks
        self.restarts_seen = {n: r.get("klog.request") for n, r in self.worker.configs.restart_requests().items()}
        session = int(props.get("session.timeout.ms", "10000"))
        config = GroupConfig(enable_auto_commit=False, client_id=worker_id, session_timeout_ms=session,
                             heartbeat_interval_ms=max(10, min(3000, session // 3)),
                             assignor="roundrobin")  # slot i to member i mod n: the first tasks spread
        self.refresh()
        self.consumer = store.group_consumer(group_id, self.slots_topic, config=config, on_assign=self._assigned,
                                             on_revoke=self._revoked)

    def submit(self, v: Validated) -> None:
        """Write a connector's config and task configs (any worker may; all pick them up)."""
        connector = v.cls()
        connector.start(v.props)
        tasks = connector.task_configs(v.config["tasks.max"])[: v.config["tasks.max"]]
        connector.stop()  # the instance that runs is the one the worker of its task 0 hosts
        self.worker.configs.put_connector(v.name, v.props, [{**v.props, **t} for t in tasks])
        self.worker.configs.put_target_state(v.name, "STARTED")

    def refresh(self) -> None:
        """The task table from connect-configs; tasks whose config changed are restarted."""
        configs = self.worker.configs
        try:
            configs.reload()
        except KlogError as e:  # a store hiccup: keep running what runs, read again at the next refresh
            self.worker.warn(f"cannot re-read {configs.topic}: {e}")
            self.configs_unread = True
            return
        self.configs_unread = False
        # Every connector's tasks keep their slots whatever its state: a stopped (or unrunnable) connector's
        # slots stay reserved, idle, so stopping one does not renumber the others' slots and move their
        # tasks to other workers (Kafka's incremental cooperative assignor likewise keeps assignments).
        table = []
        for name, props in sorted(configs.connectors().items()):
            run = configs.target_state(name) != "STOPPED"  # no tasks run (Kafka writes none) until resumed
            if run:
                try:
                    self.validated[name] = self.worker.validate(props)
                except Exception as e:  # noqa: BLE001 - one bad stored config must not stop the others
                    self.worker.warn(f"connector '{name}' is not run: {e}")
                    run = False
            for i, task in enumerate(configs.tasks(name)):
                table.append((name, i, task, run))
        with self.lock:
            if table != self.table:
                old, self.table = self.table, table[:SLOTS]
                for slot in sorted(self.owned):
                    before = old[slot] if slot < len(old) else None
                    after = self.table[slot] if slot < len(self.table) else None
                    if before != after:
                        self._stop(slot)
                        self._start(slot)
            self._restarts()
            for runner in self.runners.values():
                self._apply_target_state(runner)

    def _apply_target_state(self, runner: TaskRunner) -> None:
        if self.worker.configs.target_state(runner.v.name) == "PAUSED":
            runner.paused.set()
        else:
            runner.paused.clear()

    def _restarts(self) -> None:
        """Restart requests (connect-configs' restart-connector-<name>) not seen yet: the tasks of that
        connector this worker runs are restarted (only the failed ones with only-failed; one with klog.task)."""
        for name, request in self.worker.configs.restart_requests().items():
            rid = request.get("klog.request")
            if self.restarts_seen.get(name) == rid:
                continue
            self.restarts_seen[name] = rid
            if not request.get("include-tasks") and "klog.task" not in request:
                continue  # the connector object only: klog's keep no state to restart
            for slot, runner in list(self.runners.items()):
                if runner.v.name != name or (request.get("only-failed") and runner.state != "FAILED"):
                    continue
                if "klog.task" in request and runner.task_id != request["klog.task"]:
                    continue
                self._stop(slot)
                self._start(slot)

    def _start(self, slot: int) -> None:
        if slot >= len(self.table) or slot in self.runners or not self.table[slot][3]:
            return
        name, task_id, props, _ = self.table[slot]
        v = self.validated[name]
        if v.cls.kind == "source":
            self.worker.offsets.reload()  # the offsets the task's last owner (another worker) stored
        runner = (SourceRunner if v.cls.kind == "source" else SinkRunner)(self.worker, v, task_id, props)
        self._apply_target_state(runner)
        self.runners[slot] = runner
        runner.start()
        if task_id == 0:
            self._host(slot, v)

    def _stop(self, slot: int) -> None:
        runner = self.runners.pop(slot, None)
        if runner is not None:
            runner.stop_event.set()
            runner.join()
        if (connector := self.hosted.pop(slot, None)) is not None:
            connector.stop()

    def _host(self, slot: int, v: Validated) -> None:
        connector = v.cls()
        connector.context = ConnectorContext(lambda: self._reconfigure(v, connector))
        try:
            connector.start(v.props)
        except Exception as e:  # noqa: BLE001 - its tasks run all the same; only reconfigurations are lost
            self.worker.warn(f"connector '{v.name}' cannot start here (its task configs stay as they are): {e}")
            return
        self.hosted[slot] = connector

    def _hosts(self, connector: Connector) -> bool:
        return any(c is connector for c in self.hosted.values())

    def _reconfigure(self, v: Validated, connector: Connector) -> None:
        """The hosted connector asked for new task configs: written when they differ from connect-configs'
        (the database is read outside the lock: rebalances do not wait for it)."""
        with self.lock:
            if not self._hosts(connector):
                return
        tasks = connector.task_configs(v.config["tasks.max"])[: v.config["tasks.max"]]
        wanted = [{**v.props, **t} for t in tasks]
        with self.lock:
            if self._hosts(connector) and wanted != self.worker.configs.tasks(v.name):
                self.worker.configs.put_connector(v.name, v.props, wanted)

    def _assigned(self, tps: list[tuple[str, int]]) -> None:
        with self.lock:
            for _, slot in tps:
                self.owned.add(slot)
                self._start(slot)
        self.settled.set()

    def _revoked(self, tps: list[tuple[str, int]]) -> None:
        self.settled.clear()  # a rebalance: until the new assignment (eager: every slot is revoked first)
        with self.lock:
            for _, slot in tps:
                self.owned.discard(slot)
                self._stop(slot)  # committed before the slot is released: no two owners of a task

    def running(self) -> list[tuple[str, int]]:
        with self.lock:
            return sorted((r.v.name, r.task_id) for r in self.runners.values() if r.is_alive())

    def run(self, stop: threading.Event | None = None) -> None:
        """Until `stop` is set (or Ctrl-C): heartbeats and rebalances, configs re-read every second."""
        last = time.monotonic()
        for _ in self.consumer.batches(timeout_ms=200):  # the slots topic is empty: this drives the group
            if stop is not None and stop.is_set():
                break
            if time.monotonic() - last >= REFRESH_S:
                self.refresh()
                last = time.monotonic()

    def close(self) -> None:
        with self.lock:
            for slot in list(self.runners):
                self._stop(slot)
        self.consumer.close()
        for s in (self.worker.offsets, self.worker.configs, self.worker.status):
            s.close()

"""POST /connectors/{name}/restart with Kafka's semantics (KIP-745), the same on a standalone and a
distributed worker: without includeTasks only the connector instance restarts (a FAILED task stays
FAILED, 204); with includeTasks=true&onlyFailed=true the failed task restarts too (202 and the status
with RESTARTING on it), and runs."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

import klog
from tests.connect import flaky_sink
from tests.connect.helpers import wait_for
from tests.connect.test_connect_rest import call


@contextmanager
def _standalone(store):  # noqa: ANN001, ANN202
    from klog.connect.worker import Worker

    worker = Worker(store, {"offset.flush.interval.ms": "200"})
    try:
        yield worker
    finally:
        worker.stop()


@contextmanager
def _distributed(store):  # noqa: ANN001, ANN202
    from klog.connect.distributed import DistributedWorker
    from klog.connect.group_api import GroupApi

    dw = DistributedWorker(store, "g", {"offset.flush.interval.ms": "200", "session.timeout.ms": "3000"})
    stop = threading.Event()
    thread = threading.Thread(target=dw.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield GroupApi(dw)
    finally:
        stop.set()
        thread.join(30)
        dw.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [_standalone, _distributed], ids=["standalone", "distributed"])
def test_restart_without_include_tasks_leaves_the_tasks(mode, data_dir):
    from klog.connect.rest import RestServer

    flaky_sink.STORED.clear()
    flaky_sink.ATTEMPTS.clear()
    store = klog.open(data_dir)
    store.create_topic("in", partitions=1)
    with store.producer() as p:
        p.send("in", b"v1")
    with mode(store) as worker:
        server = RestServer(worker, "127.0.0.1", 0).start()
        try:
            api = f"http://127.0.0.1:{server.port}"
            config = {"connector.class": "tests.connect.flaky_sink.FlakySink", "topics": "in", "fail.times": "1",
                      "errors.retry.timeout": "0", "value.converter": "string"}
            assert call(api, "POST", "/connectors", {"name": "flaky", "config": config})[0] == 201

            def task_state() -> str:
                tasks = call(api, "GET", "/connectors/flaky/status")[1]["tasks"]
                return tasks[0]["state"] if tasks else "UNASSIGNED"

            wait_for(lambda: task_state() == "FAILED", timeout=30, what="the task failed on its first put")
            assert call(api, "POST", "/connectors/flaky/restart") == (204, None)
            assert call(api, "POST", "/connectors/flaky/restart?onlyFailed=true")[0] == 202
            # a distributed worker acts on restart requests at its next refresh of connect-configs
            threading.Event().wait(1.5)
            assert task_state() == "FAILED" and flaky_sink.ATTEMPTS == [1]

            code, planned = call(api, "POST", "/connectors/flaky/restart?includeTasks=true&onlyFailed=true")
            assert code == 202 and planned["name"] == "flaky"
            assert [t["state"] for t in planned["tasks"]] == ["RESTARTING"]
            wait_for(lambda: flaky_sink.STORED == ["v1"], timeout=30, what="the restarted task's put")
            assert task_state() == "RUNNING"
            code, planned = call(api, "POST", "/connectors/flaky/restart?includeTasks=true&onlyFailed=true")
            assert code == 202 and [t["state"] for t in planned["tasks"]] == ["RUNNING"]  # nothing failed
        finally:
            server.close()
    store.close()

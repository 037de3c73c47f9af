"""Distributed workers keep their tasks when another connector stops: three workers run three
connectors of two tasks each; one connector is stopped; every task of the other two stays on the worker
that ran it (a stopped connector's slots stay reserved, so nothing is renumbered), and resuming it
brings its tasks back where they were."""

from __future__ import annotations

import threading

import pytest

import klog
from tests.connect.helpers import wait_for


@pytest.mark.slow
def test_stopping_a_connector_moves_no_other_task(data_dir):
    from klog.connect.distributed import DistributedWorker
    from klog.connect.group_api import GroupApi

    store = klog.open(data_dir)
    props = {"offset.flush.interval.ms": "200", "session.timeout.ms": "3000"}
    workers = [DistributedWorker(store, "g", props, worker_id=f"w{i}") for i in range(3)]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    try:
        for t in threads:
            t.start()
        for name in ("a", "b", "c"):
            workers[0].submit(workers[0].worker.validate(
                {"name": name, "connector.class": "tests.connect.idle_source.IdleSource", "tasks.max": "2"}))

        def placement() -> dict:
            return {task: w.worker.status.worker_id for w in workers for task in w.running()}

        everything = {(n, i) for n in "abc" for i in (0, 1)}
        wait_for(lambda: set(placement()) == everything and len(placement()) == 6, timeout=60,
                 what="six tasks running")
        before = placement()
        assert sorted(before.values()) == ["w0", "w0", "w1", "w1", "w2", "w2"]  # two each

        GroupApi(workers[1]).stop_only("a")
        for w in workers:
            w.refresh()  # what each worker does every second, now
        after = placement()
        assert set(after) == everything - {("a", 0), ("a", 1)}
        assert after == {task: before[task] for task in after}

        GroupApi(workers[2]).resume("a")
        for w in workers:
            w.refresh()
        wait_for(lambda: placement() == before, timeout=30, what="a's tasks back on their workers")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for w in workers:
            w.close()
        store.close()

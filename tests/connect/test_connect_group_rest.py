"""Kafka Connect's REST API on distributed workers, with plain HTTP requests: any worker of the group
lists, creates, pauses, stops, resumes and deletes the group's connectors; status names the worker each
task runs on; the offsets endpoints work on a stopped connector whose tasks ran on another worker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest

import klog
from tests.connect import held_source
from tests.connect.helpers import REPO, values, wait_for
from tests.connect.test_connect_rest import call


def ask(url: str, method: str, path: str, body: object = None) -> tuple[int, object]:
    """call(), asked again while the worker answers Kafka's 409 of a rebalance or stale configs (a worker
    joining or leaving rebalances the others), as Connect's clients retry."""
    from klog.connect.group_api import REBALANCING, STALE_CONFIG

    answer: tuple[int, object] = (0, None)

    def answered() -> bool:
        nonlocal answer
        answer = call(url, method, path, body)
        return not (answer[0] == 409 and answer[1]["message"] in (REBALANCING, STALE_CONFIG))

    wait_for(answered, timeout=60, what=f"{method} {path} answered outside a rebalance")
    return answer


def _worker(data_dir: str, props: str) -> tuple[subprocess.Popen, str, str]:
    """A `klog connect worker` with its REST API on an ephemeral port: (process, its URL, its worker id)."""
    proc = subprocess.Popen([sys.executable, "-m", "klog", "connect", "worker", "--group-id", "g", "-w", props,
                             "--listen", "127.0.0.1:0"], env={**os.environ, "KLOG_DATA_DIR": data_dir,
                                                              "PYTHONPATH": REPO},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        found = re.search(r"worker (\S+) in group g; REST API on (http://\S+)", line)
        if found:
            return proc, found.group(2), found.group(1)
        if not line:
            break
    proc.kill()
    raise AssertionError("the worker did not start")


def _source(tmp_path, name: str) -> dict:
    path = tmp_path / f"{name}.txt"
    path.write_text(f"{name}1\n{name}2\n")
    return {"connector.class": "FileStreamSource", "file": str(path), "topic": f"t-{name}",
            "value.converter": "string"}


@pytest.mark.slow
def test_every_worker_serves_the_groups_connectors(tmp_path, data_dir):
    props = tmp_path / "worker.properties"
    props.write_text("session.timeout.ms=3000\noffset.flush.interval.ms=200\n")
    procs = []
    try:
        (w1, url1, id1), (w2, url2, id2) = (_worker(data_dir, str(props)), _worker(data_dir, str(props)))
        procs = [w1, w2]
        assert ask(url1, "POST", "/connectors", {"name": "a", "config": _source(tmp_path, "a")})[0] == 201
        assert ask(url2, "POST", "/connectors", {"name": "b", "config": _source(tmp_path, "b")})[0] == 201
        assert ask(url2, "POST", "/connectors", {"name": "a", "config": _source(tmp_path, "a")})[0] == 409
        assert ask(url1, "GET", "/connectors") == ask(url2, "GET", "/connectors") == (200, ["a", "b"])
        wait_for(lambda: values(data_dir, "t-a") == [b"a1", b"a2"] and values(data_dir, "t-b") == [b"b1", b"b2"],
                 timeout=60, what="both connectors' lines")

        def owners() -> set:
            found = set()
            for name in ("a", "b"):
                status = ask(url1, "GET", f"/connectors/{name}/status")[1]
                if status["tasks"] and status["tasks"][0]["state"] == "RUNNING":
                    found.add(status["tasks"][0]["worker_id"])
            return found

        wait_for(lambda: owners() == {id1, id2}, timeout=60, what="one task on each worker")
        assert ask(url2, "GET", "/connectors/a/config")[1]["topic"] == "t-a"
        assert ask(url2, "GET", "/connectors/a/tasks")[1][0]["id"] == {"connector": "a", "task": 0}

        assert ask(url2, "PUT", "/connectors/a/pause")[0] == 202
        wait_for(lambda: ask(url1, "GET", "/connectors/a/status")[1]["tasks"][0]["state"] == "PAUSED",
                 what="the task paused wherever it runs")
        assert ask(url1, "PUT", "/connectors/a/resume")[0] == 202
        wait_for(lambda: ask(url2, "GET", "/connectors/a/status")[1]["tasks"][0]["state"] == "RUNNING")

        partition = {"filename": str(tmp_path / "a.txt")}
        assert ask(url1, "PATCH", "/connectors/a/offsets", {"offsets": []})[0] == 400  # not stopped
        assert ask(url2, "PUT", "/connectors/a/stop")[0] == 202
        status = ask(url1, "GET", "/connectors/a/status")[1]
        assert status["connector"]["state"] == "STOPPED" and status["tasks"] == []
        offsets = ask(url1, "GET", "/connectors/a/offsets")[1]["offsets"]
        assert [(o["partition"], o["offset"]["position"]) for o in offsets] == [(partition, 6)]
        assert ask(url1, "PATCH", "/connectors/a/offsets",
                    {"offsets": [{"partition": partition, "offset": {"position": 3}}]})[0] == 200
        assert ask(url2, "PUT", "/connectors/a/resume")[0] == 202
        wait_for(lambda: values(data_dir, "t-a") == [b"a1", b"a2", b"a2"], timeout=30,
                 what="the line after the altered offset, read by whichever worker runs the task")

        assert ask(url2, "DELETE", "/connectors/b")[0] == 204
        assert ask(url1, "GET", "/connectors") == (200, ["a"])
        assert ask(url1, "GET", "/connectors/b/status")[0] == 404
        wait_for(lambda: {t["worker_id"] for t in ask(url1, "GET", "/connectors/a/status")[1]["tasks"]} <= {id1, id2})
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_a_config_posted_to_a_worker_names_the_keys_klog_ignores(tmp_path, data_dir):
    """A config POSTed to a distributed worker gets the one warning line `klog connect run` prints for keys
    klog does not implement (a misspelt transform key here), on the worker that took it."""
    props = tmp_path / "worker.properties"
    props.write_text("session.timeout.ms=3000\noffset.flush.interval.ms=200\n")
    proc, url, _ = _worker(data_dir, str(props))
    try:
        config = {**_source(tmp_path, "a"), "transforms": "r", "transforms.r.type": "RegexRouter",
                  "transforms.r.regex": "(.*)", "transforms.r.replacement": "$1", "transforms.r.feild": "x"}
        assert ask(url, "POST", "/connectors", {"name": "a", "config": config})[0] == 201
        wait_for(lambda: values(data_dir, "t-a") == [b"a1", b"a2"], timeout=60, what="the connector's lines")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    [line] = [ln for ln in err.decode().splitlines() if "does not implement" in ln]
    assert "transforms.r.feild" in line


@contextmanager
def _in_process_worker(data_dir: str):
    """A DistributedWorker of group g run in a thread, with its REST API: (the worker, its URL)."""
    from klog.connect.distributed import DistributedWorker
    from klog.connect.group_api import GroupApi
    from klog.connect.rest import RestServer

    store = klog.open(data_dir)
    dw = DistributedWorker(store, "g", {"offset.flush.interval.ms": "200", "session.timeout.ms": "10000"},
                           worker_id="w0")
    stop = threading.Event()
    runner = threading.Thread(target=dw.run, args=(stop,), daemon=True)
    rest = RestServer(GroupApi(dw), "127.0.0.1", 0).start()
    runner.start()
    try:
        yield dw, f"http://127.0.0.1:{rest.port}"
    finally:
        held_source.RELEASE.set()
        rest.close()
        stop.set()
        runner.join(30)
        dw.close()
        store.close()
        held_source.reset()


def _task_state(url: str, name: str) -> str | None:
    code, status = call(url, "GET", f"/connectors/{name}/status")
    return status["tasks"][0]["state"] if code == 200 and status["tasks"] else None


@pytest.mark.slow
def test_a_stop_in_progress_holds_no_other_request(data_dir):
    """PUT .../stop waits for the connector's tasks to be gone: meanwhile other requests (the connector
    list, another connector's status) are answered; they waited behind the stop (up to 10 s)."""
    with _in_process_worker(data_dir) as (dw, url):
        for name, cls in (("held", "tests.connect.held_source.HeldSource"),
                          ("other", "tests.connect.idle_source.IdleSource")):
            assert ask(url, "POST", "/connectors", {"name": name, "config": {"connector.class": cls}})[0] == 201
        wait_for(lambda: _task_state(url, "held") == _task_state(url, "other") == "RUNNING", timeout=60,
                 what="both tasks running")
        held_source.HOLD.set()
        assert held_source.HELD.wait(30)  # the held task's stop cannot finish before RELEASE
        answers: dict[str, tuple] = {}
        stopper = threading.Thread(target=lambda: answers.update(stop=call(url, "PUT", "/connectors/held/stop")))
        stopper.start()
        wait_for(lambda: (dw.worker.configs.reload(), dw.worker.configs.target_state("held"))[1] == "STOPPED",
                 what="the stop under way")
        assert call(url, "GET", "/connectors") == (200, ["held", "other"])
        assert _task_state(url, "other") == "RUNNING"
        assert stopper.is_alive() and "stop" not in answers  # both answered while the stop was in progress
        held_source.RELEASE.set()
        stopper.join(30)
        assert answers["stop"] == (202, None)
        assert call(url, "GET", "/connectors/held/status")[1]["connector"]["state"] == "STOPPED"


@pytest.mark.slow
def test_a_worker_answers_409_while_the_group_rebalances_it(data_dir):
    """A second worker joins: the first gives up its slots (its task held in its stop, so the rebalance
    stays open) and until it is assigned again answers Kafka's 409 with Kafka's message (status reads
    excepted, as Kafka's); then 200 again. klog answered as if nothing happened."""
    from klog.connect.distributed import DistributedWorker
    from klog.connect.group_api import REBALANCING

    with _in_process_worker(data_dir) as (dw, url):
        assert ask(url, "POST", "/connectors", {"name": "held", "config": {
            "connector.class": "tests.connect.held_source.HeldSource"}})[0] == 201
        wait_for(lambda: _task_state(url, "held") == "RUNNING", timeout=60, what="the task running")
        assert call(url, "GET", "/connectors") == (200, ["held"])
        held_source.HOLD.set()
        assert held_source.HELD.wait(30)
        stop = threading.Event()
        second = DistributedWorker(dw.store, "g", {"session.timeout.ms": "10000"}, worker_id="w1")  # joins
        runner = threading.Thread(target=second.run, args=(stop,), daemon=True)
        runner.start()
        try:
            wait_for(lambda: not dw.settled.is_set(), timeout=30, what="the first worker's rebalance")
            for method, path in (("GET", "/connectors"), ("GET", "/connectors/held/config"),
                                 ("PUT", "/connectors/held/pause")):
                assert call(url, method, path) == (409, {"error_code": 409, "message": REBALANCING})
            assert call(url, "GET", "/connectors/held/status")[0] == 200
            held_source.RELEASE.set()  # the revocation completes; the slots are assigned anew
            wait_for(lambda: call(url, "GET", "/connectors") == (200, ["held"]), timeout=30,
                     what="the answer after the rebalance")
            assert call(url, "GET", "/connectors/held/config")[0] == 200
        finally:
            stop.set()
            runner.join(30)
            second.close()


@pytest.mark.slow
def test_a_worker_that_cannot_read_its_configs_answers_409(data_dir, monkeypatch):
    """connect-configs unreadable (a store or cluster hiccup): Kafka's 409 for stale configuration, not a
    500, and the worker's view marked stale until it reads them again."""
    from klog.connect.group_api import STALE_CONFIG
    from klog.errors import KlogError

    with _in_process_worker(data_dir) as (dw, url):
        assert ask(url, "GET", "/connectors") == (200, [])

        def fail() -> None:
            raise KlogError("connect-configs: unreadable")

        monkeypatch.setattr(dw.worker.configs, "reload", fail)
        assert call(url, "GET", "/connectors") == (409, {"error_code": 409, "message": STALE_CONFIG})
        wait_for(lambda: dw.configs_unread, what="the worker's own re-read failing")
        monkeypatch.undo()
        wait_for(lambda: call(url, "GET", "/connectors") == (200, []), what="the configs read again")

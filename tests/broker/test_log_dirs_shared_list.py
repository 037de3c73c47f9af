"""The store's list of log directories (klog.json) shared by processes: two `dirs add` at once keep
both directories; a process that opened the store before a `dirs remove D` elsewhere (klog serve, a
producer following stdin) places no new replica in D (a topic created, partitions added, a replica
moved), and a move racing the remove's last look is either seen by it or refused; `dirs list`
afterwards names every replica's directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

import klog
from klog.errors import KlogError
from tests.conftest import REPO

ADD_AFTER_BARRIER = """
import os, sys, time
from klog.store.layout import DataDir
data_dir, name, barrier = sys.argv[1:]
d = DataDir.open(data_dir, create=False)  # the list as it is now, before the other process adds
open(os.path.join(barrier, name), "w").close()
deadline = time.monotonic() + 20
while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
d.add_log_dir(os.path.join(os.path.dirname(data_dir), name))
"""


def _config_dirs(data_dir: str) -> dict[int, str]:
    with open(os.path.join(data_dir, "klog.json")) as f:
        return {d["id"]: os.path.basename(d["path"]) for d in json.load(f)["log_dirs"]}


def _listed(cli) -> dict[int, dict]:  # noqa: ANN001
    r = cli("dirs", "list", "--json")
    assert r.exit_code == 0, r
    return {d["id"]: d for d in map(json.loads, r.out.splitlines())}  # (a JSON object a line)


def _replica_dirs(data_dir: str) -> list[int]:
    with klog.open(data_dir) as store:
        return [d for t in store.list_topics() for pm in t.partitions for d in [*pm.replicas, *(pm.move or [])]]


def _consistent(cli, data_dir: str) -> dict[int, dict]:  # noqa: ANN001
    """`dirs list` names every directory a replica is in, with the replica counts the metadata has."""
    listed = _listed(cli)
    replicas = _replica_dirs(data_dir)
    assert set(replicas) <= set(listed), (replicas, listed)
    assert {i: d["replicas"] for i, d in listed.items()} == {i: replicas.count(i) for i in listed}
    return listed


@pytest.mark.slow
def test_two_processes_adding_at_once_keep_both(cli, data_dir, tmp_path):
    """Both processes read klog.json before either adds (a barrier): each used to save the list it
    had loaded, and the second save dropped the first's directory."""
    assert cli("topics", "create", "t").exit_code == 0
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": REPO}
    procs = [subprocess.Popen([sys.executable, "-c", ADD_AFTER_BARRIER, data_dir, name, str(barrier)], env=env,
                              stderr=subprocess.PIPE, text=True) for name in ("diskA", "diskB")]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert sorted(_config_dirs(data_dir).values()) == ["diskA", "diskB", "logs"]
    assert sorted(_config_dirs(data_dir)) == [0, 1, 2]  # (no id given twice)
    assert sorted(d["path"].rsplit(os.sep, 1)[1] for d in _consistent(cli, data_dir).values()) == \
        ["diskA", "diskB", "logs"]


def test_a_store_opened_before_adds_and_removes_keeps_every_directory(cli, data_dir):
    """Two Store objects (two processes' views): an add through one after an add through the other
    keeps both; a remove through one after an add through the other keeps the added one."""
    assert cli("topics", "create", "t").exit_code == 0
    with klog.open(data_dir) as a, klog.open(data_dir) as b:
        a.add_dir(os.path.join(data_dir, "..", "diskA"))
        b.add_dir(os.path.join(data_dir, "..", "diskB"))
        assert sorted(_config_dirs(data_dir).values()) == ["diskA", "diskB", "logs"]
        a.remove_dir(1)  # diskA: a's list never had diskB
        assert _config_dirs(data_dir) == {0: "logs", 2: "diskB"}
        assert [d.id for d in b.list_dirs()] == [0, 2]  # b's view follows klog.json
    _consistent(cli, data_dir)


def test_a_store_opened_before_dirs_remove_places_nothing_in_the_removed_directory(cli, data_dir):
    """klog serve or a long producer: opened with three directories; `dirs remove 2` elsewhere;
    then it creates topics, adds partitions and moves a replica: none lands in directory 2, and
    the move into it says so."""
    for name in ("disk1", "disk2"):
        assert cli("dirs", "add", os.path.join(data_dir, "..", name)).exit_code == 0
    assert cli("topics", "create", "t", "-p", "3").exit_code == 0
    with klog.open(data_dir) as stale:
        assert stale.log_dir_ids() == [0, 1, 2]
        r = cli("dirs", "remove", "2")
        assert r.exit_code == 0, r
        stale.create_topic("n", partitions=6, replication_factor=2)
        stale.alter_topic("t", partitions=6)
        source = stale.topic("t").partitions[0].replicas[0]
        with pytest.raises(KlogError, match="log directory 2 was removed"):
            stale.reassign("t", source, 2, partitions=[0])
        assert stale.log_dir_ids() == [0, 1]
    assert set(_replica_dirs(data_dir)) <= {0, 1}
    listed = _consistent(cli, data_dir)
    assert sorted(listed) == [0, 1]
    # a later add gets the next id, and names no replica of before
    r = cli("dirs", "add", os.path.join(data_dir, "..", "disk3"))
    assert r.exit_code == 0 and "Added log directory 2" in r.out, r
    assert _consistent(cli, data_dir)[2]["replicas"] == 0


@pytest.mark.slow
def test_a_move_racing_the_removes_last_look_is_refused(cli, data_dir, monkeypatch):
    """Another process moves a replica into the directory after `dirs remove`'s last pass found
    it empty, before it is forgotten: the move now waits for the forget and is refused (it used to
    be recorded, and the partition then named a directory klog.json no longer had)."""
    for name in ("disk1", "disk2"):
        assert cli("dirs", "add", os.path.join(data_dir, "..", name)).exit_code == 0
    assert cli("topics", "create", "t", "-p", "1").exit_code == 0
    outcome: list[object] = []
    with klog.open(data_dir) as mover, klog.open(data_dir) as remover:
        source = mover.topic("t").partitions[0].replicas[0]
        target = 2 if source != 2 else 1
        forget = remover.data_dir.remove_log_dir

        def move_into_it_meanwhile(log_dir_id: int) -> None:
            def move() -> None:
                try:
                    mover.reassign("t", source, target, partitions=[0])
                    outcome.append("moved")
                except KlogError as e:
                    outcome.append(str(e))

            thread = threading.Thread(target=move, daemon=True)
            thread.start()
            thread.join(1.5)  # (an empty partition's move takes milliseconds; one waiting for the lock: the forget)
            outcome.append("waited" if thread.is_alive() else "not waited")
            forget(log_dir_id)
            monkeypatch.setattr(remover.data_dir, "remove_log_dir", forget)
            move_into_it_meanwhile.thread = thread

        monkeypatch.setattr(remover.data_dir, "remove_log_dir", move_into_it_meanwhile)
        remover.remove_dir(target)
        deadline = time.monotonic() + 20
        move_into_it_meanwhile.thread.join(max(0.0, deadline - time.monotonic()))
    assert outcome == ["waited", f"log directory {target} was removed"], outcome
    assert target not in _replica_dirs(data_dir)
    _consistent(cli, data_dir)


def test_two_removes_at_once_move_nothing_into_each_others_directory(cli, data_dir):
    """`dirs remove 1` picks directory X for t-0; another process removes X before the move starts:
    the move is refused, and the next pass puts t-0 in a directory still there."""
    from klog.broker import replication

    for name in ("disk1", "disk2", "disk3"):
        assert cli("dirs", "add", os.path.join(data_dir, "..", name)).exit_code == 0
    assert cli("topics", "create", "t", "-p", "1").exit_code == 0
    with klog.open(data_dir) as store:
        if store.topic("t").partitions[0].replicas != [1]:
            store.reassign("t", store.topic("t").partitions[0].replicas[0], 1)
    real = replication.move_replica
    removed: list[int] = []

    def remove_the_target_first(store, topic, partition, source, target, warn=None):  # noqa: ANN001, ANN202
        if not removed:
            with klog.open(data_dir) as other:
                other.remove_dir(target)
            removed.append(target)
        return real(store, topic, partition, source, target, warn)

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(replication, "move_replica", remove_the_target_first)
        r = cli("dirs", "remove", "1")
    assert r.exit_code == 0, r
    [now] = _replica_dirs(data_dir)
    assert now not in (1, *removed)
    assert sorted(_consistent(cli, data_dir)) == sorted({0, 1, 2, 3} - {1, *removed})

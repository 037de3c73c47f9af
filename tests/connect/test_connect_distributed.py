"""Distributed workers: three `klog connect worker` processes share six sink tasks; one is SIGKILLed,
its tasks move to the others within the session timeout, and no record is lost (or written twice)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import klog
from tests.connect.helpers import REPO, records, wait_for, write_config
from tests.connect.test_connect_jdbc import KEY_SCHEMA, ROW_SCHEMA


def _send(data_dir: str, start: int, stop: int) -> None:
    with klog.open(data_dir) as s:
        s.create_topic("rows", partitions=6, exist_ok=True)
        with s.producer() as p:
            for i in range(start, stop):
                p.send("rows", json.dumps({"schema": ROW_SCHEMA, "payload": {"id": i, "name": f"n{i}"}}).encode(),
                       key=json.dumps({"schema": KEY_SCHEMA, "payload": {"id": i}}).encode())


def _task_owners(data_dir: str) -> dict[int, str]:
    """task → worker_id of its latest RUNNING status. A FAILED task fails the test at once: no worker
    restarts it by itself (as Kafka's: only a REST restart does), so waiting for it is useless."""
    from klog.errors import StateLostError

    owners: dict[int, str] = {}
    try:
        status = records(data_dir, "connect-status")
    except StateLostError:  # the killed worker's last status write: the next write rebuilds it
        return {}
    for r in status:
        key = r.key.decode()
        if key.startswith("status-task-jdbc-") and r.value is not None:
            doc = json.loads(r.value)
            task = int(key.rsplit("-", 1)[1])
            if doc["state"] == "FAILED":
                raise AssertionError(f"connector 'jdbc' task {task} FAILED on {doc['worker_id']}")
            if doc["state"] == "RUNNING":
                owners[task] = doc["worker_id"]
            elif owners.get(task) == doc["worker_id"]:
                owners.pop(task)
    return owners


def _rows(db: str) -> tuple[int, int]:
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return conn.execute('SELECT count(*), count(DISTINCT id) FROM "rows"').fetchone()
    except sqlite3.OperationalError:
        return (0, 0)


def _print_logs(procs: list[subprocess.Popen], logs: list[Path], data_dir: str, db: str) -> None:
    """Every worker's stderr and every status record (with a failed task's trace), shown by pytest with
    the failure."""
    for i, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        print(f"--- worker {i} (pid {proc.pid}, exit {proc.poll()}) stderr:\n{log.read_text(errors='replace')}")
    print(f"--- rows (count, distinct): {_rows(db)}; statuses:")
    try:
        statuses = records(data_dir, "connect-status")
    except Exception as e:  # noqa: BLE001 - the failure being reported matters more
        print(f"(unreadable: {e})")
        return
    for r in statuses:
        doc = json.loads(r.value) if r.value is not None else {}
        print(f"{r.key.decode()}: {doc.get('state')} on {doc.get('worker_id')}")
        if trace := doc.get("trace"):
            print(trace)


@pytest.mark.slow
def test_three_workers_share_six_tasks_and_survive_a_sigkill(tmp_path, data_dir):
    db = str(tmp_path / "out.db")
    _send(data_dir, 0, 3000)
    sink = write_config(str(tmp_path / "sink.json"), {
        "name": "jdbc", "connector.class": "JdbcSinkConnector", "topics": "rows", "tasks.max": "6",
        "connection.url": f"jdbc:sqlite:{db}", "insert.mode": "insert", "pk.mode": "record_key",
        "auto.create": "true", "retry.backoff.ms": "200"})
    props = tmp_path / "worker.properties"
    props.write_text("session.timeout.ms=3000\nconsumer.session.timeout.ms=3000\noffset.flush.interval.ms=500\n")
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}

    logs = [tmp_path / f"worker{i}.stderr" for i in range(3)]

    def worker(log: Path, *configs: str) -> subprocess.Popen:
        with open(log, "wb") as err:  # kept: a failure prints every worker's stderr
            return subprocess.Popen([sys.executable, "-m", "klog", "connect", "worker", "--group-id", "etl",
                                     "-w", str(props), "--listen", "none", *configs], env=env,
                                    stdout=subprocess.DEVNULL, stderr=err)

    procs = [worker(logs[0], sink), worker(logs[1]), worker(logs[2])]
    try:
        owners = wait_for(lambda: (o := _task_owners(data_dir)) and len(o) == 6 and len(set(o.values())) == 3 and o,
                          timeout=120, what="six tasks spread over three workers")
        assert sorted(owners) == list(range(6))
        victim = procs[0]
        victim_id = next(w for w in owners.values() if w.endswith(f":{victim.pid}"))
        wait_for(lambda: _rows(db)[0] == 3000, timeout=60, what="the first rows written")
        # killed right after writing more rows: before its consumer group commit (every 500 ms), so the
        # next owner of its partitions resumes from the offsets the database holds, or writes rows twice
        _send(data_dir, 3000, 6000)
        wait_for(lambda: _rows(db)[0] > 3000, timeout=60, what="more rows written")
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        _send(data_dir, 6000, 9000)
        moved = wait_for(lambda: (o := _task_owners(data_dir)) and len(o) == 6 and victim_id not in o.values() and o,
                         timeout=90, what="the dead worker's tasks taken over")
        assert len(set(moved.values())) == 2
        wait_for(lambda: _rows(db) == (9000, 9000), timeout=120, what="every row once")
    except BaseException:
        _print_logs(procs, logs, data_dir, db)
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    assert _rows(db) == (9000, 9000)


@pytest.mark.slow
def test_distributed_jdbc_source_splits_tables_and_reconfigures_on_a_new_table(tmp_path, data_dir):
    """Two workers run a JDBC source of tasks.max=2 over three tables: the tasks get contiguous shares
    (Confluent's taskConfigs); a table created later is found by the connector instance the worker of task 0
    runs, which writes new task configs to connect-configs, and its rows arrive (klog had one task, and a
    distributed worker ran no connector instance to notice new tables)."""
    import threading

    from klog.connect.connectors.jdbc_source import unquoted_tables
    from klog.connect.distributed import DistributedWorker

    db = str(tmp_path / "lite.db")

    def insert(table: str, count: int) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY NOT NULL)")
            conn.executemany(f"INSERT INTO {table} DEFAULT VALUES", [()] * count)

    def ids(table: str) -> list[int]:
        return [json.loads(r.value)["payload"]["id"] for r in records(data_dir, f"lite-{table}")]

    for table in "abc":
        insert(table, 2)
    store = klog.open(data_dir)
    props = {"offset.flush.interval.ms": "200", "session.timeout.ms": "3000"}
    workers = [DistributedWorker(store, "g", props, worker_id=f"w{i}") for i in range(2)]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]

    def shares() -> list[list[str]]:
        configs = workers[1].worker.configs
        configs.reload()
        return [unquoted_tables(t["tables"]) for t in configs.tasks("src")]

    try:
        for t in threads:
            t.start()
        workers[0].submit(workers[0].worker.validate({
            "name": "src", "connector.class": "JdbcSourceConnector", "connection.url": f"jdbc:sqlite:{db}",
            "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": "lite-", "tasks.max": "2",
            "poll.interval.ms": "50", "table.poll.interval.ms": "200"}))
        assert shares() == [["a", "b"], ["c"]]
        wait_for(lambda: all(ids(t) == [1, 2] for t in "abc"), timeout=60, what="every table's rows")
        insert("d", 3)
        wait_for(lambda: shares() == [["a", "b"], ["c", "d"]], timeout=60, what="the new table in a task config")
        wait_for(lambda: ids("d") == [1, 2, 3], timeout=60, what="the new table's rows")
        insert("a", 1)
        wait_for(lambda: ids("a") == [1, 2, 3], timeout=60, what="a row written after the reconfiguration")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for w in workers:
            w.close()
        store.close()
    assert {t: ids(t) for t in "abcd"} == {"a": [1, 2, 3], "b": [1, 2], "c": [1, 2], "d": [1, 2, 3]}

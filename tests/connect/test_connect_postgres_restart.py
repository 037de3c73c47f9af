"""The PostgreSQL source's start and its snapshot's end, as the Connect review found them (findings 1, 4, 5):
a snapshot's offsets are stored when it ends (an empty one's too), so a restart does not take it again;
a server not up yet at the first start is connected to later, one that refuses the login fails the task."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from tests.connect.helpers import records, running, wait_for

pytestmark = pytest.mark.slow


def cdc(db, **extra) -> dict:
    return db.debezium_config(name="pg", **{"topic.prefix": "shop", "slot.name": "klog_restart",
                                            "publication.name": "klog_restart", **extra})


def _offsets(data_dir: str) -> list[dict]:
    return [json.loads(r.value) for r in records(data_dir, "connect-offsets")
            if r.value is not None and json.loads(r.key)[0] == "pg"]


def _ops(data_dir: str, topic: str) -> list[tuple]:
    return [(json.loads(r.key)["payload"]["id"], json.loads(r.value)["payload"]["op"])
            for r in records(data_dir, topic) if r.value is not None]


NO_INTERVAL = {"offset.flush.interval.ms": "600000"}  # only what the task asks for is stored while it runs


def test_an_empty_snapshot_is_stored_and_not_taken_again(pg_db, data_dir):
    """Empty captured tables gave no record, so no offset: every start took the snapshot again, dropping the
    slot (a warning), and a change made while the connector was stopped came as a snapshot read (op r)."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    warnings: list[str] = []
    with running(data_dir, cdc(pg_db), worker=NO_INTERVAL, warnings=warnings) as w:
        wait_for(lambda: _offsets(data_dir) or w.describe_status("pg")["tasks"][0]["state"] == "FAILED",
                 timeout=20, what="the snapshot's offset")
        stored = _offsets(data_dir)
    assert len(stored) == 1 and stored[0]["lsn"] > 0 and "snapshot" not in stored[0]  # Debezium's completed one
    pg_db.execute("INSERT INTO t VALUES (1)")  # while stopped
    with running(data_dir, cdc(pg_db), worker=NO_INTERVAL, warnings=warnings):
        wait_for(lambda: _ops(data_dir, "shop.public.t"), timeout=20, what="the insert")
        pg_db.execute("INSERT INTO t VALUES (2)")
        wait_for(lambda: len(_ops(data_dir, "shop.public.t")) == 2, timeout=20, what="the next insert")
    assert _ops(data_dir, "shop.public.t") == [(1, "c"), (2, "c")]
    assert not [m for m in warnings if "dropping replication slot" in m]


def test_a_snapshots_offsets_are_stored_at_its_end(pg_db, data_dir):
    """offset.flush.interval.ms (10 s by default) went by before a snapshot's offsets were stored: a worker
    killed in that time took the snapshot again, dropping the slot."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO t SELECT generate_series(1, 5)")
    with running(data_dir, cdc(pg_db, **{"max.batch.size": "2"}), worker=NO_INTERVAL) as w:
        wait_for(lambda: any(o.get("last_snapshot_record") for o in _offsets(data_dir))
                 or w.describe_status("pg")["tasks"][0]["state"] == "FAILED", timeout=20, what="the snapshot's end")
        stored = _offsets(data_dir)
    assert stored[-1]["last_snapshot_record"] is True and stored[-1]["snapshot_completed"] is True
    assert [i for i, _ in _ops(data_dir, "shop.public.t")] == [1, 2, 3, 4, 5]


def test_changes_streamed_right_after_an_empty_snapshot_are_not_stored_behind_it(pg_db, data_dir):
    """The empty snapshot's offset is stored after the records of the poll that ended it: a transaction
    committed while the snapshot ran (after the slot's consistent point) is streamed in a later poll, so its
    offset is not overwritten by the older snapshot's one (which would send it again after a restart)."""
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.execute("CREATE TABLE b (id int PRIMARY KEY)")
    holder = pg_db.connect()
    try:
        with holder.cursor() as q:  # the snapshot's read of a waits for it (after the slot's consistent point)
            q.execute("SELECT pg_advisory_lock(42)")
        config = cdc(pg_db, **{"snapshot.select.statement.overrides": "public.a",
                               "snapshot.select.statement.overrides.public.a":
                               "SELECT id FROM a WHERE (SELECT pg_advisory_lock_shared(42)::text) IS NOT NULL"})
        with running(data_dir, config, worker=NO_INTERVAL):
            wait_for(lambda: pg_db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                           "AND NOT granted")[0][0] == 1, timeout=20, what="the snapshot waiting")
            pg_db.execute("INSERT INTO b VALUES (1)")  # after the consistent point: streamed, not snapshotted
            with holder.cursor() as q:
                q.execute("SELECT pg_advisory_unlock(42)")
            wait_for(lambda: _ops(data_dir, "shop.public.b"), timeout=20, what="the insert")
    finally:
        holder.close()
    with running(data_dir, cdc(pg_db), worker=NO_INTERVAL):
        pg_db.execute("INSERT INTO b VALUES (2)")
        wait_for(lambda: (2, "c") in _ops(data_dir, "shop.public.b"), timeout=20, what="the next insert")
    assert _ops(data_dir, "shop.public.b") == [(1, "c"), (2, "c")]


class Forwarder:
    """A TCP port forwarded to the server's: a PostgreSQL that comes up when start() is called."""

    def __init__(self, target: int) -> None:
        self.target = target
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.stopped = threading.Event()
        self.sockets: list[socket.socket] = []

    def start(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        a.settimeout(None)
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.server.close()
        for s in self.sockets:
            s.close()


def test_a_server_not_up_at_the_first_start_is_connected_to_later(pg_db, data_dir):
    """As Debezium's BaseSourceTask: a retriable failure of the first start is tried again after
    retriable.restart.connector.wait.ms (errors.max.retries bounds the attempts). klog's task FAILED at once."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO t VALUES (1)")
    forwarder = Forwarder(pg_db.port)
    warnings: list[str] = []
    config = cdc(pg_db, **{"database.port": str(forwarder.port), "retriable.restart.connector.wait.ms": "200"})
    try:
        with running(data_dir, config, warnings=warnings) as w:
            wait_for(lambda: sum("connecting again in 200 ms" in m for m in warnings) >= 2
                     or w.describe_status("pg")["tasks"][0]["state"] == "FAILED", timeout=20, what="two attempts")
            assert w.describe_status("pg")["tasks"][0]["state"] == "RUNNING"
            forwarder.start()
            wait_for(lambda: _ops(data_dir, "shop.public.t"), timeout=20, what="the snapshot")
            pg_db.execute("INSERT INTO t VALUES (2)")
            wait_for(lambda: len(_ops(data_dir, "shop.public.t")) == 2, timeout=20, what="the insert")
    finally:
        if hasattr(forwarder, "server"):
            forwarder.stop()
    assert _ops(data_dir, "shop.public.t") == [(1, "r"), (2, "c")]
    first = next(m for m in warnings if "connecting again" in m)
    assert "cannot connect to PostgreSQL: connection to server at" in first and "Connection refused" in first
    assert any(m.endswith("connected to PostgreSQL") for m in warnings)


def test_a_server_refusing_the_login_fails_the_task_at_once_naming_why(pg_db, data_dir):
    """A missing database or role (a wrong password, no permission alike) is the server's answer, not its
    absence: no attempts again, the task fails with its one line."""
    warnings: list[str] = []
    for key, value, why in (("database.dbname", "no_such_db", 'database "no_such_db" does not exist'),
                            ("database.user", "no_such_role", 'role "no_such_role" does not exist')):
        with running(data_dir, cdc(pg_db, **{key: value, "retriable.restart.connector.wait.ms": "100"}),
                     warnings=warnings) as w:
            wait_for(lambda w=w: w.describe_status("pg")["tasks"][0]["state"] == "FAILED", timeout=20,
                     what="the task failing")
            trace = w.describe_status("pg")["tasks"][0]["trace"]
        assert trace.strip().splitlines()[-1].endswith(f"cannot connect to PostgreSQL: connection to server at "
                                                       f'"127.0.0.1", port {pg_db.port} failed: FATAL:  {why}')
    assert not [m for m in warnings if "connecting again" in m]


def test_a_server_that_stays_away_fails_the_task_after_errors_max_retries(data_dir):
    from tests.connect.pg_server import Database

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = cdc(Database("127.0.0.1", port, "postgres", "shop"),
                 **{"retriable.restart.connector.wait.ms": "100", "errors.max.retries": "2"})
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings) as w:
        wait_for(lambda: w.describe_status("pg")["tasks"][0]["state"] == "FAILED", timeout=20, what="the failure")
        trace = w.describe_status("pg")["tasks"][0]["trace"]
    assert trace.strip().splitlines()[-1].endswith(
        f'cannot connect to PostgreSQL: connection to server at "127.0.0.1", port {port} failed: Connection refused '
        "(2 attempts to connect again failed, errors.max.retries=2)")
    assert sum("connecting again in 100 ms" in m for m in warnings) == 3

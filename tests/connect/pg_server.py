"""Start and stop a throw-away PostgreSQL server (initdb + postgres) for tests."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass


def find_pg_bin() -> str | None:
    """The newest /usr/lib/postgresql/N/bin with initdb and postgres (Debian's layout), or PATH's."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(re.sub(r"\D", "", p) or 0))
    for d in reversed(candidates):
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "postgres")):
            return d
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb and shutil.which("postgres") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Database:
    host: str
    port: int
    user: str
    dbname: str

    def connect(self, autocommit: bool = True):  # noqa: ANN201 - a psycopg2 connection
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user, dbname=self.dbname)
        conn.autocommit = autocommit
        return conn

    def execute(self, sql: str, params: tuple = ()) -> list:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params or None)  # no params: a % in the SQL is a modulo
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def debezium_config(self, **extra: str) -> dict:
        return {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                "database.hostname": self.host, "database.port": str(self.port), "database.user": self.user,
                "database.password": "", "database.dbname": self.dbname, "plugin.name": "pgoutput", **extra}

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}"


class PostgresServer:
    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        self.base = tempfile.mkdtemp(prefix="klog-pg-")  # under /tmp: an unprivileged user can reach it
        self.data = os.path.join(self.base, "data")
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.user_kwargs: dict = {}
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            import pwd

            nobody = pwd.getpwnam("nobody")
            os.chown(self.base, nobody.pw_uid, nobody.pw_gid)
            self.user_kwargs = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}

    def start(self) -> None:
        init = subprocess.run([os.path.join(self.bin_dir, "initdb"), "-D", self.data, "-U", "postgres", "-A", "trust",
                               "-E", "UTF8", "--no-sync", "--locale=C"], capture_output=True, timeout=120,
                              cwd=self.base, **self.user_kwargs)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.decode(errors='replace').strip()[-300:]}")
        self.log = open(os.path.join(self.base, "postgres.log"), "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [os.path.join(self.bin_dir, "postgres"), "-D", self.data, "-h", "127.0.0.1", "-p", str(self.port),
             "-k", self.base, "-c", "wal_level=logical", "-c", "max_wal_senders=20", "-c", "max_replication_slots=40",
             "-c", "fsync=off", "-c", "max_connections=100", "-c", "shared_buffers=32MB"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.base, **self.user_kwargs)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self._log_tail()}")
            try:
                self.database("postgres").execute("SELECT 1")
                return
            except Exception:  # noqa: BLE001 - not accepting connections yet
                time.sleep(0.2)
        raise RuntimeError(f"postgres did not accept connections within 60 s: {self._log_tail()}")

    def _log_tail(self) -> str:
        with open(os.path.join(self.base, "postgres.log"), "rb") as f:
            return f.read().decode(errors="replace").strip()[-300:]

    def database(self, name: str) -> Database:
        return Database("127.0.0.1", self.port, "postgres", name)

    def create_database(self, test_name: str) -> str:
        name = re.sub(r"[^a-z0-9_]", "_", test_name.lower())[:50] + f"_{os.getpid() % 1000}"
        admin = self.database("postgres")
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        admin = self.database("postgres")
        for _ in range(50):  # a walsender of a stopped connector may take a moment to go
            try:
                for (slot,) in admin.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)):
                    admin.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                                  "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
                    admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return
            except Exception:  # noqa: BLE001 - the slot was still active: try again
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: SIGTERM's "smart" one waits for clients
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None) is not None:
            self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)

"""klog connect's Debezium CDC and JDBC sink beside COPY | klog produce and plain executemany.

Starts a throw-away PostgreSQL (as tests/connect do) and measures:
  - CDC: N rows committed in one transaction, then captured by the PostgresConnector (pgoutput,
    JsonConverter with schemas, as Debezium writes them) until all N are in the topic, beside its peer
    `psql -c "COPY t TO STDOUT" | klog produce` of the same rows (no envelope, no schema, no offsets);
  - snapshot: the same N rows read by the initial snapshot of a fresh connector;
  - sink: the N-record topic into SQLite and into PostgreSQL through the JDBC sink (ExtractNewRecordState,
    upsert by key, offsets in the same transactions), beside a plain executemany of the same rows.
Prints rows/s for each and the peak RSS of this process up to the end of the connector runs (the snapshot
reads through a server-side cursor, the stream and the sinks in batches).
"""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
import time

from harness import REPO, Bench, rate

import klog
from tests.connect.helpers import running, wait_for
from tests.connect.pg_server import PostgresServer, find_pg_bin


def count(data_dir: str, topic: str) -> int:
    with klog.open(data_dir) as s:
        return s.describe_topic(topic).records if s.has_topic(topic) else 0


def run(bench: Bench) -> None:
    n = bench.size(100_000, 200)
    pg_bin = find_pg_bin()
    if not pg_bin:
        bench.row("skipped", "needs PostgreSQL's binaries (as tests/connect do)")
        return
    server = PostgresServer(pg_bin)
    server.start()
    try:
        db = server.database(server.create_database("bench"))
        db.execute("CREATE TABLE t (id int PRIMARY KEY, name text, qty int, price numeric(10,2))")
        base = {"topic.prefix": "b", "table.include.list": "public.t", "slot.name": "bench",
                "publication.name": "bench"}
        data_dir = os.path.join(bench.tmp, "cdc")
        with running(data_dir, db.debezium_config(name="cdc", **base), worker={"offset.flush.interval.ms": "2000"}):
            wait_for(lambda: count(data_dir, "connect-status") > 0, timeout=60)
            start = time.perf_counter()
            db.execute(f"INSERT INTO t SELECT g, 'name-' || g, g % 100, g / 100.0 FROM generate_series(1, {n}) g")
            wait_for(lambda: count(data_dir, "b.public.t") >= n, timeout=3600)
            cdc_s = time.perf_counter() - start
        peer_dir = os.path.join(bench.tmp, "peer")
        env = {**os.environ, "KLOG_DATA_DIR": peer_dir, "PYTHONPATH": REPO}
        start = time.perf_counter()
        psql = os.path.join(server.bin_dir, "psql")
        subprocess.run(f'"{psql}" -h 127.0.0.1 -p {server.port} -U postgres -d {db.dbname} -c "COPY t TO STDOUT" '
                       f"| {sys.executable} -m klog produce t", shell=True, check=True, env=env,
                       stderr=subprocess.DEVNULL)
        copy_s = time.perf_counter() - start

        snap_dir = os.path.join(bench.tmp, "snap")
        start = time.perf_counter()
        with running(snap_dir, db.debezium_config(name="snap", **{**base, "slot.name": "bench2"})):
            wait_for(lambda: count(snap_dir, "b.public.t") >= n, timeout=3600)
        snap_s = time.perf_counter() - start

        unwrap = {"transforms": "u", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState",
                  "topics": "b.public.t", "insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true",
                  "delete.enabled": "true", "connector.class": "JdbcSinkConnector"}
        lite = os.path.join(data_dir, "copy.db")
        start = time.perf_counter()
        with running(data_dir, {**unwrap, "name": "lite", "connection.url": f"jdbc:sqlite:{lite}",
                                "table.name.format": "t"}):
            wait_for(lambda: _sqlite_count(lite) >= n, timeout=3600)
        lite_s = time.perf_counter() - start
        start = time.perf_counter()
        with running(data_dir, {**unwrap, "name": "pgcopy", "connection.url": db.jdbc_url,
                                "table.name.format": "t_copy"}):
            wait_for(lambda: _pg_count(db) >= n, timeout=3600)
        pg_s = time.perf_counter() - start

        connect_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the peers load rows
        rows = db.execute("SELECT id, name, qty, price FROM t")
        start = time.perf_counter()
        with sqlite3.connect(os.path.join(data_dir, "peer.db")) as conn:
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, price NUMERIC)")
            conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(a, b, c, str(d)) for a, b, c, d in rows])
        lite_peer_s = time.perf_counter() - start
        start = time.perf_counter()
        conn = db.connect(autocommit=False)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t_peer (id int PRIMARY KEY, name text, qty int, price numeric)")
            cur.executemany("INSERT INTO t_peer VALUES (%s, %s, %s, %s)", rows)
        conn.commit()
        conn.close()
        pg_peer_s = time.perf_counter() - start
    finally:
        server.stop()
    bench.row(f"CDC stream into a topic, {n:,} rows", rate(n, cdc_s).replace("records", "rows"),
              f"COPY | klog produce: {rate(n, copy_s).replace('records', 'rows')}")
    bench.row(f"CDC initial snapshot, {n:,} rows", rate(n, snap_s).replace("records", "rows"))
    bench.row(f"JDBC sink into SQLite, {n:,} rows", rate(n, lite_s).replace("records", "rows"),
              f"executemany: {rate(n, lite_peer_s).replace('records', 'rows')}")
    bench.row(f"JDBC sink into PostgreSQL, {n:,} rows", rate(n, pg_s).replace("records", "rows"),
              f"executemany: {rate(n, pg_peer_s).replace('records', 'rows')}")
    bench.row("peak RSS through the connector runs (before the peers hold the rows)", f"{connect_rss_mb:,.0f} MB")


def _sqlite_count(path: str) -> int:
    try:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT count(*) FROM t").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _pg_count(db) -> int:  # noqa: ANN001
    rows = db.execute("SELECT to_regclass('t_copy') IS NOT NULL")
    return db.execute("SELECT count(*) FROM t_copy")[0][0] if rows[0][0] else 0


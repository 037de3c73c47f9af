"""klog connect's Debezium CDC and JDBC sink beside COPY | klog produce and plain executemany.

Starts a throw-away PostgreSQL (as tests/connect do) and measures:
  - CDC: N rows committed in one transaction, then captured by the PostgresConnector (pgoutput,
    JsonConverter with schemas, as Debezium writes them) until all N are in the topic, beside its peer
    `psql -c "COPY t TO STDOUT" | klog produce` of the same rows (no envelope, no schema, no offsets);
  - snapshot: the same N rows read by the initial snapshot of a fresh connector;
  - sink: the N-record topic into SQLite and into PostgreSQL through the JDBC sink (ExtractNewRecordState,
    upsert by key, offsets in the same transactions), beside a plain executemany of the same rows (and,
    for PostgreSQL, psycopg2's execute_batch, which the sink uses).
The stream is also measured schemaless and zstd-compressed (the envelope's schema is most of a
record's bytes), and the peak RSS is taken after a tenth of the rows and after all of them (flat: the
stream holds a poll's records, not the table). Prints rows/s for each and the peak RSS of this process
up to the end of the connector runs (the snapshot reads through a server-side cursor, the stream and the
sinks in batches).
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
        return s.describe_topic(topic).offsets if s.has_topic(topic) else 0


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

        def stream(table: str, rows: int, **extra: str) -> float:
            """Seconds from the INSERT of `rows` rows (one transaction) until all are in the topic."""
            db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text, qty int, price numeric(10,2))")
            config = db.debezium_config(name=table, **{"topic.prefix": "b", "table.include.list": f"public.{table}",
                                                       "slot.name": table, "publication.name": table,
                                                       "publication.autocreate.mode": "filtered", **extra})
            where = os.path.join(bench.tmp, table)
            with running(where, config, worker={"offset.flush.interval.ms": "2000"}):
                wait_for(lambda: count(where, "connect-status") > 0, timeout=60)
                start = time.perf_counter()
                db.execute(f"INSERT INTO {table} SELECT g, 'name-' || g, g % 100, g / 100.0 "
                           f"FROM generate_series(1, {rows}) g")
                wait_for(lambda: count(where, f"b.public.{table}") >= rows, timeout=3600)
                return time.perf_counter() - start

        # memory flat with table size: the peak RSS after a tenth of the rows, then after all of them
        stream("small", max(1, n // 10))
        small_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        cdc_s = stream("t", n)
        big_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        schemaless_s = stream("plain", n, **{"key.converter.schemas.enable": "false",
                                              "value.converter.schemas.enable": "false"})
        zstd_s = stream("packed", n, **{"producer.override.compression.type": "zstd"})
        base = {"topic.prefix": "b", "table.include.list": "public.t", "slot.name": "bench",
                "publication.name": "bench"}
        data_dir = os.path.join(bench.tmp, "t")
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
        from psycopg2.extras import execute_batch

        start = time.perf_counter()
        conn = db.connect(autocommit=False)
        with conn.cursor() as cur:  # what the sink uses for PostgreSQL: pages of statements, not a trip per row
            cur.execute("CREATE TABLE t_peer2 (id int PRIMARY KEY, name text, qty int, price numeric)")
            execute_batch(cur, "INSERT INTO t_peer2 VALUES (%s, %s, %s, %s)", rows, page_size=500)
        conn.commit()
        conn.close()
        pg_batch_s = time.perf_counter() - start
    finally:
        server.stop()
    copy = f"COPY | klog produce: {rate(n, copy_s).replace('records', 'rows')}"
    bench.row(f"CDC stream into a topic, {n:,} rows (JSON with schemas, as Debezium's default)",
              rate(n, cdc_s).replace("records", "rows"), copy)
    bench.row(f"CDC stream, schemaless JSON, {n:,} rows", rate(n, schemaless_s).replace("records", "rows"), copy)
    bench.row(f"CDC stream, JSON with schemas, producer.override.compression.type=zstd, {n:,} rows",
              rate(n, zstd_s).replace("records", "rows"), copy)
    bench.row(f"CDC peak RSS after {max(1, n // 10):,} rows, then after {n:,} more",
              f"{small_rss_mb:,.0f} MB, {big_rss_mb:,.0f} MB")
    bench.row(f"CDC initial snapshot, {n:,} rows", rate(n, snap_s).replace("records", "rows"))
    bench.row(f"JDBC sink into SQLite, {n:,} rows", rate(n, lite_s).replace("records", "rows"),
              f"executemany: {rate(n, lite_peer_s).replace('records', 'rows')}")
    bench.row(f"JDBC sink into PostgreSQL, {n:,} rows", rate(n, pg_s).replace("records", "rows"),
              f"executemany: {rate(n, pg_peer_s).replace('records', 'rows')}, execute_batch: "
              f"{rate(n, pg_batch_s).replace('records', 'rows')}")
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


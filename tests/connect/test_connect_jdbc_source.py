"""Confluent's JDBC source against a real PostgreSQL: the timestamp+incrementing mode's queries and
offsets, Connect's types for PostgreSQL's columns, updates sent again, tables chosen by table.whitelist."""

from __future__ import annotations

import decimal
import json
import time

import pytest

from tests.connect.helpers import records, running, wait_for


def source_config(db, **extra) -> dict:  # noqa: ANN001
    return {"name": "jdbc-src", "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
            "connection.url": db.jdbc_url, "connection.user": db.user, "topic.prefix": "pg-",
            "poll.interval.ms": "100", **extra}


def test_timestamp_incrementing_mode_sends_new_and_updated_rows_once(pg_db, data_dir):
    """Each row once, an updated row again; types and offsets as Confluent's; a table not whitelisted unread."""
    pg_db.execute("CREATE TABLE items (id serial PRIMARY KEY, name text, price numeric(10,2), sold date, "
                  "updated_at timestamp NOT NULL)")
    pg_db.execute("CREATE TABLE other (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO items (name, price, sold, updated_at) VALUES ('a', 1.50, '1970-01-02', "
                  "'2020-01-01 00:00:00'), ('b', 2.00, NULL, '2020-01-01 00:00:00')")
    config = source_config(pg_db, **{"mode": "timestamp+incrementing", "incrementing.column.name": "id",
                                     "timestamp.column.name": "updated_at", "table.whitelist": "items",
                                     "timestamp.initial": "0"})
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "pg-items")) == 2, what="the two rows")
        pg_db.execute("UPDATE items SET name = 'A', updated_at = '2020-01-02 00:00:00' WHERE id = 1")
        pg_db.execute("INSERT INTO items (name, price, updated_at) VALUES ('c', 3.25, '2020-01-02 00:00:00')")
        wait_for(lambda: len(records(data_dir, "pg-items")) == 4, what="the update and the new row")
    values = [json.loads(r.value) for r in records(data_dir, "pg-items")]
    assert [(v["payload"]["id"], v["payload"]["name"]) for v in values] == [(1, "a"), (2, "b"), (1, "A"), (3, "c")]
    fields = {f["field"]: f for f in values[0]["schema"]["fields"]}
    assert values[0]["schema"]["name"] == "items"
    assert fields["id"] == {"type": "int32", "optional": False, "field": "id"}
    assert fields["price"]["name"] == "org.apache.kafka.connect.data.Decimal" and fields["price"]["optional"]
    assert fields["sold"]["name"] == "org.apache.kafka.connect.data.Date"
    assert fields["updated_at"] == {"type": "int64", "optional": False, "version": 1, "field": "updated_at",
                                    "name": "org.apache.kafka.connect.data.Timestamp"}
    assert values[0]["payload"]["sold"] == 1 and values[0]["payload"]["updated_at"] == 1_577_836_800_000
    assert records(data_dir, "pg-other") == []
    last = json.loads(records(data_dir, "connect-offsets")[-1].value)
    assert last == {"incrementing": 3, "timestamp": 1_577_923_200_000, "timestamp_nanos": 0}


@pytest.mark.slow
def test_timestamp_initial_current_time_sends_the_rows_written_after_the_start(pg_db, data_dir):
    """timestamp.initial=-1 is the time the task starts (Confluent's computeInitialOffset, once): a row
    written before is skipped, one written after is sent (klog took each poll's time: none ever was)."""
    pg_db.execute("CREATE TABLE events (id serial PRIMARY KEY, at timestamp NOT NULL "
                  "DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'))")
    pg_db.execute("INSERT INTO events DEFAULT VALUES")
    config = source_config(pg_db, **{"mode": "timestamp", "timestamp.column.name": "at", "timestamp.initial": "-1"})
    with running(data_dir, config) as worker:
        wait_for(lambda: [t["state"] for t in worker.describe_status("jdbc-src")["tasks"]] == ["RUNNING"],
                 what="the task")
        time.sleep(0.5)  # a few polls with nothing new
        pg_db.execute("INSERT INTO events DEFAULT VALUES")
        wait_for(lambda: len(records(data_dir, "pg-events")) == 1, what="the row written after the start")
        time.sleep(0.5)
    assert [json.loads(r.value)["payload"]["id"] for r in records(data_dir, "pg-events")] == [2]


def _poll_all(task, polls: int = 20) -> list:  # noqa: ANN001
    out = []
    for _ in range(polls):
        out += task.poll()
    return out


@pytest.mark.slow
def test_timestamp_mode_reads_a_group_of_equal_timestamps_whole_across_batches(pg_db):
    """timestamp mode with batch.max.rows=2 and five rows sharing a timestamp: Confluent reads its one
    query to the end, and a record's offset is the last timestamp whose rows were all read
    (TimestampTableQuerier), so a restart mid-group sends the group again rather than skipping its rest.
    klog queried again after each batch from the batch's last timestamp: three of the five were lost."""
    from klog.connect.api import OffsetReader, TaskContext
    from klog.connect.connectors.jdbc_source import JdbcSourceTask

    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, at timestamp NOT NULL)")
    pg_db.execute("INSERT INTO t VALUES (1, '2020-01-01 00:00:00'), " + ", ".join(
        f"({i}, '2020-01-02 00:00:00.5')" for i in range(2, 7)) + ", (7, '2020-01-03 00:00:00')")
    config = source_config(pg_db, **{"mode": "timestamp", "timestamp.column.name": "at", "batch.max.rows": "2",
                                     "poll.interval.ms": "60000"})
    day1, day2, day3 = {"timestamp": 1_577_836_800_000, "timestamp_nanos": 0}, \
        {"timestamp": 1_577_923_200_500, "timestamp_nanos": 500_000_000}, \
        {"timestamp": 1_578_009_600_000, "timestamp_nanos": 0}

    def run(stored: dict | None) -> list:
        task = JdbcSourceTask()
        task.initialize(TaskContext("jdbc-src", 0, print, OffsetReader(lambda p: stored)))
        task.start(config)
        try:
            return _poll_all(task)
        finally:
            task.stop()

    out = run(None)
    assert [r.value["id"] for r in out] == [1, 2, 3, 4, 5, 6, 7]
    assert [r.source_offset for r in out] == [day1] + [day1] * 4 + [day2, day3]
    assert all(r.source_partition == {"protocol": "1", "table": "public.t"} for r in out)
    # a restart from a record's offset inside the group (day1) sends the whole group again
    assert [r.value["id"] for r in run(day1)] == [2, 3, 4, 5, 6, 7]
    assert [r.value["id"] for r in run(day2)] == [7]
    # timestamp+incrementing resumes inside a group by the id (Confluent's `ts = last AND id > last`)
    config.update({"mode": "timestamp+incrementing", "incrementing.column.name": "id"})
    assert [r.value["id"] for r in run({**day2, "incrementing": 3})] == [4, 5, 6, 7]


def _stored(data_dir: str) -> list[dict]:
    return [json.loads(r.value) for r in records(data_dir, "connect-offsets")
            if r.value and json.loads(r.key)[0] == "jdbc-src"]


@pytest.mark.slow
def test_kill_9_during_a_load_loses_no_row_and_resends_only_from_the_stored_offset(pg_db, data_dir, tmp_path):
    """A loader commits 4,000 rows (ten a transaction) while the worker (timestamp+incrementing,
    batch.max.rows=50) is SIGKILLed three times at random instants, each after it stored some progress:
    every row reaches the topic, and after each kill the rows sent again start exactly after the offset
    stored before it (at-least-once as Confluent's: records durable before their offset)."""
    import random
    import signal
    import threading

    from tests.connect.helpers import start_cli, stop_cli, wait_started, write_config

    pg_db.execute("CREATE TABLE orders (id serial PRIMARY KEY, n int, at timestamp NOT NULL "
                  "DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'))")
    rows, per_tx = 4000, 10
    config = write_config(str(tmp_path / "src.json"), source_config(pg_db, **{
        "mode": "timestamp+incrementing", "incrementing.column.name": "id", "timestamp.column.name": "at",
        "table.whitelist": "orders", "batch.max.rows": "50", "poll.interval.ms": "50"}))
    worker = write_config(str(tmp_path / "worker.json"), {"offset.flush.interval.ms": "200"})

    def load() -> None:
        conn = pg_db.connect(autocommit=False)
        cur = conn.cursor()
        for i in range(0, rows, per_tx):
            cur.execute("INSERT INTO orders (n) SELECT g FROM generate_series(%s, %s) g", (i, i + per_tx - 1))
            conn.commit()
            time.sleep(0.006)  # spread over a few seconds: kills land while it runs
        conn.close()

    def run():  # noqa: ANN202 - the worker's process
        proc = start_cli(data_dir, "--worker-config", worker, config)
        wait_started(proc)
        return proc

    def delivered() -> bool:
        return any(o.get("incrementing") == rows for o in _stored(data_dir)[-2:])

    loader = threading.Thread(target=load)
    rng = random.Random(11)
    proc = run()
    loader.start()
    stored_at_kill = []
    for _ in range(3):
        stored = len(_stored(data_dir))
        wait_for(lambda p=proc, n=stored: p.poll() is not None or len(_stored(data_dir)) > n or delivered(),
                 timeout=60, what="progress before the kill")
        if delivered():
            break
        assert proc.poll() is None, stop_cli(proc)[1]
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        stored_at_kill.append(_stored(data_dir)[-1]["incrementing"])
        proc = run()
    loader.join(timeout=120)
    assert not loader.is_alive(), "the loader did not finish"
    assert any(s < rows for s in stored_at_kill), "every kill came after the last row was delivered"
    wait_for(delivered, timeout=60, what="the last row's offset")
    code, err = stop_cli(proc, signal.SIGTERM)
    assert code == 143, err
    ids = [json.loads(r.value)["payload"]["id"] for r in records(data_dir, "pg-orders")]
    assert set(ids) == set(range(1, rows + 1))  # no row lost
    resumes = iter(stored_at_kill)
    for before, after in zip(ids, ids[1:], strict=False):
        if after != before + 1:  # a restart: it sends again from the offset stored before its kill, no earlier
            assert after <= before and after - 1 in resumes, (before, after, stored_at_kill)


def test_numeric_columns_keep_their_scale_in_table_and_query_modes(pg_db):
    """numeric(10,2) has scale 2 in table mode and query mode alike (the query's was 0: 1.50 sent as 2),
    NOT NULL makes a required field in both;
    an unconstrained numeric gets Confluent's PostgreSQL dialect's scale 127 (it was 0: 12.12 sent as 12)."""
    from klog.connect.api import OffsetReader, TaskContext
    from klog.connect.connectors.jdbc_source import JdbcSourceTask
    from klog.connect.converters import decimal_from_bytes, decimal_to_bytes

    pg_db.execute("CREATE TABLE prices (id int PRIMARY KEY, fixed numeric(10,2), free numeric)")
    pg_db.execute("INSERT INTO prices VALUES (1, 1.50, 12.12)")
    for extra in ({"table.whitelist": "prices"}, {"query": "SELECT * FROM prices"}):
        task = JdbcSourceTask()
        task.initialize(TaskContext("jdbc-src", 0, print, OffsetReader(lambda p: None)))
        task.start(source_config(pg_db, **{"mode": "incrementing", "incrementing.column.name": "id", **extra}))
        try:
            (record,) = _poll_all(task, 3)
        finally:
            task.stop()
        fields = {f["field"]: f for f in record.value_schema["fields"]}
        assert (fields["fixed"]["parameters"], fields["free"]["parameters"]) == ({"scale": "2"}, {"scale": "127"})
        # the NOT NULL primary key is required in both modes (pgjdbc's isNullable; query mode had all optional)
        assert [f["optional"] for f in record.value_schema["fields"]] == [False, True, True]
        for column, want in (("fixed", "1.50"), ("free", "12.12")):
            scale = int(fields[column]["parameters"]["scale"])
            assert decimal_from_bytes(decimal_to_bytes(record.value[column], scale), scale) == decimal.Decimal(want)


@pytest.mark.slow
def test_a_lost_connection_is_retried_as_confluents_query_retry_attempts(pg_db, data_dir):
    """The source's PostgreSQL session terminated under it: the query is retried on a new connection
    (Confluent's query.retry.attempts, -1: forever) and the rows written meanwhile arrive once; the task
    failed on the first error before."""
    pg_db.execute("CREATE TABLE items (id serial PRIMARY KEY, name text)")
    pg_db.execute("INSERT INTO items (name) VALUES ('a')")
    config = source_config(pg_db, **{"mode": "incrementing", "incrementing.column.name": "id"})
    with running(data_dir, config) as worker:
        wait_for(lambda: len(records(data_dir, "pg-items")) == 1, what="the first row")
        for name in ("b", "c"):
            pg_db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                          "AND pid <> pg_backend_pid()")
            pg_db.execute("INSERT INTO items (name) VALUES (%s)", (name,))
            wait_for(lambda n=name: json.loads(records(data_dir, "pg-items")[-1].value)["payload"]["name"] == n,
                     what=f"row {name} after the session was terminated")
        assert [t["state"] for t in worker.describe_status("jdbc-src")["tasks"]] == ["RUNNING"]
    assert [json.loads(r.value)["payload"]["id"] for r in records(data_dir, "pg-items")] == [1, 2, 3]


def test_query_retry_attempts_zero_fails_the_task_on_a_lost_connection(pg_db, data_dir):
    pg_db.execute("CREATE TABLE items (id serial PRIMARY KEY)")
    config = source_config(pg_db, **{"mode": "incrementing", "incrementing.column.name": "id",
                                     "query.retry.attempts": "0"})
    with running(data_dir, config) as worker:
        def state() -> list:
            return [t["state"] for t in worker.describe_status("jdbc-src")["tasks"]]

        wait_for(lambda: state() == ["RUNNING"], what="the task")
        time.sleep(0.3)  # its session open
        pg_db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND pid <> pg_backend_pid()")
        wait_for(lambda: state() == ["FAILED"], what="the task failed")
        assert "Failed to query table after retries" in worker.describe_status("jdbc-src")["tasks"][0]["trace"]


@pytest.mark.slow
def test_a_dropped_table_stops_being_read_and_the_others_go_on(pg_db, data_dir):
    """A table dropped while the source reads it: its query fails and is retried (Confluent's
    query.retry.attempts) until the table list no longer has it; the other tables' rows go on arriving
    (the task failed, stopping every table)."""
    pg_db.execute("CREATE TABLE items (id serial PRIMARY KEY)")
    pg_db.execute("CREATE TABLE gone (id serial PRIMARY KEY)")
    pg_db.execute("INSERT INTO items DEFAULT VALUES")
    pg_db.execute("INSERT INTO gone DEFAULT VALUES")
    config = source_config(pg_db, **{"mode": "incrementing", "incrementing.column.name": "id"})
    with running(data_dir, config) as worker:
        wait_for(lambda: len(records(data_dir, "pg-items")) == len(records(data_dir, "pg-gone")) == 1,
                 what="a row of each table")
        pg_db.execute("DROP TABLE gone")
        time.sleep(0.5)  # a few polls of the dropped table
        pg_db.execute("INSERT INTO items DEFAULT VALUES")
        wait_for(lambda: len(records(data_dir, "pg-items")) == 2, what="the other table's new row")
        assert [t["state"] for t in worker.describe_status("jdbc-src")["tasks"]] == ["RUNNING"]


def test_table_include_and_exclude_lists_are_regular_expressions_as_confluents(pg_db):
    """table.include.list / table.exclude.list are regular expressions over schema.table, the exclude list
    applying to what the include list matched (Confluent's TableCollectionUtils); klog took them as exact
    names (so `public\\.orders_.*` read nothing) and refused them together."""
    from klog.connect.api import OffsetReader, TaskContext
    from klog.connect.connectors.jdbc_source import JdbcSourceTask
    from klog.connect.errors import ConfigError
    from klog.connect.worker import validate

    for t in ("orders_2024", "orders_2025", "orders_tmp", "other"):
        pg_db.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    config = source_config(pg_db, **{"mode": "bulk", "table.include.list": r"public\.orders_.*",
                                     "table.exclude.list": ".*_tmp"})
    validate(config)
    task = JdbcSourceTask()
    task.initialize(TaskContext("jdbc-src", 0, print, OffsetReader(lambda p: None)))
    task.start(config)
    try:
        assert task._list_tables() == ["public.orders_2024", "public.orders_2025"]
    finally:
        task.stop()
    for bad, key in (({"table.exclude.list": ".*_tmp"}, "table.exclude.list"),
                     ({"table.whitelist": "other", "table.include.list": ".*"}, "table.include.list")):
        with pytest.raises(ConfigError) as e:
            validate(source_config(pg_db, **{"mode": "bulk", **bad}))
        assert e.value.field == key


def test_timestamp_delay_holds_back_rows_newer_than_it(pg_db):
    """timestamp.delay.interval.ms: a row whose timestamp is within the delay of now waits (Confluent's end
    bound, current time minus the delay); an older one is sent."""
    from klog.connect.api import OffsetReader, TaskContext
    from klog.connect.connectors.jdbc_source import JdbcSourceTask

    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, at timestamp NOT NULL)")
    pg_db.execute("INSERT INTO t VALUES (1, (now() AT TIME ZONE 'UTC') - interval '2 hours'), "
                  "(2, (now() AT TIME ZONE 'UTC') - interval '1 minute')")
    task = JdbcSourceTask()
    task.initialize(TaskContext("jdbc-src", 0, print, OffsetReader(lambda p: None)))
    task.start(source_config(pg_db, **{"mode": "timestamp", "timestamp.column.name": "at",
                                       "timestamp.delay.interval.ms": "3600000"}))
    try:
        assert [r.value["id"] for r in _poll_all(task, 3)] == [1]
    finally:
        task.stop()


def _sqlite_task(config: dict):  # noqa: ANN202 - a started JdbcSourceTask
    from klog.connect.api import OffsetReader, TaskContext
    from klog.connect.connectors.jdbc_source import JdbcSourceTask

    task = JdbcSourceTask()
    task.initialize(TaskContext("jdbc-src", 0, print, OffsetReader(lambda p: None)))
    task.start({"name": "jdbc-src", "connector.class": "JdbcSourceConnector", "topic.prefix": "lite-",
                "poll.interval.ms": "100", **config})
    return task


def test_sqlite_query_mode_types_columns_as_table_mode(tmp_path):
    """In query mode on SQLite, a column taken from a table has its declared type (as in table mode) and an
    expression its value's type (integers, floats, bytes), NULL-valued ones strings: every column was an
    optional string, the integers and floats sent as text."""
    import sqlite3

    db = str(tmp_path / "lite.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, big BIGINT, f REAL, b BLOB, s TEXT, "
                     "d NUMERIC(10,2), flag BOOLEAN, at DATETIME)")
        conn.execute("INSERT INTO t VALUES (1, 5000000000, 1.5, x'00ff', 'a', 1.25, 1, '2020-01-01 00:00:00')")
    query = ("SELECT id, big, f, b, s, d, flag, at, id * 2 AS twice, f / 2 AS half, x'01' AS raw, "
             "NULL AS absent FROM t")
    config = {"connection.url": f"jdbc:sqlite:{db}", "mode": "incrementing", "incrementing.column.name": "id"}
    task = _sqlite_task({**config, "query": query})
    try:
        (record,) = _poll_all(task, 3)
    finally:
        task.stop()
    types = {f["field"]: (f["type"], f.get("name")) for f in record.value_schema["fields"]}
    assert types == {"id": ("int32", None), "big": ("int64", None), "f": ("float32", None), "b": ("bytes", None),
                     "s": ("string", None), "d": ("bytes", "org.apache.kafka.connect.data.Decimal"),
                     "flag": ("boolean", None), "at": ("int64", "org.apache.kafka.connect.data.Timestamp"),
                     "twice": ("int64", None), "half": ("float64", None), "raw": ("bytes", None),
                     "absent": ("string", None)}
    assert record.value == {"id": 1, "big": 5_000_000_000, "f": 1.5, "b": b"\x00\xff", "s": "a",
                            "d": decimal.Decimal("1.25"), "flag": True, "at": 1_577_836_800_000, "twice": 2,
                            "half": 0.75, "raw": b"\x01", "absent": None}
    # the same columns as table mode gives them
    task = _sqlite_task({**config, "table.whitelist": "t", "validate.non.null": "false"})
    try:
        (table_record,) = _poll_all(task, 3)
    finally:
        task.stop()
    table_types = {f["field"]: (f["type"], f.get("name")) for f in table_record.value_schema["fields"]}
    assert table_types == {k: v for k, v in types.items() if k in table_types}
    assert table_record.value == {k: v for k, v in record.value.items() if k in table_record.value}


def test_tables_are_split_across_tasks_and_a_new_table_reconfigures_them(tmp_path, data_dir):
    """tasks.max splits the tables into min(tasks.max, tables) tasks of contiguous shares, as Confluent's
    taskConfigs (klog ran one task for all); a source restarted with tasks.max raised goes on from each
    table's offset (no row twice, none lost), and a table created while it runs is found at the next
    table.poll.interval.ms and handed to a task by a reconfiguration (Confluent's TableMonitorThread)."""
    import sqlite3

    from klog.connect.connectors.jdbc_source import unquoted_tables

    db = str(tmp_path / "lite.db")

    def insert(table: str, count: int) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY NOT NULL, v TEXT)")
            conn.executemany(f"INSERT INTO {table} (v) VALUES (?)", [(table,)] * count)

    def ids(table: str) -> list[int]:
        return [json.loads(r.value)["payload"]["id"] for r in records(data_dir, f"lite-{table}")]

    def shares(worker) -> list[list[str]]:  # noqa: ANN001
        return [unquoted_tables(t["tables"]) for t in worker.task_configs("jdbc-src")]

    for table in "abcde":
        insert(table, 3)
    config = {"name": "jdbc-src", "connector.class": "JdbcSourceConnector", "connection.url": f"jdbc:sqlite:{db}",
              "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": "lite-",
              "poll.interval.ms": "50", "table.poll.interval.ms": "200"}
    with running(data_dir, config) as worker:
        assert shares(worker) == [list("abcde")]
        wait_for(lambda: all(ids(t) == [1, 2, 3] for t in "abcde"), what="every table's rows")
    for table in "abcde":
        insert(table, 2)
    with running(data_dir, {**config, "tasks.max": "2"}) as worker:
        assert shares(worker) == [list("abc"), list("de")]
        wait_for(lambda: all(len(ids(t)) >= 5 for t in "abcde"), what="the rows written while it was stopped")
        insert("f", 2)
        wait_for(lambda: shares(worker) == [list("abc"), list("def")], what="the new table handed to a task")
        wait_for(lambda: ids("f") == [1, 2], what="the new table's rows")
        insert("a", 1)
        wait_for(lambda: len(ids("a")) == 6, what="a row written after the reconfiguration")
        assert [t["state"] for t in worker.describe_status("jdbc-src")["tasks"]] == ["RUNNING", "RUNNING"]
    assert {t: ids(t) for t in "abcdef"} == {"a": [1, 2, 3, 4, 5, 6], **{t: [1, 2, 3, 4, 5] for t in "bcde"},
                                             "f": [1, 2]}


def test_a_source_started_before_its_tables_exist_reads_them_once_created(tmp_path, data_dir):
    """No table yet: one task with none (Confluent's), then the table created is listed by the connector
    and handed to the task (klog's single task listed them itself; the split must not lose that)."""
    import sqlite3

    db = str(tmp_path / "lite.db")
    sqlite3.connect(db).close()
    config = {"name": "jdbc-src", "connector.class": "JdbcSourceConnector", "connection.url": f"jdbc:sqlite:{db}",
              "mode": "incrementing", "incrementing.column.name": "id", "topic.prefix": "lite-", "tasks.max": "3",
              "poll.interval.ms": "50", "table.poll.interval.ms": "200"}
    with running(data_dir, config) as worker:
        assert [t["tables"] for t in worker.task_configs("jdbc-src")] == [""]
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE late (id INTEGER PRIMARY KEY NOT NULL)")
            conn.execute("INSERT INTO late DEFAULT VALUES")
        wait_for(lambda: len(records(data_dir, "lite-late")) == 1, what="the row of the table created later")
        assert [t["tables"] for t in worker.task_configs("jdbc-src")] == ['"late"']

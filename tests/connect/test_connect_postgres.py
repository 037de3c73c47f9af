"""PostgreSQL change data capture against a real server: Debezium's configs and envelopes, a snapshot
then logical replication (pgoutput), the topic replaying to the table's exact final state, restarts."""

from __future__ import annotations

import json

import pytest

from tests.connect.helpers import records, running, wait_for


def _changes(data_dir: str, topic: str) -> list[tuple]:
    """(key, op, before, after) of each record; tombstones as (key, None, None, None)."""
    out = []
    for r in records(data_dir, topic):
        key = json.loads(r.key)["payload"] if r.key else None
        if r.value is None:
            out.append((key, None, None, None))
            continue
        p = json.loads(r.value)["payload"]
        out.append((key, p["op"], p["before"], p["after"]))
    return out


def replay(data_dir: str, topic: str, key_cols: tuple[str, ...] = ("id",), changes: list | None = None) -> dict:
    """The table a consumer rebuilds from the topic (or from its `changes`, read already): upsert on
    c/u/r, delete on d, clear on t."""
    state: dict = {}
    for _key, op, before, after in changes if changes is not None else _changes(data_dir, topic):
        if op in ("c", "u", "r"):
            state[tuple(after[k] for k in key_cols)] = after
        elif op == "d":
            state.pop(tuple(before[k] for k in key_cols), None)
        elif op == "t":
            state.clear()
    return state


def table_state(db, table: str, key_cols: tuple[str, ...] = ("id",)) -> dict:
    cur = db.connect().cursor()
    cur.execute(f"SELECT * FROM {table}")
    cols = [d.name for d in cur.description]
    rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    cur.connection.close()
    return {tuple(r[k] for k in key_cols): r for r in rows}


def task_running(data_dir: str, name: str = "pg") -> bool:
    states = [json.loads(r.value)["state"] for r in records(data_dir, "connect-status")
              if r.key == f"status-task-{name}-0".encode() and r.value]
    return bool(states) and states[-1] == "RUNNING"


def cdc(db, **extra) -> dict:
    return db.debezium_config(name="pg", **{"topic.prefix": "shop", "slot.name": "klog_slot",
                                            "publication.name": "klog_pub", **extra})


@pytest.mark.slow
def test_snapshot_then_streaming_with_debezium_envelopes(pg_db, data_dir):
    pg_db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), ok boolean)")
    pg_db.execute("INSERT INTO items VALUES (1, 'one', 1.50, true), (2, 'two', 2.00, false)")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 2, what="the snapshot")
        pg_db.execute("INSERT INTO items VALUES (3, 'three', 3.25, true)")
        pg_db.execute("UPDATE items SET name = 'uno' WHERE id = 1")
        pg_db.execute("DELETE FROM items WHERE id = 2")
        pg_db.execute("UPDATE items SET id = 30 WHERE id = 3")  # a primary key change
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 9, what="the changes")
    changes = _changes(data_dir, "shop.public.items")
    assert [(k, op) for k, op, _, _ in changes] == [
        ({"id": 1}, "r"), ({"id": 2}, "r"), ({"id": 3}, "c"), ({"id": 1}, "u"), ({"id": 2}, "d"), ({"id": 2}, None),
        ({"id": 3}, "d"), ({"id": 3}, None), ({"id": 30}, "c")]
    assert changes[4][2] == {"id": 2, "name": None, "price": None, "ok": None}  # REPLICA IDENTITY DEFAULT: the key
    first = json.loads(records(data_dir, "shop.public.items")[0].value)
    assert first["schema"]["name"] == "shop.public.items.Envelope"
    source = first["payload"]["source"]
    assert source["connector"] == "postgresql" and source["name"] == "shop" and source["table"] == "items"
    assert source["snapshot"] == "first" and first["payload"]["after"]["price"] == "AJY="  # 1.50 as Decimal bytes
    created = json.loads(records(data_dir, "shop.public.items")[2].value)["payload"]
    assert created["source"]["txId"] > 0 and created["source"]["lsn"] > 0 and created["ts_ms"] > 0
    assert replay(data_dir, "shop.public.items").keys() == table_state(pg_db, "items").keys()


def _count(data_dir: str, topic: str) -> int:
    import klog

    with klog.open(data_dir) as s:
        return s.describe_topic(topic).offsets if s.has_topic(topic) else 0


def filled(rows: dict, columns: list[str]) -> dict:
    """Rows an event wrote before a column was added have no value for it: NULL, as in the table."""
    return {k: {c: row.get(c) for c in columns} for k, row in rows.items()}


@pytest.mark.slow
def test_big_transaction_new_column_truncate_and_the_topic_replays_to_the_table(pg_db, data_dir):
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = cdc(pg_db, **{"skipped.operations": "none", "table.include.list": "public.t"})
    with running(data_dir, config):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        pg_db.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10000) g")  # one transaction
        pg_db.execute("ALTER TABLE t ADD COLUMN extra int")
        pg_db.execute("UPDATE t SET extra = id * 2 WHERE id <= 100")
        pg_db.execute("DELETE FROM t WHERE id > 9000")
        # 10,000 creates, 100 updates, 1,000 deletes and their tombstones: counted before the topic is parsed
        wait_for(lambda: _count(data_dir, "shop.public.t") >= 12_100, timeout=60, what="the big transaction")
        assert filled(replay(data_dir, "shop.public.t"), ["id", "v", "extra"]) == table_state(pg_db, "t")
        pg_db.execute("TRUNCATE t")
        pg_db.execute("INSERT INTO t VALUES (1, 'after truncate', 7)")
        wait_for(lambda: _count(data_dir, "shop.public.t") >= 12_102, timeout=60, what="the truncate")
    changes = _changes(data_dir, "shop.public.t")  # the topic parsed once
    assert replay(data_dir, "", changes=changes) == table_state(pg_db, "t") == {
        (1,): {"id": 1, "v": "after truncate", "extra": 7}}
    ops = [op for _, op, _, _ in changes]
    assert ops.count("c") == 10001 and ops.count("t") == 1 and ops.count("u") == 100
    last = json.loads(next(r.value for r in reversed(records(data_dir, "shop.public.t")) if r.value))
    after_fields = [f["field"] for f in last["schema"]["fields"][1]["fields"]]
    assert after_fields == ["id", "v", "extra"]  # the new column followed


@pytest.mark.slow
def test_a_restart_resumes_with_no_gap_and_no_duplicate(pg_db, data_dir):
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    pg_db.execute("CREATE TABLE other (id int PRIMARY KEY, v int)")  # in the publication, not in table.include.list
    pg_db.execute("INSERT INTO t VALUES (1, 0)")
    pg_db.execute("INSERT INTO other VALUES (1, 0)")
    config = cdc(pg_db, **{"table.include.list": "public.t"})
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "shop.public.t")) == 1, what="the snapshot")
        for i in range(1, 4):
            pg_db.execute("UPDATE other SET v = %s WHERE id = 1", (i,))
            pg_db.execute("UPDATE t SET v = %s WHERE id = 1", (i,))
        wait_for(lambda: len(records(data_dir, "shop.public.t")) == 4)
    for i in range(4, 7):  # while stopped: the slot keeps them
        pg_db.execute("UPDATE t SET v = %s WHERE id = 1", (i,))
    with running(data_dir, config):
        pg_db.execute("UPDATE t SET v = 7 WHERE id = 1")
        wait_for(lambda: len(records(data_dir, "shop.public.t")) >= 8)
    versions = [after["v"] for _, _, _, after in _changes(data_dir, "shop.public.t")]
    assert versions == list(range(8))  # every change once, in commit order; no second snapshot
    # t's changes came after other's in the same stream: a table outside table.include.list was read and left out
    assert records(data_dir, "shop.public.other") == []


@pytest.mark.slow
def test_a_restart_in_the_middle_of_a_transaction_delivers_the_rest_of_it(pg_db, data_dir):
    """A worker stopped while one 2,000-row transaction is part delivered (one change a poll): the next
    run delivers exactly the changes after the last one delivered, none twice, none missing."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    config = cdc(pg_db, **{"table.include.list": "public.t", "max.batch.size": "1"})

    def last_id() -> int:
        topic = records(data_dir, "shop.public.t")
        return json.loads(topic[-1].value)["payload"]["after"]["id"] if topic else 0

    with running(data_dir, config):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        pg_db.execute("INSERT INTO t SELECT g FROM generate_series(1, 2000) g")  # one transaction
        wait_for(lambda: _count(data_dir, "shop.public.t") >= 50, what="part of the transaction")
    assert last_id() < 2000  # stopped in the middle of it
    with running(data_dir, config):
        wait_for(lambda: last_id() == 2000, timeout=60, what="the rest of the transaction")
    assert [after["id"] for _, _, _, after in _changes(data_dir, "shop.public.t")] == list(range(1, 2001))


@pytest.mark.slow
def test_debezium_keys_that_shape_the_events(pg_db, data_dir):
    """snapshot.mode=no_data, table.exclude.list, tombstones.on.delete=false, decimal.handling.mode=string,
    and a table's REPLICA IDENTITY FULL (the whole before image; the key still the primary key, a key
    change still a delete and a create) each change what reaches the topics as they do with Debezium."""
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY, price numeric(10,2))")
    pg_db.execute("ALTER TABLE a REPLICA IDENTITY FULL")
    pg_db.execute("CREATE TABLE skipped (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO a VALUES (1, 1.50)")  # before the start: no_data takes no snapshot of it
    config = cdc(pg_db, **{"snapshot.mode": "no_data", "table.exclude.list": "public.skipped",
                           "tombstones.on.delete": "false", "decimal.handling.mode": "string"})
    with running(data_dir, config):
        wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
        pg_db.execute("INSERT INTO skipped VALUES (1)")
        pg_db.execute("UPDATE a SET price = 2.25 WHERE id = 1")
        pg_db.execute("UPDATE a SET id = 2 WHERE id = 1")
        pg_db.execute("DELETE FROM a WHERE id = 2")
        wait_for(lambda: any(op == "d" and b["id"] == 2 for _, op, b, _ in _changes(data_dir, "shop.public.a")),
                 what="the last delete")
    # stopped: what the task polled is in the topic (a tombstone would have come with its delete)
    assert _changes(data_dir, "shop.public.a") == [
        ({"id": 1}, "u", {"id": 1, "price": "1.50"}, {"id": 1, "price": "2.25"}),
        ({"id": 1}, "d", {"id": 1, "price": "2.25"}, None), ({"id": 2}, "c", None, {"id": 2, "price": "2.25"}),
        ({"id": 2}, "d", {"id": 2, "price": "2.25"}, None)]
    assert records(data_dir, "shop.public.skipped") == []


def test_keys_debezium_has_and_klog_does_not_are_named(pg_db):
    from klog.connect.worker import ignored_warning, validate

    v = validate(cdc(pg_db, **{"heartbeat.action.query": "SELECT 1", "include.schema.changes": "true",
                               "signal.data.collection": "public.signals"}))
    assert "heartbeat.action.query" in ignored_warning(v) and "include.schema.changes" in ignored_warning(v)
    assert "signal.data.collection" not in ignored_warning(v)  # signals are read (test_connect_signals.py)


def _offsets(data_dir: str, name: str = "pg") -> list[dict]:
    return [json.loads(r.value) for r in records(data_dir, "connect-offsets")
            if r.value and json.loads(r.key)[0] == name]


@pytest.mark.slow
def test_kill_9_during_a_100000_row_load_keeps_every_change_in_commit_order_per_key(pg_db, data_dir, tmp_path):
    """A loader commits 100,000 inserts (200 transactions), then 100 transactions of updates bumping
    the version of 1,000 hot keys (ten versions each), while the connector is SIGKILLed at random
    instants, each after it stored some progress: every version of every key reaches the topic, first
    seen in commit order, and the topic replays to the table."""
    import random
    import signal
    import threading
    import time

    from tests.connect.helpers import start_cli, stop_cli, wait_started, write_config

    pg_db.execute("CREATE TABLE load (id int PRIMARY KEY, version int)")
    schemaless = {"key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"}
    config = write_config(str(tmp_path / "pg.json"), cdc(pg_db, **{"table.include.list": "public.load",
                                                                   **schemaless}))
    worker = write_config(str(tmp_path / "worker.json"), {"offset.flush.interval.ms": "250"})
    rows, per_tx, hot, rounds = 100_000, 500, 1000, 100
    last_tx: list[int] = []

    def load() -> None:
        conn = pg_db.connect(autocommit=False)
        cur = conn.cursor()
        for i in range(0, rows, per_tx):
            cur.execute("INSERT INTO load SELECT g, 0 FROM generate_series(%s, %s) g", (i, i + per_tx - 1))
            conn.commit()
            time.sleep(0.005)  # spread over a few seconds: kills land while it runs
        for r in range(1, rounds + 1):
            cur.execute("UPDATE load SET version = %s WHERE id < %s AND id %% 10 = %s", (r, hot, r % 10))
            conn.commit()
        cur.execute("UPDATE load SET version = -1 WHERE id = %s RETURNING txid_current()", (rows - 1,))
        last_tx.append(cur.fetchone()[0])  # the last transaction: one change
        conn.commit()
        conn.close()

    def run() -> object:
        proc = start_cli(data_dir, "--worker-config", worker, config)
        wait_started(proc)
        return proc

    loader = threading.Thread(target=load)
    rng = random.Random(7)
    proc = run()
    wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
    loader.start()

    def delivering() -> bool:  # the load runs, or its last transaction's offset is not stored yet
        return loader.is_alive() or not last_tx or not any(o.get("txId") == last_tx[0]
                                                            for o in _offsets(data_dir)[-3:])

    killed_mid_delivery = []
    for _ in range(4):
        stored = len(_offsets(data_dir))
        # (everything delivered: no more progress comes, and there is nothing left to kill it in)
        wait_for(lambda p=proc, n=stored: p.poll() is not None or len(_offsets(data_dir)) > n or not delivering(),
                 timeout=60, what="progress before the kill")
        if not delivering():
            break
        time.sleep(rng.uniform(0.1, 0.8))
        killed_mid_delivery.append(delivering())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc = run()
    loader.join(timeout=120)
    assert last_tx, "the loader did not finish"
    assert any(killed_mid_delivery), "every kill came after the last change was delivered"
    wait_for(lambda: not delivering(), timeout=120, what="the last transaction's offset")
    code, err = stop_cli(proc, signal.SIGTERM)
    assert code == 143, err
    seen: dict = {}
    state: dict = {}
    for r in records(data_dir, "shop.public.load"):
        if r.value is None:
            continue
        change = json.loads(r.value)
        after = change["after"]
        if change["op"] in ("c", "r", "u"):
            state[after["id"]] = after["version"]
            versions = seen.setdefault(after["id"], [])
            if after["version"] not in versions:
                versions.append(after["version"])
    assert len(seen) == rows
    for key, versions in seen.items():
        want = [0] + ([r for r in range(1, rounds + 1) if r % 10 == key % 10] if key < hot else [])
        want += [-1] if key == rows - 1 else []
        assert versions == want, key  # every change present, first seen in commit order
    assert state == {k: v["version"] for (k,), v in table_state(pg_db, "load").items()}


@pytest.mark.slow
def test_exactly_once_one_kafka_transaction_per_database_transaction_through_kill_9(pg_db, data_dir, tmp_path):
    """exactly.once.source.support=enabled, transaction.boundary=connector: each database transaction's
    changes and their offset are one Kafka transaction. SIGKILLs during a load leave a read_committed
    reader every change exactly once (no duplicate, no gap), each database transaction whole."""
    import random
    import signal
    import threading
    import time

    import klog
    from tests.connect.helpers import start_cli, stop_cli, wait_started, write_config
    from tests.klog_processes import run_klog

    pg_db.execute("CREATE TABLE eos (id int PRIMARY KEY, version int)")
    config = write_config(str(tmp_path / "pg.json"), cdc(pg_db, **{
        "table.include.list": "public.eos", "transaction.boundary": "connector", "exactly.once.support": "required",
        "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"}))
    worker = write_config(str(tmp_path / "worker.json"), {"exactly.once.source.support": "enabled"})
    rows, per_tx, hot, rounds = 5_000, 250, 500, 30
    last_tx: list[int] = []

    def load() -> None:
        conn = pg_db.connect(autocommit=False)
        cur = conn.cursor()
        for i in range(0, rows, per_tx):
            cur.execute("INSERT INTO eos SELECT g, 0 FROM generate_series(%s, %s) g", (i, i + per_tx - 1))
            conn.commit()
            time.sleep(0.01)
        for r in range(1, rounds + 1):
            cur.execute("UPDATE eos SET version = %s WHERE id < %s AND id %% 5 = %s", (r, hot, r % 5))
            conn.commit()
        cur.execute("UPDATE eos SET version = -1 WHERE id = 0 RETURNING txid_current()")
        last_tx.append(cur.fetchone()[0])
        conn.commit()
        conn.close()

    def run() -> object:
        proc = start_cli(data_dir, "--worker-config", worker, config)
        wait_started(proc)
        return proc

    def committed(topic: str) -> list:
        with klog.open(data_dir) as s:
            return list(s.consumer(topic, isolation_level="read_committed")) if s.has_topic(topic) else []

    proc = run()
    wait_for(lambda: task_running(data_dir), what="the task (its slot created)")
    loader = threading.Thread(target=load)
    loader.start()
    rng = random.Random(3)

    def delivering() -> bool:  # the load runs, or its last transaction's offset is not committed yet
        return loader.is_alive() or not last_tx or not any(json.loads(r.value).get("txId") == last_tx[0]
                                                            for r in committed("connect-offsets")[-3:])

    killed_mid_delivery = []
    for _ in range(2):
        stored = len(committed("connect-offsets"))
        wait_for(lambda p=proc, n=stored: p.poll() is not None or len(committed("connect-offsets")) > n, timeout=60,
                 what="a transaction committed before the kill")
        time.sleep(rng.uniform(0.05, 0.5))
        killed_mid_delivery.append(delivering())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc = run()
    loader.join(timeout=120)
    assert last_tx, "the loader did not finish"
    assert any(killed_mid_delivery), "every kill came after the last change was delivered"
    try:
        wait_for(lambda: not delivering(), timeout=120, what="the last transaction's offset")
    except AssertionError as e:
        _, err = stop_cli(proc, signal.SIGKILL)
        raise AssertionError(f"{e}; the worker said: {err[-3000:]}") from None
    code, err = stop_cli(proc, signal.SIGTERM)
    assert code == 143, err
    changes = [json.loads(r.value) for r in committed("shop.public.eos") if r.value is not None]
    seen = [(c["after"]["id"], c["after"]["version"]) for c in changes]
    assert len(seen) == len(set(seen))  # exactly once: no change twice, even across the kills
    want = {(k, 0) for k in range(rows)} | {(k, r) for r in range(1, rounds + 1) for k in range(hot) if k % 5 == r % 5}
    assert set(seen) == want | {(0, -1)}
    by_tx: dict = {}
    for c in changes:
        by_tx.setdefault(c["source"]["txId"], []).append(c)
    assert sorted(len(v) for v in by_tx.values()) == sorted([per_tx] * (rows // per_tx) + [hot // 5] * rounds + [1])
    # ... and each database transaction is one Kafka transaction, as a consumer sees it: its changes at
    # consecutive offsets, an end marker (an offset of its own) between two transactions
    runs: list[set] = []
    last = None
    for r in committed("shop.public.eos"):
        if last is None or r.offset != last + 1:
            runs.append(set())
        runs[-1].add(json.loads(r.value)["source"]["txId"])
        last = r.offset
    assert all(len(run) == 1 for run in runs) and len(runs) == len(by_tx)
    # the offsets went into those transactions (kafka-dump-log's isTransactional), not beside them
    dump = run_klog(data_dir, "dump", "connect-offsets", "--batches", "--json")
    assert dump.returncode == 0, dump.stderr
    batches = [b for b in map(json.loads, dump.stdout.splitlines()) if b["type"] == "batch"]
    assert batches and all(b["transactional"] for b in batches)


@pytest.mark.parametrize(("mode", "names", "values"), [
    ("adaptive", ["io.debezium.time.Date", "io.debezium.time.MicroTime", "io.debezium.time.Time",
                  "io.debezium.time.MicroTimestamp", "io.debezium.time.ZonedTimestamp"],
     [1, 3_723_000_456, 3_723_004, 90_061_000_001, "1970-01-02T01:01:01.000001Z"]),
    ("connect", ["org.apache.kafka.connect.data.Date", "org.apache.kafka.connect.data.Time",
                 "org.apache.kafka.connect.data.Time", "org.apache.kafka.connect.data.Timestamp",
                 "io.debezium.time.ZonedTimestamp"],
     [1, 3_723_000, 3_723_004, 90_061_000, "1970-01-02T01:01:01.000001Z"])])
@pytest.mark.slow
def test_time_precision_mode(pg_db, data_dir, mode, names, values):
    """time.precision.mode as Debezium's: adaptive (the default) by each column's precision (time(3) in
    milliseconds), connect as Kafka's Date, Time and Timestamp in milliseconds."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, d date, tm time, tm3 time(3), ts timestamp, tz timestamptz)")
    pg_db.execute("INSERT INTO t VALUES (1, '1970-01-02', '01:02:03.000456', '01:02:03.004', "
                  "'1970-01-02 01:01:01.000001', '1970-01-02 01:01:01.000001+00')")
    with running(data_dir, cdc(pg_db, **{"time.precision.mode": mode})):
        wait_for(lambda: len(records(data_dir, "shop.public.t")) == 1, what="the snapshot")
    value = json.loads(records(data_dir, "shop.public.t")[0].value)
    after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
    assert [f.get("name") for f in after["fields"][1:]] == names
    assert [value["payload"]["after"][c] for c in ("d", "tm", "tm3", "ts", "tz")] == values


@pytest.mark.parametrize("columns", [{"column.exclude.list": r"public\.users\.(secret|pin),public.users.id"},
                                     {"column.include.list": r"public\.users\.name"}])
@pytest.mark.slow
def test_column_exclude_list_drops_the_columns_from_values_and_schemas(pg_db, data_dir, columns):
    """column.exclude.list / column.include.list (schema.table.column regular expressions) as Debezium's:
    the columns left out are in no value or schema, snapshot or stream; a key column left out stays in
    the key only (TableSchemaBuilder filters the value's columns, not the key's)."""
    pg_db.execute("CREATE TABLE users (id int PRIMARY KEY, name text, secret text, pin int)")
    pg_db.execute("INSERT INTO users VALUES (1, 'a', 's1', 11)")
    with running(data_dir, cdc(pg_db, **columns)):
        wait_for(lambda: len(records(data_dir, "shop.public.users")) == 1, what="the snapshot")
        pg_db.execute("UPDATE users SET name = 'b', secret = 's2' WHERE id = 1")
        wait_for(lambda: len(records(data_dir, "shop.public.users")) == 2, what="the update")
    values = [json.loads(r.value) for r in records(data_dir, "shop.public.users")]
    assert [v["payload"]["after"] for v in values] == [{"name": "a"}, {"name": "b"}]
    after = next(f for f in values[1]["schema"]["fields"] if f["field"] == "after")
    assert [f["field"] for f in after["fields"]] == ["name"]
    assert [json.loads(r.key)["payload"] for r in records(data_dir, "shop.public.users")] == [{"id": 1}, {"id": 1}]


@pytest.mark.slow
def test_column_defaults_in_the_schemas_as_debezium(pg_db, data_dir):
    """A column's DEFAULT is its field's default in Debezium's schema: a literal as its value, a function
    (nextval, now()) as the type's placeholder, NULL none; a required column a delete's key-only before
    image lacks gets its default."""
    pg_db.execute("CREATE TABLE d (id serial PRIMARY KEY, status text NOT NULL DEFAULT 'new', n int DEFAULT 5, "
                  "ok boolean DEFAULT true, price numeric(10,2) DEFAULT 1.5, at timestamp DEFAULT now(), "
                  "note varchar(9) DEFAULT NULL, plain text, free numeric DEFAULT 2.5)")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: task_running(data_dir), what="the task")
        pg_db.execute("INSERT INTO d (plain) VALUES ('x')")
        pg_db.execute("DELETE FROM d")
        wait_for(lambda: len(records(data_dir, "shop.public.d")) == 3, what="the insert and the delete")
    value = json.loads(records(data_dir, "shop.public.d")[0].value)
    after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
    assert {f["field"]: f.get("default") for f in after["fields"]} == {
        "id": 0, "status": "new", "n": 5, "ok": True, "price": "AJY=", "at": 0, "note": None, "plain": None,
        "free": None}  # a VariableScaleDecimal (a struct) gets no default from Debezium
    assert value["payload"]["after"]["price"] == "AJY=" and value["payload"]["after"]["status"] == "new"
    deleted = json.loads(records(data_dir, "shop.public.d")[1].value)["payload"]["before"]
    # the columns it lacks are null, which Kafka's JsonConverter writes as their defaults
    # (replace.null.with.default=true, its default)
    assert deleted == {"id": 1, "status": "new", "n": 5, "ok": True, "price": "AJY=", "at": 0, "note": None,
                       "plain": None, "free": None}


@pytest.mark.slow
def test_interval_and_enum_columns_as_debezium(pg_db, data_dir):
    """interval as io.debezium.time.MicroDuration (months of 365.25 / 12 days, in microseconds), an enum as
    io.debezium.data.Enum with its labels in their sort order, as Debezium's PostgresValueConverter."""
    pg_db.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
    pg_db.execute("ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok'")
    pg_db.execute("CREATE TABLE m (id int PRIMARY KEY, span interval, feel mood)")
    pg_db.execute("INSERT INTO m VALUES (1, '1 year 2 mons 3 days 04:05:06.789', 'happy'), (2, '-1 day -1.5 seconds', "
                  "NULL)")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.m")) == 2, what="the snapshot")
        pg_db.execute("UPDATE m SET span = '00:00:01', feel = 'meh' WHERE id = 2")
        wait_for(lambda: len(records(data_dir, "shop.public.m")) == 3, what="the update")
    values = [json.loads(r.value) for r in records(data_dir, "shop.public.m")]
    after = {f["field"]: f for f in next(f for f in values[0]["schema"]["fields"] if f["field"] == "after")["fields"]}
    assert after["span"] == {"type": "int64", "optional": True, "name": "io.debezium.time.MicroDuration", "version": 1,
                             "field": "span"}
    assert after["feel"] == {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                             "parameters": {"allowed": "sad,meh,ok,happy"}, "field": "feel"}
    rows = [(v["payload"]["after"]["span"], v["payload"]["after"]["feel"]) for v in values]
    assert rows == [(37_091_106_789_000, "happy"), (-86_401_500_000, None), (1_000_000, "meh")]


@pytest.mark.slow
def test_zoned_timestamps_have_the_columns_fraction_width(pg_db, data_dir):
    """timestamptz as Debezium's ZonedTimestamp: UTC with exactly the column's precision in fraction digits
    (6 without one, a whole second included), as its formatter for the column's scale writes it."""
    pg_db.execute("CREATE TABLE z (id int PRIMARY KEY, a timestamptz, b timestamptz(3), c timestamptz(0))")
    pg_db.execute("INSERT INTO z VALUES (1, '2020-01-01 02:00:00+02', '2020-01-01 00:00:00.5+00', "
                  "'2020-01-01 00:00:01+00')")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.z")) == 1, what="the snapshot")
        pg_db.execute("UPDATE z SET id = 2")
        wait_for(lambda: len(records(data_dir, "shop.public.z")) == 4, what="the key change")
    rows = [json.loads(r.value)["payload"]["after"] for r in records(data_dir, "shop.public.z") if r.value]
    rows = [r for r in rows if r]
    assert [(r["a"], r["b"], r["c"]) for r in rows] == [
        ("2020-01-01T00:00:00.000000Z", "2020-01-01T00:00:00.500Z", "2020-01-01T00:00:01Z")] * 2


@pytest.mark.slow
def test_timetz_and_bit1_as_debezium(pg_db, data_dir):
    """timetz as io.debezium.time.ZonedTime (shifted to UTC, ISO_OFFSET_TIME), bit(1) as a boolean."""
    pg_db.execute("CREATE TABLE tz (id int PRIMARY KEY, t timetz, flag bit(1))")
    pg_db.execute("INSERT INTO tz VALUES (1, '04:05:06.789+02', B'1'), (2, '00:30:00+01', B'0')")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.tz")) == 2, what="the snapshot")
    values = [json.loads(r.value) for r in records(data_dir, "shop.public.tz")]
    after = {f["field"]: f for f in next(f for f in values[0]["schema"]["fields"] if f["field"] == "after")["fields"]}
    assert after["t"]["name"] == "io.debezium.time.ZonedTime" and after["flag"]["type"] == "boolean"
    assert [(v["payload"]["after"]["t"], v["payload"]["after"]["flag"]) for v in values] == [
        ("02:05:06.789Z", True), ("23:30:00Z", False)]


@pytest.mark.slow
def test_one_dimensional_arrays_as_connect_arrays(pg_db, data_dir):
    """int[], text[], boolean[], uuid[] as Connect arrays of optional elements, as Debezium's; quoted,
    escaped and NULL elements read from PostgreSQL's text form."""
    pg_db.execute("CREATE TABLE arr (id int PRIMARY KEY, n int[], s text[], b boolean[], u uuid[])")
    pg_db.execute("""INSERT INTO arr VALUES (1, '{1,NULL,3}', '{"a b",c,"d\\"e",NULL,"NULL"}', '{t,f}', """
                  """'{00000000-0000-0000-0000-000000000001}'), (2, '{}', NULL, NULL, NULL)""")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.arr")) == 2, what="the snapshot")
        pg_db.execute("UPDATE arr SET n = '{7}' WHERE id = 2")
        wait_for(lambda: len(records(data_dir, "shop.public.arr")) == 3, what="the update")
    values = [json.loads(r.value) for r in records(data_dir, "shop.public.arr")]
    after = {f["field"]: f for f in next(f for f in values[0]["schema"]["fields"] if f["field"] == "after")["fields"]}
    assert after["n"] == {"type": "array", "optional": True, "items": {"type": "int32", "optional": True}, "field": "n"}
    assert after["u"]["items"]["name"] == "io.debezium.data.Uuid"
    rows = [v["payload"]["after"] for v in values]
    assert rows[0] == {"id": 1, "n": [1, None, 3], "s": ["a b", "c", 'd"e', None, "NULL"], "b": [True, False],
                       "u": ["00000000-0000-0000-0000-000000000001"]}
    assert (rows[1]["n"], rows[2]["n"]) == ([], [7])


@pytest.mark.slow
def test_snapshot_markers_and_microsecond_timestamps_as_debezium(pg_db, data_dir):
    """source.snapshot marks a snapshot's records as Debezium's SnapshotRecord.resolve (first, then
    first_in_data_collection / last_in_data_collection around each table, true between, last), and the
    envelope and source carry ts_us and ts_ns beside ts_ms (Debezium 2.6+)."""
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.execute("CREATE TABLE b (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO a VALUES (1), (2), (3)")
    pg_db.execute("INSERT INTO b VALUES (1), (2), (3)")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.b")) == 3, what="the snapshot")
        pg_db.execute("INSERT INTO a VALUES (4)")
        wait_for(lambda: len(records(data_dir, "shop.public.a")) == 4, what="the insert")
    a = [json.loads(r.value) for r in records(data_dir, "shop.public.a")]
    b = [json.loads(r.value) for r in records(data_dir, "shop.public.b")]
    assert [v["payload"]["source"]["snapshot"] for v in a + b] == [
        "first", "true", "last_in_data_collection", "false", "first_in_data_collection", "true", "last"]
    fields = [f["field"] for f in a[0]["schema"]["fields"]]
    # TableSchemaBuilder's order: the transaction block before op
    assert fields == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    for v in (a[0], a[3]):
        p, source = v["payload"], v["payload"]["source"]
        assert p["ts_us"] // 1000 == p["ts_ms"] and p["ts_ns"] // 1000 == p["ts_us"]
        assert source["ts_us"] // 1000 == source["ts_ms"] and source["ts_ns"] == source["ts_us"] * 1000

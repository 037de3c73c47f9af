"""The PostgreSQL connector's Debezium options for the snapshot and the events' columns, against a real
server: snapshot.locking.mode and snapshot.lock.timeout.ms, database.initial.statements,
snapshot.select.statement.overrides, the column mappers (column.mask.*, column.truncate.to.*),
publish.via.partition.root. The fast lane runs one connector per option (about 6 s); the variants are slow."""

from __future__ import annotations

import json
import threading

import pytest

from klog.connect.connectors.postgres import PostgresTask
from tests.connect.helpers import records, running, wait_for
from tests.connect.test_connect_postgres import cdc


def _afters(data_dir: str, table: str) -> list[dict | None]:
    return [json.loads(r.value)["payload"]["after"] for r in records(data_dir, f"shop.public.{table}") if r.value]


def _task(worker) -> dict:  # noqa: ANN001 - a klog Worker
    return worker.describe_status("pg")["tasks"][0]


@pytest.fixture
def gated_snapshot(monkeypatch):
    """The snapshot stops after its first record until the test opens the gate (it holds its transaction,
    and any lock it took, meanwhile): what the DDL of another session meets while a snapshot reads."""
    gate = threading.Event()
    snapshot = PostgresTask._snapshot

    def gated(self, snapshot_name):  # noqa: ANN001, ANN202
        rows = snapshot(self, snapshot_name)
        yield next(rows)
        assert gate.wait(30), "the test never opened the gate"
        yield from rows

    monkeypatch.setattr(PostgresTask, "_snapshot", gated)
    yield gate
    gate.set()


def _backend_state(db, query_like: str) -> list[tuple]:
    """(state, wait_event_type) of the other sessions running a statement like `query_like`."""
    return db.execute("SELECT state, wait_event_type FROM pg_stat_activity WHERE query LIKE %s "
                      "AND pid <> pg_backend_pid()", (query_like,))


def _snapshot_holds(db, table: str) -> bool:
    """Whether a session of the connector holds a lock on the table (the snapshot's transaction)."""
    return bool(db.execute("SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                           "WHERE l.relation = %s::regclass AND l.granted "
                           "AND a.application_name LIKE 'klog-connect-%%'",
                           (table,)))


def _ddl_in_thread(db, sql: str) -> tuple[threading.Thread, list]:
    done: list = []

    def run() -> None:
        try:
            db.execute(sql)
            done.append("ok")
        except Exception as e:  # noqa: BLE001 - reported to the test
            done.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


SETUP = ["CREATE TABLE a (id int PRIMARY KEY, v text)", "CREATE TABLE b (id int PRIMARY KEY, v text, extra text)",
         "INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 50) g",
         "INSERT INTO b SELECT g, 'b' || g, 'x' FROM generate_series(1, 50) g"]


@pytest.mark.slow
def test_shared_locking_makes_ddl_on_a_table_not_read_yet_wait_for_the_snapshot(pg_db, data_dir, gated_snapshot):
    """snapshot.locking.mode=shared: the captured tables are locked IN ACCESS SHARE MODE in the snapshot's
    transaction until it ends (Debezium's SharedSnapshotLock), so an ALTER TABLE ... DROP COLUMN on a table the
    snapshot has not read yet waits; the snapshot's events are complete and the DDL completes after it."""
    for sql in SETUP:
        pg_db.execute(sql)
    with running(data_dir, cdc(pg_db, **{"snapshot.locking.mode": "shared", "max.batch.size": "10"})) as w:
        wait_for(lambda: _snapshot_holds(pg_db, "b"), what="the snapshot's lock on b (not read yet)")
        ddl, done = _ddl_in_thread(pg_db, "ALTER TABLE b DROP COLUMN extra")
        wait_for(lambda: ("active", "Lock") in _backend_state(pg_db, "ALTER TABLE b%"), what="the DDL waiting")
        assert not done, "the DDL completed while the snapshot was reading"
        gated_snapshot.set()
        wait_for(lambda: len(records(data_dir, "shop.public.b")) == 50, what="b's snapshot")
        ddl.join(30)
        assert done == ["ok"], done
        pg_db.execute("INSERT INTO b VALUES (51, 'b51')")
        wait_for(lambda: len(records(data_dir, "shop.public.b")) == 51, what="the insert after the DDL")
        assert _task(w)["state"] == "RUNNING"
    afters = _afters(data_dir, "b")
    assert afters[:50] == [{"id": i, "v": f"b{i}", "extra": "x"} for i in range(1, 51)]
    assert afters[50] == {"id": 51, "v": "b51"}
    assert len(_afters(data_dir, "a")) == 50


@pytest.mark.slow  # (the fast lane keeps one connector run per option)
def test_no_locking_by_default_as_debezium_so_such_ddl_fails_the_snapshot(pg_db, data_dir, gated_snapshot):
    """snapshot.locking.mode=none (Debezium's default for PostgreSQL since 2.6): no table lock, so the same DDL
    completes at once and the snapshot then fails on the dropped column, as before."""
    for sql in SETUP:
        pg_db.execute(sql)
    with running(data_dir, cdc(pg_db, **{"max.batch.size": "10"})) as w:
        wait_for(lambda: _snapshot_holds(pg_db, "a"), what="the snapshot reading a")
        assert not _snapshot_holds(pg_db, "b")
        ddl, done = _ddl_in_thread(pg_db, "ALTER TABLE b DROP COLUMN extra")
        ddl.join(10)
        assert done == ["ok"], done
        gated_snapshot.set()
        wait_for(lambda: _task(w)["state"] == "FAILED", what="the task failed")
        assert "extra" in _task(w)["trace"] and "does not exist" in _task(w)["trace"]


def test_a_lock_not_granted_in_snapshot_lock_timeout_fails_the_task_with_one_line(pg_db, data_dir, monkeypatch):
    """snapshot.lock.timeout.ms: the lock is waited for that long (`SET lock_timeout`), then the task fails
    naming the table and the option; nothing of the snapshot is sent. (The conflicting lock is taken once the
    slot exists: an ACCESS EXCLUSIVE lock takes a transaction id, which the slot's creation would wait for.)"""
    for sql in SETUP:
        pg_db.execute(sql)
    slot_made = threading.Event()
    lock_tables = PostgresTask._lock_tables

    def after_the_slot(self, snap, tables):  # noqa: ANN001, ANN202
        assert slot_made.wait(30)
        return lock_tables(self, snap, tables)

    monkeypatch.setattr(PostgresTask, "_lock_tables", after_the_slot)
    holder = pg_db.connect(autocommit=False)
    config = cdc(pg_db, **{"snapshot.locking.mode": "shared", "snapshot.lock.timeout.ms": "300"})
    try:
        with running(data_dir, config) as w:
            wait_for(lambda: pg_db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'klog_slot'"),
                     what="the slot")
            holder.cursor().execute("LOCK TABLE b IN ACCESS EXCLUSIVE MODE")
            slot_made.set()
            wait_for(lambda: _task(w)["state"] == "FAILED", what="the task failed")
            last_line = _task(w)["trace"].strip().splitlines()[-1]
        assert last_line == ("klog.connect.errors.ConnectError: snapshot.locking.mode=shared: the lock on table "
                             "public.b was not granted within snapshot.lock.timeout.ms=300 (another transaction "
                             "holds a conflicting lock); the snapshot was not taken")
        assert records(data_dir, "shop.public.a") == []
    finally:
        slot_made.set()
        holder.rollback()
        holder.close()


def _sessions(db, application_name: str) -> list[str]:
    """The backend types of the sessions with that application_name."""
    return sorted(t for (t,) in db.execute("SELECT backend_type FROM pg_stat_activity WHERE application_name = %s",
                                           (application_name,)))


def test_initial_statements_run_on_each_query_connection_not_the_replication_one(pg_db, data_dir, gated_snapshot):
    """database.initial.statements: split at `;` (`;;` a semicolon), run on every connection for queries when
    it is opened, the snapshot's included, as Debezium's JdbcConnection; not on the replication connection."""
    for sql in SETUP:
        pg_db.execute(sql)
    statements = "SET application_name = 'klog;;init';SET lock_timeout = 4321;"
    config = cdc(pg_db, **{"database.initial.statements": statements})
    with running(data_dir, config) as w:
        # while the snapshot reads: the task's connection and the snapshot's, both set; the walsender not
        wait_for(lambda: _sessions(pg_db, "klog;init") == ["client backend", "client backend"],
                 what="two query connections set by the statements")
        assert _sessions(pg_db, "klog-connect-pg") == ["walsender"]
        gated_snapshot.set()
        wait_for(lambda: len(records(data_dir, "shop.public.b")) == 50, what="the snapshot")
        assert _task(w)["state"] == "RUNNING"
    assert len(_afters(data_dir, "a")) == 50


@pytest.mark.slow  # (the fast lane keeps one connector run per option)
def test_a_failing_initial_statement_fails_the_task_naming_it(pg_db, data_dir):
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    config = cdc(pg_db, **{"database.initial.statements": "SET lock_timeout = 10; SELEC 1"})
    with running(data_dir, config) as w:
        wait_for(lambda: _task(w)["state"] == "FAILED", what="the task failed")
        last_line = _task(w)["trace"].strip().splitlines()[-1]
    assert last_line == ("klog.connect.errors.ConnectError: database.initial.statements: 'SELEC 1' failed: "
                         'syntax error at or near "SELEC"')


@pytest.mark.slow
def test_snapshot_select_statement_overrides_choose_the_rows_and_columns_of_a_tables_snapshot(pg_db, data_dir):
    """snapshot.select.statement.overrides lists tables; snapshot.select.statement.overrides.<schema>.<table>
    is the SELECT the snapshot reads that table with (RelationalSnapshotChangeEventSource.determineSnapshotSelect).
    Its result columns are the table's of the same name, case aside (ColumnUtils.toArray); a column it leaves
    out is null, or for a NOT NULL one its default, else the type's stand-in. A quoted name is read as
    TableIdParser reads it; a listed table without a statement is read whole, with a warning. The stream is
    not filtered."""
    for sql in ["CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, note text, qty int NOT NULL, "
                "kind text NOT NULL DEFAULT 'std')",
                "INSERT INTO orders VALUES (1, 'new', 'n1', 5, 'a'), (2, 'paid', 'n2', 6, 'b'), "
                "(3, 'new', 'n3', 7, 'c')",
                'CREATE TABLE "Mixed" (id int PRIMARY KEY, v text)',
                """INSERT INTO "Mixed" VALUES (1, 'x'), (2, 'y')""",
                "CREATE TABLE plain (id int PRIMARY KEY)", "INSERT INTO plain VALUES (1), (2)"]:
        pg_db.execute(sql)
    warnings: list[str] = []
    config = cdc(pg_db, **{
        "snapshot.select.statement.overrides": 'public.orders, "public"."Mixed",public.plain',
        "snapshot.select.statement.overrides.public.orders":
            "SELECT id, upper(status) AS \"STATUS\" FROM public.orders WHERE status = 'new' ORDER BY id DESC",
        'snapshot.select.statement.overrides."public"."Mixed"': 'SELECT v, id FROM "Mixed" WHERE id = 2;'})
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: len(records(data_dir, "shop.public.plain")) == 2, what="the snapshot")
        pg_db.execute("INSERT INTO orders VALUES (4, 'paid', NULL, 8)")
        wait_for(lambda: len(records(data_dir, "shop.public.orders")) == 3, what="the insert streamed")
    assert _afters(data_dir, "orders") == [
        {"id": 3, "status": "NEW", "note": None, "qty": 0, "kind": "std"},
        {"id": 1, "status": "NEW", "note": None, "qty": 0, "kind": "std"},
        {"id": 4, "status": "paid", "note": None, "qty": 8, "kind": "std"}]
    assert _afters(data_dir, "Mixed") == [{"id": 2, "v": "y"}]
    assert [w for w in warnings if "overrides" in w] == [
        "connector 'pg': snapshot.select.statement.overrides names public.plain but there is no "
        "snapshot.select.statement.overrides.public.plain: the snapshot reads the whole table"]


@pytest.mark.slow  # (the fast lane keeps one connector run per option)
def test_an_override_selecting_a_column_the_table_lacks_fails_the_task(pg_db, data_dir):
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg_db.execute("INSERT INTO t VALUES (1, 'x')")
    config = cdc(pg_db, **{"snapshot.select.statement.overrides": "public.t",
                           "snapshot.select.statement.overrides.public.t": "SELECT id, v AS w FROM t"})
    with running(data_dir, config) as w:
        wait_for(lambda: _task(w)["state"] == "FAILED", what="the task failed")
        last_line = _task(w)["trace"].strip().splitlines()[-1]
    assert last_line == ("klog.connect.errors.ConnectError: snapshot.select.statement.overrides.public.t: its "
                         "column 'w' is not a column of table public.t (id, v)")


def test_java_serialized_string_hashes_as_debeziums_mask_strings_test():
    """MaskStringsTest's values: v1 hashes Java's serialized String, v2 its UTF-8 bytes, salt first."""
    from klog.connect.connectors.column_mappers import Rule

    def hashed(digest: str, v2: bool, value: str) -> str:
        return Rule("hash", (), digest=digest, salt=b"salt", v2=v2)._hasher(-1)(value)

    assert hashed("sha256", False, "hello") == "af5843a0f0e728ab0332c8888b6e1190bfb79e584f0d40538de8f10df6ef29c6"
    assert hashed("sha256", False, "world") == "4588e1f2dcdc7fefc1515d3acd5acb9033478eace68286f383c337b9ff4464a3"
    assert hashed("md5", False, "hello") == "46f48a7a5ea32efba87cbff49d46d35a"
    assert hashed("sha256", True, "hello") == "cd31b3b98ece60cb739c0bf770b2de892ae0ad133f645513c3d83f08757a843a"
    assert hashed("md5", True, "world") == "172c8e95398cc72ab5358ead6981e7e5"


def _value_fields(data_dir: str, table: str) -> dict[str, dict]:
    value = json.loads(records(data_dir, f"shop.public.{table}")[0].value)
    return {f["field"]: f for f in value["schema"]["fields"][1]["fields"]}


@pytest.mark.slow
def test_column_mappers_truncate_mask_and_hash_values_and_mark_the_schema(pg_db, data_dir):
    """column.truncate.to.N.chars, column.mask.with.N.chars, column.mask.hash[.v2].<algorithm>.with.salt.<salt>
    as Debezium's ColumnMappers: the first rule matching schema.table.column (case aside) wins; truncation
    (strings by characters, bytes by bytes) applies where the column's length is unknown or over N, with a
    truncateLength parameter, whatever the type; masks and hashes change character columns only (text, varchar,
    char, enums), with a masked parameter on any; a hash is the hex digest cut to the column's length; a mask
    replaces a null too. The key is not mapped. Snapshot and streamed events alike."""
    from klog.connect.connectors.column_mappers import Rule

    for sql in ["CREATE TYPE mood AS ENUM ('happy', 'sad')",
                "CREATE TABLE people (id int PRIMARY KEY, name text, email varchar(10), code char(3), "
                "note text NOT NULL DEFAULT 'n', age int, feel mood, data bytea, tags text[], alias varchar(40))",
                "INSERT INTO people VALUES (1, 'Alexander', 'a@b.c', 'xyz', DEFAULT, 42, 'happy', '\\x0102030405', "
                "'{a,b}', 'Al')"]:
        pg_db.execute(sql)
    config = cdc(pg_db, **{
        "column.truncate.to.4.chars": r"public\.people\.(name|age|data)",
        "column.truncate.to.20.chars": "public.people.email",
        "column.mask.with.3.chars": "public.people.note,public.people.ID, public.people.tags",
        "column.mask.hash.SHA-256.with.salt.pep.per": "public.people.code,public.people.feel",
        "column.mask.hash.v2.MD5.with.salt.s": "public.people.email,public.people.alias"})
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "shop.public.people")) == 1, what="the snapshot")
        pg_db.execute("INSERT INTO people (id, note) VALUES (2, 'x')")
        pg_db.execute("DELETE FROM people WHERE id = 1")
        wait_for(lambda: len(records(data_dir, "shop.public.people")) == 4, what="the changes")

    def sha256(value: str) -> str:
        return Rule("hash", (), digest="sha256", salt=b"pep.per")._hasher(-1)(value)

    md5 = Rule("hash", (), digest="md5", salt=b"s", v2=True)._hasher(-1)
    got = [json.loads(r.value)["payload"] if r.value else None for r in records(data_dir, "shop.public.people")]
    assert got[0]["after"] == {"id": 1, "name": "Alex", "email": "a@b.c", "code": sha256("xyz")[:3], "note": "***",
                               "age": 42, "feel": sha256("happy"), "data": "AQIDBA==", "tags": ["a", "b"],
                               "alias": md5("Al")}
    assert got[1]["after"] == {"id": 2, "name": None, "email": None, "code": None, "note": "***", "age": None,
                               "feel": None, "data": None, "tags": None, "alias": None}
    assert got[2]["op"] == "d" and got[2]["before"]["note"] == "***" and got[2]["before"]["id"] == 1
    assert [json.loads(r.key)["payload"] for r in records(data_dir, "shop.public.people")] == [
        {"id": 1}, {"id": 2}, {"id": 1}, {"id": 1}]
    fields = _value_fields(data_dir, "people")
    truncated, masked = {"truncateLength": "4"}, {"masked": "true"}
    assert fields["name"] == {"type": "string", "optional": True, "parameters": truncated, "field": "name"}
    assert fields["age"] == {"type": "int32", "optional": True, "parameters": truncated, "field": "age"}
    assert fields["data"]["parameters"] == truncated
    assert "parameters" not in fields["email"]  # varchar(10): no truncation to 20 possible; the rule still won
    assert fields["id"] == {"type": "int32", "optional": False, "parameters": masked, "field": "id"}
    assert list(fields["note"].items()) == [("type", "string"), ("optional", False), ("parameters", masked),
                                            ("default", "n"), ("field", "note")]  # JsonConverter's order
    assert fields["tags"]["parameters"] == masked and fields["code"]["parameters"] == masked
    assert fields["feel"] == {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                              "parameters": {"allowed": "happy,sad", "masked": "true"}, "field": "feel"}
    key = json.loads(records(data_dir, "shop.public.people")[0].key)["schema"]
    assert key["fields"] == [{"type": "int32", "optional": False, "field": "id"}]


def test_an_unknown_hash_algorithm_is_refused_naming_the_key(pg_db):
    from klog.connect.errors import ConfigError
    from klog.connect.worker import validate

    config = cdc(pg_db, **{"column.mask.hash.SHA-999.with.salt.x": "public.t.c"})
    with pytest.raises(ConfigError, match="column.mask.hash.SHA-999.with.salt.x"):
        validate(config)


def test_the_keys_named_by_pattern_are_the_connectors():
    """What the worker's warning of ignored keys should leave out (klog reads them)."""
    from klog.connect.connectors.postgres import PostgresConnector

    assert all(PostgresConnector.known_key(k) for k in (
        "column.truncate.to.10.chars", "column.mask.with.5.chars", "column.mask.hash.SHA-256.with.salt.a.b",
        "column.mask.hash.v2.MD5.with.salt.x", "snapshot.select.statement.overrides.public.t"))
    assert not any(PostgresConnector.known_key(k) for k in ("column.mask.with.x.chars", "column.propagate.source.type",
                                                            "column.mask.hash.SHA-256"))


def test_the_workers_warning_leaves_the_pattern_keys_out(pg_db):
    from klog.connect.worker import validate

    config = cdc(pg_db, **{"column.mask.with.3.chars": "public.t.c", "snapshot.select.statement.overrides": "public.t",
                           "snapshot.select.statement.overrides.public.t": "SELECT * FROM public.t",
                           "column.mask.with.x.chars": "public.t.c"})
    assert validate(config).ignored == ["column.mask.with.x.chars"]


PARTITIONED = ["CREATE TABLE m (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)",
               "CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu')",
               "CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us')",
               "INSERT INTO m VALUES (1, 'eu', 'a'), (2, 'us', 'b')"]


@pytest.mark.parametrize("mode", ["all_tables", pytest.param("filtered", marks=pytest.mark.slow)])
def test_publish_via_partition_root_sends_a_partitions_changes_as_the_roots(pg_db, data_dir, mode):
    """publish.via.partition.root=true: the publication the connector creates has publish_via_partition_root
    (Debezium's buildWithClause), so a change to a partition is on the partitioned table's topic, its source
    naming that table. (The snapshot reads the tables the filters keep: here the root alone.)"""
    for sql in PARTITIONED:
        pg_db.execute(sql)
    config = cdc(pg_db, **{"publish.via.partition.root": "true", "table.include.list": r"public\.m",
                           "publication.autocreate.mode": mode})
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "shop.public.m")) == 2, what="the snapshot of the root")
        pg_db.execute("INSERT INTO m VALUES (3, 'eu', 'c'), (4, 'us', 'd')")
        pg_db.execute("UPDATE m SET v = 'z' WHERE id = 1")
        wait_for(lambda: len(records(data_dir, "shop.public.m")) == 5, what="the partitions' changes")
    assert pg_db.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = 'klog_pub'") == [(True,)]
    values = [json.loads(r.value)["payload"] for r in records(data_dir, "shop.public.m")]
    assert [(v["op"], v["after"], v["source"]["table"]) for v in values[2:]] == [
        ("c", {"id": 3, "region": "eu", "v": "c"}, "m"), ("c", {"id": 4, "region": "us", "v": "d"}, "m"),
        ("u", {"id": 1, "region": "eu", "v": "z"}, "m")]
    assert records(data_dir, "shop.public.m_eu") == [] and records(data_dir, "shop.public.m_us") == []


@pytest.mark.slow  # (the fast lane keeps one connector run per option)
def test_without_publish_via_partition_root_a_partitions_changes_are_its_own(pg_db, data_dir):
    for sql in PARTITIONED:
        pg_db.execute(sql)
    with running(data_dir, cdc(pg_db, **{"table.include.list": r"public\.m_eu"})):
        wait_for(lambda: len(records(data_dir, "shop.public.m_eu")) == 1, what="the snapshot of the partition")
        pg_db.execute("INSERT INTO m VALUES (3, 'eu', 'c')")
        wait_for(lambda: len(records(data_dir, "shop.public.m_eu")) == 2, what="the insert")
    assert pg_db.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = 'klog_pub'") == [(False,)]
    assert records(data_dir, "shop.public.m") == []


@pytest.mark.slow  # (the fast lane keeps one connector run per option)
def test_column_mappers_map_the_unavailable_value_placeholder_too(pg_db, data_dir):
    """An unchanged TOASTed value an update does not carry is the placeholder from the type's converter
    (PostgresValueConverter.convertString), which the column mapper then maps, as TableSchemaBuilder wraps it."""
    for sql in ["CREATE TABLE docs (id int PRIMARY KEY, n int, body text, secret text)",
                "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",
                "ALTER TABLE docs ALTER COLUMN secret SET STORAGE EXTERNAL",
                "INSERT INTO docs VALUES (1, 0, repeat('b', 5000), repeat('s', 5000))"]:
        pg_db.execute(sql)
    config = cdc(pg_db, **{"column.truncate.to.4.chars": "public.docs.body",
                           "column.mask.with.2.chars": "public.docs.secret"})
    with running(data_dir, config):
        wait_for(lambda: len(records(data_dir, "shop.public.docs")) == 1, what="the snapshot")
        pg_db.execute("UPDATE docs SET n = 1 WHERE id = 1")
        wait_for(lambda: len(records(data_dir, "shop.public.docs")) == 2, what="the update")
    assert _afters(data_dir, "docs") == [{"id": 1, "n": 0, "body": "bbbb", "secret": "**"},
                                         {"id": 1, "n": 1, "body": "__de", "secret": "**"}]

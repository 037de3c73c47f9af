"""A Kafka Connect user's configs moved to klog connect unchanged (Debezium's PostgreSQL source, Confluent's
JDBC sink): what the review of that move found wrong, each checked as the user would see it."""

from __future__ import annotations

import json

import pytest

from tests.connect.helpers import records, running, wait_for


def cdc(db, **extra) -> dict:
    return db.debezium_config(name="pg", **{"topic.prefix": "shop", "slot.name": "klog_review",
                                            "publication.name": "klog_review", **extra})


def _ids(data_dir: str, topic: str) -> list:
    return [json.loads(r.key)["payload"]["id"] for r in records(data_dir, topic) if r.value is not None]


@pytest.mark.slow
def test_a_table_added_to_the_include_list_of_a_filtered_publication_is_streamed_after_a_restart(pg_db, data_dir):
    """publication.autocreate.mode=filtered: Debezium sets an existing publication to the tables the filters keep
    at each start (ALTER PUBLICATION ... SET TABLE), so a table added to table.include.list is streamed; klog
    kept the publication it made first, and the new table's changes never came."""
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.execute("CREATE TABLE b (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO a VALUES (1)")
    pg_db.execute("INSERT INTO b VALUES (1)")
    config = cdc(pg_db, **{"publication.autocreate.mode": "filtered", "table.include.list": "public.a"})
    with running(data_dir, config):
        wait_for(lambda: _ids(data_dir, "shop.public.a") == [1], what="a's snapshot")
    with running(data_dir, {**config, "table.include.list": "public.a,public.b"}):
        # (a change committed before the task altered the publication is not published: wait for it)
        wait_for(lambda: _published(pg_db) == ["a", "b"], what="the publication altered")
        pg_db.execute("INSERT INTO a VALUES (2)")
        pg_db.execute("INSERT INTO b VALUES (2)")
        wait_for(lambda: _ids(data_dir, "shop.public.a") == [1, 2], what="a's insert")
        wait_for(lambda: _ids(data_dir, "shop.public.b") == [2], what="b's insert (no snapshot of b: as Debezium)")


def _published(db) -> list[str]:  # noqa: ANN001 - tests.connect.pg_server.Database
    return sorted(t for (t,) in db.execute("SELECT tablename FROM pg_publication_tables WHERE pubname = 'klog_review'"))


@pytest.mark.slow
def test_filtered_mode_refuses_a_publication_for_all_tables_as_debezium(pg_db, data_dir):
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.execute("CREATE PUBLICATION klog_review FOR ALL TABLES")
    with running(data_dir, cdc(pg_db, **{"publication.autocreate.mode": "filtered",
                                         "table.include.list": "public.a"})) as w:
        wait_for(lambda: w.describe_status("pg")["tasks"][0]["state"] == "FAILED", what="the task failing")
        trace = w.describe_status("pg")["tasks"][0]["trace"]
    assert "FOR ALL TABLES" in trace and "publication.autocreate.mode=all_tables" in trace


def _produce(data_dir: str, topic: str, values: list[bytes]) -> None:
    import klog

    with klog.open(data_dir) as s:
        s.create_topic(topic, partitions=1, exist_ok=True)
        with s.producer() as p:
            for v in values:
                p.send(topic, v)


def _lines(path) -> list[str]:  # noqa: ANN001 - a pathlib.Path
    return sorted(path.read_text().splitlines()) if path.exists() else []


@pytest.mark.slow
def test_a_topics_regex_sink_waits_for_its_first_topic_and_takes_each_new_one(tmp_path, data_dir):
    """topics.regex is Kafka's pattern subscription: a sink started beside a CDC source whose topics do not
    exist yet runs, and a topic created later that matches (a table added upstream) is read too. klog's task
    failed at start, `no topic matches pattern`, and never looked again for new topics."""
    out = tmp_path / "out.txt"
    sink = {"name": "sink", "connector.class": "FileStreamSink", "topics.regex": r"shop\.public\..*",
            "file": str(out), "value.converter": "string", "consumer.override.metadata.max.age.ms": "200"}
    with running(data_dir, sink) as w:
        wait_for(lambda: w.describe_status("sink")["tasks"][0]["state"] == "RUNNING", what="the task running")
        _produce(data_dir, "shop.public.a", [b"a1", b"a2"])
        _produce(data_dir, "other", [b"x"])
        wait_for(lambda: _lines(out) == ["a1", "a2"], what="the first topic's records")
        _produce(data_dir, "shop.public.b", [b"b1"])
        _produce(data_dir, "shop.public.a", [b"a3"])
        wait_for(lambda: _lines(out) == ["a1", "a2", "a3", "b1"], what="the new topic's records")
        assert w.describe_status("sink")["tasks"][0]["state"] == "RUNNING"
    with running(data_dir, sink):  # committed: a restart reads nothing twice
        _produce(data_dir, "shop.public.b", [b"b2"])
        wait_for(lambda: _lines(out) == ["a1", "a2", "a3", "b1", "b2"], what="the record after the restart")


def _slots(db) -> list[str]:  # noqa: ANN001 - tests.connect.pg_server.Database
    return [name for (name,) in db.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                                           (db.dbname,))]


@pytest.mark.slow
def test_initial_only_takes_the_snapshot_without_a_replication_slot(pg_db, data_dir):
    """snapshot.mode=initial_only never streams: Debezium creates no slot for it (nor a publication). klog
    created one and left it unread, so the server kept every WAL segment from then on, for no reader."""
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO a SELECT generate_series(1, 3)")
    config = cdc(pg_db, **{"snapshot.mode": "initial_only"})
    with running(data_dir, config) as w:
        wait_for(lambda: _ids(data_dir, "shop.public.a") == [1, 2, 3], what="the snapshot")
        pg_db.execute("INSERT INTO a VALUES (4)")
        assert _slots(pg_db) == []
        assert w.describe_status("pg")["tasks"][0]["state"] == "RUNNING"
    with running(data_dir, config):  # the snapshot is finished: not taken again
        pg_db.execute("INSERT INTO a VALUES (5)")
    assert _ids(data_dir, "shop.public.a") == [1, 2, 3]
    assert _slots(pg_db) == [] and pg_db.execute("SELECT pubname FROM pg_publication") == []


@pytest.mark.slow
def test_a_slot_name_another_database_uses_fails_with_debeziums_advice(pg_server, pg_db, data_dir):
    other = pg_server.database(pg_server.create_database("review_other_db"))
    try:
        other.execute("SELECT pg_create_logical_replication_slot('klog_review', 'pgoutput')")
        with running(data_dir, cdc(pg_db)) as w:
            wait_for(lambda: w.describe_status("pg")["tasks"][0]["state"] == "FAILED", what="the task failing")
            trace = w.describe_status("pg")["tasks"][0]["trace"]
        assert "replication slot 'klog_review' already exists for another database" in trace
        assert "distinct replication slot name" in trace
    finally:
        pg_server.drop_database(other.dbname)


def _after_and_types(record) -> tuple[dict, dict]:  # noqa: ANN001 - a klog Record
    value = json.loads(record.value)
    after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
    return value["payload"]["after"], {f["field"]: f.get("name") or f["type"] for f in after["fields"]}


@pytest.mark.slow
def test_a_change_streamed_after_an_alter_column_type_keeps_the_type_it_was_written_with(pg_db, data_dir):
    """A connector that lags (stopped, or behind) streams changes written before an ALTER COLUMN ... TYPE:
    pgoutput sends their relation with the types they had, and Debezium's decoder types them so. klog read
    the types from the catalog as it is now: an int column's 1 made boolean came out `false`, a bytea made
    text came out as the text `\\x616263`."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, n int, b bytea)")
    pg_db.execute("INSERT INTO t VALUES (0, 0, 'z')")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [0], what="the snapshot")
    pg_db.execute("INSERT INTO t VALUES (1, 1, 'abc')")  # while the connector is down
    pg_db.execute("ALTER TABLE t ALTER COLUMN n TYPE boolean USING n::boolean, "
                  "ALTER COLUMN b TYPE text USING encode(b, 'escape')")
    pg_db.execute("INSERT INTO t VALUES (2, true, 'def')")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [0, 1, 2], what="the two inserts")
    _, before_alter, after_alter = (_after_and_types(r) for r in records(data_dir, "shop.public.t"))
    assert before_alter == ({"id": 1, "n": 1, "b": "YWJj"}, {"id": "int32", "n": "int32", "b": "bytes"})
    assert after_alter == ({"id": 2, "n": True, "b": "def"}, {"id": "int32", "n": "boolean", "b": "string"})


@pytest.mark.slow
def test_slot_drop_on_stop_drops_the_slot_at_a_graceful_stop(pg_db, data_dir):
    """slot.drop.on.stop=true (Debezium's tutorials' setting for throw-away setups): the slot goes at a graceful
    stop. klog accepted the key without a warning and kept the slot, and with it the server's WAL."""
    pg_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO a VALUES (1)")
    with running(data_dir, cdc(pg_db, **{"slot.drop.on.stop": "true"})):
        wait_for(lambda: _ids(data_dir, "shop.public.a") == [1], what="the snapshot")
        assert _slots(pg_db) == ["klog_review"]
    assert _slots(pg_db) == []
    with running(data_dir, cdc(pg_db)):  # without the key the slot stays, as before
        wait_for(lambda: _slots(pg_db) == ["klog_review"], what="the slot")
    assert _slots(pg_db) == ["klog_review"]


def _terminate_connector_backends(db) -> int:  # noqa: ANN001 - tests.connect.pg_server.Database
    """What a server restart or a failover does to the connector: each of its connections (the replication one
    and the query one) ended by the server."""
    return len(db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'klog-connect-pg' AND pid <> pg_backend_pid()"))


@pytest.mark.slow
def test_a_lost_connection_is_recovered_with_no_change_lost_or_repeated(pg_db, data_dir):
    """The server ends the connector's connections (a restart, a failover, an administrator): Debezium's task
    treats that as retriable and starts again after retriable.restart.connector.wait.ms. klog's task FAILED
    for good (`klog connect run` then exits 1) and the changes stopped until someone restarted it."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO t VALUES (0)")
    warnings: list[str] = []
    expected = [0]
    with running(data_dir, cdc(pg_db, **{"retriable.restart.connector.wait.ms": "200"}), warnings=warnings) as w:
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [0], what="the snapshot")
        for round_ in range(3):
            wait_for(lambda: _terminate_connector_backends(pg_db) == 2 or None, what="the connector's connections")
            base = 1 + round_ * 100
            pg_db.execute(f"INSERT INTO t SELECT generate_series({base}, {base + 49})")  # one transaction
            for i in range(base + 50, base + 60):
                pg_db.execute(f"INSERT INTO t VALUES ({i})")
            expected += list(range(base, base + 60))
            wait_for(lambda e=list(expected): _ids(data_dir, "shop.public.t") == e, what="the changes after it")
        # lost in the middle of a big transaction's stream: the rest of it comes, nothing twice
        pg_db.execute("INSERT INTO t SELECT generate_series(1000, 10999)")
        expected += list(range(1000, 11000))
        wait_for(lambda: len(records(data_dir, "shop.public.t")) > len(expected) - 9000, what="part of it")
        _terminate_connector_backends(pg_db)
        wait_for(lambda: len(records(data_dir, "shop.public.t")) >= len(expected), timeout=60, what="the rest")
        # (the rest may all have come before the connector saw the loss: its reconnect is waited for, not assumed)
        wait_for(lambda: sum("connected to PostgreSQL again" in m for m in warnings) >= 4, what="the 4th reconnect")
        assert w.describe_status("pg")["tasks"][0]["state"] == "RUNNING"
    assert _ids(data_dir, "shop.public.t") == expected  # each once, in commit order
    assert sum("the connection to PostgreSQL was lost" in m for m in warnings) >= 4
    assert sum("connected to PostgreSQL again" in m for m in warnings) >= 4


@pytest.mark.slow
def test_a_slot_still_held_by_the_lost_connections_walsender_is_asked_for_again(pg_db, data_dir):
    """Under load the server ends a terminated walsender late: the reconnect's START_REPLICATION found the slot
    "active for PID n" (55006), and the task FAILED for good (what made the test above flaky). Debezium asks
    again (slot.max.retries x slot.retry.delay.ms); so does klog, for up to a minute. Here the slot is held
    by a replication connection of the test's own for 2 s while the connector comes back."""
    import psycopg2
    import psycopg2.extras

    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO t VALUES (0)")
    warnings: list[str] = []
    with running(data_dir, cdc(pg_db, **{"retriable.restart.connector.wait.ms": "500"}), warnings=warnings) as w:
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [0], what="the snapshot")
        wait_for(lambda: _terminate_connector_backends(pg_db) == 2 or None, what="the connector's connections")
        wait_for(lambda: not pg_db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'klog_review' "
                                           "AND active"), what="the walsender's end")
        holder = psycopg2.connect(host=pg_db.host, port=pg_db.port, user=pg_db.user, dbname=pg_db.dbname,
                                  connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            holder.cursor().start_replication(slot_name="klog_review", decode=False,
                                              options={"proto_version": "1", "publication_names": "klog_review"})
            wait_for(lambda: any("replication slot 'klog_review' is in use" in m for m in warnings),
                     what="the connector finding the slot in use")
        finally:
            holder.close()
        pg_db.execute("INSERT INTO t VALUES (1)")
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [0, 1], what="the change after the slot was free")
        assert w.describe_status("pg")["tasks"][0]["state"] == "RUNNING"
    assert any('is active for PID' in m and 'asked again in 1 s' in m for m in warnings)


@pytest.mark.slow
def test_the_rest_apis_offsets_reset_and_rewind_reach_the_jdbc_sinks_own_offsets(tmp_path, data_dir):
    """KIP-875 on Confluent's JDBC sink, whose offsets are the group's: DELETE /connectors/{name}/offsets then
    resume writes every record again, a PATCH back to offset 3 the records from there. klog's JDBC sinks keep
    their offsets in the database too, and those won at the next start: both requests answered 200 and
    changed nothing."""
    import sqlite3

    import klog
    from klog.connect.rest import RestServer
    from klog.connect.worker import Worker
    from tests.connect.test_connect_rest import call

    key_schema = {"type": "struct", "fields": [{"field": "id", "type": "int32", "optional": False}], "optional": False}
    with klog.open(data_dir) as s, s.producer() as p:
        for i in range(5):
            p.send("rows", json.dumps({"schema": key_schema, "payload": {"id": i}}).encode())
    db = tmp_path / "out.db"


    store = klog.open(data_dir)
    worker = Worker(store, {"offset.flush.interval.ms": "200"})
    server = RestServer(worker, "127.0.0.1", 0).start()
    api = f"http://127.0.0.1:{server.port}"
    try:
        for name in ("confluent", "debezium"):
            table = f"rows_{name}"
            config = ({"connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "auto.create": "true"}
                      if name == "confluent" else {"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
                                                   "schema.evolution": "basic"})
            config.update({"topics": "rows", "connection.url": f"jdbc:sqlite:{db}", "table.name.format": table})
            assert call(api, "POST", "/connectors", {"name": name, "config": config})[0] == 201

            def rows(t: str = table) -> int:
                with sqlite3.connect(db) as c:
                    try:
                        return c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                    except sqlite3.OperationalError:  # not created yet
                        return -1

            wait_for(lambda: rows() == 5, what="the rows")
            assert call(api, "PUT", f"/connectors/{name}/stop")[0] == 202
            assert call(api, "DELETE", f"/connectors/{name}/offsets")[0] == 200
            assert call(api, "PUT", f"/connectors/{name}/resume")[0] == 202
            wait_for(lambda: rows() == 10, what="every record written again")
            assert call(api, "PUT", f"/connectors/{name}/stop")[0] == 202
            tp = {"kafka_topic": "rows", "kafka_partition": 0}
            assert call(api, "PATCH", f"/connectors/{name}/offsets",
                        {"offsets": [{"partition": tp, "offset": {"kafka_offset": 3}}]})[0] == 200
            assert call(api, "PUT", f"/connectors/{name}/resume")[0] == 202
            wait_for(lambda: rows() == 12, what="the records from offset 3 written again")
            wait_for(lambda n=name, tp=tp: call(api, "GET", f"/connectors/{n}/offsets")[1] == {
                "offsets": [{"partition": tp, "offset": {"kafka_offset": 5}}]}, what="the offsets")
    finally:
        server.close()
        worker.stop()
        store.close()


@pytest.mark.slow
def test_a_connector_paused_longer_than_wal_sender_timeout_streams_again_when_resumed(pg_db, data_dir):
    """While paused the task reads nothing, so it answers none of the walsender's keepalives, and the server
    ends the replication connection after wal_sender_timeout (60 s by default). klog's task then FAILED at
    resume (`error with status PGRES_COPY_BOTH and no message from the libpq`); now it connects again."""
    pg_db.execute(f'ALTER DATABASE "{pg_db.dbname}" SET wal_sender_timeout = \'500ms\'')
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_db.execute("INSERT INTO t VALUES (1)")
    with running(data_dir, cdc(pg_db, **{"retriable.restart.connector.wait.ms": "100"})) as w:
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [1], what="the snapshot")
        w.pause("pg")
        wait_for(lambda: w.describe_status("pg")["tasks"][0]["state"] == "PAUSED", what="the task paused")
        wait_for(lambda: not pg_db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'klog_review' "
                                           "AND active"), what="the server ending the replication connection")
        pg_db.execute("INSERT INTO t VALUES (2)")
        w.resume("pg")
        wait_for(lambda: _ids(data_dir, "shop.public.t") == [1, 2], what="the change made while paused")
        assert w.describe_status("pg")["tasks"][0]["state"] == "RUNNING"


@pytest.mark.slow
def test_an_unconstrained_numeric_reaches_the_confluent_sink_as_its_number(pg_server, pg_db, data_dir):
    """Debezium sends an unconstrained `numeric` (decimal.handling.mode=precise, its default) as a
    VariableScaleDecimal struct {scale, value}. Confluent's sink refuses a struct field; klog's wrote its JSON,
    `{"scale":1,"value":"Dw=="}`, into a text column: a number no one can read back. It is a NUMERIC now."""
    import decimal

    target = pg_server.database(pg_server.create_database("review_numeric_target"))
    try:
        pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, amount numeric)")
        pg_db.execute("INSERT INTO t VALUES (1, 1.5), (2, -12345678901234567890.123456789), (3, NULL)")
        sink = {"name": "sink", "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
                "topics": "shop.public.t", "connection.url": target.jdbc_url, "connection.user": target.user,
                "table.name.format": "t", "auto.create": "true", "insert.mode": "upsert", "pk.mode": "record_key",
                "transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}
        with running(data_dir, cdc(pg_db), sink):
            wait_for(lambda: target.execute("SELECT to_regclass('t')")[0][0] is not None
                     and target.execute("SELECT count(*) FROM t")[0][0] == 3, what="the rows")
        assert target.execute("SELECT id, amount FROM t ORDER BY id") == [
            (1, decimal.Decimal("1.5")), (2, decimal.Decimal("-12345678901234567890.123456789")), (3, None)]
        assert target.execute("SELECT data_type FROM information_schema.columns "
                              "WHERE table_name = 't' AND column_name = 'amount'") == [("numeric",)]
    finally:
        pg_server.drop_database(target.dbname)


def test_consumer_overrides_klogs_consumer_does_not_take_are_named_not_dropped(tmp_path):
    """consumer.override.max.poll.records (common in Confluent's sink tuning guides) or a misspelt key: klog's
    group consumer does not take them, and the worker dropped them without a word, though the docs promise
    every key klog ignores is named in the one warning."""
    from klog.connect.worker import ignored_warning, validate

    sink = {"name": "sink", "connector.class": "FileStreamSink", "topics": "in", "file": str(tmp_path / "out"),
            "consumer.override.max.poll.records": "100", "consumer.override.sesion.timeout.ms": "9000",
            "consumer.override.session.timeout.ms": "9000", "consumer.override.metadata.max.age.ms": "1000"}
    warning = ignored_warning(validate(sink))
    assert warning is not None
    assert "consumer.override.max.poll.records" in warning and "consumer.override.sesion.timeout.ms" in warning
    assert "consumer.override.session.timeout.ms" not in warning and "metadata.max.age.ms" not in warning


def test_a_dlq_topics_regex_matches_is_refused_as_kafka_refuses_it(tmp_path):
    """The sink would read back what it sends to its dead letter queue, now that topics.regex takes topics
    created after the start (Kafka's SinkConnectorConfig refuses the config)."""
    from klog.connect.errors import ConfigError
    from klog.connect.worker import validate

    sink = {"name": "sink", "connector.class": "FileStreamSink", "topics.regex": "shop\\..*",
            "file": str(tmp_path / "out"), "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "shop.dlq"}
    with pytest.raises(ConfigError, match="may not be included in the regex"):
        validate(sink)
    validate({**sink, "errors.deadletterqueue.topic.name": "dlq.shop"})

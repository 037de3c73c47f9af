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

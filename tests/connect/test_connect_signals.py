"""Debezium's signals on the PostgreSQL source (klog/connect/signals.py), against a real server: a row
inserted into signal.data.collection asks for a blocking snapshot of tables added to table.include.list."""

from __future__ import annotations

import json
import threading

import pytest

from klog.connect import signals
from klog.connect.connectors.postgres import PostgresTask
from tests.connect.helpers import records, running, wait_for
from tests.connect.test_connect_postgres import cdc

SIGNALS = "public.debezium_signal"


def _ops(data_dir: str, topic: str) -> list[tuple]:
    """(id, op, source.snapshot) of each record of the topic, tombstones left out."""
    out = []
    for r in records(data_dir, topic):
        if r.value is None:
            continue
        p = json.loads(r.value)["payload"]
        row = p["after"] or p["before"]
        out.append((row["id"], p["op"], p["source"]["snapshot"]))
    return out


def _setup(db) -> None:  # noqa: ANN001
    db.execute("CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
               "data varchar(2048))")
    db.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    db.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    db.execute("CREATE TABLE extra (id int PRIMARY KEY, name text)")
    db.execute("INSERT INTO extra VALUES (1, 'a'), (2, 'b'), (3, 'c')")


def _signal(db, signal_id: str, data: dict, kind: str = "execute-snapshot") -> None:  # noqa: ANN001
    db.execute("INSERT INTO debezium_signal VALUES (%s, %s, %s)", (signal_id, kind, json.dumps(data)))


def _slot_made(db) -> None:  # noqa: ANN001 - snapshot.mode=never captures what comes after the slot
    wait_for(lambda: db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'klog_slot'"),
             what="the replication slot")


def _config(db, tables: str, **extra: str) -> dict:  # noqa: ANN001
    return cdc(db, **{"table.include.list": f"{tables},{SIGNALS}", "signal.data.collection": SIGNALS,
                      "retriable.restart.connector.wait.ms": "0", **extra})


@pytest.fixture
def gated(monkeypatch):
    """A signalled snapshot stops after its first record until the test opens the gate."""
    gate = threading.Event()
    original = PostgresTask._signalled_snapshot

    def held(self, plan, resume, done):  # noqa: ANN001, ANN202
        rows = original(self, plan, resume, done)
        first = next(rows, None)
        if first is None:
            return
        yield first
        assert gate.wait(30), "the test never opened the gate"
        yield from rows

    monkeypatch.setattr(PostgresTask, "_signalled_snapshot", held)
    yield gate
    gate.set()


@pytest.mark.slow
def test_blocking_snapshot_of_an_added_table_then_streaming_resumes(pg_db, data_dir, gated):
    _setup(pg_db)
    with running(data_dir, _config(pg_db, "public.items")):
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 2, what="the initial snapshot")
    assert records(data_dir, "shop.public.extra") == []  # not captured yet
    warnings: list[str] = []
    # (one record a poll: the gate holds the snapshot after its first record is handed over)
    with running(data_dir, _config(pg_db, "public.items,public.extra", **{"max.batch.size": "1"}),
                 warnings=warnings):
        pg_db.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 3, what="streaming")
        assert records(data_dir, "shop.public.extra") == []  # added to the list: no snapshot without a signal
        _signal(pg_db, "s1", {"data-collections": ["public.extra"], "type": "blocking"})
        wait_for(lambda: len(records(data_dir, "shop.public.extra")) == 1, what="the snapshot's first record")
        # changes made while the snapshot is paused: streamed after it, none lost
        pg_db.execute("INSERT INTO extra VALUES (4, 'd')")
        pg_db.execute("UPDATE extra SET name = 'A' WHERE id = 1")
        pg_db.execute("DELETE FROM extra WHERE id = 3")
        pg_db.execute("INSERT INTO items VALUES (4, 'four')")
        gated.set()
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 6, what="the snapshot and the changes")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 4, what="the items change")
        # additional-conditions: only the rows the filter keeps
        _signal(pg_db, "s2", {"data-collections": ["public\\.ext.*"], "type": "blocking",
                              "additional-conditions": [{"data-collection": "public.extra", "filter": "id = 2"}]})
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 7, what="the filtered snapshot")
    ops = _ops(data_dir, "shop.public.extra")
    assert ops[:3] == [(1, "r", "first"), (2, "r", "true"), (3, "r", "last")]
    assert ops[3:] == [(4, "c", "false"), (1, "u", "false"), (3, "d", "false"), (2, "r", "last")]
    assert [i for i, op, _ in _ops(data_dir, "shop.public.items")] == [1, 2, 3, 4]
    assert any("blocking snapshot of public.extra" in w for w in warnings)
    # a restart goes on after the signals: neither snapshot is taken again
    pg_db.execute("INSERT INTO extra VALUES (5, 'e')")
    with running(data_dir, _config(pg_db, "public.items,public.extra")):
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 8, what="the change after the restart")
    assert _ops(data_dir, "shop.public.extra")[7:] == [(5, "c", "false")]


@pytest.mark.slow
def test_a_snapshot_cut_short_is_taken_again_from_its_beginning(pg_db, data_dir, monkeypatch):
    """The connection lost in the middle of a signalled snapshot: reconnected, the connector reads the signal
    again (its records' offsets are the signal's position less one) and takes the whole snapshot again."""
    from tests.connect.signal_snapshots import cut_signalled_snapshot, lost_connection  # (it imports this module)

    _setup(pg_db)
    cut_signalled_snapshot(monkeypatch, lost_connection())
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never", "max.batch.size": "1"})
    with running(data_dir, config, warnings=warnings):
        _slot_made(pg_db)
        pg_db.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 1, what="streaming")
        _signal(pg_db, "s1", {"data-collections": ["public.extra"], "type": "blocking"})
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 4, what="the snapshot taken again")
        pg_db.execute("INSERT INTO extra VALUES (4, 'd')")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 5, what="streaming after it")
    assert sum("connected to PostgreSQL again" in w for w in warnings) == 1
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (1, "r", "first"), (2, "r", "true"),
                                                   (3, "r", "last"), (4, "c", "false")]


@pytest.mark.slow
def test_signals_klog_does_not_take_are_named_and_ignored(pg_db, data_dir):
    _setup(pg_db)
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "signal.enabled.channels": "source,jmx"})
    with running(data_dir, config, warnings=warnings):
        _slot_made(pg_db)
        _signal(pg_db, "s1", {"data-collections": ["public.extra"], "type": "other"})
        _signal(pg_db, "s2", {"data-collections": ["public.extra"], "type": "blocking",
                              "additional-conditions": [{"data-collection": "public.extra", "filter": "nope = 1"}]})
        _signal(pg_db, "s3", {"data-collections": ["public.nothing"], "type": "blocking"})
        _signal(pg_db, "s4", {}, kind="schema-changes")
        pg_db.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 1, what="streaming past the signals")
        wait_for(lambda: any("'s3'" in w for w in warnings), what="the warnings")
    assert records(data_dir, "shop.public.extra") == []
    text = "\n".join(warnings)
    assert "signal.enabled.channels: jmx not implemented" in text
    assert "signal 's1': type 'other' is not implemented" in text
    assert "signal 's4': type 'schema-changes' is not implemented" in text
    assert "'s2': the additional condition of public.extra fails" in text
    assert "'s3': data-collections public.nothing name no table" in text
    assert len(records(data_dir, "shop.public.debezium_signal")) == 4  # captured like any table, as Debezium's


def test_signal_rows_are_read_as_debezium_reads_them():
    assert signals.parse(["a", "log", '{"message": "hi"}']) == ("a", "log", {"message": "hi"})
    assert signals.parse(["a", "x", None]) == ("a", "x", None)
    with pytest.raises(signals.SignalError, match="not JSON"):
        signals.parse(["a", "execute-snapshot", "{"])
    plan = signals.execute_snapshot("a", {"type": "BLOCKING", "data-collections": ["public.t.*"],
                                          "additional-condition": "id > 1"})
    assert plan.wants("db", "public", "t1") and not plan.wants("db", "other", "t1")
    assert plan.condition("db", "public", "t1") == "id > 1"
    with pytest.raises(signals.SignalError, match="data-collections"):
        signals.execute_snapshot("a", {"type": "blocking"})
    assert signals.signal_table("db.public.sig", "db") == ("public", "sig")
    with pytest.raises(signals.SignalError):
        signals.signal_table("sig", "db")


def _compacted(data_dir: str, topic: str) -> dict:
    """The topic as compaction leaves it: each key's last value (None for a tombstone's)."""
    out = {}
    for r in records(data_dir, topic):
        key = json.loads(r.key)["payload"]["id"]
        out[key] = json.loads(r.value)["payload"]["after"] if r.value else None
    return out


@pytest.mark.slow
def test_incremental_snapshot_the_streamed_change_wins_within_a_window(pg_db, data_dir, monkeypatch):
    """Chunks of incremental.snapshot.chunk.size by primary key between watermarks written to the signal table;
    rows changed while a chunk's window is open are dropped from it in favour of the streamed change."""
    from tests.connect.signal_snapshots import incremental_snapshot_ended  # (it imports this module)

    _setup(pg_db)
    pg_db.execute("INSERT INTO extra VALUES (4, 'd'), (5, 'e')")
    original, changed = PostgresTask._table_rows, []

    def change_in_window(self, snap, info, override):  # noqa: ANN001, ANN202
        rows = list(original(self, snap, info, override))
        if override is not None and override[0] == "incremental.snapshot.chunk" and not changed:
            changed.append(True)  # after the chunk's SELECT, before its close watermark
            pg_db.execute("UPDATE extra SET name = 'A' WHERE id = 1")
            pg_db.execute("DELETE FROM extra WHERE id = 2")
        yield from rows

    monkeypatch.setattr(PostgresTask, "_table_rows", change_in_window)
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "incremental.snapshot.chunk.size": "2"})
    with incremental_snapshot_ended(pg_db, data_dir, config, warnings):
        pg_db.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 1, what="streaming after it")
    ops = _ops(data_dir, "shop.public.extra")
    assert sorted(ops) == [(1, "u", "false"), (2, "d", "false"), (3, "r", "incremental"), (4, "r", "incremental"),
                           (5, "r", "incremental")]
    assert _compacted(data_dir, "shop.public.extra") == {1: {"id": 1, "name": "A"}, 2: None,
                                                         3: {"id": 3, "name": "c"}, 4: {"id": 4, "name": "d"},
                                                         5: {"id": 5, "name": "e"}}
    types = [json.loads(r.value)["payload"]["after"]["type"] for r in records(data_dir, "shop.public.debezium_signal")]
    assert types == ["execute-snapshot"] + ["snapshot-window-open", "snapshot-window-close"] * 3


@pytest.mark.slow
def test_incremental_snapshot_goes_on_after_a_restart(pg_db, data_dir, monkeypatch):
    """The snapshot's progress is in the connector's offsets: a worker stopped after the first chunk goes on
    with the next one when started again, each row sent once."""
    from tests.connect.signal_snapshots import held_after_first_chunk  # (it imports this module)

    _setup(pg_db)
    pg_db.execute("INSERT INTO extra VALUES (4, 'd'), (5, 'e')")
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "incremental.snapshot.chunk.size": "2"})
    with held_after_first_chunk(monkeypatch, pg_db, data_dir, config):
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 2, what="the first chunk")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "incremental"), (2, "r", "incremental")]
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the snapshot's end")
    assert _ops(data_dir, "shop.public.extra") == [(i, "r", "incremental") for i in range(1, 6)]


@pytest.mark.slow
def test_stop_snapshot_ends_an_incremental_snapshot(pg_db, data_dir, monkeypatch):
    from tests.connect.signal_snapshots import held_after_first_chunk  # (it imports this module)

    _setup(pg_db)
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "incremental.snapshot.chunk.size": "2"})
    with held_after_first_chunk(monkeypatch, pg_db, data_dir, config):
        _signal(pg_db, "i2", {"data-collections": ["public.extra"], "type": "incremental"}, kind="stop-snapshot")
        pg_db.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 1, what="streaming past the stop")
    with running(data_dir, config):  # started again: the stopped snapshot is not resumed
        pg_db.execute("INSERT INTO extra VALUES (4, 'd')")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 3, what="the change")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "incremental"), (2, "r", "incremental"),
                                                   (4, "c", "false")]

"""The review of Debezium's incremental snapshots on the PostgreSQL source (klog/connect/signals.py): what a
Debezium user would do to it, each checked as the user sees it (the topic, compacted, against the table)."""

from __future__ import annotations

import json

import pytest

from klog.connect.connectors.postgres import PostgresTask
from tests.connect.helpers import records, running, wait_for
from tests.connect.signal_snapshots import held_after_first_chunk, in_first_window, run_incremental_snapshot
from tests.connect.test_connect_signals import _compacted, _config, _ops, _setup, _signal, _slot_made


@pytest.mark.slow
def test_a_worker_stopped_in_the_middle_of_a_windows_rows_loses_none_of_them(pg_db, data_dir, monkeypatch):
    """The rows of a closed window went out with the offset of the chunk after it (the snapshot's progress
    moved past the whole chunk at its close watermark): a worker stopped (or killed) after the first of them
    was handed over went on with the next chunk, and the rest of the window was never sent."""
    _setup(pg_db)
    pg_db.execute("INSERT INTO extra VALUES (4, 'd'), (5, 'e')")
    original, calls = PostgresTask._window_rows, []

    def first_row_only(self, *args):  # noqa: ANN001, ANN202 - the worker dies after the window's first row
        calls.append(True)
        rows = original(self, *args)
        yield next(rows)

    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "incremental.snapshot.chunk.size": "3"})
    with monkeypatch.context() as m:
        m.setattr(PostgresTask, "_window_rows", first_row_only)
        with running(data_dir, config):
            _slot_made(pg_db)
            _signal(pg_db, "i1", {"data-collections": ["public.extra"], "type": "incremental"})
            wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 1, what="the window's first row")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "incremental")]
    warnings: list[str] = []
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the snapshot's end")
    assert {i for i, _, _ in _ops(data_dir, "shop.public.extra")} == {1, 2, 3, 4, 5}
    assert _compacted(data_dir, "shop.public.extra") == {i: {"id": i, "name": n} for i, n in
                                                         zip(range(1, 6), "abcde", strict=True)}


@pytest.mark.slow
def test_malformed_signals_are_each_one_warning_and_the_connector_goes_on(pg_db, data_dir, monkeypatch):
    """A stop-snapshot whose data-collections is not a regular expression raised re.error out of the task
    (FAILED); now each malformed signal is one warning naming it, and the snapshot and streaming go on. Two
    signals in one transaction are each acted on."""
    _setup(pg_db)
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "incremental.snapshot.chunk.size": "2"})
    with held_after_first_chunk(monkeypatch, pg_db, data_dir, config, warnings) as w:  # the snapshot stays running
        _signal(pg_db, "bad1", {"data-collections": ["public.("]}, kind="stop-snapshot")
        _signal(pg_db, "bad2", {"data-collections": "public.extra"}, kind="stop-snapshot")
        pg_db.execute("INSERT INTO debezium_signal VALUES ('bad3', 'execute-snapshot', '{not json')")
        pg_db.execute("BEGIN; INSERT INTO debezium_signal VALUES ('l1', 'log', '{\"message\": \"one\"}'); "
                      "INSERT INTO debezium_signal VALUES ('l2', 'log', '{\"message\": \"two\"}'); COMMIT")
        pg_db.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 1, what="streaming past the signals")
        assert w.describe_status("pg")["tasks"][0]["state"] == "RUNNING"
    for signal_id, what in (("bad1", "not a regular expression"), ("bad2", "data-collections is a list"),
                            ("bad3", "its data is not JSON")):
        named = [m for m in warnings if f"signal {signal_id!r}" in m]
        assert len(named) == 1 and what in named[0], (signal_id, named)
    assert any("'l1' (log): one" in m for m in warnings) and any("'l2' (log): two" in m for m in warnings)
    assert not any("incremental snapshot stopped" in m for m in warnings)


@pytest.mark.slow
def test_a_key_of_nullable_columns_has_every_row_read(pg_db, data_dir):
    """message.key.columns may name nullable columns: the chunks were bounded by row comparisons, which a NULL
    makes NULL, so the table's greatest key (NULLs sort last) was (NULL, ...) and no row at all was read, the
    snapshot said finished. Now every row is read, in PostgreSQL's ORDER BY (NULLS LAST), chunk after chunk."""
    _setup(pg_db)
    pg_db.execute("CREATE TABLE n (a int, b text, v text)")
    pg_db.execute("INSERT INTO n VALUES (1, 'x', 'one'), (NULL, 'y', 'two'), (3, NULL, 'three'), (4, 'z', 'four'), "
                  "(3, 'a', 'five'), (NULL, NULL, 'six'), (NULL, 'b', 'seven')")
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.n", **{"snapshot.mode": "never", "message.key.columns": "public.n:a,b",
                                                        "incremental.snapshot.chunk.size": "2"})
    run_incremental_snapshot(pg_db, data_dir, config, warnings, table="public.n")
    got = [json.loads(r.value)["payload"]["after"]["v"] for r in records(data_dir, "shop.public.n")]
    assert got == ["one", "five", "three", "four", "seven", "two", "six"]


@pytest.mark.slow
def test_a_table_truncated_in_a_window_has_none_of_the_chunks_rows_sent_after_it(pg_db, data_dir, monkeypatch):
    """A TRUNCATE streamed between a chunk's watermarks left the chunk's buffer whole: its rows were sent after
    the truncate (skipped by default, as Debezium's skipped.operations=t), rows the table no longer has."""
    _setup(pg_db)
    pg_db.execute("INSERT INTO extra VALUES (4, 'd'), (5, 'e')")

    def truncate_in_window() -> None:  # after the chunk's SELECT (committed), before its close watermark
        pg_db.execute("TRUNCATE extra")
        pg_db.execute("INSERT INTO extra VALUES (9, 'i')")

    in_first_window(monkeypatch, truncate_in_window)
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never",
                                                            "incremental.snapshot.chunk.size": "2"})
    run_incremental_snapshot(pg_db, data_dir, config, warnings)
    assert _ops(data_dir, "shop.public.extra") == [(9, "c", "false")]

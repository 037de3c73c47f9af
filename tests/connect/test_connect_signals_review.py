"""The review of Debezium's incremental snapshots on the PostgreSQL source (klog/connect/signals.py): what a
Debezium user would do to it, each checked as the user sees it (the topic, compacted, against the table)."""

from __future__ import annotations

import pytest

from klog.connect.connectors.postgres import PostgresTask
from tests.connect.helpers import running, wait_for
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

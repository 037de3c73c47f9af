"""The signalled snapshots of the PostgreSQL source as the signal tests (test_connect_signals*.py) drive them
(klog/connect/connectors/postgres.py): an incremental snapshot run to its end, and PostgresTask's steps
patched to fail once or to act between a chunk's SELECT and its close watermark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from klog.connect.connectors.postgres import PostgresTask
from tests.connect.helpers import running, wait_for
from tests.connect.test_connect_signals import _ops, _signal, _slot_made


@contextmanager
def incremental_snapshot_ended(db, data_dir: str, config: dict, warnings: list[str],  # noqa: ANN001
                               table: str = "public.extra") -> Iterator:
    """A worker running `config` (snapshot.mode=never) once the incremental snapshot of `table` a signal
    (id i1) asked for has ended; stopped on exit."""
    with running(data_dir, config, warnings=warnings) as worker:
        _slot_made(db)
        _signal(db, "i1", {"data-collections": [table], "type": "incremental"})
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the snapshot's end")
        yield worker


def run_incremental_snapshot(db, data_dir: str, config: dict, warnings: list[str],  # noqa: ANN001
                             table: str = "public.extra") -> None:
    """A worker running `config` until the incremental snapshot of `table` (signal i1) has ended."""
    with incremental_snapshot_ended(db, data_dir, config, warnings, table):
        pass


def lost_connection() -> Exception:
    """What psycopg2 raises when the server goes away under a query."""
    import psycopg2

    return psycopg2.OperationalError("server closed the connection unexpectedly")


def cut_signalled_snapshot(monkeypatch, error: Exception) -> list:  # noqa: ANN001
    """The first signalled (blocking) snapshot hands over its first row, then raises `error`; every one
    after it runs whole. The list of the snapshots started (one item each)."""
    original, started = PostgresTask._signalled_snapshot, []

    def first_row_then_error(self, plan, resume, done):  # noqa: ANN001, ANN202
        started.append(True)
        rows = original(self, plan, resume, done)
        if len(started) > 1:
            yield from rows
            return
        try:
            yield next(rows)
        finally:
            rows.close()
        raise error

    monkeypatch.setattr(PostgresTask, "_signalled_snapshot", first_row_then_error)
    return started


def in_first_window(monkeypatch, action: Callable[[], object]) -> None:  # noqa: ANN001
    """`action()` runs once, in the first incremental chunk's window: after its SELECT, before its close
    watermark."""
    original, done = PostgresTask._watermark, []

    def acting(self, chunk_id, kind):  # noqa: ANN001, ANN202
        if kind == "snapshot-window-close" and not done:
            done.append(True)
            action()
        original(self, chunk_id, kind)

    monkeypatch.setattr(PostgresTask, "_watermark", acting)


def paused_in_first_window(monkeypatch, db) -> None:  # noqa: ANN001
    """A pause-snapshot signal (id p1) inserted in the first chunk's window: the snapshot pauses after it."""
    in_first_window(monkeypatch, lambda: _signal(db, "p1", {}, kind="pause-snapshot"))


def cut_next_chunk_once(monkeypatch, when: Callable[[PostgresTask], bool]) -> list:  # noqa: ANN001
    """Once the returned list is ["armed"], the next chunk asked for while `when(task)` holds loses the
    connection (the list then ["armed", "cut"]); every other chunk is read as before."""
    original, cut = PostgresTask._next_chunk, []

    def cut_once(self):  # noqa: ANN001, ANN202
        if cut == ["armed"] and when(self):
            cut.append("cut")
            raise lost_connection()
        original(self)

    monkeypatch.setattr(PostgresTask, "_next_chunk", cut_once)
    return cut


@contextmanager
def paused_with_a_cut_armed(monkeypatch, db, data_dir: str, config: dict, warnings: list[str],  # noqa: ANN001
                            cut_when: Callable[[PostgresTask], bool]) -> Iterator[list]:
    """public.extra given 5 rows; a worker running `config` (incremental.snapshot.chunk.size 2) whose
    incremental snapshot of it (signal i1) paused after its first chunk (pause-snapshot p1 in that
    chunk's window); from then on the next chunk asked for while `cut_when(task)` holds loses the
    connection, once. Yields the list that says so: ["armed"], then ["armed", "cut"]."""
    db.execute("INSERT INTO extra VALUES (4, 'd'), (5, 'e')")
    paused_in_first_window(monkeypatch, db)
    cut = cut_next_chunk_once(monkeypatch, cut_when)
    with running(data_dir, config, warnings=warnings):
        _slot_made(db)
        _signal(db, "i1", {"data-collections": ["public.extra"], "type": "incremental"})
        wait_for(lambda: any("incremental snapshot 'i1' paused" in w for w in warnings), what="the pause")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 2, what="the first chunk")
        cut.append("armed")
        yield cut


def first_chunk_only(monkeypatch) -> list:  # noqa: ANN001
    """An incremental snapshot reads its first chunk only: PostgresTask._next_chunk does nothing after its
    first call (the snapshot stays running). The list of its calls (one item each)."""
    original, calls = PostgresTask._next_chunk, []

    def first_only(self):  # noqa: ANN001, ANN202
        calls.append(True)
        if len(calls) == 1:
            original(self)

    monkeypatch.setattr(PostgresTask, "_next_chunk", first_only)
    return calls


@contextmanager
def held_after_first_chunk(monkeypatch, db, data_dir: str, config: dict,  # noqa: ANN001
                           warnings: list[str] | None = None) -> Iterator:
    """A worker running `config` (snapshot.mode=never) whose incremental snapshot of public.extra (signal i1)
    read its first chunk and asked for the next, which never comes (first_chunk_only while the worker
    runs); stopped on exit."""
    with monkeypatch.context() as m:
        calls = first_chunk_only(m)
        with running(data_dir, config, warnings=warnings) as worker:
            _slot_made(db)
            _signal(db, "i1", {"data-collections": ["public.extra"], "type": "incremental"})
            wait_for(lambda: len(calls) == 2, what="the next chunk asked for")
            yield worker

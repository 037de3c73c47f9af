"""An empty partition (no state file, no folder yet) is read at the cost of one look at the state
folder, shared by every partition of a read_ranges call: no state file opened, no folder listed
(a served Fetch of 20,000 of them listed 20,000 folders). And it is still read as it is: records
another writer appends, a state file lost under data, are seen at the next read."""

from __future__ import annotations

import os
import time

import pytest

import klog
from klog.errors import StateLostError
from klog.store import log as store_log
from klog.store import state as store_state
from klog.store import topic_read
from klog.store.topic_read import RangeRead, read_ranges

N = 50


def _age(path: str) -> None:
    """The folder's mtime 10 s back: as a store's state folder is once nothing was created lately."""
    old = time.time_ns() - 10_000_000_000
    os.utime(path, ns=(old, old))


def _read(parts: list) -> list[RangeRead]:
    reads = [RangeRead(p, 0, 1 << 20) for p in parts]
    read_ranges(reads, 64 << 20, 1 << 16, 1 << 20)
    return reads


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"listdir": 0, "open": 0}
    listdir, open_ = os.listdir, store_state.open_nofollow

    def counted_listdir(path: str = ".") -> list[str]:
        counts["listdir"] += 1
        return listdir(path)

    def counted_open(*args: object, **kw: object) -> int:
        counts["open"] += 1
        return open_(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store_log.os, "listdir", counted_listdir)
    monkeypatch.setattr(store_state, "open_nofollow", counted_open)
    return counts


def test_empty_partitions_read_without_listing_or_opening(tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("wide", partitions=N)
        _age(os.path.join(data, "state"))
        parts = [store.partition("wide", p) for p in range(N)]
        first = _read(parts)  # (the first read looks: nothing there)
        assert [(r.high_watermark, r.log_start_offset, r.failure) for r in first] == [(0, 0, None)] * N
        counts = _counting(monkeypatch)
        for _ in range(3):
            again = _read(parts)
            assert [(r.high_watermark, r.log_start_offset, r.failure) for r in again] == [(0, 0, None)] * N
            assert [p.reader_snapshot().high_watermark for p in parts] == [0] * N
        assert counts == {"listdir": 0, "open": 0}
        if topic_read.NOWAIT:  # (a server's event loop: answered there, not sent to a thread as WouldBlock)
            reads = [RangeRead(p, 0, 1 << 20) for p in parts]
            read_ranges(reads, 64 << 20, 1 << 16, 1 << 20, nowait=True)
            assert [(r.high_watermark, r.log_start_offset, r.data) for r in reads] == [(0, 0, None)] * N


def test_records_another_writer_appends_are_seen(tmp_path):
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("wide", partitions=N)
        _age(os.path.join(data, "state"))
        parts = [store.partition("wide", p) for p in range(N)]
        _read(parts)
        _read(parts)
        with klog.open(data) as other, other.producer() as producer:  # (another store: as another process)
            producer.send_values("wide", [b"a", b"b"], partition=7)
        reads = _read(parts)
        assert reads[7].high_watermark == 2 and reads[7].data
        assert [r.high_watermark for i, r in enumerate(reads) if i != 7] == [0] * (N - 1)
        assert parts[7].reader_snapshot().high_watermark == 2


def test_a_state_file_lost_under_data_is_still_an_error(tmp_path):
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("wide", partitions=2)
        _age(os.path.join(data, "state"))
        parts = [store.partition("wide", p) for p in range(2)]
        _read(parts)
        with klog.open(data) as other:
            with other.producer() as producer:
                producer.send_values("wide", [b"a"], partition=1)
            state_path = other.partition("wide", 1).state.path
        os.unlink(state_path)
        reads = _read(parts)
        assert isinstance(reads[1].failure, StateLostError)
        with pytest.raises(StateLostError):
            parts[1].reader_snapshot()

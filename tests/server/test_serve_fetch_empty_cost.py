"""A Fetch naming many empty partitions (nothing ever produced: no state file, no folder) lists no
folder for them: each used to list its partition's folder on every Fetch (~75 us each: 1.6 s of the
thread pool for 20,000). And what another process does to them is still seen at the next Fetch:
records appended, the topic deleted and created again holding records."""

from __future__ import annotations

import datetime
import os
import time

import pytest

import klog
from klog.server import Server
from klog.store import log as store_log
from tests.serve_helpers import RawClient, fetch_fields

pytest.importorskip("kio")
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

N = 200


def _age_state_folder(data_dir: str) -> None:
    old = time.time_ns() - 10_000_000_000  # (as it is once no topic was created lately)
    os.utime(os.path.join(data_dir, "state"), ns=(old, old))


def _fetch(client: RawClient, n: int = N) -> dict[int, tuple[int, int, bytes]]:
    fields = fetch_fields("wide", 0, 0)
    fields["max_wait"] = i32Timedelta.parse(datetime.timedelta(0))
    fields["topics"] = (FetchTopic(topic="wide", partitions=tuple(
        FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                       log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(n))),)
    answer = client.send(1, 12, **fields)
    return {int(p.partition_index): (int(p.error_code), int(p.high_watermark), bytes(p.records or b""))
            for p in answer.responses[0].partitions}


@pytest.mark.slow
def test_a_fetch_of_many_empty_partitions_lists_no_folder(data_dir, monkeypatch):
    with klog.open(data_dir) as store:
        store.create_topic("wide", partitions=N)
    _age_state_folder(data_dir)
    listings = []
    listdir = os.listdir
    monkeypatch.setattr(store_log.os, "listdir", lambda path=".": listings.append(path) or listdir(path))
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as client:
        assert _fetch(client) == {p: (0, 0, b"") for p in range(N)}
        listings.clear()
        for _ in range(3):
            assert _fetch(client) == {p: (0, 0, b"") for p in range(N)}
        assert [path for path in listings if "wide-" in path] == []


@pytest.mark.parametrize("n", [N, 12])  # (12: answered on the event loop, without waiting for the disk)
def test_another_process_appending_or_recreating_is_seen(data_dir, n):
    with klog.open(data_dir) as store:
        store.create_topic("wide", partitions=n)
    _age_state_folder(data_dir)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as client:
        _fetch(client, n)
        assert _fetch(client, n)[5] == (0, 0, b"")
        with klog.open(data_dir) as other, other.producer() as producer:  # (another store: as a shell's produce)
            producer.send_values("wide", [b"five"], partition=5)
        got = _fetch(client, n)
        assert got[5][:2] == (0, 1) and b"five" in got[5][2]
        assert all(got[p] == (0, 0, b"") for p in range(n) if p != 5)
        _age_state_folder(data_dir)
        _fetch(client, n)
        with klog.open(data_dir) as other:
            other.delete_topic("wide")
            other.create_topic("wide", partitions=n)
            with other.producer() as producer:
                producer.send_values("wide", [b"again"], partition=9)
        deadline = time.monotonic() + 10
        while True:  # (the server sees the topic re-created at its next metadata check)
            got = _fetch(client, n)
            if got[9][1] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got[9][:2] == (0, 1) and b"again" in got[9][2]
        assert got[5] == (0, 0, b"")

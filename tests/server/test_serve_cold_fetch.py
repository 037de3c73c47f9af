"""A fetch of bytes not in the page cache must not stall everyone: the worker thread reads a cold
range in before the event loop sendfiles it (klog/server/pagecache.py), so a slow or stalled disk
holds that one fetch while other clients' Metadata and Fetch are answered."""

from __future__ import annotations

import os
import threading

import pytest

from klog.server import fetch as fetch_module
from klog.server import pagecache
from tests.serve_helpers import RawClient, another_client_answered, batch, fetch_fields, produce

STALL_LIMIT_S = 30  # the simulated disk answers again after this at the latest


def test_a_range_dropped_from_the_page_cache_is_seen_cold_and_read_back_in(tmp_path):
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(4 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if pagecache.is_cached(fd, 1 << 20, 2 << 20):
            pytest.skip("this kernel or filesystem kept the pages (or cannot say: no RWF_NOWAIT)")

        class Range:
            position, length = 1 << 20, 2 << 20

        Range.fd = fd
        assert pagecache.ensure_cached(Range) is True
        assert pagecache.is_cached(fd, 1 << 20, 2 << 20)
        assert pagecache.ensure_cached(Range) is False  # now warm: nothing read
    finally:
        os.close(fd)


def test_a_fetch_stuck_on_the_disk_leaves_other_clients_answered(kafka_server, store, monkeypatch):
    store.create_topic("stuck")
    store.create_topic("free")
    port = kafka_server.port
    with RawClient(port) as client:
        assert produce(client, "stuck", 0, batch([b"cold"]))[0] == 0
        assert produce(client, "free", 0, batch([b"warm"]))[0] == 0
    release = threading.Event()
    entered = threading.Event()
    real = pagecache.ensure_cached

    def stalled_disk(byte_range) -> bool:  # noqa: ANN001 - a ByteRange
        # the partition "stuck" is cold and its disk stopped answering (its folder: the test path has "stuck" too)
        if f"{os.sep}stuck-0{os.sep}" in byte_range.path:
            entered.set()
            release.wait(STALL_LIMIT_S)
            return True
        return real(byte_range)

    monkeypatch.setattr(fetch_module.pagecache, "ensure_cached", stalled_disk)
    # ranges go by sendfile (the path that needs the check): a small range read inline is read by
    # the worker thread itself, where a stalled disk holds only that fetch anyway
    monkeypatch.setattr(fetch_module, "INLINE_RANGE_BYTES", 0)
    answers = []

    def stuck_fetch() -> None:
        with RawClient(port) as c:
            c.sock.settimeout(STALL_LIMIT_S + 10)
            answers.append(c.send(1, 12, **fetch_fields("stuck", 0, 0)))

    thread = threading.Thread(target=stuck_fetch)
    thread.start()
    try:
        assert entered.wait(10), "the fetch never reached the disk"
        meta, fetched, took = another_client_answered(port)
        assert {str(t.name) for t in meta.topics} >= {"stuck", "free"}
        part = fetched.responses[0].partitions[0]
        assert int(part.error_code) == 0 and b"warm" in bytes(part.records)
        assert took < 3.0, f"Metadata and Fetch took {took:.1f} s while a fetch waited for the disk"
        assert not answers  # the cold fetch is still waiting
    finally:
        release.set()
        thread.join(STALL_LIMIT_S + 15)
    [answer] = answers
    part = answer.responses[0].partitions[0]
    assert int(part.error_code) == 0 and b"cold" in bytes(part.records)  # answered once the disk is back

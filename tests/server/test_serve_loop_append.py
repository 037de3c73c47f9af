"""A produce of one plain batch into a partition the server already writes is appended on the
event loop, its fsync made through io_uring (no thread hop); its offsets, its records, its
producer's sequence checks and its errors are what the append threads give, and whatever could
make the loop wait goes to those threads as before."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from klog.broker import batches
from klog.server import loop_fsync
from klog.store import codec, uring
from klog.store.locks import FileLock
from tests.serve_helpers import RawClient, batch, produce, produce_request_fields


def _has_io_uring() -> bool:
    ring = uring.Ring.open(4)
    if ring is None:
        return False
    ring.close()
    return True


pytestmark = pytest.mark.skipif(not _has_io_uring(), reason="no io_uring on this kernel (or forbidden): "
                                "every append takes the append threads")


@pytest.fixture
def begun(kafka_server, monkeypatch):
    """What each append_begin said, in order: 'loop' (appended, waiting for its fsync), 'done' (a
    duplicate's answer), 'refused' (it raised the batch's error) or 'thread' (None: the append
    threads do it). (A topic's metadata is
    re-read every 5 s, that append by a thread: pushed out of the test's way.)"""
    monkeypatch.setattr(batches, "TOPIC_REFRESH_S", 3600.0)
    seen: list[str] = []
    real = batches.RawAppender.append_begin

    def recording(self, *args):  # noqa: ANN001
        try:
            got = real(self, *args)
        except Exception:
            seen.append("refused")
            raise
        seen.append("thread" if got is None else "done" if isinstance(got, batches.RawAppendResult) else "loop")
        return got

    monkeypatch.setattr(batches.RawAppender, "append_begin", recording)
    return seen


def _values(store, topic: str) -> list[bytes]:  # noqa: ANN001
    store.forget_topic(topic)
    part = store.partition(topic, 0)
    return [v for b in part.read(0, max_bytes=1 << 24) for v in codec.decode_batch_values(b.data, 0, b.header)]


def test_plain_batches_are_appended_on_the_loop_and_read_back(kafka_server, store, begun):
    store.create_topic("t")
    with RawClient(kafka_server.port) as client:
        got = [produce(client, "t", 0, batch([b"v%d-%d" % (i, j) for j in range(i + 1)])) for i in range(5)]
    assert got == [(0, 0), (0, 1), (0, 3), (0, 6), (0, 10)]
    assert begun == ["thread", "loop", "loop", "loop", "loop"]  # (the first opens the partition: a thread's)
    assert _values(store, "t") == [b"v%d-%d" % (i, j) for i in range(5) for j in range(i + 1)]
    assert store.partition("t", 0).snapshot().high_watermark == 15


def test_an_idempotent_producer_is_checked_on_the_loop_as_in_the_threads(kafka_server, store, begun):
    store.create_topic("t")
    pid = 4242
    with RawClient(kafka_server.port) as client:
        first = batch([b"a"], producer_id=pid, epoch=0, sequence=0)
        assert produce(client, "t", 0, first) == (0, 0)  # (its states built from the log: a thread's)
        second = batch([b"b", b"c"], producer_id=pid, epoch=0, sequence=1)
        assert produce(client, "t", 0, second) == (0, 1)
        assert produce(client, "t", 0, second) == (0, 1)  # a retry: its first offset, not written twice
        gap = batch([b"x"], producer_id=pid, epoch=0, sequence=7)
        assert produce(client, "t", 0, gap)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(client, "t", 0, batch([b"d"], producer_id=pid, epoch=0, sequence=3)) == (0, 3)
    assert begun == ["thread", "loop", "done", "refused", "loop"]
    assert _values(store, "t") == [b"a", b"b", b"c", b"d"]


def test_what_could_wait_goes_to_the_append_threads(kafka_server, store, begun):
    store.create_topic("t")
    store.create_topic("lazy", configs={"flush.messages": "100"})  # (unsynced appends: dirty pages)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"warm"]))[0] == 0
        assert produce(client, "lazy", 0, batch([b"warm"]))[0] == 0
        begun.clear()
        gzipped = codec.encode_batch([(None, b"zipped", [], int(time.time() * 1000))], 0, codec=1)
        assert produce(client, "t", 0, gzipped) == (0, 1)
        assert produce(client, "lazy", 0, batch([b"lazy"])) == (0, 1)
        big = batch([b"x" * (batches.LOOP_APPEND_BYTES_MAX + 1)])
        assert produce(client, "t", 0, big) == (0, 2)
        assert begun == ["thread", "thread", "thread"]
        # the partition's file lock held by another writer (another process's klog produce: a
        # second open file of the lock, as another process has): the thread waits for it, the
        # loop never does
        other = FileLock(store.partition("t", 0).lock.path)
        other.acquire()
        answer: list = []
        sender = threading.Thread(target=lambda: answer.append(produce(client, "t", 0, batch([b"after"]))))
        sender.start()
        time.sleep(0.3)
        assert not answer  # still waiting, in a thread
        with RawClient(kafka_server.port) as another:  # the loop answers everyone else meanwhile
            assert produce(another, "lazy", 0, batch([b"meanwhile"])) == (0, 2)
        other.release()
        other.close()
        sender.join(10)
        assert answer == [(0, 3)]
    assert begun[-2:] == ["thread", "thread"]
    assert _values(store, "t") == [b"warm", b"zipped", b"x" * (batches.LOOP_APPEND_BYTES_MAX + 1), b"after"]


def test_without_io_uring_every_append_takes_a_thread(data_dir, monkeypatch):
    from klog.client.store import Store
    from klog.server import Server

    monkeypatch.setenv(loop_fsync.DISABLE_ENV, "1")
    Store(data_dir).create_topic("t")
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert not server.loop_fsync.available
        assert [produce(client, "t", 0, batch([b"%d" % i])) for i in range(3)] == [(0, 0), (0, 1), (0, 2)]


def test_a_failed_fsync_acknowledges_nothing_and_the_next_append_goes_on(kafka_server, store, begun, monkeypatch):
    store.create_topic("t")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"one"])) == (0, 0)
        real = uring.Ring.completions
        monkeypatch.setattr(uring.Ring, "completions", lambda self: [(t, -5) for t, _ in real(self)])  # EIO
        assert produce(client, "t", 0, batch([b"two"]))[0] == 56  # KAFKA_STORAGE_ERROR
        monkeypatch.setattr(uring.Ring, "completions", real)
        code, offset = produce(client, "t", 0, batch([b"three"]))
    assert begun[:2] == ["thread", "loop"]
    assert code == 0
    # "two" was never acknowledged; whether the next writer kept it (its bytes were written) or
    # not, "three" follows what is there and nothing acknowledged is missing
    values = _values(store, "t")
    assert values[0] == b"one" and values[-1] == b"three" and offset == len(values) - 1


def test_a_producer_gone_during_its_fsync_leaves_the_partition_published_and_unlocked(kafka_server, store, begun,
                                                                                       monkeypatch):
    store.create_topic("t")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"one"])) == (0, 0)
    real = loop_fsync.LoopFsync.sync_then

    def late(self, fds, then):  # noqa: ANN001 - the fsync's answer comes 0.3 s late
        self.loop.call_later(0.3, real, self, fds, then)

    monkeypatch.setattr(loop_fsync.LoopFsync, "sync_then", late)
    import io

    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    from klog.protocol.kafka import make
    from tests.serve_helpers import request_class

    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1,
                                                    client_id="gone"))
    entity_writer(request_class(0, 9))(buf, make(request_class(0, 9),
                                                 **produce_request_fields(9, "t", 0, batch([b"two"]))))
    gone = socket.create_connection(("127.0.0.1", kafka_server.port))
    gone.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
    time.sleep(0.1)
    gone.close()  # before its answer
    monkeypatch.setattr(loop_fsync.LoopFsync, "sync_then", real)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"three"])) == (0, 2)
    assert begun[:2] == ["thread", "loop"]
    assert _values(store, "t") == [b"one", b"two", b"three"]


def test_segments_rolled_on_the_loop_are_trimmed_by_retention(kafka_server, store, begun):
    store.create_topic("t", configs={"segment.bytes": "600", "retention.bytes": "1200"})
    with RawClient(kafka_server.port) as client:
        for i in range(40):
            assert produce(client, "t", 0, batch([b"%03d" % i + b"x" * 200]))[0] == 0
    assert begun.count("loop") >= 15  # (after each roll, retention holds the lock a moment: a thread appends)
    folder = store.partition("t", 0).leader.directory
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # (retention after a roll runs in an append thread)
        logs = [n for n in os.listdir(folder) if n.endswith(".log")]
        if len(logs) <= 5:
            break
        time.sleep(0.05)
    assert len(logs) <= 5, logs  # 40 batches of ~270 bytes: ~20 segments without retention
    assert _values(store, "t")[-1].startswith(b"039")


def test_the_loop_never_waits_on_the_appenders_guard(kafka_server, store, begun):
    """check_topic holds the appender's guard while it closes a deleted topic's partitions, which
    waits for their writers; a writer whose fsync is in flight finishes on the loop, so the loop
    must never wait on that guard (it would wait forever)."""
    store.create_topic("t")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"warm"])) == (0, 0)
        assert produce(client, "t", 0, batch([b"loop"])) == (0, 1)
        with kafka_server.appender._guard:  # held here, as check_topic holds it
            client.sock.settimeout(5)
            assert produce(client, "t", 0, batch([b"meanwhile"])) == (0, 2)
    assert begun[-1] == "loop"

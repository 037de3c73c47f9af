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


@pytest.mark.parametrize("evicted", [False, True])
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_topic_created_again_between_the_check_and_the_lock_gets_the_batch(data_dir, monkeypatch, path, evicted):
    """Another process deletes the topic, creates it again and writes to it just after this
    server's append checked the topic and before it takes the partition's lock. The new lock
    file's count must not be one the server's lock wrote in the old file (each used to start at 1),
    whether the server still held the old file open or had closed it (`evicted`: the writer's
    least recently written partition): that read as "nobody held the lock since", and the batch
    went to the deleted files (acknowledged and lost) or was acknowledged with the new topic's
    high watermark left below it (invisible to consumers)."""
    import klog
    from klog.server import Server

    if path == "thread":
        monkeypatch.setenv(loop_fsync.DISABLE_ENV, "1")
    monkeypatch.setattr(batches, "TOPIC_REFRESH_S", 3600.0)
    with klog.open(data_dir) as first:
        first.create_topic("t")
        first.create_topic("u")
    armed: list[int] = []
    # the loop path checks the topic, then tries the locks; the threads' checks the topic, then wait for them
    name = "_lock_taken_now" if path == "loop" else "lock_for"
    real = getattr(batches.RawAppender, name)

    def in_the_window(self, topic, partition):  # noqa: ANN001
        if armed:
            armed.clear()
            with klog.open(data_dir) as other:
                other.delete_topic("t")
                other.create_topic("t")
                with other.producer() as producer:
                    producer.send("t", b"new", partition=0)
        return real(self, topic, partition)

    monkeypatch.setattr(batches.RawAppender, name, in_the_window)
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        if evicted:
            server.appender.writer.open_max = 1
        assert [produce(client, "t", 0, batch([b"old-%d" % i])) for i in range(2)] == [(0, 0), (0, 1)]
        if evicted:  # t-0's files closed, its lock file too (it stays open in the store)
            assert produce(client, "u", 0, batch([b"u"])) == (0, 0)
            assert server.store.opened_partitions()[("t", 0)].lock._fd is None
        armed.append(1)
        code, offset = produce(client, "t", 0, batch([b"racer"]))
        with klog.open(data_dir) as reader:  # acknowledged: a consumer sees it at once
            assert code == 0 and reader.partition("t", 0).reader_snapshot().high_watermark == offset + 1
    with klog.open(data_dir) as reader:
        values = _values(reader, "t")
    assert values[offset] == b"racer"
    assert values == [b"new", b"racer"]


def test_an_fsync_the_ring_refuses_is_made_in_a_thread(kafka_server, store, begun, monkeypatch):
    """io_uring_enter refusing the submission (EAGAIN, EBUSY, ENOMEM...) says nothing about the
    batch, already written: a thread fsyncs it and it is acknowledged (it used to be refused with
    KAFKA_STORAGE_ERROR, and every append after it as long as the ring refused)."""
    import errno

    store.create_topic("t")
    flushed: list[int] = []
    real_flush = batches.PendingAppend.flush
    monkeypatch.setattr(batches.PendingAppend, "flush", lambda self: flushed.append(1) or real_flush(self))
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"one"])) == (0, 0)
        real = uring.Ring.fsync

        def refused(self, fd, token):  # noqa: ANN001
            raise OSError(errno.EAGAIN, "io_uring_enter: try again")

        monkeypatch.setattr(uring.Ring, "fsync", refused)
        assert produce(client, "t", 0, batch([b"two"])) == (0, 1)
        assert flushed == [1]
        monkeypatch.setattr(uring.Ring, "fsync", real)
        assert produce(client, "t", 0, batch([b"three"])) == (0, 2)
    assert begun == ["thread", "loop", "loop"] and flushed == [1]
    assert _values(store, "t") == [b"one", b"two", b"three"]


def test_a_thread_flush_that_raises_anything_still_unlocks_and_answers(kafka_server, store, begun, monkeypatch):
    """Whatever the thread's flush of a batch appended on the loop raises, the completion runs:
    the producer is answered and the partition's locks (held by the loop since the append) go;
    an unexpected error left the request unanswered and the partition locked for good."""
    from klog.broker import replication

    store.create_topic("t")
    with RawClient(kafka_server.port) as client:
        client.sock.settimeout(5)
        assert produce(client, "t", 0, batch([b"one"])) == (0, 0)
        fsyncs, flush = replication.SyncAfter.fsyncs, replication.SyncAfter.flush
        monkeypatch.setattr(replication.SyncAfter, "fsyncs", lambda self: None)  # (the thread's flush)

        def broken(self):  # noqa: ANN001
            raise ValueError("not an OSError")

        monkeypatch.setattr(replication.SyncAfter, "flush", broken)
        assert produce(client, "t", 0, batch([b"two"]))[0] == 56  # KAFKA_STORAGE_ERROR
        monkeypatch.setattr(replication.SyncAfter, "fsyncs", fsyncs)
        monkeypatch.setattr(replication.SyncAfter, "flush", flush)
        code, offset = produce(client, "t", 0, batch([b"three"]))
    assert begun[:2] == ["thread", "loop"] and code == 0
    values = _values(store, "t")  # ("two" was never acknowledged: kept or not, "three" follows)
    assert values[0] == b"one" and values[offset] == b"three"


def test_a_server_stopped_during_an_fsync_answers_it_and_leaves_the_partition_unlocked(data_dir, monkeypatch):
    """Stopping lets the append whose fsync is in flight finish: its producer is answered, the
    batch is published, and the partition's lock is free for the next writer (another process)."""
    import klog
    from klog.server import Server

    monkeypatch.setattr(batches, "TOPIC_REFRESH_S", 3600.0)
    with klog.open(data_dir) as first:
        first.create_topic("t")
    real = loop_fsync.LoopFsync.sync_then
    submitted: list[int] = []

    def late(self, fds, then):  # noqa: ANN001 - the fsync handed to the kernel 0.3 s late
        def submit() -> None:
            submitted.append(len(fds))
            real(self, fds, then)

        self.loop.call_later(0.3, submit)

    answer: list = []
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert produce(client, "t", 0, batch([b"one"])) == (0, 0)
        monkeypatch.setattr(loop_fsync.LoopFsync, "sync_then", late)
        sender = threading.Thread(target=lambda: answer.append(produce(client, "t", 0, batch([b"two"]))))
        sender.start()
        time.sleep(0.1)  # (its fsync waiting)
        server.close()
        sender.join(10)
    assert submitted == [1] and answer == [(0, 1)]
    with klog.open(data_dir) as other:  # another writer: the lock is free, the batch published
        with other.producer() as producer:
            producer.send("t", b"three", partition=0)
        assert _values(other, "t") == [b"one", b"two", b"three"]


def test_a_flush_the_ring_cannot_make_never_waits_behind_append_threads_waiting_for_its_lock(data_dir, monkeypatch):
    """A batch appended on the loop whose flush takes a thread (a roll's: the sealed segment and
    the folder too) holds the partition's locks until that flush is done. The append threads may
    all be waiting for those locks meanwhile (retention after the previous roll, 8 of them with 8
    partitions rolling at once): a flush queued behind them never ran, and every append of the
    server waited for good. Here one append thread, taken by such a wait."""
    import klog
    from klog.broker import replication
    from klog.server import Server

    monkeypatch.setattr(batches, "TOPIC_REFRESH_S", 3600.0)
    with klog.open(data_dir) as first:
        first.create_topic("t")
    real = Server._flush_in_thread
    waiters: list[threading.Event] = []

    async def behind_a_waiter(self, pending, fut):  # noqa: ANN001
        if not waiters:  # (once: the next batch's flush finds the thread free again)
            waiters.append(threading.Event())

            def wait_for_the_lock() -> None:  # (as retention after a roll does)
                waiters[0].set()
                with pending.part.lock:
                    pass

            self.append_executor.submit(wait_for_the_lock)
            waiters[0].wait(5)  # the only append thread now waits for the lock the loop holds
        await real(self, pending, fut)

    with Server(data_dir, listen=("127.0.0.1", 0), workers=1) as server, RawClient(server.port) as client:
        client.sock.settimeout(5)
        assert produce(client, "t", 0, batch([b"one"])) == (0, 0)
        monkeypatch.setattr(replication.SyncAfter, "fsyncs", lambda self: None)  # (a flush for a thread)
        monkeypatch.setattr(Server, "_flush_in_thread", behind_a_waiter)
        assert produce(client, "t", 0, batch([b"two"])) == (0, 1)
        assert produce(client, "t", 0, batch([b"three"])) == (0, 2)
    assert waiters and waiters[0].is_set()
    with klog.open(data_dir) as reader:
        assert _values(reader, "t") == [b"one", b"two", b"three"]


def test_every_batch_answered_from_the_loop_was_fsynced_first(kafka_server, store, begun, monkeypatch):
    """What a power cut needs (kill -9 keeps the page cache, so only this says it): when a batch
    appended on the loop is published and answered, an fsync of its log file that began after the
    batch was written has completed (through the ring, or in a thread after a roll)."""
    from klog.server import Server

    synced: dict[tuple[int, int], int] = {}  # (device, inode) -> bytes an fsync that completed covered
    submitted: dict[int, tuple[tuple[int, int], int]] = {}
    checked: list[bool] = []

    def covered(fd: int) -> tuple[tuple[int, int], int]:
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino), st.st_size

    real_submit, real_reap, real_fsync = uring.Ring.fsync, uring.Ring.completions, os.fsync

    def submit(self, fd, token):  # noqa: ANN001
        submitted[token] = covered(fd)
        real_submit(self, fd, token)

    def reap(self):  # noqa: ANN001
        done = real_reap(self)
        for token, res in done:
            key, size = submitted.pop(token)
            if res == 0:
                synced[key] = max(synced.get(key, 0), size)
        return done

    def fsync(fd: int) -> None:
        key, size = covered(fd)
        real_fsync(fd)
        synced[key] = max(synced.get(key, 0), size)

    real_appended = Server._appended_on_loop

    def appended(self, pending, fut, error):  # noqa: ANN001
        if error is None:  # (the locks still held: the log file ends with this batch)
            key, size = covered(pending.part.leader._fds.log)
            checked.append(synced.get(key, 0) >= size)
        real_appended(self, pending, fut, error)

    monkeypatch.setattr(uring.Ring, "fsync", submit)
    monkeypatch.setattr(uring.Ring, "completions", reap)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(Server, "_appended_on_loop", appended)
    store.create_topic("t", configs={"segment.bytes": "1000"})  # (a roll every few batches: thread flushes too)
    with RawClient(kafka_server.port) as client:
        for i in range(30):
            assert produce(client, "t", 0, batch([b"%02d" % i + b"x" * 200]))[0] == 0
    assert len(checked) >= 15 and all(checked), checked
    assert _values(store, "t")[-1].startswith(b"29")


def test_producer_states_forgotten_meanwhile_are_built_by_a_thread_not_the_loop(kafka_server, store, begun,
                                                                                monkeypatch):
    """The topic altered (or deleted) in another thread just after the loop saw its partition's
    producer states built: building them again reads the log's batch headers (a day's worth), a
    thread's work; the loop's append leaves it to the threads rather than doing it."""
    store.create_topic("t")
    pid = 777
    loads: list[str] = []
    real_load = batches.ProducerStates._load

    def load(self, key, part):  # noqa: ANN001
        if key not in self._by_partition:
            loads.append(threading.current_thread().name)
        return real_load(self, key, part)

    monkeypatch.setattr(batches.ProducerStates, "_load", load)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"a"], producer_id=pid, epoch=0, sequence=0)) == (0, 0)
        real_lock = batches.RawAppender._lock_taken_now

        def forgotten_meanwhile(self, topic, partition):  # noqa: ANN001 - as forget_producer_states does
            self.producers.forget(topic)
            return real_lock(self, topic, partition)

        monkeypatch.setattr(batches.RawAppender, "_lock_taken_now", forgotten_meanwhile)
        assert produce(client, "t", 0, batch([b"b"], producer_id=pid, epoch=0, sequence=1)) == (0, 1)
        monkeypatch.setattr(batches.RawAppender, "_lock_taken_now", real_lock)
        assert produce(client, "t", 0, batch([b"c"], producer_id=pid, epoch=0, sequence=2)) == (0, 2)
    assert begun == ["thread", "thread", "loop"]
    assert len(loads) == 2 and all(name.startswith("klog-serve-append") for name in loads), loads
    assert _values(store, "t") == [b"a", b"b", b"c"]


def test_a_partition_whose_files_were_closed_is_opened_again_by_a_thread(kafka_server, store, begun):
    """Beyond open_partitions_max() written partitions, the least recently written one has its
    files closed; opening them again lists its folder and reads its state and index tails (work
    that grows with its segments): a thread's, the loop's appends go on once it is open."""
    store.create_topic("t")
    store.create_topic("u")
    kafka_server.appender.writer.open_max = 1
    with RawClient(kafka_server.port) as client:
        assert [produce(client, "t", 0, batch([b"t%d" % i])) for i in range(2)] == [(0, 0), (0, 1)]
        assert produce(client, "u", 0, batch([b"u"])) == (0, 0)  # t-0's files closed
        assert not kafka_server.store.opened_partitions()[("t", 0)].leader.files_open
        assert [produce(client, "t", 0, batch([b"t%d" % i])) for i in range(2, 4)] == [(0, 2), (0, 3)]
    assert begun == ["thread", "loop", "thread", "thread", "loop"]
    assert _values(store, "t") == [b"t0", b"t1", b"t2", b"t3"]


def test_files_a_loop_append_pushes_out_of_the_writers_open_set_are_closed_by_a_thread(kafka_server, store, begun,
                                                                                        monkeypatch):
    """Closing a partition's files may wait for its sealed segments' background fsync: the loop
    hands that to a thread."""
    import threading

    from klog.store.partition import Partition

    store.create_topic("t")
    store.create_topic("u")
    closed_in: list[str] = []
    real = Partition.release_files

    def recording(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        try:
            return real(self, *args, **kwargs)
        finally:  # (once closed: the answer may reach the client before the thread is done)
            closed_in.append(threading.current_thread().name)

    monkeypatch.setattr(Partition, "release_files", recording)
    with RawClient(kafka_server.port) as client:
        for topic in ("t", "u"):
            assert [produce(client, topic, 0, batch([b"%d" % i]))[0] for i in range(2)] == [0, 0]
        kafka_server.appender.writer.open_max = 1  # (as if the descriptor budget were reached)
        assert produce(client, "u", 0, batch([b"last"])) == (0, 2)
        deadline = time.monotonic() + 5
        while not closed_in and time.monotonic() < deadline:
            time.sleep(0.01)
    assert begun[-1] == "loop"
    assert closed_in and "klog-serve-loop" not in closed_in, closed_in
    assert not kafka_server.store.opened_partitions()[("t", 0)].leader.files_open

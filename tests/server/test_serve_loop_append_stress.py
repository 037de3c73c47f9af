"""klog serve's appends on the event loop (the fsync through io_uring) under stress: writers of one
partition at once (raw connections, an idempotent Kafka producer, a `klog produce` process), kill -9
of the server mid-stream, and the topic deleted and created again by another writer meanwhile. Every
acknowledged record is there once, at the offset it was acknowledged with, in whole batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import klog
from klog.store import codec
from klog.store.faults import CRASH_ENV
from tests.klog_processes import klog_env, run_klog, stop
from tests.serve_helpers import RawClient, batch, produce
from tests.server.test_serve_crash import free_port, start_server
from tests.server.test_serve_loop_append import _has_io_uring, _values, begun  # noqa: F401 - `begun`: a fixture

pytestmark = pytest.mark.skipif(not _has_io_uring(), reason="no io_uring on this kernel (or forbidden): "
                                "every append takes the append threads")

Acked = list[tuple[list[bytes], int, float]]  # (a batch's values, its acknowledged base offset, when sent)


def _hammer(port: int, name: bytes, acked: Acked, failed: list, until: threading.Event, count_max: int,
            seconds: float, topic: str = "t", reconnect: bool = False) -> None:
    """Produce batches of 1-3 records (values `name-j-k`) over one connection until `until` is set,
    `count_max` were sent or `seconds` passed; each acknowledged batch in `acked`, each refusal
    (error code) or lost connection in `failed`. `reconnect`: a lost connection is opened again."""
    deadline = time.monotonic() + seconds
    client: RawClient | None = None
    j = 0
    try:
        while j < count_max and not until.is_set() and time.monotonic() < deadline:
            if client is None:
                try:
                    client = RawClient(port)
                except OSError:
                    if not reconnect:
                        raise
                    time.sleep(0.05)
                    continue
            values = [b"%s-%05d-%d" % (name, j, k) for k in range(1 + j % 3)]
            j += 1
            sent = time.monotonic()
            try:
                code, base = produce(client, topic, 0, batch(values))
            except OSError as e:  # (ConnectionError too: the server went away mid-request)
                client.close()
                client = None
                failed.append(e)
                if not reconnect:
                    return
                continue
            if code == 0:
                acked.append((values, base, sent))
            else:
                failed.append(code)
    finally:
        if client is not None:
            client.close()


def _warm_topic(kafka_server, store) -> None:  # noqa: ANN001 - the fixtures
    """Topic `t`, its partition 0 opened by one produce (a thread's: the loop appends from then on)."""
    store.create_topic("t")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "t", 0, batch([b"warm"])) == (0, 0)


def _hammers(port: int, failed: list, done: threading.Event, n: int, count_max: int, seconds: float,
             prefix: bytes = b"c", reconnect: bool = False) -> tuple[list[Acked], list[threading.Thread]]:
    """`n` _hammer threads (not started; values `<prefix><i>-j-k`) and their acknowledged lists."""
    acked: list[Acked] = [[] for _ in range(n)]
    threads = [threading.Thread(target=_hammer, args=(port, prefix + b"%d" % i, acked[i], failed, done, count_max,
                                                      seconds), kwargs={"reconnect": reconnect}) for i in range(n)]
    return acked, threads


def _assert_at_their_offsets(values: list[bytes], acked: Acked) -> None:
    """Each acknowledged batch is in the log whole, at the offsets it was acknowledged with."""
    for sent, base, _ in acked:
        assert values[base:base + len(sent)] == sent, (base, sent, values[base:base + len(sent)])


def _ring_submissions(fd: int, pid: int | str = "self") -> int:
    """How many fsyncs an io_uring has been handed (the kernel's count, /proc fdinfo SqTail).
    Recent kernels print a ring's fdinfo only when they get its lock at once (a trylock, against
    a lock-order deadlock), so a ring busy at that instant shows none: read it again, a bounded
    number of times."""
    for _ in range(400):
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("SqTail:"):
                    return int(line.split()[1])
        time.sleep(0.005)
    raise AssertionError("no SqTail in the io_uring's fdinfo (400 reads over ~2 s)")


def _server_ring(pid: int) -> int:
    """The io_uring descriptor of process `pid` (klog serve has one)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[io_uring]":
                return int(fd)
        except OSError:
            continue
    raise AssertionError(f"process {pid} has no io_uring")


def _watch_high_watermark(data_dir: str, until: threading.Event, seen: list[int]) -> None:
    """Read partition t-0's high watermark as a consumer in another process would (its own Store,
    the state file) until `until` is set: what each look found, in order."""
    with klog.open(data_dir) as reader:
        part = reader.partition("t", 0)
        deadline = time.monotonic() + 30
        while not until.is_set() and time.monotonic() < deadline:
            seen.append(part.reader_snapshot().high_watermark)
            time.sleep(0.0005)


def _verify(data_dir: str) -> None:
    out = run_klog(data_dir, "verify", "-d", data_dir)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_writers_of_one_partition_interleave_whole_batches_and_lose_nothing(kafka_server, store, begun,  # noqa: F811
                                                                           data_dir):
    """Three raw connections, an idempotent confluent-kafka producer and a `klog produce` process
    write partition 0 of one topic at once: the server's appends take the loop where the locks
    are free and the threads where they are not, the other process waits for its turn."""
    ck = pytest.importorskip("confluent_kafka")
    _warm_topic(kafka_server, store)
    ring = kafka_server.loop_fsync.ring
    ring_before = _ring_submissions(ring.fd)
    lines = b"".join(b"p-%05d\n" % i for i in range(300))
    other = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "-p", "0", "--batch-size", "40"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=klog_env(data_dir))
    failed: list = []
    delivered: list[tuple[bytes, int]] = []
    done = threading.Event()

    def kafka_producer() -> None:
        producer = ck.Producer({"bootstrap.servers": kafka_server.bootstrap, "enable.idempotence": True,
                                "acks": "all", "linger.ms": 1, "message.timeout.ms": 20000})

        def on_delivery(err, msg) -> None:  # noqa: ANN001
            (failed.append(err) if err else delivered.append((msg.value(), msg.offset())))

        for i in range(300):
            producer.produce("t", value=b"k-%05d" % i, partition=0, on_delivery=on_delivery)
            producer.poll(0)
            if i % 10 == 9:
                time.sleep(0.002)  # (a stream of small batches, not one big one)
        assert producer.flush(20) == 0

    acked, threads = _hammers(kafka_server.port, failed, done, 3, 400, 15)
    threads.append(threading.Thread(target=kafka_producer))
    marks: list[int] = []
    threads.append(threading.Thread(target=_watch_high_watermark, args=(data_dir, done, marks)))
    try:
        for t in threads:
            t.start()
        other.stdin.write(lines)  # type: ignore[union-attr]
        other.stdin.close()  # type: ignore[union-attr]
        assert other.wait(30) == 0, other.stderr.read()  # type: ignore[union-attr]
    finally:
        done.set()  # (the raw connections stop once the other process is done)
        for t in threads:
            t.join(30)
        stop(other)
    assert not any(t.is_alive() for t in threads)
    assert not failed
    # published only once appended and synced, by each writer in turn: it never goes back (a
    # writer publishing its own view after another's turn would take the other's records back)
    assert len(marks) > 100 and marks == sorted(marks)
    values = _values(store, "t")
    assert len(values) == len(set(values))  # each record once
    for one in acked:
        _assert_at_their_offsets(values, one)
    assert all(values[offset] == value for value, offset in delivered) and len(delivered) == 300
    assert [v for v in values if v.startswith(b"p-")] == lines.split()  # the other process's, in order
    assert len(values) == 1 + 300 + 300 + sum(len(s) for one in acked for s, _, _ in one)  # nothing else
    _verify(data_dir)
    # the loop's own appends, each fsynced through the ring before its answer, beside the threads'
    loop = begun.count("loop")
    assert loop >= 10, begun  # (its share falls with the machine's load: ~37 of ~300 at load 6, more when quiet)
    assert 0 < _ring_submissions(ring.fd) - ring_before <= loop


@pytest.mark.slow
def test_kill_9_while_appending_on_the_loop_keeps_every_acknowledged_record(data_dir):
    """`klog serve` (a process) killed with SIGKILL twice while three connections produce to one
    partition (the loop's appends: the server's io_uring counts their fsyncs); each acknowledged
    batch is there after the restarts, whole, at its offset, once; `klog verify` passes."""
    port = free_port()
    with klog.open(data_dir) as s:
        s.create_topic("t")
    server = start_server(data_dir, port)
    failed: list = []
    done = threading.Event()
    acked, threads = _hammers(port, failed, done, 3, 100_000, 40, prefix=b"w", reconnect=True)
    kills = 0
    try:
        for t in threads:
            t.start()
        for _ in range(2):
            target = sum(map(len, acked)) + 300
            deadline = time.monotonic() + 20
            while sum(map(len, acked)) < target and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sum(map(len, acked)) >= target, "the producers made no progress"
            assert _ring_submissions(_server_ring(server.pid), server.pid) >= 100  # appended on the loop
            server.send_signal(signal.SIGKILL)  # mid-stream: appends and fsyncs in flight
            server.wait(10)
            kills += 1
            server = start_server(data_dir, port)
        target = sum(map(len, acked)) + 100  # the producers go on against the restarted server
        deadline = time.monotonic() + 20
        while sum(map(len, acked)) < target and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        done.set()
        for t in threads:
            t.join(30)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        finally:
            stop(server)
    assert kills == 2 and not any(t.is_alive() for t in threads)
    assert sum(map(len, acked)) >= 700
    assert all(isinstance(f, OSError) for f in failed), failed  # (lost connections only, no error answer)
    with klog.open(data_dir) as s:
        values = _values(s, "t")
    assert len(values) == len(set(values))
    for one in acked:
        _assert_at_their_offsets(values, one)
    _verify(data_dir)


@pytest.mark.slow
def test_a_topic_deleted_and_created_again_meanwhile_loses_nothing_of_the_new_one(kafka_server, store,
                                                                                   begun,  # noqa: F811
                                                                                   data_dir):
    """Another writer (its own Store: its own locks, as another process) deletes the topic and
    creates it again four times while two connections produce to it through the loop. Nothing
    waits for good; what was acknowledged after the last re-creation is in the new topic at its
    offset, the other writer's first record after it too, and no acknowledged record sits in the
    new topic's files anywhere but at the offset it was acknowledged with."""
    _warm_topic(kafka_server, store)
    failed: list = []
    done = threading.Event()
    acked, threads = _hammers(kafka_server.port, failed, done, 2, 3000, 15)
    recreated = 0.0
    try:
        for t in threads:
            t.start()
        for round_ in range(4):
            time.sleep(0.15)
            with klog.open(data_dir) as other:
                other.delete_topic("t")
                other.create_topic("t", exist_ok=True)  # (exist_ok: a produce may not create it, but be safe)
                with other.producer() as producer:
                    producer.send("t", b"other-%d" % round_, partition=0)
            recreated = time.monotonic()
            loop_before = begun.count("loop")
        time.sleep(0.3)  # the connections go on into the last topic
    finally:
        done.set()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads)  # nothing waited for good
    values = _values(store, "t")
    assert b"other-3" in values and len(values) == len(set(values))
    after = [a for one in acked for a in one if a[2] > recreated]
    assert len(after) >= 10  # (the connections kept writing into the new topic)
    _assert_at_their_offsets(values, after)  # every one sent after the last re-creation
    found = {v: i for i, v in enumerate(values)}
    for sent, base, _ in (a for one in acked for a in one):  # any other one there is at its offset
        if sent[0] in found:
            assert found[sent[0]] == base and values[base:base + len(sent)] == sent
    assert all(isinstance(f, int) for f in failed)  # (refusals while the topic was gone: answered)
    assert begun.count("loop") - loop_before >= 10  # the new topic's appends took the loop again
    _verify(data_dir)


@pytest.mark.slow
def test_many_partitions_rolling_at_once_never_wait_for_good(kafka_server, store, begun):  # noqa: F811
    """40 connections, each producing to its own partition of a topic whose every batch starts a
    segment (each flush then more than the ring's fsync: a thread's) and whose retention runs
    after each roll (in the append threads, waiting for the partition's lock the loop holds until
    that flush is done): every batch is answered, none refused, and each partition holds its own."""
    partitions, rounds = 40, 8
    store.create_topic("t", partitions=partitions, configs={"segment.bytes": "100", "retention.bytes": "300"})
    answered: dict[int, list] = {p: [] for p in range(partitions)}

    def produce_to(p: int) -> None:
        with RawClient(kafka_server.port) as client:
            client.sock.settimeout(10)
            for i in range(rounds):
                answered[p].append(produce(client, "t", p, batch([b"%02d-%d" % (p, i) + b"x" * 200])))

    threads = [threading.Thread(target=produce_to, args=(p,)) for p in range(partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert all(answered[p] == [(0, i) for i in range(rounds)] for p in range(partitions)), answered
    assert begun.count("loop") >= partitions // 2  # (the rest took threads: a retention held the lock)
    for p in (0, partitions - 1):  # retention kept the last ~300 bytes of each
        part = store.partition("t", p)
        last = [v for b in part.read(part.log_start_offset()) for v in codec.decode_batch_values(b.data, 0, b.header)]
        assert last and last[-1].startswith(b"%02d-%d" % (p, rounds - 1))


@pytest.mark.slow
def test_plain_batches_on_the_loop_beside_transactions_keep_read_committed_whole(kafka_server, store,
                                                                                  begun):  # noqa: F811
    """Two connections append plain batches on the loop while a transactional confluent-kafka
    producer writes the same partition, committing and aborting in turn (its batches and markers
    in the threads): a read_committed reader gets every acknowledged plain record once and each
    committed transaction whole, never an aborted one."""
    pytest.importorskip("confluent_kafka")
    from tests.server.test_serve_transactions import _read_all, _txn_producer

    _warm_topic(kafka_server, store)
    failed: list = []
    done = threading.Event()
    acked, threads = _hammers(kafka_server.port, failed, done, 2, 3000, 20)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    try:
        for t in threads:
            t.start()
        producer = _txn_producer(kafka_server.bootstrap, "tx-beside-the-loop")
        for round_ in range(4):
            producer.begin_transaction()
            values = [b"tx%d-%d" % (round_, i) for i in range(5)]
            for v in values:
                producer.produce("t", value=v, partition=0)
                producer.poll(0)
                time.sleep(0.01)  # (plain batches between the transaction's)
            producer.flush(20)
            if round_ % 2:
                producer.abort_transaction(20)
                aborted += values
            else:
                producer.commit_transaction(20)
                committed += values
    finally:
        done.set()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads) and not failed
    plain = [v for one in acked for sent, _, _ in one for v in sent]
    got = _read_all(kafka_server.bootstrap, "t", 1, "read_committed", expect=1 + len(plain) + len(committed))
    assert len(got) == len(set(got)) and set(got) == {b"warm", *plain, *committed}
    assert [v for v in got if v.startswith(b"tx")] == committed  # whole, in order, the aborted ones never
    values = _values(store, "t")
    for one in acked:
        _assert_at_their_offsets(values, one)
    assert begun.count("loop") >= 20


@pytest.mark.slow
def test_killed_between_publish_and_answer_an_idempotent_producers_retry_is_not_written_twice(data_dir,
                                                                                               monkeypatch):
    """`klog serve` killed (SIGKILL, by its own crash point) after a loop append published a batch
    and before it answered: the idempotent confluent-kafka producer (acks=all, several requests
    in flight) sends that batch again to the restarted server, which finds it in the log (the
    producer's state rebuilt from it) and answers it as written: every acknowledged record is
    there, none twice, and the loop appends again after the restart."""
    ck = pytest.importorskip("confluent_kafka")
    port = free_port()
    with klog.open(data_dir) as s:
        s.create_topic("t")
    monkeypatch.setenv(CRASH_ENV, "loop-append-published:40")
    server = start_server(data_dir, port)
    monkeypatch.delenv(CRASH_ENV)
    acked: list[bytes] = []
    failed: list = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        (failed.append(err) if err else acked.append(msg.value()))

    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "enable.idempotence": True,
                            "linger.ms": 1, "message.timeout.ms": 30000, "reconnect.backoff.ms": 50,
                            "reconnect.backoff.max.ms": 200})
    sent = 0

    def send() -> None:
        nonlocal sent
        producer.produce("t", value=b"r-%06d" % sent, partition=0, on_delivery=on_delivery)
        sent += 1
        producer.poll(0)
        if sent % 5 == 0:
            time.sleep(0.002)  # (many small requests, several in flight: not one big batch)

    try:
        send()
        assert producer.flush(20) == 0  # (its producer id first: then a stream of small requests)
        deadline = time.monotonic() + 30
        while server.poll() is None and time.monotonic() < deadline:
            send()
        assert server.wait(10) == -signal.SIGKILL  # at its 40th loop append, published, not answered
        at_kill = len(acked)
        server = start_server(data_dir, port)
        send()
        assert producer.flush(30) == 0  # what was in flight, sent again to the restarted server
        for _ in range(300):  # and the producer goes on
            send()
        assert producer.flush(30) == 0
        assert _ring_submissions(_server_ring(server.pid), server.pid) >= 10  # the loop again, after its restart
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        finally:
            stop(server)
    assert not failed and len(acked) == sent and len(acked) > at_kill
    with klog.open(data_dir) as s:
        values = _values(s, "t")
    assert sorted(values) == sorted(acked)  # nothing acknowledged lost, nothing twice, nothing else
    _verify(data_dir)

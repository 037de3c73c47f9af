"""A Fetch that cannot wait for anything is answered on the event loop (no thread hop), and with
the bytes, offsets and errors the thread pool's answer has; whatever may wait (a page not in the
cache, a partially cached range, a range for sendfile, too many partitions) goes to the thread
pool as before and is answered the same."""

from __future__ import annotations

import datetime
import os
import time
import types

import pytest

from klog.protocol.kafka import make as make_entity
from klog.server import fetch as fetch_module
from klog.store import topic_read
from tests.serve_helpers import RawClient, batch, produce, record_fetch_ways

pytestmark = pytest.mark.skipif(not topic_read.NOWAIT, reason="no preadv RWF_NOWAIT here: every Fetch takes the pool")


def _fetch(client: RawClient, topic: str, offsets: dict[int, int], partition_max_bytes: int = 1 << 20,
           isolation_level: int = 0):
    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    parts = tuple(FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                  for p, o in offsets.items())
    return client.send(1, 12, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                       max_bytes=1 << 20, isolation_level=isolation_level, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=topic, partitions=parts),), forgotten_topics_data=(), rack_id="")


def _partitions(answer) -> list[tuple]:  # noqa: ANN001 - a FetchResponse
    return [(int(p.partition_index), int(p.error_code), int(p.high_watermark), int(p.log_start_offset),
             bytes(p.records or b"")) for t in answer.responses for p in t.partitions]


@pytest.fixture
def where(kafka_server, monkeypatch):
    """Where each Fetch was collected: 'loop' (either way on the event loop) or 'pool', in order."""
    return record_fetch_ways(kafka_server, monkeypatch, one="loop")


def _by_pool(monkeypatch, client: RawClient, topic: str, offsets: dict[int, int], **kw) -> list[tuple]:
    """The thread pool's answer to the same Fetch (the loop's path turned off for it)."""
    with monkeypatch.context() as m:
        m.setattr(fetch_module, "_collect_inline", lambda ctx, request: None)
        return _partitions(_fetch(client, topic, offsets, **kw))


def test_a_warm_fetch_is_answered_on_the_loop_as_the_pool_answers_it(kafka_server, store, where, monkeypatch):
    store.create_topic("warm", partitions=2)
    with RawClient(kafka_server.port) as client:
        for i in range(3):
            assert produce(client, "warm", 0, batch([b"v%d-%d" % (i, j) for j in range(i + 1)]))[0] == 0
        assert produce(client, "warm", 1, batch([b"one"]))[0] == 0
        _fetch(client, "warm", {0: 0, 1: 0})  # (the first touch opens the files: the pool's)
        cases = [{0: 0, 1: 0},  # from each segment's start
                 {0: 6, 1: 1},  # at the end
                 {0: 7, 1: 5}]  # out of range
        for offsets in cases:
            where.clear()
            looped = _partitions(_fetch(client, "warm", offsets))
            assert where == ["loop"], offsets
            assert looped == _by_pool(monkeypatch, client, "warm", offsets)
        # (what they said: the records, the end, and Kafka's error for an offset past it)
        first, _ = _partitions(_fetch(client, "warm", {0: 0, 1: 0}))
        assert first[2] == 6 and b"v2-2" in first[4]
        assert [p[1] for p in _partitions(_fetch(client, "warm", {0: 7, 1: 5}))] == [1, 1]  # OFFSET_OUT_OF_RANGE


_REAL_PREADV = os.preadv


class _ColdDisk:
    """os.preadv for the event loop's reads, finding `what` not cached with RWF_NOWAIT: the state
    file ('state', the first read of a Fetch: klog.store.state), a segment's pages ('segment':
    klog.store.topic_read), or part of them ('partly': a short read)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.refused = 0

    def preadv(self, fd: int, buffers, offset: int, flags: int = 0) -> int:  # noqa: ANN001
        size = sum(len(b) for b in buffers)
        segment = size > 64  # (a state file is a few dozen bytes; a segment read is a chunk)
        if flags & os.RWF_NOWAIT and (segment and self.what == "segment" or not segment and self.what == "state"):
            self.refused += 1
            raise BlockingIOError(11, "Resource temporarily unavailable")
        n = _REAL_PREADV(fd, buffers, offset, flags)
        if flags & os.RWF_NOWAIT and segment and self.what == "partly" and n > 1:
            self.refused += 1
            return n // 2
        return n


@pytest.mark.parametrize("what", ["state", "segment", "partly"])
def test_a_read_that_would_wait_for_the_disk_is_answered_by_the_pool(kafka_server, store, where, monkeypatch, what):
    store.create_topic("cold")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "cold", 0, batch([b"cold-%d" % i for i in range(50)]))[0] == 0
        _fetch(client, "cold", {0: 0})
        expected = _by_pool(monkeypatch, client, "cold", {0: 0})
        assert b"cold-49" in expected[0][4]
        disk = _ColdDisk(what)
        monkeypatch.setattr(os, "preadv", disk.preadv)  # (every module's: the state's read and the segment's)
        where.clear()
        assert _partitions(_fetch(client, "cold", {0: 0})) == expected
        assert disk.refused and where == ["pool"]  # (the loop asked the cache, then handed it over)


def test_a_filesystem_without_rwf_nowait_turns_the_loops_reads_off(kafka_server, store, where, monkeypatch):
    import errno

    store.create_topic("nofs")
    monkeypatch.setattr(topic_read, "NOWAIT", True)  # (restored after the test)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "nofs", 0, batch([b"plain"]))[0] == 0
        _fetch(client, "nofs", {0: 0})

        asked = []

        def unsupported(fd, buffers, offset, flags):  # noqa: ANN001, ANN202
            asked.append(fd)
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")

        monkeypatch.setattr(topic_read, "os", types.SimpleNamespace(preadv=unsupported, RWF_NOWAIT=os.RWF_NOWAIT))
        where.clear()
        answers = [_partitions(_fetch(client, "nofs", {0: 0})) for _ in range(2)]
        assert where == ["pool", "pool"] and not topic_read.NOWAIT and len(asked) == 1  # (the second did not ask)
        assert answers[0] == answers[1] and b"plain" in answers[0][0][4]


def test_a_large_range_or_a_wide_fetch_goes_to_the_pool(kafka_server, store, where, monkeypatch):
    monkeypatch.setattr(fetch_module, "LOOP_PARTITIONS_MAX", 2)
    store.create_topic("big", partitions=3)
    with RawClient(kafka_server.port) as client:
        value = os.urandom(fetch_module.INLINE_RANGE_BYTES + 100)
        assert produce(client, "big", 0, batch([value]))[0] == 0
        for p in (1, 2):
            assert produce(client, "big", p, batch([b"small"]))[0] == 0
        _fetch(client, "big", {0: 0, 1: 0, 2: 0})
        where.clear()
        [big] = _partitions(_fetch(client, "big", {0: 0}))  # (one partition, but its range is sent by sendfile)
        wide = _partitions(_fetch(client, "big", {0: 0, 1: 0, 2: 0}))
        assert where == ["pool", "pool"]
        assert value in big[4] and wide[0] == big and [p[4] != b"" for p in wide] == [True] * 3
        where.clear()
        small = _partitions(_fetch(client, "big", {1: 0, 2: 0}))
        assert where == ["loop"] and small == wide[1:]


def test_a_fetch_from_mid_segment_goes_to_the_pool(kafka_server, store, where):
    store.create_topic("mid")
    with RawClient(kafka_server.port) as client:
        for i in range(4):
            assert produce(client, "mid", 0, batch([b"m%d" % i]))[0] == 0
        _fetch(client, "mid", {0: 0})
        where.clear()
        middle = _partitions(_fetch(client, "mid", {0: 2}))  # (not where a read ended: the index is looked up)
        assert where == ["pool"]
        assert b"m2" in middle[0][4] and b"m1" not in middle[0][4]


def test_read_committed_on_the_loop_names_the_stable_offset_and_aborted_transactions_as_the_pool(
        kafka_server, store, where, monkeypatch):
    from tests.server.test_serve_transactions import _add, _end, _init, _produce_txn, _txn_batch

    store.create_topic("txn")
    with RawClient(kafka_server.port) as client:
        ids = {}
        for tid in ("aborts", "stays-open"):
            answer = _init(client, tid)
            ids[tid] = (int(answer.producer_id), int(answer.producer_epoch))
        assert produce(client, "txn", 0, batch([b"before"]))[0] == 0
        pid, epoch = ids["aborts"]
        _add(client, "aborts", pid, epoch, "txn", (0,))
        assert _produce_txn(client, "aborts", "txn", 0, _txn_batch([b"aborted"], pid, epoch, 0)) == 0
        assert _end(client, "aborts", pid, epoch, commit=False) == 0  # (offsets 1, and its marker 2)
        assert produce(client, "txn", 0, batch([b"between"]))[0] == 0
        pid, epoch = ids["stays-open"]
        _add(client, "stays-open", pid, epoch, "txn", (0,))
        assert _produce_txn(client, "stays-open", "txn", 0, _txn_batch([b"open"], pid, epoch, 0)) == 0  # offset 4

        def committed():  # noqa: ANN202
            return _fetch(client, "txn", {0: 0}, isolation_level=1)

        committed()  # (the pool's: the partition's first read, its transactions walked)
        where.clear()
        looped = committed()
        assert where == ["loop"]
        [p] = looped.responses[0].partitions
        assert int(p.high_watermark) == 5 and int(p.last_stable_offset) == 4
        assert [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions] == [(ids["aborts"][0], 1)]
        assert b"before" in bytes(p.records) and b"open" not in bytes(p.records)
        with monkeypatch.context() as m:
            m.setattr(fetch_module, "_collect_inline", lambda ctx, request: None)
            assert committed() == looped
        # the open transaction commits: the stable offset moves, walked first by the pool
        assert _end(client, "stays-open", pid, epoch, commit=True) == 0
        where.clear()
        after = [committed() for _ in range(2)]
        assert where == ["pool", "loop"] and after[0] == after[1]
        [p] = after[1].responses[0].partitions
        assert int(p.last_stable_offset) == int(p.high_watermark) == 6 and b"open" in bytes(p.records)


def test_a_fetch_by_topic_id_is_answered_on_the_loop(kafka_server, store, where):
    import uuid

    from kio.schema.fetch.v13.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    store.create_topic("byid")
    topic_id = uuid.UUID(store.topic("byid").topic_id)
    part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    fields = {"replica_id": -1, "max_wait": i32Timedelta.parse(datetime.timedelta(0)), "min_bytes": 1,
              "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
              "topics": (FetchTopic(topic_id=topic_id, partitions=(part,)),), "forgotten_topics_data": (),
              "rack_id": ""}
    with RawClient(kafka_server.port) as client:
        assert produce(client, "byid", 0, batch([b"by id"]))[0] == 0
        first = client.send(1, 13, **fields)
        where.clear()
        again = client.send(1, 13, **fields)
        assert where == ["loop"] and again == first and b"by id" in bytes(again.responses[0].partitions[0].records)


def test_the_loop_never_answers_for_a_topic_another_process_changed(kafka_server, store, where, data_dir):
    import klog

    store.create_topic("again")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "again", 0, batch([b"old"]))[0] == 0
        _fetch(client, "again", {0: 0})
        where.clear()
        assert b"old" in _partitions(_fetch(client, "again", {0: 0}))[0][4]
        assert where == ["loop"]
        with klog.open(data_dir) as other:
            other.delete_topic("again")
            other.create_topic("again")
            with other.producer() as p:
                p.send_values("again", [b"new"], partition=0)
        where.clear()
        [answer] = _partitions(_fetch(client, "again", {0: 0}))
        assert where == ["pool"] and b"new" in answer[4] and b"old" not in answer[4]


def test_the_loops_reads_leave_a_consumers_next_read_its_shortcut(kafka_server, store, where):
    """A consumer's next Fetch starts where its last range ended: the loop's read there (through
    its RWF_NOWAIT view of the file) leaves that place known, so the next one stays on the loop."""
    store.create_topic("tail")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "tail", 0, batch([b"t0"]))[0] == 0
        _fetch(client, "tail", {0: 0})
        where.clear()
        for i in range(1, 4):
            assert produce(client, "tail", 0, batch([b"t%d" % i]))[0] == 0
            [answer] = _partitions(_fetch(client, "tail", {0: i}))
            assert b"t%d" % i in answer[4] and b"t%d" % (i - 1) not in answer[4]
        assert where == ["loop"] * 3


def _fetch_v(client: RawClient, version: int, topic: str, offset: int):
    """A Fetch of partition 0 in `version` (v4-v9: no session, no topic id)."""
    import importlib

    from kio.static.primitive import i32Timedelta

    mod = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    part = make_entity(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=offset,
                       last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    return client.send(1, version, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(make_entity(mod.FetchTopic, topic=topic, partitions=(part,)),),
                       forgotten_topics_data=(), rack_id="")


def test_an_older_fetcher_is_answered_on_the_loop_and_refused_a_zstd_topic_there_too(kafka_server, store, where,
                                                                                     monkeypatch):
    store.create_topic("plain")
    store.create_topic("zstd", configs={"compression.type": "zstd"})
    with RawClient(kafka_server.port) as client:
        for topic in ("plain", "zstd"):
            assert produce(client, topic, 0, batch([b"for v4"]))[0] == 0
            _fetch_v(client, 4, topic, 0)
            _fetch_v(client, 4, topic, 0)  # (its metadata cached by the first: the compression type's check)
        where.clear()
        plain = _fetch_v(client, 4, "plain", 0)
        refused = _fetch_v(client, 9, "zstd", 0)
        assert where == ["loop", "loop"]
        assert b"for v4" in bytes(plain.responses[0].partitions[0].records)
        assert int(refused.responses[0].partitions[0].error_code) == 76  # UNSUPPORTED_COMPRESSION_TYPE
        with monkeypatch.context() as m:
            m.setattr(fetch_module, "_collect_inline", lambda ctx, request: None)
            assert _fetch_v(client, 4, "plain", 0) == plain and _fetch_v(client, 9, "zstd", 0) == refused


def test_a_consumer_tailing_a_partition_being_written_gets_every_record_once_in_order(kafka_server, store, where):
    import threading

    from klog.store import codec

    store.create_topic("busy")
    count = 150
    with RawClient(kafka_server.port) as client:
        assert produce(client, "busy", 0, batch([b"r0"]))[0] == 0
        _fetch(client, "busy", {0: 0})
    where.clear()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with RawClient(kafka_server.port) as producer:
                for i in range(1, count):
                    assert produce(producer, "busy", 0, batch([b"r%d" % i]))[0] == 0
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    seen: list[bytes] = []
    try:
        with RawClient(kafka_server.port) as consumer:
            deadline = time.monotonic() + 30  # (the writer fsyncs each produce: slow on a loaded machine)
            for _ in range(1000 * count):  # (bounded in count too: each round is one Fetch)
                if len(seen) >= count or time.monotonic() > deadline:
                    break
                [(_, error, _, _, records)] = _partitions(_fetch(consumer, "busy", {0: len(seen)}))
                assert error == 0
                pos = 0
                while pos < len(records):  # (whole batches: a fetch sends whole ones below the end)
                    header = codec.read_header(records, pos)
                    seen.extend(r[3] for r in codec.decode_batch_records(records, pos, header) if r[0] >= len(seen))
                    pos += header.size
    finally:
        writer.join(30)
    assert not failures
    assert seen == [b"r%d" % i for i in range(count)]
    # (most on the loop: a consumer at the log's end reads where its last range ended; the metadata's
    # and ACLs' periodic re-reads go to the pool)
    assert where.count("loop") > where.count("pool")

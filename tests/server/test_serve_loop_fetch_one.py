"""A consumer's usual Fetch, one partition of one topic, is answered on the event loop its own short
way (klog.server.fetch._collect_one) with what the general way on the loop and the thread pool
answer: at the versions the loop serves, by topic name and by id, with records, at the end, out of
range, at the current leader epoch or a newer one, and for an old fetcher of a zstd topic."""

from __future__ import annotations

import datetime
import uuid

import pytest

from klog.protocol.kafka import make
from klog.server import fetch as fetch_module
from klog.store import topic_read
from tests.serve_helpers import RawClient, batch, produce, record_fetch_ways

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

from klog.protocol.schemas import payload_module  # noqa: E402

pytestmark = pytest.mark.skipif(not topic_read.NOWAIT, reason="no preadv RWF_NOWAIT here: every Fetch takes the pool")


@pytest.fixture
def ways(kafka_server, monkeypatch):
    """Which way each Fetch was answered: 'one', 'loop' (the general way on the loop) or 'pool'."""
    return record_fetch_ways(kafka_server, monkeypatch)


def _fetch(client: RawClient, version: int, topic: str, offset: int, epoch: int = -1,
           topic_id: uuid.UUID | None = None):
    mod = payload_module(1, version, EntityType.request)
    part = make(mod.FetchPartition, partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    return client.send(1, version, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(make(mod.FetchTopic, topic=topic, topic_id=topic_id, partitions=(part,)),),
                       forgotten_topics_data=(), rack_id="")


def _three_ways(monkeypatch, ways: list[str], *args, **kw) -> tuple[str, object]:
    """The Fetch answered as it is (which way, the answer), checked equal to the general way's
    answer on the loop and to the thread pool's."""
    ways.clear()
    got = _fetch(*args, **kw)
    way = ways[-1]
    with monkeypatch.context() as m:
        m.setattr(fetch_module, "_collect_one", lambda ctx, request, t: None)
        assert _fetch(*args, **kw) == got
    with monkeypatch.context() as m:
        m.setattr(fetch_module, "_collect_inline", lambda ctx, request: None)
        assert _fetch(*args, **kw) == got
    return way, got


@pytest.mark.parametrize("version", [4, 9, 11, 12, 13, 17])
def test_the_one_partition_way_answers_as_the_general_way_and_the_pool(kafka_server, store, ways, monkeypatch,
                                                                       version):
    store.create_topic("one")
    store.create_topic("zstd", configs={"compression.type": "zstd"})
    topic_id = uuid.UUID(store.topic("one").topic_id) if version >= 13 else None
    with RawClient(kafka_server.port) as client:
        for i in range(3):
            assert produce(client, "one", 0, batch([b"v%d-%d" % (i, j) for j in range(i + 1)]))[0] == 0
        assert produce(client, "zstd", 0, batch([b"z"]))[0] == 0
        _fetch(client, version, "one", 0, topic_id=topic_id)  # (the first touch opens the files: the pool's)
        if version < 10:
            _fetch(client, version, "zstd", 0)

        def answer(offset: int, epoch: int = -1, topic: str = "one") -> tuple[str, object]:
            way, got = _three_ways(monkeypatch, ways, client, version, topic, offset, epoch,
                                   topic_id=topic_id if topic == "one" else None)
            [t] = got.responses
            [p] = t.partitions
            return way, p

        way, p = answer(0)  # from the segment's start: the records
        assert way == "one" and p.error_code == E.none and int(p.high_watermark) == 6
        assert b"v0-0" in bytes(p.records) and b"v2-2" in bytes(p.records)
        way, p = answer(6)  # at the end: none
        assert way == "one" and p.error_code == E.none and not p.records
        way, p = answer(7)  # past the end
        assert way == "one" and p.error_code == E.offset_out_of_range and int(p.high_watermark) == 6
        if version >= 9:  # current_leader_epoch: the partition's (0), then one this broker has not seen
            way, p = answer(0, epoch=0)
            assert way == "one" and p.error_code == E.none and b"v2-2" in bytes(p.records)
            way, p = answer(0, epoch=7)
            assert way == "loop" and p.error_code == E.unknown_leader_epoch
        else:  # a fetcher older than KIP-110 is refused a zstd topic's batches
            way, p = answer(0, topic="zstd")
            assert way == "loop" and p.error_code == E.unsupported_compression_type


def test_a_read_committed_fetch_of_one_partition_takes_the_general_way(kafka_server, store, ways):
    store.create_topic("rc")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "rc", 0, batch([b"committed"]))[0] == 0
        mod = payload_module(1, 12, EntityType.request)
        part = make(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=1 << 20)
        fields = dict(replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                      max_bytes=1 << 20, isolation_level=1, session_id=0, session_epoch=-1,
                      topics=(make(mod.FetchTopic, topic="rc", partitions=(part,)),), forgotten_topics_data=(),
                      rack_id="")
        first = client.send(1, 12, **fields)
        ways.clear()
        again = client.send(1, 12, **fields)
        assert ways == ["loop"] and again == first and b"committed" in bytes(again.responses[0].partitions[0].records)

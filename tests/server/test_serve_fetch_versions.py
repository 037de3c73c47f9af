"""The hand-written Fetch response (zero-copy framing) decodes with kio's generated reader at every
advertised version, with data, an empty partition, an unknown one and an offset out of range."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from klog.protocol.kafka import make
from tests.serve_helpers import RawClient

pytest.importorskip("kio")
from kio.index import load_payload_module  # noqa: E402
from kio.schema.errors import ErrorCode as E  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402


@pytest.mark.parametrize("version", range(4, 17))
def test_fetch_response_decodes_at_every_version(kafka_server, version):
    store = kafka_server.store
    store.create_topic("fv", partitions=3)
    with store.producer() as producer:
        for i in range(20):
            producer.send("fv", b"value-%d" % i, partition=0)
        producer.send("fv", b"one", partition=2)
    mod = load_payload_module(1, version, EntityType.request)

    def part(index: int, offset: int):  # noqa: ANN202
        return make(mod.FetchPartition, partition=index, current_leader_epoch=-1, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)


    fv_id = uuid.UUID(store.topic("fv").topic_id)
    topics = (make(mod.FetchTopic, topic="fv", topic_id=fv_id, partitions=(part(0, 5), part(1, 0), part(2, 7))),
              make(mod.FetchTopic, topic="nope", topic_id=uuid.uuid4(), partitions=(part(0, 0),)))
    with RawClient(kafka_server.port) as client:
        resp = client.send(1, version, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)),
                           min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                           topics=topics, forgotten_topics_data=(), rack_id="")
    fv, nope = resp.responses
    p0, p1, p2 = fv.partitions
    assert (p0.error_code, p0.high_watermark, p0.log_start_offset if version >= 5 else 0) == (E.none, 20, 0)
    from klog.store.codec import decode_batch_records, read_header

    records, pos = [], 0
    while pos < len(p0.records):
        header = read_header(p0.records, pos)
        records += [r[3] for r in decode_batch_records(p0.records, pos, header)]
        pos += header.size
    assert records[-15:] == [b"value-%d" % i for i in range(5, 20)]  # from the batch holding offset 5
    assert (p1.error_code, p1.high_watermark, len(p1.records or b"")) == (E.none, 0, 0)
    assert p2.error_code == E.offset_out_of_range and p2.high_watermark == 1
    if version >= 13:  # topics by id
        assert fv.topic_id == fv_id and nope.partitions[0].error_code == E.unknown_topic_id
    else:
        assert fv.topic == "fv" and nope.partitions[0].error_code == E.unknown_topic_or_partition
    if version >= 7:
        assert resp.error_code == E.none and resp.session_id == 0


def test_fetch_by_topic_id_follows_a_topic_deleted_and_created_again(kafka_server, store):
    """Fetch v13 names topics by id: after another process deletes a topic and creates it again,
    the old id is UNKNOWN_TOPIC_ID and the new one reads the new topic (ids are looked up in a map
    the server keeps, checked against the store on every hit)."""
    from kio.schema.fetch.v13.request import FetchPartition, FetchTopic

    def fetch(topic_id: uuid.UUID) -> Any:  # partition 0's answer
        part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=1 << 20)
        with RawClient(kafka_server.port) as client:
            resp = client.send(1, 13, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
                               min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                               topics=(FetchTopic(topic_id=topic_id, partitions=(part,)),), forgotten_topics_data=(),
                               rack_id="")
        return resp.responses[0].partitions[0]

    store.create_topic("again")
    with store.producer() as p:
        p.send("again", b"old")
    old_id = uuid.UUID(store.topic("again").topic_id)
    assert int(fetch(old_id).high_watermark) == 1
    store.delete_topic("again")
    store.create_topic("again")
    new_id = uuid.UUID(store.topics.get("again").topic_id)
    assert new_id != old_id
    assert fetch(old_id).error_code == E.unknown_topic_id
    fresh = fetch(new_id)
    assert fresh.error_code == E.none and int(fresh.high_watermark) == 0


def test_a_topic_deleted_and_created_again_by_another_process_is_used_at_once(kafka_server, store):
    """The server holds the old topic's files open: right after another process deletes the topic
    and creates it again, a produce through the server lands in the new topic (not in the deleted
    files, which would lose an acknowledged record) and a fetch reads the new topic."""
    from tests.serve_helpers import batch, produce

    store.create_topic("again")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "again", 0, batch([b"old-1", b"old-2"])) == (E.none, 0)
        assert int(_fetch_v12(client, "again").high_watermark) == 2
        store.delete_topic("again")
        store.create_topic("again")
        assert produce(client, "again", 0, batch([b"new"])) == (E.none, 0)
        fresh = _fetch_v12(client, "again")
    assert fresh.error_code == E.none and int(fresh.high_watermark) == 1
    assert [r.value for r in store.consumer("again")] == [b"new"]


def _fetch_v12(client: RawClient, topic: str) -> Any:
    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic

    part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    resp = client.send(1, 12, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
                       min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=(), rack_id="")
    return resp.responses[0].partitions[0]

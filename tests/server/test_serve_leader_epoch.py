"""current_leader_epoch in Fetch, ListOffsets and OffsetForLeaderEpoch, as Kafka checks it: older than
the partition's epoch is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 (or a request version
without the field) no check. Raw kio requests, as a client that missed an election would send them."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from klog.protocol.kafka import make
from tests.serve_helpers import RawClient

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

from klog.protocol.schemas import payload_module as load_payload_module  # noqa: E402

EPOCH = 3


@pytest.fixture()
def epoch3(kafka_server):
    """Topic 'le' with 5 records, its partition at leader epoch 3 (started at offset 2), as an
    election in another process would leave it."""
    store = kafka_server.store
    store.create_topic("le")
    with store.producer() as producer:
        for i in range(5):
            producer.send("le", b"v%d" % i)
    pm = store.topic("le").partitions[0]
    store.topics.update_partition("le", 0, dataclasses.replace(pm, leader_epoch=EPOCH, epochs=[[0, 0], [EPOCH, 2]]))
    store.forget_topic_metadata("le")
    part = store.partition("le", 0)  # and in its state file, as ReplicaManager.reconcile writes both
    snap = part.snapshot()
    snap.leader_epoch = EPOCH
    part.state.write(snap, sync=True)
    return kafka_server


def fetch(client: RawClient, version: int, client_epoch: int):  # noqa: ANN201
    mod = load_payload_module(1, version, EntityType.request)
    part = make(mod.FetchPartition, partition=0, current_leader_epoch=client_epoch, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    topic = make(mod.FetchTopic, topic="le", partitions=(part,))
    resp = client.send(1, version, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                       forgotten_topics_data=(), rack_id="")
    return resp.responses[0].partitions[0]


def list_offsets(client: RawClient, client_epoch: int):  # noqa: ANN201
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsTopic

    resp = client.send(2, 7, replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name="le", partitions=(
        ListOffsetsPartition(partition_index=0, current_leader_epoch=client_epoch, timestamp=-1),)),))
    return resp.topics[0].partitions[0]


def epoch_end(client: RawClient, client_epoch: int, epoch: int):  # noqa: ANN201
    from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderPartition, OffsetForLeaderTopic

    resp = client.send(23, 4, replica_id=-1, topics=(OffsetForLeaderTopic(topic="le", partitions=(
        OffsetForLeaderPartition(partition=0, current_leader_epoch=client_epoch, leader_epoch=epoch),)),))
    return resp.topics[0].partitions[0]


def test_fetch_fences_an_older_epoch_and_refuses_a_newer_one(epoch3):
    with RawClient(epoch3.port) as client:
        for client_epoch in (EPOCH, -1):
            p = fetch(client, 12, client_epoch)
            assert (p.error_code, p.high_watermark) == (E.none, 5) and p.records
        older = fetch(client, 12, EPOCH - 1)
        assert older.error_code == E.fenced_leader_epoch and not older.records
        newer = fetch(client, 12, EPOCH + 1)
        assert newer.error_code == E.unknown_leader_epoch and not newer.records
        assert fetch(client, 8, -1).error_code == E.none  # before v9 there is no epoch to check


def test_list_offsets_checks_the_epoch(epoch3):
    with RawClient(epoch3.port) as client:
        ok = list_offsets(client, EPOCH)
        assert (ok.error_code, ok.offset, ok.leader_epoch) == (E.none, 5, EPOCH)
        assert list_offsets(client, -1).error_code == E.none
        older = list_offsets(client, 0)
        assert (older.error_code, older.offset) == (E.fenced_leader_epoch, -1)
        assert list_offsets(client, EPOCH + 1).error_code == E.unknown_leader_epoch


def test_offset_for_leader_epoch_checks_the_current_epoch(epoch3):
    with RawClient(epoch3.port) as client:
        ok = epoch_end(client, EPOCH, 0)
        assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (E.none, 0, 2)  # epoch 0 ended where 3 began
        assert epoch_end(client, -1, EPOCH).end_offset == 5
        older = epoch_end(client, 1, 0)
        assert (older.error_code, older.end_offset) == (E.fenced_leader_epoch, -1)
        assert epoch_end(client, EPOCH + 1, 0).error_code == E.unknown_leader_epoch

"""A hostile review of transactions through `klog serve`: requests a well-behaved client never
sends, each of which once left a transaction that could never end.

Goal: whatever a transactional producer stages or asks, its transaction commits or aborts whole,
and neither its transactional id nor the consumer group's committed offsets are left stuck.
Method: raw kio requests against an in-process server (tests.serve_helpers.RawClient), the
coordinator's state read from the store.
"""

from __future__ import annotations

from klog.protocol.kafka import E
from tests.serve_helpers import RawClient
from tests.server.test_serve_transactions import TxnCoordinatorState, _end, _init


def _add_offsets(client: RawClient, tid: str, pid: int, epoch: int, group: str) -> E:
    return client.send(25, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group).error_code


def _txn_offset_commit(client: RawClient, tid: str, pid: int, epoch: int, group: str, topic: str,
                       offset: int, metadata: str = "") -> E:
    from kio.schema.txn_offset_commit.v3 import request as toc

    resp = client.send(28, 3, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                       generation_id=-1, member_id="", group_instance_id=None, topics=(toc.TxnOffsetCommitRequestTopic(
                           name=topic, partitions=(toc.TxnOffsetCommitRequestPartition(
                               partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                               committed_metadata=metadata),)),))
    return resp.topics[0].partitions[0].error_code


def _offset_fetch(client: RawClient, group: str, topic: str, stable: bool) -> tuple[E, int]:
    from kio.schema.offset_fetch.v7 import request as of

    got = client.send(9, 7, group_id=group, require_stable=stable,
                      topics=(of.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),))
    p = got.topics[0].partitions[0]
    return p.error_code, int(p.committed_offset)


def test_negative_offset_sent_in_a_transaction_commits_as_offset_commit_stores_it(kafka_server):
    """TxnOffsetCommit of a negative offset (Kafka stores one, as klog's OffsetCommit does): the
    commit completes. It was staged, then refused by the completing write: the transaction stayed
    PrepareCommit for good (the id answered CONCURRENT_TRANSACTIONS to every producer after, and
    OffsetFetch with require_stable UNSTABLE_OFFSET_COMMIT for the group's partition, forever)."""
    kafka_server.store.create_topic("neg")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "neg-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add_offsets(c, "neg-tx", pid, epoch, "neg-g") == E.none
        assert _txn_offset_commit(c, "neg-tx", pid, epoch, "neg-g", "neg", -1) == E.none
        assert _end(c, "neg-tx", pid, epoch, True) == E.none
        assert TxnCoordinatorState.of(kafka_server.store, "neg-tx") == "CompleteCommit"
        assert _offset_fetch(c, "neg-g", "neg", stable=True) == (E.none, -1)
        assert _init(c, "neg-tx").error_code == E.none  # the id goes on


def test_txn_offset_commit_checks_group_id_and_metadata_as_offset_commit_does(kafka_server):
    """TxnOffsetCommit refuses what OffsetCommit refuses: a group id outside klog's rule (a '\\0'
    in it splits the offsets' LMDB keys: "g\\0t" wrote keys in group g's range) with
    INVALID_GROUP_ID, and metadata past offset.metadata.max.bytes (4,096) with
    OFFSET_METADATA_TOO_LARGE, as Kafka does; neither was checked, and both were committed."""
    from klog.meta.groups import GroupsMeta

    kafka_server.store.create_topic("gm")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "gm-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        for group in ("gm-g", "gm-g\0gm"):
            assert _add_offsets(c, "gm-tx", pid, epoch, group) == E.none
        assert _txn_offset_commit(c, "gm-tx", pid, epoch, "gm-g\0gm", "gm", 7) == E.invalid_group_id
        assert _txn_offset_commit(c, "gm-tx", pid, epoch, "gm-g", "gm", 8, "m" * 4097) == E.offset_metadata_too_large
        assert _txn_offset_commit(c, "gm-tx", pid, epoch, "gm-g", "gm", 9, "m" * 4096) == E.none
        assert _end(c, "gm-tx", pid, epoch, True) == E.none
    groups = GroupsMeta(kafka_server.store.meta)
    committed = groups.committed("gm-g")
    assert {tp: (o.offset, len(o.metadata)) for tp, o in committed.items()} == {("gm", 0): (9, 4096)}

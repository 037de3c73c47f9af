"""WriteTxnMarkers (an admin's marker: `kafka-transactions.sh abort`, kafka-python's
abort_transaction, `klog transactions abort --start-offset -b`) refused in a partition the
coordinator's transaction of that producer still names (Ongoing, PrepareCommit, PrepareAbort).

Goal: a marker forced into one partition of a transaction its coordinator runs or is committing
splits it (ABORT here, COMMIT elsewhere: read_committed readers lose its records here, while its
producer was told it committed). Method: klog serve in this process, the wire requests themselves
(RawClient); the refusal asked under the partition's lock, so a client's check-then-write race
cannot get past it."""

from __future__ import annotations

from klog.broker.offsets import last_stable_offset, stable_view
from klog.meta import transactions as tx
from klog.protocol.kafka import E
from tests.serve_helpers import RawClient
from tests.server.test_serve_transactions import _add, _end, _init, _produce_txn, _txn_batch


def _marker(client: RawClient, pid: int, epoch: int, topic: str, partition: int, commit: bool = False) -> E:
    from kio.static.constants import EntityType

    from klog.protocol.schemas import payload_module

    req = payload_module(27, 1, EntityType.request)
    marker = req.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                                   coordinator_epoch=0, topics=(req.WritableTxnMarkerTopic(
                                       name=topic, partition_indexes=(partition,)),))
    [result] = client.send(27, 1, markers=(marker,)).markers
    return E(int(result.topics[0].partitions[0].error_code))


def test_admin_abort_marker_refused_while_the_coordinator_runs_the_transaction(kafka_server):
    store = kafka_server.store
    store.create_topic("sp", 2)
    with RawClient(kafka_server.port) as c:
        r = _init(c, "sp-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add(c, "sp-tx", pid, epoch, "sp", (0, 1)) == {("sp", 0): E.none, ("sp", 1): E.none}
        for p in (0, 1):
            assert _produce_txn(c, "sp-tx", "sp", p, _txn_batch([b"v%d" % p], pid, epoch, 0)) == E.none
        # Ongoing: its producer may still commit
        assert _marker(c, pid, epoch, "sp", 0) == E.transaction_coordinator_fenced
        assert store.partition("sp", 0).high_watermark() == 1  # no marker written
        # PrepareCommit (decided, its markers not yet written: a coordinator mid-commit)
        tx.TransactionsMeta(store.meta).apply("sp-tx", lambda m, _t: (m.transition(tx.PREPARE_COMMIT, m.update_ms),
                                                                        m)[1])
        assert _marker(c, pid, epoch, "sp", 1) == E.transaction_coordinator_fenced
        assert store.partition("sp", 1).high_watermark() == 1
        tx.TransactionsMeta(store.meta).apply("sp-tx", lambda m, _t: (setattr(m, "state", tx.ONGOING), m)[1])
        assert _end(c, "sp-tx", pid, epoch, True) == E.none
        for p in (0, 1):  # committed whole: both records seen by read_committed readers
            part = store.partition("sp", p)
            assert part.high_watermark() == 2 and last_stable_offset(part) == 2
            view, lock = stable_view(part)
            with lock:
                view.refresh(part.high_watermark())
                assert view.aborted_txns == []  # (the refused ABORT would have made [0, 1] one)
        # the transaction's coordinator document gone (a hanging one): the marker is written
        assert _add(c, "sp-tx", pid, epoch, "sp", (0,)) == {("sp", 0): E.none}
        assert _produce_txn(c, "sp-tx", "sp", 0, _txn_batch([b"h"], pid, epoch, 1)) == E.none
        tx.TransactionsMeta(store.meta).apply("sp-tx", lambda m, _t: None)
        assert _marker(c, pid, epoch, "sp", 0) == E.none
        assert last_stable_offset(store.partition("sp", 0)) == 4

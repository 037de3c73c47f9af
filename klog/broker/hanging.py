"""Hanging transactions (KIP-664, `kafka-transactions.sh find-hanging` and `abort --start-offset`).

A transaction is *hanging* in a partition when the partition holds its producer's open transaction
(records, no marker yet) and no coordinator will ever write its marker: the producer's
transactional id is gone, or the coordinator's transaction of that producer id does not name the
partition (it completed without a marker reaching the partition, or a later transaction runs
elsewhere). Until its marker is written every read_committed reader stops at its first record.
Kafka's tool looks only at open transactions whose producer's last batch is older than the
broker's transaction.max.timeout.ms (a younger one may still be ended by its coordinator), and so
does this module: `is_hanging` is the tool's rule (FindHangingTransactionsCommand.
filterHangingTransactions), `find_hanging` and `abort_open` apply it to a local store, and
klog.client.remote.txn_admin to a cluster through DescribeProducers, ListTransactions and
DescribeTransactions.

The abort writes an ABORT marker for the producer in that one partition (WriteTxnMarkers in Kafka,
RawAppender.write_marker here, the coordinator's own way to write one), and refuses a transaction
the coordinator still has ongoing in that partition: its producer or the coordinator's timeout ends
it, and `klog transactions abort TRANSACTIONAL_ID` aborts it there and everywhere else."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.errors import KlogError, UsageError

if TYPE_CHECKING:
    from klog.broker.batches import RawAppender
    from klog.broker.store_protocol import BrokerStore
    from klog.meta.db import MetaDB
    from klog.meta.transactions import TxnMetadata

NO_TXN = -1  # DescribeProducers' start offset (and coordinator epoch) when there is none
MINUTE_MS = 60_000


@dataclass(frozen=True)
class OpenTransaction:
    """One producer's open transaction in one partition, as DescribeProducers shows it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int  # the max timestamp of the producer's last batch there (-1: not known)
    coordinator_epoch: int = NO_TXN

    def age_ms(self, now_ms: int) -> int:
        """How long ago its producer last wrote there (Kafka's tool: now - lastTimestamp); an unknown
        last timestamp counts as old as can be."""
        return now_ms - self.last_timestamp if self.last_timestamp >= 0 else now_ms

    def doc(self, now_ms: int) -> dict:
        return {"topic": self.topic, "partition": self.partition, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "coordinator_epoch": self.coordinator_epoch,
                "start_offset": self.start_offset, "last_timestamp": self.last_timestamp,
                "age_ms": self.age_ms(now_ms)}


def candidates(open_txns: Iterable[OpenTransaction], max_timeout_ms: int, now_ms: int) -> list[OpenTransaction]:
    """The open transactions older than `max_timeout_ms` (Kafka's collectCandidateOpenTransactions)."""
    return [t for t in open_txns if t.age_ms(now_ms) > max_timeout_ms]


def is_hanging(txn: OpenTransaction, coordinator: TxnMetadata | None) -> bool:
    """Kafka's rule: hanging unless the coordinator of the producer id's transactional id (None:
    no transactional id holds that producer id) names the partition in its transaction (it does
    while the transaction is Ongoing or completing, PrepareCommit/PrepareAbort: then it will
    write the marker)."""
    return coordinator is None or (txn.topic, txn.partition) not in coordinator.tps()


def still_ongoing(txn: OpenTransaction, coordinator: TxnMetadata | None) -> str | None:
    """Why the coordinator will end `txn` itself (one line), or None when nothing will."""
    if not names_partition(coordinator, txn.producer_id, txn.topic, txn.partition):
        return None
    assert coordinator is not None
    from klog.meta.transactions import ONGOING

    what = (f"{txn.topic}-{txn.partition}: the transaction of producer id {txn.producer_id} from offset "
            f"{txn.start_offset} is still {coordinator.state} at the coordinator (transactional id "
            f"'{coordinator.transactional_id}')")
    if coordinator.state == ONGOING:
        return (f"{what}: it ends at its commit, abort or timeout; `klog transactions abort "
                f"{coordinator.transactional_id}` aborts it now")
    # decided (its producer's process may have died writing the markers): the coordinator completes it,
    # not `abort TRANSACTIONAL_ID` (which aborts Ongoing transactions only)
    return (f"{what}: decided, its markers are being written; a coordinator completes it (klog serve, or the "
            "store's next transactional producer, once it is 5 s old)")


def names_partition(coordinator: TxnMetadata | None, producer_id: int, topic: str, partition: int) -> bool:
    """Whether `coordinator` (a transactional id's document) runs or is completing a transaction of
    `producer_id` in the partition: then it writes that partition's marker, and a marker anyone else
    writes there would split the transaction (an ABORT here, its COMMIT elsewhere)."""
    return (coordinator is not None and bool(coordinator.partitions) and coordinator.producer_id == producer_id
            and (topic, partition) in coordinator.tps())


def coordinated_by(meta: MetaDB, producer_id: int, topic: str, partition: int) -> TxnMetadata | None:
    """The transactional id document whose transaction of `producer_id` names the partition (see
    names_partition), or None: what refuses a marker from outside the coordinator (WriteTxnMarkers,
    abort --start-offset), asked under the partition's lock."""
    from klog.meta.transactions import TransactionsMeta

    return next((m for m in TransactionsMeta(meta).all() if names_partition(m, producer_id, topic, partition)), None)


# -- on a local store -------------------------------------------------------------------------------
def open_transactions(appender: RawAppender, topic: str, partition: int) -> list[OpenTransaction]:
    """The partition's open transactions (DescribeProducers' answer, the broker's producer state)."""
    return [OpenTransaction(topic, partition, pid, epoch, start, ts)
            for pid, epoch, _seq, start, ts in appender.active_producers(topic, partition) if start != NO_TXN]


def coordinators(store: BrokerStore, producer_ids: Iterable[int]) -> dict[int, TxnMetadata]:
    """The transactional id document holding each producer id (ListTransactions filtered by producer
    id, then DescribeTransactions)."""
    from klog.meta.transactions import TransactionsMeta

    wanted = set(producer_ids)
    if not wanted:
        return {}
    return {m.producer_id: m for m in TransactionsMeta(store.meta).all() if m.producer_id in wanted}


def partitions_to_search(store: BrokerStore, topic: str | None, partition: int | None) -> list[tuple[str, int]]:
    if partition is not None and topic is None:
        raise UsageError("--partition needs --topic")
    names = [topic] if topic is not None else list(store.topic_names())
    out = []
    for name in names:
        count = len(store.topic(name).partitions)
        if partition is not None:
            if not 0 <= partition < count:
                raise UsageError(f"topic '{name}' has no partition {partition} (it has {count})")
            out.append((name, partition))
        else:
            out += [(name, p) for p in range(count)]
    return out


def find_hanging(store: BrokerStore, appender: RawAppender, topic: str | None = None,
                 partition: int | None = None, *, max_timeout_ms: int, now_ms: int) -> list[OpenTransaction]:
    """The hanging transactions of the store's partitions (of `topic`, of its `partition`)."""
    found = []
    for name, p in partitions_to_search(store, topic, partition):
        found += candidates(open_transactions(appender, name, p), max_timeout_ms, now_ms)
    docs = coordinators(store, {t.producer_id for t in found})
    return [t for t in found if is_hanging(t, docs.get(t.producer_id))]


def abort_open(store: BrokerStore, appender: RawAppender, topic: str, partition: int,
               start_offset: int) -> OpenTransaction:
    """ABORT the open transaction starting at `start_offset` in the partition; returns it. A
    UsageError when no open transaction starts there, a KlogError when the coordinator still has
    it ongoing there (see still_ongoing)."""
    from klog.store.txn import ABORT

    partitions_to_search(store, topic, partition)  # (a one-line error for an unknown partition)
    found = [t for t in open_transactions(appender, topic, partition) if t.start_offset == start_offset]
    if not found:
        raise UsageError(f"{topic}-{partition}: no open transaction starts at offset {start_offset} "
                         "(`klog transactions find-hanging` lists them)")
    txn = found[0]
    reason = still_ongoing(txn, coordinators(store, [txn.producer_id]).get(txn.producer_id))
    if reason is not None:
        raise KlogError(reason)
    epoch = txn.producer_epoch if txn.producer_epoch >= 0 else _epoch_at(store, topic, partition, start_offset)

    def still_wanted() -> bool:  # (asked under the partition's lock: the coordinator may have moved)
        return coordinated_by(store.meta, txn.producer_id, topic, partition) is None

    at = appender.write_marker(topic, partition, txn.producer_id, epoch, ABORT, 0, still_wanted,
                               refuse_older_epoch=True)
    if at is None:
        raise KlogError(f"{topic}-{partition}: the transaction of producer id {txn.producer_id} from offset "
                        f"{start_offset} ended meanwhile (or its coordinator took it up again): nothing written")
    return txn


def _epoch_at(store: BrokerStore, topic: str, partition: int, offset: int) -> int:
    """The producer epoch of the batch holding `offset` (the producer state no longer keeps it)."""
    for batch in store.partition(topic, partition).read(offset):
        return max(0, int(batch.header.producer_epoch))
    return 0

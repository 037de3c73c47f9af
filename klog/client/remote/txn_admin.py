"""`klog transactions list|describe|abort|find-hanging` through a cluster, as kafka-transactions.sh
does them: ListTransactions at every broker (each answers for the transactional ids it coordinates)
with DescribeTransactions at the same broker; describe = FindCoordinator(TRANSACTION) +
DescribeTransactions. confluent-kafka's AdminClient has none of these calls: kio's request types
over wire.Connection (so -X security settings are honoured).

The answers are klog.meta.transactions.TxnMetadata, as the local store's, so the CLI prints the same
tables; what a cluster does not say (the consumer groups of a transaction) is empty.

`abort TRANSACTIONAL_ID` goes through the id's coordinator (InitProducerId: its producer fenced, the
transaction aborted in all its partitions), as on the store itself; `abort --start-offset` (a
hanging transaction, no coordinator's) writes the one ABORT marker with WriteTxnMarkers, as
kafka-transactions.sh does, and klog serve refuses it where the coordinator runs the transaction."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from typing import Any

from klog.client.remote import wire
from klog.errors import KlogError, UsageError
from klog.meta.transactions import TxnMetadata
from klog.protocol.errors import error_name
from klog.protocol.loading import load_kio

TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_NOT_FOUND = 53, 105
CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 31, 29
CONCURRENT_TRANSACTIONS, TRANSACTION_COORDINATOR_FENCED = 51, 52
ONGOING = "Ongoing"
NO_TXN = -1  # DescribeProducers' current_txn_start_offset when the producer has none open there


class _Connections(contextlib.ExitStack):
    """One connection per broker address for the length of one admin call."""

    def __init__(self, store) -> None:  # noqa: ANN001 - RemoteStore
        super().__init__()
        self.store, self.security, self.open = store, wire.security(store.target), {}

    def to(self, host: str, port: int) -> wire.Connection:
        if (host, port) not in self.open:
            self.open[(host, port)] = self.enter_context(wire.Connection(host, port, self.store.timeout, self.security))
        return self.open[(host, port)]


@functools.cache
def _describe_response() -> type:
    """kio's DescribeTransactionsResponse v0 with the start time read as the int64 it is on the wire:
    Kafka sends -1 for an id with no transaction open, which kio's datetime field refuses."""
    from kio.schema.describe_transactions.v0 import response
    from kio.static.primitive import i64

    state = _variant(response.TransactionState, "transaction_start_time", i64, {"kafka_type": "int64"})
    base = response.DescribeTransactionsResponse
    states = next(f for f in dataclasses.fields(base) if f.name == "transaction_states")
    return _variant(base, "transaction_states", tuple[state, ...], states.metadata)


def _variant(base: type, name: str, kind: Any, metadata: Any) -> type:
    """A copy of kio's generated dataclass `base` with field `name` of another type (kio reads a
    dataclass by its fields' types and kafka_type metadata)."""
    spec = []
    for f in dataclasses.fields(base):
        extra = {} if f.default is dataclasses.MISSING else {"default": f.default}
        kind_f, meta_f = (kind, metadata) if f.name == name else (f.type, f.metadata)
        spec.append((f.name, kind_f, dataclasses.field(metadata=meta_f, **extra)))
    namespace = {k: getattr(base, k) for k in ("__type__", "__version__", "__flexible__", "__api_key__",
                                               "__header_schema__")}
    return dataclasses.make_dataclass(base.__name__, spec, namespace=namespace, frozen=True, slots=True,
                                      kw_only=True)


def _meta(state: Any) -> TxnMetadata:
    return TxnMetadata(
        transactional_id=str(state.transactional_id), producer_id=int(state.producer_id),
        producer_epoch=int(state.producer_epoch), timeout_ms=int(state.transaction_timeout.total_seconds() * 1000),
        state=str(state.transaction_state), start_ms=int(state.transaction_start_time),
        partitions=sorted([str(t.topic), int(p)] for t in state.topics for p in t.partitions))


def _describe_at(conn: wire.Connection, ids: list[str], label: str) -> list[TxnMetadata]:
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

    answer = conn.call(DescribeTransactionsRequest(transactional_ids=tuple(ids)), _describe_response())
    out = []
    for state in answer.transaction_states:
        code, tid = int(state.error_code), str(state.transactional_id)
        if code == TRANSACTIONAL_ID_NOT_FOUND:
            raise UsageError(f"no transactional id '{tid}' at {label}")
        if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise KlogError(f"transactional id '{tid}': not authorized to describe it at {label} "
                            "(Describe on the TransactionalId)")
        if code:
            error = _Retriable if code in wire.RETRIABLE else KlogError
            raise error(f"cannot describe transactional id '{tid}' at {label}: {error_name(code)}")
        out.append(_meta(state))
    return out


def list_transactions(store) -> list[TxnMetadata]:  # noqa: ANN001 - RemoteStore
    """Every transactional id the cluster's brokers coordinate (that the principal may Describe)."""
    load_kio()
    from kio.schema.list_transactions.v0.request import ListTransactionsRequest
    from kio.schema.list_transactions.v0.response import ListTransactionsResponse

    brokers = store._metadata(None).brokers
    out: list[TxnMetadata] = []
    with _Connections(store) as conns:
        for broker in sorted(brokers.values(), key=lambda b: b.id):
            conn = conns.to(broker.host, broker.port)
            listed = conn.call(ListTransactionsRequest(), ListTransactionsResponse)
            if int(listed.error_code):
                raise KlogError(f"cannot list transactions at Kafka broker {conn.address}: "
                                f"{error_name(int(listed.error_code))}")
            ids = [str(s.transactional_id) for s in listed.transaction_states]
            if ids:  # the broker that lists an id coordinates it: described there
                out += _describe_at(conn, ids, store.target.label)
    return sorted(out, key=lambda m: m.transactional_id)


def describe_transaction(store, transactional_id: str) -> TxnMetadata:  # noqa: ANN001 - RemoteStore
    """At the id's coordinator; asked again (within the cluster timeout) when the coordinator moved
    or is loading its state."""
    load_kio()
    deadline = time.monotonic() + store.timeout
    while True:
        host, port = wire.find_coordinator(store.target, transactional_id, store.timeout, wire.TRANSACTION)
        try:
            with _Connections(store) as conns:
                return _describe_at(conns.to(host, port), [transactional_id], store.target.label)[0]
        except _Retriable:
            if time.monotonic() > deadline:
                raise KlogError(f"cannot describe transactional id '{transactional_id}' at {store.target.label}: "
                                f"its coordinator did not settle within {store.timeout:g} s") from None
            time.sleep(wire.RETRY_PAUSE_S)


class _Retriable(KlogError):
    """The coordinator moved or is loading: ask again."""


def abort_transaction(store, transactional_id: str) -> bool:  # noqa: ANN001 - RemoteStore
    """Abort the id's ongoing transaction at its coordinator, as on the store itself: InitProducerId
    with the id (what a new incarnation of its producer sends) fences the producer's epoch and has
    the coordinator abort the transaction in all its partitions (PrepareAbort, the markers,
    CompleteAbort), then the coordinator's state is awaited. Markers written from here instead
    (WriteTxnMarkers) would leave the coordinator's transaction Ongoing: its producer's commit
    then committed the other partitions and not these (split), or klog serve refuses them. Needs
    Write on the TransactionalId. False when it has none open (not Ongoing)."""
    meta = describe_transaction(store, transactional_id)
    if meta.state != ONGOING or not meta.partitions:
        return False
    load_kio()
    from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
    from kio.schema.init_producer_id.v1.response import InitProducerIdResponse
    from kio.static.primitive import i32Timedelta

    request = InitProducerIdRequest(transactional_id=transactional_id,
                                    transaction_timeout=i32Timedelta.parse(_timedelta_ms(meta.timeout_ms)))
    deadline = time.monotonic() + store.timeout
    while True:
        host, port = wire.find_coordinator(store.target, transactional_id, store.timeout, wire.TRANSACTION)
        with _Connections(store) as conns:
            code = int(conns.to(host, port).call(request, InitProducerIdResponse).error_code)
        if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise KlogError(f"transactional id '{transactional_id}': not authorized to abort its transaction at "
                            f"{store.target.label} (Write on the TransactionalId)")
        if code == 0:  # it ended meanwhile (its producer is fenced all the same)
            return False
        if code == CONCURRENT_TRANSACTIONS:  # aborting (or completing what its producer decided)
            break
        if code not in wire.RETRIABLE or time.monotonic() > deadline:
            raise KlogError(f"cannot abort transactional id '{transactional_id}' at {store.target.label}: "
                            f"{error_name(code)}")
        time.sleep(wire.RETRY_PAUSE_S)
    while True:  # the coordinator writes the markers (at once in klog serve, in the background in Kafka)
        now = describe_transaction(store, transactional_id)
        if now.state == "CompleteCommit":  # its producer's EndTxn came first: that decision stands
            raise KlogError(f"transactional id '{transactional_id}': its producer committed the transaction "
                            "meanwhile: nothing aborted")
        if now.state not in (ONGOING, "PrepareAbort", "PrepareCommit", "PrepareEpochFence"):
            return True
        if time.monotonic() > deadline:
            raise KlogError(f"transactional id '{transactional_id}': its coordinator at {store.target.label} "
                            f"did not complete the abort within {store.timeout:g} s ({now.state})")
        time.sleep(wire.RETRY_PAUSE_S)


def _timedelta_ms(ms: int):  # noqa: ANN202 - datetime.timedelta
    import datetime

    return datetime.timedelta(milliseconds=ms)


def _by_topic(tps: list[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in tps:
        out.setdefault(topic, []).append(partition)
    return out


def _partition_error(tp: str, code: int, doing: str) -> KlogError:
    if code == TOPIC_AUTHORIZATION_FAILED:
        return KlogError(f"partition {tp}: not authorized to {doing} (Read on the topic)")
    if code == CLUSTER_AUTHORIZATION_FAILED:
        return KlogError(f"partition {tp}: not authorized to {doing} (ClusterAction on the cluster)")
    if code == TRANSACTION_COORDINATOR_FENCED:  # (klog serve: its coordinator runs that transaction there)
        return KlogError(f"partition {tp}: cannot {doing}: TRANSACTION_COORDINATOR_FENCED (the coordinator still "
                         "runs the producer's transaction there, or a newer coordinator took it over)")
    return KlogError(f"partition {tp}: cannot {doing}: {error_name(code)}")


def _write_abort(conn: wire.Connection, producer_id: int, epoch: int, coordinator_epoch: int,
                 tps: list[tuple[str, int]]) -> int:
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )
    from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
    from kio.static.primitive import i16, i32, i64

    marker = WritableTxnMarker(
        producer_id=i64(producer_id), producer_epoch=i16(epoch), transaction_result=False,
        coordinator_epoch=i32(coordinator_epoch),
        topics=tuple(WritableTxnMarkerTopic(name=t, partition_indexes=tuple(i32(p) for p in ps))
                     for t, ps in _by_topic(tps).items()))
    answer = conn.call(WriteTxnMarkersRequest(markers=(marker,)), WriteTxnMarkersResponse)
    for result in answer.markers:
        for topic in result.topics:
            for part in topic.partitions:
                if int(part.error_code):
                    raise _partition_error(f"{topic.name}-{part.partition_index}", int(part.error_code),
                                           "write its ABORT marker")
    return len(tps)


# -- hanging transactions (kafka-transactions.sh find-hanging, abort --start-offset) ---------------------
FIND_HANGING_TIMEOUT_MS = 15 * 60_000  # the tool's --max-transaction-timeout default (15 minutes)
DESCRIBE_PRODUCERS_BATCH = 500  # partitions per DescribeProducers request (the tool's MAX_BATCH_SIZE)


def _producers_at(conn: wire.Connection, tps: list[tuple[str, int]]) -> list:
    """DescribeProducers at one leader: the open transactions of its partitions `tps`
    (klog.broker.hanging.OpenTransaction each)."""
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
    from kio.schema.describe_producers.v0.response import DescribeProducersResponse
    from kio.static.primitive import i32

    from klog.broker.hanging import OpenTransaction

    out = []
    for at in range(0, len(tps), DESCRIBE_PRODUCERS_BATCH):  # (as the tool: no giant request to one broker)
        chunk = tps[at:at + DESCRIBE_PRODUCERS_BATCH]
        request = DescribeProducersRequest(topics=tuple(
            TopicRequest(name=t, partition_indexes=tuple(i32(p) for p in ps)) for t, ps in _by_topic(chunk).items()))
        answer = conn.call(request, DescribeProducersResponse)
        for topic in answer.topics:
            for part in topic.partitions:
                tp = (str(topic.name), int(part.partition_index))
                if int(part.error_code):
                    raise _partition_error(f"{tp[0]}-{tp[1]}", int(part.error_code), "describe its producers")
                out += [OpenTransaction(tp[0], tp[1], int(s.producer_id), int(s.producer_epoch),
                                        int(s.current_txn_start_offset), int(s.last_timestamp),
                                        int(s.coordinator_epoch))
                        for s in part.active_producers if int(s.current_txn_start_offset) != NO_TXN]
    return out


def _leaders(store, topic: str | None, partition: int | None) -> dict[tuple[str, int], list[tuple[str, int]]]:  # noqa: ANN001
    """(host, port) of each leader -> the partitions to search there."""
    if partition is not None and topic is None:
        raise UsageError("--partition needs --topic")
    out: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for name in [topic] if topic is not None else store.topic_names():
        leaders = store.leaders(name)
        if partition is not None and partition not in leaders:
            raise UsageError(f"topic '{name}' has no partition {partition} (it has {len(leaders)})")
        for p, leader in sorted(leaders.items()):
            if partition is not None and p != partition:
                continue
            if leader is None:
                raise KlogError(f"partition {name}-{p} has no leader at {store.target.label}")
            out.setdefault((leader[1], leader[2]), []).append((name, p))
    return out


def _coordinators_of(store, conns: _Connections, producer_ids: set[int]) -> dict[int, TxnMetadata]:  # noqa: ANN001
    """ListTransactions filtered by producer id at every broker, then DescribeTransactions there:
    the transactional id state holding each producer id (as the tool's lookupTransactionalIds)."""
    from kio.schema.list_transactions.v0.request import ListTransactionsRequest
    from kio.schema.list_transactions.v0.response import ListTransactionsResponse
    from kio.static.primitive import i64

    if not producer_ids:
        return {}
    out: dict[int, TxnMetadata] = {}
    for broker in sorted(store._metadata(None).brokers.values(), key=lambda b: b.id):
        conn = conns.to(broker.host, broker.port)
        listed = conn.call(ListTransactionsRequest(state_filters=(), producer_id_filters=tuple(
            i64(p) for p in sorted(producer_ids))), ListTransactionsResponse)
        if int(listed.error_code):
            raise KlogError(f"cannot list transactions at Kafka broker {conn.address}: "
                            f"{error_name(int(listed.error_code))}")
        ids = [str(s.transactional_id) for s in listed.transaction_states if int(s.producer_id) in producer_ids]
        if ids:
            out.update({m.producer_id: m for m in _describe_at(conn, ids, store.target.label)})
    return out


def find_hanging_transactions(store, topic: str | None = None, partition: int | None = None,  # noqa: ANN001
                              max_timeout_ms: int | None = None) -> list:
    """kafka-transactions.sh find-hanging: DescribeProducers at the leaders, the open transactions
    older than `max_timeout_ms` (15 minutes by default, as the tool's), kept when no coordinator names
    their partition (klog.broker.hanging.is_hanging)."""
    from klog.broker.hanging import candidates, is_hanging

    load_kio()
    limit = FIND_HANGING_TIMEOUT_MS if max_timeout_ms is None else max_timeout_ms
    with _Connections(store) as conns:
        found = []
        for (host, port), tps in _leaders(store, topic, partition).items():
            found += candidates(_producers_at(conns.to(host, port), tps), limit, int(time.time() * 1000))
        docs = _coordinators_of(store, conns, {t.producer_id for t in found})
    return [t for t in found if is_hanging(t, docs.get(t.producer_id))]


def abort_open_transaction(store, topic: str, partition: int, start_offset: int):  # noqa: ANN001, ANN201
    """kafka-transactions.sh abort --start-offset: the producer whose open transaction in the
    partition starts there (DescribeProducers), refused when its coordinator still has it ongoing
    there, else WriteTxnMarkers(ABORT) to the leader; returns it (an OpenTransaction)."""
    from klog.broker.hanging import still_ongoing

    load_kio()
    [(host, port)] = list(_leaders(store, topic, partition))  # (one partition: one leader)
    with _Connections(store) as conns:
        conn = conns.to(host, port)
        found = [t for t in _producers_at(conn, [(topic, partition)]) if t.start_offset == start_offset]
        if not found:
            raise UsageError(f"{topic}-{partition}: no open transaction starts at offset {start_offset} "
                             "(`klog transactions find-hanging` lists them)")
        txn = found[0]
        reason = still_ongoing(txn, _coordinators_of(store, conns, {txn.producer_id}).get(txn.producer_id))
        if reason is not None:
            raise KlogError(reason)
        # Kafka's TransactionsCommand: an unknown coordinator epoch (-1) is sent as 0
        _write_abort(conn, txn.producer_id, txn.producer_epoch, max(0, txn.coordinator_epoch), [(topic, partition)])
    return txn

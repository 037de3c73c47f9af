"""The transaction APIs of `klog serve` (KIP-98/447/890): InitProducerId with a transactional id,
AddPartitionsToTxn (v0-4, v4's verify-only form included), AddOffsetsToTxn, TxnOffsetCommit and
EndTxn, answered by the store's transaction coordinator (klog.broker.txn_coordinator), which keeps
its state in LMDB and writes the markers. The server runs its timer: abandoned transactions are
aborted after their transaction.timeout.ms, and a Prepare* left by a crash is completed.

ACLs as Kafka checks them: Write on the TransactionalId for every call, Write on each topic added,
Read on the group (AddOffsetsToTxn, TxnOffsetCommit) and on each topic committed; AddPartitionsToTxn
v4 is a broker's call (ClusterAction on the cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from klog.errors import KlogError, TxnStateError
from klog.protocol.kafka import NO_THROTTLE, E, make, response_for
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.server.groups import OFFSET_METADATA_MAX
from klog.server.groups import _valid_group as valid_group_id
from klog.server.limits import CLIENT_SHARE_DEFAULT, AddressShares, share_of
from klog.store.names import INTERNAL_TOPICS

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 24, 25, 26, 27, 28
CLUSTER = "kafka-cluster"
# The transactional ids one principal may bring into being (in this server's run, while they last):
# each is an LMDB document (up to ~2.5 KB) kept transactional.id.expiration.ms (7 days) once idle,
# and every timer pass reads them all (measured: 50,000 ids, 106 MiB of LMDB and a 1.2-1.8 s pass).
# One client made ~450 a second: in an hour 1.6 million, most of the store's 4 GiB LMDB (whose
# filling fails every principal's commits, group changes and transactions) and passes longer than
# their 10 s interval. Real producers reuse one id per instance (Kafka Streams: per thread or task);
# Kafka's KIP-936 proposes throttling new producer ids per user for the same reason. A principal
# (share key) past its share of this pool (10,000 at the default quarter) is answered
# COORDINATOR_NOT_AVAILABLE (the producer retries).
TRANSACTIONAL_IDS_POOL = 40_000
PRINCIPAL_TRANSACTIONAL_IDS_MAX = share_of(TRANSACTIONAL_IDS_POOL, CLIENT_SHARE_DEFAULT)
# A full pool is checked for ids gone (expired after transactional.id.expiration.ms, days) at most this
# often: the check reads every id of every share key, and where each address is a share key, 40,000
# of them took one thread hop each (0.3 s of the server's time for 5,000 keys) for every refused
# InitProducerId of a new id.
POOL_CHECK_S = 5.0
TRANSACTIONAL_IDS = "transactional ids"  # the pool's name in AddressShares
log = logging.getLogger("klog.serve")


# -- the server's coordinator and its timer ------------------------------------------------------------
class TransactionService:
    """The coordinator `klog serve` shares between connections, and its timer task."""

    def __init__(self, store: Any, appender: Any, executor: Any, *, clock: Any = None,
                 max_timeout_ms: int | None = None, cleanup_interval_ms: int | None = None,
                 principal_ids_max: int = PRINCIPAL_TRANSACTIONAL_IDS_MAX,
                 ids_max: int = TRANSACTIONAL_IDS_POOL, addresses: AddressShares | None = None) -> None:
        from klog.broker.producer_ids import new_producer_id
        from klog.broker.txn_coordinator import CLEANUP_INTERVAL, CLEANUP_INTERVAL_MS_DEFAULT, TxnCoordinator, _setting

        kwargs: dict[str, Any] = {"warn": lambda m: log.warning("%s", m)}
        if clock is not None:
            kwargs["clock"] = clock
        self.coordinator = TxnCoordinator(store, appender, new_producer_id, max_timeout_ms=max_timeout_ms, **kwargs)
        self.executor = executor
        self.interval_ms = cleanup_interval_ms or _setting(store, CLEANUP_INTERVAL, CLEANUP_INTERVAL_MS_DEFAULT)
        self._task: asyncio.Task | None = None
        self.principal_ids_max = principal_ids_max
        # every principal's together: where clients do not authenticate each address is a principal
        # (share key), and clients from ever new addresses would otherwise each bring a share
        self.ids_max = ids_max
        # every unauthenticated client's together: the pool less one share where some listener authenticates
        self.addresses = addresses or AddressShares()
        # principal -> the transactional ids its InitProducerId created in this run (those found gone,
        # expired or removed, are dropped when it reaches the bound)
        self.created: dict[str, set[str]] = {}
        self.created_total = 0  # the ids in `created`, every share key's together
        self._pool_checked = float("-inf")  # (time.monotonic) when a full pool was last checked for ids gone

    async def admit(self, ctx: RequestContext, tid: str) -> str | None:
        """None if the caller may InitProducerId `tid`; else why not. An id that does not exist yet
        counts in the caller's PRINCIPAL_TRANSACTIONAL_IDS_MAX and in the pool of every caller. `tid`:
        a valid one (init_transactional_producer checked it)."""
        key = ctx.share_key
        mine = self.created.get(key, set())
        if tid in mine or await ctx.run_blocking(self._exists, tid):
            return None
        if len(mine) >= self.principal_ids_max:
            await self._forget_gone(ctx, {key: mine})
            if len(mine) >= self.principal_ids_max:
                return f"{key} created {len(mine)} transactional ids that still exist, at most " \
                       f"{self.principal_ids_max}"
        if self._pool_refusal(key) is not None and time.monotonic() - self._pool_checked >= POOL_CHECK_S:
            self._pool_checked = time.monotonic()
            await self._forget_gone(ctx, dict(self.created))
        if tid in self.created.get(key, mine):  # (the same new id admitted twice at once is counted once)
            return None
        refusal = self._pool_refusal(key)
        if refusal is not None:
            return refusal
        self.created.setdefault(key, mine).add(tid)
        self.created_total += 1
        self.addresses.add(TRANSACTIONAL_IDS, key, 1)
        return None

    async def _forget_gone(self, ctx: RequestContext, id_sets: dict[str, set[str]]) -> None:
        """Drop from `id_sets` (share key -> its set of `created`) the ids no longer in the store
        (expired, removed), read in one pass, and the share keys left with none."""
        gone = set(await ctx.run_blocking(self._gone, [tid for ids in id_sets.values() for tid in ids]))
        for key, ids in id_sets.items():
            before = len(ids)
            ids.difference_update(gone)
            self.created_total -= before - len(ids)
            self.addresses.add(TRANSACTIONAL_IDS, key, len(ids) - before)
        self.created = {k: ids for k, ids in self.created.items() if ids}

    def _pool_refusal(self, key: str) -> str | None:
        """Why `key` may not create one more id for the pool: every client's ids, or (where some listener
        authenticates) every unauthenticated client's together; None if it may."""
        if self.created_total >= self.ids_max:
            return f"every client created {self.created_total} transactional ids that still exist, at most " \
                   f"{self.ids_max}"
        return self.addresses.refusal(TRANSACTIONAL_IDS, key, 1, self.ids_max, self.principal_ids_max)

    def _exists(self, tid: str) -> bool:
        return self.coordinator.meta.get(tid) is not None

    def _gone(self, tids: list[str]) -> list[str]:
        meta = self.coordinator.meta
        if meta.DB not in meta.db.dbs:  # (a store without the db has no ids)
            return list(tids)
        with meta.db.txn() as txn:  # one read transaction, the documents left unparsed
            return [tid for tid in tids if meta.db.get_raw(txn, meta.DB, tid) is None]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        first = True
        while True:
            try:
                work = self.coordinator.recover if first else self.coordinator.tick
                for line in await loop.run_in_executor(self.executor, work):
                    log.info("%s", line)
                first = False
            except Exception as e:  # noqa: BLE001 - the next pass tries again; serving goes on
                log.warning("transaction coordinator timer: %s: %s", type(e).__name__, e)
            await asyncio.sleep(self.interval_ms / 1000)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _coordinator(ctx: RequestContext) -> Any:
    service = getattr(ctx.server, "transactions", None)
    return None if service is None else service.coordinator


def _error(e: BaseException, version: int, fenced_from: int) -> E:
    """Kafka's code for what the coordinator raised; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to
    clients older than `fenced_from` (the version that added it)."""
    if isinstance(e, TxnStateError):
        code = E[e.code]
        if code is E.producer_fenced and version < fenced_from:
            return E.invalid_producer_epoch
        return code
    return E.coordinator_not_available  # LMDB trouble: the client retries


async def _call(ctx: RequestContext, fn: Any, *args: Any, fenced_from: int) -> tuple[E, Any]:
    try:
        return E.none, await ctx.run_blocking(fn, *args)
    except (TxnStateError, KlogError, OSError) as e:
        code = _error(e, ctx.api_version, fenced_from)
        if not isinstance(e, TxnStateError):
            ctx.log.warning("transaction request from %s (client %s): %s", ctx.client_host, ctx.client_id, e)
        return code, None


# -- InitProducerId (the transactional half; producers.py delegates here) ---------------------------------
async def init_transactional_producer(ctx: RequestContext, request: Any) -> Any:
    from klog.errors import UsageError
    from klog.meta.transactions import validate_transactional_id

    mod = response_for(request)
    tid = str(request.transactional_id)

    def reply(error: E, pid: int = -1, epoch: int = -1) -> Any:
        return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=error,
                    producer_id=pid, producer_epoch=epoch)

    coord = _coordinator(ctx)
    if coord is None:
        return reply(E.coordinator_not_available)
    if not ctx.authorize("WRITE", "TRANSACTIONAL_ID", tid):
        return reply(E.transactional_id_authorization_failed)
    pid, epoch = int(getattr(request, "producer_id", -1)), int(getattr(request, "producer_epoch", -1))
    if (pid < 0) != (epoch < 0):
        return reply(E.invalid_request)
    try:
        validate_transactional_id(tid)
    except UsageError as e:  # (Kafka: INVALID_REQUEST for an empty one; COORDINATOR_NOT_AVAILABLE had it retried)
        ctx.log.info("InitProducerId from %s: INVALID_REQUEST (%s)", ctx.client_host, e)
        return reply(E.invalid_request)
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    try:
        refusal = await ctx.server.transactions.admit(ctx, tid)
    except (KlogError, OSError) as e:
        refusal = f"cannot read the transactional ids: {e}"
    if refusal is not None:
        ctx.log.info("InitProducerId for transactional id %r from %s: COORDINATOR_NOT_AVAILABLE (%s)", tid[:64],
                     ctx.client_host, refusal)
        return reply(E.coordinator_not_available)
    error, result = await _call(ctx, coord.init_producer_id, tid, timeout_ms, None if pid < 0 else (pid, epoch),
                                fenced_from=4)
    if error is not E.none:
        ctx.log.info("InitProducerId for transactional id %r from %s: %s", tid, ctx.client_host, error.name)
        return reply(error)
    return reply(E.none, result.producer_id, result.epoch)


# -- AddPartitionsToTxn --------------------------------------------------------------------------------
def _partition_counts(ctx: RequestContext, topics: set[str]) -> dict[str, int]:
    """Each topic's partition count (0: no such topic), in one thread hop for the request: one hop
    per partition made an AddPartitionsToTxn of 19,000 partitions cost 1.5 s."""
    store = ctx.store
    counts = {}
    for topic in topics:
        try:
            counts[topic] = store.partition_count(topic) if store.has_topic(topic) else 0
        except (KlogError, OSError):
            counts[topic] = 0
    return counts


async def _add_partitions_one(ctx: RequestContext, coord: Any, tid: str, pid: int, epoch: int, topics: Any,
                              verify_only: bool) -> dict[tuple[str, int], E]:
    """One transaction's partitions -> their error codes (Kafka's rules: any partition refused
    leaves the others OPERATION_NOT_ATTEMPTED)."""
    wanted = [(str(t.name), int(p)) for t in topics for p in t.partitions]
    if not ctx.authorize("WRITE", "TRANSACTIONAL_ID", tid):
        return {tp: E.transactional_id_authorization_failed for tp in wanted}
    bad: dict[tuple[str, int], E] = {}
    # Kafka's KafkaApis: a client's (v0-v3) internal topics are left out of the topics it may write, whatever its
    # ACLs (no client's transaction spans __consumer_offsets: its coordinator's own AddOffsetsToTxn names it)
    writable = {t: not (ctx.api_version < 4 and t in INTERNAL_TOPICS) and ctx.authorize("WRITE", "TOPIC", t)
                for t in {t for t, _ in wanted}}
    counts = await ctx.run_blocking(_partition_counts, ctx, {t for t, ok in writable.items() if ok})
    for topic, p in wanted:
        if not writable[topic]:
            bad[(topic, p)] = E.topic_authorization_failed
        elif not 0 <= p < counts[topic]:
            bad[(topic, p)] = E.unknown_topic_or_partition
    if bad:
        return {tp: bad.get(tp, E.operation_not_attempted) for tp in wanted}
    if verify_only:
        error, found = await _call(ctx, coord.verify_partitions, tid, pid, epoch, wanted, fenced_from=2)
        if error is not E.none:
            return {tp: error for tp in wanted}
        return {tp: E[code] for tp, code in found.items()}
    error, _ = await _call(ctx, coord.add_partitions, tid, pid, epoch, wanted, fenced_from=2)
    return {tp: error for tp in wanted}


def _topic_results(mod: Any, results: dict[tuple[str, int], E]) -> tuple:
    by_topic: dict[str, list] = {}
    for (topic, p), code in results.items():
        by_topic.setdefault(topic, []).append(make(mod.AddPartitionsToTxnPartitionResult, partition_index=p,
                                                   partition_error_code=code))
    return tuple(make(mod.AddPartitionsToTxnTopicResult, name=t, results_by_partition=tuple(parts))
                 for t, parts in by_topic.items())


@register(ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    coord = _coordinator(ctx)
    if ctx.api_version >= 4:  # a broker's batch of transactions (KIP-890), verify-only or not
        if not ctx.authorize("CLUSTER_ACTION", "CLUSTER", CLUSTER):
            return make(mod.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                        error_code=E.cluster_authorization_failed, results_by_transaction=())
        out = []
        for t in request.transactions:
            if coord is None:
                results = {(str(x.name), int(p)): E.coordinator_not_available for x in t.topics for p in x.partitions}
            else:
                results = await _add_partitions_one(ctx, coord, str(t.transactional_id), int(t.producer_id),
                                                    int(t.producer_epoch), t.topics, bool(t.verify_only))
            out.append(make(mod.AddPartitionsToTxnResult, transactional_id=t.transactional_id,
                            topic_results=_topic_results(mod, results)))
        return make(mod.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, error_code=E.none,
                    results_by_transaction=tuple(out))
    topics = request.v3_and_below_topics
    if coord is None:
        results = {(str(x.name), int(p)): E.coordinator_not_available for x in topics for p in x.partitions}
    else:
        results = await _add_partitions_one(ctx, coord, str(request.v3_and_below_transactional_id),
                                            int(request.v3_and_below_producer_id),
                                            int(request.v3_and_below_producer_epoch), topics, False)
    return make(mod.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=_topic_results(mod, results))


# -- AddOffsetsToTxn / EndTxn ------------------------------------------------------------------------
@register(ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    tid, group = str(request.transactional_id), str(request.group_id)
    coord = _coordinator(ctx)
    if coord is None:
        error = E.coordinator_not_available
    elif not ctx.authorize("WRITE", "TRANSACTIONAL_ID", tid):
        error = E.transactional_id_authorization_failed
    elif not ctx.authorize("READ", "GROUP", group):
        error = E.group_authorization_failed
    elif not valid_group_id(group):
        # as TxnOffsetCommit answers for it (1-255 printable characters): a group no offset can be
        # committed to, and a name of megabytes kept in the id's document, rewritten at every
        # request of the transaction (LMDB's one writer held) and parsed at every timer pass
        error = E.invalid_group_id
    else:
        error, _ = await _call(ctx, coord.add_offsets, tid, int(request.producer_id), int(request.producer_epoch),
                               group, fenced_from=2)
        if error is E.unknown_server_error:
            ctx.log.info("AddOffsetsToTxn of group %r for transactional id %r from %s: UNKNOWN_SERVER_ERROR (its "
                         "transaction has the most consumer groups one may have)", group[:64], tid[:64],
                         ctx.client_host)
    return make(mod.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=error)


@register(END_TXN, 0, 4)
async def end_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    tid = str(request.transactional_id)
    coord = _coordinator(ctx)
    if coord is None:
        error = E.coordinator_not_available
    elif not ctx.authorize("WRITE", "TRANSACTIONAL_ID", tid):
        error = E.transactional_id_authorization_failed
    else:
        error, touched = await _call(ctx, coord.end_txn, tid, int(request.producer_id),
                                     int(request.producer_epoch), bool(request.committed), fenced_from=2)
        for topic, partition in touched or ():
            ctx.server.notify_appended(topic, partition)  # read_committed fetchers wait for the LSO to move
    if error is not E.none:
        ctx.log.info("EndTxn(%s) for transactional id %r from %s: %s",
                     "commit" if request.committed else "abort", tid, ctx.client_host, error.name)
    return make(mod.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=error)


# -- WriteTxnMarkers ------------------------------------------------------------------------------------
class _Coordinated(Exception):  # noqa: N818 - control flow: the coordinator runs the transaction there
    pass


def _write_marker(ctx: RequestContext, topic: str, partition: int, producer_id: int, epoch: int, commit: bool,
                  coordinator_epoch: int) -> E:
    """One partition's marker. Every WriteTxnMarkers klog serve receives is an admin's (its own
    coordinator writes its markers itself): refused, TRANSACTION_COORDINATOR_FENCED, in a partition
    the coordinator's transaction of that producer still names (Ongoing or Prepare*), asked under
    the partition's lock: that transaction's own marker comes from its coordinator, and one forced
    in here would split it (ABORT here, COMMIT elsewhere). Kafka leaves that to the tool's user."""
    from klog.broker.hanging import coordinated_by
    from klog.errors import InvalidProducerEpochError, InvalidTopicError, UnknownPartitionError, UnknownTopicError
    from klog.store.txn import ABORT, COMMIT

    def still_wanted() -> bool:
        holder = coordinated_by(ctx.store.meta, producer_id, topic, partition)
        if holder is not None:
            raise _Coordinated(f"WriteTxnMarkers {topic}-{partition}: refused, the transaction of producer id "
                               f"{producer_id} there is {holder.state} at this coordinator (transactional id "
                               f"{holder.transactional_id!r}); its coordinator writes its marker")
        return True

    try:
        ctx.server.appender.write_marker(topic, partition, producer_id, epoch, COMMIT if commit else ABORT,
                                         coordinator_epoch, still_wanted, refuse_older_epoch=True)
    except _Coordinated as e:
        ctx.log.warning("%s", e)
        return E.transaction_coordinator_fenced
    except (UnknownTopicError, UnknownPartitionError, InvalidTopicError):  # (invalid: nothing to log per partition)
        return E.unknown_topic_or_partition
    except InvalidProducerEpochError:
        return E.invalid_producer_epoch
    except (KlogError, OSError) as e:
        ctx.log.warning("WriteTxnMarkers %s-%d: %s", topic, partition, e)
        return E.kafka_storage_error
    return E.none


@register(WRITE_TXN_MARKERS, 0, 1)
async def write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """A transaction coordinator's markers (broker to broker in Kafka): each partition where the
    producer has a transaction open gets its COMMIT/ABORT marker, once (a repeat writes nothing)."""
    mod = response_for(request)
    # Kafka 3.9's KafkaApis: Alter on the cluster, else ClusterAction
    allowed = ctx.authorize("ALTER", "CLUSTER", CLUSTER) or ctx.authorize("CLUSTER_ACTION", "CLUSTER", CLUSTER)
    out = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                error = E.cluster_authorization_failed if not allowed else await ctx.run_blocking(
                    _write_marker, ctx, str(t.name), int(p), int(m.producer_id), int(m.producer_epoch),
                    bool(m.transaction_result), int(m.coordinator_epoch))
                if error is E.none:
                    ctx.server.notify_appended(str(t.name), int(p))  # read_committed fetchers: the LSO moved
                parts.append(make(mod.WritableTxnMarkerPartitionResult, partition_index=p, error_code=error))
            topics.append(make(mod.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(parts)))
        out.append(make(mod.WritableTxnMarkerResult, producer_id=m.producer_id, topics=tuple(topics)))
    return make(mod.WriteTxnMarkersResponse, markers=tuple(out))


# -- TxnOffsetCommit ------------------------------------------------------------------------------------
@register(TXN_OFFSET_COMMIT, 0, 4)
async def txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    tid, group = str(request.transactional_id), str(request.group_id)
    coord = _coordinator(ctx)
    wanted = [(str(t.name), p) for t in request.topics for p in t.partitions]
    error = E.none
    if coord is None:
        error = E.coordinator_not_available
    elif not ctx.authorize("WRITE", "TRANSACTIONAL_ID", tid):
        error = E.transactional_id_authorization_failed
    elif not ctx.authorize("READ", "GROUP", group):
        error = E.group_authorization_failed
    elif not valid_group_id(group):  # as OffsetCommit: the offsets' LMDB keys rely on it ('\0' splits them)
        error = E.invalid_group_id
    elif getattr(request, "member_id", "") and ctx.coordinator is not None:  # v3: the member's generation (KIP-447)
        error = ctx.coordinator.machine.check_commit(group, int(request.generation_id), str(request.member_id),
                                                     getattr(request, "group_instance_id", None))
    results: dict[tuple[str, int], E] = {}
    offsets: dict[tuple[str, int], tuple[int, str]] = {}
    readable = {t: ctx.authorize("READ", "TOPIC", t) for t in {t for t, _ in wanted}} if error is E.none else {}
    counts = await ctx.run_blocking(_partition_counts, ctx, {t for t, ok in readable.items() if ok}) if readable else {}
    for topic, p in wanted:
        tp = (topic, int(p.partition_index))
        if error is not E.none:
            results[tp] = error
        elif not readable[topic]:
            results[tp] = E.topic_authorization_failed
        elif not 0 <= tp[1] < counts[topic]:
            results[tp] = E.unknown_topic_or_partition
        elif len((p.committed_metadata or "").encode()) > OFFSET_METADATA_MAX:  # Kafka's check, as OffsetCommit's
            results[tp] = E.offset_metadata_too_large
        else:
            offsets[tp] = (int(p.committed_offset), p.committed_metadata or "")
    if offsets and ctx.coordinator is not None:  # (staged now, stored at the commit: counted now)
        try:
            refusal = await ctx.run_blocking(ctx.coordinator.admit_offsets, ctx.share_key, group, offsets)
        except (KlogError, OSError) as e:
            refusal = f"cannot read the group's offsets: {e}"
        if refusal is not None:
            ctx.log.info("TxnOffsetCommit to group %r for transactional id %r from %s: COORDINATOR_NOT_AVAILABLE "
                         "(%s)", group[:64], tid[:64], ctx.client_host, refusal)
            results.update({tp: E.coordinator_not_available for tp in offsets})
            offsets = {}
    if offsets:
        code, _ = await _call(ctx, coord.txn_offset_commit, tid, int(request.producer_id),
                              int(request.producer_epoch), group, offsets, fenced_from=2)
        results.update({tp: code for tp in offsets})
    by_topic: dict[str, list] = {}
    for (topic, p), code in results.items():
        by_topic.setdefault(topic, []).append(make(mod.TxnOffsetCommitResponsePartition, partition_index=p,
                                                   error_code=code))
    return make(mod.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(mod.TxnOffsetCommitResponseTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))


# -- DescribeTransactions / ListTransactions / DescribeProducers (kafka-transactions.sh) -----------------
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


def _datetime(ms: int) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC) + datetime.timedelta(milliseconds=ms % 1000)


def _describable_transactions(ctx: RequestContext) -> list[Any]:
    """The documents of the ids the caller may Describe, in a thread: each id authorized by its key
    first, only those parsed. On the event loop, a ListTransactions at the pool's 40,000 ids
    authorized each there (ApiVersions of another client waited 0.5 s) and parsed them all."""
    import json

    from klog.meta.transactions import TransactionsMeta, TxnMetadata

    meta = TransactionsMeta(ctx.store.meta)
    with meta.db.txn() as txn:
        raws = [(tid, raw) for tid, raw in meta.db.items_raw(txn, meta.DB) if not tid.startswith("\0")]
    return [TxnMetadata.from_doc(json.loads(raw)) for tid, raw in raws
            if ctx.authorize("DESCRIBE", "TRANSACTIONAL_ID", tid)]


def _some_transactions(ctx: RequestContext, tids: list[str]) -> dict[str, Any]:
    """The documents of `tids` (None: no such id), each read alone: a DescribeTransactions of one id
    read and parsed every id's (1.4-3 s at the pool's 40,000, for anyone who asked)."""
    from klog.errors import UsageError
    from klog.meta.transactions import TransactionsMeta, validate_transactional_id

    meta = TransactionsMeta(ctx.store.meta)
    out: dict[str, Any] = {}
    for tid in tids:
        try:
            validate_transactional_id(tid)  # (the store's own key, '\0coordinator-epoch', is none)
        except UsageError:
            out[tid] = None
            continue
        out[tid] = meta.get(tid)
    return out


@register(DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    allowed = {str(t) for t in request.transactional_ids if ctx.authorize("DESCRIBE", "TRANSACTIONAL_ID", str(t))}
    try:
        known = await ctx.run_blocking(_some_transactions, ctx, sorted(allowed))
    except (KlogError, OSError):
        known = None
    states = []
    for tid in request.transactional_ids:
        meta = None
        if str(tid) not in allowed:
            error = E.transactional_id_authorization_failed
        elif known is None:
            error = E.coordinator_not_available
        else:
            meta = known.get(str(tid))
            error = E.none if meta is not None else E.transactional_id_not_found
        if meta is None:  # (start time 0, not Kafka's -1: clients ignore an errored entry's fields, and
            # kio-based ones cannot read a negative time)
            states.append(make(mod.TransactionState, error_code=error, transactional_id=tid, transaction_state="",
                               transaction_timeout=i32ms(0), transaction_start_time=_datetime(0), producer_id=-1,
                               producer_epoch=-1, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in meta.tps():
            by_topic.setdefault(t, []).append(p)
        # Kafka names only the topics the caller may Describe: Describe on an id is not on its topics
        by_topic = {t: ps for t, ps in by_topic.items() if ctx.authorize("DESCRIBE", "TOPIC", t)}
        states.append(make(
            mod.TransactionState, error_code=error, transactional_id=tid, transaction_state=meta.state,
            transaction_timeout=i32ms(meta.timeout_ms), transaction_start_time=_datetime(meta.start_ms),
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=tuple(make(mod.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    return make(mod.DescribeTransactionsResponse, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def i32ms(ms: int) -> Any:
    import datetime

    from kio.static.primitive import i32Timedelta

    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


@register(LIST_TRANSACTIONS, 0, 1)
async def list_transactions(ctx: RequestContext, request: Any) -> Any:
    from klog.meta.transactions import VALID_PREVIOUS

    mod = response_for(request)
    wanted_states = {str(s) for s in request.state_filters}
    wanted_pids = {int(p) for p in request.producer_id_filters}
    # v1 (KIP-994): only transactions running longer than this, as Kafka 3.9 filters (-1: all)
    duration = int(getattr(request, "duration_filter", -1))
    coord = _coordinator(ctx)
    now = coord.clock() if coord is not None and hasattr(coord, "clock") else int(time.time() * 1000)
    try:
        metas = await ctx.run_blocking(_describable_transactions, ctx)
        error = E.none
    except (KlogError, OSError):
        metas, error = [], E.coordinator_not_available
    listed = tuple(make(mod.TransactionState, transactional_id=m.transactional_id, producer_id=m.producer_id,
                        transaction_state=m.state)
                   for m in metas
                   if (not wanted_states or m.state in wanted_states)
                   and (not wanted_pids or m.producer_id in wanted_pids)
                   and (duration < 0 or now - m.start_ms > duration))
    return make(mod.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error,
                unknown_state_filters=tuple(s for s in wanted_states if s not in VALID_PREVIOUS),
                transaction_states=listed)


@register(DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, request: Any) -> Any:
    from klog.errors import UnknownPartitionError, UnknownTopicError
    from klog.store.names import validate_topic_name

    mod = response_for(request)
    topics = []
    for t in request.topics:
        topic = str(t.name)
        try:  # Kafka's checkValidTopic, before the ACLs: INVALID_TOPIC_EXCEPTION, not a retriable storage error
            validate_topic_name(topic)
            invalid = None
        except KlogError as e:
            invalid = str(e)
        parts = []
        for p in t.partition_indexes:
            producers: list = []
            error, message = E.none, None
            if invalid is not None:
                error, message = E.invalid_topic_exception, invalid
            elif not ctx.authorize("READ", "TOPIC", topic):
                error = E.topic_authorization_failed
            else:
                try:
                    producers = await ctx.run_blocking(ctx.server.appender.active_producers, topic, int(p))
                except (UnknownTopicError, UnknownPartitionError):
                    error = E.unknown_topic_or_partition
                except (KlogError, OSError) as e:
                    error, message = E.kafka_storage_error, str(e)
            parts.append(make(mod.PartitionResponse, partition_index=p, error_code=error, error_message=message,
                              active_producers=tuple(make(
                                  mod.ProducerState, producer_id=pid, producer_epoch=epoch, last_sequence=seq,
                                  last_timestamp=ts, coordinator_epoch=-1, current_txn_start_offset=start)
                                  for pid, epoch, seq, start, ts in producers)))
        topics.append(make(mod.TopicResponse, name=topic, partitions=tuple(parts)))
    return make(mod.DescribeProducersResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))

"""The transaction coordinator (Kafka's TransactionCoordinator): the state in LMDB
(klog.meta.transactions), the markers in the partitions (RawAppender.write_marker).

Every request is one LMDB write transaction over the transactional id's document, durable before
the caller answers; ending a transaction is three steps, each safe to repeat:
1. the document moves to PrepareCommit/PrepareAbort (durable: from here the outcome is decided),
2. a COMMIT/ABORT marker goes to each partition of the transaction that still holds the producer's
   open transaction (checked under the partition's lock: written once per partition),
3. the document moves to CompleteCommit/CompleteAbort, and at commit the offsets staged by
   TxnOffsetCommit become the group's committed offsets, in the same LMDB write.
A crash between the steps leaves a Prepare* document, which `recover()` (run by `klog serve` at
start and on every timer pass) finishes. `tick()` also aborts transactions open longer than their
transaction.timeout.ms, bumping the epoch so the abandoned producer is fenced.

Time comes from `clock` (epoch ms), so tests drive timeouts without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.meta import transactions as tx
from klog.meta.groups import GroupsMeta
from klog.meta.transactions import TP, TransactionsMeta, TxnMetadata, TxnStateError

if TYPE_CHECKING:
    from klog.broker.batches import RawAppender
    from klog.broker.store_protocol import BrokerStore

TRANSACTION_MAX_TIMEOUT = "transaction.max.timeout.ms"
CLEANUP_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
CLEANUP_INTERVAL_MS_DEFAULT = 10_000  # Kafka's default
ID_EXPIRATION = "transactional.id.expiration.ms"
PREPARE_STALE_MS = 5_000  # a Prepare* document not completed for this long is completed by whoever sees it
# The consumer groups one transaction may add (AddOffsetsToTxn). Kafka keeps them as their
# __consumer_offsets partitions (50 by default), so its transaction state cannot grow by group;
# here each is a name (up to 255 characters) in the id's LMDB document, rewritten whole at every
# request: one client added 4,000 groups to one transaction, a 1 MB document whose writes held
# LMDB's one writer 15 ms each (every client's commits wait for it), and 10,000 ids of such
# documents would fill LMDB. Exactly-once applications send one group's offsets per transaction.
TXN_GROUPS_MAX = 50
# The highest producer id a transactional id was given, kept in the transactions db (not a valid
# transactional id): ids come from the clock and a per-process counter (klog.broker.producer_ids),
# so two processes of one store (klog serve, the library, `klog produce`) could hand the same id to
# two transactional ids in one millisecond; then one's marker ended the other's transaction in a
# partition both wrote, its ABORT was never written, and read_committed readers saw its aborted
# records. Taken in the same LMDB write as the id's document, the next one is always above it.
PRODUCER_ID_FLOOR_KEY = "\0last-producer-id"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int


class TxnCoordinator:
    """Thread-safe (every step is an LMDB transaction or holds a partition's lock); any number of
    these, in any processes, may serve the same store."""

    def __init__(self, store: BrokerStore, appender: RawAppender, new_pid: Callable[[], int] | None = None, *,
                 clock: Callable[[], int] = now_ms, max_timeout_ms: int | None = None,
                 id_expiration_ms: int | None = None, warn: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.appender = appender
        if new_pid is None:
            from klog.broker.producer_ids import new_producer_id as new_pid
        self.new_pid = new_pid
        self.clock = clock
        self.meta = TransactionsMeta(store.meta)
        self.groups = GroupsMeta(store.meta)
        self.max_timeout_ms = max_timeout_ms if max_timeout_ms is not None else _setting(
            store, TRANSACTION_MAX_TIMEOUT, tx.MAX_TIMEOUT_MS_DEFAULT)
        self.id_expiration_ms = id_expiration_ms if id_expiration_ms is not None else _setting(
            store, ID_EXPIRATION, tx.ID_EXPIRATION_MS_DEFAULT)
        self.warn = warn or (lambda _m: None)
        self.coordinator_epoch = self.meta.next_coordinator_epoch()

    # -- the client's requests ----------------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None = None
                         ) -> ProducerIdAndEpoch:
        """InitProducerId: the id and epoch to use; TxnStateError(CONCURRENT_TRANSACTIONS) after
        aborting an older incarnation's transaction (the client retries)."""
        tx.validate_transactional_id(tid)
        now = self.clock()
        saved = self.meta.apply(tid, lambda meta, txn: tx.init_producer(
            meta, tid, timeout_ms, expected, now, lambda: self._unique_pid(txn), self.max_timeout_ms,
            self.coordinator_epoch))
        assert saved is not None
        if saved.state == tx.PREPARE_ABORT:  # the previous incarnation's transaction, fenced
            self._finish(saved)
            raise TxnStateError(tx.CONCURRENT, f"transactional id '{tid}': the previous producer's transaction "
                                               "was aborted; retry")
        return ProducerIdAndEpoch(saved.producer_id, saved.producer_epoch)

    def add_partitions(self, tid: str, producer_id: int, epoch: int, tps: list[TP]) -> None:
        now = self.clock()
        self._change(tid, lambda meta: tx.add_partitions(meta, producer_id, epoch, tps, now))

    def verify_partitions(self, tid: str, producer_id: int, epoch: int, tps: list[TP]) -> dict[TP, str]:
        return tx.verify_partitions(self.meta.get(tid), producer_id, epoch, tps)

    def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str) -> None:
        """AddOffsetsToTxn; past TXN_GROUPS_MAX groups, TxnStateError(UNKNOWN_SERVER_ERROR): what
        Kafka answers for a transaction whose state outgrows its log's message size (the
        transaction is abortable, nothing is added). An empty group id, or one holding '\0', is a
        UsageError: its offsets, committed, made an LMDB key read with another group's offsets ('\0'
        splits them: "g\0x" in group g's range), and every read of that group's offsets failed.
        (`klog serve` refuses every id outside klog's rule, INVALID_GROUP_ID; the library takes
        longer ones, as the Spark sink's group named after a long transactional id.)"""
        _check_group(group)
        now = self.clock()

        def change(meta: TxnMetadata | None) -> bool:
            added = tx.add_group(meta, producer_id, epoch, group, now)
            if added and meta is not None and len(meta.groups) > TXN_GROUPS_MAX:
                raise TxnStateError("unknown_server_error", f"transactional id '{tid}': its transaction has "
                                                            f"{TXN_GROUPS_MAX} consumer groups, at most")
            return added

        self._change(tid, change)

    def txn_offset_commit(self, tid: str, producer_id: int, epoch: int, group: str,
                          offsets: dict[TP, tuple[int, str]]) -> None:
        _check_group(group)  # (as add_offsets)
        now = self.clock()
        self._change(tid, lambda meta: tx.stage_offsets(meta, producer_id, epoch, group, offsets, now) or True)

    def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> list[TP]:
        """EndTxn: returns (the partitions marked) once the markers are written and the outcome is
        durable."""
        now = self.clock()
        moved: list[bool] = []

        def change(meta: TxnMetadata | None) -> bool:
            moved.append(tx.end_transaction(meta, producer_id, epoch, commit, now))
            return moved[-1]

        saved = self._change(tid, change)
        if moved and moved[-1] and saved is not None:
            self._finish(saved)
            return saved.tps()
        return []

    def check_append(self, tid: str, producer_id: int, epoch: int, tp: TP) -> None:
        """A transactional batch may be appended to `tp` only while its transaction is ongoing and
        has added it (asked under the partition's lock, by RawAppender.append)."""
        from klog.errors import InvalidProducerEpochError, InvalidTxnStateError

        meta = self.meta.get(tid)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidTxnStateError(f"producer id {producer_id} does not hold transactional id '{tid}'")
        if epoch != meta.producer_epoch:
            raise InvalidProducerEpochError(f"transactional id '{tid}': epoch {epoch} is fenced by "
                                            f"{meta.producer_epoch}")
        if meta.state != tx.ONGOING or list(tp) not in meta.partitions:
            raise InvalidTxnStateError(f"transactional id '{tid}' has not added {tp[0]}-{tp[1]} to an ongoing "
                                       f"transaction ({meta.state})")

    # -- admin and timers ----------------------------------------------------------------------------
    def abort(self, tid: str, *, expired: TxnMetadata | None = None) -> bool:
        """Abort the ongoing transaction of `tid` (fencing its producer), as the timeout does; False
        if it has none. `expired`: the timer's snapshot of the id, whose transaction was past its
        timeout: aborted only if it is still that transaction (the same producer id, epoch and
        start), and still past its timeout. A timer pass reads every id first and then aborts one
        after another, so its snapshot may be seconds old: the producer may have committed the
        expired transaction and begun a new one meanwhile, which was aborted (and the producer
        fenced) within its own timeout."""
        now = self.clock()

        def change(meta: TxnMetadata | None, _txn: object) -> TxnMetadata | None:
            if meta is None or meta.state != tx.ONGOING:
                return meta
            if expired is not None and (
                    (meta.producer_id, meta.producer_epoch, meta.start_ms)
                    != (expired.producer_id, expired.producer_epoch, expired.start_ms) or not meta.expired(now)):
                return meta
            tx.fence_and_abort(meta, now, self.coordinator_epoch)
            return meta

        saved = self.meta.apply(tid, change)
        if saved is None or saved.state != tx.PREPARE_ABORT:
            return False
        self._finish(saved)
        return True

    def tick(self) -> list[str]:
        """One timer pass: abort transactions past their timeout and finish Prepare* documents left
        by a crash; returns what it did, one line each."""
        done = []
        now = self.clock()
        for meta in self.meta.all():
            try:
                if meta.expired(now) and self.abort(meta.transactional_id, expired=meta):
                    done.append(f"transactional id '{meta.transactional_id}': aborted after "
                                f"transaction.timeout.ms={meta.timeout_ms} (producer epoch fenced)")
                elif meta.state in tx.PREPARING and now - meta.update_ms >= PREPARE_STALE_MS:
                    self._finish(meta)
                    done.append(f"transactional id '{meta.transactional_id}': completed its {meta.state}")
                elif meta.idle_expired(now, self.id_expiration_ms) and self._expire(meta.transactional_id, now):
                    done.append(f"transactional id '{meta.transactional_id}': expired after "
                                f"transactional.id.expiration.ms={self.id_expiration_ms} idle (producer id "
                                f"{meta.producer_id} forgotten)")
            except Exception as e:  # noqa: BLE001 - one id's trouble must not stop the others' timeouts
                self.warn(f"transactional id '{meta.transactional_id}': {type(e).__name__}: {e}")
        return done

    def _expire(self, tid: str, now: int) -> bool:
        """Forget an idle transactional id (its document, so its producer id and epoch): a later
        producer of the id starts anew, and one still holding the old producer id is refused
        (INVALID_PRODUCER_ID_MAPPING), as in Kafka. Checked again inside the write: an id taken up
        meanwhile stays."""
        def change(meta: TxnMetadata | None, _txn: object) -> TxnMetadata | None:
            if meta is None or not meta.idle_expired(now, self.id_expiration_ms):
                raise _Unchanged(meta)
            return None

        try:
            self.meta.apply(tid, change)
        except _Unchanged:
            return False
        return True

    def recover(self) -> list[str]:
        """At start: finish every Prepare* document (a crash between deciding and completing). One
        that fails (a partition that cannot take its marker) is warned about and left to tick()'s
        later passes: raising stopped the others, and klog serve's timer, which retries recover()
        until it passes, then never ran tick() (no timeout aborted anything)."""
        done = []
        for meta in self.meta.all():
            if meta.state not in tx.PREPARING:
                continue
            try:
                self._finish(meta)
            except Exception as e:  # noqa: BLE001 - one id's trouble must not stop the others, as in tick()
                self.warn(f"transactional id '{meta.transactional_id}': {meta.state} not completed: "
                          f"{type(e).__name__}: {e}")
                continue
            done.append(f"transactional id '{meta.transactional_id}': completed its {meta.state} after a restart")
        return done

    # -- internals -------------------------------------------------------------------------------------
    def _unique_pid(self, txn: object) -> int:
        """A producer id no other transactional id of the store was given, in the LMDB write `txn`
        (LMDB has one writer at a time, across processes): new_pid()'s, or one above the highest
        given (the same millisecond in another process, or a clock set back)."""
        db, name = self.meta.db, self.meta.DB
        last = db.get_json(txn, name, PRODUCER_ID_FLOOR_KEY)
        pid = self.new_pid()
        if isinstance(last, int) and pid <= last:
            pid = last + 1
        db.put_json(txn, name, PRODUCER_ID_FLOOR_KEY, pid)
        return pid

    def _change(self, tid: str, change: Callable[[TxnMetadata | None], bool]) -> TxnMetadata | None:
        """Apply `change` (True: it altered the document) in one LMDB write; unchanged documents are
        not rewritten."""
        def apply(meta: TxnMetadata | None, _txn: object) -> TxnMetadata | None:
            if change(meta):
                return meta
            raise _Unchanged(meta)

        try:
            return self.meta.apply(tid, apply)
        except _Unchanged as same:
            return same.meta

    def _finish(self, meta: TxnMetadata) -> None:
        """Steps 2 and 3: the markers, then Complete* (with the staged offsets at commit)."""
        from klog.store.txn import ABORT, COMMIT

        commit = meta.state == tx.PREPARE_COMMIT
        kind = COMMIT if commit else ABORT
        tid, pid, epoch = meta.transactional_id, meta.producer_id, meta.producer_epoch
        # which transaction: a Prepare* document keeps the time it was decided (update_ms) until it is
        # completed. Without it, a timer pass's seconds-old look at a stale PrepareCommit, completed
        # meanwhile by another, took the producer's next transaction (same id, epoch and state) for it:
        # it marked the old partitions, completed the new transaction's document, and the new one's
        # own completion then found it no longer wanted: its other partitions never got their
        # markers (open for good, read_committed readers held there, its records never seen)
        which = (meta.state, pid, epoch, meta.update_ms)

        def same(doc: TxnMetadata | None) -> bool:
            return doc is not None and (doc.state, doc.producer_id, doc.producer_epoch, doc.update_ms) == which

        def still_wanted() -> bool:
            return same(self.meta.get(tid))

        failed: Exception | None = None
        ended: dict[str, list[int]] = {}  # (TxnMetadata.ended: what proves a lost marker's outcome)
        for topic, partition in meta.tps():
            try:
                first = self._open_start(topic, partition, pid)
                at = self.appender.write_marker(topic, partition, pid, epoch, kind, meta.coordinator_epoch,
                                                still_wanted)
                if at is not None and first is not None and first < at:
                    ended[tx.tp_key((topic, partition))] = [first, at]
            except Exception as e:
                from klog.errors import UnknownPartitionError, UnknownTopicError

                if not isinstance(e, UnknownTopicError | UnknownPartitionError):
                    # the others' markers first (Kafka writes each partition's on its own): one failing
                    # partition must not hold every later one's read_committed readers
                    failed = failed or e
                    continue
                self.warn(f"transactional id '{tid}': {topic}-{partition} is gone; no marker written")
        if failed is not None:
            raise failed  # the document stays Prepare*: the next pass tries again
        now = self.clock()

        def change(current: TxnMetadata | None, txn: object) -> TxnMetadata | None:
            if not same(current):
                raise _Unchanged(current)  # completed by someone else meanwhile
            if commit:
                for group, staged in current.offsets.items():
                    offsets = {tx.key_tp(k): (int(v[0]), str(v[1] or "")) for k, v in staged.items()}
                    self.groups.write_offsets(txn, group, offsets, now)
            tx.complete(current, now, ended)
            return current

        try:
            self.meta.apply(tid, change)
        except _Unchanged:
            pass


    def _open_start(self, topic: str, partition: int, producer_id: int) -> int | None:
        """Where the producer's open transaction in the partition began (the read_committed view's),
        asked before its marker: the marker is the only thing that moves it (the transaction's
        batches were acknowledged before EndTxn, and no later transaction of the producer begins
        while this one's document is Prepare*)."""
        from klog.broker.offsets import stable_view

        part = self.appender.partition(topic, partition, refresh=False)  # (write_marker checks the topic next)
        view, view_lock = stable_view(part)
        with view_lock:
            view.refresh(part.high_watermark())
            return view.first_open_offset(producer_id)


class _Unchanged(Exception):  # noqa: N818 - control flow inside one LMDB transaction (aborts it: nothing to write)
    def __init__(self, meta: TxnMetadata | None) -> None:
        self.meta = meta


def _check_group(group: str) -> None:
    if not group or "\0" in group:
        from klog.errors import UsageError

        raise UsageError(f"invalid group id {group!r}: it must be non-empty and hold no NUL character")


def _setting(store: BrokerStore, name: str, default: int) -> int:
    """A whole-millisecond store default from klog.json (Kafka's broker setting), or `default`."""
    try:
        text = store.data_dir.default(name)
    except Exception:  # noqa: BLE001 - no such default
        return default
    try:
        value = int(text)
    except (TypeError, ValueError):
        return default
    return value if value > 0 else default

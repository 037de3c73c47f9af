"""Kafka's transaction coordinator state (KIP-98), as a pure state machine over LMDB documents.

One document per transactional id (db `transactions`): the producer id and epoch it holds, the
state, the partitions and consumer groups in the ongoing transaction, the offsets committed in it
(TxnOffsetCommit, made visible at commit), its timeout and start time. Every change is one LMDB
write transaction (load, apply, save), durable before the caller answers: any number of processes
(`klog serve`, the Python API, `klog transactions abort`) share one coordinator and one fencing.

Why LMDB rather than Kafka's `__transaction_state` topic: the store's group offsets, topics and
ACLs already live there, an update is atomic across processes (LMDB serializes writers), and
TxnOffsetCommit's offsets are made visible in the same write that completes the commit.

The states and legal transitions are Kafka's (TransactionState.validPreviousStates); time is
given by the caller (`now`, epoch ms), so tests drive timeouts without sleeping. Errors are the
names of Kafka's error codes (kio's ErrorCode members).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from klog.errors import TxnStateError, UsageError
from klog.meta.db import MetaDB

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Empty", "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT, PREPARE_EPOCH_FENCE, DEAD = (
    "CompleteCommit", "CompleteAbort", "PrepareEpochFence", "Dead")
VALID_PREVIOUS = {
    EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE},
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
    PREPARE_EPOCH_FENCE: {ONGOING},
    DEAD: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
}
PREPARING = (PREPARE_COMMIT, PREPARE_ABORT)

EPOCH_MAX = 32767  # Short.MaxValue: an epoch this high is exhausted and the id rotates (KIP-360)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
TRANSACTION_TIMEOUT_MS_DEFAULT = 60_000  # the producers' transaction.timeout.ms default
MAX_TIMEOUT_MS_DEFAULT = 900_000  # the broker's transaction.max.timeout.ms default
ID_EXPIRATION_MS_DEFAULT = 604_800_000  # the broker's transactional.id.expiration.ms default (7 days)
TRANSACTIONAL_ID_CHARS_MAX = 249 * 4  # bounded so its LMDB key needs no shortening

# Kafka's error names (kio ErrorCode members)
NONE = "none"
CONCURRENT = "concurrent_transactions"
FENCED = "producer_fenced"
INVALID_MAPPING = "invalid_producer_id_mapping"
INVALID_STATE = "invalid_txn_state"
INVALID_TIMEOUT = "invalid_transaction_timeout"

TP = tuple[str, int]


def tp_key(tp: TP) -> str:
    return f"{tp[0]}:{tp[1]}"  # ':' cannot occur in a topic name


def key_tp(key: str) -> TP:
    topic, _, p = key.rpartition(":")
    return topic, int(p)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: list[list] = field(default_factory=list)  # [[topic, partition], ...] sorted
    groups: list[str] = field(default_factory=list)  # consumer groups added (AddOffsetsToTxn)
    offsets: dict[str, dict[str, list]] = field(default_factory=dict)  # group -> tp key -> [offset, metadata]
    start_ms: int = -1  # when the ongoing transaction began
    update_ms: int = 0
    coordinator_epoch: int = 0  # of the coordinator that last moved it (written in its markers)
    # the completed transaction's markers this coordinator wrote: tp key -> [the transaction's first
    # offset there, its marker's offset]. What proves, when a marker is lost with damaged bytes
    # (verify --discard-damaged), that the outcome here is that transaction's and not a later one's
    # of the same producer id and epoch (KIP-890 part 1 keeps the epoch across transactions)
    ended: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def from_doc(cls, doc: dict) -> TxnMetadata:
        """A stored document, fields a later klog added left out (a store written by a newer klog
        stays readable: every loader goes through here, none with **doc)."""
        return cls(**{k: v for k, v in doc.items() if k in _TXN_FIELDS})

    def tps(self) -> list[TP]:
        return [(t, int(p)) for t, p in self.partitions]

    def transition(self, new_state: str, now: int) -> None:
        """Kafka's TransactionMetadata.prepareTransitionTo check: IllegalStateException there, here
        INVALID_TXN_STATE naming both states."""
        if self.state not in VALID_PREVIOUS[new_state]:
            raise TxnStateError(INVALID_STATE, f"transactional id '{self.transactional_id}': cannot go from "
                                               f"{self.state} to {new_state}")
        self.state = new_state
        self.update_ms = now

    def clear_transaction(self) -> None:
        self.partitions, self.groups, self.offsets, self.start_ms, self.ended = [], [], {}, -1, {}

    def expired(self, now: int) -> bool:
        return self.state == ONGOING and self.start_ms >= 0 and now > self.start_ms + self.timeout_ms

    def idle_expired(self, now: int, expiration_ms: int) -> bool:
        """Kafka's removeExpiredTransactionalIds condition: no transaction open or ending, and no
        change for transactional.id.expiration.ms."""
        return self.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and self.update_ms <= now - expiration_ms


# -- the pure transitions (Kafka's TransactionCoordinator handlers) ------------------------------------
_TXN_FIELDS = frozenset(TxnMetadata.__dataclass_fields__)


def _check_producer(meta: TxnMetadata | None, producer_id: int, epoch: int) -> TxnMetadata:
    if meta is None or meta.producer_id != producer_id:
        raise TxnStateError(INVALID_MAPPING, "the producer id does not match the transactional id's "
                                             f"({'none' if meta is None else meta.producer_id})")
    if meta.producer_epoch != epoch:
        raise TxnStateError(FENCED, f"transactional id '{meta.transactional_id}': epoch {epoch} is fenced by "
                                    f"epoch {meta.producer_epoch}")
    return meta


def _fence_epoch(meta: TxnMetadata) -> None:
    """Kafka's prepareFenceProducerEpoch: one epoch up (never past Short.MaxValue), the id kept."""
    meta.last_producer_epoch = NO_PRODUCER_EPOCH
    meta.producer_epoch = min(meta.producer_epoch + 1, EPOCH_MAX)


def init_producer(meta: TxnMetadata | None, tid: str, timeout_ms: int, expected: tuple[int, int] | None,
                  now: int, new_pid: Callable[[], int], max_timeout_ms: int, coordinator_epoch: int) -> TxnMetadata:
    """InitProducerId with a transactional id (Kafka's prepareInitProducerIdTransit). `expected`:
    the (producer id, epoch) a KIP-360 producer resumes from, None for a fresh start. Returns the
    document to save: Empty with the next epoch, or (an ongoing transaction of an older incarnation)
    PrepareAbort with that epoch fenced, which the caller completes and answers
    CONCURRENT_TRANSACTIONS for (the client retries and gets the epoch after)."""
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        raise TxnStateError(INVALID_TIMEOUT, f"transaction.timeout.ms {timeout_ms} is outside 1.."
                                             f"{max_timeout_ms} (the store's transaction.max.timeout.ms)")
    if meta is None:
        return TxnMetadata(tid, new_pid(), 0, timeout_ms, update_ms=now, coordinator_epoch=coordinator_epoch)
    if expected is not None:
        pid, epoch = expected
        valid = (meta.producer_epoch == NO_PRODUCER_EPOCH or pid == meta.producer_id
                 or (pid == meta.last_producer_id and epoch >= EPOCH_MAX - 1))
        if not valid:
            raise TxnStateError(FENCED, f"transactional id '{tid}' is now held by producer id {meta.producer_id}")
    if meta.state in PREPARING:
        raise TxnStateError(CONCURRENT, f"transactional id '{tid}' is completing a transaction ({meta.state})")
    meta.coordinator_epoch = coordinator_epoch
    if meta.state == ONGOING:
        # an older incarnation's transaction: fence its epoch and abort it first (Kafka's PrepareEpochFence)
        meta.transition(PREPARE_EPOCH_FENCE, now)
        _fence_epoch(meta)
        meta.transition(PREPARE_ABORT, now)
        return meta
    if meta.producer_epoch >= EPOCH_MAX - 1 and (expected is None or expected[1] == meta.producer_epoch):
        # the epochs of this id are used up: a new producer id (KIP-360's rotation)
        meta.last_producer_id = meta.producer_id
        meta.last_producer_epoch = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        meta.producer_id, meta.producer_epoch = new_pid(), 0
    elif expected is None:
        meta.producer_epoch, meta.last_producer_epoch = meta.producer_epoch + 1, NO_PRODUCER_EPOCH
    elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
        meta.producer_epoch, meta.last_producer_epoch = meta.producer_epoch + 1, meta.producer_epoch
    elif expected[1] != meta.last_producer_epoch:  # (equal: a retry whose answer was lost, the same epoch again)
        raise TxnStateError(FENCED, f"transactional id '{tid}': epoch {expected[1]} is fenced by "
                                    f"epoch {meta.producer_epoch}")
    meta.timeout_ms = timeout_ms
    meta.transition(EMPTY, now)
    meta.clear_transaction()
    return meta


def add_partitions(meta: TxnMetadata | None, producer_id: int, epoch: int, tps: list[TP], now: int) -> bool:
    """AddPartitionsToTxn; True if the document changed (False: all were in already)."""
    meta = _check_producer(meta, producer_id, epoch)
    if meta.state in PREPARING:
        raise TxnStateError(CONCURRENT, f"transactional id '{meta.transactional_id}' is completing a transaction")
    have = set(meta.tps())
    if meta.state == ONGOING and all(tp in have for tp in tps):
        return False
    if meta.state != ONGOING:
        meta.clear_transaction()
        have = set()
        meta.start_ms = now
    meta.transition(ONGOING, now)
    meta.partitions = [list(tp) for tp in sorted(have | set(tps))]
    return True


def verify_partitions(meta: TxnMetadata | None, producer_id: int, epoch: int, tps: list[TP]) -> dict[TP, str]:
    """AddPartitionsToTxn v4's verify-only form (KIP-890): each partition's error."""
    meta = _check_producer(meta, producer_id, epoch)
    if meta.state in PREPARING:
        raise TxnStateError(CONCURRENT, f"transactional id '{meta.transactional_id}' is completing a transaction")
    have = set(meta.tps()) if meta.state == ONGOING else set()
    return {tp: NONE if tp in have else INVALID_STATE for tp in tps}


def add_group(meta: TxnMetadata | None, producer_id: int, epoch: int, group: str, now: int) -> bool:
    """AddOffsetsToTxn: Kafka adds the group's __consumer_offsets partition; here the group."""
    meta = _check_producer(meta, producer_id, epoch)
    if meta.state in PREPARING:
        raise TxnStateError(CONCURRENT, f"transactional id '{meta.transactional_id}' is completing a transaction")
    if meta.state == ONGOING and group in meta.groups:
        return False
    if meta.state != ONGOING:
        meta.clear_transaction()
        meta.start_ms = now
    meta.transition(ONGOING, now)
    meta.groups = sorted(set(meta.groups) | {group})
    return True


def stage_offsets(meta: TxnMetadata | None, producer_id: int, epoch: int, group: str,
                  offsets: dict[TP, tuple[int, str]], now: int) -> None:
    """TxnOffsetCommit: kept with the transaction until it ends (KIP-447 verification: the group
    must have been added, else INVALID_TXN_STATE)."""
    meta = _check_producer(meta, producer_id, epoch)
    if meta.state != ONGOING or group not in meta.groups:
        raise TxnStateError(INVALID_STATE, f"transactional id '{meta.transactional_id}' has not added group "
                                           f"'{group}' to a transaction (AddOffsetsToTxn first)")
    staged = meta.offsets.setdefault(group, {})
    for tp, (offset, metadata) in offsets.items():
        staged[tp_key(tp)] = [offset, metadata]
    meta.update_ms = now


def end_transaction(meta: TxnMetadata | None, producer_id: int, epoch: int, commit: bool, now: int) -> bool:
    """EndTxn: True if the document moved to PrepareCommit/PrepareAbort (the caller writes the
    markers and completes it); False for a retry of a transaction already ended the same way."""
    meta = _check_producer(meta, producer_id, epoch)
    wanted = PREPARE_COMMIT if commit else PREPARE_ABORT
    done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
    if meta.state == ONGOING:
        meta.transition(wanted, now)
        return True
    if meta.state == done:
        return False
    if meta.state == wanted:
        raise TxnStateError(CONCURRENT, f"transactional id '{meta.transactional_id}' is completing its {meta.state}")
    raise TxnStateError(INVALID_STATE, f"transactional id '{meta.transactional_id}' is {meta.state}: "
                                       f"no transaction to {'commit' if commit else 'abort'}")


def fence_and_abort(meta: TxnMetadata, now: int, coordinator_epoch: int) -> None:
    """An expired (or administratively aborted) ongoing transaction: the epoch is bumped, so its
    producer is fenced, and the transaction aborts (Kafka's abortTimedOutTransactions)."""
    meta.transition(PREPARE_EPOCH_FENCE, now)
    _fence_epoch(meta)
    meta.coordinator_epoch = coordinator_epoch
    meta.transition(PREPARE_ABORT, now)


def complete(meta: TxnMetadata, now: int, ended: dict[str, list[int]] | None = None) -> None:
    """CompleteCommit / CompleteAbort: the transaction's partitions and offsets go, its start time
    stays (Kafka's prepareComplete keeps txnStartTimestamp: DescribeTransactions shows it, and
    ListTransactions' duration filter counts from it, not from -1, which listed every ended one).
    `ended`: the markers written (see TxnMetadata.ended), kept until the next transaction begins."""
    meta.transition(COMPLETE_COMMIT if meta.state == PREPARE_COMMIT else COMPLETE_ABORT, now)
    start = meta.start_ms
    meta.clear_transaction()
    meta.start_ms = start
    meta.ended = dict(ended or {})


# -- LMDB ---------------------------------------------------------------------------------------------
def validate_transactional_id(tid: str) -> None:
    if not tid or len(tid) > TRANSACTIONAL_ID_CHARS_MAX or "\0" in tid or len(tid.encode()) > 500:
        raise UsageError(f"invalid transactional id {tid!r}: use 1-{TRANSACTIONAL_ID_CHARS_MAX} characters "
                         "(at most 500 bytes in UTF-8)")


class TransactionsMeta:
    """The `transactions` db; `apply` is the one way a document changes."""

    DB = "transactions"
    COORDINATOR_KEY = "\0coordinator-epoch"  # not a valid transactional id

    def __init__(self, db: MetaDB) -> None:
        self.db = db

    def get(self, tid: str) -> TxnMetadata | None:
        with self.db.txn() as txn:
            raw = self.db.get_json(txn, self.DB, tid)
        return None if raw is None else TxnMetadata.from_doc(raw)

    def all(self) -> Iterator[TxnMetadata]:
        with self.db.txn() as txn:
            docs = [doc for key, doc in self.db.items(txn, self.DB) if not key.startswith("\0")]
        return iter([TxnMetadata.from_doc(doc) for doc in docs])

    def apply(self, tid: str, change: Callable[[TxnMetadata | None, object], TxnMetadata | None]) -> TxnMetadata | None:
        """Load, `change(meta, txn)` (which may raise), save what it returns (None: delete), in one
        write transaction; returns what was saved. `txn` lets a change write other dbs atomically."""
        with self.db.txn(write=True) as txn:
            raw = self.db.get_json(txn, self.DB, tid)
            meta = None if raw is None else TxnMetadata.from_doc(raw)
            result = change(meta, txn)
            if result is None:
                if raw is not None:
                    self.db.delete(txn, self.DB, tid)
            else:
                self.db.put_json(txn, self.DB, tid, asdict(result))
            return result

    def next_coordinator_epoch(self) -> int:
        """A new coordinator incarnation (one per `klog serve` start or local coordinator): its
        number goes into the markers it writes, as Kafka's coordinator epoch does."""
        with self.db.txn(write=True) as txn:
            epoch = (self.db.get_json(txn, self.DB, self.COORDINATOR_KEY) or 0) + 1
            self.db.put_json(txn, self.DB, self.COORDINATOR_KEY, epoch % 2**31)
        return epoch % 2**31

    def pending_offsets(self, group: str) -> set[TP]:
        """Partitions of `group` with offsets staged by a transaction not yet completed (OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT for them, KIP-447)."""
        # Only documents naming the group as a key (of `offsets`, as put_json spells it) are parsed:
        # every OffsetFetch of a read_committed consumer asks, and parsing every id's document took
        # 0.65-1.1 s at the pool's 40,000 ids
        needle = (json.dumps(group) + ":").encode()
        with self.db.txn() as txn:
            found = [raw for key, raw in self.db.items_raw(txn, self.DB) if needle in raw and not key.startswith("\0")]
        out: set[TP] = set()
        for meta in (TxnMetadata.from_doc(json.loads(raw)) for raw in found):
            if meta.state in (ONGOING, *PREPARING):
                out.update(key_tp(k) for k in meta.offsets.get(group, {}))
        return out

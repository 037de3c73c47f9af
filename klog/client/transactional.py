"""The library's transactional producer: `store.producer(transactional_id=...)`.

Records sent between begin() and commit() are seen by read_committed readers all together or,
after abort() (or a crash: the transaction times out), never; send_offsets() commits a consumer
group's offsets in the same transaction (consume-transform-produce, exactly once). It shares the
store's one transaction coordinator (klog.broker.txn_coordinator, state in LMDB) with `klog serve`,
so a transactional id is fenced across processes and across Kafka clients and this API alike:
a second producer opened with the same id aborts the first's open transaction and fences it.

    with store.producer(transactional_id="orders-etl") as producer:
        with producer.transaction():
            producer.send("out", b"value")
            producer.send_offsets("etl-group", {("in", 0): 42})
"""

from __future__ import annotations

import time

from klog.broker.batches import RawAppender
from klog.broker.txn_coordinator import TxnCoordinator
from klog.client.producer import Producer
from klog.client.transaction_flow import TransactionFlow
from klog.errors import InvalidProducerEpochError, ProducerFencedError, UsageError
from klog.meta import transactions as tx
from klog.store.txn import as_transactional

INIT_RETRY_S = 30.0  # how long init waits for an older incarnation's transaction to finish aborting


class TransactionalProducer(TransactionFlow, Producer):
    def __init__(self, store, transactional_id: str, *, transaction_timeout_ms: int = tx.TRANSACTION_TIMEOUT_MS_DEFAULT,
                 transaction_records: int | None = None, **kwargs) -> None:  # noqa: ANN001, ANN003 - Store; Producer's
        """`transaction_records`: commit and begin anew every that many records sent (long streams)."""
        if kwargs.get("acks", "all") != "all":
            raise UsageError("a transactional producer writes with acks=all")
        super().__init__(store, **kwargs)
        tx.validate_transactional_id(transactional_id)
        self.transactional_id = transactional_id
        self.appender = RawAppender(store, warn=kwargs.get("on_warning"))
        self.coordinator = TxnCoordinator(store, self.appender)
        # no coordinator may be running (no klog serve): abort what abandoned producers left past
        # their timeout, so read_committed readers of this store are not held by them
        self.coordinator.tick()
        self.transaction_records = transaction_records
        self._sent_in_transaction = 0
        deadline = time.monotonic() + INIT_RETRY_S
        while True:
            try:
                ids = self.coordinator.init_producer_id(transactional_id, transaction_timeout_ms)
                break
            except tx.TxnStateError as e:
                if e.code != tx.CONCURRENT or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                # a commit or abort its producer was killed in the middle of is completed by whoever
                # sees it once it is PREPARE_STALE_MS old: without a klog serve, that is this loop
                self.coordinator.tick()
        self.producer_id, self.epoch = ids.producer_id, ids.epoch
        self._sequences: dict[tuple[str, int], int] = {}
        self._added: set[tuple[str, int]] = set()
        self._groups: set[str] = set()
        self._in_transaction = False

    # -- the transaction (begin, the block, transaction_records: klog.client.transaction_flow) ------
    def _begin(self) -> None:
        self._added, self._groups = set(), set()

    def send_offsets(self, group: str, offsets: dict[tuple[str, int], int], metadata: str = "") -> None:
        """Commit `group`'s offsets (the next offset to read, per (topic, partition)) with this
        transaction: visible when it commits, dropped when it aborts."""
        self._require_transaction()
        self._call(self.coordinator.add_offsets, self.transactional_id, self.producer_id, self.epoch, group)
        self._groups.add(group)
        self._call(self.coordinator.txn_offset_commit, self.transactional_id, self.producer_id, self.epoch, group,
                   {tp: (int(o), metadata) for tp, o in offsets.items()})

    def commit(self) -> None:
        """Write what is buffered, then commit: every record sent in the transaction becomes
        visible to read_committed readers at once."""
        self._require_transaction()
        try:
            self.flush()
        except ProducerFencedError:
            self._drop_buffered()
            raise
        except BaseException:
            if self._in_transaction:
                self.abort()
            raise
        if self._added or self._groups:
            self._call(self.coordinator.end_txn, self.transactional_id, self.producer_id, self.epoch, True)
        self._in_transaction = False

    def abort(self) -> None:
        """Drop what is buffered and abort what was written: read_committed readers never see it."""
        self._require_transaction()
        self._drop_buffered()
        if self._added or self._groups:
            self._call(self.coordinator.end_txn, self.transactional_id, self.producer_id, self.epoch, False)
        self._in_transaction = False

    # -- internals ------------------------------------------------------------------------------
    def _call(self, fn, *args):  # noqa: ANN001, ANN002, ANN202
        try:
            return fn(*args)
        except tx.TxnStateError as e:
            if e.code in (tx.FENCED, tx.INVALID_MAPPING):
                self._in_transaction = False
                raise ProducerFencedError(f"transactional id '{self.transactional_id}': fenced by a newer producer "
                                          f"with the same id ({e})") from None
            raise

    def _write_group(self, topic: str, group: list) -> None:
        """Each batch made transactional (id, epoch, sequence) and appended through the coordinator's
        check, after its partition joined the transaction."""
        new = [(topic, p) for p, _ in group if (topic, p) not in self._added]
        if new:
            self._call(self.coordinator.add_partitions, self.transactional_id, self.producer_id, self.epoch, new)
            self._added.update(new)
        ts_type = self._topic_settings[topic][2]
        now_ms = int(time.time() * 1000)
        for partition, batch in group:
            key = (topic, partition)

            def check(header, key=key) -> None:  # noqa: ANN001
                self.coordinator.check_append(self.transactional_id, header.producer_id, header.producer_epoch, key)

            for piece in self._encoded(topic, batch, now_ms):
                seq = self._sequences.get(key, 0)
                data = as_transactional(piece.data, self.producer_id, self.epoch, seq)
                try:
                    result = self.appender.append(topic, partition, data, "all", check)
                except InvalidProducerEpochError as e:
                    self._in_transaction = False
                    named = f"transactional id '{self.transactional_id}'"  # the coordinator's refusal names it
                    raise ProducerFencedError(str(e) if str(e).startswith(named) else f"{named}: {e}") from None
                self._sequences[key] = (seq + piece.count) % 2**31
                self._acknowledged(topic, partition, batch, piece.start, piece.count, result.base_offset, now_ms,
                                   ts_type)


# -- administration (`klog transactions`) ---------------------------------------------------------------
def list_transactions(store) -> list[tx.TxnMetadata]:  # noqa: ANN001 - Store
    return sorted(tx.TransactionsMeta(store.meta).all(), key=lambda m: m.transactional_id)


def describe_transaction(store, transactional_id: str) -> tx.TxnMetadata:  # noqa: ANN001 - Store
    tx.validate_transactional_id(transactional_id)  # an empty id is a key LMDB refuses (MDB_BAD_VALSIZE)
    meta = tx.TransactionsMeta(store.meta).get(transactional_id)
    if meta is None:
        raise UsageError(f"no transactional id '{transactional_id}' in this store")
    return meta


def abort_transaction(store, transactional_id: str, warn=None) -> bool:  # noqa: ANN001 - Store, callback
    """Abort the id's ongoing transaction (markers written, producer fenced); False if none was open."""
    describe_transaction(store, transactional_id)
    return TxnCoordinator(store, RawAppender(store, warn=warn)).abort(transactional_id)


def find_hanging_transactions(store, topic: str | None = None, partition: int | None = None,  # noqa: ANN001
                              max_timeout_ms: int | None = None, warn=None) -> list:  # noqa: ANN001 - callback
    """The store's hanging transactions (klog.broker.hanging.OpenTransaction each): open longer than
    `max_timeout_ms` (the store's transaction.max.timeout.ms by default) and not the coordinator's."""
    from klog.broker.hanging import find_hanging
    from klog.broker.txn_coordinator import TRANSACTION_MAX_TIMEOUT, _setting

    if max_timeout_ms is None:
        max_timeout_ms = _setting(store, TRANSACTION_MAX_TIMEOUT, tx.MAX_TIMEOUT_MS_DEFAULT)
    return find_hanging(store, RawAppender(store, warn=warn), topic, partition, max_timeout_ms=max_timeout_ms,
                        now_ms=int(time.time() * 1000))


def abort_open_transaction(store, topic: str, partition: int, start_offset: int, warn=None):  # noqa: ANN001, ANN201
    """ABORT marker for the open transaction starting at `start_offset` in the partition (a hanging
    one: refused while its coordinator still has it ongoing there); returns it (an OpenTransaction)."""
    from klog.broker.hanging import abort_open

    return abort_open(store, RawAppender(store, warn=warn), topic, partition, start_offset)

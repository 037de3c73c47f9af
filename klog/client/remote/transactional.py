"""RemoteTransactionalProducer: `store.producer(transactional_id=...)` on a cluster, over
librdkafka's transactional producer.

The calls are the local ones (klog.client.transactional): begin(), commit(), abort(),
send_offsets(group, offsets) and `with producer.transaction():`, mapped onto init_transactions,
begin_transaction, send_offsets_to_transaction (with the group's consumer metadata) and
commit_transaction / abort_transaction. The cluster's transaction coordinator does the rest: a
second producer with the same id fences this one (ProducerFencedError), and a killed producer's
transaction is aborted by the cluster after transaction.timeout.ms.
"""

from __future__ import annotations

import logging

from klog.client.remote.errors import klog_error
from klog.client.remote.producer import RemoteProducer
from klog.client.transaction_flow import TransactionFlow
from klog.errors import KlogError, ProducerFencedError, UsageError

TRANSACTION_TIMEOUT_MS_DEFAULT = 60_000  # Kafka's producer default
_QUIET = logging.getLogger("klog.librdkafka.transactional")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class RemoteTransactionalProducer(TransactionFlow, RemoteProducer):
    def __init__(self, store, transactional_id: str, *,  # noqa: ANN001 - RemoteStore
                 transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS_DEFAULT,
                 transaction_records: int | None = None, **kwargs) -> None:  # noqa: ANN003 - RemoteProducer's
        """`transaction_records`: commit and begin anew every that many records sent (long streams)."""
        from klog.meta.transactions import validate_transactional_id

        if str(kwargs.get("acks", "all")) != "all":
            raise UsageError("a transactional producer writes with acks=all")
        validate_transactional_id(transactional_id)
        self.transactional_id = transactional_id
        self.transaction_records = transaction_records
        self._in_transaction = False
        self._sent_in_transaction = 0
        self._group_clients: dict[str, object] = {}  # group -> a consumer that only lends its group metadata
        extra: dict[str, object] = {"transactional.id": transactional_id,
                                    "transaction.timeout.ms": int(transaction_timeout_ms)}
        if "debug" not in store.target.properties:
            extra["logger"] = _QUIET  # librdkafka logs a fenced producer at level 0: the error says it once
        super().__init__(store, extra_config=extra, **kwargs)
        # registers the id with the cluster's coordinator: fences an older producer of this id and
        # aborts what it left open
        self._txn_call("init_transactions", self._producer.init_transactions, store.timeout * 3)

    # -- the transaction (begin, the block, transaction_records: klog.client.transaction_flow) ------
    def _begin(self) -> None:
        self._txn_call("begin a transaction", self._producer.begin_transaction)

    def send_offsets(self, group, offsets: dict[tuple[str, int], int], metadata: str = "") -> None:  # noqa: ANN001
        """Commit `group`'s offsets (the next offset to read, per (topic, partition)) with this
        transaction. `group` is a group name, or a RemoteGroupConsumer (its generation and member
        id let the cluster fence a zombie member, KIP-447)."""
        from confluent_kafka import TopicPartition

        self._require_transaction()
        if hasattr(group, "consumer_group_metadata"):
            group_metadata = group.consumer_group_metadata()
        else:
            group_metadata = self._group_metadata(str(group))
        positions = [TopicPartition(t, p, int(o), metadata) if metadata else TopicPartition(t, p, int(o))
                     for (t, p), o in offsets.items()]
        self._txn_call("send offsets to the transaction", self._producer.send_offsets_to_transaction, positions,
                       group_metadata, self.store.timeout * 3)

    def commit(self) -> None:
        """Wait for every record sent, then commit: read_committed readers see them all at once."""
        self._require_transaction()
        try:
            # commit_transaction flushes first; a record the cluster refused makes it fail (abortable)
            self._txn_call("commit the transaction", self._producer.commit_transaction, self.store.timeout * 3)
        except ProducerFencedError:
            self._in_transaction = False
            raise
        except BaseException:
            if self._in_transaction:
                failure, self._error = self._error, None
                self.abort()
                if failure is not None:  # the refused record says more than "transaction must be aborted"
                    raise failure from None
            raise
        self._in_transaction = False
        self.records_sent = self._queued - self._failed

    def abort(self) -> None:
        """Drop what is queued and abort what was written: read_committed readers never see it."""
        self._require_transaction()
        self._in_transaction = False
        try:
            self._txn_call("abort the transaction", self._producer.abort_transaction, self.store.timeout * 3)
        finally:
            # the purged records' delivery reports ("Purged in queue") die with the transaction
            self._producer.poll(0)
            self._error = None

    def close(self) -> None:
        try:
            super().close()  # TransactionFlow's: an open transaction is aborted
        finally:
            for consumer in self._group_clients.values():
                consumer.close()  # type: ignore[attr-defined]
            self._group_clients.clear()

    # -- internals ------------------------------------------------------------------------------
    def _group_metadata(self, group: str) -> object:
        """librdkafka takes a group's metadata only from a consumer of it: one that never joins
        (generation -1, no member id, as Kafka's `new ConsumerGroupMetadata(group)`)."""
        consumer = self._group_clients.get(group)
        if consumer is None:
            from confluent_kafka import Consumer

            consumer = Consumer(self.store.target.client_config(**{
                "group.id": group, "enable.auto.commit": False, "error_cb": self.store._on_error}))
            self._group_clients[group] = consumer
        return consumer.consumer_group_metadata()  # type: ignore[attr-defined]

    def _txn_call(self, what: str, fn, *args):  # noqa: ANN001, ANN002, ANN202
        """One librdkafka transaction call; a retriable failure is retried (as librdkafka asks)
        within the store's timeout, a fenced producer raises ProducerFencedError."""
        import time

        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + self.store.timeout * 3
        while True:
            try:
                return fn(*args)
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if err is None:
                    raise klog_error(e, f"transactional id '{self.transactional_id}': cannot {what}") from None
                code, label = err.code(), f"transactional id '{self.transactional_id}'"
                if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
                    self._in_transaction = False
                    raise ProducerFencedError(f"{label}: fenced by a newer producer with the same id "
                                              f"({err.str()})") from None
                if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
                    raise UsageError(f"{label}: transaction.timeout.ms is above what the cluster allows "
                                     f"({err.str()})") from None
                if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    raise KlogError(f"{label}: not authorized ({err.str()})") from None
                if err.fatal():  # the producer cannot go on (librdkafka says why)
                    self._in_transaction = False
                    raise KlogError(f"{label}: cannot {what}: {err.str()}") from None
                if err.retriable() and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                if err.code() == KafkaError._TIMED_OUT:
                    raise self.store.unreachable(e) from None
                raise klog_error(e, f"transactional id '{self.transactional_id}': cannot {what}") from None

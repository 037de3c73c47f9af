"""What a transactional producer does the same way on a local store and on a cluster: begin() and
the `with producer.transaction():` block, sends refused outside a transaction, and
`transaction_records` (commit and begin anew every that many records, for long streams).

The two producers (klog.client.transactional.TransactionalProducer on a store,
klog.client.remote.transactional.RemoteTransactionalProducer over librdkafka) put this mixin before
their plain producer class and supply _begin(), commit(), abort() and send_offsets().
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Self

from klog.errors import UsageError


class TransactionFlow:
    transactional_id: str
    transaction_records: int | None = None
    _in_transaction: bool = False
    _sent_in_transaction: int = 0

    # supplied by the producer class
    def _begin(self) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def begin(self) -> None:
        if self._in_transaction:
            raise UsageError(f"transactional id '{self.transactional_id}': a transaction is already open")
        self._begin()
        self._in_transaction = True
        self._sent_in_transaction = 0

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """begin(); the block; commit() — or abort() if the block raises."""
        self.begin()
        try:
            yield self
        except BaseException:
            if self._in_transaction:
                self.abort()
            raise
        self.commit()

    # -- sending: only inside a transaction, cut where a transaction_records commit falls --------
    def send(self, topic: str, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - the producer's send
        self._require_transaction()
        pending = super().send(topic, *args, **kwargs)  # type: ignore[misc]
        self._count_sent(1)
        return pending

    def send_keyed(self, topic: str, pairs, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        for chunk in self._chunks(pairs):
            super().send_keyed(topic, chunk, *args, **kwargs)  # type: ignore[misc]
            self._count_sent(len(chunk))

    def send_values(self, topic: str, values, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        for chunk in self._chunks(values):
            super().send_values(topic, chunk, *args, **kwargs)  # type: ignore[misc]
            self._count_sent(len(chunk))

    def _chunks(self, items):  # noqa: ANN001, ANN202
        """`items` cut where a transaction_records commit falls."""
        self._require_transaction()
        if self.transaction_records is None:
            yield items
            return
        start = 0
        while start < len(items):
            room = self.transaction_records - self._sent_in_transaction
            yield items[start:start + room]
            start += room

    def _count_sent(self, n: int) -> None:
        self._sent_in_transaction += n
        if self.transaction_records is not None and self._sent_in_transaction >= self.transaction_records:
            self.commit()
            self.begin()

    def _require_transaction(self) -> None:
        if not self._in_transaction:
            raise UsageError(f"transactional id '{self.transactional_id}': call begin() (or use "
                             "`with producer.transaction():`) before sending")

    # -- closing: an open transaction is aborted, never committed by accident ---------------------
    def close(self) -> None:
        if self._in_transaction:
            self.abort()

    def __exit__(self, exc_type, *exc: object) -> None:  # noqa: ANN001
        self.close()

"""A hanging transaction as kafka-transactions.sh's find-hanging looks for it, made through `klog serve` by
confluent-kafka (shared by tests/cli/test_cluster_transactions_hanging.py and
tests/server/test_serve_hanging_kafka_python.py)."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

import klog

QUIET = {"log_level": 0}


@contextlib.contextmanager
def open_transaction(bootstrap: str, data_dir: str, second: bytes, **config: object) -> Iterator[int]:
    """Topic h (2 partitions) in `data_dir`, served at `bootstrap`: transactional id 'stuck' (producer
    `config` added) leaves a transaction open with b"hanging-0" at h-0, timestamped 20 minutes ago (past
    the tool's 15 minutes), and `second` at h-1; then a plain producer's b"after" at h-0. Yields that old
    timestamp (ms); at the end the producers are purged and gone, so that none reconnects to a stopped
    server and logs into later tests."""
    import confluent_kafka as ck

    with klog.open(data_dir) as s:
        s.create_topic("h", 2)
    old = int(time.time() * 1000) - 20 * 60_000
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "stuck", **config, **QUIET})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("h", b"hanging-0", partition=0, timestamp=old)
    producer.produce("h", second, partition=1)
    producer.flush(10)
    plain = ck.Producer({"bootstrap.servers": bootstrap, **QUIET})
    plain.produce("h", b"after", partition=0)
    plain.flush(10)
    try:
        yield old
    finally:
        producer.purge()
        del producer, plain
        gc.collect()

"""klog: Apache Kafka's log model as a local, scriptable toolkit and Python library.

    import klog
    with klog.open("/tmp/demo") as store:
        with store.producer() as producer:
            sent = producer.send("orders", b'{"id": 1}', key=b"user-42")
        print(sent.get())                      # RecordMetadata(topic='orders', partition=0, offset=0, ...)
        for record in store.consumer("orders"):
            print(record.offset, record.key, record.value)
"""

from __future__ import annotations

from klog.client.consumer import Consumer, StartSpec
from klog.client.producer import PendingRecord, Producer
from klog.client.records import Record, RecordMetadata
from klog.client.store import PartitionInfo, Store, TopicInfo
from klog.errors import KlogError

__version__ = "0.1.0"


def open(path: str | None = None, create: bool = True) -> Store:  # noqa: A001 - mirrors sqlite3/klog.open
    """Open the store at `path` ($KLOG_DATA_DIR or ~/.local/share/klog by default)."""
    return Store(path, create=create)


__all__ = ["Consumer", "KlogError", "PartitionInfo", "PendingRecord", "Producer", "Record", "RecordMetadata",
           "StartSpec", "Store", "TopicInfo", "open", "__version__"]

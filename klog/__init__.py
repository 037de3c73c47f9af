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

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public names -> the module that defines them. Loaded on first use (PEP 562) so that `klog --help`
# and `klog --version`, which import this package, do not pay for the codec and the client.
_EXPORTS = {
    "Consumer": "klog.client.consumer",
    "StartSpec": "klog.client.consumer",
    "GroupConfig": "klog.client.group",
    "GroupConsumer": "klog.client.group",
    "ResetSpec": "klog.client.groups_admin",  # store.plan_offset_reset's target
    "deliver": "klog.client.delivery",  # consume --group/--exec's at-least-once delivery
    "produce_from": "klog.client.ingest",  # produce's input: lines, -K, json, raw
    "RecordFilter": "klog.client.filters",  # consume's --grep/--grep-key/--grep-header
    "newest_records": "klog.client.newest",  # consume --last
    "PendingRecord": "klog.client.producer",
    "Producer": "klog.client.producer",
    "Record": "klog.client.records",
    "RecordMetadata": "klog.client.records",
    "PartitionInfo": "klog.client.store",
    "Store": "klog.client.store",
    "TopicInfo": "klog.client.store",
    "KlogError": "klog.errors",
    "Replayer": "klog.client.replay",
    "ReplayStats": "klog.client.replay",
    "PartitionCleanup": "klog.broker.lifecycle",
    "Server": "klog.server.server",  # klog serve: the store over Kafka's protocol
    "serve": "klog.server.server",
}

if TYPE_CHECKING:
    from klog.client.store import Store


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'klog' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def open(path: str | None = None, create: bool = True) -> Store:  # noqa: A001 - mirrors sqlite3/klog.open
    """Open the store at `path` ($KLOG_DATA_DIR or ~/.local/share/klog by default)."""
    from klog.client.store import Store

    return Store(path, create=create)


__all__ = [*_EXPORTS, "open", "__version__"]

"""What the broker layer needs of a store, as types: the broker's functions take a store built above
them (klog.client.store.Store), so they name it by these Protocols instead of importing it upward.

TopicLookup is the little that resolving names needs, which a cluster's store (RemoteStore) offers
too; BrokerStore is the local store's data directory, metadata and partitions. Cheap to import (the
hot consume path resolves topics): the classes named here are imported for type checkers only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from klog.meta.db import MetaDB
    from klog.meta.topics import TopicMeta, TopicsMeta
    from klog.store.config import LogConfig
    from klog.store.layout import DataDir
    from klog.store.partition import Partition


class TopicLookup(Protocol):
    """Topic names and partition counts: a local store, or a cluster's."""

    def topic(self, name: str) -> object: ...  # raises UnknownTopicError for a topic that is not there
    def has_topic(self, name: str) -> bool: ...
    def topic_names(self) -> list[str]: ...
    def partition_count(self, topic: str) -> int: ...


class BrokerStore(TopicLookup, Protocol):
    """The local store as the broker layer uses it (klog.client.store.Store)."""

    path: str
    warn: Callable[[str], None]
    data_dir: DataDir
    meta: MetaDB
    topics: TopicsMeta

    def list_topics(self) -> list[TopicMeta]: ...
    def log_dir_ids(self) -> list[int]: ...
    def log_config(self, name: str) -> LogConfig: ...
    def partition(self, topic: str, partition: int) -> Partition: ...
    def forget_topic(self, name: str) -> None: ...
    def forget_topic_metadata(self, name: str) -> None: ...
    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None, exist_ok: bool = False,
                     adopt_folders: bool = False) -> TopicMeta: ...
    def alter_topic(self, name: str, partitions: int | None = None, set_configs: dict[str, str] | None = None,
                    delete_configs: Iterable[str] = ()) -> TopicMeta: ...

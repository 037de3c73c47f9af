"""RemoteStore: the Store interface the CLI uses (topics admin, offsets, producer, consumer) over a
Kafka cluster, so commands pick a backend once and never fork per backend."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from klog.broker.resolve import resolve_topic_names
from klog.client.remote.errors import config_error, klog_error, unsupported
from klog.client.remote.target import ClusterTarget, all_refused, timeout_s
from klog.client.store import PartitionInfo, TopicInfo
from klog.client.store_groups import GroupAdminMethods
from klog.errors import KlogError, UnknownPartitionError, UnknownTopicError, UsageError, log_warning
from klog.store.config import CONFIG_KEYS, LogConfig, validate_configs
from klog.store.names import validate_topic_name

if TYPE_CHECKING:
    from klog.client.remote.consumer import RemoteConsumer
    from klog.client.remote.fetch_consumer import FetchConsumer
    from klog.client.remote.group import RemoteGroupConsumer
    from klog.client.remote.producer import RemoteProducer

UNKNOWN_TOPIC_OR_PARTITION = 3  # Kafka's error code in a topic's metadata

FIRST_TRY_S = 0.3  # the first metadata request's wait before checking whether the cluster refuses connections

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")  # the cluster's own, not the user's


@dataclass
class RemotePartition:
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class RemoteTopic:
    """What TopicMeta gives the CLI: name, partitions, replication factor, configs set on it."""

    name: str
    partitions: list[RemotePartition]
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = "-"

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


class RemoteTopicInfo(TopicInfo):
    @property
    def size_bytes(self) -> int | None:  # type: ignore[override] - unknown when a partition's size is
        sizes = [p.size_bytes for p in self.partitions]
        return None if any(s is None for s in sizes) else sum(sizes)


class RemoteStore(GroupAdminMethods):
    """A Kafka cluster behind the Store interface. Opening it checks the cluster answers within
    the timeout, so an unreachable address is one error line, never a hang."""

    is_local = False

    def __init__(self, target: ClusterTarget, on_warning: Callable[[str], None] | None = None) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        self.target = target
        self.warn = on_warning or log_warning
        self.timeout = timeout_s()
        self.last_error: str | None = None
        self.path = target.bootstrap
        try:
            # a metadata lookup of one topic must not create it: librdkafka's admin handle is a
            # producer, whose lookups ask a broker with auto.create.topics.enable to create the topic
            self.admin = AdminClient(target.client_config(error_cb=self._on_error,
                                                          **{"allow.auto.create.topics": False}))
        except (KafkaException, ValueError, TypeError) as e:
            raise config_error(e) from None
        self._metadata_cache: dict[str, RemoteTopic] = {}
        self._sizes: dict[tuple[str, int], dict[int, int]] | None = None  # DescribeLogDirs, asked once
        self._first_contact()

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def _on_error(self, err) -> None:  # noqa: ANN001 - a KafkaError from librdkafka's thread
        self.last_error = err.str()

    def unreachable(self, e: BaseException | None = None) -> KlogError:
        self.admin.poll(0.2)  # serve librdkafka's queued error callbacks: the real reason (refused, SASL, TLS)
        reason = self.last_error or (str(e.args[0].str()) if e is not None and e.args and hasattr(e.args[0], "str")
                                     else "no answer")
        return KlogError(f"cannot reach Kafka cluster at {self.target.label} within {self.timeout:g} s: {reason}")

    def _first_contact(self) -> None:
        """Is the cluster there? librdkafka retries a refused connection until the timeout; a refusal
        from every bootstrap address fails at once instead (silence still gets the whole timeout)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            try:
                self.admin.list_topics(timeout=max(0.01, min(FIRST_TRY_S, left)))
                return
            except KafkaException as e:
                if deadline - time.monotonic() <= 0:
                    raise self.unreachable(e) from None
                if all_refused(self.target.bootstrap):
                    raise KlogError(f"cannot reach Kafka cluster at {self.target.label}: connection refused "
                                    "(nothing listens there)") from None

    # -- metadata ----------------------------------------------------------------------------
    def _metadata(self, topic: str | None):  # noqa: ANN202 - confluent_kafka ClusterMetadata
        from confluent_kafka import KafkaException

        try:
            return self.admin.list_topics(topic=topic, timeout=self.timeout)
        except KafkaException as e:
            raise self.unreachable(e) from None

    def leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the partition's leader as the cluster's metadata says now
        (asked anew: a caller asks after a leader moved); None when it names no leader.
        UnknownTopicError when the cluster does not know the topic (deleted since, or never made)."""
        return self.leaders(topic).get(partition)

    def leaders(self, topic: str) -> dict[int, tuple[int, str, int] | None]:
        """leader() of every partition of `topic`, from one metadata answer."""
        md = self._metadata(topic)
        found = md.topics.get(topic)
        if found is None or found.error is not None and found.error.code() == UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(f"topic '{topic}' does not exist on {self.target.label}")
        out: dict[int, tuple[int, str, int] | None] = {}
        for p, part in found.partitions.items():
            broker = md.brokers.get(part.leader) if part.leader >= 0 else None
            out[p] = None if broker is None else (part.leader, broker.host, broker.port)
        return out

    def _topics(self) -> dict[str, RemoteTopic]:
        md = self._metadata(None)
        out = {}
        for name, tm in md.topics.items():
            if name in INTERNAL_TOPICS or tm.error is not None:
                continue
            out[name] = _remote_topic(name, tm)
        self._metadata_cache.update(out)
        return dict(sorted(out.items()))

    def topic(self, name: str) -> RemoteTopic:
        cached = self._metadata_cache.get(name)
        if cached is not None:
            return cached
        validate_topic_name(name)
        found = self._topics().get(name)
        if found is None:
            raise UnknownTopicError(f"unknown topic '{name}'")
        return found

    def has_topic(self, name: str) -> bool:
        return name in self._topics()

    def list_topics(self) -> list[RemoteTopic]:
        return list(self._topics().values())

    def topic_names(self) -> list[str]:
        return list(self._topics())

    def partition_count(self, topic: str) -> int:
        return len(self.topic(topic).partitions)

    def auto_create_enabled(self) -> bool:
        return True  # the producer asks for the topic; the cluster's auto.create.topics.enable decides

    def forget_topic_metadata(self, name: str) -> None:
        self._metadata_cache.pop(name, None)

    def resolve_topics(self, topics: Iterable[str] = (), pattern: str | None = None) -> list[str]:
        return resolve_topic_names(self, topics, pattern)

    # -- admin -------------------------------------------------------------------------------
    def _wait(self, futures: dict, what: str, fallback: bool = False) -> dict | None:
        """Every future's result; a KafkaException as klog's error (None instead when `fallback` and
        the broker lacks the API)."""
        from confluent_kafka import KafkaException

        out = {}
        for key, fut in futures.items():
            try:
                out[key] = fut.result(timeout=self.timeout)
            except KafkaException as e:
                if fallback and unsupported(e):
                    return None
                raise klog_error(e, what) from None
            except TimeoutError:
                raise self.unreachable() from None
        return out

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None, exist_ok: bool = False) -> RemoteTopic:
        from confluent_kafka.admin import NewTopic

        validate_topic_name(name)
        configs = validate_configs(configs or {}) if configs else {}
        if exist_ok and name in self._topics():
            return self._with_configs(self.topic(name))
        new = NewTopic(name, num_partitions=-1 if partitions is None else partitions,
                       replication_factor=-1 if replication_factor is None else replication_factor,
                       config={k: str(v) for k, v in (configs or {}).items()})
        try:
            self._wait(self.admin.create_topics([new], request_timeout=self.timeout), f"cannot create topic '{name}'")
        except KlogError as e:
            if exist_ok and "already exists" in str(e):
                return self._with_configs(self.topic(name))
            raise
        self.forget_topic_metadata(name)
        topic = self._await_topic(name)
        topic.configs = dict(configs or {})
        return topic

    def _with_configs(self, topic: RemoteTopic) -> RemoteTopic:
        topic.configs = self.topic_configs(topic.name)
        return topic

    def _await_topic(self, name: str) -> RemoteTopic:
        """A created topic's metadata (brokers may answer before every one knows it)."""
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            found = self._topics().get(name)
            if found is not None and found.partitions:
                return found
            if time.monotonic() > deadline:
                raise KlogError(f"topic '{name}' was created but the cluster does not list it yet")
            time.sleep(0.05)

    def delete_topic(self, name: str) -> RemoteTopic:
        topic = self.topic(name)
        self._wait(self.admin.delete_topics([name], request_timeout=self.timeout), f"cannot delete topic '{name}'")
        self.forget_topic_metadata(name)
        return topic

    def alter_topic(self, name: str, partitions: int | None = None, set_configs: dict[str, str] | None = None,
                    delete_configs: Iterable[str] = ()) -> RemoteTopic:
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            NewPartitions,
            ResourceType,
        )

        topic = self.topic(name)
        if partitions is not None and partitions != len(topic.partitions):
            if partitions < len(topic.partitions):
                raise UsageError(f"topic '{name}' has {len(topic.partitions)} partitions: a topic cannot shrink")
            self._wait(self.admin.create_partitions([NewPartitions(name, partitions)], request_timeout=self.timeout),
                       f"cannot add partitions to '{name}'")
        delete_configs = list(delete_configs)
        if set_configs or delete_configs:
            validate_configs(set_configs or {})
            for k in delete_configs:
                if k not in CONFIG_KEYS:
                    raise UsageError(f"unknown topic config '{k}'")
            entries = [ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET)
                       for k, v in (set_configs or {}).items()]
            entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete_configs]
            resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
            self._wait(self.admin.incremental_alter_configs([resource], request_timeout=self.timeout),
                       f"cannot alter topic '{name}'")
        self.forget_topic_metadata(name)
        topic = self._await_partitions(name, partitions)
        topic.configs = self.topic_configs(name)
        return topic

    def _await_partitions(self, name: str, count: int | None) -> RemoteTopic:
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            self.forget_topic_metadata(name)
            topic = self.topic(name)
            if count is None or len(topic.partitions) >= count or time.monotonic() > deadline:
                return topic
            time.sleep(0.05)

    def topic_configs(self, name: str, effective: bool = False) -> dict[str, str]:
        """The configs set on the topic (effective: every klog config with its value in force)."""
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, name)
        found = self._wait(self.admin.describe_configs([resource], request_timeout=self.timeout),
                           f"cannot describe topic '{name}'", fallback=True)
        entries = {} if found is None else found[resource]  # no DescribeConfigs: the defaults
        if effective:
            out = {k: key.default for k, key in CONFIG_KEYS.items()}
            out.update({k: e.value for k, e in entries.items() if k in CONFIG_KEYS and e.value is not None})
            return out
        return {k: e.value for k, e in entries.items()
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}

    def effective_configs(self, name: str) -> dict[str, str]:
        self.topic(name)
        return self.topic_configs(name, effective=True)

    def log_config(self, name: str) -> LogConfig:
        """The topic's configs as the cluster reports them, every key typed (a value klog does
        not know takes Kafka's default)."""
        return LogConfig.from_configs(self.effective_configs(name), lenient=True)

    def offsets(self, topic: str, timestamp: int | None = None,
                committed: bool = False) -> dict[int, int | None]:
        """Per partition: earliest (timestamp -2), latest (None or -1), or first offset at a time;
        `committed`: as a read_committed consumer sees them (latest is the last stable offset)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if timestamp == -2:
            spec = OffsetSpec.earliest()
        elif timestamp is None or timestamp == -1:
            spec = OffsetSpec.latest()
        else:
            spec = OffsetSpec.for_timestamp(timestamp)
        count = self.partition_count(topic)
        request = {TopicPartition(topic, p): spec for p in range(count)}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        result = self._wait(self.admin.list_offsets(request, isolation_level=level, request_timeout=self.timeout),
                            f"cannot list offsets of '{topic}'")
        out = {tp.partition: (None if info.offset < 0 else info.offset) for tp, info in result.items()}
        if timestamp is None or timestamp < 0:  # earliest and latest always exist: -1 is no answer
            for p, offset in out.items():
                if offset is None:
                    raise KlogError(f"{self.target.label} gave no offset for {topic}-{p}")
        return dict(sorted(out.items()))

    def describe_topic(self, name: str) -> TopicInfo:
        topic = self.topic(name)
        self.forget_topic_metadata(name)
        topic = self.topic(name)
        starts, ends = self.offsets(name, -2), self.offsets(name, -1)
        parts = [PartitionInfo(i, pm.leader, pm.replicas, pm.isr, None, starts[i] or 0, ends[i] or 0,  # type: ignore[arg-type]
                               ends[i] or 0, self._partition_size(name, i, pm.leader), None)  # type: ignore[arg-type]
                 for i, pm in enumerate(topic.partitions)]
        return RemoteTopicInfo(name, self._topic_id(name), parts, topic.replication_factor, self.topic_configs(name))

    def _partition_size(self, topic: str, partition: int, leader: int) -> int | None:
        """The leader replica's bytes on disk (DescribeLogDirs), None when the cluster does not say.
        Segment counts are not in any Kafka API: they stay unknown."""
        if self._sizes is None:
            from klog.client.remote.wire import partition_sizes

            brokers = {b.id: (b.host, b.port) for b in self._metadata(None).brokers.values()}
            self._sizes = partition_sizes(self.target, brokers, self.timeout)
        return self._sizes.get((topic, partition), {}).get(leader)

    def _topic_id(self, name: str) -> str:
        """The topic id as klog prints it (a UUID), or '-' when the cluster does not give one."""
        import base64
        import uuid

        from confluent_kafka import TopicCollection

        try:
            desc = self._wait(self.admin.describe_topics(TopicCollection([name]), request_timeout=self.timeout),
                              f"cannot describe topic '{name}'", fallback=True)
            text = str(desc[name].topic_id) if desc else ""
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_" if "-" in text or "_" in text
                                   else None)
            return str(uuid.UUID(bytes=raw)) if len(raw) == 16 and any(raw) else "-"
        except (KlogError, ValueError, TypeError):
            return "-"

    def dirty_ratio(self, topic: str, partition: int) -> float | None:
        return None  # the cleaner's state is the broker's

    # -- clients -----------------------------------------------------------------------------
    # -- transactions (kafka-transactions.sh's requests: klog.client.remote.txn_admin) ------------
    def list_transactions(self) -> list:
        from klog.client.remote.txn_admin import list_transactions

        return list_transactions(self)

    def describe_transaction(self, transactional_id: str):  # noqa: ANN201 - TxnMetadata
        from klog.client.remote.txn_admin import describe_transaction

        return describe_transaction(self, transactional_id)

    def abort_transaction(self, transactional_id: str) -> bool:
        """ABORT markers where the id's transaction is open; False if none was open."""
        from klog.client.remote.txn_admin import abort_transaction

        return abort_transaction(self, transactional_id)

    def find_hanging_transactions(self, topic: str | None = None, partition: int | None = None,
                                  max_timeout_ms: int | None = None) -> list:
        """kafka-transactions.sh find-hanging (klog.client.remote.txn_admin)."""
        from klog.client.remote.txn_admin import find_hanging_transactions

        return find_hanging_transactions(self, topic, partition, max_timeout_ms)

    def abort_open_transaction(self, topic: str, partition: int, start_offset: int):  # noqa: ANN201 - OpenTransaction
        """kafka-transactions.sh abort --topic --partition --start-offset: the ABORT marker only."""
        from klog.client.remote.txn_admin import abort_open_transaction

        return abort_open_transaction(self, topic, partition, start_offset)

    def producer(self, transactional_id: str | None = None, **kwargs: Any) -> RemoteProducer:
        """A producer; with `transactional_id`, a transactional one (klog.client.remote.transactional)."""
        if transactional_id is not None:
            from klog.client.remote.transactional import RemoteTransactionalProducer

            return RemoteTransactionalProducer(self, transactional_id, **kwargs)
        from klog.client.remote.producer import RemoteProducer

        return RemoteProducer(self, **kwargs)

    def consumer(self, *topics: str, **kwargs: Any) -> FetchConsumer | RemoteConsumer:
        """Reads by Fetch requests decoded by the local store's reader (FetchConsumer) when klog's
        own socket speaks the -X security settings; librdkafka's consumer (RemoteConsumer) for
        read_committed and for what that socket cannot speak (GSSAPI, OAUTHBEARER, keystores)."""
        # the cluster's -X isolation.level wins, as it does in librdkafka's settings (client_config)
        level = self.target.properties.get("isolation.level", kwargs.pop("isolation_level", "read_uncommitted"))
        if level == "read_uncommitted" and self.fetch_reads():
            from klog.client.remote.fetch_consumer import FetchConsumer

            return FetchConsumer(self, list(topics), **kwargs)
        from klog.client.remote.consumer import RemoteConsumer

        return RemoteConsumer(self, list(topics), isolation_level=level, **kwargs)

    def fetch_reads(self) -> bool:
        """Can klog's own socket (wire.py) reach this cluster with its -X settings?"""
        from klog.client.remote.wire import security

        try:
            security(self.target)
        except UsageError:
            return False
        return True

    def group_consumer(self, group: str, *topics: str, **kwargs: Any) -> RemoteGroupConsumer:
        from klog.client.remote.group import RemoteGroupConsumer

        return RemoteGroupConsumer(self, group, list(topics), **kwargs)

    def partition(self, topic: str, partition: int) -> RemotePartitionView:
        """A partition's offsets (what the Spark source plans with); its files are the cluster's."""
        count = self.partition_count(topic)
        if not 0 <= partition < count:
            raise UnknownPartitionError(f"topic '{topic}' has no partition {partition} (it has {count})")
        return RemotePartitionView(self, topic, partition)


@dataclass
class RemotePartitionView:
    store: RemoteStore
    topic: str
    partition: int

    def log_start_offset(self) -> int:
        return self.store.offsets(self.topic, -2)[self.partition] or 0

    def high_watermark(self) -> int:
        return self.store.offsets(self.topic, -1)[self.partition] or 0

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        return self.store.offsets(self.topic, timestamp)[self.partition]


def _remote_topic(name: str, tm) -> RemoteTopic:  # noqa: ANN001 - confluent_kafka TopicMetadata
    parts = [RemotePartition(pm.leader, list(pm.replicas), list(pm.isrs))
             for _, pm in sorted(tm.partitions.items())]
    return RemoteTopic(name, parts)

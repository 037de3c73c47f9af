"""The connector API (Kafka Connect's, in Python) and how `connector.class` finds an implementation.

A Connector validates its config and splits the work into task configs (`tasks.max` at most); the
worker runs each task. A SourceTask's poll() returns records carrying a source partition and offset;
the worker writes them, then stores the offsets (connect-offsets) and calls commit(offsets). A SinkTask
gets put(records) per batch and flush(offsets) before the worker commits the consumer offsets.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

from klog.connect.config import ConfigDef, aliases
from klog.connect.data import ConnectRecord
from klog.connect.errors import ConfigError

TP = tuple[str, int]


class Connector:
    kind: ClassVar[str] = ""  # "source" or "sink"
    java_classes: ClassVar[tuple[str, ...]] = ()  # the classes whose configs this one accepts
    short_names: ClassVar[tuple[str, ...]] = ()  # klog's names for it
    config_def: ClassVar[ConfigDef] = ConfigDef()
    # keys of the original connector that klog accepts and does not implement (named in a warning)
    unimplemented: ClassVar[frozenset[str]] = frozenset()
    task_class: ClassVar[type]

    def __init__(self) -> None:
        self.props: dict[str, str] = {}
        self.config: dict[str, Any] = {}

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)
        self.config = self.config_def.parse(props)
        self.validate(self.config)

    def validate(self, config: dict[str, Any]) -> None:
        """Checks across keys; raise ConfigError naming the field."""

    @classmethod
    def known_key(cls, key: str) -> bool:
        """Whether the connector reads `key` though config_def does not list it (a key whose name is a
        pattern, such as Debezium's column.mask.with.N.chars)."""
        return False

    @classmethod
    def unimplemented_in(cls, props: dict[str, str]) -> list[str]:
        """What a config sets inside a value that klog does not implement (named in the warning)."""
        return []

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]

    def stop(self) -> None:
        pass

    @classmethod
    def version(cls) -> str:
        from klog import __version__

        return __version__


class SourceConnector(Connector):
    kind = "source"


class SinkConnector(Connector):
    kind = "sink"

    def alter_offsets(self, props: dict[str, str], offsets: dict[TP, int | None] | None) -> bool:
        """KIP-875's SinkConnector.alterOffsets, called (on a connector not started) before the REST API's
        PATCH or DELETE /connectors/{name}/offsets changes the group's: a sink that keeps its offsets itself
        changes them too (`offsets`: each partition's next offset, None to forget it; None: DELETE, all of
        them). True when it did; the default keeps none of its own (False)."""
        return False


class OffsetReader:
    """What a source task reads its stored offsets through (Kafka's OffsetStorageReader)."""

    def __init__(self, lookup: Callable[[dict], dict | None]) -> None:
        self._lookup = lookup

    def offset(self, partition: dict) -> dict | None:
        return self._lookup(partition)


class TaskContext:
    def __init__(self, connector_name: str, task_id: int, warn: Callable[[str], None],
                 offset_reader: OffsetReader | None = None,
                 errant_reporter: Callable[[ConnectRecord, BaseException], None] | None = None) -> None:
        self.connector_name = connector_name
        self.task_id = task_id
        self.warn = warn
        self.offset_storage_reader = offset_reader
        # sink tasks, Kafka's errantRecordReporter(): reporter(record, error) returns once the record is
        # logged and acknowledged in the DLQ, raises under errors.tolerance=none; None without a DLQ topic
        # and errors.log.enable=false (the task then decides, as Kafka's sinks do)
        self.errant_record_reporter = errant_reporter
        self.rewinds: dict[TP, int] = {}  # offsets a sink task asked to resume from (Kafka's context.offset)

        # source tasks under transaction.boundary=connector: where the task ends each transaction
        self.transaction_context: TransactionContext | None = None
        # source tasks: request_offset_commit()'s, taken by the worker after each poll
        self.commit_requested = False
        self.requested_offsets: list[tuple[dict, dict]] = []

    def offset(self, tp: TP, offset: int) -> None:
        self.rewinds[tp] = offset

    def request_offset_commit(self, partition: dict | None = None, offset: dict | None = None) -> None:
        """klog's (Kafka has none), for a source task: the offsets of the records poll() returns are stored
        right after this poll, not at the next offset.flush.interval.ms (a CDC snapshot's end: a kill then
        does not take it again). With `partition` and `offset`, that offset is stored too, after those
        records' (progress no record carries: a snapshot of empty tables); so a poll that asks returns no
        record of what came after the point it asked at."""
        self.commit_requested = True
        if partition is not None and offset is not None:
            self.requested_offsets.append((partition, offset))


class TransactionContext:
    """Kafka's TransactionContext (KIP-618): a source task with transaction.boundary=connector says where
    a transaction ends. commit_transaction(record): right after that record (of the records its poll
    returns); commit_transaction(): the open transaction before this poll's records."""

    def __init__(self) -> None:
        self.after: set[int] = set()  # id() of records that end a transaction
        self.before_poll = False

    def commit_transaction(self, record: ConnectRecord | None = None) -> None:
        if record is None:
            self.before_poll = True
        else:
            self.after.add(id(record))


class Task:
    config_def: ClassVar[ConfigDef] = ConfigDef()

    def __init__(self) -> None:
        self.context: TaskContext

    def initialize(self, context: TaskContext) -> None:
        self.context = context

    def start(self, props: dict[str, str]) -> None:
        pass

    def stop(self) -> None:
        pass


class SourceTask(Task):
    def poll(self) -> list[ConnectRecord]:
        """Records ready now (an empty list when there are none; block briefly at most)."""
        raise NotImplementedError

    def commit(self, offsets: dict[str, dict]) -> None:
        """The offsets stored so far (source partition as canonical JSON → offset): everything up to
        them is durable in Kafka. (Kafka calls commit() without them; klog hands them over.)"""


class SinkTask(Task):
    def open(self, partitions: list[TP]) -> None:
        pass

    def put(self, records: list[ConnectRecord]) -> None:
        raise NotImplementedError

    def flush(self, offsets: dict[TP, int]) -> None:
        pass

    def pre_commit(self, offsets: dict[TP, int]) -> dict[TP, int]:
        self.flush(offsets)
        return offsets

    def close(self, partitions: list[TP]) -> None:
        pass


# -- finding a connector by connector.class ---------------------------------------------------------
BUILTIN = {  # module:class of klog's own connectors (imported only when used)
    "klog.connect.connectors.file:FileStreamSourceConnector",
    "klog.connect.connectors.file:FileStreamSinkConnector",
    "klog.connect.connectors.jdbc:JdbcSinkConnector",
    "klog.connect.connectors.debezium_jdbc:DebeziumJdbcSinkConnector",
    "klog.connect.connectors.jdbc_source:JdbcSourceConnector",
    "klog.connect.connectors.postgres:PostgresConnector",
    "klog.connect.connectors.http:HttpSinkConnector",
}
_NAMES = {  # every name a built-in answers to: its Java class names, their aliases, klog's short names
    "file-source": "klog.connect.connectors.file:FileStreamSourceConnector",
    "file-sink": "klog.connect.connectors.file:FileStreamSinkConnector",
    "jdbc-sink": "klog.connect.connectors.jdbc:JdbcSinkConnector",
    "debezium-jdbc-sink": "klog.connect.connectors.debezium_jdbc:DebeziumJdbcSinkConnector",
    "jdbc-source": "klog.connect.connectors.jdbc_source:JdbcSourceConnector",
    "postgres-cdc": "klog.connect.connectors.postgres:PostgresConnector",
    "postgres-source": "klog.connect.connectors.postgres:PostgresConnector",
    "http-sink": "klog.connect.connectors.http:HttpSinkConnector",
}
_JAVA = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": "file-source",
    "org.apache.kafka.connect.file.FileStreamSinkConnector": "file-sink",
    "io.confluent.connect.jdbc.JdbcSinkConnector": "jdbc-sink",
    "io.confluent.connect.jdbc.JdbcSourceConnector": "jdbc-source",
    "io.debezium.connector.jdbc.JdbcSinkConnector": "debezium-jdbc-sink",
    "io.debezium.connector.postgresql.PostgresConnector": "postgres-cdc",
    "io.confluent.connect.http.HttpSinkConnector": "http-sink",
}
for _java, _short in _JAVA.items():
    for _alias in aliases([_java]):
        # a simple name two plugins share (JdbcSinkConnector: Confluent's and Debezium's) stays the first's,
        # as it was before the second came; the full class names tell them apart
        _NAMES.setdefault(_alias, _NAMES[_short])


def plugin_names() -> dict[str, str]:
    """Plugin (canonical Java class name or klog name) → its implementation, for /connector-plugins."""
    return {java: _NAMES[short] for java, short in _JAVA.items()}


def load_class(spec: str) -> type:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


JAVA_PACKAGES = ("io.", "org.", "com.")


def find_connector(name: str) -> type[Connector]:
    """connector.class: a klog short name, a Java class name or its alias, a `klog.connectors` entry
    point, or a dotted Python path (module.Class or module:Class)."""
    if not name:
        raise ConfigError("connector.class", name, "required")
    if name in _NAMES:
        return load_class(_NAMES[name])
    from importlib.metadata import entry_points

    for ep in entry_points(group="klog.connectors"):
        if ep.name == name:
            return ep.load()
    module, sep, attr = name.partition(":") if ":" in name else name.rpartition(".")
    if sep and module:
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            if name.startswith(JAVA_PACKAGES):  # a Java connector klog has no counterpart of
                raise ConfigError("connector.class", name, f"klog does not implement this connector; it runs "
                                  f"{', '.join(sorted(_JAVA))}") from None
            raise ConfigError("connector.class", name, f"cannot load it ({e})") from None
        if isinstance(cls, type) and issubclass(cls, Connector):
            return cls
        raise ConfigError("connector.class", name, "not a klog.connect.api.Connector subclass")
    raise ConfigError("connector.class", name, "unknown connector: use FileStreamSource, FileStreamSink, "
                      "JdbcSinkConnector, PostgresConnector, a klog.connectors entry point or module.Class")

"""The worker: connectors started from their configs, each task run in its own thread.

Source tasks: poll → transforms → converters → producer; every offset.flush.interval.ms (and at stop)
the producer is flushed, then the offsets of the records it acknowledged are written to connect-offsets,
then the task's commit(offsets) is called (a CDC source confirms its slot there).
Sink tasks: a consumer group `connect-<name>` → converters → transforms → put(); every interval (and
on a rebalance or stop) pre_commit/flush, then the consumer offsets are committed. At-least-once by
construction; a sink that stores offsets with its data (the JDBC sink) makes it exactly-once.
"""

from __future__ import annotations

import json
import re
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klog.client.producer import GC_PAUSE_MIN_RECORDS, _gc_paused
from klog.client.producer_settings import acks_setting
from klog.connect import storage
from klog.connect.api import (
    TP,
    Connector,
    OffsetReader,
    SinkTask,
    SourceTask,
    TaskContext,
    TransactionContext,
    find_connector,
)
from klog.connect.config import ConfigDef, java_regex, regex_check, substitute_env
from klog.connect.converters import Converter, make_converter
from klog.connect.data import ConnectRecord
from klog.connect.errors import ConfigError, RetriableError
from klog.connect.errors_handler import BACKOFF_START_S, SKIP, DeadLetterQueue, ErrorHandler
from klog.connect.transforms import Chain

# a poll that returned this many records (the source has more waiting) is flushed with a later one,
# at most FLUSH_LAG_S after the last write: fewer fsyncs under load, no extra latency when idle
FLUSH_BATCH_RECORDS = 2048
FLUSH_LAG_S = 0.2
# Kafka producer properties klog's producers take, as `producer.*` (worker) / `producer.override.*`
PRODUCER_SETTINGS = {"compression.type": ("compression_type", str), "batch.size": ("batch_size", int),
                     "linger.ms": ("linger_ms", int), "acks": ("acks", acks_setting),  # Kafka's -1 is all
                     "buffer.memory": ("buffer_memory", int)}
# the executing class Kafka names (logs, the DLQ's __connect.errors.class.name) for a record its sink
# task reported (Stage TASK_PUT) and for one its source producer could not send (KAFKA_PRODUCE)
SINK_TASK = "org.apache.kafka.connect.sink.SinkTask"
WORKER_SOURCE_TASK = "org.apache.kafka.connect.runtime.WorkerSourceTask"
STATES = ("UNASSIGNED", "RUNNING", "PAUSED", "STOPPED", "FAILED", "RESTARTING")
NAME_RE = re.compile(r"[^\x00-\x1f/\\]+")  # Kafka refuses control characters; a slash breaks the REST paths


def _name_check(value: str) -> str | None:
    return None if NAME_RE.fullmatch(value) else "a connector name needs at least one character and no control " \
                                                  "character or slash"


COMMON = (ConfigDef()
          .define("name", check=_name_check, doc="the connector's name")
          .define("connector.class", doc="FileStreamSource, JdbcSinkConnector, PostgresConnector, module.Class, ...")
          .define("tasks.max", "int", 1, at_least=1)
          .define("key.converter", default=None).define("value.converter", default=None)
          .define("header.converter", default=None)
          .define("transforms", "list", []).define("predicates", "list", [])
          .define("errors.retry.timeout", "long", 0, check=lambda v: None if v >= -1 else "must be -1 or more")
          .define("errors.retry.delay.max.ms", "long", 60000, at_least=1)
          .define("errors.tolerance", default="none", choices=("none", "all"))
          .define("errors.log.enable", "boolean", False).define("errors.log.include.messages", "boolean", False))
SOURCE = COMMON.merged(ConfigDef()
                       .define("exactly.once.support", default="requested", choices=("requested", "required"))
                       .define("transaction.boundary", default="poll", choices=("poll", "interval", "connector"))
                       .define("transaction.boundary.interval.ms", "long", None)
                       .define("topic.creation.default.partitions", "int", -1)
                       .define("topic.creation.default.replication.factor", "int", -1)
                       .define("offsets.storage.topic", default=None))
SINK = COMMON.merged(ConfigDef()
                     .define("topics", "list", [])
                     .define("topics.regex", default="", check=lambda v: regex_check(v) if v else None)
                     .define("errors.deadletterqueue.topic.name", default="")
                     .define("errors.deadletterqueue.topic.replication.factor", "int", 3)
                     .define("errors.deadletterqueue.context.headers.enable", "boolean", False))
# keys of Kafka Connect's runtime klog accepts but does not implement (named in the warning)
RUNTIME_UNIMPLEMENTED = {"config.action.reload", "topic.creation.groups", "offsets.storage.topic",
                         "header.converter"}
KNOWN_PREFIXES = ("key.converter.", "value.converter.", "header.converter.", "transforms.", "predicates.",
                  "consumer.override.", "producer.override.", "admin.override.", "topic.creation.")

# connector.client.config.override.policy (Kafka's aliases and classes, lower-cased) -> the client settings
# a connector's *.override.* may set (None: any)
_POLICY_CLASS = "org.apache.kafka.connect.connector.policy.{}connectorclientconfigoverridepolicy"
# Kafka's Principal policy: the SASL settings that name a connector's principal; klog's cluster clients
# (librdkafka) take it as sasl.username and sasl.password where Java's take sasl.jaas.config
_PRINCIPAL = frozenset({"sasl.jaas.config", "sasl.mechanism", "security.protocol", "sasl.username", "sasl.password"})
OVERRIDE_POLICIES: dict[str, frozenset[str] | None] = {
    "all": None, "none": frozenset(), "principal": _PRINCIPAL, _POLICY_CLASS.format("all"): None,
    _POLICY_CLASS.format("none"): frozenset(), _POLICY_CLASS.format("principal"): _PRINCIPAL}

WORKER = (ConfigDef()
          .define("key.converter", default="org.apache.kafka.connect.json.JsonConverter")
          .define("value.converter", default="org.apache.kafka.connect.json.JsonConverter")
          .define("offset.storage.topic", default=storage.OFFSETS_DEFAULT)
          .define("config.storage.topic", default=storage.CONFIGS_DEFAULT)
          .define("status.storage.topic", default=storage.STATUS_DEFAULT)
          .define("offset.flush.interval.ms", "long", 10_000, at_least=1)
          .define("group.id", default="connect-cluster")
          .define("exactly.once.source.support", default="disabled", choices=("disabled", "enabled", "preparing"))
          .define("task.shutdown.graceful.timeout.ms", "long", 5000, at_least=0)
          .define("connector.client.config.override.policy", default="All", choices=tuple(OVERRIDE_POLICIES)))


@dataclass
class Validated:
    """A connector config checked end to end, ready to start (nothing started yet)."""

    props: dict[str, str]
    cls: type[Connector]
    config: dict[str, Any]
    ignored: list[str]  # keys named in the one warning

    @property
    def name(self) -> str:
        return self.config["name"]


def validate(props: dict[str, str], worker: dict[str, Any] | None = None) -> Validated:
    """ConfigError (naming the field) for a config that cannot run; nothing is started."""
    props = substitute_env({k: str(v) for k, v in props.items()})
    cls = find_connector(props.get("connector.class", ""))
    runtime = SOURCE if cls.kind == "source" else SINK
    config = runtime.parse(props)
    if cls.kind == "sink":
        if bool(config["topics"]) == bool(config["topics.regex"]):
            raise ConfigError("topics", props.get("topics", ""), "a sink connector needs exactly one of topics "
                              "and topics.regex")
        dlq = config["errors.deadletterqueue.topic.name"]
        if dlq and dlq in config["topics"]:
            raise ConfigError("errors.deadletterqueue.topic.name", dlq, "the DLQ cannot be one of the topics read")
        if dlq and config["topics.regex"] and java_regex(config["topics.regex"]).fullmatch(dlq):
            # (Kafka's SinkConnectorConfig.validate: the sink would read back what it sends to its DLQ)
            raise ConfigError("errors.deadletterqueue.topic.name", dlq, f"The DLQ topic '{dlq}' may not be included "
                              "in the regex matching the topics to consume from")
        _check_sink_group(config["name"])
    w = worker or WORKER.parse({})
    for side in ("key", "value"):
        make_converter(f"{side}.converter", config[f"{side}.converter"] or w[f"{side}.converter"],
                       _converter_props(props, side, worker), side == "key")
    chain = Chain(props)
    _check_override_policy(props, cls.kind, config, w["connector.client.config.override.policy"])
    if cls.kind == "source" or config["errors.deadletterqueue.topic.name"]:
        # Kafka's connectorUsesProducer (a source, or a sink's DLQ): the override keys named when bad (the
        # worker's are checked at its start)
        producer_settings({}, props)
    if cls.kind == "source":
        if config["exactly.once.support"] == "required" and w["exactly.once.source.support"] != "enabled":
            raise ConfigError("exactly.once.support", "required", "needs the worker's exactly.once.source.support="
                              "enabled")
    _check_connector(cls, props)
    own = set(cls.config_def.keys)
    ignored = sorted([k for k in props if (k in cls.unimplemented or k in RUNTIME_UNIMPLEMENTED)
                      or (k not in runtime.keys and k not in own and not k.startswith(KNOWN_PREFIXES)
                          and not cls.known_key(k))]
                     + chain.ignored + cls.unimplemented_in(props) + _unused_consumer_keys(cls.kind, props))
    return Validated(props, cls, config, ignored)


def _unused_consumer_keys(kind: str, props: dict[str, str]) -> list[str]:
    """A sink's consumer.override.* keys its group consumer does not take (max.poll.records, a misspelt
    key): named in the warning, not dropped silently; enable.auto.commit (the worker commits) and
    metadata.max.age.ms (how often topics.regex is matched again) are read."""
    if kind != "sink":
        return []
    from klog.client.group import GroupConfig

    used = {*GroupConfig.PROPERTIES, "metadata.max.age.ms"}
    return [k for k in props if k.startswith("consumer.override.") and k[len("consumer.override."):] not in used]


# librdkafka settings that run a program or load a library in the worker's process (the admin client takes
# admin.override.* as they are): the kinit command and the principal and keytab its default command line
# takes (a shell runs it), plugins, OpenSSL's engine and providers (a provider may be a path). A connector's
# config, which anyone reaching the REST API or the config topic writes, may not set them under any policy
# (as Kafka refuses JndiLoginModule in sasl.jaas.config by default); the worker's own admin.* and the
# cluster's -X properties may
RUNS_CODE = frozenset({"sasl.kerberos.kinit.cmd", "sasl.kerberos.principal", "sasl.kerberos.keytab",
                       "plugin.library.paths", "ssl.engine.location", "ssl.providers"})


def _check_override_policy(props: dict[str, str], kind: str, config: dict[str, Any], policy: str) -> None:
    """The worker's connector.client.config.override.policy over the connector's overrides of the clients
    it uses (Kafka's AbstractHerder: a source's producer, and its admin with topic.creation.*; a sink's
    consumer, and its producer and admin with a DLQ): ConfigError with Kafka's message for one it denies.
    An admin.override.* of RUNS_CODE is refused whatever the policy."""
    for key in sorted(props):
        if key.startswith("admin.override.") and key[len("admin.override."):].strip().lower() in RUNS_CODE:
            raise ConfigError(key, props[key], "a connector may not set it: librdkafka runs a program or loads a "
                              "library with it in the worker's process (the worker's admin.* may)")
    allowed = OVERRIDE_POLICIES[policy.lower()]  # (its default is not lower-cased by parsing)
    if allowed is None:
        return
    dlq = kind == "sink" and bool(config["errors.deadletterqueue.topic.name"])
    uses = {"producer.override.": kind == "source" or dlq, "consumer.override.": kind == "sink",
            "admin.override.": uses_admin(kind, config, props)}
    for key in sorted(props):
        prefix = next((p for p, used in uses.items() if used and key.startswith(p)), None)
        if prefix is not None and key[len(prefix):] not in allowed:
            name = policy.rsplit(".", 1)[-1].removesuffix("connectorclientconfigoverridepolicy").capitalize()
            raise ConfigError(key, props[key], f"The '{name}' policy does not allow '{key[len(prefix):]}' to be "
                                               "overridden in the connector configuration.")


def uses_admin(kind: str, config: dict[str, Any], props: dict[str, str]) -> bool:
    """Kafka's AbstractHerder.connectorUsesAdmin: a sink with a DLQ, a source with topic.creation.* keys."""
    if kind == "sink":
        return bool(config["errors.deadletterqueue.topic.name"])
    return any(k.startswith("topic.creation.") for k in props)


def admin_settings(worker_props: dict[str, str], v: Validated) -> dict[str, str]:
    """The Kafka client properties of the admin client a connector's topics are created and described with,
    in Kafka's order (Worker.adminConfigs): the worker's `admin.*`, then the connector's `admin.override.*`
    where the connector uses an admin (uses_admin; elsewhere Kafka has no admin for them to set). On a
    cluster they go over its own (-X) properties."""
    from klog.connect.config import with_prefix

    settings = with_prefix(worker_props, "admin.")
    if uses_admin(v.cls.kind, v.config, v.props):
        settings.update(with_prefix(v.props, "admin.override."))
    return settings


def admin_client(store, settings: dict[str, str]):  # noqa: ANN001, ANN201 - a store; the same or a RemoteStore
    """What a connector's topics are created and described through: on a cluster, a client of its own with
    `settings` over the cluster's properties (the store itself when they set nothing); klog's own store has
    no admin client (the worker names the settings it ignores there)."""
    if getattr(store, "is_local", True) or not settings:
        return store
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget
    from klog.errors import UsageError

    target = store.target
    try:
        return RemoteStore(ClusterTarget(target.bootstrap, {**target.properties, **settings}, target.name),
                           on_warning=store.warn)
    except UsageError as e:  # librdkafka refused a property: say where it came from
        raise ConfigError("admin.* / admin.override.*", ", ".join(sorted(settings)), str(e)) from None


def _check_sink_group(name: str) -> None:
    """A sink's consumer group is connect-<name>: a name no group id can carry is refused here, not by
    the task's first poll (a FAILED task)."""
    from klog.errors import UsageError
    from klog.meta.groups import GROUP_ID_CHARS_MAX, validate_group_id

    try:
        validate_group_id(f"connect-{name}")
    except UsageError:
        raise ConfigError("name", name, f"a sink's consumer group connect-<name> takes at most "
                          f"{GROUP_ID_CHARS_MAX} printable characters") from None


def producer_settings(worker_props: dict[str, str], props: dict[str, str]) -> dict[str, Any]:
    """The worker's `producer.*` settings, then the connector's `producer.override.*` (Kafka Connect's
    order), those klog's producers take (compression.type, batch.size, linger.ms, acks, buffer.memory) as
    producer keywords; ConfigError naming a bad one."""
    from klog.client.producer import check_producer_options
    from klog.connect.config import with_prefix
    from klog.errors import UsageError

    given = {**{k: ("producer." + k, v) for k, v in with_prefix(worker_props, "producer.").items()},
             **{k: ("producer.override." + k, v) for k, v in with_prefix(props, "producer.override.").items()}}
    out: dict[str, Any] = {}
    for name, (key, value) in given.items():
        if name not in PRODUCER_SETTINGS:
            continue
        keyword, kind = PRODUCER_SETTINGS[name]
        try:
            out[keyword] = kind(value)
            if keyword == "linger_ms":  # not among the options every producer takes: Kafka's at-least-0
                if out[keyword] < 0:
                    raise UsageError("linger.ms must be at least 0")
                continue
            check_producer_options(**{"acks": "all", "compression_type": "none", "batch_size": 1,
                                      keyword: out[keyword]})
        except (ValueError, UsageError) as e:
            raise ConfigError(key, value, str(e) if isinstance(e, UsageError) else "must be a number") from None
    return out


def _await_half_done_commit(store, tid: str, stopping: Callable[[], bool]) -> None:  # noqa: ANN001
    """A worker killed in the middle of committing leaves its transactional id PrepareCommit (or
    PrepareAbort) in a local store; the next producer's start completes such a document once it is
    stale (klog.broker.txn_coordinator.PREPARE_STALE_MS), and refuses to start before: wait that long
    instead of failing. (A cluster's coordinator completes it itself.)"""
    if not getattr(store, "is_local", True):
        return
    from klog.broker.txn_coordinator import PREPARE_STALE_MS
    from klog.errors import UsageError
    from klog.meta.transactions import PREPARING

    try:
        meta = store.describe_transaction(tid)
    except UsageError:
        return  # a new transactional id
    if meta.state in PREPARING:
        wait_s = (meta.update_ms + PREPARE_STALE_MS) / 1000 - time.time() + 0.05
        deadline = time.monotonic() + max(0.0, wait_s)
        while time.monotonic() < deadline and not stopping():
            time.sleep(0.05)


def _check_connector(cls: type[Connector], props: dict[str, str]) -> None:
    connector = cls()
    connector.config = cls.config_def.parse(props)
    connector.props = props
    connector.validate(connector.config)


def _converter_props(props: dict[str, str], side: str, worker: dict[str, Any] | None) -> dict[str, str]:
    from klog.connect.config import with_prefix

    base = dict((worker or {}).get(f"_{side}.converter.props", {}))
    base.update(with_prefix(props, f"{side}.converter."))
    return base


def ignored_warning(v: Validated) -> str | None:
    if not v.ignored:
        return None
    return (f"connector '{v.name}': klog does not implement these keys and ignores them: {', '.join(v.ignored)}")


class TaskRunner(threading.Thread):
    def __init__(self, worker: Worker, v: Validated, task_id: int, props: dict[str, str]) -> None:
        super().__init__(name=f"klog-connect-{v.name}-{task_id}", daemon=True)
        self.worker = worker
        self.v = v
        self.task_id = task_id
        self.props = props
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.state = "UNASSIGNED"
        self.trace: str | None = None
        self.error: BaseException | None = None
        config = v.config
        w = worker.config
        self.key_converter: Converter = make_converter("key.converter", config["key.converter"] or w["key.converter"],
                                                       _converter_props(v.props, "key", w), True)
        self.value_converter: Converter = make_converter(
            "value.converter", config["value.converter"] or w["value.converter"], _converter_props(v.props, "value", w),
            False)
        self.chain = Chain(v.props)
        self.flush_interval_s = w["offset.flush.interval.ms"] / 1000
        self._admin = None
        if getattr(worker.store, "is_local", True):
            ignored = [k for k in worker.props if k.startswith("admin.")] + \
                      [k for k in v.props if k.startswith("admin.override.")]
            if ignored:
                worker.warn_once(f"admin settings of {v.name}", f"connector '{v.name}': klog's own store has no "
                                 f"admin client; these settings have no meaning there and are ignored: "
                                 f"{', '.join(ignored)}")

    def admin(self) -> Any:
        """The store this task's topics are created and described through (admin_client), made once."""
        if self._admin is None:
            self._admin = admin_client(self.worker.store, admin_settings(self.worker.props, self.v))
        return self._admin

    def set_state(self, state: str, trace: str | None = None) -> None:
        self.state, self.trace = state, trace
        try:
            self.worker.status.put(self.v.name, state, self.task_id, trace)
        except Exception as e:  # noqa: BLE001 - the status topic is a report; the task goes on without it
            self.worker.warn(f"cannot write the status of connector '{self.v.name}' task {self.task_id}: {e}")

    def run(self) -> None:
        try:
            self.work()
            if self.state not in ("FAILED",):
                self.set_state("UNASSIGNED")
        except BaseException as e:  # noqa: BLE001 - a task's failure is its status, reported by the worker
            self.error = e
            self.set_state("FAILED", "".join(traceback.format_exception(type(e), e, e.__traceback__)))
            self.worker.task_failed(self, e)

    def work(self) -> None:
        raise NotImplementedError

    def wait_if_paused(self) -> None:
        if self.paused.is_set() and self.state != "PAUSED":
            self.set_state("PAUSED")
        while self.paused.is_set() and not self.stop_event.is_set():
            time.sleep(0.05)
        if self.state == "PAUSED" and not self.stop_event.is_set():
            self.set_state("RUNNING")

    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def transformed(self, record: ConnectRecord, original: Any) -> Any:
        """The record through the transforms one by one, each failure named by its class (Kafka's
        TransformationChain.apply: one execute per TransformationStage, Stage.TRANSFORMATION with its
        transformClass()): the record, None when one dropped it, SKIP when one failed (tolerated)."""
        for cls_name, apply in self.chain.stages:
            record = self.handler.execute("TRANSFORMATION", cls_name, apply, record, original=original)
            if record is SKIP or record is None:
                return record
        return record


class SourceRunner(TaskRunner):
    def work(self) -> None:
        name = self.v.name
        store = self.worker.store
        offsets = self.worker.offsets
        self.handler = ErrorHandler(self.v.config, name, self.task_id, self.worker.warn)
        self.handler.stopping = self.stopping
        settings = producer_settings(self.worker.props, self.v.props)
        # exactly once (KIP-618): records and their offsets written in one Kafka transaction per boundary
        self.transactional = self.worker.config["exactly.once.source.support"] == "enabled"
        self.boundary = self.v.config["transaction.boundary"]
        if self.transactional:
            tid = f"{self.worker.config['group.id']}-{name}-{self.task_id}"
            _await_half_done_commit(store, tid, self.stopping)
            self.producer = store.producer(transactional_id=tid, **settings)
            # only now (the last incarnation's transaction committed or aborted by the producer's start) do
            # connect-offsets' read_committed contents say what was delivered: read them again
            offsets.reload()
        else:
            self.producer = store.producer(**settings)
        self.pending: dict[bytes, dict | None] = {}
        self.committed: dict[str, dict] = {}
        self.topics_seen: set[str] = set()
        task: SourceTask = self.v.cls.task_class()
        context = TaskContext(name, self.task_id, self.worker.warn,
                              OffsetReader(lambda partition: offsets.get(name, partition)))
        self.transaction_context = None
        if self.transactional and self.boundary == "connector":
            self.transaction_context = context.transaction_context = TransactionContext()
        task.initialize(context)
        self.context = context
        self.poll_delay = BACKOFF_START_S
        task.start(self.props)
        if self.transactional:
            self.work_transactional(task)
            return
        self.set_state("RUNNING")
        last_commit = last_flush = time.monotonic()
        unflushed = False
        try:
            while not self.stop_event.is_set():
                self.wait_if_paused()
                if self.stop_event.is_set():
                    break
                # a poll's records die once sent and form no cycles: the cyclic GC, which would walk them
                # every few hundred allocations, waits until they are handed over
                with _gc_paused(GC_PAUSE_MIN_RECORDS):
                    records = self.poll(task)
                    if records:
                        self.send_all(records)
                        unflushed = True
                if self.take_requested():  # the task asked for its offsets stored now
                    self.commit(task)
                    last_commit = last_flush = time.monotonic()
                    unflushed = False
                # durable now (as Kafka's producer at linger.ms=0 sends at once), unless the task has more
                # waiting (a full batch) and the last write is recent: then one write covers several polls
                if unflushed and (len(records) < FLUSH_BATCH_RECORDS or time.monotonic() - last_flush >= FLUSH_LAG_S):
                    self.producer.flush()
                    last_flush, unflushed = time.monotonic(), False
                if time.monotonic() - last_commit >= self.flush_interval_s:
                    self.commit(task)
                    last_commit = time.monotonic()
                if not records:
                    time.sleep(0.01)
            self.commit(task)
        finally:
            try:
                task.stop()
            finally:
                self.producer.close()

    def work_transactional(self, task: SourceTask) -> None:
        """The poll loop with exactly-once delivery: each transaction holds its records and, written last,
        their offsets (to connect-offsets), so a kill at any instant leaves both or neither; the task is
        told (commit) after each. transaction.boundary: each poll, every ...interval.ms (default the
        offset flush interval), or where the task says (connector: a CDC source's database transactions)."""
        self.set_state("RUNNING")
        interval_s = (self.v.config["transaction.boundary.interval.ms"] or
                      self.worker.config["offset.flush.interval.ms"]) / 1000
        opened = time.monotonic()
        tc = self.transaction_context
        try:
            while not self.stop_event.is_set():
                if self.paused.is_set():
                    self.commit_transaction(task)  # not held open (past its timeout) while paused
                self.wait_if_paused()
                if self.stop_event.is_set():
                    break
                with _gc_paused(GC_PAUSE_MIN_RECORDS):
                    records = self.poll(task)
                    polled = bool(records)
                    if tc is not None:
                        if tc.before_poll:
                            tc.before_poll = False
                            self.commit_transaction(task)
                        start = 0
                        for i, r in enumerate(records):
                            if id(r) in tc.after:
                                self.send_in_transaction(records[start:i + 1])
                                self.commit_transaction(task)
                                start = i + 1
                        tc.after.clear()
                        records = records[start:]
                    if records:
                        if not self.producer.in_transaction:
                            opened = time.monotonic()
                        self.send_in_transaction(records)
                if self.take_requested():  # the task asked for its offsets stored now: the transaction ends
                    if self.pending and not self.producer.in_transaction:
                        self.producer.begin()
                    self.commit_transaction(task)
                if self.boundary == "poll" or (self.boundary == "interval" and time.monotonic() - opened >= interval_s):
                    self.commit_transaction(task)
                if not polled:
                    time.sleep(0.01)
            self.commit_transaction(task)  # a clean stop: what was polled is committed
        finally:
            try:
                task.stop()
            finally:
                self.producer.close()

    def poll(self, task: SourceTask) -> list[ConnectRecord]:
        """task.poll(). A RetriableError is logged and the task polled again, without limit, as Kafka's
        AbstractWorkerSourceTask.poll (errors.retry.timeout is the converters', transforms' and producer's,
        not poll's); klog waits before it polls again, 0.3 s doubling up to errors.retry.delay.max.ms (Kafka
        polls again at once), and a poll that returns starts the wait over."""
        try:
            records = task.poll() or []
        except RetriableError as e:
            delay = self.poll_delay
            self.worker.warn(f"connector '{self.v.name}' task {self.task_id}: poll() failed, polling again in "
                             f"{delay:.1f} s: {e}")
            self.stop_event.wait(delay)
            self.poll_delay = min(delay * 2, max(self.handler.max_delay_s, BACKOFF_START_S))
            return []
        self.poll_delay = BACKOFF_START_S
        return records

    def take_requested(self) -> bool:
        """Whether the task asked (request_offset_commit) for its offsets stored now; the offsets it gave
        become pending, after those of the records it returned."""
        context = self.context
        if not context.commit_requested:
            return False
        context.commit_requested = False
        requested, context.requested_offsets = context.requested_offsets, []
        for partition, offset in requested:
            self.pending[storage.partition_key(self.v.name, partition)] = offset
        return True

    def send_in_transaction(self, records: list[ConnectRecord]) -> None:
        if records:
            if not self.producer.in_transaction:
                self.producer.begin()
            self.send_all(records)

    def commit_transaction(self, task: SourceTask) -> None:
        """The open transaction's offsets written into it, then committed; the task told."""
        producer = self.producer
        if not producer.in_transaction:
            return
        offsets_topic = self.worker.offsets.topic
        items = {k: None if v is None else storage.compact_json(v) for k, v in self.pending.items()}
        for key, value in items.items():
            producer.send(offsets_topic, value, key=key)
        producer.commit()
        self.worker.offsets.remember(items)
        pending, self.pending = self.pending, {}
        self._committed(pending)
        if pending:
            task.commit(dict(self.committed))

    def _committed(self, pending: dict[bytes, dict | None]) -> None:
        for key, value in pending.items():
            partition = json.dumps(json.loads(key)[1], sort_keys=True)
            if value is None:
                self.committed.pop(partition, None)
            else:
                self.committed[partition] = value

    def send_all(self, records: list[ConnectRecord]) -> None:
        """A poll's records transformed, converted and handed to the producer in runs sharing a topic,
        partition and timestamp (one bulk append each, not one call per record).

        The steps are pure, so when any record fails the whole poll is redone record by record through
        the error handler (retries, errors.tolerance), which decides that record's fate."""
        try:
            out = self._converted(records)
        except Exception:  # noqa: BLE001 - the slow path below reports it, per record
            out = None
        if out is None:
            for r in records:
                self.send(r)
            return
        producer, run, run_of = self.producer, [], None
        for topic, partition, timestamp, headers, key, value in out:
            if headers:  # headers are per record: sent alone (after the run before it, keeping the order)
                if run:
                    producer.send_keyed(run_of[0], run, None, run_of[1], run_of[2])
                    run, run_of = [], None
                producer.send(topic, value, key, headers, partition, timestamp)
                continue
            of = (topic, partition, timestamp)
            if of != run_of:
                if run:
                    producer.send_keyed(run_of[0], run, None, run_of[1], run_of[2])
                run, run_of = [], of
            run.append((key, value))
        if run:
            producer.send_keyed(run_of[0], run, None, run_of[1], run_of[2])
        self._note_offsets(records)

    def _converted(self, records: list[ConnectRecord]) -> list[tuple] | None:
        """(topic, partition, timestamp, headers, key bytes, value bytes) of each record the transforms
        keep; an exception when any step fails (the caller then goes record by record)."""
        chain, key_of, value_of = self.chain, self.key_converter.from_connect, self.value_converter.from_connect
        out = []
        for r in records:
            if chain:
                r = chain.apply(r)
                if r is None:
                    continue
            topic = r.topic
            if topic not in self.topics_seen:
                self.ensure_topic(topic)
            out.append((topic, r.kafka_partition, r.timestamp, r.headers, key_of(topic, r.key_schema, r.key),
                        value_of(topic, r.value_schema, r.value)))
        return out

    def _note_offsets(self, records: list[ConnectRecord]) -> None:
        """The last offset of each source partition in `records` becomes pending (a CDC poll has one
        partition: one key built, not one per record)."""
        last: dict[int, tuple[int, ConnectRecord]] = {}
        for i, r in enumerate(records):
            if r.source_partition is not None:
                last[id(r.source_partition)] = (i, r)
        for _, r in sorted(last.values(), key=lambda ir: ir[0]):  # equal partitions in separate dicts: the last wins
            self.pending[storage.partition_key(self.v.name, r.source_partition)] = r.source_offset

    def send(self, r: ConnectRecord) -> None:
        h = self.handler
        out = self.transformed(r, r)
        if out is not SKIP and out is not None:
            key = h.execute("KEY_CONVERTER", self.key_converter.class_name, self.key_converter.from_connect,
                            out.topic, out.key_schema, out.key, original=r)
            value = SKIP if key is SKIP else h.execute(
                "VALUE_CONVERTER", self.value_converter.class_name, self.value_converter.from_connect,
                out.topic, out.value_schema, out.value, original=r)
            if value is not SKIP:
                self.ensure_topic(out.topic)
                h.execute("KAFKA_PRODUCE", WORKER_SOURCE_TASK, self.producer.send, out.topic, value, key,
                          out.headers or None, out.kafka_partition, out.timestamp, original=r)
        if r.source_partition is not None:
            self.pending[storage.partition_key(self.v.name, r.source_partition)] = r.source_offset

    def ensure_topic(self, topic: str) -> None:
        if topic in self.topics_seen:
            return
        admin = self.admin()  # (Kafka's TopicAdmin of a source with topic.creation.*)
        if not admin.has_topic(topic):
            parts = self.v.config["topic.creation.default.partitions"]
            rf = self.v.config["topic.creation.default.replication.factor"]
            admin.create_topic(topic, partitions=parts if parts > 0 else None,
                               replication_factor=rf if rf > 0 else None, exist_ok=True)
        self.topics_seen.add(topic)

    def commit(self, task: SourceTask) -> None:
        """Records acknowledged, then their offsets stored, then the task told (Kafka's order)."""
        self.producer.flush()
        if self.pending:
            pending, self.pending = self.pending, {}
            self.worker.offsets.put(self.v.name, pending)
            self._committed(pending)
            task.commit(dict(self.committed))


class SinkRunner(TaskRunner):
    def work(self) -> None:
        from klog.client.group import GroupConfig

        name, store, config = self.v.name, self.worker.store, self.v.config
        dlq_topic = config["errors.deadletterqueue.topic.name"]
        # the DLQ producer as Kafka's: the worker's producer.* then the connector's producer.override.*
        # and created through the admin client (Kafka's DeadLetterQueueReporter.createAndSetup)
        self.dlq = DeadLetterQueue(store, dlq_topic, config["errors.deadletterqueue.context.headers.enable"],
                                   config["errors.deadletterqueue.topic.replication.factor"],
                                   producer_settings(self.worker.props, self.v.props),
                                   admin=self.admin()) if dlq_topic else None
        self.handler = ErrorHandler(config, name, self.task_id, self.worker.warn, self.dlq)
        self.handler.stopping = self.stopping
        pattern = config["topics.regex"]
        topics = config["topics"]
        if topics:
            admin = self.admin()
            for t in topics:
                storage.ensure_topic(admin, t, 1, compacted=False) if not admin.has_topic(t) else None
        self.consumed: dict[TP, int] = {}
        self.failed = False
        self.skip_below: dict[TP, int] = {}
        task: SinkTask = self.v.cls.task_class()
        self.task = task

        # Kafka's enableErrantRecordReporter: a reporter only with a DLQ or errors.log.enable (else the
        # task's errantRecordReporter() is null and the task decides: the JDBC sinks fail naming the record)
        errant = self.report_errant if dlq_topic or config["errors.log.enable"] else None
        self.context = TaskContext(name, self.task_id, self.worker.warn, errant_reporter=errant)
        task.initialize(self.context)
        task.start(self.props)
        group = self.consumer_config(GroupConfig)
        self.metadata_max_age_s = self.metadata_max_age()
        self.set_state("RUNNING")
        try:
            if pattern:
                # topics.regex is a pattern subscription, as Kafka's consumer has it: a task starts with no
                # topic matching yet (a CDC source still taking its snapshot) and takes each new match when
                # it looks again (every metadata.max.age.ms), as Kafka's consumer does at a metadata refresh
                topics = self.matching(pattern)
            while topics is not None and not self.stop_event.is_set():
                topics = self.consume(name, group, topics, pattern)
        finally:
            task.stop()
            if self.dlq is not None:
                self.dlq.close()

    def consume(self, name: str, group: Any, topics: list[str], pattern: str) -> list[str] | None:
        """Read `topics` as the group until stopped (None), or, with topics.regex, until more topics match
        (then the new list: offsets committed, partitions closed, the group joined again with them)."""
        self.consumer = self.worker.store.group_consumer(f"connect-{name}", *topics, config=group,
                                                         on_assign=self.assigned, on_revoke=self.revoked)
        last_commit = last_look = time.monotonic()
        more = None
        try:
            for batch in self.consumer.batches(timeout_ms=100):
                self.wait_if_paused()
                if self.stop_event.is_set():
                    break  # this batch is not processed: its offsets stay uncommitted
                self.process(batch)
                now = time.monotonic()
                if now - last_commit >= self.flush_interval_s:
                    self.commit()
                    last_commit = now
                if pattern and now - last_look >= self.metadata_max_age_s:
                    last_look = now
                    found = self.matching(pattern, wait=False)
                    if found is not None and set(found) - set(topics):
                        more = sorted(set(found) | set(topics))
                        break
            self.commit()
        except BaseException:
            self.failed = True  # a revoke on the way out must not commit what the task may not hold
            raise
        finally:
            self.consumer.close()  # revokes: the task closes its partitions
        return more

    def matching(self, pattern: str, wait: bool = True) -> list[str] | None:
        """The topics topics.regex matches; with `wait`, looked for again until one does (None once the task
        is stopped meanwhile), else None when none does."""
        from klog.errors import UnknownTopicError

        while not self.stop_event.is_set():
            try:
                return self.worker.store.resolve_topics(pattern=pattern)
            except UnknownTopicError:
                if not wait:
                    return None
            self.stop_event.wait(min(self.metadata_max_age_s, 0.5))
        return None

    def metadata_max_age(self) -> float:
        """How often topics.regex is matched again: the consumer's metadata.max.age.ms (the worker's
        consumer.*, the connector's consumer.override.*), 5 s by default (Kafka's consumer: 5 min)."""
        from klog.connect.config import with_prefix

        props = {**with_prefix(self.worker.props, "consumer."), **with_prefix(self.v.props, "consumer.override.")}
        try:
            return max(0.05, int(props.get("metadata.max.age.ms", 5000)) / 1000)
        except ValueError:
            return 5.0

    def report_errant(self, record: ConnectRecord, error: BaseException) -> None:
        """The sink task's errant record reporter (Kafka's WorkerErrantRecordReporter.report): returns once
        the record is in the DLQ; raises under errors.tolerance=none."""
        raw = record.raw if record.raw is not None else self._as_consumed(record)
        self.handler.execute_failed(raw, "TASK_PUT", SINK_TASK, error)

    def _as_consumed(self, record: ConnectRecord) -> Any:
        """A record the task made itself (no consumed record behind it), converted with the connector's
        converters for the DLQ, as Kafka's reporter converts one that is no InternalSinkRecord."""
        from klog.client.records import Record

        topic = record.topic
        return Record(topic, record.kafka_partition, record.kafka_offset, record.timestamp, 0,
                      self.key_converter.from_connect(topic, record.key_schema, record.key),
                      self.value_converter.from_connect(topic, record.value_schema, record.value),
                      list(record.headers or []))

    def put(self, records: list[ConnectRecord]) -> None:
        """put(), retried as errors.retry.timeout says; a reported record beyond errors.tolerance fails the
        task though put() caught what the reporter raised (Kafka's maybeThrowAsyncError)."""
        self.handler.retrying("TASK_PUT", self.task.put, records)
        self.handler.raise_swallowed("TASK_PUT", SINK_TASK)

    def consumer_config(self, group_config: type) -> Any:
        """The sink's group settings: the worker's `consumer.*`, then the connector's `consumer.override.*`
        (those klog's group member knows: session.timeout.ms, heartbeat.interval.ms, ...)."""
        from klog.connect.config import with_prefix

        props = {**with_prefix(self.worker.props, "consumer."), **with_prefix(self.v.props, "consumer.override.")}
        known = {k: v for k, v in props.items() if k in group_config.PROPERTIES and k != "enable.auto.commit"}
        config = group_config.from_properties(known)
        config.enable_auto_commit = False  # offsets are committed after the task flushed
        if "client.id" not in known:
            config.client_id = f"connector-consumer-{self.v.name}-{self.task_id}"
        return config

    def process(self, batch: list) -> None:
        """A consumed batch converted, transformed and put; the consumed offsets noted once put() took it.

        The steps are pure: they run over the whole batch without the error handler's per-record
        bookkeeping, and only when one fails is the batch redone record by record through the handler
        (retries, errors.tolerance, the DLQ), which decides that record's fate."""
        try:
            records, consumed = self._process_fast(batch)
        except Exception:  # noqa: BLE001 - the per-record path below reports it
            self._process_each(batch)
            return
        if records:
            self.put(records)
        self.consumed.update(consumed)

    def _process_fast(self, batch: list) -> tuple[list[ConnectRecord], dict[TP, int]]:
        key_of, value_of, chain, skip_below = (self.key_converter.to_connect, self.value_converter.to_connect,
                                               self.chain, self.skip_below)
        records, consumed = [], {}
        for raw in batch:
            tp = (raw.topic, raw.partition)
            if skip_below and raw.offset < skip_below.get(tp, -1):
                continue
            consumed[tp] = raw.offset + 1
            key_schema, key = key_of(raw.topic, raw.key)
            value_schema, value = value_of(raw.topic, raw.value)
            record = ConnectRecord(raw.topic, raw.partition, key_schema, key, value_schema, value, raw.timestamp,
                                   list(raw.headers or []), kafka_offset=raw.offset, raw=raw)
            if chain:
                record = chain.apply(record)
                if record is None:
                    continue
            records.append(record)
        return records, consumed

    def _process_each(self, batch: list) -> None:
        h = self.handler
        records = []
        consumed = {}
        for raw in batch:
            tp = (raw.topic, raw.partition)
            if raw.offset < self.skip_below.get(tp, -1):
                continue  # the sink already holds it (offsets it stores itself)
            consumed[tp] = raw.offset + 1
            key_schema, key = self._convert(h, "KEY_CONVERTER", self.key_converter, raw, raw.key)
            if key is SKIP:
                continue
            value_schema, value = self._convert(h, "VALUE_CONVERTER", self.value_converter, raw, raw.value)
            if value is SKIP:
                continue
            record = ConnectRecord(raw.topic, raw.partition, key_schema, key, value_schema, value, raw.timestamp,
                                   list(raw.headers or []), kafka_offset=raw.offset, raw=raw)
            record = self.transformed(record, raw)
            if record is SKIP or record is None:
                continue
            records.append(record)
        if records:
            self.put(records)
        self.consumed.update(consumed)  # only once put() took them

    @staticmethod
    def _convert(h: ErrorHandler, stage: str, converter: Converter, raw: Any, data: bytes | None) -> tuple:
        out = h.execute(stage, converter.class_name, converter.to_connect, raw.topic, data, original=raw)
        return (None, SKIP) if out is SKIP else out

    def commit(self, tps: list[TP] | None = None) -> None:
        """DLQ flushed, the task flushed (pre_commit), then the consumer offsets committed."""
        offsets = {tp: o for tp, o in self.consumed.items() if tps is None or tp in tps}
        if not offsets:
            return
        if self.dlq is not None:
            self.dlq.flush()
        committed = self.handler.retrying("TASK_FLUSH", self.task.pre_commit, dict(offsets))
        if committed:
            from klog.meta.groups import GroupFencedError

            try:
                self.consumer.commit(committed)
            except GroupFencedError as e:  # expelled: the next owner redoes these (the sink dedupes if it can)
                self.worker.warn(str(e))

    def assigned(self, tps: list[TP]) -> None:
        self.context.rewinds.clear()
        self.task.open(list(tps))
        for tp, offset in self.context.rewinds.items():
            self.skip_below[tp] = offset

    def revoked(self, tps: list[TP]) -> None:
        if not self.failed:
            self.commit(list(tps))
        self.task.close(list(tps))
        for tp in tps:
            self.consumed.pop(tp, None)
            self.skip_below.pop(tp, None)


def restart_plan(status: dict, include_tasks: bool, only_failed: bool) -> tuple[bool, list[int], dict]:
    """Kafka's RestartPlan for `status` (a ConnectorStateInfo): whether the connector instance restarts,
    which task ids do, and the status to answer with, RESTARTING on each of those."""
    connector_too = not only_failed or status["connector"]["state"] == "FAILED"
    task_ids = [t["id"] for t in status["tasks"] if include_tasks and (not only_failed or t["state"] == "FAILED")]
    planned = {**status, "connector": {**status["connector"]}, "tasks": [
        {**t, "state": "RESTARTING"} if t["id"] in task_ids else dict(t) for t in status["tasks"]]}
    if connector_too:
        planned["connector"]["state"] = "RESTARTING"
    return connector_too, task_ids, planned


class ConnectorContext:
    """What a connector may ask of its worker (Kafka's ConnectorContext). A reconfiguration runs on a
    thread of its own: the thread asking (a connector's table monitor) is stopped by it."""

    def __init__(self, reconfigure: Callable[[], None]) -> None:
        self._reconfigure = reconfigure

    def request_task_reconfiguration(self) -> None:
        threading.Thread(target=self._reconfigure, name="klog-connect-reconfigure", daemon=True).start()


class Worker:
    """Connectors and their tasks in this process (connect-standalone's worker)."""

    def __init__(self, store, worker_props: dict[str, str] | None = None,  # noqa: ANN001
                 warn: Callable[[str], None] | None = None, worker_id: str = "klog") -> None:
        from klog.connect.config import with_prefix

        props = worker_props or {}
        self.props = props
        self.config = WORKER.parse(props)
        producer_settings(props, {})  # a bad producer.* setting refused here, not in every task
        for side in ("key", "value"):
            self.config[f"_{side}.converter.props"] = with_prefix(props, f"{side}.converter.")
        self.store = store
        self.warn = warn or (lambda m: None)
        self.offsets = storage.OffsetStore(store, self.config["offset.storage.topic"])
        self.configs = storage.ConfigStore(store, self.config["config.storage.topic"])
        self.status = storage.StatusStore(store, self.config["status.storage.topic"], worker_id)
        self.connectors: dict[str, tuple[Validated, Connector, list[TaskRunner]]] = {}
        self.failures: list[tuple[str, int, BaseException]] = []
        self.stopped: dict[str, Validated] = {}  # connectors stopped by request (kept for a restart)
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.lock = threading.RLock()  # changes one at a time: REST requests, a connector's reconfiguration

    def validate(self, props: dict[str, str]) -> Validated:
        return validate(props, self.config)

    def start(self, v: Validated, paused: bool = False) -> None:
        """The connector and its tasks started; with `paused` its tasks wait before their first record."""
        if v.name in self.connectors:
            raise ConfigError("name", v.name, "a connector of this name is running")
        connector = self._new_connector(v)
        tasks = connector.task_configs(v.config["tasks.max"])[: v.config["tasks.max"]]
        self.configs.put_connector(v.name, v.props, tasks)
        self.configs.put_target_state(v.name, "PAUSED" if paused else "STARTED")
        self.status.put(v.name, "PAUSED" if paused else "RUNNING")
        self.connectors[v.name] = (v, connector, self._start_tasks(v, tasks, paused))

    def _new_connector(self, v: Validated) -> Connector:
        connector = v.cls()
        connector.context = ConnectorContext(lambda: self.reconfigure(v.name, connector))
        connector.start(v.props)
        return connector

    def _start_tasks(self, v: Validated, tasks: list[dict[str, str]], paused: bool) -> list[TaskRunner]:
        runner_cls = SourceRunner if v.cls.kind == "source" else SinkRunner
        runners = [runner_cls(self, v, i, {**v.props, **t}) for i, t in enumerate(tasks)]
        for r in runners:
            if paused:
                r.paused.set()
            r.start()
        return runners

    def reconfigure(self, name: str, connector: Connector) -> None:
        """The connector asked for new task configs (Kafka's requestTaskReconfiguration: the JDBC source's
        tables changed): when they differ, its tasks stop (committing their offsets) and the new ones start.
        They are computed (the database read) before the lock is taken: REST requests do not wait for it."""
        with self.lock:
            entry = self.connectors.get(name)
        if entry is None or entry[1] is not connector:
            return  # stopped or replaced meanwhile
        v = entry[0]
        tasks = connector.task_configs(v.config["tasks.max"])[: v.config["tasks.max"]]
        with self.lock:
            entry = self.connectors.get(name)
            if entry is None or entry[1] is not connector:
                return
            runners = entry[2]
            if [{**v.props, **t} for t in tasks] == [r.props for r in runners]:
                return
            paused = any(r.paused.is_set() for r in runners)
            for r in runners:
                r.stop_event.set()
            for r in runners:
                r.join()
            self.configs.put_connector(name, v.props, tasks)
            self.connectors[name] = (v, connector, self._start_tasks(v, tasks, paused))

    def warn_once(self, key: str, message: str) -> None:
        """`message` unless one was given under `key` before (not again at every task or restart)."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        self.warn(message)

    def task_failed(self, runner: TaskRunner, error: BaseException) -> None:
        with self._lock:
            self.failures.append((runner.v.name, runner.task_id, error))
        self.warn(f"connector '{runner.v.name}' task {runner.task_id} failed: {error}")

    def runners(self) -> list[TaskRunner]:
        return [r for _, _, runners in self.connectors.values() for r in runners]

    def alive(self) -> bool:
        return any(r.is_alive() for r in self.runners())

    def pause(self, name: str) -> None:
        if name not in self.connectors:  # STOPPED: its tasks start paused, as Kafka's STOPPED -> PAUSED
            self.start(self.stopped.pop(name), paused=True)
            return
        for r in self.connectors[name][2]:
            r.paused.set()
        self.configs.put_target_state(name, "PAUSED")
        self.status.put(name, "PAUSED")

    def resume(self, name: str) -> None:
        if name not in self.connectors:  # STOPPED: its tasks start again
            self.restart(name)
            return
        for r in self.connectors[name][2]:
            r.paused.clear()
        self.configs.put_target_state(name, "STARTED")
        self.status.put(name, "RUNNING")

    def stop_connector(self, name: str, timeout_s: float | None = None) -> None:
        v, connector, runners = self.connectors.pop(name)
        for r in runners:
            r.stop_event.set()
        for r in runners:
            r.join(timeout_s)
        connector.stop()
        self.status.put(name, "UNASSIGNED")
        self.stopped[name] = v

    # -- management (the REST API's verbs) ------------------------------------------------------------
    def conflict(self) -> str | None:
        """Why a request cannot be served now (409): never, on a standalone worker (no rebalances)."""
        return None

    def names(self) -> list[str]:
        return sorted(set(self.connectors) | set(self.stopped))

    def validated(self, name: str) -> Validated:
        if name in self.connectors:
            return self.connectors[name][0]
        if name in self.stopped:
            return self.stopped[name]
        raise KeyError(name)

    def put(self, props: dict[str, str]) -> bool:
        """Create or reconfigure a connector (restarting it); True when it is new. (A config given over
        the REST API gets its warning about keys klog ignores here, as `klog connect run` gives it.)"""
        v = self.validate(props)
        if (message := ignored_warning(v)) is not None:
            self.warn(message)
        new = v.name not in self.connectors and v.name not in self.stopped
        if v.name in self.connectors:
            self.stop_connector(v.name)
        self.stopped.pop(v.name, None)
        self.start(v)
        return new

    def restart(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> dict:
        """POST .../restart (KIP-745): the connector instance (unless only_failed and it has not failed),
        its tasks only with include_tasks (only the FAILED ones with only_failed). A connector that is
        not running (stopped) starts again whole. Returns the status with RESTARTING on what restarts."""
        v = self.validated(name)
        if name not in self.connectors:
            self.stopped.pop(name, None)
            self.start(v)
            return self.describe_status(name)
        connector_too, task_ids, planned = restart_plan(self.describe_status(name), include_tasks, only_failed)
        if connector_too:
            _, old, runners = self.connectors[name]
            old.stop()
            connector = self._new_connector(v)
            tasks = connector.task_configs(v.config["tasks.max"])[: v.config["tasks.max"]]
            self.connectors[name] = (v, connector, runners)
            if [{**v.props, **t} for t in tasks] != [r.props for r in runners]:
                # the new instance splits the work differently: its tasks replace the old ones (Kafka's
                # reconfiguration after a connector restart)
                self.stop_connector(name)
                self.stopped.pop(name, None)
                self.start(v)
                return planned
        for task_id in task_ids:
            self.restart_task(name, task_id)
        return planned

    def stop_only(self, name: str) -> None:
        """PUT .../stop: tasks stopped, the config kept (Kafka 3.5's STOPPED target state)."""
        if name in self.connectors:
            self.stop_connector(name)
        self.configs.put_target_state(name, "STOPPED")
        self.status.put(name, "STOPPED")

    def delete(self, name: str) -> None:
        self.validated(name)
        if name in self.connectors:
            self.stop_connector(name)
        self.stopped.pop(name, None)
        self.configs.delete_connector(name)

    def target_state(self, name: str) -> str:
        """STARTED, PAUSED or STOPPED, as the REST API's verbs left it."""
        self.validated(name)
        if name in self.connectors:
            return "PAUSED" if any(r.paused.is_set() for r in self.connectors[name][2]) else "STARTED"
        return self.configs.target_state(name)

    # -- offsets (KIP-875): the REST API checks the connector is STOPPED before a change -----------
    def connector_offsets(self, name: str) -> list[dict]:
        from klog.connect.offsets import list_offsets

        return list_offsets(self.store, self.offsets, name, self.validated(name).cls.kind)

    def alter_offsets(self, name: str, body: Any) -> None:
        from klog.connect.offsets import alter_offsets

        v = self.validated(name)
        alter_offsets(self.store, self.offsets, name, v.cls.kind, body, v)

    def reset_offsets(self, name: str) -> None:
        from klog.connect.offsets import reset_offsets

        v = self.validated(name)
        reset_offsets(self.store, self.offsets, name, v.cls.kind, v)

    def describe_status(self, name: str) -> dict:
        v = self.validated(name)
        if name in self.connectors:
            runners = self.connectors[name][2]
            paused = any(r.paused.is_set() for r in runners)
            tasks = [{"id": r.task_id, "state": r.state, "worker_id": self.status.worker_id,
                      **({"trace": r.trace} if r.trace else {})} for r in runners]
            state = "PAUSED" if paused else ("FAILED" if tasks and all(t["state"] == "FAILED" for t in tasks)
                                             else "RUNNING")
        else:
            tasks, state = [], self.configs.target_state(name) if self.configs.target_state(name) == "STOPPED" \
                else "UNASSIGNED"
        return {"name": name, "connector": {"state": state, "worker_id": self.status.worker_id}, "tasks": tasks,
                "type": v.cls.kind}

    def task_configs(self, name: str) -> list[dict[str, str]]:
        if name not in self.connectors:
            self.validated(name)
            return []
        return [r.props for r in self.connectors[name][2]]

    def restart_task(self, name: str, task_id: int) -> None:
        v, connector, runners = self.connectors[name]
        old = runners[task_id]
        old.stop_event.set()
        old.join()
        new = type(old)(self, v, task_id, old.props)
        runners[task_id] = new
        new.start()

    def stop(self) -> None:
        """Every task stopped after committing what it did (offsets of acknowledged records)."""
        with self.lock:
            for name in list(self.connectors):
                self.stop_connector(name)
        for s in (self.offsets, self.configs, self.status):
            s.close()

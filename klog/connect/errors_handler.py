"""Kafka Connect's error handling: retries with backoff (`errors.retry.timeout`), tolerance
(`errors.tolerance`), the log (`errors.log.enable`) and the dead letter queue with Kafka's error headers
(`errors.deadletterqueue.*`, sink connectors)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from klog.connect.errors import ConnectError, RetriableError
from klog.store.format import TIMESTAMP_TYPE_NAMES

SKIP = object()  # a failed record tolerated: go on without it
HEADER_PREFIX = "__connect.errors."
BACKOFF_START_S = 0.3


class ToleranceExceeded(ConnectError):
    pass


class ErrorHandler:
    def __init__(self, config: dict[str, Any], connector: str, task_id: int, warn: Callable[[str], None],
                 dlq: DeadLetterQueue | None = None) -> None:
        self.retry_timeout_ms = config["errors.retry.timeout"]
        self.max_delay_s = config["errors.retry.delay.max.ms"] / 1000
        self.tolerate = config["errors.tolerance"] == "all"
        self.log = config["errors.log.enable"]
        self.log_messages = config["errors.log.include.messages"]
        self.connector = connector
        self.task_id = task_id
        self.warn = warn
        self.dlq = dlq
        self.failures = 0
        self.errant_error: BaseException | None = None  # of the first errant record (Kafka's taskPutException)
        self.stopping: Callable[[], bool] = lambda: False

    def retrying(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), RetriableError retried with backoff until errors.retry.timeout (-1: forever)."""
        deadline = time.monotonic() + self.retry_timeout_ms / 1000
        delay = BACKOFF_START_S
        while True:
            try:
                return fn(*args)
            except RetriableError as e:
                if self.stopping() or (self.retry_timeout_ms != -1 and time.monotonic() + delay > deadline):
                    raise ConnectError(f"{stage} failed after retrying for {self.retry_timeout_ms} ms "
                                       f"(errors.retry.timeout): {e}") from e
                self.warn(f"connector '{self.connector}' task {self.task_id}: {stage} failed, retrying in "
                          f"{delay:.1f} s: {e}")
                time.sleep(delay)
                delay = min(delay * 2, self.max_delay_s)

    def execute(self, stage: str, cls_name: str, fn: Callable[..., Any], *args: Any, original: Any = None) -> Any:
        """One record's converter or transform step: its result, or SKIP when it failed and failures are
        tolerated; ToleranceExceeded otherwise. A failure is reported either way (logged, and sent to the
        DLQ when one is configured), as Kafka's RetryWithToleranceOperator.execute reports a failed context
        in its finally, before the task fails. `original`: the record as the task had it (Kafka's
        context.original()): a sink's consumed record (the DLQ's), a source's record as polled."""
        try:
            return self.retrying(stage, fn, *args)
        except Exception as e:  # noqa: BLE001 - any failure of a step is the record's, reported below
            self.failures += 1
            cause = e.__cause__ if isinstance(e, ConnectError) and e.__cause__ is not None else e
            self._report(original, stage, cls_name, cause)
            if not self.tolerate:
                raise ToleranceExceeded(_exceeded(stage, cls_name, cause)) from e
            return SKIP

    def execute_failed(self, raw: Any, stage: str, cls_name: str, error: BaseException) -> None:
        """Kafka's executeFailed, behind a sink task's errant record reporter: the record the task could
        not take is counted, logged and in the DLQ, acknowledged there before this returns (a sink that
        stores its offsets in its target, the JDBC sinks, commits the record's offset next: a kill -9 then
        must not lose the DLQ entry); then, as Kafka checks after reporting, ToleranceExceeded under
        errors.tolerance=none."""
        self.failures += 1
        if self.errant_error is None:
            self.errant_error = error
        self._report(raw, stage, cls_name, error)
        if self.dlq is not None:
            self.dlq.flush()
        if not self.tolerate:
            raise ToleranceExceeded(_exceeded(stage, cls_name, error)) from error

    def raise_swallowed(self, stage: str, cls_name: str) -> None:
        """Kafka's maybeThrowAsyncError, after put() returned: a report beyond errors.tolerance fails the
        task though the task caught the error its reporter raised."""
        if self.errant_error is not None and not self.tolerate:
            raise ToleranceExceeded(_exceeded(stage, cls_name, self.errant_error)) from self.errant_error

    def _report(self, original: Any, stage: str, cls_name: str, cause: BaseException) -> None:
        """A failed record logged (errors.log.enable) and sent to the DLQ (when one is configured: a sink's,
        whose `original` is the consumed record)."""
        if self.log:
            self.warn(self.log_line(original, stage, cls_name, cause))
        if self.dlq is not None and original is not None:
            self.dlq.report(original, stage, cls_name, cause, self.connector, self.task_id)

    def log_line(self, original: Any, stage: str, cls_name: str, cause: BaseException) -> str:
        """Kafka's LogReporter.message: the task (ConnectorTaskId: connector-task), the stage and its
        executing class, the record with errors.log.include.messages (a sink's consumed record by its
        coordinates, a source's record whole); then the exception, which Kafka's logger appends."""
        where = _where(original) if self.log_messages and original is not None else ""
        return (f"Error encountered in task {self.connector}-{self.task_id}. Executing stage '{stage}' with class "
                f"'{cls_name}'{where}. {_java_name(cause)}: {cause}")


def _where(original: Any) -> str:
    """LogReporter.Sink/Source.appendMessage: ", where consumed record is {topic='t', partition=0, offset=5,
    timestamp=..., timestampType=CreateTime}" (no timestamp without one), or ", where source record is = "
    and the SourceRecord's text."""
    from klog.connect.data import ConnectRecord

    if isinstance(original, ConnectRecord):
        return f", where source record is = {_source_record_text(original)}"
    text = f", where consumed record is {{topic='{original.topic}', partition={original.partition}, " \
           f"offset={original.offset}"
    kind = TIMESTAMP_TYPE_NAMES.get(getattr(original, "timestamp_type", None))
    if kind is not None and original.timestamp is not None and original.timestamp >= 0:
        text += f", timestamp={original.timestamp}, timestampType={kind}"
    return text + "}"


def _source_record_text(r: Any) -> str:
    """SourceRecord.toString as Java prints it, its maps as Java's ({k=v}), a missing value null."""
    return (f"SourceRecord{{sourcePartition={_java_text(r.source_partition)}, "
            f"sourceOffset={_java_text(r.source_offset)}}} ConnectRecord{{topic='{r.topic}', "
            f"kafkaPartition={_java_text(r.kafka_partition)}, key={_java_text(r.key)}, "
            f"keySchema={_java_text(r.key_schema)}, value={_java_text(r.value)}, "
            f"valueSchema={_java_text(r.value_schema)}, timestamp={_java_text(r.timestamp)}, "
            f"headers=ConnectHeaders(headers={', '.join(h[0] for h in r.headers or [])})}}")


def _java_text(value: Any, around: frozenset[int] = frozenset()) -> str:
    """`around`: the ids of the maps and lists holding `value` (a recursive schema holds itself: "..." there)."""
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        if id(value) in around:
            return "{...}" if isinstance(value, dict) else "[...]"
        around = around | {id(value)}
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_java_text(v, around)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_java_text(v, around) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _exceeded(stage: str, cls_name: str, cause: BaseException) -> str:
    return (f"Tolerance exceeded in error handler: {stage} ({cls_name}) failed: "
            f"{type(cause).__name__}: {cause}")


class DeadLetterQueue:
    """Failed records as they were consumed (key, value, headers), with Kafka's error headers when
    errors.deadletterqueue.context.headers.enable is true, written by a producer with the connector's
    producer settings (klog.connect.worker.producer_settings)."""

    def __init__(self, store, topic: str, context_headers: bool, replication_factor: int,  # noqa: ANN001
                 producer_settings: dict[str, Any] | None = None, admin: Any = None) -> None:
        """`admin`: what the topic is created through (the connector's admin client; `store` without one)."""
        from klog.connect.storage import ensure_topic

        self.topic = topic
        self.context_headers = context_headers
        rf = replication_factor if replication_factor > 0 else None
        admin = admin if admin is not None else store
        if not admin.has_topic(topic):
            try:
                admin.create_topic(topic, partitions=1, replication_factor=rf, exist_ok=True)
            except Exception:  # noqa: BLE001 - a replication factor the local store cannot have: its default
                ensure_topic(admin, topic, 1, compacted=False)
        self.producer = store.producer(**(producer_settings or {}))  # acks, compression_type, linger_ms, ...

    def report(self, raw: Any, stage: str, cls_name: str, error: BaseException, connector: str, task_id: int) -> None:
        headers = list(raw.headers or [])
        if self.context_headers:
            trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            for name, value in (("topic", raw.topic), ("partition", str(raw.partition)), ("offset", str(raw.offset)),
                                ("connector.name", connector), ("task.id", str(task_id)), ("stage", stage),
                                ("class.name", cls_name), ("exception.class.name", _java_name(error)),
                                ("exception.message", str(error)), ("exception.stacktrace", trace)):
                headers.append((HEADER_PREFIX + name, value.encode()))
        # the record's own timestamp, as Kafka's DLQ reporter keeps it (none: the time of the send)
        timestamp = raw.timestamp if raw.timestamp is not None and raw.timestamp >= 0 else None
        self.producer.send(self.topic, raw.value, key=raw.key, headers=headers, timestamp=timestamp)

    def flush(self) -> None:
        self.producer.flush()

    def close(self) -> None:
        self.producer.close()


def _java_name(error: BaseException) -> str:
    """The exception's class as Kafka names its own (DataException for a record a converter refused)."""
    from klog.connect.errors import DataError

    if isinstance(error, DataError):
        return "org.apache.kafka.connect.errors.DataException"
    return f"{type(error).__module__}.{type(error).__qualname__}"

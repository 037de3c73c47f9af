"""Debezium's signals: the source channel (SourceSignalChannel: a row inserted into the table named by
`signal.data.collection` and seen in the change stream is a signal, its columns read by position as Debezium
reads them: id, type, data, a JSON text) and the kafka channel (KafkaSignalChannel: records of
`signal.kafka.topic` keyed by the connector's `topic.prefix`, their value JSON {"id", "type", "data"}, its
partition 0 read by assignment from the offset group `signal.kafka.groupId` keeps, committed once acted on).

Taken: `execute-snapshot` (Debezium's ExecuteSnapshot) of type `blocking` (streaming pauses at the signal,
the tables named by `data-collections` are read as the initial snapshot reads them, op `r`, then streaming
goes on after the signal) and `incremental` (chunks between watermarks, DBLog's algorithm, in the PostgreSQL
task), with `additional-conditions` (`[{"data-collection": ..., "filter": ...}]`, or the older single
`additional-condition`); `stop-snapshot`, `pause-snapshot` and `resume-snapshot` of an incremental snapshot;
`log`. Other types (`schema-changes`, ...) are named in a warning and ignored. Of the other channels of
`signal.enabled.channels`, jmx, file and in-process are named in a warning."""

from __future__ import annotations

import errno
import json
import os
import re
import select
import socket
import time
from dataclasses import dataclass, field

from klog.connect.config import java_regex
from klog.connect.errors import ConfigError

CHANNELS = ("source", "kafka", "jmx", "file", "in-process")
# how long a read of the kafka channel waits for its cluster's TCP connection: the streaming loop it sits in is
# never held longer (a host that drops packets held it KLOG_CLUSTER_TIMEOUT at each read); the connection goes
# on in the kernel until the next read, which takes it if it was made
CONNECT_WAIT_S = 0.2
# an address that takes the connection but whose client's first contact fails slowly (a TLS or SASL handshake,
# a port that is not Kafka's, unanswered: KLOG_CLUSTER_TIMEOUT held): tried again only after a wait doubling
# from the first to the second, not at each read
SLOW_RETRY_S = (10.0, 120.0)


@dataclass
class SnapshotSignal:
    """An execute-snapshot signal: its id, the data-collections' patterns, its type (blocking or incremental)
    and each table's additional condition (schema.table → a SQL boolean expression)."""
    id: str
    patterns: list[re.Pattern]
    kind: str = "blocking"
    conditions: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    def wants(self, dbname: str, schema: str, table: str) -> bool:
        """Whether a data-collection names the table: a regular expression over schema.table (or
        database.schema.table), as Debezium matches them."""
        return any(p.fullmatch(f"{schema}.{table}") or p.fullmatch(f"{dbname}.{schema}.{table}")
                   for p in self.patterns)

    def condition(self, dbname: str, schema: str, table: str) -> str | None:
        for name in (f"{schema}.{table}", f"{dbname}.{schema}.{table}"):
            if name in self.conditions:
                return self.conditions[name]
        for name, condition in self.conditions.items():  # a data-collection given as a pattern
            try:
                if java_regex(name).fullmatch(f"{schema}.{table}"):
                    return condition
            except re.error:
                continue
        return self.conditions.get("")  # the older additional-condition, for every table


class SignalError(ValueError):
    """A signal that cannot be acted on: the message names what was wrong."""


def signal_table(name: str, dbname: str) -> tuple[str, str]:
    """signal.data.collection as Debezium's PostgreSQL connector reads it: <schema>.<table> (a leading
    database name is accepted)."""
    parts = [p.strip().strip('"') for p in name.split(".")]
    if len(parts) == 3 and parts[0] == dbname:
        parts = parts[1:]
    if len(parts) != 2 or not all(parts):
        raise SignalError(f"signal.data.collection {name!r} is not <schema>.<table>")
    return parts[0], parts[1]


def parse(values: list) -> tuple[str, str, object]:
    """A signal row's (id, type, data): its first three columns, data a JSON text (or none)."""
    if len(values) < 2:
        raise SignalError("a signal row has the columns id, type and data")
    signal_id, kind = values[0], values[1]
    text = values[2] if len(values) > 2 else None
    if not isinstance(kind, str) or not kind:
        raise SignalError(f"signal {signal_id!r} has no type")
    data: object = None
    if isinstance(text, str) and text.strip():
        try:
            data = json.loads(text)
        except ValueError:
            raise SignalError(f"signal {signal_id!r}: its data is not JSON: {text[:80]!r}") from None
    return str(signal_id), kind, data


def execute_snapshot(signal_id: str, data: object) -> SnapshotSignal:
    """An execute-snapshot signal's data, as ExecuteSnapshot reads it (incremental the default type). A type
    other than blocking and incremental raises SignalError naming it."""
    if not isinstance(data, dict):
        raise SignalError(f"execute-snapshot signal {signal_id!r}: its data is a JSON object")
    kind = str(data.get("type") or "incremental").lower()
    if kind not in ("blocking", "incremental"):
        raise SignalError(f"execute-snapshot signal {signal_id!r}: type {kind!r} is not implemented (klog takes "
                          "'blocking' and 'incremental'); the signal is ignored")
    collections = data.get("data-collections")
    if not isinstance(collections, list) or not collections or not all(isinstance(c, str) for c in collections):
        raise SignalError(f"execute-snapshot signal {signal_id!r}: data-collections is a list of table names")
    try:
        patterns = [java_regex(c.strip()) for c in collections]
    except re.error as e:
        raise SignalError(f"execute-snapshot signal {signal_id!r}: a data-collection is not a regular "
                          f"expression: {e}") from None
    conditions: dict[str, str] = {}
    older = data.get("additional-condition")
    if isinstance(older, str) and older.strip():
        conditions[""] = older
    for entry in data.get("additional-conditions") or []:
        if not (isinstance(entry, dict) and isinstance(entry.get("data-collection"), str)
                and isinstance(entry.get("filter"), str)):
            raise SignalError(f"execute-snapshot signal {signal_id!r}: each additional-conditions entry is "
                              '{"data-collection": ..., "filter": ...}')
        conditions[entry["data-collection"].strip()] = entry["filter"]
    return SnapshotSignal(signal_id, patterns, kind, conditions, [c.strip() for c in collections])


def stop_snapshot(signal_id: str, data: object) -> list[re.Pattern] | None:
    """A stop-snapshot signal's data-collections as patterns (None: all of the snapshot is stopped). A value
    that is not a list of regular expressions raises SignalError naming it: the signal is ignored, the
    connector goes on."""
    names = data.get("data-collections") if isinstance(data, dict) else None
    if not names:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SignalError(f"stop-snapshot signal {signal_id!r}: data-collections is a list of table names")
    try:
        return [java_regex(n.strip()) for n in names]
    except re.error as e:
        raise SignalError(f"stop-snapshot signal {signal_id!r}: a data-collection is not a regular expression: "
                          f"{e}; the signal is ignored") from None


class KafkaChannel:
    """Debezium's KafkaSignalChannel: partition 0 of `signal.kafka.topic` (default `<topic.prefix>-signal`) read
    from `signal.kafka.bootstrap.servers` (a klog store's path, or a cluster: kafka://HOST:PORT, @NAME of `klog
    clusters`, HOST:PORT; `signal.consumer.*` are the cluster client's properties) by assignment, as Debezium's
    consumer.assign: no member of any group. Group `signal.kafka.groupId` (default kafka-signal) only keeps its
    offset: the read starts at the group's committed offset, else at the earliest, and the offset of what was
    read is committed once it is acted on (commit(), with no generation, as a consumer that never joined
    commits), so a restart does not read a signal again. Several connectors may share the group and the topic:
    each reads every record (a record keyed by another name than topic.prefix is ignored, as Debezium's)."""

    PARTITION = 0  # Debezium's channel assigns itself partition 0 of the topic, whatever the topic holds

    def __init__(self, props: dict[str, str], prefix: str, connector: str, warn) -> None:  # noqa: ANN001
        self.prefix, self.where, self.warn = prefix, f"connector '{connector}'", warn
        self.topic = props.get("signal.kafka.topic", "").strip() or f"{prefix}-signal"
        self.group = props.get("signal.kafka.groupId", "").strip() or "kafka-signal"
        servers = props.get("signal.kafka.bootstrap.servers", "").strip()
        if not servers:
            raise ConfigError("signal.kafka.bootstrap.servers", None, "the kafka signal channel reads its topic "
                              "there: a klog store's path or a cluster (kafka://HOST:PORT, @NAME, HOST:PORT)")
        timeout = props.get("signal.kafka.poll.timeout.ms", "0").strip() or "0"
        if not timeout.isdigit():
            raise ConfigError("signal.kafka.poll.timeout.ms", timeout, "a number of milliseconds, 0 or more")
        self.timeout_ms = int(timeout)
        from klog.client.group import GroupConfig
        from klog.client.remote.target import parse_endpoint
        from klog.errors import KlogError, UsageError

        # the consumer's own settings among signal.consumer.* (isolation.level; max.poll.interval.ms,
        # session.timeout.ms, ... are checked but have no use: the consumer joins no group), as Debezium hands
        # them to its KafkaConsumer; offsets committed by the channel, never automatically
        group = {k[len("signal.consumer."):]: v.strip() for k, v in props.items() if k.startswith("signal.consumer.")
                 and k[len("signal.consumer."):] in GroupConfig.PROPERTIES}
        for key, value in group.items():
            try:
                GroupConfig.from_properties({key: value})
            except KlogError as e:
                raise ConfigError(f"signal.consumer.{key}", value, str(e)) from None
        self.isolation_level = GroupConfig.from_properties({**group, "enable.auto.commit": "false"}).isolation_level
        properties = [f"{k[len('signal.consumer.'):]}={v}" for k, v in sorted(props.items())
                      if k.startswith("signal.consumer.") and k[len("signal.consumer."):] not in group]

        try:
            where = parse_endpoint(servers, None, properties)
        except KlogError as e:
            raise ConfigError("signal.kafka.bootstrap.servers", servers, str(e)) from None
        self.local = isinstance(where, str)
        self._where = where
        self.store = None
        self.reach = None if self.local else Reach(where.bootstrap)
        self.unreached: str | None = None  # why the cluster was not reached at the start (named in one warning)
        self.retry_at, self.backoff, self.slow = 0.0, 0.0, ""  # a client's first contact that failed slowly
        try:
            self._reach()
            self._connect()
        except KlogError as e:
            if self.local or isinstance(e, UsageError):  # (no store there, a client property librdkafka refused)
                raise ConfigError("signal.kafka.bootstrap.servers", servers, str(e)) from None
            try:  # (not reached: the client's properties checked all the same, with no wait on the cluster)
                _check_client(where)
            except UsageError as e2:
                self.reach.close()
                raise ConfigError("signal.kafka.bootstrap.servers", servers, str(e2)) from None
            # a cluster not up (yet): the connector starts, and the channel reaches it at a later read, as
            # Debezium's KafkaConsumer, which connects at its first poll (refused here at the start, a connector
            # started before its signal cluster failed for good)
            self.unreached = str(e)
            warn(f"{self.where}: the kafka signal channel cannot reach signal.kafka.bootstrap.servers ({e}); "
                 f"tried again at each read")
        self.consumer = None
        self.topic_id = None  # (a local store's: a topic deleted and made again under the name is told apart)
        self.read_to: dict[tuple[str, int], int] = {}  # what commit() commits
        # the offset after the last record read: a consumer made again (after a read that failed) starts there,
        # not at the committed offset, before the signals acted on since or held until a blocking snapshot's end
        self.seen: dict[tuple[str, int], int] = {}
        self.told: set[str] = set()  # what was warned of once

    def _reach(self) -> None:
        """A cluster's address answering (a TCP connection made), waited for CONNECT_WAIT_S at most; KlogError:
        not now (a client's first contact would wait KLOG_CLUSTER_TIMEOUT for an address that answers nothing,
        holding the stream)."""
        if self.reach is not None:
            why = self.reach.check(CONNECT_WAIT_S)
            if why is not None:
                from klog.errors import KlogError

                raise KlogError(f"cannot reach Kafka cluster at {self._where.label}: {why}")

    def _connect(self) -> None:
        """The store or cluster of signal.kafka.bootstrap.servers opened (KlogError: not now)."""
        if self.local:
            from klog.client.store import Store

            self.store = Store(self._where, create=False, on_warning=self.warn)
        else:
            from klog.client.remote.store import RemoteStore
            from klog.errors import KlogError, UsageError

            if time.monotonic() < self.retry_at:
                raise KlogError(self.slow)  # (the same text: the task names it once)
            started = time.monotonic()
            try:
                self.store = RemoteStore(self._where, on_warning=self.warn)
            except KlogError as e:
                if not isinstance(e, UsageError) and time.monotonic() - started > 2 * CONNECT_WAIT_S:
                    self.backoff = min(max(2 * self.backoff, SLOW_RETRY_S[0]), SLOW_RETRY_S[1])
                    self.retry_at, self.slow = time.monotonic() + self.backoff, str(e)
                raise
            self.backoff = 0.0

    def _once(self, what: str, message: str) -> None:
        if what not in self.told:
            self.told.add(what)
            self.warn(f"{self.where}: {message}")

    def _open(self) -> None:
        """The consumer of partition 0, from where the channel read to, else the group's committed offset, else
        the earliest (Debezium's auto.offset.reset; an offset out of the log's range too)."""
        from klog.client.consumer import StartSpec
        from klog.client.groups_admin import ResetSpec

        tp = (self.topic, self.PARTITION)
        row = self.store.plan_offset_reset(self.group, ResetSpec("current"), [f"{self.topic}:{self.PARTITION}"])[0]
        start = row.log_start
        for offset in (self.seen.get(tp), row.current):
            if offset is not None and row.log_start <= offset <= row.log_end:
                start = offset
                break
        if self.local:
            self.store.forget_topic_metadata(self.topic)
            self.topic_id = self.store.topic(self.topic).topic_id
        how = {"partitions": [self.PARTITION], "start": StartSpec("offset", start), "follow": True,
               "isolation_level": self.isolation_level}
        if self.local:
            self.consumer = self.store.consumer(self.topic, **how)
        else:
            # librdkafka's consumer, assigned the partition as Debezium's KafkaConsumer is: a poll returns after
            # its timeout while the cluster is down (klog's fetch consumer would wait for the store's timeout,
            # holding the stream)
            from klog.client.remote.consumer import RemoteConsumer

            self.consumer = RemoteConsumer(self.store, [self.topic], **how)

    def read(self) -> list[tuple[str, str, object]]:
        """The signals (id, type, data) come since the last read; a malformed one is named in a warning and
        left out, as is a topic that does not exist yet (looked for again at the next read)."""
        # (a local store's topic looked for at each read: a cluster deletes the group's offsets with the topic,
        # and asking it while it is down would hold the stream for its metadata timeout)
        if self.store is None or (self.consumer is None and not self.local):
            # (a cluster not up at the start, or one whose consumer is made again: its address answering first,
            # its client's lookups would wait KLOG_CLUSTER_TIMEOUT; KlogError: named, read again later)
            self._reach()
        if self.store is None:
            self._connect()
        if self.consumer is not None and self.local and not self._same_topic():
            self._topic_deleted()
        if self.consumer is None:
            if not self.store.has_topic(self.topic):
                self._once("topic", f"signal.kafka.topic '{self.topic}' does not exist (yet): no signal is read "
                                    "from it until it does")
                return []
            self._open()
        try:
            batch = self.consumer.poll() if self.local else self.consumer.poll(self.timeout_ms / 1000)
        except Exception:
            # the consumer is made again at the next read (where the channel read to), or a consumer left
            # failing would read nothing from now on
            self._drop_consumer()
            raise
        out = []
        for r in batch:
            tp = (r.topic, r.partition)
            if r.offset < self.seen.get(tp, 0):
                continue  # read already: acted on, or held
            self.seen[tp] = self.read_to[tp] = r.offset + 1
            got = self.signal(r.key, r.value, r.offset)
            if got is not None:
                out.append(got)
        return out

    def _same_topic(self) -> bool:
        """Is the topic read still the one of that name (not deleted, not made again)?"""
        self.store.forget_topic_metadata(self.topic)  # (the store keeps what it looked up)
        try:
            return self.store.topic(self.topic).topic_id == self.topic_id
        except Exception:  # noqa: BLE001 - deleted
            return False

    def _drop_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        try:
            consumer.close()
        except Exception:  # noqa: BLE001, S110 - a consumer that failed, or of a topic gone: it closes as it can
            pass

    def _topic_deleted(self) -> None:
        """The signal topic deleted while read: the group's offsets of the topic go (as Kafka deletes them with
        the topic: a topic made again under the name is read from its beginning, not from the old topic's
        offsets, past its first signals)."""
        self._drop_consumer()
        self.store.forget_topic(self.topic)  # (a local store's: its partitions open are the old topic's)
        self.seen, self.read_to = {}, {}
        self.told.discard("topic")
        try:
            self.store.delete_group_offsets(self.group, self.topic)
        except Exception:  # noqa: BLE001, S110 - another connector sharing the group deleted them already
            pass
        self.warn(f"{self.where}: signal.kafka.topic '{self.topic}' was deleted: its signals are read from its "
                  "beginning once it exists again")

    def signal(self, key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str, object] | None:
        """One record as KafkaSignalChannel.processSignal reads it: None for another connector's (its key
        not topic.prefix), an empty value, or a malformed one (named in a warning)."""
        name = key.decode("utf-8", "replace") if key is not None else None
        if name != self.prefix:
            self._once(f"key:{name}", f"signal.kafka.topic '{self.topic}' offset {offset}: key {name!r} is not "
                                      f"this connector's topic.prefix '{self.prefix}': ignored, as Debezium "
                                      "ignores it (each such key named once)")
            return None
        if not value:
            return None
        try:
            doc = json.loads(value)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("type"), str) or not doc["type"]:
            self.warn(f"{self.where}: signal.kafka.topic '{self.topic}' offset {offset}: not a signal (a JSON "
                      'object {"type": ..., "data": {...}}): ignored')
            return None
        signal_id = doc.get("id")
        return (str(signal_id) if signal_id is not None else f"{self.topic}-{offset}"), doc["type"], doc.get("data")

    def commit(self) -> None:
        """The offset of the signals read committed to the group (Debezium's commitSync: no generation, no
        member; refused, as by Kafka, while the group has members of its own: named in one warning). Failed, it
        is kept for the next commit."""
        if self.read_to:
            from klog.client.groups_admin import ResetRow
            from klog.errors import GroupError

            try:
                self.store.reset_group_offsets(self.group, [ResetRow(t, p, None, 0, 0, o)
                                                            for (t, p), o in sorted(self.read_to.items())])
            except GroupError as e:
                if "live member" not in str(e):
                    raise
                # (a setup that lasts: named once, not at each signal poll)
                self._once("members", f"signal.kafka.groupId '{self.group}': the offset of the signals read is not "
                                      f"committed while the group has members of its own ({e}); tried again at "
                                      "each commit")
                return
            self.read_to = {}
            self.told.discard("members")

    def close(self, commit: bool = True) -> None:
        try:
            try:
                if commit:
                    self.commit()
            finally:
                if self.consumer is not None:
                    self.consumer.close()
        finally:
            if self.reach is not None:
                self.reach.close()
            if self.store is not None:
                self.store.close()


def _check_client(where) -> None:  # noqa: ANN001 - a ClusterTarget
    """The cluster client's properties checked as RemoteStore's client takes them, with no wait on the cluster:
    UsageError names one librdkafka refuses (a cluster client started is not contacted before it is used)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from klog.client.remote.errors import config_error

    try:
        AdminClient(where.client_config(**{"allow.auto.create.topics": False}))
    except (KafkaException, ValueError, TypeError) as e:
        raise config_error(e) from None


class Reach:
    """Whether a cluster's bootstrap addresses answer, asked by non-blocking TCP connections: check() waits at
    most its bound for them; one not made by then goes on in the kernel and is looked at by the next check
    (made: the cluster answers; else made again), so an address that answers nothing (a dead or firewalled host)
    never holds the caller longer than the bound, and no thread is needed. (A host name is resolved at each
    check, as a client resolves it.)"""

    def __init__(self, bootstrap: str) -> None:
        self.servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
        self.pending: dict[socket.socket, str] = {}  # a connection under way: its address
        self.refused = 0
        self.errors: list[str] = []

    def check(self, wait: float) -> str | None:
        """None: an address took a connection (closed at once); else why none did: refused by each, or no
        answer within `wait` (the connections left pending for the next check), or the first error."""
        if self.pending and self._settle(0):  # (a connection made since the last check)
            return None
        self.close()
        self.refused, self.errors = 0, []
        for server in self.servers:
            host, _, port = server.rpartition("://")[2].rpartition(":")  # (librdkafka's PROTOCOL://host:port)
            try:
                family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), int(port),
                                                                     type=socket.SOCK_STREAM)[0]
                s = socket.socket(family, kind, proto)
            except (OSError, ValueError) as e:
                self.errors.append(f"{server}: {e}")
                continue
            s.setblocking(False)
            code = s.connect_ex(address)
            if code == 0:
                s.close()
                self.close()
                return None
            if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                self.pending[s] = server
            else:
                s.close()
                self._failed(server, code)
        if self._settle(wait):
            return None
        if self.pending:
            return f"no answer within {wait:g} s"
        if self.refused == len(self.servers):
            return "connection refused (nothing listens there)"
        return "; ".join(self.errors)

    def _settle(self, wait: float) -> bool:
        """Wait at most `wait` for the pending connections: True when one was made (all closed then)."""
        deadline = time.monotonic() + wait
        while self.pending:
            # (poll, not select: a worker holding over 1,024 descriptors would make select refuse every check)
            poller = select.poll()
            by_fd = {s.fileno(): s for s in self.pending}
            for fd in by_fd:
                poller.register(fd, select.POLLOUT)
            events = poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))
            if not events:
                return False
            for fd, _ in events:
                s = by_fd[fd]
                code = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                server = self.pending.pop(s)
                s.close()
                if code == 0:
                    self.close()
                    return True
                self._failed(server, code)
        return False

    def _failed(self, server: str, code: int) -> None:
        if code == errno.ECONNREFUSED:
            self.refused += 1
        else:
            self.errors.append(f"{server}: {os.strerror(code)}")

    def close(self) -> None:
        for s in self.pending:
            s.close()
        self.pending = {}

"""RemoteGroupConsumer: the GroupConsumer interface over librdkafka's group member (subscribe).

The cluster's group coordinator assigns the partitions; offsets are committed only when asked
(the CLI commits what reached stdout), and on_revoke runs before partitions move, as locally.
Without `follow` it stops once every assigned partition has reached the high watermark it had
when assigned.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

from klog.client.records import Record
from klog.client.remote.consumer import FETCH_MESSAGES, TIMESTAMP_TYPES
from klog.client.remote.errors import config_error, klog_error
from klog.errors import GroupError, KlogError

TP = tuple[str, int]
Callback = Callable[[list[TP]], None]
ASSIGNORS = {"range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}


class RemoteGroupConsumer:
    def __init__(self, store, group: str, topics: list[str], *, config=None, follow: bool = True,  # noqa: ANN001
                 on_assign: Callback | None = None, on_revoke: Callback | None = None) -> None:
        from confluent_kafka import Consumer, KafkaException

        from klog.client.group import GroupConfig

        self.store = store
        self.group = group
        self.topics = topics
        self.config = config or GroupConfig()
        self.follow = follow
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self._epoch = 0
        self._ends: dict[TP, int] = {}  # high watermark of each assigned partition when it was assigned
        self._positions: dict[TP, int] = {}
        self._closed = False
        c = self.config
        conf = store.target.client_config(**{
            "group.id": group,
            "enable.auto.commit": False,  # the CLI commits after the output is safe
            "enable.auto.offset.store": False,
            "auto.offset.reset": c.auto_offset_reset if c.auto_offset_reset != "none" else "error",
            "session.timeout.ms": c.session_timeout_ms,
            "heartbeat.interval.ms": c.heartbeat_interval_ms,
            "max.poll.interval.ms": c.max_poll_interval_ms,
            "partition.assignment.strategy": ASSIGNORS.get(c.assignor, c.assignor),
            "client.id": c.client_id,
            "isolation.level": c.isolation_level,  # GroupConfig's default: read_uncommitted, as Kafka's clients
            "error_cb": store._on_error,
        })
        try:
            self._consumer = Consumer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise config_error(e) from None
        self._consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
        self._join_wait_s = max(store.timeout, c.session_timeout_ms / 1000 + 5)  # a join outlasts a session
        self._joined_by = time.monotonic() + self._join_wait_s
        self._pid = os.getpid()

    # -- rebalances ------------------------------------------------------------------------------
    def _assigned(self, consumer, partitions) -> None:  # noqa: ANN001 - librdkafka's callback
        tps = [(tp.topic, tp.partition) for tp in partitions]
        for t, p in tps:
            try:
                _, high = consumer.get_watermark_offsets(_tp(t, p), timeout=self.store.timeout)
            except Exception as e:  # noqa: BLE001 - librdkafka's KafkaException
                raise klog_error(e, f"cannot read the end of {t}-{p}") from None
            self._ends[(t, p)] = high
        try:  # a partition whose committed offset is at its end has nothing to hand out: caught up already
            committed = consumer.committed(partitions, timeout=self.store.timeout)
        except Exception as e:  # noqa: BLE001 - librdkafka's KafkaException
            raise klog_error(e, f"cannot read the committed offsets of group '{self.group}'") from None
        for tp in committed:
            key = (tp.topic, tp.partition)
            if tp.offset >= 0 or self._ends.get(key) == 0:
                self._positions.setdefault(key, max(tp.offset, 0))
        if self.on_assign is not None and tps:
            self.on_assign(sorted(tps))

    def _revoked(self, consumer, partitions) -> None:  # noqa: ANN001
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self._epoch += 1
        if self.on_revoke is not None and tps:
            self.on_revoke(sorted(tps))
        for tp in tps:
            self._ends.pop(tp, None)
            self._positions.pop(tp, None)

    def _lost(self, consumer, partitions) -> None:  # noqa: ANN001 - expelled: nothing is ours to commit
        self._epoch += 1
        for tp in partitions:
            self._ends.pop((tp.topic, tp.partition), None)
            self._positions.pop((tp.topic, tp.partition), None)

    @property
    def rebalances(self) -> int:
        return self._epoch

    def assignment(self) -> list[TP]:
        return sorted(self._ends)

    # -- reading ---------------------------------------------------------------------------------
    def _caught_up(self) -> bool:
        if self.follow or not self._ends:
            return False
        return all(self._positions.get(tp, -1) >= end for tp, end in self._ends.items())

    def _fetch(self, timeout_s: float) -> list:
        from confluent_kafka import KafkaError

        msgs = self._consumer.consume(FETCH_MESSAGES, timeout_s)
        out = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() not in (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                raise klog_error(err, f"group '{self.group}'")
        return out

    def _poll_msgs(self, timeout_ms: int | None) -> list | None:
        """Messages of one fetch; [] after timeout_ms without any; None when caught up (not following)."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not self._closed:
            if self._caught_up():
                return None
            if not self._ends and time.monotonic() > self._joined_by and not self.follow:
                raise GroupError(f"group '{self.group}' gave this member no partitions within "
                                 f"{self._join_wait_s:g} s")
            msgs = self._fetch(0.1)
            if msgs:
                return msgs
            if deadline is not None and time.monotonic() >= deadline:
                return []
        return None

    def batches(self, timeout_ms: int | None = None) -> Iterator[list[Record]]:
        while True:
            msgs = self._poll_msgs(timeout_ms)
            if msgs is None:
                return
            records = []
            for m in msgs:
                ts_type, ts = m.timestamp()
                records.append(Record(m.topic(), m.partition(), m.offset(), ts, TIMESTAMP_TYPES.get(ts_type, 0),
                                      m.key(), m.value(), m.headers() or []))
                self._positions[(m.topic(), m.partition())] = m.offset() + 1
            yield records

    def value_batches(self, timeout_ms: int | None = None) -> Iterator[list[tuple[TP, list[bytes | None], int]]]:
        while True:
            msgs = self._poll_msgs(timeout_ms)
            if msgs is None:
                return
            chunks: dict[TP, tuple[list, list]] = {}
            for m in msgs:
                tp = (m.topic(), m.partition())
                entry = chunks.setdefault(tp, ([], [0]))
                entry[0].append(m.value())
                entry[1][0] = m.offset() + 1
                self._positions[tp] = m.offset() + 1
            yield [(tp, values, nxt[0]) for tp, (values, nxt) in chunks.items()]

    def __iter__(self) -> Iterator[Record]:
        for records in self.batches():
            yield from records

    # -- committing ------------------------------------------------------------------------------
    def consumer_group_metadata(self) -> object:
        """This member's group, generation and member id, for a transactional producer's
        send_offsets (the cluster fences a member that lost its partitions, KIP-447)."""
        return self._consumer.consumer_group_metadata()

    def commit(self, offsets: dict[TP, int] | None = None, metadata: str = "") -> dict[TP, int]:
        from confluent_kafka import KafkaException, TopicPartition

        offsets = dict(self._positions) if offsets is None else offsets
        if not offsets:
            return {}
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                  asynchronous=False)
        except KafkaException as e:
            raise klog_error(e, f"cannot commit offsets of group '{self.group}'") from None
        return dict(offsets)

    def close(self) -> None:
        """on_revoke for what is held (the CLI commits there), then leave the group."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.on_revoke is not None and self._ends:
                self.on_revoke(sorted(self._ends))
        finally:
            try:
                self._consumer.close()
            except (RuntimeError, KlogError):
                pass

    def __enter__(self) -> RemoteGroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tp(topic: str, partition: int):  # noqa: ANN202
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition)

"""RemoteProducer: the Producer interface over librdkafka's producer.

Records go to librdkafka's queue as they are sent; flush() waits until every one is acknowledged
(or failed: the first failure is raised there). Keys are partitioned with murmur2 as Kafka's Java
client and the local producer do, so a key lands on the same partition either way.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter

from klog.client.producer import ProducerBase, check_producer_options
from klog.client.producer_settings import BATCH_SIZE_DEFAULT, BUFFER_MEMORY_DEFAULT
from klog.client.records import Headers, check_partition, check_timestamp
from klog.client.remote.errors import config_error, klog_error
from klog.errors import KlogError, RecordTooLargeError, UnknownTopicError
from klog.store.names import validate_topic_name

ACKS = {"0": "0", "1": "1", "all": "all"}
LINGER_MS_MIN = 5  # Kafka 4's default: enough to fill batches from a fast loop, invisible to a person
POLL_EVERY = 10_000  # serve delivery reports every this many sends (keeps the report queue short)
AckCallback = Callable[[str, int, int, int], None]


class RemoteProducer(ProducerBase):
    def __init__(self, store, *, acks: str = "all", compression_type: str = "none", linger_ms: int = 0,
                 batch_size: int = BATCH_SIZE_DEFAULT, buffer_memory: int = BUFFER_MEMORY_DEFAULT,
                 auto_create: bool | None = None, on_ack: AckCallback | None = None,
                 on_create: Callable[[str], None] | None = None,
                 on_warning: Callable[[str], None] | None = None,
                 extra_config: dict[str, object] | None = None) -> None:
        """`extra_config`: librdkafka settings of a kind of producer (the transactional one's id)."""
        from confluent_kafka import KafkaException, Producer

        check_producer_options(acks, compression_type, batch_size, buffer_memory)
        self.store = store
        self.auto_create = True if auto_create is None else auto_create
        self.on_ack = on_ack
        self.on_create = on_create
        self.records_sent = 0
        self._queued = 0
        self._failed = 0
        self._error: BaseException | None = None
        self._counts: dict[str, int] = {}
        conf = store.target.client_config(**{
            "acks": ACKS[str(acks)],
            "compression.type": compression_type,
            "linger.ms": max(linger_ms, LINGER_MS_MIN),
            "batch.size": min(batch_size, 2_147_483_647),
            "partitioner": "murmur2_random",  # Kafka's Java default (librdkafka's own is CRC32)
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": max(1, buffer_memory >> 10),  # librdkafka's buffer.memory
            "message.timeout.ms": int(store.timeout * 3000),
            "delivery.report.only.error": on_ack is None,
            "on_delivery": self._delivered,
            "error_cb": store._on_error,
            **(extra_config or {}),
        })
        try:
            self._producer = Producer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise config_error(e) from None

    def _delivered(self, err, msg) -> None:  # noqa: ANN001 - librdkafka's KafkaError, Message
        if err is not None:
            self._failed += 1
            if self._error is None:
                self._error = klog_error(err, f"cannot write to {msg.topic()}-{msg.partition()}")
            return
        if self.on_ack is not None:
            self.on_ack(msg.topic(), msg.partition(), msg.offset(), 1)

    # -- topics --------------------------------------------------------------------------------
    def partitions_for(self, topic: str) -> int:
        count = self._counts.get(topic)
        if count is None:
            try:
                count = self.store.partition_count(topic)
            except UnknownTopicError:
                validate_topic_name(topic)
                if not self.auto_create:
                    raise
                count = self._auto_create(topic)
                if self.on_create is not None:
                    self.on_create(topic)
            self._counts[topic] = count
        return count

    def _auto_create(self, topic: str) -> int:
        """As Kafka's producers do: ask for the topic's metadata, and the cluster creates it with its
        defaults if its auto.create.topics.enable allows."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.store.timeout
        while True:
            try:
                md = self._producer.list_topics(topic, timeout=self.store.timeout)
            except KafkaException as e:
                raise self.store.unreachable(e) from None
            tm = md.topics.get(topic)
            if tm is not None and tm.error is None and tm.partitions:
                self.store.forget_topic_metadata(topic)
                return len(tm.partitions)
            if time.monotonic() > deadline:
                raise UnknownTopicError(f"unknown topic '{topic}' ({self.store.target.label} did not create it: "
                                        "create it first, or enable auto.create.topics.enable there)")
            time.sleep(0.1)

    # -- sending -------------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None,
             partition: int | None = None, timestamp: int | None = None) -> None:
        count = self.partitions_for(topic)
        p = -1 if partition is None else check_partition(partition, topic, count)
        ts = 0 if timestamp is None else check_timestamp(timestamp)  # 0: librdkafka stamps it now
        self._produce(topic, value, key, p, ts, list(headers) if headers else None)
        self._queued += 1
        if self._queued % POLL_EVERY == 0:
            self._producer.poll(0)
        self._raise_failure()

    def send_keyed(self, topic: str, pairs: Sequence[tuple[bytes | None, bytes | None]],
                   headers: Headers | None = None, partition: int | None = None,
                   timestamp: int | None = None) -> None:
        """(key, value) records sharing headers and a timestamp (the CLI's line modes); a record the
        client refuses raises with `.index`, its position in `pairs`, as the local producer does."""
        self._send_all(topic, list(map(itemgetter(0), pairs)), list(map(itemgetter(1), pairs)), headers,
                       partition, timestamp)

    def send_values(self, topic: str, values: Sequence[bytes], headers: Headers | None = None,
                    partition: int | None = None, timestamp: int | None = None) -> None:
        """Keyless records sharing headers (the CLI's line mode), without a (None, value) pair list."""
        self._send_all(topic, None, values, headers, partition, timestamp)

    def _send_all(self, topic: str, keys: Sequence[bytes | None] | None, values: Sequence[bytes | None],
                  headers: Headers | None, partition: int | None, timestamp: int | None) -> None:
        """values[i] with keys[i] (None: no keys), POLL_EVERY records a step, each step one C-level
        map over librdkafka's produce (no Python frame per record: ~0.4 µs a record less than a
        loop). produce's positional arguments: topic, value, key, partition, on_delivery,
        callback, timestamp, headers."""
        count = self.partitions_for(topic)
        p = -1 if partition is None else check_partition(partition, topic, count)
        ts = 0 if timestamp is None else check_timestamp(timestamp)
        hdrs = list(headers) if headers else None
        produce, poll = self._producer.produce, self._producer.poll
        n, done = len(values), 0
        try:
            while done < n:
                end = min(done + POLL_EVERY, n)
                step = iter(values[done:end])
                step_keys = repeat(None) if keys is None else keys[done:end]
                try:
                    deque(map(produce, repeat(topic), step, step_keys, repeat(p), repeat(None), repeat(None),
                              repeat(ts), repeat(hdrs)), 0)
                except BufferError:  # librdkafka's queue is full: this record waits for room, the rest go on
                    done = end - sum(1 for _ in step) - 1  # the failed record was taken from `step`
                    self._produce(topic, values[done], None if keys is None else keys[done], p, ts, hdrs)
                    done += 1
                    continue
                except Exception as e:  # noqa: BLE001 - librdkafka's KafkaException, mapped below
                    done = end - sum(1 for _ in step) - 1
                    error = self._send_error(e, topic)
                    error.index = done  # type: ignore[attr-defined]
                    raise error from None
                done = end
                poll(0)
        finally:
            self._queued += done
        self._raise_failure()

    def send_tuples(self, topic: str, partition: int, records: Sequence[tuple]) -> None:
        """Copies of (offset, timestamp, key, value, headers) tuples (a local consumer's decoded
        records) to `partition`, or where the partitioner puts each when it is -1 (the caller checked
        the topic has it): the mirror's path, one librdkafka call per record and nothing more."""
        self.partitions_for(topic)
        produce = self._producer.produce
        done = 0
        try:
            for _, ts, key, value, headers in records:
                if headers:
                    produce(topic, value, key, partition, timestamp=ts, headers=headers)
                else:  # no conversion of an empty list: ~half a µs a record
                    produce(topic, value, key, partition, timestamp=ts)
                done += 1
        except BufferError:  # the queue is full: the rest one by one, waiting for room
            for _, ts, key, value, headers in records[done:]:
                self._produce(topic, value, key, partition, ts, headers or None)
                done += 1
        except Exception as e:  # noqa: BLE001 - librdkafka's KafkaException, mapped below
            raise self._send_error(e, topic) from None
        finally:
            self._queued += done
        self._producer.poll(0)
        self._raise_failure()

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int, ts: int,
                 headers: list | None) -> None:
        """One record into librdkafka's queue, waiting (bounded) for room when the queue is full."""
        deadline = None
        while True:
            try:
                self._producer.produce(topic, value, key, partition, timestamp=ts, headers=headers)
                return
            except BufferError:
                deadline = deadline or time.monotonic() + self.store.timeout * 3
                if time.monotonic() > deadline:
                    raise self.store.unreachable() from None
                self._producer.poll(0.05)
            except Exception as e:  # noqa: BLE001 - librdkafka's KafkaException, mapped below
                raise self._send_error(e, topic) from None

    def _send_error(self, e: Exception, topic: str) -> KlogError:
        error = klog_error(e, f"cannot send to '{topic}'")
        if isinstance(error, RecordTooLargeError):
            return RecordTooLargeError(f"record is larger than the client's message.max.bytes for topic '{topic}' "
                                       "(raise it with -X message.max.bytes=N)")
        return error

    def _raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def flush(self) -> None:
        """Wait until every sent record is acknowledged; raise the first failure."""
        remaining = self._producer.flush(self.store.timeout * 3)
        self.records_sent = self._queued - self._failed - remaining
        self._raise_failure()
        if remaining:
            raise KlogError(f"{remaining} records not acknowledged by {self.store.target.label} "
                            f"within {self.store.timeout * 3:g} s")

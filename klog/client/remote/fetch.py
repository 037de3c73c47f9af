"""Fetch requests to a cluster's partition leaders: kio's generated Fetch types over wire.Connection
(so -X security.protocol, ssl.* and sasl.* are honoured as for every request on that socket), the
answer's records split into whole, CRC-checked batches for the local store's decoder (FetchedBatch).

Why not librdkafka here: it hands Python one Message object per record (~0.7 us each, more than the
local store's whole read); a Fetch answer is one bytes object of record batches, which the store's
compiled reader splits into values as fast as it reads a segment (fetch_consumer.py reads with it).

One connection per leader broker, asked which Fetch versions it speaks once (ApiVersions); leaders
come from the cluster's metadata (RemoteStore._metadata: librdkafka's Metadata), asked again when a
leader moved or its connection failed, until the cluster timeout: then one error line.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

from klog.client.remote import wire
from klog.errors import FetchUnsupported, KlogError, SecurityError, UnknownTopicError
from klog.protocol.apis import FETCH
from klog.protocol.errors import error_name
from klog.protocol.loading import load_kio

FETCH_VERSION_MAX = 11  # the newest Fetch without flexible encoding (wire.Connection speaks header v1)
FETCH_VERSION_MIN = 4  # the oldest Kafka 4.0 answers; record batches with magic 2 (Kafka 0.11+)
RESPONSE_BYTES_MAX = 64 << 20  # one answer's bound (each partition's own bound is the caller's)
RETRY_PAUSE_S = 0.05
TOPIC_GONE_S = 1.0  # a topic the metadata has not named for this long was deleted
OFFSET_OUT_OF_RANGE = 1
# a leader that moved or is not ready, or a connection that failed: ask the metadata again and retry
REFRESH_ERRORS = frozenset({3, 5, 6, 9, 13, 56, 74, 75})  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
# NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, NETWORK_EXCEPTION, KAFKA_STORAGE_ERROR,
# FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
READ_UNCOMMITTED = 0


@dataclass(frozen=True)
class PartitionAnswer:
    """One partition's part of a Fetch answer."""

    error: int
    high_watermark: int
    log_start_offset: int  # -1 when the broker's Fetch version does not say (v4)
    records: bytes


@dataclass
class _Broker:
    conn: wire.Connection
    version: int  # the Fetch version both sides speak
    schema: tuple[Any, Any, Any, Any]  # kio's FetchRequest, FetchTopic, FetchPartition, FetchResponse


class Fetcher:
    """Fetch requests to the leaders of a cluster's partitions (RemoteStore `store`)."""

    def __init__(self, store) -> None:  # noqa: ANN001 - RemoteStore
        self.store = store
        self.security = wire.security(store.target)  # a UsageError for what this socket cannot speak
        self._brokers: dict[int, _Broker] = {}
        self._leaders: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        for broker in self._brokers.values():
            broker.conn.close()
        self._brokers.clear()

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int) -> PartitionAnswer:
        """One Fetch of `topic`-`partition` from `offset` at its leader. A moved leader or a lost
        connection is retried (metadata asked again) until the cluster timeout, then a KlogError
        naming the partition, the cluster and the last reason; other partition errors are the caller's."""
        timeout = self.store.timeout
        deadline = time.monotonic() + timeout
        missing_since: float | None = None
        while True:
            try:
                answer = self._ask(self._leader(topic, partition), topic, partition, offset, max_bytes, wait_ms)
                if answer.error not in REFRESH_ERRORS:
                    return answer
                reason = error_name(answer.error)
                self._leaders.pop((topic, partition), None)
            except (SecurityError, FetchUnsupported, wire.MalformedAnswer):
                raise
            except UnknownTopicError as e:
                # deleted while being read: said at once once a second metadata answer agrees (one
                # broker's metadata may lag a new topic's creation for a moment)
                if missing_since is not None and time.monotonic() - missing_since >= TOPIC_GONE_S:
                    raise UnknownTopicError(f"topic '{topic}' was deleted while being read: {topic}-{partition} "
                                            f"is gone from {self.store.target.label}") from None
                missing_since = missing_since if missing_since is not None else time.monotonic()
                reason = str(e)
            except KlogError as e:
                reason = str(e)
                self._drop_leader(topic, partition)
            if time.monotonic() > deadline:
                raise KlogError(f"cannot read {topic}-{partition} from {self.store.target.label} within "
                                f"{timeout:g} s: {reason}")
            time.sleep(RETRY_PAUSE_S)

    def _drop_leader(self, topic: str, partition: int) -> None:
        """Drop the partition's leader and its connection: the next attempt asks and connects anew."""
        leader = self._leaders.pop((topic, partition), None)
        broker = self._brokers.pop(leader, None) if leader is not None else None
        if broker is not None:
            broker.conn.close()

    def _leader(self, topic: str, partition: int) -> _Broker:
        leader = self._leaders.get((topic, partition))
        if leader is None or leader not in self._brokers:
            found = self.store.leader(topic, partition)
            if found is None:
                raise KlogError("the cluster names no leader for it")
            leader, host, port = found
            if leader not in self._brokers:
                self._brokers[leader] = self._connect(host, port)
            self._leaders[(topic, partition)] = leader
        return self._brokers[leader]

    def _connect(self, host: str, port: int) -> _Broker:
        load_kio()
        from kio.schema.api_versions.v2.request import ApiVersionsRequest
        from kio.schema.api_versions.v2.response import ApiVersionsResponse

        conn = wire.Connection(host, port, self.store.timeout, self.security)
        try:
            versions = conn.call(ApiVersionsRequest(), ApiVersionsResponse)
            fetch = [k for k in versions.api_keys if int(k.api_key) == FETCH]
            top = min(FETCH_VERSION_MAX, int(fetch[0].max_version)) if fetch else -1
            if top < FETCH_VERSION_MIN or int(fetch[0].min_version) > top:
                raise FetchUnsupported(f"Kafka broker {conn.address} does not speak Fetch v{FETCH_VERSION_MIN}-"
                                       f"v{FETCH_VERSION_MAX} (Kafka 0.11 or later does)")
        except BaseException:
            conn.close()
            raise
        request = importlib.import_module(f"kio.schema.fetch.v{top}.request")
        response = importlib.import_module(f"kio.schema.fetch.v{top}.response")
        return _Broker(conn, top, (request.FetchRequest, request.FetchTopic, request.FetchPartition,
                                   response.FetchResponse))

    def _ask(self, broker: _Broker, topic: str, partition: int, offset: int, max_bytes: int,
             wait_ms: int) -> PartitionAnswer:
        import datetime

        from kio.static.primitive import i8, i32, i32Timedelta, i64

        fetch_request, fetch_topic, fetch_partition, fetch_response = broker.schema
        wanted = fetch_partition(partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(max_bytes))
        extra = {"forgotten_topics_data": ()} if broker.version >= 7 else {}  # sessions (KIP-227): none
        request = fetch_request(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=wait_ms)),
                                min_bytes=i32(1), max_bytes=i32(max(max_bytes, RESPONSE_BYTES_MAX)),
                                isolation_level=i8(READ_UNCOMMITTED),
                                topics=(fetch_topic(topic=topic, partitions=(wanted,)),), **extra)
        answer = broker.conn.call(request, fetch_response)
        if broker.version >= 7 and int(answer.error_code):
            return PartitionAnswer(int(answer.error_code), -1, -1, b"")
        for t in answer.responses:
            for p in t.partitions:
                if str(t.topic) == topic and int(p.partition_index) == partition:
                    return PartitionAnswer(int(p.error_code), int(p.high_watermark),
                                           int(getattr(p, "log_start_offset", -1)), p.records or b"")
        raise KlogError(f"Kafka broker {broker.conn.address} answered a Fetch of {topic}-{partition} without it")

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
ANSWER_BYTES_MAX = (1 << 31) - 1  # a Fetch's max_bytes is an int32
RETRY_PAUSE_S = 0.05
TOPIC_GONE_S = 1.0  # a topic the metadata has not named for this long was deleted
OFFSET_OUT_OF_RANGE = 1
# a leader that moved or is not ready, or a connection that failed: ask the metadata again and retry
REFRESH_ERRORS = frozenset({3, 5, 6, 9, 13, 56, 74, 75})  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
# NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, NETWORK_EXCEPTION, KAFKA_STORAGE_ERROR,
# FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
READ_UNCOMMITTED = 0

Where = tuple[str, int]  # (topic, partition)


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
        """One Fetch of `topic`-`partition` from `offset` at its leader (fetch_many of one)."""
        return self.fetch_many({(topic, partition): (offset, max_bytes)}, wait_ms, max_bytes)[(topic, partition)]

    def fetch_many(self, wants: dict[Where, tuple[int, int]], wait_ms: int,
                   max_bytes: int = ANSWER_BYTES_MAX, *, retry_others: bool = True) -> dict[Where, PartitionAnswer]:
        """Each (topic, partition) of `wants` from its (offset, max_bytes), in one Fetch per leader
        broker (as librdkafka fetches every partition of a broker together: 1,000 partitions are a
        few round trips, not 1,000). A moved leader or a lost connection is retried (metadata asked
        again) until the cluster timeout, then a KlogError naming a partition, the cluster and the
        last reason; other partition errors are the caller's.

        `max_bytes` bounds the answers' records together, over every broker (the caller's
        fetch.max.bytes): the brokers are asked one after another, the first want's first, each for
        what the answers before it left; once that is spent, the partitions of the brokers not yet
        asked are left out of the result (the first want never is). A broker sends the first batch
        of its first partition whole even past the bound (KIP-74), so the answers carry at most
        `max_bytes` plus one batch, and a batch larger than any bound still comes.

        `retry_others` False: a want other than the first that fails (no leader, a moved leader, a
        broker gone) is left out at once, not retried with the first (a read fetching others along
        for later must not wait on, nor fail for, a partition it is not reading)."""
        deadline = time.monotonic() + self.store.timeout
        missing_since: float | None = None
        out: dict[Where, PartitionAnswer] = {}
        pending = dict(wants)
        first = next(iter(wants))
        left = max_bytes
        while True:
            failed: dict[Where, str] = {}
            by_broker, gone = self._by_leader(pending, failed)
            if gone is not None:
                # deleted while being read: said at once once a second metadata answer agrees (one
                # broker's metadata may lag a new topic's creation for a moment)
                if missing_since is not None and time.monotonic() - missing_since >= TOPIC_GONE_S:
                    raise UnknownTopicError(f"topic '{gone[0]}' was deleted while being read: {gone[0]}-{gone[1]} "
                                            f"is gone from {self.store.target.label}")
                missing_since = missing_since if missing_since is not None else time.monotonic()
            for leader, asked in by_broker.items():  # (the first want's broker first: wants' order)
                if left <= 0 and first not in asked:
                    continue  # the bound is spent: left out, not retried
                left -= self._ask_leader(leader, asked, wait_ms, max(1, min(left, ANSWER_BYTES_MAX)), out, failed)
            pending = {where: pending[where] for where in failed if retry_others or where == first}
            if not pending:
                return out
            if time.monotonic() > deadline:
                topic, partition = first if first in failed else next(iter(failed))
                raise KlogError(f"cannot read {topic}-{partition} from {self.store.target.label} within "
                                f"{self.store.timeout:g} s: {failed[(topic, partition)]}")
            time.sleep(RETRY_PAUSE_S)

    def _by_leader(self, wants: dict[Where, tuple[int, int]], failed: dict[Where, str]
                   ) -> tuple[dict[int, dict[Where, tuple[int, int]]], Where | None]:
        """`wants` grouped by leader broker; a partition without one (the metadata names none, or
        its topic) goes to `failed`. Also a partition whose topic the cluster does not know, if any."""
        by_broker: dict[int, dict[Where, tuple[int, int]]] = {}
        gone = None
        for where, want in wants.items():
            try:
                leader = self._leader(*where)
            except UnknownTopicError as e:
                failed[where], gone = str(e), where
                continue
            except KlogError as e:
                failed[where] = str(e)
                continue
            by_broker.setdefault(leader, {})[where] = want
        return by_broker, gone

    def _ask_leader(self, leader: int, asked: dict[Where, tuple[int, int]], wait_ms: int, max_bytes: int,
                    out: dict[Where, PartitionAnswer], failed: dict[Where, str]) -> int:
        """One Fetch of `asked` at broker `leader` (its answer at most `max_bytes`, KIP-74's first
        batch apart): answers to `out`, what is to be retried to `failed`. The bytes of records it carried."""
        try:
            answers = self._ask(self._brokers[leader], asked, wait_ms, max_bytes)
        except (SecurityError, FetchUnsupported, wire.MalformedAnswer):
            raise
        except KlogError as e:
            for where in asked:
                failed[where] = str(e)
                self._drop_leader(*where)
            return 0
        carried = 0
        for where, answer in answers.items():
            carried += len(answer.records)
            if answer.error in REFRESH_ERRORS:
                failed[where] = error_name(answer.error)
                self._leaders.pop(where, None)
            else:
                out[where] = answer
        return carried

    def _drop_leader(self, topic: str, partition: int) -> None:
        """Drop the partition's leader and its connection: the next attempt asks and connects anew."""
        leader = self._leaders.pop((topic, partition), None)
        broker = self._brokers.pop(leader, None) if leader is not None else None
        if broker is not None:
            broker.conn.close()

    def _leader(self, topic: str, partition: int) -> int:
        """The id of the partition's leader, connected to. The metadata is asked once a topic for
        every partition's leader, not once a partition."""
        leader = self._leaders.get((topic, partition))
        if leader is None or leader not in self._brokers:
            found = self.store.leaders(topic)
            for p, known in found.items():
                if known is not None:
                    self._leaders.setdefault((topic, p), known[0])
            if found.get(partition) is None:
                self._leaders.pop((topic, partition), None)
                raise KlogError("the cluster names no leader for it")
            leader, host, port = found[partition]
            self._leaders[(topic, partition)] = leader
            if leader not in self._brokers:
                self._brokers[leader] = self._connect(host, port)
        return leader

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

    def _ask(self, broker: _Broker, asked: dict[Where, tuple[int, int]], wait_ms: int,
             max_bytes: int) -> dict[Where, PartitionAnswer]:
        """One Fetch request of every partition `asked` (from its offset, up to its max bytes), in
        `asked`'s order (the broker fills the answer in it, up to `max_bytes` for all)."""
        import datetime

        from kio.static.primitive import i8, i32, i32Timedelta, i64

        fetch_request, fetch_topic, fetch_partition, fetch_response = broker.schema
        by_topic: dict[str, list] = {}
        for (topic, partition), (offset, partition_bytes) in asked.items():
            by_topic.setdefault(topic, []).append(fetch_partition(
                partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(partition_bytes)))
        extra = {"forgotten_topics_data": ()} if broker.version >= 7 else {}  # sessions (KIP-227): none
        request = fetch_request(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=wait_ms)),
                                min_bytes=i32(1), max_bytes=i32(max_bytes),
                                isolation_level=i8(READ_UNCOMMITTED),
                                topics=tuple(fetch_topic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                                **extra)
        answer = broker.conn.call(request, fetch_response)
        if broker.version >= 7 and int(answer.error_code):
            return {where: PartitionAnswer(int(answer.error_code), -1, -1, b"") for where in asked}
        out = {}
        for t in answer.responses:
            for p in t.partitions:
                where = (str(t.topic), int(p.partition_index))
                if where in asked:
                    out[where] = PartitionAnswer(int(p.error_code), int(p.high_watermark),
                                                 int(getattr(p, "log_start_offset", -1)), p.records or b"")
        for topic, partition in asked:
            if (topic, partition) not in out:
                raise KlogError(f"Kafka broker {broker.conn.address} answered a Fetch of {topic}-{partition} "
                                "without it")
        return out

"""The Metadata answer, laid out by hand as Produce's is: with kio's entities and generated writer
(a type check per field) a partition entry cost ~8 us, so a topic of 1,000 partitions cost each
Metadata answer (librdkafka asks on connect and on every refresh) ~8 ms of the event loop, and an
answer of 10,000 partitions held every connection up for ~90 ms (now ~0.3 ms and ~2.4 ms). The layout is
Kafka's MetadataResponse v0-v12 (tests/server/test_serve_metadata_response.py checks it byte for
byte against kio's writer at every version); the flexible versions' tagged fields are all empty,
as in kio's default encoding.

klog serve is a single node that leads every partition and is its only replica and ISR: the
entries of a topic's partitions differ only in their index and leader epoch, so the rest of an
entry is laid out once per answer.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from klog.protocol.framing import RawBody
from klog.server.answer_bytes import I16, I32, count_bytes, string_bytes

FIRST_FLEXIBLE = 9
NO_OPERATIONS = -(2**31)  # the schemas' default: authorized operations not asked for
_ZERO_UUID = bytes(16)


@dataclass(frozen=True, slots=True)
class BrokerEntry:
    node_id: int
    host: str
    port: int
    rack: str | None = None  # v1+


@dataclass(slots=True)
class TopicEntry:
    """One topic of the answer; its partitions are led by the answer's `leader`, index first_index + i
    with leader epoch `leader_epochs[i]` (v7+), none of them in error."""

    error: int
    name: str | None  # None: a topic asked for by an unknown id (v12+)
    topic_id: uuid.UUID | None = None  # v10+ (None: the zero id)
    is_internal: bool = False  # v1+
    leader_epochs: Sequence[int] = ()
    authorized_operations: int = NO_OPERATIONS  # v8+
    first_index: int = 0  # (DescribeTopicPartitions pages through a topic's partitions)




def _int32s(values: Sequence[int], flexible: bool) -> bytes:
    return count_bytes(len(values), flexible) + b"".join(I32.pack(v) for v in values)


def _broker(version: int, broker: BrokerEntry) -> bytes:
    flexible = version >= FIRST_FLEXIBLE
    out = I32.pack(broker.node_id) + string_bytes(broker.host, flexible) + I32.pack(broker.port)
    if version >= 1:
        out += string_bytes(broker.rack, flexible)
    return out + (b"\0" if flexible else b"")


def _partition_layout(version: int, leader: int, elr: bool = False) -> tuple[struct.Struct, bytes]:
    """The struct of one partition entry (error code, index, leader, leader epoch v7+, then the
    bytes that follow as one field) and those bytes, the same for every partition: replicas and
    ISR (the leader alone), no eligible leader replicas nor last known ELR (`elr`:
    DescribeTopicPartitions), no offline replicas (v5+), tagged fields (v9+)."""
    flexible = version >= FIRST_FLEXIBLE
    tail = _int32s((leader,), flexible) * 2  # replicas, ISR: this node alone
    if elr:
        tail += count_bytes(0, flexible) * 2
    if version >= 5:
        tail += count_bytes(0, flexible)  # no offline replicas
    if flexible:
        tail += b"\0"
    epoch = "i" if version >= 7 else ""
    return struct.Struct(f">hii{epoch}{len(tail)}s"), tail


def _topic(version: int, topic: TopicEntry, partition: struct.Struct, tail: bytes, leader: int) -> bytes:
    flexible = version >= FIRST_FLEXIBLE
    parts = [I16.pack(topic.error), string_bytes(topic.name, flexible)]
    if version >= 10:
        parts.append(topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID)
    if version >= 1:
        parts.append(b"\1" if topic.is_internal else b"\0")
    epochs, first = topic.leader_epochs, topic.first_index
    parts.append(count_bytes(len(epochs), flexible))
    pack = partition.pack
    if version >= 7:
        parts.extend(pack(0, i, leader, epoch, tail) for i, epoch in enumerate(epochs, first))
    else:
        parts.extend(pack(0, i, leader, tail) for i in range(first, first + len(epochs)))
    if version >= 8:
        parts.append(I32.pack(topic.authorized_operations))
    if flexible:
        parts.append(b"\0")
    return b"".join(parts)


def metadata_answer(version: int, response_type: type, brokers: Sequence[BrokerEntry], cluster_id: str | None,
                    controller_id: int, leader: int, topics: Sequence[TopicEntry],
                    cluster_authorized_operations: int = NO_OPERATIONS) -> RawBody:
    """The response body of `version`; throttle time 0 (v3+: the body's first int32, patched by
    throttle.with_throttle)."""
    flexible = version >= FIRST_FLEXIBLE
    parts = [b"\0\0\0\0"] if version >= 3 else []
    parts.append(count_bytes(len(brokers), flexible))
    parts.extend(_broker(version, b) for b in brokers)
    if version >= 2:
        parts.append(string_bytes(cluster_id, flexible))
    if version >= 1:
        parts.append(I32.pack(controller_id))
    parts.append(count_bytes(len(topics), flexible))
    partition, tail = _partition_layout(version, leader)
    parts.extend(_topic(version, t, partition, tail, leader) for t in topics)
    if 8 <= version <= 10:
        parts.append(I32.pack(cluster_authorized_operations))
    if flexible:
        parts.append(b"\0")
    return RawBody(response_type, [b"".join(parts)], throttle_at=0 if version >= 3 else None)


def describe_topic_partitions_answer(response_type: type, leader: int, topics: Sequence[TopicEntry],
                                     next_cursor: tuple[str, int] | None) -> RawBody:
    """DescribeTopicPartitions v0's response body: its topics are Metadata v12's, their partitions
    with (empty) ELR fields; throttle time 0, the body's first int32. `next_cursor`: (topic name,
    partition index)."""
    partition, tail = _partition_layout(12, leader, elr=True)
    parts = [b"\0\0\0\0", count_bytes(len(topics), True)]
    parts.extend(_topic(12, t, partition, tail, leader) for t in topics)
    if next_cursor is None:
        parts.append(b"\xff")  # a null struct (KIP-893's marker)
    else:
        parts += [b"\x01", string_bytes(next_cursor[0], True), I32.pack(next_cursor[1]), b"\0"]
    parts.append(b"\0")
    return RawBody(response_type, [b"".join(parts)], throttle_at=0)

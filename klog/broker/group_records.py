"""The records of Kafka's `__consumer_offsets` topic, in Kafka's own format (apache/kafka 3.9,
group-coordinator/src/main/resources/common/message/OffsetCommitKey/Value and GroupMetadataKey/Value):
each key and value is an int16 schema version, then the schema's fields (int16-length strings,
int32-length bytes, big-endian integers; versions 4+ of the values are flexible, with compact
strings and tagged fields).

What Kafka 3.9 writes, and klog too: OffsetCommitKey v1 + OffsetCommitValue v3 (v1 when an expire
timestamp is set), GroupMetadataKey v2 + GroupMetadataValue v3; a deleted offset or group is a
tombstone (the key with a null value). The partition of a group is
`Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions` (Java's String.hashCode)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from klog.errors import CorruptLogError

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_PARTITIONS_DEFAULT = 50  # Kafka's offsets.topic.num.partitions


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode()) % partitions` (Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- encoding ------------------------------------------------------------------------------------
def _string(text: str | None) -> bytes:
    if text is None:
        return b"\xff\xff"
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(offset: int, metadata: str, commit_ms: int, leader_epoch: int = -1) -> bytes:
    return (struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch) + _string(metadata)
            + struct.pack(">q", commit_ms))


def group_metadata_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + _string(group)


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_ms: int = -1
    members: list[MemberRecord] = field(default_factory=list)


def group_metadata_value(group: GroupRecord) -> bytes:
    out = [struct.pack(">h", GROUP_METADATA_VALUE_VERSION), _string(group.protocol_type),
           struct.pack(">i", group.generation), _string(group.protocol), _string(group.leader),
           struct.pack(">qi", group.state_ms, len(group.members))]
    for m in group.members:
        out += [_string(m.member_id), _string(m.group_instance_id), _string(m.client_id), _string(m.client_host),
                struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms), _bytes(m.subscription),
                _bytes(m.assignment)]
    return b"".join(out)


def consumer_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = [struct.pack(">hi", 0, len(topics))] + [_string(t) for t in topics]
    return b"".join(out) + b"\xff\xff\xff\xff"


def consumer_assignment(tps: list[tuple[str, int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], null user data."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, ps in sorted(by_topic.items()):
        out += [_string(t), struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps))]
    return b"".join(out) + b"\xff\xff\xff\xff"


# -- decoding (`klog dirs import` of a Kafka broker's __consumer_offsets) ------------------------
@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    metadata: str
    commit_ms: int
    leader_epoch: int = -1
    expire_ms: int = -1


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptLogError(f"{self.what} is cut short at byte {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int(self, fmt: str) -> int:
        return struct.unpack(">" + fmt, self.take(struct.calcsize(fmt)))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptLogError(f"{self.what} has a bad varint at byte {self.pos}")

    def string(self, flexible: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int("h")
        return None if n < 0 else self.take(n).decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """An offset commit's or a group's key; None for other record types (Kafka 3.x's consumer-group
    protocol records, versions 3+), which klog does not import."""
    r = _Reader(data, "__consumer_offsets key")
    version = r.int("h")
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.int("i"))
    if version == 2:
        return GroupKey(r.string() or "")
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data, "__consumer_offsets offset commit value")
    version = r.int("h")
    if not 0 <= version <= 4:
        raise CorruptLogError(f"offset commit value version {version} is unknown (Kafka writes 0-4)")
    flexible = version >= 4
    offset = r.int("q")
    epoch = r.int("i") if version >= 3 else -1
    metadata = r.string(flexible) or ""
    commit_ms = r.int("q")
    expire_ms = r.int("q") if version == 1 else -1
    return OffsetValue(offset, metadata, commit_ms, epoch, expire_ms)

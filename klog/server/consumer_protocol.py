"""The "consumer" embedded protocol: what Kafka consumers put in JoinGroup metadata (subscription)
and SyncGroup assignments. The coordinator passes these bytes through untouched; klog reads them
only to show which topics a group reads and who holds which partition (`klog groups describe`).

Subscription:  version int16, topics [string], user_data bytes, (v1+) owned partitions, ...
Assignment:    version int16, [topic string, partitions [int32]], user_data bytes
"""

from __future__ import annotations

import struct

TP = tuple[str, int]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take(">h")
        if n < 0:
            return ""
        if self.pos + n > len(self.data):
            raise ValueError("string runs past the end")
        text = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return text

    def count(self) -> int:
        n = self.take(">i")
        if n > len(self.data):  # each element is at least a byte: a bad count, not a huge list
            raise ValueError("array count past the end")
        return max(n, 0)


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics a member subscribes to ([] if the bytes are not the consumer protocol)."""
    try:
        r = _Reader(metadata)
        r.take(">h")
        return sorted({r.string() for _ in range(r.count())})
    except (struct.error, ValueError, UnicodeDecodeError):
        return []


def assignment_partitions(assignment: bytes) -> list[TP]:
    """The partitions an assignment gives ([] if the bytes are not the consumer protocol)."""
    try:
        r = _Reader(assignment)
        r.take(">h")
        out = []
        for _ in range(r.count()):
            topic = r.string()
            out.extend((topic, r.take(">i")) for _ in range(r.count()))
        return sorted(out)
    except (struct.error, ValueError, UnicodeDecodeError):
        return []


def encode_assignment(partitions: list[TP]) -> bytes:
    """An assignment v0 (for DescribeGroups of a group of klog's own consumers)."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    out = bytearray(struct.pack(">hi", 0, len(by_topic)))
    for topic, parts in by_topic.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">i", -1)  # no user data
    return bytes(out)


def encode_subscription(topics: list[str]) -> bytes:
    """A subscription v0 (for DescribeGroups of a group of klog's own consumers)."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for topic in topics:
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name
    out += struct.pack(">i", -1)
    return bytes(out)

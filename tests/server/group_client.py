"""A raw Kafka group client for hostile sequences (tests/server/test_serve_group_hostile.py): kio
requests on asyncio connections, many at once, each answer decoded, with nothing of a real client's
good manners (no retries, any member id or generation the test chooses)."""

from __future__ import annotations

import asyncio
import struct
from datetime import timedelta
from typing import Any

from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from klog.protocol.schemas import payload_module
from tests.server.serve_fuzz import encode

CONSUMER = "consumer"


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=value))


def subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """The consumer protocol's subscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def decode(request: Any, frame: bytes) -> Any:
    module = payload_module(int(request.__api_key__), int(request.__version__), EntityType.response)
    response_type = getattr(module, type(request).__name__.replace("Request", "Response"))
    _, used = entity_reader(response_type.__header_schema__)(frame, 0)
    response, _ = entity_reader(response_type)(frame, used)
    return response


class Conn:
    """One connection; `call` sends a request and waits (at most `timeout` s) for its answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    @classmethod
    async def open(cls, port: int, source: str | None = None) -> Conn:
        """`source`: the local address to connect from (127.0.0.2: another client address on Linux)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 27,
                                                       local_addr=(source, 0) if source else None)
        return cls(reader, writer)

    async def send(self, request: Any, client_id: str = "hostile") -> int:
        self.correlation += 1
        frame = encode(request, self.correlation, client_id)
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        await self.writer.drain()
        return self.correlation

    async def receive(self, request: Any, timeout: float) -> Any:
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        frame = await asyncio.wait_for(self.reader.readexactly(struct.unpack(">i", head)[0]), timeout)
        return decode(request, frame)

    async def call(self, request: Any, timeout: float = 10.0, client_id: str = "hostile") -> Any:
        await self.send(request, client_id)
        return await self.receive(request, timeout)

    def close(self) -> None:
        self.writer.close()


# -- requests ---------------------------------------------------------------------------------------
def join(group: str, member_id: str = "", *, instance: str | None = None, session_ms: int = 6000,
         rebalance_ms: int = 10_000, protocols: tuple[tuple[str, bytes], ...] | None = None,
         protocol_type: str = CONSUMER, topics: list[str] | None = None, version: int = 5) -> Any:
    from klog.protocol.schemas import request_schema

    cls = request_schema(11, version)
    mod = __import__(cls.__module__, fromlist=["JoinGroupRequestProtocol"])
    if protocols is None:
        protocols = (("range", subscription(topics or ["t"])),)
    fields = {"group_id": group, "session_timeout": ms(session_ms), "member_id": member_id,
              "protocol_type": protocol_type,
              "protocols": tuple(mod.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols)}
    if version >= 1:
        fields["rebalance_timeout"] = ms(rebalance_ms)
    if version >= 5:
        fields["group_instance_id"] = instance
    if version >= 8:
        fields["reason"] = None
    return cls(**fields)


def sync(group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None, *,
         instance: str | None = None, protocol: str | None = "range") -> Any:
    from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment

    return SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                            group_instance_id=instance, protocol_type=CONSUMER, protocol_name=protocol,
                            assignments=tuple(SyncGroupRequestAssignment(member_id=m, assignment=a)
                                              for m, a in (assignments or {}).items()))


def heartbeat(group: str, generation: int, member_id: str, instance: str | None = None) -> Any:
    from kio.schema.heartbeat.v4.request import HeartbeatRequest

    return HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                            group_instance_id=instance)


def leave(group: str, members: list[tuple[str, str | None]]) -> Any:
    from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity

    return LeaveGroupRequest(group_id=group, members=tuple(
        MemberIdentity(member_id=m, group_instance_id=i, reason=None) for m, i in members))


def commit(group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int], *,
           metadata: str | None = None, instance: str | None = None) -> Any:
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=metadata))
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                               group_instance_id=instance, topics=tuple(
                                   OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                                   for t, ps in by_topic.items()))


def fetch_offsets(group: str, topics: dict[str, list[int]] | None = None) -> Any:
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

    return OffsetFetchRequest(group_id=group, require_stable=False, topics=None if topics is None else tuple(
        OffsetFetchRequestTopic(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()))


def describe(*groups: str) -> Any:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    return DescribeGroupsRequest(groups=tuple(groups), include_authorized_operations=False)


def list_groups() -> Any:
    from kio.schema.list_groups.v4.request import ListGroupsRequest

    return ListGroupsRequest(states_filter=())


def delete_groups(*groups: str) -> Any:
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

    return DeleteGroupsRequest(groups_names=tuple(groups))


def delete_offsets(group: str, topic: str, partitions: list[int]) -> Any:
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    return OffsetDeleteRequest(group_id=group, topics=(OffsetDeleteRequestTopic(name=topic, partitions=tuple(
        OffsetDeleteRequestPartition(partition_index=p) for p in partitions)),))

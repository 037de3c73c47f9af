"""ListOffsets: earliest (-2), latest (-1: the high watermark), max timestamp (-3), or the
first offset at or after a time; the same answers as `klog offsets`."""

from __future__ import annotations

from typing import Any

from klog.errors import KlogError, UnknownPartitionError, UnknownTopicError
from klog.protocol.apis import LIST_OFFSETS
from klog.protocol.kafka import NO_THROTTLE, E, leader_epoch_error, make, response_for
from klog.server.context import RequestContext
from klog.server.dispatch import register

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def max_timestamp_offset(part) -> tuple[int, int]:  # noqa: ANN001 - Partition
    """(timestamp, offset) of the record with the largest timestamp below the high watermark: the
    headers of the active segment and of the sealed segment whose time index ends highest (a
    sealed segment's last time-index entry is its largest timestamp, as in Kafka)."""
    hw = part.high_watermark()
    leader = part.leader
    leader.refresh_segments()
    if not leader.bases:
        return -1, -1
    sealed = []
    for base in leader.bases[:-1]:
        segment = leader.segments[base]
        segment.time_index.refresh()
        last = segment.time_index.last_entry()
        if last is not None:
            sealed.append((last[0], base))
    scan = [max(sealed)[1]] if sealed else []
    scan.append(leader.bases[-1])
    best = None
    for base in scan:
        segment = leader.segments[base]
        for _, header in segment.iter_headers(0, segment.file_size()):
            if header.base_offset >= hw:
                break
            if best is None or header.max_timestamp > best.max_timestamp:
                best = header
    if best is None:
        return -1, -1
    for batch in part.read(best.base_offset, max_bytes=1, upper=best.next_offset):
        for offset, timestamp, *_ in batch.records():
            if timestamp == best.max_timestamp:
                return timestamp, offset
    return best.max_timestamp, best.last_offset


def _answer(ctx: RequestContext, topic: str, index: int, timestamp: int,
            committed: bool = False, client_epoch: Any = None) -> tuple[E, int, int, int]:
    """(error, timestamp, offset, leader epoch); `committed`: a read_committed client, whose latest
    is the last stable offset; `client_epoch`: the request's current_leader_epoch (v4+)."""
    if not ctx.authorize("DESCRIBE", "TOPIC", topic):
        return E.topic_authorization_failed, -1, -1, -1
    try:
        part = ctx.server.appender.partition(topic, index)
        fenced = leader_epoch_error(ctx.store, topic, index, client_epoch)
        if fenced != E.none:
            return fenced, -1, -1, -1
        epoch = part.snapshot().leader_epoch
        if timestamp == LATEST and committed:
            from klog.server.fetch import _stable

            stable, lock = _stable(part)
            with lock:
                return E.none, -1, stable.refresh(part.high_watermark()), epoch
        if timestamp == LATEST:
            return E.none, -1, part.high_watermark(), epoch
        if timestamp == EARLIEST:
            return E.none, -1, part.log_start_offset(), epoch
        if timestamp == MAX_TIMESTAMP:
            ts, offset = max_timestamp_offset(part)
            return E.none, ts, offset, epoch
        if timestamp < 0:
            return E.invalid_request, -1, -1, -1
        found = part.offset_for_timestamp(timestamp)
        if found is None:
            return E.none, -1, -1, epoch
        return E.none, timestamp, max(found, part.log_start_offset()), epoch
    except (UnknownTopicError, UnknownPartitionError):
        ctx.store.forget_topic_cache(topic)
        return E.unknown_topic_or_partition, -1, -1, -1
    except (KlogError, OSError) as e:
        ctx.log.warning("list offsets %s-%d: %s", topic, index, e)
        return E.kafka_storage_error, -1, -1, -1


def _list(ctx: RequestContext, request: Any, mod: Any) -> Any:
    topics = []
    committed = int(getattr(request, "isolation_level", 0)) == 1  # ListOffsets v2+
    for t in request.topics:
        parts = []
        for p in t.partitions:
            err, ts, offset, epoch = _answer(ctx, str(t.name), int(p.partition_index), int(p.timestamp), committed,
                                             getattr(p, "current_leader_epoch", None))
            parts.append(make(mod.ListOffsetsPartitionResponse, partition_index=p.partition_index, error_code=err,
                              timestamp=ts, offset=offset, leader_epoch=epoch))
        topics.append(make(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(mod.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


@register(LIST_OFFSETS, 1, 7)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run_blocking(_list, ctx, request, response_for(request))

"""ListOffsets: earliest (-2), latest (-1: the high watermark), max timestamp (-3), or the
first offset at or after a time (with that record's timestamp, as Kafka answers); the same
offsets as `klog offsets`."""

from __future__ import annotations

from typing import Any

from klog.broker.group_records import OFFSETS_TOPIC
from klog.broker.offsets import last_stable_offset, max_timestamp_offset, timestamp_at
from klog.errors import InvalidTopicError, KlogError, UnknownPartitionError, UnknownTopicError
from klog.protocol.apis import LIST_OFFSETS
from klog.protocol.kafka import NO_THROTTLE, E, leader_epoch_error, make, response_for
from klog.server.context import RequestContext
from klog.server.dispatch import register

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL, LATEST_TIERED = -4, -5  # v8, v9 (KIP-405, KIP-1005): no tiered storage here


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
            return E.none, -1, last_stable_offset(part), epoch
        if timestamp == LATEST:
            return E.none, -1, part.high_watermark(), epoch
        if timestamp in (EARLIEST, EARLIEST_LOCAL):  # every segment is local: the same offset, as Kafka answers
            return E.none, -1, part.log_start_offset(), epoch
        if timestamp == LATEST_TIERED:  # nothing tiered: Kafka answers no offset
            return E.none, -1, -1, epoch
        if timestamp == MAX_TIMESTAMP:
            ts, offset = max_timestamp_offset(part)
            if offset >= 0 and offset >= _fetchable_end(part, committed):
                return E.none, -1, -1, epoch
            return E.none, ts, offset, epoch
        if timestamp < 0:
            return E.invalid_request, -1, -1, -1
        found = part.offset_for_timestamp(timestamp)
        if found is None or found >= _fetchable_end(part, committed):
            return E.none, -1, -1, epoch
        offset = max(found, part.log_start_offset())
        return E.none, timestamp_at(part, offset), offset, epoch  # the record's, as Kafka answers
    except (UnknownTopicError, UnknownPartitionError):
        ctx.store.forget_topic_metadata(topic)
        return E.unknown_topic_or_partition, -1, -1, -1
    except InvalidTopicError:  # a name no topic can have: nothing to log per partition (the client's text)
        return E.unknown_topic_or_partition, -1, -1, -1
    except (KlogError, OSError) as e:
        ctx.log.warning("list offsets %s-%d: %s", topic, index, e)
        return E.kafka_storage_error, -1, -1, -1


def _fetchable_end(part: Any, committed: bool) -> int:
    """The end of what the client may fetch (Kafka's lastFetchableOffset): a read_committed client's
    last stable offset, else the high watermark. A lookup by time that finds an offset at or past it
    answers no offset (-1), as Kafka 3.9 does: a read_committed client was told the offset of a
    record of a transaction still open, which may yet abort."""
    return last_stable_offset(part) if committed else part.high_watermark()


def _list(ctx: RequestContext, request: Any, mod: Any) -> Any:
    if ctx.server.offsets_topic is not None and any(str(t.name) == OFFSETS_TOPIC for t in request.topics):
        ctx.server.offsets_topic.sync()  # a reader starting now sees every commit made before it
    topics = []
    committed = int(getattr(request, "isolation_level", 0)) == 1  # ListOffsets v2+
    for t in request.topics:
        parts = []
        for p in t.partitions:
            err, ts, offset, epoch = _answer(ctx, str(t.name), int(p.partition_index), int(p.timestamp), committed,
                                             getattr(p, "current_leader_epoch", None))
            # v0 answers a list (Kafka 3.9 gives one offset to a max_num_offsets=1 client, as every one is)
            parts.append(make(mod.ListOffsetsPartitionResponse, partition_index=p.partition_index, error_code=err,
                              timestamp=ts, offset=offset, leader_epoch=epoch,
                              old_style_offsets=(offset,) if offset >= 0 and err == E.none else ()))
        topics.append(make(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(mod.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


@register(LIST_OFFSETS, 0, 9)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run_blocking(_list, ctx, request, response_for(request))

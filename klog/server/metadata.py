"""Metadata: this one node is every partition's leader and its whole ISR.

Topics asked for by name are auto-created when the store's auto.create.topics.enable and the
request allow it (Kafka's rule), with the store's default partitions and configs.
"""

from __future__ import annotations

from typing import Any

from klog.errors import InvalidTopicError, KlogError, TopicExistsError
from klog.protocol.apis import METADATA
from klog.protocol.kafka import E, response_for, topic_uuid
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.server.metadata_response import (
    NO_OPERATIONS,
    BrokerEntry,
    TopicEntry,
    describe_topic_partitions_answer,
    metadata_answer,
)
from klog.store.names import INTERNAL_TOPICS


def topic_error(exc: Exception) -> E:
    if isinstance(exc, InvalidTopicError):
        return E.invalid_topic_exception
    return E.unknown_topic_or_partition


def _lookup(ctx: RequestContext, wanted: list[tuple[str | None, Any]] | None, auto_create: bool) -> list:
    """[(name, topic id, TopicMeta | None, error)] for the topics asked (None: all)."""
    store = ctx.store
    if wanted is None:  # topics the caller may not Describe are left out (ACLs)
        return [(t.name, t.topic_id, t, E.none) for t in store.list_topics()
                if ctx.authorize("DESCRIBE", "TOPIC", t.name)]
    by_id = None
    out = []
    for name, tid in wanted:
        if name is None:  # v10+: a topic by id (kio reads the zero id as None: no topic has it)
            if by_id is None:
                by_id = {topic_uuid(t.topic_id): t for t in store.list_topics()}
            meta = by_id.get(tid) if tid is not None else None
            if meta is not None and not ctx.authorize("DESCRIBE", "TOPIC", meta.name):
                out.append((None, str(tid), None, E.topic_authorization_failed))
                continue
            out.append((meta.name if meta else None, str(tid), meta, E.none if meta else E.unknown_topic_id))
            continue
        if not ctx.authorize("DESCRIBE", "TOPIC", name):
            out.append((name, None, None, E.topic_authorization_failed))
            continue
        try:
            meta = store.topics.find(name)
            if meta is None and auto_create and name not in INTERNAL_TOPICS:
                if not (ctx.authorize("CREATE", "CLUSTER", "kafka-cluster") or ctx.authorize("CREATE", "TOPIC", name)):
                    # Kafka's unauthorizedForCreateTopics: a producer learns at once it may not
                    # create the topic (UNKNOWN_TOPIC_OR_PARTITION had it retry until its timeout)
                    out.append((name, None, None, E.topic_authorization_failed))
                    continue
                try:
                    meta = store.create_topic(name, exist_ok=True)
                    ctx.log.info("auto-created topic '%s' (client %s)", name, ctx.client_id)
                except TopicExistsError:
                    meta = store.topics.find(name)
            if meta is None:
                from klog.store.names import validate_topic_name

                validate_topic_name(name)
                out.append((name, None, None, E.unknown_topic_or_partition))
            else:
                out.append((name, meta.topic_id, meta, E.none))
        except KlogError as e:
            out.append((name, None, None, topic_error(e)))
    return out


@register(METADATA, 0, 12)
async def metadata(ctx: RequestContext, request: Any) -> Any:
    # all of it in one of the handler threads, the answer laid out too: an answer of 100,000
    # partitions (or all of 20,000 topics) takes ~15 ms (~50 ms) to lay out, which on the event loop
    # every connection waited for, whoever asked (a request of a few bytes, pipelined at will)
    return await ctx.run_blocking(_metadata, ctx, request)


def _metadata(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    version = ctx.api_version
    if request.topics is None or (version == 0 and not request.topics):
        wanted = None
    else:
        # a topic named twice is answered once, as Kafka does (it reads the names into a set)
        wanted = list(dict.fromkeys((t.name, getattr(t, "topic_id", None)) for t in request.topics))
    auto = ctx.store.auto_create_enabled() and getattr(request, "allow_auto_topic_creation", True)
    found = _lookup(ctx, wanted, auto)
    # v8+: what the caller may do to each topic answered, when asked (librdkafka's describe_topics
    # with include_authorized_operations), and v8-v10 to the cluster; else the schema's default
    ops: dict[str, int] = {}
    if version >= 8 and getattr(request, "include_topic_authorized_operations", False):
        ops = _topics_operations(ctx, [name for name, _, meta, _ in found if meta is not None])
    cluster_ops = NO_OPERATIONS
    if 8 <= version <= 10 and getattr(request, "include_cluster_authorized_operations", False):
        cluster_ops = cluster_operations(ctx)
    node = ctx.broker.node_id
    topics = []
    for name, tid, meta, err in found:
        if name is None and version < 12:  # a null name (no ids before v12): Kafka's InvalidRequestException
            name, err = "", E.invalid_request
        topics.append(TopicEntry(error=err, name=name, topic_id=topic_uuid(tid) if tid else None,
                                 is_internal=name in INTERNAL_TOPICS,
                                 leader_epochs=[pm.leader_epoch for pm in meta.partitions] if meta is not None else (),
                                 authorized_operations=ops.get(name, NO_OPERATIONS)))
    broker = ctx.broker
    # laid out by hand (metadata_response): kio's entities and writer took ~8 us per partition entry
    return metadata_answer(version, mod.MetadataResponse, (BrokerEntry(node, broker.host, broker.port, broker.rack),),
                           broker.cluster_id, node, node, topics, cluster_ops)


# -- DescribeTopicPartitions (KIP-966): what Kafka 3.9's admin client asks first in describeTopics ---------
DESCRIBE_TOPIC_PARTITIONS = 75
PARTITION_LIMIT_MAX = 2000  # Kafka's max.request.partition.size.limit
# Kafka's supported operations on a topic (AclEntry.supportedOperations): READ, WRITE, CREATE, DELETE,
# ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, as AclOperation codes
TOPIC_OPERATION_BITS = (("READ", 3), ("WRITE", 4), ("CREATE", 5), ("DELETE", 6), ("ALTER", 7), ("DESCRIBE", 8),
                        ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11))
# and on the cluster: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
CLUSTER_OPERATION_BITS = (("CREATE", 5), ("ALTER", 7), ("DESCRIBE", 8), ("CLUSTER_ACTION", 9),
                          ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11), ("IDEMPOTENT_WRITE", 12))


def topic_operations(ctx: RequestContext, name: str) -> int:
    """The 32-bit field of what the caller may do to topic `name` (all of them without ACLs)."""
    return sum(1 << bit for op, bit in TOPIC_OPERATION_BITS if ctx.authorize(op, "TOPIC", name))


def _topics_operations(ctx: RequestContext, names: list[str]) -> dict[str, int]:
    return {name: topic_operations(ctx, name) for name in names}


def cluster_operations(ctx: RequestContext) -> int:
    """What the caller may do to the cluster, as Metadata v8-v10 answers it: 0 without DESCRIBE on it."""
    if not ctx.authorize("DESCRIBE", "CLUSTER", "kafka-cluster"):
        return 0
    return sum(1 << bit for op, bit in CLUSTER_OPERATION_BITS if ctx.authorize(op, "CLUSTER", "kafka-cluster"))


def _unknown_topic_error(name: str) -> E:
    from klog.store.names import validate_topic_name

    try:
        validate_topic_name(name)
    except KlogError:
        return E.invalid_topic_exception
    return E.unknown_topic_or_partition


def _describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    """Kafka's DescribeTopicPartitionsRequestHandler: topics in name order from the cursor on, at most
    the partition limit of them (then a next cursor); all topics when none is named (those the caller
    may not Describe left out), else unknown and unauthorized ones answered with their error."""
    response_type = response_for(request).DescribeTopicPartitionsResponse
    node = ctx.broker.node_id
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = {t.name for t in ctx.store.list_topics()}
    else:
        names = {str(t.name) for t in request.topics}
    names = {n for n in names if n >= after}
    if cursor is not None and (cursor.partition_index < 0 or not (fetch_all or cursor.topic_name in names)):
        return describe_topic_partitions_answer(response_type, node, [
            TopicEntry(E.invalid_request, str(t.name)) for t in request.topics], None)
    remaining = max(min(PARTITION_LIMIT_MAX, int(request.response_partition_limit)), 1)
    topics: list[TopicEntry] = []
    refused: list[TopicEntry] = []
    next_cursor = None
    for name in sorted(names):
        if not ctx.authorize("DESCRIBE", "TOPIC", name):
            if not fetch_all:  # its existence is not disclosed
                refused.append(TopicEntry(E.topic_authorization_failed, name))
            continue
        if remaining == 0:  # the next answer starts at this topic
            next_cursor = (name, 0)
            break
        meta = ctx.store.topics.find(name)
        if meta is None:
            if not fetch_all:
                topics.append(TopicEntry(_unknown_topic_error(name), name, is_internal=name in INTERNAL_TOPICS))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(len(meta.partitions), start + remaining)
        epochs = [meta.partitions[i].leader_epoch for i in range(start, end)]  # (none: a cursor past the end)
        topics.append(TopicEntry(E.none, name, topic_uuid(meta.topic_id), name in INTERNAL_TOPICS, epochs,
                                 topic_operations(ctx, name), first_index=start))
        if end < len(meta.partitions):
            next_cursor = (name, end)
            break
        remaining -= len(epochs)
    # laid out by hand, as Metadata's answer (up to PARTITION_LIMIT_MAX partitions each)
    return describe_topic_partitions_answer(response_type, node, topics + refused, next_cursor)


@register(DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run_blocking(_describe_topic_partitions, ctx, request)

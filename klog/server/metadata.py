"""Metadata: this one node is every partition's leader and its whole ISR.

Topics asked for by name are auto-created when the store's auto.create.topics.enable and the
request allow it (Kafka's rule), with the store's default partitions and configs.
"""

from __future__ import annotations

from typing import Any

from klog.errors import InvalidTopicError, KlogError, TopicExistsError
from klog.protocol.apis import METADATA
from klog.protocol.kafka import NO_THROTTLE, ZERO_UUID, E, make, response_for, topic_uuid
from klog.server.context import RequestContext
from klog.server.dispatch import register
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
            if meta is None and auto_create and name not in INTERNAL_TOPICS and (
                    ctx.authorize("CREATE", "CLUSTER", "kafka-cluster")
                                                 or ctx.authorize("CREATE", "TOPIC", name)):
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
    mod = response_for(request)
    version = ctx.api_version
    if request.topics is None or (version == 0 and not request.topics):
        wanted = None
    else:
        # a topic named twice is answered once, as Kafka does (it reads the names into a set)
        wanted = list(dict.fromkeys((t.name, getattr(t, "topic_id", None)) for t in request.topics))
    auto = ctx.store.auto_create_enabled() and getattr(request, "allow_auto_topic_creation", True)
    found = await ctx.run_blocking(_lookup, ctx, wanted, auto)
    node = ctx.broker.node_id
    topics = []
    for name, tid, meta, err in found:
        if name is None and version < 12:  # a null name (no ids before v12): Kafka's InvalidRequestException
            name, err = "", E.invalid_request
        parts = ()
        if meta is not None:
            parts = tuple(make(mod.MetadataResponsePartition, error_code=E.none, partition_index=i,
                               leader_id=node, leader_epoch=pm.leader_epoch, replica_nodes=(node,),
                               isr_nodes=(node,), offline_replicas=())
                          for i, pm in enumerate(meta.partitions))
        topics.append(make(mod.MetadataResponseTopic, error_code=err, name=name,
                           topic_id=topic_uuid(tid) if tid else ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                           partitions=parts))
    broker = make(mod.MetadataResponseBroker, node_id=node, host=ctx.broker.host, port=ctx.broker.port,
                  rack=ctx.broker.rack)
    return make(mod.MetadataResponse, throttle_time=NO_THROTTLE, brokers=(broker,),
                cluster_id=ctx.broker.cluster_id, controller_id=node, topics=tuple(topics))

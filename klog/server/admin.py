"""Admin APIs over the same library calls as `klog topics`: CreateTopics (validate-only too),
DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DescribeCluster, DescribeLogDirs, OffsetForLeaderEpoch, DeleteRecords.

Only topic configs exist (resource type 2); a broker resource (4) describes the store defaults
read-only. klog replicas live in log directories of this one node, so the replication factor a
client asks for is the number of log directories a partition is copied to (-1: the default).
"""

from __future__ import annotations

import shutil
from typing import Any

from klog.errors import (
    InvalidConfigError,
    InvalidTopicError,
    KlogError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
    UsageError,
)
from klog.protocol.apis import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    INCREMENTAL_ALTER_CONFIGS,
    OFFSET_FOR_LEADER_EPOCH,
)
from klog.protocol.kafka import NO_THROTTLE, ZERO_UUID, E, leader_epoch_error, make, response_for, topic_uuid
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.store.names import INTERNAL_TOPICS

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 8, 16, 32
SOURCE_TOPIC, SOURCE_DEFAULT = 1, 5  # DescribeConfigs config sources
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
# Kafka's answer to an assignment it cannot honour (INVALID_PARTITIONS would say the count is wrong)
MANUAL_ASSIGNMENTS = "manual replica assignments are not supported (klog places replicas itself)"


def error_of(exc: BaseException, partitions: bool = False) -> E:
    if isinstance(exc, TopicExistsError):
        return E.topic_already_exists
    if isinstance(exc, InvalidConfigError):
        return E.invalid_config
    if isinstance(exc, InvalidTopicError):
        return E.invalid_topic_exception
    if isinstance(exc, UnknownTopicError | UnknownPartitionError):
        return E.unknown_topic_or_partition
    if isinstance(exc, OffsetOutOfRangeError):
        return E.offset_out_of_range
    if isinstance(exc, UsageError):
        text = str(exc)
        if "replication factor" in text:
            return E.invalid_replication_factor
        if "partition" in text or partitions:
            return E.invalid_partitions
        return E.invalid_request
    return E.unknown_server_error


# -- topics ----------------------------------------------------------------------------------
def _create_one(ctx: RequestContext, t: Any, validate_only: bool) -> tuple[E, str | None, Any]:
    from klog.store.config import validate_configs
    from klog.store.names import validate_topic_name

    store = ctx.store
    try:
        name = str(t.name)
        if not (ctx.authorize("CREATE", "CLUSTER", "kafka-cluster") or ctx.authorize("CREATE", "TOPIC", name)):
            return E.topic_authorization_failed, f"{ctx.principal} may not create topic '{name}'", None
        if name in INTERNAL_TOPICS:
            return E.invalid_request, f"creation of internal topic {name} is prohibited", None
        validate_topic_name(name)
        if getattr(t, "assignments", ()):
            return E.invalid_replica_assignment, MANUAL_ASSIGNMENTS, None
        configs = validate_configs({c.name: c.value for c in t.configs if c.value is not None})
        partitions = None if int(t.num_partitions) == -1 else int(t.num_partitions)
        rf = None if int(t.replication_factor) == -1 else int(t.replication_factor)
        if validate_only:
            if store.has_topic(name):
                raise TopicExistsError(f"topic '{name}' already exists")
            if partitions is not None and partitions < 1:
                raise UsageError(f"invalid partition count {partitions}")
            if rf is not None and not 1 <= rf <= len(store.healthy_log_dir_ids()):
                raise UsageError(f"replication factor {rf} is larger than the number of healthy log directories")
            return E.none, None, None
        meta = store.create_topic(name, partitions, rf, configs)
        ctx.log.info("created topic '%s' (client %s)", name, ctx.client_id)
        return E.none, None, meta
    except KlogError as e:
        return error_of(e, partitions=True), str(e), None


@register(CREATE_TOPICS, 0, 7)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    results = []
    for t in request.topics:
        validate_only = bool(getattr(request, "validate_only", False))  # v1+
        err, message, meta = await ctx.run_blocking(_create_one, ctx, t, validate_only)
        configs = None
        if meta is not None and not ctx.authorize("DESCRIBE_CONFIGS", "TOPIC", str(t.name)):
            # Kafka's controller: the created topic's configs, partitions and replication factor
            # are for those who may DescribeConfigs it; the others are told so in its own field
            results.append(make(mod.CreatableTopicResult, name=t.name, topic_id=topic_uuid(meta.topic_id),
                                error_code=err, error_message=message, num_partitions=-1, replication_factor=-1,
                                topic_config_error_code=E.topic_authorization_failed, configs=()))
            continue
        if meta is not None and hasattr(mod, "CreatableTopicConfigs"):
            # the configs as created, not read again: a delete from another client may come first
            configs = tuple(make(mod.CreatableTopicConfigs, name=k, value=v, read_only=False,
                                 config_source=SOURCE_TOPIC if k in meta.configs else SOURCE_DEFAULT,
                                 is_sensitive=False)
                            for k, v in sorted(meta.effective_configs().items()))
        results.append(make(mod.CreatableTopicResult, name=t.name,
                            topic_id=topic_uuid(meta.topic_id) if meta else ZERO_UUID, error_code=err,
                            error_message=message, topic_config_error_code=0,
                            num_partitions=len(meta.partitions) if meta else -1,
                            replication_factor=meta.replication_factor if meta else -1, configs=configs))
    return make(mod.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _delete_one(ctx: RequestContext, name: str | None, topic_id: Any) -> tuple[E, str | None, str | None, Any]:
    store = ctx.store
    try:
        by_id = name is None
        if by_id:
            found = [t for t in store.list_topics() if topic_uuid(t.topic_id) == topic_id]
            if not found:
                return E.unknown_topic_id, None, f"unknown topic id {topic_id}", topic_id
            name = found[0].name
        # Kafka's controller (ControllerApis.deleteTopics): Delete on the cluster deletes any topic; a topic
        # named by id keeps its name from a caller that may not Describe it; one named by name is refused to
        # a caller that may not Describe it (whatever its Delete), and unknown to one that may
        cluster = ctx.authorize("DELETE", "CLUSTER", "kafka-cluster")
        deletable = cluster or ctx.authorize("DELETE", "TOPIC", name)
        describable = cluster or ctx.authorize("DESCRIBE", "TOPIC", name)
        refused = f"{ctx.principal} may not delete it"
        if by_id:
            if not deletable:
                return E.topic_authorization_failed, name if describable else None, refused, topic_id
        elif not describable:
            return E.topic_authorization_failed, name, refused, ZERO_UUID
        elif not store.has_topic(name):
            return E.unknown_topic_or_partition, name, f"unknown topic '{name}'", ZERO_UUID
        elif not deletable:
            return E.topic_authorization_failed, name, refused, ZERO_UUID
        if name in INTERNAL_TOPICS:
            return E.invalid_request, name, f"deletion of internal topic {name} is prohibited", topic_id or ZERO_UUID
        ctx.server.appender.forget_producer_states(name)
        meta = store.delete_topic(name)
        ctx.log.info("deleted topic '%s' (client %s)", name, ctx.client_id)
        return E.none, name, None, topic_uuid(meta.topic_id)
    except KlogError as e:
        return error_of(e), name, str(e), topic_id or ZERO_UUID


@register(DELETE_TOPICS, 0, 6)
async def delete_topics(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if hasattr(request, "topic_names"):
        wanted = [(str(n), None) for n in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    results = []
    for name, tid in wanted:
        err, name, message, tid = await ctx.run_blocking(_delete_one, ctx, name, tid)
        results.append(make(mod.DeletableTopicResult, name=name, topic_id=tid or ZERO_UUID, error_code=err,
                            error_message=message))
    return make(mod.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


def _grow(ctx: RequestContext, t: Any, validate_only: bool) -> tuple[E, str | None]:
    store = ctx.store
    try:
        if not ctx.authorize("ALTER", "TOPIC", str(t.name)):
            return E.topic_authorization_failed, f"{ctx.principal} may not alter topic '{t.name}'"
        meta = store.topics.get(str(t.name))
        if int(t.count) <= len(meta.partitions):
            raise UsageError(f"topic '{t.name}' has {len(meta.partitions)} partitions; the new count must be larger")
        if t.assignments:
            return E.invalid_replica_assignment, MANUAL_ASSIGNMENTS
        if not validate_only:
            store.alter_topic(str(t.name), partitions=int(t.count))
            ctx.server.appender.forget_producer_states(str(t.name))
        return E.none, None
    except KlogError as e:
        return error_of(e, partitions=True), str(e)


@register(CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    results = []
    for t in request.topics:
        err, message = await ctx.run_blocking(_grow, ctx, t, bool(request.validate_only))
        results.append(make(mod.CreatePartitionsTopicResult, name=t.name, error_code=err, error_message=message))
    return make(mod.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# -- configs ---------------------------------------------------------------------------------
def config_refusal(ctx: RequestContext, operation: str, rtype: int, name: str) -> E | None:
    """Kafka's check of a config resource (ConfigHelper, ControllerApis.authorizeAlterResource):
    `operation` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on the cluster for a broker, broker logger or
    client-metrics resource, on the topic, on the group; its refusal's code, or None. A type Kafka
    does not know is left to the caller's INVALID_REQUEST."""
    if rtype == TOPIC_RESOURCE:
        return None if ctx.authorize(operation, "TOPIC", name) else E.topic_authorization_failed
    if rtype == GROUP_RESOURCE:
        return None if ctx.authorize(operation, "GROUP", name) else E.group_authorization_failed
    if rtype in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE):
        return None if ctx.authorize(operation, "CLUSTER", "kafka-cluster") else E.cluster_authorization_failed
    return None


def _describe_resource(ctx: RequestContext, mod: Any, r: Any) -> Any:
    from klog.store.config import CONFIG_KEYS

    store = ctx.store
    rtype, name = int(r.resource_type), str(r.resource_name)
    keys = set(r.configuration_keys) if r.configuration_keys is not None else None
    error = config_refusal(ctx, "DESCRIBE_CONFIGS", rtype, name)
    if error is not None:
        return make(mod.DescribeConfigsResult, error_code=error, error_message=None, resource_type=rtype,
                    resource_name=name, configs=())
    try:
        if rtype == TOPIC_RESOURCE:
            topic = store.topics.get(name)
            values = store.effective_configs(name)
            own = topic.configs
            read_only = False
        elif rtype == BROKER_RESOURCE:
            values = {k: str(key.default) for k, key in CONFIG_KEYS.items()}
            own = {}
            read_only = True
        else:
            raise UsageError(f"resource type {rtype} is not supported (topics: 2, brokers: 4)")
    except KlogError as e:
        return make(mod.DescribeConfigsResult, error_code=error_of(e), error_message=str(e), resource_type=rtype,
                    resource_name=name, configs=())
    entries = tuple(make(mod.DescribeConfigsResourceResult, name=k, value=v, read_only=read_only,
                         config_source=SOURCE_TOPIC if k in own else SOURCE_DEFAULT,
                         is_default=k not in own, is_sensitive=False, synonyms=(), config_type=0,
                         documentation=None)
                    for k, v in sorted(values.items()) if keys is None or k in keys)
    return make(mod.DescribeConfigsResult, error_code=E.none, error_message=None, resource_type=rtype,
                resource_name=name, configs=entries)


@register(DESCRIBE_CONFIGS, 0, 4)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    results = [await ctx.run_blocking(_describe_resource, ctx, mod, r) for r in request.resources]
    return make(mod.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


def _alter(ctx: RequestContext, r: Any, validate_only: bool, incremental: bool) -> tuple[E, str | None]:
    from klog.store.config import validate_configs

    store = ctx.store
    name = str(r.resource_name)
    try:
        refused = config_refusal(ctx, "ALTER_CONFIGS", int(r.resource_type), name)
        if refused is not None:
            kind = {TOPIC_RESOURCE: "topic", GROUP_RESOURCE: "group"}.get(int(r.resource_type), "resource")
            return refused, f"{ctx.principal} may not alter configs of {kind} '{name}'"
        if int(r.resource_type) != TOPIC_RESOURCE:
            raise UsageError("only topic configs can be altered (the store defaults: klog dirs)")
        topic = store.topics.get(name)
        if incremental:
            current = dict(topic.configs)
            for c in r.configs:
                op = int(c.config_operation)
                if op == SET:
                    current[c.name] = c.value
                elif op == DELETE:
                    current.pop(c.name, None)
                else:  # APPEND/SUBTRACT are for list configs; klog's topic configs have none
                    raise InvalidConfigError(f"operation {op} is not supported for '{c.name}'")
        else:  # AlterConfigs replaces the whole set
            current = {c.name: c.value for c in r.configs if c.value is not None}
        wanted = validate_configs({k: v for k, v in current.items() if v is not None})
        if not validate_only:
            removed = [k for k in topic.configs if k not in wanted]
            store.alter_topic(name, set_configs=wanted, delete_configs=removed)
            ctx.server.appender.forget_producer_states(name)
        return E.none, None
    except KlogError as e:
        return error_of(e), str(e)


async def _alter_all(ctx: RequestContext, request: Any, incremental: bool, response_name: str) -> Any:
    mod = response_for(request)
    out = []
    for r in request.resources:
        err, message = await ctx.run_blocking(_alter, ctx, r, bool(request.validate_only), incremental)
        out.append(make(mod.AlterConfigsResourceResponse, error_code=err, error_message=message,
                        resource_type=r.resource_type, resource_name=r.resource_name))
    return make(getattr(mod, response_name), throttle_time=NO_THROTTLE, responses=tuple(out))


@register(ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter_all(ctx, request, False, "AlterConfigsResponse")


@register(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter_all(ctx, request, True, "IncrementalAlterConfigsResponse")


# -- cluster and log directories -------------------------------------------------------------
@register(DESCRIBE_CLUSTER, 0, 1)
async def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    b = ctx.broker
    broker = make(mod.DescribeClusterBroker, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
    operations = -2147483648  # the schema's "not asked"; asked, what the caller may do (0 without Describe), as Kafka
    if request.include_cluster_authorized_operations:
        from klog.server.metadata import cluster_operations

        operations = await ctx.run_blocking(cluster_operations, ctx)
    return make(mod.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=E.none, error_message=None,
                endpoint_type=1, cluster_id=b.cluster_id, controller_id=b.node_id, brokers=(broker,),
                cluster_authorized_operations=operations)


def _log_dirs(ctx: RequestContext, mod: Any, wanted: dict[str, set[int] | None] | None) -> list:
    from klog.broker.dirs import replica_log_bytes

    store = ctx.store
    topics = store.list_topics()
    out = []
    for d in store.log_dir_ids():
        path = store.data_dir.log_dir_path(d)
        per_topic = []
        for meta in topics:
            if wanted is not None and meta.name not in wanted:
                continue
            only = wanted.get(meta.name) if wanted is not None else None
            parts = []
            for i, pm in enumerate(meta.partitions):
                if d not in pm.replicas or (only and i not in only):
                    continue
                size = replica_log_bytes(store, meta.name, i, d)
                try:
                    part = ctx.server.appender.partition(meta.name, i)
                    lag = 0 if d in pm.isr else max(0, part.high_watermark())
                except (KlogError, OSError):
                    lag = -1
                # a move recorded and not settled (klog.broker.replication.move_replica): its new
                # replica is Kafka's future replica
                future = pm.move is not None and pm.move[1] == d and pm.move[0] in pm.replicas
                parts.append(make(mod.DescribeLogDirsPartition, partition_index=i, partition_size=size,
                                  offset_lag=lag, is_future_key=future))
            if parts:
                per_topic.append(make(mod.DescribeLogDirsTopic, name=meta.name, partitions=tuple(parts)))
        try:
            usage = shutil.disk_usage(path)
            total, usable, err = usage.total, usage.free, E.none
        except OSError:
            total, usable, err = -1, -1, E.kafka_storage_error
        out.append(make(mod.DescribeLogDirsResult, error_code=err, log_dir=path, topics=tuple(per_topic),
                        total_bytes=total, usable_bytes=usable))
    return out


@register(DESCRIBE_LOG_DIRS, 0, 4)
async def describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if not ctx.authorize("DESCRIBE", "CLUSTER", "kafka-cluster"):
        # Kafka's rule: log directories (paths, sizes, every topic) are for principals with Describe on
        # the cluster; v3+ say so, older versions get an empty list
        ctx.log.info("%s (client %s): %s may not describe log dirs (Describe on the cluster)", ctx.client_host,
                     ctx.client_id, ctx.principal)
        return make(mod.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=E.cluster_authorization_failed,
                    results=())
    wanted = None
    if request.topics is not None:
        wanted = {str(t.topic): set(map(int, t.partitions)) or None for t in request.topics}
    results = await ctx.run_blocking(_log_dirs, ctx, mod, wanted)
    return make(mod.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=E.none, results=tuple(results))


# -- offsets ---------------------------------------------------------------------------------
def _epoch_end(ctx: RequestContext, topic: str, index: int, epoch: int,
               client_epoch: Any = None) -> tuple[E, int, int]:
    """Kafka's OffsetsForLeaderEpoch: the largest epoch <= `epoch` and where it ends (the start of
    the next epoch, or the log end for the current one), from the partition's epoch history;
    `client_epoch` (current_leader_epoch) fenced as Fetch does."""
    if not ctx.authorize("DESCRIBE", "TOPIC", topic):
        return E.topic_authorization_failed, -1, -1
    try:
        meta = ctx.store.topics.get(topic)
        if not 0 <= index < len(meta.partitions):
            raise UnknownPartitionError(f"no partition {index}")
        pm = meta.partitions[index]
        part = ctx.server.appender.partition(topic, index)
        fenced = leader_epoch_error(ctx.store, topic, index, client_epoch)
        if fenced != E.none:
            return fenced, -1, -1
        end = part.high_watermark()
    except KlogError as e:
        return error_of(e), -1, -1
    history = sorted((int(e), int(s)) for e, s in pm.epochs) or [(0, 0)]
    found = [(e, s) for e, s in history if e <= epoch]
    if not found:
        return E.none, -1, -1
    e, _ = found[-1]
    later = [s for e2, s in history if e2 > e]
    return E.none, e, min(later[0], end) if later else end


@register(OFFSET_FOR_LEADER_EPOCH, 0, 4)
async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            err, epoch, end = await ctx.run_blocking(_epoch_end, ctx, str(t.topic), int(p.partition),
                                                     int(p.leader_epoch), getattr(p, "current_leader_epoch", None))
            parts.append(make(mod.EpochEndOffset, error_code=err, partition=p.partition, leader_epoch=epoch,
                              end_offset=end))
        topics.append(make(mod.OffsetForLeaderTopicResult, topic=t.topic, partitions=tuple(parts)))
    return make(mod.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _delete_records(ctx: RequestContext, topic: str, index: int, offset: int) -> tuple[E, int]:
    store = ctx.store
    if not ctx.authorize("DELETE", "TOPIC", topic):
        return E.topic_authorization_failed, -1
    try:
        part = ctx.server.appender.partition(topic, index)
        target = part.high_watermark() if offset == -1 else offset
        with ctx.server.appender.lock_for(topic, index):
            store.delete_records(topic, before_offset=target, partitions=[index])
        return E.none, part.log_start_offset()
    except KlogError as e:
        return error_of(e), -1


@register(DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            # a write to the partition: its turn among the appends, in the append threads (a partition
            # whose append is stalled holds up this request, not a thread Metadata and Fetch need)
            async with ctx.server.append_slot(str(t.name), int(p.partition_index)):
                err, low = await ctx.server.run_append(_delete_records, ctx, str(t.name), int(p.partition_index),
                                                       int(p.offset))
            parts.append(make(mod.DeleteRecordsPartitionResult, partition_index=p.partition_index, low_watermark=low,
                              error_code=err))
        topics.append(make(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts)))
    return make(mod.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))

"""Where partitions live, as a one-node Kafka cluster answers: ElectLeaders (kafka-leader-election),
ListPartitionReassignments and AlterPartitionReassignments (kafka-reassign-partitions).

This node leads every partition and is its only replica (Metadata says so), so its preferred leader
always leads: an election is never needed, no reassignment is ever in progress, and the only
reassignment a client may ask for is to this node, which changes nothing. The answers and their
texts are a KRaft controller's (Kafka 3.9's ReplicationControlManager), so tools report what they
report against one broker. Each needs Kafka's operation on the cluster when ACLs are on.
"""

from __future__ import annotations

from typing import Any

from klog.protocol.framing import printable
from klog.protocol.kafka import NO_THROTTLE, E, make, response_for
from klog.server.context import RequestContext
from klog.server.dispatch import register

ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 43, 45, 46
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types (v0 has none: preferred)
CLUSTER = "kafka-cluster"
ELECTION_NOT_NEEDED = "Leader election not needed for topic partition."  # Kafka's text of the error


def _partition_count(ctx: RequestContext, topic: str) -> int | None:
    meta = ctx.store.topics.find(topic)
    return None if meta is None else len(meta.partitions)


# -- ElectLeaders ---------------------------------------------------------------------------------------
def _elect_leaders(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    election = int(getattr(request, "election_type", PREFERRED))
    if not ctx.authorize("ALTER", "CLUSTER", CLUSTER):
        return _election_refused(mod, request, E.cluster_authorization_failed,
                                 f"{ctx.principal} may not alter the cluster")
    if request.topic_partitions is not None and not request.topic_partitions:
        # Kafka's controller answers an empty list before it reads the election type: nothing to do
        return make(mod.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=E.none, replica_election_results=())
    if election not in (PREFERRED, UNCLEAN):
        return _election_refused(mod, request, E.invalid_request, f"Unknown election type {election}")
    results = []
    if request.topic_partitions is None:  # every partition: those already led as wanted are left out (all)
        results = [make(mod.ReplicaElectionResult, topic=t.name, partition_result=())
                   for t in ctx.store.list_topics()]
    else:
        for t in request.topic_partitions:
            count = _partition_count(ctx, str(t.topic))
            parts = []
            for p in t.partitions:
                if count is None:
                    error, text = E.unknown_topic_or_partition, f"No such topic as {t.topic}"
                elif not 0 <= p < count:
                    error, text = E.unknown_topic_or_partition, f"No such partition as {t.topic}-{p}"
                else:
                    error, text = E.election_not_needed, ELECTION_NOT_NEEDED
                parts.append(make(mod.PartitionResult, partition_id=p, error_code=error, error_message=text))
            results.append(make(mod.ReplicaElectionResult, topic=t.topic, partition_result=tuple(parts)))
    return make(mod.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=E.none,
                replica_election_results=tuple(results))


def _election_refused(mod: Any, request: Any, error: E, text: str) -> Any:
    """Kafka's ElectLeadersRequest.getErrorResponse: the error at the top and on every partition named."""
    results = tuple(make(mod.ReplicaElectionResult, topic=t.topic, partition_result=tuple(
        make(mod.PartitionResult, partition_id=p, error_code=error, error_message=text) for p in t.partitions))
        for t in request.topic_partitions or ())
    return make(mod.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=error,
                replica_election_results=results)


@register(ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run_blocking(_elect_leaders, ctx, request)


# -- ListPartitionReassignments ------------------------------------------------------------------------
@register(LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if not ctx.authorize("DESCRIBE", "CLUSTER", CLUSTER):
        return make(mod.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                    error_code=E.cluster_authorization_failed,
                    error_message=f"{ctx.principal} may not describe the cluster", topics=())
    return make(mod.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=E.none,
                error_message=None, topics=())


# -- AlterPartitionReassignments -----------------------------------------------------------------------
def _reassignment_error(ctx: RequestContext, topic: str, count: int | None, index: int,
                        replicas: Any) -> tuple[E, str | None]:
    """Kafka's checks of one partition's target (alterPartitionReassignment, validateManualPartitionAssignment)."""
    if count is None:
        return E.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
    if not 0 <= index < count:
        return E.unknown_topic_or_partition, f"Unable to find partition {topic}:{index}."
    if replicas is None:  # a cancellation: there is never one to cancel
        return E.no_reassignment_in_progress, "No partition reassignment is in progress."
    if not replicas:
        return E.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker in sorted(int(r) for r in replicas):
        if broker != ctx.broker.node_id:
            return E.invalid_replica_assignment, f"The manual partition assignment includes broker {broker}, but " \
                "no such broker is registered."
        if broker == previous:
            return E.invalid_replica_assignment, f"The manual partition assignment includes the broker {broker} " \
                "more than once."
        previous = broker
    return E.none, None  # to this node alone: where it already is


def _alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    allowed = ctx.authorize("ALTER", "CLUSTER", CLUSTER)
    refusal = None if allowed else f"{ctx.principal} may not alter the cluster"
    topics = []
    for t in request.topics:
        count = _partition_count(ctx, str(t.name)) if allowed else None
        parts = []
        for p in t.partitions:
            error, text = (E.cluster_authorization_failed, refusal) if not allowed else \
                _reassignment_error(ctx, str(t.name), count, int(p.partition_index), p.replicas)
            parts.append(make(mod.ReassignablePartitionResponse, partition_index=p.partition_index,
                              error_code=error, error_message=text))
        topics.append(make(mod.ReassignableTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(mod.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                error_code=E.none if allowed else E.cluster_authorization_failed, error_message=refusal,
                responses=tuple(topics))


@register(ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run_blocking(_alter_partition_reassignments, ctx, request)


# -- UnregisterBroker ---------------------------------------------------------------------------------
UNREGISTER_BROKER = 64


@register(UNREGISTER_BROKER, 0, 0)
async def unregister_broker(ctx: RequestContext, request: Any) -> Any:
    """`kafka-cluster unregister`: a KRaft broker forwards it to the controller, which needs ALTER on the
    cluster and answers BROKER_ID_NOT_REGISTERED for an id it has no registration of (every id but
    this node's), without a message (ControllerApis sets only the code). For this node's own id Kafka's
    controller removes the registration and answers no error; klog's one node is broker and controller
    at once and stays registered (as a Kafka broker registers again when it restarts): the same answer,
    nothing changed, one log line."""
    mod = response_for(request)
    if not ctx.authorize("ALTER", "CLUSTER", CLUSTER):
        error = E.cluster_authorization_failed
    elif int(request.broker_id) != ctx.broker.node_id:
        error = E.broker_id_not_registered
    else:
        error = E.none
        ctx.log.warning("%s (client %s): %s asked to unregister this node (broker %d): answered as Kafka's controller "
                        "does (no error); klog's only node stays registered", ctx.client_host,
                        printable(ctx.client_id), ctx.principal, ctx.broker.node_id)
    return make(mod.UnregisterBrokerResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=None)


# -- AlterReplicaLogDirs ---------------------------------------------------------------------------------
ALTER_REPLICA_LOG_DIRS = 34
FILE_NAME_MAX = 255  # Kafka's future log folder "<topic>-<partition>.<32 hex>-future" must fit a file name


def _log_dir_ids_by_path(ctx: RequestContext) -> dict[str, int]:
    """This node's log directories by the path DescribeLogDirs names (normalized: a trailing slash is the same)."""
    import os

    store = ctx.store
    return {os.path.normpath(store.data_dir.log_dir_path(d)): d for d in store.log_dir_ids()}


def _source_replica(meta: Any) -> int:
    """The replica a move to another log directory takes: klog keeps a partition's replicas in distinct
    log directories of this one node, where Kafka's broker holds one; with several, an out-of-sync one
    first (what an operator moves off a failing disk), else the last follower, so the leader keeps
    serving; the leader only when it is the partition's only replica."""
    followers = [r for r in meta.replicas if r != meta.leader]
    lagging = [r for r in followers if r not in meta.isr]
    return lagging[0] if lagging else followers[-1] if followers else meta.leader


def _move_to_dir(ctx: RequestContext, topic: str, index: int, path: str, dirs: dict[str, int]) -> E:
    """Kafka's ReplicaManager.alterReplicaLogDirs for one partition, its move made as `klog topics
    reassign` makes it (klog.broker.replication.move_replica: the new replica caught up, then the old
    one dropped, under the partition's lock)."""
    import os

    from klog.broker.replication import dir_health, move_replica, settle_move
    from klog.errors import KlogError, StorageError, UnknownPartitionError, UnknownTopicError
    from klog.store import health

    if len(f"{topic}-{index}") + 1 + 32 + len("-future") > FILE_NAME_MAX:
        return E.invalid_topic_exception  # ("The topic name is too long.")
    target = dirs.get(os.path.normpath(path))
    if target is None:
        return E.log_dir_not_found  # ("Log dir ... is not found in the config.")
    if dir_health(ctx.store, target) != health.OK:
        return E.kafka_storage_error  # ("Log directory ... is offline")
    found = ctx.store.topics.find(topic)
    if found is None or not 0 <= index < len(found.partitions):
        return E.unknown_topic_or_partition
    source = -1
    try:
        # the replicas read under the partition's lock, which the move holds: a move of it by another
        # connection (or `klog topics reassign`) made meanwhile is seen, not undone nor refused
        with ctx.store.partition(topic, index).lock:
            found = ctx.store.topics.find(topic)
            if found is None or not 0 <= index < len(found.partitions):
                return E.unknown_topic_or_partition
            # a move of it cut short before is finished or rolled back first (its new replica would
            # otherwise count as "already there", or be the out-of-sync replica chosen to move)
            meta = settle_move(ctx.store, topic, index, warn=lambda m: ctx.log.info("%s", m))
            if target in meta.replicas:
                return E.none  # already there
            source = _source_replica(meta)
            move_replica(ctx.store, topic, index, source, target, warn=lambda m: ctx.log.info("%s", m))
    except (UnknownTopicError, UnknownPartitionError):
        return E.unknown_topic_or_partition
    except (StorageError, OSError, KlogError) as e:
        ctx.log.warning("%s (client %s): cannot move %s-%d from log directory %d to %d: %s", ctx.client_host,
                        printable(ctx.client_id), topic, index, source, target, e)
        return E.kafka_storage_error if isinstance(e, StorageError | OSError) else E.unknown_server_error
    ctx.log.info("%s (client %s): moved %s-%d from log directory %d to %d", ctx.client_host,
                 printable(ctx.client_id), topic, index, source, target)
    return E.none


def _alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if not ctx.authorize("ALTER", "CLUSTER", CLUSTER):  # Kafka's getErrorResponse: each entry as it came
        refused = E.cluster_authorization_failed
        return make(mod.AlterReplicaLogDirsResponse, throttle_time=NO_THROTTLE, results=tuple(
            make(mod.AlterReplicaLogDirTopicResult, topic_name=t.name, partitions=tuple(
                make(mod.AlterReplicaLogDirPartitionResult, partition_index=p, error_code=refused)
                for p in t.partitions)) for d in request.dirs for t in d.topics))
    wanted: dict[tuple[str, int], str] = {}  # Kafka's partitionDirs: a partition named twice goes to the last path
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[(str(t.name), int(p))] = str(d.path)
    dirs = _log_dir_ids_by_path(ctx)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), path in wanted.items():
        error = _move_to_dir(ctx, topic, index, path, dirs)
        by_topic.setdefault(topic, []).append(
            make(mod.AlterReplicaLogDirPartitionResult, partition_index=index, error_code=error))
    return make(mod.AlterReplicaLogDirsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(mod.AlterReplicaLogDirTopicResult, topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))


@register(ALTER_REPLICA_LOG_DIRS, 0, 2)
async def alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """`kafka-reassign-partitions --execute` with log_dirs in its plan, kafka-python's
    alter_replica_log_dirs: moves run in a thread (a move copies the partition), not on the
    event loop; Kafka answers at once and moves in the background, klog answers once moved. Moves
    run one at a time in the server's move thread: a long one holds none of the threads other clients'
    requests need."""
    from klog.server.hop import in_thread

    pool = getattr(ctx.server, "move_executor", None) or ctx.executor
    return await in_thread(pool, _alter_replica_log_dirs, ctx, request)

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

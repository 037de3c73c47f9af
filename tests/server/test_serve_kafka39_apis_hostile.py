"""The Kafka 3.9 APIs of `klog serve` (DescribeTopicPartitions, ElectLeaders, List/Alter
PartitionReassignments) given what a hostile or careless client sends: each answered with the code
Kafka 3.9's handlers give (DescribeTopicPartitionsRequestHandler, ReplicationControlManager,
QuorumController), and the connection, like every other, served after it."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.alter_partition_reassignments.v0.request import ReassignablePartition, ReassignableTopic
from kio.schema.describe_topic_partitions.v0.request import Cursor, TopicRequest
from kio.schema.elect_leaders.v2.request import TopicPartitions
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import i32Timedelta

from tests.serve_helpers import RawClient

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))
DESCRIBE_TOPIC_PARTITIONS, ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, METADATA = 75, 43, 45, 46, 3


@pytest.fixture
def raw(store, kafka_server):
    store.create_topic("t2", 2)
    store.create_topic("t5", 5)
    with RawClient(kafka_server.port) as client:
        yield client
        # the same connection is still served
        assert [b.node_id for b in client.send(METADATA, 1, topics=None).brokers] == [kafka_server.node_id]


def _describe(raw: RawClient, names: list[str], limit: int = 2000, cursor: Cursor | None = None) -> tuple:
    answer = raw.send(DESCRIBE_TOPIC_PARTITIONS, 0, topics=tuple(TopicRequest(name=n) for n in names),
                      response_partition_limit=limit, cursor=cursor)
    topics = [(t.name, int(t.error_code), [p.partition_index for p in t.partitions]) for t in answer.topics]
    cursor = answer.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, cursor.partition_index)


@pytest.mark.parametrize("limit", [0, -1, -(2**31)])
def test_a_partition_limit_below_one_is_one(raw, limit):
    """Kafka: max(min(max.request.partition.size.limit, limit), 1)."""
    assert _describe(raw, ["t5"], limit) == ([("t5", 0, [0])], ("t5", 1))


def test_a_huge_partition_limit_is_the_brokers_2000(raw, store):
    store.create_topic("big", 2100)
    topics, cursor = _describe(raw, ["big", "t2"], 2**31 - 1)
    assert [(name, len(parts)) for name, _, parts in topics] == [("big", 2000)] and cursor == ("big", 2000)


def test_cursors_naming_what_is_not_there(raw):
    """A cursor's topic must be among those named, its partition not negative (INVALID_REQUEST on
    every topic named); a partition past the topic's last is an empty answer; with no topics named
    the cursor's topic need not exist (the answer starts at the next name)."""
    assert _describe(raw, ["t2", "t2"], 10, Cursor(topic_name="zz", partition_index=0)) == (
        [("t2", E.invalid_request, []), ("t2", E.invalid_request, [])], None)
    assert _describe(raw, ["t5"], 10, Cursor(topic_name="t5", partition_index=-1)) == (
        [("t5", E.invalid_request, [])], None)
    assert _describe(raw, ["t5"], 10, Cursor(topic_name="t5", partition_index=2**31 - 1)) == ([("t5", 0, [])], None)
    assert _describe(raw, [], 10, Cursor(topic_name="t3", partition_index=7)) == ([("t5", 0, [0, 1, 2, 3, 4])], None)


def test_duplicate_invalid_and_many_names(raw):
    assert _describe(raw, ["t5", "t5", "t2"], 3) == ([("t2", 0, [0, 1]), ("t5", 0, [0])], ("t5", 1))
    bad = ["", ".", "..", "a/b", "x" * 250, "../t2", "é"]
    assert _describe(raw, bad)[0] == [(n, E.invalid_topic_exception, []) for n in sorted(bad)]
    topics, cursor = _describe(raw, [f"n{i:05d}" for i in range(10_000)], 1)
    # unknown topics take none of the limit: all 10,000 answered, no cursor
    assert len(topics) == 10_000 and {e for _, e, _ in topics} == {E.unknown_topic_or_partition} and cursor is None


def test_elect_leaders_of_an_empty_list_is_nothing_to_do_whatever_the_type(raw):
    """Kafka's controller answers an empty list (not null) at once, before reading the election type;
    an unknown type otherwise is INVALID_REQUEST on every partition named, with Kafka's text."""
    empty = raw.send(ELECT_LEADERS, 2, election_type=7, topic_partitions=(), timeout=TIMEOUT)
    assert empty.error_code == E.none and empty.replica_election_results == ()
    bad = raw.send(ELECT_LEADERS, 2, election_type=7, timeout=TIMEOUT,
                   topic_partitions=(TopicPartitions(topic="t2", partitions=(0, -1)),))
    assert bad.error_code == E.invalid_request
    assert [(p.partition_id, p.error_code, p.error_message) for r in bad.replica_election_results
            for p in r.partition_result] == [(0, E.invalid_request, "Unknown election type 7"),
                                             (-1, E.invalid_request, "Unknown election type 7")]


@pytest.mark.slow
def test_elect_leaders_of_every_partition_answers_one_entry_per_topic(raw, store):
    """A null list on a store of many partitions: one empty entry per topic (every partition is led
    by its preferred leader), whatever the partitions; v0 (no election type) the same."""
    for i in range(40):
        store.create_topic(f"many-{i:02d}", 50)
    for version in (0, 1, 2):
        answer = raw.send(ELECT_LEADERS, version, election_type=1, topic_partitions=None, timeout=TIMEOUT)
        assert len(answer.replica_election_results) == 42
        assert all(r.partition_result == () for r in answer.replica_election_results)


def test_reassignments_of_what_cannot_be(raw, kafka_server):
    node = kafka_server.node_id
    partitions = (ReassignablePartition(partition_index=0, replicas=()),
                  ReassignablePartition(partition_index=0, replicas=(node, node)),
                  ReassignablePartition(partition_index=0, replicas=(node, node + 1)),
                  ReassignablePartition(partition_index=1, replicas=(-1,)),
                  ReassignablePartition(partition_index=-1, replicas=(node,)),
                  ReassignablePartition(partition_index=2**31 - 1, replicas=None),
                  ReassignablePartition(partition_index=1, replicas=None),
                  ReassignablePartition(partition_index=1, replicas=(node,)))
    answer = raw.send(ALTER_REASSIGNMENTS, 0, timeout=TIMEOUT, topics=(
        ReassignableTopic(name="t2", partitions=partitions), ReassignableTopic(name="nope", partitions=partitions[:1])))
    assert answer.error_code == E.none
    got = [[(p.partition_index, p.error_code) for p in t.partitions] for t in answer.responses]
    assert got == [[(0, E.invalid_replica_assignment), (0, E.invalid_replica_assignment),
                    (0, E.invalid_replica_assignment), (1, E.invalid_replica_assignment),
                    (-1, E.unknown_topic_or_partition), (2**31 - 1, E.unknown_topic_or_partition),
                    (1, E.no_reassignment_in_progress), (1, E.none)], [(0, E.unknown_topic_or_partition)]]
    texts = [p.error_message for p in answer.responses[0].partitions]
    assert texts[:3] == ["The manual partition assignment includes an empty replica list.",
                         f"The manual partition assignment includes the broker {node} more than once.",
                         f"The manual partition assignment includes broker {node + 1}, but no such broker is "
                         "registered."]
    listed = raw.send(LIST_REASSIGNMENTS, 0, timeout=TIMEOUT, topics=None)
    assert listed.error_code == E.none and listed.topics == ()

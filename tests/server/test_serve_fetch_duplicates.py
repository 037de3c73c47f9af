"""A Fetch naming one partition twice. Kafka's FetchRequest reads its partitions into a map (a
LinkedHashMap keyed by topic and partition: FetchRequest.fetchData), so the partition is read
once, as the last entry naming it asks (its fetch offset, its max bytes), in the place of the
first, and answered once. klog serve read and answered it once per entry: two answers for one
partition, which a client matching answers to what it asked cannot place, and the partition's
bytes sent twice against the response's max_bytes. Full fetches (v4, v12 without a session and
creating one, v13 by topic id) and a session's incremental fetch, answers read raw."""

from __future__ import annotations

import datetime

import pytest
from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from klog.protocol.kafka import make
from klog.protocol.schemas import payload_module, response_schema
from tests.serve_helpers import RawClient, batch, produce, raw_answer
from tests.server.test_serve_fetch_sessions import fetch_sessions_uuid


def _fetch(client: RawClient, version: int, topics: list[tuple[object, list[tuple[int, int]]]], session_id: int = 0,
           epoch: int = -1):
    """A Fetch of `topics` as written, repeats and all: [(topic name, or id from v13, [(partition,
    fetch offset)])]; its answer decoded from the raw bytes."""
    mod = payload_module(1, version, EntityType.request)
    key = "topic_id" if version >= 13 else "topic"
    fetch_topics = tuple(make(mod.FetchTopic, **{key: t}, partitions=tuple(
        make(mod.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
             log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in parts)) for t, parts in topics)
    body = raw_answer(client, 1, version, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)),
                      min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=session_id,
                      session_epoch=epoch, topics=fetch_topics, forgotten_topics_data=(), rack_id="")
    answer, _ = entity_reader(response_schema(1, version))(body, 0)
    return answer


def _answered(answer) -> list[tuple]:  # noqa: ANN001 - a FetchResponse
    """[(topic, partition, error, first offset of its records or None)], in the answer's order."""
    from klog.store.codec import read_header

    out = []
    for t in answer.responses:
        for p in t.partitions:
            records = bytes(p.records or b"")
            out.append((getattr(t, "topic", None) or t.topic_id, int(p.partition_index), int(p.error_code),
                        read_header(records, 0).base_offset if records else None))
    return out


@pytest.fixture
def two_topics(kafka_server, store):
    """Topics d (2 partitions) and e, records at offsets 0-3 of d-0, 0-1 of d-1 and e-0."""
    store.create_topic("d", partitions=2)
    store.create_topic("e")
    client = RawClient(kafka_server.port)
    for values, part, topic in (([b"a", b"b"], 0, "d"), ([b"c", b"d"], 0, "d"), ([b"x", b"y"], 1, "d"),
                                ([b"e", b"f"], 0, "e")):
        assert produce(client, topic, part, batch(values))[0] == 0
    yield client
    client.close()


@pytest.mark.parametrize(("version", "epoch"), [(4, -1), (12, -1), (12, 0)])
def test_a_full_fetch_answers_a_partition_named_twice_once_as_its_last_entry_asks(two_topics, version, epoch):
    # d-0 at 0, then e-0, then d again: d-0 at 2 (this one wins, in the first one's place) and d-1
    answer = _fetch(two_topics, version, [("d", [(0, 0)]), ("e", [(0, 0)]), ("d", [(0, 2), (1, 0)])], epoch=epoch)
    assert _answered(answer) == [("d", 0, 0, 2), ("e", 0, 0, 0), ("d", 1, 0, 0)]
    # twice within one topic's entry, the partitions after it unmoved
    answer = _fetch(two_topics, version, [("d", [(0, 2), (1, 0), (0, 0)])], epoch=epoch)
    assert _answered(answer) == [("d", 0, 0, 0), ("d", 1, 0, 0)]


def test_a_full_fetch_by_topic_id_answers_a_partition_named_twice_once(two_topics, store):
    d = fetch_sessions_uuid(store, "d")
    answer = _fetch(two_topics, 13, [(d, [(0, 0)]), (d, [(1, 0), (0, 2)])])
    assert _answered(answer) == [(d, 0, 0, 2), (d, 1, 0, 0)]


def test_a_session_made_by_a_fetch_naming_a_partition_twice_holds_it_once(two_topics):
    full = _fetch(two_topics, 12, [("d", [(0, 0), (0, 2)])], epoch=0)
    assert full.session_id > 0 and _answered(full) == [("d", 0, 0, 2)]
    # the session holds d-0 once, at the offset the last entry asked
    assert _answered(_fetch(two_topics, 12, [], session_id=full.session_id, epoch=1)) == [("d", 0, 0, 2)]
    # an incremental fetch naming it twice: once, as its last entry asks
    again = _fetch(two_topics, 12, [("d", [(0, 4), (0, 0)])], session_id=full.session_id, epoch=2)
    assert _answered(again) == [("d", 0, 0, 0)]

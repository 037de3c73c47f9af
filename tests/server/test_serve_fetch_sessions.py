"""Incremental fetch sessions (KIP-227) as Kafka serves them: a full Fetch with epoch 0 is answered a
session id; the session's later Fetches name only what changed and are answered only the partitions
with something to say (records, a new high watermark or log start, an error); Kafka's session
errors (70, 71, 106), forgotten topics, closing a session, long polling on every partition of the
session, ACLs checked on every Fetch; kafka-python (sessions on by default) reads 200 partitions
incrementally; librdkafka (sessionless) is unaffected; the cache's bounds and eviction rules."""

from __future__ import annotations

import datetime
import subprocess
import threading
import time

import pytest

from klog.protocol.schemas import payload_module
from klog.server import fetch as fetch_module
from klog.server import fetch_sessions
from klog.server.fetch_sessions import CachedPartition, FetchSessionCache
from klog.store import topic_read
from tests.serve_helpers import RawClient, batch, produce, record_fetch_ways

NOT_FOUND, BAD_EPOCH, TOPIC_ID_ERROR = 70, 71, 106
AUTHORIZATION_FAILED = 29


def _fetch(client: RawClient, session_id: int, epoch: int, parts: dict | None = None, forgotten: dict | None = None,
           version: int = 12, max_wait_ms: int = 0, min_bytes: int = 1):
    """A raw Fetch: `parts` {(topic name, or id from v13, partition): fetch offset}, `forgotten`
    {topic: [partitions]}."""
    from kio.static.constants import EntityType
    from kio.static.primitive import i32Timedelta

    mod = payload_module(1, version, EntityType.request)
    by_id = version >= 13
    topics: dict = {}
    for (topic, index), offset in (parts or {}).items():
        topics.setdefault(topic, []).append(mod.FetchPartition(
            partition=index, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20))
    fetch_topics = tuple(mod.FetchTopic(**{"topic_id" if by_id else "topic": t}, partitions=tuple(ps))
                         for t, ps in topics.items())
    forgot = tuple(mod.ForgottenTopic(**{"topic_id" if by_id else "topic": t}, partitions=tuple(ps))
                   for t, ps in (forgotten or {}).items())
    wait = i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms))
    return client.send(1, version, replica_id=-1, max_wait=wait, min_bytes=min_bytes, max_bytes=1 << 20,
                       isolation_level=0, session_id=session_id,
                       session_epoch=epoch, topics=fetch_topics, forgotten_topics_data=forgot, rack_id="")


def _answered(answer) -> dict:  # noqa: ANN001 - a FetchResponse
    """{(topic, partition): (error code, high watermark, record bytes)} of an answer."""
    return {(getattr(t, "topic", None) or t.topic_id, int(p.partition_index)):
            (int(p.error_code), int(p.high_watermark), len(p.records or b""))
            for t in answer.responses for p in t.partitions}


def test_a_session_answers_only_what_changed_and_forgets_what_it_is_told(kafka_server, store):
    store.create_topic("s", partitions=3)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "s", 0, batch([b"a", b"b"]))[0] == 0
        full = _fetch(client, 0, 0, {("s", 0): 0, ("s", 1): 0, ("s", 2): 0})
        sid = full.session_id
        assert full.error_code == 0 and sid > 0  # a session, and every partition answered
        assert _answered(full) == {("s", 0): (0, 2, _answered(full)[("s", 0)][2]), ("s", 1): (0, 0, 0),
                                   ("s", 2): (0, 0, 0)}
        assert _answered(full)[("s", 0)][2] > 0
        # epoch 1: p0's offset moves to its end; nothing else changed: nothing answered
        one = _fetch(client, sid, 1, {("s", 0): 2})
        assert (one.error_code, one.session_id, _answered(one)) == (0, sid, {})
        # a record on p1, which the request does not name: answered (records, a new high watermark)
        assert produce(client, "s", 1, batch([b"c"]))[0] == 0
        two = _fetch(client, sid, 2)
        assert set(_answered(two)) == {("s", 1)} and _answered(two)[("s", 1)][:2] == (0, 1)
        # p1 forgotten: a record on it and on p2, only p2 answered (p1's offset stays where it was)
        assert produce(client, "s", 1, batch([b"d"]))[0] == 0
        assert produce(client, "s", 2, batch([b"e"]))[0] == 0
        three = _fetch(client, sid, 3, {("s", 1): 1}, forgotten={"s": [1]})  # (named and forgotten: forgotten)
        assert set(_answered(three)) == {("s", 2)}
        # p1 added back at its end: answered once (its high watermark is news), then not
        four = _fetch(client, sid, 4, {("s", 1): 2, ("s", 2): 1})
        assert _answered(four) == {("s", 1): (0, 2, 0)}
        assert _answered(_fetch(client, sid, 5)) == {}
        # Kafka's session errors: each answered empty, session id 0; the session lives on
        for epoch, expected in ((5, BAD_EPOCH), (7, BAD_EPOCH)):
            bad = _fetch(client, sid, epoch)
            assert (bad.error_code, bad.session_id, _answered(bad)) == (expected, 0, {})
        unknown = _fetch(client, sid ^ 1, 1)
        assert (unknown.error_code, unknown.session_id) == (NOT_FOUND, 0)
        assert _fetch(client, sid, 6).error_code == 0
        # epoch -1 closes it: a full sessionless answer, then the session is gone
        closing = _fetch(client, sid, -1, {("s", 0): 2})
        assert (closing.error_code, closing.session_id, set(_answered(closing))) == (0, 0, {("s", 0)})
        assert _fetch(client, sid, 7).error_code == NOT_FOUND


def test_a_full_fetch_naming_a_session_replaces_it_and_an_emptied_session_closes(kafka_server, store):
    store.create_topic("r", partitions=2)
    with RawClient(kafka_server.port) as client:
        first = _fetch(client, 0, 0, {("r", 0): 0}).session_id
        second = _fetch(client, first, 0, {("r", 0): 0, ("r", 1): 0})
        assert second.session_id not in (0, first) and set(_answered(second)) == {("r", 0), ("r", 1)}
        assert _fetch(client, first, 1).error_code == NOT_FOUND
        # every partition forgotten: answered without a session (id 0), and the session is gone
        emptied = _fetch(client, second.session_id, 1, forgotten={"r": [0, 1]})
        assert (emptied.error_code, emptied.session_id, _answered(emptied)) == (0, 0, {})
        assert _fetch(client, second.session_id, 2).error_code == NOT_FOUND
        cache = fetch_sessions.cache_of(kafka_server)
        assert not cache.sessions and cache.partitions == 0 and not cache.held


def test_topic_id_sessions(kafka_server, store):
    store.create_topic("ids", partitions=2)
    topic_id = fetch_sessions_uuid(store, "ids")
    with RawClient(kafka_server.port) as client:
        full = _fetch(client, 0, 0, {(topic_id, 0): 0, (topic_id, 1): 0}, version=13)
        sid = full.session_id
        assert sid and set(_answered(full)) == {(topic_id, 0), (topic_id, 1)}
        # a session by ids, asked by a v12 (names) request: FETCH_SESSION_TOPIC_ID_ERROR; and the reverse
        wrong = _fetch(client, sid, 1, version=12)
        assert (wrong.error_code, wrong.session_id) == (TOPIC_ID_ERROR, 0)
        named = _fetch(client, 0, 0, {("ids", 0): 0}, version=12).session_id
        assert _fetch(client, named, 1, version=13).error_code == TOPIC_ID_ERROR
        assert produce(client, "ids", 1, batch([b"x"]))[0] == 0
        assert produce(client, "ids", 0, batch([b"y"]))[0] == 0
        inc = _fetch(client, sid, 1, forgotten={topic_id: [0]}, version=13)
        assert inc.error_code == 0 and set(_answered(inc)) == {(topic_id, 1)}
        assert _answered(inc)[(topic_id, 1)][2] > 0


def fetch_sessions_uuid(store, topic: str):  # noqa: ANN001, ANN201
    from klog.protocol.kafka import topic_uuid

    return topic_uuid(store.describe_topic(topic).topic_id)


def test_an_incremental_long_poll_wakes_for_any_partition_of_the_session(kafka_server, store):
    store.create_topic("lp", partitions=4)
    with RawClient(kafka_server.port) as client, RawClient(kafka_server.port) as writer:
        sid = _fetch(client, 0, 0, {("lp", p): 0 for p in range(4)}).session_id
        timer = threading.Timer(0.3, lambda: produce(writer, "lp", 3, batch([b"late"])))
        timer.start()
        try:
            started = time.monotonic()
            answer = _fetch(client, sid, 1, max_wait_ms=10_000)  # names no partition
            waited = time.monotonic() - started
        finally:
            timer.join(10)
        assert set(_answered(answer)) == {("lp", 3)} and _answered(answer)[("lp", 3)][2] > 0
        assert 0.2 < waited < 5
        # nothing new: the wait runs out and the answer is empty
        started = time.monotonic()
        assert _answered(_fetch(client, sid, 2, {("lp", 3): 1}, max_wait_ms=300)) == {}
        assert time.monotonic() - started >= 0.25


def test_acls_are_checked_on_every_fetch_of_a_session(kafka_server, store):
    from klog.meta.acls import AclsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    store.create_topic("open", partitions=1)
    store.create_topic("secret", partitions=1)
    with RawClient(kafka_server.port) as client:
        assert produce(client, "secret", 0, batch([b"hidden"]))[0] == 0
        sid = _fetch(client, 0, 0, {("open", 0): 0, ("secret", 0): 1}).session_id  # (allowed: no ACLs yet)
        assert sid
        AclsMeta(store.meta).add([AclBinding(ResourceType.TOPIC, "open", PatternType.LITERAL, "User:ANONYMOUS", "*",
                                             Operation.READ, Permission.ALLOW)])
        kafka_server.security.authorizer.invalidate()
        # the session's partition the client may no longer read: refused, and again next time (an error is
        # always answered); never its records, even from an offset the session holds
        for epoch in (1, 2):
            answer = _answered(_fetch(client, sid, epoch, {("secret", 0): 0} if epoch == 2 else None))
            assert answer == {("secret", 0): (AUTHORIZATION_FAILED, -1, 0)}, epoch


@pytest.mark.slow
def test_kafka_python_reads_200_partitions_through_one_incremental_session(kafka_server, store, monkeypatch):
    kafka = pytest.importorskip("kafka")
    partitions = 200
    store.create_topic("many", partitions=partitions)
    with store.producer() as producer:
        for p in range(partitions):
            for i in range(3):
                producer.send("many", value=b"%d-%d" % (p, i), partition=p)
    requests: list[tuple[int, int]] = []  # (epoch, partitions named) of each Fetch
    answers: list[int] = []  # partitions in each answer
    real_context, real_finish = fetch_module.new_context, fetch_sessions.Context.finish

    def new_context(cache, request, *args):  # noqa: ANN001, ANN202
        requests.append((int(request.session_epoch), fetch_sessions.named(request)))
        return real_context(cache, request, *args)

    def finish(self, found, now):  # noqa: ANN001, ANN202
        out = real_finish(self, found, now)
        answers.append(sum(len(t.partitions) for t in out[0]))
        return out

    monkeypatch.setattr(fetch_module, "new_context", new_context)
    monkeypatch.setattr(fetch_sessions.Context, "finish", finish)
    consumer = kafka.KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, auto_offset_reset="earliest",
                                   enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        assert consumer.config["enable_incremental_fetch_sessions"]
        consumer.assign([kafka.TopicPartition("many", p) for p in range(partitions)])
        got: list[tuple[int, int, bytes]] = []

        def poll_until(count: int) -> None:
            deadline = time.monotonic() + 25
            while len(got) < count and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    got.extend((r.partition, r.offset, r.value) for r in records)

        poll_until(partitions * 3)
        idle_from = len(requests)
        for _ in range(3):  # idle fetches: nothing named, nothing answered
            consumer.poll(timeout_ms=200)
        with store.producer() as producer:
            producer.send("many", value=b"199-3", partition=199)
        poll_until(partitions * 3 + 1)
    finally:
        consumer.close()
    assert sorted(got) == sorted([(p, i, b"%d-%d" % (p, i)) for p in range(partitions) for i in range(3)]
                                 + [(199, 3, b"199-3")])  # every record once
    # the full fetch (every partition whose position is known by then: all, unless the offset resets came
    # in parts), then incremental ones only
    assert requests[0][0] == 0 and answers[0] == requests[0][1] > 0
    assert len(requests) > 3 and all(epoch > 0 for epoch, _ in requests[1:]), requests
    idle = list(zip(requests[idle_from:], answers[idle_from:], strict=False))
    assert any(named == 0 and answered == 0 for (_, named), answered in idle), idle
    assert any(answered == 1 for answered in answers[idle_from:]), answers  # the late record: its partition alone
    cache = fetch_sessions.cache_of(kafka_server)
    assert len(cache.sessions) == 1 and cache.partitions == partitions


@pytest.mark.slow
def test_librdkafka_and_kcat_fetch_without_sessions(kafka_server, store):
    ck = pytest.importorskip("confluent_kafka")
    store.create_topic("plain", partitions=3)
    with store.producer() as producer:
        for i in range(30):
            producer.send("plain", value=b"v%d" % i, partition=i % 3)
    consumer = ck.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "g",
                            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    got = []
    try:
        consumer.subscribe(["plain"])
        deadline = time.monotonic() + 20
        while len(got) < 30 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(30))
    out = subprocess.run(["kcat", "-b", kafka_server.bootstrap, "-C", "-t", "plain", "-e", "-q"], capture_output=True,
                         timeout=30)
    assert sorted(out.stdout.split()) == sorted(b"v%d" % i for i in range(30))
    cache = fetch_sessions.cache_of(kafka_server)
    assert cache.stats["full"] == cache.stats["incremental"] == 0 and not cache.sessions


# -- the cache's bounds and Kafka's eviction rules ----------------------------------------------------
class _P:
    def __init__(self, index: int) -> None:
        self.partition, self.fetch_offset, self.partition_max_bytes = index, 0, 1


def _parts(n: int) -> tuple:
    """create()'s last two arguments: the size, and the maker of the session's partitions."""
    return n, lambda: {("t", i): CachedPartition(_P(i)) for i in range(n)}


def test_a_full_cache_evicts_as_kafka_does():
    cache = FetchSessionCache(slots=2, partitions_max=1000, client_share=1.0, eviction_s=120)
    a = cache.create(0, False, "c1", False, *_parts(5))
    b = cache.create(1, False, "c2", False, *_parts(3))
    assert a and b
    # full, nothing stale nor older than the eviction age: no room
    assert cache.create(60, False, "c3", False, *_parts(10)) == 0
    # both created over 120 s ago (as of their last use): the smallest goes for a larger session
    for sid in (a, b):
        cache.touch(cache.get(sid), 130)
    assert cache.create(131, False, "c4", False, *_parts(3)) == 0  # (not larger than either: Kafka's id 0 tie)
    c = cache.create(131, False, "c5", False, *_parts(4))
    assert c and cache.get(b) is None and cache.get(a) is not None
    # a session unused for 120 s goes first, whatever its size
    cache.touch(cache.get(c), 200)
    d = cache.create(251, False, "c6", False, *_parts(1))  # (a: last used at 130)
    assert d and cache.get(a) is None and cache.partitions == 5 and cache.stats["evictions"] == 2


def test_one_client_holds_at_most_its_share_and_never_evicts_another():
    cache = FetchSessionCache(slots=8, partitions_max=100, client_share=0.25, eviction_s=120)
    assert (cache.share_sessions, cache.share_partitions) == (2, 25)
    assert cache.create(0, False, "x", False, *_parts(26)) == 0  # more partitions than a share
    first = cache.create(0, False, "x", False, *_parts(20))
    assert first and cache.create(1, False, "x", False, *_parts(6)) == 0  # 26 in all
    assert cache.create(1, False, "x", False, *_parts(5))
    assert cache.create(2, False, "x", False, *_parts(1)) == 0  # a third session
    other = cache.create(2, False, "y", False, *_parts(25))  # another client: its own share
    assert other and cache.held == {"x": [2, 25], "y": [1, 25]}
    # its own session unused for the eviction age makes room for it, never another's
    assert cache.create(200, False, "x", False, *_parts(10)) and cache.get(first) is None and cache.get(other)
    # a session grown past its client's share by incremental fetches is dropped
    session = cache.get(other)
    session.parts.update({("u", i): CachedPartition(_P(i)) for i in range(1)})
    assert cache.over_bounds(session)


def test_a_session_past_its_clients_share_is_dropped_and_the_client_fetches_in_full(kafka_server, store):
    store.create_topic("big", partitions=4)
    cache = fetch_sessions.cache_of(kafka_server)
    cache.share_partitions = 3  # (the share of a cache of 12 partitions at the default quarter)
    with RawClient(kafka_server.port) as client:
        sid = _fetch(client, 0, 0, {("big", p): 0 for p in range(3)}).session_id
        assert sid and cache.held == {"User:ANONYMOUS at 127.0.0.1": [1, 3]}
        grown = _fetch(client, sid, 1, {("big", 3): 0})  # a fourth partition: past the share
        assert (grown.error_code, grown.session_id, _answered(grown)) == (NOT_FOUND, 0, {})
        assert not cache.sessions and not cache.held
        full = _fetch(client, 0, 0, {("big", p): 0 for p in range(4)})  # no session for it: answered in full
        assert (full.error_code, full.session_id, len(_answered(full))) == (0, 0, 4)


def test_a_privileged_session_evicts_a_young_unprivileged_one():
    cache = FetchSessionCache(slots=1, partitions_max=100, client_share=1.0, eviction_s=120)
    consumer = cache.create(0, False, "c", False, *_parts(5))
    assert cache.create(1, False, "d", False, *_parts(50)) == 0  # (too young for an unprivileged one)
    follower = cache.create(1, True, "f", False, *_parts(1))  # Kafka's rule; klog serve makes none privileged
    assert follower and cache.get(consumer) is None
    assert cache.create(2, True, "g", False, *_parts(50)) == 0  # (a young privileged session stays)


def test_a_session_keeps_no_name_a_topic_cannot_have(kafka_server, store):
    store.create_topic("fine", partitions=1)
    long_name = "x" * 30_000  # (what a request may carry: a cache of such names would grow with what clients write)
    with RawClient(kafka_server.port) as client:
        full = _fetch(client, 0, 0, {("fine", 0): 0, (long_name, 0): 0})
        assert full.session_id == 0 and _answered(full)[(long_name, 0)][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        sid = _fetch(client, 0, 0, {("fine", 0): 0}).session_id
        added = _fetch(client, sid, 1, {(long_name, 0): 0})
        assert (added.error_code, added.session_id) == (NOT_FOUND, 0)
        assert not fetch_sessions.cache_of(kafka_server).sessions


@pytest.mark.skipif(not topic_read.NOWAIT, reason="no preadv RWF_NOWAIT here: every Fetch takes the pool")
def test_a_small_session_is_answered_on_the_event_loop(kafka_server, store, monkeypatch):
    store.create_topic("small", partitions=2)
    where = record_fetch_ways(kafka_server, monkeypatch, one="one")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "small", 0, batch([b"a"]))[0] == 0
        assert produce(client, "small", 1, batch([b"b"]))[0] == 0
        _fetch(client, 0, -1, {("small", 0): 0, ("small", 1): 0})  # (the first touch opens the files: the pool's)
        two = _fetch(client, 0, 0, {("small", 0): 1, ("small", 1): 1}).session_id  # (at their ends)
        one = _fetch(client, 0, 0, {("small", 1): 1}).session_id
        where.clear()
        assert produce(client, "small", 0, batch([b"c"]))[0] == 0
        answer = _fetch(client, two, 1)  # the session's two partitions, read on the loop
        assert set(_answered(answer)) == {("small", 0)} and _answered(answer)[("small", 0)][2] > 0
        assert answer.session_id == two  # (one partition answered, its bytes read: encode_one's answer)
        assert produce(client, "small", 1, batch([b"d"]))[0] == 0
        answer = _fetch(client, one, 1, {("small", 1): 1})  # one partition: the one-partition way
        assert _answered(answer)[("small", 1)][:2] == (0, 2) and _answered(answer)[("small", 1)][2] > 0
        assert answer.session_id == one
        assert where == ["loop", "one"], where

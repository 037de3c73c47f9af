"""A hostile review of klog serve's incremental fetch sessions (KIP-227, klog/server/fetch_sessions.py):
what another client can do with a session id it did not make, how a session's Fetch costs with its
partitions in Kafka's moving order, how answers group topics, the epoch's wrap, and two
connections racing on one session."""

from __future__ import annotations

import socket
import time

import pytest

from klog.server import fetch_sessions
from tests.serve_helpers import RawClient, batch, produce
from tests.server.test_serve_fetch_sessions import NOT_FOUND, _answered, _fetch

B = "127.0.0.2"  # a second client address (Linux routes all of 127/8 to loopback)


class _From(RawClient):
    """A RawClient connecting from `source`: another client, as the server tells them apart."""

    def __init__(self, port: int, source: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        self.correlation = 0


def _second_address() -> None:
    with socket.socket() as s:
        try:
            s.bind((B, 0))
        except OSError as e:
            pytest.skip(f"cannot bind {B}: {e}")


def test_another_client_cannot_use_probe_nor_close_a_session_it_did_not_make(kafka_server, store):
    _second_address()
    store.create_topic("mine", partitions=2)
    with RawClient(kafka_server.port) as owner, _From(kafka_server.port, B) as other:
        assert produce(owner, "mine", 0, batch([b"private"]))[0] == 0
        sid = _fetch(owner, 0, 0, {("mine", 0): 1, ("mine", 1): 0}).session_id
        assert sid
        # the other client naming the id: as if it did not exist, whatever the epoch (no 71 that tells
        # it the id is live), and it reads nothing of the session (nor learns its topics' names)
        for epoch in (1, 2, 7):
            answer = _fetch(other, sid, epoch, {("mine", 0): 0} if epoch == 7 else None)
            assert (answer.error_code, answer.session_id, _answered(answer)) == (NOT_FOUND, 0, {}), epoch
        # a full fetch naming it does not close it (nor does epoch -1)
        assert _fetch(other, sid, 0, {("mine", 1): 0}).error_code == 0
        assert _fetch(other, sid, -1, {("mine", 1): 0}).error_code == 0
        # the owner's session is untouched: its epoch 1 is still the next one
        assert produce(owner, "mine", 1, batch([b"new"]))[0] == 0
        mine = _fetch(owner, sid, 1)
        assert (mine.error_code, mine.session_id, set(_answered(mine))) == (0, sid, {("mine", 1)})
        # and the owner still closes its own
        assert _fetch(owner, sid, -1, {("mine", 0): 1}).session_id == 0
        assert _fetch(owner, sid, 2).error_code == NOT_FOUND
    assert fetch_sessions.cache_of(kafka_server).get(sid) is None


def test_a_sessions_interleaved_topics_are_checked_once_and_answered_grouped_as_kafka_does(kafka_server, store,
                                                                                          monkeypatch):
    """A partition answered records moves to the end of its session (Kafka's order), so a session's
    topics interleave: each topic is still checked once per Fetch (not once per run of its partitions:
    one LMDB read each, ~60 us a run, measured 2-4x the cost of a 2,000-partition Fetch once shuffled),
    and the answer groups consecutive partitions of a topic into one entry, as Kafka's does."""
    from klog.store import topic_read

    monkeypatch.setattr(topic_read, "NOWAIT", False)  # (the thread pool's way, where topics are checked)
    store.create_topic("a", partitions=2)
    store.create_topic("b", partitions=1)
    appender = kafka_server.appender
    checked: list[str] = []
    real_check = appender.check_topic
    monkeypatch.setattr(appender, "check_topic", lambda topic: (checked.append(topic), real_check(topic))[1])
    with RawClient(kafka_server.port) as client:
        sid = _fetch(client, 0, 0, {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}).session_id
        assert produce(client, "a", 0, batch([b"x"]))[0] == 0
        one = _fetch(client, sid, 1)  # a-0 answered records: the session's order is now a-1, b-0, a-0
        assert set(_answered(one)) == {("a", 0)}
        assert [(k, p) for k, p in fetch_sessions.cache_of(kafka_server).get(sid).parts] == [("a", 1), ("b", 0),
                                                                                          ("a", 0)]
        assert produce(client, "a", 0, batch([b"y"]))[0] == 0
        assert produce(client, "a", 1, batch([b"z"]))[0] == 0
        checked.clear()
        two = _fetch(client, sid, 2, {("a", 0): 1})
        assert sorted(checked) == ["a", "b"]  # once per topic, though a's partitions are in two runs
        assert [(t.topic, [int(p.partition_index) for p in t.partitions]) for t in two.responses] == [("a", [1, 0])]
        assert all(len(p.records or b"") > 0 for t in two.responses for p in t.partitions)


def test_unknown_topic_ids_in_a_session_make_one_listing_of_topics_per_fetch(kafka_server, store, monkeypatch):
    """A session by topic ids holding ids no topic has: each is answered UNKNOWN_TOPIC_ID every time
    (as Kafka does), but finding so lists the store's topics once per Fetch, not once per id: a
    60-byte incremental Fetch of a session of 2,000 unknown ids cost ~0.5 s of the thread pool (and
    of the GIL every connection shares) with 100 topics, ~0.02 s now."""
    import uuid

    from klog.store import topic_read
    from tests.server.test_serve_fetch_sessions import fetch_sessions_uuid

    monkeypatch.setattr(topic_read, "NOWAIT", False)
    store.create_topic("real", partitions=1)
    real = fetch_sessions_uuid(store, "real")
    unknown = [uuid.uuid4() for _ in range(20)]
    topic_ids = kafka_server.topic_ids
    listed = []
    real_list = topic_ids._store.list_topics
    monkeypatch.setattr(topic_ids._store, "list_topics", lambda *a, **k: (listed.append(1), real_list(*a, **k))[1])
    with RawClient(kafka_server.port) as client:
        parts = {(real, 0): 0, **{(i, 0): 0 for i in unknown}}
        sid = _fetch(client, 0, 0, parts, version=13).session_id
        assert sid
        assert produce(client, "real", 0, batch([b"r"]))[0] == 0
        listed.clear()
        answer = _answered(_fetch(client, sid, 1, version=13))
        assert {k: v[0] for k, v in answer.items() if k != (real, 0)} == {(i, 0): 100 for i in unknown}
        assert answer[(real, 0)][:2] == (0, 1) and answer[(real, 0)][2] > 0
        assert len(listed) == 1


@pytest.mark.slow
@pytest.mark.parametrize("epoch", [-1, 0], ids=["sessionless", "session"])
def test_a_refused_partition_does_not_cut_the_long_poll_of_the_others(kafka_server, store, epoch):
    """As in Kafka (KafkaApis' "erroneous" partitions): a partition of a topic that does not exist
    (deleted under a consumer's assignment) or may not be read is answered its error, but the Fetch
    still waits max_wait_ms for its other partitions; before, it was answered at once, so a consumer
    whose session held such a partition asked again at once, forever (a busy loop on both sides)."""
    import threading
    import time

    store.create_topic("live", partitions=1)
    with RawClient(kafka_server.port) as client, RawClient(kafka_server.port) as writer:
        parts = {("live", 0): 0, ("gone", 0): 0}
        first = _fetch(client, 0, epoch, parts)
        assert _answered(first)[("gone", 0)][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        sid = first.session_id
        assert bool(sid) == (epoch == 0)
        started = time.monotonic()
        answer = _fetch(client, sid, 1, max_wait_ms=400) if sid else _fetch(client, 0, -1, parts, max_wait_ms=400)
        assert time.monotonic() - started >= 0.35  # waited (was: ~0.01 s)
        assert _answered(answer) == ({("gone", 0): (3, -1, 0)} if sid else
                                     {("gone", 0): (3, -1, 0), ("live", 0): (0, 0, 0)})
        # a record on the live partition ends the wait
        timer = threading.Timer(0.3, lambda: produce(writer, "live", 0, batch([b"late"])))
        timer.start()
        try:
            started = time.monotonic()
            answer = _fetch(client, sid, 2, max_wait_ms=10_000) if sid else _fetch(client, 0, -1, parts,
                                                                                    max_wait_ms=10_000)
            waited = time.monotonic() - started
        finally:
            timer.join(10)
        assert 0.2 < waited < 5
        assert _answered(answer)[("live", 0)][:2] == (0, 1) and _answered(answer)[("live", 0)][2] > 0
        # only refused partitions: nothing to wait for, answered at once
        started = time.monotonic()
        assert _answered(_fetch(client, 0, -1, {("gone", 0): 0}, max_wait_ms=5_000)) == {("gone", 0): (3, -1, 0)}
        assert time.monotonic() - started < 2


@pytest.mark.slow
def test_two_connections_racing_on_one_session_as_kafka_answers_them(kafka_server, store):
    """A Fetch of a session long-polls on one connection while the next epoch's comes on another (a
    client that gave up waiting): the second is the session's (its epoch is next once the first was
    taken), the first is answered INVALID_FETCH_SESSION_EPOCH with the session's id when its wait
    ends (Kafka's IncrementalFetchContext: "possible duplicate request"), and the session goes on."""
    import threading

    store.create_topic("race", partitions=2)
    with RawClient(kafka_server.port) as first, RawClient(kafka_server.port) as second:
        sid = _fetch(first, 0, 0, {("race", 0): 0, ("race", 1): 0}).session_id
        waited: list = []
        # (min_bytes past what the record below brings: its append must not end the long poll before the
        # second connection's Fetch comes, as it could on a loaded machine)
        poll = threading.Thread(target=lambda: waited.append(_fetch(first, sid, 1, max_wait_ms=3_000,
                                                                      min_bytes=1 << 20)))
        poll.start()
        try:
            deadline = time.monotonic() + 5
            while fetch_sessions.cache_of(kafka_server).get(sid).epoch != 2 and time.monotonic() < deadline:
                time.sleep(0.01)  # (the long poll took epoch 1)
            assert produce(second, "race", 1, batch([b"r"]))[0] == 0
            mine = _fetch(second, sid, 2)
        finally:
            poll.join(10)
        assert (mine.error_code, mine.session_id, set(_answered(mine))) == (0, sid, {("race", 1)})
        (late,) = waited
        assert (late.error_code, late.session_id, _answered(late)) == (71, sid, {})
        after = _fetch(first, sid, 3, {("race", 1): 1})
        assert (after.error_code, after.session_id, _answered(after)) == (0, sid, {})


def test_the_epoch_wraps_from_int32_max_to_1(kafka_server, store):
    store.create_topic("wrap", partitions=1)
    with RawClient(kafka_server.port) as client:
        sid = _fetch(client, 0, 0, {("wrap", 0): 0}).session_id
        fetch_sessions.cache_of(kafka_server).get(sid).epoch = 2**31 - 1
        assert _fetch(client, sid, 2**31 - 1).error_code == 0
        assert _fetch(client, sid, 0 + 1).error_code == 0  # (Kafka's nextEpoch: never 0 nor negative)
        assert _fetch(client, sid, 2).error_code == 0


@pytest.mark.slow
def test_an_incremental_long_poll_wakes_for_another_process_append_and_min_bytes_counts_the_answer(kafka_server,
                                                                                                   store):
    """Records appended by another writer of the store (not through the server: its watcher's poll
    sees them) wake an incremental Fetch that names no partition; min_bytes is counted on what the
    answer carries: a record smaller than min_bytes does not end the wait before max_wait_ms."""
    import threading

    store.create_topic("other", partitions=3)
    with RawClient(kafka_server.port) as client:
        sid = _fetch(client, 0, 0, {("other", p): 0 for p in range(3)}).session_id

        def append() -> None:
            with store.producer() as producer:
                producer.send("other", value=b"from elsewhere", partition=2)

        timer = threading.Timer(0.3, append)
        timer.start()
        try:
            started = time.monotonic()
            answer = _fetch(client, sid, 1, max_wait_ms=10_000)
            waited = time.monotonic() - started
        finally:
            timer.join(10)
        assert 0.2 < waited < 5 and set(_answered(answer)) == {("other", 2)}
        assert _answered(answer)[("other", 2)][2] > 0
        timer = threading.Timer(0.2, append)
        timer.start()
        try:
            started = time.monotonic()
            answer = _fetch(client, sid, 2, {("other", 2): 0}, max_wait_ms=1_000, min_bytes=1 << 20)
            waited = time.monotonic() - started
        finally:
            timer.join(10)
        assert waited >= 0.9  # the whole max_wait: the record is less than min_bytes
        assert set(_answered(answer)) == {("other", 2)} and _answered(answer)[("other", 2)][1] == 2


def test_a_fetch_that_requires_no_data_or_names_no_partition_is_answered_at_once(kafka_server, store):
    """Kafka's ReplicaManager answers at once a Fetch with min_bytes 0 (the Java consumer's
    fetch.min.bytes=0) or with no partition to read: here the first waited max_wait_ms for one byte,
    and so did an incremental Fetch that forgot its session's last partitions (answered without a
    session, naming none)."""
    store.create_topic("quiet", partitions=1)
    with RawClient(kafka_server.port) as client:
        for parts, min_bytes in (({("quiet", 0): 0}, 0), ({}, 1)):
            started = time.monotonic()
            answer = _fetch(client, 0, -1, parts, max_wait_ms=3_000, min_bytes=min_bytes)
            assert time.monotonic() - started < 1.5, (parts, min_bytes)
            assert _answered(answer) == {k: (0, 0, 0) for k in parts}
        sid = _fetch(client, 0, 0, {("quiet", 0): 0}).session_id
        started = time.monotonic()
        emptied = _fetch(client, sid, 1, forgotten={"quiet": [0]}, max_wait_ms=3_000)
        assert time.monotonic() - started < 1.5
        assert (emptied.error_code, emptied.session_id, _answered(emptied)) == (0, 0, {})


def test_a_topic_deleted_and_created_again_under_a_session(kafka_server, store):
    """By name, the session's partition now reads the new topic: its offset past the new log's end
    is OFFSET_OUT_OF_RANGE (answered, so the client resets), never the old topic's records; by id,
    the old id is UNKNOWN_TOPIC_ID."""
    from tests.server.test_serve_fetch_sessions import fetch_sessions_uuid

    store.create_topic("again", partitions=1)
    old_id = fetch_sessions_uuid(store, "again")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "again", 0, batch([b"old1", b"old2"]))[0] == 0
        by_name = _fetch(client, 0, 0, {("again", 0): 2}).session_id
        by_id = _fetch(client, 0, 0, {(old_id, 0): 2}, version=13).session_id
        assert by_name and by_id
        store.delete_topic("again")
        store.create_topic("again", partitions=1)
        assert produce(client, "again", 0, batch([b"new"]))[0] == 0
        assert _answered(_fetch(client, by_name, 1))[("again", 0)][0] == 1  # OFFSET_OUT_OF_RANGE
        answer = _answered(_fetch(client, by_name, 2, {("again", 0): 0}))
        assert answer[("again", 0)][:2] == (0, 1) and answer[("again", 0)][2] > 0  # the new record
        assert _answered(_fetch(client, by_id, 1, version=13)) == {(old_id, 0): (100, -1, 0)}

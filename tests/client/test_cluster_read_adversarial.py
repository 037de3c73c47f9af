"""A hostile review of the bounded read-ahead of cluster reads (HeldAnswers, fetch_consumer.py):
whatever the budget (-X fetch.max.bytes, max.partition.fetch.bytes), the brokers and what they do
between the answers, a cluster read gives exactly the local store's records (never a silent short
read, never a record lost or twice), its counter of held answers stays within [0, limit] and is
0 once every kept answer was read or given up, and every wait is bounded. Against `klog serve` on
127.0.0.1 (ephemeral ports)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from klog.client.newest import newest_records
from klog.client.remote import fetch, fetch_consumer
from klog.client.remote.fetch_consumer import FOLLOW_WAIT_MS, FetchConsumer
from klog.client.remote.store import RemoteStore
from klog.client.remote.target import ClusterTarget


def props(limit: int, share: int) -> dict[str, str]:
    return {"fetch.max.bytes": str(limit), "max.partition.fetch.bytes": str(share)}


def remote(bootstrap: str, limit: int, share: int) -> RemoteStore:
    return RemoteStore(ClusterTarget(bootstrap, props(limit, share)))


def assert_counter_sane(c: FetchConsumer, drained: bool = True) -> None:
    """The held bytes within [0, limit]; 0 once the read went to its end (nothing kept for nothing)."""
    assert 0 <= c.held.held <= c.held.limit, (c.held.held, c.held.limit)
    if drained:
        assert c.held.held == 0, c.held.held
        assert all(c.part._kept is None for c in c.cursors)  # type: ignore[attr-defined]


# -- -f: a follower under a tiny budget ---------------------------------------------------------

def test_a_follower_with_nothing_new_waits_in_one_wait_that_on_wait_sees_grow(kafka_server, store):
    """Nothing new: the follower's wait goes on, on_wait told how long (the CLI's 'waiting' hint
    after 1 s, a caller's own bound). Before: the empty answers of the long poll were kept and
    counted as news, so every wait ended after one 100 ms poll and on_wait saw 0.1 s for ever:
    the hint never showed, and a bound on the wait (tests' give_up_after) never fired."""
    store.create_topic("t", 2)
    with store.producer() as p:
        p.send("t", b"x", partition=0)
    waits: list[float] = []

    def on_wait(waited: float) -> None:
        waits.append(waited)
        if len(waits) >= 8:
            raise TimeoutError("bounded: enough waits seen")

    with remote(kafka_server.bootstrap, 1000, 500) as r, r.consumer("t", follow=True) as c:
        assert isinstance(c, FetchConsumer)
        c.on_wait = on_wait
        got = []
        with pytest.raises(TimeoutError):
            for record in c:
                got.append(record.offset)
    assert got == [0]
    assert waits == sorted(waits) and waits[-1] >= 6 * FOLLOW_WAIT_MS / 1000, waits
    assert_counter_sane(c, drained=False)


def test_a_follower_reads_a_partition_the_answers_bound_left_out_while_another_stays_busy(kafka_server, store,
                                                                                         monkeypatch):
    """fetch.max.bytes = max.partition.fetch.bytes = 100 B, less than a batch; partition 0 gets 8 KB more before every
    long poll, partition 1 one record: each long poll's answer is spent on partition 0 and carries
    partition 1 empty, with its high watermark past the follower's offset. Before: that empty
    answer was kept, so partition 1's read said 'caught up' and its record never came while
    partition 0 stayed busy. Now it comes after the first long poll."""
    store.create_topic("t", 2)
    fetch_many = fetch.Fetcher.fetch_many
    long_polls = []

    def busy_partition_0(self, wants, wait_ms, max_bytes=fetch.ANSWER_BYTES_MAX):  # noqa: ANN001, ANN202
        if wait_ms == FOLLOW_WAIT_MS:
            long_polls.append(max_bytes)
            if len(long_polls) > 12:
                raise TimeoutError("bounded: partition 1's record did not come in 12 long polls")
            with store.producer(batch_size=1024) as p:
                for i in range(64):
                    p.send("t", b"busy-%03d-" % i + b"b" * 100, partition=0)
                if len(long_polls) == 1:
                    p.send("t", b"quiet", partition=1)
        return fetch_many(self, wants, wait_ms, max_bytes)

    monkeypatch.setattr(fetch.Fetcher, "fetch_many", busy_partition_0)
    with remote(kafka_server.bootstrap, 100, 100) as r, r.consumer("t", start="end", follow=True) as c:
        assert isinstance(c, FetchConsumer)
        seen0 = []
        for record in c:
            if record.partition == 1:
                assert (record.offset, record.value) == (0, b"quiet")
                break
            seen0.append(record.offset)
    assert seen0 == list(range(len(seen0)))  # partition 0's records as they came: none twice, none lost
    assert len(long_polls) <= 2, long_polls


# -- the store's answer, whatever the budget, the brokers and their hostility -------------------

T0 = 1_700_000_000_000
NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH = 6, 74
LIMITS = (1, 60, 300, 1_000, 4_000, 20_000, 1 << 20)  # fetch.max.bytes: less than a batch .. all


def fill_hard(store) -> None:  # noqa: ANN001
    """Topic "a" (3 partitions) and "kv" (compacted, 1): small and large batches, gzip and none,
    null values, keys and headers, an aborted and a committed transaction (control batches: offsets
    that are no records), a log start moved by delete-records, compaction's offset gaps."""
    store.create_topic("a", 3, configs={"retention.ms": "-1"})
    ts = T0
    for codec_name, batch in (("none", 300), ("gzip", 2_000), ("none", 9_000)):
        with store.producer(compression_type=codec_name, batch_size=batch) as p:
            for i in range(120):
                ts += 1
                p.send("a", None if i % 13 == 0 else b"%s-%d-" % (codec_name.encode(), i) + b"v" * (i % 40),
                       key=b"k%d" % (i % 5), partition=i % 3, timestamp=ts,
                       headers=[("h", b"%d" % i)] if i % 7 == 0 else None)
    producer = store.producer(transactional_id="rr")
    for commit in (False, True, False):
        producer.begin()
        for i in range(5):
            ts += 1
            producer.send("a", b"txn-%s-%d" % (b"c" if commit else b"a", i), partition=1, timestamp=ts)
        producer.flush()
        producer.commit() if commit else producer.abort()
    producer.close()
    store.delete_records("a", before_offset=17, partitions=[2])  # (partition 2's log starts at 17)
    store.create_topic("kv", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "600",
                                                    "retention.ms": "-1"})
    with store.producer() as p:
        for i in range(150):
            ts += 1
            p.send("kv", b"v%d" % i, key=b"k%d" % (i % 7) if i % 10 else b"u%d" % i, partition=0, timestamp=ts)
            if i % 5 == 4:
                p.flush()
    store.compact("kv")


class Hostile:
    """What the brokers do to the answers of the case at hand (Fetcher._ask wrapped): `how` is
    None (klog serve as it is), "moved" (a whole answer is NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH now and then: the metadata is asked again), "oversend" (each answer up to
    8 times what was asked, the answer's and each partition's bound), "cut" (every partition's
    records cut at its share, a lone batch larger than it too, unless asked for by its size) or
    "starve" (partitions after the first of a request come empty now and then, their high
    watermark past the offset: as if the answer's bound had been spent)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.how: str | None = None
        self.moves_left = 0

    def wrap(self, ask):  # noqa: ANN001, ANN201
        def hostile_ask(fetcher, broker, asked, wait_ms, max_bytes):  # noqa: ANN001, ANN202
            how = self.how
            if how == "moved" and self.moves_left > 0 and self.rng.random() < 0.3:
                self.moves_left -= 1
                error = self.rng.choice((NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH))
                return {where: fetch.PartitionAnswer(error, -1, -1, b"") for where in asked}
            if how == "oversend":
                more = {where: (offset, min(8 * share, fetch.ANSWER_BYTES_MAX))
                        for where, (offset, share) in asked.items()}
                return ask(fetcher, broker, more, wait_ms, min(8 * max_bytes, fetch.ANSWER_BYTES_MAX))
            answers = ask(fetcher, broker, asked, wait_ms, max_bytes)
            if how == "cut":
                return {w: dataclasses.replace(a, records=a.records[:asked[w][1]]) for w, a in answers.items()}
            if how == "starve":
                first = next(iter(asked))
                return {w: a if w == first or self.rng.random() < 0.5 else dataclasses.replace(a, records=b"")
                        for w, a in answers.items()}
            return answers
        return hostile_ask


def spread_over(monkeypatch: pytest.MonkeyPatch, brokers: list[int]) -> None:
    """Partition p led by broker p % brokers[0] (all of them the one `klog serve`; brokers[0] set
    per case): the reader asks each broker its own partitions, one after another."""
    leaders = RemoteStore.leaders

    def spread(self, topic):  # noqa: ANN001, ANN202
        return {p: None if found is None else (p % brokers[0], found[1], found[2])
                for p, found in leaders(self, topic).items()}

    monkeypatch.setattr(RemoteStore, "leaders", spread)


def read_all(c, how: str) -> list:  # noqa: ANN001
    """A consumer's records by one of its faces: what `klog consume` (records, values, record runs),
    klog mirror (poll_chunks: each partition's in order) and the Python API see."""
    if how == "values":
        return [v for chunk in c.value_chunks() for v in chunk]
    if how == "runs":
        return [(p, r[0], r[1], r[2], r[3]) for _, p, _, runs in c.record_runs() for r in runs]
    if how == "chunks":
        got: dict = {}
        for _ in range(5_000):  # (bounded: far more polls than the topics need)
            if all(cursor.done for cursor in c.cursors):
                return sorted(got.items())
            for t, p, chunk in c.poll_chunks():
                got.setdefault((t, p), []).extend((r[0], r[1], r[2], r[3]) for r in chunk)
        raise AssertionError("poll_chunks did not reach the end")
    return [(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in c]


def a_case(rng: random.Random) -> tuple[list[str], str, dict, tuple[int, int], int, str | None]:
    """(topics, how, consumer options, (fetch.max.bytes, max.partition.fetch.bytes), brokers, hostility)."""
    topics = rng.choice((["a"], ["kv"], ["a", "kv"]))
    how = rng.choice(("records", "records", "values", "runs", "chunks", "count", "until", "start", "last"))
    options: dict = {"merge": rng.random() < 0.5}
    if how == "runs" or how == "chunks":
        options["merge"] = False
    if how == "count":
        options["count"] = rng.randrange(1, 300)
    elif how == "until":
        options["until_ms"] = T0 + rng.randrange(0, 420)
    elif how == "start":
        options["start"] = rng.choice((str(rng.randrange(0, 121)), f"-{rng.randrange(1, 60)}"))
    elif how == "last":
        options = {"n": rng.randrange(0, 200)}
    limit = rng.choice(LIMITS)
    share = rng.choice((1, 100, limit, rng.randrange(1, limit + 1)))
    return topics, how, options, (limit, min(share, limit)), rng.choice((1, 1, 2, 3)), \
        rng.choice((None, None, "moved", "oversend", "cut", "starve"))


def local_answer(store, topics: list[str], how: str, options: dict) -> list:  # noqa: ANN001
    if how == "last":
        return [(r.topic, r.partition, r.offset, r.value) for r in newest_records(store, topics, **options)[0]]
    kwargs = dict(options)
    with store.consumer(*topics, **kwargs) as c:
        return read_all(c, {"count": "records", "until": "records", "start": "records"}.get(how, how))


def remote_answer(remote_store: RemoteStore, topics: list[str], how: str, options: dict) -> list:
    if how == "last":
        return [(r.topic, r.partition, r.offset, r.value) for r in newest_records(remote_store, topics, **options)[0]]
    with remote_store.consumer(*topics, **options) as c:
        assert isinstance(c, FetchConsumer)
        got = read_all(c, {"count": "records", "until": "records", "start": "records"}.get(how, how))
    assert_counter_sane(c, drained=how != "count")
    return got


CASES = 40


def test_seeded_random_reads_through_the_cluster_give_the_local_stores_answer(kafka_server, store, monkeypatch):
    """CASES seeded cases (topics, face, -n/--until/--last/start, budgets from 1 byte to 1 MiB,
    1 to 3 brokers, a hostile broker or none): each the local read's answer exactly, the held
    answers' counter within [0, limit] and back at 0 after a whole read."""
    fill_hard(store)
    rng = random.Random(20261128)
    hostile = Hostile(rng)
    brokers = [1]
    monkeypatch.setattr(fetch.Fetcher, "_ask", hostile.wrap(fetch.Fetcher._ask))
    monkeypatch.setattr(fetch, "RETRY_PAUSE_S", 0.0)
    monkeypatch.setattr(fetch_consumer, "RETRY_PAUSE_S", 0.0)
    spread_over(monkeypatch, brokers)
    with remote(kafka_server.bootstrap, 1, 1) as r:
        for case in range(CASES):
            topics, how, options, (limit, share), brokers[0], hostile.how = a_case(rng)
            hostile.moves_left = 20
            r.target.properties.update(props(limit, share))
            expected = local_answer(store, topics, how, options)
            got = remote_answer(r, topics, how, options)
            assert got == expected, (case, topics, how, options, limit, share, brokers[0], hostile.how)

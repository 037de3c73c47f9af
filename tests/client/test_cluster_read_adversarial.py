"""A hostile review of the bounded read-ahead of cluster reads (HeldAnswers, fetch_consumer.py):
whatever the budget (-X fetch.max.bytes, max.partition.fetch.bytes), the brokers and what they do
between the answers, a cluster read gives exactly the local store's records (never a silent short
read, never a record lost or twice), its counter of held answers stays within [0, limit] and is
0 once every kept answer was read or given up, and every wait is bounded. Against `klog serve` on
127.0.0.1 (ephemeral ports)."""

from __future__ import annotations

import dataclasses
import random
import struct
import time
from collections.abc import Callable

import pytest

from klog.client import consumer as consumer_module
from klog.client.newest import newest_records
from klog.client.remote import fetch, fetch_consumer
from klog.client.remote.fetch_consumer import FOLLOW_WAIT_MS, FetchConsumer
from klog.client.remote.store import RemoteStore
from klog.client.remote.target import ClusterTarget
from klog.errors import KlogError
from klog.protocol.apis import FETCH
from tests.cli.test_cluster_hostile_broker import HostileRelay, behind_relay


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

@pytest.mark.slow
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

    def busy_partition_0(self, wants, wait_ms, max_bytes=fetch.ANSWER_BYTES_MAX, **options):  # noqa: ANN001, ANN202
        if wait_ms == FOLLOW_WAIT_MS:
            long_polls.append(max_bytes)
            if len(long_polls) > 12:
                raise TimeoutError("bounded: partition 1's record did not come in 12 long polls")
            with store.producer(batch_size=1024) as p:
                for i in range(64):
                    p.send("t", b"busy-%03d-" % i + b"b" * 100, partition=0)
                if len(long_polls) == 1:
                    p.send("t", b"quiet", partition=1)
        return fetch_many(self, wants, wait_ms, max_bytes, **options)

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
    if how == "batches":  # (--json --txn-fields: the transaction markers too)
        return [(p, h.base_offset, h.is_control, h.producer_id, [r[0] for r in runs])
                for _, p, h, runs in c.batch_runs(control=True)]
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
    how = rng.choice(("records", "records", "values", "runs", "batches", "chunks", "count", "until", "start", "last"))
    options: dict = {"merge": rng.random() < 0.5}
    if how in ("runs", "batches", "chunks"):
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


CASES = 18


def hostile_brokers(monkeypatch, rng: random.Random) -> tuple[Hostile, list[int]]:
    """Every Fetch through a Hostile (its `how` set per case), no pause between retries, and the
    partitions spread over `brokers[0]` broker ids (set per case)."""
    hostile = Hostile(rng)
    brokers = [1]
    monkeypatch.setattr(fetch.Fetcher, "_ask", hostile.wrap(fetch.Fetcher._ask))
    monkeypatch.setattr(fetch, "RETRY_PAUSE_S", 0.0)
    monkeypatch.setattr(fetch_consumer, "RETRY_PAUSE_S", 0.0)
    spread_over(monkeypatch, brokers)
    return hostile, brokers


@pytest.mark.slow
def test_seeded_random_reads_through_the_cluster_give_the_local_stores_answer(kafka_server, store, monkeypatch):
    """CASES seeded cases (topics; records, values, record runs, batch runs with the transaction
    markers, poll_chunks; -n/--until/--last/start; budgets from 1 byte to 1 MiB,
    1 to 3 brokers, a hostile broker or none): each the local read's answer exactly, the held
    answers' counter within [0, limit] and back at 0 after a whole read."""
    fill_hard(store)
    rng = random.Random(20261128)
    hostile, brokers = hostile_brokers(monkeypatch, rng)
    with remote(kafka_server.bootstrap, 1, 1) as r:
        for case in range(CASES):
            topics, how, options, (limit, share), brokers[0], hostile.how = a_case(rng)
            hostile.moves_left = 20
            r.target.properties.update(props(limit, share))
            expected = local_answer(store, topics, how, options)
            got = remote_answer(r, topics, how, options)
            assert got == expected, (case, topics, how, options, limit, share, brokers[0], hostile.how)


FOLLOW_CASES = 8
BURSTS = 4  # long polls that find records written just before them


@pytest.mark.slow
def test_seeded_random_followers_get_every_record_written_while_following_once(kafka_server, store, monkeypatch):
    """-f from the end under budgets from 1 byte up, 1-3 brokers, hostile or not: bursts of records
    (random partitions, sizes, codecs) written before the first long polls all come, each once and
    in its partition's order, as the local store holds them; the wait for them is bounded (on_wait)."""
    store.create_topic("f", 3, configs={"retention.ms": "-1"})
    rng = random.Random(1128)
    hostile, brokers = hostile_brokers(monkeypatch, rng)
    fetch_many = fetch.Fetcher.fetch_many
    bursts = [0]
    written: list[int] = []

    def writing_before_long_polls(self, wants, wait_ms, max_bytes=fetch.ANSWER_BYTES_MAX, **options):  # noqa: ANN001, ANN202
        if wait_ms == FOLLOW_WAIT_MS and bursts[0] > 0:
            bursts[0] -= 1
            written.append(burst(store, rng))
        return fetch_many(self, wants, wait_ms, max_bytes, **options)

    monkeypatch.setattr(fetch.Fetcher, "fetch_many", writing_before_long_polls)
    with remote(kafka_server.bootstrap, 1, 1) as r:
        for case in range(FOLLOW_CASES):
            limit = rng.choice(LIMITS)
            share = min(limit, rng.choice((1, 100, limit, rng.randrange(1, limit + 1))))
            brokers[0], hostile.how = rng.choice((1, 2, 3)), rng.choice((None, "moved", "oversend", "cut", "starve"))
            hostile.moves_left = 20
            merge, values = rng.random() < 0.5, rng.random() < 0.5
            r.target.properties.update(props(limit, share))
            ends = {p: store.partition("f", p).high_watermark() for p in range(3)}
            bursts[0], written[:] = BURSTS, []
            with r.consumer("f", start="end", follow=True, merge=merge) as c:
                assert isinstance(c, FetchConsumer)
                c.on_wait = give_up_after_waits(30)
                got = followed(c, values, lambda n: bursts[0] == 0 and n >= sum(written))
            assert_counter_sane(c, drained=False)
            with store.consumer("f", merge=False) as local:
                records = [r for r in local if r.offset >= ends[r.partition]]
            where = (case, limit, share, brokers[0], hostile.how, merge, values)
            assert len(got) == sum(written) == len(records), where
            if values:
                assert sorted(got, key=repr) == sorted((r.value for r in records), key=repr), where
            else:
                for p in range(3):
                    assert [(o, v) for q, o, v in got if q == p] == \
                        [(r.offset, r.value) for r in records if r.partition == p], where


def burst(store, rng: random.Random) -> int:  # noqa: ANN001
    """Records written to random partitions of "f" (sizes 0..300 B, none or gzip); how many."""
    n = rng.randrange(1, 60)
    with store.producer(compression_type=rng.choice(("none", "gzip")), batch_size=rng.choice((200, 2_000))) as p:
        for i in range(n):
            p.send("f", b"%d-" % i + b"f" * rng.randrange(0, 300), partition=rng.randrange(3))
    return n


def give_up_after_waits(waits: int):  # noqa: ANN201
    """An on_wait that ends a follower after `waits` calls (long polls of 0.1 s that found nothing)."""
    calls = [0]

    def check(waited: float) -> None:
        calls[0] += 1
        if calls[0] > waits:
            raise AssertionError(f"the follower waited {waited:.1f} s for records already written")
    return check


def followed(c: FetchConsumer, values: bool, enough: Callable[[int], bool]) -> list:
    """A follower's records (values, or (partition, offset, value)) until `enough(how many)`."""
    got: list = []
    if values:
        for chunk in c.value_chunks():
            got += chunk
            if enough(len(got)):
                break
    else:
        for r in c:
            got.append((r.partition, r.offset, r.value))
            if enough(len(got)):
                break
    return got


# -- a kept answer is never used stale ----------------------------------------------------------

def three_partitions_kept(store, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Topic "s": 3 partitions of 50 records (batches of ~10); a poll reads one partition only
    (POLL_READ_BYTES 1 byte), so partition 0's first poll keeps partitions 1's and 2's answers."""
    store.create_topic("s", 3, configs={"retention.ms": "-1"})
    with store.producer(batch_size=400) as p:
        for i in range(150):
            p.send("s", b"s-%03d-" % i + b"x" * 20, partition=i % 3)
    monkeypatch.setattr(consumer_module, "POLL_READ_BYTES", 1)


def polled_all(c: FetchConsumer, got: dict[int, list[int]]) -> dict[int, list[int]]:
    for _ in range(1_000):  # (bounded)
        if all(cursor.done for cursor in c.cursors):
            return got
        for r in c.poll():
            got.setdefault(r.partition, []).append(r.offset)
    raise AssertionError("the polls did not reach the end")


def first_poll(c: FetchConsumer) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    for r in c.poll():
        got.setdefault(r.partition, []).append(r.offset)
    assert set(got) == {0}
    assert all(c.cursors[p].part.has_answer(0) for p in (1, 2))  # type: ignore[attr-defined]
    return got


def test_a_seek_gives_up_the_kept_answer_even_to_the_same_offset(kafka_server, store, monkeypatch):
    three_partitions_kept(store, monkeypatch)
    with remote(kafka_server.bootstrap, 1 << 20, 1 << 16) as r, r.consumer("s", merge=False) as c:
        assert isinstance(c, FetchConsumer)
        got = first_poll(c)
        held = c.held.held
        c.seek("s", 1, 30)
        c.seek("s", 2, 0)  # (the same offset: asked again, as a local seek reads anew)
        assert not any(c.cursors[p].part.has_answer(0) for p in (1, 2)) and c.held.held == 0 < held  # type: ignore[attr-defined]
        got = polled_all(c, got)
    assert got == {0: list(range(50)), 1: list(range(30, 50)), 2: list(range(50))}
    assert_counter_sane(c)


def test_an_answer_kept_longer_than_kept_answer_s_is_asked_again(kafka_server, store, monkeypatch):
    """Partition 1's answer was kept, then delete-records moved its log start to 30, and the next
    poll came later than KEPT_ANSWER_S (here 0.05 s; a Python consumer polls when it likes): its
    records are asked again and start at 30, as a local read's do. Before: the kept answer, however
    old, gave offsets 0..29 that were deleted (and a topic deleted meanwhile, records of a topic
    that is no more)."""
    three_partitions_kept(store, monkeypatch)
    monkeypatch.setattr(fetch_consumer, "KEPT_ANSWER_S", 0.05, raising=False)
    with remote(kafka_server.bootstrap, 1 << 20, 1 << 16) as r, r.consumer("s", merge=False) as c:
        assert isinstance(c, FetchConsumer)
        got = first_poll(c)
        store.delete_records("s", before_offset=30, partitions=[1])
        time.sleep(0.1)
        got = polled_all(c, got)
    assert got == {0: list(range(50)), 1: list(range(30, 50)), 2: list(range(50))}
    assert_counter_sane(c)


def test_an_answer_read_soon_after_it_was_kept_is_not_asked_again(kafka_server, store, monkeypatch):
    """The read-ahead still saves the round trips: polls that follow at once use the kept answers."""
    three_partitions_kept(store, monkeypatch)
    asked = []
    ask = fetch.Fetcher._ask

    def counted(self, broker, wants, wait_ms, max_bytes):  # noqa: ANN001, ANN202
        asked.append(sorted(p for _, p in wants))
        return ask(self, broker, wants, wait_ms, max_bytes)

    monkeypatch.setattr(fetch.Fetcher, "_ask", counted)
    with remote(kafka_server.bootstrap, 1 << 20, 1 << 16) as r, r.consumer("s", merge=False) as c:
        assert isinstance(c, FetchConsumer)
        got = polled_all(c, first_poll(c))
    assert got == {p: list(range(50)) for p in range(3)}
    assert asked == [[0, 1, 2]]  # one Fetch for the three partitions, all read from it


# -- size accounting gone wrong: bounded, never stuck, never silent -----------------------------

def never_sending(monkeypatch: pytest.MonkeyPatch, partition: int, stalled_after_s: float = 8.0) -> None:
    """A broker answering every Fetch of `partition` with no records and its true high watermark
    (past the offset asked): records it says it has and never sends. A read still going after
    `stalled_after_s` is stuck (the test's own bound)."""
    ask, started = fetch.Fetcher._ask, time.monotonic()

    def lying_ask(self, broker, asked, wait_ms, max_bytes):  # noqa: ANN001, ANN202
        if time.monotonic() - started > stalled_after_s:
            raise TimeoutError(f"stuck: still fetching after {stalled_after_s:g} s")
        answers = ask(self, broker, asked, wait_ms, max_bytes)
        return {w: dataclasses.replace(a, records=b"") if w[1] == partition else a for w, a in answers.items()}

    monkeypatch.setattr(fetch.Fetcher, "_ask", lying_ask)


@pytest.mark.parametrize("follow", [False, True], ids=["bounded", "follow"])
def test_a_broker_that_never_sends_the_records_it_claims_is_one_error_within_the_timeout(kafka_server, store,
                                                                                        monkeypatch, follow):
    """Partition 1's answers always empty, its high watermark past the offset. A bounded read: the
    'no records for N s' error naming it. A follower too: before, each empty answer was 'caught
    up' and the next long poll came back at once with the same news, for ever (a spin that never
    called on_wait: no bound of the caller's fired); now its read waits for the records as a
    bounded read does, then the same one error."""
    store.create_topic("t", 2)
    with store.producer() as p:
        for i in range(10):
            p.send("t", b"%d" % i, partition=i % 2)
    never_sending(monkeypatch, 1)
    with remote(kafka_server.bootstrap, 1000, 100) as r, r.consumer("t", follow=follow, merge=False) as c:
        assert isinstance(c, FetchConsumer)
        r.timeout = 0.5
        c.on_wait = give_up_after_waits(40)
        got = []
        started = time.monotonic()
        with pytest.raises(KlogError, match=r"no records from t-1 .* for 0.5 s while offsets 0\.\.4 were left"):
            for record in c:
                got.append((record.partition, record.offset))
        assert time.monotonic() - started < 3
    assert got == [(0, o) for o in range(5)]
    assert_counter_sane(c, drained=False)


@pytest.mark.parametrize("topic", ["a", "kv"])
def test_the_edge_budgets_give_the_local_stores_answer(kafka_server, store, monkeypatch, topic):
    """Each named edge, over "a" (3 partitions) and "kv" (1 partition, compacted): a budget of
    1 byte (less than any batch), fetch.max.bytes == max.partition.fetch.bytes (no room for others:
    every partition alone), a share of 1 byte under a roomy budget, 1 and 3 brokers; merged and one
    after another; -n, --until and --last at 1 byte. Every read the local read's answer."""
    fill_hard(store)
    brokers = [1]
    spread_over(monkeypatch, brokers)
    with remote(kafka_server.bootstrap, 1, 1) as r:
        for (limit, share), brokers[0], merge in [
                ((1, 1), 1, False), ((1, 1), 3, True), ((300, 300), 3, False), ((4_000, 4_000), 1, True),
                ((1 << 20, 1), 3, False), ((1 << 20, 1), 2, True), ((60, 1), 3, True)]:
            r.target.properties.update(props(limit, share))
            for how, options in [("records", {"merge": merge}), ("count", {"merge": merge, "count": 37}),
                                 ("until", {"merge": merge, "until_ms": T0 + 200}), ("last", {"n": 41})]:
                assert remote_answer(r, [topic], how, options) == local_answer(store, [topic], how, options), \
                    (limit, share, brokers[0], how, options)


def test_klog_consume_under_a_1_byte_budget_prints_what_the_local_consume_prints(kafka_server, store, cli):
    """`klog consume -b` as the user runs it (in this process): --json --txn-fields (the markers
    too), --last, --until, -n, merged values, at fetch.max.bytes = max.partition.fetch.bytes = 1
    over 3 partitions and a compacted one: byte for byte the output of `klog consume` of the store."""
    fill_hard(store)
    budget = ["-X", "fetch.max.bytes=1", "-X", "max.partition.fetch.bytes=1", "-b", kafka_server.bootstrap]
    for args in (["a", "--json", "--txn-fields"], ["a", "kv", "--last", "57", "--json"],
                 ["a", "--until", str(T0 + 250), "--json"], ["a", "kv", "-n", "123"], ["a", "kv"]):
        local = cli("consume", *args)
        remote = cli("consume", *args, *budget)
        assert (remote.exit_code, remote.stderr) == (0, "") and local.exit_code == 0, (args, remote.stderr)
        assert remote.stdout == local.stdout and local.stdout.count(b"\n") > 50, args


# -- re-led on the wire: the hostile-broker relay -----------------------------------------------

class EveryNthFetch:
    """An api_key for HostileRelay that matches every `n`-th Fetch request only (the others are
    relayed to the server)."""

    def __init__(self, n: int) -> None:
        self.n, self.fetches = n, 0

    def __eq__(self, api_key: object) -> bool:
        if api_key != FETCH:
            return False
        self.fetches += 1
        return self.fetches % self.n == 0

    __hash__ = None  # type: ignore[assignment]


def not_leader_answer(topic: str, partitions: int):  # noqa: ANN201
    """A Fetch v11 answer (header v0) giving NOT_LEADER_OR_FOLLOWER for every partition of `topic`."""
    name = topic.encode()

    def answer(correlation: int) -> bytes:
        out = struct.pack(">iihi", correlation, 0, 0, 0) + struct.pack(">i", 1)
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", partitions)
        for p in range(partitions):  # index, error, high watermark, last stable, log start, aborted (null),
            # preferred read replica, records (null)
            out += struct.pack(">ihqqqiii", p, NOT_LEADER_OR_FOLLOWER, -1, -1, -1, -1, -1, -1)
        return out
    return answer


def test_every_third_fetch_answered_not_leader_on_the_wire_gives_the_local_read(data_dir, store, monkeypatch):
    """Through `klog serve` behind the hostile-broker relay, every third Fetch is answered
    NOT_LEADER_OR_FOLLOWER for every partition (the leader moved: the metadata is asked again and
    the fetch retried), while answers are kept for partitions read later under a small budget:
    the records are the local read's, none lost, none twice."""
    store.create_topic("s", 3, configs={"retention.ms": "-1"})
    with store.producer(batch_size=400) as p:
        for i in range(150):
            p.send("s", b"s-%03d-" % i + b"x" * 20, partition=i % 3)
    with store.consumer("s", merge=False) as c:
        local = [(r.partition, r.offset, r.value) for r in c]
    monkeypatch.setattr(fetch, "RETRY_PAUSE_S", 0.0)
    relay = HostileRelay(EveryNthFetch(3), not_leader_answer("s", 3))  # type: ignore[arg-type]
    with behind_relay(data_dir, relay) as bootstrap, remote(bootstrap, 2_000, 500) as r:
        with r.consumer("s", merge=False) as c:
            assert isinstance(c, FetchConsumer)
            got = [(r.partition, r.offset, r.value) for r in c]
    assert got == local
    assert relay.hostile_sent >= 3
    assert_counter_sane(c)


@pytest.mark.parametrize("declared", [-5, 0, 12, 200, (1 << 31) - 1])
def test_a_cut_batch_declaring_any_size_is_one_error_within_the_timeout(kafka_server, store, monkeypatch, declared):
    """A broker whose answers are only the first 20 bytes of a batch (its header cut) declaring
    `declared` bytes of batch, whatever it is asked: negative, too small, plausible, or 2 GiB. The
    read asks for it alone by that size (never a size of 0 or less as the answer's bound) and ends
    in one error naming the partition within the timeout: never a hang, never an empty read."""
    store.create_topic("t", 1)
    with store.producer() as p:
        p.send("t", b"v")
    asked: list[int] = []

    def cut_header(self, broker, wants, wait_ms, max_bytes):  # noqa: ANN001, ANN202
        asked.extend(share for _, share in wants.values())
        if len(asked) > 200:
            raise TimeoutError("stuck: 200 fetches")
        head = struct.pack(">qi", 0, declared - 12) + b"\0" * 8
        return {w: fetch.PartitionAnswer(0, 1, 0, head) for w in wants}

    monkeypatch.setattr(fetch.Fetcher, "_ask", cut_header)
    monkeypatch.setattr(fetch_consumer, "RETRY_PAUSE_S", 0.0)
    with remote(kafka_server.bootstrap, 1000, 100) as r, r.consumer("t") as c:
        r.timeout = 0.3
        with pytest.raises(KlogError, match="t-0"):
            list(c)
    assert min(asked) > 0, asked


def test_a_topic_deleted_while_answers_are_kept_ends_the_read_in_its_error(kafka_server, store, monkeypatch):
    """Answers of partitions 1 and 2 kept (200-byte shares: a part of each), then the topic is
    deleted: the polls give what was fetched, each partition's records a gapless prefix, then the
    'deleted while being read' error; never an end that looks like the whole topic."""
    three_partitions_kept(store, monkeypatch)
    monkeypatch.setattr(fetch, "TOPIC_GONE_S", 0.1)
    monkeypatch.setattr(fetch, "RETRY_PAUSE_S", 0.0)
    with remote(kafka_server.bootstrap, 1 << 20, 200) as r, r.consumer("s", merge=False) as c:
        assert isinstance(c, FetchConsumer)
        got = first_poll(c)
        store.delete_topic("s")
        with pytest.raises(KlogError, match="'s' was deleted while being read"):
            polled_all(c, got)
    assert got and all(offsets == list(range(len(offsets))) and len(offsets) < 50 for offsets in got.values()), got


def test_a_partition_without_a_leader_does_not_hold_back_the_read_of_another(kafka_server, store, monkeypatch):
    """Partition 1 has no leader (its broker is down). Reading partition 0's first records (-n 5,
    one partition after another) fetches partition 1 along for later, but its failure is its own
    read's: partition 0's records come at once, as through a local read. Before: partition 0's
    read retried partition 1 with it until the cluster timeout, then failed naming partition 1."""
    store.create_topic("t", 2)
    with store.producer() as p:
        for i in range(20):
            p.send("t", b"%d" % i, partition=i % 2)
    leaders = RemoteStore.leaders
    monkeypatch.setattr(RemoteStore, "leaders", lambda self, topic: {**leaders(self, topic), 1: None})
    with remote(kafka_server.bootstrap, 1 << 20, 1 << 16) as r, r.consumer("t", merge=False, count=5) as c:
        r.timeout = 1.0
        started = time.monotonic()
        got = [(record.partition, record.offset) for record in c]
        took = time.monotonic() - started
    assert got == [(0, o) for o in range(5)]
    assert took < 0.9, took  # (not the 1 s timeout)
    with remote(kafka_server.bootstrap, 1 << 20, 1 << 16) as r, r.consumer("t", merge=False) as c:
        r.timeout = 0.3
        with pytest.raises(KlogError, match="cannot read t-1 .* names no leader"):
            list(c)

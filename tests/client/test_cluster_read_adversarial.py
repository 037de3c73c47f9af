"""A hostile review of the bounded read-ahead of cluster reads (HeldAnswers, fetch_consumer.py):
whatever the budget (-X fetch.max.bytes, max.partition.fetch.bytes), the brokers and what they do
between the answers, a cluster read gives exactly the local store's records (never a silent short
read, never a record lost or twice), its counter of held answers stays within [0, limit] and is
0 once every kept answer was read or given up, and every wait is bounded. Against `klog serve` on
127.0.0.1 (ephemeral ports)."""

from __future__ import annotations

import pytest

from klog.client.remote import fetch
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

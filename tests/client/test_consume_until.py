"""--until (the library's until_ms) stops each partition at its first record at or after the time,
as kcat's -o e@T does: with -f the consumer then ends instead of waiting forever, and without -f
it does not read the rest of the partition."""

from __future__ import annotations

import threading


def _fill(store) -> None:
    store.create_topic("u", partitions=2)
    with store.producer() as p:
        for i, ts in enumerate([1000, 2000, 6000, 3000]):  # a late 3000 after the stop point
            p.send("u", b"a%d" % i, partition=0, timestamp=ts)
        for i, ts in enumerate([1500, 5000, 7000]):
            p.send("u", b"b%d" % i, partition=1, timestamp=ts)


class _Reader:
    """Iterates a consumer in a thread; the test ends it (every loop here is bounded in time)."""

    def __init__(self, consumer) -> None:
        self.got: list[bytes] = []
        self.thread = threading.Thread(target=lambda: self.got.extend(r.value for r in consumer), daemon=True)
        self.thread.start()

    def ended_within(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return not self.thread.is_alive()


def test_follow_with_until_ends_once_every_partition_passed_it(store) -> None:
    _fill(store)
    reader = _Reader(store.consumer("u", follow=True, until_ms=4000, poll_interval_ms=5))
    assert reader.ended_within(10), "consume -f --until did not stop"
    assert sorted(reader.got) == [b"a0", b"a1", b"b0"]


def test_until_stops_a_partition_at_its_first_record_past_the_time(store) -> None:
    _fill(store)
    reader = _Reader(store.consumer("u", until_ms=4000))
    assert reader.ended_within(10)
    assert sorted(reader.got) == [b"a0", b"a1", b"b0"]  # not the late a3 (3000) after a2 (6000)


def test_follow_with_until_keeps_waiting_on_a_partition_not_past_it(store) -> None:
    store.create_topic("w", partitions=2)
    with store.producer() as p:
        p.send("w", b"x", partition=0, timestamp=9000)
        p.send("w", b"y", partition=1, timestamp=1000)
    reader = _Reader(store.consumer("w", follow=True, until_ms=4000, poll_interval_ms=5))
    assert not reader.ended_within(0.5)  # partition 1 may still get records before 4000
    with store.producer() as p:
        p.send("w", b"z", partition=1, timestamp=5000)
    assert reader.ended_within(10)
    assert reader.got == [b"y"]

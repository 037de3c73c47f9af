"""The one high-watermark watcher behind every long-polling Fetch (klog/server/watcher.py): its
polling costs per watched partition, not per waiting fetch, and it wakes only the right waiters."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
import time

import pytest

from klog.server.watcher import HighWatermarkWatcher
from tests.klog_processes import klog_env
from tests.serve_helpers import RawClient, batch, produce


class FakeStore:
    def __init__(self) -> None:
        self.marks: dict[tuple[str, int], int] = {}
        self.reads: list[int] = []  # partitions read per poll

    async def read(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        self.reads.append(len(keys))
        return {k: self.marks.get(k, 0) for k in keys}


def test_two_hundred_waiters_on_one_partition_cost_one_read_per_tick() -> None:
    store = FakeStore()

    async def main() -> float:
        watcher = HighWatermarkWatcher(store.read, 0.01)
        started = time.monotonic()
        await asyncio.gather(*(watcher.wait({("t", 0): 0}, 0.2) for _ in range(200)))
        assert watcher.waiting == 0
        return time.monotonic() - started

    took = asyncio.run(main())
    assert 0.15 < took < 2.0  # nobody woke early: the mark never moved
    assert store.reads and max(store.reads) == 1  # one partition read per tick, however many wait
    assert len(store.reads) <= took / 0.01 + 1  # one read per tick, not one per waiter


@pytest.mark.slow
def test_another_process_append_wakes_only_the_waiters_of_its_partition() -> None:
    store = FakeStore()

    async def main() -> tuple[list[float], int]:
        watcher = HighWatermarkWatcher(store.read, 0.01)
        started = time.monotonic()

        async def waiter(partition: int) -> float:
            await watcher.wait({("t", partition): 0}, 1.0)
            return time.monotonic() - started

        tasks = [asyncio.create_task(waiter(p)) for p in (0, 0, 1)]
        await asyncio.sleep(0.05)
        store.marks[("t", 0)] = 5  # written by another process: seen at the next poll
        done = await asyncio.gather(*tasks)
        polls_while_waiting = watcher.polls
        await asyncio.sleep(0.1)  # nobody waits: nothing polls
        assert watcher.polls == polls_while_waiting
        return done, watcher.polls

    done, _ = asyncio.run(main())
    assert done[0] < 0.5 and done[1] < 0.5  # woken by the poll
    assert done[2] >= 0.9  # partition 1 never moved: its fetch waited its whole max_wait


def test_an_append_through_the_server_wakes_its_partition_at_once() -> None:
    store = FakeStore()

    async def main() -> tuple[float, bool]:
        watcher = HighWatermarkWatcher(store.read, 10.0)  # no poll within the test: only notify
        started = time.monotonic()
        mine = asyncio.create_task(watcher.wait({("t", 3): 0}, 5.0))
        other = asyncio.create_task(watcher.wait({("u", 3): 0}, 5.0))
        await asyncio.sleep(0.02)
        watcher.notify(("t", 3))
        await mine
        took = time.monotonic() - started
        other_done = other.done()
        watcher.close()  # shutdown: every waiter answers now
        await asyncio.wait_for(other, 1.0)
        return took, other_done

    took, other_done = asyncio.run(main())
    assert took < 1.0
    assert not other_done


def _fetch(client, topic: str, offset: int, min_bytes: int, max_wait_ms: int):  # noqa: ANN001, ANN202
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    resp = client.send(1, 12, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
                       min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=(), rack_id="")
    return resp.responses[0].partitions[0]


def test_max_wait_answers_with_the_data_there_when_min_bytes_is_not_reached(kafka_server, store) -> None:
    from tests.serve_helpers import RawClient

    store.create_topic("few")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "few", 0, batch([b"one"]))[0] == 0
        started = time.monotonic()
        part = _fetch(client, "few", 0, 1 << 20, 300)  # wants 1 MiB, there are a few bytes
        took = time.monotonic() - started
        assert 0.25 < took < 5.0
        assert int(part.high_watermark) == 1 and len(part.records) > 0  # what there is, at max_wait
        started = time.monotonic()
        part = _fetch(client, "few", 1, 1, 300)  # at the end: empty, at max_wait
        assert 0.25 < time.monotonic() - started < 5.0
        assert int(part.high_watermark) == 1 and not part.records


@pytest.mark.slow
def test_a_waiting_confluent_consumer_is_woken_by_a_local_produce_in_another_process(kafka_server, data_dir):
    confluent = pytest.importorskip("confluent_kafka")
    kafka_server.store.create_topic("idle")
    consumer = confluent.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "w",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 10_000})
    try:
        consumer.assign([confluent.TopicPartition("idle", 0, 0)])
        assert consumer.poll(1.0) is None  # connected, now long-polling an idle topic
        time.sleep(0.5)
        produced = subprocess.run([sys.executable, "-m", "klog", "produce", "idle"], input=b"hello\n",
                                  env=klog_env(data_dir), capture_output=True, timeout=60)
        written = time.monotonic()
        assert produced.returncode == 0
        message = None
        deadline = written + 8
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.05)
        received = time.time()
    finally:
        consumer.close()
    assert message is not None and message.error() is None and message.value() == b"hello"
    woken = received - message.timestamp()[1] / 1000  # from the append (CreateTime) to the consumer
    assert woken < 2.0, f"woken {woken:.3f} s after the produce ended (the fetch waits up to 10 s)"


@pytest.mark.slow
def test_a_topic_deleted_while_a_fetch_waits_answers_it_and_the_watcher_goes_idle(kafka_server, data_dir):
    import threading

    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    kafka_server.store.create_topic("doomed")
    part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    fields = dict(replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(seconds=8)), min_bytes=1,
                  max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                  topics=(FetchTopic(topic="doomed", partitions=(part,)),), forgotten_topics_data=(), rack_id="")
    with RawClient(kafka_server.port) as client:
        answers: list = []
        waiter = threading.Thread(target=lambda: answers.append(client.send(1, 12, **fields)))
        waiter.start()
        time.sleep(0.5)
        assert kafka_server.watcher.waiting == 1
        deleted = subprocess.run([sys.executable, "-m", "klog", "topics", "delete", "doomed", "--yes"],
                                 env=klog_env(data_dir), capture_output=True, timeout=60)
        assert deleted.returncode == 0, deleted.stderr
        gone = time.monotonic()
        waiter.join(8)
        assert answers, "the fetch still waits after its topic was deleted"
        assert time.monotonic() - gone < 3
        assert answers[0].responses[0].partitions[0].error_code != 0
        resp = client.send(3, 9, topics=None, allow_auto_topic_creation=False,
                           include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        assert "doomed" not in [t.name for t in resp.topics]  # still serving
    polls = kafka_server.watcher.polls
    time.sleep(0.5)
    assert kafka_server.watcher.waiting == 0 and kafka_server.watcher.polls == polls  # not spinning


@pytest.mark.slow
def test_slow_reads_of_many_watched_partitions_take_a_bounded_share_of_the_time() -> None:
    """Reads of the watched partitions that take 40 ms a tick (thousands of them) run at most about
    a tenth of the time, not back to back with 10 ms ticks (4/5 of the pool's time: other clients
    waited on it); a move is still seen, within POLL_WAIT_MAX and a read."""
    reads: list[float] = []
    marks = {("t", 0): 0}

    async def slow_read(keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        reads.append(time.monotonic())
        await asyncio.sleep(0.04)
        return {k: marks.get(k, 0) for k in keys}

    async def main() -> tuple[bool, bool, float]:
        watcher = HighWatermarkWatcher(slow_read, 0.01)
        idle = await watcher.wait({("t", 0): 0}, 1.2)
        started = time.monotonic()
        waiting = asyncio.create_task(watcher.wait({("t", 0): 0}, 5.0))
        await asyncio.sleep(0.1)
        marks[("t", 0)] = 3
        moved = await waiting
        return idle, moved, time.monotonic() - started

    idle, moved, took = asyncio.run(main())
    assert not idle and moved and took < 1.5
    busy = 0.04 * sum(1 for t in reads if t < reads[0] + 1.2)
    assert busy < 0.25 * 1.2, reads  # (back to back: 24 reads in 1.2 s, 0.96 s of reading)

"""The broker's producer states (rebuilt from the log on a partition's first idempotent write) and
the cleaner's active producers (whose last batches compaction keeps) come from one walk of the
log, klog.store.producer_scan: on a log of several producers they know the same producers, at the
same epoch and last data offset. Had they drifted apart, a producer the broker still checks the
sequences of could lose its last batch to compaction, and be refused after a restart."""

from __future__ import annotations

import time

import pytest

from klog.broker import lifecycle
from klog.broker.batches import ProducerStates, RawAppender
from klog.errors import InvalidProducerEpochError
from klog.store import codec
from klog.store.cleaner import active_producers
from klog.store.producer_scan import PRODUCER_ID_EXPIRATION_MS
from tests.segment_files import leader_headers, write_keys

DAY = 86_400_000
SMALL_SEGMENTS = {"segment.bytes": "600", "index.interval.bytes": "100", "retention.ms": "-1"}


def _batch(pid: int, epoch: int, seq: int, ts: int, records: int = 1, attributes: int = 0) -> bytes:
    rows = [(b"k%d" % i, b"v" * 30, (), ts) for i in range(records)]
    return codec.write_batch(rows, base_offset=0, attributes=attributes, last_offset_delta=records - 1,
                             base_timestamp=ts, max_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq)


def _broker_view(store, topic: str, now: int) -> dict[int, tuple[int | None, int]]:
    """producer id -> (last data offset or None, epoch), as a restarted broker rebuilds them."""
    states = ProducerStates(clock=lambda: now).states((topic, 0), store.partition(topic, 0))
    out: dict[int, tuple[int | None, int]] = {}
    for pid, entry in states.items():
        last = entry.recent[-1] if entry.recent else None
        out[pid] = (None if last is None else last.base_offset + (last.last_seq - last.first_seq), entry.epoch)
    return out


def test_the_broker_and_the_cleaner_know_the_same_producers(store):
    store.create_topic("t", 1, configs=SMALL_SEGMENTS)
    now = int(time.time() * 1000)
    old = now - 3 * DAY
    appender = RawAppender(store)
    expired, lingering, idempotent = 7001, 7002, 7003
    for seq in range(6):  # a producer idle for 3 days, in segments of its own: expired
        appender.append("t", 0, _batch(expired, 0, seq, old), "all")
    for seq in range(6):  # another, in the newest old segment: still read (the walk stops after it)
        appender.append("t", 0, _batch(lingering, 2, seq, old + 1), "all")
    for seq in range(4):  # an idempotent producer now, one epoch then the next
        appender.append("t", 0, _batch(idempotent, 0, 2 * seq, now, records=2), "all")
    for seq in range(3):
        appender.append("t", 0, _batch(idempotent, 1, seq, now), "all")
    with store.producer(transactional_id="commits") as committing:
        with committing.transaction():
            committing.send("t", b"c1", key=b"c", partition=0)
            committing.send("t", b"c2", key=b"c", partition=0)
    with store.producer(transactional_id="aborts") as aborting:  # its one transaction aborted
        aborting.begin()
        aborting.send("t", b"a2", key=b"a", partition=0)
        aborting.flush()
        aborting.abort()
    appender.append("t", 0, _batch(idempotent, 1, 3, now), "all")
    leader = store.partition("t", 0).leader
    assert len(leader.bases) > 4

    broker = _broker_view(store, "t", now)
    assert broker == active_producers(leader, now, PRODUCER_ID_EXPIRATION_MS)
    assert expired not in broker
    end = store.partition("t", 0).high_watermark()
    assert broker[idempotent] == (end - 1, 1)
    assert broker[lingering][1] == 2
    assert {committing.producer_id, aborting.producer_id} <= set(broker)
    later = now + 2 * DAY  # the lingering producer's segment is past the walk now, for both alike
    assert lingering not in _broker_view(store, "t", later) == active_producers(leader, later)


def test_a_producer_fenced_by_its_transaction_s_timeout_is_at_the_marker_s_epoch_for_both(store):
    """The coordinator aborts a timed-out transaction at the next epoch (the producer fenced): its
    ABORT marker carries that epoch. Kafka's producer state takes it from the marker (and the
    cleaner's active producers did); the broker's kept the batches' epoch, so DescribeProducers
    showed the fenced epoch and a batch at it was taken, before and after a restart; and once a
    cleaning removed the aborted batch (the marker alone left), a restarted broker knew nothing of
    the producer."""
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.store.format import TRANSACTIONAL_FLAG_MASK

    store.create_topic("t", 1, configs={"cleanup.policy": "compact", **SMALL_SEGMENTS})
    clock = [int(time.time() * 1000)]
    appender = RawAppender(store)
    coordinator = TxnCoordinator(store, appender, clock=lambda: clock[0])
    ids = coordinator.init_producer_id("slow", 60_000)
    pid, epoch = ids.producer_id, ids.epoch
    coordinator.add_partitions("slow", pid, epoch, [("t", 0)])
    appender.append("t", 0, _batch(pid, epoch, 0, clock[0], attributes=TRANSACTIONAL_FLAG_MASK), "all",
                    lambda h: coordinator.check_append("slow", h.producer_id, h.producer_epoch, ("t", 0)))
    appender.append("t", 0, _batch(4242, 0, 0, clock[0]), "all")  # another producer, idempotent
    clock[0] += 60_001
    assert coordinator.tick() == ["transactional id 'slow': aborted after transaction.timeout.ms=60000 "
                                  "(producer epoch fenced)"]
    now = int(time.time() * 1000)
    assert _broker_view(store, "t", now) == active_producers(store.partition("t", 0).leader, now)
    assert _broker_view(store, "t", now)[pid] == (None, epoch + 1)
    for broker in (appender, RawAppender(store)):  # as it runs, and restarted (rebuilt from the log)
        assert (pid, epoch + 1, -1, -1, -1) in broker.active_producers("t", 0)  # DescribeProducers (no batch since)
        with pytest.raises(InvalidProducerEpochError):
            broker.append("t", 0, _batch(pid, epoch, 1, now), "all")

    write_keys(store, "t", [b"f%d" % i for i in range(12)], now)  # the transaction's segment sealed
    lifecycle.compact(store, "t")
    left = [(h.is_control, h.producer_epoch) for h in leader_headers(store, "t") if h.producer_id == pid]
    assert left == [(True, epoch + 1)]  # the aborted batch went, its marker stays (until its horizon)
    assert _broker_view(store, "t", now) == active_producers(store.partition("t", 0).leader, now)
    with pytest.raises(InvalidProducerEpochError):
        RawAppender(store).append("t", 0, _batch(pid, epoch, 0, now), "all")

"""The broker's producer states (rebuilt from the log on a partition's first idempotent write) and
the cleaner's active producers (whose last batches compaction keeps) come from one walk of the
log, klog.store.producer_scan: on a log of several producers they know the same producers, at the
same epoch and last data offset. Had they drifted apart, a producer the broker still checks the
sequences of could lose its last batch to compaction, and be refused after a restart."""

from __future__ import annotations

import time

from klog.broker.batches import ProducerStates, RawAppender
from klog.store import codec
from klog.store.cleaner import active_producers
from klog.store.producer_scan import PRODUCER_ID_EXPIRATION_MS

DAY = 86_400_000
SMALL_SEGMENTS = {"segment.bytes": "600", "index.interval.bytes": "100", "retention.ms": "-1"}


def _batch(pid: int, epoch: int, seq: int, ts: int, records: int = 1) -> bytes:
    rows = [(b"k%d" % i, b"v" * 30, (), ts) for i in range(records)]
    return codec.write_batch(rows, base_offset=0, attributes=0, last_offset_delta=records - 1, base_timestamp=ts,
                             max_timestamp=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _broker_view(store, topic: str, now: int) -> dict[int, tuple[int, int]]:
    """producer id -> (last data offset, epoch), as a restarted broker rebuilds them."""
    states = ProducerStates(clock=lambda: now).states((topic, 0), store.partition(topic, 0))
    out = {}
    for pid, entry in states.items():
        last = entry.recent[-1]
        out[pid] = (last.base_offset + (last.last_seq - last.first_seq), entry.epoch)
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

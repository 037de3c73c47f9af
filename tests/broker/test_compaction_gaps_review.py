"""A review of compaction's gaps (emptied batches and segments removed): what users see of them in
time retention, `dirs import` of a Kafka-compacted log and the readers after a policy change.

Method: compacted topics written through the public producer, cleaned with lifecycle.compact at
chosen clocks (or Kafka-format folders written byte by byte), then retained, imported, altered and
read back through `klog consume` / the store's consumer, compared with the records that must stay."""

from __future__ import annotations

import os
import time

import pytest

from klog.broker import lifecycle
from tests.broker.test_compaction import T0, clock_at
from tests.kafka_files import v2_batch, write_segment
from tests.segment_files import leader_headers, write_keys

DAY = 86_400_000
COMPACTED = {"cleanup.policy": "compact,delete", "segment.bytes": "600", "index.interval.bytes": "100",
             "retention.ms": "-1"}


def _offsets(cli, topic, *extra):
    r = cli("consume", topic, "-o", "beginning", "-F", "%o\\n", *extra)
    assert r.exit_code == 0, r.stderr
    return [int(o) for o in r.out.split()]


@pytest.mark.slow
def test_time_retention_goes_past_a_segment_the_cleaner_emptied(store):
    """A segment whose batches all went is an empty file, whose age retention takes from its
    modification time: the rewrite made it as new as the cleaning, so time retention stopped there
    and kept everything after it retention.ms longer (here: 10-day-old records kept with 1 day)."""
    store.create_topic("c", 1, configs=COMPACTED)
    # a key of its own every 12th record: segments of "x" only empty whole
    write_keys(store, "c", [b"u%d" % i if i % 12 == 0 else b"x" for i in range(60)], T0)
    lifecycle.compact(store, "c", clock=clock_at(T0 + 1000))
    leader = store.partition("c", 0).leader
    sizes = [os.path.getsize(leader.segments[b].log_path) for b in leader.bases]
    assert 0 in sizes[1:-1]  # an emptied segment between segments with records
    active = leader.bases[-1]
    store.alter_topic("c", set_configs={"retention.ms": str(DAY)})
    [result] = lifecycle.clean(store, "c", clock=clock_at(T0 + 10 * DAY))
    assert result.log_start_after == active  # every sealed segment was older than a day
    assert [r.offset for r in store.consumer("c")] == list(range(active, 60))


def _kafka_compacted_folder(tmp_path, gap_at_active=False):
    """A Kafka-compacted partition folder (its cleaner dropped emptied batches: no klog marker)."""
    now = int(time.time() * 1000) - 60_000
    folder = str(tmp_path / "k" / "cmp-0")
    if gap_at_active:  # the sealed segment ends in a gap: offsets 2..4 went, the active one starts at 5
        write_segment(folder, 0, [v2_batch(0, [(b"a", b"1", now), (b"b", b"2", now)])])
        write_segment(folder, 5, [v2_batch(5, [(b"c", b"3", now)])])
        return folder, [0, 1, 5]
    write_segment(folder, 0, [v2_batch(0, [(b"a", b"1", now), (b"b", b"2", now)]),
                              v2_batch(5, [(b"c", b"3", now)]), v2_batch(9, [(b"a", b"4", now)])])
    write_segment(folder, 12, [v2_batch(12, [(b"d", b"5", now)])])
    return folder, [0, 1, 5, 9, 12]


@pytest.mark.slow
def test_an_imported_kafka_compacted_log_reads_whole_after_its_policy_goes_to_delete(cli, tmp_path):
    """Kafka lets a compacted topic go to cleanup.policy=delete and reads its gaps on; klog's own
    cleaned logs keep a klog-cleaned marker for that, and an imported Kafka-cleaned log is the same
    log: it read "offsets 2..4 are missing", exit 1, once set to delete."""
    folder, want = _kafka_compacted_folder(tmp_path)
    assert cli("dirs", "import", folder).exit_code == 0
    assert cli("topics", "alter", "cmp", "-c", "cleanup.policy=delete").exit_code == 0
    assert _offsets(cli, "cmp") == want
    assert _offsets(cli, "cmp", "-o", "3") == want[2:]
    assert cli("produce", "cmp", "-K:", input=b"e:6\n").exit_code == 0
    assert _offsets(cli, "cmp") == [*want, 13]
    assert cli("verify").exit_code == 0


def test_an_imported_log_whose_gap_ends_at_its_active_segment_is_compacted(cli, tmp_path):
    """A Kafka cleaner's gap can end where the active segment starts (its last sealed batches
    emptied): the import took the topic for a delete-policy one, and every read failed."""
    folder, want = _kafka_compacted_folder(tmp_path, gap_at_active=True)
    r = cli("dirs", "import", folder)
    assert r.exit_code == 0 and "cleanup.policy=compact" in r.out + r.stderr, r.out + r.stderr
    assert _offsets(cli, "cmp") == want
    assert _offsets(cli, "cmp", "-o", "2") == want[2:]
    assert cli("verify").exit_code == 0


@pytest.mark.slow
def test_spark_reads_a_cleaned_topic_from_a_cluster_in_ranges_that_end_in_gaps(kafka_server, monkeypatch):
    """Spark's source cuts a partition into offset ranges; read from a cluster (kafka.bootstrap.servers),
    a range whose last offsets lie in a gap waited for records below its end that the cleaner had
    removed, then failed: 'no records from ... while reading c-0 [0, 8)'."""
    pytest.importorskip("pyarrow")
    from klog.spark.arrow import arrow_schema, read_range_remote
    from tests.broker.test_compaction_gaps import _spread_topic

    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "3")
    want = [o for o, _, _ in _spread_topic(kafka_server.store, every=12)]
    assert want[:3] == [0, 12, 24]
    kafka = (("bootstrap.servers", kafka_server.bootstrap),)
    for start, end in ((0, 8), (0, 12), (1, 12), (3, 30), (13, 24), (50, 60)):
        got = []
        for batch in read_range_remote(kafka, "c", 0, start, end, arrow_schema()):
            got += batch.column("offset").to_pylist()
        assert got == [o for o in want if start <= o < end], (start, end)


def test_an_idempotent_producer_writing_old_timestamps_goes_on_after_cleaning_and_a_restart(store):
    """A producer that writes old record timestamps (a mirror or a replay keeps the source's) is
    active for klog's producer state, which is rebuilt at a restart from every producer of the
    recent segments; the cleaner took it for expired by its timestamps and removed its emptied
    last batch, so the rebuild found an older one: 'sequence 12, expected 1', a fatal error for an
    idempotent client."""
    from klog.broker.batches import RawAppender
    from klog.store import codec

    store.create_topic("c", 1, configs={**COMPACTED, "cleanup.policy": "compact"})
    pid, now = 4242, int(time.time() * 1000)
    old = now - 2 * DAY

    def batch(seq, key):
        return codec.write_batch([(key, b"v" * 30, (), old)], base_offset=0, attributes=0, last_offset_delta=0,
                                 base_timestamp=old, max_timestamp=old, producer_id=pid, producer_epoch=0,
                                 base_sequence=seq)

    appender = RawAppender(store)
    others = []
    for seq in range(12):  # its records of "k" overwritten by another producer's, with recent timestamps
        appender.append("c", 0, batch(seq, b"a" if seq == 0 else b"k"), "all")
        others.append(codec.write_batch([(b"k", b"w" * 30, (), now)], base_offset=0, attributes=0,
                                        last_offset_delta=0, base_timestamp=now, max_timestamp=now))
        appender.append("c", 0, others[-1], "all")
    for i in range(8):
        appender.append("c", 0, codec.write_batch([(b"f%d" % i, b"w" * 30, (), now)], base_offset=0, attributes=0,
                                                  last_offset_delta=0, base_timestamp=now, max_timestamp=now), "all")
    lifecycle.compact(store, "c", clock=clock_at(now))
    fresh = RawAppender(store)  # a restart: the producer states are rebuilt from the log
    end = store.partition("c", 0).high_watermark()
    assert fresh.append("c", 0, batch(12, b"k"), "all").base_offset == end
    assert [r.offset for r in store.consumer("c", start=str(end))] == [end]


def _aborted_then_committed(store, topic, now):
    """Producer "tx" in partition 0: an aborted transaction (a-aborted), 14 plain batches, a committed
    transaction (b-committed), 14 plain batches, all at time `now`; its producer id."""
    with store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send(topic, b"a-aborted", key=b"a", partition=0)
        producer.flush()
        producer.abort()
        write_keys(store, topic, [b"f%d" % i for i in range(14)], now, step=0)
        with producer.transaction():
            producer.send(topic, b"b-committed", key=b"b", partition=0)
        write_keys(store, topic, [b"g%d" % i for i in range(14)], now, step=0)
        return producer.producer_id


@pytest.mark.slow
def test_a_committed_transaction_after_an_aborted_one_whose_marker_went_survives_cleaning(store):
    """In one long-lived store (klog serve and its cleaner), the aborted transactions the cleaner
    is handed come from the partition's shared StableView, which still lists one whose ABORT
    marker a cleaning removed. The cleaner then took the same producer's next transactional
    batches, committed ones, for that transaction's (no ABORT marker came to end it) and
    removed them: a committed record lost, for read_committed and read_uncommitted readers alike."""
    store.create_topic("t", 1, configs={**COMPACTED, "cleanup.policy": "compact", "delete.retention.ms": "1000"})
    now = int(time.time() * 1000)
    _aborted_then_committed(store, "t", now)
    markers = [h.base_offset for h in leader_headers(store, "t") if h.is_control]
    assert len(markers) == 2 and markers[-1] < store.partition("t", 0).leader.bases[-1]
    # the aborted batch goes, then its ABORT marker's horizon is set, then the marker goes
    for t in (0, 10, 2000, 4000):
        lifecycle.compact(store, "t", clock=clock_at(now + t))
    assert markers[0] not in {h.base_offset for h in leader_headers(store, "t")}
    for isolation in ("read_committed", "read_uncommitted"):
        got = {r.key: r.value for r in store.consumer("t", isolation_level=isolation)}
        assert got.get(b"b") == b"b-committed" and b"a" not in got, isolation


@pytest.mark.slow
def test_serve_names_no_aborted_transaction_whose_marker_the_cleaner_removed(kafka_server):
    """klog serve names a read_committed Fetch's aborted transactions from the partition's
    StableView, which a cleaning's swap left as it was: it went on naming a transaction whose
    batches and ABORT marker the cleaner had removed. A Kafka client (Java's Fetcher, librdkafka)
    then skips that producer's transactional batches from the named first offset until an ABORT
    marker of the producer, which no longer comes: the later committed ones (Kafka's broker reads
    the rewritten .txnindex and names none)."""
    from tests.serve_helpers import RawClient
    from tests.server.test_serve_loop_fetch import _fetch

    store = kafka_server.store
    store.create_topic("t", 1, configs={**COMPACTED, "cleanup.policy": "compact", "delete.retention.ms": "1000"})
    now = int(time.time() * 1000)
    pid = _aborted_then_committed(store, "t", now)
    with RawClient(kafka_server.port) as client:
        def named():
            [p] = _fetch(client, "t", {0: 0}, isolation_level=1).responses[0].partitions
            return [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]

        assert named() == [(pid, 0)]
        for t in (0, 10, 2000, 4000):  # the aborted batch goes, then its marker (after its horizon)
            lifecycle.compact(store, "t", clock=clock_at(now + t))
        assert 1 not in {h.base_offset for h in leader_headers(store, "t")}
        assert named() == []

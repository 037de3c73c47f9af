"""Retention and delete-records: which segments go, by Kafka's rules, on real and generated segments.

Method: segments are generated with known timestamps and sizes (tiny segment.bytes, explicit
record timestamps), retention runs with an injected clock, and every check looks at what a user
sees: the log start offset, the records a consumer reads, the files left in the partition folder.
The pure rule (`retention_cut`) is also checked against a step-by-step model of Kafka's three
passes on random segment lists (hypothesis).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import klog
from klog.broker import lifecycle
from klog.errors import OffsetOutOfRangeError
from klog.store.retention import SegmentFacts, retention_cut, segment_facts
from tests.conftest import REPO
from tests.klog_processes import klog_env, run_klog
from tests.serve_helpers import RawClient

T0 = 1_700_000_000_000
DAY = 86_400_000


def fill(store, topic, n, *, ts=lambda i: T0 + i, key=None, per_batch=1):
    """n records value-i, one batch per `per_batch` records, record i at timestamp ts(i)."""
    with store.producer() as p:
        for i in range(n):
            p.send(topic, b"value-%05d" % i, key=key, partition=0, timestamp=ts(i))
            if (i + 1) % per_batch == 0:
                p.flush()


def values(store, topic, **kw):
    return [r.value for r in store.consumer(topic, **kw)]


def segment_files(store, topic, suffix=".log"):
    d = store.partition(topic, 0).leader.directory
    return sorted(n for n in os.listdir(d) if n.endswith(suffix))


def facts(*spec):
    """(base, size, largest timestamp) triples -> SegmentFacts."""
    return [SegmentFacts(b, s, t) for b, s, t in spec]


# -- the rule, on generated segment lists --------------------------------------------------------
SEGS = facts((0, 100, 1000), (10, 100, 2000), (20, 100, 3000), (30, 100, 4000), (40, 50, 5000))


def test_time_retention_deletes_expired_prefix_only():
    # 1000 and 2000 are older than now - retention; 3000 is not
    assert retention_cut(SEGS, now_ms=3500, retention_ms=1000, retention_bytes=-1, high_watermark=45,
                         log_start_offset=0) == 20
    # a young segment in the middle stops deletion even though a later one is old
    mixed = facts((0, 100, 1000), (10, 100, 9000), (20, 100, 1000), (30, 10, 9000))
    assert retention_cut(mixed, now_ms=5000, retention_ms=1000, retention_bytes=-1, high_watermark=99,
                         log_start_offset=0) == 10


def test_time_retention_never_deletes_the_active_segment():
    assert retention_cut(SEGS, now_ms=10**12, retention_ms=0, retention_bytes=-1, high_watermark=10**9,
                         log_start_offset=0) == 40


def test_nothing_at_or_above_the_high_watermark_is_deleted():
    # segment 20 holds offsets 20..29; with HW 25 it is not wholly below the HW, so it stays
    assert retention_cut(SEGS, now_ms=10**12, retention_ms=0, retention_bytes=-1, high_watermark=25,
                         log_start_offset=0) == 20
    assert retention_cut(SEGS, now_ms=10**12, retention_ms=0, retention_bytes=-1, high_watermark=30,
                         log_start_offset=0) == 30


def test_size_retention_keeps_at_least_retention_bytes():
    # total 450; keep >= 200: deleting 0 and 10 leaves 250, deleting 20 too would leave 150
    assert retention_cut(SEGS, now_ms=0, retention_ms=-1, retention_bytes=200, high_watermark=45,
                         log_start_offset=0) == 20
    assert retention_cut(SEGS, now_ms=0, retention_ms=-1, retention_bytes=450, high_watermark=45,
                         log_start_offset=0) == 0
    assert retention_cut(SEGS, now_ms=0, retention_ms=-1, retention_bytes=0, high_watermark=45,
                         log_start_offset=0) == 40


def test_log_start_offset_breach_deletes_segments_below_it_even_without_retention():
    assert retention_cut(SEGS, now_ms=0, retention_ms=-1, retention_bytes=-1, high_watermark=45,
                         log_start_offset=25, delete_policy=False) == 25
    # policy compact: time and size do not apply
    assert retention_cut(SEGS, now_ms=10**12, retention_ms=0, retention_bytes=0, high_watermark=45,
                         log_start_offset=0, delete_policy=False) == 0


def kafka_passes(segs, now_ms, retention_ms, retention_bytes, hw, log_start):
    """Model: Kafka's three passes one after the other on what is left (UnifiedLog.deleteOldSegments)."""
    left = list(segs)

    def run(pred):
        while len(left) > 1 and left[1].base_offset <= hw and pred(left[0]):
            left.pop(0)

    if retention_ms >= 0:
        run(lambda s: now_ms - s.largest_timestamp_ms > retention_ms)
    if retention_bytes >= 0:
        diff = [sum(s.size_bytes for s in left) - retention_bytes]

        def by_size(s):
            if diff[0] - s.size_bytes >= 0:
                diff[0] -= s.size_bytes
                return True
            return False

        run(by_size)
    run(lambda s: left[1].base_offset <= log_start)
    return max(log_start, left[0].base_offset)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(0, 500), st.integers(0, 100)), min_size=1, max_size=8),
       st.integers(-1, 100), st.integers(-1, 3000), st.integers(0, 200), st.integers(0, 200), st.integers(0, 110))
def test_retention_cut_matches_kafkas_passes(spec, retention_ms, retention_bytes, hw, log_start, now):
    base, segs = 0, []
    for length, size, ts in spec:
        segs.append(SegmentFacts(base, size, ts))
        base += length
    log_start = min(log_start, hw)
    cut = retention_cut(segs, now_ms=now, retention_ms=retention_ms, retention_bytes=retention_bytes,
                        high_watermark=hw, log_start_offset=log_start)
    assert cut == kafka_passes(segs, now, retention_ms, retention_bytes, hw, log_start)
    assert cut <= max(log_start, segs[-1].base_offset)  # never past the active segment's base


# -- on real segments ----------------------------------------------------------------------------
@pytest.fixture
def seg_topic(store):
    # ~10 records (1 batch each) per segment: 100 records over about 10 segments. Retention is off
    # while the tests write (their timestamps are years old; a roll would apply retention at once)
    store.create_topic("t", partitions=1, configs={"segment.bytes": "800", "retention.ms": "-1"})
    return store


def retain(store, topic, **configs):
    store.alter_topic(topic, set_configs={k.replace("_", "."): str(v) for k, v in configs.items()})


def test_retention_by_time_on_real_segments(seg_topic):
    store = seg_topic
    fill(store, "t", 100, ts=lambda i: T0 + i * 60_000)  # one record a minute
    before = segment_facts(store.partition("t", 0).leader)
    assert len(before) >= 5
    # one day after the record at minute 50: every segment whose newest record is older than it goes
    now = T0 + 50 * 60_000 + DAY + 1
    retain(store, "t", retention_ms=DAY)
    result = lifecycle.clean(store, "t", clock=lambda: now / 1000)
    expected_start = next(f.base_offset for f in before if f.largest_timestamp_ms >= T0 + 50 * 60_000 + 1)
    assert result[0].log_start_after == expected_start
    assert store.offsets("t", -2) == {0: expected_start}
    assert values(store, "t") == [b"value-%05d" % i for i in range(expected_start, 100)]
    kept = [f.base_offset for f in before if f.base_offset >= expected_start]
    assert segment_files(store, "t") == [f"{b:020d}.log" for b in kept]
    # file.delete.delay.ms (60 s, Kafka's default): the removed segments linger as .deleted files
    gone = [f.base_offset for f in before if f.base_offset < expected_start]
    assert segment_files(store, "t", ".log.deleted") == [f"{b:020d}.log.deleted" for b in gone]
    assert result[0].segments_deleted == len(before) - len(kept)


def _age(paths, seconds):
    past = time.time() - seconds
    for path in paths:
        os.utime(path, (past, past))


def test_deleted_segments_are_unlinked_after_file_delete_delay_ms(seg_topic):
    """Retention renames a segment's files to .deleted; a reader holding the old segment open
    reads it whole; the files are unlinked by the first writer open (or retention pass) after
    file.delete.delay.ms, not before; with 0 they go at once."""
    store = seg_topic
    retain(store, "t", file_delete_delay_ms=30_000)
    fill(store, "t", 100)
    d = store.partition("t", 0).leader.directory
    first = os.path.join(d, segment_files(store, "t")[0])
    with open(first, "rb") as reader:
        lifecycle.delete_records(store, "t", before_offset=60)
        deleted = [os.path.join(d, n) for n in segment_files(store, "t", ".deleted")]
        assert any(p.endswith(".log.deleted") for p in deleted) and not os.path.exists(first)
        assert b"value-00000" in reader.read()  # still readable through the open file
    fill(store, "t", 1)  # a writer opens: the delay is not over
    assert all(os.path.exists(p) for p in deleted)
    _age(deleted, 29)
    lifecycle.clean(store, "t")
    assert all(os.path.exists(p) for p in deleted)
    _age(deleted, 31)
    lifecycle.clean(store, "t")
    assert segment_files(store, "t", ".deleted") == []
    lifecycle.delete_records(store, "t", before_offset=70)
    deleted = [os.path.join(d, n) for n in segment_files(store, "t", ".deleted")]
    assert deleted
    _age(deleted, 31)
    store.partition("t", 0).leader.deleted_files_due = time.time()  # a long-lived writer: due now
    lifecycle.delete_records(store, "t", before_offset=71)  # deletes nothing new, sweeps what is due
    assert segment_files(store, "t", ".deleted") == []
    retain(store, "t", file_delete_delay_ms=0)
    lifecycle.delete_records(store, "t", before_offset=90)
    assert segment_files(store, "t", ".deleted") == []


def test_retention_by_size_on_real_segments(seg_topic):
    store = seg_topic
    fill(store, "t", 100)
    retain(store, "t", retention_bytes=3000)
    before = segment_facts(store.partition("t", 0).leader)
    total = sum(f.size_bytes for f in before)
    lifecycle.clean(store, "t", clock=lambda: T0 / 1000)
    after = segment_facts(store.partition("t", 0).leader)
    remaining = sum(f.size_bytes for f in after)
    assert remaining >= 3000  # Kafka keeps at least retention.bytes
    assert remaining - after[0].size_bytes < 3000  # and deleting one more would go below it
    assert remaining < total
    assert values(store, "t")[0] == b"value-%05d" % after[0].base_offset


def test_active_segment_survives_when_everything_expired(seg_topic):
    store = seg_topic
    fill(store, "t", 100)
    active = store.partition("t", 0).leader.bases[-1]
    retain(store, "t", retention_ms=DAY)
    lifecycle.clean(store, "t", clock=lambda: (T0 + 10 * DAY) / 1000)
    assert segment_files(store, "t") == [f"{active:020d}.log"]
    assert values(store, "t") == [b"value-%05d" % i for i in range(active, 100)]
    retain(store, "t", retention_ms=-1)
    fill(store, "t", 3, ts=lambda i: T0 + 10 * DAY)  # appends continue at the right offsets
    assert [r.offset for r in store.consumer("t")][-3:] == [100, 101, 102]


def test_segments_reaching_the_high_watermark_are_kept(seg_topic):
    store = seg_topic
    fill(store, "t", 100)
    leader = store.partition("t", 0).leader
    segs = segment_facts(leader)
    hw = segs[3].base_offset + 1  # inside the 4th segment
    cut = retention_cut(segs, now_ms=T0 + 10 * DAY, retention_ms=0, retention_bytes=-1, high_watermark=hw,
                        log_start_offset=0)
    # segments 0-2 end below the HW and go; segment 3 holds offsets at and above it, so it and all after stay
    assert cut == segs[3].base_offset


def test_producer_rolling_a_segment_runs_retention(seg_topic):
    store = seg_topic
    fill(store, "t", 50, ts=lambda i: T0)  # long expired by the wall clock
    assert store.offsets("t", -2) == {0: 0}
    retain(store, "t", retention_ms=DAY)
    fill(store, "t", 30, ts=lambda i: 2 * 10**12)  # new records: the next roll deletes the expired segments
    start = store.offsets("t", -2)[0]
    assert start >= 50
    assert values(store, "t")[0] == b"value-%05d" % (start - 50)


def test_compact_policy_is_not_deleted_by_time(store):
    store.create_topic("c", partitions=1, configs={"segment.bytes": "800", "retention.ms": "1",
                                                   "cleanup.policy": "compact"})
    fill(store, "c", 40, key=b"k", ts=lambda i: T0)
    lifecycle.clean_partition(store, "c", 0, clock=lambda: (T0 + DAY) / 1000)
    assert store.offsets("c", -2) == {0: 0}


def test_leftover_deleted_files_are_removed_when_a_writer_opens(seg_topic):
    store = seg_topic
    fill(store, "t", 30)
    d = store.partition("t", 0).leader.directory
    stray = os.path.join(d, f"{0:020d}.log.deleted")
    young = os.path.join(d, f"{0:020d}.index.deleted")
    with store.partition("t", 0).lock:  # left by a writer (lock held) killed mid-way
        for path in (stray, young):
            with open(path, "wb") as f:
                f.write(b"junk")
    _age([stray], 61)
    fill(store, "t", 1)
    assert not os.path.exists(stray)
    assert os.path.exists(young)  # file.delete.delay.ms (60 s) counts from its retirement


# -- delete-records ------------------------------------------------------------------------------
def test_delete_records_before_an_offset_mid_segment(seg_topic):
    store = seg_topic
    fill(store, "t", 100)
    result = lifecycle.delete_records(store, "t", before_offset=37)
    assert result[0].log_start_after == 37
    assert values(store, "t") == [b"value-%05d" % i for i in range(37, 100)]
    assert values(store, "t", start="5") == [b"value-%05d" % i for i in range(37, 100)]
    assert store.offsets("t", T0) == {0: 37}  # a time before the log start answers the log start
    bases = [int(n[:20]) for n in segment_files(store, "t")]
    assert bases[0] <= 37 and (len(bases) == 1 or bases[1] > 37)  # segments wholly below 37 are gone
    # the log start only moves up
    lifecycle.delete_records(store, "t", before_offset=10)
    assert store.offsets("t", -2) == {0: 37}


def test_delete_records_by_time_and_past_the_end(seg_topic):
    store = seg_topic
    fill(store, "t", 100, ts=lambda i: T0 + i * 1000)
    lifecycle.delete_records(store, "t", before_ms=T0 + 60_000)
    assert values(store, "t")[0] == b"value-00060"
    with pytest.raises(OffsetOutOfRangeError):
        lifecycle.delete_records(store, "t", before_offset=101)


def test_delete_records_cli(seg_topic, cli):
    fill(seg_topic, "t", 20)
    r = cli("topics", "delete-records", "t", "--before", "12", "-p", "0")
    assert r.exit_code == 0, r.stderr
    assert "log start 12" in r.stderr
    assert cli("consume", "t", "-n", "1").out == "value-00012\n"
    r = cli("topics", "delete-records", "t", "--before", "99999")
    assert r.exit_code == 1 and "past the high watermark" in r.stderr
    r = cli("topics", "delete-records", "t", "--before", "soon")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    r = cli("topics", "describe", "t", "--json")
    assert '"log_start_offset": 12' in r.out


@pytest.fixture
def replicated(tmp_path):
    """A store on two disks with topic `r`: one partition on both, small segments, no time retention."""
    with klog.Store(str(tmp_path / "data"), log_dirs=[str(tmp_path / f"disk{i}") for i in range(2)]) as store:
        store.create_topic("r", partitions=1, replication_factor=2,
                           configs={"segment.bytes": "800", "retention.ms": "-1"})
        yield store


def test_retention_keeps_replicas_consistent_and_a_new_follower_starts_at_the_log_start(replicated):
    store = replicated
    fill(store, "r", 60)
    lifecycle.delete_records(store, "r", before_offset=33)
    part = store.partition("r", 0)
    lists = [[n for n in sorted(os.listdir(r.directory)) if n.endswith(".log")] for r in part.replicas]
    assert len(part.replicas) == 2 and lists[0] == lists[1]
    follower = part.replicas[1].directory
    shutil.rmtree(follower)  # a lost disk: the follower is rebuilt from the leader's log start
    fill(store, "r", 5)
    assert [r.offset for r in store.consumer("r")] == list(range(33, 65))
    rebuilt = [int(n[:20]) for n in os.listdir(follower) if n.endswith(".log")]
    assert min(rebuilt) >= part.leader.bases[0]
    assert sorted(store.topics.get("r").partitions[0].isr) == [0, 1]  # caught up and back in sync


def test_a_lagging_follower_behind_the_leaders_log_start_restarts_there(replicated):
    store = replicated
    fill(store, "r", 20)
    meta = store.topics.get("r").partitions[0]
    away = store.data_dir.log_dir_path(next(d for d in meta.replicas if d != meta.leader))
    os.rename(away, away + ".unplugged")  # the follower's disk is gone: it leaves the ISR at 20
    fill(store, "r", 40)
    lifecycle.delete_records(store, "r", before_offset=45)  # past the follower's end
    os.rename(away + ".unplugged", away)  # back: the next writer catches it up from the log start
    fill(store, "r", 1)
    assert sorted(store.topics.get("r").partitions[0].isr) == [0, 1]
    leader = store.partition("r", 0).leader
    follower = next(r for r in store.partition("r", 0).replicas if r is not leader)
    assert follower.first_offset() == leader.first_offset() > 20
    assert follower.log_end_offset == leader.log_end_offset == 61


RETENTION_CHILD = """
import sys, klog
from klog.broker import lifecycle
with klog.open(sys.argv[1]) as store:
    lifecycle.delete_records(store, "t", before_offset=int(sys.argv[2]))
"""


@pytest.mark.parametrize("step", ["retention-log-start", "retention-renamed"])
def test_sigkill_during_retention_leaves_a_valid_log_and_the_next_writer_finishes(data_dir, step):
    import subprocess
    import sys

    from klog.store.faults import CRASH_ENV

    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=1, configs={"segment.bytes": "800", "retention.ms": "-1",
                                                       "file.delete.delay.ms": "0"})
        fill(store, "t", 100)
    env = {**os.environ, CRASH_ENV: step, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-c", RETENTION_CHILD, data_dir, "55"], env=env, timeout=60)
    assert proc.returncode == -9
    with klog.open(data_dir) as store:
        assert store.offsets("t", -2) == {0: 55}  # the log start was persisted first
        assert values(store, "t") == [b"value-%05d" % i for i in range(55, 100)]
        lifecycle.clean(store, "t")  # a writer opens: leftovers go, segments below the start go
        bases = [int(n[:20]) for n in segment_files(store, "t")]
        assert bases[0] <= 55 and (len(bases) == 1 or bases[1] > 55)
        assert segment_files(store, "t", ".deleted") == []
        assert values(store, "t") == [b"value-%05d" % i for i in range(55, 100)]


@pytest.mark.slow
def test_a_roll_after_the_oldest_segment_expires_still_deletes_it(seg_topic):
    """Rolls skip retention while the oldest segment has not expired (lifecycle's retention hint);
    once the wall clock passes its retention, the next roll deletes it."""
    store = seg_topic
    retain(store, "t", retention_ms=60_000)
    soon = int(time.time() * 1000) - 60_000 + 1_500  # expires 1.5 s from now
    fill(store, "t", 30, ts=lambda i: soon)  # several rolls: the hint is taken, nothing is due
    assert store.offsets("t", -2) == {0: 0}
    time.sleep(2)
    fill(store, "t", 30, ts=lambda i: int(time.time() * 1000))  # the next roll finds it expired
    assert store.offsets("t", -2)[0] > 0


def test_a_roll_after_delete_records_elsewhere_still_deletes_below_the_log_start(seg_topic):
    store = seg_topic
    now = int(time.time() * 1000)
    fill(store, "t", 30, ts=lambda i: now)
    with klog.open(store.path) as other:  # another process's delete-records moves the log start only
        other.partition("t", 0).set_log_start_offset(25)
    first = segment_files(store, "t")[0]
    fill(store, "t", 30, ts=lambda i: now)
    assert segment_files(store, "t")[0] != first


def test_dirs_list_counts_segment_bytes_as_topics_describe_and_kafka_do(seg_topic, cli):
    """Kafka's DescribeLogDirs reports each replica's UnifiedLog.size: the bytes of its segments'
    .log files. Segments retention removed and that wait out file.delete.delay.ms as .deleted
    files, the indexes and klog's state files are in neither figure."""
    fill(seg_topic, "t", 40)
    assert cli("topics", "delete-records", "t", "--before", "25").exit_code == 0
    assert segment_files(seg_topic, "t", ".log.deleted")  # still on disk for 60 s
    folder = seg_topic.partition("t", 0).leader.directory
    logs = sum(os.path.getsize(os.path.join(folder, n)) for n in segment_files(seg_topic, "t", ".log"))
    listed = json.loads(cli("dirs", "list", "--json").out)["size_bytes"]
    described = json.loads(cli("topics", "describe", "t", "--json").out)["partitions"][0]["size_bytes"]
    assert listed == described == logs


def _live_log_bytes(folder: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*.log")))


def _with_deleted_files(cli, topic: str, delay_ms: int | None = None) -> None:
    """A topic whose retention has renamed segments to `.deleted` (several produce runs, one
    segment each, then retention.bytes keeps the last ~2). In-process runs of the same commands:
    the tests' reads and kills are the real processes."""
    configs = ["-c", "segment.bytes=1024", "-c", "retention.bytes=2048"]
    if delay_ms is not None:
        configs += ["-c", f"file.delete.delay.ms={delay_ms}"]
    assert cli("topics", "create", topic, *configs).exit_code == 0
    for i in range(6):
        assert cli("produce", topic, input=b"".join(b"%d-%d\n" % (i, n) for n in range(100))).exit_code == 0
    assert cli("topics", "clean", topic).exit_code == 0


@pytest.mark.slow
def test_deleted_files_are_ignored_by_verify_describe_dump_consume_and_import(cli, klog_proc, data_dir, tmp_path):
    _with_deleted_files(cli, "ret")
    folder = os.path.join(data_dir, "logs", "ret-0")
    deleted = sorted(n for n in os.listdir(folder) if n.endswith(".deleted"))
    assert any(n.endswith(".log.deleted") for n in deleted)  # the default delay keeps them 60 s

    verify = klog_proc("verify", "ret")
    assert verify.returncode == 0 and b"deleted" not in verify.stdout + verify.stderr

    (described,) = json.loads(klog_proc("topics", "describe", "ret", "--json").stdout)["partitions"]
    assert described["size_bytes"] == _live_log_bytes(folder)  # the live segments, not the retired ones
    assert described["segments"] == len(glob.glob(os.path.join(folder, "*.log")))
    start = json.loads(klog_proc("offsets", "ret", "--json").stdout)["earliest"]
    assert start > 0

    dump = klog_proc("dump", folder)
    assert dump.returncode == 0
    dumped = [line for line in dump.stdout.decode().splitlines() if line.startswith("Dumping")]
    assert dumped and not any(line.endswith(".deleted") for line in dumped)

    consumed = klog_proc("consume", "ret")
    assert consumed.returncode == 0
    lines = consumed.stdout.decode().splitlines()
    assert len(lines) == 600 - start and lines[-1] == "5-99"

    kafka = tmp_path / "kafka"
    shutil.copytree(folder, kafka / "imp-0")
    os.unlink(kafka / "imp-0" / "klog-replica.state")
    other = str(tmp_path / "other")
    imported = klog_proc("dirs", "import", str(kafka), "-d", other)
    assert imported.returncode == 0, imported.stderr
    assert not [n for n in os.listdir(os.path.join(other, "logs", "imp-0")) if n.endswith(".deleted")]
    assert klog_proc("consume", "imp", "-d", other).stdout.decode().splitlines() == lines


def test_describe_log_dirs_counts_live_segments_only(cli, data_dir):
    from klog.server import Server

    _with_deleted_files(cli, "dl")
    folder = os.path.join(data_dir, "logs", "dl-0")
    assert glob.glob(os.path.join(folder, "*.log.deleted"))
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as client:
        resp = client.send(35, 4, topics=None)
    (topic,) = [t for r in resp.results for t in r.topics if t.name == "dl"]
    assert [p.partition_size for p in topic.partitions] == [_live_log_bytes(folder)]


@pytest.mark.slow
def test_expired_deleted_files_go_at_the_next_writer_open_and_topics_delete_takes_them(cli, klog_proc,
                                                                                       data_dir):
    _with_deleted_files(cli, "exp", delay_ms=300)
    folder = os.path.join(data_dir, "logs", "exp-0")
    assert glob.glob(os.path.join(folder, "*.deleted"))  # not yet: 300 ms
    time.sleep(0.5)
    assert klog_proc("produce", "exp", input=b"more\n").returncode == 0  # a writer open removes them
    assert not glob.glob(os.path.join(folder, "*.deleted"))
    assert klog_proc("consume", "exp").stdout.decode().splitlines()[-1] == "more"

    _with_deleted_files(cli, "gone")
    assert glob.glob(os.path.join(data_dir, "logs", "gone-0", "*.deleted"))
    assert klog_proc("topics", "delete", "gone", "--yes").returncode == 0
    assert not os.path.exists(os.path.join(data_dir, "logs", "gone-0"))


@pytest.mark.slow
def test_a_writer_killed_after_retention_reopens_clean(cli, klog_proc, data_dir):
    """kill -9 of a producer whose retention left `.deleted` files: the next run reads and writes."""
    _with_deleted_files(cli, "k9")
    proc = subprocess.Popen([sys.executable, "-m", "klog", "produce", "k9"], stdin=subprocess.PIPE,
                            env=klog_env(data_dir), stderr=subprocess.DEVNULL)
    try:
        proc.stdin.write(b"x\n" * 2000)
        proc.stdin.flush()
        time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait(10)
    assert klog_proc("verify", "k9").returncode == 0
    assert klog_proc("produce", "k9", input=b"after\n").returncode == 0
    out = klog_proc("consume", "k9")
    assert out.returncode == 0 and out.stdout.decode().splitlines()[-1] == "after"


@pytest.mark.slow
def test_dirs_list_and_topics_describe_agree_while_deleted_files_wait(data_dir):
    """Retention renames old segments to .deleted and leaves them for file.delete.delay.ms: the
    size both commands show is the live segments' .log bytes only, the same figure in both."""
    assert run_klog(data_dir, "topics", "create", "t", "-c", "segment.bytes=1000", "-c", "retention.bytes=3000",
                 "-c", "file.delete.delay.ms=600000").returncode == 0
    lines = "".join(f"{i:04d}-{'x' * 30}\n" for i in range(300))
    r = subprocess.run([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "500"], input=lines.encode(),
                       capture_output=True, env=klog_env(data_dir), timeout=60)
    assert r.returncode == 0, r.stderr
    assert run_klog(data_dir, "topics", "clean").returncode == 0
    folder = os.path.join(data_dir, "logs", "t-0")
    names = os.listdir(folder)
    assert any(n.endswith(".deleted") for n in names), names
    live = sum(os.path.getsize(os.path.join(folder, n)) for n in names if n.endswith(".log"))
    dirs = json.loads(run_klog(data_dir, "dirs", "list", "--json").stdout.splitlines()[0])
    described = json.loads(run_klog(data_dir, "topics", "describe", "t", "--json").stdout)["partitions"][0]
    assert dirs["size_bytes"] == described["size_bytes"] == live
    assert live <= 3000 + 1000

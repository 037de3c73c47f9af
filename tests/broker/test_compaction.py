"""Compaction: Kafka's LogCleaner semantics, offsets preserved, crash-safe swaps, replicas alike.

Method: keyed workloads are written over many tiny segments (segment.bytes of a few hundred
bytes), compacted with an injected clock, and read back through the public consumer; the model
is "the last record of each key below the first uncleanable offset, and everything from there
on", at the records' own offsets. Crash safety is proven with real SIGKILLs of a compacting
child process at every named step of the swap (klog.store.faults.CRASH_STEPS, via
$KLOG_CRASH_AT), then a writer opening the log. kafka-python decodes the rewritten segments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import klog
from klog.broker import lifecycle
from klog.broker.verify import verify_store
from klog.store.faults import CRASH_ENV, CRASH_STEPS
from tests.conftest import REPO
from tests.klog_processes import ROLLING_SEGMENT_BYTES, klog_env, race_a_producer, read_all, run_klog

T0 = 1_700_000_000_000
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "600", "index.interval.bytes": "100",
             "retention.ms": "-1"}


def clock_at(ms):
    return lambda: ms / 1000


def write(store, topic, records, per_batch=1, compression="none"):
    """records: (key, value) pairs, record i at timestamp T0 + i; returns [(offset, key, value, ts)]."""
    out = []
    with store.producer(compression_type=compression) as p:
        pending = []
        for i, (key, value) in enumerate(records):
            pending.append((p.send(topic, value, key=key, partition=0, timestamp=T0 + i,
                                   headers=[("i", str(i).encode())]), key, value, T0 + i))
            if (i + 1) % per_batch == 0:
                p.flush()
        p.flush()
    for sent, key, value, ts in pending:
        out.append((sent.offset, key, value, ts))
    return out


def read(store, topic):
    return [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in store.consumer(topic)]


def expected_after(written, first_uncleanable, expired_tombstones=False):
    """The model: below first_uncleanable only each key's last record stays; above, everything."""
    last = {}
    for offset, key, _, _ in written:
        if offset < first_uncleanable:
            last[key] = offset
    out = []
    for offset, key, value, ts in written:
        if offset >= first_uncleanable:
            out.append((offset, key, value, ts))
        elif last[key] == offset and not (expired_tombstones and value is None):
            out.append((offset, key, value, ts))
    return out


def active_base(store, topic):
    return store.partition(topic, 0).leader.bases[-1]


def strip_headers(rows):
    return [r[:4] for r in rows]


# -- the model, on random workloads ------------------------------------------------------------
workloads = st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), st.binary(min_size=0, max_size=30))),
                     min_size=1, max_size=120)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.integers(1, 7), st.sampled_from(["none", "gzip", "zstd"]))
def test_compacted_log_is_the_last_value_per_key_at_the_same_offsets(workload, per_batch, compression):
    with tempfile.TemporaryDirectory() as d, klog.open(d) as store:
        store.create_topic("c", partitions=1, configs=COMPACTED)
        records = [(b"key-%d" % k, v) for k, v in workload]
        written = write(store, "c", records, per_batch, compression)
        before_active = active_base(store, "c")
        lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
        got = read(store, "c")
        assert strip_headers(got) == expected_after(written, before_active)
        assert all(h == [("i", str(o).encode())] for o, _, _, _, h in got)  # headers kept, offsets unchanged
        assert active_base(store, "c") == before_active  # the active segment is untouched
        assert all(r["ok"] for r in verify_store(store))  # CRCs, batch structure and rebuilt indexes check out
        # a second compaction changes nothing, and appends continue after the compacted log
        lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
        assert read(store, "c") == got
        more = write(store, "c", [(b"key-0", b"after")])
        assert more[0][0] == written[-1][0] + 1


def test_tombstones_survive_delete_retention_ms_then_go(store):
    store.create_topic("c", partitions=1, configs={**COMPACTED, "delete.retention.ms": "1000"})
    written = write(store, "c", [(b"a", b"1"), (b"b", b"1"), (b"a", None), (b"b", b"2")] * 1
                    + [(b"filler-%d" % i, b"x" * 40) for i in range(30)])
    tombstone_offset = written[2][0]
    assert tombstone_offset < active_base(store, "c")
    now = T0 + 5_000_000
    lifecycle.compact(store, "c", clock=clock_at(now))  # the first cleaning sets the delete horizon
    keys = {r[1]: r for r in read(store, "c")}
    assert keys[b"a"][0] == tombstone_offset and keys[b"a"][2] is None  # the delete is still visible
    assert keys[b"a"][3] == written[2][3]  # with its own timestamp (the horizon lives in the batch header)
    lifecycle.compact(store, "c", clock=clock_at(now + 999))
    assert b"a" in {r[1] for r in read(store, "c")}
    result = lifecycle.compact(store, "c", clock=clock_at(now + 1000))
    assert b"a" not in {r[1] for r in read(store, "c")}
    assert result[0].tombstones_removed == 1
    assert {r[1]: r[2] for r in read(store, "c")}[b"b"] == b"2"


def test_dirty_ratio_gates_automatic_cleaning_and_describe_shows_it(store, cli):
    store.create_topic("c", partitions=1, configs={**COMPACTED, "min.cleanable.dirty.ratio": "0.5"})
    # 30 keys: the clean part keeps 30 records (the emptied batches go), so that a little new dirt is below the ratio
    write(store, "c", [(b"k%d" % (i % 30), b"v" * 30) for i in range(60)])
    assert lifecycle.dirty_ratio(store, "c", 0) == 1.0
    r = cli("topics", "describe", "c")
    assert "DIRTY-RATIO" in r.out and "1.00" in r.out
    first = lifecycle.clean(store, "c", clock=clock_at(T0 + 10**6))[0]
    assert first.compacted and first.records_removed > 0
    assert lifecycle.dirty_ratio(store, "c", 0) == 0.0
    write(store, "c", [(b"k0", b"w" * 30) for _ in range(12)])  # a little new dirt: below the ratio
    ratio = lifecycle.dirty_ratio(store, "c", 0)
    assert 0 < ratio < 0.5
    assert not lifecycle.clean(store, "c", clock=clock_at(T0 + 10**6))[0].compacted
    store.alter_topic("c", set_configs={"min.cleanable.dirty.ratio": "0.01"})
    assert lifecycle.clean(store, "c", clock=clock_at(T0 + 10**6))[0].compacted


def test_min_compaction_lag_keeps_young_segments_dirty(store):
    store.create_topic("c", partitions=1, configs={**COMPACTED, "min.compaction.lag.ms": "50"})
    written = write(store, "c", [(b"k", b"v%03d" % i) for i in range(100)])  # timestamps T0 .. T0+99
    lifecycle.compact(store, "c", clock=clock_at(T0 + 100))  # records newer than T0+50 are too young
    got = read(store, "c")
    young = [w for w in written if w[3] > T0 + 50]
    assert strip_headers(got)[-len(young):] == young  # every young record is still there
    assert len(got) < len(written)  # and the old ones were compacted


def test_active_segment_bytes_are_untouched(store):
    store.create_topic("c", partitions=1, configs=COMPACTED)
    write(store, "c", [(b"k", b"v%03d" % i) for i in range(50)])
    leader = store.partition("c", 0).leader
    path = leader.segments[leader.bases[-1]].log_path
    before = open(path, "rb").read()
    lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
    assert open(path, "rb").read() == before


def test_compacted_segments_decode_with_kafka_python(store):
    MemoryRecords = pytest.importorskip("kafka.record.memory_records").MemoryRecords
    store.create_topic("c", partitions=1, configs={**COMPACTED, "delete.retention.ms": "1000"})
    keys = [b"rare" if i in (10, 31) else b"k%d" % (i % 4) for i in range(80)]
    write(store, "c", [(k, None if i % 9 == 0 else b"v%d" % i) for i, k in enumerate(keys)], per_batch=3)
    lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
    ours = [(r[0], r[1], r[2], r[3]) for r in read(store, "c")]
    theirs = []
    leader = store.partition("c", 0).leader
    for base in leader.bases:
        with open(leader.segments[base].log_path, "rb") as f:
            records = MemoryRecords(f.read())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            theirs += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    assert theirs == ours
    assert any(b - a > 1 for (a, *_), (b, *_) in zip(ours, ours[1:], strict=False))  # there are gaps


def test_replicas_compact_alike(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        store.create_topic("c", partitions=1, replication_factor=2, configs=COMPACTED)
        write(store, "c", [(b"k%d" % (i % 5), b"v%d" % i) for i in range(120)])
        lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
        part = store.partition("c", 0)
        assert len(part.replicas) == 2
        contents = []
        for replica in part.replicas:
            data = b""
            for base in replica.bases:
                with open(replica.segments[base].log_path, "rb") as f:
                    data += f.read()
            contents.append(data)
        assert contents[0] == contents[1]


def test_a_reader_in_the_middle_of_a_compaction_reads_valid_records(store):
    store.create_topic("c", partitions=1, configs=COMPACTED)
    written = write(store, "c", [(b"k%d" % (i % 4), b"v%03d" % i) for i in range(200)])
    original = {w[0]: w for w in written}
    consumer = store.consumer("c")
    it = iter(consumer)
    first = [next(it) for _ in range(30)]
    with klog.open(store.path) as other:  # another writer process compacts under the reader
        lifecycle.compact(other, "c", clock=clock_at(T0 + 10**6))
    rest = list(it)
    seen = first + rest
    offsets = [r.offset for r in seen]
    assert offsets == sorted(set(offsets))
    assert all(original[r.offset][1:3] == (r.key, r.value) for r in seen)
    assert {r.key: r.value for r in seen} == {w[1]: w[2] for w in written}  # every key's latest value


def test_keyless_records_are_refused_on_compacted_topics(store, cli):
    store.create_topic("c", partitions=1, configs=COMPACTED)
    r = cli("produce", "c", input=b"no key\n")
    assert r.exit_code == 2 and "needs a key" in r.stderr


def test_compact_cli(store, cli):
    store.create_topic("c", partitions=1, configs=COMPACTED)
    store.create_topic("plain", partitions=1)
    write(store, "c", [(b"k", b"v%d" % i) for i in range(60)])
    r = cli("topics", "compact", "c")
    assert r.exit_code == 0, r.stderr
    assert "Compacted c-0" in r.stderr and "records removed" in r.stderr
    # consume's fast path (values only, one partition) and the JSON path both step over the gaps
    survivors = [(r[1], r[2]) for r in read(store, "c")]
    assert cli("consume", "c").out == "".join(v.decode() + "\n" for _, v in survivors)
    assert cli("consume", "c", "--json").out.count("\n") == len(survivors) < 60
    r = cli("topics", "compact", "plain")
    assert r.exit_code == 2 and "not compacted" in r.stderr and r.stderr.count("\n") == 1
    r = cli("topics", "clean", "--json")
    assert r.exit_code == 0 and '"topic": "plain"' in r.out


# -- crash safety: real SIGKILLs at every step ---------------------------------------------------
CHILD = """
import sys, klog
from klog.broker import lifecycle
with klog.open(sys.argv[1]) as store:
    lifecycle.compact(store, "c", clock=lambda: %d / 1000)
print("finished")
"""


COMPACTION_STEPS = [s for s in CRASH_STEPS
                    if not s.startswith(("retention", "roll", "sealed", "first", "loop", "discard", "move",
                                         "catch-up"))]


@pytest.mark.parametrize("step", [f"{s}:{n}" for s in COMPACTION_STEPS for n in (1, 3) if s != "before-checkpoint"]
                         + ["before-checkpoint"])
def test_sigkill_during_compaction_leaves_old_or_new_segments_and_loses_nothing(tmp_path, step):
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("c", partitions=1, configs=COMPACTED)
        written = write(store, "c", [(b"k%d" % (i % 6), b"v%03d" % i) for i in range(150)], per_batch=2)
        boundary = active_base(store, "c")
    now = T0 + 10**6
    env = {**os.environ, CRASH_ENV: step, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-c", CHILD % now, data], env=env, capture_output=True, timeout=60)
    assert proc.returncode == -9, (proc.returncode, proc.stderr.decode()[-500:])  # it was killed there
    original = {w[0]: w for w in written}
    model = strip_headers(expected_after(written, boundary))
    with klog.open(data) as store:
        # readers before any writer opens: every record is an original one, every key's latest is there
        seen = strip_headers(read(store, "c"))
        assert all(original[r[0]] == r for r in seen)
        assert set(model) <= set(seen)
        # a writer opens the log (recovery finishes or rolls back the swap); no temporary file is left
        write(store, "c", [(b"k0", b"after")])
        folder = store.partition("c", 0).leader.directory
        assert [n for n in os.listdir(folder) if n.endswith((".cleaned", ".swap", ".deleted"))] == []
        seen = strip_headers(read(store, "c"))
        assert set(model) <= set(seen) and all(original.get(r[0], r) == r for r in seen)
        # compacting again reaches exactly the uninterrupted result
        lifecycle.compact(store, "c", clock=clock_at(now))
        assert strip_headers(read(store, "c"))[:-1] == model
        assert all(r["ok"] for r in verify_store(store))
        # and removes what the killed cleaning left (it writes without the partition's lock)
        assert [n for n in os.listdir(folder) if n.endswith(".cleaning")] == []


def test_describe_json_has_the_dirty_ratio_of_compacted_topics_only(store, cli):

    store.create_topic("c", partitions=2, configs=COMPACTED)
    store.create_topic("plain", partitions=1)
    doc = json.loads(cli("topics", "describe", "c", "--json").out)
    assert [p["dirty_ratio"] for p in doc["partitions"]] == [0.0, 0.0]
    doc = json.loads(cli("topics", "describe", "plain", "--json").out)
    assert "dirty_ratio" not in doc["partitions"][0]


def test_a_damaged_segment_stops_compaction_with_file_and_position(store, cli):
    store.create_topic("c", partitions=1, configs=COMPACTED)
    write(store, "c", [(b"k%d" % (i % 3), b"v%03d" % i) for i in range(60)])
    leader = store.partition("c", 0).leader
    path = leader.segments[leader.bases[1]].log_path
    data = bytearray(open(path, "rb").read())
    data[100] ^= 0xFF
    open(path, "wb").write(bytes(data))
    before = {b: open(leader.segments[b].log_path, "rb").read() for b in leader.bases[1:]}
    r = cli("topics", "compact", "c")
    assert r.exit_code == 1 and "CRC mismatch" in r.stderr and path in r.stderr and r.stderr.count("\n") == 1
    assert {b: open(leader.segments[b].log_path, "rb").read() for b in leader.bases[1:]} == before


def test_max_compaction_lag_forces_cleaning_below_the_dirty_ratio(store):
    store.create_topic("c", partitions=1, configs={**COMPACTED, "min.cleanable.dirty.ratio": "1.0"})
    write(store, "c", [(b"k%d" % (i % 3), b"v" * 30) for i in range(60)])
    lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6))
    write(store, "c", [(b"k0", b"w" * 30) for _ in range(20)])  # new dirt, ratio < 1.0
    assert not lifecycle.clean(store, "c", clock=clock_at(T0 + 10**6))[0].compacted
    store.alter_topic("c", set_configs={"max.compaction.lag.ms": "1000"})
    # the first dirty record (timestamp T0 + 60) is more than 1000 ms old at T0 + 10^6: cleaned now
    assert lifecycle.clean(store, "c", clock=clock_at(T0 + 10**6))[0].compacted


@pytest.mark.slow
def test_compaction_racing_a_rolling_keyed_producer_keeps_each_keys_latest_value(data_dir):
    """`topics clean` compacts (rewriting sealed segments whose flush may be pending in the
    producer's process) while a keyed producer rolls every few records: the last value of every
    key survives, offsets only grow, verify passes."""
    created = run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}",
                    "-c", "cleanup.policy=compact", "-c", "min.cleanable.dirty.ratio=0.01",
                    "-c", "min.compaction.lag.ms=0", "-c", "file.delete.delay.ms=0")
    assert created.returncode == 0, created.stderr
    lines = b"".join(b"k%d:%06d\n" % (i % 37, i) for i in range(8000))
    producer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "-K", ":", "--batch-size", "300",
                                 "--acks", "1"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=klog_env(data_dir))
    compacted = 0

    def race(_round: int) -> None:
        nonlocal compacted
        clean = run_klog(data_dir, "topics", "clean")
        assert clean.returncode == 0 and "Traceback" not in clean.stderr, clean.stderr
        compacted += "Cleaned t-0" in clean.stderr

    err = race_a_producer(producer, lines, rounds=4, pause_s=0.3, race=race)
    assert producer.returncode == 0, err
    assert compacted, "no compaction ran while the producer wrote: nothing raced"
    assert run_klog(data_dir, "topics", "clean").returncode == 0
    verify = run_klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    records = read_all(data_dir)
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 7999
    latest = {r["key"]: r["value"] for r in records}
    assert latest == {f"k{i % 37}": f"{i:06d}" for i in range(8000 - 37, 8000)}


@pytest.mark.slow
def test_a_topic_deleted_under_a_rolling_producer_ends_it_in_one_line_and_leaves_nothing(data_dir):
    """The producer's flusher may still hold the deleted folder's segments: the producer stops
    with one line (exit 1), and no folder or file of the topic comes back."""
    assert run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}").returncode == 0
    producer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "300", "--acks", "0"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=klog_env(data_dir))
    try:
        i = 0
        for phase in ("before", "after"):
            if phase == "after":
                deleted = run_klog(data_dir, "topics", "delete", "t", "--yes")
                assert deleted.returncode == 0, deleted.stderr
            deadline = time.monotonic() + 0.8
            while time.monotonic() < deadline:
                try:
                    producer.stdin.write(b"%06d-%s\n" % (i, b"x" * 40))  # type: ignore[union-attr]
                    producer.stdin.flush()  # type: ignore[union-attr]
                except BrokenPipeError:
                    break
                i += 1
                time.sleep(0.001)
        try:
            producer.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass
        producer.wait(timeout=60)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    err = producer.stderr.read().decode()  # type: ignore[union-attr]
    # usually "klog: error: unknown topic 't'"; a delete landing mid-append may name the partition
    assert producer.returncode == 1 and err.startswith("klog: error: ") and err.count("\n") == 1, err
    assert not [n for n in os.listdir(os.path.join(data_dir, "logs")) if n.startswith("t-")]
    assert run_klog(data_dir, "verify").returncode == 0

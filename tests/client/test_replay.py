"""klog replay: DEST ends up with SRC's records (content hash), at SRC's pace when asked, and a
replay resumed with --group after a kill writes no duplicate.

Method: SRC topics are written with keys, headers, null values and chosen timestamps; DEST is read
back through the consumer and hashed per partition. Pacing runs on a fake clock whose sleep
advances it, recording when each record leaves. Resuming is proven by failing the append at each
point around it (before, after the batch landed but before progress was saved) and by real
SIGKILLs of `klog replay --group` subprocesses at random moments.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from klog.broker import lifecycle
from klog.client.partitioner import partition_for_key
from klog.client.replay import Replayer
from tests.conftest import REPO
from tests.fake_clock import FakeClock

T0 = 1_700_000_000_000


def fill(store, topic, n, partitions=3, ts=lambda i: T0 + i, configs=None, keyless=True):
    store.create_topic(topic, partitions=partitions, configs=configs or {"retention.ms": "-1"}, exist_ok=True)
    with store.producer() as p:
        for i in range(n):
            key = None if keyless and i % 11 == 0 else b"key-%d" % (i % 37)
            value = None if i % 13 == 0 else b"value-%d" % i
            p.send(topic, value, key=key, headers=[("n", b"%d" % i), ("null", None)], timestamp=ts(i))


def rows(store, topic, **kw):
    """Per partition: the (key, value, headers, timestamp) sequence."""
    out: dict[int, list] = {}
    for r in store.consumer(topic, merge=False, **kw):
        out.setdefault(r.partition, []).append((r.key, r.value, tuple(r.headers), r.timestamp))
    return out


def digest(per_partition):
    h = hashlib.sha256()
    for p in sorted(per_partition):
        h.update(repr((p, per_partition[p])).encode())
    return h.hexdigest()


def test_dest_content_hash_equals_src_for_the_whole_log(store):
    fill(store, "src", 500)
    stats = Replayer(store, "src", "dst", keep_timestamps=True).run()
    assert stats.records == 500
    assert store.partition_count("dst") == 3  # created with SRC's partition count and configs
    assert store.topic("dst").configs == store.topic("src").configs == {"retention.ms": "-1"}
    assert digest(rows(store, "dst")) == digest(rows(store, "src"))


def test_dest_content_hash_equals_src_for_a_range(store):
    fill(store, "src", 300, ts=lambda i: T0 + i * 1000)
    Replayer(store, "src", "dst", start=_since(T0 + 100_000), until_ms=T0 + 200_000,
             keep_timestamps=True).run()
    want = {p: [r for r in rs if T0 + 100_000 <= r[3] < T0 + 200_000] for p, rs in rows(store, "src").items()}
    assert digest(rows(store, "dst")) == digest(want)
    assert sum(map(len, want.values())) == 100


def _since(ms):
    from klog.client.consumer import StartSpec

    return StartSpec("timestamp", ms)


def test_keyed_records_go_to_their_keys_partition_and_keep_their_order(store):
    fill(store, "src", 400)
    store.create_topic("dst", partitions=5)
    Replayer(store, "src", "dst").run()
    per_key_src: dict[bytes, list] = {}
    for r in store.consumer("src", merge=False):
        if r.key is not None:
            per_key_src.setdefault(r.key, []).append(r.value)
    per_key_dst: dict[bytes, list] = {}
    for r in store.consumer("dst", merge=False):
        if r.key is not None:
            assert r.partition == partition_for_key(r.key, 5)
            per_key_dst.setdefault(r.key, []).append(r.value)
    assert per_key_dst == per_key_src


def test_without_keep_timestamps_records_get_the_replay_time(store):
    fill(store, "src", 20)
    Replayer(store, "src", "dst", wall_ms=lambda: 42).run()
    assert {r.timestamp for r in store.consumer("dst")} == {42}


def test_replaying_a_compacted_topic_with_offset_gaps(store):
    fill(store, "src", 200, partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "500",
                                                   "retention.ms": "-1"}, keyless=False)
    lifecycle.compact(store, "src", clock=lambda: (T0 + 10**6) / 1000)
    Replayer(store, "src", "dst", keep_timestamps=True).run()
    assert digest(rows(store, "dst")) == digest(rows(store, "src"))


def test_replay_into_itself_and_group_without_dest_are_refused(store, cli):
    fill(store, "src", 3)
    r = cli("replay", "src", "--to", "src")
    assert r.exit_code == 2 and "into itself" in r.stderr and r.stderr.count("\n") == 1
    r = cli("replay", "src", "--group", "g")
    assert r.exit_code == 2 and "--group needs --to" in r.stderr
    r = cli("replay", "src", "--speed", "fast")
    assert r.exit_code == 2 and "invalid --speed" in r.stderr
    r = cli("replay", "nope", "--to", "x")
    assert r.exit_code == 1 and "nope" in r.stderr


def test_cli_replay_to_stdout_round_trips_through_produce(store, cli):
    fill(store, "src", 60)
    out = cli("replay", "src", "--json").stdout
    assert out.count(b"\n") == 60
    assert cli("produce", "copy", "--input", "json", input=out).exit_code == 0
    src = sorted((r.key or b"", r.value or b"") for r in store.consumer("src"))
    copy = sorted((r.key or b"", r.value or b"") for r in store.consumer("copy"))
    assert copy == src
    r = cli("replay", "src", "--to", "dst", "-p", "1", "-n", "5")
    assert r.exit_code == 0 and "Replayed 5 records from src into dst" in r.stderr


# -- pace ------------------------------------------------------------------------------------------
GAPS_MS = [0, 100, 350, 1000, 1000, 2500, 2600, 7000]


def paced(store, speed=None, rate=None, dest=None, source="src"):
    store.create_topic(source, partitions=2)
    with store.producer() as p:
        for i, gap in enumerate(GAPS_MS):  # alternate partitions: the merge by timestamp makes the order
            p.send(source, b"%d" % i, partition=i % 2, timestamp=T0 + gap)
    clock = FakeClock(100.0)
    emitted = []
    replayer = Replayer(store, source, dest, speed=speed, rate=rate, clock=clock, sleep=clock.sleep,
                        emit=None if dest else (lambda r: emitted.append((clock(), r.timestamp))))
    return replayer, clock, emitted


def test_speed_1_reproduces_the_gaps_on_a_fake_clock(store):
    replayer, clock, emitted = paced(store, speed=1)
    replayer.run()
    start = emitted[0][0]
    assert [ts - T0 for _, ts in emitted] == GAPS_MS  # merged across partitions by timestamp
    for (at, ts) in emitted:
        assert abs((at - start) * 1000 - (ts - T0)) <= 1  # within 1 ms of the original gap


def test_speed_10_is_ten_times_faster_and_max_never_sleeps(store):
    replayer, clock, emitted = paced(store, speed=10)
    replayer.run()
    assert abs((emitted[-1][0] - emitted[0][0]) * 1000 - GAPS_MS[-1] / 10) <= 1
    replayer, clock, emitted = paced(store, speed=None, source="src2")
    replayer.run()
    assert clock.sleeps == [] and len(emitted) == len(GAPS_MS)


def test_rate_caps_records_per_second(store):
    replayer, clock, emitted = paced(store, rate=2)
    replayer.run()
    times = [at - emitted[0][0] for at, _ in emitted]
    assert all(abs(t - i / 2) < 1e-6 for i, t in enumerate(times))


def test_paced_replay_into_dest_writes_each_record_before_waiting(store):
    store.create_topic("dst", partitions=1)
    replayer, clock, _ = paced(store, speed=1, dest="dst")
    seen_at_sleep = []
    real_sleep = clock.sleep

    def sleep(seconds):
        seen_at_sleep.append(store.partition("dst", 0).high_watermark())
        real_sleep(seconds)

    replayer.sleep = sleep
    replayer.run()
    # before each wait, every record due so far is in DEST (the two at gap 1000 share a wait)
    assert seen_at_sleep == [1, 2, 3, 5, 6, 7]
    assert store.partition("dst", 0).high_watermark() == len(GAPS_MS)


# -- resume after a crash --------------------------------------------------------------------------
class Crash(Exception):
    pass


@pytest.mark.parametrize("other_writer", [False, True])
@pytest.mark.parametrize("when", ["before", "after"])
def test_group_resume_after_a_crash_around_an_append_writes_no_duplicates(store, when, other_writer):
    fill(store, "src", 3000)
    replayer = Replayer(store, "src", "dst", group="g", keep_timestamps=True)
    real_append = replayer.replicas.append
    calls = [0]

    def failing_append(*args, before=None):
        calls[0] += 1
        if calls[0] == 2 and when == "before":
            def intent_then_crash(base):
                before(base)
                raise Crash()  # killed with the intent saved, before the batch was written

            return real_append(*args, before=intent_then_crash)
        result = real_append(*args, before=before)
        if calls[0] == 2 and when == "after":
            raise Crash()  # killed after the batch landed, before the progress was saved
        return result

    replayer.replicas.append = failing_append
    with pytest.raises(Crash):
        replayer.run()
    if other_writer:  # someone else writes to DEST before the replay resumes
        with store.producer() as p:
            for q in range(3):
                p.send("dst", b"other", key=b"other", partition=q, headers=[("other", None)])
    stats = Replayer(store, "src", "dst", group="g", keep_timestamps=True).run()
    mine = {p: [r for r in rs if r[2] != (("other", None),)] for p, rs in rows(store, "dst").items()}
    assert digest(mine) == digest(rows(store, "src"))
    assert stats.skipped + stats.records <= 3000
    # a rerun of the finished group replays nothing more
    assert Replayer(store, "src", "dst", group="g", keep_timestamps=True).run().records == 0


def test_group_of_another_pair_is_refused(store, cli):
    fill(store, "src", 10)
    Replayer(store, "src", "dst", group="g").run()
    fill(store, "other", 10)
    with pytest.raises(Exception, match="replays src into dst"):
        Replayer(store, "other", "dst2", group="g")
    assert not store.has_topic("dst2")  # refused before DEST was created
    r = cli("replay", "other", "--to", "dst3", "--group", "g")
    assert r.exit_code == 2 and "replays src into dst" in r.stderr
    r = cli("replay", "other", "--to", "zz", "--group", "")
    assert r.exit_code == 2 and "invalid replay group" in r.stderr
    assert not store.has_topic("dst3") and not store.has_topic("zz")


@pytest.mark.parametrize("group", [None, "g"])
def test_replay_rolling_dest_segments_runs_retention(store, group):
    """As after a producer's roll: DEST stays near retention.bytes instead of growing with the replay."""
    store.create_topic("src", partitions=1, configs={"retention.ms": "-1"})
    with store.producer() as p:
        for i in range(300):
            p.send("src", b"%04d" % i + b"x" * 96)
    limits = {"segment.bytes": "2000", "retention.bytes": "4000", "retention.ms": "-1", "max.message.bytes": "1000"}
    store.create_topic("dst", partitions=1, configs=limits)  # small batches: many appends, many rolls
    Replayer(store, "src", "dst", group=group).run()
    info = store.describe_topic("dst").partitions[0]
    assert info.log_start_offset > 0
    assert info.size_bytes <= 4000 + 2 * 2000  # retention.bytes plus the segment it keeps and the active one
    values = [r.value[:4] for r in store.consumer("dst")]
    assert values == [b"%04d" % i for i in range(300 - len(values), 300)]  # the newest records, in order


@pytest.mark.slow
def test_sigkilled_replays_resume_without_duplicates(store, data_dir, replay_seed):
    fill(store, "src", 6000)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    seed = replay_seed(random.randrange(10**6))
    rng = random.Random(seed)
    args = [sys.executable, "-m", "klog", "replay", "src", "--to", "dst", "--group", "g", "--keep-timestamps",
            "--rate", "2000"]
    def written():
        return sum(store.offsets("dst").values()) if store.has_topic("dst") else 0

    progress = [0]
    for _ in range(3):
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while written() <= progress[-1] and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # it has started writing (start-up time varies with the machine's load)
        time.sleep(rng.uniform(0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        progress.append(written())
    assert 0 < progress[1] < 6000, (progress, f"seed {seed}")  # the first kill landed mid-replay
    done = subprocess.run(args[:-2], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert digest(rows(store, "dst")) == digest(rows(store, "src")), f"seed {seed}"


def test_keyless_records_into_a_compacted_dest_and_oversized_records_are_refused(store, cli):
    fill(store, "src", 30)  # record 11 has no key
    store.create_topic("kv", partitions=3, configs={"cleanup.policy": "compact"})
    r = cli("replay", "src", "--to", "kv", "--keep-timestamps")
    assert r.exit_code == 2 and "compacted: every record needs a key" in r.stderr
    assert r.stderr.count("\n") == 1
    store.create_topic("small", partitions=3, configs={"max.message.bytes": "70"})
    r = cli("replay", "src", "--to", "small")
    assert r.exit_code == 1 and "max.message.bytes (70)" in r.stderr


def test_progress_bar_path_replays_everything(store, capfd):
    from klog.cli.replay import _run_with_progress

    fill(store, "src", 50)
    stats = _run_with_progress(Replayer(store, "src", "dst"))
    assert stats.records == 50 == stats.total
    assert sum(store.offsets("dst").values()) == 50

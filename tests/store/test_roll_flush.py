"""A roll hands the sealed segment's fsync to the background flusher (Kafka's roll: "flush-log"):
the append that rolled does not wait for it, the recovery point passes the segment only once it
is done, flush() (acks=all, flush.messages) waits for it, and a kill -9 at any point of it keeps
every acknowledged record."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import klog
from klog.store import codec, flusher
from klog.store.config import LogConfig
from klog.store.faults import CRASH_ENV
from klog.store.flush_pipeline import ROLL_FLUSHES_PENDING_MAX
from klog.store.log import PartitionLog
from klog.store.retention import delete_segments_below
from tests.conftest import REPO
from tests.klog_processes import ROLLING_SEGMENT_BYTES, klog_env, race_a_producer, read_all, run_klog

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
NO_FSYNC = LogConfig(segment_bytes=1000, flush_messages=2**62, file_delete_delay_ms=0)


@pytest.fixture
def fsyncs(monkeypatch) -> list[tuple[str, str]]:
    """Every os.fsync from now on, as (path, thread name)."""
    calls: list[tuple[str, str]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        calls.append((path if not stat.S_ISDIR(os.fstat(fd).st_mode) else path + "/", threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return calls


@pytest.fixture
def gate(monkeypatch) -> threading.Event:
    """The flusher waits for this before each sealed segment's fsync, and before an untrusted
    open's catch-up of sealed segments (bounded: 30 s)."""
    opened = threading.Event()
    real, real_files = flusher._sync_sealed, flusher.sync_segment_files

    def gated(fds, directory: str) -> None:  # noqa: ANN001 - SegmentFds
        opened.wait(30)
        real(fds, directory)

    def gated_files(segments: list[tuple[str, ...]], directory: str | None = None) -> None:
        if threading.current_thread().name.startswith("klog-flusher"):
            opened.wait(30)
        real_files(segments, directory)

    monkeypatch.setattr(flusher, "_sync_sealed", gated)
    monkeypatch.setattr(flusher, "sync_segment_files", gated_files)
    yield opened
    opened.set()  # never leave the flusher thread waiting


@contextlib.contextmanager
def _writing_log(tmp_path) -> Iterator[PartitionLog]:  # noqa: ANN001
    """t-0's log opened for writing without an fsync per batch (rolls flush in the background)."""
    log = PartitionLog(str(tmp_path / "t-0"), NO_FSYNC)
    try:
        log.open_for_write()
        yield log
    finally:
        log.close()


def _append(log: PartitionLog, n: int = 1) -> None:
    for _ in range(n):
        batch = codec.encode_batch([(None, b"x" * 300, [], 1_700_000_000_000)], log.log_end_offset)
        log.append(batch, codec.read_header(batch))


def _roll_times(log: PartitionLog, rolls: int) -> None:
    start = len(log.bases)
    while len(log.bases) < start + rolls:
        _append(log)


def test_the_recovery_point_passes_a_sealed_segment_only_after_its_fsync(tmp_path, fsyncs, gate):
    with _writing_log(tmp_path) as log:
        _roll_times(log, ROLL_FLUSHES_PENDING_MAX)
        _append(log)
        sealed = [log.segments[b].log_path for b in log.bases[:-1]]
        assert not [p for p, _ in fsyncs if p in sealed], "a roll waited for the sealed segment's fsync"
        assert log.state.read().recovery_point == 0  # nothing fsynced yet: nothing claimed
        gate.set()
        log.finish_flushes()
        fsynced_to = log.bases[-1]
        _append(log)  # the next state write carries the new recovery point
        assert log.state.read().recovery_point >= fsynced_to
        assert {p for p, thread in fsyncs if thread.startswith("klog-flusher")} >= set(sealed)
        assert str(tmp_path / "t-0") + "/" in {p for p, _ in fsyncs}  # the folder, new entries included
        log.flush()
        assert log.state.read().recovery_point == log.log_end_offset


def test_flush_waits_for_the_sealed_segments_fsync(tmp_path, fsyncs, gate):
    """An fsynced append (acks=all, flush.messages) returns with everything before it durable."""
    with _writing_log(tmp_path) as log:
        _roll_times(log, 2)
        sealed = log.segments[log.bases[-2]].log_path
        threading.Timer(0.2, gate.set).start()
        log.flush()
        assert (sealed, "klog-flusher_0") in fsyncs and not log.pending_flushes
        assert log.recovery_point == log.log_end_offset


def test_a_roll_past_the_pending_bound_waits_for_the_oldest(tmp_path, gate):
    with _writing_log(tmp_path) as log:
        _roll_times(log, ROLL_FLUSHES_PENDING_MAX)
        assert len(log.pending_flushes) == ROLL_FLUSHES_PENDING_MAX
        threading.Timer(0.2, gate.set).start()
        _roll_times(log, 1)
        assert len(log.pending_flushes) <= ROLL_FLUSHES_PENDING_MAX
        assert log.recovery_point >= log.bases[1]


def test_retention_and_truncation_wait_for_pending_flushes(tmp_path, fsyncs, gate):
    with _writing_log(tmp_path) as log:
        _roll_times(log, 3)
        doomed = log.segments[log.bases[0]].log_path
        threading.Timer(0.2, gate.set).start()
        delete_segments_below(log, log.bases[1])
        assert (doomed, "klog-flusher_0") in fsyncs  # fsynced before its files were renamed
        assert all(p.end > log.bases[0] for p in log.pending_flushes)
        gate.clear()
        _roll_times(log, 2)
        pending = list(log.pending_flushes)
        threading.Timer(0.2, gate.set).start()
        log.truncate_to(log.bases[1])  # their ends are no longer offsets of this log
        assert not log.pending_flushes and all(p.future.done() for p in pending)
        assert log.recovery_point <= log.log_end_offset


def _killed_writer(directory: str, rolls: int) -> PartitionLog:
    """A writer that rolled `rolls` times, appended, and was killed with its roll flushes pending:
    they never report back, so its recovery point stays below the sealed segments."""
    first = PartitionLog(directory, NO_FSYNC)
    first.open_for_write()
    _roll_times(first, rolls)
    _append(first)
    first.pending_flushes.clear()
    return first


def test_flush_fsyncs_the_sealed_segments_a_killed_writer_left(tmp_path, fsyncs, gate):
    """A writer killed with flushes pending left a recovery point below sealed segments: the next
    writer fsyncs them (in the background after its open, or at the latest in its first flush:
    Kafka's flushUptoOffsetExclusive) before the recovery point passes them."""
    directory = str(tmp_path / "t-0")
    first = _killed_writer(directory, rolls=2)
    gate.set()
    second = PartitionLog(directory, NO_FSYNC)
    try:
        fsyncs.clear()
        second.open_for_write()
        assert second.recovery_point < second.bases[-1]
        second.flush()
        synced = {p for p, _ in fsyncs}
        assert {second.segments[b].log_path for b in second.bases} <= synced
        assert second.recovery_point == second.log_end_offset
    finally:
        gate.set()
        first.close()
        second.close()


PRODUCER = r"""
import contextlib
import os
import sys
import klog

data = sys.argv[1]
store = klog.open(data)
if not store.has_topic("t"):
    store.create_topic("t", configs={"segment.bytes": "2000", "flush.messages": str(2**62)})
# one write(2) per acknowledgement: a kill from the flusher thread cannot tear a line
with store.producer(acks="1", on_ack=lambda t, p, base, n: os.write(1, b"%d %d\n" % (base, n))) as p:
    for i in range(100_000):
        p.send("t", b"%06d-" % i + b"x" * 200, partition=0)
        p.flush()
"""


@pytest.mark.parametrize("step", ["roll-flush-pending:3", "sealed-fsync:3", "roll-flush-pending:40"])
def test_kill_9_during_a_rolls_background_flush_keeps_every_acknowledged_record(tmp_path, step):
    data = str(tmp_path / "data")
    env = {**os.environ, CRASH_ENV: step, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-c", PRODUCER, data], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, (step, proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.decode().splitlines()
    assert all(len(line.split()) == 2 for line in lines), lines[-3:]
    acked = [tuple(map(int, line.split())) for line in lines]
    assert acked, "killed before the first acknowledgement"
    acked_end = acked[-1][0] + acked[-1][1]
    folder = os.path.join(data, "logs", "t-0")
    raw = PartitionLog(folder)
    bases, snap = raw.bases, raw.state.read()
    raw.close()
    assert snap is not None and snap.recovery_point <= bases[-2]  # not past the unflushed sealed segment
    with klog.open(data) as store:
        with store.consumer("t", start="earliest") as consumer:
            records = [(r.offset, r.value) for r in consumer]
        assert len(records) >= acked_end
        assert [o for o, _ in records] == list(range(len(records)))
        assert all(v == b"%06d-" % o + b"x" * 200 for o, v in records[:acked_end])


def test_a_writer_reopening_after_another_forgets_its_pending_flushes(tmp_path, gate):
    """Another writer may truncate what this one sealed meanwhile: reopening (not trusted) must
    not later move the recovery point to where a forgotten segment ended."""
    directory = str(tmp_path / "t-0")
    first = PartitionLog(directory, NO_FSYNC)
    second = PartitionLog(directory, NO_FSYNC)
    try:
        first.open_for_write()
        _roll_times(first, 2)
        assert first.pending_flushes
        threading.Timer(0.2, gate.set).start()
        second.open_for_write()
        second.truncate_to(1)
        first.open_for_write()
        assert not first.pending_flushes
        _append(first)
        assert first.recovery_point <= 1 and first.state.read().recovery_point <= 1
    finally:
        gate.set()
        first.close()
        second.close()


def test_the_recovery_point_never_skips_a_segment_a_killed_writer_left_unflushed(tmp_path, fsyncs, gate):
    """The first writer dies with its roll's flush pending (its recovery point stays below the
    sealed segment); the next writer's own background flushes must not move the recovery point
    over that segment: only its flush(), which fsyncs it, may."""
    directory = str(tmp_path / "t-0")
    first = _killed_writer(directory, rolls=1)
    unflushed = first.bases[0]
    second = PartitionLog(directory, NO_FSYNC)
    try:
        second.open_for_write()
        assert second.recovery_point <= unflushed
        _roll_times(second, 2)
        second.collect_flushes()
        assert second.recovery_point <= unflushed and second.state.read().recovery_point <= unflushed
        assert second.segments[unflushed].log_path not in {p for p, _ in fsyncs}
        gate.set()  # the open's catch-up fsyncs it, then the recovery point may pass it
        second.finish_flushes()
        assert (second.segments[unflushed].log_path, "klog-flusher_0") in fsyncs
        assert second.recovery_point == second.bases[-1]
        second.flush()
        assert second.recovery_point == second.log_end_offset
    finally:
        first.close()
        second.close()


def test_the_recovery_point_keeps_moving_across_an_untrusted_reopen(tmp_path, fsyncs):
    """A reopen that is not trusted (a new producer's reconcile) drops the pending flushes; the
    recovery point must still pass the sealed segments as they are fsynced, so the next fsynced
    append costs O(1) fsyncs, not one per segment written since (acks=0, flush.messages > 1)."""
    with _writing_log(tmp_path) as log:
        _roll_times(log, 3)
        log.open_for_write()  # untrusted, as reconcile() does: drops what is pending
        _roll_times(log, 40)
        log.finish_flushes()
        assert log.recovery_point == log.bases[-1]
        assert log.state.read().recovery_point >= log.bases[-(ROLL_FLUSHES_PENDING_MAX + 3)]  # saved at the last append
        fsyncs.clear()
        _append(log)
        log.flush()
        # the active segment's log and the folder (and, at a new folder's first flush, the log dir)
        assert len(fsyncs) <= 3, fsyncs


@pytest.mark.slow
def test_acks_0_rolls_then_a_new_producer_keep_the_recovery_point_moving(tmp_path, fsyncs):
    """The reviewer's reproduction, smaller: acks=0 records over many rolls, then a one-record
    acks=all produce from a new producer."""
    with klog.open(str(tmp_path / "data")) as store:
        store.create_topic("t", configs={"segment.bytes": "1200", "flush.messages": str(2**62)})
        with store.producer(acks="0") as p:
            for i in range(2000):
                p.send("t", b"%06d-" % i + b"x" * 94, partition=0)
                if i % 5 == 4:
                    p.flush()  # a batch of 5 records: about 2 per segment
        folder = os.path.join(str(tmp_path / "data"), "logs", "t-0")
        raw = PartitionLog(folder)
        bases, snap = raw.bases, raw.state.read()
        raw.close()
        assert len(bases) > 100
        assert snap is not None and snap.recovery_point >= bases[-(ROLL_FLUSHES_PENDING_MAX + 3)]
        fsyncs.clear()
        with store.producer(acks="all") as p:
            p.send("t", b"last", partition=0)
            p.flush()
        assert len(fsyncs) <= 3 * (ROLL_FLUSHES_PENDING_MAX + 3) + 4, len(fsyncs)


# A `klog produce` run in-process whose every completed os.fsync is appended to $FSYNC_LOG (the
# path of the descriptor), in one write(2) each, after the real fsync returned.
FSYNC_LOGGING_PRODUCE = """
import os, sys
real = os.fsync
log = os.open(os.environ["FSYNC_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def logged(fd):
    path = os.readlink("/proc/self/fd/%d" % fd)
    real(fd)
    os.write(log, path.encode() + b"\\n")
os.fsync = logged
sys.argv = ["klog", *sys.argv[1:]]
from klog.cli.entry import main
main()
"""


def _kill_produce_rounds(data_dir: str, acks: str, rounds: int, seed: int, fsync_log: str | None = None
                         ) -> dict[int, bytes]:
    """Feed a `klog produce --print-offsets` process line by line and SIGKILL it at a random moment,
    `rounds` times; returns offset -> value of every record it acknowledged (printed)."""
    rng = random.Random(seed)
    acked: dict[int, bytes] = {}
    sent = 0
    for r in range(rounds):
        if fsync_log is None:
            argv = [sys.executable, "-m", "klog"]
            env = klog_env(data_dir)
        else:
            argv = [sys.executable, "-c", FSYNC_LOGGING_PRODUCE]
            env = klog_env(data_dir, FSYNC_LOG=fsync_log)
        proc = subprocess.Popen([*argv, "produce", "t", "--acks", acks, "--print-offsets"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        os.set_blocking(proc.stdout.fileno(), False)  # type: ignore[union-attr]
        out = b""
        lines: list[bytes] = []
        deadline = time.monotonic() + rng.uniform(0.7, 1.8)
        try:
            while time.monotonic() < deadline:
                line = b"r%d-%06d-%s" % (r, sent, b"y" * rng.randrange(10, 200))
                proc.stdin.write(line + b"\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                lines.append(line)
                sent += 1
                time.sleep(0.001)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        out = proc.stdout.read() or b""  # type: ignore[union-attr]
        err = proc.stderr.read()  # type: ignore[union-attr]
        assert proc.returncode == -9, err
        assert b"Traceback" not in err, err
        # (the kill may tear the last line, "...\t67" of "...\t678": only newline-ended lines count)
        printed = [ln.split(b"\t") for ln in out.split(b"\n")[:-1]]
        complete = [p for p in printed if len(p) == 3 and p[2].isdigit()]
        assert len(complete) == len(printed)
        for i, (_, _, offset) in enumerate(complete):
            acked[int(offset)] = lines[i]  # one printed line per input line, in input order
    return acked


@pytest.mark.slow
@pytest.mark.parametrize("acks", ["all", "1"])
def test_sigkilled_cli_producers_lose_no_acknowledged_record_and_the_next_writer_is_correct(data_dir, acks):
    """Both acks levels promise the leader fsynced the batch before it is acknowledged (README,
    Writes): a kill -9 of the process (not a power cut) must keep every acknowledged record, in
    order, once, however many rolls had their flush pending; another writer then appends after."""
    created = run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}")
    assert created.returncode == 0, created.stderr
    acked = _kill_produce_rounds(data_dir, acks, rounds=3, seed=4 + len(acks))
    assert len(acked) > 20, "too few acknowledgements to mean anything"
    more = subprocess.run([sys.executable, "-m", "klog", "produce", "t", "--acks", acks, "--print-offsets"],
                          input=b"after-1\nafter-2\n", capture_output=True, env=klog_env(data_dir), timeout=60)
    assert more.returncode == 0, more.stderr
    verify = run_klog(data_dir, "verify")
    assert verify.returncode == 0 and "ok" in verify.stdout, verify.stdout + verify.stderr
    records = read_all(data_dir)
    offsets = [r["offset"] for r in records]
    assert offsets == list(range(len(records)))
    values = [r["value"].encode() for r in records]
    assert len(set(values)) == len(values), "a record was written twice"
    for offset, value in acked.items():
        assert values[offset] == value, offset
    sent_order = [v for v in values if v.startswith(b"r")]
    assert sent_order == sorted(sent_order, key=lambda v: int(v.split(b"-")[1]))  # in input order
    assert values[-2:] == [b"after-1", b"after-2"]
    assert [int(x.split(b"\t")[2]) for x in more.stdout.splitlines()] == [len(values) - 2, len(values) - 1]
    segments = [n for n in os.listdir(os.path.join(data_dir, "logs", "t-0")) if n.endswith(".log")]
    assert len(segments) > 5, "the topic should have rolled many times"


@pytest.mark.slow
def test_the_recovery_point_a_killed_producer_leaves_never_covers_a_segment_it_did_not_fsync(data_dir, tmp_path):
    """The state file's recovery point claims every offset below it is on disk: each segment
    holding such offsets must have been fsynced (its .log) by the killed process before it died.
    acks=1, flush.messages=1: each append's flush() moves it, over sealed segments the background
    flusher fsynced or flush() fsynced itself. (With acks=0 the recovery point stays at 0: see the
    review report; it never passes an unsynced segment either way.)"""
    created = run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}")
    assert created.returncode == 0, created.stderr
    checked = claimed = 0
    for seed in range(3):
        fsync_log = str(tmp_path / f"fsyncs-{seed}")
        _kill_produce_rounds(data_dir, "1", rounds=1, seed=seed, fsync_log=fsync_log)
        with open(fsync_log) as f:
            fsynced = set(f.read().splitlines())
        folder = os.path.join(data_dir, "logs", "t-0")
        log = PartitionLog(folder)
        try:
            snap = log.state.read()
            assert snap is not None
            covered = [b for b in log.bases if b < snap.recovery_point]
            # segments a previous (killed) round wrote were fsynced by that round or by this one's flush
            unsynced = [b for b in covered if log.segments[b].log_path not in fsynced
                        and b >= checked]
            assert not unsynced, (snap.recovery_point, unsynced[:5])
            claimed += len([b for b in covered if b >= checked])
            checked = log.bases[-1]
        finally:
            log.close()
    assert claimed > 3, "the recovery point never moved past a sealed segment: nothing was checked"
    assert run_klog(data_dir, "verify").returncode == 0


@pytest.mark.slow
def test_delete_records_and_retention_racing_a_rolling_producer_keep_the_log_whole(data_dir):
    """`delete-records` and `topics clean` (retention.bytes) from other processes while a producer
    rolls a segment every few records (its flushes pending): no error, and afterwards the log is
    contiguous from its start, verify passes, and every record from the start on is the one sent."""
    created = run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}",
                    "-c", "retention.bytes=20000", "-c", "file.delete.delay.ms=0")
    assert created.returncode == 0, created.stderr
    lines = b"".join(b"%06d-%s\n" % (i, b"z" * 80) for i in range(6000))
    producer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "400",
                                 "--acks", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=klog_env(data_dir))

    def race(_round: int) -> None:
        end = json.loads(run_klog(data_dir, "topics", "describe", "t", "--json").stdout)["partitions"][0]
        dr = run_klog(data_dir, "topics", "delete-records", "t", "-p", "0",
                   "--before", str(end["high_watermark"] // 2))
        assert dr.returncode == 0 and "Traceback" not in dr.stderr, dr.stderr
        clean = run_klog(data_dir, "topics", "clean")
        assert clean.returncode == 0, clean.stderr

    err = race_a_producer(producer, lines, rounds=3, pause_s=0.2, race=race)
    assert producer.returncode == 0, err
    verify = run_klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    records = read_all(data_dir)
    assert records and records[-1]["offset"] == 5999
    first = records[0]["offset"]
    assert [r["offset"] for r in records] == list(range(first, 6000))
    assert all(r["value"] == f"{r['offset']:06d}-{'z' * 80}" for r in records)


@pytest.mark.slow
def test_a_kafka_client_writes_correctly_after_a_killed_cli_producer(data_dir):
    """`klog serve` (a second process's writer) takes over a partition whose last writer died
    with roll flushes pending (crash point roll-flush-pending): confluent-kafka's acks=all writes
    land after every record the dead writer acknowledged, contiguous, and verify passes."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from klog.server import Server

    assert run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}").returncode == 0
    lines = b"".join(b"old-%05d\n" % i for i in range(400))
    dead = subprocess.run([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "200", "--print-offsets"],
                          input=lines, capture_output=True, timeout=60,
                          env=klog_env(data_dir, KLOG_CRASH_AT="roll-flush-pending:5"))
    assert dead.returncode == -9, dead.stderr
    acked = len(dead.stdout.splitlines())
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            producer.produce("t", b"new-%05d" % i)
        assert producer.flush(30) == 0
    verify = run_klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    values = [r["value"] for r in read_all(data_dir)]
    old = [v for v in values if v.startswith("old-")]
    assert len(old) >= acked and old == [f"old-{i:05d}" for i in range(len(old))]
    assert values[len(old):] == [f"new-{i:05d}" for i in range(300)]


@pytest.mark.slow
def test_two_cli_producers_on_one_rolling_partition_one_killed_keep_every_acknowledged_record(data_dir):
    """Two `klog produce` processes interleave appends (each reopens the partition after the
    other: its pending roll flushes are dropped); one is killed -9 midway. Every record either
    acknowledged is there once, each writer's in its input order, and verify passes."""
    assert run_klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={ROLLING_SEGMENT_BYTES}").returncode == 0
    procs = [subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "--print-offsets", "--acks", "1"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=klog_env(data_dir))
             for _ in range(2)]
    sent: list[list[bytes]] = [[], []]
    rng = random.Random(11)
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2.0:
            if procs[0].poll() is None and time.monotonic() - started > 1.0:
                procs[0].send_signal(signal.SIGKILL)
                procs[0].wait(timeout=30)
            for w, proc in enumerate(procs):
                if proc.poll() is None:
                    line = b"w%d-%06d-%s" % (w, len(sent[w]), b"q" * rng.randrange(5, 120))
                    proc.stdin.write(line + b"\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                    sent[w].append(line)
            time.sleep(0.001)
        procs[1].stdin.close()  # type: ignore[union-attr]
        procs[1].wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [-9, 0], procs[1].stderr.read()  # type: ignore[union-attr]
    acked: dict[int, bytes] = {}
    for w, proc in enumerate(procs):
        # (only newline-ended lines: the kill may tear the last one, "...\t67" of "...\t678")
        printed = [line.split(b"\t") for line in proc.stdout.read().split(b"\n")[:-1]]  # type: ignore[union-attr]
        for i, parts in enumerate(printed):
            if len(parts) == 3 and parts[2].isdigit():
                acked[int(parts[2])] = sent[w][i]
    assert len(acked) > 20
    values = [r["value"].encode() for r in read_all(data_dir)]
    assert len(set(values)) == len(values)
    assert all(values[o] == v for o, v in acked.items())
    for w in range(2):
        mine = [v for v in values if v.startswith(b"w%d-" % w)]
        assert mine == sorted(mine, key=lambda v: int(v.split(b"-")[1]))
    assert run_klog(data_dir, "verify").returncode == 0

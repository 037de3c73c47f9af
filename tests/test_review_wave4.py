"""Independent review of wave 4's changes, through real processes where possible: the background
roll flusher under kill -9 of a real `klog produce`, the strict-records marker read through
`klog serve`, `dirs list` sizes with `.deleted` files pending, and offset-expiry settings."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

import klog
from klog.store.log import PartitionLog
from tests.conftest import REPO

SEGMENT_BYTES = "1000"  # a roll every few records: many background flushes


def _env(data_dir: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, **extra}


def _klog(data_dir: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(data_dir))


def _race_a_producer(producer: subprocess.Popen, lines: bytes, rounds: int, pause_s: float,
                     race: Callable[[int], None]) -> bytes:
    """Feed a running `klog produce` half of `lines`, run `race` `rounds` times a pause apart (the
    other half fed after the first), then end its input; its stderr. Killed if anything fails."""
    try:
        producer.stdin.write(lines[: len(lines) // 2])  # type: ignore[union-attr]
        producer.stdin.flush()  # type: ignore[union-attr]
        for round_ in range(rounds):
            time.sleep(pause_s)
            race(round_)
            if round_ == 0:
                producer.stdin.write(lines[len(lines) // 2:])  # type: ignore[union-attr]
        return producer.communicate(timeout=120)[1]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()


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
            env = _env(data_dir)
        else:
            argv = [sys.executable, "-c", FSYNC_LOGGING_PRODUCE]
            env = _env(data_dir, FSYNC_LOG=fsync_log)
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
        printed = [ln.split(b"\t") for ln in out.splitlines()]
        complete = [p for p in printed if len(p) == 3 and p[2].isdigit()]
        assert len(complete) >= len(printed) - 1  # only the last line may be torn by the kill
        for i, (_, _, offset) in enumerate(complete):
            acked[int(offset)] = lines[i]  # one printed line per input line, in input order
    return acked


def _read_all(data_dir: str) -> list[dict]:
    r = _klog(data_dir, "consume", "t", "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("acks", ["all", "1"])
def test_sigkilled_cli_producers_lose_no_acknowledged_record_and_the_next_writer_is_correct(data_dir, acks):
    """Both acks levels promise the leader fsynced the batch before it is acknowledged (README,
    Writes): a kill -9 of the process (not a power cut) must keep every acknowledged record, in
    order, once, however many rolls had their flush pending; another writer then appends after."""
    created = _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}")
    assert created.returncode == 0, created.stderr
    acked = _kill_produce_rounds(data_dir, acks, rounds=3, seed=4 + len(acks))
    assert len(acked) > 20, "too few acknowledgements to mean anything"
    more = subprocess.run([sys.executable, "-m", "klog", "produce", "t", "--acks", acks, "--print-offsets"],
                          input=b"after-1\nafter-2\n", capture_output=True, env=_env(data_dir), timeout=60)
    assert more.returncode == 0, more.stderr
    verify = _klog(data_dir, "verify")
    assert verify.returncode == 0 and "ok" in verify.stdout, verify.stdout + verify.stderr
    records = _read_all(data_dir)
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
    created = _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}")
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
    assert _klog(data_dir, "verify").returncode == 0


@pytest.mark.slow
def test_delete_records_and_retention_racing_a_rolling_producer_keep_the_log_whole(data_dir):
    """`delete-records` and `topics clean` (retention.bytes) from other processes while a producer
    rolls a segment every few records (its flushes pending): no error, and afterwards the log is
    contiguous from its start, verify passes, and every record from the start on is the one sent."""
    created = _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}",
                    "-c", "retention.bytes=20000", "-c", "file.delete.delay.ms=0")
    assert created.returncode == 0, created.stderr
    lines = b"".join(b"%06d-%s\n" % (i, b"z" * 80) for i in range(6000))
    producer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "400",
                                 "--acks", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_env(data_dir))

    def race(_round: int) -> None:
        end = json.loads(_klog(data_dir, "topics", "describe", "t", "--json").stdout)["partitions"][0]
        dr = _klog(data_dir, "topics", "delete-records", "t", "-p", "0",
                   "--before", str(end["high_watermark"] // 2))
        assert dr.returncode == 0 and "Traceback" not in dr.stderr, dr.stderr
        clean = _klog(data_dir, "topics", "clean")
        assert clean.returncode == 0, clean.stderr

    err = _race_a_producer(producer, lines, rounds=3, pause_s=0.2, race=race)
    assert producer.returncode == 0, err
    verify = _klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    records = _read_all(data_dir)
    assert records and records[-1]["offset"] == 5999
    first = records[0]["offset"]
    assert [r["offset"] for r in records] == list(range(first, 6000))
    assert all(r["value"] == f"{r['offset']:06d}-{'z' * 80}" for r in records)


def test_a_kafka_client_writes_correctly_after_a_killed_cli_producer(data_dir):
    """`klog serve` (a second process's writer) takes over a partition whose last writer died
    with roll flushes pending (crash point roll-flush-pending): confluent-kafka's acks=all writes
    land after every record the dead writer acknowledged, contiguous, and verify passes."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from klog.server import Server

    assert _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}").returncode == 0
    lines = b"".join(b"old-%05d\n" % i for i in range(400))
    dead = subprocess.run([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "200", "--print-offsets"],
                          input=lines, capture_output=True, timeout=60,
                          env=_env(data_dir, KLOG_CRASH_AT="roll-flush-pending:5"))
    assert dead.returncode == -9, dead.stderr
    acked = len(dead.stdout.splitlines())
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            producer.produce("t", b"new-%05d" % i)
        assert producer.flush(30) == 0
    verify = _klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    values = [r["value"] for r in _read_all(data_dir)]
    old = [v for v in values if v.startswith("old-")]
    assert len(old) >= acked and old == [f"old-{i:05d}" for i in range(len(old))]
    assert values[len(old):] == [f"new-{i:05d}" for i in range(300)]


# -- klog-strict-records ------------------------------------------------------------------------

def test_a_confluent_consumer_through_serve_reads_an_imported_high_attributes_log_as_kafka(cli, data_dir, tmp_path):
    """klog serve sends the imported segment's bytes as they are: librdkafka reads the attributes
    byte as Kafka does (int8, unused), so it gets Kafka's offsets, keys and timestamps, as local
    `consume --json` does."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from klog.server import Server
    from tests.kafka_files import write_segment
    from tests.store.test_record_attributes import EXPECTED, _high_attributes_batch

    write_segment(str(tmp_path / "kafka" / "odd-0"), 0, [_high_attributes_batch(0)])
    assert cli("dirs", "import", str(tmp_path / "kafka")).exit_code == 0
    local = [json.loads(line) for line in cli("consume", "odd", "--json").out.splitlines()]
    assert [(r["offset"], r["timestamp"], r["key"].encode(), r["value"].encode()) for r in local] == EXPECTED
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{server.port}", "group.id": "g",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["odd"])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(EXPECTED) and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    got.append((m.offset(), m.timestamp()[1], m.key(), m.value()))
        finally:
            consumer.close()
    assert got == EXPECTED


# -- dirs list sizes ------------------------------------------------------------------------------

def test_dirs_list_and_topics_describe_agree_while_deleted_files_wait(data_dir):
    """Retention renames old segments to .deleted and leaves them for file.delete.delay.ms: the
    size both commands show is the live segments' .log bytes only, the same figure in both."""
    assert _klog(data_dir, "topics", "create", "t", "-c", "segment.bytes=1000", "-c", "retention.bytes=3000",
                 "-c", "file.delete.delay.ms=600000").returncode == 0
    lines = "".join(f"{i:04d}-{'x' * 30}\n" for i in range(300))
    r = subprocess.run([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "500"], input=lines.encode(),
                       capture_output=True, env=_env(data_dir), timeout=60)
    assert r.returncode == 0, r.stderr
    assert _klog(data_dir, "topics", "clean").returncode == 0
    folder = os.path.join(data_dir, "logs", "t-0")
    names = os.listdir(folder)
    assert any(n.endswith(".deleted") for n in names), names
    live = sum(os.path.getsize(os.path.join(folder, n)) for n in names if n.endswith(".log"))
    dirs = json.loads(_klog(data_dir, "dirs", "list", "--json").stdout.splitlines()[0])
    described = json.loads(_klog(data_dir, "topics", "describe", "t", "--json").stdout)["partitions"][0]
    assert dirs["size_bytes"] == described["size_bytes"] == live
    assert live <= 3000 + 1000


# -- offset expiry settings ---------------------------------------------------------------------

@pytest.mark.parametrize(("value", "code"), [("0", 2), ("-5", 2), ("abc", 2), ("1.5", 2), ("\u00b2", 2),
                                             ("\u0663", 2), ("3", 0)])
def test_groups_clean_with_a_bad_retention_in_klog_json_is_one_line_and_exit_2(data_dir, value, code):
    assert _klog(data_dir, "topics", "create", "t").returncode == 0
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc["defaults"]["offsets.retention.minutes"] = value
    with open(path, "w") as f:
        json.dump(doc, f)
    r = _klog(data_dir, "groups", "clean")
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    if code:
        assert r.stderr.count("\n") == 1 and "offsets.retention.minutes" in r.stderr, r.stderr
    else:
        assert r.stderr == "0 group(s) changed\n"


def test_groups_clean_keeps_an_active_cli_groups_offsets_and_an_empty_one_within_retention(data_dir):
    """A klog consumer group that is reading (a live member) keeps its offsets at the shortest
    retention (1 minute) even when they are older; once Empty it keeps them for that minute."""
    with klog.open(data_dir) as store:
        store.create_topic("t", 1)
        with store.producer() as p:
            for i in range(5):
                p.send("t", b"v%d" % i)
        path = os.path.join(data_dir, "klog.json")
        with open(path) as f:
            doc = json.load(f)
        doc["defaults"]["offsets.retention.minutes"] = "1"
        with open(path, "w") as f:
            json.dump(doc, f)
        with store.group_consumer("g", "t", enable_auto_commit=False) as c:
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                got += c.poll(timeout_ms=100)
            c.commit({("t", 0): 3})
            live = _klog(data_dir, "groups", "clean", "--json")
            assert live.returncode == 0 and live.stdout == "", live.stdout + live.stderr
    after = _klog(data_dir, "groups", "clean")  # just became Empty: kept for the minute
    assert after.returncode == 0 and after.stderr == "0 group(s) changed\n", after.stderr
    described = _klog(data_dir, "groups", "describe", "g", "--json")
    assert described.returncode == 0, described.stderr
    assert '"committed_offset": 3' in described.stdout.replace(" ", " ") or "3" in described.stdout, described.stdout


@pytest.mark.parametrize("args", [("topics", "delete-records", "t", "--before", "\u00b2"),
                                  ("consume", "t", "--since", "\u00b2"), ("consume", "t", "--until", "\u00b9")])
def test_a_non_ascii_digit_in_a_time_or_offset_is_one_line_and_exit_2(data_dir, args):
    """str.isdigit() accepts '²', which int() refuses: a traceback before the isascii check."""
    assert _klog(data_dir, "topics", "create", "t").returncode == 0
    r = _klog(data_dir, *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


# -- consume -b through the Fetch reader vs the local store ---------------------------------------

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def served_mixed_topic(tmp_path_factory):
    """A 3-partition topic of five codecs' batches, null keys and values, headers (one with a
    null value), non-ASCII values, one timestamp per second; `klog serve` over it."""
    from klog.server import Server

    data = str(tmp_path_factory.mktemp("mixed") / "data")
    with klog.open(data) as s:
        s.create_topic("m", 3)
        i = 0
        for codec_name in ("none", "gzip", "snappy", "lz4", "zstd"):
            with s.producer(compression_type=codec_name, batch_size=600) as p:
                for _ in range(60):
                    key = None if i % 7 == 0 else b"k%d" % (i % 13)
                    value = None if i % 11 == 0 else f"v{i}-\u00e9".encode()
                    headers = [("h", b"x%d" % i), ("n", None)] if i % 5 == 0 else []
                    p.send("m", value, key=key, headers=headers, timestamp=T0 + i * 1000)
                    i += 1
    with Server(data, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        yield data, f"127.0.0.1:{server.port}"


@pytest.mark.parametrize("args", [
    ["--json"], [], ["-n", "5", "--json"], ["--tail", "3", "--json"], ["-o", "10", "--json"], ["-o", "-5", "--json"],
    ["--since", str(T0 + 100_000), "--until", str(T0 + 200_000), "--json"], ["-p", "1", "--json"],
    ["-p", "2", "-o", "7"], ["--format", "%p %o %k %s %T %h\\n"], ["-f", "-n", "20", "--json"],
    ["--last", "4", "--json"], ["-p", "1", "--tail", "2"], ["-o", "end", "--json"], ["--json", "-n", "1000"],
    ["-p", "9"], ["-o", "100000"],
], ids=lambda a: " ".join(a) or "values")
def test_consume_through_serve_prints_what_the_local_store_prints(served_mixed_topic, args):
    data, bootstrap = served_mixed_topic
    env = _env(data, KLOG_CLUSTER_TIMEOUT="5")
    local = subprocess.run([sys.executable, "-m", "klog", "consume", "m", *args], env=env, capture_output=True,
                           timeout=60)
    remote = subprocess.run([sys.executable, "-m", "klog", "consume", "m", *args, "-b", bootstrap], env=env,
                            capture_output=True, timeout=60)
    assert (remote.returncode, remote.stdout, remote.stderr) == (local.returncode, local.stdout, local.stderr)
    if args in (["--json"], []):
        assert len(local.stdout.splitlines()) == 300


def test_consume_from_an_unreachable_broker_is_one_line_within_the_timeout(data_dir):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "klog", "consume", "t", "-b", f"127.0.0.1:{port}"], capture_output=True,
                       text=True, env=_env(data_dir, KLOG_CLUSTER_TIMEOUT="2"), timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - started < 10


def test_a_topic_deleted_while_consume_b_follows_it_ends_in_one_line_exit_1(served_mixed_topic, tmp_path):
    """Locally: "topic 'm' was deleted while being followed" at once. Through a cluster: one line
    saying so and naming the partition once the metadata has not named the topic for a second
    (fetch.TOPIC_GONE_S), well before $KLOG_CLUSTER_TIMEOUT."""
    data, bootstrap = served_mixed_topic
    env = _env(data, KLOG_CLUSTER_TIMEOUT="30")
    with klog.open(data) as s:
        s.create_topic("gone", 1)
        with s.producer() as p:
            for i in range(10):
                p.send("gone", b"g%d" % i)
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "gone", "-f", "-b", bootstrap], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for i in range(10):
            assert proc.stdout.readline() == b"g%d\n" % i  # type: ignore[union-attr]
        deleted = _klog(data, "topics", "delete", "gone", "--yes")
        assert deleted.returncode == 0, deleted.stderr
        gone_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - gone_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.decode()
    assert proc.returncode == 1 and text.count("\n") == 1 and "gone-0" in text and "Traceback" not in text, text
    assert "was deleted while being read" in text and took < 15, (took, text)
    # the reader's leader lookups must not have created it again (librdkafka's admin handle is a
    # producer: its metadata lookup of one topic asks an auto-creating broker to create it)
    with klog.open(data) as s:
        assert not s.has_topic("gone")


# -- compaction and topic deletion racing a rolling producer --------------------------------------

@pytest.mark.slow
def test_compaction_racing_a_rolling_keyed_producer_keeps_each_keys_latest_value(data_dir):
    """`topics clean` compacts (rewriting sealed segments whose flush may be pending in the
    producer's process) while a keyed producer rolls every few records: the last value of every
    key survives, offsets only grow, verify passes."""
    created = _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}",
                    "-c", "cleanup.policy=compact", "-c", "min.cleanable.dirty.ratio=0.01",
                    "-c", "min.compaction.lag.ms=0", "-c", "file.delete.delay.ms=0")
    assert created.returncode == 0, created.stderr
    lines = b"".join(b"k%d:%06d\n" % (i % 37, i) for i in range(8000))
    producer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "-K", ":", "--batch-size", "300",
                                 "--acks", "1"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(data_dir))
    compacted = 0

    def race(_round: int) -> None:
        nonlocal compacted
        clean = _klog(data_dir, "topics", "clean")
        assert clean.returncode == 0 and "Traceback" not in clean.stderr, clean.stderr
        compacted += "Cleaned t-0" in clean.stderr

    err = _race_a_producer(producer, lines, rounds=4, pause_s=0.3, race=race)
    assert producer.returncode == 0, err
    assert compacted, "no compaction ran while the producer wrote: nothing raced"
    assert _klog(data_dir, "topics", "clean").returncode == 0
    verify = _klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    records = _read_all(data_dir)
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 7999
    latest = {r["key"]: r["value"] for r in records}
    assert latest == {f"k{i % 37}": f"{i:06d}" for i in range(8000 - 37, 8000)}


def test_a_topic_deleted_under_a_rolling_producer_ends_it_in_one_line_and_leaves_nothing(data_dir):
    """The producer's flusher may still hold the deleted folder's segments: the producer stops
    with one line (exit 1), and no folder or file of the topic comes back."""
    assert _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}").returncode == 0
    producer = subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "--batch-size", "300", "--acks", "0"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_env(data_dir))
    try:
        i = 0
        for phase in ("before", "after"):
            if phase == "after":
                deleted = _klog(data_dir, "topics", "delete", "t", "--yes")
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
    assert _klog(data_dir, "verify").returncode == 0


# -- offset expiry while a CLI group reads, through klog serve's periodic run -----------------------

@pytest.mark.slow
def test_serves_expiry_keeps_a_reading_cli_groups_offsets_and_drops_them_once_it_is_gone(data_dir):
    """klog serve expires every 50 ms with a 300 ms retention: a `klog consume --group -f`
    that committed seconds ago keeps its offsets while it runs; once it stopped and the
    retention passed, the group is gone and a new member starts from the beginning."""
    from klog.server import Server

    with klog.open(data_dir) as s:
        s.create_topic("t", 2)
        with s.producer() as p:
            for i in range(20):
                p.send("t", b"a%d" % i, key=b"%d" % i)
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, offsets_retention_ms=300,
                offsets_retention_check_ms=50):
        consumer = subprocess.Popen([sys.executable, "-m", "klog", "consume", "t", "--group", "g", "-f"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(data_dir))
        try:
            assert len([consumer.stdout.readline() for _ in range(20)]) == 20  # type: ignore[union-attr]
            deadline = time.monotonic() + 20
            first: dict = {}
            while not first and time.monotonic() < deadline:  # its first commit (auto-commit)
                described = json.loads(_klog(data_dir, "groups", "describe", "g", "--json").stdout)
                if [p.get("committed") for p in described["partitions"]] == [10, 10]:
                    first = {p["partition"]: p["commit_ms"] for p in described["partitions"]}
            assert first, described
            time.sleep(1.5)  # 30 expiry passes, past the 300 ms retention of that commit
            described = json.loads(_klog(data_dir, "groups", "describe", "g", "--json").stdout)
            assert described["state"] == "Stable"
            assert [p["committed"] for p in described["partitions"]] == [10, 10], described
        finally:
            consumer.send_signal(signal.SIGINT)
            consumer.communicate(timeout=30)
        time.sleep(1.0)
        listed = _klog(data_dir, "groups", "list")
        assert listed.returncode == 0 and "\ng " not in listed.stdout and not any(
            line.split()[:1] == ["g"] for line in listed.stdout.splitlines()), listed.stdout
        again = _klog(data_dir, "consume", "t", "--group", "g", "-n", "20")
        assert again.returncode == 0 and len(again.stdout.splitlines()) == 20


@pytest.mark.slow
def test_two_cli_producers_on_one_rolling_partition_one_killed_keep_every_acknowledged_record(data_dir):
    """Two `klog produce` processes interleave appends (each reopens the partition after the
    other: its pending roll flushes are dropped); one is killed -9 midway. Every record either
    acknowledged is there once, each writer's in its input order, and verify passes."""
    assert _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}").returncode == 0
    procs = [subprocess.Popen([sys.executable, "-m", "klog", "produce", "t", "--print-offsets", "--acks", "1"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(data_dir))
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
        printed = [line.split(b"\t") for line in proc.stdout.read().splitlines()]  # type: ignore[union-attr]
        for i, parts in enumerate(printed):
            if len(parts) == 3 and parts[2].isdigit():
                acked[int(parts[2])] = sent[w][i]
    assert len(acked) > 20
    values = [r["value"].encode() for r in _read_all(data_dir)]
    assert len(set(values)) == len(values)
    assert all(values[o] == v for o, v in acked.items())
    for w in range(2):
        mine = [v for v in values if v.startswith(b"w%d-" % w)]
        assert mine == sorted(mine, key=lambda v: int(v.split(b"-")[1]))
    assert _klog(data_dir, "verify").returncode == 0


@pytest.mark.slow
def test_delete_records_through_serve_while_a_kafka_producer_rolls_the_partition(data_dir):
    """In one process (klog serve): DeleteRecords moves the log start, deleting sealed segments
    whose background flush the same server's appends left pending, while confluent-kafka keeps
    producing with acks=all. Every record from the final log start on is the one sent, in order."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    from klog.server import Server

    assert _klog(data_dir, "topics", "create", "t", "-c", f"segment.bytes={SEGMENT_BYTES}",
                 "-c", "file.delete.delay.ms=0").returncode == 0
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                                             "batch.size": 400, "enable.idempotence": True})
        admin = AdminClient({"bootstrap.servers": bootstrap})
        sent = flushed = 0
        for _ in range(5):
            for _ in range(400):
                producer.produce("t", f"{sent:06d}-{'p' * 60}".encode(), partition=0)
                sent += 1
                producer.poll(0)
            if flushed:  # while this round's batches are still being written
                tp = confluent_kafka.TopicPartition("t", 0, flushed - 100)
                assert admin.delete_records([tp])[tp].result(timeout=15).low_watermark == flushed - 100
            assert producer.flush(30) == 0
            flushed = sent
    verify = _klog(data_dir, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    records = _read_all(data_dir)
    assert records[0]["offset"] <= sent - 500 and records[-1]["offset"] == sent - 1
    assert all(r["value"] == f"{r['offset']:06d}-{'p' * 60}" for r in records)
    assert [r["offset"] for r in records] == list(range(records[0]["offset"], sent))

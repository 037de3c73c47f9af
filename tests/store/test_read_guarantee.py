"""Guarantee 1: a read prints every record from its start to its end, or fails with one line and
exit 1 — never a gap, a jump or a short output with exit 0.

Property-style: random damage (a deleted, zeroed, cut or unreadable segment, a bad index entry, a
flipped base offset, a lost state file) anywhere in a multi-segment partition, then a real
`klog consume` process; each seed is printed so a failure replays.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.peak_rss import run_measured

RECORDS = 3000
DAMAGES = ("delete-log", "zero-log", "cut-log", "unreadable-log", "bad-index", "flip-base-offset",
           "delete-first-log", "delete-last-log")


def _klog(data_dir: str, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "klog", *args], input=input, capture_output=True, timeout=60,
                          env=env)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> str:
    """One multi-segment partition, written once (in this process: the reads under test are the real
    processes) and copied for each case."""
    import klog

    data_dir = str(tmp_path_factory.mktemp("pristine") / "data")
    with klog.open(data_dir) as store:
        store.create_topic("t", configs={"segment.bytes": "4000", "index.interval.bytes": "200"})
        # small batches so segments hold many of them and an index exists
        with store.producer(batch_size=100) as producer:
            for i in range(RECORDS):
                producer.send("t", b"record-%05d" % i)
                if i % 100 == 99:
                    producer.flush()
        assert len(store.partition("t", 0).leader.bases) >= 5
    return data_dir


def _segments(part_dir: str) -> list[str]:
    return sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log"))


def _damage(part_dir: str, kind: str, rng: random.Random) -> None:
    logs = _segments(part_dir)
    assert len(logs) >= 5
    log = rng.choice(logs[:-1]) if kind != "delete-last-log" else logs[-1]
    if kind == "delete-first-log":
        log = logs[0]
    size = os.path.getsize(log)
    if kind in ("delete-log", "delete-first-log", "delete-last-log"):
        os.unlink(log)
    elif kind == "zero-log":
        with open(log, "r+b") as f:
            f.write(b"\0" * size)
    elif kind == "cut-log":
        with open(log, "r+b") as f:
            f.truncate(rng.randrange(0, size))
    elif kind == "unreadable-log":
        os.unlink(log)
        os.mkdir(log)  # reads fail with EISDIR, as root too (a chmod 000 would not stop root)
    elif kind == "bad-index":
        index = log[:-4] + ".index"
        with open(index, "r+b") as f:
            n = os.path.getsize(index) // 8
            if n:
                f.seek(8 * rng.randrange(n))
                f.write(rng.randbytes(8))
    elif kind == "flip-base-offset":
        with open(log, "r+b") as f:
            data = f.read()
            starts, pos = [], 0
            while pos + 12 <= len(data):
                starts.append(pos)
                pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
            f.seek(rng.choice(starts) + 7)  # the low byte of a batch's base offset (not CRC-covered)
            f.write(bytes([data[f.tell()] ^ (1 << rng.randrange(8))]))


# Seeds 0-7 take each damage once (0, 3 and 6 read as --json) in the fast lane; the rest are the slow lane's.
SEEDS = [s if s < len(DAMAGES) else pytest.param(s, marks=pytest.mark.slow) for s in range(24)]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_random_damage_never_gives_a_short_read_with_exit_0(pristine, tmp_path, seed, replay_seed):
    seed = replay_seed(seed)
    rng = random.Random(seed)
    kind = DAMAGES[seed % len(DAMAGES)]
    data_dir = str(tmp_path / "data")
    shutil.copytree(pristine, data_dir, symlinks=True)
    part_dir = os.path.join(data_dir, "logs", "t-0") if os.path.isdir(os.path.join(data_dir, "logs")) else None
    if part_dir is None:
        part_dir = next(os.path.join(root, d) for root, dirs, _ in os.walk(data_dir) for d in dirs if d == "t-0")
    _damage(part_dir, kind, rng)
    args = ["consume", "t"] + (["--json"] if seed % 3 == 0 else [])
    result = _klog(data_dir, *args)
    out_lines = result.stdout.splitlines()
    where = f"seed {seed} ({kind}): exit {result.returncode}, {len(out_lines)} lines, stderr {result.stderr!r}"
    if result.returncode == 0:
        assert len(out_lines) == RECORDS, where
        if seed % 3:
            assert out_lines == [b"record-%05d" % i for i in range(RECORDS)], where
    else:
        assert result.returncode == 1, where
        err = result.stderr.decode()
        assert err.count("\n") == 1 and "Traceback" not in err, where
        assert len(out_lines) < RECORDS, where
    # guarantee 2: verify proves what a reader needs, so every one of these damages fails it
    checked = _klog(data_dir, "verify")
    assert checked.returncode == 1, f"seed {seed} ({kind}): verify said {checked.stdout!r} {checked.stderr!r}"
    assert b"DAMAGED" in checked.stdout and b"Traceback" not in checked.stderr


def _limit_open_files(n: int):
    import resource

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return set_limit


def test_many_segments_under_a_low_open_file_limit_read_whole(tmp_path):
    """Readers keep a bounded set of segment files open: 200 segments under `ulimit -n 48`
    read whole (issue 18: a plain consume printed a fifth of the records and exited 0)."""
    import klog

    data_dir = str(tmp_path / "data")
    with klog.open(data_dir) as store:
        store.create_topic("t", configs={"segment.bytes": "100"})
        with store.producer(batch_size=1) as producer:
            for i in range(200):
                producer.send("t", b"v%03d" % i)
                producer.flush()
        assert len(store.partition("t", 0).leader.bases) >= 200
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    result = subprocess.run([sys.executable, "-m", "klog", "consume", "t"], capture_output=True, timeout=60, env=env,
                            preexec_fn=_limit_open_files(48))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [b"v%03d" % i for i in range(200)]


class _ShortWriter:
    """A stream that takes at most `limit` bytes per call, as CPython's does past 2 GiB."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.got = bytearray()
        self.calls = 0

    def write(self, data) -> int:  # noqa: ANN001 - bytes or memoryview
        self.calls += 1
        taken = bytes(data[:self.limit])
        self.got += taken
        return len(taken)

    def flush(self) -> None:
        pass


def test_stdout_writes_are_complete_even_when_the_stream_takes_part_of_a_chunk():
    """Guarantee 4: consume printed 2,147,479,552 of 2,516,582,426 bytes and exited 0."""
    from klog.client.record_writer import WRITE_CHUNK_BYTES, write_all

    data = os.urandom(3 * WRITE_CHUNK_BYTES + 12345)
    out = _ShortWriter(WRITE_CHUNK_BYTES - 7)
    write_all(out, data)
    assert bytes(out.got) == data
    assert out.calls == -(-len(data) // out.limit)  # each short write resumed where it stopped
    stuck = _ShortWriter(0)
    with pytest.raises(OSError):
        write_all(stuck, b"x")


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["zstd", "gzip", "lz4", "snappy"])
def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path, codec):
    """Guarantee 3: a small compressed batch that expands past klog's per-batch limit is damage,
    reported in one line by consume and verify, and never allocated whole (RSS stays small)."""
    import klog
    from klog.store import codec as batch_codec
    from klog.store import compression

    data_dir = str(tmp_path / "data")
    value = bytes(64 << 20)  # five of them: 320 MiB, past the 256 MiB limit
    batch = batch_codec.encode_batch([(None, value, (), 0)] * 5, 0, codec=compression.CODEC_IDS[codec])
    assert len(batch) < 30 << 20
    with klog.open(data_dir) as store:
        store.create_topic("t")
        part = store.partition("t", 0)
        with part.lock:
            part.open_for_write()
            part.append_batch(batch)
            part.publish()
    del batch, value
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    for args in (["consume", "t"], ["consume", "t", "--json"], ["verify"]):
        got = run_measured([sys.executable, "-m", "klog", *args], env=env, timeout=120)
        code, rss_kb = got.returncode, got.peak_rss_kib
        assert code == 1 and "expands past" in got.said, (args, got.said)
        assert rss_kb < 600_000, (args, rss_kb)  # 5 x 64 MiB records = 320 MiB decoded: never allocated whole


def test_the_servers_zero_copy_range_never_answers_empty_below_the_high_watermark(pristine, tmp_path):
    """klog serve's fetch path (Partition.byte_range) keeps read()'s rules: a lost segment is an
    error (the server answers CORRUPT_MESSAGE / KAFKA_STORAGE_ERROR), never an empty fetch."""
    import klog
    from klog.errors import CorruptLogError

    data_dir = str(tmp_path / "data")
    shutil.copytree(pristine, data_dir)
    logs = _segments(os.path.join(data_dir, "logs", "t-0"))
    middle, last = logs[len(logs) // 2], logs[-1]
    hole = int(os.path.basename(middle)[:20])
    os.unlink(middle)
    os.unlink(last)
    with klog.open(data_dir) as store:
        part = store.partition("t", 0)
        found = part.byte_range(0, 1 << 20)
        assert found is not None and found.first.base_offset == 0
        found.close()
        for offset in (hole, int(os.path.basename(last)[:20])):
            with pytest.raises(CorruptLogError, match="missing"):
                part.byte_range(offset, 1 << 20)


def test_a_time_lookup_that_cannot_read_fails_instead_of_starting_at_the_end(pristine, tmp_path):
    """consume --since over an unreadable segment printed nothing and exited 0."""
    data_dir = str(tmp_path / "data")
    shutil.copytree(pristine, data_dir)
    first = _segments(os.path.join(data_dir, "logs", "t-0"))[0]
    os.unlink(first)
    os.mkdir(first)  # reads fail with EISDIR
    r = _klog(data_dir, "consume", "t", "--since", "0")
    assert r.returncode == 1 and r.stdout == b"" and r.stderr.count(b"\n") == 1, r

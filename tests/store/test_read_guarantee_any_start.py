"""The one read guarantee for every reader, served or local, from any start offset: every record
from the start offset to the end, or an error (exit 1) after a prefix of them — never records
missing or repeated with exit 0.

The damage is the second audit's: a batch's base offset (outside the CRC) raised by 5, so its 45
records claim offsets 1850..1894 while the batches around it hold ..1844 and 1890.. — or a
segment's first batch lowered by 5. Before, a read that started at the damaged batch (local
`consume -o 1850`), or any read through `klog serve` (whose zero-copy fetch checked only the first
batch of a range), printed records under offsets that are not theirs and exited 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

import klog
from klog.errors import CorruptLogError
from klog.server import Server
from klog.store import codec
from klog.store.log import FetchedBatch
from klog.store.reader import PartitionReader
from tests.conftest import REPO

RECORDS = 3000
PER_BATCH = 45
KCAT = shutil.which("kcat")
EXPECTED = [b"record-%05d" % i for i in range(RECORDS)]


def _rewrite_base_offset(part_dir: str, old: int, new: int) -> None:
    for name in sorted(n for n in os.listdir(part_dir) if n.endswith(".log")):
        path = os.path.join(part_dir, name)
        with open(path, "r+b") as f:
            data = f.read()
            pos = 0
            while pos + 12 <= len(data):
                if int.from_bytes(data[pos:pos + 8], "big") == old:
                    f.seek(pos)
                    f.write(new.to_bytes(8, "big"))  # not under the CRC: the batch still checks
                    return
                pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    raise AssertionError(f"no batch at offset {old}")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> str:
    data_dir = str(tmp_path_factory.mktemp("any-start") / "data")
    with klog.open(data_dir) as store:
        store.create_topic("t", configs={"segment.bytes": "8000"})
        with store.producer(batch_size=1 << 20) as producer:
            for i in range(RECORDS):
                producer.send("t", EXPECTED[i])
                if i % PER_BATCH == PER_BATCH - 1:
                    producer.flush()
        assert 1800 in store.partition("t", 0).leader.bases  # 1845 is its second batch
    return data_dir


DAMAGES = {"raised": (1845, 1850), "lowered-first-of-segment": (1800, 1795)}


def _damaged(pristine: str, tmp_path, damage: str) -> str:
    data_dir = str(tmp_path / "data")
    shutil.copytree(pristine, data_dir)
    _rewrite_base_offset(os.path.join(data_dir, "logs", "t-0"), *DAMAGES[damage])
    return data_dir


def _assert_prefix_then_error(returncode: int, lines: list[bytes], start: int, stderr: bytes, who: str) -> None:
    """An error after records start.. in order (a prefix of them), not all of them."""
    assert returncode == 1, f"{who}: exit {returncode}, {len(lines)} lines, {stderr[-300:]!r}"
    assert lines == EXPECTED[start:start + len(lines)], f"{who}: records out of place"
    assert len(lines) < RECORDS - start


def _klog(data_dir: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, timeout=60, env=env)


@pytest.mark.parametrize(("damage", "start"), [("raised", 0), ("raised", 1845), ("raised", 1850), ("raised", 1870),
                                               ("lowered-first-of-segment", 0),
                                               ("lowered-first-of-segment", 1800)])
def test_local_consume_from_any_offset_reads_every_record_or_fails(pristine, tmp_path, damage, start):
    data_dir = _damaged(pristine, tmp_path, damage)
    r = _klog(data_dir, "consume", "t", "-o", str(start))
    _assert_prefix_then_error(r.returncode, r.stdout.splitlines(), start, r.stderr, f"consume -o {start}")
    assert r.stderr.count(b"\n") == 1 and b"Traceback" not in r.stderr


def test_local_consume_from_past_the_damage_reads_every_record(pristine, tmp_path):
    """1895 lies past the raised batch's claim (..1894): the batch holding it starts at 1890, which
    the batch after it vouches for by starting exactly where it ends (store/resume.py), so the read
    starts there (a lowered 1890 would not be followed by 1935: tests/store/test_damage_resume.py)."""
    data_dir = _damaged(pristine, tmp_path, "raised")
    r = _klog(data_dir, "consume", "t", "-o", "1895")
    assert (r.returncode, r.stdout.splitlines()) == (0, EXPECTED[1895:]), r.stderr


def _confluent(bootstrap: str, start: int) -> tuple[int, list[bytes], bytes]:
    ck = pytest.importorskip("confluent_kafka")
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("t", 0, start)])
    got: list[bytes] = []
    error = b""
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(got) < RECORDS - start and not error:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                error = str(msg.error()).encode()
            elif msg.value() != EXPECTED[msg.offset()]:
                got.append(b"offset %d holds %r" % (msg.offset(), msg.value()))
            else:
                got.append(msg.value())
    finally:
        consumer.close()
    return (1 if error else 0), got, error


@pytest.mark.parametrize("start", [0, 1850])
def test_every_client_through_serve_gets_every_record_or_an_error(pristine, tmp_path, start):
    data_dir = _damaged(pristine, tmp_path, "raised")
    with Server(data_dir, listen=("127.0.0.1", 0)) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        r = _klog(data_dir, "consume", "-b", bootstrap, "t", "-o", str(start))
        _assert_prefix_then_error(r.returncode, r.stdout.splitlines(), start, r.stderr, "klog consume -b")
        assert b"CORRUPT_MESSAGE" in r.stderr
        if KCAT:
            r = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", "t", "-p", "0", "-o", str(start), "-e", "-q"],
                               capture_output=True, timeout=30)
            _assert_prefix_then_error(r.returncode, r.stdout.splitlines(), start, r.stderr, "kcat")
        code, lines, error = _confluent(bootstrap, start)
        _assert_prefix_then_error(code, lines, start, error, "confluent-kafka")


def test_the_servers_range_ends_before_a_batch_that_does_not_follow(pristine, tmp_path):
    data_dir = _damaged(pristine, tmp_path, "raised")
    with klog.open(data_dir) as store:
        part = store.partition("t", 0)
        found = part.byte_range(1800, 1 << 20)
        try:
            data = os.pread(found.fd, found.length, found.position)
        finally:
            found.close()
        headers = []
        at = 0
        while at < len(data):
            headers.append(codec.read_header(data, at))
            at += headers[-1].size
        assert at == len(data) and headers[-1].next_offset == 1845  # whole batches, up to the damage
        with pytest.raises(CorruptLogError, match="1845..1849 are missing"):
            part.byte_range(1845, 1 << 20)


class _Overlapping:
    """A partition whose reads (as a broker's fetch answers) hand out a batch claiming offsets the
    batch before it already had."""

    def __init__(self) -> None:
        self.batches = [self._batch(0, 10), self._batch(10, 10), self._batch(15, 10)]  # 15..19 twice

    @staticmethod
    def _batch(base: int, n: int) -> FetchedBatch:
        data = codec.encode_batch([(None, b"v%d" % (base + i), [], 0) for i in range(n)], base)
        return FetchedBatch(codec.read_header(data), data, 0, 0, "fake")

    def read(self, offset: int, _max_bytes: int, _upper: int | None) -> list[FetchedBatch]:
        return [fb for fb in self.batches if fb.header.next_offset > offset][:2]

    def log_start_offset(self) -> int:
        return 0

    def high_watermark(self) -> int:
        return 25


def test_the_reader_refuses_a_batch_that_overlaps_what_it_handed_out():
    reader = PartitionReader(_Overlapping(), 0, 25)
    first = reader.fetch()
    assert [fb.header.base_offset for fb in first.batches] == [0, 10]
    with pytest.raises(CorruptLogError, match="15..19 are in two batches"):
        reader.fetch()

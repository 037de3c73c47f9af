"""read_committed's walk saved per partition (klog.store.txn_cache): a new process's first refresh
walks only what follows the last sealed segment a walk went through, and the view it builds is the
one a full walk builds, whatever happened to the log since (or to the file)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import klog
from klog.store import codec
from klog.store.segment import LogSegment
from klog.store.txn import StableView

pytestmark = pytest.mark.slow

SEGMENTS = 40


def _fill(store, topic: str, segments: int, tid: str = "t") -> None:
    """Transactions committed and aborted, one batch per segment (segment.bytes 200)."""
    part = store.partition(topic, 0)
    n = 0
    with store.producer(transactional_id=tid) as producer:
        while len(part.leader.bases) < segments:
            producer.begin()
            producer.send(topic, b"v%d" % n, key=b"k%d" % (n % 4), partition=0)
            producer.flush()
            producer.abort() if n % 3 == 0 else producer.commit()
            n += 1
            part.leader.refresh_segments()


def _plain(part, count: int) -> None:
    now = int(time.time() * 1000)
    with part.lock:
        part.open_for_write()
        for _ in range(count):
            part.append_batch(codec.encode_batch([(b"k", b"v" * 100, (), now)]))
        part.publish()


def _view(data_dir: str, topic: str, saved: bool, monkeypatch) -> tuple[tuple, int]:
    """As a new process sees it: (LSO, aborted ranges, open transactions) and the headers walked."""
    walked = [0]
    headers = LogSegment.iter_headers

    def counted(self, *args, **kwargs):  # noqa: ANN202
        for item in headers(self, *args, **kwargs):
            walked[0] += 1
            yield item

    monkeypatch.setattr(LogSegment, "iter_headers", counted)
    try:
        with klog.open(data_dir) as store:
            part = store.partition(topic, 0)
            if not saved:
                part.leader.txn_view_path = None
            view = StableView(part.leader)
            hw = part.high_watermark()
            lso = view.refresh(hw)
            state = (lso, [(a.producer_id, a.first_offset, a.last_offset) for a in view.aborted_txns],
                     dict(view.tracker.open), [view.aborted(h) for s in part.leader.segments.values()
                                               for _, h in headers(s, 0, s.file_size())])
    finally:
        monkeypatch.setattr(LogSegment, "iter_headers", headers)
    return state, walked[0]


def _cache(data_dir: str, topic: str) -> str:
    return os.path.join(data_dir, "state", f"{topic}-0.txnview")


def _settle() -> None:
    time.sleep(0.06)  # (a file changed within klog.store.log.FOLDER_SETTLED_NS of a walk is not saved)


@pytest.fixture(autouse=True)
def _save_every_walk(monkeypatch):
    import klog.store.txn as txn

    monkeypatch.setattr(txn, "SAVE_AFTER_OFFSETS", 1)  # (else only a walk of 10,000 offsets saves)


@pytest.fixture
def log(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("x", 1, configs={"segment.bytes": "200"})
        _fill(store, "x", SEGMENTS)
    _settle()
    return data_dir


def test_a_second_process_walks_only_what_follows_the_saved_walk(log, monkeypatch):
    first, walked_first = _view(log, "x", True, monkeypatch)
    assert os.path.exists(_cache(log, "x"))
    second, walked_second = _view(log, "x", True, monkeypatch)
    assert second == first == _view(log, "x", False, monkeypatch)[0]
    assert walked_first >= SEGMENTS
    assert walked_second <= 3  # the active segment's batches only (was every batch of the log)


def test_new_markers_after_the_saved_walk(log, monkeypatch):
    _view(log, "x", True, monkeypatch)
    with klog.open(log) as store:
        _fill(store, "x", SEGMENTS + 5, tid="t2")
        with store.producer(transactional_id="t3") as producer:
            producer.begin()
            producer.send("x", b"open", partition=0)
            producer.flush()
            _settle()
            view, walked = _view(log, "x", True, monkeypatch)
            full, walked_full = _view(log, "x", False, monkeypatch)
            assert view == full and producer.producer_id in view[2]
            assert walked < walked_full // 4
            producer.abort()


def test_an_open_transaction_spanning_rolls(data_dir, monkeypatch):
    with klog.open(data_dir) as store:
        store.create_topic("x", 1, configs={"segment.bytes": "200"})
        _fill(store, "x", 5)
        part = store.partition("x", 0)
        with store.producer(transactional_id="open") as producer:
            producer.begin()
            producer.send("x", b"open", partition=0)
            producer.flush()
            _plain(part, 10)  # rolls: the transaction's first offset is in a sealed segment
            _settle()
            saved, walked = _view(data_dir, "x", True, monkeypatch)
            again, walked_again = _view(data_dir, "x", True, monkeypatch)
            assert saved == again == _view(data_dir, "x", False, monkeypatch)[0]
            assert saved[0] == saved[2][producer.producer_id] < part.high_watermark()  # the LSO holds at it
            assert walked_again < walked
            producer.abort()
        _plain(part, 3)
        _settle()
        assert _view(data_dir, "x", True, monkeypatch)[0] == _view(data_dir, "x", False, monkeypatch)[0]


def test_retention_deleting_the_front(log, monkeypatch):
    _view(log, "x", True, monkeypatch)
    with klog.open(log) as store:
        bases = store.partition("x", 0).leader.bases
        store.delete_records("x", before_offset=bases[10])
    _settle()
    pruned, walked = _view(log, "x", True, monkeypatch)
    assert pruned == _view(log, "x", False, monkeypatch)[0]
    assert walked <= 3


def test_truncation_below_the_saved_walk(log, monkeypatch):
    _view(log, "x", True, monkeypatch)
    with klog.open(log) as store:
        part = store.partition("x", 0)
        part.truncate_to(part.leader.bases[SEGMENTS // 2] + 1)
    _settle()
    assert _view(log, "x", True, monkeypatch)[0] == _view(log, "x", False, monkeypatch)[0]


def test_compaction_by_another_process(data_dir, monkeypatch):
    with klog.open(data_dir) as store:
        store.create_topic("c", 1, configs={"segment.bytes": "200", "cleanup.policy": "compact",
                                           "min.cleanable.dirty.ratio": "0.01"})
        _fill(store, "c", SEGMENTS)
    _settle()
    before, _ = _view(data_dir, "c", True, monkeypatch)
    subprocess.run([sys.executable, "-m", "klog", "--data-dir", data_dir, "topics", "compact", "c"],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=60)
    _settle()
    after, walked = _view(data_dir, "c", True, monkeypatch)
    full, walked_full = _view(data_dir, "c", False, monkeypatch)
    assert after == full
    assert walked == walked_full  # (a swapped segment: the saved walk is not taken)
    assert after != before  # (the cleaning removed records and markers: another view)


@pytest.mark.parametrize("damage", ["flip", "short", "empty", "foreign", "old-format", "garbage"])
def test_a_damaged_or_foreign_file_is_a_full_walk(log, monkeypatch, damage):
    full = _view(log, "x", False, monkeypatch)
    _view(log, "x", True, monkeypatch)
    path = _cache(log, "x")
    data = bytearray(open(path, "rb").read())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10
    elif damage == "short":
        del data[len(data) - 7:]
    elif damage == "empty":
        data = bytearray()
    elif damage == "old-format":
        data[5] = 0  # version 0
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:  # another partition's file (the same layout, another folder)
        with klog.open(log) as store:
            store.create_topic("y", 1, configs={"segment.bytes": "200"})
            _fill(store, "y", SEGMENTS)
        _settle()
        _view(log, "y", True, monkeypatch)
        data = bytearray(open(_cache(log, "y"), "rb").read())
    with open(path, "wb") as f:
        f.write(data)
    view, walked = _view(log, "x", True, monkeypatch)
    assert view == full[0]
    assert walked == full[1]


_KILL_MID_WRITE = """
import os, signal, sys
import klog
from klog.store import txn_cache
from klog.store import txn
from klog.store.txn import StableView

txn.SAVE_AFTER_OFFSETS = 1
real_write = os.write
def write(fd, data):
    real_write(fd, data[:len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
txn_cache.os.write = write
with klog.open(sys.argv[1]) as store:
    part = store.partition("x", 0)
    StableView(part.leader).refresh(part.high_watermark())
"""


def test_killed_while_writing_the_file(log, monkeypatch):
    if os.path.exists(_cache(log, "x")):  # (saved by the transactional producer's own view)
        os.unlink(_cache(log, "x"))
    done = subprocess.run([sys.executable, "-c", _KILL_MID_WRITE, log], capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == -9
    assert os.path.exists(_cache(log, "x").replace(".txnview", ".txnview.tmp"))
    assert not os.path.exists(_cache(log, "x"))
    full = _view(log, "x", False, monkeypatch)
    assert _view(log, "x", True, monkeypatch) == full  # a full walk, which saves it
    second, walked = _view(log, "x", True, monkeypatch)
    assert second == full[0] and walked <= 3


def test_the_file_goes_with_the_topic(log, monkeypatch):
    _view(log, "x", True, monkeypatch)
    with klog.open(log) as store:
        store.delete_topic("x")
    assert not os.path.exists(_cache(log, "x"))


def test_one_active_segment_and_its_truncation(data_dir, monkeypatch):
    """A log in one segment (segment.bytes' default): the walk resumes inside it; a truncation
    below where it stopped and new appends over those bytes are noticed (the last batch walked
    is no longer there)."""
    with klog.open(data_dir) as store:
        store.create_topic("a", 1)
        _fill(store, "a", 1)
        part = store.partition("a", 0)
        with store.producer(transactional_id="many") as producer:
            for n in range(30):
                producer.begin()
                producer.send("a", b"x", partition=0)
                producer.flush()
                producer.abort() if n % 2 else producer.commit()
        assert len(part.leader.bases) == 1
    os.unlink(_cache(data_dir, "a"))  # (saved by the transactional producer's own view)
    saved, walked = _view(data_dir, "a", True, monkeypatch)
    again, walked_again = _view(data_dir, "a", True, monkeypatch)
    assert saved == again and walked >= 60 and walked_again == 0
    before = open(_cache(data_dir, "a"), "rb").read()
    with klog.open(data_dir) as store:
        part = store.partition("a", 0)
        part.truncate_to(part.high_watermark() - 7)
        with store.producer(transactional_id="other") as producer:
            for _ in range(4):
                producer.begin()
                producer.send("a", b"y" * 30, partition=0)
                producer.flush()
                producer.abort()
        assert os.path.getsize(part.leader.segments[0].log_path) > 4000  # (past where the saved walk ended)
    with open(_cache(data_dir, "a"), "wb") as f:  # (the producer's view saved its walk since: the old one back)
        f.write(before)
    view, _ = _view(data_dir, "a", True, monkeypatch)
    assert view == _view(data_dir, "a", False, monkeypatch)[0]


@pytest.mark.parametrize("name", [".txnview", ".txnview.tmp"])
def test_a_link_planted_in_its_place_is_neither_followed_nor_an_error(log, monkeypatch, tmp_path, name):
    full = _view(log, "x", False, monkeypatch)[0]
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    path = _cache(log, "x").replace(".txnview", name)
    if os.path.exists(path):
        os.unlink(path)
    os.symlink(target, path)
    assert _view(log, "x", True, monkeypatch)[0] == full
    assert target.read_bytes() == b"keep"

"""read_ranges (a served Fetch's one loop over a topic's partitions) answers every partition as
Partition.byte_range answers it alone: the same bytes, or the same error, whatever damage its
replicas hold (a zeroed or deleted leader segment with an intact follower, both replicas
damaged, a lost state file, a moved base offset), at every offset, in one call over them all."""

from __future__ import annotations

import os
import random

import klog
from klog.errors import KlogError
from klog.store.topic_read import AT_RANGE, AT_STATE, RangeRead, read_ranges

PARTITIONS = 8
BATCHES = 20  # per partition, 5 records each (a batch each), over several segments


def _segments(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


def _zero(path: str, at: int, n: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(n))


def _flip_base_offset(path: str) -> None:
    """The segment's first batch claims offsets 7 above its own (its CRC does not cover them)."""
    with open(path, "r+b") as f:
        base = int.from_bytes(f.read(8), "big")
        f.seek(0)
        f.write((base + 7).to_bytes(8, "big"))


def _damage(replicas: dict[int, list[str]], data: str) -> None:
    """Partition p's replicas (leader first) damaged as its number says (0 and 7 stay whole)."""
    def seg(p: int, replica: int, i: int) -> str:
        return _segments(replicas[p][replica])[i]

    _zero(seg(1, 0, 1), 0, 200)  # the leader's second segment damaged, the follower's intact
    os.unlink(seg(2, 0, 0))  # the leader's first segment lost, the follower's intact
    _zero(seg(3, 0, 1), 0, 300)  # both replicas damaged in the same segment: an error
    _zero(seg(3, 1, 1), 0, 300)
    os.unlink(os.path.join(data, "state", "t-4.state"))  # the state lost: the high watermark is unknown
    _flip_base_offset(seg(5, 0, 2))  # a segment's base offset moved in the leader
    os.unlink(seg(6, 0, -1))  # the leader's last segment lost, and the follower's
    os.unlink(seg(6, 1, -1))


def _outcome(found: object) -> object:
    """What a reader sees of a found range: its bytes (a ByteRange read and closed)."""
    if found is None or isinstance(found, bytes):
        return found
    try:
        return os.pread(found.fd, found.length, found.position)
    finally:
        found.close()


def _alone(part: object, offset: int, max_bytes: int, read_max: int) -> object:
    """Partition.byte_range's answer for the partition alone, or its error's type."""
    try:
        found = part.byte_range(offset, max_bytes, None, None, read_max)
    except KlogError as e:
        return type(e)
    if found is not None and found.data is not None:
        return found.data
    return _outcome(found)


def test_one_loop_answers_each_partition_as_it_is_answered_alone(tmp_path):
    data = str(tmp_path / "data")
    disks = [str(tmp_path / "disk0"), str(tmp_path / "disk1")]
    with klog.Store(data, log_dirs=disks) as store:
        store.create_topic("t", partitions=PARTITIONS, replication_factor=2,
                           configs={"segment.bytes": "1000", "index.interval.bytes": "150",
                                    "flush.messages": str(2**63 - 1)})  # (no fsync per batch: a quick set-up)
        with store.producer(batch_size=1) as producer:
            for p in range(PARTITIONS):
                producer.send_values("t", [b"%03d-%03d-%d" % (p, b, i) for b in range(BATCHES) for i in range(5)],
                                     partition=p)
        hw = BATCHES * 5
        replicas = {p: [r.directory for r in store.partition("t", p).replicas] for p in range(PARTITIONS)}
    _damage(replicas, data)
    rng = random.Random(26)
    with klog.Store(data, log_dirs=disks) as store:
        parts = [store.partition("t", p) for p in range(PARTITIONS)]
        for read_max in (0, 16 << 10):  # ranges sent from the file, and small ones read
            for start in range(0, hw, 3):  # every segment of every partition, from many offsets
                offsets = [(start + p) % hw for p in range(PARTITIONS)]
                max_bytes = rng.choice([1, 300, 5000])
                reads = [RangeRead(part, offset, max_bytes) for part, offset in zip(parts, offsets, strict=True)]
                read_ranges(reads, 1 << 30, read_max, 1 << 30)
                for r, part, offset in zip(reads, parts, offsets, strict=True):
                    expected = _alone(part, offset, max_bytes, read_max)
                    if r.failure is not None:
                        got = type(r.failure)
                        assert r.failed_at == (AT_STATE if part.partition == 4 else AT_RANGE)
                    else:
                        got = r.data if r.data is not None else _outcome(r.range)
                        assert r.high_watermark == hw and r.upper == hw
                    assert got == expected, (part.partition, offset, max_bytes, read_max)
            outcomes = {p: _alone(parts[p], 0, 5000, read_max) for p in range(PARTITIONS)}
            assert all(isinstance(outcomes[p], bytes) and outcomes[p] for p in (0, 1, 2, 7))  # 1, 2: the follower's
            assert outcomes[4].__name__ == "StateLostError"


def test_offsets_outside_the_log_and_the_budget(tmp_path):
    with klog.open(str(tmp_path / "data")) as store:
        store.create_topic("t", partitions=3)
        with store.producer() as producer:
            for p in range(3):
                producer.send_values("t", [b"x" * 100] * 3, partition=p)
        parts = [store.partition("t", p) for p in range(3)]
        reads = [RangeRead(parts[0], 4, 1 << 20), RangeRead(parts[1], 3, 1 << 20), RangeRead(parts[2], 0, 1 << 20)]
        budget, left = read_ranges(reads, 100, 16 << 10, 1 << 20)
        assert reads[0].out_of_range and reads[0].data is None  # past the high watermark
        assert not reads[1].out_of_range and reads[1].data is None  # at it: nothing yet
        assert reads[2].data is not None and len(reads[2].data) > 100  # the first batch whole, past the budget
        assert budget == 100 - len(reads[2].data) and left == (1 << 20) - len(reads[2].data)
        again = [RangeRead(parts[2], 0, 1 << 20)]
        assert read_ranges(again, 0, 16 << 10, 1 << 20) == (0, 1 << 20) and again[0].data is None  # no budget left


def test_a_range_found_in_the_loop_is_sent_from_the_file_its_positions_were_found_in(store, monkeypatch):
    """A compaction swapping the segment between the loop's walk and the range handed out: the
    range's positions are read (and would be sent) from the file they were found in."""
    from klog.broker import lifecycle
    from klog.store import codec
    from klog.store.segment import LogSegment
    from tests.broker.test_compaction import COMPACTED, T0, clock_at, write
    from tests.store.test_reads_across_swap import _deleted_files_open

    store.create_topic("c", partitions=1, configs=COMPACTED)
    write(store, "c", [(b"k%d" % (i % 4), b"v%03d" % i) for i in range(150)])
    part = store.partition("c", 0)
    base, after = part.leader.bases[2], part.leader.bases[3]
    walk = LogSegment.byte_range
    swapped = []

    def walk_then_swap(segment: LogSegment, *args, **kwargs):  # noqa: ANN202
        found = walk(segment, *args, **kwargs)
        if not swapped:  # the cleaner thread's swap lands between the walk and the range handed out
            swapped.append(lifecycle.compact(store, "c", clock=clock_at(T0 + 10**6)))
        return found

    monkeypatch.setattr(LogSegment, "byte_range", walk_then_swap)
    [r] = reads = [RangeRead(part, (base + after) // 2, 1 << 20)]
    read_ranges(reads, 1 << 30)
    assert swapped and swapped[0][0].segments_rewritten
    assert r.failure is None and r.range is not None
    try:
        assert codec.read_header(os.pread(r.range.fd, r.range.length, r.range.position)) == r.range.first
        assert _deleted_files_open(), "the old file is kept open for the range"
    finally:
        r.range.close()
    assert not _deleted_files_open(), "the old file is closed with the last range sent from it"

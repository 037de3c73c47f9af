"""Partition.byte_range (the zero-copy fetch's lookup) agrees with Partition.read: the same batches
from the one holding the offset, never a byte of a batch at or past the bound, at least one whole
batch, cut only at max_bytes; over several segments with index hints."""

from __future__ import annotations

import os
import random

import pytest

import klog
from klog.store.codec import read_header


# read_max: a range up to that size comes read (ByteRange.data, a fetch's small ranges), else as a descriptor
@pytest.mark.parametrize("read_max", [0, 16 << 10])
def test_byte_range_matches_read(tmp_path, read_max):
    rng = random.Random(7)
    with klog.open(str(tmp_path / "d")) as store:
        store.create_topic("r", configs={"segment.bytes": "20000", "retention.ms": "-1"})
        with store.producer() as producer:
            for i in range(1500):
                producer.send("r", b"v%05d" % i + b"x" * rng.randint(0, 300))
                if rng.random() < 0.2:
                    producer.flush()
        part = store.partition("r", 0)
        hw = part.high_watermark()
        assert len(part.leader.bases) > 5
        for _ in range(300):
            offset = rng.randrange(hw)
            upper = rng.randint(offset + 1, hw)
            max_bytes = rng.choice([1, 500, 4000, 30000, 1 << 20])
            found = part.byte_range(offset, max_bytes, upper, read_max=read_max)
            assert found is not None
            assert (found.data is not None) == (found.length <= read_max)
            try:
                data = found.data if found.data is not None else os.pread(found.fd, found.length, found.position)
            finally:
                found.close()
            with open(found.path, "rb") as f:  # the bytes as they lie in the segment, whichever way they came
                f.seek(found.position)
                assert data == f.read(found.length)
            expected = part.read(offset, max_bytes=1 << 30, upper=upper)
            # whole batches in the range are read()'s, in order, from the one holding `offset`
            pos, got = 0, []
            while pos + 61 <= len(data):
                header = read_header(data, pos)
                if pos + header.size > len(data):
                    break  # a batch cut at max_bytes
                got.append(data[pos:pos + header.size])
                pos += header.size
            assert got, "at least one whole batch"
            assert got == [b.data for b in expected[:len(got)]]
            assert read_header(got[-1]).base_offset < upper
            if len(data) > max(max_bytes, len(got[0])):
                raise AssertionError("longer than max_bytes with more than one batch")
            if pos < len(data):  # a cut: only where max_bytes ends
                assert len(data) == max_bytes
            elif len(got) < len(expected) and found.path == expected[len(got)].path:
                # stopped early in the same segment: only because max_bytes would be passed
                assert len(data) + len(expected[len(got)].data) > max_bytes


def test_a_segment_replaced_under_an_open_reader_is_read_from_the_new_file(tmp_path):
    """The cleaner swaps a segment's `.log` for its rewrite (os.replace) while readers hold the old
    file open: byte_range, which takes a segment's size from the descriptor it reads through, must
    notice (the old file is unlinked) and read the new one, not the old file's bytes and size."""
    with klog.open(str(tmp_path / "d")) as store:
        store.create_topic("s", configs={"segment.bytes": "2000"})
        with store.producer() as producer:
            for i in range(40):
                producer.send("s", b"v%05d" % i + b"x" * 100)
                producer.flush()  # a batch each
        part = store.partition("s", 0)
        hw = part.high_watermark()
        before = part.byte_range(0, 1 << 20, hw, read_max=16 << 10)  # opens the first segment for reading
        first = read_header(before.data)
        assert before.length > first.size, "the first segment holds several batches"
        with open(before.path, "rb") as f:
            kept = f.read(first.size)
        swap = before.path + ".swap"
        with open(swap, "wb") as f:  # the rewrite: only the first batch is left
            f.write(kept)
        os.replace(swap, before.path)
        after = part.byte_range(0, 1 << 20, hw, read_max=16 << 10)
        assert after is not None and after.data == kept and after.length == first.size


@pytest.mark.parametrize("read_max", [0, 16 << 10])
def test_a_consumer_reading_on_gets_reads_batches_without_the_offset_index(tmp_path, monkeypatch, read_max):
    """A consumer's next fetch starts where its last range ended: byte_range finds that batch from
    where it left off (no offset index read), and the ranges, end to end, are read()'s batches."""
    from klog.store.index import OffsetIndex

    with klog.open(str(tmp_path / "d")) as store:
        store.create_topic("c", configs={"segment.bytes": "8000", "index.interval.bytes": "500"})
        with store.producer() as producer:
            for i in range(300):
                producer.send("c", b"v%05d" % i + b"x" * (i % 50))
                if i % 3 == 0:
                    producer.flush()
        part = store.partition("c", 0)
        hw = part.high_watermark()
        assert len(part.leader.bases) >= 3
        index_reads = []
        real = OffsetIndex.refresh
        monkeypatch.setattr(OffsetIndex, "refresh", lambda self: (index_reads.append(1), real(self))[1])
        offset, got = 0, []
        for _ in range(hw):  # bounded: each range holds at least one batch
            if offset >= hw:
                break
            found = part.byte_range(offset, 700, hw, read_max=read_max)
            try:
                data = found.data if found.data is not None else os.pread(found.fd, found.length, found.position)
            finally:
                found.close()
            pos = 0
            while pos + 61 <= len(data) and pos + read_header(data, pos).size <= len(data):
                header = read_header(data, pos)
                got.append(data[pos:pos + header.size])
                offset = header.next_offset
                pos += header.size
        assert got == [b.data for b in part.read(0, max_bytes=1 << 30, upper=hw)]
        assert len(index_reads) <= len(part.leader.bases), "each next fetch read the offset index"

"""Reads of a segment that a compaction swaps in the middle of the read: in the same process
(`klog serve`'s cleaner thread, beside its Fetch handlers, its __consumer_offsets mirror,
replication catch-up), whose swap closes the segment's cached read descriptor (cleaner.swap_in),
or in another process while the read-descriptor cache closes ours (many open segments). A read
that reopened the path met the rewritten file at positions found in the old one:

- a served Fetch's byte range (PartitionLog.byte_range: positions found by a walk, then sent
  from a descriptor) was sent from the new file at the old positions: a shifted batch, which a
  client reads as a CRC error;
- PartitionLog.read (consumers, old fetchers, catch-up) raised CorruptLogError ("invalid batch
  header") for a log that is not damaged.

A read pins the open file (segment.OpenLog) for its walk and, for a range, until it is sent:
the close is deferred to the last release, which frees the old file's disk space."""

from __future__ import annotations

import os

import klog
from klog.broker import lifecycle
from klog.store import codec
from klog.store import segment as segment_module
from klog.store.segment import LogSegment
from tests.broker.test_compaction import COMPACTED, T0, clock_at, write

NOW = T0 + 10**6


def _compacted_log(store):  # noqa: ANN001, ANN202
    store.create_topic("c", partitions=1, configs=COMPACTED)
    written = write(store, "c", [(b"k%d" % (i % 4), b"v%03d" % i) for i in range(150)])
    return written, store.partition("c", 0).leader


def _deleted_files_open() -> list[str]:
    """This process's descriptors of unlinked files (a swapped segment kept open)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".log (deleted)"):
            out.append(target)
    return out


def _batch_at(found) -> codec.BatchHeader:  # noqa: ANN001
    return codec.read_header(os.pread(found.fd, found.length, found.position))


def test_a_fetch_range_is_sent_from_the_file_its_positions_were_found_in(store, monkeypatch):
    _, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]
    offset = (base + after) // 2  # a batch in the middle of a segment compaction rewrites
    walk = LogSegment.byte_range
    swapped = []

    def walk_then_swap(segment: LogSegment, *args, **kwargs):  # noqa: ANN202
        found = walk(segment, *args, **kwargs)
        if not swapped:  # the cleaner thread's swap lands between the walk and the range handed out
            swapped.append(lifecycle.compact(store, "c", clock=clock_at(NOW)))
        return found

    monkeypatch.setattr(LogSegment, "byte_range", walk_then_swap)
    found = log.byte_range(offset, offset + 1, 1 << 20)
    assert swapped and swapped[0][0].segments_rewritten
    try:
        assert _batch_at(found) == found.first  # the batch the range starts with, whole
        assert _deleted_files_open(), "the old file is kept open for the range"
    finally:
        found.close()
    assert not _deleted_files_open(), "the old file is closed with the last range sent from it"


def test_a_fetch_range_swapped_before_it_is_sent_is_sent_whole(store):
    """The window of `klog serve`: the range is found by a worker thread, sent by the event loop later."""
    _, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]
    found = log.byte_range((base + after) // 2, after, 1 << 20)
    assert lifecycle.compact(store, "c", clock=clock_at(NOW))[0].segments_rewritten
    try:
        sent = os.pread(found.fd, found.length, found.position)
    finally:
        found.close()
    pos, bases = 0, []
    while pos < len(sent):  # every batch whole and CRC-valid, in offset order
        header = codec.read_header(sent, pos)
        assert codec.crc_ok(sent, pos, header)
        bases.append(header.base_offset)
        pos += header.size
    assert pos == len(sent) and bases == sorted(bases) and bases[0] == found.first.base_offset
    assert not _deleted_files_open()


def _swap_once_located(monkeypatch, log, base: int, swap, locate: str = "first_batch"):  # noqa: ANN001, ANN202
    """Run swap() once, right after a read located its first batch in segment `base` (by the
    LogSegment method `locate`); its results."""
    located = getattr(LogSegment, locate)
    swapped = []

    def located_then_swap(segment: LogSegment, *args, **kwargs):  # noqa: ANN202
        found = located(segment, *args, **kwargs)
        if not swapped and segment is log.segments.get(base):
            swapped.append(swap())
        return found

    monkeypatch.setattr(LogSegment, locate, located_then_swap)
    return swapped


def _as_written(batches, written) -> bool:  # noqa: ANN001
    return bool(batches) and all(written[r[0]][1:3] == (r[2], r[3]) for b in batches for r in b.records())


def test_a_read_whose_segment_is_swapped_mid_walk_returns_records_not_a_damage_error(store, monkeypatch):
    written, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]
    swapped = _swap_once_located(monkeypatch, log, base, lambda: lifecycle.compact(store, "c", clock=clock_at(NOW)))
    batches = log.read((base + after) // 2, after, 1 << 20)
    assert swapped and swapped[0][0].segments_rewritten
    assert _as_written(batches, written)
    assert not _deleted_files_open()


def test_a_read_whose_descriptor_the_cache_sheds_after_another_process_swapped_reads_one_file(
        store, data_dir, monkeypatch):
    """Another process (here: a second store on the same folder, whose swap closes none of ours)
    compacts the segment a read is walking, and the read-descriptor cache sheds our descriptor
    (many open segments) before the walk's next pread: the walk stays on the file it started in."""
    written, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]

    def other_process_swaps_then_shed():  # noqa: ANN202
        with klog.open(data_dir) as other:
            cleaned = lifecycle.compact(other, "c", clock=clock_at(NOW))
        with segment_module._read_fds.lock:
            while segment_module._read_fds.open:
                segment_module._read_fds.shed()
        return cleaned

    swapped = _swap_once_located(monkeypatch, log, base, other_process_swaps_then_shed)
    batches = log.read((base + after) // 2, after, 1 << 20)
    assert swapped and swapped[0][0].segments_rewritten
    assert _as_written(batches, written)
    assert not _deleted_files_open()
    monkeypatch.undo()
    # the next read notices the swap (the indexes reload) and reads the compacted file (whose
    # batches from `base` all went: the read goes on to the next records kept)
    assert _as_written(log.read(base, log.bases[-1] + 1, 1 << 20), written)


def test_a_lookup_by_timestamp_whose_segment_is_swapped_mid_walk_finds_the_offset(store, monkeypatch):
    """ListOffsets by time (and consumers starting at a time): the walk from the index hint."""
    written, log = _compacted_log(store)
    base, after = log.bases[2], log.bases[3]
    wanted = (base + after) // 2
    swapped = _swap_once_located(monkeypatch, log, base, lambda: lifecycle.compact(store, "c", clock=clock_at(NOW)),
                                 "position_for_offset")
    assert log.offset_for_timestamp(written[wanted][3], log.bases[-1] + 1000) == wanted
    assert swapped and swapped[0][0].segments_rewritten
    assert not _deleted_files_open()

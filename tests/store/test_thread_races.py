"""Threads of one process sharing a store's Partition objects (klog serve's readers beside its
append workers and cleaner; a program that consumes in one thread while it produces in another):
what one thread changes (a roll, retention, a release of idle descriptors) must never show to
another thread half-way, as an error or as another partition's data.

Each test interleaves the two threads at the one place the race needs, through a hook (the
reader pauses there while the other thread does its part), so it fails the same way every run.
"""

from __future__ import annotations

import os
import threading
import types

import pytest

from klog.store import index as index_module
from klog.store import log as log_module
from klog.store import state as state_module
from klog.store.retention import delete_segments_below


def _in_thread(work) -> None:  # noqa: ANN001 - a callable
    """Run `work` in another thread and wait for it (its exception is re-raised here)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            failure.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if failure:
        raise failure[0]


def _segmented(store, topic: str, records: int = 30, partitions: int = 1):  # noqa: ANN001, ANN202
    """A topic whose partition 0 has several segments (about 10 records each); that partition."""
    store.create_topic(topic, partitions=partitions, configs={"segment.bytes": "700", "retention.ms": "-1"})
    with store.producer(linger_ms=0) as producer:
        for i in range(records):
            producer.send(topic, b"record-%03d" % i + b"." * 40, partition=0)
            producer.flush()
    return store.partition(topic, 0)


# -- the segment dict changing under a reader's walk over it -------------------------------------
def test_a_size_asked_while_the_writer_rolls_is_a_size_not_a_runtime_error(store):
    """describe_topic / Partition.size_bytes in one thread, a roll in another: 'dictionary
    changed size during iteration' escaped to the user before."""
    part = _segmented(store, "t")
    first = part.leader.segments[part.leader.bases[0]]
    real = first.file_size
    rolled = []

    def producer_rolls_meanwhile() -> int:
        if not rolled:
            rolled.append(True)

            def roll() -> None:
                with store.producer(linger_ms=0) as producer:
                    for _ in range(12):  # > segment.bytes: at least one roll
                        producer.send("t", b"x" * 60, partition=0)
                        producer.flush()

            _in_thread(roll)
        return real()

    first.file_size = producer_rolls_meanwhile  # type: ignore[method-assign]
    before = len(part.leader.bases)
    size = part.size_bytes()
    assert len(part.leader.bases) > before  # the roll did happen during the walk
    assert size > 0


def test_holds_data_asked_while_the_writer_rolls_answers(store):
    """reader_snapshot asks holds_data when it finds no state file (a partition being created
    by a writer in another thread: the f0a6591 case); a roll meanwhile must not raise."""
    part = _segmented(store, "h")
    first = part.leader.segments[part.leader.bases[0]]
    rolled = []

    def producer_rolls_meanwhile() -> int:
        if not rolled:
            rolled.append(True)
            part.leader.new_segment(10_000)  # what a roll does to the list (under the writer's lock)
        return 0  # (an empty first segment: the walk goes on to the next)

    first.file_size = producer_rolls_meanwhile  # type: ignore[method-assign]
    assert part.holds_data()



def test_a_producer_releasing_files_while_a_reader_relists_does_not_raise(store):
    """The producer (PartitionWriter._written) closes an idle partition's files while a consumer
    thread re-lists the folder and finds a segment another process rolled: the producer's
    flush raised 'dictionary changed size during iteration'."""
    part = _segmented(store, "l")
    log = part.leader
    first = log.segments[log.bases[0]]
    real = first.close

    def another_process_rolls_and_a_reader_relists() -> None:
        first.close = real  # type: ignore[method-assign]
        real()
        base = log.bases[-1] + 1000
        log.active.__class__(log.directory, base).create_files()  # (the other process's new segment)
        _in_thread(log.refresh_segments)

    first.close = another_process_rolls_and_a_reader_relists  # type: ignore[method-assign]
    part.release_files(readers_too=True)
    assert log.bases[-1] == log.bases[-2] + 1000


# -- a segment removed (retention, a re-listing) between a reader's look at bases and at segments -
def _segments_pass_under(log, offset: int) -> None:  # noqa: ANN001 - a PartitionLog
    """Retention in another thread deletes the segments below `offset` (Kafka-style: renamed to
    .deleted, then gone from the list), as a writer's roll does in klog serve's append worker."""
    _in_thread(lambda: delete_segments_below(log, offset))


def test_a_read_while_retention_deletes_its_first_segment_reads_on_not_key_error(store, monkeypatch):
    part = _segmented(store, "r")
    log = part.leader
    assert len(log.bases) >= 3
    second = log.bases[1]
    hooked = []

    def bisect_right(bases, offset):  # noqa: ANN001, ANN202 - bisect's signature
        if not hooked:
            hooked.append(True)
            part.set_log_start_offset(second)  # what retention publishes first
            _segments_pass_under(log, second)
        return real_bisect.bisect_right(bases, offset)

    real_bisect = log_module.bisect
    monkeypatch.setattr(log_module, "bisect", types.SimpleNamespace(bisect_right=bisect_right))
    got = log.read(0, 10**9, max_bytes=10**6)  # (the reader asked from the log start it knew)
    assert hooked and got
    assert got[0].header.base_offset in (0, second)  # the old first segment's records, or the new start's


def test_list_offsets_max_timestamp_while_retention_deletes_segments(store):
    """ListOffsets MAX_TIMESTAMP walks the sealed segments' time indexes off the partition's
    lock; retention in the append worker deletes a prefix of them meanwhile."""
    from klog.broker.offsets import max_timestamp_offset

    part = _segmented(store, "m")
    log = part.leader
    first = log.segments[log.bases[0]]
    third = log.bases[2]
    real = first.time_index.refresh

    def retention_meanwhile() -> None:
        part.set_log_start_offset(third)
        _segments_pass_under(log, third)
        first.time_index.refresh = real  # type: ignore[method-assign]
        real()

    first.time_index.refresh = retention_meanwhile  # type: ignore[method-assign]
    timestamp, offset = max_timestamp_offset(part)
    assert offset >= third


def test_producer_state_walk_while_retention_deletes_segments(store):
    """batch_headers (the producer state rebuilt with no partition lock held) walks the segments
    listed at its start; retention deleting the next ones meanwhile must end the walk cleanly."""
    from klog.broker.batches import batch_headers

    part = _segmented(store, "b")
    log = part.leader
    first = log.segments[log.bases[0]]
    third = log.bases[2]
    real = first.pinned_headers

    def retention_meanwhile(end=None):  # noqa: ANN001, ANN202
        yield from real(end)
        part.set_log_start_offset(third)
        _segments_pass_under(log, third)

    first.pinned_headers = retention_meanwhile  # type: ignore[method-assign]
    headers = list(batch_headers(part))
    offsets = [h.base_offset for h in headers]
    assert offsets == sorted(offsets) and offsets[-1] == part.high_watermark() - 1


# -- a writer releasing idle descriptors under a reader ------------------------------------------
class _OsWithHook:
    """The os module as klog.store.state sees it, with a hook run before a pread of one descriptor."""

    def __init__(self, fd: int, hook) -> None:  # noqa: ANN001 - a callable
        self._fd, self._hook = fd, hook

    def __getattr__(self, name: str):  # noqa: ANN204 - whatever os has
        return getattr(os, name)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        if fd == self._fd and self._hook is not None:
            hook, self._hook = self._hook, None
            hook()
        return os.pread(fd, length, offset)


def _still(fd: int, path: str) -> bool:
    """Is `fd` still open on the file at `path` (not closed, nor reused for another file)?"""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:
        return False


def test_a_producer_releasing_a_partitions_files_under_a_reader_gives_it_no_other_partitions_state(
        store, monkeypatch):
    """A program consumes partition 0 in one thread while its producer (another thread) writes
    more partitions than it keeps open: the producer closes partition 0's files, the state file
    among them, between the reader's look at the descriptor and its pread. The number, free,
    goes to the next open in the process (here: partition 1's state file): the reader read
    partition 1's high watermark as partition 0's (a consumer reads past partition 0's end, or
    stops short of it), or failed with EBADF."""
    store.create_topic("s", partitions=2)
    producer = store.producer(linger_ms=0)
    producer.writer.open_max = 1  # (a process's limit: open_partitions_max(), here reached at once)
    for partition, n in ((0, 3), (1, 7)):
        for i in range(n):
            producer.send("s", b"v%d" % i, partition=partition)
        producer.flush()
    reader = store.partition("s", 0)
    reader.state.close()  # (nothing cached: the reader opens it read-only, as a consumer's first read does)
    assert reader.high_watermark() == 3
    readers_fd = reader.state._fd
    assert readers_fd is not None

    def producer_writes_on_meanwhile() -> None:
        def write() -> None:
            for partition in (0, 1):  # partition 1 last: the one kept open, partition 0's files released
                producer.send("s", b"more", partition=partition)
                producer.flush()

        _in_thread(write)
        if not _still(readers_fd, reader.state.path):  # the next open in this process takes the free number
            other = os.open(store.partition("s", 1).state.path, os.O_RDONLY)  # (the lowest free number)
            if other != readers_fd:
                os.dup2(other, readers_fd)
                os.close(other)
            ours.append(readers_fd)

    ours: list[int] = []
    monkeypatch.setattr(state_module, "os", _OsWithHook(readers_fd, producer_writes_on_meanwhile))
    try:
        assert reader.high_watermark() == 4  # (partition 1's is 8)
    finally:
        monkeypatch.undo()
        for fd in ours:
            os.close(fd)
    assert reader.high_watermark() == 4
    producer.close()


# -- a segment's cached index entries replaced under a lookup ------------------------------------
class _EntryWithHook:
    """An index's entry layout, with a hook run at the lookup's first unpack of an entry."""

    def __init__(self, entry, hook) -> None:  # noqa: ANN001 - a struct.Struct, a callable
        self._entry, self._hook = entry, hook
        self.size = entry.size

    def __getattr__(self, name: str):  # noqa: ANN204 - whatever struct.Struct has
        return getattr(self._entry, name)

    def unpack_from(self, data, offset: int = 0):  # noqa: ANN001, ANN201
        if self._hook is not None:
            hook, self._hook = self._hook, None
            hook()
        return self._entry.unpack_from(data, offset)


def _index_of(tmp_path, cls, entries: list[tuple[int, int]]):  # noqa: ANN001, ANN202
    index = cls(str(tmp_path / "00000000000000000000.index"), 0)
    index.write_all(b"".join(cls.entry.pack(*e) for e in entries))
    return index


@pytest.mark.parametrize("cls", [index_module.OffsetIndex, index_module.TimeIndex])
def test_a_lookup_while_another_thread_drops_the_cached_entries_finds_an_entry(tmp_path, cls):
    """A reader looks an offset (a time) up in a segment's index while another reader thread
    notices a compaction swapped the segment and drops the cached entries (LogSegment._adopt):
    the lookup read its entry from the emptied cache: struct.error escaped from the fetch."""
    index = _index_of(tmp_path, cls, [(i * 10, i * 4096) if cls is index_module.OffsetIndex else (1000 + i, i * 10)
                                      for i in range(50)])
    index.entry = _EntryWithHook(cls.entry, lambda: _in_thread(index.forget))  # type: ignore[misc]
    if cls is index_module.OffsetIndex:
        assert index.lookup(255) == 25 * 4096
    else:
        assert index.lookup(1030) == 300



# -- retention's and the cleaner's walks off the partition's lock --------------------------------
def test_retention_remembering_the_oldest_segment_while_another_thread_deletes_it(store, monkeypatch):
    """retain() (a writer's roll, klog serve's log cleaner) notes the oldest segment after taking
    the lock off; delete-records or retention in another thread deletes it meanwhile. The
    KeyError escaped from the roll's append (an acknowledged write answered as failed: the
    client's retry wrote it twice) or ended the log cleaner's retention pass."""
    from klog.broker import lifecycle
    from klog.store import retention

    part = _segmented(store, "o")
    third = part.leader.bases[2]
    real = retention.segment_facts
    hooked = []

    def facts_then_delete_records_meanwhile(log, lazy=False):  # noqa: ANN001, ANN202
        facts = real(log, lazy)
        if not part.lock.held and not hooked:  # (the off-lock look, not retention's own)
            hooked.append(True)
            _in_thread(lambda: store.delete_records("o", before_offset=third))
        return facts

    monkeypatch.setattr(retention, "segment_facts", facts_then_delete_records_meanwhile)
    lifecycle.retain(store, "o", 0)
    assert hooked and part.leader.bases[0] == third
    assert part.retention_hint is None or part.retention_hint[0] == third  # never the deleted segment


def test_the_dirty_ratio_read_while_another_thread_deletes_segments(store):
    """klog serve's log cleaner reads each partition's cleanable range without its lock, while
    delete-records or a roll's retention (another thread) deletes the oldest segments: the
    KeyError ended the whole compaction pass ('log compaction pass failed')."""
    from klog.broker import lifecycle

    part = _segmented(store, "d")
    log = part.leader
    first = log.segments[log.bases[0]]
    third = log.bases[2]
    real = first.file_size

    def size_then_delete_records_meanwhile() -> int:
        first.file_size = real  # type: ignore[method-assign]
        size = real()
        _in_thread(lambda: store.delete_records("d", before_offset=third))
        return size

    first.file_size = size_then_delete_records_meanwhile  # type: ignore[method-assign]
    ratio = lifecycle.dirty_ratio(store, "d", 0)
    assert log.bases[0] == third and 0 <= ratio <= 1


def test_a_read_from_the_log_start_while_retention_moves_it_is_no_damage(store, monkeypatch):
    """A consumer reads from the log start while retention (a roll in the producer's thread)
    deletes the oldest segment: the batches it read from that segment's file are whole and
    were the log's start when read, but were judged against the new first segment: a spurious
    CorruptLogError ('batch does not follow offset N') on an undamaged log."""
    part = _segmented(store, "c")
    log = part.leader
    second = log.bases[1]
    real = log_module._stopped_early
    hooked = []

    def retention_meanwhile(segment, last):  # noqa: ANN001, ANN202
        if not hooked:
            hooked.append(True)
            part.set_log_start_offset(second)
            _segments_pass_under(log, second)
        return real(segment, last)

    monkeypatch.setattr(log_module, "_stopped_early", retention_meanwhile)
    got = part.read(0, max_bytes=10**6)
    assert hooked and got[0].header.base_offset == 0
    offsets = [b.header.base_offset for b in got]
    assert offsets == sorted(offsets) and got[-1].header.next_offset == part.high_watermark()


def test_a_size_asked_while_retention_deletes_a_segment_is_a_size(store):
    """describe_topic in one thread while retention in another has renamed the oldest segment
    but not yet re-listed the folder (it fsyncs the folder in between): 'cannot read t-0: ...
    keeps vanishing' (StorageError), though nothing is lost."""
    part = _segmented(store, "z")
    log = part.leader
    first = log.segments[log.bases[0]]
    os.rename(first.log_path, first.log_path + ".deleted")  # (retention's rename; its re-listing comes later)
    assert part.size_bytes() == sum(log.segments[b].file_size() for b in log.bases[1:])


# -- the idle flush timer thread and the writer's release of idle partitions ----------------------
def test_a_partition_released_while_its_idle_flush_is_armed_is_released_after_it(store):
    """A producer writing more partitions than it keeps open (acks=0, flush.ms set) releases the
    least recently written one while its idle flush timer waits: the release is skipped (it
    would skip the fsync) and nothing releases it after the timer's flush, so every such
    partition kept its six descriptors: 'too many open files' for a wide enough topic."""
    store.create_topic("f", partitions=2, configs={"flush.ms": "50"})
    producer = store.producer(linger_ms=0, acks="0")
    producer.writer.open_max = 1
    for partition in (0, 1):
        producer.send("f", b"x", partition=partition)
        producer.flush()  # (partition 1 written: partition 0's release is asked for, its timer armed)
    idle = store.partition("f", 0)
    timer = idle._flush_timer
    assert timer is not None
    timer.join(30)  # its idle flush has run, and returned
    assert not timer.is_alive() and idle._flush_timer is None
    assert idle.lock._fd is None and idle.leader._fds is None
    producer.close()


def test_a_topic_altered_under_a_reader_gives_it_no_bad_descriptor(store, monkeypatch):
    """klog serve: a fetch reads a partition's high watermark while an AlterConfigs (another
    thread) re-opens the topic (Store.alter_topic closes its open partitions): the fetch's pread
    of the closed state descriptor failed with EBADF (or read whatever file took the number)."""
    store.create_topic("a")
    with store.producer(linger_ms=0) as producer:
        producer.send("a", b"one")
    reader = store.partition("a", 0)
    reader.state.close()
    assert reader.high_watermark() == 1
    readers_fd = reader.state._fd

    def altered_meanwhile() -> None:
        _in_thread(lambda: store.alter_topic("a", set_configs={"retention.ms": "3600000"}))

    monkeypatch.setattr(state_module, "os", _OsWithHook(readers_fd, altered_meanwhile))
    try:
        assert reader.high_watermark() == 1
    finally:
        monkeypatch.undo()
        reader.state.close()  # (reopened by the read after the partition was closed)

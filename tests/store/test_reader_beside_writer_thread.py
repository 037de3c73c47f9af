"""A reader in one thread and a writer in another share a store's Partition objects (klog serve,
or a program that consumes what it produces): neither may see the other half-way through a
change, nor close what the other is using."""

from __future__ import annotations

import os
import threading

from klog.store.log import PartitionLog
from klog.store.state import PartitionSnapshot, PartitionState


def test_a_reader_that_looks_while_the_first_write_lands_sees_it_not_a_lost_state(store):
    """The reader finds no state file, then the writer creates the partition (state first, then
    data), then the reader finds data: that is a new partition, not a lost state file."""
    store.create_topic("p")
    part = store.partition("p", 0)
    real_holds_data = part.holds_data

    def writer_lands_between_the_two_looks() -> bool:
        def produce() -> None:
            producer = store.producer()
            producer.send("p", b"first")
            producer.flush()

        writer = threading.Thread(target=produce)
        writer.start()
        writer.join(30)
        return real_holds_data()

    part.holds_data = writer_lands_between_the_two_looks  # type: ignore[method-assign]
    assert part.high_watermark() == 1
    assert [r.value for r in store.consumer("p")] == [b"first"]


def test_a_readers_state_descriptor_stays_open_when_the_writer_upgrades_it(tmp_path):
    """A reader in another thread may be about to pread the descriptor it found: the writer's
    read-write open must not close it (its number could be reused by another file meanwhile)."""
    path = str(tmp_path / "t-0.state")
    PartitionState(path).write(PartitionSnapshot(7, 0, 0))
    shared = PartitionState(path)
    assert shared.read_valid().high_watermark == 7
    readers_fd = shared._fd
    assert readers_fd is not None
    shared.write(PartitionSnapshot(8, 0, 0))
    assert os.pread(readers_fd, 8, 0) == (8).to_bytes(8, "big")  # still this file, still open
    shared.close()
    assert shared._fd is None


def test_a_listing_made_before_the_writer_adds_a_segment_does_not_drop_it(tmp_path):
    """A reader re-lists the folder (before the writer created segment 0); the writer adds the
    segment before the reader applies its listing: the stale listing must not remove it."""
    log = PartitionLog(str(tmp_path / "p-0"))
    os.makedirs(log.directory)
    real_list = log._list
    writer = threading.Thread(target=log.new_segment, args=(0,), kwargs={"writing": True})

    def listing_then_writer_adds() -> list[str]:
        names = real_list()
        writer.start()
        writer.join(0.3)  # (with the fix the writer waits for this listing to be applied)
        return names

    log._list = listing_then_writer_adds  # type: ignore[method-assign]
    log.refresh_segments()
    log._list = real_list  # type: ignore[method-assign]
    writer.join(30)
    assert log.bases == [0] and 0 in log.segments
    assert log.active.base_offset == 0
    log.close()

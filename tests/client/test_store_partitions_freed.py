"""A store's partitions hold no reference cycle: a closed store's partitions are freed when their
last reference goes, not by the cyclic GC (which walked 1,000 partitions' objects once more at a
`klog produce`'s exit)."""

from __future__ import annotations

import gc
import weakref

from klog.client.store import Store


def test_a_closed_stores_partitions_are_freed_without_the_cyclic_gc(tmp_path) -> None:
    store = Store(str(tmp_path / "data"))
    store.create_topic("t", partitions=2)
    with store.producer() as producer:
        producer.send_keyed("t", [(b"k%d" % i, b"v") for i in range(10)])
    del producer
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()  # (only reference counting from here)
    try:
        written = [weakref.ref(store.partition("t", p)) for p in range(2)]
        opened = weakref.ref(store.partition("t", 1))
        store.close()
        assert [ref() for ref in written] == [None, None]
        assert opened() is None
    finally:
        if was_enabled:
            gc.enable()


def test_a_partition_reloads_its_replicas_through_its_store(tmp_path) -> None:
    """reload_replicas (called when a writer elected a new leader since the partition was opened)
    reaches the partition it belongs to."""
    with Store(str(tmp_path / "data")) as store:
        store.create_topic("t", partitions=1)
        part = store.partition("t", 0)
        dirs = [r.directory for r in part.replicas]
        assert part.reload_replicas is not None
        part.reload_replicas()
        assert [r.directory for r in part.replicas] == dirs

"""Recovery over replicas (replication factor 2) after an unclean shutdown: damage under acknowledged
records is cut from a replica only where another replica is intact (its records come back from
it); where every replica is damaged, each keeps its damage in place as a lone replica does, and no
valid batch after it is lost (cutting each at its own damage lost them from all: 'committed records
... are gone from every replica', the partition refusing writes)."""

from __future__ import annotations

import glob
import os

import pytest

import klog
from tests.segment_files import batch_positions, flip_bit, write_numbered_batches
from tests.store.test_recovery import reboot


@pytest.mark.slow
@pytest.mark.parametrize("damaged", [(1, 2), (1, 1), (1, None)], ids=["apart", "same", "one"])
def test_damage_in_every_replica_loses_no_valid_batch(tmp_path, monkeypatch, damaged):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    data = str(tmp_path / "data")
    with klog.Store(data, log_dirs=dirs) as store:
        store.create_topic("t", replication_factor=2)
        write_numbered_batches(store, "t", 4, 10)
    for d, batch in zip(dirs, damaged, strict=True):
        if batch is not None:
            [path] = glob.glob(os.path.join(d, "t-0", "*.log"))
            flip_bit(path, batch_positions(path)[batch] + 40)
    reboot(monkeypatch)  # (an unclean shutdown: the next writer recovers every replica)
    with klog.Store(data, log_dirs=dirs) as store:
        with store.producer() as p:  # takes writes: nothing committed is gone
            p.send("t", b"after", partition=0)
        assert store.partition("t", 0).high_watermark() == 41
        every = [b"%d" % i for i in range(40)] + [b"after"]
        if damaged == (1, 1):  # the same records damaged in both: skipped as in a lone replica
            with pytest.raises(klog.KlogError, match="CRC mismatch"):
                list(store.consumer("t"))
            assert glob.glob(os.path.join(dirs[0], "t-0", "*.corrupt")) == []
        else:  # each record intact in one replica at least: every one read
            assert [r.value for r in store.consumer("t")] == every
    if damaged == (1, 1):
        from klog.broker.verify import discard_damaged

        with klog.Store(data, log_dirs=dirs) as store:
            [done] = discard_damaged(store, "t")
            assert done.lost == "10..19"
            assert [r.value for r in store.consumer("t")] == every[:10] + every[20:]

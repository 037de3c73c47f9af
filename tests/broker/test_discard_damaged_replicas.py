"""--discard-damaged over replicas all damaged (none intact to re-copy from): each keeps the
batches before the damage and after it, from the one offset every replica resumes at, and drops
the same offsets as the others."""

from __future__ import annotations

import glob
import os

import pytest

import klog
from klog.broker.verify import discard_damaged, plan_discards
from klog.store.log import PartitionLog
from klog.store.reader import PartitionReader
from tests.segment_files import batch_positions as _batch_starts
from tests.segment_files import flip_bit as _flip
from tests.segment_files import write_numbered_batches


@pytest.fixture
def rstore(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        yield store, dirs


@pytest.mark.parametrize("damaged_batches", [(1, 1), (1, 2)])
def test_every_replica_keeps_the_batches_after_the_damage(rstore, damaged_batches):
    store, dirs = rstore
    store.create_topic("t", replication_factor=2)
    write_numbered_batches(store, "t", 4, 100)
    logs = [glob.glob(os.path.join(d, "t-0", "*.log"))[0] for d in dirs]
    for path, batch in zip(logs, damaged_batches, strict=True):
        _flip(path, _batch_starts(path)[batch] + 100)
    resume = 100 * (max(damaged_batches) + 1)
    [plan] = plan_discards(store, "t")
    assert (plan.damaged_from, plan.resume) == (100, resume)
    [done] = discard_damaged(store, "t")
    assert done.lost == f"100..{resume - 1}"  # the damaged offsets only: those before stay
    assert all(r["ok"] for r in store.verify("t")), store.verify("t")
    want = [b"%d" % i for i in range(100)] + [b"%d" % i for i in range(resume, 400)]
    assert [r.value for r in store.consumer("t")] == want
    assert store.partition("t", 0).log_start_offset() == 0
    images = set()
    for d in dirs:  # each replica holds the kept batches itself, the same ones
        log = PartitionLog(os.path.join(d, "t-0"))
        images.add(tuple(fb.data for fetched in PartitionReader(log, 0, 400) for fb in fetched.batches))
    assert len(images) == 1 and len(next(iter(images))) == 4 - (resume - 100) // 100

"""An idempotent producer's sequences survive damage recovery kept in place: the broker's producer
state (rebuilt from the log after an unclean restart) walks on past a damaged batch a valid one
follows, as readers do. When the walk stopped there (a flipped bit in the batch's length), the
producer's retry of its last batch and every next batch were refused as out of order, for ever."""

from __future__ import annotations

import glob
import os
import time

import pytest

import klog
from klog.broker.batches import RawAppender
from klog.store import codec
from tests.segment_files import batch_positions, flip_bit
from tests.store.test_recovery import reboot


def _batch(seq: int, ts: int) -> bytes:
    return codec.write_batch([(b"k", b"v%d" % seq, (), ts)], base_offset=0, attributes=0, last_offset_delta=0,
                             base_timestamp=ts, max_timestamp=ts, producer_id=5000, producer_epoch=0,
                             base_sequence=seq)


@pytest.mark.slow
@pytest.mark.parametrize("at", [40, 11, 10], ids=["payload", "length-low", "length-high"])
def test_a_producer_goes_on_after_an_unclean_restart_over_kept_damage(data_dir, monkeypatch, at):
    now = int(time.time() * 1000)
    with klog.open(data_dir) as store:
        store.create_topic("t")
        appender = RawAppender(store)
        assert [appender.append("t", 0, _batch(seq, now), "all").base_offset for seq in range(4)] == [0, 1, 2, 3]
    [path] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log"))
    flip_bit(path, batch_positions(path)[1] + at)
    reboot(monkeypatch)
    with klog.open(data_dir) as store:
        appender = RawAppender(store)
        retry = appender.append("t", 0, _batch(3, now), "all")  # its answer lost: sent again
        assert (retry.base_offset, retry.duplicate) == (3, True)
        assert appender.append("t", 0, _batch(4, now), "all").base_offset == 4
        r = [(m.offset, m.value) for m in store.consumer("t", start="2")]
        assert r == [(2, b"v2"), (3, b"v3"), (4, b"v4")]

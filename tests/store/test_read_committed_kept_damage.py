"""read_committed over damage recovery kept in place: a flipped bit in a data batch's length field
(the walk of the transactions' view went by it into garbage) no longer fails every read_committed
read of the partition, from past the damage and with --skip-damaged too (whose own error message
advised --skip-damaged); the damaged batch's offsets are skipped as read_uncommitted skips them."""

from __future__ import annotations

import glob
import os

import pytest

import klog
from tests.segment_files import batch_positions, flip_bit
from tests.store.test_recovery import reboot


@pytest.mark.slow
@pytest.mark.parametrize("at", [40, 11, 10], ids=["payload", "length-low", "length-high"])
def test_read_committed_reads_past_damage_recovery_kept(data_dir, monkeypatch, cli, at):
    with klog.open(data_dir) as store:
        store.create_topic("t")
        with store.producer() as p:
            for i in range(5):
                p.send("t", b"v%d" % i, partition=0)
                p.flush()
    [path] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log"))
    flip_bit(path, batch_positions(path)[1] + at)
    reboot(monkeypatch)
    with klog.open(data_dir) as store:
        with store.producer(on_warning=lambda _: None) as p:
            p.send("t", b"after", partition=0)
        got = [(r.offset, r.value) for r in store.consumer("t", start="3", isolation_level="read_committed")]
        assert got == [(3, b"v3"), (4, b"v4"), (5, b"after")]
    r = cli("consume", "t", "--skip-damaged", "-X", "isolation.level=read_committed")
    assert (r.exit_code, r.stdout) == (1, b"v0\nv2\nv3\nv4\nafter\n"), r
    assert "skipped t-0 offsets 1..1: damaged" in r.stderr, r

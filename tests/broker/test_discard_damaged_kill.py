"""`klog verify --repair --discard-damaged` rewrites the damaged segment without the damaged batch
and swaps it in as compaction swaps its rewrites in; SIGKILLed at each step of that (its crash
points and the swap's), nothing it keeps is lost: readers read past the damage, and a second run
(or none) leaves a log `klog verify` calls ok, holding the records before and after the damaged
batch at their offsets, which takes writes at the next offset."""

from __future__ import annotations

import glob
import os

import pytest

import klog
from tests.segment_files import batch_positions as _positions
from tests.segment_files import flip_bit as _flip
from tests.segment_files import numbered_lines as _lines
from tests.segment_files import segment_path


@pytest.mark.slow
@pytest.mark.parametrize("step", ["discard-written", "cleaned-written", "swap-partial", "swap-renamed",
                                  "index-replaced", "log-replaced", "discard-renamed"])
def test_a_discard_killed_midway_keeps_every_batch_before_and_after_the_damage(cli, klog_proc, data_dir, monkeypatch,
                                                                               step):
    assert cli("topics", "create", "t").exit_code == 0
    for b in range(3):
        assert cli("produce", "t", input=_lines(b * 100, b * 100 + 100)).exit_code == 0
    path = segment_path(data_dir)
    _flip(path, _positions(path)[1] + 100)  # a byte of the second batch's records (offsets 100..199)
    monkeypatch.setenv("KLOG_CRASH_AT", step)
    r = klog_proc("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.returncode == -9, r
    monkeypatch.delenv("KLOG_CRASH_AT")
    r = cli("consume", "t", "-o", "200")  # past the damage
    assert (r.exit_code, r.stdout) == (0, _lines(200, 300)), r
    r = cli("consume", "t", "-n", "100")  # before it
    assert (r.exit_code, r.stdout) == (0, _lines(0, 100)), r
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0, r
    r = cli("verify", "t")
    assert (r.exit_code, r.out.strip()) == (0, "t-0 replica 0: ok"), r
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    with klog.open(data_dir) as store:
        got = [(x.offset, x.value) for x in store.consumer("t")]
    assert got == [(i, b"%d" % i) for i in (*range(100), *range(200, 300))] + [(300, b"after")]
    assert glob.glob(os.path.join(data_dir, "logs", "t-0", "*.cleaned")) == []
    assert glob.glob(os.path.join(data_dir, "logs", "t-0", "*.swap")) == []

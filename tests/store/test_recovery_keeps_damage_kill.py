"""kill -9 with bit rot in the active segment: acks=all producers are SIGKILLed, a byte of an
early, acknowledged batch of the active segment is flipped in between, and the next writer
recovers the segment from its first byte (after a write the kill cut, or a reboot). Every other
acknowledged record stays readable at its offset, the damaged batch is reported as damage and
skipped alone, nothing is cut into a `.corrupt` file, and writes go on after the last record."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog.store import codec
from tests.conftest import REPO
from tests.store.test_crash import PRODUCER, value_of
from tests.store.test_recovery import active_log_path, batches_in, reboot


def _produce_then_kill(data: str, run: int, at_least: int) -> dict[int, bytes]:
    """Run the acks=all producer until it acknowledged `at_least` records, then SIGKILL it."""
    child = subprocess.Popen([sys.executable, "-c", PRODUCER, data, "c", "all", str(run)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": REPO})
    acked: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        assert child.stdout.readline() == b"ready\n"
        while len(acked) < at_least and time.monotonic() < deadline:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            base, r, first, count = map(int, line.split())
            acked.update((base + j, value_of(r, first + j)) for j in range(count))
    finally:
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
    for line in out.decode().splitlines():  # acknowledged before the kill landed
        base, r, first, count = map(int, line.split())
        acked.update((base + j, value_of(r, first + j)) for j in range(count))
    assert len(acked) >= at_least
    return acked


@pytest.mark.slow
@pytest.mark.parametrize("then", ["torn-write", "reboot"])
def test_bit_rot_under_acknowledged_records_is_kept_as_damage_not_cut(tmp_path, monkeypatch, cli, then):
    data = str(tmp_path / "data")
    monkeypatch.setenv("KLOG_DATA_DIR", data)
    with klog.open(data) as store:
        store.create_topic("c")
        folder = store.partition("c", 0).leader.directory
    acked = _produce_then_kill(data, 0, 300)
    path = active_log_path(folder)
    batches = batches_in(path)
    assert len(batches) >= 6, len(batches)
    position, batch = batches[2]  # an early batch, acknowledged long ago
    damaged = codec.read_header(batch)
    with open(path, "r+b") as f:
        f.seek(position + 70)
        f.write(bytes([batch[70] ^ 0x01]))
    acked.update(_produce_then_kill(data, 1, 300))  # the next writer takes the segment as it is
    if then == "torn-write":  # a write the kill cut short: the next writer recovers the segment
        last = batches_in(path)[-1][1]
        with open(path, "ab") as f:
            f.write(last[:len(last) // 2])
    else:
        reboot(monkeypatch)
    warnings: list[str] = []
    with klog.open(data) as store:
        with store.producer(on_warning=warnings.append) as p:
            p.send("c", value_of(999, 0), partition=0)
        with pytest.raises(klog.KlogError, match=f"CRC mismatch .*position {position}"):
            list(store.consumer("c"))
        assert store.partition("c", 0).last_recovery[0].damaged, "the writer recovered the segment"
        got: dict[int, bytes] = {}
        skipped = []
        consumer = store.consumer("c")
        consumer.on_damage = lambda topic, p, first, resume, error: skipped.append((first, resume))
        for r in consumer:
            got[r.offset] = r.value
    assert [w for w in warnings if "data loss" in w or "cut" in w] == [], warnings
    assert glob.glob(os.path.join(folder, "*.corrupt")) == []
    assert skipped == [(damaged.base_offset, damaged.next_offset)]
    lost = range(damaged.base_offset, damaged.next_offset)
    assert {o: v for o, v in acked.items() if o not in lost} == {o: v for o, v in got.items() if o in acked}
    assert max(got) > max(acked) and got[max(got)] == value_of(999, 0)  # written after the last record
    r = cli("verify", "c")
    assert r.exit_code == 1 and "DAMAGED" in r.out and f"position {position}" in r.out, r

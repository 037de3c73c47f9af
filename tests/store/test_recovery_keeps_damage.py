"""Recovery after an unclean shutdown cuts a torn tail (Kafka's rule), but not bit rot under
acknowledged records: a damaged batch below the high watermark that a provably valid batch follows
(store/resume.py) stays where it is, reported as damage as a sealed segment's is, and the
acknowledged batches after it stay readable; the writer appends after the last valid batch."""

from __future__ import annotations

import glob
import os

import pytest

import klog
from klog.store import codec
from klog.store.format import ATTRIBUTES_OFFSET, MAGIC_OFFSET
from klog.store.log import PartitionLog
from tests.store.test_recovery import CONFIG, active_log_path, batches_in, copy_log, make_batch, reboot
from tests.store.test_recovery import golden as golden  # noqa: F401 - the fixture

N = 3000


def value(i: int) -> bytes:
    return b"value-%08d" % i


def _written(data_dir: str) -> str:
    with klog.open(data_dir) as store:
        store.create_topic("one")
        with store.producer(batch_size=2000, acks="all") as p:
            for i in range(N):
                p.send("one", value(i), partition=0)
        return store.partition("one", 0).leader.directory


def _flip(path: str, nth: int) -> tuple[int, codec.BatchHeader]:
    """Flip a byte of the nth batch's records (the CRC covers it); its position and header."""
    position, batch = batches_in(path)[nth]
    with open(path, "r+b") as f:
        f.seek(position + 70)
        f.write(bytes([batch[70] ^ 0x01]))
    return position, codec.read_header(batch)


@pytest.mark.slow
def test_a_damaged_batch_below_the_high_watermark_stays_and_the_batches_after_it_too(data_dir, monkeypatch, cli):
    folder = _written(data_dir)
    path = active_log_path(folder)
    size = os.path.getsize(path)
    position, damaged = _flip(path, 5)
    reboot(monkeypatch)  # the next writer recovers the active segment from its first byte
    warnings: list[str] = []
    with klog.open(data_dir) as store:
        with store.producer(on_warning=warnings.append) as p:  # no loss: writes go on
            p.send("one", b"after", partition=0)
        with pytest.raises(klog.KlogError, match=f"CRC mismatch .*position {position}"):
            list(store.consumer("one"))  # a reader stops at the damage, as at a sealed segment's
        report = store.partition("one", 0).last_recovery[0]
        assert [f"offsets {damaged.base_offset}..{damaged.last_offset} are damaged" in d
                for d in report.damaged] == [True], report
    [warning] = warnings  # said once, by the writer that found it
    assert f"offsets {damaged.base_offset}..{damaged.last_offset} are damaged" in warning and path in warning
    assert "--skip-damaged" in warning and "data loss" not in warning
    assert glob.glob(os.path.join(folder, "*.corrupt")) == []  # nothing cut
    assert os.path.getsize(path) > size  # the segment as it was, "after" appended
    r = cli("consume", "one", "--skip-damaged")
    want = [value(i) for i in range(N) if not damaged.base_offset <= i <= damaged.last_offset] + [b"after"]
    assert (r.exit_code, r.stdout) == (1, b"".join(v + b"\n" for v in want)), r
    assert f"skipped one-0 offsets {damaged.base_offset}..{damaged.last_offset}: damaged" in r.stderr
    r = cli("verify", "one")
    assert r.exit_code == 1 and "DAMAGED" in r.out and f"position {position}" in r.out, r
    r = cli("consume", "one", "-o", str(N))
    assert (r.exit_code, r.stdout) == (0, b"after\n"), r
    r = cli("verify", "one", "--repair", "--discard-damaged", "--yes")  # only the damaged batch goes
    assert r.exit_code == 0 and f"discarded offsets {damaged.base_offset}..{damaged.last_offset}" in r.out, r
    r = cli("consume", "one")
    assert (r.exit_code, r.stdout) == (0, b"".join(v + b"\n" for v in want)), r



@pytest.mark.parametrize("nth", [0, 2])
@pytest.mark.parametrize("at", [8, 11, MAGIC_OFFSET, MAGIC_OFFSET + 1, ATTRIBUTES_OFFSET, 70],
                         ids=["length-high", "length-low", "magic", "crc", "attributes", "records"])
def test_recovery_keeps_every_batch_around_a_damaged_one_below_the_committed_end(golden, tmp_path, monkeypatch, at,
                                                                                nth):
    """Whatever byte of an early batch of the active segment is flipped (its length, magic, CRC,
    attributes, records), recovery with the committed end past it leaves the file as it is, and
    every batch after the damaged one reads as written; appends go on after the last one."""
    golden_folder, batches = golden
    folder = copy_log(golden_folder, tmp_path)
    path = active_log_path(folder)
    size = os.path.getsize(path)
    position, batch = batches_in(path)[nth]
    with open(path, "r+b") as f:
        f.seek(position + at)
        f.write(bytes([batch[at] ^ 0x01]))
    with open(path, "rb") as f:
        damaged_file = f.read()
    reboot(monkeypatch)
    end = codec.read_header(batches[-1]).next_offset
    log = PartitionLog(folder, CONFIG)
    report = log.open_for_write(committed_end=end)
    assert len(report.damaged) == 1 and not report.repaired, report
    with open(path, "rb") as f:
        assert f.read() == damaged_file  # nothing cut
    assert log.log_end_offset == end
    header = codec.read_header(batch)
    after = [b for b in batches if codec.read_header(b).base_offset > header.base_offset]
    assert [fb.data for fb in log.read(header.next_offset, end, 1 << 30)] == after
    log.append(make_batch(end, 3, 999), codec.read_header(make_batch(end, 3, 999)))
    log.flush()
    assert [fb.header.base_offset for fb in log.read(end, end + 3, 1 << 20)] == [end]
    log.close()
    assert os.path.getsize(path) > size

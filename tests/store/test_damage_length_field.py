"""A flipped bit in a batch's length field: a read from past the damage walks from an index entry
before it over the batch by that length, unchecked, into garbage (or into what looks like a batch
being appended, short of the end). The read must take that batch for the damage and go on at the
first valid batch after it (resume.py), as --skip-damaged does: before, `consume -o N` past it
failed ("ends before its high watermark") and --skip-damaged skipped every offset after it."""

from __future__ import annotations

import glob
import os

import pytest

import klog
from klog.store import codec
from tests.store.test_recovery import batches_in

N = 1500


@pytest.mark.parametrize("byte", [8, 11], ids=["length-high", "length-low"])
@pytest.mark.parametrize("sealed", [False, True], ids=["active", "sealed"])
def test_a_read_past_a_damaged_length_field_goes_on_after_the_damaged_batch(data_dir, cli, byte, sealed):
    with klog.open(data_dir) as store:
        store.create_topic("t", configs={"index.interval.bytes": "1000"})
        with store.producer(batch_size=1000) as p:
            for i in range(N):
                p.send("t", b"value-%08d" % i, partition=0)
        if sealed:  # a segment after it: the damaged one is sealed
            store.partition("t", 0).leader.roll(N)
    [path] = sorted(glob.glob(os.path.join(data_dir, "logs", "t-0", "0*.log")))[:1]
    position, batch = batches_in(path)[6]
    header = codec.read_header(batch)
    with open(path, "r+b") as f:
        f.seek(position + byte)
        f.write(bytes([batch[byte] ^ 0x01]))
    after = header.next_offset
    r = cli("consume", "t", "-o", str(after))
    assert (r.exit_code, r.stdout) == (0, b"".join(b"value-%08d\n" % i for i in range(after, N))), r
    r = cli("consume", "t", "--skip-damaged")
    want = [i for i in range(N) if not header.base_offset <= i < after]
    assert (r.exit_code, r.stdout) == (1, b"".join(b"value-%08d\n" % i for i in want)), r
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"klog: skipped t-0 offsets {header.base_offset}..{after - 1}: damaged"), line

"""Compaction over damage kept in the log: `klog topics compact` and `klog serve`'s cleaner say which
partition, which offset, and the way past it, in one line.

Goal: a compacted partition holding a damaged batch below its high watermark (kept in place by
recovery) is never compacted over; the user is told `c-0`, the damaged offset and `klog verify
--repair --discard-damaged c`, not a bare CRC error; after that discard compaction goes on.
Method: records written a batch each, one bit flipped in a sealed segment's batch; the CLI
in-process, and the cleaner's pass (LogManager, which `klog serve` runs) with its warnings kept.
"""

from __future__ import annotations

from klog.broker.log_manager import LogManager
from tests.cli.test_cli import assert_one_line_error
from tests.segment_files import batch_positions, segment_paths


def _damaged_compacted(store, data_dir: str) -> None:
    store.create_topic("c", configs={"cleanup.policy": "compact", "segment.bytes": "1000",
                                     "min.cleanable.dirty.ratio": "0.01"})
    with store.producer() as p:
        for i in range(60):
            p.send("c", b"v%d" % i, key=b"k%d" % (i % 5), partition=0)
            p.flush()
    path = segment_paths(data_dir, "c")[0]
    at = batch_positions(path)[3] + 62  # the record of offset 3's batch
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x01]))


def test_compact_names_the_partition_the_offset_and_the_discard(store, cli, data_dir):
    _damaged_compacted(store, data_dir)
    r = cli("topics", "compact", "c")
    assert_one_line_error(r, 1, "klog: error: cannot compact c-0: a damaged batch at offset 3 (CRC mismatch",
                          "`klog verify --repair --discard-damaged c` discards its offsets")
    warnings: list[str] = []
    assert LogManager(store, warn=warnings.append).compaction_pass() == []  # what `klog serve`'s cleaner logs
    assert len(warnings) == 1 and warnings[0].startswith(
        "compaction of c-0 failed: cannot compact c-0: a damaged batch at offset 3 (CRC mismatch"), warnings
    assert "`klog verify --repair --discard-damaged c`" in warnings[0] and "\n" not in warnings[0]
    r = cli("verify", "c", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0, r
    r = cli("topics", "compact", "c")
    assert r.exit_code == 0, r
    values = [(rec.key, rec.value) for rec in store.consumer("c")]
    assert values[-5:] == [(b"k%d" % (i % 5), b"v%d" % i) for i in range(55, 60)]

"""segment.ms rolls by the active segment's FIRST batch's max timestamp (Kafka's rule), whether
the writer appended that batch itself, reopened the log, or cut the segment back to empty."""

from __future__ import annotations

from klog.store import codec
from klog.store.config import LogConfig
from klog.store.log import PartitionLog

T = 1_700_000_000_000


def append(log: PartitionLog, ts: int) -> None:
    batch = codec.encode_batch([(None, b"v", [], ts)], log.log_end_offset)
    log.append(batch, codec.read_header(batch))


def test_segment_ms_rolls_by_the_first_batch_of_the_active_segment(tmp_path):
    config = LogConfig(segment_ms=1000, flush_messages=1 << 30)
    log = PartitionLog(str(tmp_path / "t-0"), config)
    log.open_for_write()
    for ts in (T, T + 500, T + 999):
        append(log, ts)
    assert log.bases == [0]
    append(log, T + 1001)  # 1,001 ms after the first batch of segment 0
    assert log.bases == [0, 3]
    append(log, T + 1900)  # within 1 s of segment 3's first batch (T + 1001)
    assert log.bases == [0, 3]
    log.flush()
    log.close()

    log = PartitionLog(str(tmp_path / "t-0"), config)  # reopened: the first batch is read back
    log.open_for_write()
    append(log, T + 2000)
    assert log.bases == [0, 3]
    append(log, T + 2002)
    append(log, T + 2500)
    assert log.bases == [0, 3, 6]

    log.truncate_to(6)  # segment 6 cut back to empty: its next first batch is a new one
    append(log, T + 5000)
    append(log, T + 5500)
    assert log.bases == [0, 3, 6]
    append(log, T + 6001)
    assert log.bases == [0, 3, 6, 8]
    append(log, T + 6900)
    assert log.bases == [0, 3, 6, 8]
    log.close()

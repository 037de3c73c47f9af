"""Concurrent producers into the same wide topic, one of them killed with SIGKILL mid-run.

Each `klog produce` writes the batches of many partitions in one multi-partition append (its
partitions locked together, synced together): whatever the other writers do meanwhile, every batch
in the log must hold the records of one writer only (whole batches interleave), each writer's
records keep their order in each partition with none twice, the writers that finish lose nothing,
and every offset the killed writer printed as acknowledged holds its record. A reader meanwhile
never sees a partition's high watermark go back (a writer that published a partition after giving
up its lock would put back the end it knew).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import klog
from tests.conftest import REPO
from tests.klog_processes import race_piped_writers

PARTITIONS = 64
WRITERS = 3
LINES = 150_000


def _writer_input(path: str, writer: int) -> None:
    with open(path, "wb") as f:
        f.write(b"".join(b"k%d:w%d-%d\n" % (i % 500, writer, i) for i in range(LINES)))


class _HighWatermarkWatch:
    """A reader's look at each partition's high watermark, over and over in a thread until
    stopped: every time one is below what it saw before, (partition, seen, now) in went_back."""

    def __init__(self, data_dir: str, limit_s: float = 600, rounds_max: int = 1_000_000) -> None:
        self.went_back: list[tuple[int, int, int]] = []
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(data_dir, limit_s, rounds_max), daemon=True)
        self._thread.start()

    def _run(self, data_dir: str, limit_s: float, rounds_max: int) -> None:
        deadline = time.monotonic() + limit_s
        try:
            with klog.open(data_dir) as store:
                seen = [0] * PARTITIONS
                parts = [store.partition("wide", p) for p in range(PARTITIONS)]
                while self.rounds < rounds_max and not self._stop.is_set() and time.monotonic() < deadline:
                    for p, part in enumerate(parts):
                        hw = part.high_watermark()
                        if hw < seen[p]:
                            self.went_back.append((p, seen[p], hw))
                        seen[p] = max(seen[p], hw)
                    self.rounds += 1
        except BaseException as e:  # (said by check(), in the test's thread)
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def check(self) -> None:
        assert not self._thread.is_alive() and self.error is None, self.error
        assert self.rounds > 10, f"the reader looked {self.rounds} times only"
        assert not self.went_back, f"high watermarks went back (partition, seen, then): {self.went_back[:5]}"


def _batches(store, partition: int) -> list[list[bytes]]:
    """The values of each batch of the partition, batch by batch."""
    part = store.partition("wide", partition)
    hw = part.high_watermark()
    out, offset = [], 0
    while offset < hw:
        fetched = part.read(offset)
        assert fetched, (partition, offset, hw)
        for fb in fetched:
            out.append([r[3] for r in fb.records()])
            offset = fb.header.next_offset
    return out


@pytest.mark.slow
def test_concurrent_wide_producers_interleave_whole_batches_and_lose_nothing_under_sigkill(tmp_path, klog_proc):
    data_dir = os.environ["KLOG_DATA_DIR"]
    assert klog_proc("topics", "create", "wide", "-p", str(PARTITIONS)).returncode == 0
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    inputs = []
    for w in range(WRITERS):
        inputs.append(str(tmp_path / f"in{w}"))
        _writer_input(inputs[-1], w)
    watch = _HighWatermarkWatch(data_dir)
    try:
        # a small buffer: many multi-partition appends of the 64 partitions, while the others append
        # too; the first is killed in the middle of the rest, once it has acknowledged batches
        acked = race_piped_writers(inputs, ["produce", "wide", "-K:", "--print-offsets", "-X", "buffer.memory=65536"],
                                   env, after_acks=LINES // 10, timeout=600)
    finally:
        watch.stop()
    watch.check()

    with klog.open(data_dir) as store:  # (also recovers what the kill left, as the next writer would)
        seen: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
        values_at: dict[tuple[int, int], bytes] = {}
        turns = 0  # batches that follow another writer's in their partition
        for p in range(PARTITIONS):
            offset = 0
            last: dict[int, int] = {}
            previous = None
            for batch in _batches(store, p):
                writers = {v.split(b"-")[0] for v in batch}
                assert len(writers) == 1, f"a batch of partition {p} mixes writers {writers}"
                turns += previous is not None and writers != previous
                previous = writers
                for v in batch:
                    w, i = (int(x) for x in v[1:].split(b"-"))
                    assert i > last.get(w, -1), f"writer {w}'s record {i} out of order or twice in partition {p}"
                    last[w] = i
                    seen[w].append(i)
                    values_at[(p, offset)] = v
                    offset += 1
        for w in range(1, WRITERS):
            assert sorted(seen[w]) == list(range(LINES)), f"writer {w} lost records"
        # (writers one after another take ~4 turns a partition; racing, ~40)
        assert turns > 8 * PARTITIONS, f"the writers hardly interleaved ({turns} turns): they did not race"
        for p, o in acked:
            assert values_at.get((p, o), b"").startswith(b"w0-"), f"acknowledged {p}/{o} of the killed writer is gone"

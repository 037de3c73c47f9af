"""Writers whose opens adopt each partition from the last writer's trust record (folders last changed
long ago, so the record is made and trusted), three at once into the same partitions, one killed
with SIGKILL mid-run: whole batches interleave, nothing acknowledged is lost, nothing is written
twice, and the next writer after the kill finds what it left (a tail the record does not describe)."""

from __future__ import annotations

import os
import time

import pytest

import klog
from klog.store import log
from tests.conftest import REPO
from tests.klog_processes import race_piped_writers

PARTITIONS = 12
WRITERS = 3
LINES = 150_000


def _age_folders(data_dir: str) -> None:
    """Until the folders' last changes are settled (see log.FOLDER_SETTLED_NS)."""
    time.sleep(log.FOLDER_SETTLED_NS / 1e9 + 0.02)


def _produce_once(data_dir: str, tag: bytes) -> None:
    with klog.open(data_dir) as store, store.producer() as p:
        for i in range(PARTITIONS):
            p.send("t", tag, partition=i)


@pytest.mark.slow
def test_trusting_writers_interleave_whole_batches_and_lose_nothing_under_sigkill(tmp_path, monkeypatch):
    data_dir = str(tmp_path / "data")
    with klog.open(data_dir) as store:
        store.create_topic("t", PARTITIONS)
    _produce_once(data_dir, b"seed-0")  # creates every folder's files
    _age_folders(data_dir)
    _produce_once(data_dir, b"seed-1")  # lists them once more, and records them
    listed: list[str] = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(str(path)) or real(path))
    _produce_once(data_dir, b"seed-2")
    monkeypatch.undo()
    assert not [p for p in listed if os.path.basename(p).startswith("t-")]  # the writers below trust too

    env = {**os.environ, "PYTHONPATH": REPO}
    inputs = []
    for w in range(WRITERS):
        path = str(tmp_path / f"in{w}")
        with open(path, "wb") as f:
            f.write(b"".join(b"k%d:w%d-%d\n" % (i % 97, w, i) for i in range(LINES)))
        inputs.append(path)
    # (the first is killed in the middle of the rest, once it has acknowledged batches)
    acked = race_piped_writers(inputs, ["produce", "t", "-d", data_dir, "-K:", "--print-offsets",
                                        "-X", "buffer.memory=16384"], env, after_acks=LINES // 10, timeout=300)

    _produce_once(data_dir, b"after")  # the next writer after the kill: it must find where the logs end
    with klog.open(data_dir) as store:
        seen: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
        values_at: dict[tuple[int, int], bytes] = {}
        turns = 0  # batches that follow another writer's in their partition
        for p in range(PARTITIONS):
            part = store.partition("t", p)
            hw, offset, last, previous = part.high_watermark(), 0, {}, None
            while offset < hw:
                for fb in part.read(offset):
                    batch = [r[3] for r in fb.records()]
                    writers = {v.split(b"-")[0] for v in batch}
                    assert len(writers) == 1, f"a batch of partition {p} mixes {writers}"
                    turns += previous is not None and writers != previous
                    previous = writers
                    for v in batch:
                        values_at[(p, offset)] = v
                        offset += 1
                        if v.startswith(b"w"):
                            w, i = (int(x) for x in v[1:].split(b"-"))
                            assert i > last.get(w, -1), f"writer {w}'s record {i} out of order or twice in {p}"
                            last[w] = i
                            seen[w].append(i)
            assert values_at[(p, hw - 1)] == b"after"
        for w in range(1, WRITERS):
            assert sorted(seen[w]) == list(range(LINES)), f"writer {w} lost records"
        # (writers one after another take ~5 turns a partition, the seeds and the last writer's among them; racing, ~45)
        assert turns > 8 * PARTITIONS, f"the writers hardly interleaved ({turns} turns): they did not race"
        for p, o in acked:
            assert values_at.get((p, o), b"").startswith(b"w0-"), f"acknowledged {p}/{o} of the killed writer is gone"

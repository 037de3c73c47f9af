"""After `verify --repair --discard-damaged` on a topic that is not compacted, the discarded batch's
offsets are a gap in the log (the rest of the segment, before and after it, stays, and so does the
log start): every reader steps over it as over a compacted log's gaps (PartitionLog.cleaner_gaps),
and says nothing of damage. The damage in the middle of the segment leaves a gap between two
batches; the damage in its last batches leaves an empty batch holding the discarded offsets (as the
cleaner keeps its round's last batch), so that the log's end stays where it was."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

import klog
from klog.broker.verify import discard_damaged
from klog.store.format import partition_dir_name
from klog.store.log import PartitionLog
from klog.store.reader import PartitionReader
from tests.segment_files import batch_positions, poll_to_end

BATCHES, SIZE = 4, 10  # offsets 0..39, a batch of ten records each


_batch_starts = batch_positions


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x01]))


def _discarded(store, damaged: int, folders: list[str]) -> list[int]:
    """Topic t (delete policy): BATCHES batches, batch `damaged` flipped in every replica, then
    discarded; the offsets that stay."""
    with store.producer() as p:
        for i in range(BATCHES * SIZE):
            p.send("t", b"%d" % i, partition=0)
            if i % SIZE == SIZE - 1:
                p.flush()
    for folder in folders:
        [path] = glob.glob(os.path.join(folder, "*.log"))
        _flip(path, _batch_starts(path)[damaged] + 70)
    [done] = discard_damaged(store, "t")
    assert done.lost == f"{damaged * SIZE}..{damaged * SIZE + SIZE - 1}"
    return [o for o in range(BATCHES * SIZE) if not damaged * SIZE <= o < (damaged + 1) * SIZE]


@pytest.mark.slow
@pytest.mark.parametrize("damaged", [1, BATCHES - 1], ids=["middle", "last"])
def test_the_store_s_readers_the_cli_and_spark_step_over_the_discarded_offsets(store, cli, damaged):
    store.create_topic("t")
    want = _discarded(store, damaged, [store.partition("t", 0).leader.directory])
    assert store.partition("t", 0).log_start_offset() == 0
    assert store.partition("t", 0).high_watermark() == BATCHES * SIZE
    for start in (0, damaged * SIZE, damaged * SIZE + 5):  # from before, at and inside the gap
        got = [(r.offset, r.value) for r in store.consumer("t", start=str(start))]
        assert got == [(o, b"%d" % o) for o in want if o >= start], start
    r = cli("consume", "t", "--skip-damaged")  # nothing damaged any more: nothing skipped, exit 0
    assert (r.exit_code, r.stdout, r.stderr) == (0, b"".join(b"%d\n" % o for o in want), ""), r
    r = cli("verify", "t")
    assert (r.exit_code, r.out.strip()) == (0, "t-0 replica 0: ok"), r
    pytest.importorskip("pyarrow")
    from klog.spark.arrow import arrow_schema, read_range

    for start, end in ((0, 40), (5, 15), (12, 18), (15, 40), (30, 40), (35, 40)):
        got = []
        for batch in read_range(store.path, "t", 0, start, end, True, arrow_schema()):
            got += batch.column("offset").to_pylist()
        assert got == [o for o in want if start <= o < end], (start, end)
    with store.producer() as p:  # writes go on after the old end
        p.send("t", b"after", partition=0)
    assert [r.offset for r in store.consumer("t")][-2:] == [want[-1], BATCHES * SIZE]


@pytest.mark.slow
@pytest.mark.parametrize("damaged", [1, BATCHES - 1], ids=["middle", "last"])
def test_kafka_clients_fetch_across_the_discarded_offsets_through_serve(kafka_server, damaged):
    ck = pytest.importorskip("confluent_kafka")
    pytest.importorskip("pyarrow")
    from klog.spark.arrow import arrow_schema, read_range_remote

    store = kafka_server.store
    store.create_topic("t")
    want = _discarded(store, damaged, [store.partition("t", 0).leader.directory])
    for start in (0, damaged * SIZE + 5):
        consumer = ck.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": f"g{start}",
                                "enable.partition.eof": True, "enable.auto.commit": False})
        consumer.assign([ck.TopicPartition("t", 0, start)])
        got = [offset for offset, _, _ in poll_to_end(consumer)]
        assert got == [o for o in want if o >= start], start
    kafka = (("bootstrap.servers", kafka_server.bootstrap),)
    for start, end in ((0, 40), (5, 15), (12, 18), (35, 40)):  # Spark's ranges, some ending in the gap
        got = []
        for batch in read_range_remote(kafka, "t", 0, start, end, arrow_schema()):
            got += batch.column("offset").to_pylist()
        assert got == [o for o in want if start <= o < end], (start, end)


@pytest.mark.slow
@pytest.mark.parametrize("damaged", [1, BATCHES - 1], ids=["middle", "last"])
def test_a_follower_catches_up_across_the_discarded_offsets(tmp_path, damaged):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        store.create_topic("t", replication_factor=2)
        folders = [os.path.join(d, partition_dir_name("t", 0)) for d in dirs]
        want = _discarded(store, damaged, folders)
        follower = store.topic("t").partitions[0].isr[-1]
        shutil.rmtree(dirs[follower])
        os.makedirs(dirs[follower])  # a new, empty disk in its place: copied from the leader
        warnings: list[str] = []
        with store.producer(on_warning=warnings.append) as p:
            p.send("t", b"after", partition=0)
        assert any("rejoined the ISR" in w for w in warnings), warnings
        got = [(r.offset, r.value) for r in store.consumer("t")]
        assert got == [(o, b"%d" % o) for o in want] + [(BATCHES * SIZE, b"after")]
        images = {tuple(fb.data for fetched in PartitionReader(PartitionLog(f), 0, 41) for fb in fetched.batches)
                  for f in folders}
        assert len(images) == 1
        assert all(r["ok"] for r in store.verify("t")), store.verify("t")

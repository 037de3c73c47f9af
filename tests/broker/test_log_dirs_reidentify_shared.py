"""A replaced disk (a new, empty directory in a log directory's place) is given a new identity once,
by whichever process's writer notices it first: another long-lived writer of the same store (klog
serve next to a `klog produce` following stdin), opened before, sees that identity in klog.json as it
is now and does not replace it again (each replacement took the directory's replicas out of the ISR
and warned again, the two writers re-identifying it in turn on every append)."""

from __future__ import annotations

import os
import shutil

import klog
from klog.broker.replication import ReplicaManager
from klog.broker.writer import PartitionWriter
from klog.store import codec, health


def test_a_replaced_disk_is_reidentified_once_by_two_long_lived_writers(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    data = str(tmp_path / "data")
    warnings: dict[str, list[str]] = {"a": [], "b": []}
    with klog.Store(data, log_dirs=dirs) as setup:
        setup.create_topic("h", partitions=2, replication_factor=2)
    with klog.Store(data, on_warning=warnings["a"].append) as a, klog.Store(data, on_warning=warnings["b"].append) as b:
        writers = {name: PartitionWriter(s, ReplicaManager(s, warn=warnings[name].append))
                   for name, s in (("a", a), ("b", b))}

        def append(name: str, partition: int, i: int) -> None:
            batch = codec.encode_batch([(None, b"v%d" % i, [], 1_700_000_000_000)], 0)
            writers[name].append_batch("h", partition, batch, "all")

        append("a", 0, 0)
        append("b", 1, 0)
        shutil.rmtree(dirs[1])  # a new, empty disk in directory 1's place
        os.makedirs(dirs[1])
        for i in range(1, 5):  # the two writers take turns
            append("a", 0, i)
            append("b", 1, i)
        replaced = [w for name in "ab" for w in warnings[name] if "was replaced" in w]
        assert replaced == ["log directory 1 was replaced by a new one; its replicas will be caught up"]
        with open(os.path.join(dirs[1], health.ID_FILE)) as f:
            assert f.read().strip() == next(d.identity for d in a.data_dir.log_dirs if d.id == 1)
    with klog.open(data) as store:
        for p in range(2):
            assert store.describe_topic("h").partitions[p].replica_log_end == {0: 5, 1: 5}
            assert [r.value for r in store.consumer("h") if r.partition == p] == [b"v%d" % i for i in range(5)]

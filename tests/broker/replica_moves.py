"""What the replica move tests share (test_replica_move_kill.py, test_replica_move_edges.py): a store of
several log directories whose topic t-0 holds numbered records, its partition's metadata, and the check
that every record is there once."""

from __future__ import annotations

import os

import klog


def store_with_t(cli, data_dir: str, rf: int, records: int, disks: list[str]) -> dict[int, str]:  # noqa: ANN001
    """Log directories `disks` added (named in `data_dir`), topic t (RF `rf`, small segments) holding
    `records` records b"0", b"1", ... in partition 0; the log directories' paths by id."""
    for name in disks:
        assert cli("dirs", "add", os.path.join(data_dir, name)).exit_code == 0
    assert cli("topics", "create", "t", "-r", str(rf), "-c", "segment.bytes=8000").exit_code == 0
    with klog.open(data_dir) as store:
        with store.producer(batch_size=200) as producer:  # (~20 records a batch)
            for i in range(records):
                producer.send("t", b"%d" % i, partition=0)
        return {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}


def partition_t0(data_dir: str):  # noqa: ANN201
    """t-0's metadata (replicas, leader, epoch, a pending move)."""
    with klog.open(data_dir) as store:
        return store.topics.get("t").partitions[0]


def every_record_once(data_dir: str, records: int, extra: list[bytes]) -> None:
    """t holds the `records` numbered records then `extra`, each once at its offset, and verifies clean."""
    with klog.open(data_dir) as store:
        got = [(r.offset, r.value) for r in store.consumer("t")]
        assert not [p for p in store.verify("t") if p["problems"]]
    assert got == list(enumerate([b"%d" % i for i in range(records)] + extra))

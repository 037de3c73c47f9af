"""One Fetch of many partitions (read by the store in one loop over the topic) answers each partition
with its own outcome: its stored batches, or its own error (a lost state file is KAFKA_STORAGE_ERROR,
a damaged range CORRUPT_MESSAGE, an offset past the log OFFSET_OUT_OF_RANGE), never one partition's
failure for the others, never an empty answer for a partition that failed."""

from __future__ import annotations

import os

import pytest

import klog
from klog.server import Server
from tests.serve_helpers import RawClient, fetch_fields

pytest.importorskip("kio")
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic  # noqa: E402

PARTITIONS = 6


def _log(data_dir: str, partition: int) -> str:
    folder = os.path.join(data_dir, "logs", f"t-{partition}")
    [log] = [f for f in os.listdir(folder) if f.endswith(".log")]
    return os.path.join(folder, log)


@pytest.mark.parametrize("isolation_level", [0, 1])
def test_each_partition_of_one_fetch_gets_its_own_outcome(data_dir, isolation_level):
    with klog.open(data_dir) as store:
        store.create_topic("t", partitions=PARTITIONS)
        with store.producer() as producer:
            for p in range(PARTITIONS):
                producer.send_values("t", [b"p%d-%d" % (p, i) for i in range(3)], partition=p)
    os.unlink(os.path.join(data_dir, "state", "t-1.state"))  # lost: the high watermark is unknown
    with open(_log(data_dir, 2), "r+b") as f:  # the batch's size zeroed: no batch of any format
        f.seek(8)
        f.write(bytes(4))
    stored = {p: open(_log(data_dir, p), "rb").read() for p in (0, 4, 5)}
    offsets = {0: 0, 1: 0, 2: 0, 3: 4, 4: 0, 5: 3}  # 3: past the log (high watermark 3); 5: at its end
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as client:
        fields = fetch_fields("t", 0, 0)
        fields["topics"] = (FetchTopic(topic="t", partitions=tuple(
            FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offsets[p], last_fetched_epoch=-1,
                           log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(PARTITIONS))),)
        fields["isolation_level"] = isolation_level
        answer = client.send(1, 12, **fields)
    got = {int(p.partition_index): p for p in answer.responses[0].partitions}
    assert sorted(got) == list(range(PARTITIONS))
    codes = {p: int(got[p].error_code) for p in got}
    # KAFKA_STORAGE_ERROR, CORRUPT_MESSAGE, OFFSET_OUT_OF_RANGE (read_committed: the scan for the last
    # stable offset meets the damage first, and cannot say where the stable part ends: KAFKA_STORAGE_ERROR)
    assert codes == {0: 0, 1: 56, 2: 56 if isolation_level else 2, 3: 1, 4: 0, 5: 0}
    for p in (0, 4):
        assert bytes(got[p].records) == stored[p]
        assert int(got[p].high_watermark) == 3 and int(got[p].last_stable_offset) == 3
    assert not got[5].records and int(got[5].high_watermark) == 3
    assert not got[1].records and not got[2].records

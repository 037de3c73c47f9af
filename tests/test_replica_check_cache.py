"""The writer skips the full replica check between its own appends (issue 18); whatever another
holder of the partition lock changed meanwhile must still be seen by the next append."""

from __future__ import annotations

import klog


def test_a_replica_moved_by_another_store_mid_stream_gets_every_later_record(tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    data = str(tmp_path / "data")
    with klog.Store(data, log_dirs=dirs) as writer, klog.Store(data, log_dirs=dirs) as admin:
        writer.create_topic("m", replication_factor=2)
        meta = writer.topics.get("m").partitions[0]
        spare = next(d for d in range(3) if d not in meta.replicas)
        follower = next(d for d in meta.replicas if d != meta.leader)
        with writer.producer(acks="all") as producer:  # one producer throughout
            for i in range(100):
                if i == 50:
                    admin.reassign("m", follower, spare)
                producer.send("m", b"v%d" % i, partition=0)
                producer.flush()
        after = writer.describe_topic("m").partitions[0]
        assert after.replica_log_end == {meta.leader: 100, spare: 100}
        assert [r.value for r in writer.consumer("m")] == [b"v%d" % i for i in range(100)]

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


def test_the_state_file_is_served_from_memory_only_to_the_thread_holding_the_lock(tmp_path):
    """Within one lock hold the writer reads the partition state once; a server's reader threads
    meanwhile read the file itself (their stale read must never land in the writer's memory)."""
    import os
    import threading

    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("c")
        with store.producer() as producer:
            producer.send_values("c", [b"a", b"b"])
        part = store.partition("c", 0)
        with part.lock:
            part.open_for_write()
            assert part.state.held() == part.lock.generation
            seen = []
            reader = threading.Thread(target=lambda: seen.append((part.state.held(), part.snapshot().high_watermark)))
            reader.start()
            reader.join(10)
            assert seen == [(None, 2)]
            with open(part.state.path, "r+b") as f:  # what only a holder may do: the holder's view is memory
                f.write(bytes(os.path.getsize(part.state.path)))
            assert part.snapshot().high_watermark == 2
        assert part.state.held() is None
        assert part.state.read_valid() is None  # outside the hold: the file as it is (zeroed: damaged)

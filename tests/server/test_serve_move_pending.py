"""klog serve and a replica move cut short (`klog topics reassign` killed with -9): DescribeLogDirs
reports the new replica as Kafka's future replica (isFuture) until the move is settled, and an
AlterReplicaLogDirs of the partition settles it first: the pending move to the directory asked for
is finished (no error, as Kafka answers for a partition already there), nothing is left twice."""

from __future__ import annotations

import os

import pytest

import klog
from klog.server.server import Server


def _dirs_of_t(client) -> dict[str, list[tuple[int, bool]]]:
    answer = client.send(35, 4, topics=None)
    return {r.log_dir: [(int(p.partition_index), bool(p.is_future_key)) for t in r.topics if t.name == "t"
                        for p in t.partitions] for r in answer.results}


@pytest.mark.slow
def test_a_pending_move_is_a_future_replica_until_alter_replica_log_dirs_settles_it(data_dir, klog_proc,
                                                                                     monkeypatch):
    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    from tests.serve_helpers import RawClient

    with klog.open(data_dir) as store:
        store.add_dir(os.path.join(data_dir, "disk2"))
        store.create_topic("t", 1)
        with store.producer() as producer:
            for i in range(100):
                producer.send("t", b"%d" % i, partition=0)
        home = store.topic("t").partitions[0].leader
        paths = {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}
    other = next(d for d in paths if d != home)
    monkeypatch.setenv("KLOG_CRASH_AT", "move-caught-up")
    assert klog_proc("topics", "reassign", "t", "--from", str(home), "--to", str(other)).returncode == -9
    monkeypatch.delenv("KLOG_CRASH_AT")
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert _dirs_of_t(client) == {paths[home]: [(0, False)], paths[other]: [(0, True)]}
        answer = client.send(34, 2, dirs=(AlterReplicaLogDir(path=paths[other], topics=(
            AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
        assert [(p.partition_index, p.error_code) for t in answer.results for p in t.partitions] == [(0, 0)]
        assert _dirs_of_t(client) == {paths[home]: [], paths[other]: [(0, False)]}
    with klog.open(data_dir) as store:
        meta = store.topics.get("t").partitions[0]
        assert (meta.replicas, meta.isr, meta.move) == ([other], [other], None)
        assert [r.value for r in store.consumer("t")] == [b"%d" % i for i in range(100)]
        assert not os.path.exists(os.path.join(paths[home], "t-0"))


@pytest.mark.slow
def test_a_server_killed_mid_move_leaves_one_replica_after_the_next_produce(data_dir):
    """`klog serve` killed with -9 while AlterReplicaLogDirs copies the partition (20 batches in):
    the next server's first produce to the partition finishes the move, and the partition has its
    one replica again (it kept both, for good), every record once."""
    import subprocess
    import sys

    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    from tests.conftest import REPO
    from tests.serve_helpers import RawClient, batch, produce

    with klog.open(data_dir) as store:
        store.add_dir(os.path.join(data_dir, "disk2"))
        store.create_topic("t", 1)
        with store.producer(batch_size=200) as producer:  # (~20 records a batch)
            for i in range(1000):
                producer.send("t", b"%d" % i, partition=0)
        home = store.topic("t").partitions[0].leader
        paths = {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}
    other = next(d for d in paths if d != home)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, "KLOG_CRASH_AT": "catch-up-copied:20"}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        port = int(proc.stderr.readline().split("listening on 127.0.0.1:")[1].split()[0])
        with RawClient(port) as client, pytest.raises((OSError, ConnectionError, EOFError)):
            client.sock.settimeout(30)
            client.send(34, 2, dirs=(AlterReplicaLogDir(path=paths[other], topics=(
                AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
        assert proc.wait(30) == -9
    finally:
        proc.kill()
        proc.wait(10)
        proc.stderr.close()
    with klog.open(data_dir) as store:
        assert store.topics.get("t").partitions[0].move == [home, other]
    with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        assert produce(client, "t", 0, batch([b"after"])) == (0, 1000)
    with klog.open(data_dir) as store:
        meta = store.topics.get("t").partitions[0]
        assert (meta.replicas, meta.isr, meta.move) == ([other], [other], None)
        assert [r.value for r in store.consumer("t")] == [b"%d" % i for i in range(1000)] + [b"after"]
        assert not [p for p in store.verify("t") if p["problems"]]
        assert not os.path.exists(os.path.join(paths[home], "t-0"))

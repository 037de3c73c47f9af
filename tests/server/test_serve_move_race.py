"""`klog serve`'s AlterReplicaLogDirs and a `klog topics reassign` of the same partition, in two
processes, racing: the test holds the partition's lock until the first mover waits for it, then the
second asks while the first holds it, and sees its move once it gets the lock. Whichever goes first,
and whichever of the two is killed with -9 mid-copy, the partition ends with one replica, where the
server was asked to put it (once the next write settled what a kill left), every record once, no
folder left behind; the CLI moved or says in one line why not, the server answers NONE."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading

import pytest

import klog
from tests.conftest import REPO
from tests.lock_waits import lockers, until

RECORDS = 1000


def _setup(data_dir: str) -> dict[int, str]:
    with klog.open(data_dir) as store:
        for i in (1, 2):
            store.add_dir(os.path.join(data_dir, f"disk{i}"))
        store.create_topic("t", 1, replication_factor=1, configs={"segment.bytes": "8000"})
        with store.producer(batch_size=200) as producer:  # (~20 records a batch: ~50 batches to copy)
            for i in range(RECORDS):
                producer.send("t", b"%d" % i, partition=0)
        assert store.topic("t").partitions[0].replicas == [0]
        return {d: store.data_dir.log_dir_path(d) for d in store.log_dir_ids()}


def _env(data_dir: str, crash: str | None) -> dict[str, str]:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    env.pop("KLOG_CRASH_AT", None)
    if crash:
        env["KLOG_CRASH_AT"] = crash
    return env


def _alter(port: int, path: str, answers: list) -> None:
    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    from tests.serve_helpers import RawClient

    try:
        with RawClient(port) as client:
            client.sock.settimeout(60)
            answer = client.send(34, 2, dirs=(AlterReplicaLogDir(path=path, topics=(
                AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
            answers.append([(int(p.partition_index), int(p.error_code)) for t in answer.results
                            for p in t.partitions])
    except (OSError, EOFError) as e:  # (the server killed mid-move)
        answers.append(e)


@pytest.mark.slow
@pytest.mark.parametrize(("first", "killed"), [("cli", None), ("serve", None), ("cli", "cli"), ("serve", "serve"),
                                               ("cli", "serve"), ("serve", "cli")])
def test_alter_replica_log_dirs_racing_a_reassign_leaves_one_replica(cli, data_dir, first, killed):
    dirs = _setup(data_dir)
    crash = "catch-up-copied:20"
    serve = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                             stderr=subprocess.PIPE, text=True,
                             env=_env(data_dir, crash if killed == "serve" else None))
    reassign = None
    try:
        port = int(serve.stderr.readline().split("listening on 127.0.0.1:")[1].split()[0])
        answers: list = []
        alter = threading.Thread(target=_alter, args=(port, dirs[2], answers))

        def start_reassign() -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", "klog", "topics", "reassign", "t", "-p", "0", "--from", "0",
                                     "--to", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=_env(data_dir, crash if killed == "cli" else None))

        with klog.open(data_dir) as store:
            lock = store.partition("t", 0).lock
            lock.acquire()
            inode = os.stat(lock.path).st_ino
            try:  # the first mover waits for the lock, then takes it; the second asks while it holds it
                if first == "cli":
                    reassign = start_reassign()
                    pid = reassign.pid
                else:
                    alter.start()
                    pid = serve.pid
                until(lambda: pid in lockers(inode)[1], "the first mover waits for the partition's lock")
            finally:
                lock.release()
        until(lambda: pid in lockers(inode)[0] or (reassign.poll() is not None if first == "cli" else answers),
               "the first mover holds the partition's lock, or is done")
        if first == "cli":
            alter.start()
        else:
            reassign = start_reassign()
        out, err = reassign.communicate(timeout=60)
        alter.join(60)
        assert not alter.is_alive()
        if killed == "serve":  # mid-copy: of 0 to 2 (first), or of 1 to 2 after the CLI's move
            assert serve.wait(60) == -9 and len(answers) == 1 and isinstance(answers[0], Exception), answers
        else:  # NONE: moved, from 0, or from 1 after the CLI's move (seen, not undone)
            assert answers == [[(0, 0)]]
        lines = err.splitlines()
        if first == "cli":
            assert (reassign.returncode, lines) == ((-9, []) if killed == "cli" else
                                                   (0, ["Moved 1 replicas of t from log directory 0 to 1"])), err
        else:  # the server moved t-0 first (finished by the CLI if the server was killed): nothing left in 0
            said = ["klog: warning: replica of t-0 in log directory 2 caught up and rejoined the ISR",
                    "klog: warning: t-0: finished the move of its replica from log directory 0 to 2 (cut short "
                    "before)"] if killed == "serve" else []
            assert (reassign.returncode, lines) == (1, [*said, "klog: error: t-0 has no replica in log directory 0"])
    finally:
        if reassign is not None and reassign.poll() is None:
            reassign.kill()
            reassign.wait(10)
        if serve.poll() is None:
            serve.terminate()
            try:
                serve.wait(30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait(10)
        serve.stderr.close()
    r = cli("produce", "t", input=b"after\n")  # settles whatever a kill left pending
    assert r.exit_code == 0, r
    with klog.open(data_dir) as store:
        meta = store.topics.get("t").partitions[0]
        assert (meta.replicas, meta.isr, meta.leader, meta.move) == ([2], [2], 2, None)
        assert [r.value for r in store.consumer("t")] == [b"%d" % i for i in range(RECORDS)] + [b"after"]
        assert not [p for p in store.verify("t") if p["problems"]]
    assert sorted(d for d, path in dirs.items() if os.path.isdir(os.path.join(path, "t-0"))) == [2]
    assert not [p for path in dirs.values() for p in glob.glob(os.path.join(path, "klog-moved-*"))]


@pytest.mark.slow
def test_alter_replica_log_dirs_to_a_directory_that_fills_up_answers_kafka_storage_error(data_dir):
    """The copy to the new directory fails with ENOSPC 10 batches in: KAFKA_STORAGE_ERROR (56, as
    Kafka answers a move to an offline directory), the move rolled back, the partition still in 0,
    every record there, and produces go on."""
    import errno

    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    from klog.server.server import Server
    from klog.store.log import PartitionLog
    from tests.serve_helpers import RawClient, batch, produce

    dirs = _setup(data_dir)
    real = PartitionLog.append
    written = [0]

    def append(self, data, header, *args, **kwargs):
        if self.directory.startswith(dirs[2] + os.sep):
            if written[0] >= 10:
                raise OSError(errno.ENOSPC, "No space left on device")
            written[0] += 1
        return real(self, data, header, *args, **kwargs)

    with pytest.MonkeyPatch.context() as full:
        full.setattr(PartitionLog, "append", append)
        with Server(data_dir, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
            client.sock.settimeout(60)
            answer = client.send(34, 2, dirs=(AlterReplicaLogDir(path=dirs[2], topics=(
                AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
            assert [(p.partition_index, p.error_code) for t in answer.results for p in t.partitions] == [(0, 56)]
            assert written[0] == 10
            assert produce(client, "t", 0, batch([b"after"])) == (0, RECORDS)
    with klog.open(data_dir) as store:
        meta = store.topics.get("t").partitions[0]
        assert (meta.replicas, meta.isr, meta.move) == ([0], [0], None)
        assert [r.value for r in store.consumer("t")] == [b"%d" % i for i in range(RECORDS)] + [b"after"]
    assert sorted(d for d, path in dirs.items() if os.path.isdir(os.path.join(path, "t-0"))) == [0]

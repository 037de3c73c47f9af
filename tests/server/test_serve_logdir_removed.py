"""A `klog serve` started before `klog dirs remove D` in another shell: Kafka clients' CreateTopics
(and auto-create) place no replica in D, AlterReplicaLogDirs to D's path answers LOG_DIR_NOT_FOUND
as for any path the store does not have, and DescribeLogDirs no longer lists D (klog serve used
to place replicas in D from the list it loaded at start)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import klog
from tests.conftest import REPO

LOG_DIR_NOT_FOUND = 57


@pytest.mark.slow
def test_serve_places_nothing_in_a_directory_removed_after_it_started(cli, data_dir):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDir, AlterReplicaLogDirTopic

    from tests.serve_helpers import RawClient

    for name in ("disk1", "disk2"):
        assert cli("dirs", "add", os.path.join(data_dir, "..", name)).exit_code == 0
    assert cli("topics", "create", "t").exit_code == 0
    with klog.open(data_dir) as store:
        removed = store.data_dir.log_dir_path(2)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    env.pop("KLOG_CRASH_AT", None)
    serve = subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        port = int(serve.stderr.readline().split("listening on 127.0.0.1:")[1].split()[0])
        r = cli("dirs", "remove", "2")
        assert r.exit_code == 0, r
        with RawClient(port) as client:  # (first: the server has made no placement since)
            answer = client.send(34, 2, dirs=(AlterReplicaLogDir(path=removed, topics=(
                AlterReplicaLogDirTopic(name="t", partitions=(0,)),)),))
            assert [int(p.error_code) for t in answer.results for p in t.partitions] == [LOG_DIR_NOT_FOUND]
            listed = client.send(35, 1, topics=None)
            assert sorted(os.path.normpath(d.log_dir) for d in listed.results) == sorted(
                os.path.normpath(os.path.join(data_dir, p)) for p in ("logs", os.path.join("..", "disk1")))
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10000)
        try:
            admin.create_topics([NewTopic("made", 6, 2)])
        finally:
            admin.close()
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    with klog.open(data_dir) as store:
        assert store.log_dir_ids() == [0, 1]
        placed = {d for t in store.list_topics() for pm in t.partitions for d in pm.replicas}
        assert placed <= {0, 1} and len(store.topic("made").partitions) == 6

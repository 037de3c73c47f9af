"""Delete, create and produce of one topic from different processes writing the same store: no
folder, state or lock file is left that no topic owns, the topic can be created again afterwards,
and no writer fails with anything but a clean "unknown topic" (the partition locks serialise a
delete against every writer of the topic, as Store's name locks do within one process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import klog
from tests.conftest import REPO

ROUNDS = 25
PARTITIONS = 4

# delete then create the topic ROUNDS times
CHURN = """
import sys, klog
from klog.errors import TopicExistsError, UnknownTopicError
with klog.open(sys.argv[1]) as store:
    for _ in range(int(sys.argv[2])):
        try:
            store.delete_topic("t")
        except UnknownTopicError:
            pass
        try:
            store.create_topic("t", int(sys.argv[3]))
        except TopicExistsError:
            pass
"""

# produce into every partition until the churn is done (a marker file), each round a new producer
PRODUCE = """
import os, sys, klog
from klog.errors import UnknownTopicError, UnknownPartitionError, UsageError
done, sent = sys.argv[2], 0
with klog.open(sys.argv[1]) as store:
    while not os.path.exists(done) and sent < 100_000:
        try:
            with store.producer() as p:
                for i in range(int(sys.argv[3])):
                    p.send("t", b"v", partition=i)
            sent += 1
        except (UnknownTopicError, UnknownPartitionError, UsageError):  # gone, or auto-created with 1
            store.forget_topic("t")
print(sent)
"""


@pytest.mark.slow
def test_delete_and_create_racing_a_producer_in_another_process_leave_no_orphans(data_dir, tmp_path):
    with klog.open(data_dir) as store:
        store.create_topic("t", PARTITIONS)
    env = {**os.environ, "PYTHONPATH": REPO}
    done = str(tmp_path / "done")
    producer = subprocess.Popen([sys.executable, "-c", PRODUCE, data_dir, done, str(PARTITIONS)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(0.3)  # the producer is writing
        churn = subprocess.run([sys.executable, "-c", CHURN, data_dir, str(ROUNDS), str(PARTITIONS)], env=env,
                               capture_output=True, timeout=120)
    finally:
        open(done, "w").close()
        out, err = producer.communicate(timeout=60)
    assert churn.returncode == 0, churn.stderr.decode()[-2000:]
    assert producer.returncode == 0, err.decode()[-2000:]
    assert int(out) > 0
    with klog.open(data_dir) as store:
        store.delete_topic("t")
        logs = os.listdir(os.path.join(data_dir, "logs"))
        assert [n for n in logs if n.startswith("t-")] == [], logs  # no folder the deleted topic left
        assert [n for n in os.listdir(os.path.join(data_dir, "state")) if n.startswith("t-")] == []
        store.create_topic("t", PARTITIONS)
        with store.producer() as p:
            p.send("t", b"after", partition=0)
        assert [r.value for r in store.consumer("t")] == [b"after"]

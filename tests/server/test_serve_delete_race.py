"""DeleteTopics and CreateTopics racing producers through klog serve: the server logs no internal
error, a partition's files are closed only when no request holds them, no folder outlives its
topic, and afterwards `topics create` works and `verify` is clean."""

from __future__ import annotations

import datetime
import logging
import threading
import time

import pytest
from kio.static.primitive import i32Timedelta

from tests.serve_helpers import RawClient, batch, produce

RACE_S = 4.0
CREATE_TOPICS, DELETE_TOPICS = 19, 20


def _create(client: RawClient, name: str, partitions: int) -> int:
    from kio.schema.create_topics.v5.request import CreatableTopic

    topic = CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
    answer = client.send(CREATE_TOPICS, 5, topics=(topic,), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                         validate_only=False)
    return int(answer.topics[0].error_code)


def _delete(client: RawClient, name: str) -> int:
    answer = client.send(DELETE_TOPICS, 5, topic_names=(name,),
                         timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)))
    return int(answer.responses[0].error_code)


@pytest.mark.slow
def test_delete_and_create_racing_producers_leave_no_error_and_no_orphan(kafka_server, store, cli, caplog):
    caplog.set_level(logging.INFO, logger="klog.serve")
    partitions = 3
    store.create_topic("D", partitions=partitions)
    stop = threading.Event()
    acked = [0]
    failures: list[BaseException] = []

    def producer(index: int) -> None:
        try:
            with RawClient(kafka_server.port) as client:
                for i in range(100_000):  # bounded in count and by RACE_S
                    if stop.is_set():
                        return
                    code, _ = produce(client, "D", (index + i) % partitions, batch([b"v%d" % i]))
                    acked[0] += code == 0
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    def lifecycle() -> None:
        try:
            with RawClient(kafka_server.port) as client:
                for _ in range(10_000):  # bounded in count and by RACE_S
                    if stop.is_set():
                        return
                    _delete(client, "D")
                    _create(client, "D", partitions)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(4)] + \
        [threading.Thread(target=lifecycle) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(RACE_S)
    stop.set()
    for t in threads:
        t.join(30)
    assert not failures, failures[0]
    assert acked[0] > 0
    bad = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or "internal error" in r.getMessage()
           or "Traceback" in r.getMessage()]
    assert not bad, bad[:5]
    with RawClient(kafka_server.port) as client:  # whatever state the race left, the name works
        _delete(client, "D")
        created = _create(client, "D", partitions)
        assert created == 0, created
        assert produce(client, "D", 0, batch([b"after"]))[0] == 0
    r = cli("verify")
    assert r.exit_code == 0, r.out + r.stderr


def test_verify_repair_removes_a_partition_folder_without_records_that_no_topic_owns(cli, store):
    """What a partition opened while its topic was deleted leaves: `D-0` with empty segment files.
    It keeps `topics create D` from working; verify reports it and --repair removes it (a folder
    with records is left for `klog dirs import`)."""
    import os

    store.create_topic("F", partitions=1)
    with store.producer() as p:
        p.send("F", value=b"kept", partition=0)
    folder_f = store.partition("F", 0).leader.directory
    store.close()
    root = os.path.dirname(folder_f)
    os.makedirs(os.path.join(root, "D-0"))  # an empty partition folder no topic owns
    for suffix in (".log", ".index", ".timeindex"):
        open(os.path.join(root, "D-0", "00000000000000000000" + suffix), "wb").close()
    os.rename(folder_f, os.path.join(root, "G-0"))  # one with a record: to be adopted, never removed
    assert cli("topics", "create", "D").exit_code != 0
    r = cli("verify")
    assert r.exit_code != 0 and "without records (left by a topic delete)" in r.out + r.stderr, r.out
    r = cli("verify", "--repair")
    assert "repaired: removed" in r.out + r.stderr, r.out + r.stderr
    assert not os.path.exists(os.path.join(root, "D-0"))
    assert os.path.exists(os.path.join(root, "G-0"))
    assert cli("topics", "create", "D").exit_code == 0

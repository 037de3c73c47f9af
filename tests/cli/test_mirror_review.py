"""`klog mirror` reviewed as a MirrorMaker 2 user would run it: a `klog serve` SOURCE cluster whose
transactional producers (confluent-kafka) commit and abort while `klog mirror --follow` runs and is
killed with SIGKILL; a transaction left open by a killed producer; a named cluster's isolation.level;
a source topic deleted and recreated under the mirror.

What a user sees: DEST read at read_committed holds the source's read_committed view, each record
once with --exactly-once and at least once (none lost, first copies in order) without it.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_cli import assert_one_line_error

import klog
from tests.cli.copy_sources import fill_t, t_recreated_after, transactions
from tests.conftest import REPO

ck = pytest.importorskip("confluent_kafka")


# -- helpers -------------------------------------------------------------------------------------
def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def _delete(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(10)


def _source_committed(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """The source's read_committed view, read by librdkafka (each partition up to its end)."""
    out = {}
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "review-check", "enable.auto.commit": False,
                            "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        for p in range(partitions):
            consumer.assign([ck.TopicPartition(topic, p, 0)])
            values = []
            limit = time.monotonic() + 20
            while time.monotonic() < limit:
                m = consumer.poll(1)
                if m is None:
                    continue
                if m.error() is not None:
                    assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                    break
                values.append(m.value())
            out[p] = values
    finally:
        consumer.close()
    return out


def _dest_committed(dest: str, topic: str, partition: int) -> list[bytes]:
    from klog.errors import KlogError

    try:
        with klog.open(dest, create=False) as store:
            if not store.has_topic(topic):
                return []
            return [r.value for r in store.consumer(topic, partitions=[partition], isolation_level="read_committed")]
    except KlogError:  # the mirror is creating DEST right now
        return []


@pytest.fixture
def kafka_server(data_dir):
    """`klog serve` on 127.0.0.1 (ephemeral port) whose coordinator looks for timed-out transactions
    every 200 ms (Kafka's default: 10 s)."""
    from klog.server import Server

    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000, transactions={"cleanup_interval_ms": 200}) as server:
        server.bootstrap = f"127.0.0.1:{server.port}"
        yield server


def _mirror(bootstrap: str, dest: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.Popen([sys.executable, "-m", "klog", "mirror", bootstrap, dest, *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=30)[1].decode()


def _wait(condition, seconds: float) -> bool:  # noqa: ANN001
    limit = time.monotonic() + seconds
    while time.monotonic() < limit:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


# -- transactions in the source, a following mirror killed ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_following_mirror_killed_at_random_keeps_the_sources_committed_view(kafka_server, tmp_path, replay_seed,
                                                                              exactly_once):
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    _create(b, "t", 3)
    stop, failures = threading.Event(), []

    def produce() -> None:  # transactions of 1-40 records over the 3 partitions, ~30% aborted
        try:
            producer = ck.Producer({"bootstrap.servers": b, "transactional.id": "review", "linger.ms": 5})
            producer.init_transactions(10)
            rng, i = random.Random(1), 0
            while not stop.is_set():
                producer.begin_transaction()
                for _ in range(rng.randrange(1, 40)):
                    producer.produce("t", b"v%d" % i, key=b"k%d" % (i % 7))
                    i += 1
                if rng.random() < 0.3:
                    producer.flush(10)  # the aborted records are in the log
                    producer.abort_transaction(10)
                else:
                    producer.commit_transaction(10)
                time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    thread = threading.Thread(target=produce)
    thread.start()
    rng = random.Random(replay_seed(11))
    args = ["t", "--follow"] + (["--exactly-once"] if exactly_once else [])
    try:
        for _ in range(4):  # bounded: each run copies for 1-2.5 s, then SIGKILL
            proc = _mirror(b, dest, *args)
            time.sleep(rng.uniform(1.0, 2.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    finally:
        stop.set()
        thread.join(30)
    assert not failures, failures
    want = _source_committed(b, "t", 3)
    proc = _mirror(b, dest, *args)  # the last run catches up and is stopped cleanly
    try:
        assert _wait(lambda: all(len(set(_dest_committed(dest, "t", p))) >= len(want[p]) for p in range(3)), 20)
    finally:
        err = _stop(proc)
    assert "Traceback" not in err, err
    for p in range(3):
        got = _dest_committed(dest, "t", p)
        assert want[p], "the producer committed records to every partition"
        if exactly_once:
            assert got == want[p], f"partition {p}: {len(got)} records for {len(want[p])}"
        else:
            assert list(dict.fromkeys(got)) == want[p], f"partition {p}: a record lost, added or out of order"


@pytest.mark.slow
def test_an_open_transaction_of_a_killed_producer_stalls_its_partition_only_until_the_timeout(kafka_server, tmp_path):
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    _create(b, "t", 2)
    plain = ck.Producer({"bootstrap.servers": b})
    plain.produce("t", b"p0-a", partition=0)
    plain.produce("t", b"p1-a", partition=1)
    plain.flush(10)
    proc = _mirror(b, dest, "t", "--follow", "--exactly-once")
    try:
        code = ("import confluent_kafka as ck, sys, time\n"
                f"p = ck.Producer({{'bootstrap.servers': '{b}', 'transactional.id': 'stuck', "
                "'transaction.timeout.ms': 3000})\n"
                "p.init_transactions(10); p.begin_transaction()\n"
                "p.produce('t', b'p0-open', partition=0); p.flush(10)\n"
                "print('open', flush=True); time.sleep(60)\n")
        stuck = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        try:
            assert stuck.stdout.readline().strip() == b"open"
        finally:
            stuck.send_signal(signal.SIGKILL)  # the transaction stays open until the coordinator's timeout
            stuck.wait(10)
            stuck.stdout.close()
        started = time.monotonic()
        plain.produce("t", b"p0-b", partition=0)
        plain.produce("t", b"p1-b", partition=1)
        plain.flush(10)
        # partition 1 flows meanwhile; partition 0 waits behind the open transaction
        assert _wait(lambda: _dest_committed(dest, "t", 1) == [b"p1-a", b"p1-b"], 15)
        if time.monotonic() - started < 2:
            assert _dest_committed(dest, "t", 0) == [b"p0-a"]
        # the coordinator aborts it (3 s): p0-b is copied, the aborted record never is
        assert _wait(lambda: _dest_committed(dest, "t", 0) == [b"p0-a", b"p0-b"], 20)
    finally:
        err = _stop(proc)
    assert "Traceback" not in err, err
    with klog.open(dest, create=False) as store:
        got = [r.value for r in store.consumer("t", partitions=[0], isolation_level="read_uncommitted")]
    assert b"p0-open" not in got


# -- a named cluster's isolation.level -------------------------------------------------------------
def test_a_named_clusters_isolation_level_is_the_one_the_mirror_checks(cli, data_dir, tmp_path):
    """A cluster saved with -X isolation.level=read_uncommitted is read so whatever the mirror asks
    (its reader takes the cluster's property): --exactly-once of it copied aborted records into DEST
    transactions that then committed. Refused before anything opens, as for --source-property."""
    assert cli("clusters", "add", "src", "-b", "127.0.0.1:1", "-X", "isolation.level=read_uncommitted").exit_code == 0
    dest = str(tmp_path / "never")
    assert_one_line_error(cli("mirror", "@src", dest, "t", "--exactly-once"), 2, "committed records only",
                          "cluster @src's property isolation.level=read_uncommitted")
    assert_one_line_error(cli("mirror", "@src", dest, "t", "--isolation-level", "read_committed"), 2,
                          "--isolation-level read_committed contradicts cluster @src's property "
                          "isolation.level=read_uncommitted")
    assert not os.path.exists(dest)


# -- a source topic deleted and recreated -----------------------------------------------------------
def test_a_rerun_after_the_source_topic_was_recreated_copies_the_new_topic(cli, tmp_path):
    """The checkpoint (offset 5) is past the new topic's end (3): the rerun skipped its records for
    good, silently. It now copies the new topic from its start, saying why."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    t_recreated_after(src, lambda: cli("mirror", src, dest, "t"))
    r = cli("mirror", src, dest, "t")
    assert r.exit_code == 0, r.stderr
    assert "t-0: the mirror's checkpoint (offset 5) is past the source's end (3): the topic was recreated" in r.stderr
    assert _dest_committed(dest, "t", 0) == [b"old%d" % i for i in range(5)] + [b"new%d" % i for i in range(3)]
    r = cli("mirror", src, dest, "t")  # and from the new checkpoint on: nothing twice, no warning
    assert r.exit_code == 0 and "warning" not in r.stderr and "mirrored 0 records" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_a_following_mirror_whose_source_topic_is_recreated_says_so(kafka_server, tmp_path, level):
    """It waited for offset 5 of the new topic forever, copying nothing (read_committed) or ended with
    an offset out of range (read_uncommitted); now one line names the partition, and a rerun copies
    the new topic."""
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    _create(b, "t", 1)
    plain = ck.Producer({"bootstrap.servers": b})
    for i in range(5):
        plain.produce("t", b"old%d" % i)
    plain.flush(10)
    proc = _mirror(b, dest, "t", "--follow", "--isolation-level", level)
    try:
        assert _wait(lambda: len(_dest_committed(dest, "t", 0)) == 5, 20)
        _delete(b, "t")
        assert _wait(lambda: not klog_has_topic(b, "t"), 10)
        _create(b, "t", 1)
        for i in range(3):
            plain.produce("t", b"new%d" % i)
        plain.flush(10)
        proc.wait(20)
    finally:
        err = _stop(proc)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()  # (ends at 0 or 3: seen before or after the new records)
    assert re.fullmatch(r"klog: error: source partition t-0 now ends at offset [03], below the mirror's position 5: "
                        r"the topic was deleted and recreated \(or truncated\); run the mirror again to copy it "
                        r"from its start", lines[-1]), err
    assert "Traceback" not in err
    rerun = _mirror(b, dest, "t", "--isolation-level", level)
    err = rerun.communicate(timeout=60)[1].decode()
    assert rerun.returncode == 0, err
    assert _dest_committed(dest, "t", 0) == [b"old%d" % i for i in range(5)] + [b"new%d" % i for i in range(3)]


def klog_has_topic(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


# -- checkpoints past what holds no record for the mirror ------------------------------------------
def _checkpoints(dest: str) -> list[int]:
    import json

    with klog.open(dest, create=False) as store:
        return [json.loads(r.value)["next_offset"] for r in store.consumer("__klog_mirror_checkpoints")]


@pytest.mark.slow
@pytest.mark.parametrize("exactly_once", [False, True])
def test_the_checkpoint_lands_past_an_aborted_transaction_at_the_end(cli, tmp_path, exactly_once):
    """It stopped after the last copied record (offset 3), so every rerun read the aborted
    transaction again (here 5 records; any size in a real log) to find nothing in it."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    fill_t(src, [b"a", b"b", b"c"])
    with klog.open(src) as store, store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send_keyed("t", [(None, b"aborted%d" % i) for i in range(5)])
        producer.flush()
        producer.abort()  # offsets 3-7, its marker 8: the log ends at 9
    mode = ["--exactly-once"] if exactly_once else []
    assert cli("mirror", src, dest, "t", *mode).exit_code == 0
    assert _checkpoints(dest)[-1] == 9
    with klog.open(src) as store, store.producer(transactional_id="tx") as producer:
        producer.begin()
        producer.send("t", b"aborted too")
        producer.flush()
        producer.abort()  # 9, its marker 10
    r = cli("mirror", src, dest, "t", *mode)  # nothing copied, and still past them
    assert r.exit_code == 0 and "mirrored 0 records" in r.stderr, r.stderr
    assert _checkpoints(dest)[-1] == 11
    assert _dest_committed(dest, "t", 0) == [b"a", b"b", b"c"]


@pytest.mark.slow
def test_a_following_mirror_of_a_cluster_checkpoints_before_an_open_transaction_and_past_an_aborted_one(
        kafka_server, tmp_path):
    """librdkafka's end-of-partition now moves a following read's position past the offsets that hold
    no record for it (markers, aborted records), never past an open transaction (it ends at the last
    stable offset)."""
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    _create(b, "t", 1)
    plain = ck.Producer({"bootstrap.servers": b})
    plain.produce("t", b"a")
    plain.flush(10)
    producer = ck.Producer({"bootstrap.servers": b, "transactional.id": "tx"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("t", b"open")
    producer.flush(10)  # offset 1, open
    proc = _mirror(b, dest, "t", "--follow")
    try:
        assert _wait(lambda: _dest_committed(dest, "t", 0) == [b"a"], 20)
        time.sleep(1.5)  # idle polls, the end-of-partition seen
    finally:
        assert "Traceback" not in _stop(proc)
    assert _checkpoints(dest)[-1] == 1
    producer.commit_transaction(10)  # its marker: 2
    producer.begin_transaction()
    producer.produce("t", b"aborted")
    producer.flush(10)
    producer.abort_transaction(10)  # 3, its marker 4: the log ends at 5
    proc = _mirror(b, dest, "t", "--follow")
    try:
        assert _wait(lambda: _dest_committed(dest, "t", 0) == [b"a", b"open"], 20)
        assert _wait(lambda: _checkpoints(dest)[-1] == 5, 10)
    finally:
        assert "Traceback" not in _stop(proc)
    assert _dest_committed(dest, "t", 0) == [b"a", b"open"]


@pytest.mark.slow
def test_a_source_topic_deleted_under_a_following_mirror_is_said_by_the_reader(kafka_server, tmp_path):
    """The source check runs after a read error: it must not put its own trouble (a deleted topic's
    offsets cannot be listed) in place of the reader's one line."""
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    _create(b, "t", 1)
    plain = ck.Producer({"bootstrap.servers": b})
    plain.produce("t", b"a")
    plain.flush(10)
    proc = _mirror(b, dest, "t", "--follow", "--isolation-level", "read_uncommitted")
    try:
        assert _wait(lambda: _dest_committed(dest, "t", 0) == [b"a"], 20)
        _delete(b, "t")
        proc.wait(20)
    finally:
        err = _stop(proc)
    assert proc.returncode == 1, err
    assert err.strip().splitlines()[-1].startswith("klog: error: topic 't' was deleted while being read"), err


def test_the_idle_source_check_of_a_wide_mirror_takes_topics_in_turn_within_its_budget(tmp_path):
    """A cluster answers each topic's end offsets in a round trip: the idle check of a mirror of many
    topics must not hold up the copy (each pass is bounded, the next goes on where it stopped)."""
    from klog.client.mirror import Mirror

    asked = []
    with klog.open(str(tmp_path / "src")) as src, klog.open(str(tmp_path / "dest")) as dest:
        def slow_offsets(topic, timestamp=None, committed=False):  # noqa: ANN001, ANN202
            asked.append(topic)
            time.sleep(0.06)
            return {0: 0}

        src.offsets = slow_offsets
        mirror = Mirror(src, dest, [], mirror_id="m")
        names = ["a", "b", "c", "d", "e"]
        mirror._check_source(names, {}, budget_s=0.1)
        first = list(asked)
        assert 1 <= len(first) < len(names)
        mirror._check_source(names, {}, budget_s=10)
        assert asked[len(first):] == names[len(first):] + names[:len(first)]


@pytest.mark.slow
def test_read_uncommitted_from_a_cluster_copies_aborted_and_open_records(kafka_server, tmp_path):
    """librdkafka's own default is read_committed: klog asks its reader for what the flag says."""
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    _create(b, "t", 1)
    producer = transactions(b, "t", (b"aborted", "abort"), (b"open", "open"))
    for level, want in (("read_uncommitted", [b"aborted", b"open"]), ("read_committed", [])):
        proc = _mirror(b, dest + level, "t", "--isolation-level", level)
        err = proc.communicate(timeout=60)[1].decode()
        assert proc.returncode == 0, err
        with klog.open(dest + level, create=False) as store:
            assert [r.value for r in store.consumer("t", isolation_level="read_uncommitted")] == want
    producer.abort_transaction(10)

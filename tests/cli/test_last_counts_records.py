"""`klog consume TOPIC --last N` prints the N newest *records* of the topic, on the store and through
a cluster (`-b`, against `klog serve` on an ephemeral port): offsets that hold no record for the
reader (transaction markers, aborted records under read_committed, offsets compaction removed) never
make it print fewer. Through the cluster it read the last N offsets of each partition, so it printed
fewer records than asked while more existed (a silent short read)."""

from __future__ import annotations

import time

import pytest

import klog
from tests.kafka_files import v2_batch, write_segment

T0 = int(time.time() * 1000) - 60_000  # recent: klog serve's retention (7 days) leaves the records be
TIMEOUT_S = 20


def confluent_producer(bootstrap: str, **conf: object):  # noqa: ANN201 - confluent_kafka.Producer
    ck = pytest.importorskip("confluent_kafka")
    return ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 15_000, **conf})


def transactions(bootstrap: str, topic: str, values: list[bytes], *, commit: bool = True, start_ts: int = T0,
                 per_transaction: int = 1) -> None:
    """`values` written to alternate partitions by an independent client (librdkafka), `per_transaction`
    records a transaction (each ends with a COMMIT or ABORT marker in every partition it wrote)."""
    producer = confluent_producer(bootstrap, **{"transactional.id": f"tx-{topic}-{start_ts}"})
    producer.init_transactions(TIMEOUT_S)
    for first in range(0, len(values), per_transaction):
        producer.begin_transaction()
        for i, value in enumerate(values[first:first + per_transaction], first):
            producer.produce(topic, value, partition=i % 2, timestamp=start_ts + i)
        assert producer.flush(TIMEOUT_S) == 0  # written before the end (an abort drops what is not sent yet)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)


def last(klog_proc, bootstrap: str | None, topic: str, *args: str) -> list[str]:
    """What `klog consume TOPIC --last ...` prints, one value a line (through the cluster with `bootstrap`)."""
    r = klog_proc("consume", topic, "--last", *args, *(("-b", bootstrap) if bootstrap else ()))
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().splitlines()


@pytest.fixture
def both_ways(kafka_server, klog_proc):
    """`--last` of a topic on the store and through `klog serve`: the lines each prints, asserted equal."""

    def run(topic: str, *args: str) -> list[str]:
        remote = last(klog_proc, kafka_server.bootstrap, topic, *args)
        assert remote == last(klog_proc, None, topic, *args), args
        return remote

    return run


@pytest.mark.slow
def test_committed_transactions_leave_markers_that_are_not_records(kafka_server, both_ways, data_dir):
    """One record a transaction: every other offset of each partition is a COMMIT marker."""
    with klog.open(data_dir) as s:
        s.create_topic("tx", 2)
    values = [b"c%d" % i for i in range(10)]
    transactions(kafka_server.bootstrap, "tx", values)
    assert both_ways("tx", "4") == ["c6", "c7", "c8", "c9"]
    assert both_ways("tx", "1") == ["c9"]
    assert both_ways("tx", "4", "-X", "isolation.level=read_committed") == ["c6", "c7", "c8", "c9"]
    assert both_ways("tx", "10") == [v.decode() for v in values]
    assert both_ways("tx", "50") == [v.decode() for v in values]  # all there are: not an error
    # with the other options --last combines with
    assert both_ways("tx", "4", "-n", "2") == ["c6", "c7"]  # the first 2 of the 4 newest
    assert both_ways("tx", "3", "-p", "1") == ["c5", "c7", "c9"]
    assert both_ways("tx", "3", "--until", str(T0 + 8)) == ["c5", "c6", "c7"]
    assert both_ways("tx", "2", "--grep", "c[0-4]") == ["c3", "c4"]


@pytest.mark.slow
def test_an_aborted_transaction_is_no_records_under_read_committed(kafka_server, both_ways, data_dir):
    """Committed records, then an aborted transaction of 6 at the end of both partitions: read_committed
    skips them (the N newest committed records); read_uncommitted shows them, as Kafka's clients do."""
    with klog.open(data_dir) as s:
        s.create_topic("ab", 2)
    transactions(kafka_server.bootstrap, "ab", [b"ok%d" % i for i in range(6)], per_transaction=2)
    transactions(kafka_server.bootstrap, "ab", [b"no%d" % i for i in range(6)], commit=False, start_ts=T0 + 100,
                 per_transaction=6)
    committed = ["-X", "isolation.level=read_committed"]
    assert both_ways("ab", "3", *committed) == ["ok3", "ok4", "ok5"]
    assert both_ways("ab", "6", *committed) == [f"ok{i}" for i in range(6)]
    assert both_ways("ab", "2", *committed, "-p", "0") == ["ok2", "ok4"]
    assert both_ways("ab", "3") == ["no3", "no4", "no5"]  # read_uncommitted: aborted records are records


@pytest.mark.slow
def test_a_compacted_topic_has_offsets_without_records(kafka_server, both_ways, data_dir, cli):
    """klog's cleaner: the records of a key written 10 times leave 9 offsets without records (in
    emptied batches) just before the newest records."""
    with klog.open(data_dir) as s:
        s.create_topic("cmp", 1, configs={"cleanup.policy": "compact", "segment.bytes": "200",
                                          "min.cleanable.dirty.ratio": "0.01"})
        with s.producer() as p:
            for i, key in enumerate([b"x%d" % i for i in range(10)] + [b"y"] * 10 + [b"z"]):
                p.send("cmp", b"v%d" % i, key=key, partition=0, timestamp=T0 + i)
                p.flush()  # a batch each: segments roll, and only the active one is never cleaned
    assert "9 records compacted away" in cli("topics", "compact", "cmp").stderr
    assert both_ways("cmp", "3") == ["v9", "v19", "v20"]
    assert both_ways("cmp", "5") == ["v7", "v8", "v9", "v19", "v20"]


@pytest.mark.slow
def test_a_window_wholly_inside_a_kafka_compaction_gap_reads_on(kafka_server, both_ways, cli, tmp_path):
    """Kafka's cleaner drops the batches it emptied: offsets 10..29 hold no batch at all. Reading back
    from the end, a window that lies wholly in that gap holds nothing (it is no damage: on the store
    `--last 4` said "offsets from 20 are missing", through the cluster "a batch at offset 20 is over
    1073741824 bytes"), and the records before it are found."""
    folder = str(tmp_path / "k" / "gap-0")
    write_segment(folder, 0, [v2_batch(i, [(b"k%d" % i, b"v%d" % i, T0 + i)]) for i in range(10)]
                  + [v2_batch(30, [(b"a", b"v30", T0 + 30)])])
    write_segment(folder, 31, [v2_batch(31, [(b"b", b"v31", T0 + 31)])])
    assert cli("dirs", "import", folder).exit_code == 0
    assert both_ways("gap", "4") == ["v8", "v9", "v30", "v31"]  # windows 28..31, 20..27 (the gap), 4..19
    assert both_ways("gap", "4", "-X", "isolation.level=read_committed") == ["v8", "v9", "v30", "v31"]
    assert both_ways("gap", "20") == [f"v{i}" for i in (*range(10), 30, 31)]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_last_then_follow_through_the_cluster_goes_on_after_the_markers(kafka_server, data_dir, isolation):
    """--last N -f -b: the N newest records, then what comes after (nothing twice, nothing lost),
    through klog's Fetch reader and librdkafka's."""
    import subprocess
    import sys

    from tests.cli.test_ux import read_until
    from tests.klog_processes import klog_env

    with klog.open(data_dir) as s:
        s.create_topic("fo", 2)
    transactions(kafka_server.bootstrap, "fo", [b"old%d" % i for i in range(6)])
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "fo", "--last", "3", "-f", "-b",
                             kafka_server.bootstrap, "-X", f"isolation.level={isolation}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=klog_env(data_dir))
    try:
        assert read_until(proc.stdout, b"old5\n") == b"old3\nold4\nold5\n"
        transactions(kafka_server.bootstrap, "fo", [b"new0", b"new1"], start_ts=T0 + 100)
        got = read_until(proc.stdout, b"\n")  # one line or both (the two partitions' in either order)
        if got.count(b"\n") < 2:
            got += read_until(proc.stdout, b"\n")
        assert sorted(got.splitlines()) == [b"new0", b"new1"]
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_the_library_call_counts_records_through_both_cluster_readers(kafka_server, data_dir):
    """klog.newest_records over a RemoteStore: klog's Fetch reader (read_uncommitted) and librdkafka's
    (read_committed) give the local store's records."""
    from klog.client.newest import newest_records
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget

    with klog.open(data_dir) as s:
        s.create_topic("lib", 2)
    transactions(kafka_server.bootstrap, "lib", [b"r%d" % i for i in range(8)])
    want = [b"r5", b"r6", b"r7"]
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store:
        for level in ("read_uncommitted", "read_committed"):
            newest, rest = newest_records(store, ["lib"], 3, isolation_level=level)
            assert ([r.value for r in newest], rest) == (want, None), level

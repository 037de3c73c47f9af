"""`klog produce --transactional-id` and `klog mirror --exactly-once` through a cluster.

Goal: through `--bootstrap-server` the whole input of `klog produce --transactional-id` is one
transaction (all of it, or after a SIGKILL mid-way none of it, for a read_committed reader),
`--transaction-records N` commits every N records, and `klog mirror --exactly-once` to a cluster
commits records and checkpoints together. Method: the CLI as real processes against an
in-process `klog serve`; the reader is confluent-kafka's read_committed consumer, not ours.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import klog
from tests.cli.test_cli import assert_one_line_error
from tests.conftest import REPO
from tests.server.test_serve_transactions import _read_all

pytest.importorskip("confluent_kafka")


def _hw(data_dir: str, topic: str, partitions: int) -> int:
    with klog.open(data_dir) as s:
        return sum(s.partition(topic, p).high_watermark() for p in range(partitions))


@pytest.mark.slow  # three CLI processes through librdkafka, read_committed reads: ~5 s
def test_produce_through_a_cluster_is_one_transaction(kafka_server, klog_proc, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("t", 3)
        s.create_topic("n", 1)
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(30))
    r = klog_proc("produce", "t", "-K", ":", "--transactional-id", "cli-1", "-b", kafka_server.bootstrap,
                  input=lines)
    assert r.returncode == 0, r.stderr
    got = _read_all(kafka_server.bootstrap, "t", 3, "read_committed", expect=30)
    assert sorted(got) == sorted(b"v%d" % i for i in range(30))
    r = klog_proc("produce", "n", "--transactional-id", "cli-2", "--transaction-records", "3",
                  "-b", kafka_server.bootstrap, input=b"".join(b"%d\n" % i for i in range(10)))
    assert r.returncode == 0, r.stderr
    assert _read_all(kafka_server.bootstrap, "n", 1, "read_committed", expect=10) == [b"%d" % i for i in range(10)]
    assert _hw(data_dir, "n", 1) == 10 + 4  # 10 records and 4 COMMIT markers: transactions of 3, 3, 3, 1


def test_refusals_through_a_cluster(kafka_server, cli):
    r = cli("produce", "t", "--transactional-id", "x", "--acks", "1", "-b", kafka_server.bootstrap, input=b"a\n")
    assert_one_line_error(r, 2, "acks=all")
    r = cli("produce", "t", "--transactional-id", "x", "-X", "transaction.timeout.ms=99999999",
            "-b", kafka_server.bootstrap, input=b"a\n")  # above the store's transaction.max.timeout.ms
    assert_one_line_error(r, 2, "transactional id 'x'", "transaction.timeout.ms")


@pytest.mark.slow  # a producer killed mid-input, a second run, read_committed reads: ~3 s
def test_killed_produce_through_a_cluster_leaves_none_then_a_rerun_all(kafka_server, data_dir, klog_proc):
    with klog.open(data_dir) as s:
        s.create_topic("k", 2)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "klog", "produce", "k", "--transactional-id", "killed", "-b", kafka_server.bootstrap]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"".join(b"first-%d\n" % i for i in range(5000)))  # the input never ends: killed mid-way
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while _hw(data_dir, "k", 2) < 100 and time.monotonic() < deadline:  # some of it in the log, uncommitted
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert _hw(data_dir, "k", 2) >= 100
    # the open transaction holds read_committed readers before its first record: nothing of it is seen
    assert _read_all(kafka_server.bootstrap, "k", 2, "read_committed", limit_s=3) == []
    # the next producer of the id aborts what the killed one left; its own input arrives whole
    r = klog_proc("produce", "k", "--transactional-id", "killed", "-b", kafka_server.bootstrap,
                  input=b"".join(b"second-%d\n" % i for i in range(500)))
    assert r.returncode == 0, r.stderr
    got = _read_all(kafka_server.bootstrap, "k", 2, "read_committed", expect=500)
    assert sorted(got) == sorted(b"second-%d" % i for i in range(500))


@pytest.mark.slow  # two mirrors (one killed) through librdkafka's transactional producer: ~4 s
def test_mirror_exactly_once_to_a_cluster(kafka_server, tmp_path, data_dir, klog_proc):
    src = str(tmp_path / "src")
    total = 20_000
    with klog.open(src) as s:
        s.create_topic("events", 2)
        with s.producer() as p:
            p.send_keyed("events", [(b"k%d" % (i % 7), b"v%d" % i) for i in range(total)])
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "klog", "mirror", src, kafka_server.bootstrap, "events", "--exactly-once"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # killed once some of the copy is in DEST
            with klog.open(data_dir) as s:
                if s.has_topic("events") and sum(s.partition("events", p).high_watermark() for p in range(2)) > 2000:
                    break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    r = klog_proc("mirror", src, kafka_server.bootstrap, "events", "--exactly-once", timeout=120)
    assert r.returncode == 0, r.stderr
    got = _read_all(kafka_server.bootstrap, "events", 2, "read_committed", expect=total, limit_s=60)
    assert len(got) == total and set(got) == {b"v%d" % i for i in range(total)}


def test_consume_json_txn_fields_locally_and_through_a_cluster(kafka_server, cli, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("x", 1)
        with s.producer(transactional_id="fields") as p:
            with p.transaction():
                p.send_values("x", [b"c1", b"c2"])
            p.begin()
            p.send("x", b"aborted")
            p.flush()
            p.abort()
        with s.producer() as plain:
            plain.send("x", b"plain")
    r = cli("consume", "x", "--json", "--txn-fields")
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(line) for line in r.out.splitlines()]
    shown = [(d["offset"], d.get("value"), d["transactional"], d["control"], d.get("end_txn_marker")) for d in lines]
    assert shown == [(0, "c1", True, False, None), (1, "c2", True, False, None), (2, None, True, True, "COMMIT"),
                     (3, "aborted", True, False, None), (4, None, True, True, "ABORT"),
                     (5, "plain", False, False, None)]
    # the names and values `klog dump --json` gives the batches
    batches = [json.loads(line) for line in cli("dump", "x-0", "--json", "--batches").out.splitlines()]
    dumped = {b["base_offset"]: b for b in batches if b["type"] == "batch"}
    for d in lines:
        batch = max((b for off, b in dumped.items() if off <= d["offset"]), key=lambda b: b["base_offset"])
        assert (d["producer_id"], d["producer_epoch"], d["transactional"], d["control"]) == (
            batch["producer_id"], batch["producer_epoch"], batch["transactional"], batch["control"])
    assert lines[0]["producer_id"] >= 0 and lines[5]["producer_id"] == -1
    committed = cli("consume", "x", "--json", "--txn-fields", "-X", "isolation.level=read_committed")
    assert [json.loads(line).get("value") for line in committed.out.splitlines()] == ["c1", "c2", None, None, "plain"]
    # through a cluster klog's own Fetch reader decodes the same batches: the same lines
    remote = cli("consume", "x", "--json", "--txn-fields", "-b", kafka_server.bootstrap)
    assert remote.exit_code == 0, remote.stderr
    assert remote.out == r.out
    # librdkafka's consumer (read_committed through a cluster) does not give batch headers
    r = cli("consume", "x", "--json", "--txn-fields", "-b", kafka_server.bootstrap,
            "-X", "isolation.level=read_committed")
    assert_one_line_error(r, 2, "librdkafka", "read_uncommitted")
    assert_one_line_error(cli("consume", "x", "--txn-fields"), 2, "--json")
    assert_one_line_error(cli("consume", "x", "--json", "--txn-fields", "--grep", "c"), 2, "--grep")

"""`klog produce --transactional-id` and `klog transactions list|describe|abort`.

Goal: a transactional `klog produce` is all-or-nothing for read_committed readers, also when it is
killed mid-way (the next producer with the id, or `klog transactions abort`, ends what it left);
`--transaction-records N` commits every N records; the transactions commands show and abort what a
producer left open. Method: real `klog` processes (pipes, SIGKILL) and in-process CLI runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import klog
from tests.conftest import REPO


def _committed(data_dir: str, topic: str) -> list[bytes]:
    with klog.open(data_dir) as store:
        return [r.value for r in store.consumer(topic, isolation_level="read_committed")]


def test_produce_whole_input_is_one_transaction(cli, data_dir):
    cli("topics", "create", "t", "--partitions", "3")
    r = cli("produce", "t", "--transactional-id", "load-1", input=b"a\nb\nc\nd\n")
    assert r.exit_code == 0, r.stderr
    assert sorted(_committed(data_dir, "t")) == [b"a", b"b", b"c", b"d"]
    r = cli("transactions", "list", "--json")
    (doc,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert doc["transactional_id"] == "load-1" and doc["state"] == "CompleteCommit"


def test_transaction_records_commits_every_n(cli, data_dir):
    cli("topics", "create", "n")
    r = cli("produce", "n", "--transactional-id", "load-n", "--transaction-records", "2", input=b"1\n2\n3\n4\n5\n")
    assert r.exit_code == 0, r.stderr
    assert _committed(data_dir, "n") == [b"1", b"2", b"3", b"4", b"5"]
    with klog.open(data_dir) as store:
        markers = [b for b in store.partition("n", 0).read(0) if b.header.is_control]
    assert len(markers) == 3  # 1-2, 3-4, 5
    r = cli("produce", "n", "--transaction-records", "2", input=b"x\n")
    assert r.exit_code == 2 and "--transaction-records needs --transactional-id" in r.stderr


def test_killed_produce_leaves_nothing_visible_and_abort_ends_it(data_dir, cli):
    cli("topics", "create", "k", "--partitions", "2")
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "produce", "k", "--transactional-id", "killed",
                             "--batch-size", "100"], stdin=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(b"".join(b"line-%d\n" % i for i in range(5000)))
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until some of the input is in the log (uncommitted)
        with klog.open(data_dir) as store:
            if sum(store.partition("k", p).high_watermark() for p in range(2)) > 100:
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with klog.open(data_dir) as store:
        assert sum(store.partition("k", p).high_watermark() for p in range(2)) > 100  # written, not committed
    assert _committed(data_dir, "k") == []
    r = cli("transactions", "describe", "killed", "--json")
    assert json.loads(r.stdout)["state"] == "Ongoing"
    r = cli("transactions", "abort", "killed")
    assert r.exit_code == 0 and "transaction aborted" in r.stderr
    assert json.loads(cli("transactions", "describe", "killed", "--json").stdout)["state"] == "CompleteAbort"
    with klog.open(data_dir) as store:
        from klog.store.txn import StableView

        for p in range(2):
            part = store.partition("k", p)
            hw = part.high_watermark()
            assert StableView(part.leader).refresh(hw) == hw  # nothing holds read_committed readers now
    r = cli("produce", "k", "--transactional-id", "killed", input=b"again\n")
    assert r.exit_code == 0, r.stderr
    assert _committed(data_dir, "k") == [b"again"]
    assert cli("transactions", "describe", "nobody").exit_code == 2

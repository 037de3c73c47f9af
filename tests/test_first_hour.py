"""A newcomer's first hour with klog (issue 25): what a kcat user types works, and says the truth."""

from __future__ import annotations

import klog


def records(data_dir, topic):
    with klog.open(data_dir) as s:
        return list(s.consumer(topic))


def test_raw_input_keeps_the_key(cli, data_dir):
    r = cli("produce", "t", "--input", "raw", "-k", "mykey", "-H", "h=1", input=b"hello")
    assert r.exit_code == 0, r
    [rec] = records(data_dir, "t")
    assert (rec.key, rec.value, rec.headers) == (b"mykey", b"hello", [("h", b"1")])


def test_produce_to_a_cluster_says_the_cluster_created_the_topic(kafka_server, klog_proc):
    r = klog_proc("produce", "fresh", "-b", kafka_server.bootstrap, input=b"x\n")
    assert r.returncode == 0, r.stderr
    line = r.stderr.decode().strip()
    assert "created by the cluster" in line and "store's defaults" not in line, line

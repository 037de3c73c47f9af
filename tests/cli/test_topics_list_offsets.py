"""`klog topics list` shows, per topic, the offsets its partitions span (high watermark minus log
start, summed), and calls that OFFSETS (`"offsets"` in --json). It called it RECORDS (`"records"`),
a count it is not: a transaction's marker takes an offset and holds no record a consumer gets, a
compaction leaves offsets that hold nothing, and so does damage `verify --repair
--discard-damaged` moved aside. Counting the records would walk every batch of every partition,
a cost that grows with the store; the offsets cost one look at each partition's state, and are
what rpk (`topic describe -p`: LOG-START-OFFSET, HIGH-WATERMARK) and Kafka's own tools
(GetOffsetShell) show."""

from __future__ import annotations

import json

import pytest

from klog.broker import lifecycle


def _listed(cli) -> dict:  # noqa: ANN001
    r = cli("topics", "list", "--json")
    assert r.exit_code == 0, r.stderr
    return {d["topic"]: d for d in map(json.loads, r.stdout.splitlines())}


@pytest.mark.slow
def test_topics_list_names_the_offsets_it_counts_not_records(cli, store):
    with store.producer(transactional_id="tx") as producer, producer.transaction():
        producer.send("tx", b"one", partition=0)  # offset 0, its COMMIT marker 1
    store.create_topic("kept", configs={"cleanup.policy": "compact", "segment.bytes": "200"})
    with store.producer() as producer:
        for i in range(12):
            producer.send("kept", b"v%d" % i, key=b"same", partition=0)
            producer.flush()
    lifecycle.compact(store, "kept")
    assert sum(1 for _ in store.consumer("kept")) < 12  # compaction left offsets that hold nothing
    listed = _listed(cli)
    assert listed["tx"] == {"topic": "tx", "partitions": 1, "replication_factor": 1, "offsets": 2,
                            "size_bytes": listed["tx"]["size_bytes"]}
    assert listed["kept"]["offsets"] == 12 and "records" not in listed["kept"]
    table = cli("topics", "list").out.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITIONS", "RF", "OFFSETS", "SIZE"]
    assert table[1].split()[:4] == ["kept", "1", "1", "12"] and table[2].split()[:4] == ["tx", "1", "1", "2"]

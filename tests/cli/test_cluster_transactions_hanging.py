"""`klog transactions find-hanging -b` and `abort --topic --partition --start-offset -b` against
`klog serve`, made of the requests kafka-transactions.sh sends (DescribeProducers, ListTransactions
filtered by producer id, DescribeTransactions, WriteTxnMarkers).

Goal: through a cluster the hanging transaction is found and ended as on the store itself, and a
transaction its coordinator still runs is refused. Method: `klog serve` in this process, a
confluent-kafka transactional producer left open, its transactional id then forgotten by the
coordinator (as after transactional.id.expiration.ms); confluent-kafka's read_committed reader.
"""

from __future__ import annotations

import json

import pytest

import klog
from klog.meta.transactions import TransactionsMeta
from tests.cli.test_cli import assert_one_line_error
from tests.server.open_transactions import open_transaction
from tests.server.test_serve_transactions import _read_all

pytest.importorskip("confluent_kafka")


@pytest.mark.slow  # a transactional producer, CLI calls through -b, two read_committed reads: ~3 s
def test_find_hanging_and_abort_by_offset_through_a_cluster(kafka_server, cli, data_dir):
    b = kafka_server.bootstrap
    with open_transaction(b, data_dir, b"young-1", **{"transaction.timeout.ms": 60_000}) as old:
        # still Ongoing at its coordinator: not hanging, and not aborted by offset
        r = cli("transactions", "find-hanging", "-b", b, "--json", "--max-transaction-timeout", "0")
        assert (r.exit_code, r.out) == (0, ""), r
        assert_one_line_error(cli("transactions", "abort", "-b", b, "--topic", "h", "--partition", "0",
                                  "--start-offset", "0"), 1, "is still Ongoing at the coordinator",
                              "transactional id 'stuck'")
        with klog.open(data_dir) as s:
            pid = TransactionsMeta(s.meta).get("stuck").producer_id
            TransactionsMeta(s.meta).apply("stuck", lambda meta, txn: None)  # the id forgotten
        r = cli("transactions", "find-hanging", "-b", b, "--json")
        assert r.exit_code == 0, r
        [doc] = [json.loads(line) for line in r.out.splitlines()]  # (h-1's is younger than 15 minutes)
        assert {k: doc[k] for k in ("topic", "partition", "producer_id", "producer_epoch", "start_offset",
                                    "last_timestamp")} == {
            "topic": "h", "partition": 0, "producer_id": pid, "producer_epoch": 0, "start_offset": 0,
            "last_timestamp": old}
        local = [json.loads(line) for line in cli("transactions", "find-hanging", "--json").out.splitlines()]
        assert [{**d, "age_ms": 0} for d in local] == [{**doc, "age_ms": 0}]
        r = cli("transactions", "find-hanging", "-b", b, "--json", "--max-transaction-timeout", "0")
        assert sorted(json.loads(line)["partition"] for line in r.out.splitlines()) == [0, 1]
        assert_one_line_error(cli("transactions", "abort", "-b", b, "--topic", "h", "--partition", "0",
                                  "--start-offset", "1"), 2, "h-0: no open transaction starts at offset 1")
        assert _read_all(b, "h", 2, "read_committed", limit_s=3) == []
        r = cli("transactions", "abort", "-b", b, "--topic", "h", "--partition", "0", "--start-offset", "0")
        assert r.exit_code == 0 and f"transaction of producer id {pid} (epoch 0) from offset 0 aborted" in r.stderr, r
        assert _read_all(b, "h", 2, "read_committed", expect=1) == [b"after"]
        r = cli("transactions", "find-hanging", "-b", b, "--json", "--max-transaction-timeout", "0")
        assert [json.loads(line)["partition"] for line in r.out.splitlines()] == [1]


def test_find_hanging_asks_describe_producers_500_partitions_at_a_time(monkeypatch):
    """1,200 partitions at one leader: three DescribeProducers requests (kafka-transactions.sh's
    MAX_BATCH_SIZE), not one naming them all; each partition asked once."""
    from types import SimpleNamespace

    from klog.client.remote import txn_admin

    asked: list[int] = []

    class Conn:
        def call(self, request, response_type):  # noqa: ANN001, ANN202
            names = [(str(t.name), [int(p) for p in t.partition_indexes]) for t in request.topics]
            asked.append(sum(len(ps) for _, ps in names))
            return SimpleNamespace(topics=[SimpleNamespace(name=n, partitions=[SimpleNamespace(
                partition_index=p, error_code=0, active_producers=[]) for p in ps]) for n, ps in names])

    tps = [(f"t{i % 3}", i) for i in range(1200)]
    assert txn_admin._producers_at(Conn(), tps) == []
    assert asked == [500, 500, 200]

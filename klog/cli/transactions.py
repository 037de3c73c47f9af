"""`klog transactions list|describe|find-hanging|abort` (kafka-transactions.sh's verbs): the store's
transactional ids, their state, the transactions no coordinator will end (KIP-664), and a way to end
a transaction left hanging."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store
from klog.errors import UsageError

app = typer.Typer(help="List and describe transactional producers' transactions, find hanging ones and abort them.",
                  no_args_is_help=True)


def _doc(meta) -> dict:  # noqa: ANN001 - TxnMetadata
    return {"transactional_id": meta.transactional_id, "state": meta.state, "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch, "timeout_ms": meta.timeout_ms, "start_ms": meta.start_ms,
            "partitions": [f"{t}-{p}" for t, p in meta.tps()], "groups": list(meta.groups)}


@app.command("list")
def list_(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every transactional id: state (Empty, Ongoing, PrepareCommit, CompleteCommit, ...), producer id and
    epoch, and the partitions of its ongoing transaction."""
    with open_store(data_dir, create=False, read_only=True) as store:
        metas = store.list_transactions()
    if as_json:
        for meta in metas:
            print(json.dumps(_doc(meta)))
        return
    from klog.cli.tables import print_table

    print_table(["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "PARTITIONS"],
                [[m.transactional_id, m.state, m.producer_id, m.producer_epoch, m.timeout_ms,
                  ",".join(f"{t}-{p}" for t, p in m.tps()) or "-"] for m in metas])


@app.command()
def describe(transactional_id: str, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """One transactional id: its state, producer, timeout, when its transaction began, its partitions and groups."""
    with open_store(data_dir, create=False, read_only=True) as store:
        meta = store.describe_transaction(transactional_id)
    doc = _doc(meta)
    if as_json:
        print(json.dumps(doc))
        return
    for name, value in doc.items():
        print(f"{name:18s} {value if value not in ([], -1) else '-'}")


@app.command("find-hanging")
def find_hanging(
        topic: Annotated[str | None, typer.Option("--topic", help="Search this topic only.")] = None,
        partition: Annotated[int | None, typer.Option("--partition", help="Search this partition of --topic only.")
                             ] = None,
        max_transaction_timeout: Annotated[int | None, typer.Option(
            "--max-transaction-timeout", min=0, help="Minutes: only transactions whose producer last wrote longer "
            "ago (default: the store's transaction.max.timeout.ms; 15 through a cluster, as kafka-transactions.sh)."
        )] = None,
        data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Open transactions no coordinator will end (KIP-664): per partition, a producer's transaction open
    for longer than the longest transaction timeout whose transactional id is gone or whose coordinator's
    transaction does not name the partition. Each holds read_committed readers at its start offset; end it
    with `klog transactions abort --topic T --partition P --start-offset O`."""
    if partition is not None and topic is None:
        raise UsageError("--partition needs --topic")
    limit = None if max_transaction_timeout is None else max_transaction_timeout * 60_000
    with open_store(data_dir, create=False, read_only=True) as store:
        found = store.find_hanging_transactions(topic, partition, limit)
    now = int(time.time() * 1000)
    if as_json:
        for txn in found:
            print(json.dumps(txn.doc(now)))
        return
    from klog.cli.tables import print_table

    print_table(["TOPIC", "PARTITION", "PRODUCER-ID", "EPOCH", "COORDINATOR-EPOCH", "START-OFFSET",
                 "LAST-TIMESTAMP", "AGE-MIN"],
                [[t.topic, t.partition, t.producer_id, t.producer_epoch, t.coordinator_epoch, t.start_offset,
                  t.last_timestamp, t.age_ms(now) // 60_000] for t in found])


@app.command()
def abort(
        transactional_id: Annotated[str | None, typer.Argument(
            help="The transactional id whose ongoing transaction to abort.")] = None,
        topic: Annotated[str | None, typer.Option("--topic", help="With --partition and --start-offset: "
                                                  "the partition of a hanging transaction.")] = None,
        partition: Annotated[int | None, typer.Option("--partition", help="The hanging transaction's partition.")
                             ] = None,
        start_offset: Annotated[int | None, typer.Option("--start-offset", min=0,
                                                         help="The hanging transaction's first offset there.")] = None,
        data_dir: DataDirOpt = None) -> None:
    """Abort the ongoing transaction of TRANSACTIONAL_ID (a hanging one holds every read_committed reader at
    its first record): ABORT markers go to its partitions and its producer is fenced. Through a cluster (-b)
    the same, done by the id's coordinator (InitProducerId, as a new incarnation of the producer: Write on the
    TransactionalId needed).

    With --topic, --partition and --start-offset instead (kafka-transactions.sh abort): an ABORT marker for
    the producer whose open transaction starts at that offset in that partition, as `find-hanging` lists
    them; refused while its coordinator still has the transaction ongoing there."""
    by_offset = (topic, partition, start_offset)
    if transactional_id is not None and any(v is not None for v in by_offset):
        raise UsageError("give TRANSACTIONAL_ID or --topic, --partition and --start-offset, not both")
    if transactional_id is None:
        if any(v is None for v in by_offset):
            raise UsageError("give TRANSACTIONAL_ID, or --topic, --partition and --start-offset together")
        assert topic is not None and partition is not None and start_offset is not None
        with open_store(data_dir, create=False) as store:
            txn = store.abort_open_transaction(topic, partition, start_offset)
        print(f"{topic}-{partition}: transaction of producer id {txn.producer_id} (epoch {txn.producer_epoch}) "
              f"from offset {start_offset} aborted (ABORT marker written)", file=sys.stderr)
        return
    with open_store(data_dir, create=False) as store:
        aborted = store.abort_transaction(transactional_id)
        done = "transaction aborted, producer fenced"  # (through a cluster too: by its coordinator)
    print(f"transactional id '{transactional_id}': " + (done if aborted else "no ongoing transaction"), file=sys.stderr)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="transactions")

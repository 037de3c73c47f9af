"""`klog transactions list|describe|abort` (kafka-transactions.sh's verbs): the store's transactional
ids, their state, and a way to end a transaction left hanging."""

from __future__ import annotations

import json
import sys

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store

app = typer.Typer(help="List and describe transactional producers' transactions, and abort a hanging one.",
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


@app.command()
def abort(transactional_id: str, data_dir: DataDirOpt = None) -> None:
    """Abort the ongoing transaction of TRANSACTIONAL_ID (a hanging one holds every read_committed reader at
    its first record): ABORT markers go to its partitions and its producer is fenced. Through a cluster (-b),
    as kafka-transactions.sh: the markers go to each partition's leader (ClusterAction needed there)."""
    with open_store(data_dir, create=False) as store:
        aborted = store.abort_transaction(transactional_id)
        # through a cluster, as kafka-transactions.sh: markers only (the coordinator ends its side)
        done = ("transaction aborted, producer fenced" if getattr(store, "is_local", True)
                else "transaction aborted (ABORT markers written)")
    print(f"transactional id '{transactional_id}': " + (done if aborted else "no ongoing transaction"), file=sys.stderr)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="transactions")

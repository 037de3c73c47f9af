"""A transaction document written by a newer klog (a field this one does not know) stays readable.

Goal: the coordinator's documents gain fields over time (`ended` did); a store a newer klog wrote
to must not make `transactions list`, serve's coordinator or verify fail with a TypeError. Method:
put a document with an extra field straight into the LMDB db, then read it every way the store
does (get, all, apply, pending_offsets, and `klog transactions list`).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict

import klog
from klog.meta import transactions as tx


def test_unknown_fields_are_left_out_by_every_loader(data_dir):
    with klog.open(data_dir) as store:
        meta = tx.TransactionsMeta(store.meta)
        doc = asdict(tx.TxnMetadata("app-1", 7, 0, 60_000, state=tx.ONGOING, partitions=[["t", 0]],
                                    groups=["g"], offsets={"g": {"t:0": [5, ""]}}))
        doc["a_field_from_a_newer_klog"] = {"x": 1}
        with store.meta.txn(write=True) as txn:
            store.meta.put_json(txn, meta.DB, "app-1", doc)
        assert meta.get("app-1").producer_id == 7
        assert [m.transactional_id for m in meta.all()] == ["app-1"]
        assert meta.pending_offsets("g") == {("t", 0)}
        from types import SimpleNamespace

        from klog.server.transactions import _describable_transactions

        ctx = SimpleNamespace(store=store, authorize=lambda *_: True)  # (serve's ListTransactions)
        assert [m.transactional_id for m in _describable_transactions(ctx)] == ["app-1"]
        saved = meta.apply("app-1", lambda m, _txn: m)
        assert saved.tps() == [("t", 0)]
    out = subprocess.run([sys.executable, "-m", "klog", "transactions", "list", "-d", data_dir],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "app-1" in out.stdout and "Traceback" not in out.stderr

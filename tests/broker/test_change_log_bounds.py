"""The group change log (klog/meta/change_log.py) stays bounded without a server: every writer
trims it, including the short-lived ones (`klog consume -g`, `klog groups reset-offsets`) that
make only a few commits each and exit."""

from __future__ import annotations

from klog.meta import change_log
from klog.meta.groups import GroupsMeta


def entries(store) -> int:
    with store.meta.txn() as txn:
        return txn.stat(store.meta.dbs[change_log.CHANGE_LOG_DB])["entries"]


def test_short_lived_committers_alone_keep_the_change_log_bounded(store, monkeypatch):
    monkeypatch.setattr(change_log, "CHANGE_LOG_MAX", 4)
    monkeypatch.setattr(change_log, "CHANGE_LOG_KEEP", 2)
    store.create_topic("t", partitions=1)
    meta = GroupsMeta(store.meta)
    for i in range(40):
        # each commit made by a process of its own: what a new process starts with
        monkeypatch.setattr(change_log, "_logged_txns", {})
        monkeypatch.setattr(change_log, "_counters", {})
        meta.store_offsets("g", {("t", 0): (i, "")})
    # (before the fix: 40 entries, one per process, never trimmed: a process checked the size
    # only at its 64th logging transaction)
    assert entries(store) <= change_log.CHANGE_LOG_MAX + 1

"""A log of the group keys each LMDB write transaction changed, so that `klog serve`'s
`__consumer_offsets` mirror (klog.broker.offsets_topic) writes what changed since its last pass
without reading every committed offset again.

Every put or delete in the `groups`, `members` and `offsets` tables (MetaDB.put_json/delete, so every
writer in every process: commits, `klog groups reset-offsets|delete`, expiry, `klog dirs import`)
adds an entry keyed by the transaction's LMDB id (and a counter within it), whose value names the
table and key. A reader asks for the entries after the transaction id it last read up to. The mirror
removes what it has applied; without a running server the writers keep the log at most
CHANGE_LOG_MAX entries by dropping the oldest, and the `PRUNED_KEY` entry records how far entries
were dropped: a reader that had not read that far reads everything again (as at start-up).
"""

from __future__ import annotations

import struct
from typing import Any

CHANGE_LOG_DB = "group_changes"
LOGGED_TABLES = {"groups": b"g", "members": b"m", "offsets": b"o"}
_TABLES = {v[0]: k for k, v in LOGGED_TABLES.items()}
_ENTRY = struct.Struct(">QI")  # transaction id, counter within it
PRUNED_KEY = b"\x00"  # sorts before every entry; its value: the last transaction id dropped (">Q")
CHANGE_LOG_MAX = 100_000
CHANGE_LOG_KEEP = 50_000  # what a writer that found the log full leaves of it
_PRUNE_CHECK_EVERY = 64  # how often (in its logging transactions, and at its first) a writer looks at the log size

_counters: dict[str, tuple[int, int]] = {}  # environment path -> (transaction id, entries it logged)
_logged_txns: dict[str, int] = {}  # environment path -> transactions this process logged changes in


def log_change(db: Any, txn: Any, table: str, key: str) -> None:
    """Record that `key` of `table` changed in the write transaction `txn` (MetaDB's hook). Write
    transactions are serialized across threads and processes, so the counter needs no lock."""
    handle = db.dbs.get(CHANGE_LOG_DB)
    if handle is None:
        return
    tid = txn.id()
    last_tid, n = _counters.get(db.path, (-1, 0))
    n = n + 1 if last_tid == tid else 0
    _counters[db.path] = (tid, n)
    txn.put(_ENTRY.pack(tid, n), LOGGED_TABLES[table] + key.encode(), db=handle)
    if n == 0:
        _logged_txns[db.path] = logged = _logged_txns.get(db.path, 0) + 1
        # a process's first too: `klog consume -g`, `klog groups reset-offsets` commit a few times and
        # exit, and without a server only they trim the log (txn.stat is ~1 us: the check is cheap)
        if (logged == 1 or logged % _PRUNE_CHECK_EVERY == 0) and txn.stat(handle)["entries"] > CHANGE_LOG_MAX:
            _drop_oldest(txn, handle, txn.stat(handle)["entries"] - CHANGE_LOG_KEEP)


def _drop_oldest(txn: Any, handle: Any, count: int) -> None:
    cursor = txn.cursor(db=handle)
    last = None
    if cursor.set_range(PRUNED_KEY + b"\x00"):  # the first entry
        while count > 0 and len(cursor.key()) == _ENTRY.size:
            last = _ENTRY.unpack(cursor.key())[0]
            if not cursor.delete():
                break
            count -= 1
    if last is not None:
        txn.put(PRUNED_KEY, struct.pack(">Q", last), db=handle)


class Changes:
    """The keys changed after a transaction id, as of `upto` (the reading transaction's snapshot).
    A plain class: MetaDB imports this module on every command's path, dataclasses costs ~8 ms."""

    __slots__ = ("upto", "complete", "keys")

    def __init__(self, upto: int, complete: bool, keys: dict[str, set[str]] | None = None) -> None:
        self.upto = upto
        self.complete = complete  # False: entries the reader had not read were dropped (read everything again)
        self.keys = keys if keys is not None else {}  # table -> changed keys


def read_changes(db: Any, txn: Any, after: int) -> Changes:
    """The entries of transactions after `after`, read in the read transaction `txn`."""
    handle = db.dbs.get(CHANGE_LOG_DB)
    out = Changes(txn.id(), True, {t: set() for t in LOGGED_TABLES})
    if handle is None:
        return out
    pruned = txn.get(PRUNED_KEY, db=handle)
    if pruned is not None and struct.unpack(">Q", pruned)[0] > after:
        out.complete = False
        return out
    cursor = txn.cursor(db=handle)
    if cursor.set_range(_ENTRY.pack(after + 1, 0)):
        for _, value in cursor:
            out.keys[_TABLES[value[0]]].add(value[1:].decode())
    return out


def drop_through(db: Any, txn: Any, upto: int) -> None:
    """Remove the entries of transactions up to `upto` (applied by the reader), in write transaction `txn`."""
    handle = db.dbs.get(CHANGE_LOG_DB)
    if handle is None:
        return
    cursor = txn.cursor(db=handle)
    last = None
    if cursor.set_range(PRUNED_KEY + b"\x00"):
        while len(cursor.key()) == _ENTRY.size and (tid := _ENTRY.unpack(cursor.key())[0]) <= upto:
            last = tid
            if not cursor.delete():
                break
    if last is not None:
        txn.put(PRUNED_KEY, struct.pack(">Q", last), db=handle)

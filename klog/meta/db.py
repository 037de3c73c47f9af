"""The LMDB environment: one per data directory, safe across processes (LMDB's own locking)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from klog.errors import DataDirError

MAP_SIZE_BYTES = 1 << 32  # address space reserved, not disk used: LMDB files grow as needed
DB_NAMES = ("topics", "groups", "members", "offsets")


# LMDB allows one open environment per path per process: Stores in one process share it.
_OPEN: dict[str, tuple[lmdb.Environment, dict, int]] = {}


class MetaDB:
    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path)
        shared = _OPEN.get(self.path)
        if shared is None:
            try:
                env = lmdb.open(self.path, max_dbs=len(DB_NAMES) + 2, map_size=MAP_SIZE_BYTES, subdir=True,
                                lock=True, sync=True, metasync=True, max_readers=512)
            except lmdb.Error as e:
                raise DataDirError(f"cannot open metadata at {path}: {e}") from None
            dbs = {name: env.open_db(name.encode()) for name in DB_NAMES}
            shared = (env, dbs, 0)
        env, dbs, users = shared
        _OPEN[self.path] = (env, dbs, users + 1)
        self.env = env
        self.dbs = dbs
        self._closed = False

    @contextmanager
    def txn(self, write: bool = False) -> Iterator[lmdb.Transaction]:
        with self.env.begin(write=write) as txn:
            yield txn

    def get_raw(self, txn: lmdb.Transaction, db: str, key: str) -> bytes | None:
        return txn.get(key.encode(), db=self.dbs[db])

    def get_json(self, txn: lmdb.Transaction, db: str, key: str) -> Any:
        raw = txn.get(key.encode(), db=self.dbs[db])
        return None if raw is None else json.loads(raw)

    def put_json(self, txn: lmdb.Transaction, db: str, key: str, value: Any) -> None:
        txn.put(key.encode(), json.dumps(value, separators=(",", ":")).encode(), db=self.dbs[db])

    def delete(self, txn: lmdb.Transaction, db: str, key: str) -> bool:
        return txn.delete(key.encode(), db=self.dbs[db])

    def items(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for k, v in self.items_raw(txn, db, prefix):
            yield k, json.loads(v)

    def items_raw(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """(key, stored JSON bytes) in key order, for callers that cache what they parse."""
        cursor = txn.cursor(db=self.dbs[db])
        start = prefix.encode()
        if not cursor.set_range(start):
            return
        for k, v in cursor:
            if not k.startswith(start):
                break
            yield k.decode(), v

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        env, dbs, users = _OPEN[self.path]
        if users <= 1:
            del _OPEN[self.path]
            env.close()
        else:
            _OPEN[self.path] = (env, dbs, users - 1)

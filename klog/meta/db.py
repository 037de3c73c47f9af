"""The LMDB environment: one per data directory, safe across processes (LMDB's own locking)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from klog.errors import DataDirError

MAP_SIZE_BYTES = 1 << 32  # address space reserved, not disk used: LMDB files grow as needed
DB_NAMES = ("topics", "groups", "members", "offsets")


class MetaDB:
    def __init__(self, path: str) -> None:
        try:
            self.env = lmdb.open(path, max_dbs=len(DB_NAMES) + 2, map_size=MAP_SIZE_BYTES, subdir=True,
                                 lock=True, sync=True, metasync=True, max_readers=512)
        except lmdb.Error as e:
            raise DataDirError(f"cannot open metadata at {path}: {e}") from None
        self.dbs = {name: self.env.open_db(name.encode()) for name in DB_NAMES}

    @contextmanager
    def txn(self, write: bool = False) -> Iterator[lmdb.Transaction]:
        with self.env.begin(write=write) as txn:
            yield txn

    def get_json(self, txn: lmdb.Transaction, db: str, key: str) -> Any:
        raw = txn.get(key.encode(), db=self.dbs[db])
        return None if raw is None else json.loads(raw)

    def put_json(self, txn: lmdb.Transaction, db: str, key: str, value: Any) -> None:
        txn.put(key.encode(), json.dumps(value, separators=(",", ":")).encode(), db=self.dbs[db])

    def delete(self, txn: lmdb.Transaction, db: str, key: str) -> bool:
        return txn.delete(key.encode(), db=self.dbs[db])

    def items(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
        cursor = txn.cursor(db=self.dbs[db])
        start = prefix.encode()
        if not cursor.set_range(start):
            return
        for k, v in cursor:
            if not k.startswith(start):
                break
            yield k.decode(), json.loads(v)

    def close(self) -> None:
        self.env.close()
